"""GiGPO on multi-turn rows: one row per trajectory, one run of model tokens per turn.

Multi-turn trainers (verl's agent loops, TRL's ``rollout_func``) keep a whole episode in
one token sequence: the model's answers (mask 1) and the env's replies (mask 0). GiGPO's
steps are then the turns, the runs of ones in a row's mask. These pure functions map
such rows onto :func:`~algorithms.objectives.advantages.gigpo_advantages` and back onto tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from algorithms.config import LearnerConfig
from algorithms.objectives.advantages import gigpo_advantages


def turn_spans(response_mask: np.ndarray) -> list[tuple[int, int]]:
    """The ``[start, end)`` token spans of the runs of nonzero entries of one row's mask.

    Args:
        response_mask: (L,) 0/1 mask of one response.

    Returns:
        The spans, in order: the k-th is the k-th turn's answer.
    """
    on = np.concatenate([[0], (np.asarray(response_mask) != 0).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(on))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True))


def gigpo_token_advantages(
    response_mask: np.ndarray,
    group_ids: Sequence[Any],
    turn_rewards: Sequence[Sequence[float]],
    turn_anchors: Sequence[Sequence[Any]],
    *,
    gamma: float = LearnerConfig.gamma,
    step_weight: float = LearnerConfig.step_weight,
    normalize: str = LearnerConfig.normalize,
    episode_stats: str = LearnerConfig.episode_stats,
    similarity_threshold: float | None = LearnerConfig.similarity_threshold,
) -> np.ndarray:
    """GiGPO advantages of per-trajectory rows, written on each turn's tokens.

    Args:
        response_mask: (B, L) 0/1, the model's tokens (one run of ones per turn).
        group_ids: (B,) group of each row (verl's ``uid``).
        turn_rewards: B lists, row b's T_b step rewards in time order.
        turn_anchors: B lists of T_b hashable anchors (the state each action was taken in).
        gamma, step_weight, normalize, episode_stats, similarity_threshold: see
            :func:`~algorithms.objectives.advantages.gigpo_advantages`. The turn rewards already
            carry any invalid-action penalty (it is in the returns here).

    Returns:
        (B, L) float64 advantages: turn k's advantage on its span, 0 elsewhere.

    Raises:
        ValueError: when lengths disagree, or a row's mask has more turns than rewards.
    """
    mask = np.asarray(response_mask)
    batch = mask.shape[0]
    if not len(group_ids) == len(turn_rewards) == len(turn_anchors) == batch:
        raise ValueError(f"{batch} rows but {len(group_ids)} group ids, {len(turn_rewards)} "
                         f"turn-reward lists and {len(turn_anchors)} turn-anchor lists")
    rewards, traj_ids, groups, anchors = [], [], [], []
    for row in range(batch):
        if len(turn_rewards[row]) != len(turn_anchors[row]):
            raise ValueError(f"row {row}: {len(turn_rewards[row])} rewards but "
                             f"{len(turn_anchors[row])} anchors")
        rewards.extend(float(r) for r in turn_rewards[row])
        anchors.extend(turn_anchors[row])
        traj_ids.extend([row] * len(turn_rewards[row]))
        groups.extend([group_ids[row]] * len(turn_rewards[row]))
    out = np.zeros(mask.shape, dtype=np.float64)
    if not rewards:
        return out
    step_advantages = gigpo_advantages(
        np.asarray(rewards), np.asarray(traj_ids), np.asarray([str(g) for g in groups]), anchors,
        gamma=gamma, step_weight=step_weight, normalize=normalize, episode_stats=episode_stats,
        similarity_threshold=similarity_threshold,
    )
    position = 0
    for row in range(batch):
        spans = turn_spans(mask[row])
        n_turns = len(turn_rewards[row])
        if len(spans) > n_turns:
            raise ValueError(f"row {row}: its response_mask has {len(spans)} answer spans but "
                             f"only {n_turns} turn rewards")
        for turn, (start, end) in enumerate(spans):
            out[row, start:end] = step_advantages[position + turn]
        position += n_turns
    return out
