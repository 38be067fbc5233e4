"""Iteration time, tokens/s and communication per update: 1 rank against N ranks.

Runs the same training command (default: the ``cpu-demo`` preset, 2 iterations) as one
process and under ``torchrun --nproc-per-node N`` (gloo on CPU, NCCL on GPUs), each in a
fresh run folder, and prints per configuration the mean seconds per iteration and per
phase (iterations after the first, which also warms up), rollout and update tokens per
second, and the bytes each rank moved through ``torch.distributed`` collectives per
iteration, by kind: FSDP2's parameter all-gathers and gradient reduce-scatters, the batch
gather (pickled objects), the score all-reduces and the rest. On a machine with fewer
cores than ranks x threads, more ranks are not faster; the figures say by how much.

Usage::

    python -m benchmarks.distributed [--ranks 2] [--iterations 2] [--] [train.py flags]

Examples: ``python -m benchmarks.distributed`` (cpu-demo, 1 vs 2 CPU ranks);
``python -m benchmarks.distributed --ranks 8 -- --preset alfworld-1.5b
--run.iterations 3`` on an 8-GPU machine.

The measuring worker (``--worker``) is this module run by torchrun (or alone): it wraps
the collectives of ``torch.distributed`` to count bytes, runs the trainer, and rank 0
writes the counts beside the run's ``metrics.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

PHASES = ("rollout", "log_probs", "advantages", "update", "weight_sync")
KINDS = ("all_gather_params", "reduce_scatter_grads", "weight_sync", "gather_objects",
         "all_reduce", "other")


# ---------------------------------------------------------------------- worker side
class CollectiveMeter:
    """Counts the bytes this rank receives through collectives (patched into
    ``torch.distributed``; FSDP2 calls them through that module)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.bytes: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        # FSDP2's collectives (the deprecated *_into_tensor / *_tensor names call these)
        self._patch("all_gather_single", "all_gather_params",
                    lambda a, k: _nbytes(_arg(a, k, 0, "output_tensor")))
        self._patch("reduce_scatter_single", "reduce_scatter_grads",
                    lambda a, k: _nbytes(_arg(a, k, 1, "input")))
        self._patch("all_reduce", "all_reduce", lambda a, k: _nbytes(_arg(a, k, 0, "tensor")))
        self._patch("all_gather_object", "gather_objects",
                    lambda a, k: len(pickle.dumps(_arg(a, k, 1, "obj")))
                    * dist.get_world_size())
        self._patch("broadcast_object_list", "other",
                    lambda a, k: len(pickle.dumps(_arg(a, k, 0, "object_list"))))
        self._patch("broadcast", "other", lambda a, k: _nbytes(_arg(a, k, 0, "tensor")))

    def _patch(self, name: str, kind: str, size) -> None:
        original = getattr(self.dist, name)

        def counted(*args, **kwargs):
            self.bytes[kind] += int(size(args, kwargs))
            self.calls[kind] += 1
            return original(*args, **kwargs)

        setattr(self.dist, name, counted)

    def snapshot(self) -> dict[str, int]:
        return dict(self.bytes)


def _arg(args: tuple, kwargs: dict, index: int, name: str):
    return args[index] if len(args) > index else kwargs[name]


def _nbytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def worker(argv: list[str], out: Path) -> None:
    """Train as ``train.py argv`` would, counting collective bytes per iteration."""
    import train
    from algorithms.runs import distributed
    from algorithms.training.trainer import Trainer

    config = train.parse_config(argv)
    ranks = distributed.init_from_environment(device=config.run.device,
                                              timeout_s=config.run.dist_timeout)
    meter = CollectiveMeter() if ranks.distributed else None
    trainer = Trainer(config, ranks=ranks)
    per_iteration: list[dict[str, int]] = []
    train_iteration = trainer.train_iteration

    def counted_iteration(iteration: int):
        before = meter.snapshot() if meter else {}
        metrics = train_iteration(iteration)
        after = meter.snapshot() if meter else {}
        per_iteration.append({k: after.get(k, 0) - before.get(k, 0) for k in KINDS})
        return metrics

    trainer.train_iteration = counted_iteration
    if meter is not None:  # the mirror's refresh gathers every parameter (DTensor API)
        sync_engine = trainer._sync_engine

        def counted_sync() -> None:
            meter.bytes["weight_sync"] += sum(_nbytes(p) for p in
                                              trainer.mirror.model.parameters())
            sync_engine()

        trainer._sync_engine = counted_sync
    try:
        trainer.run()
    finally:
        distributed.shutdown()
    if ranks.main:
        out.write_text(json.dumps({"world_size": ranks.world_size,
                                   "bytes_per_iteration": per_iteration}), encoding="utf-8")


