"""Reading a run folder for the viewer: records, metrics, evaluations, config.

Only files are read (the layout written by ``algorithms.training.trainer``; the record format is
documented in ``algorithms/agent/records.py``), so this module needs nothing beyond the standard
library -- no torch, nothing from ``algorithms``.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path
from typing import Any

RECORD_FORMAT = 1
"""The record format version this reader understands (``algorithms.agent.records.FORMAT``)."""

SPLITS = ("train", "eval")


class RunReadError(ValueError):
    """A folder that is not a run folder, or a record file this version cannot read."""


def check_run_dir(run_dir: Path) -> Path:
    """``run_dir`` if it looks like a run folder (config, metrics or records), else raise."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunReadError(f"{run_dir} is not a folder")
    if not any((run_dir / name).exists() for name in ("config.json", "metrics.jsonl",
                                                      "records")):
        raise RunReadError(f"{run_dir} holds no run (no config.json, metrics.jsonl or "
                           "records/); pass a folder under runs/")
    return run_dir


def read_records(path: Path) -> list[dict[str, Any]]:
    """The trajectories of one record file (its header checked and dropped)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    if not lines or lines[0].get("kind") != "header":
        raise RunReadError(f"{path} has no header line")
    if lines[0].get("format") != RECORD_FORMAT:
        raise RunReadError(f"{path} has record format {lines[0].get('format')}; this viewer "
                           f"reads format {RECORD_FORMAT}")
    return lines[1:]


def read_header(path: Path) -> dict[str, Any]:
    """The header line of one record file."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return json.loads(handle.readline())


def record_files(run_dir: Path) -> list[dict[str, Any]]:
    """One entry per record file: ``split``, ``iteration``, ``trajectories``, ``groups``."""
    files = []
    for split in SPLITS:
        for path in sorted((Path(run_dir) / "records" / split).glob("iter_*.jsonl.gz")):
            header = read_header(path)
            files.append({"split": split, "iteration": int(path.name[5:11]),
                          "trajectories": header.get("trajectories", 0),
                          "groups": header.get("groups", 0),
                          "rollout_trajectories": header.get("rollout_trajectories")})
    return files


def records_file(run_dir: Path, split: str, iteration: int) -> Path:
    """The record file of ``split`` and ``iteration`` (which must exist)."""
    if split not in SPLITS:
        raise RunReadError(f"split must be one of {SPLITS}, got {split!r}")
    path = Path(run_dir) / "records" / split / f"iter_{int(iteration):06d}.jsonl.gz"
    if not path.exists():
        raise RunReadError(f"no records for {split} iteration {iteration} in {run_dir}")
    return path


IMAGE_NAME = re.compile(r"iter_\d{6}/[A-Za-z0-9_.-]+\.png")
"""What a record's image name looks like (``iter_000003/t1_s0_0.png``): nothing else is
served."""


def image_file(run_dir: Path, split: str, name: str) -> Path:
    """The PNG file a record's step names in ``images`` (which must exist).

    Raises:
        RunReadError: an unknown split, a name of another shape (no other file of the
            run folder can be read this way), or no such file.
    """
    if split not in SPLITS:
        raise RunReadError(f"split must be one of {SPLITS}, got {split!r}")
    if not IMAGE_NAME.fullmatch(name) or ".." in name:
        raise RunReadError(f"not a record image name: {name!r}")
    path = Path(run_dir) / "records" / split / name
    if not path.is_file():
        raise RunReadError(f"no image {name} in {split} records of {run_dir}")
    return path


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """The records of ``metrics.jsonl`` (non-finite values dropped: JSON has none)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            rows.append({k: v for k, v in row.items()
                         if not isinstance(v, float) or math.isfinite(v)})
    return rows


def success_by_task_type(run_dir: Path) -> dict[str, Any]:
    """Success per task type of the run's newest evaluation (``eval/iter_*.json``), or of
    its last training iteration when it was never evaluated."""
    evaluations = sorted(Path(run_dir).glob("eval/iter_*.json"))
    if evaluations:
        results = json.loads(evaluations[-1].read_text(encoding="utf-8"))
        per_type = {k: v["success"] for k, v in results.get("per_task_type", {}).items()}
        return {"source": f"evaluation {evaluations[-1].stem}", "success": results.get(
            "success"), "per_task_type": per_type}
    metrics = [m for m in read_metrics(run_dir) if "rollout/success" in m]
    if not metrics:
        return {"source": None, "success": None, "per_task_type": {}}
    last = metrics[-1]
    prefix = "rollout/success/"
    return {"source": f"training iteration {last['iteration']}",
            "success": last["rollout/success"],
            "per_task_type": {k[len(prefix):]: v for k, v in last.items()
                              if k.startswith(prefix)}}


def run_summary(run_dir: Path) -> dict[str, Any]:
    """What the page's first request needs: name, settings, record files, comparison."""
    run_dir = Path(run_dir)
    config_path = run_dir / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() \
        else {}
    return {"name": run_dir.name, "path": str(run_dir),
            "algo": config.get("algo"), "preset": config.get("preset"),
            "env_id": config.get("env", {}).get("env_id"),
            "records": record_files(run_dir), "success": success_by_task_type(run_dir)}
