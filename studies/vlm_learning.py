"""Does a tiny vision-language policy learn visual Sokoban? SFT on the BFS expert, then GiGPO,
against a random walker on the same rooms.

The learning check of issue 42, the visual counterpart of :mod:`studies.sokoban_learning`:
the same stages and budget, on ``AgentGym/SokobanVisual-v0`` (6 x 6, one box, 15 steps),
where the room is only in the picture (the text is a fixed legend of the tiles).

The policy is a tiny random Qwen3-VL of :mod:`studies.tiny_vlm` (``--kind qwen2_5_vl``
for the paper's family), built in-process (no download): 2 language layers of width 64 (4
heads of 16) over a word-level tokenizer of the prompt's and the env's words, a 2-block
vision tower of width 32 whose patches are 8 pixels, so that each merged image token
(2 x 2 patches) is exactly one 16 x 16 tile of the 96 x 96 frame: 36 image tokens, one per
cell, at their 3-D rotary positions. The language model's rotary base is 100
(``--rope-theta``): with heads of 16 dimensions an image token's row and column get 2 of
the 8 rotary frequencies each, and at the families' bases (5e5, 1e6) those turn by
hundredths of a radian from one cell to the next, so the model could not tell where a
tile is; Qwen3-VL interleaves the frequencies (rows and columns get fast ones), Qwen2.5-VL
gives rows and columns its slowest ones. Frames go to the image processor as the env drew
them (``model.image_min_pixels 0``: verl-agent's ``process_image`` would scale them up to
256 x 256 first, which a 3B model's 14-pixel patches want and a tiny model's CPU budget
does not). Every weight trains, vision tower included (``model.train_vision_tower``, as the
``sokoban-vl-3b`` preset).

1. **SFT warm start** (``algorithms.sft.trainer.SFTTrainer``, what ``--algo sft`` runs):
   episodes of ``SokobanVisualEnv.expert_action`` (breadth-first search) on the training
   rooms, with their frames, a fixed number of optimizer steps (:class:`Budget`).
2. **GiGPO from it** (``algorithms.training.trainer.Trainer`` with ``model.init_checkpoint``,
   what ``--model.init-checkpoint`` does), the image-anchored step groups of the visual env
   (``anchor="observation"``: equal frames share a group).

The prompt (:data:`TEMPLATE`, a ``--prompt.template``) is the task, the frame and the moves,
with ``<action>`` opened for the model (the cpu-demo's prefix), no thinking, no history; it
leaves out the env's legend of the tiles, which put 80 words of constant text beside the
frame's 36 tokens: with it, 3 of 4 SFT runs of 780 to 900 steps stayed on the 0.69-nats
plateau (one left it after about 375 steps); without it, the run tried left it after about
550 steps (measured while sizing this check, seed 0, 400 episodes). The loss is the cpu-demo's (``CPU_DEMO_LOSS``), no KL.

Reported per seed: held-out success (``eval_episodes`` rooms from seed 65,536, temperature
0.4) untrained, after SFT and after the last RL iteration; SFT's loss over its last 100
steps (0.69 nats per response token is the plateau where the model writes the moves'
frequencies and reads nothing of the picture); training-rollout success per iteration; and
a uniform random walker's success on the same held-out rooms
(:func:`random_walker_success`, ``walker_episodes`` walks per room), the bar to beat.

Usage::

    OMP_NUM_THREADS=1 python -m studies.vlm_learning --seeds 1 --first-seed 0

Measured figures: docs/vlm.md, "Learning check".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.config import ModelConfig, TrainConfig, replace
from algorithms.presets import CPU_DEMO_LOSS, PRESETS
from studies.sokoban_learning import first_at

ENV_ID = "AgentGym/SokobanVisual-v0"
EVAL_KWARGS = {"first_seed": 65_536}
MAX_STEPS = 15
PATCH = 8
"""Vision patch size: a merged token (2 x 2 patches) is one 16-pixel tile."""
TEMPLATE = ("{task}\nThe room: {image}\nActions: {admissible_actions}\n"
            "Give exactly one action inside <action> </action>.")
"""The prompt (``--prompt.template``): the task, the frame and the moves, without the env's
legend of the tiles (80 words the model cannot use and that would dilute its attention
over the frame's 36 tokens)."""


@dataclasses.dataclass(frozen=True)
class Budget:
    """What one seed spends: SFT on ``sft_episodes`` expert episodes, ``sft_steps``
    optimizer steps of ``sft_batch`` samples at ``sft_lr``; RL ``iterations`` of
    ``num_groups`` x ``group_size`` episodes at ``lr``; ``eval_episodes`` held-out rooms;
    the random walker's ``walker_episodes`` walks per held-out room; the model's widths."""

    sft_episodes: int = 800
    sft_steps: int = 3000
    sft_batch: int = 32
    sft_lr: float = 1e-3
    num_groups: int = 8
    group_size: int = 8
    iterations: int = 25
    lr: float = 3e-4
    eval_episodes: int = 64
    walker_episodes: int = 100
    hidden: int = 64
    vision_hidden: int = 32
    kind: str = "qwen3_vl"
    rope_theta: float = 100.0
    dtype: str = "float32"
    """The policy's ``model.dtype``: float32 on any CPU, as :mod:`studies.sokoban_learning`
    (a model this small gains no speed from bfloat16; ``auto`` for the machine's
    default, docs/vlm.md says what it gave)."""


def model_settings(budget: Budget) -> dict[str, Any]:
    """The policy's model settings: full fine-tune, tower trained, frames as drawn, in
    ``budget.dtype``."""
    return {"lora_rank": 0, "gradient_checkpointing": False, "kind": "vision",
            "train_vision_tower": True, "image_min_pixels": 0, "dtype": budget.dtype}


def base_config(budget: Budget, seed: int, out: Path) -> TrainConfig:
    """:mod:`studies.sokoban_learning`'s settings on the visual env, the prompt
    :data:`TEMPLATE` (written to ``out/template.txt``)."""
    out.mkdir(parents=True, exist_ok=True)
    template = out / "template.txt"
    template.write_text(TEMPLATE, encoding="utf-8")
    base = PRESETS["cpu-demo"]
    return replace(
        base,
        model=model_settings(budget),
        generation={"max_new_tokens": 4, "batch_size": 64},
        prompt={"max_prompt_tokens": 400, "history_window": 0, "template": str(template)},
        env={"env_id": ENV_ID, "num_groups": budget.num_groups,
             "group_size": budget.group_size, "max_steps": MAX_STEPS, "anchor": "observation",
             "env_kwargs": "{}", "eval_env_kwargs": json.dumps(EVAL_KWARGS),
             "eval_episodes": budget.eval_episodes},
        run={"seed": seed, "output_dir": str(out), "tensorboard": False, "progress": False,
             "save_every": 10_000, "keep_checkpoints": 1, "eval_every": 0})


def sft_config(budget: Budget, seed: int, out: Path) -> TrainConfig:
    config = dataclasses.replace(base_config(budget, seed, out), algo="sft")
    return replace(config, sft={"episodes": budget.sft_episodes, "perturb": 0.0,
                                "max_steps": budget.sft_steps, "lr": budget.sft_lr,
                                "batch_size": budget.sft_batch,
                                "micro_batch_size": budget.sft_batch}).validate()


def rl_config(budget: Budget, seed: int, out: Path, sft_dir: Path) -> TrainConfig:
    config = dataclasses.replace(base_config(budget, seed, out), algo="gigpo")
    return replace(config, model={"init_checkpoint": str(sft_dir)},
                   learner={"lr": budget.lr, "kl_coef": 0.0, "mini_batch_size": 256,
                            "micro_batch_size": 64, **CPU_DEMO_LOSS},
                   run={"iterations": budget.iterations}).validate()


def vocabulary(config: TrainConfig) -> list[str]:
    """Every word the tiny tokenizer must know: the whole prompt of a step (task, legend,
    actions, instruction), the invalid-action line and the answers."""
    from agentgym.sokoban.visual import SokobanVisualEnv

    env = SokobanVisualEnv()
    actions = ("up", "down", "left", "right")
    return [env.task, TEMPLATE, " ".join(actions), ", ".join(actions), "<action> </action>"]


def tiny_policy(budget: Budget, seed: int, config: TrainConfig) -> Any:
    """The tiny Qwen2.5-VL of the module docstring (36 image tokens per frame)."""
    from studies.tiny_vlm import tiny_vlm_policy

    return tiny_vlm_policy(vocabulary(config), kind=budget.kind, seed=seed,
                           hidden=budget.hidden, layers=2,
                           vision_hidden=budget.vision_hidden, patch_size=PATCH,
                           rope_theta=budget.rope_theta,
                           max_tokens=36, model_config=ModelConfig(**model_settings(budget)))


def random_walker_success(budget: Budget, seed: int, config: TrainConfig) -> float:
    """Share of ``walker_episodes`` uniform random walks (up / down / left / right, at most
    ``MAX_STEPS`` steps) per held-out room that solve it, over the rooms the evaluation of
    ``config`` plays, in the same env."""
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers the ids)
    from algorithms.agent.evaluation import held_out_task_ids

    env = gym.make(ENV_ID, **config.env.eval_kwargs())
    rng = np.random.default_rng(seed)
    actions = ("up", "down", "left", "right")
    rooms = held_out_task_ids(config)
    solved = 0
    try:
        for room in rooms:
            for _ in range(budget.walker_episodes):
                env.reset(options={"task_id": room})
                terminated = truncated = False
                info: dict[str, Any] = {}
                while not (terminated or truncated):
                    action = actions[int(rng.integers(len(actions)))]
                    _, _, terminated, truncated, info = env.step(action)
                solved += bool(info.get("success"))
    finally:
        env.close()
    return solved / (len(rooms) * budget.walker_episodes)


