"""Held-out evaluation (algorithms.agent.evaluation): crashed episodes counted apart."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("transformers")

from algorithms.training.trainer import Trainer  # noqa: E402
from tests.algorithms.scripted_config import scripted_config  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402


def test_evaluation_counts_crashed_episodes_apart():
    from algorithms.agent.evaluation import eval_rows, eval_summary
    from tests.algorithms.fakes import CUT_TASKS, cut_rollout

    def _eval_results(batches):
        return eval_summary(eval_rows(batches))
    from tests.algorithms.tiny import make_tokenizer

    tokenizer = make_tokenizer()
    tasks = [CUT_TASKS[0]] * 2 + [CUT_TASKS[1]] * 2
    # Trajectory 0 wins, 1 and 3 fail; 2 crashes on its step 1, or on its step 0 (no
    # steps at all).
    for fail_at in (1, 0):
        results = _eval_results([(cut_rollout(tokenizer, fail_at=fail_at), tasks)])
        assert results["episodes"] == 4 and results["env_errors"] == 1
        assert [r["env_error"] for r in results["tasks"]] == [False, False, True, False]
        assert [r["task_id"] for r in results["tasks"]] == tasks
        assert results["success"] == pytest.approx(1 / 3)
        assert results["per_task_type"]["all"]["episodes"] == 3
    # Only the chunk's first trajectories are the requested tasks (the rest pad it).
    results = _eval_results([(cut_rollout(tokenizer, fail_at=0), tasks[:3])])
    assert results["episodes"] == 3 and results["env_errors"] == 1
    assert results["success"] == pytest.approx(1 / 2)
    batch = cut_rollout(tokenizer, fail_at=1)
    all_crashed = dataclasses.replace(batch, env_error=np.ones(len(batch), dtype=bool))
    crashed = _eval_results([(all_crashed, tasks)])
    assert crashed["success"] is None and crashed["env_errors"] == 4
    assert crashed["per_task_type"] == {}


def test_evaluation_where_every_episode_crashes_at_once(tmp_path):
    """A chunk of evaluation episodes that all fail in their first step (say their only
    worker died) is counted as env errors; the evaluation, and so the run, goes on."""
    from agentgym.vector import TextVectorEnv
    from tests.algorithms.fakes import StepFailingEnv

    trainer = Trainer(scripted_config("grpo", iterations=1), policy=make_policy(seed=1),
                      run_dir=tmp_path)
    trainer.setup()
    try:
        trainer.make_vec_env = lambda kwargs, num_envs, group_size: TextVectorEnv(
            [lambda: StepFailingEnv(fail_at=0, num_rooms=2, hint=True, num_tasks=64)]
            * num_envs, group_size=group_size)
        metrics = trainer.evaluate(1)
    finally:
        trainer.close()
    assert metrics["eval/env_errors"] == 4 and np.isnan(metrics["eval/success"])
    results = json.loads((tmp_path / "eval" / "iter_000001.json").read_text())
    assert results["episodes"] == 4 and results["env_errors"] == 4
    assert results["success"] is None and all(r["env_error"] for r in results["tasks"])


def test_evaluation_rates_are_over_the_steps_of_the_episodes_that_ended():
    from algorithms.agent.evaluation import _crashed_eval_row, eval_summary

    def row(length, format_errors, invalid):
        return {"task_id": "t", "task_type": "pick", "success": False, "return": 0.0,
                "length": length, "format_errors": format_errors,
                "invalid_actions": invalid, "env_error": False}

    results = eval_summary([row(2, 1, 1), row(3, 0, 2), _crashed_eval_row("t")])
    assert results["format_error_rate"] == pytest.approx(1 / 5)
    assert results["invalid_action_rate"] == pytest.approx(3 / 5)
    assert eval_summary([_crashed_eval_row("t")])["format_error_rate"] is None


@pytest.mark.parametrize("order", ["first", "spread"])
def test_evaluation_plays_the_tasks_of_its_task_order(tmp_path, order):
    """``env.task_order``: the first ``eval_episodes`` tasks, or ones spread over the list."""
    import gymnasium as gym

    from algorithms.agent.task_choice import choose_task_ids
    from algorithms.config import replace

    config = replace(scripted_config("grpo", iterations=1), env={"task_order": order})
    env = gym.make(config.env.env_id, **config.env.eval_kwargs())
    all_ids = list(env.unwrapped.task_ids)
    env.close()
    expected = {"first": all_ids[:4], "spread": all_ids[::16]}[order]
    assert choose_task_ids(all_ids, 4, order) == expected  # 64 tasks
    trainer = Trainer(config, policy=make_policy(seed=1), run_dir=tmp_path)
    trainer.setup()
    try:
        trainer.evaluate(1)
    finally:
        trainer.close()
    results = json.loads((tmp_path / "eval" / "iter_000001.json").read_text())
    assert [r["task_id"] for r in results["tasks"]] == expected
