"""Per-iteration metrics: computing them from a step batch, logging them, plotting them.

Rollout metrics are per trajectory (success, return, length) or per step (invalid-action
rate); ``success/<task_type>`` splits success by the env's task type. The step-group size
distribution follows GiGPO's Fig. 3: the share of steps whose anchor-state group has size
1, 2-4, 5-9, 10-19 or >= 20.

Env errors: an episode that ended on an env error (the env raised, its worker died or
timed out) was cut by a fault, so its outcome is unknown -- neither a success nor an
agent failure. Success, return and episode length (overall and per task type) are over
the other episodes (NaN when there are none); the per-step rates cover every step in the
batch, those of crashed episodes included (they are real agent steps; the failed step
itself is never in a batch). The faults are counted apart: ``env_errors`` (episodes,
those whose reset failed included), ``env_error_steps`` (agent steps whose env call
failed) and ``env_error_rate`` (``env_errors`` over all the rollout's episodes).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from algorithms.agent.step_batch import StepBatch

if TYPE_CHECKING:
    from algorithms.config import TrainConfig

STEP_GROUP_BINS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 4), (5, 9), (10, 19),
                                                       (20, None))
"""Inclusive step-group size bins (upper ``None``: unbounded)."""


def _mean(values: np.ndarray) -> float:
    """The mean, NaN (no warning) for no values."""
    return float(np.mean(values)) if len(values) else float("nan")


def trajectory_table(batch: StepBatch) -> dict[str, np.ndarray]:
    """Per-trajectory arrays: ``traj_ids``, ``returns`` (env rewards), ``penalized_returns``,
    ``lengths`` (steps in the batch), ``success``, ``env_error`` (ended on an env error),
    ``task_types`` (object), ``format_errors`` and ``invalid_actions`` (steps with a badly
    formatted answer; steps that paid the invalid-action penalty)."""
    ids, first, counts = np.unique(batch.traj_ids, return_index=True, return_counts=True)
    position = np.searchsorted(ids, batch.traj_ids)
    returns = np.bincount(position, weights=batch.env_rewards, minlength=len(ids))
    penalized = np.bincount(position, weights=batch.rewards, minlength=len(ids))
    return {
        "traj_ids": ids,
        "returns": returns,
        "penalized_returns": penalized,
        "lengths": counts,
        "success": batch.success[first],
        "env_error": batch.env_error[first],
        "task_types": np.array([batch.log.task_types[i] for i in first], dtype=object),
        "format_errors": np.bincount(position, weights=~batch.format_ok,
                                     minlength=len(ids)).astype(np.int64),
        "invalid_actions": np.bincount(position, weights=batch.invalid,
                                       minlength=len(ids)).astype(np.int64),
    }


def rollout_metrics(batch: StepBatch, prefix: str = "rollout") -> dict[str, float]:
    """Success (overall and per task type), return, length, invalid-action rate, ...,
    env errors (see the module docstring for how crashed episodes count)."""
    table = trajectory_table(batch)
    ended = ~table["env_error"]  # episodes with an outcome
    # Crashed episodes without a step in the batch (failed reset or first step).
    stepless = batch.env_errors - int(table["env_error"].sum())
    episodes = len(table["traj_ids"]) + stepless
    metrics = {
        f"{prefix}/success": _mean(table["success"][ended]),
        f"{prefix}/return": _mean(table["returns"][ended]),
        f"{prefix}/penalized_return": _mean(table["penalized_returns"][ended]),
        f"{prefix}/episode_length": _mean(table["lengths"][ended]),
        f"{prefix}/invalid_action_rate": float(batch.invalid.mean()),
        f"{prefix}/format_error_rate": float((~batch.format_ok).mean()),
        f"{prefix}/env_invalid_rate": float((~batch.valid_action).mean()),
        f"{prefix}/prompt_cut_rate": float(batch.prompt_cut.mean()),
        # trajectories ended because their transcript outgrew the budget (transcript layout)
        f"{prefix}/transcript_cut_rate": (
            float(batch.budget_cut[batch.last_step].mean()) if batch.budget_cut is not None
            and len(batch) else 0.0),
        f"{prefix}/response_tokens": float(batch.response_mask.sum(1).mean()),
        f"{prefix}/prompt_tokens": float(batch.prompt_mask.sum(1).mean()),
        f"{prefix}/trajectories": float(len(table["traj_ids"])),
        f"{prefix}/steps": float(len(batch)),
        f"{prefix}/env_errors": float(batch.env_errors),
        f"{prefix}/env_error_steps": float(batch.env_error_steps),
        f"{prefix}/env_error_rate": batch.env_errors / episodes if episodes else 0.0,
        f"{prefix}/prompt_overflows": float(batch.prompt_overflows),
    }
    metrics.update(tool_call_metrics(batch, prefix))
    by_type: dict[str, list[bool]] = defaultdict(list)
    for task_type, success in zip(table["task_types"][ended], table["success"][ended],
                                  strict=True):
        by_type[str(task_type) or "all"].append(bool(success))
    for task_type, values in sorted(by_type.items()):
        metrics[f"{prefix}/success/{task_type}"] = float(np.mean(values))
    return metrics


def tool_call_metrics(batch: StepBatch, prefix: str = "rollout") -> dict[str, float]:
    """The ``tool-call`` format's counts (none for a batch of the tag format): call
    attempts by status (``tool_calls/<status>``, every status of
    :data:`~algorithms.agent.tool_calls.CALL_STATUSES`), and the chat bridge's turns
    (``bridge_extended``, ``bridge_kept``, ``bridge_ended``; zeros in the window layout,
    which renders each prompt afresh)."""
    statuses = [status for row in batch.log.call_statuses if row for status in row.split(",")]
    if not statuses:
        return {}
    from algorithms.agent.tool_calls import CALL_STATUSES

    counts = dict.fromkeys(CALL_STATUSES, 0)
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    metrics = {f"{prefix}/tool_calls/{status}": float(count) for status, count in counts.items()}
    metrics.update({f"{prefix}/{name}": float(getattr(batch, name)) for name in
                    ("bridge_extended", "bridge_kept", "bridge_ended")})
    return metrics


def step_group_metrics(step_group_ids: np.ndarray) -> dict[str, float]:
    """Distribution of GiGPO step-group sizes, weighted by steps (GiGPO Fig. 3)."""
    ids = np.asarray(step_group_ids)
    if ids.size == 0:
        return {}
    sizes = np.bincount(ids)
    per_step = sizes[ids]
    metrics = {"advantage/step_group_size_mean": float(per_step.mean()),
               "advantage/step_groups": float((sizes > 0).sum())}
    for low, high in STEP_GROUP_BINS:
        inside = per_step >= low if high is None else (per_step >= low) & (per_step <= high)
        label = f"{low}+" if high is None else (f"{low}" if low == high else f"{low}-{high}")
        metrics[f"advantage/step_group_share/{label}"] = float(inside.mean())
    return metrics


def gigpo_term_metrics(episode: np.ndarray, step: np.ndarray, step_group_ids: np.ndarray,
                       tol: float = 1e-8) -> dict[str, float]:
    """What GiGPO's step groups did in one batch: the share of steps that shared their
    state with other steps of their group (a step group of 2 or more: only those can get a
    nonzero step advantage), the share whose step term is nonzero (their step group's
    discounted returns differ: a shared state alone carries no signal), the share with a
    nonzero step term and a zero episode term (steps that only GiGPO gives a gradient:
    GRPO's would be zero there), the correlation of the two terms over the batch (near 1:
    the step term mostly repeats the episode term's ranking), and the mean absolute
    episode and step advantages.

    Args:
        episode: (N,) the episode term A_E of each step.
        step: (N,) the step term A_S (before the weight omega).
        step_group_ids: (N,) dense step-group ids.
        tol: below this magnitude a term counts as zero.

    Returns:
        ``advantage/shared_state_share``, ``advantage/step_nonzero_share``,
        ``advantage/step_only_share``, ``advantage/step_episode_corr`` (Pearson; absent
        when either term is constant), ``advantage/episode_abs_mean`` and
        ``advantage/step_abs_mean`` (empty for an empty batch).
    """
    ids = np.asarray(step_group_ids)
    if ids.size == 0:
        return {}
    sizes = np.bincount(ids)
    episode, step = np.asarray(episode, np.float64), np.asarray(step, np.float64)
    episode_abs, step_abs = np.abs(episode), np.abs(step)
    step_nonzero = step_abs >= tol
    metrics = {"advantage/shared_state_share": float((sizes[ids] >= 2).mean()),
               "advantage/step_nonzero_share": float(step_nonzero.mean()),
               "advantage/step_only_share": float((step_nonzero & (episode_abs < tol)).mean()),
               "advantage/episode_abs_mean": float(episode_abs.mean()),
               "advantage/step_abs_mean": float(step_abs.mean())}
    if episode.std() > tol and step.std() > tol:
        metrics["advantage/step_episode_corr"] = float(np.corrcoef(episode, step)[0, 1])
    return metrics


def advantage_metrics(advantages: np.ndarray, tol: float = 1e-8) -> dict[str, float]:
    """Mean, std and the share of steps with a (numerically) zero advantage."""
    values = np.asarray(advantages, dtype=np.float64)
    return {
        "advantage/mean": float(values.mean()),
        "advantage/std": float(values.std()),
        "advantage/zero_share": float((np.abs(values) < tol).mean()),
    }


class MetricsLogger:
    """Writes metric dicts to JSONL, TensorBoard and (when asked and installed) W&B.

    Args:
        run_dir: the run folder (``metrics.jsonl`` and ``tensorboard/`` go there).
        tensorboard: write TensorBoard event files.
        wandb: log to Weights & Biases.
        wandb_project: W&B project name.
        config: the resolved config (W&B run config).
        truncate_after: on resume, drop JSONL records of iterations after this one.
    """

    def __init__(self, run_dir: Path, *, tensorboard: bool = True, wandb: bool = False,
                 wandb_project: str = "agentgym", config: dict[str, Any] | None = None,
                 truncate_after: int | None = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if truncate_after is not None and self.path.exists():
            kept = [line for line in self.path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and json.loads(line).get("iteration", 0) <= truncate_after]
            self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        self._writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(Path(run_dir) / "tensorboard"))
        self._wandb = None
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError as error:
                raise ModuleNotFoundError("--run.wandb needs the wandb package (pip "
                                          "install wandb)", name="wandb") from error
            self._wandb = wandb_module.init(project=wandb_project, config=config,
                                            dir=str(run_dir), resume="allow")

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        """Append one record for ``iteration``."""
        clean = {k: float(v) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and math.isfinite(float(v))}
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"iteration": iteration, **clean}) + "\n")
        if self._writer is not None:
            for key, value in clean.items():
                self._writer.add_scalar(key, value, iteration)
            self._writer.flush()
        if self._wandb is not None:
            self._wandb.log(clean, step=iteration)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._wandb is not None:
            self._wandb.finish()


def run_logger(run_dir: Path, config: TrainConfig, start_iteration: int) -> MetricsLogger:
    """The :class:`MetricsLogger` of a run in ``run_dir`` as ``config.run`` asks; a resumed
    run drops the records after ``start_iteration`` (iterations it will run again)."""
    run = config.run
    return MetricsLogger(run_dir, tensorboard=run.tensorboard, wandb=run.wandb,
                         wandb_project=run.wandb_project, config=config.to_dict(),
                         truncate_after=start_iteration if run.resume else None)


def iteration_metrics(rollout: StepBatch, sampling: dict[str, float], trained_rows: int,
                      signals: Any, stats: dict[str, float], lr: float | None,
                      timings: dict[str, float]) -> dict[str, float]:
    """The metrics of one training iteration: the rollout's, the advantages' (and GiGPO's
    step groups and terms when ``signals`` has them), the update's statistics
    (``update/*``, with ``update/lr`` when an update ran), the phase times (``time/*``)
    and the tokens per second of the rollout and of the update.

    Args:
        rollout: the whole rollout (every rollout with dynamic sampling).
        sampling: dynamic sampling's counts (empty without it).
        trained_rows: rows the update trained on (``update/steps``).
        signals: the :class:`~algorithms.training.learner.Advantages` of the update, or ``None``
            when the update was skipped.
        stats: the update's statistics (empty when skipped).
        lr: the policy learning rate of the update.
        timings: seconds per phase, ``time/<phase>``.
    """
    metrics = rollout_metrics(rollout)
    metrics.update(sampling)
    metrics["update/steps"] = float(trained_rows)
    if signals is not None:
        metrics.update(advantage_metrics(signals.advantages))
        if signals.step_group_ids is not None:
            metrics.update(step_group_metrics(signals.step_group_ids))
            metrics.update(gigpo_term_metrics(signals.episode, signals.step,
                                              signals.step_group_ids))
    metrics.update({f"update/{k}": v for k, v in stats.items()})
    if stats:
        metrics["update/lr"] = lr
    metrics.update(timings)
    generated = float(rollout.response_mask.sum())
    metrics["throughput/rollout_tokens_per_s"] = generated / max(timings["time/rollout"], 1e-9)
    metrics["throughput/update_tokens_per_s"] = stats.get("update_tokens", 0.0) / max(
        timings["time/update"], 1e-9)
    return metrics


def read_metrics(path: Path) -> list[dict[str, float]]:
    """The records of a ``metrics.jsonl``."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


CURVE_PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("success", ("success",)),
    ("return", ("return",)),
    ("error rates", ("format_error_rate", "invalid_action_rate")),
    ("episode length", ("episode_length",)),
)
"""The panels of ``curves.png``: (title, metric names without the ``rollout/`` or
``eval/`` prefix)."""

def plot_curves(metrics_path: Path, png_path: Path) -> Path:
    """Plot success, return, format-error and invalid-action rates and episode length
    against iteration (training rollouts and, if any, evaluations), integer ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    records = read_metrics(metrics_path)
    figure, axes = plt.subplots(1, len(CURVE_PANELS), figsize=(4 * len(CURVE_PANELS), 3.6))
    for axis, (title, names) in zip(axes, CURVE_PANELS, strict=True):
        for name in names:
            for prefix, style in (("rollout", "-o"), ("eval", "--s")):
                points = [(r["iteration"], r[f"{prefix}/{name}"]) for r in records
                          if f"{prefix}/{name}" in r]
                if points:
                    x, y = zip(*points, strict=True)
                    axis.plot(x, y, style, label=f"{prefix} {name.replace('_', ' ')}",
                              markersize=4)
        axis.set_title(title)
        axis.set_xlabel("iteration")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7)
    for axis in (axes[0], axes[2]):
        axis.set_ylim(-0.05, 1.05)
    figure.suptitle(Path(metrics_path).parent.name)
    figure.tight_layout()
    png_path = Path(png_path)
    figure.savefig(png_path, dpi=100)
    plt.close(figure)
    return png_path