# ---------------------------------------------------------------------- driver side
def _run(ranks: int, run_dir: Path, flags: list[str]) -> tuple[list[dict], dict, float]:
    counts = run_dir.parent / f"{run_dir.name}-collectives.json"
    worker_args = ["-m", "benchmarks.distributed", "--worker", str(counts), "--",
                   *flags, "--run.output-dir", str(run_dir.parent),
                   "--run.run-name", run_dir.name, "--run.no-progress",
                   "--run.no-tensorboard", "--run.overwrite"]
    if ranks == 1:
        command = [sys.executable, *worker_args]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={ranks}", *worker_args]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{ranks} rank(s) failed:\n{result.stderr[-4000:]}")
    records = [json.loads(line) for line in
               (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    return records, json.loads(counts.read_text(encoding="utf-8")), wall


def _mean(records: list[dict], key: str) -> float:
    values = [r[key] for r in records if key in r]
    return sum(values) / len(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("flags", nargs="*", help="train.py flags (after --)")
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.flags, args.worker)
        return
    flags = [*args.flags, "--run.iterations", str(args.iterations),
             "--run.save-every", str(10**6)]
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for ranks in (1, args.ranks):
            print(f"running {ranks} rank(s): train.py {' '.join(args.flags)} "
                  f"({args.iterations} iterations)...", flush=True)
            rows[ranks] = _run(ranks, Path(folder) / f"ranks{ranks}", flags)
    print(f"\n{'':28}" + "".join(f"{f'{r} rank(s)':>14}" for r in rows))
    measured = {r: records[1:] or records for r, (records, _, _) in rows.items()}
    lines = [("wall time of the run (s)", lambda r: rows[r][2])]
    lines += [(f"iteration: {phase} (s)", lambda r, p=phase: _mean(measured[r], f"time/{p}"))
              for phase in PHASES]
    lines += [("iteration total (s)", lambda r: sum(_mean(measured[r], f"time/{p}")
                                                   for p in PHASES)),
              ("rollout tokens/s", lambda r: _mean(measured[r],
                                                   "throughput/rollout_tokens_per_s")),
              ("update tokens/s", lambda r: _mean(measured[r], "throughput/update_tokens_per_s")),
              ("success (mean)", lambda r: _mean(rows[r][0], "rollout/success"))]
    for label, value in lines:
        print(f"{label:28}" + "".join(f"{value(r):>14.3f}" for r in rows))
    print("\ncollectives per iteration and rank (MB received):")
    for kind in KINDS:
        print(f"  {kind:26}" + "".join(
            f"{_mean_bytes(rows[r][1], kind) / 1e6:>14.1f}" for r in rows))
    one, many = (sum(_mean(measured[r], f"time/{p}") for p in PHASES) for r in rows)
    print(f"\n{args.ranks} ranks / 1 rank iteration time: {many / one:.2f}x")


def _mean_bytes(counts: dict, kind: str) -> float:
    values = [row.get(kind, 0) for row in counts["bytes_per_iteration"][1:]
              or counts["bytes_per_iteration"]]
    return sum(values) / len(values) if values else 0.0


if __name__ == "__main__":
    from algorithms.runs.launch import run_worker

    run_worker(main)  # a torchrun worker ends without teardown (see there)
