"""examples/own_agent_agents_sdk.py (the OpenAI Agents SDK, ``openai-agents==0.24.0``, in
a venv of its own: ``.ci/venv_tests.sh agents``) plays KeyDoor through the gateway: with
an engine that answers as the env's expert it wins, every call is recorded with its ids
and parsed ``ok``, and the SDK's re-sent history joins every call to the one before.
``train.py --agent`` trains it on the tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("agents")

import agentgym  # noqa: E402,F401
from agentgym.tools import env_tools  # noqa: E402
from algorithms.agent.tool_calls import format_call  # noqa: E402
from algorithms.gateway.server import Gateway  # noqa: E402
from examples.own_agent import _demo_task  # noqa: E402
from examples.own_agent_agents_sdk import NUDGE, agent  # noqa: E402
from tests.algorithms.chat_cases import smollm2_tokenizer  # noqa: E402
from tests.algorithms.gateway.helpers import ScriptedEngine  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[2]

THINK = "Let me think."


def _task(seed: int, kwargs: dict) -> dict:
    env = gym.make("AgentGym/KeyDoor-v0", **kwargs)
    observation, info = env.reset(seed=seed)
    env.close()
    return {"env_id": "AgentGym/KeyDoor-v0", "env_kwargs": kwargs, "seed": seed,
            "task_id": str(info["task_id"]), "task": str(info.get("task", "")),
            "observation": str(observation)}


def _play(task: dict, think_every: int = 0):
    """The SDK agent against an engine that plays the env's expert (and, every
    ``think_every``-th call, answers text with no tool call)."""
    tokenizer = smollm2_tokenizer()
    mirror = gym.make(task["env_id"], **task["env_kwargs"])
    mirror.reset(seed=task["seed"], options={"task_id": task["task_id"]})
    tools = env_tools(task["env_id"], task["env_kwargs"])
    answered = []

    def expert(prompt):
        answered.append(prompt)
        if think_every and len(answered) % think_every == 0:
            text = THINK
        else:
            action = mirror.unwrapped.expert_action()
            mirror.step(action)
            text = format_call(*tools.to_call(action))
        return [*tokenizer(text, add_special_tokens=False)["input_ids"],
                tokenizer.eos_token_id]

    engine = ScriptedEngine(expert)
    with Gateway(engine, tokenizer, max_prompt_tokens=8192) as gateway:
        url = gateway.open_session(task)
        episode_return = agent(url, task)
        record = gateway.close_session(url)
    mirror.close()
    return episode_return, record, engine


def test_the_agents_sdk_agent_wins_with_an_expert_behind_the_gateway():
    task = _demo_task(5)
    episode_return, record, engine = _play(task)
    assert episode_return > 0
    assert record.task == task
    assert len(record.calls) >= 2 and all(c.tool_status == "ok" for c in record.calls)
    # Every call is recorded with the ids the engine was given and sampled.
    assert [(c.prompt_ids, c.completion_ids) for c in record.calls] == engine.given
    assert all(c.prompt_ids and c.completion_ids for c in record.calls)
    assert all(c.finish_reason == "tool_calls" for c in record.calls)
    # The SDK re-sends the chat as it was, with the gateway's answers: every call joins.
    assert record.breaks == 0 and record.joins == len(record.calls) - 1
    assert [c.bridge for c in record.calls] == ["fresh"] + ["extended"] * (len(record.calls) - 1)
    # What the SDK sent: the env's tools, made strict by the SDK.
    sent = record.calls[0].tools
    assert [t["function"]["name"] for t in sent] == list(env_tools(
        task["env_id"], task["env_kwargs"]).names)
    assert all(t["function"]["strict"] is True
               and t["function"]["parameters"]["additionalProperties"] is False for t in sent)


def test_a_text_answer_ends_the_sdk_run_and_the_next_run_still_joins():
    # 3 x 3 rooms with a key: the expert needs several calls, and every third answer is
    # text, which the SDK takes as the run's final output; the agent runs again on
    # result.to_input_list() plus a user turn.
    task = _task(3, {"width": 3, "height": 3, "key": True})
    episode_return, record, _ = _play(task, think_every=3)
    assert episode_return > 0
    statuses = [c.tool_status for c in record.calls]
    assert statuses.count("no_call") >= 2 and statuses.count("ok") >= 4
    assert all(s == ("no_call" if k % 3 == 2 else "ok") for k, s in enumerate(statuses))
    assert record.breaks == 0 and record.joins == len(record.calls) - 1
    after_text = record.calls[3].messages
    assert after_text[-2] == {"role": "assistant", "content": THINK}
    assert after_text[-1]["role"] == "user" and after_text[-1]["content"].startswith(NUDGE)


def test_train_py_trains_the_agents_sdk_agent(tmp_path):
    # One GiGPO iteration on the tiny model: each episode's SDK loop runs in a forked
    # worker process of the harness, against its own session URL.
    run = subprocess.run(
        [sys.executable, "train.py", "--preset", "cpu-demo-tools", "--model.name-or-path",
         "tiny", "--sft.no-warm-start", "--env.num-groups", "2", "--env.group-size", "2",
         "--env.max-steps", "3", "--run.iterations", "1", "--run.no-tensorboard",
         "--run.no-progress", "--run.output-dir", str(tmp_path), "--run.run-name", "sdk",
         "--agent", "examples.own_agent_agents_sdk:agent", "--agent.concurrency", "4"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = (tmp_path / "sdk" / "metrics.jsonl").read_text().splitlines()
    metrics = json.loads(lines[-1])
    assert metrics["agent/episodes"] == 4 and metrics["agent/failed"] == 0
    # The random model's answers are text or broken calls; the SDK re-sends each as it
    # came back, so every call after an episode's first still joins.
    assert metrics["agent/calls"] >= 4
    assert metrics["agent/joins"] == metrics["agent/calls"] - 4
    assert metrics["agent/breaks"] == 0
