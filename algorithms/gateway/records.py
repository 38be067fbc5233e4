"""What the gateway records: one :class:`CallRecord` per model call a loop made, one
:class:`SessionRecord` per session (an episode's calls, in the order they finished).

A record is the training data of a harness episode: the ids are those the engine was given
and sampled (never a re-tokenization of text the loop sent back), the messages are the
loop's as received. :func:`~algorithms.gateway.joining.join_calls` turns a session's calls
into sample rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CallRecord:
    """One model call.

    Attributes:
        prompt_ids: the prompt the engine was given.
        completion_ids: the ids it sampled (an end token or the token that completed a
            stop string included, as sampled).
        logprobs: one log-prob per completion id, from the engine (the distribution the
            token was drawn from); ``()`` when the engine reports none.
        messages: the chat as the loop sent it (``/chat/completions``); for
            ``/completions``, one ``{"role": "prompt", "content": ...}`` holding the
            prompt as sent (text or ids).
        tools: the request's tools (``None``: none sent).
        response: the assistant message returned: ``{"role": "assistant", "content",
            "tool_calls"}`` (``tool_calls`` ``None`` when none were parsed); for
            ``/completions``, ``{"text": ...}``.
        finish_reason: ``stop``, ``length`` or ``tool_calls``.
        anchor: the default step anchor (:func:`~algorithms.gateway.anchors.default_anchor`).
        tool_status: the tool-call parser's status of the answer when the request had
            tools and parsing was on (``ok``, ``invalid_json``, ...; ``None`` otherwise).
        joined: the prompt ids start with the previous call's prompt and completion ids
            (the session's previous call, in finishing order; ``False`` for the first).
        elapsed_s: seconds from the request's arrival to its answer.
        bridge: how the prompt was made: ``fresh`` (the messages rendered anew),
            ``extended`` / ``kept`` (the previous prompt and completion plus the new
            messages rendered as a suffix; :class:`~algorithms.agent.chat_bridge.ChatBridge`),
            ``ids`` (``/completions`` with a prompt given as ids) or ``text``
            (``/completions`` with a text prompt).
        sampling: the sampling settings the call ran with (``temperature``, ``top_p``,
            ``max_tokens``, ``stop``, ``seed``).
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    response: dict[str, Any]
    finish_reason: str
    anchor: str
    tool_status: str | None = None
    joined: bool = False
    elapsed_s: float = 0.0
    bridge: str = "fresh"
    sampling: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionRecord:
    """One session: what its loop called, for one task.

    Attributes:
        token: the session's token (the secret part of its URL).
        task: the task dict the session was opened for.
        calls: its calls, in the order they finished.
        closed: the session was closed (no call is added after).
    """

    token: str
    task: dict[str, Any]
    calls: list[CallRecord]
    closed: bool = False

    @property
    def joins(self) -> int:
        """Calls whose prompt extended the previous call's prompt and completion."""
        return sum(1 for call in self.calls[1:] if call.joined)

    @property
    def breaks(self) -> int:
        """Calls after the first whose prompt did not (each starts a new sample row)."""
        return sum(1 for call in self.calls[1:] if not call.joined)
