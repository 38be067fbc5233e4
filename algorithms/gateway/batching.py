"""One generation thread for every session: requests that wait together are sampled in
one engine call.

:class:`GenerationQueue` takes requests (prompt ids and :class:`~algorithms.gateway.protocol.Sampling`)
from any thread and answers each with a :class:`concurrent.futures.Future`. Its thread
takes the first waiting request and waits for more (up to ``max_batch``): with an
``expected`` count (the gateway's: its open sessions, each of which may be about to call)
until that many wait or ``max_wait_s`` has passed since the first, so that a batch does
not leave before the sessions whose answers came together have called again, and one
session alone never waits; without one, ``window_s``. Then it groups them by the settings an engine call takes as one: temperature, top-p, stop
strings and seed. Each group is one ``engine.generate`` call, at the group's largest
``max_tokens``; a row is then cut to its own request's ``max_tokens`` (the tokens kept
are those sampled: a shorter limit only drops the end). Requests without a seed share
one drawn from the queue's own generator per call. ``top_p`` is set on the engine for
the call (the HF and vLLM engines read ``engine.top_p``) and put back after.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from algorithms.engines import FailedGeneration
from algorithms.gateway.protocol import Sampling


class GenerationError(RuntimeError):
    """The engine could not produce a response (its own error, one line)."""


@dataclass(frozen=True)
class Generated:
    """One sampled response.

    Attributes:
        ids: the sampled ids (cut to the request's ``max_tokens``).
        logprobs: the engine's log-prob per id (``()`` when it reports none).
        batch_size: how many requests shared the engine call.
    """

    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    batch_size: int


@dataclass
class _Pending:
    prompt_ids: tuple[int, ...]
    sampling: Sampling
    future: Future = field(default_factory=Future)


class GenerationQueue:
    """The generation thread (module docstring).

    Args:
        engine: a :class:`~algorithms.engines.GenerationEngine`.
        window_s: how long to wait for more requests after the first (without
            ``expected``).
        max_wait_s: how long to wait, at most, for ``expected`` requests.
        expected: how many requests may come soon (``None``: unknown).
        max_batch: requests per engine call at most.
        seed: seeds the generator of the seeds of requests that give none.
    """

    def __init__(self, engine: Any, *, window_s: float = 0.01, max_wait_s: float = 0.25,
                 max_batch: int = 64, seed: int = 0,
                 expected: Callable[[], int] | None = None):
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1; got {max_batch}")
        if window_s < 0:
            raise ValueError(f"window_s must be at least 0; got {window_s}")
        self.engine = engine
        self.window_s = window_s
        self.max_wait_s = max_wait_s
        self.max_batch = max_batch
        self.expected = expected
        self._changed = threading.Condition()
        self._seeds = random.Random(seed)
        self._queue: queue.Queue[_Pending] = queue.Queue()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.engine_calls = 0
        self.requests = 0
        self.batch_sizes: list[int] = []

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="gateway-generation",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; requests still waiting fail."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        while True:
            try:
                pending = self._queue.get_nowait()
            except queue.Empty:
                return
            pending.future.set_exception(GenerationError("the gateway stopped"))

    def submit(self, prompt_ids: Sequence[int], sampling: Sampling) -> Future:
        """Queue one request; the future's result is a :class:`Generated`."""
        pending = _Pending(tuple(int(i) for i in prompt_ids), sampling)
        if self._stopping.is_set() or self._thread is None:
            pending.future.set_exception(GenerationError("the gateway is not running"))
        else:
            with self._changed:
                self._queue.put(pending)
                self._changed.notify_all()
        return pending.future

    def _take(self) -> list[_Pending]:
        try:
            first = self._queue.get(timeout=0.1)
        except queue.Empty:
            return []
        batch = [first]
        start = time.monotonic()
        with self._changed:
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                    continue
                except queue.Empty:
                    pass
                if self.expected is not None:
                    if len(batch) >= self.expected():
                        break
                    until = start + self.max_wait_s
                else:
                    until = start + self.window_s
                left = until - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(timeout=min(left, 0.05))
        return batch

    def _run(self) -> None:
        while not self._stopping.is_set():
            batch = self._take()
            groups: dict[tuple[Any, ...], list[_Pending]] = {}
            for pending in batch:
                s = pending.sampling
                groups.setdefault((s.temperature, s.top_p, s.stop, s.seed), []).append(pending)
            for group in groups.values():
                self._generate(group)

    def _generate(self, group: list[_Pending]) -> None:
        sampling = group[0].sampling
        seed = sampling.seed if sampling.seed is not None else self._seeds.randrange(2**31)
        engine = self.engine
        had_top_p = hasattr(engine, "top_p")
        old_top_p = getattr(engine, "top_p", None)
        try:
            if had_top_p:
                engine.top_p = sampling.top_p
            rows = engine.generate([p.prompt_ids for p in group],
                                   temperature=sampling.temperature,
                                   max_new_tokens=max(p.sampling.max_tokens for p in group),
                                   seed=seed, stop=sampling.stop)
        except Exception as error:  # noqa: BLE001 - every request of the call is told
            failure = GenerationError(f"the engine failed: {type(error).__name__}: {error}")
            for pending in group:
                pending.future.set_exception(failure)
            return
        finally:
            if had_top_p:
                engine.top_p = old_top_p
        self.engine_calls += 1
        self.requests += len(group)
        self.batch_sizes.append(len(group))
        if len(rows) != len(group):
            failure = GenerationError(f"the engine gave {len(rows)} responses for "
                                      f"{len(group)} prompts")
            for pending in group:
                pending.future.set_exception(failure)
            return
        for pending, row in zip(group, rows, strict=True):
            if isinstance(row, FailedGeneration):
                pending.future.set_exception(GenerationError(row.error))
                continue
            keep = pending.sampling.max_tokens
            logprobs = getattr(row, "log_probs", None)
            pending.future.set_result(Generated(
                tuple(int(i) for i in row[:keep]),
                () if logprobs is None else tuple(float(v) for v in logprobs[:keep]),
                len(group)))
