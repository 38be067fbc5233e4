"""Recipe parity for GiGPO's successors, HGPO and GraphGPO: part of
``benchmarks/recipe_parity.py``'s run, on the batches, precisions and report of
:mod:`benchmarks.parity_pipelines` (this module never imports the recipe harness, which
calls it).

- HGPO: verl-agent's ``recipe/hgpo`` from the same checkout as the rest of the harness,
  as its trainer (``recipe/hgpo/hgpo_ray_trainer.py`` ``RayPPOTrainer.fit``) runs it:
  ``core_hgpo.compute_step_discounted_returns`` on the env rewards, the episode reward
  manager, the trainer's ``apply_invalid_action_penalty``, then its ``compute_advantage``
  with ``adv_estimator=hgpo`` and the ``algorithm.hgpo`` settings (float32, as run); with
  verl's float32 names read as float64 (counted), ``hgpo_advantage_estimate`` itself,
  with the arguments that ``compute_advantage`` passes it.
- GraphGPO: the recipe's ``core_graph.py`` from a file the user points to
  (``--graphgpo-core PATH`` or ``$GRAPHGPO_CORE``; nothing of it is in this repository),
  as its trainer runs it: the rollout loop's ``next_obs`` (the next state's anchor;
  ``'success'`` on the last step of an episode whose env reward sum is above 0, the rule
  of its ``gather_rollout_data``), ``ComplexGraph.from_data``,
  ``Calculate_all_shortest_path``, ``compute_graph_path_returns``, the episode reward
  manager, ``apply_invalid_action_penalty``, ``compute_graphgpo_outcome_advantage`` with
  the ``algorithm.graphgpo`` settings. Its trainer's ``compute_advantage`` is not in the
  verl-agent checkout; the call is transcribed (the arguments it passes).
- this project: :meth:`Learner.advantages` with the config ``train.py --algo hgpo`` /
  ``--algo graphgpo`` builds and each setting given as its flag.

Compared, largest absolute difference of the per-token advantages (and GraphGPO's step
returns): the defaults (the 1.5B scripts' settings: HGPO history 2, alpha 1, no base
group; GraphGPO gamma 0.1, both weights 1, exact states, absolute distances) in both
normalizations and both precisions, and every setting of :data:`HGPO_SWEEP` and
:data:`GRAPH_SWEEP` (counted, float64). ``--self-check`` compares with the rules written
out here (:class:`HGPORules`, :class:`GraphRules`) instead.

Accepted difference (printed, not counted): an HGPO history group whose returns are all
equal scores exactly 0 here and takes no weight; verl-agent's float32 mean of such a
group can be one rounding off, which gives every member ``d / (|d| + 1e-6)`` (see
:func:`algorithms.objectives.advantages.hgpo_advantages`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import io
import math
import os
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from algorithms.agent.step_batch import StepLog, intern_anchors
from algorithms.objectives import advantages as estimators
from algorithms.training.estimation import rewards_and_penalties
from benchmarks import parity_pipelines as parity

GRAPHGPO_CORE_ENV = "GRAPHGPO_CORE"
"""Environment variable naming GraphGPO's ``core_graph.py`` (``--graphgpo-core``)."""


@dataclass(frozen=True)
class HGPOSetting:
    """``algorithm.hgpo`` (and ``env.history_length``) of one comparison."""

    history_length: int = 2
    alpha: float = 1.0
    base_group: bool = False

    @property
    def label(self) -> str:
        return (f"history {self.history_length}, alpha {self.alpha:g}, base group "
                f"{'on' if self.base_group else 'off'}")

    def changes(self) -> dict[str, Any]:
        """The learner flags of this setting."""
        return {"hgpo_history_length": self.history_length,
                "hgpo_length_weight_alpha": self.alpha, "hgpo_base_group": self.base_group}


@dataclass(frozen=True)
class GraphSetting:
    """``algorithm.gamma`` (our ``learner.graphgpo_decay``) and ``algorithm.graphgpo`` of one
    comparison."""

    gamma: float = 0.1
    normalize_distance: bool = False
    similarity: float | None = None
    episode_weight: float = 1.0

    @property
    def label(self) -> str:
        similarity = "exact" if self.similarity is None else f"similarity {self.similarity:g}"
        return (f"gamma {self.gamma:g}, {'distance gained' if self.normalize_distance else 'distance'}"
                f", {similarity}, episode weight {self.episode_weight:g}")

    def changes(self) -> dict[str, Any]:
        return {"graphgpo_decay": self.gamma,
                "graphgpo_normalize_distance": self.normalize_distance,
                "similarity_threshold": self.similarity,
                "graphgpo_episode_weight": self.episode_weight}


