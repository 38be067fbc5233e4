"""FAISS inner-product indexes: construction, streaming add, GPU sharding and IO.

Three index types, all with inner product on unit vectors (= cosine similarity):

- ``"flat"``: exact search (``IndexFlatIP``), Search-R1's choice. Memory 4·d bytes/vector.
- ``"hnsw"``: graph search (``IndexHNSWFlat``); approximate, fast on CPU, no training.
  Parameters: ``hnsw_m`` (links per node, 32), ``ef_construction`` (200), ``ef_search`` (128).
- ``"ivfpq"``: inverted file with product quantization (``IndexIVFPQ``); approximate and
  compressed to ``pq_m`` bytes/vector, needs training on a sample. Parameters: ``nlist``
  (clusters; default ``4·sqrt(n_train)`` capped at ``n_train / 39``), ``pq_m`` (sub-quantizers;
  default the largest divisor of d that is at most d/8), ``pq_nbits`` (8; lowered for tiny
  training sets), ``nprobe`` (clusters visited per query, 16), ``train_size`` (vectors
  buffered for training, 100,000).

:class:`StreamingIndexBuilder` adds embeddings chunk by chunk, so a corpus is never held
twice; for IVF-PQ it buffers only the first ``train_size`` vectors, trains, then streams.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

INDEX_TYPES = ("flat", "hnsw", "ivfpq")
INDEX_DEFAULTS: dict[str, dict[str, Any]] = {
    "flat": {},
    "hnsw": {"hnsw_m": 32, "ef_construction": 200, "ef_search": 128},
    "ivfpq": {"nlist": None, "pq_m": None, "pq_nbits": 8, "nprobe": 16, "train_size": 100_000},
}
"""Every index type's parameters and their defaults (the one place they are written)."""


