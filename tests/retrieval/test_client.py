"""The HTTP client: results equal the server's, retries with backoff, clear final errors."""

from __future__ import annotations

import json
import math
import time

import pytest

httpx = pytest.importorskip("httpx")

from retrieval.base import Retriever  # noqa: E402
from retrieval.client import RemoteRetriever, RetrievalError, parse_response  # noqa: E402
from tests.retrieval.conftest import free_port  # noqa: E402
from tests.retrieval.fakes import KeywordRetriever, animal_corpus  # noqa: E402


def test_remote_results_equal_in_process_results(live_server):
    _, url = live_server
    local = KeywordRetriever(animal_corpus())
    with RemoteRetriever(url + "/retrieve", max_queries_per_request=2) as remote:
        assert isinstance(remote, Retriever)
        queries = ["owl", "the cat", "bat elk", "nothing"]
        assert remote.batch_search(queries, 3) == local.batch_search(
            queries, 3
        )  # split over 2 requests
        assert remote.search("fox", 1) == local.search("fox", 1)
        assert remote.health()["documents"] == 10


def _flaky_transport(statuses, calls):
    """Answers the given statuses in turn, then a valid one-hit result."""

    def handler(request):
        calls.append(request)
        if len(calls) <= len(statuses):
            return httpx.Response(statuses[len(calls) - 1], json={"detail": "busy"})
        return httpx.Response(
            200, json={"result": [[{"document": {"id": "1", "contents": "x"}, "score": 0.5}]]}
        )

    return httpx.MockTransport(handler)


def test_retries_transient_failures_then_succeeds():
    calls = []
    remote = RemoteRetriever(
        "http://127.0.0.1:1",
        retries=3,
        backoff=0.001,
        transport=_flaky_transport([503, 500, 429], calls),
    )
    hits = remote.search("q", 1)
    assert len(calls) == 4
    assert hits[0].document.id == "1" and hits[0].score == 0.5
    assert calls[0].url.path == "/retrieve"
    assert json.loads(calls[0].content) == {"queries": ["q"], "topk": 1, "return_scores": True}


def test_gives_up_after_last_retry_with_a_clear_error():
    calls = []
    remote = RemoteRetriever(
        "http://127.0.0.1:1",
        retries=2,
        backoff=0.001,
        transport=_flaky_transport([503] * 10, calls),
    )
    with pytest.raises(
        RetrievalError, match=r"failed after 3 attempt\(s\); last error: HTTP 503: busy"
    ):
        remote.search("q", 1)
    assert len(calls) == 3


def test_bad_request_is_not_retried():
    calls = []
    remote = RemoteRetriever(
        "http://127.0.0.1:1", retries=5, backoff=0.001, transport=_flaky_transport([422], calls)
    )
    with pytest.raises(RetrievalError, match="refused with HTTP 422: busy"):
        remote.search("q", 1)
    assert len(calls) == 1


def test_connection_refused_retries_with_exponential_backoff():
    port = free_port()  # nothing listens there
    remote = RemoteRetriever(
        f"http://127.0.0.1:{port}", timeout=2, retries=3, backoff=0.05, max_backoff=0.1
    )
    assert remote.backoff_delays() == [0.05, 0.1, 0.1]
    start = time.monotonic()
    with pytest.raises(
        RetrievalError, match=r"failed after 4 attempt\(s\); last error: ConnectError"
    ):
        remote.search("q", 3)
    assert time.monotonic() - start >= 0.25  # slept 0.05 + 0.1 + 0.1


def test_parse_response_shapes_and_errors():
    bare = parse_response({"result": [[{"id": 3, "contents": "c"}]]}, 1)
    assert bare[0][0].document.id == "3" and math.isnan(bare[0][0].score)
    with pytest.raises(RetrievalError, match="no 'result' list"):
        parse_response({"detail": "x"}, 1)
    with pytest.raises(RetrievalError, match="2 result lists for 1 queries"):
        parse_response({"result": [[], []]}, 1)
    with pytest.raises(RetrievalError, match="unexpected /retrieve hit"):
        parse_response({"result": [[{"document": {"id": "1"}}]]}, 1)


def test_client_validates_settings():
    with pytest.raises(ValueError):
        RemoteRetriever("http://127.0.0.1:1", retries=-1)
    assert RemoteRetriever("http://h:1/retrieve/").retrieve_url == "http://h:1/retrieve"
