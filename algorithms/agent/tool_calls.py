"""Reading a model's tool calls: every attempt gets a status, and nothing here raises on
model output.

Two layouts (:data:`CALL_LAYOUTS`), chosen from the model's chat template
(:func:`call_layout`):

``hermes``    Hermes / Qwen2.5 / Qwen3: each call is ``<tool_call>{"name": ..., "arguments":
              {...}}</tool_call>`` (whitespace around the JSON allowed); text outside the
              calls is the model's own (reasoning, a reply).
``llama3``    Llama 3.1 / 3.2 JSON calls: the answer is a JSON object ``{"name": ...,
              "parameters": {...}}`` (``"arguments"`` is read too), optionally after
              ``<|python_tag|>``; several calls are separated by ``;``. An answer that does
              not start with ``{`` (after that tag and whitespace) is plain text: no call.

Each attempt (:class:`ToolCallAttempt`) has one status (:data:`CALL_STATUSES`):

``ok``              a call of one of the env's tools with arguments its schema accepts
``invalid_json``    the call's text is not JSON, or not a JSON object
``unclosed``        a ``<tool_call>`` without its ``</tool_call>`` (hermes), or JSON that
                    ends before it is complete (llama3): the answer was cut
``unknown_tool``    no ``"name"``, a name that is not a string, or a name no tool has
``bad_arguments``   the arguments are not an object (a JSON *string* holding an object is
                    read as that object: some models write them so), or break the
                    tool's schema (a missing or unknown argument, a wrong type, a value
                    outside its enum; :func:`agentgym.tools.argument_problem`)
``too_many_calls``  a call after the first ``max_calls`` (a well-formed call included)
``no_call``         the answer holds no call at all (one attempt with this status)

A turn (:class:`ParsedTurn`) is ``ok`` when every attempt is: then its action is the
call's action text (:meth:`agentgym.tools.EnvTools.to_action`). Otherwise its status is
the first failing attempt's, its action is ``""`` -- an invalid action in every bundled
env (the env's penalty is charged; the episode goes on) -- and ``feedback`` is one line
the model reads as the tool message: what was wrong and how a call is written.

Complete ``<think>...</think>`` blocks are removed before reading (a call written while
reasoning is not made), in both layouts. JSON nested too deep for Python's parser and
integers too long to read are ``invalid_json``, not an exception.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentgym.tools import EnvTools, ToolCallError, argument_problem

CallLayout = Literal["hermes", "llama3"]
CALL_LAYOUTS: tuple[str, ...] = ("hermes", "llama3")

CallStatus = Literal["ok", "invalid_json", "unclosed", "unknown_tool", "bad_arguments",
                     "too_many_calls", "no_call"]
CALL_STATUSES: tuple[str, ...] = ("ok", "invalid_json", "unclosed", "unknown_tool",
                                  "bad_arguments", "too_many_calls", "no_call")
"""Every status an attempt can get, in the order the metrics list them."""

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_MAX_QUOTED = 60
"""Characters of model text quoted in a feedback line, at most."""


@dataclass(frozen=True)
class ToolCallAttempt:
    """One call the model tried to make.

    Attributes:
        status: one of :data:`CALL_STATUSES`.
        raw: the attempt's text (the JSON, or what stood where it should).
        name: the tool's name when the call had a string ``"name"``, else ``None``.
        arguments: the arguments as read (an object), else ``None``.
        error: what was wrong, one line (``""`` when ``ok``).
    """

    status: str
    raw: str
    name: str | None = None
    arguments: dict[str, Any] | None = None
    error: str = ""


@dataclass(frozen=True)
class ParsedTurn:
    """What one answer asked for.

    Attributes:
        status: ``ok``, or the first failing attempt's status.
        attempts: every attempt, in order (one ``no_call`` attempt when there is no call).
        action: the env's action text (``""`` unless ``ok``).
        feedback: the line the model reads when the turn is not ``ok`` (``""`` when it is).
    """

    status: str
    attempts: tuple[ToolCallAttempt, ...]
    action: str
    feedback: str

    @property
    def format_ok(self) -> bool:
        return self.status == "ok"

    @property
    def call(self) -> tuple[str, dict[str, Any]] | None:
        """``(name, arguments)`` of the turn's call when it is ``ok``."""
        if self.status != "ok":
            return None
        return self.attempts[0].name or "", dict(self.attempts[0].arguments or {})


