"""Phase 1 of an iteration (:mod:`algorithms.training.learner`): the no-grad passes over a rollout
batch -- old log-probs under the sampling policy, reference log-probs (frozen copy, or
the base model with LoRA adapters disabled), critic values V(s_t) of every step and, with
``learner.bootstrap_truncated``, V(s_T) of the prompt that would have followed each
trajectory cut by a step limit or an env error.

Each rank scores its share of the samples in micro-batches (:mod:`algorithms.training.micro_batches`);
the ranks' arrays are summed, every row having been filled by exactly one rank. The
forward passes themselves (log-probs, entropies, values) are
:mod:`algorithms.training.scoring`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from algorithms.agent.step_batch import StepBatch
from algorithms.config import TrainConfig
from algorithms.runs import distributed
from algorithms.runs.distributed import Ranks
from algorithms.training.learner_setup import LearnerModels
from algorithms.training.micro_batches import (
    batch_view,
    micro_batches,
    num_samples,
    prompt_rows,
    rank_chunks,
)
from algorithms.training.scoring import ScoredResponses, Scorer


def score_rows(scorer: Scorer, rows: dict[str, torch.Tensor], **kwargs: Any
               ) -> ScoredResponses:
    """``scorer``'s scores of ``rows`` (window or transcript rows)."""
    return ScoredResponses(*scorer(rows, **kwargs))


def reference_log_probs(models: LearnerModels, rows: dict[str, torch.Tensor],
                        temperature: float) -> np.ndarray:
    """(B, R) float32 log-probs of ``rows``' responses under the KL reference."""
    if models.reference_scorer is not None:
        scored = score_rows(models.reference_scorer, rows, temperature=temperature)
    else:
        with models.model.disable_adapter():
            scored = score_rows(models.scorer, rows, temperature=temperature)
    return scored.log_probs.float().cpu().numpy()


@torch.no_grad()
def worker_reference_log_probs(model: torch.nn.Module, batch: StepBatch, *,
                               micro_batch_size: int, temperature: float) -> np.ndarray:
    """(N, R) float32 log-probs of ``batch``'s responses under the KL reference of a LoRA
    policy (``model`` with its adapters disabled), 0 outside the response mask.

    The learner's reference pass (:func:`score_batch`) over one process's rows: the same
    micro-batches of ``micro_batch_size`` samples, the same tensors, the same
    temperature. It runs in the HF engine's generation worker on the worker's copy of the
    model (:meth:`~algorithms.engines.hf_worker.HFWorkerEngine.call`,
    ``run.reference_in_worker``), on an unscored rollout block.

    Raises:
        ValueError: ``model`` has no LoRA adapters to disable.
    """
    if not hasattr(model, "disable_adapter"):
        raise ValueError("run.reference_in_worker needs a LoRA policy (its reference is the "
                         "base model with the adapters disabled)")
    n, width = batch.response_ids.shape
    ref = np.zeros((n, width), dtype=np.float32)
    scorer = Scorer(model)
    was_training = model.training
    model.eval()
    try:
        with model.disable_adapter():
            samples = np.arange(num_samples(batch))
            device = next(model.parameters()).device
            for index, rows, _ in micro_batches(batch, batch_view(batch), samples,
                                                micro_batch_size, Ranks(), device):
                scored = score_rows(scorer, rows, temperature=temperature)
                ref[index, :rows["response_ids"].shape[1]] = \
                    scored.log_probs.float().cpu().numpy()
    finally:
        model.train(was_training)
    ref[~batch.response_mask.astype(bool)] = 0.0
    return ref


def critic_values(models: LearnerModels, rows: dict[str, torch.Tensor],
                  head_values: torch.Tensor | None) -> torch.Tensor:
    """(B,) values of ``rows``' steps: the separate critic's (over the transcripts in the
    transcript layout), or ``head_values``, the value head's from the policy's pass."""
    critic = models.critic
    if critic is not None and "sequence_ids" in rows:
        return critic.transcript_values(rows["sequence_ids"], rows["sequence_mask"],
                                        rows["sequence_index"], rows["response_starts"])
    if critic is not None:
        return critic(rows["prompt_ids"], rows["prompt_mask"])
    if head_values is None:
        raise RuntimeError("PPO needs a critic; none was built")
    return head_values


def prompt_values(models: LearnerModels, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor
                  ) -> torch.Tensor:
    """Critic values of prompts with no response: (B, P), (B, P) -> (B,)."""
    if models.critic is not None:
        return models.critic(prompt_ids, prompt_mask)
    return models.scorer.prompt_values(prompt_ids, prompt_mask)


