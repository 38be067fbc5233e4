"""The gateway's HTTP routes (FastAPI): each hands the raw body to
:meth:`~algorithms.gateway.server.Gateway.handle` in a worker thread and returns its
``(status, body)``; every other path and method is an OpenAI error object.

No ``from __future__ import annotations`` here: FastAPI reads the routes' annotations
at run time."""

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from algorithms.gateway.protocol import error_body

MAX_BODY_BYTES = 32 * 1024 * 1024


def create_app(gateway: Any) -> Any:
    """The FastAPI app of ``gateway`` (a :class:`~algorithms.gateway.server.Gateway`)."""
    app = FastAPI(title="AgentGym gateway", docs_url=None, redoc_url=None, openapi_url=None)

    async def body_of(request: Request) -> bytes | None:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def answer(kind: str, token: str, request: Request) -> JSONResponse:
        raw = b"" if kind == "models" else await body_of(request)
        if raw is None:
            return JSONResponse(error_body(f"the body is over {MAX_BODY_BYTES} bytes"),
                                status_code=413)
        status, body = await run_in_threadpool(gateway.handle, kind, token, raw)
        return JSONResponse(body, status_code=status)

    @app.post("/sessions/{token}/v1/chat/completions")
    async def chat(token: str, request: Request) -> JSONResponse:
        return await answer("chat", token, request)

    @app.post("/sessions/{token}/v1/completions")
    async def completions(token: str, request: Request) -> JSONResponse:
        return await answer("completion", token, request)

    @app.get("/sessions/{token}/v1/models")
    async def models(token: str, request: Request) -> JSONResponse:
        return await answer("models", token, request)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        message = ("no such path: the gateway serves /sessions/{token}/v1/chat/completions, "
                   "/completions and /models" if error.status_code == 404 else str(error.detail))
        return JSONResponse(error_body(message, code=str(error.status_code)),
                            status_code=error.status_code)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body("the request is malformed"), status_code=400)

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception) -> JSONResponse:
        return JSONResponse(error_body(f"the gateway failed: {type(error).__name__}",
                                       kind="server_error"), status_code=500)

    return app