HGPO_DEFAULT = HGPOSetting()
"""``recipe/hgpo/run_qwen2.5_1.5b_{alfworld,webshop}_train.sh``: history 2, alpha 1, no
base group (``mean_std_norm`` for ALFWorld, ``mean_norm`` for WebShop: the columns)."""
HGPO_SWEEP = tuple(HGPOSetting(history, alpha, base) for base in (False, True)
                   for history in (0, 1, 2, 4) for alpha in (0.0, 0.5, 1.0, 2.0))
"""Every base group, alpha and history length compared (both normalizations)."""
GRAPH_DEFAULT = GraphSetting()
"""The GraphGPO ALFWorld 1.5B script (the WebShop one: gamma 0.2)."""
GRAPH_SWEEP = tuple(GraphSetting(gamma, distance, similarity, weight)
                    for gamma in (0.1, 0.2) for distance in (False, True)
                    for similarity in (None, 0.95) for weight in (1.0, 0.0))
"""Both scripts' gamma, absolute and gained distances, similarity off and on, with and
without the episode term (both normalizations)."""
EQUAL_RETURNS_STEPS = 3
"""Steps of the accepted-difference batch (:func:`equal_returns_rollout`): 8 trajectories
on one path, all winning at its end, so each step's history groups hold 8 equal returns
(``10 * 0.95 ** 2`` at the first step, whose float32 mean is one rounding off)."""


# --------------------------------------------------------------------------- batches

def graph_next_obs(rollout: parity.Rollout) -> np.ndarray:
    """(N,) object: each row's next state as GraphGPO's rollout loop records it: the
    next anchor, and ``'success'`` on the last row of a trajectory whose env reward sum
    is above 0 (``gather_rollout_data``)."""
    batch = rollout.batch
    totals = np.bincount(batch.traj_ids, weights=batch.env_rewards)
    nexts = np.array(list(batch.next_anchors), dtype=object)
    nexts[batch.last_step & (totals[batch.traj_ids] > 0)] = "success"
    return nexts


def equal_returns_rollout() -> parity.Rollout:
    """One group of 8 trajectories that walk the same :data:`EQUAL_RETURNS_STEPS` states
    and all win (reward 10 at the last step), every step valid: every history group's
    returns are all equal."""
    base = parity.make_rollout(seed=0, num_groups=1)
    n = parity.GROUP_SIZE * EQUAL_RETURNS_STEPS
    rows = np.arange(n)
    tokens = {name: getattr(base.batch, name)[rows] for name in (
        "prompt_ids", "prompt_mask", "response_ids", "response_mask", "format_ok",
        "prompt_cut", "env_error")}
    step = np.tile(np.arange(EQUAL_RETURNS_STEPS), parity.GROUP_SIZE)
    anchors = tuple(f"state {s}" for s in step.tolist())
    last = step == EQUAL_RETURNS_STEPS - 1
    rewards = np.where(last, parity.SUCCESS_REWARD, 0.0)
    batch = dataclasses.replace(
        base.batch, **tokens, env_rewards=rewards, penalties=np.zeros(n), rewards=rewards,
        invalid=np.zeros(n, dtype=bool), valid_action=np.ones(n, dtype=bool),
        traj_ids=np.repeat(np.arange(parity.GROUP_SIZE), EQUAL_RETURNS_STEPS),
        group_ids=np.zeros(n, dtype=np.int64), anchors=anchors,
        anchor_ids=intern_anchors(anchors), next_anchors=tuple(f"state {s + 1}" for s in step),
        step_index=step, last_step=last, success=np.ones(n, dtype=bool),
        truncated=np.zeros(n, dtype=bool),
        log=StepLog(task_ids=("t",) * n, task_types=("",) * n, actions=("a",) * n,
                    response_texts=("",) * n))
    return dataclasses.replace(base, batch=batch, log_probs=base.log_probs[rows],
                               old_log_probs=base.old_log_probs[rows],
                               ref_log_probs=base.ref_log_probs[rows],
                               entropies=base.entropies[rows], logits=base.logits[rows])


