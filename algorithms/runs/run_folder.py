"""The run folder: where a run writes, and when a folder may be (re)used.

A training run owns ``runs/<run_name>/`` (the layout is :mod:`algorithms.training.trainer`'s
docstring). A folder that already holds a run is never silently reused: a new run there is
refused (:class:`RunFolderError`) unless ``run.overwrite``; ``run.resume`` needs a
checkpoint there and the same settings outside ``run.*``. ``run.eval_only`` writes to a
folder of its own (:func:`eval_only_dir`). A setup that fails in a new run removes what it
wrote (:func:`discard_new_run`), so the same command can be tried again. One process at a
time uses a folder (:func:`lock_run_folder`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from algorithms.config import ConfigError, TrainConfig
from algorithms.runs import distributed
from algorithms.runs.checkpoint import (
    CheckpointError,
    checkpoint_meta,
    latest_checkpoint,
    resolve_checkpoint,
)
from algorithms.runs.distributed import Ranks

RUN_FILES = ("config.json", "metrics.jsonl", "tensorboard", "curves.png", "checkpoints",
             "records", "eval", "wandb")
"""What a run writes in its folder (``run.overwrite`` deletes these, nothing else)."""


class RunFolderError(ConfigError):
    """A run folder that cannot be used as asked (reuse without overwrite, nothing to
    resume, another process using it)."""


LOCK_FILE = ".lock"
"""The run folder's lock file (:func:`lock_run_folder`); it holds the holder's pid."""


class FolderLock:
    """A run folder held by this process (:func:`lock_run_folder`); :meth:`release`
    gives it up (so does the end of the process, however it ends)."""

    def __init__(self, handle: Any, run_dir: Path, created: bool) -> None:
        self._handle = handle
        self.run_dir = run_dir
        self.created = created  # the folder did not exist before the lock made it

    def release(self, *, remove_folder: bool = False) -> None:
        """Delete the lock file (still held, so no other process takes the name in
        between) and give the folder up; ``remove_folder``: also the folder, when the
        lock made it and nothing else is in it."""
        if self._handle is None:
            return
        with contextlib.suppress(OSError):
            (self.run_dir / LOCK_FILE).unlink()
        if remove_folder and self.created:
            with contextlib.suppress(OSError):  # not empty: keep it
                self.run_dir.rmdir()
        self._handle.close()  # closing the file drops its flock
        self._handle = None


def lock_run_folder(run_dir: Path) -> FolderLock | None:
    """Hold ``run_dir`` for this process, so that no second run writes into it.

    Two processes in one folder write over each other's metrics, checkpoints and curves
    without an error (a job started again while its first workers still run, say).
    The lock is an advisory ``flock`` on ``run_dir/.lock``, which the kernel drops when
    the process ends, so a killed run leaves no stale lock; a run that ends deletes the
    file. Where ``fcntl`` is missing (Windows) no lock is taken and ``None`` is returned.

    Raises:
        RunFolderError: another process holds the folder; the message names its pid.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    run_dir = Path(run_dir)
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    while True:
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held by another process
            handle.seek(0)
            holder = handle.read().strip() or "a process that wrote no pid yet"
            handle.close()
            raise RunFolderError(
                f"{run_dir} is in use by another run ({holder}): two runs in one folder "
                "would write over each other's metrics and checkpoints; wait for it to end "
                "or stop it, or pick another folder with --run.run-name NAME") from None
        try:  # the holder may have deleted the file between our open and our lock
            if os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    handle.flush()
    return FolderLock(handle, run_dir, created)


def take_run_folder(config: TrainConfig, run_dir: Path, ranks: Ranks
                    ) -> tuple[FolderLock | None, Path | None]:
    """Hold the folder (rank 0, :func:`lock_run_folder`), then check it
    (:func:`prepare_on_rank0`): ``(the lock, the checkpoint to load)``. A folder that is
    refused is given back as it was (a folder the lock made is removed again)."""
    lock = lock_run_folder(run_dir) if ranks.main else None
    try:
        return lock, prepare_on_rank0(config, run_dir, ranks)
    except BaseException:
        if lock is not None:
            lock.release(remove_folder=True)
        raise


def default_run_dir(config: TrainConfig) -> Path:
    """``output_dir/run_name``, the name defaulting to ``<preset>-<algo>-seed<seed>``;
    for ``eval_only`` without a ``run_name``, :func:`eval_only_dir`."""
    run = config.run
    if run.eval_only and run.run_name is None:
        return eval_only_dir(config)
    name = run.run_name or f"{config.preset}-{config.algo}-seed{run.seed}"
    return Path(run.output_dir) / name


def eval_only_dir(config: TrainConfig) -> Path:
    """Where ``--eval-only`` writes: ``<run>/eval/<checkpoint>-<split>`` for a checkpoint
    of ``<run>``, or ``output_dir/initial-<preset>/eval/initial-<split>`` for the
    untrained model. ``<split>`` is the evaluation env's ``split`` (``default`` when it
    sets none)."""
    split = str(config.env.eval_kwargs().get("split", "default"))
    if config.run.checkpoint is None:
        base = Path(config.run.output_dir) / f"initial-{config.preset}"
        return base / "eval" / f"initial-{split}"
    folder = resolve_checkpoint(Path(config.run.checkpoint))
    return folder.parent.parent / "eval" / f"{folder.name}-{split}"


def holds_run(run_dir: Path) -> list[str]:
    """The run files present in ``run_dir`` (empty: the folder holds no run)."""
    return [name for name in RUN_FILES if (Path(run_dir) / name).exists()]


