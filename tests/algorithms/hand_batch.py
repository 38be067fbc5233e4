"""A :class:`~algorithms.agent.rollout.StepBatch` written by hand, for the advantage paths of the
learner (one-token prompts and responses: no model needed)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from algorithms.agent.step_batch import StepBatch, StepLog


def hand_batch(trajectories: Sequence[tuple[int, list[float], list[str], bool]],
               penalties: Sequence[list[float]] | None = None) -> StepBatch:
    """A batch of ``(group, env rewards, anchors, env_error)`` trajectories.

    Args:
        trajectories: one tuple per trajectory, its steps' env rewards and anchors in time
            order.
        penalties: optional per trajectory, each step's invalid-action penalty (0 on a
            valid step); ``rewards`` is then the env reward minus the penalty, and a step
            with a penalty is ``invalid``.
    """
    rows = [(t, g, r, a, e, s) for t, (g, rewards, anchors, e) in enumerate(trajectories)
            for s, (r, a) in enumerate(zip(rewards, anchors, strict=True))]
    n = len(rows)
    paid = (np.zeros(n) if penalties is None
            else np.array([p for per_traj in penalties for p in per_traj], dtype=np.float64))
    traj = np.array([row[0] for row in rows])
    last = np.ones(n, dtype=bool)
    last[:-1] = traj[1:] != traj[:-1]
    ones = np.ones((n, 1), dtype=np.int64)
    env_rewards = np.array([row[2] for row in rows], dtype=np.float64)
    return StepBatch(
        prompt_ids=ones, prompt_mask=ones, response_ids=ones, response_mask=ones,
        rewards=env_rewards - paid, env_rewards=env_rewards, penalties=paid,
        invalid=paid != 0, format_ok=np.ones(n, bool), valid_action=paid == 0,
        traj_ids=traj, group_ids=np.array([row[1] for row in rows]),
        anchors=tuple(row[3] for row in rows), step_index=np.array([row[5] for row in rows]),
        last_step=last, success=np.zeros(n, bool), truncated=np.zeros(n, bool),
        log=StepLog(task_ids=("t",) * n, task_types=("",) * n, actions=("a",) * n,
                    response_texts=("a",) * n),
        prompt_cut=np.zeros(n, bool),
        env_error=np.array([row[4] for row in rows]),
        env_errors=sum(e for *_, e in trajectories))
