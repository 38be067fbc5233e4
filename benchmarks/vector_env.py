"""Throughput and per-step overhead of TextVectorEnv's backends.

Two measurements, each against the ``"sync"`` backend measured in the same run:

1. Steps per second (env steps, summed over the batch) for 1, 2, 4 and 8 envs on a
   CPU-bound env (``ScriptedTextEnv(work_ms=5)``: ~5 ms of pure-Python work per step).
   Worker backends use ``num_workers = min(num_envs, cpu_count)``.
2. Per-step overhead on a no-work env with 1 KB observations
   (``ScriptedTextEnv(observation_size=1024)``): milliseconds per ``step()`` of a one-env
   vector env, minus the same for ``"sync"``.

Targets (2-core machine): subprocess with 2 workers >= 1.7x sync throughput; subprocess
overhead <= 0.3 ms per step. Other processes on the machine distort both: the load
average is printed before and after.

Usage::

    PYTHONPATH=. python benchmarks/vector_env.py [--backends sync subprocess ray] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import time

from agentgym.scripted import ScriptedTextEnv
from agentgym.vector import TextVectorEnv

ENV_COUNTS = (1, 2, 4, 8)
WORK_MS = 5.0
OBSERVATION_SIZE = 1024


def steps_per_second(backend: str, num_envs: int, batch_steps: int) -> tuple[float, int]:
    """Env steps per second of a ``num_envs`` batch on the 5 ms env; also the workers."""
    env_fn = functools.partial(ScriptedTextEnv, work_ms=WORK_MS, max_steps=None)
    with TextVectorEnv([env_fn] * num_envs, backend=backend) as venv:
        venv.reset(seed=0)
        actions = ["look"] * num_envs
        for _ in range(3):  # warm up
            venv.step(actions)
        start = time.perf_counter()
        for _ in range(batch_steps):
            venv.step(actions)
        elapsed = time.perf_counter() - start
        return num_envs * batch_steps / elapsed, venv.num_workers


def ms_per_step(backend: str, batch_steps: int) -> float:
    """Milliseconds per ``step()`` of one no-work env with 1 KB observations."""
    env_fn = functools.partial(ScriptedTextEnv, observation_size=OBSERVATION_SIZE, max_steps=None)
    with TextVectorEnv([env_fn], backend=backend) as venv:
        venv.reset(seed=0)
        for _ in range(50):
            venv.step(["look"])
        best = float("inf")
        for _ in range(3):  # best of 3 repeats: the least disturbed by other processes
            start = time.perf_counter()
            for _ in range(batch_steps):
                venv.step(["look"])
            best = min(best, (time.perf_counter() - start) / batch_steps * 1000)
        return best


def _autogroup_note() -> str:
    """Linux autogroup gives each session one fair CPU share: on a machine busy with other
    sessions, this script's workers (subprocess and Ray alike) share one session's CPU."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as file:
            return f"sched_autogroup_enabled={file.read().strip()}"
    except OSError:
        return "sched_autogroup_enabled=n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    available = ["sync", "subprocess"]
    if importlib.util.find_spec("ray") is not None:
        available.append("ray")
    parser.add_argument("--backends", nargs="+", default=available, choices=available)
    parser.add_argument("--quick", action="store_true", help="fewer steps (noisier)")
    args = parser.parse_args()
    backends = ["sync"] + [b for b in args.backends if b != "sync"]
    batch_steps = 20 if args.quick else 60
    overhead_steps = 300 if args.quick else 2000

    load_before = os.getloadavg()
    print(f"cpu_count={os.cpu_count()}  loadavg before={load_before}  {_autogroup_note()}")
    print(f"\nThroughput on ScriptedTextEnv(work_ms={WORK_MS:g}), env steps/s")
    print(f"{'backend':<11}{'envs':>5}{'workers':>8}{'steps/s':>10}{'vs sync':>9}")
    sync_rate: dict[int, float] = {}
    rates: dict[tuple[str, int], float] = {}
    for backend in backends:
        for n in ENV_COUNTS:
            rate, workers = steps_per_second(backend, n, batch_steps)
            rates[backend, n] = rate
            if backend == "sync":
                sync_rate[n] = rate
            ratio = rate / sync_rate[n]
            print(f"{backend:<11}{n:>5}{workers:>8}{rate:>10.1f}{ratio:>8.2f}x", flush=True)

    print(f"\nPer-step cost, 1 env, no work, {OBSERVATION_SIZE}-char observations")
    print(f"{'backend':<11}{'ms/step':>9}{'overhead vs sync (ms)':>23}")
    sync_ms = None
    overheads: dict[str, float] = {}
    for backend in backends:
        ms = ms_per_step(backend, overhead_steps)
        sync_ms = ms if sync_ms is None else sync_ms
        overheads[backend] = ms - sync_ms
        print(f"{backend:<11}{ms:>9.3f}{ms - sync_ms:>23.3f}", flush=True)

    load_after = os.getloadavg()
    print(f"\nloadavg after={load_after}")
    if load_before[0] > 1.0:  # measured before this script loaded the machine itself
        print(
            "WARNING: other processes were using more than one core when this run started "
            f"(1-min load {load_before[0]:.1f} on {os.cpu_count()} cores): every figure, "
            "the parallel speed-ups most, is distorted."
        )
    if "subprocess" in backends:
        for n in (2, 8):
            ratio = rates["subprocess", n] / sync_rate[n]
            verdict = "met" if ratio >= 1.7 else "NOT met"
            print(f"target subprocess {n} envs / 2 workers >= 1.7x sync: {ratio:.2f}x ({verdict})")
        overhead = overheads["subprocess"]
        verdict = "met" if overhead <= 0.3 else "NOT met"
        print(f"target subprocess overhead <= 0.3 ms/step: {overhead:.3f} ms ({verdict})")


if __name__ == "__main__":
    main()
