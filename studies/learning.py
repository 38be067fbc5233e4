"""Does step-level credit help? GiGPO (two anchor modes), GRPO and PPO on the KeyDoor house.

The task (``AgentGym/KeyDoor-v0``, see :mod:`agentgym.keydoor`): fetch a key and open a
locked door in a 3 x 3 grid of named rooms; reward 1 only for the winning ``open door``,
wasted and looping moves possible, and the same (room, key held) states recur across the
trajectories of a group -- what GiGPO's step groups need.

**The learner is a small torch policy, not an LLM.** SmolLM2-135M takes minutes per
iteration on this 2-core CPU, and even a tiny from-scratch Llama through the trainer took
~45 s per iteration on the loaded machine -- too slow for four methods x 3 seeds x tens of
iterations. The policy here reads the same text the LLM would (task, current observation,
previous observation and action), as hashed word n-grams (n <= 4), through a 2-layer MLP
to a softmax over the six KeyDoor actions; choosing one the env does not admit costs the
invalid-action penalty (0.1), as in training. What is compared is exactly the project's
credit assignment: rollouts through :class:`agentgym.vector.TextVectorEnv` (groups share a
task), advantages from :mod:`algorithms.objectives.advantages` (``gigpo_advantages`` with either
anchor, ``grpo_advantages``, ``gae_advantages``), the PPO-clip loss and value loss from
:mod:`algorithms.objectives.losses`, and every hyper-parameter not set in :class:`BenchSpec` from
:class:`algorithms.config.LearnerConfig` (gamma 0.95, lambda 0.95, clip 0.2, omega 1, std
normalization, trajectory episode statistics). Every method gets the same policy network,
seeds, batch, epochs and learning rate; PPO adds a value network of the same shape.

Reported per method, over seeds: training-rollout success per iteration (mean and
min-max band, against iterations and against wall time, as a PNG), iterations until the
3-iteration moving average of success reaches 50% and 90%, the final success (mean of the
last 3 iterations), the mean episode length of the last 3 iterations and GiGPO's step-group
size shares (GiGPO Fig. 3; share of steps in groups of size 1, 2-4, 5-9, 10-19, 20+),
averaged over all iterations.

Usage::

    python -m studies.learning                         # 4 methods x 3 seeds (see --help)
    python -m studies.learning --seeds 5 --iterations 80 --out runs/learning

(``-m`` from the repo root, like every benchmark here.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentgym.core import DEFAULT_INVALID_ACTION_PENALTY
from agentgym.keydoor import DIRECTIONS
from agentgym.vector import make_vector_env
from algorithms.agent.metrics import step_group_metrics
from algorithms.config import LearnerConfig
from algorithms.objectives.advantages import (
    gae_advantages,
    gigpo_advantages,
    grpo_advantages,
    step_groups,
)
from algorithms.objectives.losses import clipped_value_loss, ppo_clip_policy_loss

METHODS: dict[str, tuple[str, str]] = {
    "gigpo-observation": ("gigpo", "observation"),
    "gigpo-state": ("gigpo", "state"),
    "grpo": ("grpo", "observation"),
    "ppo": ("gae", "observation"),
}
"""Benchmark name -> (advantage estimator, anchor). The anchor only matters to GiGPO."""

ACTIONS: tuple[str, ...] = tuple(f"go {name}" for name, _, _ in DIRECTIONS) + (
    "take key", "open door")
"""The policy's action set: every KeyDoor action."""


@dataclass(frozen=True)
class BenchSpec:
    """The benchmark's task, budget and learner (one place for its defaults).

    Attributes:
        width, height, num_tasks, max_steps, key: the KeyDoor env.
        success_reward: reward of a win; 10 as in GiGPO's ALFWorld recipe (the
            invalid-action penalty is 0.1).
        num_groups, group_size: groups per iteration and trajectories per group.
        lr: Adam learning rate of the policy (and of PPO's value network).
        epochs: passes over each iteration's batch (one full-batch step each).
        hidden: MLP width.
        features: hashed n-gram buckets per text field.
        learner: every other update setting (gamma, lambda, clip, omega, normalization).
    """

    width: int = 3
    height: int = 3
    num_tasks: int = 16
    max_steps: int = 15
    key: bool = True
    success_reward: float = 10.0
    num_groups: int = 8
    group_size: int = 8
    lr: float = 3e-3
    epochs: int = 4
    hidden: int = 64
    features: int = 1024
    learner: LearnerConfig = field(default_factory=LearnerConfig)

    def env_kwargs(self, anchor: str) -> dict[str, Any]:
        return {"width": self.width, "height": self.height, "num_tasks": self.num_tasks,
                "key": self.key, "max_steps": self.max_steps, "anchor": anchor,
                "success_reward": self.success_reward}


