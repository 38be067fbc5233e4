"""A call's default step anchor: what the loop sent since its last assistant message.

GiGPO-style estimators group the steps of different episodes that answered the same
observation. A harness's loop is opaque, but each call shows what it answers: the
messages after the last assistant message of the chat (the tool results and user turns
the loop added since the model last spoke), or the whole chat on the first call. The
anchor is the SHA-256 of their canonical JSON, so two episodes' calls share an anchor
exactly when they answer the same observation, whatever came before.

Canonical form: keys sorted, no whitespace, non-ASCII kept; keys whose value is ``null``
dropped (``{"name": null}`` is ``{}``, as SDKs write either); ``tool_call_id`` dropped
(the gateway gives every call a fresh id, so it differs between episodes that saw the
same result); a ``content`` given as a list of text parts read as their text joined.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

_IGNORED_KEYS = frozenset({"tool_call_id"})


def observation_messages(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The messages after the last assistant message (all of them when there is none)."""
    last = max((i for i, m in enumerate(messages)
                if isinstance(m, Mapping) and m.get("role") == "assistant"), default=-1)
    return list(messages[last + 1:])


def content_text(content: Any) -> Any:
    """A message's content as text when it is a list of text parts (OpenAI's
    ``[{"type": "text", "text": ...}]``); anything else as it is."""
    if isinstance(content, list) and all(
            isinstance(part, Mapping) and part.get("type") == "text"
            and isinstance(part.get("text"), str) for part in content):
        return "".join(part["text"] for part in content)
    return content


def canonical_message(message: Any) -> Any:
    """A message in canonical form (module docstring)."""
    if not isinstance(message, Mapping):
        return message
    out = {}
    for key, value in message.items():
        if value is None or key in _IGNORED_KEYS:
            continue
        out[str(key)] = content_text(value) if key == "content" else value
    return out


def default_anchor(messages: Sequence[Mapping[str, Any]]) -> str:
    """The SHA-256 (hex) of the canonical JSON of :func:`observation_messages`."""
    view = [canonical_message(m) for m in observation_messages(messages)]
    text = json.dumps(view, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
