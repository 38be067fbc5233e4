"""Seconds and peak memory per phase of a training iteration, and GiGPO's grouping share.

Runs the ``cpu-demo`` preset (default model) for a few
iterations in each prompt layout (``window``: a fresh prompt per step; ``transcript``:
one growing sequence per trajectory, scored in one forward pass) and prints, per phase
(rollout, log-probs, advantages, update, weight sync), the mean seconds and the share of
the iteration, for both layouts side by side (same seeds, so the same tasks). GiGPO's
extra work over GRPO -- building the anchor step groups and the step-level advantages --
is timed on each iteration's real step batch (``gigpo_terms`` with the rollout's dense
anchor ids, as the learner calls it, vs ``grpo_advantages``, the baseline measured in the
same run) and on a synthetic batch of the paper's ALFWorld size (16 groups x 8
trajectories x 50 steps = 6,400 steps).

Memory: each layout runs in a fresh process, and the peak resident set size (RSS) of
every phase -- setup (model load, envs), rollout, log-probs, advantages, update, weight
sync and a checkpoint saved after each iteration -- is read from Linux's
``/proc/self/status`` (``VmHWM``), reset at the start of each phase through
``/proc/self/clear_refs``; the RSS left after each phase is printed beside it (a peak
far above what stays shows transient memory, a steady RSS that only grows shows
fragmentation). Elsewhere than Linux the memory columns are left out.

Precision (``--dtypes``): each ``model.dtype`` named runs as its own variant beside each
layout, e.g. ``--dtypes float32 auto`` (``auto``: bfloat16 on a CPU with bfloat16
instructions, :mod:`algorithms.precision`), in its own process; the processes of one
layout take turns iteration by iteration (one runs while the others wait), so a load
that comes and goes on a shared machine falls on each alike. The last line gives the
second dtype's speed-up over the first per iteration. The learner's achieved FLOP/s -- the floating-point
operations of the log-probs and update phases, counted by torch's ``FlopCounterMode`` over
one more iteration after the timed ones (not timed), divided by those phases' mean times --
is printed against this machine's matrix-product peak in the same dtype, measured in the
same run (a 2048 x 2048 product, the preset's thread count).

Usage::

    python -m benchmarks.train_iteration [--iterations 2] [--preset cpu-demo]
        [--layouts window transcript] [--dtypes float32 auto] [--env-id ID --env-kwargs JSON]

(``-m`` from the repo root: run as a file, the script folder comes first on
``sys.path`` and ``benchmarks/alfworld.py`` would shadow the ``alfworld`` package.)
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from algorithms.config import replace
from algorithms.objectives import advantages as adv
from algorithms.presets import PRESETS
from algorithms.training.trainer import Trainer

PHASES = ("rollout", "log_probs", "advantages", "update", "weight_sync")
MEMORY_PHASES = ("setup", *PHASES, "checkpoint")
"""Phases whose peak RSS is reported (``setup``: model load and env build, once)."""


class PeakMemory:
    """Peak and remaining resident memory (GB) of named phases of this process.

    Linux only (:attr:`available`): the kernel's high-water mark ``VmHWM`` is reset to the
    current RSS at a phase's start (writing ``5`` to ``/proc/self/clear_refs``) and read
    at its end, so a phase's peak is exact (no sampling) and covers every thread.
    """

    def __init__(self) -> None:
        self.peaks: dict[str, list[float]] = defaultdict(list)
        self.remaining: dict[str, list[float]] = defaultdict(list)
        try:
            self._reset()
            self._read("VmHWM")
            self.available = True
        except (OSError, AttributeError):
            self.available = False

    @staticmethod
    def _reset() -> None:
        Path("/proc/self/clear_refs").write_text("5")

    @staticmethod
    def _read(key: str) -> float:
        status = Path("/proc/self/status").read_text()
        return int(re.search(rf"^{key}:\s+(\d+) kB", status, re.M).group(1)) / 1e6

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record the peak and the remaining RSS of the enclosed code under ``name``."""
        if not self.available:
            yield
            return
        self._reset()
        try:
            yield
        finally:
            self.peaks[name].append(self._read("VmHWM"))
            self.remaining[name].append(self._read("VmRSS"))

    def wrap(self, owner: Any, method: str, name: str) -> None:
        """Measure every call of ``owner.method`` as phase ``name``."""
        function = getattr(owner, method)

        @functools.wraps(function)
        def measured(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return function(*args, **kwargs)

        setattr(owner, method, measured)


def _best_of(function, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def synthetic_alfworld_batch(seed: int = 0) -> dict[str, object]:
    """6,400 steps shaped like a paper ALFWorld iteration, with repeated anchors."""
    rng = np.random.default_rng(seed)
    groups, size, steps = 16, 8, 50
    traj_ids = np.repeat(np.arange(groups * size), steps)
    group_ids = traj_ids // size
    rooms = rng.integers(0, 40, size=traj_ids.size)  # ~40 distinct states per task
    anchors = [f"task {g} state {r}: You arrive at countertop {r}. On it you see a mug."
               for g, r in zip(group_ids, rooms, strict=True)]
    rewards = np.where(rng.random(traj_ids.size) < 0.02, 10.0, 0.0)
    rewards -= 0.1 * (rng.random(traj_ids.size) < 0.2)
    return {"rewards": rewards, "traj_ids": traj_ids, "group_ids": group_ids,
            "anchors": anchors}


ROLLOUT_SHAPE = ("rollout/steps", "rollout/trajectories", "rollout/prompt_tokens",
                 "rollout/transcript_cut_rate")
"""Rollout metrics printed beside the phase times (what each layout's rollout held)."""


LEARNER_PHASES = ("log_probs", "update")
"""The phases whose FLOPs are counted (the learner's passes over the batch)."""


def matmul_peak(dtype: torch.dtype, threads: int, size: int = 2048, repeats: int = 5
                ) -> float:
    """FLOP/s of the best of ``repeats`` ``size`` x ``size`` matrix products in ``dtype`` on
    ``threads`` CPU threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        a @ b
        return 2 * size ** 3 / _best_of(lambda: a @ b, repeats)
    finally:
        torch.set_num_threads(previous)


TURN_TIMEOUT_S = 3600.0
"""Seconds a variant waits for its turn before it gives up (the other variant died)."""


def run_layout(preset: str, layout: str, iterations: int,
               env: dict[str, str] | None = None, dtype: str | None = None,
               turns: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """Train ``iterations`` iterations of ``preset`` in ``layout`` (``env`` overrides
    fields of the preset's env section; ``dtype``, if given, the model's dtype), saving a
    checkpoint after each, then one more iteration whose learner FLOPs are counted.

    ``turns`` -- ``(mine, next)`` semaphores -- make variants running in parallel
    processes take turns: each iteration waits for ``mine`` and then releases ``next``, so
    the variants' iterations alternate and share whatever else loads the machine.

    Returns:
        ``{"setup"``: setup seconds, ``"phases"``: the seconds of each phase (and the
        :data:`ROLLOUT_SHAPE` metrics) per iteration, ``"extra"``: per iteration the GiGPO
        and GRPO advantage seconds on its batch with its step count, ``"peaks"`` /
        ``"remaining"``: per phase of :data:`MEMORY_PHASES`, the peak and the remaining
        RSS (GB) of each call (empty off Linux), ``"dtype"``: the compute dtype's name,
        ``"threads"``: torch's CPU threads, ``"flops"``: per phase of
        :data:`LEARNER_PHASES` the floating-point operations of the counted iteration ``}``.
    """
    from torch.utils.flop_counter import FlopCounterMode

    from algorithms.precision import compute_dtype

    memory = PeakMemory()
    with tempfile.TemporaryDirectory() as folder:
        config = replace(PRESETS[preset], prompt={"layout": layout}, env=env or {},
                         model={"dtype": dtype} if dtype else {},
                         run={"iterations": iterations + 1, "output_dir": folder,
                              "tensorboard": False, "save_every": 10_000})
        trainer = Trainer(config)
        start = time.perf_counter()
        with memory.phase("setup"):
            trainer.setup()
        setup_seconds = time.perf_counter() - start
        memory.wrap(trainer.sampler, "sample", "rollout")
        memory.wrap(trainer, "_sync_engine", "weight_sync")
        for method, name in (("score", "log_probs"), ("advantages", "advantages"),
                             ("update", "update")):
            memory.wrap(trainer.learner, method, name)
        phases: dict[str, list[float]] = defaultdict(list)
        extra: list[tuple[float, float, int]] = []
        def take_turn() -> None:
            if turns is not None and not turns[0].acquire(timeout=TURN_TIMEOUT_S):
                raise RuntimeError("the variant before this one stopped taking turns")

        def pass_turn() -> None:
            if turns is not None:
                turns[1].release()

        try:
            for iteration in range(iterations):
                take_turn()
                metrics = trainer.train_iteration(iteration)
                pass_turn()
                with memory.phase("checkpoint"):
                    trainer.save(iteration + 1, metrics)
                for phase in PHASES:
                    phases[phase].append(metrics[f"time/{phase}"])
                for key in ROLLOUT_SHAPE:
                    phases[key].append(metrics[key])
                batch = trainer.last_batch
                gigpo = _best_of(lambda b=batch: adv.gigpo_terms(
                    b.rewards, b.traj_ids, b.group_ids, b.anchor_ids))
                grpo = _best_of(lambda b=batch: adv.grpo_advantages(
                    b.rewards, b.traj_ids, b.group_ids))
                extra.append((gigpo, grpo, len(batch)))
            peaks = {k: list(v) for k, v in memory.peaks.items()}  # the timed iterations
            remaining = {k: list(v) for k, v in memory.remaining.items()}
            flops = {}
            for method, name in (("score", "log_probs"), ("update", "update")):
                counted = getattr(trainer.learner, method)

                def counting(*args: Any, _counted: Any = counted, _name: str = name,
                             **kwargs: Any) -> Any:
                    with FlopCounterMode(display=False) as counter:
                        result = _counted(*args, **kwargs)
                    flops[_name] = counter.get_total_flops()
                    return result

                setattr(trainer.learner, method, counting)
            take_turn()
            trainer.train_iteration(iterations)
            pass_turn()
            dtype_name = str(compute_dtype(trainer.policy.model)).removeprefix("torch.")
        finally:
            trainer.close()
    return {"setup": setup_seconds, "phases": dict(phases), "extra": extra,
            "peaks": peaks, "remaining": remaining, "dtype": dtype_name, "threads": torch.get_num_threads(), "flops": flops}


def _child(connection: Any, function: Any, *args: Any) -> None:
    connection.send(function(*args))
    connection.close()


def alternating(function: Any, calls: list[tuple[Any, ...]]) -> list[Any]:
    """``function(*args, turns)`` for each ``args`` of ``calls``, each in a fresh (spawned)
    process, all started at once and taking turns (see :func:`run_layout`); the results
    in the order of ``calls``."""
    context = multiprocessing.get_context("spawn")
    semaphores = [context.Semaphore(1 if k == 0 else 0) for k in range(len(calls))]
    children = []
    for k, args in enumerate(calls):
        receiver, sender = context.Pipe(duplex=False)
        turns = (semaphores[k], semaphores[(k + 1) % len(calls)])
        child = context.Process(target=_child, args=(sender, function, *args, turns))
        child.start()
        sender.close()
        children.append((child, receiver, args))
    results = []
    for child, receiver, args in children:
        try:
            results.append(receiver.recv())
        except EOFError:
            child.join()
            for other, *_ in children:
                other.kill()
            raise RuntimeError(f"the benchmark process of {function.__name__}{args!r} ended "
                               f"with exit code {child.exitcode} before reporting") from None
        child.join()
    return results


def in_fresh_process(function: Any, *args: Any) -> Any:
    """``function(*args)`` in a fresh (spawned) process, so that the memory figures it
    measures are its own (``function`` must be importable: a module-level function)."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(sender, function, *args))
    child.start()
    sender.close()
    try:
        result = receiver.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"the benchmark process of {function.__name__}{args!r} ended with "
                           f"exit code {child.exitcode} before reporting") from None
    child.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu-demo", choices=sorted(PRESETS))
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--layouts", nargs="+", default=["window", "transcript"],
                        choices=["window", "transcript"])
    parser.add_argument("--dtypes", nargs="+", default=None,
                        choices=["auto", "float32", "bfloat16"],
                        help="model dtypes to run side by side (default: the preset's)")
    parser.add_argument("--env-id", default=None,
                        help="another env than the preset's (e.g. AgentGym/ALFWorld-v0)")
    parser.add_argument("--env-kwargs", default=None,
                        help="its keyword arguments as JSON (e.g. '{}')")
    args = parser.parse_args()
    env = {key: value for key, value in (("env_id", args.env_id),
                                         ("env_kwargs", args.env_kwargs)) if value is not None}
    dtypes = args.dtypes or [None]
    results = {}
    for layout in args.layouts:
        calls = [(args.preset, layout, args.iterations, env, dtype) for dtype in dtypes]
        outcomes = alternating(run_layout, calls) if len(calls) > 1 else \
            [in_fresh_process(run_layout, *calls[0])]
        for dtype, result in zip(dtypes, outcomes, strict=True):
            label = layout if dtype is None else f"{layout}/{dtype}"
            if dtype == "auto":
                label += f" ({result['dtype']})"
            results[label] = result
    totals = {label: sum(np.mean(result["phases"][p]) for p in PHASES)
              for label, result in results.items()}
    print(f"preset {args.preset}{' with ' + str(env) if env else ''}: {args.iterations} "
          "iteration(s) per variant; setup "
          + ", ".join(f"{label} {result['setup']:.1f} s" for label, result in results.items())
          + " (model load, env build)")
    print(f"{'phase':<12}" + "".join(f" {label + ' s':>24} {'share':>7}" for label in results))
    for phase in PHASES:
        cells = []
        for label, result in results.items():
            mean = float(np.mean(result["phases"][phase]))
            cells.append(f" {mean:24.3f} {mean / totals[label]:7.1%}")
        print(f"{phase:<12}" + "".join(cells))
    print(f"{'iteration':<12}" + "".join(f" {totals[label]:24.3f} {1:7.0%}"
                                         for label in results))
    if all(result["peaks"] for result in results.values()):
        print("peak RSS per phase, GB (max over iterations), and the RSS left after it:")
        print(f"{'phase':<12}" + "".join(f" {label + ' peak':>24} {'after':>7}"
                                         for label in results))
        for phase in MEMORY_PHASES:
            print(f"{phase:<12}" + "".join(
                f" {max(result['peaks'][phase]):24.2f} {result['remaining'][phase][-1]:7.2f}"
                for result in results.values()))
        print(f"{'whole run':<12}" + "".join(
            f" {max(max(v) for v in result['peaks'].values()):24.2f} {'':>7}"
            for result in results.values()))
    for label, result in results.items():
        print(f"{label} rollouts: " + ", ".join(
            f"{key.split('/')[1]} {float(np.mean(result['phases'][key])):.2f}"
            for key in ROLLOUT_SHAPE))
    peaks: dict[tuple[str, int], float] = {}
    for label, result in results.items():
        key = (result["dtype"], result["threads"])
        if key not in peaks:
            peaks[key] = matmul_peak(getattr(torch, key[0]), key[1])
        achieved = [f"{phase} {result['flops'][phase] / 1e12:.2f} TFLOP / "
                    f"{np.mean(result['phases'][phase]):.1f} s = "
                    f"{result['flops'][phase] / np.mean(result['phases'][phase]) / 1e9:.0f}"
                    " GFLOP/s" for phase in LEARNER_PHASES if result["flops"].get(phase)]
        print(f"{label} learner: " + "; ".join(achieved) + f" (matmul peak in {key[0]} on "
              f"{key[1]} thread(s), measured now: {peaks[key] / 1e9:.0f} GFLOP/s)")
    for label, result in results.items():
        extra = result["extra"]
        gigpo, grpo, steps = (float(np.mean([e[i] for e in extra])) for i in range(3))
        print(f"{label}: GiGPO grouping + advantages on the real batch ({steps:.0f} steps, "
              f"int anchor ids): {gigpo * 1e3:.3f} ms = {gigpo / totals[label]:.4%} of the "
              f"iteration; GRPO baseline {grpo * 1e3:.3f} ms "
              f"(GiGPO/GRPO = {gigpo / max(grpo, 1e-12):.2f}x)")
    synthetic = synthetic_alfworld_batch()
    gigpo_big = _best_of(lambda: adv.gigpo_terms(**synthetic))
    grpo_big = _best_of(lambda: adv.grpo_advantages(synthetic["rewards"],
                                                    synthetic["traj_ids"],
                                                    synthetic["group_ids"]))
    print(f"paper-size batch (6400 steps): GiGPO {gigpo_big * 1e3:.2f} ms, GRPO "
          f"{grpo_big * 1e3:.2f} ms (GiGPO/GRPO = {gigpo_big / grpo_big:.2f}x); the paper "
          "reports 0.54 s of GiGPO overhead in a 362.8 s iteration (0.15%)")
    if len(dtypes) == 2:
        for layout in args.layouts:
            base, other = (label for label in results if label.split("/")[0] == layout)
            print(f"{layout}: {other} against {base}: {totals[base] / totals[other]:.2f}x "
                  f"faster per iteration ({totals[base]:.1f} s -> {totals[other]:.1f} s)")


if __name__ == "__main__":
    main()
