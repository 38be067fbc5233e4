"""Atomic checkpoints: weights, optimizers, RNG states and the position in the data order.

Layout under a run folder::

    checkpoints/iter_000010/state.pt     torch.save of the learner state + RNG states
    checkpoints/iter_000010/meta.json    iteration, config, metrics summary
    checkpoints/latest                   name of the newest complete checkpoint

A checkpoint is written into a temporary folder and renamed into place, and ``latest`` is
replaced atomically after that, so a crash at any moment leaves the previous checkpoint
usable. Task order and sampling seeds are functions of ``(seed, iteration)``, so the
iteration number *is* the data-order state; torch's global RNG states are saved and
restored as well for anything outside the seeded generators.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

LATEST = "latest"
STATE_FILE = "state.pt"
META_FILE = "meta.json"


def checkpoint_dir(run_dir: Path) -> Path:
    """The run's checkpoint folder."""
    return Path(run_dir) / "checkpoints"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def rng_states() -> dict[str, Any]:
    """torch's CPU and CUDA global RNG states."""
    states: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    """Inverse of :func:`rng_states` (CUDA states only where CUDA is available)."""
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def save_checkpoint(run_dir: Path, iteration: int, state: dict[str, Any],
                    meta: dict[str, Any], *, keep: int = 2) -> Path:
    """Write checkpoint ``iteration`` atomically; keep the newest ``keep`` ones.

    Args:
        run_dir: the run folder.
        iteration: number of completed iterations.
        state: the learner's trainable state (tensors, optimizer state dicts).
        meta: JSON-able data (config, metrics) stored beside it.
        keep: checkpoints to keep (>= 1).

    Returns:
        The checkpoint folder.
    """
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"iter_{iteration:06d}"
    final = root / name
    tmp = root / f".tmp-{name}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    payload = {"iteration": iteration, "learner": state, "rng": rng_states()}
    torch.save(payload, tmp / STATE_FILE)
    _write_atomic(tmp / META_FILE, json.dumps({"iteration": iteration, **meta}, indent=2,
                                              default=str))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _write_atomic(root / LATEST, name)
    existing = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("iter_"))
    for old in existing[: max(0, len(existing) - max(1, keep))]:
        shutil.rmtree(old)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of ``run_dir``, or ``None``."""
    root = checkpoint_dir(run_dir)
    pointer = root / LATEST
    if not pointer.exists():
        return None
    path = root / pointer.read_text(encoding="utf-8").strip()
    return path if (path / STATE_FILE).exists() else None


def load_checkpoint(path: Path, *, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint folder (or a run folder: its latest checkpoint).

    Returns:
        ``{"iteration", "learner", "rng", "meta"}``.

    Raises:
        FileNotFoundError: no checkpoint there.
    """
    path = Path(path)
    if not (path / STATE_FILE).exists():
        latest = latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"no checkpoint at {path} (expected {STATE_FILE} or "
                                    f"checkpoints/{LATEST})")
        path = latest
    payload = torch.load(path / STATE_FILE, map_location=map_location, weights_only=False)
    meta_path = path / META_FILE
    payload["meta"] = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.exists() \
        else {}
    payload["path"] = str(path)
    return payload
