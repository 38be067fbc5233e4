"""The HF worker's weight sync: the shared staging file against ``torch.save`` bytes
through the pipe (``HFWorkerEngine(weight_transport=...)``).

For each transport, one :class:`~algorithms.engines.hf_worker.HFWorkerEngine` on the
default model (SmolLM2-135M, float32 on the CPU): the seconds of ``sync_weights`` for all
weights (a full fine-tune: 135 M weights, 540 MB) and for LoRA adapters only (rank 16 on
every linear layer, the cpu-demo's), ``--repeats`` times each after one warm-up, and the
worker's samples after the last sync compared with the in-process engine's (identical
weights give identical tokens). Its last line reads ``shared vs pipe: X.XX× faster
(full weights)``.

With ``--shape`` (a GPU machine without the default model): a randomly initialised model
of that shape (:data:`benchmarks.pipeline.RANDOM_SHAPES`, ``--tokenizer`` as there) on
``--device``, all weights only.

Usage::

    python -m benchmarks.weight_sync               # ~2 minutes on 2 cores
    python -m benchmarks.weight_sync --repeats 10
    python -m benchmarks.weight_sync --shape qwen2.5-1.5b --tokenizer DIR --device cuda
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import torch


def time_syncs(worker: Any, model: Any, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` syncs (after one untimed), the weights nudged before
    each so that every sync carries new values."""
    worker.sync_weights(model)
    seconds = []
    for repeat in range(repeats):
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.requires_grad:
                    parameter.add_(1e-4 * (repeat + 1))
        began = time.perf_counter()
        worker.sync_weights(model)
        seconds.append(time.perf_counter() - began)
    return seconds


def measure(lora: bool, repeats: int, model_path: str | None = None,
            device: str = "cpu") -> dict[str, Any]:
    """Sync times per transport for the default model (or ``model_path``'s) on
    ``device``, all weights or LoRA adapters."""
    from algorithms.config import ModelConfig
    from algorithms.engines.hf import HFEngine
    from algorithms.engines.hf_worker import HFWorkerEngine
    from algorithms.training.policy import load_policy

    config = ModelConfig(name_or_path=model_path, dtype="auto",
                         lora_rank=16 if lora else 0)
    policy = load_policy(config, torch.device(device))
    trainable = [p for p in policy.model.parameters() if p.requires_grad]
    nbytes = sum(p.numel() * p.element_size() for p in trainable)
    prompts = [policy.tokenizer("You are in room 1. Your task:", add_special_tokens=False)
               ["input_ids"]]
    sampling = {"temperature": 1.0, "max_new_tokens": 8, "seed": 0}
    out: dict[str, Any] = {"weights": sum(p.numel() for p in trainable), "bytes": nbytes}
    for transport in ("pipe", "shared"):
        worker = HFWorkerEngine(policy.model, policy.tokenizer, batch_size=1,
                                weight_transport=transport, device=device)
        try:
            seconds = time_syncs(worker, policy.model, repeats)
            same = (worker.generate(prompts, **sampling)
                    == HFEngine(policy.model, policy.tokenizer, batch_size=1)
                    .generate(prompts, **sampling))
        finally:
            worker.close()
        out[transport] = {"seconds": seconds, "median": statistics.median(seconds),
                          "same_samples": same}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shape", default=None,
                        help="a random model of this shape (benchmarks.pipeline)")
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"load {os.getloadavg()[0]:.1f}; {args.repeats} syncs per transport after one "
          f"warm-up; {args.device}", flush=True)
    model_path, cases = None, (("LoRA adapters", True), ("full weights", False))
    if args.shape:
        import tempfile
        from pathlib import Path

        from benchmarks.pipeline import save_random_model

        model_path = str(Path(args.workdir or tempfile.mkdtemp()) / f"random-{args.shape}")
        save_random_model(args.shape, args.tokenizer, Path(model_path), args.device)
        cases = (("full weights", False),)
    results = {}
    for name, lora in cases:
        result = measure(lora, args.repeats, model_path, args.device)
        results[name] = result
        print(f"{name}: {result['weights'] / 1e6:.1f} M weights, "
              f"{result['bytes'] / 1e6:.0f} MB", flush=True)
        for transport in ("pipe", "shared"):
            figures = result[transport]
            print(f"  {transport:>6}: median {figures['median'] * 1000:8.1f} ms "
                  f"(min {min(figures['seconds']) * 1000:.1f}, max "
                  f"{max(figures['seconds']) * 1000:.1f}); worker samples as the "
                  f"in-process engine: {figures['same_samples']}", flush=True)
    for name, result in results.items():
        ratio = result["pipe"]["median"] / result["shared"]["median"]
        print(f"shared vs pipe: {ratio:.2f}× faster ({name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
