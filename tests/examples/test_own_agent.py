"""examples/own_agent.py plays the cpu-demo's house through the gateway: with an engine
that answers as the env's expert it wins, every call is recorded, and each request is the
in-process tool-call prompt's one-step window."""

from __future__ import annotations

import gymnasium as gym

import agentgym  # noqa: F401
from agentgym.tools import env_tools
from algorithms.agent.tool_calls import format_call
from algorithms.agent.tool_prompts import observation_view, user_message
from algorithms.gateway.server import Gateway
from algorithms.presets import PRESETS
from examples import own_agent
from examples.own_agent import _demo_task, agent
from tests.algorithms.chat_cases import smollm2_tokenizer
from tests.algorithms.gateway.helpers import ScriptedEngine


def test_the_example_agent_wins_with_an_expert_behind_the_gateway():
    tokenizer = smollm2_tokenizer()
    task = _demo_task(1)  # three expert steps
    mirror = gym.make(task["env_id"], **task["env_kwargs"])
    now = mirror.reset(seed=task["seed"], options={"task_id": task["task_id"]})
    tools = env_tools(task["env_id"], task["env_kwargs"])
    config = PRESETS["cpu-demo-tools"].prompt
    views = []  # the in-process prompt's view before each step

    def expert(prompt):
        nonlocal now
        observation, info = now[0], now[-1]
        views.append(observation_view(str(observation), info["admissible_actions"], config))
        action = mirror.unwrapped.expert_action()
        now = mirror.step(action)
        text = format_call(*tools.to_call(action))
        return [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]

    with Gateway(ScriptedEngine(expert), tokenizer, max_prompt_tokens=4096) as gateway:
        url = gateway.open_session(task)
        episode_return = agent(url, task)
        record = gateway.close_session(url)
    mirror.close()
    assert episode_return > 0
    assert record.calls and all(c.tool_status == "ok" for c in record.calls)
    # a one-step window (own_agent.WINDOW): the second request extends the first, each
    # later one starts from the previous step's view, as the in-process window layout does
    assert len(record.calls) >= 3
    assert record.joins == 1 and record.breaks == len(record.calls) - 2
    assert all(len(call.messages) == (1 if k == 0 else 3)
               for k, call in enumerate(record.calls))
    for k, call in enumerate(record.calls):
        first = views[max(0, k - 1)]
        assert call.messages[0]["content"] == user_message(task["task"], first, config)
    assert record.task == task
    # each call shows the actions the env offers there: the door's room offers
    # "open door", which the model had no way to know of before (a measured failure,
    # docs/own-agent.md)
    shown = [call.messages[-1]["content"] for call in record.calls]
    assert all("Actions you can take now:\n" in text for text in shown)
    assert "open door" in shown[-1]


def test_the_example_agent_ends_its_episode_when_the_chat_outgrows_the_context(monkeypatch):
    """Keeping the whole chat (``WINDOW = None``), an answer with no tool call makes the
    chat grow by a nudge and the observation each turn; at the gateway's prompt limit the
    call gets a 400 (context_length_exceeded), and the agent returns the return so far
    instead of raising: the calls before it stay recorded, each under the limit."""
    monkeypatch.setattr(own_agent, "WINDOW", None)
    tokenizer = smollm2_tokenizer()
    task = _demo_task(5)
    answer = [*tokenizer("I am not sure.", add_special_tokens=False)["input_ids"],
              tokenizer.eos_token_id]
    limit = 700
    with Gateway(ScriptedEngine(lambda prompt: answer), tokenizer,
                 max_prompt_tokens=limit) as gateway:
        url = gateway.open_session(task)
        episode_return = agent(url, task)
        record = gateway.close_session(url)
    assert episode_return == 0.0
    assert 2 <= len(record.calls) < 30  # cut by the limit, not by MAX_TURNS
    assert all(len(call.prompt_ids) <= limit for call in record.calls)
    assert {call.tool_status for call in record.calls} == {"no_call"}
