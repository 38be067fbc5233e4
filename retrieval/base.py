"""The one retriever API: documents, scored results and the ``Retriever`` protocol.

A corpus is JSONL with one ``{"id": str, "contents": str}`` object per line, where
``contents`` is ``'"Title"\\ntext'`` (Search-R1's wiki-18 layout). Every retriever in this
package (BM25, dense FAISS, hybrid, the HTTP client) implements :class:`Retriever`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# The HTTP service's defaults, shared by the server (retrieval.server), its command line
# (retrieval.serve) and the client (retrieval.client), which splits larger batches.
MAX_QUERIES_PER_REQUEST = 256
"""Queries one ``/retrieve`` request may carry."""
SERVER_MAX_BATCH = 64
"""Queries the server hands the retriever in one call (micro-batching)."""
SERVER_BATCH_WAIT_MS = 2.0
"""How long the server waits for a micro-batch to fill."""
SERVER_MAX_TOPK = 100
"""Largest ``topk`` a request may ask for."""
SERVER_DEFAULT_TOPK = 3
"""``topk`` of a request that gives none (Search-R1's default)."""


@dataclass(frozen=True)
class Document:
    """One passage of a corpus.

    Attributes:
        id: the corpus id (a string, e.g. ``"0"``).
        contents: ``'"Title"\\ntext'``, or plain text when the corpus has no titles.
    """

    id: str
    contents: str

    @property
    def title(self) -> str:
        """The title: the first line with its surrounding quotes removed ('' if none)."""
        head, sep, _ = self.contents.partition("\n")
        return head.strip().strip('"') if sep else ""

    @property
    def text(self) -> str:
        """The passage body without the title line."""
        head, sep, rest = self.contents.partition("\n")
        return rest.strip() if sep else head.strip()

    def to_json(self) -> dict[str, str]:
        """Search-R1's wire form: ``{"id": ..., "contents": ...}``."""
        return {"id": self.id, "contents": self.contents}


@dataclass(frozen=True)
class SearchResult:
    """A retrieved document and its score (higher is better)."""

    document: Document
    score: float


@runtime_checkable
class Retriever(Protocol):
    """Anything that returns the top-``k`` documents for queries, best first."""

    def search(self, query: str, k: int) -> list[SearchResult]:
        """The top ``k`` results for one query."""
        ...

    def batch_search(self, queries: Sequence[str], k: int) -> list[list[SearchResult]]:
        """The top ``k`` results for each query, in the order of ``queries``."""
        ...


def check_batch_args(queries: Sequence[str], k: int) -> None:
    """The argument checks every ``batch_search`` shares.

    Raises:
        TypeError: ``queries`` is a single ``str`` (it would be searched letter by letter).
        ValueError: ``k < 1``.
    """
    if isinstance(queries, str):
        raise TypeError("batch_search expects a sequence of queries, got a single str")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
