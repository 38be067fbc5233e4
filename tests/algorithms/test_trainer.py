"""The training loop on the scripted env: outputs, checkpoints, exact resume, evaluation."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from agentgym.viewer.data import read_records  # noqa: E402
from algorithms.checkpoint import latest_checkpoint, load_checkpoint  # noqa: E402
from algorithms.config import replace  # noqa: E402
from algorithms.metrics import read_metrics  # noqa: E402
from algorithms.trainer import Trainer  # noqa: E402
from tests.algorithms.scripted_config import scripted_config  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402

NONDETERMINISTIC = ("time/", "throughput/")


def _deterministic(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if not k.startswith(NONDETERMINISTIC)}


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}


@pytest.mark.parametrize("algo", ["gigpo", "ppo"])
def test_resume_reproduces_the_next_iteration(tmp_path, algo):
    straight = Trainer(scripted_config(algo, iterations=2), policy=make_policy(seed=0),
                       run_dir=tmp_path / "straight")
    straight.run()
    first = Trainer(scripted_config(algo, iterations=1), policy=make_policy(seed=0),
                    run_dir=tmp_path / "resumed")
    first.run()
    resumed = Trainer(scripted_config(algo, iterations=2, resume=True),
                      policy=make_policy(seed=0), run_dir=tmp_path / "resumed")
    resumed.run()
    assert resumed.start_iteration == 1
    a = read_metrics(tmp_path / "straight" / "metrics.jsonl")
    b = read_metrics(tmp_path / "resumed" / "metrics.jsonl")
    assert [r["iteration"] for r in b] == [1, 2]
    assert _deterministic(a[1]) == pytest.approx(_deterministic(b[1]), abs=1e-6)
    wa, wb = _weights(straight), _weights(resumed)
    assert all(torch.allclose(wa[n], wb[n], atol=1e-6) for n in wa)
    assert straight.last_batch.actions == resumed.last_batch.actions
    # PPO's rollouts keep the prompts its GAE bootstraps from; GiGPO's keep none (no cost).
    if algo == "ppo":
        assert straight.last_batch.bootstrap_values is not None
    else:
        assert straight.last_batch.bootstrap_prompt_ids is None


def test_run_outputs_and_checkpoints(tmp_path):
    config = scripted_config("grpo", iterations=2, keep_checkpoints=1, eval_every=2)
    trainer = Trainer(config, policy=make_policy(seed=1), run_dir=tmp_path)
    metrics = trainer.run()
    for key in ("rollout/success", "rollout/return", "rollout/episode_length",
                "rollout/invalid_action_rate", "advantage/zero_share", "update/approx_kl",
                "update/clip_fraction", "update/entropy", "update/grad_norm", "time/rollout",
                "time/log_probs", "time/advantages", "time/update",
                "throughput/rollout_tokens_per_s", "eval/success"):
        assert key in metrics, key
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["algo"] == "grpo" and saved["estimator"] == "grpo"
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 2
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.is_dir())
    assert checkpoints == ["iter_000002"]  # keep_checkpoints=1
    payload = load_checkpoint(latest_checkpoint(tmp_path))
    assert payload["iteration"] == 2 and "optimizer" in payload["learner"]
    results = json.loads((tmp_path / "eval" / "iter_000002.json").read_text())
    assert results["episodes"] == 4 and set(results["per_task_type"]) == {"all"}
    assert 0.0 <= results["success"] <= 1.0


def test_eval_only_loads_the_checkpoint(tmp_path):
    trainer = Trainer(scripted_config("grpo", iterations=1, lr=5e-2),
                      policy=make_policy(seed=2), run_dir=tmp_path)
    trainer.run()
    trained = _weights(trainer)
    config = replace(scripted_config("grpo", iterations=1, eval_only=True,
                                     checkpoint=str(tmp_path)))
    evaluator = Trainer(config, policy=make_policy(seed=2), run_dir=tmp_path / "eval-run")
    metrics = evaluator.run()
    loaded = _weights(evaluator)
    assert all(torch.equal(trained[n], loaded[n]) for n in trained)
    assert "eval/success" in metrics
    assert (tmp_path / "eval-run" / "eval" / "iter_000001.json").exists()


def test_resume_refuses_a_different_config(tmp_path):
    Trainer(scripted_config("grpo", iterations=1), policy=make_policy(),
            run_dir=tmp_path).run()
    changed = replace(scripted_config("grpo", iterations=2, resume=True), learner={"lr": 0.5})
    with pytest.raises(ValueError, match="differs"):
        Trainer(changed, policy=make_policy(), run_dir=tmp_path).setup()


def _saved_before_bootstrapping(run_dir) -> None:
    """Make ``run_dir/config.json`` look written before today's config fields existed."""
    path = run_dir / "config.json"
    saved = json.loads(path.read_text())
    del saved["learner"]["bootstrap_truncated"]
    del saved["env"]["step_timeout"]
    del saved["run"]["rollout_retries"]
    path.write_text(json.dumps(saved))