def bootstrap_values(models: LearnerModels, batch: StepBatch, *, micro_batch_size: int,
                     ranks: Ranks, device: torch.device, progress: Any = None
                     ) -> np.ndarray:
    """(K,) float32 critic values of ``batch.bootstrap_prompt_ids``, in micro-batches
    (this rank's rows; the others hold zeros)."""
    k = batch.bootstrap_prompt_ids.shape[0]
    values = np.zeros(k, dtype=np.float32)
    for index, real in rank_chunks(np.arange(k), micro_batch_size, ranks):
        ids, mask = prompt_rows(batch.bootstrap_prompt_ids, batch.bootstrap_prompt_mask,
                                index, device)
        computed = prompt_values(models, ids, mask).float().cpu().numpy()
        if real:  # a padding pass only matches the other ranks' collectives
            values[index] = computed
        if progress is not None:
            progress.update(1)
    return values


def score_passes(batch: StepBatch, config: TrainConfig, ranks: Ranks) -> int:
    """Micro-batch passes :func:`score_batch` makes on ``batch`` (its progress total)."""
    micro = config.learner.micro_batch_size
    passes = distributed.passes(num_samples(batch), micro, ranks)
    if config.bootstrap_truncated and batch.bootstrap_prompt_ids is not None:
        passes += distributed.passes(batch.bootstrap_prompt_ids.shape[0], micro, ranks)
    return passes


@torch.no_grad()
def score_batch(models: LearnerModels, batch: StepBatch, config: TrainConfig, *,
                ranks: Ranks, device: torch.device, temperature: float,
                with_old_log_probs: bool = True, progress: Any = None) -> StepBatch:
    """Old log-probs, reference log-probs (when ``kl_coef > 0``) and values (PPO) of
    ``batch``, at ``temperature`` (:meth:`algorithms.training.learner.Learner.score`).

    Returns:
        ``batch`` with ``old_log_probs`` (N, R) or ``None`` (``with_old_log_probs``
        False), ``ref_log_probs`` (N, R) or ``None``, ``values`` (N,) or ``None`` and
        ``bootstrap_values`` (K,) or ``None``; ``progress`` advances once per pass,
        :func:`score_passes` in all.
    """
    n, width = batch.response_ids.shape
    micro = config.learner.micro_batch_size
    old = np.zeros((n, width), dtype=np.float32) if with_old_log_probs else None
    need_policy_pass = with_old_log_probs or models.value_head is not None
    # reference log-probs the generation worker scored already (run.reference_in_worker)
    given_ref = batch.ref_log_probs if config.learner.kl_coef > 0 else None
    ref = (np.zeros((n, width), dtype=np.float32)
           if config.learner.kl_coef > 0 and given_ref is None else None)
    values = np.zeros(n, dtype=np.float32) if config.use_critic else None
    model = models.model
    was_training = model.training
    model.eval()
    try:
        view = batch_view(batch)
        samples = np.arange(num_samples(batch))
        for index, rows, real in micro_batches(batch, view, samples, micro, ranks, device,
                                               models.vision):
            r = rows["response_ids"].shape[1]
            scored = None
            if need_policy_pass:
                scored = score_rows(models.scorer, rows, temperature=temperature,
                                    with_values=models.value_head is not None)
            if not real:  # a padding pass (other ranks' collectives): nothing to keep
                if ref is not None:
                    reference_log_probs(models, rows, temperature)
                if values is not None and models.critic is not None:
                    critic_values(models, rows, None)
                continue
            if old is not None:
                old[index, :r] = scored.log_probs.float().cpu().numpy()
            if ref is not None:
                ref[index, :r] = reference_log_probs(models, rows, temperature)
            if values is not None:
                head = scored.values if scored is not None else None
                values[index] = critic_values(models, rows, head).float().cpu().numpy()
            if progress is not None:
                progress.update(1)
        bootstrap = None
        if config.bootstrap_truncated and batch.bootstrap_prompt_ids is not None:
            bootstrap = bootstrap_values(models, batch, micro_batch_size=micro, ranks=ranks,
                                         device=device, progress=progress)
    finally:
        model.train(was_training)
    # each row was filled by exactly one rank (the others hold zeros there)
    old, ref, values, bootstrap = (
        None if array is None else distributed.all_reduce_sum(array, ranks)
        for array in (old, ref, values, bootstrap))
    mask = batch.response_mask.astype(bool)
    if given_ref is not None:
        ref = np.where(mask, np.nan_to_num(given_ref), 0.0).astype(np.float32)
    if old is not None:
        old[~mask] = 0.0
    if ref is not None:
        ref[~mask] = 0.0
    return batch.with_scores(old_log_probs=old, ref_log_probs=ref, values=values,
                             bootstrap_values=bootstrap)
