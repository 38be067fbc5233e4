"""Retrieval quality and speed on real HotpotQA questions over 11k real Wikipedia paragraphs.

Quality: recall@3 and recall@10 of the gold supporting paragraphs (HotpotQA
``supporting_facts`` titles mapped to corpus paragraphs by title; every question has 2)
for dense (default encoder: all-MiniLM-L6-v2, flat index), BM25 and hybrid (RRF).
Speed: index build time; in-process queries/s for batches of 1, 32 and 256; and queries/s
through the HTTP server (a separate process on 127.0.0.1) with 16 concurrent clients
sending one query per request, micro-batching on (``--max-batch 64``) versus off
(``--max-batch 1``, one request per retriever call) — the ratio is the figure of merit.

The dense index (the slow part: ~20 min of MiniLM encoding on 2 busy CPU cores) is cached
under ``--cache-dir`` by corpus content; its build time is the one measured when it was
built. ``--threads`` (default 1) caps torch/FAISS threads here and in the server: on a
small shared machine two OpenMP threads per process fight other processes and make
single-query calls several times slower, which would flatter micro-batching.

Run from the repository root::

    python benchmarks/retrieval.py [--corpus PATH] [--questions PATH] [--max-questions N]
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named like the `retrieval` package: make `import retrieval` find the package.
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO_ROOT))

import argparse  # noqa: E402
import hashlib  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402

import numpy as np  # noqa: E402

from retrieval.base import Document, Retriever  # noqa: E402
from retrieval.corpus import read_corpus  # noqa: E402

SHARED_DATA = Path(os.environ.get("AGENTGYM_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
DEFAULT_CORPUS = SHARED_DATA / "search_r1_qa" / "hotpotqa_distractor_paragraphs_corpus.jsonl"
DEFAULT_QUESTIONS = (
    SHARED_DATA / "hotpotqa" / "hotpot_dev_distractor_v1.sample1143.original_format.json"
)


def load_questions(path: Path, documents: Sequence[Document]) -> tuple[list[str], list[set[str]]]:
    """Questions and, for each, the corpus ids of its supporting paragraphs (by title)."""
    id_by_title = {doc.title: doc.id for doc in documents}
    questions, gold_ids, missing = [], [], 0
    for item in json.loads(path.read_text(encoding="utf-8")):
        titles = {title for title, _ in item["supporting_facts"]}
        ids = {id_by_title[t] for t in titles if t in id_by_title}
        missing += len(titles) - len(ids)
        if ids:
            questions.append(item["question"])
            gold_ids.append(ids)
    if missing:
        print(f"warning: {missing} supporting titles not found in the corpus")
    return questions, gold_ids


def recall_at(
    retriever: Retriever, questions: list[str], gold: list[set[str]], ks: Sequence[int]
) -> dict[int, float]:
    """Mean over questions of |gold ∩ top-k| / |gold|."""
    results = retriever.batch_search(questions, max(ks))
    return {
        k: float(
            np.mean(
                [
                    len(g & {r.document.id for r in hits[:k]}) / len(g)
                    for g, hits in zip(gold, results, strict=True)
                ]
            )
        )
        for k in ks
    }


def in_process_qps(retriever: Retriever, queries: list[str], batch_size: int, total: int) -> float:
    """Queries per second over ``total`` queries sent ``batch_size`` at a time (after one warm-up batch)."""
    retriever.batch_search(queries[:batch_size], 3)
    start = time.perf_counter()
    for offset in range(0, total, batch_size):
        batch = [queries[(offset + i) % len(queries)] for i in range(batch_size)]
        retriever.batch_search(batch, 3)
    return total / (time.perf_counter() - start)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_qps(
    index_dir: Path,
    queries: list[str],
    *,
    max_batch: int,
    clients: int,
    requests: int,
    threads: int,
) -> tuple[float, dict]:
    """Start ``retrieval.serve`` on 127.0.0.1, hit it with ``clients`` threads, stop it.

    Returns:
        (queries per second, the server's batching counters).
    """
    import httpx

    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [
        sys.executable,
        "-m",
        "retrieval.serve",
        "--index",
        str(index_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-batch",
        str(max_batch),
        "--log-level",
        "warning",
        "--threads",
        str(threads),
    ]
    server = subprocess.Popen(command, env=env, cwd=REPO_ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"server exited with code {server.returncode}")
            try:
                httpx.get(base + "/health", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError("server did not start within 120 s") from None
                time.sleep(0.2)
        per_client = requests // clients
        failures: list[str] = []

        def client(worker: int, count: int) -> None:
            # The standard library's keep-alive connection: the clients share the server's
            # 2 cores, and httpx's per-request CPU cost would be measured as server time.
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                for i in range(count):
                    query = queries[(worker * per_client + i) % len(queries)]
                    body = json.dumps({"query": query, "topk": 3})
                    connection.request(
                        "POST", "/retrieve", body=body, headers={"Content-Type": "application/json"}
                    )
                    response = connection.getresponse()
                    payload = response.read()
                    if response.status != 200 or len(json.loads(payload)["result"][0]) != 3:
                        failures.append(payload[:200].decode("utf-8", "replace"))
            finally:
                connection.close()

        def run(count: int) -> float:
            threads = [threading.Thread(target=client, args=(w, count)) for w in range(clients)]
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            return time.perf_counter() - start

        run(2)  # warm-up: connections, first batches
        before = httpx.get(base + "/health").json()["batching"]
        elapsed = run(per_client)
        after = httpx.get(base + "/health").json()["batching"]
        if failures:
            raise RuntimeError(f"{len(failures)} failed requests, e.g. {failures[0]}")
        batches = after["batches"] - before["batches"]
        served = after["queries"] - before["queries"]
        stats = {"batches": batches, "mean_batch": served / max(batches, 1)}
        return clients * per_client / elapsed, stats
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()


def timed(label: str, build: Callable[[], Retriever]) -> tuple[Retriever, float]:
    """Run ``build`` and report its wall time."""
    print(f"building {label} ...", flush=True)
    start = time.perf_counter()
    retriever = build()
    return retriever, time.perf_counter() - start


def cached_dense_index(
    corpus: Path, documents: list[Document], cache_dir: Path, rebuild: bool
) -> tuple[Retriever, str]:
    """The dense index of ``corpus``, built once and kept in ``cache_dir``.

    Encoding 11k paragraphs with MiniLM takes minutes on 2 CPU cores, so the index is cached
    by corpus content and encoder; the build time printed is the one measured when it was built.

    Returns:
        (retriever, a description of its build time in seconds).
    """
    from retrieval.dense import DenseRetriever
    from retrieval.encoders import DEFAULT_ENCODER, Encoder

    digest = hashlib.sha1(corpus.read_bytes()).hexdigest()[:12]
    folder = cache_dir / f"{digest}-minilm-flat"
    record = folder / "benchmark_build.json"
    encoder = Encoder(DEFAULT_ENCODER)
    _ = encoder.dim  # load the model outside the build timing
    if record.exists() and not rebuild:
        built = json.loads(record.read_text())
        print(f"dense index: cached in {folder} (--rebuild to rebuild)", flush=True)
        return DenseRetriever.load(
            folder, encoder=encoder
        ), f"{built['seconds']:.0f} (cached, {built['when']})"
    dense, seconds = timed(
        "dense (MiniLM-L6, flat)", lambda: DenseRetriever.build(documents, encoder, "flat")
    )
    dense.save(folder)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    record.write_text(json.dumps({"seconds": seconds, "when": when}))
    return dense, f"{seconds:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS)
    parser.add_argument(
        "--max-questions", type=int, default=1143, help="subsample questions (seeded)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=384, help="server requests per setting")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch/FAISS threads, here and in the server"
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path.home() / ".cache" / "agentgym" / "benchmark-retrieval",
    )
    parser.add_argument("--rebuild", action="store_true", help="rebuild the cached dense index")
    parser.add_argument("--skip-server", action="store_true")
    args = parser.parse_args()

    from retrieval.bm25 import BM25Retriever
    from retrieval.hybrid import HybridRetriever
    from retrieval.serve import limit_threads

    limit_threads(args.threads)
    documents = list(read_corpus(args.corpus))
    questions, gold = load_questions(args.questions, documents)
    if len(questions) > args.max_questions:
        rng = np.random.default_rng(args.seed)
        keep = np.sort(rng.choice(len(questions), args.max_questions, replace=False))
        questions, gold = [questions[i] for i in keep], [gold[i] for i in keep]
    print(
        f"corpus: {len(documents)} paragraphs; questions: {len(questions)}; "
        f"threads: {args.threads} of {os.cpu_count()} CPUs"
    )

    dense, dense_build = cached_dense_index(args.corpus, documents, args.cache_dir, args.rebuild)
    bm25, bm25_build = timed("BM25", lambda: BM25Retriever.build(documents))
    hybrid = HybridRetriever([dense, bm25])
    retrievers = {"dense": dense, "bm25": bm25, "hybrid": hybrid}

    print("\n## Quality (recall of the 2 gold supporting paragraphs)\n")
    print("| retriever | recall@3 | recall@10 | build s |")
    print("|---|---|---|---|")
    builds = {"dense": dense_build, "bm25": f"{bm25_build:.1f}", "hybrid": "(both)"}
    for name, retriever in retrievers.items():
        recall = recall_at(retriever, questions, gold, (3, 10))
        print(f"| {name} | {recall[3]:.3f} | {recall[10]:.3f} | {builds[name]} |", flush=True)

    print("\n## In-process throughput (queries/s, top-3)\n")
    print("| retriever | batch 1 | batch 32 | batch 256 | 256 vs 1 |")
    print("|---|---|---|---|---|")
    for name, retriever in retrievers.items():
        qps = {
            b: in_process_qps(retriever, questions, b, total)
            for b, total in ((1, 64), (32, 256), (256, 512))
        }
        print(
            f"| {name} | {qps[1]:.0f} | {qps[32]:.0f} | {qps[256]:.0f} | {qps[256] / qps[1]:.1f}x |",
            flush=True,
        )

    if args.skip_server:
        return
    print(f"\n## Server, {args.clients} concurrent clients, 1 query per request, dense top-3\n")
    settings = {"clients": args.clients, "requests": args.requests, "threads": args.threads}
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as tmp:
        dense.save(tmp)
        off, off_stats = server_qps(Path(tmp), questions, max_batch=1, **settings)
        on, on_stats = server_qps(Path(tmp), questions, max_batch=64, **settings)
    print("| server | queries/s | retriever calls | mean queries/call |")
    print("|---|---|---|---|")
    for label, qps, stats in (
        ("one request at a time (--max-batch 1)", off, off_stats),
        ("micro-batching (--max-batch 64)", on, on_stats),
    ):
        print(f"| {label} | {qps:.0f} | {stats['batches']} | {stats['mean_batch']:.1f} |")
    print(f"\nmicro-batching speed-up: {on / off:.1f}x (target >= 3x)")


if __name__ == "__main__":
    main()
