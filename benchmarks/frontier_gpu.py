"""HGPO's and GraphGPO's 1.5B presets on one GPU: one iteration each at the real model
shape, with random weights; seconds per phase, each estimator's time, peak GPU memory.

For a lent GPU machine (one call of at most 10 minutes; ``docs/gpu.md``). Per preset
(``hgpo-alfworld-1.5b``, ``graphgpo-alfworld-1.5b`` by default):

- the model: a randomly initialised Qwen2 of Qwen2.5-1.5B's shape
  (:func:`benchmarks.pipeline.save_random_model`: the default model's tokenizer unless
  ``--tokenizer``), saved once, trained as the preset trains it (all weights, bf16 with
  ``--model.dtype auto``, gradient checkpointing, its lr, KL, loss, mini- and micro-batch
  sizes, prompt budget and history window, its estimator and settings);
- the env: the cpu-demo's 2 x 2 KeyDoor house, ``--groups`` x ``--group-size``
  trajectories of ``--max-steps`` steps, ``--max-new-tokens`` per answer, the HF engine.
  Random weights write random tokens, so every answer runs to the token limit and every
  episode to the step limit: the phase times of a model of that size (speed and memory,
  not learning). The presets' ALFWorld is not used: the lent machine has neither the
  ``alfworld`` nor the ``textworld`` package, and one iteration at the scripts' batch
  (16 x 8 trajectories, 50 steps, 512-token answers) would take more than a call allows;
- one iteration in a fresh process (the ``time/<phase>`` of its metrics: rollout,
  log-probs, advantages, update, weight sync), peak GPU memory by ``nvidia-smi`` (every
  process) and ``torch.cuda.max_memory_allocated`` (the run's own), and the share of
  the trained weights' elements that the update changed, with their storage dtypes
  (at lr 1e-6, weights stored in bfloat16 keep most of theirs: :mod:`algorithms.precision`);
- the estimator alone at the scripts' batch: :meth:`Learner.advantages` with the preset's
  config on ALFWorld-shaped synthetic batches of 16 groups x 8 trajectories of up to 50
  steps (:func:`benchmarks.parity_pipelines.make_rollout`), the median of ``--repeats``.

Usage, from the repository root (``--device cpu --shape smoke`` is a dry run without a
GPU)::

    python -m benchmarks.frontier_gpu                     # the two presets, qwen2.5-1.5b
    python -m benchmarks.frontier_gpu --device cpu --shape smoke --groups 2 --group-size 2

Writes ``frontier_gpu.json`` (and prints a table) in ``--out`` (default
``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
TIMED_PRESETS = ("hgpo-alfworld-1.5b", "graphgpo-alfworld-1.5b")
PHASES = ("rollout", "log_probs", "advantages", "update", "weight_sync")
KEYDOOR = {"width": 2, "height": 2, "key": False}
"""The cpu-demo's house (the env of every timed iteration)."""


def timed_config(preset: str, model_path: str, device: str, groups: int, group_size: int,
                 max_steps: int, max_new_tokens: int, run_dir: Path):
    """``preset`` with the random model, the KeyDoor env at the given size, the HF engine,
    one iteration, no evaluation, the checkpoint after it without optimizer state (module
    docstring)."""
    from algorithms.config import replace
    from algorithms.presets import PRESETS

    return replace(
        PRESETS[preset],
        model={"name_or_path": model_path, "gguf_file": None, "dtype": "auto"},
        generation={"engine": "hf", "max_new_tokens": max_new_tokens,
                    "batch_size": groups * group_size},
        env={"env_id": "AgentGym/KeyDoor-v0", "env_kwargs": json.dumps(KEYDOOR),
             "eval_env_kwargs": "{}", "num_groups": groups, "group_size": group_size,
             "max_steps": max_steps, "backend": "sync", "eval_episodes": 0},
        run={"iterations": 1, "device": device, "eval_every": 0, "eval_before_train": False,
             "save_every": 10_000, "save_optimizer": False, "tensorboard": False,
             "progress": False, "record_trajectories": 0, "output_dir": str(run_dir.parent),
             "run_name": run_dir.name, "overwrite": True})


def run_iteration(job: dict[str, Any]) -> dict[str, Any]:
    """One iteration of ``job["preset"]`` in this (fresh) process: its phase times, the
    run's wall time (``run_seconds``: the iteration and the checkpoint written after it)
    and its own peak GPU memory. The checkpoint holds no optimizer state and is deleted
    once read: with float32 trained weights a 1.386 B model's weights and AdamW moments
    come to 16.6 GB (12 bytes a weight), and a lent machine's 64 GB disk filled in a
    session of such runs (2026-11-28)."""
    import torch

    from algorithms.agent.metrics import read_metrics
    from algorithms.training.trainer import Trainer

    config = timed_config(job["preset"], job["model_path"], job["device"], job["groups"],
                          job["group_size"], job["max_steps"], job["max_new_tokens"],
                          Path(job["run_dir"]))
    trainer = Trainer(config, run_dir=Path(job["run_dir"]))
    began = time.perf_counter()
    trainer.setup()
    setup = time.perf_counter() - began
    trained = {name: p.detach().to("cpu", copy=True)
               for name, p in trainer.policy.model.named_parameters() if p.requires_grad}
    began = time.perf_counter()
    trainer.run()
    ran = time.perf_counter() - began
    moved = weights_moved(trained, trainer.policy.model)
    row = next(r for r in read_metrics(Path(job["run_dir"]) / "metrics.jsonl")
               if "time/iteration" in r)
    shutil.rmtree(Path(job["run_dir"]) / "checkpoints", ignore_errors=True)
    cuda = job["device"] == "cuda" and torch.cuda.is_available()
    return {"setup_seconds": setup, "run_seconds": ran,
            "iteration_seconds": row["time/iteration"],
            **{f"{p}_seconds": row.get(f"time/{p}", 0.0) for p in PHASES},
            "rows": row.get("update/rows", row.get("rollout/steps")),
            "torch_peak_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
            **moved}


