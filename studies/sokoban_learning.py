"""Does a small policy learn Sokoban 6 x 6 with one box? GiGPO and GRPO from one SFT start.

The policy is the tests' tiny word-level Llama (``tests/algorithms/tiny.py``: 2 layers,
hidden size 64, a vocabulary of the prompt's and the env's words, every grid symbol and
action word one token), built in-process: no download; an RL iteration takes 10-30 s on two
loaded CPU cores. The run goes through the project's real code paths:

1. **SFT warm start** (``algorithms.sft.trainer.SFTTrainer``, ``--algo sft``): expert episodes on
   the training rooms by ``SokobanEnv.expert_action`` (breadth-first search), trained at
   lr 1e-3 for a fixed number of optimizer steps (``Budget``).
2. **RL from it** (``algorithms.training.trainer.Trainer`` with ``model.init_checkpoint`` = the SFT
   run, as ``--model.init-checkpoint`` does): GiGPO, then GRPO, from the same checkpoint,
   with the same seeds, batch and budget; everything not set in :func:`rl_config` is the
   learner's default (verl-agent's recipe).

Reported per method and seed: training-rollout success per iteration (``rollout/success``,
temperature 1), the first iteration whose 3-iteration moving average reaches 50%, and the
success of greedy-ish evaluation (temperature 0.4) on 64 held-out rooms (seeds from
65,536) before RL and after the last iteration.

Usage::

    python -m studies.sokoban_learning                    # 2 seeds x GiGPO, GRPO
    python -m studies.sokoban_learning --seeds 1 --first-seed 1 --arch gpt2

Measured figures and the diagnosis of the earlier failure (an SFT plateau at lr 3e-3,
not a tokenization or prompt bug): docs/envs/sokoban.md, "Learning check".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentgym.sokoban import SokobanEnv
from algorithms.agent.prompts import answer_instruction
from algorithms.config import ModelConfig, TrainConfig, replace
from algorithms.presets import CPU_DEMO_LOSS, PRESETS
from algorithms.sft.trainer import SFTTrainer
from algorithms.training.policy import wrap_model
from algorithms.training.trainer import Trainer
from tests.algorithms.tiny import make_policy, make_tokenizer

ENV_ID = "AgentGym/Sokoban-v0"
EVAL_KWARGS = {"first_seed": 65_536}
HIDDEN = 64
LAYERS = 2


@dataclasses.dataclass(frozen=True)
class Budget:
    """What one seed spends. SFT: expert episodes, perturbed share, ``sft_steps``
    optimizer steps of ``sft_batch`` samples (0: ``sft_epochs`` passes instead), lr. RL: groups x group size
    episodes per iteration, iterations, lr.

    The SFT lr matters: at 3e-3 the tiny Llama stays on the plateau where it predicts the
    moves' frequencies and nothing of the grid (0.69 nats per response token); at 1e-3 it
    leaves it after about 450 steps of 32 (docs/envs/sokoban.md, "Learning check")."""

    sft_episodes: int = 400
    sft_perturb: float = 0.0
    sft_epochs: int = 10
    sft_steps: int = 1200
    sft_batch: int = 32
    sft_lr: float = 1e-3
    num_groups: int = 8
    group_size: int = 8
    iterations: int = 25
    lr: float = 3e-4
    eval_episodes: int = 64


def vocabulary() -> str:
    """Every word the tiny tokenizer must know: the task, the grid symbols, the actions
    and the prompt's instruction (the rest of the template is in its base corpus)."""
    env = SokobanEnv()
    prompt = PRESETS["cpu-demo"].prompt
    return " ".join([env.task, "# _ O X √ P S", "up down left right still",
                     answer_instruction(prompt), "Invalid action"])


def base_config(budget: Budget, seed: int, out: Path) -> TrainConfig:
    """The cpu-demo's prompt and run settings on Sokoban's defaults (6 x 6, one box, 15
    steps), full fine-tuning of the tiny model."""
    base = PRESETS["cpu-demo"]
    return replace(
        base,
        model={"lora_rank": 0, "gradient_checkpointing": False,
               "dtype": "float32"},  # the documented figures' dtype, on any CPU
        generation={"max_new_tokens": 4, "batch_size": 64},
        prompt={"max_prompt_tokens": 320, "history_window": 0},
        env={"env_id": ENV_ID, "num_groups": budget.num_groups,
             "group_size": budget.group_size, "max_steps": 15, "anchor": "observation",
             "env_kwargs": "{}", "eval_env_kwargs": json.dumps(EVAL_KWARGS),
             "eval_episodes": budget.eval_episodes},
        run={"seed": seed, "output_dir": str(out), "tensorboard": False, "progress": False,
             "save_every": 10_000, "keep_checkpoints": 1, "eval_every": 0},
    )


def sft_config(budget: Budget, seed: int, out: Path) -> TrainConfig:
    config = dataclasses.replace(base_config(budget, seed, out), algo="sft")
    return replace(config, sft={"episodes": budget.sft_episodes,
                                "perturb": budget.sft_perturb, "epochs": budget.sft_epochs,
                                "max_steps": budget.sft_steps or None, "lr": budget.sft_lr,
                                "batch_size": budget.sft_batch,
                                "micro_batch_size": budget.sft_batch}).validate()


