"""Dense retrieval: an encoder, a FAISS inner-product index and a disk-backed document store.

Search-R1's setting is :data:`~retrieval.encoders.E5_BASE_V2` with a flat index; the offline
default is MiniLM (:data:`~retrieval.encoders.DEFAULT_ENCODER`). Scores are inner products
of unit vectors, i.e. cosine similarities in [-1, 1] (approximate for ``ivfpq``).

A saved retriever is a folder::

    dense.json               index type and parameters, encoder config, sizes
    index.faiss              the FAISS index (CPU layout)
    documents.jsonl          the passages, row i = FAISS id i
    documents.offsets.npy    byte offsets into documents.jsonl
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from retrieval.base import Document, SearchResult, check_batch_args
from retrieval.corpus import chunked
from retrieval.docstore import DocumentStore, DocumentStoreWriter
from retrieval.encoders import Encoder, EncoderConfig
from retrieval.faiss_index import (
    StreamingIndexBuilder,
    gpu_count,
    index_params,
    read_index,
    set_search_params,
    to_gpus,
    write_index,
)
from retrieval.metadata import read_metadata, write_metadata

logger = logging.getLogger(__name__)

META_FILE = "dense.json"
INDEX_FILE = "index.faiss"
FORMAT_VERSION = 1


class DenseRetriever:
    """Top-k passages by inner product of encoder embeddings.

    Build with :meth:`build` or :meth:`load`; the constructor only wires parts together.

    Args:
        index: a FAISS index whose row ``i`` is ``store[i]``.
        store: the documents.
        encoder: the query encoder (must be the one the passages were encoded with).
        index_type: ``"flat"``, ``"hnsw"`` or ``"ivfpq"``.
        params: the index parameters (see :mod:`retrieval.faiss_index`).
        use_gpu: shard the index over all GPUs for search (``None``: when faiss-gpu sees one).
        workdir: a temporary folder owning ``store``'s files (kept alive with the retriever).
    """

    def __init__(
        self,
        index: Any,
        store: DocumentStore,
        encoder: Encoder,
        *,
        index_type: str,
        params: dict[str, Any],
        use_gpu: bool | None = None,
        workdir: tempfile.TemporaryDirectory | None = None,
    ) -> None:
        if index.ntotal != len(store):
            raise ValueError(
                f"index has {index.ntotal} vectors but the store has {len(store)} documents"
            )
        self.index = index
        self.store = store
        self.encoder = encoder
        self.index_type = index_type
        self.params = dict(params)
        self.use_gpu = gpu_count() > 0 if use_gpu is None else use_gpu
        self._workdir = workdir
        self._search_index: Any = None

    def __len__(self) -> int:
        return len(self.store)

    @classmethod
    def build(
        cls,
        documents: Iterable[Document],
        encoder: Encoder | EncoderConfig | None = None,
        index_type: str = "flat",
        batch_size: int = 1024,
        *,
        store_dir: str | Path | None = None,
        total: int | None = None,
        use_gpu: bool | None = None,
        show_progress: bool = True,
        **params: Any,
    ) -> DenseRetriever:
        """Encode and index a corpus in one streaming pass.

        At most ``batch_size`` passages (texts and embeddings) are in memory at a time besides
        the index itself; passages go to a disk store as they are read.

        Args:
            documents: the corpus, e.g. ``read_corpus(path)``; consumed once.
            encoder: the encoder (or its config); default :data:`~retrieval.encoders.DEFAULT_ENCODER`.
            index_type: ``"flat"``, ``"hnsw"`` or ``"ivfpq"``.
            batch_size: passages read, encoded and added per step.
            store_dir: where to write the document store (e.g. the final output folder, so
                :meth:`save` need not copy it); default a temporary folder.
            total: number of documents, for the progress bar (``len(documents)`` if it has one).
            use_gpu: see the class docstring.
            show_progress: show a progress bar over passages.
            **params: index parameters (see :mod:`retrieval.faiss_index`).

        Raises:
            ValueError: empty corpus or bad index type.
            TypeError: a parameter the index type does not have.
        """
        params = index_params(index_type, params)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        encoder = _as_encoder(encoder)
        workdir = None
        if store_dir is None:
            workdir = tempfile.TemporaryDirectory(prefix="dense-store-")
            store_dir = workdir.name
        if total is None and hasattr(documents, "__len__"):
            total = len(documents)  # type: ignore[arg-type]
        builder = StreamingIndexBuilder(index_type, params)
        start = time.perf_counter()
        with (
            DocumentStoreWriter(store_dir) as writer,
            tqdm(
                total=total, desc=f"encoding ({index_type})", unit="doc", disable=not show_progress
            ) as bar,
        ):
            for chunk in chunked(documents, batch_size):
                embeddings = encoder.encode_passages(
                    [d.contents for d in chunk], show_progress=False
                )
                builder.add(embeddings)
                writer.add_many(chunk)
                bar.update(len(chunk))
            index = builder.finish()
        logger.info(
            "built %s index of %d passages in %.1fs",
            index_type,
            index.ntotal,
            time.perf_counter() - start,
        )
        store = DocumentStore.open(store_dir)
        return cls(
            index,
            store,
            encoder,
            index_type=index_type,
            params=params,
            use_gpu=use_gpu,
            workdir=workdir,
        )

    def save(self, directory: str | Path) -> Path:
        """Write the index, the documents and the metadata into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.store.copy_to(directory)
        write_index(self.index, directory / INDEX_FILE)
        meta = {
            "index_type": self.index_type,
            "params": self.params,
            "num_documents": len(self.store),
            "dim": int(self.index.d),
            "encoder": self.encoder.config.to_json(),
        }
        write_metadata(directory / META_FILE, FORMAT_VERSION, meta)
        return directory

    @classmethod
    def load(
        cls,
        directory: str | Path,
        encoder: Encoder | EncoderConfig | None = None,
        mmap: bool = False,
        *,
        use_gpu: bool | None = None,
        **search_params: Any,
    ) -> DenseRetriever:
        """Open a folder written by :meth:`save` or ``python -m retrieval.build``.

        Args:
            directory: the folder.
            encoder: the query encoder; default the one recorded in ``dense.json``.
            mmap: memory-map the index file instead of reading it into RAM.
            use_gpu: see the class docstring.
            **search_params: query-time overrides (``ef_search`` for hnsw, ``nprobe`` for ivfpq).

        Raises:
            FileNotFoundError: not a dense retriever folder.
            ValueError: the files disagree with each other.
        """
        directory = Path(directory)
        meta = read_metadata(directory / META_FILE, FORMAT_VERSION, "dense retriever")
        saved_encoder = EncoderConfig.from_json(meta["encoder"])
        if encoder is None:
            encoder = Encoder(saved_encoder)
        encoder = _as_encoder(encoder)
        if encoder.config.model != saved_encoder.model:
            logger.warning(
                "%s was encoded with %r but queries will use %r",
                directory,
                saved_encoder.model,
                encoder.config.model,
            )
        index = read_index(directory / INDEX_FILE, mmap=mmap)
        params = {**meta["params"], **search_params}
        set_search_params(index, params)
        store = DocumentStore.open(directory)
        return cls(
            index, store, encoder, index_type=meta["index_type"], params=params, use_gpu=use_gpu
        )

    def _index_for_search(self) -> Any:
        if self._search_index is None:
            self._search_index = to_gpus(self.index) if self.use_gpu else self.index
        return self._search_index

    def search(self, query: str, k: int) -> list[SearchResult]:
        """The top ``k`` passages for one query, best first."""
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: Sequence[str], k: int) -> list[list[SearchResult]]:
        """The top ``k`` passages for each query: one encoder call and one index call.

        Fewer than ``k`` results come back only when the corpus is smaller than ``k`` (or an
        approximate index finds fewer candidates).
        """
        check_batch_args(queries, k)
        if len(queries) == 0:
            return []
        embeddings = self.encoder.encode_queries(list(queries), show_progress=False)
        if embeddings.shape[1] != self.index.d:
            raise ValueError(
                f"query embeddings have dimension {embeddings.shape[1]} but the index has {self.index.d}: "
                "load the retriever with the encoder it was built with"
            )
        scores, rows = self._index_for_search().search(embeddings, min(k, len(self.store)))
        return [
            [
                SearchResult(self.store[int(row)], float(score))
                for score, row in zip(score_row, row_ids, strict=True)
                if row >= 0
            ]
            for score_row, row_ids in zip(scores, rows, strict=True)
        ]


def _as_encoder(encoder: Encoder | EncoderConfig | None) -> Encoder:
    if encoder is None:
        return Encoder()
    if isinstance(encoder, EncoderConfig):
        return Encoder(encoder)
    return encoder