@pytest.mark.parametrize("algo", ["gigpo", "grpo"])
def test_runs_saved_before_bootstrapping_resume(tmp_path, algo):
    """learner.bootstrap_truncated does nothing without a critic: an old GiGPO/GRPO run
    resumes with the default config."""
    Trainer(scripted_config(algo, iterations=1), policy=make_policy(),
            run_dir=tmp_path).run()
    _saved_before_bootstrapping(tmp_path)
    trainer = Trainer(scripted_config(algo, iterations=2, resume=True), policy=make_policy(),
                      run_dir=tmp_path)
    trainer.setup()
    assert trainer.start_iteration == 1
    trainer.close()


def test_an_old_ppo_run_is_refused_with_the_field_to_set(tmp_path):
    """An old PPO run did not bootstrap: resuming it with the new default would change
    its GAE, so it is refused, naming the field, and resumes with the old setting."""
    Trainer(scripted_config("ppo", iterations=1), policy=make_policy(),
            run_dir=tmp_path).run()
    _saved_before_bootstrapping(tmp_path)
    with pytest.raises(ValueError, match="learner.bootstrap_truncated"):
        Trainer(scripted_config("ppo", iterations=2, resume=True), policy=make_policy(),
                run_dir=tmp_path).setup()
    old = replace(scripted_config("ppo", iterations=2, resume=True),
                  learner={"bootstrap_truncated": False})
    trainer = Trainer(old, policy=make_policy(), run_dir=tmp_path)
    trainer.setup()
    assert trainer.start_iteration == 1
    trainer.close()


def test_seeds_are_independent_per_iteration():
    from algorithms.trainer import iteration_seed

    seeds = {iteration_seed(0, i, s) for i in range(50) for s in range(3)}
    assert len(seeds) == 150 and all(0 <= s < 2**31 for s in seeds)
    assert np.unique([iteration_seed(1, 0, 0), iteration_seed(0, 1, 0)]).size == 2


def test_step_timeout_reaches_the_vector_env(tmp_path):
    config = replace(scripted_config("grpo", iterations=1),
                     env={"backend": "subprocess", "num_workers": 1, "step_timeout": 7.5})
    trainer = Trainer(config, policy=make_policy(), run_dir=tmp_path)
    vec_env = trainer._make_vec_env(config.env.kwargs(), num_envs=2, group_size=2)
    try:
        assert vec_env.step_timeout == 7.5
    finally:
        vec_env.close()


def _crashing_trainer(tmp_path, algo: str, fail_at: int) -> Trainer:
    """A trainer whose 4 scripted envs (2 rooms: no episode ends before step 1) all crash
    on step ``fail_at``."""
    from agentgym.vector import TextVectorEnv
    from tests.algorithms.fakes import StepFailingEnv

    trainer = Trainer(scripted_config(algo, iterations=1), policy=make_policy(seed=1),
                      run_dir=tmp_path)
    trainer.setup()
    trainer.vec_env.close()
    trainer.vec_env = TextVectorEnv(
        [lambda: StepFailingEnv(fail_at=fail_at, num_rooms=2, hint=True, num_tasks=64)] * 4,
        group_size=2)
    return trainer


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_an_iteration_where_every_trajectory_crashes(tmp_path, algo):
    trainer = _crashing_trainer(tmp_path, algo, fail_at=1)
    before = _weights(trainer)
    metrics = trainer.run()
    assert metrics["rollout/env_errors"] == 4 and metrics["rollout/steps"] == 4
    assert metrics["rollout/env_error_steps"] == 4 and metrics["rollout/env_error_rate"] == 1
    assert np.isnan(metrics["rollout/success"])  # no episode has an outcome
    if algo == "grpo":  # no trajectory has an outcome: nothing to train on
        assert metrics["update/steps"] == 0 and "update/grad_norm" not in metrics
        assert metrics["time/update"] == 0.0  # every phase keeps its key
        assert all(torch.equal(before[n], w) for n, w in _weights(trainer).items())
    else:  # PPO trains on the step before each crash, bootstrapped
        assert metrics["update/steps"] == 4 and metrics["update/grad_norm"] > 0
        assert trainer.last_batch.bootstrap_rows.tolist() == [0, 1, 2, 3]
    logged = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert logged["rollout/env_errors"] == 4 and "rollout/success" not in logged
    # The checkpoint's meta.json stays strict JSON: no NaN token for the missing success.
    meta = (latest_checkpoint(tmp_path) / "meta.json").read_text()
    saved = json.loads(meta, parse_constant=lambda token: pytest.fail(f"{token} in JSON"))
    assert saved["metrics"]["rollout/success"] is None
    assert saved["metrics"]["rollout/env_errors"] == 4
    records = read_records(tmp_path / "records" / "train" / "iter_000001.jsonl.gz")
    # GRPO leaves the crashed episodes out of its update; PPO trains on them
    assert records and all(r["outcome"]["env_error"] for r in records)
    assert all(r["trained"] == (algo == "ppo") for r in records)
    assert all((step["advantage"] is None) == (algo == "grpo")
               for r in records for step in r["steps"])


