"""WebShop env benchmark: search latency, memory per env, vectorized steps per second.

Prints, each against a baseline measured in the same run:

1. **search latency** per query (goal instructions as queries) on the generated catalog
   with 1,000 and 100,000 products (and on ../shared/data/webshop when present), against
   the targets (< 5 ms and < 50 ms) and against a naive pure-Python BM25 over the same
   terms (the kind of scorer a per-worker copy would use);
2. **memory**: resident memory added per extra env in one process, against the memory
   of one private catalog + index (what each env costs when it loads its own copy, as
   the reference does); target <= 5 MB;
3. **steps per second** of 16 WebShop envs stepped as a batch -- through
   ``agentgym.vector.make_vector_env`` when that module exists, else a plain loop over 16
   envs -- with a random admissible-action policy, against one env stepped alone;
4. on the real data (when present): the share of goals whose target a search of the
   instruction finds in the top 50, and the oracle's share of perfect purchases.

Usage: ``PYTHONPATH=. python benchmarks/webshop.py [--quick] [--no-100k]``.
"""

from __future__ import annotations

import argparse
import gc
import math
import multiprocessing as mp
import os
import random
import time
from collections import Counter
from pathlib import Path

import numpy as np

from agentgym.vector import make_vector_env
from agentgym.webshop.catalog_gen import generate_catalog
from agentgym.webshop.env import SEARCH_PLACEHOLDER, WebShopEnv
from agentgym.webshop.goals import GoalSplit
from agentgym.webshop.oracle import run_oracle
from agentgym.webshop.shop import Shop, build_shop, get_shop

