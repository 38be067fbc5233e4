"""Rollout records: what the agent saw and did, step by step, for people and the viewer.

Each training iteration and each evaluation writes the trajectories of its first groups
(at most ``run.record_trajectories`` trajectories, whole groups first) to one
gzip-compressed JSON-lines file, written atomically::

    records/train/iter_000003.jsonl.gz    the rollout of iteration 3
    records/eval/iter_000010.jsonl.gz     the evaluation after iteration 10

The first line is a header, every further line one trajectory (the format
``agentgym.viewer`` reads; :data:`FORMAT` is its version)::

    {"kind": "header", "format": 1, "split": "train", "iteration": 3, "algo": "gigpo",
     "trajectories": 4, "groups": 2, "rollout_trajectories": 16}
    {"kind": "trajectory", "iteration": 3, "split": "train", "group": 0, "traj_id": 1,
     "task_id": "...", "task_type": "...", "task": "...", "trained": true,
     "outcome": {"success": false, "truncated": true, "env_error": false,
                 "return": 0.0, "penalized_return": -0.2, "length": 3},
     "steps": [{"step": 0, "observation": "...", "prompt": "...", "response": "...",
                "action": "...", "format_ok": true, "valid_action": false,
                "env_reward": 0.0, "reward": -0.1, "anchor": null, "prompt_cut": false,
                "advantage": 0.41, "episode_advantage": 0.3, "step_advantage": 0.11,
                "step_group": 5, "step_group_size": 2,
                "step_group_members": [[0, 0], [1, 0]]}, ...],
     "final_observation": "..."}

``final_observation`` is the env's reply to the last step's action (its observation after
it: "Game over: ...", "Invalid move", a turn-limit message), which no step shows as its
``observation``; ``null`` for batches built without the env's replies. The reply to any
earlier step is the next step's ``observation``.

``prompt`` is the prompt as the model saw it (chat template included, special tokens
kept); gzip shares its repeated instructions across steps, so no prefix table is needed.

Images (a visual env): a step whose prompt showed images has ``"images"``, a list of PNG
file names relative to its split's folder, the images as the env drew them, written
before the record file beside it::

    records/train/iter_000003/t1_s0_0.png    trajectory 1, step 0, image 0
    {"step": 0, ..., "images": ["iter_000003/t1_s0_0.png"]}

Steps without images have no ``images`` key (text envs' records are unchanged).

A loop of your own (``train.py --agent``): each step is one model call, and has ``"call"``
(:func:`algorithms.gateway.episodes.call_log`): the messages the loop sent since the model
last spoke, the response (content and parsed tool calls), the finish reason, the tool-call
parser's status, the anchor and whether the loop gave it, whether the call joined the one
before it (its prompt extended that call's prompt and completion) or broke, and its
seconds::

    {"step": 1, ..., "call": {"messages": [{"role": "tool", "content": "..."}],
     "response": {"role": "assistant", "content": null, "tool_calls": [...]},
     "finish_reason": "tool_calls", "tool_status": "ok", "anchor": "3f2a...",
     "anchor_from": "default", "joined": true, "bridge": "extended", "elapsed_s": 0.41}}

Tool calls (``prompt.action_format tool-call``): each step has ``"tool_call"``, the
statuses of its call attempts (:mod:`algorithms.agent.tool_calls`) and the tool message
that answered it::

    {"step": 0, ..., "tool_call": {"statuses": ["ok"], "result": "You are in the hall..."}}

``anchor`` is ``null`` when it equals the observation (GiGPO's default anchor), else its
text; bytes in it (a visual env's image anchor) are written as their length and the start
of their SHA-256, ``<27648 bytes sha256:3f2a9c0e1b7d>``. Advantages and step groups are those of the update; they are ``null`` on
trajectories the update left out (``trained`` false: GiGPO and GRPO drop episodes that
ended on an env error), on iterations whose update was skipped, and in evaluation
records. ``episode_advantage`` / ``step_advantage`` are GiGPO's two terms (GRPO: the
episode term only; PPO: neither, ``advantage`` is GAE's).
"""

from __future__ import annotations

import gzip
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.images import png_bytes
from algorithms.agent.step_batch import StepBatch
from algorithms.runs.atomic import write_atomic

FORMAT = 1
"""Version of the record format above."""


