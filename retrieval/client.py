"""A :class:`~retrieval.base.Retriever` that asks a retrieval server over HTTP.

Speaks Search-R1's ``POST /retrieve`` protocol (see :mod:`retrieval.server`), so it works
with this project's server and with Search-R1's own ``retrieval_server.py``.

Failures that may pass (connection refused or reset, timeouts, HTTP 429/500/502/503/504)
are retried ``retries`` times with exponential backoff: the wait before retry ``i``
(0-based) is ``min(max_backoff, backoff · 2**i)`` seconds. Other HTTP errors (4xx: a bad
request) are not retried. Either way the error is a :class:`RetrievalError` naming the
URL, the number of attempts and the last cause.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from retrieval.base import MAX_QUERIES_PER_REQUEST, Document, SearchResult, check_batch_args

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class RetrievalError(RuntimeError):
    """The server could not answer (after retries) or answered something unusable."""


class RemoteRetriever:
    """Search through a retrieval server.

    Args:
        url: the server, ``"http://127.0.0.1:8000"`` or the full ``.../retrieve`` URL.
        timeout: seconds for connecting and for reading each response.
        retries: retries after the first attempt (0: try once).
        backoff: seconds before the first retry; doubled for each further retry.
        max_backoff: cap on one wait.
        max_queries_per_request: larger batches are split into several requests.
        transport: an ``httpx`` transport to use instead of the network (tests, proxies).
    """

    def __init__(
        self,
        url: str,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        *,
        max_backoff: float = 10.0,
        max_queries_per_request: int = MAX_QUERIES_PER_REQUEST,
        transport: Any = None,
    ) -> None:
        if retries < 0 or backoff < 0 or timeout <= 0 or max_queries_per_request < 1:
            raise ValueError(
                "need retries >= 0, backoff >= 0, timeout > 0, max_queries_per_request >= 1"
            )
        base = url.rstrip("/")
        if base.endswith("/retrieve"):
            base = base[: -len("/retrieve")]
        self.base_url = base
        self.retrieve_url = base + "/retrieve"
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_queries_per_request = max_queries_per_request
        self.transport = transport
        self._client: Any = None
        self._lock = threading.Lock()

    def _http(self) -> Any:
        if self._client is None:
            import httpx

            with self._lock:
                if self._client is None:
                    self._client = httpx.Client(timeout=self.timeout, transport=self.transport)
        return self._client

    def close(self) -> None:
        """Close the connection pool (the retriever can still be used: it reopens)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> RemoteRetriever:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def backoff_delays(self) -> list[float]:
        """The waits before each retry, in seconds."""
        return [min(self.max_backoff, self.backoff * 2**i) for i in range(self.retries)]

    def _request(self, method: str, url: str, payload: dict[str, Any] | None = None) -> Any:
        import httpx

        delays = self.backoff_delays()
        attempts = len(delays) + 1
        last_cause = "no attempt made"
        for attempt in range(attempts):
            if attempt:
                time.sleep(delays[attempt - 1])
            try:
                response = self._http().request(method, url, json=payload)
            except httpx.TransportError as error:  # connect/read errors and timeouts
                last_cause = f"{type(error).__name__}: {error}"
                continue
            if response.status_code in RETRYABLE_STATUS:
                last_cause = f"HTTP {response.status_code}: {_detail(response)}"
                continue
            if response.status_code >= 400:
                raise RetrievalError(
                    f"{method} {url} was refused with HTTP {response.status_code}: {_detail(response)}"
                )
            try:
                return response.json()
            except ValueError:
                raise RetrievalError(
                    f"{method} {url} answered non-JSON: {response.text[:200]!r}"
                ) from None
        raise RetrievalError(
            f"{method} {url} failed after {attempts} attempt(s); last error: {last_cause}"
        )

    def health(self) -> dict[str, Any]:
        """The server's ``GET /health`` answer (with the same retries)."""
        return self._request("GET", self.base_url + "/health")

    def search(self, query: str, k: int) -> list[SearchResult]:
        """The top ``k`` results for one query."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: Sequence[str], k: int) -> list[list[SearchResult]]:
        """The top ``k`` results per query, in ``max_queries_per_request`` chunks.

        Raises:
            RetrievalError: the server failed after all retries, refused the request, or
                answered in an unexpected shape.
        """
        check_batch_args(queries, k)
        results: list[list[SearchResult]] = []
        step = self.max_queries_per_request
        for start in range(0, len(queries), step):
            chunk = list(queries[start : start + step])
            payload = {"queries": chunk, "topk": k, "return_scores": True}
            results.extend(
                parse_response(self._request("POST", self.retrieve_url, payload), len(chunk))
            )
        return results


def _detail(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return str(body)[:200]


def parse_response(body: Any, num_queries: int) -> list[list[SearchResult]]:
    """Turn a Search-R1 ``/retrieve`` answer into result lists.

    Accepts entries with scores (``{"document": {...}, "score": s}``) and bare documents
    (score NaN). Extra document keys are ignored; a non-string id is turned into a string.

    Raises:
        RetrievalError: the answer does not have that shape or has the wrong length.
    """
    if not isinstance(body, dict) or not isinstance(body.get("result"), list):
        raise RetrievalError(f"unexpected /retrieve answer (no 'result' list): {str(body)[:200]}")
    lists = body["result"]
    if len(lists) != num_queries:
        raise RetrievalError(
            f"/retrieve answered {len(lists)} result lists for {num_queries} queries"
        )
    parsed: list[list[SearchResult]] = []
    for hits in lists:
        if not isinstance(hits, list):
            raise RetrievalError(f"unexpected /retrieve result entry: {str(hits)[:200]}")
        row = []
        for hit in hits:
            try:
                if isinstance(hit, dict) and "document" in hit:
                    document, score = hit["document"], float(hit.get("score", math.nan))
                else:
                    document, score = hit, math.nan
                row.append(
                    SearchResult(
                        Document(id=str(document["id"]), contents=str(document["contents"])), score
                    )
                )
            except (KeyError, TypeError, ValueError) as error:
                raise RetrievalError(
                    f"unexpected /retrieve hit {str(hit)[:200]}: {error!r}"
                ) from None
        parsed.append(row)
    return parsed
