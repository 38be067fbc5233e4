"""The learner's view of a transcript-layout batch (algorithms.training.transcript): hand-computed
sequences, offsets and response starts; every row checked to be a prefix of its
trajectory's transcript, the first row that is not named."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from algorithms.agent.step_batch import pad_left, pad_right
from algorithms.training.transcript import transcript_view
from tests.algorithms.hand_batch import hand_batch


def _batch(trajectories: list[list[tuple[list[int], list[int]]]], layout: str = "transcript"):
    """A batch of ``(prompt, response)`` rows per trajectory (one group)."""
    base = hand_batch([(0, [0.0] * len(rows), ["s"] * len(rows), False)
                       for rows in trajectories])
    rows = [row for trajectory in trajectories for row in trajectory]
    prompt_ids, prompt_mask = pad_left([p for p, _ in rows], 0)
    response_ids, response_mask = pad_right([r for _, r in rows], 0)
    return replace(base, prompt_ids=prompt_ids, prompt_mask=prompt_mask,
                   response_ids=response_ids, response_mask=response_mask, layout=layout)


def test_one_sequence_per_trajectory_by_hand():
    batch = _batch([[([5, 6], [7]), ([5, 6, 7, 8], [9, 10])], [([3], [4, 4])]])
    view = transcript_view(batch)
    np.testing.assert_array_equal(view.sequence_ids, [[5, 6, 7, 8, 9, 10], [3, 4, 4, 0, 0, 0]])
    np.testing.assert_array_equal(view.sequence_mask, [[1] * 6, [1, 1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(view.row_offsets, [0, 2, 3])
    np.testing.assert_array_equal(view.sequence_index, [0, 0, 1])
    np.testing.assert_array_equal(view.response_starts, [2, 4, 1])
    np.testing.assert_array_equal(view.rows_of(np.array([1, 0])), [2, 0, 1])
    assert view.rows_of(np.zeros(0, dtype=np.int64)).shape == (0,)
    assert view.num_sequences == 2


@pytest.mark.parametrize(("rows", "bad"), [
    ([([5, 6], [8]), ([5, 6, 7, 8], [9, 10])], 0),     # response differs
    ([([5, 9], [7]), ([5, 6, 7, 8], [9, 10])], 0),     # prompt differs
    ([([5, 6, 7, 8, 9, 10, 1], [2]), ([5, 6], [7])], 0),  # longer than the transcript
    ([([5, 6], [7]), ([5, 6, 7], [9]), ([5, 6, 7, 8], [9])], 1),  # the middle row
])
def test_a_row_that_is_not_a_prefix_is_named(rows, bad):
    with pytest.raises(ValueError, match=f"row {bad} is not a prefix"):
        transcript_view(_batch([rows]))


def test_a_window_batch_has_no_transcript_view():
    with pytest.raises(ValueError, match="transcript-layout"):
        transcript_view(_batch([[([1], [2])]], layout="window"))


def _first_bad_row(batch) -> int | None:
    """The definition, row by row: prompt then response must start the last row's."""
    last = {}
    for row, traj in enumerate(batch.traj_ids):
        last[int(traj)] = row
    for row, traj in enumerate(batch.traj_ids):
        end = last[int(traj)]
        whole = list(batch.prompt_ids[end][batch.prompt_mask[end] == 1]) + \
            list(batch.response_ids[end][batch.response_mask[end] == 1])
        own = list(batch.prompt_ids[row][batch.prompt_mask[row] == 1]) + \
            list(batch.response_ids[row][batch.response_mask[row] == 1])
        if own != whole[:len(own)] or len(own) > len(whole):
            return row
    return None


def test_the_check_agrees_with_the_row_by_row_definition():
    rng = np.random.default_rng(0)
    wrong_seen = 0
    for _ in range(200):
        trajectories = []
        for _ in range(int(rng.integers(1, 4))):
            tokens = rng.integers(1, 5, size=int(rng.integers(4, 30))).tolist()
            cuts = np.sort(rng.choice(np.arange(1, len(tokens)), size=min(
                len(tokens) - 1, int(rng.integers(1, 4))), replace=False))
            rows, start = [], 0
            for cut in cuts[1:].tolist() + [len(tokens)]:
                split = int(rng.integers(max(1, start), cut)) if cut > max(1, start) else cut
                rows.append((tokens[:split], tokens[split:cut]))
                start = cut
            trajectories.append(rows)
        if rng.random() < 0.5:  # corrupt one token of one row
            rows = trajectories[int(rng.integers(len(trajectories)))]
            prompt, response = rows[int(rng.integers(len(rows)))]
            target = prompt if (rng.random() < 0.5 or not response) else response
            target[int(rng.integers(len(target)))] += 10
        batch = _batch(trajectories)
        bad = _first_bad_row(batch)
        if bad is None:
            transcript_view(batch)
        else:
            wrong_seen += 1
            with pytest.raises(ValueError, match=f"row {bad} is not a prefix"):
                transcript_view(batch)
    assert wrong_seen > 20
