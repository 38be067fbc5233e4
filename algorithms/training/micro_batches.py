"""The learner's micro-batches: which samples each rank scores, and their tensors.

A sample is a step in the window layout and a trajectory in the transcript layout
(:mod:`algorithms.training.learner`). Every pass of the learner -- old and reference log-probs,
critic values, the update -- walks this rank's share of the samples in micro-batches of
``learner.micro_batch_size`` (:func:`rank_chunks`); under torchrun a rank with fewer
samples than another adds padding passes so that every rank makes the same number of
collective calls. Each micro-batch's rows become tensors trimmed to the longest prompt
and response among them (:func:`window_rows`, :func:`transcript_rows`). A micro-batch
whose prompts show images (a visual env) also gets the pixel inputs of its rows' images
only, encoded afresh by the policy's
:class:`~algorithms.engines.vision.VisionProcessor`: no pass holds more pixels (or vision
activations) than its micro-batch's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from algorithms.agent.step_batch import StepBatch
from algorithms.config import LearnerConfig
from algorithms.runs import distributed
from algorithms.runs.distributed import Ranks
from algorithms.training.transcript import TranscriptView, transcript_view

MicroBatch = tuple[np.ndarray, dict[str, torch.Tensor], bool]
"""``(rows, tensors, real)``: the batch rows of a micro-batch, their tensors, and whether
it is real (``False``: a padding pass, to be given zero weight)."""


def as_tensor(array: np.ndarray, device: torch.device, dtype: torch.dtype = torch.long
              ) -> torch.Tensor:
    """``array`` as a contiguous tensor of ``dtype`` on ``device``."""
    return torch.as_tensor(np.ascontiguousarray(array), dtype=dtype, device=device)


def prompt_rows(prompt_ids: np.ndarray, prompt_mask: np.ndarray, index: np.ndarray,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, P') ids and mask of the left-padded prompts ``index`` of (M, P) arrays, trimmed
    to the longest of them."""
    mask = prompt_mask[index]
    width = max(1, int(mask.sum(1).max()))
    columns = slice(prompt_ids.shape[1] - width, None)
    return (as_tensor(prompt_ids[index][:, columns], device),
            as_tensor(mask[:, columns], device))


def response_rows(batch: StepBatch, index: np.ndarray, device: torch.device
                  ) -> dict[str, torch.Tensor]:
    """Response ids, mask and (when scored, or recorded by the engine) old / reference /
    behaviour log-probs of the rows ``index``, trimmed to the longest response among
    them."""
    response_mask = batch.response_mask[index]
    response_width = max(1, int(response_mask.sum(1).max()))
    rows = {
        "response_ids": as_tensor(batch.response_ids[index][:, :response_width], device),
        "response_mask": as_tensor(response_mask[:, :response_width], device),
    }
    for name in ("old_log_probs", "ref_log_probs", "behaviour_log_probs"):
        array = getattr(batch, name)
        if array is not None:
            rows[name] = as_tensor(array[index][:, :response_width], device, torch.float32)
    return rows


def window_rows(batch: StepBatch, index: np.ndarray, device: torch.device,
                vision: Any = None) -> dict[str, torch.Tensor]:
    """Tensors of the rows ``index``, trimmed to the longest prompt and response among them;
    with images (``batch.images``), their ``pixel_values`` and ``image_grid_thw``
    (``vision``: the policy's :class:`~algorithms.engines.vision.VisionProcessor`).

    Raises:
        ValueError: the batch has images and no ``vision`` was given.
    """
    prompt_ids, prompt_mask = prompt_rows(batch.prompt_ids, batch.prompt_mask, index, device)
    rows = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask,
            **response_rows(batch, index, device)}
    if batch.images is not None:
        if vision is None:
            raise ValueError("the batch's prompts show images: scoring them needs the "
                             "policy's VisionProcessor")
        rows.update(vision.tensors([batch.images[i] for i in index], device))
    return rows


