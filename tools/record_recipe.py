"""The ``recipe`` fixture of ``tools/record_originals.py``: verl-agent's recipe terms (and
HGPO's, GraphGPO's) on the recipe-parity harness's random batches.

The originals run through the harness's own loaders and calls
(``benchmarks.parity_pipelines.VerlAgent`` with ``in_float64``, the comparisons' pairings
of ``benchmarks.recipe_parity`` and ``benchmarks.frontier_parity.HGPOReference`` and
``GraphReference``; imported by those module paths), always counted: verl's float32
names read as float64, as the harness counts them. Each record names the harness's term,
what this project's side computes (``kind`` and ``params``, read by
``tests/benchmarks/test_recipe_verl_agent_recorded.py``) and the original's output.

Batches (``make_rollout(seed, groups)`` of ``benchmarks.parity_pipelines``; each stored as a digest
of every array, which the test regenerates and checks):

- :data:`BATCHES`: 8 seeds of 6 groups (every group kind of the harness): the advantages
  of every estimator and normalization, verl-agent's GiGPO core functions one by one
  (``episode_norm_reward``, ``build_step_group``, ``step_norm_reward``, after its
  ``compute_step_discounted_returns``, reward manager and penalty), every advantage
  option with its verl setting, the single-row group, DAPO's overlong cost and the rows
  ``filter_group_data`` keeps, HGPO's and GraphGPO's defaults.
- :data:`DYNAMIC_SEEDS`: the dynamic-sampling loop with later rollouts of fresh seeds.
- :data:`SWEEP_BATCH`: every HGPO and GraphGPO setting of the harness's sweeps.
- :data:`LOSS_BATCH`: the actor losses (gigpo, dr_grpo, gspo, each loss option with its
  verl setting), GSPO's policy term and the entropy from logits, with verl's own
  advantages (float32, as the learner hands them over) as the per-token advantages.

Float arrays are stored as :func:`tools.originals.summarize` gives them; micro- and
mini-batch losses, kept rows and step-group partitions in full.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
from pathlib import Path
from typing import Any

import numpy as np

from tools.originals import checkout_commit, digest, summarize, versions

BATCHES = tuple((seed, 6) for seed in range(8))
"""``(seed, groups)`` of the batches of the cheap terms."""
DYNAMIC_SEEDS = (0, 1)
"""Batches (of :data:`BATCHES`) whose dynamic-sampling loop is recorded."""
SWEEP_BATCH = (0, 6)
LOSS_BATCH = (0, 2)
SIMILARITY = 0.95


def rollout_digest(rollout: Any) -> str:
    """A digest of every array of a harness batch (the inputs both sides are given)."""
    batch = rollout.batch
    arrays = [getattr(batch, name) for name in (
        "prompt_ids", "prompt_mask", "response_ids", "response_mask", "rewards", "env_rewards",
        "penalties", "invalid", "traj_ids", "group_ids", "step_index", "last_step",
        "success", "truncated", "anchor_ids")]
    texts = "\x00".join((*batch.anchors, *batch.next_anchors))
    return digest(*arrays, texts, rollout.log_probs, rollout.old_log_probs,
                  rollout.ref_log_probs, rollout.entropies, rollout.logits)


def _rows(tokens: Any, mask: np.ndarray) -> np.ndarray:
    """(N,) the value of each row of a (N, R) tensor that is that value on the row's
    response tokens and 0 elsewhere (checked: the tool stops otherwise)."""
    values = tokens.detach().double().numpy()
    rows = values[:, 0]
    if not np.array_equal(values, rows[:, None] * mask):
        raise SystemExit("an advantage tensor of verl's is not one value per row")
    return rows


def _partition(labels: Any) -> list[int]:
    """Labels renumbered by first appearance (two partitions are equal exactly when these
    lists are)."""
    seen: dict[Any, int] = {}
    return [seen.setdefault(label, len(seen)) for label in list(labels)]


def _gigpo_core(agent: Any, rollout: Any, normalize: str, similarity: float | None
                ) -> dict[str, Any]:
    """verl-agent's GiGPO functions one by one, on the batch its trainer builds
    (``VerlAgent.advantages``' preparation, counted in float64)."""
    import torch

    from benchmarks import parity_pipelines as parity

    settings = parity.VerlSettings()
    data = agent._data(rollout, settings, True)
    run = parity.in_float64
    gigpo = agent.core_gigpo
    with contextlib.redirect_stdout(io.StringIO()), parity.default_dtype(torch.float64):
        data.batch["step_rewards"] = run(gigpo.compute_step_discounted_returns)(
            batch=data, gamma=settings.gamma)
        data.batch["response_mask"] = agent.ray_trainer.compute_response_mask(data)
        data.batch["token_level_scores"] = run(type(agent.reward_manager).__call__)(
            agent.reward_manager, data)
        data, _ = run(agent.ray_trainer.apply_invalid_action_penalty)(
            data, invalid_action_penalty_coef=settings.invalid_action_penalty_coef)
        mask = data.batch["response_mask"]
        group = data.non_tensor_batch["uid"]
        episode = gigpo.episode_norm_reward(
            data.batch["token_level_scores"], mask, group, data.non_tensor_batch["traj_uid"],
            remove_std=normalize == "mean", compute_mean_std_cross_steps=True)
        step_groups = gigpo.build_step_group(data.non_tensor_batch["anchor_obs"], group,
                                             similarity is not None,
                                             SIMILARITY if similarity is None else similarity)
        step = gigpo.step_norm_reward(data.batch["step_rewards"], mask, step_groups,
                                      remove_std=normalize == "mean")
    mask = rollout.response_mask
    return {"episode": _rows(episode, mask), "step": _rows(step, mask),
            "step_groups": _partition(step_groups),
            "returns": data.batch["step_rewards"].double().numpy()}


class Records:
    """The records of one batch."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, term: str, kind: str, params: dict[str, Any], **theirs: Any) -> None:
        self.items.append({"term": term, "kind": kind, "params": params, "theirs": theirs})


def _cheap_terms(agent: Any, frontier_refs: Any, rollout: Any, seed: int, groups: int,
                 records: Records) -> None:
    from benchmarks import frontier_parity as frontier
    from benchmarks import recipe_parity as parity

    mask = rollout.response_mask
    for estimator in parity.ESTIMATORS:
        for normalize in parity.NORMALIZATIONS:
            theirs = agent.advantages(rollout, estimator, normalize, float64=True)
            rows = summarize(_rows(theirs["advantages"], mask))
            algos = [estimator]
            if estimator == "grpo":  # the estimator of dr_grpo and gspo
                algos += ["dr_grpo", "gspo"] if normalize == "mean" else ["gspo"]
            for algo in algos:
                records.add(f"{algo} advantages", "advantages",
                            {"algo": algo, "normalize": normalize, "changes": {}},
                            advantages=rows)
            if estimator == "gigpo":
                records.add("step returns R_t", "step_returns", {"normalize": normalize},
                            returns=summarize(theirs["step_rewards"].double().numpy()))
    for normalize in parity.NORMALIZATIONS:
        for similarity in (None, SIMILARITY):
            core = _gigpo_core(agent, rollout, normalize, similarity)
            label = "exact" if similarity is None else f"similarity {similarity:g}"
            records.add(f"core_gigpo ({label})", "gigpo_core",
                        {"normalize": normalize, "similarity": similarity},
                        episode=summarize(core["episode"]), step=summarize(core["step"]),
                        returns=summarize(core["returns"]), step_groups=core["step_groups"])
    for option in parity.OPTIONS:
        if option.affects != "advantages" or option.verl is None:
            continue
        for estimator in option.estimators:
            for normalize in parity.NORMALIZATIONS:
                theirs = agent.advantages(rollout, estimator, normalize, option.verl,
                                          float64=True)
                records.add(f"{option.name}: {estimator} advantages vs verl with "
                            f"{option.verl_name}", "advantages",
                            {"algo": estimator, "normalize": normalize,
                             "changes": option.changes},
                            advantages=summarize(_rows(theirs["advantages"], mask)))
    grown = parity.single_row_group(rollout)
    for estimator, normalize in parity.SINGLE_ROW_CASES:
        theirs = _rows(agent.advantages(grown, estimator, normalize, float64=True)["advantages"],
                       grown.response_mask)
        records.add(f"single-row group: {estimator} advantages", "single_row",
                    {"algo": estimator, "normalize": normalize},
                    single=float(theirs[-1]), others=summarize(theirs[:-1]))
    for buffer, factor in parity.OVERLONG:
        records.add("overlong penalty", "overlong", {"buffer": buffer, "factor": factor},
                    costs=summarize(agent.overlong(rollout, buffer, factor, float64=True)))
    for last_try in (False, True):
        kept = agent.kept_rows(rollout.batch, last_try, float64=True)
        records.add("dynamic sampling kept rows", "kept_rows", {"last_try": last_try},
                    trajectories=np.unique(rollout.batch.traj_ids[kept]).tolist())
    if seed in DYNAMIC_SEEDS:
        made = {0: rollout}

        def rollouts(index: int) -> Any:
            if index not in made:
                made[index] = parity.make_rollout(10_000 + 100 * seed + index, groups)
            return made[index]

        for max_rollouts in parity.DYNAMIC_MAX_ROLLOUTS:
            kept = parity.verl_dynamic_loop(
                functools.partial(agent.kept_rows, float64=True), rollouts, groups,
                max_rollouts)
            records.add("dynamic sampling rollouts", "dynamic", {"max_rollouts": max_rollouts},
                        rollouts=[{"seed": 10_000 + 100 * seed + index if index else None,
                                   "digest": rollout_digest(rollouts(index)),
                                   "trajectories": np.unique(
                                       rollouts(index).batch.traj_ids[rows]).tolist()}
                                  for index, rows in enumerate(kept)])
    for normalize in parity.NORMALIZATIONS:
        _frontier(frontier_refs, rollout, normalize, frontier.HGPO_DEFAULT,
                  frontier.GRAPH_DEFAULT, records, "defaults")


def _frontier(refs: Any, rollout: Any, normalize: str, hgpo_setting: Any, graph_setting: Any,
              records: Records, label: str) -> None:
    import dataclasses

    mask = rollout.response_mask
    if hgpo_setting is not None:
        theirs = refs.hgpo.advantages(rollout, normalize, hgpo_setting, float64=True)
        records.add(f"hgpo advantages ({label})", "hgpo",
                    {"normalize": normalize, "setting": dataclasses.asdict(hgpo_setting)},
                    advantages=summarize(_rows(theirs, mask)))
    if graph_setting is not None:
        theirs = refs.graphgpo.advantages(rollout, normalize, graph_setting, float64=True)
        records.add(f"graphgpo advantages and step returns ({label})", "graphgpo",
                    {"normalize": normalize, "setting": dataclasses.asdict(graph_setting)},
                    advantages=summarize(_rows(theirs["advantages"], mask)),
                    returns=summarize(theirs["step_rewards"].double().numpy()))


def _loss_outputs(outputs: Any, mask: np.ndarray) -> dict[str, Any]:
    return {"per_token": summarize(outputs.per_token.double().numpy(), mask),
            "micro_losses": outputs.micro_losses.double().numpy().tolist(),
            "mini_losses": outputs.mini_losses.double().numpy().tolist(),
            "grad_log_probs": summarize(outputs.grad_log_probs.double().numpy(), mask),
            "grad_entropies": summarize(outputs.grad_entropies.double().numpy(), mask)}


def _loss_terms(agent: Any, rollout: Any, records: Records) -> None:
    import torch

    from algorithms.config import LearnerConfig
    from algorithms.objectives import losses
    from benchmarks import recipe_parity as parity

    sizes = (LearnerConfig().mini_batch_size, LearnerConfig().micro_batch_size)
    mask = rollout.response_mask
    response_mask = torch.as_tensor(rollout.batch.response_mask)
    verl_settings = {"gigpo": parity.VerlSettings(), "dr_grpo": parity.DR_GRPO_VERL,
                     "gspo": parity.GSPO_VERL}
    for normalize in parity.NORMALIZATIONS:
        algos = ("gigpo", "dr_grpo", "gspo") if normalize == "mean" else ("gigpo", "gspo")
        for algo in algos:
            estimator = "gigpo" if algo == "gigpo" else "grpo"
            advantages = _rows(agent.advantages(rollout, estimator, normalize,
                                                float64=True)["advantages"], mask)
            tokens = losses.broadcast_to_tokens(advantages, response_mask)  # float32
            token_rows = tokens.double().numpy()[:, 0].tolist()
            positions = parity._per_token_sample(rollout) if algo == "gspo" else None
            theirs = agent.loss(rollout, tokens, sizes, torch.float64, verl_settings[algo],
                                positions)
            prefix = "" if algo == "gigpo" else f"{algo} "
            records.add(f"{prefix}loss terms", "loss",
                        {"algo": algo, "normalize": normalize, "changes": {},
                         "positions": None if positions is None else positions.tolist(),
                         "token_advantages": token_rows},
                        **_loss_outputs(theirs, mask))
            if algo == "gspo":
                term, gradient = agent.gspo_term(rollout, tokens, torch.float64)
                records.add("gspo policy term", "gspo_term",
                            {"normalize": normalize, "token_advantages": token_rows},
                            loss=float(term), gradient=summarize(gradient.double().numpy(),
                                                                  mask))
            if algo != "gigpo":
                continue
            for option in parity.OPTIONS:
                if option.affects != "loss" or option.verl is None:
                    continue
                theirs = agent.loss(rollout, tokens, sizes, torch.float64, option.verl)
                records.add(f"{option.name}: loss terms vs verl with {option.verl_name}",
                            "loss", {"algo": "gigpo", "normalize": normalize,
                                     "changes": option.changes, "positions": None,
                                     "token_advantages": token_rows},
                            **_loss_outputs(theirs, mask))
    logits = torch.tensor(rollout.logits, dtype=torch.float64, requires_grad=True)
    entropy = agent.entropy(logits) * response_mask
    (gradient,) = torch.autograd.grad(entropy.sum(), logits)
    records.add("entropy from logits", "entropy", {},
                entropy=summarize(entropy.detach().numpy(), mask),
                gradient=summarize(gradient.numpy()))


def record(args: argparse.Namespace) -> dict[str, Any]:
    """The ``recipe`` fixture (the recorder's output: ``what``, ``cases``, ``versions``,
    ``graphgpo_commit``)."""
    import torch

    from benchmarks import frontier_parity as frontier
    from benchmarks import recipe_parity as parity

    if not args.graphgpo_core:
        raise SystemExit("recipe: name GraphGPO's core_graph.py (--graphgpo-core)")
    graphgpo_commit = args.graphgpo_commit or checkout_commit(Path(args.graphgpo_core).parent)
    torch.set_num_threads(1)
    agent = parity.VerlAgent(args.verl_agent, args.deps)
    refs = frontier.references(agent, args.graphgpo_core)
    if refs.hgpo is None or refs.graphgpo is None:
        raise SystemExit(f"recipe: {refs.missing}")
    batches = []

    def batch_record(seed: int, groups: int, role: str) -> tuple[Any, Records]:
        rollout = parity.make_rollout(seed, groups)
        records = Records()
        batches.append({"seed": seed, "groups": groups, "role": role,
                        "rows": len(rollout.batch), "digest": rollout_digest(rollout),
                        "records": records.items})
        return rollout, records

    for seed, groups in BATCHES:
        rollout, records = batch_record(seed, groups, "terms")
        _cheap_terms(agent, refs, rollout, seed, groups, records)
    rollout, records = batch_record(*SWEEP_BATCH, "sweeps")
    for normalize in parity.NORMALIZATIONS:
        for setting in frontier.HGPO_SWEEP:
            _frontier(refs, rollout, normalize, setting, None, records, setting.label)
        for setting in frontier.GRAPH_SWEEP:
            _frontier(refs, rollout, normalize, None, setting, records, setting.label)
    rollout, records = batch_record(*LOSS_BATCH, "losses")
    _loss_terms(agent, rollout, records)
    return {
        "what": "verl-agent's recipe terms as benchmarks/recipe_parity.py runs them "
                "(VerlAgent: its trainer's advantage phase, core_gigpo's functions, "
                "dp_actor's loss, DAPO's overlong reward and filter_group_data) and "
                "HGPO's (recipe/hgpo) and GraphGPO's (core_graph.py) as "
                "benchmarks/frontier_parity.py runs them, all counted in float64, on "
                "make_rollout(seed, groups) batches; each record: the harness's term, "
                "what this project computes (kind, params), the original's output (float "
                "arrays as tools.originals.summarize gives them).",
        "cases": {"tolerance": parity.TOLERANCE, "stubbed": list(agent.stubbed),
                  "batches": batches},
        "versions": versions("numpy", "torch", "networkx"),
        "graphgpo_commit": graphgpo_commit,
    }