def index_params(index_type: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The defaults of ``index_type`` updated with ``overrides``.

    Raises:
        ValueError: unknown index type.
        TypeError: a parameter that this index type does not have.
    """
    if index_type not in INDEX_DEFAULTS:
        raise ValueError(f"unknown index_type {index_type!r}; choose one of {INDEX_TYPES}")
    unknown = sorted(set(overrides) - set(INDEX_DEFAULTS[index_type]))
    if unknown:
        raise TypeError(
            f"index_type {index_type!r} has no parameter(s) {unknown}; "
            f"valid: {sorted(INDEX_DEFAULTS[index_type]) or 'none'}"
        )
    return {**INDEX_DEFAULTS[index_type], **overrides}


def default_pq_m(dim: int) -> int:
    """The largest divisor of ``dim`` that is at most ``dim / 8`` (at least 1)."""
    for m in range(max(1, dim // 8), 0, -1):
        if dim % m == 0:
            return m
    return 1


def _new_ivfpq(dim: int, train_vectors: np.ndarray, params: dict[str, Any]) -> Any:
    import faiss

    n_train = len(train_vectors)
    nlist = params["nlist"] or max(1, min(int(4 * math.sqrt(n_train)), n_train // 39))
    if nlist > n_train:
        raise ValueError(
            f"ivfpq: nlist={nlist} needs at least that many training vectors, got {n_train}"
        )
    pq_m = params["pq_m"] or default_pq_m(dim)
    if dim % pq_m:
        raise ValueError(f"ivfpq: pq_m={pq_m} must divide the embedding dimension {dim}")
    pq_nbits = min(int(params["pq_nbits"]), max(1, int(math.log2(n_train))))
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFPQ(quantizer, dim, nlist, pq_m, pq_nbits, faiss.METRIC_INNER_PRODUCT)
    index.train(train_vectors)
    index.nprobe = min(int(params["nprobe"]), nlist)
    return index


class StreamingIndexBuilder:
    """Builds a CPU FAISS index from embedding chunks.

    Args:
        index_type: ``"flat"``, ``"hnsw"`` or ``"ivfpq"``.
        params: complete parameters (see :func:`index_params`).
    """

    def __init__(self, index_type: str, params: dict[str, Any]) -> None:
        self.index_type = index_type
        self.params = params
        self.index: Any = None
        self._pending: list[np.ndarray] = []
        self._pending_count = 0

    def add(self, embeddings: np.ndarray) -> None:
        """Add a float32 chunk of shape ``(n, d)``; rows get consecutive ids."""
        import faiss

        embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        if embeddings.ndim != 2:
            raise ValueError(f"expected embeddings of shape (n, d), got {embeddings.shape}")
        if self.index is not None:
            self.index.add(embeddings)
            return
        dim = embeddings.shape[1]
        if self.index_type == "flat":
            self.index = faiss.IndexFlatIP(dim)
            self.index.add(embeddings)
        elif self.index_type == "hnsw":
            self.index = faiss.IndexHNSWFlat(
                dim, int(self.params["hnsw_m"]), faiss.METRIC_INNER_PRODUCT
            )
            self.index.hnsw.efConstruction = int(self.params["ef_construction"])
            self.index.hnsw.efSearch = int(self.params["ef_search"])
            self.index.add(embeddings)
        else:
            self._pending.append(embeddings)
            self._pending_count += len(embeddings)
            if self._pending_count >= int(self.params["train_size"]):
                self._train_and_flush()

    def _train_and_flush(self) -> None:
        vectors = np.concatenate(self._pending)
        self._pending, self._pending_count = [], 0
        self.index = _new_ivfpq(vectors.shape[1], vectors, self.params)
        self.index.add(vectors)

    def finish(self) -> Any:
        """The built index (trains IVF-PQ now if the corpus was smaller than ``train_size``).

        Raises:
            ValueError: nothing was added.
        """
        if self.index is None and self._pending:
            self._train_and_flush()
        if self.index is None:
            raise ValueError("cannot build an index from an empty corpus")
        return self.index


def index_type_of(index: Any) -> str:
    """``"flat"``, ``"hnsw"`` or ``"ivfpq"`` for an index built here."""
    import faiss

    for cls, name in (
        (faiss.IndexHNSW, "hnsw"),
        (faiss.IndexIVFPQ, "ivfpq"),
        (faiss.IndexFlat, "flat"),
    ):
        if isinstance(index, cls):
            return name
    raise TypeError(f"unsupported FAISS index {type(index).__name__}")


def set_search_params(index: Any, params: dict[str, Any]) -> None:
    """Apply query-time parameters (``ef_search`` for HNSW, ``nprobe`` for IVF-PQ)."""
    import faiss

    if isinstance(index, faiss.IndexHNSW) and "ef_search" in params:
        index.hnsw.efSearch = int(params["ef_search"])
    if isinstance(index, faiss.IndexIVF) and "nprobe" in params:
        index.nprobe = min(int(params["nprobe"]), index.nlist)


def gpu_count() -> int:
    """Number of GPUs FAISS can use (0 with faiss-cpu)."""
    import faiss

    get_num_gpus = getattr(faiss, "get_num_gpus", None)
    return int(get_num_gpus()) if get_num_gpus is not None else 0


def to_gpus(index: Any, *, fp16: bool = True) -> Any:
    """Shard a flat or IVF-PQ index over all visible GPUs (faiss-gpu only).

    Each GPU holds 1/n of the vectors (``shard=True``); with ``fp16`` a flat index stores
    float16 vectors (half the memory: wiki-18's flat E5 index goes from ~61 GB to ~31 GB).

    Raises:
        RuntimeError: no GPU, or an index type FAISS cannot put on GPU (HNSW).
    """
    import faiss

    if gpu_count() == 0:
        raise RuntimeError("no GPU visible to FAISS (install faiss-gpu and check CUDA)")
    if index_type_of(index) == "hnsw":
        raise RuntimeError("FAISS has no GPU HNSW; use a flat or ivfpq index on GPU")
    options = faiss.GpuMultipleClonerOptions()
    options.shard = True
    options.useFloat16 = fp16
    return faiss.index_cpu_to_all_gpus(index, co=options)


def write_index(index: Any, path: Path) -> None:
    """Write a CPU index to ``path``."""
    import faiss

    faiss.write_index(index, str(path))


def read_index(path: Path, *, mmap: bool = False) -> Any:
    """Read an index; with ``mmap`` the file is memory-mapped instead of copied into RAM.

    Memory mapping keeps the vectors in the OS page cache (shared between processes and
    loaded lazily). FAISS maps flat and HNSW vectors and IVF inverted lists read-only.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    import faiss

    if not path.exists():
        raise FileNotFoundError(f"FAISS index not found: {path}")
    flags = 0
    if mmap:
        flags = getattr(faiss, "IO_FLAG_MMAP_IFC", None)
        if flags is None:  # FAISS < 1.10 can map only IVF inverted lists
            flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY
    return faiss.read_index(str(path), flags)
