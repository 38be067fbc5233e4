"""The tool-call parser: one status per attempt, hand-written cases of each, both layouts,
the layout read from a chat template, and fuzzing: it never raises on model output."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym.tools import EnvTools, env_tools, string_argument, tool
from algorithms.agent.tool_calls import (
    CALL_STATUSES,
    call_layout,
    format_call,
    parse_tool_calls,
    status_counts,
)

KEYDOOR = env_tools("AgentGym/KeyDoor-v0")
TOOLS = EnvTools((*KEYDOOR.tools,
                  tool("search", "Search.", "search[{query}]", query=string_argument("q"))))


def call(body: str) -> str:
    return f"<tool_call>{body}</tool_call>"


@pytest.mark.parametrize(("text", "status", "action"), [
    (call('{"name": "go", "arguments": {"direction": "north"}}'), "ok", "go north"),
    ('<tool_call>\n{"name": "open_door", "arguments": {}}\n</tool_call>', "ok", "open door"),
    (call('{"name": "open_door"}'), "ok", "open door"),  # no arguments: {}
    (call('{"name": "go", "arguments": "{\\"direction\\": \\"west\\"}"}'), "ok", "go west"),
    ("Let me think. " + call('{"name": "search", "arguments": {"query": "été"}}') + " done",
     "ok", "search[été]"),
    (call('{"name": "go", "arguments": {"direction": "north"'), "invalid_json", ""),
    (call("go north"), "invalid_json", ""),
    (call("[1, 2]"), "invalid_json", ""),
    (call("[" * 100_000 + "]" * 100_000), "invalid_json", ""),
    (call('{"n": ' + "9" * 5000 + "}"), "invalid_json", ""),
    ('<tool_call>{"name": "go", "arguments": {"direction": "north"}}', "unclosed", ""),
    (call('{"arguments": {"direction": "north"}}'), "unknown_tool", ""),
    (call('{"name": 7}'), "unknown_tool", ""),
    (call('{"name": "fly", "arguments": {}}'), "unknown_tool", ""),
    (call('{"name": "go", "arguments": {"direction": "up"}}'), "bad_arguments", ""),
    (call('{"name": "go", "arguments": {}}'), "bad_arguments", ""),
    (call('{"name": "go", "arguments": {"direction": "north", "x": 1}}'), "bad_arguments", ""),
    (call('{"name": "go", "arguments": "north"}'), "bad_arguments", ""),
    (call('{"name": "go", "arguments": [1]}'), "bad_arguments", ""),
    (call('{"name": "open_door"}') * 2, "too_many_calls", ""),
    ("go north", "no_call", ""),
    ("", "no_call", ""),
    ("<think>" + call('{"name": "open_door"}') + "</think> I wait.", "no_call", ""),
    ("</tool_call>", "no_call", ""),
])
def test_each_status_on_a_hand_written_answer(text, status, action):
    turn = parse_tool_calls(text, TOOLS)
    assert (turn.status, turn.action) == (status, action)
    assert turn.format_ok == (status == "ok")
    assert (turn.feedback == "") == (status == "ok")


def test_feedback_says_what_was_wrong_and_how_to_call():
    turn = parse_tool_calls(call('{"name": "fly", "arguments": {}}'), TOOLS)
    assert turn.feedback == ("Error: there is no tool named 'fly'; the tools are go, take_key, "
                             'open_door, search. Call one tool as <tool_call>{"name": "<tool '
                             'name>", "arguments": {...}}</tool_call>.')
    bad = parse_tool_calls(call('{"name": "go", "arguments": {"direction": "up"}}'), TOOLS)
    assert "'direction' of go must be one of north, south, east, west; got 'up'" in bad.feedback


def test_the_turn_takes_the_first_failing_status_and_counts_every_attempt():
    text = call("nope") + call('{"name": "open_door"}') + "<tool_call>{"
    turn = parse_tool_calls(text, TOOLS)
    assert [a.status for a in turn.attempts] == ["invalid_json", "too_many_calls",
                                                 "too_many_calls"]
    assert turn.status == "invalid_json"
    counts = status_counts([turn, parse_tool_calls("hello", TOOLS)])
    assert counts == {**dict.fromkeys(CALL_STATUSES, 0), "invalid_json": 1,
                      "too_many_calls": 2, "no_call": 1}
    two = parse_tool_calls(call('{"name": "open_door"}') * 2, TOOLS, max_calls=2)
    assert two.status == "ok" and two.action == "open door"


@pytest.mark.parametrize(("text", "status", "action"), [
    ('{"name": "go", "parameters": {"direction": "east"}}', "ok", "go east"),
    ('<|python_tag|>{"name": "go", "arguments": {"direction": "east"}}', "ok", "go east"),
    ('  {"name": "open_door", "parameters": {}} Done.', "ok", "open door"),
    ('{"name": "go", "parameters": {"direction": "ea', "unclosed", ""),
    ("{" * 50_000, "unclosed", ""),
    ('{"name": "go" "parameters": {}}', "invalid_json", ""),
    ('{"name": "go", "parameters": {"direction": "east"}}; {"name": "open_door", '
     '"parameters": {}}', "too_many_calls", ""),
    ("I will go east.", "no_call", ""),
])
def test_llama3_json_calls(text, status, action):
    turn = parse_tool_calls(text, TOOLS, layout="llama3")
    assert (turn.status, turn.action) == (status, action)


def test_format_call_writes_what_the_parser_reads_in_both_layouts():
    arguments = {"query": 'a "quoted" 中文 query'}
    hermes = format_call("search", arguments)
    assert hermes == ('<tool_call>\n{"name": "search", "arguments": {"query": "a \\"quoted\\" '
                      '中文 query"}}\n</tool_call>')
    for layout in ("hermes", "llama3"):
        turn = parse_tool_calls(format_call("search", arguments, layout), TOOLS, layout=layout)
        assert turn.status == "ok" and turn.call == ("search", arguments)


@pytest.mark.parametrize(("template", "layout"), [
    ("{{ '<tool_call>' }} ... ipython", "hermes"),
    ("{%- if message.role == 'ipython' %}{{ '<|python_tag|>' }}", "llama3"),
    ("{{ message.content }}", "hermes"),
    (None, "hermes"),
])
def test_the_layout_is_read_from_the_chat_template(template, layout):
    assert call_layout(template) == layout


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10)

PIECES = st.sampled_from(["<tool_call>", "</tool_call>", "{", "}", "[", "]", '"', ":", ",",
                          '"name"', '"arguments"', '"parameters"', '"go"', '"open_door"',
                          '"direction"', '"north"', "\\", "<think>", "</think>",
                          "<|python_tag|>", ";", "\n", " ", "é", "中", "\U0001f600", "\x00"])


def _check_never_raises(text: str) -> None:
    for layout in ("hermes", "llama3"):
        turn = parse_tool_calls(text, TOOLS, layout=layout)
        assert turn.status in CALL_STATUSES and turn.attempts
        assert all(attempt.status in CALL_STATUSES for attempt in turn.attempts)
        if turn.status == "ok":
            assert turn.action and TOOLS.to_call(turn.action) is not None
        else:
            assert turn.action == "" and turn.feedback.startswith("Error: ")


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_fuzz_random_strings_never_raise(text):
    _check_never_raises(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECES | st.text(max_size=4), max_size=40).map("".join))
def test_fuzz_call_shaped_fragments_never_raise(text):
    _check_never_raises(text)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["name", "arguments", "parameters", "x"]), JSON_VALUES,
                       max_size=4), st.integers(0, 200), st.booleans())
def test_fuzz_json_calls_truncated_anywhere_never_raise(body, cut, as_string):
    text = json.dumps(body, ensure_ascii=False)
    if as_string and "arguments" in body:
        body = {**body, "arguments": json.dumps(body["arguments"])}
        text = json.dumps(body)
    for answer in (call(text), call(text)[:cut], text, text[:cut]):
        _check_never_raises(answer)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["north", "south", "east", "west"]), st.text(max_size=20),
       st.text(max_size=20))
def test_fuzz_a_well_formed_call_among_any_text_is_read(direction, before, after):
    text = before.replace("<tool_call>", "").replace("<think>", "") + format_call(
        "go", {"direction": direction}) + after.replace("<tool_call>", "")
    turn = parse_tool_calls(text, TOOLS)
    assert turn.status == "ok" and turn.action == f"go {direction}"