# --------------------------------------------------------------------------- this project

def our_hgpo(rollout: parity.Rollout, normalize: str, setting: HGPOSetting) -> np.ndarray:
    """(N,) ``--algo hgpo`` with the setting's flags, through :meth:`Learner.advantages`."""
    return parity.our_advantages(rollout, parity.our_config("hgpo", normalize,
                                                            **setting.changes()))


def our_graphgpo(rollout: parity.Rollout, normalize: str, setting: GraphSetting
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(advantages, step returns)``, (N,) each, of ``--algo graphgpo`` with the
    setting's flags (the returns: :func:`graphgpo_terms` with the arguments
    :func:`~algorithms.training.estimation.estimate_advantages` passes it)."""
    config = parity.our_config("graphgpo", normalize, **setting.changes())
    batch = rollout.batch
    rewards, penalties = rewards_and_penalties(batch, config)
    learner = config.learner
    terms = estimators.graphgpo_terms(
        rewards, batch.traj_ids, batch.group_ids, batch.anchors, batch.next_anchors,
        batch.success, gamma=learner.graphgpo_decay, normalize=learner.normalize,
        normalize_distance=learner.graphgpo_normalize_distance,
        similarity_threshold=learner.similarity_threshold,
        episode_stats=learner.episode_stats, penalties=penalties)
    return parity.our_advantages(rollout, config), terms.returns


# --------------------------------------------------------------------------- references

class HGPOReference:
    """verl-agent's ``recipe/hgpo`` (imported from the harness's checkout).

    Raises:
        SystemExit: the checkout has no ``recipe/hgpo`` or it does not import.
    """

    def __init__(self, agent: parity.VerlAgent):
        if not (agent.root / "recipe" / "hgpo" / "core_hgpo.py").is_file():
            raise SystemExit(f"{agent.root}: no recipe/hgpo/core_hgpo.py (a verl-agent "
                             "checkout from before HGPO?)")
        self.agent = agent
        sys.meta_path.append(agent.finder)
        try:
            self.core = importlib.import_module("recipe.hgpo.core_hgpo")
            self.trainer = importlib.import_module("recipe.hgpo.hgpo_ray_trainer")
        except ImportError as error:
            raise SystemExit(f"cannot import verl-agent's recipe.hgpo: {error}") from error
        finally:
            sys.meta_path.remove(agent.finder)
        self.source = str(agent.root / "recipe" / "hgpo")

    def advantages(self, rollout: parity.Rollout, normalize: str, setting: HGPOSetting, *,
                   float64: bool) -> torch.Tensor:
        """(N, R) the trainer's HGPO advantages (module docstring)."""
        agent, trainer = self.agent, self.trainer
        data = agent._data(rollout, parity.VerlSettings(), float64)
        run = parity.in_float64 if float64 else (lambda function: function)
        dtype = torch.float64 if float64 else torch.get_default_dtype()
        with contextlib.redirect_stdout(io.StringIO()), parity.default_dtype(dtype):
            data.batch["step_rewards"] = run(self.core.compute_step_discounted_returns)(
                batch=data, gamma=parity.VerlSettings().gamma)
            data.batch["response_mask"] = trainer.compute_response_mask(data)
            data.batch["token_level_scores"] = run(type(agent.reward_manager).__call__)(
                agent.reward_manager, data)
            data, _ = run(trainer.apply_invalid_action_penalty)(
                data, invalid_action_penalty_coef=parity.PENALTY)
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]
            mode = parity.VERL_MODE[normalize]
            if not float64:
                data = trainer.compute_advantage(
                    data, adv_estimator=trainer.AdvantageEstimator.HGPO,
                    gamma=parity.VerlSettings().gamma, lam=1.0, num_repeat=1,
                    hgpo_mode=mode, hgpo_length_weight_alpha=setting.alpha,
                    hgpo_base_group=setting.base_group,
                    history_length=setting.history_length, epsilon=1e-6)
                return data.batch["advantages"]
            # compute_advantage's call of compute_hgpo_outcome_advantage, whose estimate
            # function is run with its float32 read as float64
            return run(self.core.hgpo_advantage_estimate)(
                data.batch["token_level_rewards"], data.batch["step_rewards"],
                data.batch["response_mask"], data.non_tensor_batch["anchor_obs"],
                data.non_tensor_batch["uid"], data.non_tensor_batch["traj_uid"],
                setting.history_length, epsilon=1e-6, mode=mode,
                length_weight_alpha=setting.alpha, base_group=setting.base_group)


