"""The rollout overlapped with the update: bounded staleness (``run.max_staleness`` K > 0).

With K = 0 an iteration is rollout -> scores -> advantages -> update -> weight sync, each
phase waiting for the last. With K > 0, :class:`OverlappedSampler` runs the rollouts of
the next iterations in a background thread while the current one trains::

    main thread   | update 0 | update 1 | update 2 | ...      (learner, version v -> v + 1)
    rollout thread| rollout 1| rollout 2| rollout 3| ...      (engine, weights of version v)

The policy *version* is the number of updates behind a set of weights: the weights an
iteration ``i`` starts with are version ``i``. Rules that keep it correct:

- **One version per batch.** The engine receives new weights only while no rollout is
  running (when the main thread finds the rollout thread idle), so every group, and every
  batch, is sampled by one version; each row records it (``StepBatch.policy_version``).
- **Bounded staleness.** New rollouts start only right after a weight sync to the current
  version ``i``, for iterations ``i + 1 .. i + K``: a batch is trained at most K updates
  after the version that sampled it.
- **Off-policy correction.** The samples of an older version are corrected by the
  decoupled objective of AReaL (Fu et al. 2025, eq. 5): PPO's clipped ratio is taken
  against the learner's weights before this update (the trust region stays around the
  current policy), and each token's loss is weighted by ``pi_old / pi_behaviour``, the
  behaviour log-probs the engine recorded when it sampled
  (:mod:`algorithms.objectives.behaviour_weights`). It needs no extra forward pass: the
  learner's old log-probs are the ones PPO computes anyway.
- **Collectives stay on the main thread.** The rollout thread only collects this rank's
  block (:meth:`~algorithms.agent.sampling.Sampler.collect`); gathering the ranks' blocks,
  retries and everything else run where the learner's collective calls run.

The engine must sample from its own copy of the weights: vLLM's engine process, or the
HF engine's worker process (:class:`~algorithms.engines.hf_worker.HFWorkerEngine`, which
the trainer builds when K > 0), so generation and the update use different cores.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from algorithms.agent.sampling import Sampler
from algorithms.agent.step_batch import StepBatch


@dataclass(frozen=True)
class Collected:
    """One iteration's rollout of this rank's groups, as the rollout thread made it.

    Attributes:
        iteration: the iteration it is for.
        collected: the batch, or the message of the ``NoStepsError`` it raised.
        version: the policy version that sampled it.
        started, finished: ``time.perf_counter()`` at its start and end.
        scoring: seconds of ``finished - started`` that ``score_block`` took.
    """

    iteration: int
    collected: StepBatch | str
    version: int
    started: float
    finished: float
    scoring: float = 0.0


class OverlappedSampler:
    """Samples iteration ``i + 1 .. i + K``'s rollouts while iteration ``i`` trains.

    Args:
        sampler: the run's sampler (envs, engine, tokenizer, this rank's groups).
        max_staleness: K >= 1, the most updates a batch may lag behind the learner.
        iterations: the run's iteration count (no rollout is started past the last).
        sync: gives the engine the learner's current weights (called on the main thread,
            only while no rollout runs).
        version: the version of the weights the engine holds now.
        score_block: applied to each collected batch in the rollout thread, with the
            engine still holding that batch's weights (``run.reference_in_worker``: the
            KL reference's log-probs scored in the HF engine's worker); ``None``: none.

    Attributes:
        spans: ``(iteration, start, end)`` of every rollout collected, in
            ``time.perf_counter()`` seconds.
    """

    def __init__(self, sampler: Sampler, *, max_staleness: int, iterations: int,
                 sync: Callable[[], None], version: int,
                 score_block: Callable[[StepBatch], StepBatch] | None = None):
        if max_staleness < 1:
            raise ValueError(f"max_staleness must be >= 1, got {max_staleness}")
        self.sampler = sampler
        self.max_staleness = max_staleness
        self.iterations = iterations
        self._sync = sync
        self._score_block = score_block
        self.engine_version = version
        self._executor = ThreadPoolExecutor(max_workers=1,
                                            thread_name_prefix="agentgym-rollout")
        self._pending: dict[int, Future[Collected]] = {}
        self.spans: list[tuple[int, float, float]] = []

    # ------------------------------------------------------------------ the iteration's batch
    def sample(self, iteration: int, version: int
               ) -> tuple[StepBatch, StepBatch, dict[str, float]]:
        """Iteration ``iteration``'s ``(rollout, batch, metrics)``, to be trained at
        ``version``; starts the next rollouts when the engine is free.

        ``metrics`` holds ``time/rollout`` (the rollout's own duration), ``time/rollout_wait``
        (how long the learner waited for it), ``time/weight_sync`` and the
        ``overlap/staleness_*`` figures.
        """
        waited = time.perf_counter()
        synced = 0.0
        future = self._pending.pop(iteration, None)
        if future is None:  # the first iteration (or after an evaluation drained it)
            self.wait_idle()
            synced += self._sync_to(version)
            collected = self._collect(iteration, version, bars=self.sampler.bars)
        else:
            collected = future.result()
        wait = time.perf_counter() - waited
        if not self._pending:  # the engine is free: newest weights, then the next rollouts
            synced += self._sync_to(version)
            last = min(iteration + self.max_staleness, self.iterations - 1)
            for ahead in range(iteration + 1, last + 1):
                self._pending[ahead] = self._executor.submit(self._collect, ahead, version,
                                                             bars=False)
        # a rollout tried again (no env made a step) waits for the engine, and samples
        # with the weights the engine has then
        retried: list[int] = []

        def before_retry() -> None:
            self.wait_idle()
            retried.append(self.engine_version)

        rollout, batch, metrics = self.sampler.sample(iteration,
                                                      collected=collected.collected,
                                                      before_retry=before_retry)
        used = retried[-1] if retried else collected.version
        if version - used > self.max_staleness:
            raise RuntimeError(f"iteration {iteration + 1}'s rollout is {version - used} "
                               f"updates old, more than max_staleness={self.max_staleness}")
        trained_is_rollout = batch is rollout  # no dynamic sampling (it is refused)
        rollout = rollout.with_version(used)
        batch = rollout if trained_is_rollout else batch.with_version(used)
        metrics = {**metrics, **staleness_metrics(batch.policy_version, version,
                                                  self.max_staleness),
                   "time/rollout": collected.finished - collected.started,
                   **({"time/worker_reference": collected.scoring}
                      if self._score_block is not None else {}),
                   "time/rollout_wait": wait, "time/weight_sync": synced}
        return rollout, batch, metrics

    def _collect(self, iteration: int, version: int, *, bars: bool) -> Collected:
        started = time.perf_counter()
        collected = self.sampler.collect(iteration, bars=bars)
        scoring = 0.0
        if self._score_block is not None and isinstance(collected, StepBatch):
            scored = time.perf_counter()
            collected = self._score_block(collected)
            scoring = time.perf_counter() - scored
        finished = time.perf_counter()
        self.spans.append((iteration, started, finished))
        return Collected(iteration, collected, version, started, finished, scoring)

    # ------------------------------------------------------------------ the engine
    def _sync_to(self, version: int) -> float:
        """Give the (idle) engine the learner's weights, unless it has them; return the
        seconds it took."""
        if self.engine_version == version:
            return 0.0
        started = time.perf_counter()
        self._sync()
        self.engine_version = version
        return time.perf_counter() - started

    def wait_idle(self) -> None:
        """Wait until no rollout runs (their results stay for their iterations)."""
        for future in list(self._pending.values()):
            future.exception()  # waits; an error comes out when its iteration asks

    def engine_ready(self, version: int) -> None:
        """Make the engine free and give it ``version``'s weights (before an evaluation);
        the rollouts already made stay for their iterations."""
        self.wait_idle()
        self._sync_to(version)

    def cancel(self) -> None:
        """Drop the rollouts not started yet (before the engine and envs close, so that
        the running one ends on their errors)."""
        for future in self._pending.values():
            future.cancel()

    def close(self) -> None:
        """Drop the rollouts not started and wait for the running one to end."""
        self.cancel()
        self._pending.clear()
        self._executor.shutdown(wait=True, cancel_futures=True)


def staleness_metrics(versions: np.ndarray, version: int, max_staleness: int
                      ) -> dict[str, float]:
    """``overlap/staleness_mean`` and ``overlap/staleness_k`` (share of the rows sampled
    ``k`` updates before ``version``, k = 0 .. ``max_staleness``): the staleness
    histogram of a batch trained at ``version``.

    Args:
        versions: (N,) the rows' policy versions.
        version: the learner's version the batch is trained at.
        max_staleness: the histogram's last bin.
    """
    staleness = version - np.asarray(versions, dtype=np.int64)
    n = max(1, staleness.size)
    metrics = {"overlap/staleness_mean": float(staleness.mean()) if staleness.size else 0.0}
    for k in range(max_staleness + 1):
        metrics[f"overlap/staleness_{k}"] = float(np.sum(staleness == k)) / n
    return metrics
