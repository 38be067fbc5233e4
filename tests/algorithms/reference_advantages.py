"""Loop reference implementations of :mod:`algorithms.objectives.advantages` (the readable spec).

Written the way a reader first writes them: Python loops over groups, trajectories and
time steps. Slow on purpose and kept simple so that they are obviously right; the tests
compare the vectorized functions against them and ``benchmarks/advantages.py`` times
both. Same conventions as the vectorized module: sample std (ddof=1), ``eps`` added to
the std, a singleton group or a group of equal values gets 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def normalize_scores(scores: list[float], normalize: str, eps: float) -> np.ndarray:
    """Group-relative scores of one group: ``(x - mean) / (std + eps)`` or ``x - mean``."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 1 or np.all(scores == scores[0]):
        return np.zeros_like(scores)
    centered = scores - scores.mean()
    if normalize == "mean":
        return centered
    return centered / (scores.std(ddof=1) + eps)


def ref_discounted_returns(rewards: Sequence[float], traj_ids: Sequence[Any], *, gamma: float):
    """(N,) ``R_t = r_t + gamma * R_{t+1}`` backwards through each trajectory (Eq. 5)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    traj_ids = np.asarray(traj_ids)
    returns = np.zeros(len(rewards))
    for traj in np.unique(traj_ids):
        rows = np.where(traj_ids == traj)[0]
        running = 0.0
        for row in reversed(rows):
            running = rewards[row] + gamma * running
            returns[row] = running
    return returns


def ref_grpo_advantages(
    rewards,
    traj_ids,
    group_ids,
    *,
    normalize: str = "std",
    eps: float = 1e-6,
    episode_stats: str = "trajectories",
):
    """(N,) episode relative advantage (Eq. 3), one loop per group."""
    rewards = np.asarray(rewards, dtype=np.float64)
    traj_ids = np.asarray(traj_ids)
    group_ids = np.asarray(group_ids)
    episode_return = defaultdict(float)
    for row in range(len(rewards)):
        episode_return[traj_ids[row]] += rewards[row]

    advantages = np.zeros(len(rewards))
    for group in np.unique(group_ids):
        rows = np.where(group_ids == group)[0]
        if episode_stats == "trajectories":
            trajs = list(dict.fromkeys(traj_ids[rows].tolist()))
            scores = normalize_scores([episode_return[t] for t in trajs], normalize, eps)
            score_of = dict(zip(trajs, scores, strict=True))
            for row in rows:
                advantages[row] = score_of[traj_ids[row]]
        else:
            scores = normalize_scores([episode_return[traj_ids[r]] for r in rows], normalize, eps)
            for row, score in zip(rows, scores, strict=True):
                advantages[row] = score
    return advantages


def ref_step_groups(group_ids, anchors) -> np.ndarray:
    """(N,) step-group ids (Eq. 6): per group, rows with equal anchors share an id."""
    group_ids = np.asarray(group_ids)
    anchors = list(anchors)
    step_group_ids = np.zeros(len(anchors), dtype=np.int64)
    next_id = 0
    for group in np.unique(group_ids):
        rows_of_anchor = defaultdict(list)
        for row in np.where(group_ids == group)[0]:
            rows_of_anchor[anchors[row]].append(row)
        for rows in rows_of_anchor.values():
            for row in rows:
                step_group_ids[row] = next_id
            next_id += 1
    return step_group_ids


def ref_gigpo_advantages(
    rewards,
    traj_ids,
    group_ids,
    anchors,
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    normalize: str = "std",
    eps: float = 1e-6,
    episode_stats: str = "trajectories",
):
    """(N,) ``A_E + step_weight * A_S`` (Eq. 8), step groups built with a dict of lists."""
    episode = ref_grpo_advantages(
        rewards, traj_ids, group_ids, normalize=normalize, eps=eps, episode_stats=episode_stats
    )
    returns = ref_discounted_returns(rewards, traj_ids, gamma=gamma)
    rows_of_step_group = defaultdict(list)
    for row, step_group in enumerate(ref_step_groups(group_ids, anchors)):
        rows_of_step_group[step_group].append(row)
    step = np.zeros(len(returns))
    for rows in rows_of_step_group.values():
        scores = normalize_scores([returns[row] for row in rows], normalize, eps)
        for row, score in zip(rows, scores, strict=True):
            step[row] = score
    return episode + step_weight * step


def ref_gae_advantages(
    rewards, values, traj_ids, *, gamma: float, lam: float, last_values: Any = None
):
    """(advantages, returns), backwards GAE recursion per trajectory.

    ``last_values``: None (all terminated), a mapping traj_id -> value (absent or NaN:
    terminated), or an (N,) array read at each trajectory's last row (NaN: terminated).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    traj_ids = np.asarray(traj_ids)
    advantages = np.zeros(len(rewards))
    for traj in np.unique(traj_ids):
        rows = np.where(traj_ids == traj)[0]
        if last_values is None:
            bootstrap = 0.0
        elif isinstance(last_values, Mapping):
            bootstrap = float(last_values.get(traj.item(), np.nan))
        else:
            bootstrap = float(last_values[rows[-1]])
        if np.isnan(bootstrap):
            bootstrap = 0.0
        next_value = bootstrap
        running = 0.0
        for row in reversed(rows):
            delta = rewards[row] + gamma * next_value - values[row]
            running = delta + gamma * lam * running
            advantages[row] = running
            next_value = values[row]
    return advantages, advantages + values


