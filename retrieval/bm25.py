"""Sparse retrieval with BM25 (the ``bm25s`` library: eager sparse scoring, numpy backend).

Scoring is Lucene's BM25 as catalogued by Kamphuis et al. (ECIR 2020, table 1, "Lucene
(default)"): ``Σ_t idf(t) · tf / (tf + k1 · (1 - b + b · |d| / avgdl))`` with
``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``, ``k1 = 1.5``, ``b = 0.75`` by default. Text is lowercased, split on ``\\w\\w+`` and English
stopwords are dropped; stemming is optional (``stemmer="english"``, needs PyStemmer).

Documents without a single query term are never returned (their score is 0), so a query
can get fewer than ``k`` results.

A saved retriever is a folder: ``bm25.json`` (settings), the bm25s index files, the
tokenizer vocabulary, and the document store (``documents.jsonl`` + offsets).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from retrieval.base import Document, SearchResult, check_batch_args
from retrieval.corpus import chunked
from retrieval.docstore import DocumentStore, DocumentStoreWriter
from retrieval.metadata import read_metadata, write_metadata

META_FILE = "bm25.json"
FORMAT_VERSION = 1


def _stemmer(name: str | None) -> Any:
    if name is None:
        return None
    try:
        import Stemmer
    except ImportError as error:
        raise ImportError(f"stemmer={name!r} needs PyStemmer: pip install PyStemmer") from error
    return Stemmer.Stemmer(name)


def _new_tokenizer(stemmer: str | None) -> Any:
    import bm25s

    return bm25s.tokenization.Tokenizer(lower=True, stopwords="en", stemmer=_stemmer(stemmer))


class BM25Retriever:
    """Top-k passages by BM25 score.

    Build with :meth:`build` or :meth:`load`; the constructor only wires parts together.

    Args:
        model: a fitted ``bm25s.BM25``.
        tokenizer: the ``bm25s`` tokenizer whose vocabulary the model was fitted with.
        store: the documents (row i = bm25s document i).
        settings: ``{"k1", "b", "method", "stemmer"}`` (saved with the index).
        workdir: a temporary folder owning ``store``'s files.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        store: DocumentStore,
        settings: dict[str, Any],
        *,
        workdir: tempfile.TemporaryDirectory | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.store = store
        self.settings = dict(settings)
        self._workdir = workdir

    def __len__(self) -> int:
        return len(self.store)

    @classmethod
    def build(
        cls,
        documents: Iterable[Document],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        method: str = "lucene",
        stemmer: str | None = None,
        batch_size: int = 10_000,
        store_dir: str | Path | None = None,
        total: int | None = None,
        show_progress: bool = True,
    ) -> BM25Retriever:
        """Tokenize and index a corpus in one streaming pass (texts go to a disk store).

        Args:
            documents: the corpus; consumed once.
            k1: term-frequency saturation.
            b: length normalization.
            method: bm25s variant (``"lucene"``, ``"robertson"``, ``"atire"``, ``"bm25l"``, ``"bm25+"``).
            stemmer: a PyStemmer language (e.g. ``"english"``) or ``None``.
            batch_size: documents tokenized per step.
            store_dir: where to write the document store (default: a temporary folder).
            total: number of documents, for the progress bar.
            show_progress: show progress bars.

        Raises:
            ValueError: empty corpus.
        """
        import bm25s

        tokenizer = _new_tokenizer(stemmer)
        workdir = None
        if store_dir is None:
            workdir = tempfile.TemporaryDirectory(prefix="bm25-store-")
            store_dir = workdir.name
        if total is None and hasattr(documents, "__len__"):
            total = len(documents)  # type: ignore[arg-type]
        token_ids: list[list[int]] = []
        with (
            DocumentStoreWriter(store_dir) as writer,
            tqdm(
                total=total, desc="tokenizing (bm25)", unit="doc", disable=not show_progress
            ) as bar,
        ):
            for chunk in chunked(documents, batch_size):
                token_ids.extend(
                    tokenizer.tokenize(
                        [d.contents for d in chunk],
                        update_vocab=True,
                        return_as="ids",
                        show_progress=False,
                    )
                )
                writer.add_many(chunk)
                bar.update(len(chunk))
        if not token_ids:
            raise ValueError("cannot build a BM25 index from an empty corpus")
        model = bm25s.BM25(k1=k1, b=b, method=method)
        model.index(tokenizer.to_tokenized_tuple(token_ids), show_progress=show_progress)
        settings = {"k1": k1, "b": b, "method": method, "stemmer": stemmer}
        return cls(model, tokenizer, DocumentStore.open(store_dir), settings, workdir=workdir)

    def save(self, directory: str | Path) -> Path:
        """Write the index, vocabulary, documents and settings into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.store.copy_to(directory)
        self.model.save(str(directory), show_progress=False)
        self.tokenizer.save_vocab(str(directory))
        self.tokenizer.save_stopwords(str(directory))
        write_metadata(
            directory / META_FILE,
            FORMAT_VERSION,
            {"num_documents": len(self.store), **self.settings},
        )
        return directory

    @classmethod
    def load(cls, directory: str | Path, *, mmap: bool = False) -> BM25Retriever:
        """Open a folder written by :meth:`save`.

        Args:
            directory: the folder.
            mmap: memory-map the sparse score matrix instead of reading it into RAM.

        Raises:
            FileNotFoundError: not a BM25 folder.
        """
        import bm25s

        directory = Path(directory)
        meta = read_metadata(directory / META_FILE, FORMAT_VERSION, "BM25 retriever")
        settings = {key: meta[key] for key in ("k1", "b", "method", "stemmer")}
        tokenizer = _new_tokenizer(settings["stemmer"])
        tokenizer.load_vocab(str(directory))
        tokenizer.load_stopwords(str(directory))
        model = bm25s.BM25.load(str(directory), mmap=mmap, show_progress=False)
        store = DocumentStore.open(directory)
        if model.scores["num_docs"] != len(store):
            raise ValueError(
                f"{directory}: index has {model.scores['num_docs']} documents, store {len(store)}"
            )
        return cls(model, tokenizer, store, settings)

    def search(self, query: str, k: int) -> list[SearchResult]:
        """The top ``k`` passages for one query, best first (only positive scores)."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: Sequence[str], k: int) -> list[list[SearchResult]]:
        """The top ``k`` passages with a positive score for each query, best first."""
        check_batch_args(queries, k)
        if len(queries) == 0:
            return []
        query_tokens = self.tokenizer.tokenize(
            list(queries), update_vocab=False, return_as="string", show_progress=False
        )
        rows, scores = self.model.retrieve(
            query_tokens, k=min(k, len(self.store)), show_progress=False, n_threads=0
        )
        return [
            [
                SearchResult(self.store[int(row)], float(score))
                for row, score in zip(row_ids, score_row, strict=True)
                if score > 0
            ]
            for row_ids, score_row in zip(np.asarray(rows), np.asarray(scores), strict=True)
        ]
