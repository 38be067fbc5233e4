"""Hybrid retrieval by reciprocal-rank fusion (RRF).

Cormack, Clarke & Büttcher (SIGIR 2009), eq. 1: a document ``d`` ranked ``r_i(d)``
(1-based) by retriever ``i`` gets

    RRF(d) = Σ_i  w_i / (k_rrf + r_i(d)),

summed over the retrievers that returned ``d`` among their top ``depth``; ``k_rrf = 60`` as
in the paper, weights ``w_i = 1`` by default. Only ranks matter, so BM25 scores and cosine
similarities need no calibration. Documents are identified by ``Document.id``.
"""

from __future__ import annotations

from collections.abc import Sequence

from retrieval.base import Document, Retriever, SearchResult, check_batch_args


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[SearchResult]],
    k: int,
    *,
    k_rrf: float = 60.0,
    weights: Sequence[float] | None = None,
) -> list[SearchResult]:
    """Fuse ranked lists into one, best first, with the RRF score as ``score``.

    Ties are broken by the best single rank, then by first appearance (earlier retriever,
    then higher rank), so the result is deterministic.

    Args:
        rankings: one best-first result list per retriever.
        k: how many fused results to keep.
        k_rrf: the RRF constant (larger flattens the rank discount).
        weights: one weight per ranking (default all 1).
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    best_rank: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    documents: dict[str, Document] = {}
    for weight, ranking in zip(weights, rankings, strict=True):
        for rank, result in enumerate(ranking, start=1):
            doc_id = result.document.id
            scores[doc_id] = scores.get(doc_id, 0.0) + weight / (k_rrf + rank)
            best_rank[doc_id] = min(best_rank.get(doc_id, rank), rank)
            first_seen.setdefault(doc_id, len(first_seen))
            documents.setdefault(doc_id, result.document)
    order = sorted(scores, key=lambda d: (-scores[d], best_rank[d], first_seen[d]))
    return [SearchResult(documents[d], scores[d]) for d in order[:k]]


class HybridRetriever:
    """Fuses several retrievers (e.g. dense + BM25) by reciprocal-rank fusion.

    Args:
        retrievers: the retrievers to fuse; each is asked for its top ``depth``.
        k_rrf: the RRF constant (60 in Cormack et al. 2009).
        weights: one weight per retriever (default all 1).
        depth: candidates taken from each retriever (at least ``k``).
    """

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        k_rrf: float = 60.0,
        *,
        weights: Sequence[float] | None = None,
        depth: int = 50,
    ) -> None:
        if not retrievers:
            raise ValueError("HybridRetriever needs at least one retriever")
        if weights is not None and len(weights) != len(retrievers):
            raise ValueError(f"{len(weights)} weights for {len(retrievers)} retrievers")
        if k_rrf < 0 or depth < 1:
            raise ValueError(f"need k_rrf >= 0 and depth >= 1, got {k_rrf}, {depth}")
        self.retrievers = list(retrievers)
        self.k_rrf = k_rrf
        self.weights = None if weights is None else list(weights)
        self.depth = depth

    def search(self, query: str, k: int) -> list[SearchResult]:
        """The top ``k`` fused results for one query."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: Sequence[str], k: int) -> list[list[SearchResult]]:
        """One ``batch_search`` per underlying retriever, then fusion per query."""
        check_batch_args(queries, k)
        depth = max(k, self.depth)
        per_retriever = [r.batch_search(queries, depth) for r in self.retrievers]
        return [
            reciprocal_rank_fusion(
                [results[i] for results in per_retriever], k, k_rrf=self.k_rrf, weights=self.weights
            )
            for i in range(len(queries))
        ]
