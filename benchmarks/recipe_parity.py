"""Recipe parity: this project's group estimators and actor losses against verl-agent's.

Run from the repository root::

    python -m benchmarks.recipe_parity --verl-agent PATH   # PATH: a verl-agent checkout
    python -m benchmarks.recipe_parity --verl-agent PATH --graphgpo-core FILE  # + GraphGPO
    python -m benchmarks.recipe_parity --self-check        # no verl-agent needed

The same synthetic multi-turn batches, shaped like ALFWorld's (groups of 8 trajectories,
up to 50 steps, reward 10 on success, invalid actions charged 0.1, trajectories that end
in success, in failure or at the step limit, step groups from singletons to dozens of
rows), go through both pipelines, for several seeds and both normalizations (``std``:
verl-agent's ``mean_std_norm``; ``mean``: ``mean_norm``):

- verl-agent, as its trainer (``RayPPOTrainer.fit``) runs them, in that order:
  ``core_gigpo.compute_step_discounted_returns`` on the env rewards, its
  ``EpisodeRewardManager`` (the episode's reward at the last response token),
  ``ray_trainer.apply_invalid_action_penalty``, ``ray_trainer.compute_advantage`` (GiGPO:
  ``compute_gigpo_outcome_advantage``; GRPO: ``compute_grpo_outcome_advantage``, Dr.GRPO's
  with ``norm_adv_by_std_in_grpo=False``; RLOO: ``compute_rloo_outcome_advantage``;
  REINFORCE++: ``compute_reinforce_plus_plus_baseline_outcome_advantage``); then,
  per micro-batch, ``core_algos.compute_policy_loss``, ``agg_loss`` of the entropies and
  of ``kl_penalty(..., "low_var_kl")``, combined and divided by the gradient-accumulation
  steps as ``dp_actor.update_policy`` does (GSPO: ``compute_policy_loss_gspo`` in place
  of ``compute_policy_loss``; Dr.GRPO: ``loss_agg_mode=seq-mean-token-sum-norm``);
  per-token entropies from ``verl.utils.torch_functional.entropy_from_logits``. Settings:
  ``examples/<algo>_trainer/run_alfworld.sh`` over ``ppo_trainer.yaml`` (gamma 0.95, step
  weight 1, penalty 0.1, clip 0.2 -- GSPO 3e-4 / 4e-4 --, dual clip 3, token-mean,
  entropy 0.001, low_var_kl 0.01). DAPO's parts: the overlong reward of
  ``verl.workers.reward_manager.dapo.DAPORewardManager`` (a score function giving 0, so
  that its reward is the punishment alone; ``max_resp_len`` 24, buffers and factors of
  :data:`OVERLONG`) and the groups ``agent_system.multi_turn_rollout.utils.
  filter_group_data`` keeps, one rollout at a time and inside a transcription of
  ``dynamic_multi_turn_loop``'s while loop (:func:`verl_dynamic_loop`).
- this project: :func:`~algorithms.training.estimation.rewards_and_penalties`, :meth:`Learner.advantages` and
  :func:`~algorithms.training.estimation.overlong_costs` on a :class:`~algorithms.agent.rollout.StepBatch`,
  :func:`algorithms.objectives.losses.policy_loss` with :attr:`Learner.loss_recipe` and the weights
  of :func:`~algorithms.training.micro_batches.micro_weights`, for each ``--algo`` with the config
  ``train.py`` builds
  (:func:`~algorithms.config.with_algo` over ``TrainConfig()``, responses of at most 24
  tokens; a learner object holding only its config: those methods read nothing else);
  GSPO's policy term alone through :func:`algorithms.objectives.losses.gspo_policy_loss`; dynamic
  sampling through :func:`~algorithms.agent.dynamic_sampling.varied_group_rows` and
  :func:`~algorithms.agent.dynamic_sampling.sample_until_full` (the trainer's loop).

HGPO (verl-agent's ``recipe/hgpo``, from the same checkout) and GraphGPO (its recipe's
``core_graph.py``, from the file ``--graphgpo-core`` or ``$GRAPHGPO_CORE`` names): their
defaults and every setting of their sweeps, on the same batches
(``benchmarks/frontier_parity.py``); each is skipped, with the reason printed, when its
reference is absent, and ``--no-frontier`` leaves both out.

Printed per term: the largest absolute difference over every token, seed and batch of
the per-token advantages, the per-token loss (one token alone), the micro- and
mini-batch losses and their gradients with respect to the log-probs and the entropies
(torch autograd on both sides), and the per-token entropy and its gradient. Log-probs,
old, reference log-probs, entropies and logits are random; responses have 1 to 24
tokens. Then each named option of ``LearnerConfig`` is turned on, one at a time, and
compared with verl-agent's default and, where verl has the same setting, with verl run
that way. The run exits 1 when a term of any section (every ``--algo``'s defaults and
DAPO's parts) or an HGPO or GraphGPO setting differs by more than 1e-6; its last line is
``worst difference with defaults: X (term, normalization)``.

Precision. verl-agent computes the step returns in float32 (its function casts the
rewards to float32 and returns a float32 tensor), its episode scores and the penalty in
float32 (the reward manager's tensor; DAPO's overlong reward too), and its entropy as
``logsumexp - sum(p * logits)``; this project computes the advantages in float64. So
every term is measured twice:
"counted" -- verl's functions run with their ``float32`` names read as ``float64``
(:func:`~benchmarks.parity_pipelines.in_float64`: the same code objects, other globals)
and both losses in float64 --
and "as run" -- verl exactly as it runs, the losses of both sides in float32 (the dtype
both actors train in) -- which is printed and not counted.

Setting up verl-agent (``import verl`` needs more than this project does). This works
with this project's torch and transformers and changes neither::

    pip install --no-deps --target /tmp/verlagent-deps tensordict==0.10.0 pandas==3.1.1 \\
        pyvers==0.2.3 tzdata codetiming==1.4.0 omegaconf==2.3.0 \\
        antlr4-python3-runtime==4.9.3 torchdata==0.11.0
    PYTHONPATH=/tmp/verlagent-deps python -m benchmarks.recipe_parity --verl-agent PATH

(``--deps /tmp/verlagent-deps`` does the same as the ``PYTHONPATH``.) verl-agent's code is
imported from PATH at run time; nothing of it is copied here. ``verl.trainer.ppo.
ray_trainer`` (home of ``apply_invalid_action_penalty`` and ``compute_advantage``) imports
the whole trainer, so these modules, imported by it but never used by the functions
called here, are replaced by empty stand-ins when they are not installed (the run prints
which): ``aiohttp``, ``cachetools``, ``openai`` (verl's async rollout server), ``datasets``
(its RL dataset, which ``agent_system.multi_turn_rollout`` imports too) and
``agent_system.environments.env_package.discovery.discoveryworld`` (an env package that
some verl-agent forks reference but do not ship). The reward managers get a tokenizer
stand-in whose ``decode`` and ``eos_token`` are "" (they decode only to print examples,
and ``num_examine=0`` prints none).

Accepted differences, not counted: a group with a single row gets its raw score from
verl (``episode_norm_reward`` and the RLOO and REINFORCE++ functions use mean 0 there,
and std 1 where they divide) and 0 here (measured and printed; for REINFORCE++ the raw
score also moves the batch's whitening, so every row differs a little); verl's ``adjust_batch`` duplicates random rows so that the batch divides among
data-parallel ranks (the duplicates join the group statistics) and ``balance_batch``
reorders rows across ranks: sharding artefacts that are not exercised here.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from algorithms.agent.dynamic_sampling import sample_until_full, varied_group_rows
from algorithms.agent.step_batch import StepBatch, StepLog, intern_anchors
from algorithms.config import LearnerConfig, TrainConfig
from algorithms.objectives import losses
from algorithms.training.estimation import overlong_costs, rewards_and_penalties
from algorithms.training.micro_batches import micro_weights
from benchmarks import frontier_parity
from benchmarks.parity_pipelines import (
    AS_RUN,
    COUNTED,
    ESTIMATORS,
    GROUP_SIZE,
    GSPO_CLIP,
    NORMALIZATIONS,
    PRECISIONS,
    SUCCESS_REWARD,
    TOLERANCE,
    LossOutputs,
    Report,
    Rollout,
    RuleTranscription,
    Section,
    VerlAgent,
    VerlSettings,
    _cell,
    _max_abs,
    make_rollout,
    our_advantages,
    our_config,
    our_learner,
    run_loss,
)

OVERLONG = ((8, 1.0), (5, 0.3))
"""``(buffer length, penalty factor)`` pairs of DAPO's overlong punishment compared, with
the maximum response length :data:`~benchmarks.parity_pipelines.RESPONSE_TOKENS`
(responses of 1 to 24 tokens)."""
DYNAMIC_MAX_ROLLOUTS = (1, 2, 10)
"""``max_num_gen_batches`` values the dynamic-sampling loop is compared with (10: the
DAPO and GiGPO-dynamic examples; 2: the second rollout is the last try, kept whole)."""
PER_TOKEN_SAMPLE = 256
"""Tokens per batch whose lone-token GSPO loss is compared (one call per token; this
project's GSPO diagnostics index by a data-dependent mask, which ``torch.func.vmap``
cannot batch)."""


# --------------------------------------------------------------------------- batches


def single_row_group(rollout: Rollout) -> Rollout:
    """``rollout`` plus one group made of a single one-step trajectory that succeeds (valid
    action, reward 10): the case where verl's episode statistics take mean 0 and std 1.
    Its token arrays repeat the last row's."""
    batch = rollout.batch
    added = {
        "traj_ids": batch.traj_ids.max() + 1, "group_ids": batch.group_ids.max() + 1,
        "env_rewards": SUCCESS_REWARD, "penalties": 0.0, "rewards": SUCCESS_REWARD,
        "invalid": False, "valid_action": True, "step_index": 0, "last_step": True,
        "success": True, "truncated": False,
    }
    fields: dict[str, Any] = {}
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "rewards",
                 "env_rewards", "penalties", "invalid", "format_ok", "valid_action",
                 "traj_ids", "group_ids", "step_index", "last_step", "success", "truncated",
                 "prompt_cut", "env_error"):
        array = getattr(batch, name)
        tail = np.full_like(array[-1:], added[name]) if name in added else array[-1:]
        fields[name] = np.concatenate([array, tail])
    fields["log"] = StepLog(**{name: getattr(batch.log, name) + getattr(batch.log, name)[-1:]
                               for name in ("task_ids", "task_types", "actions",
                                            "response_texts")})
    fields["anchors"] = batch.anchors + ("a room of its own",)
    fields["anchor_ids"] = intern_anchors(fields["anchors"])
    fields["next_anchors"] = batch.next_anchors + ("the room after it",)

    def grown(array: np.ndarray) -> np.ndarray:
        return np.concatenate([array, array[-1:]])

    return Rollout(batch=dataclasses.replace(batch, **fields),
                   log_probs=grown(rollout.log_probs),
                   old_log_probs=grown(rollout.old_log_probs),
                   ref_log_probs=grown(rollout.ref_log_probs),
                   entropies=grown(rollout.entropies), logits=grown(rollout.logits))


