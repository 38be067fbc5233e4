"""GenerationQueue: one engine call per group of equal settings, each row cut to its own
request's max_tokens, failures told to every request of the call."""

from __future__ import annotations

import pytest

from algorithms.engines import FailedGeneration, Response
from algorithms.gateway.batching import GenerationError, GenerationQueue
from algorithms.gateway.protocol import Sampling


class Engine:
    top_p = 1.0

    def __init__(self, fail=None):
        self.calls = []
        self.fail = fail

    def generate(self, prompts, *, temperature, max_new_tokens, seed, stop=()):
        self.calls.append((len(prompts), temperature, self.top_p, max_new_tokens, seed,
                           tuple(stop)))
        if self.fail == "raise":
            raise RuntimeError("out of memory")
        if self.fail == "count":
            return []
        rows = [Response(tuple(range(100, 100 + max_new_tokens)), [-1.0] * max_new_tokens)
                for _ in prompts]
        if self.fail == "row":
            rows[0] = FailedGeneration("server said no")
        return rows


def sampling(**changes):
    base = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 4, "stop": (), "seed": 7}
    return Sampling(**{**base, **changes})


def test_waiting_requests_are_grouped_by_settings_and_cut_to_their_own_limit():
    engine = Engine()
    queue = GenerationQueue(engine, max_wait_s=5.0, expected=lambda: 4)
    queue.start()
    try:
        futures = [queue.submit([1], sampling(max_tokens=2)),
                   queue.submit([2], sampling(max_tokens=5)),
                   queue.submit([3], sampling(top_p=0.5)),
                   queue.submit([4], sampling(max_tokens=3))]
        results = [f.result(timeout=30) for f in futures]
    finally:
        queue.stop()
    assert sorted(engine.calls) == [(1, 1.0, 0.5, 4, 7, ()), (3, 1.0, 1.0, 5, 7, ())]
    assert [len(r.ids) for r in results] == [2, 5, 4, 3]
    assert results[0].ids == (100, 101) and results[0].logprobs == (-1.0, -1.0)
    assert [r.batch_size for r in results] == [3, 3, 1, 3]
    assert engine.top_p == 1.0 and queue.batch_sizes in ([3, 1], [1, 3])


def test_one_expected_request_does_not_wait():
    engine = Engine()
    queue = GenerationQueue(engine, max_wait_s=30.0, expected=lambda: 1)
    queue.start()
    try:
        assert queue.submit([1], sampling()).result(timeout=10).ids == (100, 101, 102, 103)
    finally:
        queue.stop()


@pytest.mark.parametrize("fail", ["raise", "count", "row"])
def test_an_engine_failure_fails_its_requests_and_the_thread_goes_on(fail):
    engine = Engine(fail)
    queue = GenerationQueue(engine, expected=lambda: 1)
    queue.start()
    try:
        with pytest.raises(GenerationError):
            queue.submit([1], sampling()).result(timeout=10)
        engine.fail = None
        assert queue.submit([1], sampling()).result(timeout=10).ids
    finally:
        queue.stop()


def test_a_stopped_queue_refuses():
    queue = GenerationQueue(Engine())
    with pytest.raises(GenerationError):
        queue.submit([1], sampling()).result(timeout=1)