# ---------------------------------------------------------------------- the policy
def text_features(text: str, buckets: int, max_n: int = 4) -> np.ndarray:
    """(buckets,) float32 hashed counts of the word n-grams (1 <= n <= ``max_n``) of
    ``text``, lower-cased, punctuation split off; deterministic (crc32)."""
    words = text.lower().replace(".", " .").replace(",", " ,").split()
    out = np.zeros(buckets, dtype=np.float32)
    for n in range(1, max_n + 1):
        for i in range(len(words) - n + 1):
            out[zlib.crc32(" ".join(words[i:i + n]).encode()) % buckets] += 1.0
    return out


def step_features(task: str, observation: str, previous: tuple[str, str] | None,
                  buckets: int) -> np.ndarray:
    """(3 * buckets + len(ACTIONS),) features of one step: task, observation, previous
    observation (n-grams) and previous action (one-hot) -- the LLM prompt's content with a
    history window of 1."""
    last_action = np.zeros(len(ACTIONS), dtype=np.float32)
    if previous is not None and previous[1] in ACTIONS:
        last_action[ACTIONS.index(previous[1])] = 1.0
    return np.concatenate([
        text_features(task, buckets), text_features(observation, buckets),
        text_features(previous[0] if previous else "", buckets), last_action])


def mlp(inputs: int, hidden: int, outputs: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, outputs))


# ---------------------------------------------------------------------- rollout
@dataclass
class Rollout:
    """One iteration's steps, row per agent step, trajectories in time order."""

    features: np.ndarray  # (N, F) float32
    actions: np.ndarray  # (N,) int64 index into ACTIONS
    log_probs: np.ndarray  # (N,) float32 under the sampling policy
    rewards: np.ndarray  # (N,) env reward minus the invalid-action penalty
    traj_ids: np.ndarray  # (N,) int64
    group_ids: np.ndarray  # (N,) int64
    anchors: list[Any]  # N anchors of the state each action was taken in
    invalid: np.ndarray  # (N,) bool
    success: np.ndarray  # (E,) bool per episode
    lengths: np.ndarray  # (E,) int64 per episode
    truncated_next: dict[int, np.ndarray]  # traj -> features of the state after a cut


def collect(venv: Any, policy: torch.nn.Module, spec: BenchSpec, seed: int,
            generator: torch.Generator) -> Rollout:
    """Roll out every env of ``venv`` once (reset with ``seed``) with ``policy``."""
    penalty = DEFAULT_INVALID_ACTION_PENALTY
    observations, infos = venv.reset(seed=seed)
    num_envs = venv.num_envs
    tasks = list(infos["task"])
    anchors_now = list(infos["anchor"])
    previous: list[tuple[str, str] | None] = [None] * num_envs
    active = np.ones(num_envs, dtype=bool)
    success = np.zeros(num_envs, dtype=bool)
    lengths = np.zeros(num_envs, dtype=np.int64)
    rows: dict[str, list[Any]] = {k: [] for k in ("features", "actions", "log_probs",
                                                  "rewards", "traj_ids", "anchors",
                                                  "invalid")}
    truncated_next: dict[int, np.ndarray] = {}
    for _ in range(spec.max_steps):
        index = np.flatnonzero(active)
        if len(index) == 0:
            break
        feats = np.stack([step_features(tasks[i], observations[i], previous[i],
                                        spec.features) for i in index])
        with torch.no_grad():
            logits = policy(torch.from_numpy(feats))
            dist = torch.distributions.Categorical(logits=logits)
            picks = torch.multinomial(dist.probs, 1, generator=generator).squeeze(1)
            logps = dist.log_prob(picks)
        commands = ["" for _ in range(num_envs)]
        for position, i in enumerate(index):
            commands[i] = ACTIONS[int(picks[position])]
        observations_next, rewards, terminated, truncated, infos = venv.step(commands)
        for position, i in enumerate(index):
            valid = bool(infos["valid_action"][i])
            rows["features"].append(feats[position])
            rows["actions"].append(int(picks[position]))
            rows["log_probs"].append(float(logps[position]))
            rows["rewards"].append(float(rewards[i]) - (0.0 if valid else penalty))
            rows["traj_ids"].append(int(i))
            rows["anchors"].append(anchors_now[i])
            rows["invalid"].append(not valid)
            lengths[i] += 1
            previous[i] = (observations[i], commands[i])
            anchors_now[i] = infos["anchor"][i]
            if terminated[i] or truncated[i]:
                active[i] = False
                success[i] = bool(infos["success"][i])
                if truncated[i]:
                    truncated_next[int(i)] = step_features(
                        tasks[i], observations_next[i], previous[i], spec.features)
        observations = list(observations_next)
    traj_ids = np.array(rows["traj_ids"], dtype=np.int64)
    order = np.argsort(traj_ids, kind="stable")  # trajectory-major, time order kept
    return Rollout(
        features=np.stack(rows["features"])[order],
        actions=np.array(rows["actions"], dtype=np.int64)[order],
        log_probs=np.array(rows["log_probs"], dtype=np.float32)[order],
        rewards=np.array(rows["rewards"], dtype=np.float64)[order],
        traj_ids=traj_ids[order],
        group_ids=traj_ids[order] // spec.group_size,
        anchors=[rows["anchors"][i] for i in order],
        invalid=np.array(rows["invalid"], dtype=bool)[order],
        success=success, lengths=lengths, truncated_next=truncated_next)