# --------------------------------------------------------------------------- this project


def our_loss(rollout: Rollout, token_advantages: torch.Tensor, config: TrainConfig,
             dtype: torch.dtype, per_token_positions: np.ndarray | None = None
             ) -> LossOutputs:
    """This project's loss terms: :func:`losses.policy_loss` with the learner's
    :attr:`~Learner.loss_recipe`, weighted by :func:`~algorithms.training.micro_batches.micro_weights`
    (``per_token_positions``: see :func:`run_loss`)."""
    learner = our_learner(config)
    recipe = learner.loss_recipe

    def micro_loss(log_probs, old, advantages, mask, ref, entropies):
        return losses.policy_loss(log_probs, old, advantages, mask, recipe,
                                  ref_log_probs=ref, entropy=entropies)[0]

    def weight(micro_tokens: int, mini_tokens: int) -> float:
        return micro_weights(micro_tokens, mini_tokens, True, config.learner)[0]

    sizes = (config.learner.mini_batch_size, config.learner.micro_batch_size)
    return run_loss(rollout, token_advantages, micro_loss, weight, sizes, dtype, trim=True,
                    per_token_positions=per_token_positions)


def our_token_advantages(rollout: Rollout, advantages: np.ndarray) -> torch.Tensor:
    """(N, R) float32 per-token advantages as the learner hands them to the loss
    (:func:`losses.broadcast_to_tokens`)."""
    return losses.broadcast_to_tokens(advantages, torch.as_tensor(rollout.batch.response_mask))