def call_layout(chat_template: str | None) -> CallLayout:
    """The call layout a chat template teaches: ``llama3`` for a template that writes
    Llama 3.x's tool prompt (``<|python_tag|>`` or its ``ipython`` role, and no
    ``<tool_call>``), else ``hermes`` (Qwen's and Hermes' layout; the layout of this
    project's own tool templates)."""
    text = chat_template or ""
    if OPEN_TAG not in text and (PYTHON_TAG in text or "ipython" in text):
        return "llama3"
    return "hermes"


def format_call(name: str, arguments: dict[str, Any], layout: CallLayout = "hermes") -> str:
    """The canonical text of one call, as the chat templates write an assistant's
    ``tool_calls``: ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``
    (hermes) or ``{"name": ..., "parameters": ...}`` (llama3); JSON with ``", "`` and
    ``": "`` separators, non-ASCII kept."""
    if layout == "llama3":
        return json.dumps({"name": name, "parameters": arguments}, ensure_ascii=False)
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{OPEN_TAG}\n{body}\n{CLOSE_TAG}"


def usage(layout: CallLayout) -> str:
    """How a call is written, for a feedback line."""
    if layout == "llama3":
        return 'Call one tool as {"name": "<tool name>", "parameters": {...}}.'
    return 'Call one tool as <tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>.'


def parse_tool_calls(text: str, tools: EnvTools, *, layout: CallLayout = "hermes",
                     max_calls: int = 1) -> ParsedTurn:
    """Read the calls of one answer (module docstring). Never raises on ``text``.

    Args:
        text: the answer as the model wrote it (any string; a non-string is read as
            no call).
        tools: the env's tools (names and argument schemas).
        layout: ``hermes`` or ``llama3``.
        max_calls: calls allowed per answer (the env takes one action a turn: 1).

    Returns:
        The :class:`ParsedTurn`.
    """
    if layout not in CALL_LAYOUTS:
        raise ValueError(f"unknown call layout {layout!r} ({', '.join(CALL_LAYOUTS)})")
    if not isinstance(text, str):
        text = ""
    text = _THINK_BLOCK.sub(" ", text)
    raws = _hermes_pieces(text) if layout == "hermes" else _llama_pieces(text)
    if not raws:
        attempt = ToolCallAttempt("no_call", text[-_MAX_QUOTED:], error="the answer calls no tool")
        return _turn((attempt,), tools, layout)
    attempts = []
    for index, (raw, closed) in enumerate(raws):
        attempt = _read(raw, closed, tools, layout)
        if index >= max_calls:
            attempt = ToolCallAttempt("too_many_calls", raw, attempt.name, attempt.arguments,
                                      f"the answer makes {len(raws)} calls; make "
                                      f"{_count(max_calls)} per turn")
        attempts.append(attempt)
    return _turn(tuple(attempts), tools, layout)


def _count(n: int) -> str:
    return "one" if n == 1 else f"at most {n}"


def _turn(attempts: tuple[ToolCallAttempt, ...], tools: EnvTools,
          layout: CallLayout) -> ParsedTurn:
    failed = next((a for a in attempts if a.status != "ok"), None)
    if failed is None:
        first = attempts[0]
        try:
            action = tools.to_action(first.name or "", first.arguments or {})
        except ToolCallError as error:  # a schema the checks let through: still no raise
            failed = ToolCallAttempt("bad_arguments", first.raw, first.name, first.arguments,
                                     str(error))
            attempts = (failed, *attempts[1:])
        else:
            return ParsedTurn("ok", attempts, action, "")
    feedback = f"Error: {failed.error}. {usage(layout)}"
    return ParsedTurn(failed.status, attempts, "", feedback)


