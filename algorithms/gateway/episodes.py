"""Finished harness episodes as the :class:`~algorithms.agent.step_batch.StepBatch` the
learner updates on.

Each model call of an episode is one step row, in the order the calls finished: its
prompt ids are exactly the :class:`~algorithms.gateway.records.CallRecord`'s
``prompt_ids`` and its response ids exactly its ``completion_ids`` (the ids the engine was
given and sampled; nothing is re-tokenized), its behaviour log-probs the engine's.

Layout (:func:`batch_layout`): when every episode's calls all joined (each call's prompt
starts with the previous call's prompt and completion, to the id), the batch takes the
``transcript`` layout: each episode is one sequence, its last call's prompt and
completion, which the learner scores in one forward pass, every call's completion a span
of it (the tokens between, the loop's new messages, with loss mask 0: the joined row of
:func:`~algorithms.gateway.joining.join_calls`). A batch with any break (a loop that
rewrote its history) takes the ``window`` layout: each call scored on its own prompt.
The same tokens are trained in the same contexts either way; the transcript layout
costs one pass per episode instead of one per call.

Step groups and rewards:

- anchor: the loop's ``anchors[k]`` for call ``k`` when it returned them, else the call's
  default anchor (:func:`~algorithms.gateway.anchors.default_anchor`: the hash of what the
  loop sent since the model last spoke); GiGPO groups the calls of a group's episodes with
  equal anchors, HGPO their anchor histories;
- next anchor (GraphGPO's edges): the next call's anchor, and for the last call
  ``("<end>", success)``, so the ends of successful episodes are one goal node;
- rewards: the loop's ``rewards`` (one per call) when it returned them, else the episode's
  ``reward`` on its last call and 0 on the others;
- success: the loop's ``success`` when returned, else the rewards sum to more than 0;
- format: a call whose request had tools and whose answer was not a well-formed call of
  them (the gateway's ``tool_status`` other than ``ok``) has ``format_ok`` false and counts
  as invalid (no penalty is charged: the loop's rewards are the rewards).

Group ids are the task's group, trajectory ids ``group * group_size + member`` (the
in-process rollout's numbering); failed episodes are not in the batch (their ids are
gaps, as after :meth:`~algorithms.agent.step_batch.StepBatch.select`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from algorithms.agent.step_batch import StepBatch, StepLog, intern_anchors, pad_left, pad_right
from algorithms.gateway.agent_loop import LoopResult
from algorithms.gateway.records import CallRecord


@dataclass(frozen=True)
class PlayedEpisode:
    """One finished episode: where it sits, its task, its calls and what its loop
    returned (already checked against its calls: :func:`result_problem`)."""

    traj_id: int
    group: int
    task: dict[str, Any]
    calls: Sequence[CallRecord]
    result: LoopResult


def result_problem(result: LoopResult, calls: Sequence[CallRecord]) -> str | None:
    """Why ``result`` does not fit the episode's ``calls`` (anchors or rewards not one per
    call), or ``None`` when it does."""
    for name in ("anchors", "rewards"):
        values = getattr(result, name)
        if values is not None and len(values) != len(calls):
            return (f"returned {len(values)} {name} for {len(calls)} model calls (one per "
                    "call, in the order the calls finished)")
    return None


def step_rewards(result: LoopResult, count: int) -> list[float]:
    """The reward of each of ``count`` calls (module docstring)."""
    if result.rewards is not None:
        return list(result.rewards)
    return [0.0] * (count - 1) + [float(result.reward)]


def episode_success(result: LoopResult, count: int) -> bool:
    """The episode's success (module docstring)."""
    if result.success is not None:
        return bool(result.success)
    return sum(step_rewards(result, count)) > 0


def call_anchors(episode: PlayedEpisode) -> list[Hashable]:
    """Each call's step anchor (module docstring)."""
    if episode.result.anchors is not None:
        return list(episode.result.anchors)
    return [call.anchor for call in episode.calls]


def call_text(call: CallRecord) -> str:
    """The call's answer as text: its content, then its parsed tool calls (one
    ``name(arguments)`` each)."""
    response = call.response or {}
    content = response.get("content") if "content" in response else response.get("text")
    parts = [str(content)] if content else []
    for tool_call in response.get("tool_calls") or ():
        function = (tool_call or {}).get("function") or {}
        parts.append(f"{function.get('name', '?')}({function.get('arguments', '')})")
    return "\n".join(parts)


def observation_text(call: CallRecord) -> str:
    """What the call answers, as text: the contents of the messages the loop sent since the
    model last spoke (the default anchor's messages)."""
    from algorithms.gateway.anchors import content_text, observation_messages

    lines = []
    for message in observation_messages(call.messages):
        content = content_text(message.get("content")) if isinstance(message, dict) else message
        lines.append(f"[{message.get('role', '?') if isinstance(message, dict) else '?'}] "
                     f"{content if isinstance(content, str) else content!r}")
    return "\n".join(lines)


