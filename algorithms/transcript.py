"""A transcript-layout batch as one token sequence per trajectory (the learner's view).

In the transcript layout (:mod:`algorithms.rollout`) every row's prompt and response are a
prefix of its trajectory's last row's prompt and response, so one forward pass over that
whole sequence gives the log-probs of every row of the trajectory. :func:`transcript_view`
lays the sequences out and checks that prefix property for every row at once (whole-array
comparisons, in chunks of rows, no per-row Python loop).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from algorithms.step_batch import pad_right

if TYPE_CHECKING:
    from algorithms.step_batch import StepBatch

_CHECK_CELLS = 1 << 22
"""Rows are compared in chunks of about this many (row, column) cells (bounded memory)."""


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
    bad = _first_non_prefix(batch, ids, mask.sum(1), sequence_index, prompt_lengths,
                            response_lengths)
    if bad is not None:
        raise ValueError(f"row {bad} is not a prefix of its trajectory's transcript")
    return TranscriptView(ids, mask, offsets, sequence_index, prompt_lengths)


def _first_non_prefix(batch: StepBatch, sequence_ids: np.ndarray, sequence_lengths: np.ndarray,
                      sequence_index: np.ndarray, prompt_lengths: np.ndarray,
                      response_lengths: np.ndarray) -> int | None:
    """The first row whose real prompt tokens followed by its first ``response_lengths``
    response tokens are not the start of its sequence (or are longer than it), else
    ``None``.

    Args:
        batch: the batch (``N`` rows; prompts ``P`` wide, responses ``R`` wide).
        sequence_ids: (T, L) the sequences, right-padded.
        sequence_lengths: (T,) real tokens of each sequence.
        sequence_index: (N,) the sequence of each row.
        prompt_lengths: (N,) real prompt tokens of each row.
        response_lengths: (N,) response tokens of each row (its first columns).
    """
    n, prompt_width = batch.prompt_ids.shape
    width = prompt_width + batch.response_ids.shape[1]
    columns = np.arange(width)[None, :]
    chunk = max(1, _CHECK_CELLS // width)
    for start in range(0, n, chunk):
        rows = np.arange(start, min(n, start + chunk))
        # column c of a row's own tokens: its c-th real prompt token for c < p, then
        # response token c - p (``real`` lists the real prompt columns first, in order)
        real = np.argsort(batch.prompt_mask[rows] == 0, axis=1, kind="stable")
        p = prompt_lengths[rows][:, None]
        in_prompt = np.take_along_axis(real, np.minimum(columns, prompt_width - 1), axis=1)
        source = np.where(columns < p, in_prompt,
                          np.minimum(prompt_width + columns - p, width - 1))
        own = np.take_along_axis(np.concatenate([batch.prompt_ids[rows],
                                                 batch.response_ids[rows]], axis=1),
                                 source, axis=1)
        lengths = p[:, 0] + response_lengths[rows]
        sequences = sequence_ids[sequence_index[rows]][:, :width]
        target = np.zeros_like(own)
        target[:, :sequences.shape[1]] = sequences
        wrong = (lengths > sequence_lengths[sequence_index[rows]]) | np.any(
            (columns < lengths[:, None]) & (own != target), axis=1)
        if wrong.any():
            return int(rows[np.argmax(wrong)])
    return None