class GraphReference:
    """GraphGPO's ``core_graph.py``, loaded from ``path`` (it imports ``verl`` and
    ``gigpo.core_gigpo`` from the harness's verl-agent checkout, and networkx and
    matplotlib, which its plotting uses).

    Raises:
        SystemExit: no such file, or it does not import.
    """

    def __init__(self, agent: parity.VerlAgent, path: str | Path):
        file = Path(path).expanduser().resolve()
        if not file.is_file():
            raise SystemExit(f"--graphgpo-core {path}: no such file (GraphGPO's "
                             "recipe/GraphGPO/core_graph.py)")
        self.agent = agent
        spec = importlib.util.spec_from_file_location("graphgpo_core_graph", file)
        if spec is None or spec.loader is None:
            raise SystemExit(f"--graphgpo-core {path}: not a Python module")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except ImportError as error:
            raise SystemExit(f"cannot import GraphGPO's core_graph from {file}: {error}"
                             ) from error
        self.core = module
        self.source = str(file)

    def advantages(self, rollout: parity.Rollout, normalize: str, setting: GraphSetting, *,
                   float64: bool) -> dict[str, torch.Tensor]:
        """``advantages`` (N, R) and ``step_rewards`` (N,) (after the penalty), as the
        GraphGPO trainer computes them (module docstring)."""
        agent, core = self.agent, self.core
        data = agent._data(rollout, parity.VerlSettings(), float64)
        data.non_tensor_batch["next_obs"] = graph_next_obs(rollout)
        data.non_tensor_batch["text_actions"] = np.array(list(rollout.batch.log.actions),
                                                         dtype=object)
        run = parity.in_float64 if float64 else (lambda function: function)
        dtype = torch.float64 if float64 else torch.get_default_dtype()
        with contextlib.redirect_stdout(io.StringIO()), parity.default_dtype(dtype):
            graphs = core.ComplexGraph.from_data(
                data, enable_similarity=setting.similarity is not None,
                similarity_thresh=0.95 if setting.similarity is None else setting.similarity)
            core.ComplexGraph.Calculate_all_shortest_path(graphs)
            data.batch["step_rewards"] = run(core.compute_graph_path_returns)(
                batch=data, Gs=graphs, gamma=setting.gamma,
                normalize_distance=setting.normalize_distance)
            data.batch["response_mask"] = agent.ray_trainer.compute_response_mask(data)
            data.batch["token_level_scores"] = run(type(agent.reward_manager).__call__)(
                agent.reward_manager, data)
            data, _ = run(agent.ray_trainer.apply_invalid_action_penalty)(
                data, invalid_action_penalty_coef=parity.PENALTY)
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]
            advantages, _ = core.compute_graphgpo_outcome_advantage(
                token_level_rewards=data.batch["token_level_rewards"],
                step_rewards=data.batch["step_rewards"],
                response_mask=data.batch["response_mask"],
                anchor_obs=data.non_tensor_batch["anchor_obs"],
                index=data.non_tensor_batch["uid"], traj_index=data.non_tensor_batch["traj_uid"],
                step_advantage_w=1.0, episode_advantage_w=setting.episode_weight,
                mode=parity.VERL_MODE[normalize])
        return {"advantages": advantages, "step_rewards": data.batch["step_rewards"]}


# --------------------------------------------------------------------------- self-check

def _episode_rows(rollout: parity.Rollout, normalize: str) -> np.ndarray:
    """(N,) verl's episode term with statistics over the group's rows: each row scored
    its trajectory's env return minus its own penalty, sample std, a group of one row
    mean 0 and std 1."""
    batch = rollout.batch
    totals = np.bincount(batch.traj_ids, weights=batch.env_rewards)
    scores = totals[batch.traj_ids] - parity.PENALTY * batch.invalid
    return parity.RuleTranscription._normalized(
        scores, batch.group_ids.tolist(), normalize, np.ones(len(batch), dtype=bool),
        single_mean=0.0)


