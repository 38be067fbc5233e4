"""Run the retrieval server: ``python -m retrieval.serve --index DIR [--bm25 DIR]``.

With ``--index`` only: dense retrieval; with ``--bm25`` only: BM25; with both: hybrid
(reciprocal-rank fusion). Binds 127.0.0.1 unless ``--host`` says otherwise.

Example (Search-R1 clients then use ``http://127.0.0.1:8000/retrieve``)::

    python -m retrieval.build --corpus corpus.jsonl --out index/ --bm25
    python -m retrieval.serve --index index/ --bm25 index/bm25 --port 8000
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
from pathlib import Path

from retrieval.base import (
    MAX_QUERIES_PER_REQUEST,
    SERVER_BATCH_WAIT_MS,
    SERVER_DEFAULT_TOPK,
    SERVER_MAX_BATCH,
    SERVER_MAX_TOPK,
    Retriever,
)

logger = logging.getLogger("retrieval.serve")


def load_retriever(
    index: Path | None,
    bm25: Path | None,
    *,
    encoder: str | None = None,
    mmap: bool = False,
    k_rrf: float = 60.0,
) -> Retriever:
    """Dense, BM25 or hybrid retriever from saved folders (at least one must be given)."""
    retrievers: list[Retriever] = []
    if index is not None:
        from retrieval.dense import DenseRetriever
        from retrieval.encoders import encoder_config

        config = None if encoder is None else encoder_config(encoder)
        retrievers.append(DenseRetriever.load(index, encoder=config, mmap=mmap))
    if bm25 is not None:
        from retrieval.bm25 import BM25Retriever

        retrievers.append(BM25Retriever.load(bm25, mmap=mmap))
    if not retrievers:
        raise ValueError("give --index DIR, --bm25 DIR, or both")
    if len(retrievers) == 1:
        return retrievers[0]
    from retrieval.hybrid import HybridRetriever

    return HybridRetriever(retrievers, k_rrf=k_rrf)


def limit_threads(threads: int) -> None:
    """Cap torch's and FAISS's CPU threads (on a shared or small machine, one thread per
    process often beats two fighting threads)."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    try:
        import torch
    except ImportError:
        pass
    else:
        torch.set_num_threads(threads)
    try:
        import faiss
    except ImportError:
        pass
    else:
        faiss.omp_set_num_threads(threads)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m retrieval.serve", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--index", type=Path, help="dense retriever folder (from retrieval.build)")
    parser.add_argument("--bm25", type=Path, help="BM25 folder (from retrieval.build --bm25)")
    parser.add_argument(
        "--encoder", help="override the saved query encoder: minilm, e5-base-v2 or a path"
    )
    parser.add_argument("--mmap", action="store_true", help="memory-map the index files")
    parser.add_argument(
        "--k-rrf", type=float, default=60.0, help="RRF constant for hybrid (default 60)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--max-batch",
        type=int,
        default=SERVER_MAX_BATCH,
        help="queries per retriever call; 1 = no batching",
    )
    parser.add_argument(
        "--batch-wait-ms",
        type=float,
        default=SERVER_BATCH_WAIT_MS,
        help="wait for a batch to fill (ms)",
    )
    parser.add_argument(
        "--max-queries", type=int, default=MAX_QUERIES_PER_REQUEST, help="queries per request limit"
    )
    parser.add_argument("--max-topk", type=int, default=SERVER_MAX_TOPK, help="topk limit")
    parser.add_argument(
        "--topk",
        type=int,
        default=SERVER_DEFAULT_TOPK,
        help="topk when a request has none (default %(default)s)",
    )
    parser.add_argument(
        "--threads", type=int, help="CPU threads for torch and FAISS (default: theirs)"
    )
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    if args.index is None and args.bm25 is None:
        parser.error("give --index DIR, --bm25 DIR, or both")
    return args


def main(argv: list[str] | None = None) -> None:
    """Load the retriever(s) and serve until interrupted."""
    import uvicorn

    from retrieval.server import create_app

    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    if not _is_loopback(args.host):
        logger.warning("binding %s: the retrieval server has no authentication", args.host)
    if args.threads is not None:
        limit_threads(args.threads)
    retriever = load_retriever(
        args.index, args.bm25, encoder=args.encoder, mmap=args.mmap, k_rrf=args.k_rrf
    )
    app = create_app(
        retriever,
        max_batch=args.max_batch,
        batch_wait_ms=args.batch_wait_ms,
        max_queries_per_request=args.max_queries,
        max_topk=args.max_topk,
        default_topk=args.topk,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