def records_path(run_dir: Path, split: str, iteration: int) -> Path:
    """``run_dir/records/<split>/iter_XXXXXX.jsonl.gz``."""
    return Path(run_dir) / "records" / split / f"iter_{iteration:06d}.jsonl.gz"


def recorded_trajectories(batch: StepBatch, group_ids: np.ndarray, limit: int) -> list[int]:
    """Trajectory ids to record: whole groups in order while they fit in ``limit``, or
    the first ``limit`` trajectories of the first group when one group is larger.

    Args:
        batch: the rollout.
        group_ids: (N,) group of each row (``batch.group_ids``).
        limit: most trajectories to record (0: none).
    """
    if limit <= 0 or len(batch) == 0:
        return []
    by_group: dict[int, list[int]] = defaultdict(list)
    for traj, group in zip(batch.traj_ids[batch.last_step], group_ids[batch.last_step],
                           strict=True):
        by_group[int(group)].append(int(traj))
    chosen: list[int] = []
    for group in sorted(by_group):
        members = sorted(by_group[group])
        if len(chosen) + len(members) > limit:
            break
        chosen += members
    if not chosen:
        chosen = sorted(by_group[min(by_group)])[:limit]
    return chosen


def anchor_text(anchor: Any) -> str:
    """``str(anchor)``, with every ``bytes`` in it (alone or inside a tuple) written as
    ``<N bytes sha256:XXXXXXXXXXXX>`` (an image's bytes would be tens of kilobytes)."""
    import hashlib

    def short(part: Any) -> Any:
        if isinstance(part, bytes):
            return _Short(f"<{len(part)} bytes sha256:{hashlib.sha256(part).hexdigest()[:12]}>")
        if isinstance(part, tuple):
            return tuple(short(item) for item in part)
        return part

    return str(short(anchor))


class _Short(str):
    """A string whose ``repr`` is itself (inside a tuple's ``str``)."""

    def __repr__(self) -> str:
        return str(self)


def _float_or_none(values: np.ndarray | None, row: int | None) -> float | None:
    if values is None or row is None:
        return None
    return float(values[row])


def trajectory_records(batch: StepBatch, tokenizer: Any, *, iteration: int, split: str,
                       limit: int, trained: StepBatch | None = None,
                       signals: Any = None) -> list[dict[str, Any]]:
    """The records of the first groups of ``batch`` (format in the module docstring).

    Args:
        batch: the whole rollout (every step).
        tokenizer: decodes the prompts.
        iteration: the iteration number written in the records.
        split: ``"train"`` or ``"eval"``.
        limit: most trajectories to record.
        trained: the batch the update used (rows of ``batch``, possibly fewer).
        signals: the update's :class:`~algorithms.training.learner.Advantages`, over ``trained``.

    Returns:
        One dict per recorded trajectory, in trajectory order.
    """
    chosen = recorded_trajectories(batch, batch.group_ids, limit)
    trained_row: dict[tuple[int, int], int] = {}
    members: dict[int, list[list[int]]] = defaultdict(list)
    group_ids = None
    if trained is not None and signals is not None:
        trained_row = {(int(t), int(s)): i for i, (t, s) in
                       enumerate(zip(trained.traj_ids, trained.step_index, strict=True))}
        group_ids = signals.step_group_ids
        if group_ids is not None:
            for i, group in enumerate(group_ids):
                members[int(group)].append([int(trained.traj_ids[i]),
                                            int(trained.step_index[i])])
    wanted = set(chosen)
    steps_of: dict[int, list[int]] = defaultdict(list)
    for row, traj in enumerate(batch.traj_ids):
        if int(traj) in wanted:
            steps_of[int(traj)].append(row)
    records = []
    for traj in chosen:
        rows = steps_of[traj]
        first = rows[0]
        steps = []
        for row in rows:
            key = (traj, int(batch.step_index[row]))
            t_row = trained_row.get(key)
            group = None if group_ids is None or t_row is None else int(group_ids[t_row])
            observation = batch.log.observations[row] if batch.log.observations else ""
            anchor = batch.anchors[row]
            prompt_tokens = batch.prompt_ids[row][batch.prompt_mask[row].astype(bool)]
            steps.append({
                "step": int(batch.step_index[row]),
                "observation": observation,
                "prompt": tokenizer.decode(prompt_tokens.tolist(), skip_special_tokens=False),
                "response": batch.log.response_texts[row],
                "action": batch.log.actions[row],
                "format_ok": bool(batch.format_ok[row]),
                "valid_action": bool(batch.valid_action[row]),
                "env_reward": float(batch.env_rewards[row]),
                "reward": float(batch.rewards[row]),
                "anchor": None if anchor == observation else anchor_text(anchor),
                "prompt_cut": bool(batch.prompt_cut[row]),
                "advantage": _float_or_none(None if signals is None else signals.advantages,
                                            t_row),
                "episode_advantage": _float_or_none(getattr(signals, "episode", None), t_row),
                "step_advantage": _float_or_none(getattr(signals, "step", None), t_row),
                "step_group": group,
                "step_group_size": None if group is None else len(members[group]),
                "step_group_members": None if group is None else members[group],
            })
            statuses = batch.log.call_statuses[row] if batch.log.call_statuses else ""
            if statuses:  # the tool-call format: the call's statuses and the tool's reply
                steps[-1]["tool_call"] = {
                    "statuses": statuses.split(","),
                    "result": batch.log.tool_results[row] if batch.log.tool_results else ""}
            if batch.log.calls:  # a loop of your own (--agent): the model call itself
                steps[-1]["call"] = batch.log.calls[row]
            if batch.images is not None and batch.images[row]:
                steps[-1]["images"] = list(batch.images[row])  # arrays: write_records
        records.append({
            "kind": "trajectory", "iteration": iteration, "split": split,
            "group": int(batch.group_ids[first]), "traj_id": traj,
            "task_id": batch.log.task_ids[first], "task_type": batch.log.task_types[first],
            "task": batch.log.tasks[first] if batch.log.tasks else "",
            "trained": bool(trained_row) and (traj, int(batch.step_index[first]))
            in trained_row,
            "outcome": {
                "success": bool(batch.success[first]),
                "truncated": bool(batch.truncated[first]),
                "env_error": bool(batch.env_error[first]),
                "return": float(batch.env_rewards[rows].sum()),
                "penalized_return": float(batch.rewards[rows].sum()),
                "length": len(rows),
            },
            "steps": steps,
            "final_observation": (batch.log.replies[rows[-1]] if batch.log.replies
                                  else None),
        })
    return records


