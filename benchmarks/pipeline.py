"""Rollout overlapped with the update (``--run.max-staleness K``): samples/s and learning.

Trains the same runs at K = 0 (rollout, then update: the default) and K = 1 (and 2), the
same seeds and the same number of samples (iterations x trajectories), each run in a fresh
process, one run at a time, and prints per K: the training loop's wall time per iteration
(setup excluded), trajectories per second, the phase times (the rollout's own time, how
long the learner waited for it, log-probs, update), the staleness and the behaviour
weights, and the learning (rollout success and format errors, per iteration, against
samples). Its last line reads ``K=1 vs K=0: X.XX× samples/s (<engine> engine)``: the ratio
of the mean trajectories per second at K = 1 to K = 0, measured in the same invocation.

Models:

- ``cpu-demo`` (the default): the ``cpu-demo`` preset as ``python train.py`` runs it
  (SmolLM2-135M with LoRA on a 2x2 KeyDoor house, 2 groups x 4, one torch thread).
- ``tiny`` (``--quick``): the study's tiny Llama (:mod:`algorithms.training.tiny_model`,
  hidden 64, random weights) on a 4x4 KeyDoor house with the key, 4 groups x 8, 24 steps:
  a fast check of the machinery, not of learning.
- ``random`` (``--shape``, for a GPU): a randomly initialised model of a published
  architecture's shape (``qwen2.5-1.5b``: the paper's model, with the default model's
  tokenizer, so its vocabulary and the embeddings are smaller) saved to the workdir, fully
  fine-tuned in ``--model.dtype auto`` with gradient checkpointing at the paper's lr and KL
  coefficient, on the cpu-demo's KeyDoor house with ``--groups`` x ``--group-size``
  trajectories and ``--max-new-tokens``. Random weights write random tokens, so every
  answer runs to the token limit and every episode to the step limit: the phase times of a
  model of that size (speed and memory, not learning). Needs no download; the peak GPU
  memory (``nvidia-smi``) is recorded per run.

Engines: ``hf`` (K > 0 samples in the HF worker process) or ``vllm`` (vLLM's CPU backend
or a GPU; needs the vllm package).

Usage::

    python -m benchmarks.pipeline                 # cpu-demo, K = 0 1 2, seeds 0 1 2
    python -m benchmarks.pipeline --quick         # tiny model, K = 0 1, seeds 0 1 2
    python -m benchmarks.pipeline --engine vllm --staleness 0 1
    python -m benchmarks.pipeline --staleness 0 1 --tag learning   # -> ..._learning.json
    python -m benchmarks.pipeline --staleness 0 1 --reference-in-worker --tag reference
    python -m benchmarks.pipeline --model random --shape qwen2.5-1.5b --device cuda \
        --staleness 0 1 --seeds 0 --iterations 4          # phase times of a 1.5B model

Results: ``benchmarks/results/pipeline_<model>_<engine>.json`` and a PNG of the curves.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from studies.study_stats import bootstrap_ci

RESULTS = Path(__file__).resolve().parent / "results"
PHASES = ("rollout", "rollout_wait", "worker_reference", "log_probs", "advantages", "update",
          "weight_sync")


RANDOM_SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-1.5b": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2,
                     "tie_word_embeddings": True, "rope_theta": 1_000_000.0,
                     "rms_norm_eps": 1e-6, "max_position_embeddings": 32768},
    "qwen2.5-0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2,
                     "tie_word_embeddings": True, "rope_theta": 1_000_000.0,
                     "rms_norm_eps": 1e-6, "max_position_embeddings": 32768},
    "smoke": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2,
              "tie_word_embeddings": True, "max_position_embeddings": 4096},
}
"""Qwen2 architectures by name (the published models' ``config.json`` figures but the
vocabulary, which is the tokenizer's); ``smoke``: a small one for a dry run on a CPU."""


def save_random_model(shape: str, tokenizer_path: str | None, target: Path,
                      device: str) -> int:
    """Save a randomly initialised Qwen2 model of ``shape`` (and its tokenizer: the folder
    ``tokenizer_path``, else the default model's) to ``target``; its number of weights."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    if tokenizer_path:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    else:  # the default model's (its converted copy when cached)
        from algorithms.config import ModelConfig
        from algorithms.training.policy import load_causal_lm

        _, tokenizer, *_ = load_causal_lm(ModelConfig(dtype="float32"), torch.device("cpu"))
    config = Qwen2Config(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **RANDOM_SHAPES[shape])
    torch.manual_seed(0)
    with torch.device("cuda" if device == "cuda" else "cpu"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return sum(p.numel() for p in model.parameters())


def gpu_memory_used() -> int | None:
    """MiB in use on GPU 0 (all processes) by ``nvidia-smi``; ``None`` without one."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=10, check=True).stdout
        return int(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


class GpuMemoryPeak:
    """Samples :func:`gpu_memory_used` every ``seconds`` in a thread; ``peak`` is the most
    seen (MiB; ``None`` without a GPU)."""

    def __init__(self, seconds: float = 0.5):
        import threading

        self.seconds = seconds
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            used = gpu_memory_used()
            if used is None:
                return
            self.peak = max(self.peak or 0, used)
            self._stop.wait(self.seconds)

    def __enter__(self) -> GpuMemoryPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def run_config(model: str, engine: str, staleness: int, seed: int, iterations: int,
               run_dir: Path, reference_in_worker: bool = False,
               scale: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """The run's config and policy (``None``: the preset's own model).
    ``reference_in_worker`` applies to the runs with K > 0; ``scale`` (``random``: the
    model's folder, ``device``, ``groups``, ``group_size``, ``max_new_tokens``)."""
    from algorithms.config import replace
    from algorithms.presets import PRESETS

    common = {"run": {"iterations": iterations, "seed": seed, "max_staleness": staleness,
                      "reference_in_worker": reference_in_worker and staleness > 0,
                      "tensorboard": False, "progress": False, "record_trajectories": 0,
                      "save_every": 10_000, "eval_every": 0, "output_dir": str(run_dir),
                      "run_name": "run", "overwrite": True},
              "generation": {"engine": engine}}
    if model == "cpu-demo":
        return replace(PRESETS["cpu-demo"], **common), None
    if model == "random":
        trajectories = scale["groups"] * scale["group_size"]
        return replace(
            PRESETS["cpu-demo"],
            run={**common["run"], "device": scale["device"]},
            generation={**common["generation"], "max_new_tokens": scale["max_new_tokens"],
                        "batch_size": trajectories},
            model={"name_or_path": scale["model_path"], "lora_rank": 0, "dtype": "auto",
                   "gradient_checkpointing": True},
            env={"num_groups": scale["groups"], "group_size": scale["group_size"],
                 "eval_episodes": 0},
            learner={"lr": 1e-6, "kl_coef": 0.01}), None
    if model != "tiny":
        raise ValueError(f"unknown model {model!r}")
    import dataclasses

    from algorithms.training.tiny_model import tiny_policy
    from studies.credit_assignment import TASKS, base_config, task_texts

    task = TASKS["keydoor"]
    config = replace(dataclasses.replace(base_config(task), algo="gigpo"),
                     env={"eval_episodes": 0}, **common)
    return config, tiny_policy(task_texts("keydoor", task), seed=0)


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """One training run in this (fresh) process; its per-iteration metrics and wall time."""
    import torch

    from algorithms.agent.metrics import read_metrics
    from algorithms.training.trainer import Trainer

    torch.set_num_threads(1)
    run_dir = Path(job["workdir"]) / f"k{job['staleness']}_seed{job['seed']}"
    config, policy = run_config(job["model"], job["engine"], job["staleness"], job["seed"],
                                job["iterations"], run_dir,
                                job.get("reference_in_worker", False), job.get("scale"))
    trainer = Trainer(config, policy=policy, run_dir=run_dir / "run")
    began = time.perf_counter()
    trainer.setup()
    setup = time.perf_counter() - began
    began = time.perf_counter()
    trainer.run()
    loop = time.perf_counter() - began
    rows = [r for r in read_metrics(run_dir / "run" / "metrics.jsonl")
            if "rollout/trajectories" in r]
    return {**job, "setup_seconds": setup, "loop_seconds": loop, "rows": rows,
            "load": os.getloadavg()[0]}


def summarize(runs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per K: mean and 95% bootstrap interval of samples/s and s/iteration over seeds,
    the mean phase times, staleness and weight figures, and the learning curves."""
    out: dict[int, dict[str, Any]] = {}
    for k in sorted({r["staleness"] for r in runs}):
        mine = [r for r in runs if r["staleness"] == k]
        rates = [sum(row["rollout/trajectories"] for row in r["rows"]) / r["loop_seconds"]
                 for r in mine]
        per_iter = [r["loop_seconds"] / len(r["rows"]) for r in mine]
        # after the first iteration, whose rollout nothing overlaps at any K
        steady = [float(np.mean([row["time/iteration"] for row in r["rows"][1:]]))
                  for r in mine]
        phases = {p: float(np.mean([row.get(f"time/{p}", 0.0) for r in mine
                                    for row in r["rows"]])) for p in PHASES}
        extra = {}
        for key in ("overlap/staleness_mean", "update/is_weight_mean", "update/is_weight_max",
                    "update/is_clipped_fraction", "update/behaviour_gap"):
            values = [row[key] for r in mine for row in r["rows"] if key in row]
            if values:
                extra[key] = float(np.max(values) if key.endswith("_max")
                                   else np.mean(values))
        curves = {key: np.array([[row[key] for row in r["rows"]] for r in mine]).tolist()
                  for key in ("rollout/success", "rollout/format_error_rate")}
        samples = np.cumsum([row["rollout/trajectories"] for row in mine[0]["rows"]]).tolist()
        last = [float(np.mean([row["rollout/success"] for row in r["rows"][-2:]]))
                for r in mine]
        out[k] = {"samples_per_s": bootstrap_ci(rates), "seconds_per_iteration":
                  bootstrap_ci(per_iter), "steady_seconds_per_iteration": bootstrap_ci(steady),
                  "rates": rates, "phases": phases, **extra,
                  "curves": curves, "samples": samples,
                  "final_success": bootstrap_ci(last), "final_success_seeds": last,
                  "seeds": [r["seed"] for r in mine], "load": [r["load"] for r in mine]}
    return out


def print_summary(summary: dict[int, dict[str, Any]], engine: str) -> None:
    print(f"{'K':>2} {'s/iter':>16} {'samples/s':>22} {'success (last 2)':>22}  phases (s)")
    for k, s in summary.items():
        mean, low, high = s["seconds_per_iteration"]
        rate, rlow, rhigh = s["samples_per_s"]
        success, slow, shigh = s["final_success"]
        phases = " ".join(f"{p}={v:.1f}" for p, v in s["phases"].items())
        print(f"{k:>2} {mean:6.1f} [{low:5.1f},{high:5.1f}] {rate:6.4f} [{rlow:6.4f},{rhigh:6.4f}]"
              f" {success:6.3f} [{slow:5.3f},{shigh:5.3f}]  {phases}")
        steady = s["steady_seconds_per_iteration"]
        figures = ", ".join([f"s/iter after the first={steady[0]:.1f} "
                             f"[{steady[1]:.1f},{steady[2]:.1f}]"]
                            + [f"{key.split('/')[1]}={s[key]:.3g}" for key in s
                               if key.startswith(("overlap/", "update/"))])
        if figures:
            print(f"   {figures}")
    for k in [k for k in summary if k > 0]:
        ratio = summary[k]["samples_per_s"][0] / summary[0]["samples_per_s"][0]
        steady = (summary[0]["steady_seconds_per_iteration"][0]
                  / summary[k]["steady_seconds_per_iteration"][0])
        print(f"K={k} vs K=0 after the first iteration: {steady:.2f}× iterations/s")
        if k != 1:
            print(f"K={k} vs K=0: {ratio:.2f}× samples/s ({engine} engine)")
    if 1 in summary and 0 in summary:
        ratio = summary[1]["samples_per_s"][0] / summary[0]["samples_per_s"][0]
        print(f"K=1 vs K=0: {ratio:.2f}× samples/s ({engine} engine)")


def plot(summary: dict[int, dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for k, s in summary.items():
        x = s["samples"]
        for ax, key in zip(axes[:2], ("rollout/success", "rollout/format_error_rate"),
                           strict=True):
            curves = np.array(s["curves"][key])
            mean = curves.mean(0)
            ax.plot(x, mean, label=f"K={k}")
            ax.fill_between(x, curves.min(0), curves.max(0), alpha=0.2)
            ax.set_xlabel("trajectories sampled")
            ax.set_ylabel(key.split("/")[1])
        axes[2].bar(str(k), s["samples_per_s"][0],
                    yerr=[[s["samples_per_s"][0] - s["samples_per_s"][1]],
                          [s["samples_per_s"][2] - s["samples_per_s"][0]]], capsize=4)
    axes[2].set_xlabel("max staleness K")
    axes[2].set_ylabel("trajectories / s")
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="the tiny model, K = 0 1 (a few minutes)")
    parser.add_argument("--model", choices=("cpu-demo", "tiny", "random"), default=None)
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf")
    parser.add_argument("--staleness", type=int, nargs="+", default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--reference-in-worker", action="store_true",
                        help="K > 0 runs score the KL reference in the HF engine's worker "
                             "(run.reference_in_worker; LoRA: the cpu-demo model)")
    parser.add_argument("--tag", default="",
                        help="appended to the results' file names (keeps earlier results)")
    random_model = parser.add_argument_group("--model random")
    random_model.add_argument("--shape", choices=tuple(RANDOM_SHAPES), default="qwen2.5-1.5b")
    random_model.add_argument("--tokenizer", default=None,
                              help="a tokenizer's folder (default: the default model's)")
    random_model.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    random_model.add_argument("--groups", type=int, default=8)
    random_model.add_argument("--group-size", type=int, default=8)
    random_model.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    model = args.model or ("tiny" if args.quick else "cpu-demo")
    staleness = args.staleness or ([0, 1] if args.quick else [0, 1, 2])
    if 0 not in staleness:
        parser.error("--staleness must include 0, the baseline")
    iterations = args.iterations or (5 if args.quick else 6)
    if args.reference_in_worker and (model != "cpu-demo" or args.engine != "hf"):
        parser.error("--reference-in-worker needs the cpu-demo model (LoRA) and the hf engine")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentgym-pipeline-"))
    print(f"model {model}, engine {args.engine}, K {staleness}, seeds {args.seeds}, "
          f"{'reference in the worker at K > 0, ' if args.reference_in_worker else ''}"
          f"{iterations} iterations; runs in {workdir}; load {os.getloadavg()[0]:.1f}",
          flush=True)
    context = multiprocessing.get_context("spawn")
    scale = None
    if model == "random":
        scale = {"model_path": str(workdir / f"random-{args.shape}"), "device": args.device,
                 "groups": args.groups, "group_size": args.group_size,
                 "max_new_tokens": args.max_new_tokens, "shape": args.shape}
        began = time.perf_counter()
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
            scale["weights"] = pool.submit(save_random_model, args.shape, args.tokenizer,
                                           Path(scale["model_path"]), args.device).result()
        print(f"random {args.shape}: {scale['weights'] / 1e9:.3f} B weights, saved in "
              f"{time.perf_counter() - began:.0f} s; {args.groups} x {args.group_size} "
              f"trajectories, {args.max_new_tokens} new tokens, on {args.device}", flush=True)
        model_name = f"random-{args.shape}"
    else:
        model_name = model
    runs = []
    for seed in args.seeds:  # seeds outermost: a drift in load hits every K alike
        for k in staleness:
            job = {"model": model, "engine": args.engine, "staleness": k, "seed": seed,
                   "iterations": iterations, "workdir": str(workdir),
                   "reference_in_worker": args.reference_in_worker, "scale": scale}
            # a fresh process per run (not a Pool: its daemonic workers cannot start the
            # HF engine's worker process)
            with (concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool,
                  GpuMemoryPeak() as memory):
                result = pool.submit(run_one, job).result()
            result["gpu_memory_peak_mib"] = memory.peak
            runs.append(result)
            print(f"  K={k} seed {seed}: {result['loop_seconds']:.1f} s "
                  f"({result['loop_seconds'] / iterations:.1f} s/iteration), load "
                  f"{result['load']:.1f}"
                  + (f", GPU memory peak {memory.peak} MiB" if memory.peak else ""),
                  flush=True)
    summary = summarize(runs)
    name = f"pipeline_{model_name}_{args.engine}" + (f"_{args.tag}" if args.tag else "")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(
        {"model": model_name, "engine": args.engine, "iterations": iterations,
         "scale": scale,
         "summary": {str(k): v for k, v in summary.items()},
         "runs": [{k: v for k, v in r.items() if k != "rows"} for r in runs]}, indent=1),
        encoding="utf-8")
    plot(summary, RESULTS / f"{name}.png",
         f"{model_name}, {args.engine} engine: K=0 vs overlapped (seeds {args.seeds})")
    print_summary(summary, args.engine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