def test_evaluation_counts_crashed_episodes_apart():
    from algorithms.trainer import _eval_rows, _eval_summary
    from tests.algorithms.fakes import CUT_TASKS, cut_rollout

    def _eval_results(batches):
        return _eval_summary(_eval_rows(batches))
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
        trainer._make_vec_env = lambda kwargs, num_envs, group_size: TextVectorEnv(
            [lambda: StepFailingEnv(fail_at=0, num_rooms=2, hint=True, num_tasks=64)]
            * num_envs, group_size=group_size)
        metrics = trainer.evaluate(1)
    finally:
        trainer.close()
    assert metrics["eval/env_errors"] == 4 and np.isnan(metrics["eval/success"])
    results = json.loads((tmp_path / "eval" / "iter_000001.json").read_text())
    assert results["episodes"] == 4 and results["env_errors"] == 4
    assert results["success"] is None and all(r["env_error"] for r in results["tasks"])


def test_a_rollout_without_steps_is_tried_again(tmp_path, monkeypatch):
    import algorithms.trainer as trainer_module
    from algorithms.rollout import NoStepsError

    calls = []
    real = trainer_module.collect_rollout

    def flaky(*args, **kwargs):
        calls.append(kwargs["seed"])
        if len(calls) == 1:
            raise NoStepsError("the rollout produced no steps: worker died")
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "collect_rollout", flaky)
    trainer = Trainer(scripted_config("grpo", iterations=1), policy=make_policy(),
                      run_dir=tmp_path)
    trainer.run()
    assert len(calls) == 2 and calls[0] != calls[1]  # a second try, with a new reset seed
    assert read_metrics(tmp_path / "metrics.jsonl")[-1]["update/steps"] > 0


def test_rollout_retries_run_out(tmp_path, monkeypatch):
    import algorithms.trainer as trainer_module
    from algorithms.rollout import NoStepsError

    calls = []

    def broken(*args, **kwargs):
        calls.append(kwargs["seed"])
        raise NoStepsError("the rollout produced no steps: worker died")

    monkeypatch.setattr(trainer_module, "collect_rollout", broken)
    config = replace(scripted_config("grpo", iterations=1), run={"rollout_retries": 1})
    with pytest.raises(NoStepsError):
        Trainer(config, policy=make_policy(), run_dir=tmp_path).run()
    assert len(calls) == 2


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_transcript_layout_trains_end_to_end(tmp_path, algo):
    config = replace(scripted_config(algo, iterations=1),
                     prompt={"layout": "transcript", "max_prompt_tokens": 300},
                     learner={"mini_batch_size": 2, "micro_batch_size": 1,
                              "entropy_coef": 0.01})  # weights move even at zero advantage
    policy = make_policy(seed=0)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    trainer = Trainer(config, policy=policy, run_dir=tmp_path)
    metrics = trainer.run()
    batch = trainer.last_batch
    assert batch.layout == "transcript" and batch.num_trajectories == 4
    # mini-batches count trajectories in this layout: 4 trajectories / 2
    assert metrics["update/optimizer_steps"] == 2
    assert metrics["update/update_tokens"] == float(batch.response_mask.sum())
    assert metrics["rollout/transcript_cut_rate"] == 0.0
    assert any(not torch.equal(before[n], p) for n, p in policy.model.named_parameters())
    if algo == "ppo":
        assert batch.values is not None and np.isfinite(batch.values).all()


def test_evaluation_rates_are_over_the_steps_of_the_episodes_that_ended():
    from algorithms.trainer import _crashed_eval_row, _eval_summary

    def row(length, format_errors, invalid):
        return {"task_id": "t", "task_type": "pick", "success": False, "return": 0.0,
                "length": length, "format_errors": format_errors,
                "invalid_actions": invalid, "env_error": False}

    results = _eval_summary([row(2, 1, 1), row(3, 0, 2), _crashed_eval_row("t")])
    assert results["format_error_rate"] == pytest.approx(1 / 5)
    assert results["invalid_action_rate"] == pytest.approx(3 / 5)
    assert _eval_summary([_crashed_eval_row("t")])["format_error_rate"] is None


def test_evaluation_before_training_is_logged_at_iteration_0(tmp_path):
    config = scripted_config("grpo", iterations=1, eval_every=1, eval_before_train=True)
    Trainer(config, policy=make_policy(seed=1), run_dir=tmp_path).run()
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [0, 1]
    assert "rollout/success" not in records[0]  # an evaluation, no training iteration
    for record in records:
        assert 0 <= record["eval/format_error_rate"] <= 1
        assert 0 <= record["eval/invalid_action_rate"] <= 1
    assert (tmp_path / "eval" / "iter_000000.json").exists()
    resumed = Trainer(scripted_config("grpo", iterations=2, eval_every=1, resume=True,
                                      eval_before_train=True),
                      policy=make_policy(seed=1), run_dir=tmp_path)
    resumed.run()  # a resumed run does not evaluate its start again
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1, 2]
