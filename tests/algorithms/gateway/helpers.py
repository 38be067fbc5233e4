"""Engines for the gateway's tests: one that answers from a script, one that records
what a real engine was given and sampled."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from algorithms.engines import Response


class ScriptedEngine:
    """Answers each prompt with ``answer(prompt_ids)`` (ids), log-prob -0.5 per id;
    records every ``(prompt, response)`` and every call's batch size."""

    def __init__(self, answer: Callable[[tuple[int, ...]], Sequence[int]]):
        self.answer = answer
        self.top_p = 1.0
        self.given: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        self.batches: list[int] = []
        self.settings: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def generate(self, prompts, *, temperature, max_new_tokens, seed, stop=(), images=None):
        rows = []
        for prompt in prompts:
            ids = tuple(int(i) for i in self.answer(tuple(prompt)))[:max_new_tokens]
            rows.append(Response(ids, [-0.5] * len(ids)))
        with self.lock:
            self.given += [(tuple(p), tuple(r)) for p, r in zip(prompts, rows, strict=True)]
            self.batches.append(len(prompts))
            self.settings.append({"temperature": temperature, "top_p": self.top_p,
                                  "max_new_tokens": max_new_tokens, "seed": seed,
                                  "stop": tuple(stop)})
        return rows

    def sync_weights(self, model: Any) -> None:
        pass

    def release(self) -> None:
        pass


class RecordingEngine:
    """A real engine, with every ``(prompt, response, log-probs)`` it was given and
    sampled, and every call's batch size."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.given: list[tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]] = []
        self.batches: list[int] = []

    @property
    def top_p(self) -> float:
        return self.engine.top_p

    @top_p.setter
    def top_p(self, value: float) -> None:
        self.engine.top_p = value

    def generate(self, prompts, **kwargs):
        rows = self.engine.generate(prompts, **kwargs)
        self.given += [(tuple(p), tuple(r), tuple(r.log_probs)) for p, r in
                       zip(prompts, rows, strict=True)]
        self.batches.append(len(prompts))
        return rows

    def sync_weights(self, model: Any) -> None:
        self.engine.sync_weights(model)

    def release(self) -> None:
        self.engine.release()