def our_gspo_term(rollout: Rollout, token_advantages: torch.Tensor, dtype: torch.dtype
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`losses.gspo_policy_loss` on the whole batch at verl-agent's GSPO clip range:
    ``(loss, gradient wrt the log-probs)``."""
    log_probs = torch.tensor(rollout.log_probs, dtype=dtype, requires_grad=True)
    loss = losses.gspo_policy_loss(
        log_probs, torch.as_tensor(rollout.old_log_probs, dtype=dtype),
        token_advantages.to(dtype), torch.as_tensor(rollout.response_mask),
        clip_eps_low=GSPO_CLIP[0], clip_eps_high=GSPO_CLIP[1])[0]
    (gradient,) = torch.autograd.grad(loss, log_probs)
    return loss.detach(), gradient


def our_overlong(rollout: Rollout, buffer: int, factor: float) -> np.ndarray:
    """(N,) DAPO's overlong cost of each row, as
    :func:`~algorithms.training.estimation.overlong_costs` charges it with ``overlong_buffer=buffer``, ``overlong_penalty_factor=factor``."""
    config = our_config("grpo", overlong_buffer=buffer, overlong_penalty_factor=factor)
    return overlong_costs(rollout.batch, config)


def our_dynamic_sample(rollouts: Callable[[int], Rollout], num_groups: int,
                       max_rollouts: int) -> list[np.ndarray]:
    """Which rows of each rollout :func:`~algorithms.agent.dynamic_sampling.sample_until_full`
    (the trainer's dynamic sampling, ``--learner.dynamic-sampling``) keeps: one (N_r,)
    bool array per rollout made. ``rollouts(r)`` is the ``r``-th rollout of the
    iteration (group ids in ``[0, num_groups)``)."""
    config = our_config("grpo", dynamic_sampling=True,
                        dynamic_sampling_max_rollouts=max_rollouts)
    made: list[StepBatch] = []

    def rollout(index: int) -> StepBatch:
        made.append(rollouts(index).batch)
        return made[-1]

    sample = sample_until_full(rollout, num_groups=num_groups, group_size=GROUP_SIZE,
                               max_rollouts=config.learner.dynamic_sampling_max_rollouts,
                               pad_id=0)
    kept = np.unique(sample.batch.traj_ids)
    return [np.isin(batch.traj_ids + index * num_groups * GROUP_SIZE, kept)
            for index, batch in enumerate(made)]


def verl_dynamic_loop(kept_rows: Callable[[StepBatch, bool], np.ndarray],
                      rollouts: Callable[[int], Rollout], num_groups: int,
                      max_rollouts: int) -> list[np.ndarray]:
    """verl-agent's ``TrajectoryCollector.dynamic_multi_turn_loop`` around its filter:
    roll out while fewer than ``train_batch_size * n`` trajectories are kept and fewer
    than ``max_num_gen_batches`` rollouts were made, each rollout filtered by
    ``kept_rows(batch, last_try)`` (``last_try``: this rollout reaches the cap). The loop
    is transcribed (it needs an env manager and an actor to run); the filter is the
    reference's. Returns the (N_r,) kept rows of each rollout made."""
    kept: list[np.ndarray] = []
    trajectories = 0
    while trajectories < num_groups * GROUP_SIZE and len(kept) < max_rollouts:
        batch = rollouts(len(kept)).batch
        rows = kept_rows(batch, len(kept) + 1 == max_rollouts)
        trajectories += int(np.unique(batch.traj_ids[rows]).size)
        kept.append(rows)
    return kept


# --------------------------------------------------------------------------- comparisons

Reference = Any  # VerlAgent or RuleTranscription (same methods)

LOSS_TERMS = ("per-token loss", "micro-batch loss", "mini-batch loss",
              "gradient wrt log-probs", "gradient wrt entropies")


SECTIONS = (
    Section("gigpo, grpo: LearnerConfig() vs gigpo_trainer (grpo_trainer)/run_alfworld.sh",
            ("step returns R_t", "gigpo advantages", "grpo advantages", *LOSS_TERMS,
             "entropy from logits", "entropy gradient wrt logits")),
    Section("rloo: --algo rloo vs rloo_trainer/run_alfworld.sh (adv_estimator=rloo; the "
            "loss is gigpo's)", ("rloo advantages",)),
    Section("reinforce_pp: --algo reinforce_pp vs adv_estimator=reinforce_plus_plus_baseline "
            "(the loss is gigpo's)", ("reinforce_pp advantages",)),
    Section("dr_grpo: --algo dr_grpo vs grpo with norm_adv_by_std_in_grpo=False, "
            "loss_agg_mode=seq-mean-token-sum-norm (mean only)",
            ("dr_grpo advantages", *(f"dr_grpo {term}" for term in LOSS_TERMS))),
    Section(f"gspo: --algo gspo vs gspo_trainer/run_alfworld.sh (loss_mode=gspo, clip "
            f"{GSPO_CLIP[0]:g}/{GSPO_CLIP[1]:g}; per-token loss: {PER_TOKEN_SAMPLE} tokens "
            "a batch)",
            ("gspo advantages", "gspo policy term", "gspo policy term gradient",
             *(f"gspo {term}" for term in LOSS_TERMS))),
    Section("DAPO's parts (no normalization involved: both columns alike): overlong cost vs "
            "DAPORewardManager, dynamic sampling vs filter_group_data",
            ("overlong penalty", "dynamic sampling kept rows", "dynamic sampling rollouts")),
    Section("hgpo: --algo hgpo vs recipe/hgpo's trainer (history 2, alpha 1, no base group: "
            "the 1.5B scripts)", ("hgpo advantages",)),
    Section("graphgpo: --algo graphgpo vs GraphGPO's core_graph (gamma 0.1, both weights 1, "
            "exact states: the ALFWorld 1.5B script)",
            ("graphgpo step returns", "graphgpo advantages")),
)
DEFAULT_TERMS = tuple(term for section in SECTIONS for term in section.terms)
"""Every term of every section, counted in the worst line."""


@dataclass(frozen=True)
class Option:
    """One ``LearnerConfig`` option turned on, and verl's way to do the same, if any.

    Attributes:
        name: how the report names it.
        changes: the ``LearnerConfig`` fields it sets.
        affects: "advantages" or "loss" (what to compare).
        verl: verl-agent's settings that do the same, or None where verl has none.
        verl_name: how the report names those settings.
        estimators: the estimators compared (advantage options).
    """

    name: str
    changes: dict[str, Any]
    affects: str
    verl: VerlSettings | None = None
    verl_name: str = ""
    estimators: tuple[str, ...] = ESTIMATORS


OPTIONS = (
    Option("penalty_in_returns=True", {"penalty_in_returns": True}, "advantages",
           VerlSettings(use_invalid_action_penalty=False, penalty_in_env_rewards=True),
           "the env's rewards carry the penalty, use_invalid_action_penalty=False"),
    Option("episode_stats='trajectories' (+ penalty_in_returns)",
           {"episode_stats": "trajectories", "penalty_in_returns": True}, "advantages",
           VerlSettings(use_invalid_action_penalty=False, penalty_in_env_rewards=True,
                        cross_steps=False),
           "the same, compute_mean_std_cross_steps=False"),
    Option("similarity_threshold=0.95", {"similarity_threshold": 0.95}, "advantages",
           VerlSettings(enable_similarity=True, similarity_thresh=0.95),
           "enable_similarity=True, similarity_thresh=0.95", estimators=("gigpo",)),
    Option(f"overlong_buffer={OVERLONG[0][0]} (factor {OVERLONG[0][1]:g})",
           {"overlong_buffer": OVERLONG[0][0], "overlong_penalty_factor": OVERLONG[0][1]},
           "advantages",
           VerlSettings(overlong_buffer=OVERLONG[0][0],
                        overlong_penalty_factor=OVERLONG[0][1]),
           "DAPORewardManager's overlong reward added to the token-level scores",
           estimators=("grpo", "rloo", "reinforce_pp")),
    Option("dual_clip=None", {"dual_clip": None}, "loss", VerlSettings(clip_ratio_c=1e30),
           "clip_ratio_c=1e30 (verl has no off switch)"),
    Option("loss_aggregation='seq-mean-token-mean'",
           {"loss_aggregation": "seq-mean-token-mean"}, "loss",
           VerlSettings(loss_agg_mode="seq-mean-token-mean"),
           "loss_agg_mode=seq-mean-token-mean"),
    Option("loss_aggregation='seq-mean-token-sum'",
           {"loss_aggregation": "seq-mean-token-sum"}, "loss",
           VerlSettings(loss_agg_mode="seq-mean-token-sum"), "loss_agg_mode=seq-mean-token-sum"),
    Option("micro_batch_weighting='tokens'", {"micro_batch_weighting": "tokens"}, "loss"),
    Option("clip_eps_high=0.28", {"clip_eps_high": 0.28}, "loss",
           VerlSettings(clip_ratio_high=0.28), "clip_ratio_high=0.28"),
    Option("entropy_coef=0", {"entropy_coef": 0.0}, "loss", VerlSettings(entropy_coeff=0.0),
           "entropy_coeff=0"),
)

DR_GRPO_VERL = VerlSettings(loss_agg_mode="seq-mean-token-sum-norm")
"""verl's settings for Dr.GRPO's loss (its advantages: GRPO with ``normalize="mean"``)."""
GSPO_VERL = VerlSettings(loss_mode="gspo", clip_ratio_low=GSPO_CLIP[0],
                         clip_ratio_high=GSPO_CLIP[1])
"""``examples/gspo_trainer/run_alfworld.sh`` over ``ppo_trainer.yaml``."""


def _loss_differences(ours: LossOutputs, theirs: LossOutputs, prefix: str = ""
                      ) -> dict[str, float]:
    return {
        f"{prefix}per-token loss": _max_abs(ours.per_token, theirs.per_token),
        f"{prefix}micro-batch loss": _max_abs(ours.micro_losses, theirs.micro_losses),
        f"{prefix}mini-batch loss": _max_abs(ours.mini_losses, theirs.mini_losses),
        f"{prefix}gradient wrt log-probs": _max_abs(ours.grad_log_probs,
                                                    theirs.grad_log_probs),
        f"{prefix}gradient wrt entropies": _max_abs(ours.grad_entropies,
                                                    theirs.grad_entropies),
    }


def our_step_returns(rollout: Rollout, config: TrainConfig) -> np.ndarray:
    """(N,) the step returns GiGPO normalizes: :func:`~algorithms.objectives.advantages.gigpo_terms`
    with the arguments :func:`~algorithms.training.estimation.estimate_advantages` passes it."""
    from algorithms.objectives import advantages as estimators

    rewards, penalties = rewards_and_penalties(rollout.batch, config)
    settings = config.learner
    return estimators.gigpo_terms(
        rewards, rollout.batch.traj_ids, rollout.batch.group_ids, rollout.batch.anchor_ids,
        gamma=settings.gamma, normalize=settings.normalize,
        episode_stats=settings.episode_stats, penalties=penalties).returns


def compare(reference: Reference, seeds: Sequence[int], num_groups: int,
            *, with_options: bool = True, progress: Callable[[str], None] | None = None,
            frontier: Any = None) -> Report:
    """Run both pipelines on every seed's batch and collect the differences
    (``frontier``: HGPO's and GraphGPO's references,
    :class:`benchmarks.frontier_parity.FrontierReferences`, or ``None``)."""
    report = Report()
    sizes = (LearnerConfig().mini_batch_size, LearnerConfig().micro_batch_size)
    for seed in seeds:
        rollout = make_rollout(seed, num_groups)
        report.rows.append(len(rollout.batch))
        report.tokens.append(int(rollout.response_mask.sum()))
        if progress:
            progress(f"seed {seed}: advantages")
        _compare_advantages(reference, rollout, report)
        for normalize in NORMALIZATIONS:
            if progress:
                progress(f"seed {seed}: losses, {normalize}")
            _compare_losses(reference, rollout, normalize, report, sizes)
        for precision, _, dtype in PRECISIONS:
            values = _entropy_differences(reference, rollout, dtype)
            for normalize in NORMALIZATIONS:
                for term, value in values.items():
                    report.record(term, (normalize, precision), value)
        if progress:
            progress(f"seed {seed}: DAPO's parts")
        _compare_dapo(reference, rollout, seed, num_groups, report)
        if with_options:
            if progress:
                progress(f"seed {seed}: options")
            _compare_options(reference, rollout, report, sizes)
        _compare_single_row(reference, rollout, report)
        if frontier is not None:
            if progress:
                progress(f"seed {seed}: hgpo and graphgpo")
            frontier_parity.compare_frontier(frontier, rollout, report)
    if frontier is not None:
        frontier_parity.compare_equal_returns(frontier, report)
    return report


def _compare_advantages(reference: Reference, rollout: Rollout, report: Report) -> None:
    """Every estimator's advantages through :meth:`Learner.advantages`, with the config of
    each ``--algo``, against verl's trainer; verl's RLOO and REINFORCE++ have no
    normalization setting, so they run once per precision."""
    mask = rollout.response_mask
    for precision, float64, _ in PRECISIONS:
        for estimator in ESTIMATORS:
            theirs: dict[str, torch.Tensor] | None = None
            for normalize in NORMALIZATIONS:
                column = (normalize, precision)
                if theirs is None or estimator in ("gigpo", "grpo"):
                    theirs = reference.advantages(rollout, estimator, normalize,
                                                  float64=float64)
                config = our_config(estimator, normalize)
                ours = our_advantages(rollout, config)[:, None] * mask
                report.record(f"{estimator} advantages", column,
                              _max_abs(ours, theirs["advantages"]))
                if estimator == "gigpo":
                    report.record("step returns R_t", column,
                                  _max_abs(our_step_returns(rollout, config),
                                           theirs["step_rewards"]))
                if estimator == "grpo":  # the estimator of dr_grpo and gspo
                    algos = ("dr_grpo", "gspo") if normalize == "mean" else ("gspo",)
                    for algo in algos:
                        ours = our_advantages(rollout, our_config(algo, normalize))
                        report.record(f"{algo} advantages", column,
                                      _max_abs(ours[:, None] * mask, theirs["advantages"]))


def _per_token_sample(rollout: Rollout) -> np.ndarray:
    """:data:`PER_TOKEN_SAMPLE` response tokens spread evenly over the batch (flat
    indices among the response tokens)."""
    total = int(rollout.response_mask.sum())
    return np.unique(np.linspace(0, total - 1, min(PER_TOKEN_SAMPLE, total)).astype(int))


def _compare_losses(reference: Reference, rollout: Rollout, normalize: str, report: Report,
                    sizes: tuple[int, int]) -> None:
    """The actor loss of gigpo (the defaults), dr_grpo (``normalize="mean"`` only) and
    gspo, each with the per-token advantages its own config gives, and GSPO's policy
    term alone."""
    algos = ("gigpo", "dr_grpo", "gspo") if normalize == "mean" else ("gigpo", "gspo")
    for algo in algos:
        config = our_config(algo, normalize)
        tokens = our_token_advantages(rollout, our_advantages(rollout, config))
        settings = {"gigpo": VerlSettings(), "dr_grpo": DR_GRPO_VERL, "gspo": GSPO_VERL}[algo]
        positions = _per_token_sample(rollout) if algo == "gspo" else None
        prefix = "" if algo == "gigpo" else f"{algo} "
        for precision, _, dtype in PRECISIONS:
            column = (normalize, precision)
            ours = our_loss(rollout, tokens, config, dtype, positions)
            theirs = reference.loss(rollout, tokens, sizes, dtype, settings, positions)
            for term, value in _loss_differences(ours, theirs, prefix).items():
                report.record(term, column, value)
            if algo == "gspo":
                our_term, our_gradient = our_gspo_term(rollout, tokens, dtype)
                their_term, their_gradient = reference.gspo_term(rollout, tokens, dtype)
                report.record("gspo policy term", column, _max_abs(our_term, their_term))
                report.record("gspo policy term gradient", column,
                              _max_abs(our_gradient, their_gradient))


def _entropy_differences(reference: Reference, rollout: Rollout, dtype: torch.dtype
                         ) -> dict[str, float]:
    """Per-token entropies from the logits and their gradients (summed over the mask)."""
    mask = torch.as_tensor(rollout.response_mask)
    logits = torch.tensor(rollout.logits, dtype=dtype, requires_grad=True)
    ours = losses.entropy_from_logits(logits, response_mask=mask)
    theirs = reference.entropy(logits) * mask
    (our_grad,) = torch.autograd.grad(ours.sum(), logits)
    (their_grad,) = torch.autograd.grad(theirs.sum(), logits)
    return {"entropy from logits": _max_abs(ours, theirs),
            "entropy gradient wrt logits": _max_abs(our_grad, their_grad)}


def _compare_dapo(reference: Reference, rollout: Rollout, seed: int, num_groups: int,
                  report: Report) -> None:
    """DAPO's overlong cost (each of :data:`OVERLONG`), the groups dynamic sampling keeps
    of this batch, and the rollouts it makes and keeps for each of
    :data:`DYNAMIC_MAX_ROLLOUTS` (the iteration's later rollouts: fresh batches of seeds
    ``10_000 + 100 * seed + r``). Recorded in both normalization columns."""
    made: dict[int, Rollout] = {0: rollout}

    def rollouts(index: int) -> Rollout:
        if index not in made:
            made[index] = make_rollout(10_000 + 100 * seed + index, num_groups)
        return made[index]

    batch = rollout.batch
    ours_kept = varied_group_rows(batch.env_rewards, batch.traj_ids, batch.group_ids)
    for precision, float64, _ in PRECISIONS:
        values = {
            "overlong penalty": max(
                _max_abs(our_overlong(rollout, buffer, factor),
                         reference.overlong(rollout, buffer, factor, float64=float64))
                for buffer, factor in OVERLONG),
            "dynamic sampling kept rows": _max_abs(
                ours_kept, reference.kept_rows(batch, False, float64=float64)),
        }
        worst_loop = 0.0
        for max_rollouts in DYNAMIC_MAX_ROLLOUTS:
            ours = our_dynamic_sample(rollouts, num_groups, max_rollouts)
            theirs = verl_dynamic_loop(
                functools.partial(reference.kept_rows, float64=float64),
                rollouts, num_groups, max_rollouts)
            for index in range(max(len(ours), len(theirs))):
                rows = len(rollouts(index).batch)
                none = np.zeros(rows, dtype=bool)
                worst_loop = max(worst_loop, _max_abs(
                    ours[index] if index < len(ours) else none,
                    theirs[index] if index < len(theirs) else none))
        values["dynamic sampling rollouts"] = worst_loop
        for normalize in NORMALIZATIONS:
            for term, value in values.items():
                report.record(term, (normalize, precision), float(value))


def _compare_options(reference: Reference, rollout: Rollout, report: Report,
                     sizes: tuple[int, int]) -> None:
    """Each option against verl's default and against verl set the same way (float64)."""
    mask = rollout.response_mask
    for normalize in NORMALIZATIONS:
        defaults_config = our_config("gigpo", normalize)
        tokens = our_token_advantages(rollout, our_advantages(rollout, defaults_config))
        verl_default_loss = reference.loss(rollout, tokens, sizes, torch.float64)
        for option in OPTIONS:
            targets = [("verl default", VerlSettings())]
            if option.verl is not None:
                targets.append((f"verl with {option.verl_name}", option.verl))
            if option.affects == "advantages":
                for estimator in option.estimators:
                    config = our_config(estimator, normalize, **option.changes)
                    ours = our_advantages(rollout, config)[:, None] * mask
                    for label, settings in targets:
                        theirs = reference.advantages(rollout, estimator, normalize,
                                                      settings, float64=True)
                        report.record_option(option.name, label, {
                            f"{estimator} advantages": _max_abs(ours, theirs["advantages"])})
                continue
            config = our_config("gigpo", normalize, **option.changes)
            ours_loss = our_loss(rollout, tokens, config, torch.float64)
            for label, settings in targets:
                theirs_loss = (verl_default_loss if settings == VerlSettings() else
                               reference.loss(rollout, tokens, sizes, torch.float64, settings))
                values = _loss_differences(ours_loss, theirs_loss)
                report.record_option(option.name, label, {
                    term: values[term] for term in ("per-token loss", "mini-batch loss",
                                                    "gradient wrt log-probs")})


SINGLE_ROW_CASES = (("gigpo", "std"), ("gigpo", "mean"), ("rloo", "std"),
                    ("reinforce_pp", "std"))
"""``(estimator, normalization)`` pairs of the accepted single-row difference."""


def _compare_single_row(reference: Reference, rollout: Rollout, report: Report) -> None:
    """The accepted difference: a group of one row (float64)."""
    grown = single_row_group(rollout)
    mask = grown.response_mask
    for estimator, normalize in SINGLE_ROW_CASES:
        ours = our_advantages(grown, our_config(estimator, normalize))[:, None] * mask
        theirs = reference.advantages(grown, estimator, normalize,
                                      float64=True)["advantages"]
        difference = np.abs(ours - theirs.double().numpy())
        single = float(difference[-1].max())
        elsewhere = float(difference[:-1].max())
        label = f"{estimator}, {normalize}" if estimator == "gigpo" else estimator
        before = report.single_row.get(label, (0.0, 0.0))
        report.single_row[label] = (max(before[0], single), max(before[1], elsewhere))


# --------------------------------------------------------------------------- report


def format_report(report: Report, reference: Reference, seconds: float,
                  frontier: Any = None) -> list[str]:
    """The printed lines; the last is ``worst difference with defaults: X (term, norm)``,
    after ``worst difference over the hgpo and graphgpo settings: X (setting)`` when
    ``frontier`` (:class:`benchmarks.frontier_parity.FrontierReferences`) was compared."""
    lines = [
        f"recipe parity: this project vs {reference.root}",
        f"{len(report.rows)} seeds, {sum(report.rows)} rows ({min(report.rows)} to "
        f"{max(report.rows)} per batch), {sum(report.tokens)} response tokens; mini-batch "
        f"{LearnerConfig().mini_batch_size} rows, micro-batch "
        f"{LearnerConfig().micro_batch_size}; {seconds:.0f} s",
    ]
    if reference.stubbed:
        lines.append("stood in for (not installed; unused by the functions called): "
                     + ", ".join(reference.stubbed))
    lines += [
        "",
        "defaults of each --algo, largest |difference| (-: the algorithm fixes the other "
        "normalization)",
        f"  {'term':<34}{'std':>10}{'mean':>10}    {'std':>9}{'mean':>10}",
        f"  {'':<34}{'counted (float64)':>20}    {'as run (float32)':>19}",
    ]
    for section in SECTIONS:
        shown = [term for term in section.terms if term in report.defaults]
        if not shown:
            continue
        lines.append(f"  {section.title}")
        for term in shown:
            cells = report.defaults[term]
            row = [cells.get((n, p)) for p in (COUNTED, AS_RUN) for n in NORMALIZATIONS]
            lines.append(f"    {term:<32}{_cell(row[0], 10)}{_cell(row[1], 10)}    "
                         f"{_cell(row[2], 9)}{_cell(row[3], 10)}")
    if report.options:
        lines += ["", "options, each alone (float64; both normalizations), largest "
                  "|difference|"]
        for option, comparisons in report.options.items():
            lines.append(f"  {option}")
            for label, values in comparisons.items():
                shown = ", ".join(f"{term} {value:.1e}" for term, value in values.items())
                lines.append(f"      vs {label}: {shown}")
    if report.single_row:
        lines += ["", "accepted difference (not counted): a group of one row keeps its raw "
                  "score in verl, 0 here"]
        for label, (single, elsewhere) in report.single_row.items():
            lines.append(f"  {label}: that row {single:.1e}, every other row "
                         f"{elsewhere:.1e}")
    if frontier is not None:
        lines += ["", *frontier_parity.report_lines(report, frontier)]
        sweep, setting = frontier_parity.sweep_worst(report)
        lines += ["", f"worst difference over the hgpo and graphgpo settings: {sweep:.1e} "
                  f"({setting or 'none compared'})"]
    worst, where = report.worst()
    lines += ["", f"worst difference with defaults: {worst:.1e} ({where})"]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status (1: a default term differs by
    more than :data:`TOLERANCE`)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.recipe_parity",
        description="Compare this project's group estimators (gigpo, grpo, rloo, "
                    "reinforce_pp, dr_grpo, gspo), actor losses and DAPO's parts with "
                    "verl-agent's functions on synthetic ALFWorld-shaped batches.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--verl-agent", metavar="PATH", help="a verl-agent checkout")
    source.add_argument("--self-check", action="store_true",
                        help="compare with the rules transcribed in this file instead")
    parser.add_argument("--deps", metavar="DIR",
                        help="folder of verl-agent's extra packages (pip --target)")
    parser.add_argument("--graphgpo-core", metavar="FILE",
                        help="GraphGPO's recipe/GraphGPO/core_graph.py (default: "
                             "$GRAPHGPO_CORE; without it GraphGPO is not compared)")
    parser.add_argument("--no-frontier", action="store_true",
                        help="leave HGPO and GraphGPO out")
    parser.add_argument("--seeds", type=int, default=3, help="batches (seeds 0..N-1)")
    parser.add_argument("--groups", type=int, default=6, help="groups of 8 per batch")
    parser.add_argument("--no-options", action="store_true",
                        help="compare the defaults only")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.groups < 1:
        parser.error("--seeds and --groups must be >= 1")
    torch.set_num_threads(1)  # tiny tensors: thread hand-offs would dominate
    start = time.perf_counter()
    reference = (RuleTranscription() if args.self_check
                 else VerlAgent(args.verl_agent, args.deps))
    frontier = (None if args.no_frontier
                else frontier_parity.references(reference, args.graphgpo_core))
    report = compare(reference, range(args.seeds), args.groups,
                     with_options=not args.no_options, frontier=frontier,
                     progress=lambda text: print(f"... {text}", file=sys.stderr, flush=True))
    lines = format_report(report, reference, time.perf_counter() - start, frontier)
    print("\n".join(lines))
    sweep = frontier_parity.sweep_worst(report)[0]
    return 1 if max(report.worst()[0], sweep) > TOLERANCE else 0


if __name__ == "__main__":
    raise SystemExit(main())
