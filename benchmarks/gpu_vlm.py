"""The ``sokoban-vl-3b`` path on one GPU with random weights of Qwen2.5-VL-3B-Instruct's shape:
seconds per phase and peak GPU memory, full fine-tune and LoRA, no download.

Run from the repository root on a CUDA machine (about 5 to 10 minutes on an H100/H200)::

    python -m benchmarks.gpu_vlm                       # both modes, 2 iterations each
    python -m benchmarks.gpu_vlm --modes lora --iterations 1
    python -m benchmarks.gpu_vlm --shape tiny --device cpu   # a dry run of the same steps

What runs: the ``sokoban-vl-3b`` preset (GiGPO, bfloat16 weights on the GPU, gradient
checkpointing, KL 0.01 against a frozen reference, mini-batches of 64 steps in
micro-batches of 8, prompts up to 1024 tokens, the image where verl-agent's Sokoban
prompt shows it, no history, verl-agent's resize to 256 x 256 pixels) through
:class:`~algorithms.training.trainer.Trainer`, with these changes, so that it fits in
minutes: the HF engine (not vLLM), ``--groups`` x ``--group-size`` trajectories of
``--max-steps`` steps (default 2 x 4, 3 steps) and answers of ``--max-new-tokens`` (64).
Modes: ``full`` -- the preset's full fine-tune, vision tower trained
(``model.train_vision_tower``); ``lora`` -- LoRA rank 64 (alpha 128) on the language model,
tower frozen, the KL reference the base model with the adapters off.

The model: :func:`studies.tiny_vlm.qwen2_5_vl_3b_config` (36 layers of 2048, a
32-block vision tower of 1280: 3.75 B weights, vocabulary 151,936), randomly initialised
on the device, with a word-level tokenizer of the env's words padded with filler words
to the full vocabulary (random weights write random tokens: every answer runs to the
token limit and every episode to the step limit, which is what a time and memory
measurement wants). The image processor is Qwen2.5-VL's own settings (patch 14, merge 2,
3,136 to 12,845,056 pixels): a 256 x 256 frame is 81 image tokens.

The env: ``AgentGym/SokobanVisual-v0``, the preset's (``--env`` names any other visual env,
or ``module:id``). Per mode it prints a table of seconds and peak GPU
memory (torch's peak allocated, reset at each phase) for setup, rollout, log-probs,
advantages, update and checkpoint, and the iterations' metrics.

What it checks, per mode (:func:`run_problems`): every iteration's policy loss, KL, entropy
and gradient norm (:data:`~benchmarks.vlm_smoke.FINITE_METRICS`) are finite (the metrics file leaves out a non-finite value, so a missing
one fails too) and no optimizer step was skipped for a non-finite gradient; every trained
weight is finite after the run and at least one moved (of an evenly strided sample of up
to :data:`SAMPLED_WEIGHTS` elements of each trained tensor, copied before the run). A mode
that passes prints ``<mode>: losses finite over N iterations; K of M trained tensors
moved``; the last line reads ``gpu vlm: ok`` only when every mode passed, else
``gpu vlm: FAILED``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.vlm_smoke import (
    PHASES,
    PhaseMeter,
    env_texts,
    measured_run,
    metric_problems,
    registered_env_id,
)

VISUAL_SOKOBAN = "AgentGym/SokobanVisual-v0"
LORA = {"lora_rank": 64, "lora_alpha": 128}
SAMPLED_WEIGHTS = 4096
"""Elements of each trained tensor compared before and after the run (evenly strided)."""


def trained_sample(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Name -> a copy of up to :data:`SAMPLED_WEIGHTS` evenly strided elements of each
    trained parameter of ``model`` (on its device: a 3B full fine-tune copies about 1 MB
    per tensor, not the weights)."""
    sample = {}
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                flat = parameter.detach().reshape(-1)
                stride = max(1, flat.numel() // SAMPLED_WEIGHTS)
                sample[name] = flat[::stride][:SAMPLED_WEIGHTS].clone()
    return sample


def run_problems(metrics: list[dict[str, Any]], before: dict[str, torch.Tensor],
                 model: torch.nn.Module) -> tuple[list[str], int]:
    """What is wrong with a finished run: its iterations' ``metrics`` (the records of
    ``metrics.jsonl``; :func:`~benchmarks.vlm_smoke.metric_problems`) and its trained
    weights against ``before`` (:func:`trained_sample` taken before the run).

    Returns:
        ``(problems, moved)``: one line per problem (empty: the run trained), and how many
        of the sampled trained tensors changed.
    """
    problems = metric_problems(metrics)
    after = trained_sample(model)
    moved = sum(not torch.equal(before[name].to(after[name].dtype), after[name])
                for name in before)
    broken = [name for name, values in after.items() if not torch.isfinite(values).all()]
    if broken:
        problems.append(f"{len(broken)} trained tensors hold non-finite weights "
                        f"(first: {broken[0]})")
    if not moved:
        problems.append(f"none of the {len(before)} trained tensors moved")
    return problems, moved


def padded_tokenizer(texts: list[str], vocab_size: int) -> Any:
    """:func:`~studies.tiny_vlm.vlm_tokenizer` of ``texts`` padded with filler words to
    ``vocab_size`` tokens (a random model of a real shape needs its full vocabulary)."""
    from studies.tiny_vlm import vlm_tokenizer

    base = vlm_tokenizer(texts)
    room = vocab_size - len(base)
    if room < 0:
        raise ValueError(f"the env's words overflow the vocabulary by {-room}")
    known = set(base.get_vocab())
    filler = (word for word in (f"w{i}" for i in itertools.count()) if word not in known)
    return vlm_tokenizer([*texts, " ".join(itertools.islice(filler, room))])


def random_policy(shape: str, texts: list[str], mode: str, device: torch.device,
                  model_config: Any) -> Any:
    """A random vision-language policy of ``shape`` (``3b``: Qwen2.5-VL-3B's; ``tiny``)
    in the preset's dtype on ``device``, wrapped as ``model_config`` says."""
    from algorithms.training.policy import resolve_dtype, wrap_model
    from studies.tiny_vlm import (
        qwen2_5_vl_3b_config,
        tiny_image_processor,
        tiny_vlm_config,
        vlm_tokenizer,
    )

    if shape == "3b":
        config = qwen2_5_vl_3b_config()
        tokenizer = padded_tokenizer(texts, config.text_config.vocab_size)
        ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in (
            ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
            ("vision_start_token_id", "<|vision_start|>"),
            ("vision_end_token_id", "<|vision_end|>"))}
        for name, value in ids.items():
            setattr(config, name, value)
        config.text_config.eos_token_id = tokenizer.eos_token_id
        config.text_config.pad_token_id = tokenizer.pad_token_id
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil,
        )

        image_processor = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056)
    else:
        tokenizer = vlm_tokenizer(texts)
        config = tiny_vlm_config("qwen2_5_vl", tokenizer)
        image_processor = tiny_image_processor()
    from transformers import AutoModelForImageTextToText

    dtype = resolve_dtype(model_config.dtype, device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), \
            torch.device(device):
        torch.manual_seed(0)
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    return wrap_model(model, tokenizer, model_config, source=f"random {shape} ({mode})",
                      path=f"random-{shape}", gguf_file=None, seed=0,
                      image_processor=image_processor)


