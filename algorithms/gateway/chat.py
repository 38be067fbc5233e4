"""Chats to prompt ids and completions to assistant messages, for the gateway.

**Prompts.** A session's call *continues* its previous chat call when its ``messages`` are
that call's messages, then the assistant message the gateway returned (same content and
tool calls; ids and null fields aside), then at least one new message, with the same
tools. Its prompt is then not rendered again: it is the previous prompt's ids, the
sampled ids and the new messages rendered as a suffix, by
:class:`~algorithms.agent.chat_bridge.ChatBridge` (``extended`` when the template extends
its earlier render; ``kept`` when it rewrites an earlier turn, under the bridge's
``keep`` policy). Any other call, and one the bridge cannot continue, is rendered afresh
(``fresh``): ``apply_chat_template(messages, tools=..., add_generation_prompt=True)``.

**The template** (one for the gateway's life): the one given, else the tokenizer's own
when it shows tools (Qwen2.5, Qwen3, Llama 3.x Instruct), else AgentGym's ChatML tool
template (SmolLM2, the tiny smoke model); the call layout is read from it
(:func:`~algorithms.agent.tool_calls.call_layout`).

**Answers.** The completion is decoded with special tokens kept (a template's
``<tool_call>`` token is read as text), less a final end token. With tools (and
``tool_choice`` not ``"none"``) it is read by :func:`~algorithms.agent.tool_calls.parse_tool_calls`
against the request's tools: when every call is well formed the message carries them as
``tool_calls`` (arguments as a JSON string) and the text outside them as ``content``;
otherwise the message is the text alone (a malformed call is content, never an error),
and the parser's status is recorded either way. ``content`` ends before the first stop
string, as OpenAI's does; the recorded ids keep the token that completed it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.tools import EnvTools, ToolSpec
from algorithms.agent.chat_bridge import (
    BridgeStep,
    ChatBridge,
    ChatRenderError,
    ChatTranscript,
    RewritePolicy,
)
from algorithms.agent.tool_calls import call_layout, parse_tool_calls
from algorithms.agent.tool_prompts import builtin_template, end_token_ids, shows_tools
from algorithms.gateway.anchors import content_text
from algorithms.gateway.protocol import ChatRequest, RequestError

_CALL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
_BRIDGE_CACHE = 64


@dataclass(frozen=True)
class PreviousTurn:
    """What a session's latest chat call leaves for the next to continue.

    Attributes:
        messages: its messages as received.
        tools: its tools as received.
        reply: the assistant message returned.
        transcript: its prompt (the bridge's transcript).
        completion_ids: the ids sampled.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    reply: dict[str, Any]
    transcript: ChatTranscript
    completion_ids: tuple[int, ...]


@dataclass(frozen=True)
class Reply:
    """An answer as the client sees it.

    Attributes:
        message: ``{"role": "assistant", "content", "tool_calls"}``.
        finish_reason: ``tool_calls``, ``stop`` or ``length``.
        tool_status: the parser's status (``None`` when the answer was not read).
    """

    message: dict[str, Any]
    finish_reason: str
    tool_status: str | None


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _plain(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message with null fields dropped and text parts joined (for comparing)."""
    return {k: (content_text(v) if k == "content" else v)
            for k, v in message.items() if v is not None}


def render_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as the template is given it: text parts joined into one string."""
    out = dict(message)
    if "content" in out:
        out["content"] = content_text(out["content"])
    return out


def _calls_of(message: Mapping[str, Any]) -> list[tuple[str, Any]]:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError):
                pass
        calls.append((function.get("name"), _key(arguments)))
    return calls


def same_reply(sent: Mapping[str, Any], returned: Mapping[str, Any]) -> bool:
    """Whether the assistant message a loop sent back is the one returned (content and
    tool calls' names and arguments; ids and null fields aside)."""
    if not isinstance(sent, Mapping) or sent.get("role") != "assistant":
        return False
    if (content_text(sent.get("content")) or "") != (returned.get("content") or ""):
        return False
    return _calls_of(sent) == _calls_of(returned)


def new_messages(turn: PreviousTurn | None, messages: Sequence[Mapping[str, Any]],
                 tools: Any) -> list[dict[str, Any]] | None:
    """The messages a call adds to ``turn`` when it continues it (module docstring), else
    ``None``."""
    if turn is None or _key(tools or None) != _key(turn.tools or None):
        return None
    n = len(turn.messages)
    if len(messages) < n + 2:
        return None
    for sent, before in zip(messages[:n], turn.messages, strict=True):
        if _key(_plain(sent)) != _key(_plain(before)):
            return None
    if not same_reply(messages[n], turn.reply):
        return None
    return [render_message(m) for m in messages[n + 1:]]


def request_tools(tools: Sequence[Mapping[str, Any]]) -> EnvTools:
    """The parser's view of a request's tools: each argument's ``type`` (when a string)
    and ``enum`` checked, ``required`` as the schema says (none when it says none)."""
    specs = []
    for tool in tools:
        function = tool["function"]
        parameters = function.get("parameters") or {}
        properties = {}
        for name, spec in (parameters.get("properties") or {}).items():
            spec = spec if isinstance(spec, Mapping) else {}
            kind = spec.get("type")
            clean: dict[str, Any] = {"type": kind if isinstance(kind, str) else "any"}
            if isinstance(spec.get("enum"), list):
                clean["enum"] = list(spec["enum"])
            properties[str(name)] = clean
        required = parameters.get("required")
        required = [r for r in required if r in properties] if isinstance(required, list) else []
        specs.append(ToolSpec(function["name"], str(function.get("description") or ""),
                              {"type": "object", "properties": properties,
                               "required": required}, function["name"]))
    return EnvTools(tuple(specs))


class ChatRenderer:
    """The gateway's template, bridges and parser (module docstring).

    Args:
        tokenizer: the policy's tokenizer.
        chat_template: the template (``None``: chosen as the module docstring says).
        rewrite: the bridge's policy for templates that rewrite earlier turns.
        end_ids: ids that end a turn (``None``: EOS and the templates' end tokens).
    """

    def __init__(self, tokenizer: Any, *, chat_template: str | None = None,
                 rewrite: RewritePolicy = "keep", end_ids: Sequence[int] | None = None):
        self.tokenizer = tokenizer
        if chat_template is not None:
            self.template, self.template_source = chat_template, "the chat template given"
        elif shows_tools(tokenizer):
            self.template, self.template_source = None, "the tokenizer's own chat template"
        else:
            self.template = builtin_template()
            self.template_source = "AgentGym's ChatML tool template"
        self.layout = call_layout(self.template if self.template is not None
                                  else getattr(tokenizer, "chat_template", None))
        self.end_ids = tuple(end_token_ids(tokenizer) if end_ids is None else end_ids)
        self.rewrite = rewrite
        self._bridges: dict[str, ChatBridge] = {}
        self._tools: dict[str, EnvTools] = {}

    def bridge(self, tools: Sequence[Mapping[str, Any]] | None) -> ChatBridge:
        key = _key(tools or None)
        bridge = self._bridges.get(key)
        if bridge is None:
            if len(self._bridges) >= _BRIDGE_CACHE:
                self._bridges.pop(next(iter(self._bridges)))
            bridge = ChatBridge(self.tokenizer, list(tools) if tools else None, self.template,
                                {}, "", self.end_ids, self.rewrite)
            self._bridges[key] = bridge
        return bridge

    def parser_tools(self, tools: Sequence[Mapping[str, Any]]) -> EnvTools:
        key = _key(tools)
        found = self._tools.get(key)
        if found is None:
            if len(self._tools) >= _BRIDGE_CACHE:
                self._tools.pop(next(iter(self._tools)))
            found = self._tools[key] = request_tools(tools)
        return found

    def prompt(self, request: ChatRequest, turn: PreviousTurn | None
               ) -> tuple[ChatTranscript, str]:
        """``(prompt, how)``: the call's prompt and ``extended``, ``kept`` or ``fresh``.

        Raises:
            RequestError: the template cannot render the messages.
        """
        bridge = self.bridge(request.tools)
        added = new_messages(turn, request.messages, request.tools)
        if added is not None and turn is not None:
            step: BridgeStep = bridge.extend(turn.transcript, turn.completion_ids, added)
            if step.transcript is not None:
                return step.transcript, step.kind
        try:
            return bridge.start([render_message(m) for m in request.messages]), "fresh"
        except ChatRenderError as error:
            raise RequestError(str(error), param="messages") from None

    def reply(self, request: ChatRequest, completion_ids: Sequence[int], *,
              call_number: int) -> Reply:
        """The assistant message of a completion (module docstring)."""
        raw, end = self.bridge(request.tools).answer_text(completion_ids)
        cut = first_stop(raw, request.sampling.stop)
        text = raw if cut is None else raw[:cut]
        status = None
        if request.parse_tools and request.tools:
            turn = parse_tool_calls(raw, self.parser_tools(request.tools), layout=self.layout,
                                    max_calls=request.max_calls)
            status = turn.status
            if turn.status == "ok":
                calls = [{"id": f"call_{call_number}_{i}", "type": "function",
                          "function": {"name": a.name or "",
                                       "arguments": json.dumps(a.arguments or {},
                                                               ensure_ascii=False)}}
                         for i, a in enumerate(turn.attempts)]
                outside = None
                if self.layout == "hermes":
                    rest = _CALL_BLOCK.sub("", raw)
                    stop_at = first_stop(rest, request.sampling.stop)
                    outside = (rest if stop_at is None else rest[:stop_at]).strip() or None
                return Reply({"role": "assistant", "content": outside, "tool_calls": calls},
                             "tool_calls", status)
        ended = bool(end) or cut is not None
        length = not ended and len(completion_ids) >= request.sampling.max_tokens
        return Reply({"role": "assistant", "content": text, "tool_calls": None},
                     "length" if length else "stop", status)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False) if ids else ""


def first_stop(text: str, stop: Sequence[str]) -> int | None:
    """Where the first stop string of ``text`` starts (``None``: none in it)."""
    found = [text.find(s) for s in stop if s and s in text]
    return min(found) if found else None