def write_records(path: Path, records: list[dict[str, Any]], header: dict[str, Any]) -> Path:
    """Write ``header`` and ``records`` as gzip JSON lines to ``path``, atomically.

    A step's ``images`` given as (H, W, 3) uint8 arrays (:func:`trajectory_records`) are
    written first, as PNG files in the folder named like the record file without its
    suffixes, and the record names them (module docstring); ``records`` is not changed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [_with_image_files(record, path) for record in records]
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as archive:
        head = {"kind": "header", "format": FORMAT, **header,
                "trajectories": len(records),
                "groups": len({r["group"] for r in records})}
        archive.write((json.dumps(head) + "\n").encode("utf-8"))
        for record in records:
            archive.write((json.dumps(record) + "\n").encode("utf-8"))
    write_atomic(path, buffer.getvalue())
    return path


def _with_image_files(record: dict[str, Any], path: Path) -> dict[str, Any]:
    """``record`` with its steps' image arrays written beside ``path`` and named."""
    if not any(isinstance(image, np.ndarray) for step in record.get("steps", ())
               for image in step.get("images", ())):
        return record
    folder = path.name.split(".")[0]
    steps = []
    for step in record["steps"]:
        step = dict(step)
        names = []
        for number, image in enumerate(step.get("images", ())):
            if isinstance(image, np.ndarray):
                name = f"{folder}/t{record['traj_id']}_s{step['step']}_{number}.png"
                (path.parent / folder).mkdir(exist_ok=True)
                # written before the record that names them; not fsynced one by one
                (path.parent / name).write_bytes(png_bytes(image))
                image = name
            names.append(image)
        if "images" in step:
            step["images"] = names
        steps.append(step)
    return {**record, "steps": steps}


def write_run_records(run_dir: Path, config: Any, split: str, iteration: int,
                      records: list[dict[str, Any]], num_trajectories: int) -> None:
    """Write a run's ``records/<split>/iter_XXXXXX.jsonl.gz`` (nothing when ``records`` is
    empty), its header naming the run's algorithm and env."""
    if not records:
        return
    write_records(records_path(run_dir, split, iteration), records,
                  {"split": split, "iteration": iteration, "algo": config.algo,
                   "env_id": config.env.env_id, "rollout_trajectories": num_trajectories})
