"""The training loop on the scripted env: outputs, checkpoints, exact resume, evaluation."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from agentgym.viewer.data import read_records  # noqa: E402
from algorithms.agent.metrics import read_metrics  # noqa: E402
from algorithms.config import replace  # noqa: E402
from algorithms.runs.checkpoint import latest_checkpoint, load_checkpoint  # noqa: E402
from algorithms.training.trainer import Trainer  # noqa: E402
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
    assert straight.last_batch.log.actions == resumed.last_batch.log.actions
    # PPO's rollouts keep the prompts its GAE bootstraps from; GiGPO's keep none (no cost).
    if algo == "ppo":
        assert straight.last_batch.bootstrap_values is not None
    else:
        assert straight.last_batch.bootstrap_prompt_ids is None


def _door_trainer(tmp_path, algo: str, **learner) -> Trainer:
    """Three iterations on test_learning.py's door task (one-token actions: rewards and
    penalties vary from the first iteration, so advantages are not all 0)."""
    config = scripted_config(algo, iterations=3, num_groups=8, group_size=4)
    config = replace(config, generation={"max_new_tokens": 1}, prompt={"history_window": 0},
                     learner=learner)
    policy = make_policy(seed=0, hidden=64, action_tokens=True)
    name = "-".join([algo, *(f"{k}{v:g}" for k, v in learner.items())])
    trainer = Trainer(config, policy=policy, run_dir=tmp_path / name)
    trainer.run()
    return trainer


def test_gigpo_with_step_weight_0_trains_exactly_as_grpo(tmp_path):
    """omega = 0 leaves GiGPO's episode term alone (Eq. 8), GRPO's advantage: the same
    rollouts and weights, so a study's GRPO runs are its omega = 0 arm."""
    grpo = _door_trainer(tmp_path, "grpo")
    gigpo = _door_trainer(tmp_path, "gigpo", step_weight=0.0)
    assert grpo.last_batch.log.actions == gigpo.last_batch.log.actions
    a, b = _weights(grpo), _weights(gigpo)
    assert all(torch.equal(a[n], b[n]) for n in a)
    curves = [[r["advantage/std"] for r in read_metrics(t.run_dir / "metrics.jsonl")]
              for t in (grpo, gigpo)]
    assert curves[0] == curves[1] and min(curves[0]) > 0  # advantages that move weights
    moved = _weights(_door_trainer(tmp_path, "gigpo"))  # omega 1: the step term counts
    assert not all(torch.equal(a[n], moved[n]) for n in a)


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


@pytest.mark.parametrize("algo", ["gigpo", "ppo"])
def test_a_run_saved_before_todays_fields_is_refused_naming_them(tmp_path, algo):
    """No migration of old runs: resuming one whose config lacks today's fields is refused,
    each missing field named, and the run's files stay as they were."""
    Trainer(scripted_config(algo, iterations=1), policy=make_policy(),
            run_dir=tmp_path).run()
    _saved_before_bootstrapping(tmp_path)
    files = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match="missing: env.step_timeout, "
                                         "learner.bootstrap_truncated, run.rollout_retries"):
        Trainer(scripted_config(algo, iterations=2, resume=True), policy=make_policy(),
                run_dir=tmp_path).setup()
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == files


def _crashing_trainer(tmp_path, algo: str, fail_at: int) -> Trainer:
    """A trainer whose 4 scripted envs (2 rooms: no episode ends before step 1) all crash
    on step ``fail_at``."""
    from agentgym.vector import TextVectorEnv
    from tests.algorithms.fakes import StepFailingEnv

    def make_vec_env(kwargs, num_envs, group_size):
        return TextVectorEnv(
            [lambda: StepFailingEnv(fail_at=fail_at, num_rooms=2, hint=True, num_tasks=64)]
            * num_envs, group_size=group_size)

    trainer = Trainer(scripted_config(algo, iterations=1), policy=make_policy(seed=1),
                      make_vec_env=make_vec_env, run_dir=tmp_path)
    trainer.setup()
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


def test_a_run_with_nothing_to_train_on_stops_after_the_limit(tmp_path):
    """Every trajectory crashes on its second step: GRPO has nothing to train on, and
    after ``run.max_untrained_iterations`` such iterations the run stops with one line,
    without a checkpoint of the last one."""
    from agentgym.vector import TextVectorEnv
    from algorithms.training.trainer import UntrainedRunError
    from tests.algorithms.fakes import StepFailingEnv

    def make_vec_env(kwargs, num_envs, group_size):
        return TextVectorEnv(
            [lambda: StepFailingEnv(fail_at=1, num_rooms=2, hint=True, num_tasks=64)]
            * num_envs, group_size=group_size)

    config = scripted_config("grpo", iterations=5, max_untrained_iterations=2)
    trainer = Trainer(config, policy=make_policy(seed=1), make_vec_env=make_vec_env,
                      run_dir=tmp_path)
    with pytest.raises(UntrainedRunError) as stop:
        trainer.run()
    assert str(stop.value).startswith(
        "iterations 1-2: every trajectory ended on an env error (4 episodes in iteration 2), "
        "so nothing was trained on 2 times in a row (--run.max-untrained-iterations 2)")
    assert "\n" not in str(stop.value)
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]
    assert latest_checkpoint(tmp_path).name == "iter_000001"
    never = replace(config, run={"max_untrained_iterations": 0, "iterations": 3,
                                 "overwrite": True})
    metrics = Trainer(never, policy=make_policy(seed=1), make_vec_env=make_vec_env,
                      run_dir=tmp_path).run()
    assert metrics["update/steps"] == 0  # 0: the run goes on to the end


def test_cut_prompts_are_said_once_and_their_share_is_on_every_iteration_line(tmp_path,
                                                                             capsys):
    """60 tokens hold the scripted env's first prompt (50) but not a later one with its
    history (75-82): the run says so in one line naming the flag, and each iteration's
    line (a log file's, not a terminal's) gives the share it cut."""
    config = replace(scripted_config("grpo", iterations=2, progress=True),
                     prompt={"max_prompt_tokens": 60})
    Trainer(config, policy=make_policy(), run_dir=tmp_path).run()
    out = capsys.readouterr().out.splitlines()
    rates = [r["rollout/prompt_cut_rate"] for r in read_metrics(tmp_path / "metrics.jsonl")]
    assert all(0 < rate < 1 for rate in rates)
    notes = [line for line in out if line.startswith("[agentgym] prompts cut:")]
    assert notes == [
        f"[agentgym] prompts cut: {rates[0]:.0%} of the steps of iteration 1 did not fit "
        "--prompt.max-prompt-tokens 60 and lost their oldest history, then the start of the "
        "observation, then admissible actions; raise the flag (or lower "
        "--prompt.history-window) to keep them whole (each iteration's line gives the "
        "share: cut=)"]
    lines = [line for line in out if line.startswith("[agentgym] iteration ")]
    assert [f" cut={rate:.0%} | " in line for line, rate in zip(lines, rates, strict=True)] \
        == [True, True]
