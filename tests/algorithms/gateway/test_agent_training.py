"""``train.py --agent``: a user's loop written with the ``openai`` SDK trains the tiny model
through the gateway (the cpu-demo house in the tool-call format), and what goes wrong in
a loop is counted, never fatal, unless every episode fails."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

import train

pytest.importorskip("openai")

LOOPS = "tests.algorithms.gateway.agent_loops"
REPO = Path(__file__).parents[3]
SMOKE = ("--preset", "cpu-demo-tools", "--model.name-or-path", "tiny", "--sft.no-warm-start",
         "--env.num-groups", "2", "--env.group-size", "2", "--env.max-steps", "3",
         "--run.no-tensorboard", "--run.no-progress", "--agent.concurrency", "4")


class RecordingEngine:
    """The run's engine, with every (prompt, response, log-probs) it sampled."""

    def __init__(self, engine):
        self.engine = engine
        self.sampled: list[tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]] = []

    @property
    def top_p(self):
        return self.engine.top_p

    @top_p.setter
    def top_p(self, value):
        self.engine.top_p = value

    def generate(self, prompts, **kwargs):
        responses = self.engine.generate(prompts, **kwargs)
        for prompt, response in zip(prompts, responses, strict=True):
            self.sampled.append((tuple(prompt), tuple(response),
                                 tuple(getattr(response, "log_probs", None) or ())))
        return responses

    def __getattr__(self, name):
        return getattr(self.engine, name)


def test_two_gigpo_iterations_train_exactly_the_ids_the_engine_sampled(
        tmp_path, monkeypatch, capsys):
    """Every row the update trained on is one model call, its prompt and response the ids
    the engine was given and sampled for it (to the id), its behaviour log-probs the
    engine's; the calls of a growing chat join; the records show each call."""
    import algorithms.training.trainer as trainer_module
    from algorithms.training.trainer import Trainer

    engines: list[RecordingEngine] = []
    real = trainer_module.make_run_engine

    def recording(*args, **kwargs):
        engines.append(RecordingEngine(real(*args, **kwargs)))
        return engines[-1]

    monkeypatch.setattr(trainer_module, "make_run_engine", recording)
    loud = [flag for flag in SMOKE if flag != "--run.no-progress"]  # the iteration lines
    config = train.parse_config([*loud, "--run.iterations", "2", "--run.output-dir",
                                 str(tmp_path), "--agent", f"{LOOPS}:keydoor"])
    trainer = Trainer(config)
    metrics = trainer.run()
    out = capsys.readouterr().out
    assert metrics["agent/episodes"] == 4 and metrics["agent/failed"] == 0
    assert metrics["update/steps"] == metrics["agent/calls"] > 0
    # the loop's chat grows by the assistant message and the tool's reply: every later
    # call extends the one before, to the id
    assert metrics["agent/joins"] == metrics["agent/calls"] - 4 and metrics["agent/breaks"] == 0
    assert "iteration 2/2: success=" in out and "failed=0/4" in out
    assert f"joins/breaks={metrics['agent/joins']:.0f}/0" in out
    batch = trainer.last_batch
    assert batch.layout == "transcript" and metrics["agent/transcript"] == 1
    sampled = {(p, r): lp for p, r, lp in engines[0].sampled}
    last_iteration = engines[0].sampled[-len(batch):]
    rows = set()
    for row in range(len(batch)):
        prompt = tuple(batch.prompt_ids[row][batch.prompt_mask[row] == 1].tolist())
        response = tuple(batch.response_ids[row][batch.response_mask[row] == 1].tolist())
        assert (prompt, response) in sampled
        n = len(response)
        assert batch.behaviour_log_probs[row][:n].tolist() == pytest.approx(
            list(sampled[(prompt, response)]), abs=1e-6)
        rows.add((prompt, response))
    assert rows == {(p, r) for p, r, _ in last_iteration}  # every sampled call, once
    run_dir = trainer.run_dir
    with gzip.open(run_dir / "records" / "train" / "iter_000002.jsonl.gz", "rt") as lines:
        records = [json.loads(line) for line in lines][1:]
    step = records[0]["steps"][1]
    assert step["call"]["joined"] is True and step["call"]["anchor_from"] == "default"
    assert step["call"]["messages"][0]["role"] in ("tool", "user")
    assert step["call"]["response"]["role"] == "assistant"


def test_failed_episodes_are_left_out_and_counted(tmp_path, monkeypatch, capsys):
    """Of 4 episodes, one raises, one hangs past the timeout and one returns a string:
    the run goes on, on the fourth alone, and says what failed."""
    monkeypatch.setenv("FLAKY_DIR", str(tmp_path))
    loud = [flag for flag in SMOKE if flag != "--run.no-progress"]  # the iteration lines
    metrics = train.main([*loud, "--algo", "grpo", "--run.iterations", "1",
                          "--run.output-dir", str(tmp_path / "runs"), "--agent",
                          f"{LOOPS}:flaky", "--agent.timeout", "20"])
    assert (metrics["agent/exception"], metrics["agent/timeout"], metrics["agent/bad_result"],
            metrics["agent/failed"]) == (1, 1, 1, 3)
    assert metrics["rollout/trajectories"] == 1
    out = capsys.readouterr().out
    assert ("[agentgym] iteration 1: left out of the update: 3 of 4 episodes (1 bad_result, "
            "1 exception, 1 timeout); the first: ") in out


def test_a_run_whose_every_episode_fails_exits_1_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "train.py", *SMOKE, "--run.iterations", "1", "--run.output-dir",
         str(tmp_path), "--agent", f"{LOOPS}:raises"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"train.py: error: iteration 1: every episode of --agent "
                               f"{LOOPS}:raises failed, 4 of 4 episodes (4 exception); the "
                               "first: RuntimeError: my loop broke (at ")


def test_tasks_from_a_file_reach_the_loop_as_written(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"task": "say something long", "task_id": "a"}\n'
                     '{"task": "and again", "task_id": "b"}\n')
    metrics = train.main([*SMOKE, "--algo", "rloo", "--run.iterations", "1",
                          "--run.output-dir", str(tmp_path / "runs"), "--agent",
                          f"{LOOPS}:one_call", "--agent.tasks", str(tasks)])
    assert metrics["agent/episodes"] == 4 and metrics["agent/calls"] == 4
    assert metrics["agent/joins"] == metrics["agent/breaks"] == 0


def test_an_agent_that_does_not_import_is_one_line_before_the_model_loads(tmp_path):
    result = subprocess.run(
        [sys.executable, "train.py", *SMOKE, "--run.output-dir", str(tmp_path), "--agent",
         "no_such_module:agent"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == ["train.py: error: --agent no_such_module:agent: no module named "
                     f"'no_such_module' (looked in the current folder {REPO} and on sys.path)"]
