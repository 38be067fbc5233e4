"""The HTTP contract: both request forms, response shapes, refusals, failures and bursts."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from retrieval.server import create_app  # noqa: E402
from tests.retrieval.fakes import KeywordRetriever, animal_corpus  # noqa: E402


@pytest.fixture
def client():
    app = create_app(
        KeywordRetriever(animal_corpus()),
        max_queries_per_request=4,
        max_topk=5,
        max_query_chars=50,
        max_body_bytes=2000,
    )
    with TestClient(app) as test_client:
        yield test_client


def test_batch_form_with_scores(client):
    response = client.post(
        "/retrieve", json={"queries": ["owl", "the fox"], "topk": 2, "return_scores": True}
    )
    assert response.status_code == 200
    result = response.json()["result"]
    assert len(result) == 2 and all(len(hits) == 2 for hits in result)
    assert result[0][0] == {
        "document": {"id": "2", "contents": '"Owl"\nthe owl is an animal number 2'},
        "score": 1.0,
    }
    assert result[1][0]["document"]["id"] == "3" and result[1][0]["score"] == 2.0
    assert set(result[1][1]) == {"document", "score"}


def test_bare_documents_and_default_topk(client):
    result = client.post("/retrieve", json={"queries": ["yak"]}).json()["result"]
    assert len(result[0]) == 3  # Search-R1's default top-3
    assert result[0][0] == {"id": "5", "contents": '"Yak"\nthe yak is an animal number 5'}


def test_single_query_form(client):
    body = client.post("/retrieve", json={"query": "emu", "topk": 1, "return_scores": True}).json()
    assert body == {
        "result": [
            [
                {
                    "document": {"id": "6", "contents": '"Emu"\nthe emu is an animal number 6'},
                    "score": 1.0,
                }
            ]
        ]
    }


def test_empty_query_list_gives_empty_result(client):
    assert client.post("/retrieve", json={"queries": []}).json() == {"result": []}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ('{"queries": ["a"', "JSON"),
        ("", "empty body"),
        ("[1, 2]", "body"),
        ('{"queries": "cat"}', "queries"),
        ('{"queries": [1, 2]}', "queries.0"),
        ('{"query": ["cat"]}', "query"),
        ('{"queries": ["cat"], "query": "cat"}', "exactly one"),
        ('{"topk": 3}', "exactly one"),
        ('{"queries": ["cat"], "topk": 0}', "topk"),
        ('{"queries": ["cat"], "topk": "3"}', "topk"),
        ('{"queries": ["cat"], "topk": true}', "topk"),
        ('{"queries": ["cat"], "topk": 6}', "limit of 5"),
        ('{"queries": ["a", "b", "c", "d", "e"]}', "limit of 4"),
        ('{"queries": ["cat"], "top_k": 3}', "top_k"),
        ('{"queries": ["cat"], "return_scores": "yes"}', "return_scores"),
        (json.dumps({"queries": ["x" * 51]}), "longer than 50"),
    ],
)
def test_malformed_requests_get_422_with_a_message(client, body, fragment):
    response = client.post("/retrieve", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and fragment in detail
    # the server is still fine afterwards
    assert client.post("/retrieve", json={"query": "cat"}).status_code == 200


def test_oversized_body_gets_413(client):
    response = client.post(
        "/retrieve",
        content=json.dumps({"queries": ["cat " * 600]}),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert "limit" in response.json()["detail"]


def test_health_reports_corpus_and_batching(client):
    client.post("/retrieve", json={"queries": ["cat", "dog"]})
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["documents"] == 10
    assert health["limits"]["max_topk"] == 5
    assert health["batching"]["queries"] >= 2


def test_failing_retriever_gives_500_and_server_survives():
    class Broken(KeywordRetriever):
        def batch_search(self, queries, k):
            if "boom" in queries:
                raise RuntimeError("disk on fire")
            return super().batch_search(queries, k)

    with TestClient(create_app(Broken(animal_corpus()), max_batch=1)) as client:
        response = client.post("/retrieve", json={"query": "boom"})
        assert response.status_code == 500 and "disk on fire" in response.json()["detail"]
        assert client.post("/retrieve", json={"query": "cat"}).status_code == 200


def test_burst_of_concurrent_requests_all_answered_and_batched(live_server):
    import httpx

    retriever, url = live_server
    names = [doc.title.lower() for doc in animal_corpus()]

    def client(worker):  # 16 clients x 6 sequential requests on one connection each
        answers = []
        with httpx.Client(timeout=30) as http:
            for i in range(6):
                name = names[(worker + i) % len(names)]
                body = http.post(url + "/retrieve", json={"query": name, "topk": 1}).json()
                answers.append((name, body["result"][0][0]["contents"]))
        return answers

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = [answer for answers in pool.map(client, range(16)) for answer in answers]
    assert len(answers) == 96
    assert all(f"the {name} is" in contents for name, contents in answers)
    assert sum(retriever.calls) == 96
    assert len(retriever.calls) < 96  # concurrent requests shared retriever calls


def test_serve_cli_options():
    from retrieval.serve import _is_loopback, parse_args

    args = parse_args(["--bm25", "somewhere"])
    assert (
        args.host == "127.0.0.1" and args.port == 8000 and args.max_batch == 64 and args.topk == 3
    )
    with pytest.raises(SystemExit):
        parse_args([])  # neither --index nor --bm25
    assert _is_loopback("127.0.0.1") and _is_loopback("::1") and _is_loopback("localhost")
    assert not _is_loopback("0.0.0.0")