# ---------------------------------------------------------------------- one run
@dataclass
class RunResult:
    """Per-iteration curves of one method and seed."""

    method: str
    seed: int
    success: list[float] = field(default_factory=list)
    episode_length: list[float] = field(default_factory=list)
    invalid_rate: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # wall time of each iteration
    step_group_shares: list[dict[str, float]] = field(default_factory=list)


def advantages_of(method: str, batch: Rollout, spec: BenchSpec,
                  values: np.ndarray | None = None,
                  next_values: dict[int, float] | None = None
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """(N,) advantages of ``method`` for ``batch`` and, for PPO, (N,) value targets."""
    learner = spec.learner
    estimator = METHODS[method][0]
    if estimator == "gigpo":
        return gigpo_advantages(batch.rewards, batch.traj_ids, batch.group_ids,
                                batch.anchors, gamma=learner.gamma,
                                step_weight=learner.step_weight,
                                normalize=learner.normalize,
                                episode_stats=learner.episode_stats), None
    if estimator == "grpo":
        return grpo_advantages(batch.rewards, batch.traj_ids, batch.group_ids,
                               normalize=learner.normalize,
                               episode_stats=learner.episode_stats), None
    advantages, returns = gae_advantages(batch.rewards, values, batch.traj_ids,
                                         gamma=learner.gamma, lam=learner.gae_lambda,
                                         last_values=next_values)
    if learner.whiten_gae and len(advantages) > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    return advantages, returns


def run_one(method: str, spec: BenchSpec, *, seed: int, iterations: int) -> RunResult:
    """Train ``method`` for ``iterations`` iterations with ``seed``; return its curves.

    The policy network's initial weights depend only on ``seed`` (the same for every
    method), and so do the tasks of each iteration.
    """
    torch.set_num_threads(1)
    estimator, anchor = METHODS[method]
    inputs = 3 * spec.features + len(ACTIONS)
    torch.manual_seed(seed)
    policy = mlp(inputs, spec.hidden, len(ACTIONS))
    critic = mlp(inputs, spec.hidden, 1) if estimator == "gae" else None
    params = list(policy.parameters()) + (list(critic.parameters()) if critic else [])
    optimizer = torch.optim.Adam(params, lr=spec.lr)
    generator = torch.Generator().manual_seed(seed)
    venv = make_vector_env("AgentGym/KeyDoor-v0", spec.num_groups * spec.group_size,
                           group_size=spec.group_size, **spec.env_kwargs(anchor))
    result = RunResult(method, seed)
    learner = spec.learner
    try:
        for iteration in range(iterations):
            start = time.perf_counter()
            batch = collect(venv, policy, spec, seed * 100_003 + iteration, generator)
            features = torch.from_numpy(batch.features)
            values = next_values = None
            if critic is not None:
                with torch.no_grad():
                    values = critic(features).squeeze(1).numpy().astype(np.float64)
                    next_values = {
                        traj: float(critic(torch.from_numpy(f)[None]).item())
                        for traj, f in batch.truncated_next.items()
                    } if learner.bootstrap_truncated else None
            advantages, returns = advantages_of(method, batch, spec, values, next_values)
            adv = torch.from_numpy(advantages).float()[:, None]
            old = torch.from_numpy(batch.log_probs)[:, None]
            actions = torch.from_numpy(batch.actions)
            mask = torch.ones_like(old)
            for _ in range(spec.epochs):
                logits = policy(features)
                logps = torch.log_softmax(logits, -1).gather(1, actions[:, None])
                loss, _ = ppo_clip_policy_loss(logps, old, adv, mask,
                                               clip_eps=learner.clip_eps)
                if critic is not None:
                    value_loss, _ = clipped_value_loss(
                        critic(features), torch.from_numpy(values).float()[:, None],
                        torch.from_numpy(returns).float()[:, None], mask,
                        clip_range=None)
                    loss = loss + learner.value_coef * value_loss
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, learner.max_grad_norm)
                optimizer.step()
            result.seconds.append(time.perf_counter() - start)
            result.success.append(float(batch.success.mean()))
            result.episode_length.append(float(batch.lengths.mean()))
            result.invalid_rate.append(float(batch.invalid.mean()))
            groups = step_groups(batch.group_ids, batch.anchors)
            result.step_group_shares.append(
                {k.rsplit("/", 1)[1]: v for k, v in step_group_metrics(groups).items()
                 if "/step_group_share/" in k})
    finally:
        venv.close()
    return result