def transcript_rows(batch: StepBatch, view: TranscriptView, sequences: np.ndarray,
                    device: torch.device) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
    """The rows of the trajectories ``sequences`` and their tensors: the transcripts
    (trimmed to the longest), where each row's response starts, and
    :func:`response_rows`' keys."""
    index = view.rows_of(sequences)
    local = np.full(view.num_sequences, -1, dtype=np.int64)
    local[sequences] = np.arange(len(sequences))
    width = max(1, int(view.sequence_mask[sequences].sum(1).max()))
    return index, {
        "sequence_ids": as_tensor(view.sequence_ids[sequences][:, :width], device),
        "sequence_mask": as_tensor(view.sequence_mask[sequences][:, :width], device),
        "sequence_index": as_tensor(local[view.sequence_index[index]], device),
        "response_starts": as_tensor(view.response_starts[index], device),
        **response_rows(batch, index, device),
    }


def batch_view(batch: StepBatch) -> TranscriptView | None:
    """The transcript view of a transcript-layout batch; ``None`` in the window layout."""
    return transcript_view(batch) if batch.layout == "transcript" else None


def num_samples(batch: StepBatch | int) -> int:
    """Samples of a batch: steps in the window layout, trajectories in the transcript
    layout; an int is taken as the count itself."""
    if isinstance(batch, int):
        return batch
    if batch.layout == "transcript":
        return int(batch.last_step.sum())
    return len(batch)


def chunks(index: np.ndarray, size: int) -> Iterator[np.ndarray]:
    """Consecutive slices of ``index`` of ``size`` (the last one shorter)."""
    for start in range(0, len(index), size):
        yield index[start: start + size]


def rank_chunks(samples: np.ndarray, micro_batch_size: int, ranks: Ranks
                ) -> Iterator[tuple[np.ndarray, bool]]:
    """``(chunk, real)`` of each of this rank's micro-batches of ``samples``: its share
    (:func:`~algorithms.runs.distributed.share`), then, up to
    :func:`~algorithms.runs.distributed.passes`, padding chunks (``real`` False: the first
    sample, to be given zero weight) so that every rank makes the same number of
    passes. One process: every sample, no padding."""
    made = 0
    for chunk in chunks(distributed.share(samples, ranks), micro_batch_size):
        made += 1
        yield chunk, True
    for _ in range(distributed.passes(len(samples), micro_batch_size, ranks) - made):
        yield samples[:1], False


def micro_batches(batch: StepBatch, view: TranscriptView | None, samples: np.ndarray,
                  micro_batch_size: int, ranks: Ranks, device: torch.device,
                  vision: Any = None) -> Iterator[MicroBatch]:
    """:data:`MicroBatch` of each of this rank's micro-batches of ``samples`` (steps, or
    trajectories with a ``view``; see :func:`rank_chunks`); ``vision`` encodes the
    images of a visual env's rows (:func:`window_rows`)."""
    if view is not None and batch.images is not None:
        raise ValueError("the transcript layout does not take images")
    for chunk, real in rank_chunks(samples, micro_batch_size, ranks):
        if view is None:
            yield chunk, window_rows(batch, chunk, device, vision), real
        else:
            yield (*transcript_rows(batch, view, chunk, device), real)


def micro_weights(chunk_tokens: int, mini_tokens: int, real: bool, learner: LearnerConfig
                  ) -> tuple[float, float]:
    """``(loss weight, statistics weight)`` of one micro-batch of a mini-batch.

    The loss weight is ``micro_batch_size / mini_batch_size`` (``equal``, verl's
    division by the gradient-accumulation steps) or the micro-batch's share of the
    mini-batch's tokens (``tokens``); statistics are always token-weighted. A padding
    pass (another rank's collectives) weighs 0.
    """
    if not real:
        return 0.0, 0.0
    share = chunk_tokens / mini_tokens
    if learner.micro_batch_weighting == "tokens":
        return share, share
    return learner.micro_batch_size / learner.mini_batch_size, share