class HGPORules:
    """HGPO's rules as read, written out with loops (the ``--self-check`` reference):
    the returns discounted backwards from the env rewards, minus the row's penalty; per
    group and history length ``k``, the rows whose last ``k`` anchors are equal; in each
    group of two or more, ``(R - mean) / (std + 1e-6)`` with the population std (or
    ``R - mean``), a group of equal returns scoring 0; each row's nonzero items weighted
    ``(k + 1) ** alpha``, with the episode term as ``k = 0`` for the base group, summed
    and divided by the weights' sum plus 1e-6."""

    source = "(HGPO's rules transcribed in benchmarks/frontier_parity.py)"

    def advantages(self, rollout: parity.Rollout, normalize: str, setting: HGPOSetting, *,
                   float64: bool) -> torch.Tensor:
        batch = rollout.batch
        rows_of: dict[int, list[int]] = {}
        for row, traj in enumerate(batch.traj_ids.tolist()):
            rows_of.setdefault(traj, []).append(row)
        returns = np.zeros(len(batch))
        for rows in rows_of.values():
            running = 0.0
            for row in reversed(rows):
                running = batch.env_rewards[row] + parity.VerlSettings().gamma * running
                returns[row] = running
        returns -= parity.PENALTY * batch.invalid
        clusters: dict[tuple[Any, ...], list[int]] = {}
        for rows in rows_of.values():
            for position, row in enumerate(rows):
                for k in range(1, min(setting.history_length + 1, position + 1) + 1):
                    path = tuple(batch.anchors[r] for r in rows[position - k + 1: position + 1])
                    clusters.setdefault((int(batch.group_ids[row]), k, path), []).append(row)
        items: dict[int, list[tuple[int, float]]] = {row: [] for row in range(len(batch))}
        for (_, k, _), members in clusters.items():
            if len(members) < 2:
                continue
            values = [float(returns[row]) for row in members]
            mean = sum(values) / len(values)
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
            for row, value in zip(members, values, strict=True):
                centered = 0.0 if max(values) == min(values) else value - mean
                items[row].append((k, centered if normalize == "mean"
                                   else centered / (std + 1e-6)))
        episode = _episode_rows(rollout, normalize)
        out = np.zeros(len(batch))
        for row, row_items in items.items():
            if setting.base_group:
                row_items = [(0, float(episode[row])), *row_items]
            kept = [(k, a) for k, a in row_items if a != 0.0]
            weights = [(k + 1) ** setting.alpha for k, _ in kept]
            if kept:
                out[row] = sum(w * a for w, (_, a) in zip(weights, kept, strict=True)) / (
                    sum(weights) + 1e-6)
        mask = torch.as_tensor(rollout.response_mask, dtype=torch.float64)
        return torch.as_tensor(out)[:, None] * mask