def rl_config(algo: str, budget: Budget, seed: int, out: Path, sft_dir: Path) -> TrainConfig:
    config = dataclasses.replace(base_config(budget, seed, out), algo=algo)
    return replace(config, model={"init_checkpoint": str(sft_dir)},
                   learner={"lr": budget.lr, "kl_coef": 0.0, "mini_batch_size": 256,
                            "micro_batch_size": 64, **CPU_DEMO_LOSS},
                   run={"iterations": budget.iterations}).validate()


def tiny_policy(seed: int, arch: str = "llama") -> Any:
    """The tiny model of ``arch``: ``"llama"`` is the tests' 2-layer Llama (rotary
    positions); ``"gpt2"`` a 2-layer GPT-2 of the same width over the same tokenizer, whose
    learned absolute position embeddings tell it where on the grid a symbol is."""
    if arch == "llama":
        return make_policy(seed=seed, hidden=HIDDEN, extra_text=vocabulary(),
                           split_tags=True, model_config=ModelConfig(lora_rank=0))
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = make_tokenizer(extra_text=vocabulary(), split_tags=True)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=512, n_embd=HIDDEN,
                        n_layer=LAYERS, n_head=4, pad_token_id=0, bos_token_id=2,
                        eos_token_id=2)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    return wrap_model(model, tokenizer, ModelConfig(lora_rank=0), source="tiny GPT-2",
                      path="tiny-gpt2", gguf_file=None)


def run_sft(budget: Budget, seed: int, out: Path, arch: str = "llama"
            ) -> tuple[Path, dict[str, float]]:
    run_dir = out / f"sft-seed{seed}"
    trainer = SFTTrainer(sft_config(budget, seed, out), policy=tiny_policy(seed, arch),
                         run_dir=run_dir)
    trainer.setup()
    try:
        before = trainer.evaluate_policy(0)
        trainer.run()
        after = trainer.evaluate_policy(1)
    finally:
        trainer.close()
    return run_dir, {"untrained": before["eval/success"], "sft": after["eval/success"],
                     "sft_format_errors": after["eval/format_error_rate"]}


def run_rl(algo: str, budget: Budget, seed: int, out: Path, sft_dir: Path,
           arch: str = "llama") -> dict[str, Any]:
    config = rl_config(algo, budget, seed, out, sft_dir)
    trainer = Trainer(config, policy=tiny_policy(seed, arch),
                      run_dir=out / f"{algo}-seed{seed}")
    trainer.setup()
    curve: list[float] = []
    start = time.perf_counter()
    try:
        for iteration in range(budget.iterations):
            metrics = trainer.train_iteration(iteration)
            trainer.logger.log(iteration + 1, metrics)
            curve.append(float(metrics["rollout/success"]))
            print(f"  {algo} seed {seed} iteration {iteration + 1}: success {curve[-1]:.3f}",
                  flush=True)
        final = trainer.evaluate(budget.iterations)
    finally:
        trainer.close()
    return {"curve": curve, "eval_after": float(final["eval/success"]),
            "seconds": time.perf_counter() - start}


def first_at(curve: list[float], threshold: float = 0.5, window: int = 3) -> int | None:
    """First iteration (1-based) whose ``window``-iteration moving average >= threshold."""
    for end in range(window, len(curve) + 1):
        if np.mean(curve[end - window:end]) >= threshold:
            return end
    return None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--methods", default="gigpo,grpo")
    parser.add_argument("--arch", choices=("llama", "gpt2"), default="llama")
    parser.add_argument("--out", type=Path, default=Path("runs/sokoban-learning"))
    for spec in dataclasses.fields(Budget):
        parser.add_argument(f"--{spec.name.replace('_', '-')}", type=type(spec.default),
                            default=spec.default)
    args = parser.parse_args(argv)
    budget = Budget(**{spec.name: getattr(args, spec.name) for spec in dataclasses.fields(Budget)})
    results: dict[str, Any] = {"budget": dataclasses.asdict(budget), "arch": args.arch,
                               "seeds": {}}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        start = time.perf_counter()
        sft_dir, sft = run_sft(budget, seed, args.out, args.arch)
        print(f"seed {seed}: held-out success untrained {sft['untrained']:.3f}, after SFT "
              f"{sft['sft']:.3f} ({time.perf_counter() - start:.0f} s)", flush=True)
        entry: dict[str, Any] = {"sft": sft}
        for algo in args.methods.split(","):
            entry[algo] = run_rl(algo, budget, seed, args.out, sft_dir, args.arch)
        results["seeds"][seed] = entry
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"results-seeds{args.first_seed}-{args.first_seed + args.seeds - 1}.json"
    (args.out / name).write_text(json.dumps(results, indent=1))
    print(f"\nbudget: {budget}")
    for seed, entry in results["seeds"].items():
        for algo in args.methods.split(","):
            run = entry[algo]
            print(f"seed {seed} {algo:6s} held-out {entry['sft']['sft']:.3f} -> "
                  f"{run['eval_after']:.3f}; training success first >= 0.5 (3-it. avg) at "
                  f"{first_at(run['curve'])}; last 3 {np.mean(run['curve'][-3:]):.3f}; "
                  f"{run['seconds']:.0f} s; per iteration "
                  + " ".join(f"{s:.2f}" for s in run["curve"]))
    return results


if __name__ == "__main__":
    main()