def ref_hgpo_advantages(
    rewards, traj_ids, group_ids, anchors, *, history_length: int = 2, gamma: float = 0.95,
    normalize: str = "std", length_weight_alpha: float = 1.0, base_group: bool = False,
    eps: float = 1e-6,
):
    """(N,) HGPO, episode statistics over trajectories: every (group, k, last k anchors)
    a dict key, each group of two or more normalized with the population std, each row's
    nonzero items weighted ``(k + 1) ** alpha`` (the episode term as ``k = 0``)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    traj_ids, group_ids, anchors = np.asarray(traj_ids), np.asarray(group_ids), list(anchors)
    returns = ref_discounted_returns(rewards, traj_ids, gamma=gamma)
    episode = ref_grpo_advantages(rewards, traj_ids, group_ids, normalize=normalize, eps=eps)
    clusters: dict[tuple, list[int]] = defaultdict(list)
    for traj in np.unique(traj_ids):
        rows = np.where(traj_ids == traj)[0]
        for t, row in enumerate(rows):
            for k in range(1, min(history_length + 1, t + 1) + 1):
                path = tuple(anchors[r] for r in rows[t - k + 1: t + 1])
                clusters[(group_ids[row], k, path)].append(row)
    items: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for (_, k, _), rows in clusters.items():
        if len(rows) < 2:
            continue
        values = np.array([returns[row] for row in rows])
        if np.all(values == values[0]):
            continue  # all equal: every item 0, dropped
        centered = values - values.mean()
        scores = centered if normalize == "mean" else centered / (values.std(ddof=0) + eps)
        for row, score in zip(rows, scores, strict=True):
            items[row].append((k, float(score)))
    out = np.zeros(len(rewards))
    for row in range(len(rewards)):
        row_items = ([(0, float(episode[row]))] if base_group else []) + items[row]
        kept = [(k, a) for k, a in row_items if a != 0.0]
        weights = [(k + 1) ** length_weight_alpha for k, _ in kept]
        out[row] = sum(w * a for w, (_, a) in zip(weights, kept, strict=True)) / (
            sum(weights) + eps)
    return out


def ref_graph_returns(traj_ids, group_ids, anchors, next_anchors, success, *, gamma: float,
                      normalize_distance: bool = False):
    """(N,) GraphGPO's step returns ``10 * gamma ** d``: per group a dict graph, the goal
    after each successful trajectory's last step, breadth-first distances to it,
    unreachable states one past the farthest reachable."""
    traj_ids, group_ids = np.asarray(traj_ids), np.asarray(group_ids)
    last = np.ones(len(traj_ids), dtype=bool)
    for row in range(len(traj_ids) - 1):
        later = traj_ids[row + 1:] == traj_ids[row]
        last[row] = not later.any()
    goal = object()
    returns = np.zeros(len(traj_ids))
    for group in np.unique(group_ids):
        rows = np.where(group_ids == group)[0]
        targets = {row: goal if (last[row] and success[row]) else next_anchors[row]
                   for row in rows}
        parents: dict[Any, list[Any]] = defaultdict(list)
        for row in rows:
            parents[targets[row]].append(anchors[row])
        distance = {goal: 0}
        frontier = [goal]
        while frontier:
            later = []
            for node in frontier:
                for parent in parents[node]:
                    if parent not in distance:
                        distance[parent] = distance[node] + 1
                        later.append(parent)
            frontier = later
        unreachable = max(distance.values()) + 1
        for row in rows:
            d_next = distance.get(targets[row], unreachable)
            d_state = distance.get(anchors[row], unreachable)
            exponent = d_next - d_state + 1 if normalize_distance else d_next
            returns[row] = 10.0 * gamma ** exponent
    return returns