# ---------------------------------------------------------------------- summaries
def moving_average(values: list[float], window: int = 3) -> np.ndarray:
    """Trailing moving average (the first ``window - 1`` points average what exists)."""
    array = np.asarray(values, dtype=np.float64)
    sums = np.cumsum(array)
    counts = np.minimum(np.arange(1, len(array) + 1), window)
    shifted = np.concatenate([np.zeros(window), sums])[: len(array)]
    return (sums - shifted) / counts


def iterations_to(values: list[float], threshold: float, window: int = 3) -> int | None:
    """First iteration (1-based) whose ``window``-iteration moving average of ``values``
    reaches ``threshold``; ``None`` if it never does."""
    reached = np.flatnonzero(moving_average(values, window) >= threshold - 1e-9)
    return int(reached[0]) + 1 if len(reached) else None


def summarize(results: list[RunResult]) -> dict[str, dict[str, Any]]:
    """Per method: iterations to 50% / 90% (per seed and median), final success and
    episode length (mean of the last 3 iterations, mean over seeds), untrained success
    (iteration 1), seconds per iteration, step-group shares (mean over iterations and
    seeds)."""
    table: dict[str, dict[str, Any]] = {}
    for method in METHODS:
        runs = [r for r in results if r.method == method]
        if not runs:
            continue
        to50 = [iterations_to(r.success, 0.5) for r in runs]
        to90 = [iterations_to(r.success, 0.9) for r in runs]
        shares: dict[str, float] = {}
        rows = [s for r in runs for s in r.step_group_shares]
        for key in (rows[0] if rows else {}):
            shares[key] = float(np.mean([row[key] for row in rows]))
        table[method] = {
            "seeds": len(runs),
            "iterations_to_50": to50,
            "iterations_to_90": to90,
            "median_to_50": _median_or_none(to50, len(runs[0].success)),
            "median_to_90": _median_or_none(to90, len(runs[0].success)),
            "untrained_success": float(np.mean([r.success[0] for r in runs])),
            "final_success": float(np.mean([np.mean(r.success[-3:]) for r in runs])),
            "final_success_min": float(min(np.mean(r.success[-3:]) for r in runs)),
            "final_episode_length": float(np.mean([np.mean(r.episode_length[-3:])
                                                   for r in runs])),
            "seconds_per_iteration": float(np.mean([np.mean(r.seconds) for r in runs])),
            "step_group_shares": shares,
        }
    return table


def _median_or_none(values: list[int | None], iterations: int) -> float | None:
    """Median with a run that never reached the threshold counted as ``iterations + 1``;
    ``None`` when fewer than half the runs reached it."""
    if sum(v is not None for v in values) * 2 < len(values):
        return None
    return float(np.median([iterations + 1 if v is None else v for v in values]))


