"""Evaluation on held-out tasks: each task played once, results per task type.

:func:`evaluate` plays ``env.eval_episodes`` tasks of the evaluation env (built with
``env.eval_kwargs()``; the first ones, or ones spread over its list with
``env.task_order``) at ``generation.eval_temperature``, in chunks of at most one
training batch, the chunks dealt to the ranks of a torchrun job in turn. Episodes that
ended on an env error are listed (``env_error``) and counted (``env_errors``) but left out
of success, return and length, as in :mod:`algorithms.agent.metrics`. Rank 0 writes
``eval/iter_XXXXXX.json`` and the evaluation records.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.agent.metrics import tool_call_metrics, trajectory_table
from algorithms.agent.records import trajectory_records, write_run_records
from algorithms.agent.rollout import NoStepsError, RolloutSettings, collect_rollout
from algorithms.agent.step_batch import StepBatch
from algorithms.agent.task_choice import choose_task_ids
from algorithms.config import TrainConfig
from algorithms.runs import distributed
from algorithms.runs.console import progress_bar
from algorithms.runs.distributed import Ranks
from algorithms.runs.seeds import iteration_seed


def held_out_task_ids(config: TrainConfig) -> list[str]:
    """The ``env.eval_episodes`` task ids an evaluation plays, in ``env.task_order``, read
    from a probe of the evaluation env (built with ``env.eval_kwargs()``, then closed)."""
    from agentgym.plain import make_text_env

    probe = make_text_env(config.env.env_id, **config.env.eval_kwargs())
    try:
        return choose_task_ids(probe.unwrapped.task_ids, config.env.eval_episodes,
                               config.env.task_order)
    finally:
        probe.close()


def evaluate(config: TrainConfig, engine: Any, tokenizer: Any, settings: RolloutSettings,
             make_vec_env: Callable[[dict[str, Any], int, int], Any], *, iteration: int,
             ranks: Ranks, run_dir: Path, bars: bool,
             say: Callable[[str], None]) -> dict[str, float]:
    """Play the held-out tasks once each and return the ``eval/*`` metrics.

    Args:
        config: the run's config (``env``, ``run.seed``, ``run.record_trajectories``).
        engine: the generation engine (released when done).
        tokenizer: the policy's tokenizer (for the records).
        settings: the rollout settings (group size 1, evaluation temperature).
        make_vec_env: ``(env kwargs, num_envs, group_size) -> vector env``.
        iteration: the iteration the metrics and files are numbered with.
        ranks: this process's place in a torchrun job.
        run_dir: the run folder (rank 0 writes there).
        bars: draw a progress bar.
        say: prints a message for the user.
    """
    task_ids = held_out_task_ids(config)
    if not task_ids:
        raise RuntimeError(f"the evaluation env {config.env.env_id} has no tasks")
    chunk = max(1, min(len(task_ids), config.env.num_groups * config.env.group_size))
    # chunks are dealt to the ranks in turn; each rank plays its own
    starts = list(range(0, len(task_ids), chunk))[ranks.rank::ranks.world_size]
    parts: list[tuple[int, list[dict[str, Any]], list[dict[str, Any]], dict[str, float]]] = []
    eval_env = make_vec_env(config.env.eval_kwargs(), chunk, 1) if starts else None
    try:
        with progress_bar(bars, total=len(task_ids), leave=False,
                          desc="evaluation (episodes)") as bar:
            for start in starts:
                part = task_ids[start: start + chunk]
                part = part + [part[-1]] * (chunk - len(part))
                keep = min(chunk, len(task_ids) - start)
                try:
                    batch = collect_rollout(eval_env, engine, tokenizer, settings,
                                            group_task_ids=part,
                                            seed=iteration_seed(config.run.seed,
                                                                iteration, 2 + start))
                except NoStepsError as error:  # every episode of the chunk crashed
                    say(f"evaluation: {error}")
                    batch = None
                chunk_batches = [(batch, part[:keep])]
                parts.append((start, eval_rows(chunk_batches), eval_records(
                    chunk_batches, tokenizer, iteration,
                    config.run.record_trajectories, offset=start),
                    {} if batch is None else tool_call_metrics(batch, "eval")))
                bar.update(keep)
    finally:
        if eval_env is not None:
            eval_env.close()
        engine.release()
    gathered = sorted((item for rank_parts in
                       distributed.all_gather_objects(parts, ranks)
                       for item in rank_parts), key=lambda item: item[0])
    results = eval_summary([row for _, rows, _, _ in gathered for row in rows])
    metrics = {"eval/success": _nan(results["success"]),
               "eval/return": _nan(results["return"]),
               "eval/episode_length": _nan(results["episode_length"]),
               "eval/format_error_rate": _nan(results["format_error_rate"]),
               "eval/invalid_action_rate": _nan(results["invalid_action_rate"]),
               "eval/env_errors": float(results["env_errors"])}
    for task_type, row in results["per_task_type"].items():
        metrics[f"eval/success/{task_type}"] = row["success"]
    for _, _, _, counts in gathered:  # the tool-call format's counts, summed over chunks
        for key, value in counts.items():
            metrics[key] = metrics.get(key, 0.0) + value
    if not ranks.main:
        return metrics
    records = [record for _, _, chunk_records, _ in gathered for record in chunk_records]
    write_run_records(run_dir, config, "eval", iteration,
                      records[: config.run.record_trajectories],
                      num_trajectories=len(task_ids))
    out = run_dir / "eval"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"iter_{iteration:06d}.json").write_text(json.dumps(results, indent=2),
                                                    encoding="utf-8")
    return metrics


def eval_records(batches: list[tuple[StepBatch | None, list[str]]], tokenizer: Any,
                 iteration: int, limit: int, offset: int = 0) -> list[dict[str, Any]]:
    """Records of the first ``limit`` evaluation episodes, numbered across chunks from
    ``offset`` (the first chunk's first episode)."""
    records: list[dict[str, Any]] = []
    for batch, tasks in batches:
        if batch is not None and len(records) < limit:
            # the chunk's first len(tasks) trajectories are its own (the rest repeat)
            part = trajectory_records(batch, tokenizer, iteration=iteration, split="eval",
                                      limit=min(limit - len(records), len(tasks)))
            for record in part:
                record["traj_id"] += offset
                record["group"] = record["traj_id"]
            records += part
        offset += len(tasks)
    return records



def _crashed_eval_row(task_id: str) -> dict[str, Any]:
    """The row of an evaluation episode that failed in its reset or first step."""
    return {"task_id": task_id, "task_type": "", "success": False, "return": 0.0,
            "length": 0, "format_errors": 0, "invalid_actions": 0, "env_error": True}


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _mean_or_none(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _step_rate(rows: list[dict[str, Any]], key: str) -> float | None:
    """The share of the steps of ``rows`` counted in ``key`` (as :func:`rollout_metrics`
    rates, over steps, not episodes)."""
    steps = sum(r["length"] for r in rows)
    return sum(r[key] for r in rows) / steps if steps else None


def eval_rows(batches: list[tuple[StepBatch | None, list[str]]]) -> list[dict[str, Any]]:
    """One row per evaluation episode of ``batches``, which pairs each chunk's batch
    (``None``: no env of the chunk made a step) with the task ids of its first
    trajectories (the others repeat a task to fill the chunk)."""
    rows: list[dict[str, Any]] = []
    for batch, tasks in batches:
        if batch is None:
            rows += [_crashed_eval_row(task_id) for task_id in tasks]
            continue
        table = trajectory_table(batch)
        found = {int(t): i for i, t in enumerate(table["traj_ids"])}
        first = {int(t): i for i, t in reversed(list(enumerate(batch.traj_ids)))}
        for traj, task_id in enumerate(tasks):
            index = found.get(traj)
            if index is None:  # failed in its reset or first step: no steps, no outcome
                rows.append(_crashed_eval_row(task_id))
                continue
            rows.append({"task_id": batch.log.task_ids[first[traj]],
                         "task_type": str(table["task_types"][index]) or "all",
                         "success": bool(table["success"][index]),
                         "return": float(table["returns"][index]),
                         "length": int(table["lengths"][index]),
                         "format_errors": int(table["format_errors"][index]),
                         "invalid_actions": int(table["invalid_actions"][index]),
                         "env_error": bool(table["env_error"][index])})
    return rows


def eval_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Success, return and length over the episodes that ended, overall and per task
    type, with the rows themselves (``tasks``)."""
    ended = [r for r in rows if not r["env_error"]]
    per_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in ended:
        per_type[row["task_type"]].append(row)
    return {
        "episodes": len(rows),
        "env_errors": len(rows) - len(ended),
        "success": _mean_or_none([r["success"] for r in ended]),
        "return": _mean_or_none([r["return"] for r in ended]),
        "episode_length": _mean_or_none([r["length"] for r in ended]),
        "format_error_rate": _step_rate(ended, "format_errors"),
        "invalid_action_rate": _step_rate(ended, "invalid_actions"),
        "per_task_type": {
            task_type: {"episodes": len(group),
                        "success": float(np.mean([r["success"] for r in group])),
                        "return": float(np.mean([r["return"] for r in group]))}
            for task_type, group in sorted(per_type.items())
        },
        "tasks": rows,
    }
