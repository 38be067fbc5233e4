"""Smoke test of a vision-language policy through the whole trainer, with time and memory
per phase.

Run from the repository root::

    python -m benchmarks.vlm_smoke                        # visual Sokoban, then EZPoints
    python -m benchmarks.vlm_smoke --kind qwen3_vl --full # Qwen3-VL, full fine-tune
    python -m benchmarks.vlm_smoke --env AgentGym/Blackjack-v0
    python -m benchmarks.vlm_smoke --env tests.algorithms.visual_env:AgentGymTest/VisualGrid-v0

What it does, on each env (by default ``AgentGym/SokobanVisual-v0`` and then
``AgentGym/EZPoints-v0``, the paper's two visual tasks): builds the tiny random
vision-language model of :mod:`studies.tiny_vlm`
(its word vocabulary read from the env: the task, the observations and the actions of a
few random episodes) and saves it as a model folder, which the trainer loads as any
``--model.name-or-path`` (``model.kind auto`` finds the vision model). Then, through
:class:`~algorithms.training.trainer.Trainer` with GiGPO and the HF engine:

1. a run of 2 iterations (rollout with images, old and reference log-probs on the same
   pixels, advantages, update, checkpoint after each);
2. a run of 1 iteration, then the same run resumed from its checkpoint for the second;
   the resumed iteration must equal the straight run's (metrics, weights, actions), and
   every iteration's update must be finite (:func:`metric_problems`; a NaN update is
   skipped, so both runs would otherwise agree on untrained weights).

Per phase it prints the seconds and the peak memory: the process's peak resident set
(``VmHWM``, reset before each phase through ``/proc/self/clear_refs``) on a CPU, and
torch's peak allocated GPU memory on a GPU. The last line starts with
``vlm smoke: ok`` when every env passed.

``--env`` (repeatable) names any registered visual env id (or ``module:id``, whose module
is imported first, e.g. the tests' visual grid, ``tests.algorithms.visual_env``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

DEFAULT_ENVS = ("AgentGym/SokobanVisual-v0", "AgentGym/EZPoints-v0")
PHASES = ("setup", "rollout", "log_probs", "advantages", "update", "checkpoint", "resume")
FINITE_METRICS = ("update/policy_loss", "update/kl_ref", "update/entropy", "update/grad_norm")
"""The update metrics every iteration must report, finite."""


def metric_problems(metrics: list[dict[str, Any]]) -> list[str]:
    """One line per thing wrong with a run's iteration records (``metrics.jsonl``): no
    record, a :data:`FINITE_METRICS` value missing (the metrics file leaves out a
    non-finite value) or not finite, or an optimizer step skipped for a non-finite
    gradient (``update/skipped_steps``). Empty: every update was finite."""
    problems = [] if metrics else ["no iteration recorded"]
    for row in metrics:
        iteration = row.get("iteration")
        for key in FINITE_METRICS:
            value = row.get(key)
            if not (isinstance(value, (int, float)) and math.isfinite(value)):
                problems.append(f"iteration {iteration}: {key} "
                                f"{'missing (not finite)' if value is None else value}")
        if row.get("update/skipped_steps", 0.0) != 0.0:
            problems.append(f"iteration {iteration}: update/skipped_steps "
                            f"{row['update/skipped_steps']} (a non-finite gradient)")
    return problems


def registered_env_id(env: str) -> str:
    """``env`` as a registry id: a ``module:id`` imports ``module`` (which registers the id)
    and gives ``id``."""
    if ":" in env:
        module, env = env.split(":", 1)
        importlib.import_module(module)
    return env


def env_texts(env_id: str, env_kwargs: dict[str, Any], *, episodes: int = 4,
              steps: int = 6) -> list[str]:
    """The task, observation texts and admissible actions of a few random episodes."""
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers AgentGym/*)
    from algorithms.agent.env_slot import split_observation

    env = gym.make(env_id, **env_kwargs)
    rng = np.random.default_rng(0)
    texts: list[str] = []
    try:
        for episode in range(episodes):
            observation, info = env.reset(seed=episode)
            for _ in range(steps):
                actions = tuple(info.get("admissible_actions", ()) or ())
                texts += [split_observation(observation)[0], str(info.get("task", "")),
                          " ".join(actions)]
                action = str(rng.choice(actions)) if actions else "look"
                observation, _, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    break
    finally:
        env.close()
    return texts


class PhaseMeter:
    """Seconds and peak memory of each phase, summed over its calls (memory: the largest)."""

    def __init__(self, device: str):
        self.device = device
        self.seconds: dict[str, float] = {}
        self.peak_mb: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        _reset_peak(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            self.peak_mb[name] = max(self.peak_mb.get(name, 0.0), _peak_mb(self.device))

    def wrap(self, owner: Any, method: str, name: str) -> None:
        """Measure every call of ``owner.method`` as phase ``name``."""
        inner: Callable[..., Any] = getattr(owner, method)

        def measured(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return inner(*args, **kwargs)

        setattr(owner, method, measured)


def _reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return
    with contextlib.suppress(OSError):  # Linux: reset the peak RSS (VmHWM) to the current
        Path("/proc/self/clear_refs").write_text("5")


def _peak_mb(device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def smoke_config(args: argparse.Namespace, env_id: str, model: Path, *, iterations: int,
                 resume: bool = False) -> Any:
    """The trainer config of one smoke run."""
    from algorithms.config import TrainConfig, replace

    lora = {} if args.full else {"lora_rank": 4, "lora_alpha": 8}
    return replace(
        TrainConfig(algo="gigpo", preset="vlm-smoke"),
        model={"name_or_path": str(model), "kind": "vision",
               "train_vision_tower": args.train_vision_tower, **lora},
        generation={"engine": "hf", "max_new_tokens": args.max_new_tokens},
        prompt={"think": False, "max_prompt_tokens": 1024, "history_window": 2},
        env={"env_id": env_id, "num_groups": args.groups, "group_size": args.group_size,
             "max_steps": args.max_steps, "env_kwargs": args.env_kwargs},
        learner={"lr": 1e-4, "mini_batch_size": 8, "micro_batch_size": 4, "kl_coef": 0.01},
        run={"iterations": iterations, "save_every": 1, "seed": 0, "tensorboard": False,
             "progress": False, "device": args.device, "resume": resume,
             "record_trajectories": 4})


def measured_run(config: Any, run_dir: Path, meter: PhaseMeter, *, setup_phase: str,
                 policy: Any = None) -> Any:
    """Run one trainer (on ``policy`` when given, else the config's model) with its
    phases measured; return it."""
    from algorithms.training.trainer import Trainer

    trainer = Trainer(config, run_dir=run_dir, policy=policy)
    with meter.phase(setup_phase):
        trainer.setup()
    meter.wrap(trainer.sampler, "sample", "rollout")
    meter.wrap(trainer.learner, "score", "log_probs")
    meter.wrap(trainer.learner, "advantages", "advantages")
    meter.wrap(trainer.learner, "update", "update")
    meter.wrap(trainer, "save", "checkpoint")
    trainer.run()
    return trainer


def smoke_env(args: argparse.Namespace, env: str, workdir: Path) -> bool:
    """Straight run, run + resume and their comparison on one env; prints the phases'
    seconds and memory; whether it passed."""
    from algorithms.agent.metrics import read_metrics
    from studies.tiny_vlm import save_tiny_vlm

    env_id = registered_env_id(env)
    workdir.mkdir(parents=True, exist_ok=True)
    texts = env_texts(env_id, json.loads(args.env_kwargs))
    model = save_tiny_vlm(workdir / "model", texts, kind=args.kind)
    print(f"env {env_id}, tiny {args.kind} in {model} "
          f"({'full fine-tune' if args.full else 'LoRA'}"
          f"{', vision tower trained' if args.train_vision_tower else ''}), {args.device}")
    meter = PhaseMeter(args.device)
    straight = measured_run(smoke_config(args, env_id, model, iterations=2),
                            workdir / "straight", meter, setup_phase="setup")
    measured_run(smoke_config(args, env_id, model, iterations=1), workdir / "resumed", meter,
                 setup_phase="setup")
    resumed = measured_run(smoke_config(args, env_id, model, iterations=2, resume=True),
                           workdir / "resumed", meter, setup_phase="resume")
    straight_rows = read_metrics(workdir / "straight" / "metrics.jsonl")
    resumed_rows = read_metrics(workdir / "resumed" / "metrics.jsonl")
    problems = metric_problems(straight_rows) + metric_problems(resumed_rows)
    a, b = straight_rows[1], resumed_rows[1]
    keys = [k for k in a if not k.startswith(("time/", "throughput/"))]
    gap = max(abs(a[k] - b[k]) for k in keys if isinstance(a[k], (int, float)))
    weights = max(float((p - q).detach().abs().max()) for p, q in zip(
        straight.policy.model.parameters(), resumed.policy.model.parameters(), strict=True))
    same_actions = straight.last_batch.log.actions == resumed.last_batch.log.actions
    batch = straight.last_batch
    shown = 0 if batch.images is None else sum(bool(row) for row in batch.images)
    images = shown == len(batch) > 0
    unit = "GPU MiB (torch peak allocated)" if args.device == "cuda" else "MiB (peak RSS)"
    print(f"{'phase':<11} {'seconds':>8} {unit:>12}")
    for phase in PHASES:
        if phase in meter.seconds:
            print(f"{phase:<11} {meter.seconds[phase]:>8.2f} {meter.peak_mb[phase]:>12.0f}")
    print(f"iteration 2's batch: {shown} of {len(batch)} rows show an image")
    print(f"resumed iteration 2 vs straight: largest metric gap {gap:.2e}, weight gap "
          f"{weights:.2e}, same actions {same_actions}")
    print(f"updates: {'; '.join(problems) if problems else 'every loss finite'}")
    ok = images and same_actions and gap < 1e-6 and weights < 1e-6 and not problems
    total = sum(meter.seconds.values())
    print(f"{env_id}: {'ok' if ok else 'FAILED'} ({total:.1f} s measured)\n")
    args.measured += total
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", action="append", default=None,
                        help="visual env id, or module:id; repeat for several (default: "
                             + " and ".join(DEFAULT_ENVS) + ")")
    parser.add_argument("--env-kwargs", default="{}", help="env constructor kwargs (JSON)")
    parser.add_argument("--kind", default="qwen2_5_vl", choices=("qwen2_5_vl", "qwen3_vl"))
    parser.add_argument("--full", action="store_true", help="full fine-tune (default: LoRA)")
    parser.add_argument("--train-vision-tower", action="store_true")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--workdir", default=None, help="keep the models and runs here")
    args = parser.parse_args(argv)
    envs = args.env or list(DEFAULT_ENVS)
    args.measured = 0.0
    torch.set_num_threads(1)
    from algorithms.runs.console import quiet_dependency_bars

    quiet_dependency_bars()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="vlm-smoke-"))
    passed = [smoke_env(args, env, workdir / f"env{index}") for index, env in enumerate(envs)]
    names = ", ".join(registered_env_id(env) for env in envs)
    if not all(passed):
        print(f"vlm smoke: FAILED ({names})")
        return 1
    print(f"vlm smoke: ok ({names}: 2 iterations + resume each, {args.kind}, "
          f"{args.measured:.1f} s measured)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
