"""DAPO's dynamic sampling for group estimators, as verl-agent's trainer runs it.

DAPO (Yu et al., 2025, arXiv:2503.14476) over-samples and drops the groups whose
trajectories all got the same return: their group-relative advantages are all zero, so
they only dilute the batch. verl-agent applies it to multi-turn agents
(``algorithm.filter_groups``, its "GiGPO w/ dynamic sampling" and DAPO examples) with
these semantics, which :func:`sample_until_full` follows:

- A group is dropped when the episode returns of its trajectories are all exactly equal
  (the env's rewards summed over the episode; the invalid-action penalty is charged later
  and does not count). Dropping a group drops every step of it; a kept group keeps all
  its steps (GiGPO's step groups stay whole).
- Fresh groups (new tasks) are rolled out until the kept groups fill the batch: at least
  ``num_groups`` groups (verl-agent counts ``train_batch_size * n`` trajectories, the same
  number when no env fails). The batch is not cut back: every kept group is trained on.
- At most ``max_rollouts`` rollouts per iteration, the first included
  (``max_num_gen_batches``). The rollout that reaches the cap is not filtered: all its
  groups are kept, the uniform ones included. With ``max_rollouts = 1`` nothing is ever
  dropped.

Here a trajectory that ended on an env error has no outcome (see
:mod:`algorithms.training.learner`): it is left out of the comparison, so a group is kept when the
returns of its finished trajectories differ (a group with fewer than two finished
trajectories is dropped; its advantages would be zero).

DAPO's own recipe (``recipe/dapo``) differs on two points, noted for reference: it cuts the
batch to exactly ``train_batch_size`` groups, and it stops with an error at the cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from algorithms.agent.step_batch import StepBatch, concat_batches

__all__ = ["DynamicSample", "sample_until_full", "varied_group_rows"]


def varied_group_rows(env_rewards: Any, traj_ids: Any, group_ids: Any,
                      env_error: Any = None) -> np.ndarray:
    """Which rows belong to a group whose trajectories' returns are not all equal.

    Args:
        env_rewards: (N,) float env rewards of the steps (no penalties).
        traj_ids: (N,) int trajectory ids.
        group_ids: (N,) int group ids, constant within a trajectory.
        env_error: optional (N,) bool, the row's trajectory ended on an env error (left out
            of the comparison).

    Returns:
        (N,) bool: True on every row of a group with at least two finished trajectories
        whose episode returns (sums of ``env_rewards``) are not all exactly equal.

    Raises:
        ValueError: on arrays of different lengths or non-finite rewards.
    """
    rewards = np.asarray(env_rewards, dtype=np.float64)
    traj_ids = np.asarray(traj_ids)
    group_ids = np.asarray(group_ids)
    n = rewards.shape[0]
    errors = np.zeros(n, dtype=bool) if env_error is None else np.asarray(env_error, dtype=bool)
    if rewards.ndim != 1 or not traj_ids.shape == group_ids.shape == errors.shape == (n,):
        raise ValueError(f"need (N,) arrays of one length: env_rewards {rewards.shape}, "
                         f"traj_ids {traj_ids.shape}, group_ids {group_ids.shape}, "
                         f"env_error {errors.shape}")
    if not np.isfinite(rewards).all():
        raise ValueError("env_rewards must be finite")
    if n == 0:
        return np.zeros(0, dtype=bool)
    trajs, traj_index = np.unique(traj_ids, return_inverse=True)
    returns = np.bincount(traj_index, weights=rewards, minlength=trajs.size)
    traj_group = np.empty(trajs.size, dtype=group_ids.dtype)
    traj_group[traj_index] = group_ids
    finished = np.ones(trajs.size, dtype=bool)
    finished[traj_index[errors]] = False
    groups, group_of_traj = np.unique(traj_group, return_inverse=True)
    low = np.full(groups.size, np.inf)
    high = np.full(groups.size, -np.inf)
    np.minimum.at(low, group_of_traj[finished], returns[finished])
    np.maximum.at(high, group_of_traj[finished], returns[finished])
    varied = high > low  # False for groups with fewer than two finished trajectories
    return varied[group_of_traj[traj_index]]


@dataclass(frozen=True)
class DynamicSample:
    """The outcome of :func:`sample_until_full`.

    Attributes:
        batch: the groups kept from every rollout (the last rollout's all, when it hit
            the cap), as one unscored batch; rollout ``r``'s group ``g`` has group id
            ``r * num_groups + g``.
        sampled: every rollout, unfiltered, numbered the same way (``batch``'s rows are
            rows of it): what the rollout metrics and records describe.
        rollouts: rollouts made (1 to ``max_rollouts``).
        groups_kept: groups in ``batch``.
        groups_sampled: groups in ``sampled`` (that made at least one step).
    """

    batch: StepBatch
    sampled: StepBatch
    rollouts: int
    groups_kept: int
    groups_sampled: int


def _count_groups(batch: StepBatch) -> int:
    return int(np.unique(batch.group_ids).size)


def sample_until_full(rollout: Callable[[int], StepBatch], *, num_groups: int,
                      group_size: int, max_rollouts: int, pad_id: int) -> DynamicSample:
    """Roll out, drop uniform groups, and roll out again until ``num_groups`` are kept.

    Args:
        rollout: ``rollout(r)`` gives the ``r``-th rollout (0-based) of the iteration: an
            unscored batch of fresh groups with group ids in ``[0, num_groups)``.
        num_groups: groups a batch needs (``env.num_groups``).
        group_size: trajectories per group (trajectory ids are in
            ``[0, num_groups * group_size)``).
        max_rollouts: the cap on rollouts, the first included (>= 1).
        pad_id: the tokenizer's pad id (batches are re-padded when joined).

    Returns:
        A :class:`DynamicSample` (module docstring for the rules).

    Raises:
        ValueError: ``num_groups`` or ``max_rollouts`` below 1.
    """
    if num_groups < 1 or max_rollouts < 1:
        raise ValueError(f"num_groups and max_rollouts must be >= 1, got {num_groups}, "
                         f"{max_rollouts}")
    kept: list[StepBatch] = []
    sampled: list[StepBatch] = []
    groups_kept = 0
    while groups_kept < num_groups and len(sampled) < max_rollouts:
        batch = rollout(len(sampled))
        sampled.append(batch)
        if len(sampled) == max_rollouts:  # the last allowed rollout is kept whole
            keep = batch
        else:
            rows = varied_group_rows(batch.env_rewards, batch.traj_ids, batch.group_ids,
                                     batch.env_error)
            keep = batch.select(np.flatnonzero(rows))
        kept.append(keep)
        groups_kept += _count_groups(keep)
    offsets = [r * num_groups for r in range(len(sampled))]
    joined = concat_batches(kept, offsets, group_size, pad_id)
    everything = concat_batches(sampled, offsets, group_size, pad_id)
    return DynamicSample(batch=joined, sampled=everything, rollouts=len(sampled),
                         groups_kept=groups_kept, groups_sampled=_count_groups(everything))
