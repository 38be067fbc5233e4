"""examples/trl_tools.py: an AgentGym env as TRL's ``environment_factory`` class, whose
methods are the env's own tools; and TRL's GRPOTrainer training through it (slow, in the
TRL venv of ``.ci/run``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import gymnasium as gym
import pytest

import agentgym  # noqa: F401
from agentgym.tools import env_tools
from examples.trl_tools import DEMO, tool_env_class
from tests.conftest import REPO_ROOT


def test_the_env_class_has_one_method_per_tool_with_the_envs_schema():
    from transformers.utils import get_json_schema

    kwargs = DEMO.env.kwargs()
    cls = tool_env_class(DEMO.env.env_id, kwargs)
    for schema in env_tools(DEMO.env.env_id, kwargs).schemas:
        function = dict(schema["function"])
        made = get_json_schema(getattr(cls, function["name"]))["function"]
        assert made["description"] == function["description"]
        assert made["parameters"]["properties"] == function["parameters"]["properties"]
        assert made["parameters"].get("required", []) == function["parameters"]["required"]


def test_calls_play_the_env_and_the_reward_is_the_penalized_return():
    kwargs = DEMO.env.kwargs()
    log: list = []
    env = tool_env_class(DEMO.env.env_id, kwargs, log)()
    text = env.reset(task_id="keydoor-0003")
    assert "Your task: " in text and "You see: " in text
    expert = env.env.unwrapped
    tools = env_tools(DEMO.env.env_id, kwargs)
    assert "Error: the argument 'direction' of go must be one of" in env.go(direction="up")
    while not env.done:
        name, arguments = tools.to_call(expert.expert_action())
        reply = getattr(env, name)(**arguments)
    assert reply.endswith("The episode is over.")
    assert env.get_reward() == pytest.approx(1.0 - env.penalty)  # one invalid call
    assert log[0]["valid"][0] is False and all(log[0]["valid"][1:])
    assert env.open_door() == "The episode is over: make no more calls."


@pytest.mark.slow
def test_trl_trains_through_the_envs_tools(tmp_path):
    if importlib.util.find_spec("trl") is None:
        pytest.skip("TRL is not installed (pip install trl==1.16.0; the TRL venv of .ci/run)")
    log = tmp_path / "episodes.jsonl"
    steps, tasks, generations = 2, DEMO.env.num_groups, DEMO.env.group_size
    environ = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "examples/trl_tools.py", "--steps", str(steps), "--output-dir",
         str(tmp_path / "out"), "--episodes-log", str(log)],
        cwd=REPO_ROOT, env=environ, capture_output=True, text=True, timeout=3000)
    assert run.returncode == 0, run.stderr[-4000:]
    logged = [json.loads(line) for line in run.stdout.splitlines() if line.startswith('{"step"')]
    assert [entry["step"] for entry in logged] == list(range(1, steps + 1))
    episodes = [json.loads(line) for line in log.read_text().splitlines()]
    # TRL builds one probe instance and pools the rest: each rollout resets one episode
    assert len(episodes) == steps * tasks * generations
    penalty = DEMO.env.penalty()
    for episode in episodes:  # every call's action replayed in gym.make gives its reward
        replay = gym.make(DEMO.env.env_id, **DEMO.env.kwargs())
        replay.reset(options={"task_id": episode["task_id"]})
        for action, env_reward in zip(episode["actions"], episode["env_rewards"], strict=True):
            assert replay.step(action)[1] == env_reward
        replay.close()
        expected = sum(episode["env_rewards"]) - penalty * episode["valid"].count(False)
        assert episode["reward"] == pytest.approx(expected)
    print(run.stdout.splitlines()[-1])
