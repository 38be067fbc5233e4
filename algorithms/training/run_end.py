"""The end of a :class:`~algorithms.training.trainer.Trainer`'s run: the stop of a
SIGTERM (which checkpoint it leaves, :mod:`algorithms.runs.termination`) and the closing
of what the run opened (envs, logger, engine, an overlapped rollout, the run folder's
lock)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from algorithms.runs.run_folder import discard_new_run
from algorithms.runs.termination import StopNow, Terminated

if TYPE_CHECKING:
    from algorithms.training.trainer import Trainer


def terminated(trainer: Trainer, done: int, saved: Path | None, metrics: dict[str, float],
               how: str = "", state: dict[str, Any] | None = None) -> Terminated:
    """The stop of a SIGTERM with ``done`` iterations completed: a checkpoint of them
    (``saved`` when it is theirs already; ``state``: their state, copied earlier);
    none when no iteration was completed (a new run's folder is then removed, so that
    the same command starts it again)."""
    if saved is None and done > 0:
        saved = trainer.save(done, metrics, state)
    if saved is None and done == 0:
        if not trainer.config.run.resume and trainer.ranks.main:
            trainer.close()
            discard_new_run(trainer.run_dir)
        return Terminated(iteration=0, how=how, reason=(
            f"{how or 'it came before the first iteration'}, before any update: nothing "
            "to keep; the same command starts the run again"))
    return Terminated(checkpoint=saved, iteration=done, how=how)


def stopped(trainer: Trainer, stop: StopNow, saved: Path | None, previous: dict[str, float],
            last: dict[str, float]) -> Terminated:
    """The :class:`Terminated` of a SIGTERM that cut iteration ``stop.iteration``:
    checkpointed after it (``keep`` ``"after"``: its update finished, its metrics
    ``last`` are logged first), else before it (``previous``: the metrics of the
    iteration before)."""
    if stop.keep == "after":
        done = stop.iteration + 1
        if trainer.logger is not None:
            trainer.logger.log(done, last)
        return terminated(trainer, done, None, last, stop.how)
    state = trainer.term.fallback if stop.keep == "copy" else None
    return terminated(trainer, stop.iteration, saved, previous, stop.how, state)


def abandon_setup(trainer: Trainer) -> None:
    """After a setup that failed: close what it built, delete a new run's files
    (:func:`~algorithms.runs.run_folder.discard_new_run`; the folder still held, so no
    other process is in it), then give the folder up."""
    close_run(trainer, keep_folder=True)
    if not trainer.config.run.resume and trainer.ranks.main:
        discard_new_run(trainer.run_dir)
    _give_folder_up(trainer)


def close_run(trainer: Trainer, *, keep_folder: bool = False) -> None:
    """Close the envs, the logger and the engine (a vLLM engine shuts down here, while
    a torchrun job's process group still exists), then give the run folder up (unless
    ``keep_folder``). An overlapped rollout still running ends on the closed engine's
    error first."""
    if trainer.overlap is not None:  # kept, closed: its spans stay readable
        trainer.overlap.cancel()
        if trainer.engine is not None and hasattr(trainer.engine, "close"):
            trainer.engine.close()
            trainer.engine = None
        trainer.overlap.close()
    if hasattr(trainer.sampler, "close"):  # the --agent rollout's gateway
        trainer.sampler.close()
    if trainer.vec_env is not None:
        trainer.vec_env.close()
        trainer.vec_env = None
    if trainer.logger is not None:
        trainer.logger.close()
        trainer.logger = None
    if trainer.engine is not None and hasattr(trainer.engine, "close"):
        trainer.engine.close()
        trainer.engine = None
    if not keep_folder:
        _give_folder_up(trainer)


def _give_folder_up(trainer: Trainer) -> None:
    """Release the run folder's lock, where the trainer holds one."""
    if trainer.folder_lock is not None:
        trainer.folder_lock.release()
        trainer.folder_lock = None