def weights_moved(before: dict[str, Any], model: Any) -> dict[str, Any]:
    """How much of ``model``'s trained weights an update changed: the share of their
    elements that differ from ``before`` (name -> CPU copy) and their storage dtypes. At
    the presets' lr 1e-6 weights stored in bfloat16 round most steps away
    (:mod:`algorithms.precision`); float32 weights move."""
    changed = total = 0
    dtypes = set()
    for name, parameter in model.named_parameters():
        if name in before:
            now = parameter.detach().to("cpu")
            changed += int((now != before[name]).sum())
            total += now.numel()
            dtypes.add(str(parameter.dtype).removeprefix("torch."))
    return {"trained_weights_changed": changed / max(total, 1),
            "trained_dtypes": sorted(dtypes)}


def estimator_seconds(preset: str, seeds: range, groups: int) -> dict[str, float]:
    """:meth:`Learner.advantages` of ``preset``'s config on ALFWorld-shaped batches of
    ``groups`` x 8 trajectories (one per seed): the median seconds and the rows."""
    from algorithms.presets import PRESETS
    from benchmarks.parity_pipelines import make_rollout, our_learner

    learner = our_learner(PRESETS[preset])
    seconds, rows = [], []
    for seed in seeds:
        batch = make_rollout(seed, num_groups=groups).batch
        learner.advantages(batch)  # warm (imports, first calls)
        began = time.perf_counter()
        learner.advantages(batch)
        seconds.append(time.perf_counter() - began)
        rows.append(len(batch))
    return {"median_seconds": statistics.median(seconds), "rows_mean": statistics.mean(rows),
            "batches": len(seconds)}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.pipeline import RANDOM_SHAPES, GpuMemoryPeak, save_random_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=list(TIMED_PRESETS))
    parser.add_argument("--shape", choices=tuple(RANDOM_SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--tokenizer", default=None,
                        help="a tokenizer's folder (default: the default model's)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5,
                        help="synthetic batches the estimator alone is timed on")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentgym-frontier-gpu-"))
    context = multiprocessing.get_context("spawn")
    model_path = workdir / f"random-{args.shape}"
    began = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        weights = pool.submit(save_random_model, args.shape, args.tokenizer, model_path,
                              args.device).result()
    print(f"random {args.shape}: {weights / 1e9:.3f} B weights, saved in "
          f"{time.perf_counter() - began:.0f} s; {args.groups} x {args.group_size} "
          f"trajectories of {args.max_steps} steps, {args.max_new_tokens} new tokens, on "
          f"{args.device}", flush=True)
    results: dict[str, Any] = {}
    for preset in args.presets:
        job = {"preset": preset, "model_path": str(model_path), "device": args.device,
               "groups": args.groups, "group_size": args.group_size,
               "max_steps": args.max_steps, "max_new_tokens": args.max_new_tokens,
               "run_dir": str(workdir / preset)}
        with (concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool,
              GpuMemoryPeak() as memory):
            timed = pool.submit(run_iteration, job).result()
        timed["gpu_memory_peak_mib"] = memory.peak
        timed["estimator_at_scripts_batch"] = estimator_seconds(preset, range(args.repeats), 16)
        results[preset] = timed
        phases = ", ".join(f"{p} {timed[f'{p}_seconds']:.2f} s" for p in PHASES)
        scale = timed["estimator_at_scripts_batch"]
        print(f"{preset}: iteration {timed['iteration_seconds']:.1f} s ({phases}; "
              f"{timed['run_seconds']:.1f} s with the checkpoint after it); "
              f"advantages {timed['advantages_seconds'] / timed['iteration_seconds']:.2%} of "
              f"it; at the scripts' batch ({scale['rows_mean']:.0f} rows) the estimator "
              f"took {scale['median_seconds'] * 1e3:.1f} ms; GPU memory peak "
              f"{memory.peak} MiB (nvidia-smi), {timed['torch_peak_mib']} MiB (torch); the "
              f"update changed {timed['trained_weights_changed']:.1%} of the trained weights "
              f"({'/'.join(timed['trained_dtypes'])})", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "frontier_gpu.json"
    path.write_text(json.dumps({
        "shape": args.shape, "weights": weights, "device": args.device,
        "groups": args.groups, "group_size": args.group_size, "max_steps": args.max_steps,
        "max_new_tokens": args.max_new_tokens, "presets": results,
        "command": "python -m benchmarks.frontier_gpu " + " ".join(argv or [])}, indent=1),
        encoding="utf-8")
    print(path)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
