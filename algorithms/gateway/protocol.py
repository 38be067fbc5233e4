"""The request bodies the gateway takes, read and checked: anything a client sends is
either a request here or a :class:`RequestError` (HTTP 400 in OpenAI's error format).

What is honoured (``docs/own-agent.md`` lists it too): ``messages``, ``tools``,
``tool_choice`` (``"none"`` turns tool-call parsing off; ``"auto"``, ``"required"`` and
a named function are accepted and recorded, but generation is not constrained),
``parallel_tool_calls`` (``false``: one call per answer), ``temperature``, ``top_p``,
``max_tokens`` / ``max_completion_tokens``, ``stop``, ``seed``, ``n`` (1 only),
``logprobs`` (the sampled tokens' log-probs; ``top_logprobs`` lists come back empty: the
engines record only the sampled token's). ``stream: true`` is refused. Other fields
(``model``, ``user``, ``frequency_penalty``, ...) are accepted and ignored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentgym.tools import TOOL_NAME

MAX_STOP_STRINGS = 16


class RequestError(ValueError):
    """A request the gateway refuses (one line), with OpenAI's error fields.

    Args:
        message: what is wrong.
        param: the body field at fault (``None``: the body as a whole).
        status: the HTTP status (400 unless said).
        code: OpenAI's ``code`` (``None`` unless said).
        kind: OpenAI's ``type``.
    """

    def __init__(self, message: str, *, param: str | None = None, status: int = 400,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return error_body(self.message, param=self.param, code=self.code, kind=self.kind)


def error_body(message: str, *, param: str | None = None, code: str | None = None,
               kind: str = "invalid_request_error") -> dict[str, Any]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass(frozen=True)
class Sampling:
    """One request's sampling settings (after the gateway's pins).

    Attributes:
        temperature: the sampling temperature (0: greedy).
        top_p: the nucleus (1: off).
        max_tokens: completion tokens at most.
        stop: stop strings.
        seed: the request's seed, or ``None`` (the gateway draws one per batch).
    """

    temperature: float
    top_p: float
    max_tokens: int
    stop: tuple[str, ...]
    seed: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p,
                "max_tokens": self.max_tokens, "stop": list(self.stop), "seed": self.seed}


@dataclass(frozen=True)
class Limits:
    """What the gateway allows and pins.

    Attributes:
        default_max_tokens: completion tokens when a request says none.
        max_tokens_limit: completion tokens a request may ask for at most.
        temperature: when set, every request samples at it (what it asks is ignored).
        top_p: when set, every request samples with it.
        max_tokens_cap: when set, a request's ``max_tokens`` (asked or default) is cut to
            it: a trainer's recipe length, so that a response it cuts ends as ``length``.
    """

    default_max_tokens: int = 256
    max_tokens_limit: int = 4096
    temperature: float | None = None
    top_p: float | None = None
    max_tokens_cap: int | None = None


@dataclass(frozen=True)
class ChatRequest:
    """A checked ``/chat/completions`` body.

    Attributes:
        messages: the chat as sent (dicts).
        tools: the tools as sent (``None``: none).
        tool_choice: as sent (``None``: not given).
        parse_tools: whether the answer is read for tool calls.
        max_calls: tool calls an answer may make.
        sampling: the sampling settings.
        logprobs: whether the response carries the log-probs.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tool_choice: Any
    parse_tools: bool
    max_calls: int
    sampling: Sampling
    logprobs: bool


@dataclass(frozen=True)
class CompletionRequest:
    """A checked ``/completions`` body.

    Attributes:
        prompt: the prompt text, or its token ids.
        sampling: the sampling settings.
        logprobs: whether the response carries the log-probs.
    """

    prompt: str | tuple[int, ...]
    sampling: Sampling
    logprobs: bool


