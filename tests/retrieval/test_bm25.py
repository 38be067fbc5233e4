"""BM25: hand-computed Lucene scores, self-retrieval, no-match queries, save/load (incl. mmap)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("bm25s")

from retrieval.base import Document, Retriever  # noqa: E402
from retrieval.bm25 import BM25Retriever  # noqa: E402
from tests.retrieval.fakes import generated_corpus  # noqa: E402

TINY = [
    Document("0", "apple banana apple"),
    Document("1", "banana cherry"),
    Document("2", "cherry cherry cherry durian"),
]


def lucene_bm25(query_terms, doc_terms, corpus_terms, k1=1.5, b=0.75):
    """Reference Lucene BM25: idf = ln(1 + (N - df + 0.5) / (df + 0.5)) times
    tf / (tf + k1 (1 - b + b |d| / avgdl)) (no (k1 + 1) factor since Lucene 8)."""
    n = len(corpus_terms)
    avgdl = sum(len(d) for d in corpus_terms) / n
    score = 0.0
    for term in set(query_terms):
        df = sum(term in d for d in corpus_terms)
        tf = doc_terms.count(term)
        if tf == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        score += idf * tf / (tf + k1 * (1 - b + b * len(doc_terms) / avgdl))
    return score


def test_scores_match_hand_computed_lucene_bm25():
    retriever = BM25Retriever.build(TINY, show_progress=False)
    assert isinstance(retriever, Retriever)
    corpus_terms = [d.contents.split() for d in TINY]
    hits = retriever.search("the banana and cherry", 3)  # "the", "and" are stopwords
    expected = sorted(
        (
            (lucene_bm25(["banana", "cherry"], terms, corpus_terms), d.id)
            for d, terms in zip(TINY, corpus_terms, strict=True)
        ),
        reverse=True,
    )
    assert [h.document.id for h in hits] == [doc_id for _, doc_id in expected]
    for hit, (score, _) in zip(hits, expected, strict=True):
        assert hit.score == pytest.approx(score, rel=1e-5)


def test_no_match_gives_no_results():
    retriever = BM25Retriever.build(TINY, show_progress=False)
    assert retriever.batch_search(["zebra", "the and of", "", "apple"], 3)[:3] == [[], [], []]
    assert [h.document.id for h in retriever.search("apple", 3)] == ["0"]  # zero scores are dropped


def test_passage_searched_by_its_own_text_comes_first():
    corpus = generated_corpus(200)
    retriever = BM25Retriever.build(iter(corpus), batch_size=33, show_progress=False)
    results = retriever.batch_search([d.contents for d in corpus], 2)
    assert [hits[0].document for hits in results] == corpus
    assert all(hits[0].score > hits[1].score for hits in results)


@pytest.mark.parametrize("mmap", [False, True])
def test_save_load_roundtrip(tmp_path, mmap):
    corpus = generated_corpus(60, seed=3)
    built = BM25Retriever.build(corpus, show_progress=False)
    queries = [d.text[:50] for d in corpus[:10]] + ["no such words here"]
    built.save(tmp_path / "bm25")
    loaded = BM25Retriever.load(tmp_path / "bm25", mmap=mmap)
    assert loaded.batch_search(queries, 5) == built.batch_search(queries, 5)
    assert loaded.settings == built.settings and len(loaded) == 60


def test_errors():
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Retriever.build([], show_progress=False)
    with pytest.raises(FileNotFoundError, match="not a BM25"):
        BM25Retriever.load("/nonexistent")
    with pytest.raises(ValueError):
        BM25Retriever.build(TINY, show_progress=False).search("x", 0)
