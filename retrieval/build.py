"""Build retrieval indexes from a JSONL corpus.

::

    python -m retrieval.build --corpus corpus.jsonl --out index/ \\
        [--encoder minilm|e5-base-v2|PATH] [--index flat|hnsw|ivfpq] [--bm25] [--no-dense]

Writes the dense retriever into ``OUT`` (``dense.json``, ``index.faiss``, the documents)
and, with ``--bm25``, a BM25 retriever into ``OUT/bm25``. The corpus is streamed: the
documents go straight to ``OUT``, passages are encoded ``--batch-size`` at a time.
Search-R1's wiki-18 setting is ``--encoder e5-base-v2 --index flat``.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

from retrieval.corpus import count_corpus_lines, read_corpus

logger = logging.getLogger("retrieval.build")


def _index_overrides(args: argparse.Namespace) -> dict[str, Any]:
    names = {
        "hnsw": ("hnsw_m", "ef_construction", "ef_search"),
        "ivfpq": ("nlist", "pq_m", "pq_nbits", "nprobe", "train_size"),
        "flat": (),
    }[args.index]
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def build(args: argparse.Namespace) -> dict[str, float]:
    """Build what ``args`` asks for; returns build seconds per part."""
    from retrieval.encoders import Encoder, EncoderConfig, encoder_config

    timings: dict[str, float] = {}
    total = count_corpus_lines(args.corpus)
    if total == 0:
        raise SystemExit(f"{args.corpus}: the corpus is empty")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.no_dense:
        from retrieval.dense import DenseRetriever

        config = encoder_config(args.encoder)
        overrides = {
            key: value
            for key, value in (
                ("query_prefix", args.query_prefix),
                ("passage_prefix", args.passage_prefix),
            )
            if value is not None
        }
        if args.encoder_batch_size is not None:
            overrides["batch_size"] = args.encoder_batch_size
        if overrides:
            config = EncoderConfig(**{**config.to_json(), **overrides})
        start = time.perf_counter()
        retriever = DenseRetriever.build(
            read_corpus(args.corpus),
            Encoder(config),
            index_type=args.index,
            batch_size=args.batch_size,
            store_dir=args.out,
            total=total,
            **_index_overrides(args),
        )
        retriever.save(args.out)
        timings["dense"] = time.perf_counter() - start
        logger.info(
            "dense %s index of %d passages in %s (%.1fs)",
            args.index,
            len(retriever),
            args.out,
            timings["dense"],
        )
    if args.bm25:
        from retrieval.bm25 import BM25Retriever

        start = time.perf_counter()
        bm25_dir = args.out / "bm25"
        retriever = BM25Retriever.build(
            read_corpus(args.corpus), stemmer=args.stemmer, store_dir=bm25_dir, total=total
        )
        retriever.save(bm25_dir)
        timings["bm25"] = time.perf_counter() - start
        logger.info(
            "BM25 index of %d passages in %s (%.1fs)", len(retriever), bm25_dir, timings["bm25"]
        )
    return timings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m retrieval.build", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--corpus", type=Path, required=True, help='JSONL with {"id", "contents"} lines'
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument(
        "--encoder",
        default="minilm",
        help="minilm (default, offline), e5-base-v2, or a model id/path",
    )
    parser.add_argument("--query-prefix", help="override the encoder's query prefix")
    parser.add_argument("--passage-prefix", help="override the encoder's passage prefix")
    parser.add_argument("--index", choices=("flat", "hnsw", "ivfpq"), default="flat")
    parser.add_argument(
        "--batch-size", type=int, default=1024, help="passages encoded per streaming step"
    )
    parser.add_argument("--encoder-batch-size", type=int, help="texts per encoder forward pass")
    parser.add_argument("--bm25", action="store_true", help="also build BM25 into OUT/bm25")
    parser.add_argument(
        "--no-dense", action="store_true", help="skip the dense index (with --bm25)"
    )
    parser.add_argument("--stemmer", help="PyStemmer language for BM25 (e.g. english)")
    group = parser.add_argument_group("index parameters (defaults in retrieval.faiss_index)")
    group.add_argument("--hnsw-m", dest="hnsw_m", type=int)
    group.add_argument("--ef-construction", dest="ef_construction", type=int)
    group.add_argument("--ef-search", dest="ef_search", type=int)
    group.add_argument("--nlist", type=int)
    group.add_argument("--pq-m", dest="pq_m", type=int)
    group.add_argument("--pq-nbits", dest="pq_nbits", type=int)
    group.add_argument("--nprobe", type=int)
    group.add_argument("--train-size", dest="train_size", type=int)
    args = parser.parse_args(argv)
    if args.no_dense and not args.bm25:
        parser.error("--no-dense without --bm25 builds nothing")
    return args


def main(argv: list[str] | None = None) -> None:
    """Parse options and build."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    build(parse_args(argv))


if __name__ == "__main__":
    main()
