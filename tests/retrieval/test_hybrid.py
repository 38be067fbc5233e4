"""Reciprocal-rank fusion against hand-computed scores."""

from __future__ import annotations

import pytest

from retrieval.base import Document, Retriever, SearchResult
from retrieval.hybrid import HybridRetriever, reciprocal_rank_fusion


class ListRetriever:
    """Returns fixed rankings (by doc id) for every query; records the k it was asked for."""

    def __init__(self, ids):
        self.ids = ids
        self.asked_k = []

    def search(self, query, k):
        return self.batch_search([query], k)[0]

    def batch_search(self, queries, k):
        self.asked_k.append(k)
        return [
            [SearchResult(Document(i, f"doc {i}"), 100.0 - r) for r, i in enumerate(self.ids[:k])]
            for _ in queries
        ]


def test_rrf_hand_computed():
    dense = ListRetriever(["a", "b", "c"])
    sparse = ListRetriever(["c", "a", "d"])
    hybrid = HybridRetriever([dense, sparse], k_rrf=60)
    assert isinstance(hybrid, Retriever)
    results = hybrid.search("q", 4)
    # a: 1/61 + 1/62, c: 1/63 + 1/61, b: 1/62, d: 1/63
    expected = {"a": 1 / 61 + 1 / 62, "c": 1 / 63 + 1 / 61, "b": 1 / 62, "d": 1 / 63}
    assert [r.document.id for r in results] == ["a", "c", "b", "d"]
    for r in results:
        assert r.score == pytest.approx(expected[r.document.id])
    assert dense.asked_k == [50] and sparse.asked_k == [50]  # depth candidates from each


def test_rrf_weights_and_k_rrf():
    rankings = [
        [SearchResult(Document("a", ""), 1.0), SearchResult(Document("b", ""), 0.5)],
        [SearchResult(Document("b", ""), 9.0)],
    ]
    fused = reciprocal_rank_fusion(rankings, 2, k_rrf=0, weights=[1.0, 2.0])
    # a: 1/1 = 1; b: 1/2 + 2/1 = 2.5
    assert [(r.document.id, r.score) for r in fused] == [("b", 2.5), ("a", 1.0)]


def test_rrf_ties_are_deterministic():
    # x and y both at rank 1 in one list each: equal scores, equal best rank -> first seen wins
    rankings = [[SearchResult(Document("x", ""), 1.0)], [SearchResult(Document("y", ""), 1.0)]]
    assert [r.document.id for r in reciprocal_rank_fusion(rankings, 2)] == ["x", "y"]
    assert [r.document.id for r in reciprocal_rank_fusion(rankings[::-1], 2)] == ["y", "x"]


def test_batch_matches_single_and_validates():
    hybrid = HybridRetriever([ListRetriever(["a", "b"]), ListRetriever(["b", "c"])], depth=1)
    batch = hybrid.batch_search(["q1", "q2"], 2)
    assert batch == [hybrid.search("q1", 2)] * 2
    with pytest.raises(ValueError):
        HybridRetriever([])
    with pytest.raises(ValueError):
        HybridRetriever([ListRetriever([])], weights=[1.0, 2.0])
    with pytest.raises(TypeError):
        hybrid.batch_search("not a list", 2)
