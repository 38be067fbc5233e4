"""The contract check's ``tools`` check: an env's tools (:mod:`agentgym.tools`) are valid
schemas that JSON can write, and every admissible action of the probe episode and every
action of the env's expert is a call that writes it back."""

from __future__ import annotations

import json
from typing import Any

PROBE_STEPS = 8
"""Expert steps played at most when the env is built without ``max_steps``."""


def check_tools(env: Any, episode: Any, kwargs: dict[str, Any], max_steps: int | None) -> str:
    """The ``tools`` check's detail (module docstring).

    Args:
        env: the env under check (a probe episode already played on it).
        episode: that probe episode (:class:`agentgym.check.Episode`).
        kwargs: the keyword arguments it was built with.
        max_steps: its ``max_steps`` (bounds the expert episode).

    Raises:
        agentgym.check.Breach: what is wrong, in one line.
    """
    from agentgym.check import Breach
    from agentgym.tools import env_tools, tool_problems

    tools = env_tools(env, kwargs)
    problems = tool_problems(tools)
    if problems:
        raise Breach(f"{problems[0]}" + (f" (and {len(problems) - 1} more)"
                                         if len(problems) > 1 else "")
                     + "; docs/own-env.md says how an env declares its tools")
    json.dumps(tools.schemas)
    names = ", ".join(tools.names)
    if tools.generic:
        return (f"no tools of its own: one generic tool ({names}) whose argument is the "
                "action text (docs/own-env.md declares tools)")
    actions: dict[str, str] = {}
    for index, info in enumerate(episode.infos):
        for action in info.get("admissible_actions") or ():
            actions.setdefault(str(action), f"the admissible action {action!r} at step {index}")
    for action in expert_actions(env, max_steps):
        actions.setdefault(action, f"the expert's action {action!r}")
    for action, where in actions.items():
        call = tools.to_call(action)
        if call is None:
            raise Breach(f"{where} is written by no tool ({names}); every action an agent "
                         "may take must be a call")
        again = tools.to_action(*call)
        if again != action:
            raise Breach(f"{where} reads as {call[0]}({call[1]}), which writes {again!r}: the "
                         "call does not write the action back")
    return (f"{len(tools.tools)} tool(s) ({names}); {len(actions)} admissible and expert "
            "actions are calls that write them back")


def expert_actions(env: Any, max_steps: int | None) -> list[str]:
    """The actions of one expert episode from ``reset(seed=0)`` (none without an expert)."""
    actions: list[str] = []
    env.reset(seed=0)
    for _ in range(max_steps if max_steps is not None else PROBE_STEPS):
        try:
            action = env.unwrapped.expert_action()
        except (NotImplementedError, AttributeError):
            return actions
        if action is None:
            break
        actions.append(str(action))
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    return actions