def _hermes_pieces(text: str) -> list[tuple[str, bool]]:
    """``(text inside, closed)`` of every ``<tool_call>`` of ``text``, in order."""
    pieces: list[tuple[str, bool]] = []
    position = 0
    while True:
        start = text.find(OPEN_TAG, position)
        if start == -1:
            return pieces
        inner = start + len(OPEN_TAG)
        end = text.find(CLOSE_TAG, inner)
        if end == -1:
            pieces.append((text[inner:], False))
            return pieces
        pieces.append((text[inner:end], True))
        position = end + len(CLOSE_TAG)


def _llama_pieces(text: str) -> list[tuple[str, bool]]:
    """The JSON calls of a Llama 3.x answer: ``(json text, complete)``; ``[]`` for an
    answer that does not start with ``{``."""
    body = text.strip()
    if body.startswith(PYTHON_TAG):
        body = body[len(PYTHON_TAG):].strip()
    if not body.startswith("{"):
        return []
    pieces: list[tuple[str, bool]] = []
    decoder = json.JSONDecoder()
    while body:
        try:
            _, end = decoder.raw_decode(body)
        except (ValueError, RecursionError):
            # JSON still open at the end of the answer was cut; anything else is broken
            pieces.append((body, not _open_at_end(body)))
            return pieces
        pieces.append((body[:end], True))
        body = body[end:].lstrip()
        if not body.startswith(";"):
            return pieces  # text after the call is the model's own
        body = body[1:].lstrip()
    return pieces


def _open_at_end(text: str) -> bool:
    """Whether ``text`` ends inside a JSON string or with a bracket still open (JSON cut
    off, not JSON written wrong)."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
    return in_string or depth > 0


def _read(raw: str, closed: bool, tools: EnvTools, layout: CallLayout) -> ToolCallAttempt:
    """The status of one call's text."""
    if not closed:
        missing = CLOSE_TAG if layout == "hermes" else "the end of its JSON"
        return ToolCallAttempt("unclosed", raw, error=f"the call ends before {missing}")
    try:
        call = json.loads(raw)
    except (ValueError, RecursionError) as error:
        reason = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
        return ToolCallAttempt("invalid_json", raw, error=f"the call is not valid JSON ({reason})")
    if not isinstance(call, dict):
        return ToolCallAttempt("invalid_json", raw,
                               error="the call must be a JSON object with a name and arguments")
    name = call.get("name")
    if name is None:
        return ToolCallAttempt("unknown_tool", raw, error='the call has no "name"')
    if not isinstance(name, str):
        return ToolCallAttempt("unknown_tool", raw, error='the call\'s "name" is not a string')
    tool = tools.tool(name)
    if tool is None:
        return ToolCallAttempt("unknown_tool", raw, name,
                               error=f"there is no tool named {_quote(name)}; the tools are "
                                     f"{', '.join(tools.names)}")
    keys = ("parameters", "arguments") if layout == "llama3" else ("arguments", "parameters")
    arguments = next((call[key] for key in keys if key in call), {})
    if isinstance(arguments, str):  # the arguments as a JSON string (OpenAI's wire form)
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return ToolCallAttempt("bad_arguments", raw, name,
                                   error=f"the arguments of {name} are a string that is not "
                                         "a JSON object")
    problem = argument_problem(tool, arguments)
    if problem is not None:
        kept = arguments if isinstance(arguments, dict) else None
        return ToolCallAttempt("bad_arguments", raw, name, kept, error=problem)
    return ToolCallAttempt("ok", raw, name, dict(arguments))


def _quote(text: str) -> str:
    return repr(text[:_MAX_QUOTED])


def status_counts(turns: Sequence[ParsedTurn]) -> dict[str, int]:
    """How many attempts of ``turns`` got each status (every status of
    :data:`CALL_STATUSES`, zeros included)."""
    counts = dict.fromkeys(CALL_STATUSES, 0)
    for turn in turns:
        for attempt in turn.attempts:
            counts[attempt.status] += 1
    return counts