class GraphRules:
    """GraphGPO's rules as read, written out (the ``--self-check`` reference): per group,
    one node per state (with similarity: each new text, met row by row as state then next
    state, joins the first earlier node whose first text is at least that similar), an
    edge from each row's state to its next state (the goal on the last row of a won
    episode), distances to the goal by breadth-first search over reversed edges, an
    unreachable state one past the farthest reachable; returns ``10 * gamma ** d(next)``
    (or ``** (d(next) - d(state) + 1)``) minus the penalty, normalized among equal states
    of the group (sample std, a group of one scoring 0), plus the episode term times its
    weight."""

    source = "(GraphGPO's rules transcribed in benchmarks/frontier_parity.py)"

    @staticmethod
    def _group_returns(states: list[str], nexts: list[str], setting: GraphSetting
                       ) -> list[float]:
        """One group's graph returns, its rows in batch order (``'success'``: the goal)."""
        import difflib

        representatives: list[str] = []
        node_of: dict[str, int] = {}

        def node(text: str) -> int:
            if text not in node_of:
                for index, first in enumerate(representatives):
                    if setting.similarity is not None and difflib.SequenceMatcher(
                            None, text, first).ratio() >= setting.similarity:
                        node_of[text] = index
                        break
                else:
                    node_of[text] = len(representatives)
                    representatives.append(text)
            return node_of[text]

        goal = -1
        edges = []
        for state, after in zip(states, nexts, strict=True):
            source = node(state)
            edges.append((source, goal if after == "success" else node(after)))
        into: dict[int, list[int]] = {}
        for source, target in edges:
            into.setdefault(target, []).append(source)
        distance = {goal: 0}
        queue = deque([goal])
        while queue:
            current = queue.popleft()
            for source in into.get(current, []):
                if source not in distance:
                    distance[source] = distance[current] + 1
                    queue.append(source)
        farthest = max(distance.values())
        returns = []
        for source, target in edges:
            d_next = distance.get(target, farthest + 1)
            d_state = distance.get(source, farthest + 1)
            exponent = d_next - d_state + 1 if setting.normalize_distance else d_next
            returns.append(10 * setting.gamma ** exponent)
        return returns

    def advantages(self, rollout: parity.Rollout, normalize: str, setting: GraphSetting, *,
                   float64: bool) -> dict[str, torch.Tensor]:
        batch = rollout.batch
        nexts = graph_next_obs(rollout)
        returns = np.zeros(len(batch))
        for group in np.unique(batch.group_ids).tolist():
            rows = np.flatnonzero(batch.group_ids == group).tolist()
            returns[rows] = self._group_returns([batch.anchors[row] for row in rows],
                                                [nexts[row] for row in rows], setting)
        returns -= parity.PENALTY * batch.invalid
        keys = list(zip(batch.group_ids.tolist(), batch.anchors, strict=True))
        step = parity.RuleTranscription._normalized(
            returns, keys, normalize, np.ones(len(batch), dtype=bool), single_mean=None)
        advantages = step + setting.episode_weight * _episode_rows(rollout, normalize)
        mask = torch.as_tensor(rollout.response_mask, dtype=torch.float64)
        return {"advantages": torch.as_tensor(advantages)[:, None] * mask,
                "step_rewards": torch.as_tensor(returns)}


# --------------------------------------------------------------------------- comparisons

@dataclass
class FrontierReferences:
    """The references of the two estimators (``None``: not compared, with the reason)."""

    hgpo: Any = None
    graphgpo: Any = None
    missing: dict[str, str] = dataclasses.field(default_factory=dict)


def references(reference: Any, graphgpo_core: str | None) -> FrontierReferences:
    """The HGPO and GraphGPO references that go with the harness's ``reference``: the
    rules for ``--self-check``; else verl-agent's ``recipe/hgpo`` and GraphGPO's
    ``core_graph.py`` from ``graphgpo_core`` (or ``$GRAPHGPO_CORE``), each skipped with
    its reason when absent."""
    if isinstance(reference, parity.RuleTranscription):
        return FrontierReferences(hgpo=HGPORules(), graphgpo=GraphRules())
    found = FrontierReferences()
    if (reference.root / "recipe" / "hgpo" / "core_hgpo.py").is_file():
        found.hgpo = HGPOReference(reference)
    else:
        found.missing["hgpo"] = f"{reference.root} has no recipe/hgpo"
    path = graphgpo_core or os.environ.get(GRAPHGPO_CORE_ENV)
    if path:
        found.graphgpo = GraphReference(reference, path)
    else:
        found.missing["graphgpo"] = (f"no --graphgpo-core (or ${GRAPHGPO_CORE_ENV}) naming "
                                     "GraphGPO's recipe/GraphGPO/core_graph.py")
    return found


def _masked(rollout: parity.Rollout, values: np.ndarray) -> np.ndarray:
    return values[:, None] * rollout.response_mask