def run_config(args: argparse.Namespace, mode: str, workdir: Path) -> Any:
    """The ``sokoban-vl-3b`` preset with the benchmark's changes (module docstring)."""
    from algorithms.config import replace
    from algorithms.presets import PRESETS

    model = {"name_or_path": None, "kind": "vision"}
    if mode == "lora":
        model.update(LORA, train_vision_tower=False)
    return replace(
        PRESETS["sokoban-vl-3b"], model=model,
        generation={"engine": "hf", "max_new_tokens": args.max_new_tokens},
        env={"env_id": args.env_id, "num_groups": args.groups, "group_size": args.group_size,
             "max_steps": args.max_steps, "eval_env_kwargs": "{}"},
        run={"iterations": args.iterations, "eval_every": 0, "eval_before_train": False,
             "save_every": args.iterations, "device": args.device, "tensorboard": False,
             "progress": False, "output_dir": str(workdir), "record_trajectories": 4})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default=None, help="visual env id or module:id "
                        "(default: AgentGym/SokobanVisual-v0 if registered, else the grid)")
    parser.add_argument("--shape", default="3b", choices=("3b", "tiny"))
    parser.add_argument("--modes", nargs="+", default=["full", "lora"],
                        choices=("full", "lora"))
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu vlm: no CUDA GPU here (--device cpu --shape tiny runs a dry run)")
        return 2
    args.env_id = registered_env_id(args.env or VISUAL_SOKOBAN)
    from algorithms.runs.console import quiet_dependency_bars

    quiet_dependency_bars()
    device = torch.device(args.device)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gpu-vlm-"))
    texts = env_texts(args.env_id, {})
    if device.type == "cuda":
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"env {args.env_id}; {args.groups} groups x {args.group_size}, {args.max_steps} "
          f"steps, {args.max_new_tokens} new tokens, {args.iterations} iterations; "
          f"shape {args.shape}")
    failed = False
    for mode in args.modes:
        config = run_config(args, mode, workdir)
        meter = PhaseMeter(args.device)
        began = time.perf_counter()
        with meter.phase("setup"):
            policy = random_policy(args.shape, texts, mode, device, config.model)
        weights = sum(p.numel() for p in policy.model.parameters())
        trained = sum(p.numel() for p in policy.model.parameters() if p.requires_grad)
        before = trained_sample(policy.model)
        try:
            trainer = measured_run(config, workdir / mode, meter, setup_phase="setup",
                                   policy=policy)
        except (RuntimeError, ValueError) as error:  # out of memory, among others
            print(f"{mode}: FAILED: {type(error).__name__}: {error}")
            failed = True
            continue
        metrics = [json.loads(line) for line in
                   (workdir / mode / "metrics.jsonl").read_text().splitlines()]
        print(f"\n{mode}: {weights / 1e9:.2f} B weights, {trained / 1e6:.1f} M trained, "
              f"{time.perf_counter() - began:.0f} s in all")
        unit = "peak GPU GiB" if device.type == "cuda" else "peak RSS GiB"
        print(f"{'phase':<11} {'seconds':>8} {unit:>13}")
        for phase in PHASES:
            if phase in meter.seconds:
                print(f"{phase:<11} {meter.seconds[phase]:>8.1f} "
                      f"{meter.peak_mb[phase] / 1024:>13.1f}")
        for row in metrics:
            print(f"iteration {row['iteration']}: steps {row.get('rollout/steps')}, "
                  f"rollout {row.get('throughput/rollout_tokens_per_s', float('nan')):.0f} "
                  f"tokens/s, update {row.get('throughput/update_tokens_per_s', float('nan')):.0f} "
                  f"tokens/s, grad norm {row.get('update/grad_norm', float('nan')):.3g}")
        problems, moved = run_problems(metrics, before, policy.model)
        if problems:
            print(f"{mode}: FAILED: {'; '.join(problems)}")
            failed = True
        else:
            print(f"{mode}: losses finite over {len(metrics)} iterations; {moved} of "
                  f"{len(before)} trained tensors moved")
        del trainer, policy, before
        gc.collect()  # the trainer's reference cycles hold the last mode's weights
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if failed:
        print("gpu vlm: FAILED")
        return 1
    print(f"gpu vlm: ok ({', '.join(args.modes)}; shape {args.shape}; {args.device})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
