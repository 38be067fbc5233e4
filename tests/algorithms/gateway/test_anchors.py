"""default_anchor: what counts (the messages since the last assistant message) and what
does not (key order, earlier turns, nulls, tool-call ids)."""

from __future__ import annotations

import hashlib
import json

from algorithms.gateway.anchors import default_anchor, observation_messages

SYSTEM = {"role": "system", "content": "play"}
USER = {"role": "user", "content": "You see a door."}


def test_the_first_call_hashes_every_message():
    expected = hashlib.sha256(json.dumps([
        {"content": "play", "role": "system"},
        {"content": "You see a door.", "role": "user"}],
        separators=(",", ":")).encode()).hexdigest()
    assert default_anchor([SYSTEM, USER]) == expected


def test_key_order_does_not_matter():
    assert default_anchor([{"content": "x", "role": "user"}]) == \
        default_anchor([{"role": "user", "content": "x"}])


def test_only_what_came_after_the_last_assistant_message_counts():
    result = {"role": "tool", "tool_call_id": "call_1", "content": "You see a key."}
    one = [SYSTEM, USER, {"role": "assistant", "content": "go north"}, result]
    other = [SYSTEM, {"role": "user", "content": "another task"},
             {"role": "assistant", "content": "x"}, {"role": "tool", "content": "y"},
             {"role": "assistant", "content": None,
              "tool_calls": [{"id": "call_9", "type": "function",
                              "function": {"name": "go", "arguments": "{}"}}]},
             {**result, "tool_call_id": "call_9"}]
    assert observation_messages(one) == [result]
    assert default_anchor(one) == default_anchor(other)
    assert default_anchor(one) == default_anchor([result])


def test_what_the_loop_sent_changes_the_anchor():
    base = [USER, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "b"}]
    assert default_anchor(base) != default_anchor(
        [*base[:2], {"role": "tool", "content": "c"}])
    assert default_anchor(base) != default_anchor(
        [*base[:2], {"role": "user", "content": "b"}])
    assert default_anchor(base) != default_anchor(
        [*base, {"role": "user", "content": "more"}])
    assert default_anchor([USER]) != default_anchor([SYSTEM, USER])


def test_nulls_and_text_parts_read_as_the_plain_message():
    plain = [{"role": "user", "content": "hi"}]
    assert default_anchor([{"role": "user", "content": "hi", "name": None}]) == \
        default_anchor(plain)
    assert default_anchor([{"role": "user", "content": [{"type": "text", "text": "h"},
                                                        {"type": "text", "text": "i"}]}]) \
        == default_anchor(plain)


def test_an_empty_chat_has_an_anchor():
    assert default_anchor([]) == hashlib.sha256(b"[]").hexdigest()