def run_sft(budget: Budget, seed: int, out: Path) -> tuple[Path, dict[str, float]]:
    from algorithms.sft.trainer import SFTTrainer

    run_dir = out / f"sft-seed{seed}"
    config = sft_config(budget, seed, out)
    trainer = SFTTrainer(config, policy=tiny_policy(budget, seed, config), run_dir=run_dir)
    trainer.setup()
    start = time.perf_counter()
    try:
        before = trainer.evaluate_policy(0)
        trainer.run()
        after = trainer.evaluate_policy(1)
    finally:
        trainer.close()
    from algorithms.agent.metrics import read_metrics

    losses = [row["sft/loss"] for row in read_metrics(run_dir / "metrics.jsonl")
              if "sft/loss" in row]
    return run_dir, {"untrained": before["eval/success"], "sft": after["eval/success"],
                     "sft_format_errors": after["eval/format_error_rate"],
                     "sft_loss_last_100": float(np.mean(losses[-100:])),
                     "seconds": time.perf_counter() - start}


def run_rl(budget: Budget, seed: int, out: Path, sft_dir: Path) -> dict[str, Any]:
    from algorithms.training.trainer import Trainer

    config = rl_config(budget, seed, out, sft_dir)
    trainer = Trainer(config, policy=tiny_policy(budget, seed, config),
                      run_dir=out / f"gigpo-seed{seed}")
    trainer.setup()
    curve: list[float] = []
    start = time.perf_counter()
    try:
        for iteration in range(budget.iterations):
            metrics = trainer.train_iteration(iteration)
            trainer.logger.log(iteration + 1, metrics)
            curve.append(float(metrics["rollout/success"]))
            print(f"  gigpo seed {seed} iteration {iteration + 1}: success {curve[-1]:.3f} "
                  f"({metrics['time/iteration']:.0f} s)", flush=True)
        final = trainer.evaluate(budget.iterations)
    finally:
        trainer.close()
    return {"curve": curve, "eval_after": float(final["eval/success"]),
            "seconds": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/vlm-learning"))
    for spec in dataclasses.fields(Budget):
        parser.add_argument(f"--{spec.name.replace('_', '-')}", type=type(spec.default),
                            default=spec.default)
    args = parser.parse_args(argv)
    budget = Budget(**{spec.name: getattr(args, spec.name)
                       for spec in dataclasses.fields(Budget)})
    import torch

    torch.set_num_threads(1)
    from algorithms.runs.console import quiet_dependency_bars

    quiet_dependency_bars()
    results: dict[str, Any] = {"budget": dataclasses.asdict(budget), "seeds": {}}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        start = time.perf_counter()
        walker = random_walker_success(budget, seed, base_config(budget, seed, args.out))
        sft_dir, sft = run_sft(budget, seed, args.out)
        print(f"seed {seed}: random walker {walker:.3f}; held-out success untrained "
              f"{sft['untrained']:.3f}, after SFT {sft['sft']:.3f} (loss of the last 100 "
              f"steps {sft['sft_loss_last_100']:.3f}; {sft['seconds']:.0f} s)", flush=True)
        rl = run_rl(budget, seed, args.out, sft_dir)
        results["seeds"][seed] = {"random_walker": walker, "sft": sft, "gigpo": rl,
                                  "seconds": time.perf_counter() - start}
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"results-seeds{args.first_seed}-{args.first_seed + args.seeds - 1}.json"
    (args.out / name).write_text(json.dumps(results, indent=1))
    print(f"\nbudget: {budget}")
    beaten = []
    for seed, entry in results["seeds"].items():
        rl = entry["gigpo"]
        beaten.append(rl["eval_after"] > entry["random_walker"])
        print(f"seed {seed}: held-out success untrained {entry['sft']['untrained']:.3f}, "
              f"SFT {entry['sft']['sft']:.3f}, GiGPO {rl['eval_after']:.3f} vs random walker "
              f"{entry['random_walker']:.3f}; training success first >= 0.5 (3-it. avg) at "
              f"{first_at(rl['curve'])}; SFT {entry['sft']['seconds']:.0f} s, RL "
              f"{rl['seconds']:.0f} s; per iteration "
              + " ".join(f"{s:.2f}" for s in rl["curve"]))
    print(f"vlm learning: {'beats' if all(beaten) else 'does NOT beat'} the random walker "
          f"on {sum(beaten)} of {len(beaten)} seeds")
    return results


if __name__ == "__main__":
    main()
