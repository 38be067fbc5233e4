"""examples/trl_grpo.py runs TRL's GRPOTrainer to completion on an AgentGym env.

Slow: needs TRL (``pip install trl==1.16.0``, which adds ``datasets`` and pandas 3; CI
does not install it) and trains a 135M model on CPU for two steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import pytest

import agentgym  # noqa: F401
from algorithms.presets import PRESETS
from tests.conftest import REPO_ROOT

pytest.importorskip("trl", reason="TRL is not installed (pip install trl==1.16.0)")

pytestmark = pytest.mark.slow


def test_trl_grpo_example_trains_on_rewards_from_our_env(tmp_path):
    demo = PRESETS["cpu-demo"]
    log = tmp_path / "episodes.jsonl"
    steps, tasks, generations = 2, demo.env.num_groups, demo.env.group_size
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "examples/trl_grpo.py", "--steps", str(steps),
         "--output-dir", str(tmp_path / "out"), "--episodes-log", str(log)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=3000,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    logged = [json.loads(line) for line in run.stdout.splitlines() if line.startswith('{"step"')]
    assert [entry["step"] for entry in logged] == list(range(1, steps + 1))

    episodes = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(episodes) == steps * tasks * generations
    penalty = demo.env.penalty()
    for episode in episodes:  # replay every episode in gym.make: the rewards are the env's
        replay = gym.make(demo.env.env_id, **demo.env.kwargs())
        _, info = replay.reset(seed=episode["seed"])
        assert info["task_id"] == episode["task_id"]
        for action, env_reward, valid in zip(episode["actions"], episode["env_rewards"],
                                             episode["valid"], strict=True):
            _, reward, _, _, info = replay.step(action)
            assert reward == env_reward
            assert info["valid_action"] or not valid
        expected = sum(episode["env_rewards"]) - penalty * episode["valid"].count(False)
        assert episode["reward"] == pytest.approx(expected)
        replay.close()
    for entry in logged:  # TRL's logged reward is the mean of that step's episode returns
        rewards = [e["reward"] for e in episodes if e["step"] == entry["step"] - 1]
        assert entry["reward"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-4)