def compare_frontier(found: FrontierReferences, rollout: parity.Rollout,
                     report: parity.Report) -> None:
    """Both estimators on one batch: the defaults in both precisions (``report``'s
    default terms) and every sweep setting counted (``report.sweeps``)."""
    if found.hgpo is not None:
        for normalize in parity.NORMALIZATIONS:
            for precision, float64, _ in parity.PRECISIONS:
                theirs = found.hgpo.advantages(rollout, normalize, HGPO_DEFAULT,
                                               float64=float64)
                ours = _masked(rollout, our_hgpo(rollout, normalize, HGPO_DEFAULT))
                report.record("hgpo advantages", (normalize, precision),
                              parity._max_abs(ours, theirs))
            for setting in HGPO_SWEEP:
                theirs = found.hgpo.advantages(rollout, normalize, setting, float64=True)
                ours = _masked(rollout, our_hgpo(rollout, normalize, setting))
                report.record_sweep("hgpo", f"{setting.label}, {normalize}",
                                    parity._max_abs(ours, theirs))
    if found.graphgpo is not None:
        for normalize in parity.NORMALIZATIONS:
            for precision, float64, _ in parity.PRECISIONS:
                theirs = found.graphgpo.advantages(rollout, normalize, GRAPH_DEFAULT,
                                                   float64=float64)
                ours, returns = our_graphgpo(rollout, normalize, GRAPH_DEFAULT)
                report.record("graphgpo step returns", (normalize, precision),
                              parity._max_abs(returns, theirs["step_rewards"]))
                report.record("graphgpo advantages", (normalize, precision),
                              parity._max_abs(_masked(rollout, ours), theirs["advantages"]))
            for setting in GRAPH_SWEEP:
                theirs = found.graphgpo.advantages(rollout, normalize, setting, float64=True)
                ours, returns = our_graphgpo(rollout, normalize, setting)
                report.record_sweep("graphgpo", f"{setting.label}, {normalize}", max(
                    parity._max_abs(_masked(rollout, ours), theirs["advantages"]),
                    parity._max_abs(returns, theirs["step_rewards"])))


def compare_equal_returns(found: FrontierReferences, report: parity.Report) -> None:
    """The accepted difference: HGPO on :func:`equal_returns_rollout` (history 0, so
    each row's only item is its anchor group of 8 equal returns), both precisions."""
    if found.hgpo is None:
        return
    rollout = equal_returns_rollout()
    setting = dataclasses.replace(HGPO_DEFAULT, history_length=0)
    ours = _masked(rollout, our_hgpo(rollout, "std", setting))
    for precision, float64, _ in parity.PRECISIONS:
        theirs = found.hgpo.advantages(rollout, "std", setting, float64=float64)
        difference = np.abs(ours - theirs.double().numpy()).max(axis=1)
        report.accepted[f"hgpo equal returns, {precision}"] = (
            float(difference.max()), int((difference > parity.TOLERANCE).sum()),
            len(difference))


HGPO_SECTION = parity.Section(
    "hgpo: --algo hgpo vs recipe/hgpo's trainer (history 2, alpha 1, no base group: the "
    "1.5B scripts)", ("hgpo advantages",))
GRAPH_SECTION = parity.Section(
    "graphgpo: --algo graphgpo vs GraphGPO's core_graph (gamma 0.1, both weights 1, exact "
    "states: the ALFWorld 1.5B script)", ("graphgpo step returns", "graphgpo advantages"))


def report_lines(report: parity.Report, found: FrontierReferences) -> list[str]:
    """The sweep tables, the accepted difference and what was skipped."""
    lines: list[str] = []
    for name, source in (("hgpo", found.hgpo), ("graphgpo", found.graphgpo)):
        if source is not None:
            lines.append(f"{name} reference: {source.source}")
        else:
            lines.append(f"{name}: not compared ({found.missing.get(name, '')})")
    for name, settings in (("hgpo", HGPO_SWEEP), ("graphgpo", GRAPH_SWEEP)):
        cells = report.sweeps.get(name)
        if not cells:
            continue
        lines += ["", f"{name}, every setting (float64, counted), largest |difference| "
                  f"(std / mean)"]
        for setting in settings:
            std = cells.get(f"{setting.label}, std")
            mean = cells.get(f"{setting.label}, mean")
            lines.append(f"  {setting.label:<64}{parity._cell(std, 9)}{parity._cell(mean, 9)}")
    if report.accepted:
        lines += ["", "accepted difference (not counted): HGPO on 8 trajectories of one "
                  "path, all won (history 0: each row's only item is a group of 8 equal "
                  "returns, 0 here)"]
        for label, (worst, rows, total) in report.accepted.items():
            lines.append(f"  {label}: {worst:.1e} ({rows} of {total} rows differ by more "
                         f"than {parity.TOLERANCE:g})")
    return lines


def sweep_worst(report: parity.Report) -> tuple[float, str]:
    """The largest sweep difference and where."""
    worst, where = 0.0, ""
    for name, cells in report.sweeps.items():
        for label, value in cells.items():
            if value > worst:
                worst, where = value, f"{name}, {label}"
    return worst, where
