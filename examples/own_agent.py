"""A tool-calling agent of your own, written with the openai SDK, that plays a bundled
env through its tools: the kind of loop ``train.py --agent`` trains (docs/own-agent.md).

The contract: ``agent(base_url, task) -> float``. ``base_url`` is an OpenAI-compatible
endpoint (the gateway's session URL when training; any server otherwise); ``task`` is the
task dict (``env_id``, ``env_kwargs``, ``seed``, ``task_id``, ``task``, ...). The agent
builds the env itself, resets it on the task, and plays it: the env's tools go in the
request, each tool call the model makes becomes the env's action, the env's reply comes
back as the tool message. It returns the episode's return; a chat that outgrows the
server's context (a 400 with ``code`` ``context_length_exceeded``) ends the episode with
the return so far, so that the episode still trains, where any other error raises.

Run it on its own (no training): it starts a gateway in front of the tiny smoke model
(random weights, no download) and plays one task of the cpu-demo's KeyDoor house::

    python examples/own_agent.py --seed 3

or point it at any OpenAI-compatible server: ``--base-url http://host:port/v1``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import gymnasium as gym
import openai

import agentgym  # noqa: F401  (registers the AgentGym/* ids)
from agentgym.tools import ToolCallError, env_tools

MAX_TURNS = 30
"""Model calls per episode at most (the env's own step limit usually ends it first)."""

FIRST = ("You are an agent acting in a text environment through tools.\nYour task: {task}"
         "\n\nYou see: {seen}\n\nCall exactly one tool.")
"""The first message. No system message of its own (the chat template writes the tools
there). The phrasing is that of AgentGym's in-process tool-call prompt, because the
``cpu-demo-tools`` warm start was trained on it. SmolLM2-135M's SFT did not carry over to
other phrasing: through an earlier version of this loop it never called ``open_door``
(docs/own-agent.md). A loop of your own trains from a warm start made on its own prompts,
or from none."""


WINDOW = 1
"""Past steps the chat keeps: the request holds the first message (with the view of the
oldest kept step) and the last ``WINDOW`` exchanges, as AgentGym's in-process window
layout does (``prompt.history_window``). The ``cpu-demo-tools`` warm start was trained on
one-step windows; through a chat that kept every step it opened the door in none of 54
calls in the door's room (docs/own-agent.md). ``None`` keeps the whole chat."""


def _shown(observation: Any, info: dict[str, Any]) -> str:
    """What the loop tells the model after a reset or a step: the observation, and the
    actions the env offers there when it lists them (KeyDoor's ``open door`` appears
    only in the door's room; its observation does not name it)."""
    actions = info.get("admissible_actions")
    return f"{observation}\n\nActions you can take now:\n" + "\n".join(actions) if actions \
        else str(observation)


def agent(base_url: str, task: dict[str, Any]) -> float:
    """Play ``task`` with the model behind ``base_url``; return the episode's return."""
    client = openai.OpenAI(base_url=base_url, api_key="unused")
    kwargs = dict(task.get("env_kwargs") or {})
    env = gym.make(task["env_id"], **kwargs)
    tools = env_tools(task["env_id"], kwargs)
    try:
        observation, info = env.reset(seed=task.get("seed"),
                                      options={"task_id": task["task_id"]})
        goal = info.get("task", task.get("task", ""))
        views = [_shown(observation, info)]  # the view before each step
        exchanges: list[list[dict[str, Any]]] = []  # each step's answer and reply
        total = 0.0
        for _ in range(MAX_TURNS):
            start = 0 if WINDOW is None else max(0, len(exchanges) - WINDOW)
            messages = [{"role": "user", "content": FIRST.format(task=goal, seen=views[start])}]
            messages += [message for exchange in exchanges[start:] for message in exchange]
            try:
                reply = client.chat.completions.create(model="policy", messages=messages,
                                                       tools=tools.schemas, max_tokens=64)
            except openai.BadRequestError as error:
                if error.code == "context_length_exceeded":
                    break  # the chat outgrew the context: the episode ends here, as lost
                raise
            message = reply.choices[0].message
            answer = message.model_dump(exclude_none=True)
            calls = message.tool_calls or []
            action, note = "", "You called no tool. Call one of the tools."
            if calls:
                try:
                    action = tools.to_action(calls[0].function.name,
                                             json.loads(calls[0].function.arguments))
                    note = ""
                except (ToolCallError, ValueError) as error:
                    note = f"Error: {error}"
            observation, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
            shown = _shown(observation, info)
            views.append(shown)
            result = f"{note}\n\n{shown}" if note else shown
            exchanges.append([answer, {"role": "tool", "tool_call_id": calls[0].id,
                                       "content": result} if calls
                              else {"role": "user", "content": result}])
        return total
    finally:
        env.close()


def _demo_task(seed: int) -> dict[str, Any]:
    """A task of the cpu-demo's house (2 x 2 rooms, no key), as the trainer writes it."""
    env_id, kwargs = "AgentGym/KeyDoor-v0", {"width": 2, "height": 2, "key": False}
    env = gym.make(env_id, **kwargs)
    observation, info = env.reset(seed=seed)
    env.close()
    return {"env_id": env_id, "env_kwargs": kwargs, "seed": seed,
            "task_id": str(info["task_id"]), "task": str(info.get("task", "")),
            "observation": str(observation)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the task's reset seed")
    parser.add_argument("--base-url", default=None,
                        help="an OpenAI-compatible /v1 URL (default: a gateway in front of "
                             "the tiny smoke model)")
    args = parser.parse_args()
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
    statuses = [call.tool_status for call in record.calls]
    print(json.dumps({"task_id": task["task_id"], "return": episode_return,
                      "calls": len(record.calls), "joins": record.joins,
                      "breaks": record.breaks, "tool_statuses": statuses}))


if __name__ == "__main__":
    main()
