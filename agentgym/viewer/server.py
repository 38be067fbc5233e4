"""A local HTTP server for the rollout viewer: one static page plus a small JSON API.

Built on the standard library's ``http.server`` and a single hand-written HTML/JS page:
the viewer then works wherever ``agentgym`` is installed (gymnasium + numpy only), needs
no build step and nothing from the internet, and -- since it only reads files -- imports
nothing from ``algorithms`` (no torch). It binds to 127.0.0.1 (this machine only) unless
told another address (``--host``; from another machine, ``ssh -L`` to the default is the
safer way: ``docs/viewer.md``).

API (all GET, JSON):

- ``/api/runs`` -- one :func:`~agentgym.viewer.data.run_summary` per run given.
- ``/api/records?run=I&split=train&iteration=3`` -- the trajectories of one record file.
- ``/api/metrics?run=I`` -- the run's ``metrics.jsonl`` records.
- ``/api/image?run=I&split=train&name=iter_000003/t1_s0_0.png`` -- a PNG a step's
  ``images`` names (visual envs; ``image/png``, not JSON).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from agentgym.viewer.data import (
    RunReadError,
    image_file,
    read_metrics,
    read_records,
    records_file,
    run_summary,
)

HOST = "127.0.0.1"
"""The address the viewer binds by default: this machine only."""


def _page() -> bytes:
    return resources.files("agentgym.viewer").joinpath("static/index.html").read_bytes()


def make_handler(run_dirs: list[Path]) -> type[BaseHTTPRequestHandler]:
    """A request handler class serving ``run_dirs`` (index = position in the list)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # quiet: the terminal shows the URL, not every request

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, value: Any, status: int = HTTPStatus.OK) -> None:
            self._send(status, json.dumps(value).encode("utf-8"), "application/json")

        def _run(self, query: dict[str, list[str]]) -> Path:
            try:
                index = int(query.get("run", ["0"])[0])
                return run_dirs[index]
            except (ValueError, IndexError):
                raise RunReadError(f"unknown run {query.get('run')}") from None

        def do_GET(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            query = parse_qs(url.query)
            try:
                if url.path in ("/", "/index.html"):
                    self._send(HTTPStatus.OK, _page(), "text/html; charset=utf-8")
                elif url.path == "/api/runs":
                    self._json([run_summary(run) for run in run_dirs])
                elif url.path == "/api/metrics":
                    self._json(read_metrics(self._run(query)))
                elif url.path == "/api/records":
                    split = query.get("split", ["train"])[0]
                    iteration = int(query.get("iteration", ["0"])[0])
                    self._json(read_records(records_file(self._run(query), split, iteration)))
                elif url.path == "/api/image":
                    path = image_file(self._run(query), query.get("split", ["train"])[0],
                                      query.get("name", [""])[0])
                    self._send(HTTPStatus.OK, path.read_bytes(), "image/png")
                else:
                    self._json({"error": f"no such page {url.path}"}, HTTPStatus.NOT_FOUND)
            except (RunReadError, ValueError, OSError) as error:
                self._json({"error": str(error)}, HTTPStatus.BAD_REQUEST)

    return Handler


def make_server(run_dirs: list[Path], port: int = 0, host: str = HOST) -> ThreadingHTTPServer:
    """A server for ``run_dirs`` on ``host`` (default :data:`HOST`; ``port`` 0: any free
    port); call ``serve_forever()`` on it, ``server_address[1]`` is its port."""
    return ThreadingHTTPServer((host, port), make_handler([Path(p) for p in run_dirs]))