def prepare_run_folder(config: TrainConfig, run_dir: Path, *,
                       delete: bool = True) -> Path | None:
    """Check ``run_dir`` against the run's mode, before anything is loaded; with
    ``run.overwrite`` (and ``delete``: not for ``train.py --dry-run``, which only checks),
    delete the run files a previous run left there.

    Returns:
        The checkpoint to load: the newest of the run (resume), the one to evaluate
        (eval-only), or ``None``.

    Raises:
        RunFolderError: a new run in a folder holding one (without ``run.overwrite``), or
            a resume with nothing to resume.
        ConfigError: a resume with settings that differ from the saved ones.
        CheckpointError: the checkpoint to evaluate is missing or refused.
    """
    run = config.run
    if run.eval_only:
        checkpoint = resolve_checkpoint(Path(run.checkpoint)) if run.checkpoint else None
    elif run.resume:
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None:
            raise RunFolderError(
                f"--resume: no checkpoint to resume in {run_dir} (no "
                "checkpoints/latest there); check --run.run-name / --run.output-dir, "
                "or start the run without --resume")
        saved = run_dir / "config.json"
        if saved.exists():
            stored = TrainConfig.from_dict(json.loads(saved.read_text(encoding="utf-8")))
            changed = config_changes(stored.to_dict(), config.to_dict())
            if changed:
                raise ConfigError(
                    f"--run.resume with a config that differs from {saved} "
                    f"({'; '.join(changed)}); resume with the same settings (only run.* "
                    "may change)")
    else:
        checkpoint = None
    present = holds_run(run_dir)
    if present and not run.resume:
        if not run.overwrite:
            hint = ("evaluate into another folder with --run.run-name NAME" if run.eval_only
                    else "continue it with --resume, or pick another folder with "
                    "--run.run-name NAME" if latest_checkpoint(run_dir) is not None
                    else "it has no checkpoint to resume (it stopped before its first "
                    "one); pick another folder with --run.run-name NAME")
            raise RunFolderError(
                f"{run_dir} already holds a run ({', '.join(present)}); {hint}, or "
                "replace it with --run.overwrite")
        for name in present if delete else ():
            path = run_dir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    return checkpoint


def finished_run(config: TrainConfig, run_dir: Path) -> tuple[str, dict[str, Any]] | None:
    """For ``--resume``: one line saying that the run in ``run_dir`` has nothing left to
    do, and its last metrics; ``None`` when it has, when it has no checkpoint (the resume
    then fails as :func:`prepare_run_folder` says), or when ``config`` does not resume.
    Only the newest checkpoint's ``meta.json`` is read: a run is finished when that
    checkpoint is after ``run.iterations`` iterations; an SFT run when it is after
    ``sft.max_steps`` optimizer steps, or without ``sft.max_steps`` at ``sft.epochs``
    passes over its data."""
    if not config.run.resume:
        return None
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return None
    meta = checkpoint_meta(checkpoint)
    done = int(meta["iteration"])
    metrics = {k: v for k, v in (meta.get("metrics") or {}).items() if v is not None}
    if config.algo == "sft":
        sft = config.sft
        if sft.max_steps is not None:
            finished, goal = done >= sft.max_steps, f"sft.max_steps {sft.max_steps}"
        else:
            finished = float(metrics.get("sft/epoch", 0.0)) >= sft.epochs - 1e-9
            goal = f"sft.epochs {sft.epochs}"
        what, more = "optimizer step", "--sft.max-steps or --sft.epochs"
    else:
        finished = done >= config.run.iterations
        goal = f"run.iterations {config.run.iterations}"
        what, more = "iteration", "--run.iterations"
    if not finished:
        return None
    return (f"{run_dir} is finished: its newest checkpoint, {checkpoint.name}, is after "
            f"{what} {done} ({goal}); nothing to resume (raise {more} to train on)",
            metrics)


def prepare_on_rank0(config: TrainConfig, run_dir: Path, ranks: Ranks) -> Path | None:
    """:func:`prepare_run_folder` decided by rank 0 alone (only it touches the folder);
    every rank of a torchrun job gets its answer, or raises its error."""
    if not ranks.distributed:
        return prepare_run_folder(config, run_dir)
    answer: tuple[str, str] | Path | None = None
    if ranks.main:
        try:
            answer = prepare_run_folder(config, run_dir)
        except (ConfigError, CheckpointError) as error:
            answer = (type(error).__name__, str(error))
    answer = distributed.broadcast_object(answer, ranks)
    if isinstance(answer, tuple):
        kind = CheckpointError if answer[0] == "CheckpointError" else ConfigError
        raise kind(answer[1])
    return answer


def discard_new_run(run_dir: Path) -> None:
    """Delete the run files a failed setup of a new run wrote, and the run folder when
    that leaves it empty. :func:`prepare_run_folder` left none there before (it refuses a
    folder holding a run, or empties it with ``run.overwrite``), so every file removed is
    this setup's."""
    for name in (*holds_run(run_dir), LOCK_FILE):  # its lock file: the caller's own
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: something of the user's is there
        run_dir.rmdir()


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``"section.field: saved X, now Y"`` for each setting outside ``run`` that differs."""
    changes = []
    for name in sorted(set(saved) | set(current)):
        if name == "run":
            continue
        old, new = saved.get(name), current.get(name)
        if isinstance(old, dict) and isinstance(new, dict):
            changes += [f"{name}.{key}: saved {old.get(key)!r}, now {new.get(key)!r}"
                        for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
        elif old != new:
            changes.append(f"{name}: saved {old!r}, now {new!r}")
    return changes

