"""The recipe-parity terms against verl-agent's recorded outputs
(``tests/data/originals/recipe.json.gz``, ``tools/record_originals.py``,
``tools/record_recipe.py``): no checkout needed.

Recorded from verl-agent's code (and HGPO's ``recipe/hgpo``, GraphGPO's ``core_graph.py``)
as ``benchmarks/recipe_parity.py`` and ``benchmarks/frontier_parity.py`` run it, counted in
float64, on the harness's random batches (``make_rollout``: 8 seeds of 6 groups, one
sweep batch, one loss batch; each batch regenerated here and checked against its recorded
digest). Every record names the harness's term and what this project computes for it,
through the harness's own functions (``our_advantages``, ``our_loss``, ...); each must be
within the harness's tolerance (1e-6) of the original's output: the estimators of every
algorithm and normalization, GiGPO's core functions one by one, the advantage and loss
options with their verl settings, the losses and their gradients, GSPO's policy term, the
entropy, DAPO's overlong cost and dynamic sampling, HGPO's and GraphGPO's defaults and
every setting of their sweeps. ``test_recipe_parity.py`` runs the harness against a live
checkout (``VERL_AGENT_PATH``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.differential import recorded
from tools.originals import summary_difference

pytestmark = pytest.mark.differential

CASES = recorded("recipe")
BATCHES = CASES["batches"]


def _harness():
    pytest.importorskip("torch")
    from benchmarks import frontier_parity, recipe_parity  # their current module paths

    return recipe_parity, frontier_parity


def _partition(labels: Any) -> list[int]:
    seen: dict[Any, int] = {}
    return [seen.setdefault(label, len(seen)) for label in list(labels)]


def _kept(batch: Any, rows: np.ndarray) -> list[int]:
    return np.unique(batch.traj_ids[rows]).tolist()


class Ours:
    """This project's side of each record kind, on one batch (the harness's functions)."""

    def __init__(self, rollout: Any, seed: int, groups: int):
        self.parity, self.frontier = _harness()
        self.rollout, self.seed, self.groups = rollout, seed, groups

    def __call__(self, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        return getattr(self, kind)(**params)

    def _config(self, algo: str, normalize: str, changes: dict[str, Any] | None = None):
        return self.parity.our_config(algo, normalize, **(changes or {}))

    def advantages(self, algo, normalize, changes):
        return {"advantages": self.parity.our_advantages(
            self.rollout, self._config(algo, normalize, changes))}

    def step_returns(self, normalize):
        return {"returns": self.parity.our_step_returns(self.rollout,
                                                        self._config("gigpo", normalize))}

    def gigpo_core(self, normalize, similarity):
        from algorithms.objectives.advantages import gigpo_terms
        from algorithms.training.estimation import rewards_and_penalties

        config = self._config("gigpo", normalize, {"similarity_threshold": similarity})
        batch, learner = self.rollout.batch, config.learner
        rewards, penalties = rewards_and_penalties(batch, config)
        terms = gigpo_terms(rewards, batch.traj_ids, batch.group_ids, batch.anchors,
                            gamma=learner.gamma, normalize=learner.normalize,
                            episode_stats=learner.episode_stats,
                            similarity_threshold=learner.similarity_threshold,
                            penalties=penalties)
        return {"episode": terms.episode, "step": terms.step, "returns": terms.returns,
                "step_groups": _partition(terms.step_group_ids)}

    def single_row(self, algo, normalize):
        grown = self.parity.single_row_group(self.rollout)
        values = self.parity.our_advantages(grown, self._config(algo, normalize))
        return {"single": float(values[-1]), "others": values[:-1]}

    def overlong(self, buffer, factor):
        return {"costs": self.parity.our_overlong(self.rollout, buffer, factor)}

    def kept_rows(self, last_try):
        from algorithms.agent.dynamic_sampling import varied_group_rows

        batch = self.rollout.batch
        rows = (np.ones(len(batch), dtype=bool) if last_try
                else varied_group_rows(batch.env_rewards, batch.traj_ids, batch.group_ids))
        return {"trajectories": _kept(batch, rows)}

    def dynamic(self, max_rollouts):
        from tools.record_recipe import rollout_digest

        made = {0: self.rollout}

        def rollouts(index: int) -> Any:
            if index not in made:
                made[index] = self.parity.make_rollout(10_000 + 100 * self.seed + index,
                                                       self.groups)
            return made[index]

        kept = self.parity.our_dynamic_sample(rollouts, self.groups, max_rollouts)
        return {"rollouts": [{"seed": 10_000 + 100 * self.seed + index if index else None,
                              "digest": rollout_digest(rollouts(index)),
                              "trajectories": _kept(rollouts(index).batch, rows)}
                             for index, rows in enumerate(kept)]}

    def hgpo(self, normalize, setting):
        return {"advantages": self.frontier.our_hgpo(
            self.rollout, normalize, self.frontier.HGPOSetting(**setting))}

    def graphgpo(self, normalize, setting):
        advantages, returns = self.frontier.our_graphgpo(
            self.rollout, normalize, self.frontier.GraphSetting(**setting))
        return {"advantages": advantages, "returns": returns}

    def _tokens(self, token_advantages):
        import torch

        rows = torch.tensor(token_advantages, dtype=torch.float32)
        return rows[:, None] * torch.as_tensor(self.rollout.batch.response_mask)

    def loss(self, algo, normalize, changes, positions, token_advantages):
        import torch

        outputs = self.parity.our_loss(
            self.rollout, self._tokens(token_advantages), self._config(algo, normalize, changes),
            torch.float64, None if positions is None else np.asarray(positions))
        return {"per_token": outputs.per_token.numpy(),
                "micro_losses": outputs.micro_losses.numpy(),
                "mini_losses": outputs.mini_losses.numpy(),
                "grad_log_probs": outputs.grad_log_probs.numpy(),
                "grad_entropies": outputs.grad_entropies.numpy()}

    def gspo_term(self, normalize, token_advantages):
        import torch

        loss, gradient = self.parity.our_gspo_term(self.rollout,
                                                   self._tokens(token_advantages),
                                                   torch.float64)
        return {"loss": float(loss), "gradient": gradient.numpy()}

    def entropy(self):
        import torch

        from algorithms.objectives import losses

        mask = torch.as_tensor(self.rollout.response_mask)
        logits = torch.tensor(self.rollout.logits, dtype=torch.float64, requires_grad=True)
        entropy = losses.entropy_from_logits(logits, response_mask=mask)
        (gradient,) = torch.autograd.grad(entropy.sum(), logits)
        return {"entropy": entropy.detach().numpy(), "gradient": gradient.numpy()}


def difference(theirs: Any, ours: Any) -> float:
    """The largest absolute difference between a recorded output and ours: summarized
    arrays by :func:`summary_difference`, lists of numbers elementwise, anything else
    (partitions, kept trajectories) exactly (0 or ``inf``)."""
    if isinstance(theirs, dict) and "sketch" in theirs:
        return summary_difference(theirs, ours)
    if isinstance(theirs, float):
        return abs(theirs - float(ours))
    if isinstance(theirs, list) and theirs and isinstance(theirs[0], float):
        ours = np.asarray(ours, dtype=np.float64)
        if ours.shape != (len(theirs),):
            return float("inf")
        return float(np.max(np.abs(ours - np.asarray(theirs))))
    return 0.0 if theirs == ours else float("inf")


def compare_batch(batch_case: dict[str, Any]) -> dict[str, float]:
    """Every record of one recorded batch: term -> the largest difference."""
    parity, _ = _harness()
    rollout = parity.make_rollout(batch_case["seed"], batch_case["groups"])
    from tools.record_recipe import rollout_digest

    assert rollout_digest(rollout) == batch_case["digest"], (
        f"make_rollout({batch_case['seed']}, {batch_case['groups']}) no longer gives the "
        "recorded batch: record the recipe again (tools/record_originals.py --only recipe)")
    ours = Ours(rollout, batch_case["seed"], batch_case["groups"])
    worst: dict[str, float] = {}
    for record in batch_case["records"]:
        if record["kind"] == "single_row" and record["params"]["algo"] == "reinforce_pp":
            continue  # the raw score moves the batch's whitening too: every row (accepted)
        values = ours(record["kind"], record["params"])
        for key, theirs in record["theirs"].items():
            if record["kind"] == "single_row" and key == "single":
                # the accepted difference: verl keeps the single row's raw score, 0 here
                # (10, divided by 1 + 1e-6 where verl divides by its std of 1)
                assert values[key] == 0.0 and theirs == pytest.approx(10.0, rel=1e-5), \
                    record["term"]
                continue
            term = f"{record['term']}: {key}, {record['params'].get('normalize', '-')}"
            worst[term] = max(worst.get(term, 0.0), difference(theirs, values[key]))
    return worst


@pytest.mark.parametrize("batch_case", BATCHES,
                         ids=[f"{b['role']}-seed{b['seed']}-groups{b['groups']}" for b in BATCHES])
def test_every_recorded_term_is_within_the_harness_tolerance(batch_case):
    worst = compare_batch(batch_case)
    tolerance = CASES["tolerance"]
    off = {term: value for term, value in worst.items() if not value <= tolerance}
    assert not off, "\n".join(f"{term}: {value:.1e}" for term, value in sorted(off.items()))
    assert len(worst) >= 5


def test_the_recorded_batches_cover_every_term_of_the_harness():
    _, frontier = _harness()
    terms = {record["term"] for batch in BATCHES for record in batch["records"]}
    kinds = {record["kind"] for batch in BATCHES for record in batch["records"]}
    assert kinds == {"advantages", "step_returns", "gigpo_core", "single_row", "overlong",
                     "kept_rows", "dynamic", "hgpo", "graphgpo", "loss", "gspo_term",
                     "entropy"}
    for algo in ("gigpo", "grpo", "rloo", "reinforce_pp", "dr_grpo", "gspo"):
        assert f"{algo} advantages" in terms
    sweeps = [b for b in BATCHES if b["role"] == "sweeps"][0]["records"]
    settings = {(r["kind"], r["params"]["normalize"], tuple(r["params"]["setting"].values()))
                for r in sweeps}
    assert len(settings) == 2 * (len(frontier.HGPO_SWEEP) + len(frontier.GRAPH_SWEEP))
    assert len({b["seed"] for b in BATCHES if b["role"] == "terms"}) == 8
