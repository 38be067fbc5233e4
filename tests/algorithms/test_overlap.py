"""Tests for algorithms.training.overlap: versions, staleness bounds, when the engine gets
new weights, with a fake sampler that logs what ran when."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from algorithms.agent.step_batch import StepBatch
from algorithms.training.overlap import OverlappedSampler, staleness_metrics
from tests.algorithms.fakes import cut_rollout
from tests.algorithms.tiny import make_tokenizer


class FakeSampler:
    """Collects a fixed batch after ``delay`` seconds, logging each collect and checking
    that the engine is never given weights while a collect runs."""

    def __init__(self, batch: StepBatch, delay: float = 0.0, fail: set[int] = frozenset()):
        self.batch = batch
        self.delay = delay
        self.fail = set(fail)
        self.bars = False
        self.events: list[tuple[str, int]] = []
        self.running = threading.Event()
        self.threads: set[str] = set()

    def collect(self, iteration: int, round_: int = 0, attempt: int = 0, *,
                bars: bool | None = None):
        self.running.set()
        self.events.append(("collect", iteration))
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        self.running.clear()
        if iteration in self.fail:
            raise RuntimeError(f"engine died in iteration {iteration}")
        return self.batch

    def sample(self, iteration, *, collected=None, before_retry=None):
        assert collected is not None
        return collected, collected, {}


@pytest.fixture(scope="module")
def batch() -> StepBatch:
    return cut_rollout(make_tokenizer())


def _pipeline(sampler: FakeSampler, *, max_staleness: int, iterations: int,
              version: int = 0) -> tuple[OverlappedSampler, list[int]]:
    synced: list[int] = []
    holder: list[OverlappedSampler] = []

    def sync() -> None:
        assert not sampler.running.is_set(), "weights changed under a running rollout"
        synced.append(holder[0].engine_version)

    pipeline = OverlappedSampler(sampler, max_staleness=max_staleness, iterations=iterations,
                                 sync=sync, version=version)
    holder.append(pipeline)
    return pipeline, synced


@pytest.mark.parametrize("max_staleness", [1, 2, 3])
def test_every_batch_is_within_the_staleness_bound_and_of_one_version(batch, max_staleness):
    sampler = FakeSampler(batch, delay=0.01)
    pipeline, _ = _pipeline(sampler, max_staleness=max_staleness, iterations=7)
    staleness = []
    try:
        for iteration in range(7):
            _, trained, metrics = pipeline.sample(iteration, iteration)
            versions = set(trained.policy_version.tolist())
            assert len(versions) == 1  # one version per batch, so per group
            staleness.append(iteration - versions.pop())
            assert sum(metrics[f"overlap/staleness_{k}"]
                       for k in range(max_staleness + 1)) == pytest.approx(1.0)
            time.sleep(0.02)  # "the update"
    finally:
        pipeline.close()
    assert max(staleness) == max_staleness and min(staleness) >= 0
    assert staleness[0] == 0  # the first iteration's rollout is made on the spot
    assert [i for kind, i in sampler.events] == list(range(7))  # each once, in order
    assert sampler.threads & {"MainThread"} and any(
        name.startswith("agentgym-rollout") for name in sampler.threads)


def test_k1_syncs_each_version_once_between_rollouts(batch):
    sampler = FakeSampler(batch, delay=0.01)
    pipeline, synced = _pipeline(sampler, max_staleness=1, iterations=4)
    try:
        versions = [int(pipeline.sample(i, i)[1].policy_version[0]) for i in range(4)]
    finally:
        pipeline.close()
    assert versions == [0, 0, 1, 2]  # batch i+1 sampled by version i while i trains
    assert synced == [0, 1, 2]  # the engine's version before each sync (to 1, 2, 3)
    assert pipeline.engine_version == 3


def test_no_rollout_starts_past_the_last_iteration(batch):
    sampler = FakeSampler(batch)
    pipeline, _ = _pipeline(sampler, max_staleness=2, iterations=3, version=1)
    try:
        for iteration in (1, 2):
            pipeline.sample(iteration, iteration)
    finally:
        pipeline.close()
    assert [i for _, i in sampler.events] == [1, 2]


def test_an_evaluation_waits_for_the_rollouts_and_gets_the_current_weights(batch):
    sampler = FakeSampler(batch, delay=0.05)
    pipeline, synced = _pipeline(sampler, max_staleness=2, iterations=6)
    try:
        pipeline.sample(0, 0)  # starts 1 and 2 with version 0
        pipeline.engine_ready(1)
        assert not sampler.running.is_set() and pipeline.engine_version == 1
        assert [i for _, i in sampler.events] == [0, 1, 2]
        _, trained, _ = pipeline.sample(1, 1)
        assert trained.policy_version[0] == 0  # made before the evaluation, kept
    finally:
        pipeline.close()


def test_a_failed_rollout_surfaces_in_its_iteration(batch):
    sampler = FakeSampler(batch, fail={2})
    pipeline, _ = _pipeline(sampler, max_staleness=1, iterations=4)
    try:
        pipeline.sample(0, 0)
        pipeline.sample(1, 1)
        with pytest.raises(RuntimeError, match="engine died in iteration 2"):
            pipeline.sample(2, 2)
    finally:
        pipeline.close()


def test_close_does_not_start_the_queued_rollouts(batch):
    sampler = FakeSampler(batch, delay=0.2)
    pipeline, _ = _pipeline(sampler, max_staleness=3, iterations=10)
    pipeline.sample(0, 0)  # queues 1, 2, 3; 1 starts
    time.sleep(0.05)
    pipeline.close()
    assert [i for _, i in sampler.events] == [0, 1]


def test_staleness_histogram():
    metrics = staleness_metrics(np.array([3, 3, 2, 1]), 3, 2)
    assert metrics == {"overlap/staleness_mean": 0.75, "overlap/staleness_0": 0.5,
                       "overlap/staleness_1": 0.25, "overlap/staleness_2": 0.25}


def test_max_staleness_must_be_positive(batch):
    with pytest.raises(ValueError, match="max_staleness must be >= 1"):
        OverlappedSampler(FakeSampler(batch), max_staleness=0, iterations=2,
                          sync=lambda: None, version=0)
