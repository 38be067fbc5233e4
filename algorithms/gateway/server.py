"""The gateway: an OpenAI-compatible server of the policy, in the training process, on
loopback, one session per episode (``docs/own-agent.md``).

A loop is given its session's base URL, ``{base}/sessions/{token}/v1`` (the token from
:func:`secrets.token_urlsafe`: a loop reaches only its own session; any API key is
accepted, none is checked). Under it: ``POST /chat/completions``, ``POST /completions``,
``GET /models``. Every call is recorded (:class:`~algorithms.gateway.records.CallRecord`);
:meth:`Gateway.close_session` hands the session's record over and ends it (later calls:
404). Requests of all sessions are sampled together (:mod:`algorithms.gateway.batching`);
prompts are made as :mod:`algorithms.gateway.chat` says, bodies read as
:mod:`algorithms.gateway.protocol` says.

Errors are OpenAI's error objects: 404 for an unknown or closed session (and any other
path), 400 for a malformed body or a prompt over ``max_prompt_tokens`` (the message names
the limit; ``code`` ``context_length_exceeded``), 413 for a body over 32 MiB, 500 when
the engine fails. Nothing a client sends stops the server.

The server is uvicorn in a daemon thread, its access log off (the URLs hold the tokens).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from algorithms.agent.chat_bridge import RewritePolicy
from algorithms.gateway.anchors import default_anchor
from algorithms.gateway.batching import GenerationError, GenerationQueue
from algorithms.gateway.chat import ChatRenderer, PreviousTurn, first_stop
from algorithms.gateway.joining import prompt_extends
from algorithms.gateway.protocol import (
    Limits,
    RequestError,
    error_body,
    parse_chat_request,
    parse_completion_request,
    read_json,
)
from algorithms.gateway.records import CallRecord, SessionRecord

SESSION_PREFIX = "/sessions"


@dataclass
class _Session:
    token: str
    task: dict[str, Any]
    calls: list[CallRecord] = field(default_factory=list)
    turn: PreviousTurn | None = None
    started: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def session_token(url_or_token: str) -> str:
    """The token of a session URL (``.../sessions/{token}/v1``), or the token itself."""
    text = str(url_or_token).rstrip("/")
    if f"{SESSION_PREFIX}/" in text:
        text = text.split(f"{SESSION_PREFIX}/", 1)[1].split("/", 1)[0]
    return text


class Gateway:
    """The OpenAI-compatible server of a policy's engine (module docstring).

    Args:
        engine: the policy's :class:`~algorithms.engines.GenerationEngine`.
        tokenizer: its tokenizer.
        host: where to listen (loopback by default).
        port: the port (0: a free one).
        max_prompt_tokens: prompts longer are refused (400).
        chat_template: the template (``None``: :class:`~algorithms.gateway.chat.ChatRenderer`'s
            choice).
        rewrite: the bridge's policy for templates that rewrite turns (``keep``, ``end``).
        model_name: the model's name in responses and ``/models``.
        default_max_tokens: completion tokens when a request says none.
        max_tokens_limit: completion tokens a request may ask for at most.
        max_tokens_cap: when set, requests asking more get this many at most, and a
            response cut there ends as ``length`` (a trainer's ``generation.max_new_tokens``).
        temperature: when set, every request samples at it (a trainer pins the
            temperature its learner scores at); ``None``: each request's own.
        top_p: likewise for top-p.
        batch_max_wait_s: how long the generation thread waits, at most, for every open
            session to call before it samples those that did
            (:mod:`algorithms.gateway.batching`).
        max_batch: requests per engine call at most.
        seed: seeds the seeds of requests that give none.
        end_ids: ids that end a turn (``None``: EOS and the templates' end tokens).
    """

    def __init__(self, engine: Any, tokenizer: Any, *, host: str = "127.0.0.1", port: int = 0,
                 max_prompt_tokens: int, chat_template: str | None = None,
                 rewrite: RewritePolicy = "keep", model_name: str = "agentgym-policy",
                 default_max_tokens: int = 256, max_tokens_limit: int = 4096,
                 max_tokens_cap: int | None = None,
                 temperature: float | None = None, top_p: float | None = None,
                 batch_max_wait_s: float = 0.25,
                 max_batch: int = 64, seed: int = 0,
                 end_ids: Sequence[int] | None = None):
        if max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be at least 1; got {max_prompt_tokens}")
        self.engine = engine
        self.tokenizer = tokenizer
        self.host = host
        self.port = port
        self.max_prompt_tokens = max_prompt_tokens
        self.model_name = model_name
        self.limits = Limits(default_max_tokens, max_tokens_limit, temperature, top_p,
                             max_tokens_cap)
        self.renderer = ChatRenderer(tokenizer, chat_template=chat_template, rewrite=rewrite,
                                     end_ids=end_ids)
        self.queue = GenerationQueue(engine, max_wait_s=batch_max_wait_s, max_batch=max_batch,
                                     seed=seed, expected=lambda: self.open_sessions)
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._render_lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def base_url(self) -> str:
        """``http://host:port`` (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the gateway is not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Gateway:
        """Start the generation thread and the server; returns when it answers."""
        if self._server is not None:
            return self
        import uvicorn

        from algorithms.gateway.app import create_app

        # uvicorn binds the socket itself: served on a socket bound here (``sockets=``),
        # every response took 44 ms on loopback (measured; under 1 ms this way)
        config = uvicorn.Config(create_app(self), host=self.host, port=self.port,
                                log_level="warning", access_log=False, lifespan="off",
                                timeout_keep_alive=30)
        self._server = uvicorn.Server(config)
        self.queue.start()
        self._thread = threading.Thread(target=self._server.run, name="gateway-server",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise RuntimeError(f"the gateway's server did not start on "
                                   f"{self.host}:{self.port}")
            time.sleep(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        """Stop the server and the generation thread (open sessions stay readable)."""
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=30)
        self.queue.stop()
        self._server = None
        self._thread = None

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ sessions
    def open_session(self, task: dict[str, Any]) -> str:
        """A new session for ``task``; returns its base URL ``{base}/sessions/{token}/v1``."""
        if not isinstance(task, dict):
            raise TypeError(f"a task is a dict; got {type(task).__name__}")
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._sessions[token] = _Session(token, dict(task))
        return f"{self.base_url}{SESSION_PREFIX}/{token}/v1"

    def close_session(self, url_or_token: str) -> SessionRecord:
        """End a session and return its record; its URL answers 404 from now on (a call
        still running when it closes is answered 404 and not recorded).

        Raises:
            KeyError: no open session has that token.
        """
        token = session_token(url_or_token)
        with self._lock:
            session = self._sessions.pop(token, None)
        if session is None:
            raise KeyError("no open session has that token (closed already, or never opened)")
        with session.lock:
            return SessionRecord(session.token, session.task, list(session.calls), closed=True)

    def record(self, url_or_token: str) -> SessionRecord:
        """An open session's record so far (it stays open).

        Raises:
            KeyError: no open session has that token.
        """
        session = self._session(session_token(url_or_token))
        with session.lock:
            return SessionRecord(session.token, session.task, list(session.calls))

    @property
    def open_sessions(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _session(self, token: str) -> _Session:
        with self._lock:
            session = self._sessions.get(token)
        if session is None:
            raise KeyError(token)
        return session

    def _live(self, token: str) -> _Session:
        try:
            return self._session(token)
        except KeyError:
            raise RequestError("no such session: it was closed or never opened", status=404,
                               code="session_not_found") from None

    # ------------------------------------------------------------------ calls
    def handle(self, kind: str, token: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        """``(status, body)`` of one request (``kind``: ``chat``, ``completion`` or
        ``models``). Never raises."""
        try:
            session = self._live(token)
            if kind == "models":
                return 200, {"object": "list", "data": [self._model_card()]}
            body = read_json(raw)
            if kind == "chat":
                return 200, self._chat(session, body)
            return 200, self._completion(session, body)
        except RequestError as error:
            return error.status, error.body()
        except GenerationError as error:
            return 500, error_body(str(error), kind="server_error")
        except Exception as error:  # noqa: BLE001 - a bug must not take the server down
            return 500, error_body(f"the gateway failed: {type(error).__name__}: {error}",
                                   kind="server_error")

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.model_name, "object": "model", "created": 0, "owned_by": "agentgym"}

    def _check_length(self, ids: Sequence[int]) -> None:
        if len(ids) > self.max_prompt_tokens:
            raise RequestError(f"the prompt is {len(ids)} tokens, over this gateway's "
                               f"max_prompt_tokens of {self.max_prompt_tokens}",
                               param="messages", code="context_length_exceeded")

    def _chat(self, session: _Session, body: dict[str, Any]) -> dict[str, Any]:
        arrived = time.monotonic()
        request = parse_chat_request(body, self.limits)
        with session.lock:
            turn = session.turn
            session.started += 1
            number = session.started
        with self._render_lock:  # tokenizers and templates are not thread-safe
            transcript, how = self.renderer.prompt(request, turn)
        self._check_length(transcript.token_ids)
        generated = self.queue.submit(transcript.token_ids, request.sampling).result()
        with self._render_lock:
            reply = self.renderer.reply(request, generated.ids, call_number=number)
            logprobs = self._chat_logprobs(generated) if request.logprobs else None
        record = CallRecord(
            tuple(transcript.token_ids), generated.ids, generated.logprobs,
            request.messages, request.tools, reply.message, reply.finish_reason,
            default_anchor(request.messages), reply.tool_status, False,
            time.monotonic() - arrived, how, request.sampling.as_dict())
        self._append(session, record, PreviousTurn(
            request.messages, request.tools, reply.message, transcript, generated.ids))
        message = {k: v for k, v in reply.message.items() if k != "tool_calls" or v}
        return {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion",
                "created": int(time.time()), "model": self.model_name,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": reply.finish_reason, "logprobs": logprobs}],
                "usage": _usage(transcript.token_ids, generated.ids)}

    def _append(self, session: _Session, record: CallRecord, turn: PreviousTurn | None) -> None:
        with session.lock:
            with self._lock:
                live = self._sessions.get(session.token) is session
            if not live:
                raise RequestError("the session was closed while this call ran", status=404,
                                   code="session_not_found")
            previous = session.calls[-1] if session.calls else None
            joined = prompt_extends(previous, record.prompt_ids)
            session.calls.append(_with_joined(record, joined))
            if turn is not None:
                session.turn = turn

    def _chat_logprobs(self, generated: Any) -> dict[str, Any] | None:
        if len(generated.logprobs) != len(generated.ids):
            return None
        content = []
        for token_id, value in zip(generated.ids, generated.logprobs, strict=True):
            token = self.renderer.decode([token_id])
            content.append({"token": token, "logprob": value,
                            "bytes": list(token.encode("utf-8")), "top_logprobs": []})
        return {"content": content, "refusal": None}

    def _completion(self, session: _Session, body: dict[str, Any]) -> dict[str, Any]:
        arrived = time.monotonic()
        request = parse_completion_request(body, self.limits)
        with self._render_lock:
            if isinstance(request.prompt, str):
                ids, how = tuple(self.tokenizer(request.prompt)["input_ids"]), "text"
            else:
                ids, how = request.prompt, "ids"
                if max(ids) >= len(self.tokenizer):
                    raise RequestError(f"prompt holds token id {max(ids)}, outside the "
                                       f"vocabulary of {len(self.tokenizer)}", param="prompt")
        if not ids:
            raise RequestError("the prompt tokenizes to no tokens", param="prompt")
        self._check_length(ids)
        generated = self.queue.submit(ids, request.sampling).result()
        with self._render_lock:
            body_ids = list(generated.ids)
            ended = bool(body_ids) and body_ids[-1] in self.renderer.end_ids
            text = self.renderer.decode(body_ids[:-1] if ended else body_ids)
            cut = first_stop(text, request.sampling.stop)
            text = text if cut is None else text[:cut]
            tokens = [self.renderer.decode([i]) for i in generated.ids]
        stopped = ended or cut is not None
        finish = "length" if not stopped and len(generated.ids) >= \
            request.sampling.max_tokens else "stop"
        prompt_view = request.prompt if isinstance(request.prompt, str) else list(request.prompt)
        messages = [{"role": "prompt", "content": prompt_view}]
        record = CallRecord(tuple(ids), generated.ids, generated.logprobs, messages, None,
                            {"text": text}, finish, default_anchor(messages), None, False,
                            time.monotonic() - arrived, how, request.sampling.as_dict())
        self._append(session, record, None)
        logprobs = None
        if request.logprobs and len(generated.logprobs) == len(generated.ids):
            offsets, at = [], 0
            for token in tokens:
                offsets.append(at)
                at += len(token)
            logprobs = {"tokens": tokens, "token_logprobs": list(generated.logprobs),
                        "top_logprobs": None, "text_offset": offsets}
        return {"id": f"cmpl-{secrets.token_hex(12)}", "object": "text_completion",
                "created": int(time.time()), "model": self.model_name,
                "choices": [{"index": 0, "text": text, "finish_reason": finish,
                             "logprobs": logprobs}],
                "usage": _usage(ids, generated.ids)}


def _usage(prompt: Sequence[int], completion: Sequence[int]) -> dict[str, int]:
    return {"prompt_tokens": len(prompt), "completion_tokens": len(completion),
            "total_tokens": len(prompt) + len(completion)}


def _with_joined(record: CallRecord, joined: bool) -> CallRecord:
    from dataclasses import replace

    return replace(record, joined=joined)

