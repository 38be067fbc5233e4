"""An iteration's phases after its rollout, each timed: scores -> advantages -> update
(at the iteration's learning rate) -> the engine's new weights.

:class:`~algorithms.training.trainer.Trainer` runs them on the batch the learner trains on
(:meth:`~algorithms.training.learner.Learner.training_batch`); ``time/<phase>`` of each phase goes
into the iteration's metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from algorithms.agent.step_batch import StepBatch
from algorithms.config import TrainConfig
from algorithms.runs.console import progress_bar
from algorithms.runs.memory import release_freed_memory
from algorithms.runs.seeds import iteration_seed
from algorithms.training.estimation import Advantages
from algorithms.training.learner import Learner, warmup_factor

UPDATE_PHASES = ("log_probs", "advantages", "update", "weight_sync")
"""The timed phases of an iteration after its rollout (``time/<phase>``)."""


@contextmanager
def timed(phase: str, timings: dict[str, float]) -> Iterator[None]:
    """Time the block as ``timings["time/<phase>"]``; freed heap pages go back to the
    system before and after it (:mod:`algorithms.runs.memory`), so each phase starts from
    live memory."""
    start = time.perf_counter()
    release_freed_memory()
    yield
    release_freed_memory()
    timings[f"time/{phase}"] = time.perf_counter() - start


def learn(learner: Learner, batch: StepBatch, config: TrainConfig, *, iteration: int,
          timings: dict[str, float], sync_weights: Callable[[], None], bars: bool = False,
          before_step: Callable[[], None] | None = None
          ) -> tuple[StepBatch, Advantages, dict[str, Any], float]:
    """Score ``batch``, compute its advantages, update the policy and give the engine the
    new weights (``sync_weights``), each phase timed into ``timings``.

    Args:
        learner: the run's learner.
        batch: the (non-empty) batch to train on, unscored.
        config: the run's config (``run.seed``, the learning-rate warmup).
        iteration: the iteration (0-based): the update's seed and learning rate.
        timings: filled with ``time/<phase>`` of :data:`UPDATE_PHASES`.
        sync_weights: gives the engine the policy's weights.
        bars: show progress bars over the micro-batches.
        before_step: called before each optimizer step (:meth:`Learner.update`).

    Returns:
        The scored batch, its advantages, the update's statistics and its learning rate.
    """
    prefix = f"iter {iteration + 1}"
    with timed("log_probs", timings), progress_bar(
            bars, total=learner.score_passes(batch), leave=False,
            desc=f"{prefix} log-probs (micro-batches)") as bar:
        batch = learner.score(batch, progress=bar,
                              with_old_log_probs=not learner.single_pass(batch))
    with timed("advantages", timings):
        signals = learner.advantages(batch)
    with timed("update", timings):
        lr = config.learner.lr * warmup_factor(iteration, config.run.iterations,
                                               config.learner.lr_warmup_ratio)
        learner.set_policy_lr(lr)
        with progress_bar(bars, total=learner.micro_batches_per_update(batch), leave=False,
                          desc=f"{prefix} update (micro-batches)") as bar:
            stats = learner.update(batch, signals,
                                   seed=iteration_seed(config.run.seed, iteration, 1),
                                   progress=bar, before_step=before_step)
    with timed("weight_sync", timings):
        sync_weights()
    return batch, signals, stats, lr