def read_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object.

    Raises:
        RequestError: not UTF-8 JSON, or not an object.
    """
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        reason = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
        raise RequestError(f"the body is not valid JSON ({reason})") from None
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    return body


def _number(body: Mapping[str, Any], key: str, default: float, low: float,
            high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError(f"{key} must be a number", param=key)
    if not low <= value <= high:
        raise RequestError(f"{key} must be between {low:g} and {high:g}; got {value:g}",
                           param=key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{key} must be an integer", param=key)
    return value


def _common(body: Mapping[str, Any], limits: Limits, *, tokens_keys: tuple[str, ...]
            ) -> Sampling:
    if body.get("stream"):
        raise RequestError("stream is not supported by this gateway; send stream: false",
                           param="stream")
    n = _integer(body, "n")
    if n is not None and n != 1:
        raise RequestError("n must be 1 (one choice per request)", param="n")
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0.0:
        raise RequestError("top_p must be above 0", param="top_p")
    max_tokens = None
    for key in tokens_keys:
        value = _integer(body, key)
        if value is not None:
            if value < 1:
                raise RequestError(f"{key} must be at least 1", param=key)
            if value > limits.max_tokens_limit:
                raise RequestError(f"{key} is {value}, over this gateway's limit of "
                                   f"{limits.max_tokens_limit} completion tokens", param=key)
            max_tokens = value if max_tokens is None else min(max_tokens, value)
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        if len(stop) > MAX_STOP_STRINGS:
            raise RequestError(f"stop takes at most {MAX_STOP_STRINGS} strings", param="stop")
        stops = tuple(s for s in stop if s)
    else:
        raise RequestError("stop must be a string or a list of strings", param="stop")
    seed = _integer(body, "seed")
    if max_tokens is None:
        max_tokens = min(limits.default_max_tokens, limits.max_tokens_limit)
    if limits.max_tokens_cap is not None:
        max_tokens = min(max_tokens, limits.max_tokens_cap)
    return Sampling(temperature if limits.temperature is None else limits.temperature,
                    top_p if limits.top_p is None else limits.top_p,
                    max_tokens, stops, None if seed is None else seed % (2**63))


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise RequestError("messages must be a non-empty list of messages", param="messages")
    for index, message in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise RequestError(f"{where} must be an object", param=where)
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise RequestError(f"{where}.role must be a string", param=f"{where}.role")
        content = message.get("content")
        if content is not None and not isinstance(content, str) and not _text_parts(content):
            raise RequestError(f"{where}.content must be a string or a list of text parts",
                               param=f"{where}.content")
        if content is None and role != "assistant":
            raise RequestError(f"{where}.content is missing", param=f"{where}.content")
        calls = message.get("tool_calls")
        if calls is not None:
            _tool_calls(calls, where)
    return value


def _text_parts(content: Any) -> bool:
    return isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content)


def _tool_calls(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise RequestError(f"{where}.tool_calls must be a list", param=f"{where}.tool_calls")
    for index, call in enumerate(calls):
        at = f"{where}.tool_calls[{index}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) \
                or not isinstance(function.get("arguments", ""), (str, dict)):
            raise RequestError(f"{at} must be {{\"type\": \"function\", \"function\": "
                               f"{{\"name\": ..., \"arguments\": ...}}}}", param=at)


def _tools(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise RequestError("tools must be a list", param="tools")
    names = set()
    for index, tool in enumerate(value):
        at = f"tools[{index}]"
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" \
                or not isinstance(function, dict):
            raise RequestError(f"{at} must be {{\"type\": \"function\", \"function\": {{...}}}}",
                               param=at)
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise RequestError(f"{at}.function.name must be 1-64 letters, digits, _ or -",
                               param=f"{at}.function.name")
        if name in names:
            raise RequestError(f"two tools are named {name!r}", param=f"{at}.function.name")
        names.add(name)
        if not isinstance(function.get("description", ""), str):
            raise RequestError(f"{at}.function.description must be a string",
                               param=f"{at}.function.description")
        parameters = function.get("parameters")
        if parameters is not None and (not isinstance(parameters, dict) or not isinstance(
                parameters.get("properties", {}), dict)):
            raise RequestError(f"{at}.function.parameters must be a JSON schema object",
                               param=f"{at}.function.parameters")
    return value or None


def _tool_choice(value: Any, tools: list[dict[str, Any]] | None) -> Any:
    if value is None or value in ("none", "auto", "required"):
        return value
    function = value.get("function") if isinstance(value, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RequestError('tool_choice must be "none", "auto", "required" or '
                           '{"type": "function", "function": {"name": ...}}', param="tool_choice")
    if function["name"] not in {t["function"]["name"] for t in tools or []}:
        raise RequestError(f"tool_choice names {function['name']!r}, which is not in tools",
                           param="tool_choice")
    return value


def parse_chat_request(body: Mapping[str, Any], limits: Limits) -> ChatRequest:
    """A ``/chat/completions`` body, checked (module docstring).

    Raises:
        RequestError: what is wrong with it.
    """
    messages = _messages(body.get("messages"))
    tools = _tools(body.get("tools"))
    choice = _tool_choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise RequestError("parallel_tool_calls must be a boolean", param="parallel_tool_calls")
    sampling = _common(body, limits, tokens_keys=("max_tokens", "max_completion_tokens"))
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise RequestError("logprobs must be a boolean", param="logprobs")
    top = _integer(body, "top_logprobs")
    if top is not None and not 0 <= top <= 20:
        raise RequestError("top_logprobs must be between 0 and 20", param="top_logprobs")
    return ChatRequest(messages, tools, choice, bool(tools) and choice != "none",
                       1 if parallel is False else 64, sampling, bool(logprobs))


def parse_completion_request(body: Mapping[str, Any], limits: Limits) -> CompletionRequest:
    """A ``/completions`` body, checked: ``prompt`` is a string or a list of token ids
    (or a list holding one of those); ``echo`` and ``suffix`` are refused.

    Raises:
        RequestError: what is wrong with it.
    """
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in prompt):
        prompt = tuple(prompt)
    elif not isinstance(prompt, str) or not prompt:
        raise RequestError("prompt must be a non-empty string or a list of token ids "
                           "(one prompt per request)", param="prompt")
    if body.get("echo"):
        raise RequestError("echo is not supported", param="echo")
    if body.get("suffix"):
        raise RequestError("suffix is not supported", param="suffix")
    sampling = _common(body, limits, tokens_keys=("max_tokens",))
    logprobs = _integer(body, "logprobs")
    if logprobs is not None and not 0 <= logprobs <= 5:
        raise RequestError("logprobs must be between 0 and 5", param="logprobs")
    return CompletionRequest(prompt, sampling, logprobs is not None)