def _json_safe(value: Any) -> Any:
    """``value`` as JSON data (anything else as its ``str``)."""
    import json

    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def call_log(call: CallRecord, anchor: Hashable, from_loop: bool) -> dict[str, Any]:
    """The record of one call for the viewer (``algorithms.agent.records``' ``"call"``)."""
    from algorithms.gateway.anchors import observation_messages

    return {"messages": _json_safe(observation_messages(call.messages)),
            "response": _json_safe(call.response), "finish_reason": call.finish_reason,
            "tool_status": call.tool_status,
            "anchor": anchor if isinstance(anchor, str) else _json_safe(anchor),
            "anchor_from": "loop" if from_loop else "default", "joined": bool(call.joined),
            "bridge": getattr(call, "bridge", ""), "elapsed_s": float(call.elapsed_s)}


def batch_layout(episodes: Sequence[PlayedEpisode]) -> str:
    """``"transcript"`` when every call after an episode's first extends the one before
    it (:func:`~algorithms.gateway.joining.prompt_extends`), else ``"window"``."""
    from algorithms.gateway.joining import prompt_extends

    for episode in episodes:
        calls = list(episode.calls)
        if not all(prompt_extends(before, call.prompt_ids)
                   for before, call in zip(calls, calls[1:], strict=False)):
            return "window"
    return "transcript"


def harness_batch(episodes: Sequence[PlayedEpisode], pad_id: int) -> StepBatch:
    """The step batch of ``episodes`` (each with at least one call), rows sorted by
    trajectory then call (module docstring).

    Raises:
        ValueError: no episodes, an episode without calls, or one whose result does not
            fit its calls.
    """
    if not episodes:
        raise ValueError("no episodes to build a batch from")
    episodes = sorted(episodes, key=lambda e: e.traj_id)
    rows: list[tuple[PlayedEpisode, int, CallRecord, float, Hashable, Hashable]] = []
    for episode in episodes:
        calls = list(episode.calls)
        if not calls:
            raise ValueError(f"episode {episode.traj_id} made no model call")
        problem = result_problem(episode.result, calls)
        if problem:
            raise ValueError(f"episode {episode.traj_id}: {problem}")
        anchors = call_anchors(episode)
        success = episode_success(episode.result, len(calls))
        nexts = [*anchors[1:], ("<end>", success)]
        for step, (call, reward) in enumerate(zip(calls, step_rewards(episode.result,
                                                                       len(calls)),
                                                  strict=True)):
            rows.append((episode, step, call, reward, anchors[step], nexts[step]))
    calls = [row[2] for row in rows]
    prompt_ids, prompt_mask = pad_left([c.prompt_ids for c in calls], pad_id)
    response_ids, response_mask = pad_right([c.completion_ids for c in calls], pad_id)
    behaviour = None
    if any(len(c.logprobs) for c in calls):
        behaviour = np.full(response_ids.shape, np.nan, dtype=np.float32)
        for row, call in enumerate(calls):
            if len(call.logprobs) == len(call.completion_ids):
                behaviour[row, : len(call.logprobs)] = call.logprobs
    traj_ids = np.array([row[0].traj_id for row in rows], dtype=np.int64)
    last = np.ones(len(rows), dtype=bool)
    last[:-1] = traj_ids[1:] != traj_ids[:-1]
    rewards = np.array([row[3] for row in rows], dtype=np.float64)
    format_ok = np.array([c.tool_status in (None, "ok") for c in calls], dtype=bool)
    success = {e.traj_id: episode_success(e.result, len(e.calls)) for e in episodes}
    anchors = tuple(row[4] for row in rows)
    n = len(rows)
    return StepBatch(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask,
        response_ids=response_ids, response_mask=response_mask,
        rewards=rewards.copy(), env_rewards=rewards, penalties=np.zeros(n),
        invalid=~format_ok, format_ok=format_ok, valid_action=np.ones(n, dtype=bool),
        traj_ids=traj_ids,
        group_ids=np.array([row[0].group for row in rows], dtype=np.int64),
        anchors=anchors,
        step_index=np.array([row[1] for row in rows], dtype=np.int64),
        last_step=last,
        success=np.array([success[row[0].traj_id] for row in rows], dtype=bool),
        truncated=np.zeros(n, dtype=bool), prompt_cut=np.zeros(n, dtype=bool),
        env_error=np.zeros(n, dtype=bool),
        log=StepLog(
            task_ids=tuple(str(row[0].task.get("task_id", "")) for row in rows),
            task_types=tuple(str(row[0].task.get("task_type", "") or "") for row in rows),
            actions=tuple(call_text(c) for c in calls),
            response_texts=tuple(call_text(c) for c in calls),
            observations=tuple(observation_text(c) for c in calls),
            tasks=tuple(str(row[0].task.get("task", "")) for row in rows),
            call_statuses=tuple(c.tool_status or "" for c in calls),
            calls=tuple(call_log(row[2], row[4], row[0].result.anchors is not None)
                        for row in rows)),
        anchor_ids=intern_anchors(anchors),
        next_anchors=tuple(row[5] for row in rows),
        budget_cut=np.zeros(n, dtype=bool),
        behaviour_log_probs=behaviour,
        layout=batch_layout(episodes),
    )