SHARED = Path(os.environ.get("AGENTGYM_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
VECTOR_ENVS = 16


def rss_mb() -> float:
    """Resident set size of this process in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class NaiveBM25:
    """Baseline: Lucene BM25 in plain Python dictionaries, scoring every document."""

    def __init__(self, shop: Shop, k1: float = 0.9, b: float = 0.4):
        analyzer = shop.search_engine.analyzer
        self.analyzer = analyzer
        self.docs = [Counter(analyzer(p.search_text())) for p in shop.catalog.products]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.average = sum(self.lengths) / len(self.lengths)
        df: Counter[str] = Counter()
        for doc in self.docs:
            df.update(doc.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.k1, self.b = k1, b
        self.ids = [p.asin for p in shop.catalog.products]

    def search(self, query: str, k: int = 50) -> list[str]:
        terms = self.analyzer(query)
        scored = []
        for i, doc in enumerate(self.docs):
            score = 0.0
            norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / self.average)
            for term in terms:
                tf = doc.get(term, 0)
                if tf:
                    score += self.idf[term] * tf / (tf + norm)
            if score > 0:
                scored.append((-score, i))
        scored.sort()
        return [self.ids[i] for _, i in scored[:k]]


def queries_for(shop: Shop, count: int, seed: int = 0) -> list[str]:
    table = shop.goal_table("synthetic", GoalSplit())
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(table), size=min(count, len(table)), replace=False)
    return [table.goal(int(i)).instruction for i in picks]


def time_queries(search, queries: list[str]) -> np.ndarray:
    times = []
    for query in queries:
        start = time.perf_counter()
        search(query)
        times.append(time.perf_counter() - start)
    return np.asarray(times) * 1000


def bench_search(label: str, shop: Shop, target_ms: float, n_queries: int, n_baseline: int):
    queries = queries_for(shop, n_queries)
    ms = time_queries(shop.search, queries)
    baseline = NaiveBM25(shop)
    base_ms = time_queries(baseline.search, queries[:n_baseline])
    agree = np.mean([shop.search(q)[:10] == tuple(baseline.search(q)[:10]) for q in queries[:20]])
    print(
        f"  {label:<28} mean {ms.mean():7.3f} ms  p50 {np.median(ms):7.3f}  "
        f"p95 {np.percentile(ms, 95):7.3f}  | target {target_ms:g} ms: "
        f"{ms.mean() / target_ms:5.3f}x of budget | naive Python BM25 {base_ms.mean():8.2f} ms "
        f"-> {base_ms.mean() / ms.mean():6.1f}x faster (top-10 agreement {agree:.0%})"
    )


def _memory_worker(n_envs: int, queue) -> None:
    """Runs in a fresh process: RSS and traced bytes added per env, and per private copy."""
    import tracemalloc

    first = WebShopEnv(nouns="simple")
    first.reset(seed=0)
    gc.collect()
    before = rss_mb()
    tracemalloc.start()
    envs = []
    for i in range(n_envs):
        env = WebShopEnv(nouns="simple")
        env.reset(seed=i)
        env.step("search[wool socks for men]")
        env.step(f"click[{env.page.clickables[-1]}]")
        envs.append(env)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] / n_envs / 1024
    tracemalloc.stop()
    per_env = (rss_mb() - before) / n_envs
    before_copy = rss_mb()
    catalog = generate_catalog()  # what a worker with its own copy loads: catalog + index
    copy = build_shop(catalog)
    gc.collect()
    copy_mb = rss_mb() - before_copy
    queue.put((per_env, traced, copy_mb, len(copy.catalog)))


def bench_memory(n_envs: int) -> None:
    context = mp.get_context("spawn")
    queue = context.Queue()
    worker = context.Process(target=_memory_worker, args=(n_envs, queue))
    worker.start()
    per_env, traced_kib, copy_mb, size = queue.get()
    worker.join()
    print(
        f"  {n_envs} extra envs in a fresh process: {per_env * 1024:.1f} KiB RSS per env "
        f"({traced_kib:.1f} KiB traced allocations) -> {per_env / 5:.4f}x of the 5 MB budget | "
        f"a private catalog + index of {size:,} products: {copy_mb:.1f} MiB -> sharing saves "
        f"{copy_mb / max(per_env, traced_kib / 1024):,.0f}x per env"
    )


def random_action(admissible, words: list[str], rng: random.Random) -> str:
    if not admissible:  # a finished env (done page): the vector env ignores its action
        return ""
    action = rng.choice(admissible)
    if action == SEARCH_PLACEHOLDER:
        return f"search[{' '.join(rng.sample(words, min(4, len(words))))}]"
    return action


def vector_rate(envs, total_steps: int, rng: random.Random) -> float:
    """Steps/s of live (not finished) envs under random admissible actions."""
    _, infos = envs.reset(seed=0)
    steps, start, round_ = 0, time.perf_counter(), 0
    done = np.zeros(envs.num_envs, dtype=bool)
    while steps < total_steps:
        actions = [
            random_action(infos["admissible_actions"][i], infos["task"][i].split(), rng)
            for i in range(envs.num_envs)
        ]
        _, _, terminated, truncated, infos = envs.step(actions)
        steps += int((~done).sum())
        done |= np.asarray(terminated) | np.asarray(truncated)
        if done.all():
            round_ += 1
            done[:] = False
            _, infos = envs.reset(seed=round_ * envs.num_envs)
    return steps / (time.perf_counter() - start)


def bench_steps(total_steps: int) -> None:
    rng = random.Random(0)
    # baseline: one env alone
    single = WebShopEnv(nouns="simple")
    steps, start = 0, time.perf_counter()
    observation, info = single.reset(seed=0)
    episode = 0
    while steps < total_steps // 4:
        words = info["task"].split()
        observation, _, terminated, truncated, info = single.step(
            random_action(info["admissible_actions"], words, rng)
        )
        steps += 1
        if terminated or truncated:
            episode += 1
            observation, info = single.reset(seed=episode)
    single_rate = steps / (time.perf_counter() - start)

    for backend in ("sync", "subprocess"):
        envs = make_vector_env(
            "AgentGym/WebShop-v0", VECTOR_ENVS, backend=backend, num_workers=2, nouns="simple"
        )
        rate = vector_rate(envs, total_steps, rng)
        envs.close()
        print(
            f"  16 envs, agentgym.vector, {backend} backend: {rate:,.0f} "
            f"steps/s | one env alone: {single_rate:,.0f} steps/s -> {rate / single_rate:.2f}x"
        )


def bench_real_data(quick: bool) -> None:
    data = SHARED / "webshop"
    if not data.exists():
        print("  (no ../shared/data/webshop: skipped)")
        return
    shop = get_shop(data)
    for goals in ("synthetic", "human"):
        table = shop.goal_table(goals, GoalSplit())
        misses = [
            table.goal_id(i) for i in range(len(table))
            if table.goal(i).asin not in shop.search(table.goal(i).instruction)
        ]  # fmt: skip
        print(
            f"  {goals}: target in top 50 for {1 - len(misses) / len(table):.2%} of "
            f"{len(table)} goals; {len(misses)} misses: {misses}"
        )
    env = WebShopEnv(data, split="test", max_steps=30, nouns="simple")
    task_ids = list(env.task_ids)[: 100 if quick else None]
    failures = [t for t in task_ids if run_oracle(env, t)[0] != 1.0]
    print(
        f"  oracle (search, click target, choose options, buy) on {len(task_ids)} test goals: "
        f"score 1.0 on {1 - len(failures) / len(task_ids):.2%}; failures {failures}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer queries and steps")
    parser.add_argument("--no-100k", action="store_true", help="skip the 100,000-product catalog")
    args = parser.parse_args()
    n_queries = 200 if args.quick else 1000
    stemming = get_shop().search_engine.analyzer.stemming
    print(f"WebShop benchmark (search stemming: {'Porter' if stemming else 'off'})")
    print("1. search latency per query")
    bench_search("generated, 1,000 products", get_shop(), 5.0, n_queries, 100)
    if (SHARED / "webshop").exists():
        bench_search("real data, 1,000 products", get_shop(SHARED / "webshop"), 5.0, n_queries, 100)
    if not args.no_100k:
        start = time.perf_counter()
        big = get_shop(num_products=100_000)
        print(f"  (generated and indexed 100,000 products in {time.perf_counter() - start:.1f} s)")
        bench_search("generated, 100,000 products", big, 50.0, n_queries // 4, 5)
    print("2. memory per additional env (generated 1,000 products)")
    bench_memory(50 if args.quick else 200)
    print("3. vectorized steps per second (random admissible actions)")
    bench_steps(2000 if args.quick else 8000)
    print("4. real data")
    bench_real_data(args.quick)


if __name__ == "__main__":
    main()
