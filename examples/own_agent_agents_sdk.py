"""The agent of ``examples/own_agent.py`` written with the OpenAI Agents SDK instead of a
hand-made loop: the kind of loop ``train.py --agent`` trains (docs/own-agent.md).

Agents SDK version: written for and run with ``openai-agents==0.24.0`` (a virtual
environment of its own in CI, ``.ci/venv_tests.sh agents``). The SDK's
``OpenAIChatCompletionsModel`` talks to ``base_url`` through an ``AsyncOpenAI`` client,
with tracing off (its traces would go to OpenAI's servers). The env's tools
(:func:`agentgym.tools.env_tools`) become the agent's ``FunctionTool`` s, with the env's
own JSON schemas (the SDK's ``@function_tool`` builds a schema from a Python signature;
``FunctionTool`` takes one as it is). Each call the SDK runs becomes the env's action
(:meth:`~agentgym.tools.EnvTools.to_action`) and the env's reply is the tool's output.
The run stops when the env's episode ends (a ``tool_use_behavior`` function), and an
answer with no tool call, which the SDK takes as the run's final output, steps the env on
the empty action and gets one more user turn asking for a tool, as in the openai-SDK
example.

The contract: ``agent(base_url, task) -> float``, the episode's return. Run it on its own
(no training): it starts a gateway in front of the tiny smoke model (random weights, no
download) and plays one task of the cpu-demo's KeyDoor house::

    python examples/own_agent_agents_sdk.py --seed 3

or point it at any OpenAI-compatible server: ``--base-url http://host:port/v1``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
from agents import (
    Agent,
    FunctionTool,
    MaxTurnsExceeded,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    ToolsToFinalOutputResult,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

import agentgym  # noqa: F401  (registers the AgentGym/* ids)
from agentgym.tools import EnvTools, ToolCallError, env_tools

MAX_CALLS = 30
"""Model calls per episode at most (the env's own step limit usually ends it first)."""

SYSTEM = "You are an agent in a text environment. Act only by calling one of the tools."
NUDGE = "You called no tool. Call one of the tools."


class _Episode:
    """One env episode, stepped by the agent's tools."""

    def __init__(self, task: dict[str, Any]):
        self.kwargs = dict(task.get("env_kwargs") or {})
        self.env = gym.make(task["env_id"], **self.kwargs)
        self.tools: EnvTools = env_tools(task["env_id"], self.kwargs)
        self.observation, self.info = self.env.reset(
            seed=task.get("seed"), options={"task_id": task["task_id"]})
        self.total = 0.0
        self.done = False

    def call(self, name: str, arguments: str) -> str:
        """The env's reply to the tool call ``name(arguments)``: a bad call is the empty
        action (the env's invalid-action reply and step), with the error in front."""
        if self.done:
            return "The episode is over."
        try:
            return self.step(self.tools.to_action(name, json.loads(arguments or "{}")), "")
        except (ToolCallError, ValueError) as error:
            return self.step("", f"Error: {error}")

    def step(self, action: str, note: str) -> str:
        """Step the env on ``action``; its observation, ``note`` in front."""
        observation, reward, terminated, truncated, self.info = self.env.step(action)
        self.total += float(reward)
        self.done = bool(terminated or truncated)
        return f"{note}\n\n{observation}" if note else str(observation)

    def function_tools(self) -> list[FunctionTool]:
        """The env's tools as the SDK's tools: each call steps this episode."""
        def invoke(name: str):
            async def on_invoke(context: Any, arguments: str) -> str:
                return self.call(name, arguments)
            return on_invoke
        return [FunctionTool(name=schema["function"]["name"],
                             description=schema["function"].get("description", ""),
                             params_json_schema=schema["function"]["parameters"],
                             on_invoke_tool=invoke(schema["function"]["name"]))
                for schema in self.tools.schemas]

    def stop_when_done(self, context: RunContextWrapper[Any],
                       results: list[Any]) -> ToolsToFinalOutputResult:
        """The SDK's ``tool_use_behavior``: the run ends with the env's episode."""
        return ToolsToFinalOutputResult(is_final_output=self.done,
                                        final_output=str(self.total) if self.done else None)


async def play(base_url: str, task: dict[str, Any]) -> float:
    """Play ``task`` with the model behind ``base_url``; return the episode's return."""
    set_tracing_disabled(True)
    episode = _Episode(task)
    client = AsyncOpenAI(base_url=base_url, api_key="unused")
    try:
        agent = Agent(name="player", instructions=SYSTEM,
                      model=OpenAIChatCompletionsModel(model="policy", openai_client=client),
                      model_settings=ModelSettings(max_tokens=64),
                      tools=episode.function_tools(),
                      tool_use_behavior=episode.stop_when_done)
        text = episode.info.get("task", task.get("task", ""))
        history: str | list[Any] = f"Your task: {text}\n\nYou see: {episode.observation}"
        calls = 0
        while not episode.done and calls < MAX_CALLS:
            try:
                result = await Runner.run(agent, history, max_turns=MAX_CALLS - calls)
            except MaxTurnsExceeded:
                break
            calls += len(result.raw_responses)
            if episode.done:
                break
            # The run ended on an answer without a tool call: the SDK's final output, here
            # the empty action (as the openai-SDK example steps it), and one more user turn
            # on the same chat.
            history = [*result.to_input_list(),
                       {"role": "user", "content": episode.step("", NUDGE)}]
        return episode.total
    finally:
        await client.close()
        episode.env.close()


def agent(base_url: str, task: dict[str, Any]) -> float:
    """The contract's function: :func:`play`, run to its end."""
    return asyncio.run(play(base_url, task))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the task's reset seed")
    parser.add_argument("--base-url", default=None,
                        help="an OpenAI-compatible /v1 URL (default: a gateway in front of "
                             "the tiny smoke model)")
    args = parser.parse_args()
    # Run as a script, examples/ is on the path, not the checkout: the task comes from
    # the openai-SDK example, so both play the same house.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.own_agent import _demo_task

    task = _demo_task(args.seed)
    if args.base_url is not None:
        print(json.dumps({"task_id": task["task_id"], "return": agent(args.base_url, task)}))
        return

    import torch

    from algorithms.config import TrainConfig, replace
    from algorithms.engines.hf import HFEngine
    from algorithms.gateway.server import Gateway
    from algorithms.presets import PRESETS
    from algorithms.training.tiny_model import load_tiny_policy

    config = replace(PRESETS["cpu-demo-tools"], model={"name_or_path": "tiny"})
    assert isinstance(config, TrainConfig)
    policy = load_tiny_policy(config, torch.device("cpu"))
    engine = HFEngine(policy.model, policy.tokenizer)
    with Gateway(engine, policy.tokenizer, max_prompt_tokens=2048) as gateway:
        url = gateway.open_session(task)
        episode_return = agent(url, task)
        record = gateway.close_session(url)
    print(json.dumps({"task_id": task["task_id"], "return": episode_return,
                      "calls": len(record.calls), "joins": record.joins,
                      "breaks": record.breaks,
                      "tool_statuses": [call.tool_status for call in record.calls]}))


if __name__ == "__main__":
    main()
