"""Agent loops of a user's own, for the ``--agent`` tests: each written with the ``openai``
SDK against the session URL it is given, as a researcher would write one."""

from __future__ import annotations

import json
import os
import time

MAX_TURNS = 3


def keydoor(base_url: str, task: dict) -> dict:
    """Plays the task's KeyDoor episode with the env's tools: one chat that grows turn by
    turn (assistant message, then the tool's reply), the env's reward as the episode's."""
    import gymnasium as gym
    from openai import OpenAI

    import agentgym  # noqa: F401
    from agentgym.tools import env_tools

    client = OpenAI(base_url=base_url, api_key="anything")
    env = gym.make(task["env_id"], **task["env_kwargs"])
    observation, info = env.reset(seed=task["seed"], options={"task_id": task["task_id"]})
    tools = env_tools(env.unwrapped)
    messages = [{"role": "user", "content": f"Your task: {task['task']}\n\nYou see: "
                 f"{observation}\n\nCall exactly one tool."}]
    reward, anchors = 0.0, []
    for _ in range(MAX_TURNS):
        anchors.append(info["anchor"])
        reply = client.chat.completions.create(model="policy", messages=messages,
                                               tools=tools.schemas)
        message = reply.choices[0].message
        messages.append({"role": "assistant", "content": message.content,
                         **({"tool_calls": [c.model_dump() for c in message.tool_calls]}
                            if message.tool_calls else {})})
        if message.tool_calls:
            call = message.tool_calls[0]
            action = tools.to_action(call.function.name, json.loads(call.function.arguments))
            observation, r, terminated, truncated, info = env.step(action)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": observation})
        else:
            observation, r, terminated, truncated, info = env.step(message.content or "")
            messages.append({"role": "user", "content": observation})
        reward += float(r)
        if terminated or truncated:
            break
    return {"reward": reward, "anchors": anchors if os.environ.get("LOOP_ANCHORS") else None}


def one_call(base_url: str, task: dict) -> float:
    """One call, the reward 1 when the answer is longer than 3 characters."""
    from openai import OpenAI

    reply = OpenAI(base_url=base_url, api_key="x").chat.completions.create(
        model="policy", messages=[{"role": "user", "content": str(task.get("task", "hi"))}])
    return float(len(reply.choices[0].message.content or "") > 3)


def _claim(name: str) -> bool:
    """Whether this episode is the first to claim ``name`` in ``$FLAKY_DIR``."""
    try:
        os.close(os.open(os.path.join(os.environ["FLAKY_DIR"], name),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def flaky(base_url: str, task: dict) -> float:
    """Of a run's episodes, the first raises, the second hangs after a call, the third
    returns a string, the others play one call."""
    if _claim("raise"):
        raise RuntimeError("my loop broke")
    if _claim("hang"):
        return hangs(base_url, task)
    if _claim("bad"):
        return "not a reward"
    return one_call(base_url, task)


def raises(base_url: str, task: dict) -> float:
    raise RuntimeError("my loop broke")


def hangs(base_url: str, task: dict) -> float:
    one_call(base_url, task)
    time.sleep(600)
    return 1.0
