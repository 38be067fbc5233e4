"""A transcript-layout batch as one token sequence per trajectory (the learner's view).

In the transcript layout (:mod:`algorithms.agent.rollout`) every row's prompt and response are a
prefix of its trajectory's last row's prompt and response, so one forward pass over that
whole sequence gives the log-probs of every row of the trajectory. :func:`transcript_view`
lays the sequences out and checks that prefix property on every row, naming the first row
that breaks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from algorithms.agent.step_batch import pad_right

if TYPE_CHECKING:
    from algorithms.agent.step_batch import StepBatch

@dataclass(frozen=True)
class TranscriptView:
    """A transcript-layout batch as one token sequence per trajectory (``T`` of them).

    Attributes:
        sequence_ids: (T, L) int64 whole transcripts (the last row's prompt and
            response), right-padded with 0 (masked).
        sequence_mask: (T, L) int64, 1 on real tokens.
        row_offsets: (T + 1,) int64; the rows of sequence ``t`` are
            ``row_offsets[t]:row_offsets[t + 1]``.
        sequence_index: (N,) int64 the sequence of each row.
        response_starts: (N,) int64 the column of each row's first response token in its
            sequence (its prompt's length); the token there is predicted from column
            ``response_starts - 1``.
    """

    sequence_ids: np.ndarray
    sequence_mask: np.ndarray
    row_offsets: np.ndarray
    sequence_index: np.ndarray
    response_starts: np.ndarray

    @property
    def num_sequences(self) -> int:
        return int(self.sequence_ids.shape[0])

    def rows_of(self, sequences: np.ndarray) -> np.ndarray:
        """The rows of ``sequences`` (ascending within each), in the given order."""
        parts = [np.arange(self.row_offsets[t], self.row_offsets[t + 1]) for t in sequences]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def transcript_view(batch: StepBatch) -> TranscriptView:
    """The trajectories of a transcript-layout batch as whole sequences.

    Raises:
        ValueError: the batch is not in the transcript layout, or a row's prompt and
            response are not the prefix of its trajectory's transcript that the layout
            guarantees (the message names the first such row).
    """
    if batch.layout != "transcript":
        raise ValueError(f"transcript_view needs a transcript-layout batch, not {batch.layout!r}")
    last = np.flatnonzero(batch.last_step)
    offsets = np.concatenate([[0], last + 1]).astype(np.int64)
    prompt_lengths = batch.prompt_mask.sum(1).astype(np.int64)
    response_lengths = batch.response_mask.sum(1).astype(np.int64)
    sequences = [np.concatenate([batch.prompt_ids[row][batch.prompt_mask[row] == 1],
                                 batch.response_ids[row][:response_lengths[row]]])
                 for row in last]
    ids, mask = pad_right(sequences, 0)
    sequence_index = np.repeat(np.arange(len(last)), np.diff(offsets)).astype(np.int64)
    bad = _first_non_prefix(batch, sequences, sequence_index, prompt_lengths,
                            response_lengths)
    if bad is not None:
        raise ValueError(f"row {bad} is not a prefix of its trajectory's transcript")
    return TranscriptView(ids, mask, offsets, sequence_index, prompt_lengths)


def _first_non_prefix(batch: StepBatch, sequences: list[np.ndarray],
                      sequence_index: np.ndarray, prompt_lengths: np.ndarray,
                      response_lengths: np.ndarray) -> int | None:
    """The first row whose real prompt tokens followed by its first ``response_lengths``
    response tokens are not the start of its sequence (or are longer than it), else
    ``None``.

    A row at a time: the work is the rows' real tokens, which whole-array comparisons
    over the padded (N, P + R) arrays did not beat (measured in docs/training.md).
    """
    for row in range(len(batch)):
        sequence = sequences[sequence_index[row]]
        start, length = prompt_lengths[row], response_lengths[row]
        if (start + length > len(sequence)
                or not np.array_equal(sequence[:start],
                                      batch.prompt_ids[row][batch.prompt_mask[row] == 1])
                or not np.array_equal(sequence[start:start + length],
                                      batch.response_ids[row][:length])):
            return row
    return None
