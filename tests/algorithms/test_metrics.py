"""Metrics on hand-built step batches; checkpoint files."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from algorithms.agent.metrics import (  # noqa: E402
    advantage_metrics,
    rollout_metrics,
    step_group_metrics,
    trajectory_table,
)
from algorithms.agent.step_batch import StepBatch, StepLog  # noqa: E402


def _batch() -> StepBatch:
    # traj 0: 2 steps, success, env rewards 0 + 10, one invalid step; traj 1: 1 step.
    n = 3
    return StepBatch(
        prompt_ids=np.ones((n, 4), dtype=np.int64), prompt_mask=np.ones((n, 4), dtype=np.int64),
        response_ids=np.ones((n, 2), dtype=np.int64),
        response_mask=np.array([[1, 1], [1, 0], [1, 1]]),
        rewards=np.array([-0.1, 10.0, 0.0]), env_rewards=np.array([0.0, 10.0, 0.0]),
        penalties=np.array([0.1, 0.0, 0.0]),
        invalid=np.array([True, False, False]), format_ok=np.array([False, True, True]),
        valid_action=np.array([True, True, True]), traj_ids=np.array([0, 0, 1]),
        group_ids=np.array([0, 0, 0]), anchors=("a", "b", "a"),
        step_index=np.array([0, 1, 0]), last_step=np.array([False, True, True]),
        success=np.array([True, True, False]), truncated=np.array([False, False, True]),
        log=StepLog(task_ids=("t", "t", "t"), task_types=("pick", "pick", "pick"),
                    actions=("x", "y", "z"), response_texts=("x", "y", "z")),
        prompt_cut=np.array([False, True, False]), env_error=np.zeros(n, dtype=bool),
    )


def test_trajectory_table_and_rollout_metrics():
    table = trajectory_table(_batch())
    np.testing.assert_array_equal(table["returns"], [10.0, 0.0])
    np.testing.assert_allclose(table["penalized_returns"], [9.9, 0.0])
    np.testing.assert_array_equal(table["lengths"], [2, 1])
    np.testing.assert_array_equal(table["format_errors"], [1, 0])
    np.testing.assert_array_equal(table["invalid_actions"], [1, 0])
    metrics = rollout_metrics(_batch())
    assert metrics["rollout/success"] == 0.5 and metrics["rollout/success/pick"] == 0.5
    assert metrics["rollout/return"] == 5.0 and metrics["rollout/episode_length"] == 1.5
    assert metrics["rollout/invalid_action_rate"] == pytest.approx(1 / 3)
    assert metrics["rollout/prompt_cut_rate"] == pytest.approx(1 / 3)
    assert metrics["rollout/response_tokens"] == pytest.approx(5 / 3)
    assert metrics["rollout/env_errors"] == 0 and metrics["rollout/env_error_rate"] == 0.0


def test_crashed_episodes_are_counted_apart_not_as_failures():
    import dataclasses

    # Trajectory 1 (one step, not a success) ended on an env error; two more episodes
    # crashed before making a step (their reset or first step failed).
    batch = dataclasses.replace(_batch(), env_error=np.array([False, False, True]),
                                env_errors=3, env_error_steps=2)
    assert trajectory_table(batch)["env_error"].tolist() == [False, True]
    metrics = rollout_metrics(batch)
    assert metrics["rollout/success"] == 1.0 and metrics["rollout/success/pick"] == 1.0
    assert metrics["rollout/return"] == 10.0 and metrics["rollout/episode_length"] == 2.0
    assert metrics["rollout/penalized_return"] == pytest.approx(9.9)
    assert metrics["rollout/env_errors"] == 3 and metrics["rollout/env_error_steps"] == 2
    assert metrics["rollout/env_error_rate"] == pytest.approx(3 / 4)  # 2 in the batch + 2
    # Per-step rates still cover every step in the batch.
    assert metrics["rollout/invalid_action_rate"] == pytest.approx(1 / 3)
    assert metrics["rollout/steps"] == 3 and metrics["rollout/trajectories"] == 2

    none_ended = dataclasses.replace(batch, env_error=np.ones(3, dtype=bool), env_errors=4)
    metrics = rollout_metrics(none_ended)
    assert np.isnan(metrics["rollout/success"]) and np.isnan(metrics["rollout/return"])
    assert "rollout/success/pick" not in metrics
    assert metrics["rollout/env_error_rate"] == 1.0


def test_step_group_shares_are_weighted_by_steps():
    # sizes: group 0 has 1 step, group 1 has 3, group 2 has 12
    ids = np.array([0] + [1] * 3 + [2] * 12)
    metrics = step_group_metrics(ids)
    assert metrics["advantage/step_group_share/1"] == pytest.approx(1 / 16)
    assert metrics["advantage/step_group_share/2-4"] == pytest.approx(3 / 16)
    assert metrics["advantage/step_group_share/10-19"] == pytest.approx(12 / 16)
    assert metrics["advantage/step_group_share/20+"] == 0.0
    assert metrics["advantage/step_group_size_mean"] == pytest.approx((1 + 9 + 144) / 16)


def test_zero_advantage_share():
    assert advantage_metrics(np.array([0.0, 1e-12, 0.5, -0.5]))["advantage/zero_share"] == 0.5
