"""Each rank's micro-batches and their weights (algorithms/training/micro_batches.py), by hand."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from algorithms.config import LearnerConfig  # noqa: E402
from algorithms.runs.distributed import SINGLE, Ranks  # noqa: E402
from algorithms.training.micro_batches import chunks, micro_weights, rank_chunks  # noqa: E402


def _listed(pairs):
    return [(chunk.tolist(), real) for chunk, real in pairs]


def test_chunks_are_consecutive_slices_the_last_one_shorter():
    assert [c.tolist() for c in chunks(np.arange(5), 2)] == [[0, 1], [2, 3], [4]]


def test_one_process_scores_every_sample_without_padding():
    assert _listed(rank_chunks(np.arange(5), 2, SINGLE)) == [
        ([0, 1], True), ([2, 3], True), ([4], True)]


def test_a_rank_with_a_smaller_share_pads_to_the_largest_shares_passes():
    # 5 samples over 2 ranks: rank 0 gets 0, 2, 4 (2 micro-batches of 2), rank 1 gets 1, 3
    # (one), then one padding pass on the first sample so that both make 2 passes
    samples = np.arange(5)
    assert _listed(rank_chunks(samples, 2, Ranks(rank=0, world_size=2))) == [
        ([0, 2], True), ([4], True)]
    assert _listed(rank_chunks(samples, 2, Ranks(rank=1, world_size=2))) == [
        ([1, 3], True), ([0], False)]


def test_micro_weights_equal_tokens_and_padding():
    equal = LearnerConfig(mini_batch_size=4, micro_batch_size=2)
    # a micro-batch with 3 of its mini-batch's 7 tokens
    assert micro_weights(3, 7, True, equal) == (0.5, pytest.approx(3 / 7))
    tokens = LearnerConfig(mini_batch_size=4, micro_batch_size=2, micro_batch_weighting="tokens")
    assert micro_weights(3, 7, True, tokens) == (pytest.approx(3 / 7), pytest.approx(3 / 7))
    assert micro_weights(3, 7, False, equal) == (0.0, 0.0)