def format_table(table: dict[str, dict[str, Any]], iterations: int) -> str:
    """A Markdown table of :func:`summarize`'s results."""
    def cell(values: list[int | None], median: float | None) -> str:
        per_seed = ", ".join("-" if v is None else str(v) for v in values)
        head = "never" if median is None else f"{median:g}"
        return f"{head} ({per_seed})"

    lines = [
        "| method | iters to 50% (per seed) | iters to 90% (per seed) | untrained success | "
        "final success (min) | final length | s / iter |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for method, row in table.items():
        lines.append(
            f"| {method} | {cell(row['iterations_to_50'], row['median_to_50'])} | "
            f"{cell(row['iterations_to_90'], row['median_to_90'])} | "
            f"{row['untrained_success']:.2f} | {row['final_success']:.2f} "
            f"({row['final_success_min']:.2f}) | {row['final_episode_length']:.1f} | "
            f"{row['seconds_per_iteration']:.2f} |")
    lines.append(f"\n(iterations budget {iterations}; '-' = not reached; medians count a "
                 f"run that never reached it as {iterations + 1})")
    shares = {m: r["step_group_shares"] for m, r in table.items() if r["step_group_shares"]}
    if shares:
        bins = list(next(iter(shares.values())))
        lines.append("\n| step-group size share | " + " | ".join(bins) + " |")
        lines.append("|---|" + "---:|" * len(bins))
        for method, row in shares.items():
            lines.append(f"| {method} | " + " | ".join(f"{row[b]:.2f}" for b in bins) + " |")
    return "\n".join(lines)


def plot(results: list[RunResult], path: Path) -> Path:
    """Success vs iteration and vs wall time: mean line and min-max band over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, (by_iteration, by_time) = plt.subplots(1, 2, figsize=(11, 4))
    for method in METHODS:
        runs = [r for r in results if r.method == method]
        if not runs:
            continue
        length = min(len(r.success) for r in runs)
        curves = np.array([r.success[:length] for r in runs])
        x = np.arange(1, length + 1)
        line, = by_iteration.plot(x, curves.mean(0), label=f"{method} ({len(runs)} seeds)")
        by_iteration.fill_between(x, curves.min(0), curves.max(0), alpha=0.2,
                                  color=line.get_color())
        clock = np.array([np.cumsum(r.seconds[:length]) for r in runs]).mean(0)
        by_time.plot(clock, curves.mean(0), color=line.get_color(), label=method)
        by_time.fill_between(clock, curves.min(0), curves.max(0), alpha=0.2,
                             color=line.get_color())
    by_iteration.set_xlabel("iteration")
    by_iteration.xaxis.set_major_locator(MaxNLocator(integer=True))
    by_time.set_xlabel("wall time (s, mean over seeds)")
    for axis in (by_iteration, by_time):
        axis.set_ylabel("training-rollout success")
        axis.set_ylim(-0.05, 1.05)
        axis.grid(alpha=0.3)
    by_iteration.legend(fontsize=8)
    figure.suptitle("KeyDoor: success, mean and min-max over seeds")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--out", type=Path, default=Path("runs/learning-benchmark"))
    parser.add_argument("--step-weight", type=float, default=None,
                        help="GiGPO omega (default: LearnerConfig's, 1.0)")
    parser.add_argument("--normalize", choices=("std", "mean"), default=None,
                        help="group normalization (default: LearnerConfig's, std)")
    args = parser.parse_args(argv)
    spec = BenchSpec()
    changes = {k: v for k, v in (("step_weight", args.step_weight),
                                 ("normalize", args.normalize)) if v is not None}
    if changes:
        spec = dataclasses.replace(spec, learner=dataclasses.replace(spec.learner, **changes))
    results = []
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for method in args.methods:
            # each finished run is kept, so an interrupted benchmark resumes where it was
            saved = args.out / f"run-{method}-seed{seed}-iters{args.iterations}.json"
            if saved.exists():
                result = RunResult(**json.loads(saved.read_text(encoding="utf-8")))
            else:
                result = run_one(method, spec, seed=seed, iterations=args.iterations)
                saved.write_text(json.dumps(dataclasses.asdict(result)), encoding="utf-8")
            results.append(result)
            print(f"{method:<18} seed {seed}: success "
                  + " ".join(f"{s:.2f}" for s in result.success)
                  + f"  ({sum(result.seconds):.0f} s)", flush=True)
    table = summarize(results)
    print(format_table(table, args.iterations))
    png = plot(results, args.out / "learning.png")
    (args.out / "results.json").write_text(json.dumps(
        {"spec": {**dataclasses.asdict(spec)}, "iterations": args.iterations,
         "table": table, "runs": [dataclasses.asdict(r) for r in results]}, indent=1),
        encoding="utf-8")
    print(f"plot: {png}; results: {args.out / 'results.json'}")
    return table


if __name__ == "__main__":
    main()
