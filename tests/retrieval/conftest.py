"""Fixtures for retrieval tests: a real uvicorn server on 127.0.0.1 and a free port."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.retrieval.fakes import KeywordRetriever, animal_corpus


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def live_server():
    """(retriever, base_url) of a uvicorn server in a thread, with a slow fake retriever."""
    uvicorn = pytest.importorskip("uvicorn")
    from retrieval.server import create_app

    retriever = KeywordRetriever(animal_corpus(), delay=0.01)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(retriever, batch_wait_ms=2), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield retriever, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
