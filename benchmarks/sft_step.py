"""Peak memory and seconds of SFT steps, with and without the freed-heap release.

The SFT stage of the CPU presets (``--sft.warm-start``) trains on the env's expert episodes
in micro-batches. Each micro-batch's gradient-checkpointed forward pass churns the C heap
(glibc), and without handing the freed pages back (``malloc_trim``,
:mod:`algorithms.runs.memory`) the next pass grows the fragmented heap further. The RL
learner releases them around each forward pass; ``SFTTrainer.release_memory`` does the same
for the SFT step. This benchmark shows what that is worth on a preset's own data.

Each variant runs in a fresh (spawned) process: load the preset's model, play
``--episodes`` expert episodes of its env, tokenize them in its prompt layout, then run
``--steps`` SFT steps on the same rows -- the preset's batch of the longest samples (the
worst case for memory) -- measuring each step's peak RSS (Linux ``VmHWM``, reset at the
step's start) and seconds. Both variants compute the same steps: their losses are printed
beside each other.

Usage::

    python -m benchmarks.sft_step [--preset cpu-webshop] [--episodes 8] [--steps 3]
        [--threads 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import numpy as np

from algorithms.config import replace
from algorithms.presets import PRESETS
from algorithms.sft.trainer import SFTTrainer
from benchmarks.train_iteration import PeakMemory, in_fresh_process


def run_variant(preset: str, release: bool, episodes: int, steps: int,
                threads: int) -> dict[str, Any]:
    """``steps`` SFT steps of ``preset`` on the batch of its longest samples.

    Returns:
        ``{"peaks"``: GB per step, ``"after"``: RSS (GB) left after each step,
        ``"seconds"``: per step, ``"losses"``: ``sft/loss`` per step, ``"setup_peak"``: GB,
        ``"rows"``: the batch's sample lengths in tokens ``}``.
    """
    memory = PeakMemory()
    with tempfile.TemporaryDirectory() as folder:
        config = replace(PRESETS[preset], algo="sft",
                         sft={"episodes": episodes, "warm_start": False},
                         run={"output_dir": folder, "run_name": "sft-step",
                              "tensorboard": False, "torch_threads": threads})
        trainer = SFTTrainer(config)
        trainer.release_memory = release
        with memory.phase("setup"):
            trainer.setup()
        lengths = np.array([len(example.input_ids) for example in trainer.examples])
        rows = np.argsort(-lengths, kind="stable")[:config.sft.batch_size]
        seconds, losses = [], []
        try:
            for _ in range(steps):
                start = time.perf_counter()
                with memory.phase("step"):
                    metrics = trainer.sft_step(rows)
                seconds.append(time.perf_counter() - start)
                losses.append(metrics["sft/loss"])
        finally:
            trainer.close()
    return {"peaks": memory.peaks["step"], "after": memory.remaining["step"],
            "seconds": seconds, "losses": losses, "setup_peak": memory.peaks["setup"][0],
            "rows": lengths[rows].tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cpu-webshop",
                        choices=sorted(name for name, preset in PRESETS.items()
                                       if preset.sft.warm_start))
    parser.add_argument("--episodes", type=int, default=8,
                        help="expert episodes to take the longest samples from")
    parser.add_argument("--steps", type=int, default=3, help="SFT steps per variant")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    if not PeakMemory().available:
        raise SystemExit("peak memory needs Linux's /proc/self/clear_refs")

    variants = {"no release": False, "release": True}
    results = {name: in_fresh_process(run_variant, args.preset, release, args.episodes,
                                      args.steps, args.threads)
               for name, release in variants.items()}
    first = next(iter(results.values()))
    config = PRESETS[args.preset]
    print(f"preset {args.preset}: {args.steps} SFT steps on its batch of the "
          f"{len(first['rows'])} longest samples of {args.episodes} expert episodes "
          f"({min(first['rows'])}-{max(first['rows'])} tokens), micro-batches of "
          f"{config.sft.micro_batch_size}, {args.threads} thread(s)")
    print(f"{'variant':<12} {'setup peak GB':>13} {'step peak GB':>13} {'RSS after':>10} "
          f"{'s/step':>8}  losses")
    for name, result in results.items():
        print(f"{name:<12} {result['setup_peak']:13.2f} {max(result['peaks']):13.2f} "
              f"{result['after'][-1]:10.2f} {np.mean(result['seconds']):8.1f}  "
              + ", ".join(f"{loss:.6f}" for loss in result["losses"]))
    base, new = results["no release"], results["release"]
    print(f"step peak, release / no release: {max(new['peaks']) / max(base['peaks']):.2f}x; "
          f"seconds per step: {np.mean(new['seconds']) / np.mean(base['seconds']):.2f}x; "
          f"same losses: {np.allclose(base['losses'], new['losses'], rtol=0, atol=1e-6)}")


if __name__ == "__main__":
    main()
