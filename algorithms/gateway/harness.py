"""The rollout of ``train.py --agent MODULE:FUNCTION``: your loop plays the iteration's
episodes through the gateway, and their calls become the batch the learner updates on.

:class:`HarnessSampler` stands where the in-process :class:`~algorithms.agent.sampling.Sampler`
stands (same ``sample(iteration) -> (rollout, batch, metrics)``). It starts the gateway
(:class:`~algorithms.gateway.server.Gateway`, on ``agent.host``, loopback by default) on
the run's engine and tokenizer once, and for each iteration:

1. takes ``env.num_groups`` tasks (:class:`~algorithms.gateway.tasks.TaskSource`);
2. plays ``env.group_size`` episodes per task, ``agent.concurrency`` at a time, each in a
   process of its own within ``agent.timeout`` seconds
   (:func:`~algorithms.gateway.agent_loop.play_episodes`), each with a session of its own,
   opened when its process starts and closed as soon as it ends (a call of a stopped loop
   then gets 404; the gateway batches the calls of the sessions open);
3. leaves out, and counts, every episode that failed (:data:`FAILURES`): the loop raised,
   timed out, returned no reward it could be trained on, made no model call, or its
   process died; ``off_policy`` (a call sampled at another temperature or top-p than the
   learner scores) guards the gateway's pinning: it samples every call at the run's
   ``generation.temperature`` and top-p 1, whatever the loop asks, and at most
   ``generation.max_new_tokens`` tokens (the gateway's ``max_tokens_cap``, so that a call
   cut there ends as ``length``; :class:`CappedEngine` holds the engine to it too; also
   the number a call that asks none gets);
4. turns the others into a :class:`~algorithms.agent.step_batch.StepBatch`
   (:func:`~algorithms.gateway.episodes.harness_batch`: one row per model call, the exact
   recorded ids).

Metrics (``metrics.jsonl``, and the console line's ``failed=`` and ``joins/breaks=``):
``agent/episodes``, ``agent/failed`` and ``agent/<kind>`` for each failure kind,
``agent/calls``, ``agent/joins`` and ``agent/breaks`` (calls whose prompt extended the
previous call's prompt and completion, and those that did not; over the kept episodes),
``agent/episode_seconds``, ``agent/transcript`` (1 when the batch took the transcript
layout: every kept episode's calls joined). An iteration in which every episode failed stops the run
(:class:`AllEpisodesFailedError`, one line, exit status 1).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.agent.rollout import NoStepsError
from algorithms.agent.step_batch import StepBatch
from algorithms.config import ConfigError, TrainConfig
from algorithms.gateway.agent_loop import (
    FAILURES as LOOP_FAILURES,
)
from algorithms.gateway.agent_loop import (
    EpisodeJob,
    EpisodeOutcome,
    load_agent,
    play_episodes,
)
from algorithms.gateway.episodes import (
    PlayedEpisode,
    batch_layout,
    harness_batch,
    result_problem,
)
from algorithms.gateway.records import CallRecord, SessionRecord
from algorithms.gateway.tasks import TaskSource

FAILURES: tuple[str, ...] = (*LOOP_FAILURES, "off_policy")
"""Every kind of failed episode (``agent/<kind>`` counts each)."""


class AllEpisodesFailedError(NoStepsError):
    """Every episode of an iteration failed: nothing to train on (one line; exit 1)."""


def off_policy_problem(call: CallRecord, temperature: float) -> str | None:
    """Why ``call`` was not sampled from the distribution the learner scores (the run's
    temperature, untruncated), or ``None``."""
    sampling = call.sampling or {}
    used = sampling.get("temperature")
    if used is not None and abs(float(used) - temperature) > 1e-6:
        return (f"a call was sampled at temperature {used:g}, but the learner scores at "
                f"--generation.temperature {temperature:g} (send no temperature, or that one)")
    top_p = sampling.get("top_p")
    if top_p is not None and float(top_p) < 1:
        return (f"a call was sampled with top_p {top_p:g}, a truncated distribution the "
                "learner does not score (send no top_p)")
    return None


class CappedEngine:
    """The run's engine as the gateway sees it: at most ``cap`` tokens per response,
    whatever a call asks (a loop's ``max_tokens`` is an upper bound: the run's
    ``generation.max_new_tokens`` is the one the recipe trains with), and open only
    during a rollout. :meth:`close` waits for a generation in flight and refuses later
    ones (a stopped loop's request still queued is answered with an error), so the
    engine never samples while the learner updates the weights it shares."""

    def __init__(self, engine: Any, cap: int):
        self.engine = engine
        self.cap = int(cap)
        self._state = threading.Condition()
        self._open = False
        self._running = 0

    @property
    def top_p(self) -> float:
        return self.engine.top_p

    @top_p.setter
    def top_p(self, value: float) -> None:
        self.engine.top_p = value

    def open(self) -> None:
        """Let generations run (a rollout starts)."""
        with self._state:
            self._open = True

    def close(self) -> None:
        """Refuse new generations and wait for the one in flight (a rollout ended)."""
        with self._state:
            self._open = False
            while self._running:
                self._state.wait()

    def generate(self, prompts: Any, *, max_new_tokens: int, **kwargs: Any) -> Any:
        with self._state:
            if not self._open:
                raise RuntimeError("the iteration's rollout is over (its episodes ended)")
            self._running += 1
        try:
            return self.engine.generate(prompts, max_new_tokens=min(int(max_new_tokens),
                                                                    self.cap), **kwargs)
        finally:
            with self._state:
                self._running -= 1
                self._state.notify_all()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


class HarnessSampler:
    """The ``--agent`` rollout (module docstring).

    Args:
        config: the run's config (``agent.function`` set).
        engine: the run's generation engine.
        tokenizer: the policy's tokenizer.
        say: prints one line for the user.
        gateway_factory: builds the gateway (tests give a fake); by default
            :class:`~algorithms.gateway.server.Gateway`.
    """

    def __init__(self, config: TrainConfig, engine: Any, tokenizer: Any, *,
                 say: Callable[[str], None], gateway_factory: Callable[..., Any] | None = None):
        if config.agent.function is None:
            raise ConfigError("the harness rollout needs --agent MODULE:FUNCTION")
        load_agent(config.agent.function)  # a name that does not import fails here, once
        self.config = config
        self.tokenizer = tokenizer
        self.say = say
        self.tasks = TaskSource(config)
        if gateway_factory is None:
            from algorithms.gateway.server import Gateway as gateway_factory
        generation = config.generation
        self.engine = CappedEngine(engine, generation.max_new_tokens)
        self.gateway = gateway_factory(
            self.engine, tokenizer,
            host=config.agent.host, port=config.agent.port,
            max_prompt_tokens=config.prompt.max_prompt_tokens,
            chat_template=(Path(config.prompt.tool_template).read_text(encoding="utf-8")
                           if config.prompt.tool_template else None),
            rewrite=config.prompt.bridge_rewrite,
            default_max_tokens=generation.max_new_tokens,
            max_tokens_cap=generation.max_new_tokens,
            temperature=generation.temperature, top_p=1.0, seed=config.run.seed)
        self.gateway.__enter__()
        say(f"agent: {config.agent.function} through the gateway at {self.gateway.base_url} "
            f"({self.tasks.describe()}; {config.agent.concurrency} episodes at once, "
            f"{config.agent.timeout:g} s each)")

    def sample(self, iteration: int) -> tuple[StepBatch, StepBatch, dict[str, float]]:
        """``(rollout, batch, metrics)`` of iteration ``iteration`` (the rollout is the
        batch: no dynamic sampling with ``--agent``).

        Raises:
            AllEpisodesFailedError: every episode failed.
        """
        config = self.config
        group_size = config.env.group_size
        tasks = self.tasks.tasks(iteration)
        jobs = [EpisodeJob(group * group_size + member, task)
                for group, task in enumerate(tasks) for member in range(group_size)]
        sessions: dict[int, SessionRecord] = {}

        def started(job: EpisodeJob) -> str:  # a session is open while its loop runs
            return self.gateway.open_session(job.task)

        def ended(job: EpisodeJob) -> None:
            sessions[job.index] = self.gateway.close_session(job.base_url)

        self.engine.open()
        try:
            outcomes = play_episodes(config.agent.function, jobs,
                                     concurrency=config.agent.concurrency,
                                     timeout=config.agent.timeout, on_start=started,
                                     on_end=ended)
        finally:
            self.engine.close()  # nothing samples while the learner updates
        kept, failures = self._kept(jobs, outcomes, sessions, group_size)
        metrics = self._metrics(outcomes, failures, kept)
        if failures:
            kinds = Counter(kind for kind, _ in failures.values())
            first = failures[min(failures)]
            line = (f"{len(failures)} of {len(jobs)} episodes "
                    f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}); "
                    f"the first: {first[1]}")
            if not kept:
                raise AllEpisodesFailedError(
                    f"iteration {iteration + 1}: every episode of --agent "
                    f"{config.agent.function} failed, {line}")
            self.say(f"iteration {iteration + 1}: left out of the update: {line}")
        batch = harness_batch(kept, int(self.tokenizer.pad_token_id))
        return batch, batch, metrics

    def _kept(self, jobs: list[EpisodeJob], outcomes: list[EpisodeOutcome],
              sessions: dict[int, SessionRecord], group_size: int
              ) -> tuple[list[PlayedEpisode], dict[int, tuple[str, str]]]:
        """The episodes to train on, and ``index -> (kind, message)`` of the others."""
        kept: list[PlayedEpisode] = []
        failures: dict[int, tuple[str, str]] = {}
        temperature = self.config.generation.temperature
        for job, outcome in zip(jobs, outcomes, strict=True):
            calls = sessions[job.index].calls if job.index in sessions else []
            if outcome.failure is not None:
                failures[job.index] = (outcome.failure, outcome.error)
                continue
            problem = ("no_calls", "returned without a model call") if not calls else None
            if problem is None and result_problem(outcome.result, calls):
                problem = ("bad_result", result_problem(outcome.result, calls))
            if problem is None:
                off = next((p for p in (off_policy_problem(c, temperature) for c in calls)
                            if p), None)
                problem = ("off_policy", off) if off else None
            if problem is not None:
                failures[job.index] = problem
                continue
            kept.append(PlayedEpisode(job.index, job.index // group_size, job.task,
                                      list(calls), outcome.result))
        return kept, failures

    @staticmethod
    def _metrics(outcomes: list[EpisodeOutcome], failures: dict[int, tuple[str, str]],
                 kept: list[PlayedEpisode]) -> dict[str, float]:
        kinds = Counter(kind for kind, _ in failures.values())
        calls = [call for episode in kept for call in episode.calls]
        joins = sum(1 for e in kept for call in list(e.calls)[1:] if call.joined)
        metrics = {"agent/episodes": float(len(outcomes)),
                   "agent/failed": float(len(failures)),
                   **{f"agent/{kind}": float(kinds.get(kind, 0)) for kind in FAILURES},
                   "agent/calls": float(len(calls)),
                   "agent/joins": float(joins),
                   "agent/breaks": float(sum(len(e.calls) - 1 for e in kept) - joins),
                   "agent/episode_seconds": float(np.mean([o.elapsed_s for o in outcomes])),
                   "agent/transcript": float(batch_layout(kept) == "transcript")}
        return metrics

    def close(self) -> None:
        """Stop the gateway and close the task env."""
        gateway, self.gateway = self.gateway, None
        if gateway is not None:
            gateway.__exit__(None, None, None)
        self.tasks.close()
