"""SFT, then RL, in one run: the SFT stage of ``--sft.warm-start``.

An RL run with ``sft.warm_start`` and no ``model.init_checkpoint`` first trains the SFT
warm start (:mod:`algorithms.sft.trainer`, the run's ``sft.*`` settings) in a run folder of its
own inside the RL run's, then starts RL from its last checkpoint exactly as
``--model.init-checkpoint`` does::

    runs/<run>/sft/            the SFT stage (config.json, metrics.jsonl, sft_data.jsonl,
                               checkpoints/, finished.json once it has ended)
    runs/<run>/...             the RL run, started from runs/<run>/sft

The stage does not evaluate (``run.eval_every`` 0 there): the RL run's
``run.eval_before_train`` evaluates the same starting model on the same held-out tasks as
its later evaluations. ``finished.json`` marks a stage that ended; a finished stage is
reused (``--resume`` of the RL run, or a retry after the RL run failed), an unfinished
one with a checkpoint is continued, one without is started again; ``--run.overwrite``
redoes it.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from algorithms.config import ConfigError, TrainConfig, replace
from algorithms.runs.checkpoint import latest_checkpoint
from algorithms.runs.distributed import SINGLE, Ranks

STAGE_DIR = "sft"
"""The SFT stage's folder inside the RL run's."""

FINISHED = "finished.json"
"""Written in the stage's folder when it has ended (its last checkpoint, its metrics)."""


def needs_stage(config: TrainConfig) -> bool:
    """Whether ``config`` asks for an SFT stage before its RL run
    (:attr:`~algorithms.config.TrainConfig.sft_stage_first`)."""
    return config.sft_stage_first


def stage_config(config: TrainConfig, run_dir: Path) -> TrainConfig:
    """The SFT stage's config: ``config`` with ``algo`` sft, its folder ``run_dir/sft``, no
    evaluation; continued when it holds a checkpoint, else started afresh (its partial
    files replaced)."""
    stage_dir = Path(run_dir) / STAGE_DIR
    resume = latest_checkpoint(stage_dir) is not None and not config.run.overwrite
    return replace(config, algo="sft",
                   run={"output_dir": str(run_dir), "run_name": STAGE_DIR, "eval_every": 0,
                        "eval_before_train": False, "resume": resume,
                        "overwrite": not resume})


def rl_config(config: TrainConfig, run_dir: Path) -> TrainConfig:
    """``config`` starting from the stage's checkpoint (``model.init_checkpoint``)."""
    return replace(config, model={"init_checkpoint": str(Path(run_dir) / STAGE_DIR)})


def run_stage(config: TrainConfig, run_dir: Path, *, ranks: Ranks = SINGLE,
              say: Callable[[str], None] = print, trainer_factory: Any = None
              ) -> TrainConfig:
    """Run (or reuse) the SFT stage of ``config`` for the RL run in ``run_dir``; return
    the RL run's config, which starts from it. ``config`` without a stage (see
    :func:`needs_stage`) comes back unchanged.

    Args:
        config: the RL run's resolved config.
        run_dir: the RL run's folder.
        ranks: the process ranks (default one process; the stage runs in one process).
        say: where the stage's one-line notes go.
        trainer_factory: builds the stage's trainer from its config (tests pass one
            with a preloaded model); default :class:`~algorithms.sft.trainer.SFTTrainer`.

    Raises:
        ConfigError: a stage asked for under torchrun.
        RunFolderError: the RL folder holds a run, and neither ``run.resume`` nor
            ``run.overwrite`` was given (checked before the stage trains).
    """
    if not needs_stage(config):
        return config
    from algorithms.runs.run_folder import RunFolderError, holds_run

    run_dir = Path(run_dir)
    stage_dir = run_dir / STAGE_DIR
    finished = stage_dir / FINISHED
    if config.run.overwrite and finished.exists():
        finished.unlink()
    if finished.exists():
        say(f"SFT stage: reusing the finished warm start in {stage_dir}")
        return rl_config(config, run_dir)
    if ranks is not None and getattr(ranks, "distributed", False):
        raise ConfigError(
            f"--sft.warm-start: the SFT stage runs in one process and {stage_dir} holds no "
            "finished stage; run the same command without torchrun first (with "
            "--run.iterations 0), or train it with --algo sft and pass --model.init-checkpoint")
    present = holds_run(run_dir)
    if present and not (config.run.resume or config.run.overwrite):
        raise RunFolderError(
            f"{run_dir} already holds a run ({', '.join(present)}); continue it with "
            "--resume, pick another folder with --run.run-name NAME, or replace it with "
            "--run.overwrite")
    stage = stage_config(config, run_dir)
    say(f"SFT stage: {'continuing' if stage.run.resume else 'training'} the warm start "
        f"in {stage_dir}, then {config.algo} from it")
    if trainer_factory is None:
        from algorithms.sft.trainer import SFTTrainer

        trainer = SFTTrainer(stage, ranks=ranks)
    else:
        trainer = trainer_factory(stage)
    metrics = trainer.run()
    checkpoint = latest_checkpoint(stage_dir)
    finished.write_text(json.dumps({"checkpoint": str(checkpoint), "metrics": metrics},
                                   indent=2), encoding="utf-8")
    del trainer
    gc.collect()
    from algorithms.runs.memory import release_freed_memory

    release_freed_memory()
    return rl_config(config, run_dir)
