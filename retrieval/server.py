"""HTTP retrieval service speaking Search-R1's protocol (FastAPI).

``POST /retrieve`` takes either form

- batch (Search-R1): ``{"queries": ["q1", "q2"], "topk": 3, "return_scores": true}``
- single (GiGPO reference): ``{"query": "q1", "topk": 3, "return_scores": true}``

and answers ``{"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}``:
one best-first list per query (one list for the single form); with ``return_scores``
false (the default, as in Search-R1) each list holds bare ``{"id", "contents"}`` documents.
``topk`` defaults to ``default_topk`` (3).

``GET /health`` reports the corpus size, limits and micro-batching counters.

Malformed requests (bad JSON, wrong types, unknown fields, both or neither of
``query``/``queries``, limits exceeded) get 422 with a readable ``detail`` message; bodies
over ``max_body_bytes`` get 413; a failing retriever gives 500. The server never dies on a
request. Concurrent requests are micro-batched (see :mod:`retrieval.batching`).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from retrieval.base import (
    MAX_QUERIES_PER_REQUEST,
    SERVER_BATCH_WAIT_MS,
    SERVER_DEFAULT_TOPK,
    SERVER_MAX_BATCH,
    SERVER_MAX_TOPK,
    Retriever,
    SearchResult,
)
from retrieval.batching import MicroBatcher

logger = logging.getLogger(__name__)


class RetrieveRequest(BaseModel):
    """Body of ``POST /retrieve``: exactly one of ``queries`` / ``query``."""

    model_config = ConfigDict(extra="forbid")

    queries: list[StrictStr] | None = Field(default=None, description="Search-R1 batch form.")
    query: StrictStr | None = Field(default=None, description="Single-query form.")
    topk: StrictInt | None = Field(default=None, ge=1, description="Results per query.")
    return_scores: StrictBool = Field(
        default=False, description="Wrap documents with their scores."
    )

    @model_validator(mode="after")
    def _one_form(self) -> RetrieveRequest:
        if (self.queries is None) == (self.query is None):
            raise ValueError(
                "give exactly one of 'queries' (a list of strings) or 'query' (a string)"
            )
        return self

    def query_list(self) -> list[str]:
        """The queries as a list (one element for the single form)."""
        return [self.query] if self.queries is None else self.queries


class RequestError(Exception):
    """A request the server refuses, with its HTTP status and message."""

    def __init__(
        self, status_code: int, detail: str, errors: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail
        self.errors = errors or []


def _describe_validation_error(error: ValidationError) -> RequestError:
    errors = [
        {"loc": [str(part) for part in item["loc"]], "msg": item["msg"], "type": item["type"]}
        for item in error.errors(include_url=False, include_input=False, include_context=False)
    ]
    messages = "; ".join(f"{'.'.join(e['loc']) or 'body'}: {e['msg']}" for e in errors)
    return RequestError(422, f"invalid request: {messages}", errors)


def results_to_json(
    results: list[list[SearchResult]], return_scores: bool
) -> list[list[dict[str, Any]]]:
    """Search-R1's ``result`` field for a list of result lists."""
    if return_scores:
        return [
            [{"document": r.document.to_json(), "score": r.score} for r in hits] for hits in results
        ]
    return [[r.document.to_json() for r in hits] for hits in results]


def create_app(
    retriever: Retriever,
    *,
    max_batch: int = SERVER_MAX_BATCH,
    batch_wait_ms: float = SERVER_BATCH_WAIT_MS,
    max_queries_per_request: int = MAX_QUERIES_PER_REQUEST,
    max_topk: int = SERVER_MAX_TOPK,
    default_topk: int = SERVER_DEFAULT_TOPK,
    max_query_chars: int = 4096,
    max_body_bytes: int = 4 * 1024 * 1024,
) -> FastAPI:
    """The FastAPI app serving ``retriever``.

    Args:
        retriever: any :class:`~retrieval.base.Retriever`; only ``batch_search`` is called,
            from one worker thread at a time.
        max_batch: the most queries per retriever call; 1 turns micro-batching off.
        batch_wait_ms: how long a request waits for others to share its batch.
        max_queries_per_request: larger ``queries`` lists get 422.
        max_topk: larger ``topk`` gets 422.
        default_topk: ``topk`` when the request has none (Search-R1: 3).
        max_query_chars: longer queries get 422.
        max_body_bytes: larger bodies get 413 (checked while reading, before parsing).

    Returns:
        The application (run it with uvicorn, see :mod:`retrieval.serve`).
    """
    if not 1 <= default_topk <= max_topk:
        raise ValueError(f"need 1 <= default_topk <= max_topk, got {default_topk}, {max_topk}")
    batcher = MicroBatcher(
        retriever.batch_search, max_batch=max_batch, max_wait_s=batch_wait_ms / 1000
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await batcher.close()

    app = FastAPI(title="AgentGym retrieval", lifespan=lifespan)
    app.state.batcher = batcher
    app.state.retriever = retriever

    @app.exception_handler(RequestError)
    async def _refuse(request: Request, error: RequestError) -> JSONResponse:
        content: dict[str, Any] = {"detail": error.detail}
        if error.errors:
            content["errors"] = error.errors
        return JSONResponse(status_code=error.status_code, content=content)

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
            raise RequestError(
                413, f"request body of {declared} bytes exceeds the limit of {max_body_bytes}"
            )
        body = bytearray()
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > max_body_bytes:
                raise RequestError(413, f"request body exceeds the limit of {max_body_bytes} bytes")
        return bytes(body)

    def parse(body: bytes) -> RetrieveRequest:
        if not body.strip():
            raise RequestError(422, "invalid request: empty body; send a JSON object")
        try:
            payload = RetrieveRequest.model_validate_json(body)
        except ValidationError as error:
            raise _describe_validation_error(error) from None
        queries = payload.query_list()
        if len(queries) > max_queries_per_request:
            raise RequestError(
                422,
                f"invalid request: {len(queries)} queries exceed the limit of {max_queries_per_request}",
            )
        if payload.topk is not None and payload.topk > max_topk:
            raise RequestError(
                422, f"invalid request: topk={payload.topk} exceeds the limit of {max_topk}"
            )
        too_long = [i for i, q in enumerate(queries) if len(q) > max_query_chars]
        if too_long:
            raise RequestError(
                422,
                f"invalid request: queries {too_long[:5]} are longer than {max_query_chars} characters",
            )
        return payload

    @app.post("/retrieve")
    async def retrieve(request: Request) -> JSONResponse:
        payload = parse(await read_body(request))
        queries = payload.query_list()
        k = payload.topk or default_topk
        if not queries:
            return JSONResponse({"result": []})
        try:
            results = await batcher.submit(queries, k)
        except Exception as error:  # a broken retriever answers 500, the server lives on
            logger.exception("retrieval failed for %d queries", len(queries))
            raise RequestError(500, f"retrieval failed: {type(error).__name__}: {error}") from None
        return JSONResponse({"result": results_to_json(results, payload.return_scores)})

    @app.get("/health")
    async def health() -> dict[str, Any]:
        size = len(retriever) if hasattr(retriever, "__len__") else None
        return {
            "status": "ok",
            "retriever": type(retriever).__name__,
            "documents": size,
            "limits": {
                "max_batch": max_batch,
                "batch_wait_ms": batch_wait_ms,
                "max_queries_per_request": max_queries_per_request,
                "max_topk": max_topk,
                "default_topk": default_topk,
                "max_query_chars": max_query_chars,
                "max_body_bytes": max_body_bytes,
            },
            "batching": batcher.stats.to_json(),
        }

    return app
