"""The one learner loop: PPO-clip with a KL penalty, for GiGPO, GRPO and PPO.

An iteration after the rollout:

0. :meth:`Learner.training_batch` -- the rollout's steps that are trained on. A step whose
   env call failed is never in a batch (see :mod:`algorithms.rollout`); GiGPO and GRPO
   also leave out the earlier steps of a trajectory that ended on an env error, PPO keeps
   them (reasons below).
1. :meth:`Learner.score` -- old log-probs under the sampling policy, reference log-probs
   (frozen copy, or the base model with LoRA adapters disabled), and critic values (PPO):
   V(s_t) of every step and, with ``learner.bootstrap_truncated``, V(s_T) of the prompt
   that would have followed each trajectory cut by a step limit or an env error.
2. :meth:`Learner.advantages` -- one advantage per step from the estimator the config
   names: ``gigpo`` (Eq. 8 of Feng et al. 2025), ``grpo`` (Eq. 3), ``rloo``,
   ``reinforce_pp`` (``docs/estimators.md``) or ``gae`` (turn-level GAE with the critic's
   values; a cut -- step limit or env error -- bootstraps from V(s_T), a termination does
   not).
3. :meth:`Learner.update` -- ``epochs`` passes over mini-batches (in batch order, or
   shuffled with ``learner.shuffle``); each mini-batch is one optimizer step accumulated
   over micro-batches. The step's advantage is given to every token of its response. The
   loss of a micro-batch is :func:`~algorithms.losses.policy_loss`:
   ``L = agg(L_clip) - entropy_coef * agg(H) + kl_coef * agg(KL(pi || pi_ref))``
   (+ ``value_coef * L_value`` for the value-head critic; a separate critic has its own
   optimizer), and the micro-batches' losses add up as ``learner.micro_batch_weighting``
   says (verl: each divided by the number of micro-batches of a mini-batch). A step whose
   gradient norm is not finite is skipped (``skipped_steps``).

Penalty placement (GiGPO and GRPO). By default the invalid-action penalty is charged to
its own row only, after the step returns are discounted from the env's rewards
(verl-agent's ``apply_invalid_action_penalty``): the row's episode score and step return
are lowered, no other row's. ``learner.penalty_in_returns`` puts it in the step reward
instead (summed into the trajectory's return, discounted into earlier steps).

Env errors. A trajectory that ended on an env error (the env raised, its worker died or
timed out) has no outcome: the fault cut it, the agent did not end it.

- GiGPO / GRPO compare outcomes inside a group. The trajectory's partial return would
  count the fault as a failure of its earlier actions (a crash one step before success
  looks like any other failure), and, in the group's mean and std, it would shift the
  advantages of every other trajectory of the group; its steps would also join GiGPO's
  step groups with censored discounted returns. So the whole trajectory is left out of
  the group's statistics and of the update: the group's advantages are those of the
  trajectories that finished, exactly as if the failed env had failed to reset (which
  already yields no steps). A group left with one trajectory gets 0 (the singleton rule)
  and a group left with none has no rows. Keeping those steps with a zero advantage
  instead would still apply the KL and entropy terms to them and count their tokens in
  the token mean, so they are dropped.
- PPO's GAE is per step: the steps before the error have real rewards and real next
  states, so they are kept, and the last of them bootstraps from the critic's value of
  the state the failed step was taken in, like a step-limit cut (with
  ``learner.bootstrap_truncated``; without it, every cut counts as a termination).

Layouts. In the window layout every step is one sample: a forward pass scores its
prompt and response, and ``learner.mini_batch_size`` / ``micro_batch_size`` count steps.
In the transcript layout (:mod:`algorithms.rollout`) a trajectory is one sample: one
forward pass over its whole transcript scores every response in it
(:func:`~algorithms.policy.score_transcripts`), and the two sizes count trajectories.
Either way the per-token arrays the losses see are the same (N, R) response tokens with
the same step advantages -- the env's text between turns is never gathered, so it enters
no policy, KL or entropy term and no token mean -- and the advantage estimators run on
the same per-step rows, unchanged.

Randomness (mini-batch order, LoRA dropout) is drawn from generators seeded by
``(seed, iteration)``, so an iteration's result depends only on the weights, the
optimizer state and the batch -- which is what makes ``--resume`` exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import nn

from algorithms import distributed, losses
from algorithms.config import TrainConfig
from algorithms.distributed import SINGLE, Ranks
from algorithms.estimation import Advantages, estimate_advantages
from algorithms.policy import (
    Policy,
    ScoredResponses,
    Scorer,
    SeparateCritic,
    ValueHead,
    frozen_copy,
    hidden_size,
    load_causal_lm,
    model_identity,
    split_model,
)
from algorithms.rollout import StepBatch
from algorithms.transcript import TranscriptView, transcript_view


def _tensor(array: np.ndarray, device: torch.device, dtype: torch.dtype = torch.long
            ) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(array), dtype=dtype, device=device)


def _prompt_rows(prompt_ids: np.ndarray, prompt_mask: np.ndarray, index: np.ndarray,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, P') ids and mask of the left-padded prompts ``index`` of (M, P) arrays, trimmed
    to the longest of them."""
    mask = prompt_mask[index]
    width = max(1, int(mask.sum(1).max()))
    columns = slice(prompt_ids.shape[1] - width, None)
    return (_tensor(prompt_ids[index][:, columns], device),
            _tensor(mask[:, columns], device))


def _response_rows(batch: StepBatch, index: np.ndarray, device: torch.device
                   ) -> dict[str, torch.Tensor]:
    """Response ids, mask and (when scored) old / reference log-probs of the rows
    ``index``, trimmed to the longest response among them."""
    response_mask = batch.response_mask[index]
    response_width = max(1, int(response_mask.sum(1).max()))
    rows = {
        "response_ids": _tensor(batch.response_ids[index][:, :response_width], device),
        "response_mask": _tensor(response_mask[:, :response_width], device),
    }
    for name in ("old_log_probs", "ref_log_probs"):
        array = getattr(batch, name)
        if array is not None:
            rows[name] = _tensor(array[index][:, :response_width], device, torch.float32)
    return rows


def _rows(batch: StepBatch, index: np.ndarray, device: torch.device) -> dict[str, torch.Tensor]:
    """Tensors of the rows ``index``, trimmed to the longest prompt and response among them."""
    prompt_ids, prompt_mask = _prompt_rows(batch.prompt_ids, batch.prompt_mask, index, device)
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask,
            **_response_rows(batch, index, device)}


def _transcript_rows(batch: StepBatch, view: TranscriptView, sequences: np.ndarray,
                     device: torch.device) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
    """The rows of the trajectories ``sequences`` and their tensors: the transcripts
    (trimmed to the longest), where each row's response starts, and ``_rows``' response
    keys."""
    index = view.rows_of(sequences)
    local = np.full(view.num_sequences, -1, dtype=np.int64)
    local[sequences] = np.arange(len(sequences))
    width = max(1, int(view.sequence_mask[sequences].sum(1).max()))
    return index, {
        "sequence_ids": _tensor(view.sequence_ids[sequences][:, :width], device),
        "sequence_mask": _tensor(view.sequence_mask[sequences][:, :width], device),
        "sequence_index": _tensor(local[view.sequence_index[index]], device),
        "response_starts": _tensor(view.response_starts[index], device),
        **_response_rows(batch, index, device),
    }


def _score(scorer: Scorer, rows: dict[str, torch.Tensor], **kwargs: Any) -> ScoredResponses:
    """``scorer``'s scores of ``rows`` (window or transcript rows)."""
    return ScoredResponses(*scorer(rows, **kwargs))


def _chunks(index: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for start in range(0, len(index), size):
        yield index[start: start + size]


def warmup_factor(iteration: int, iterations: int, ratio: float) -> float:
    """The learning-rate factor of ``iteration`` (0-based) under a linear warmup over the
    first ``int(ratio * iterations)`` iterations, constant after it (verl's
    ``get_constant_schedule_with_warmup``, stepped once per update): ``iteration / warmup``
    during the warmup (0 for the first), then 1."""
    warmup = int(ratio * iterations)
    if iteration >= warmup:
        return 1.0
    return iteration / max(1, warmup)


class Learner:
    """Holds the trainable model(s), the reference, the optimizers; runs phases 1-3.

    Data parallel (``ranks.world_size`` > 1, :mod:`algorithms.distributed`): the policy,
    the KL reference and the critic are sharded with FSDP2 here, before the optimizers
    see their parameters; every rank is given the same global batch and computes its
    share of each pass, so the result equals one process's up to summation order.

    Args:
        policy: the loaded policy (its model is trained in place).
        config: the full training config (``algo`` picks estimator and critic).
        device: where the model lives.
        critic_backbone: optional prebuilt backbone for a ``separate`` critic (tests);
            by default it is loaded from ``model.critic_name_or_path`` (or the policy's
            checkpoint).
        ranks: this process's place in a data-parallel job (default: one process).
    """

    def __init__(self, policy: Policy, config: TrainConfig, device: torch.device,
                 *, critic_backbone: nn.Module | None = None, ranks: Ranks = SINGLE):
        self.policy = policy
        self.model = policy.model
        self.config = config
        self.learner = config.learner
        self.device = device
        self.ranks = ranks
        self.reference: nn.Module | None = None
        if self.learner.kl_coef > 0 and not policy.lora:
            self.reference = frozen_copy(self.model)
        self.value_head: ValueHead | None = None
        self.critic: SeparateCritic | None = None
        if config.use_critic:
            width = hidden_size(self.model)
            if config.model.critic == "value_head":
                self.value_head = ValueHead(width).to(device)
            else:
                if critic_backbone is None:
                    critic_name = config.model.critic_name_or_path
                    lm = load_causal_lm(config.model, device, name_or_path=critic_name)[0]
                    critic_backbone = split_model(lm)[0]
                self.critic = SeparateCritic(critic_backbone, width).to(device)
        self.scorer = Scorer(self.model, self.value_head)
        self.reference_scorer = Scorer(self.reference) if self.reference is not None else None
        if ranks.distributed:
            distributed.shard(self.scorer, device=device, methods=("prompt_values",))
            if self.reference_scorer is not None:
                distributed.shard(self.reference_scorer, device=device)
            if self.critic is not None:
                distributed.shard(self.critic, device=device, methods=("transcript_values",))
        # after sharding: FSDP2 replaces the parameters with sharded ones
        parameters = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(parameters, lr=self.learner.lr,
                                           weight_decay=self.learner.weight_decay)
        if self.value_head is not None:
            self.optimizer.add_param_group({"params": list(self.value_head.parameters()),
                                            "lr": self.learner.critic_lr})
        self.critic_optimizer = None
        if self.critic is not None:
            self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(),
                                                      lr=self.learner.critic_lr,
                                                      weight_decay=self.learner.weight_decay)

    def set_policy_lr(self, lr: float) -> None:
        """Set the policy's learning rate (its optimizer's first parameter group; the value
        head's and the critic's keep ``critic_lr``)."""
        self.optimizer.param_groups[0]["lr"] = lr

    # ------------------------------------------------------------------ phase 0
    def training_batch(self, batch: StepBatch) -> StepBatch:
        """The steps of a rollout batch that the update trains on (module docstring).

        Args:
            batch: a rollout batch (scored or not).

        Returns:
            ``batch`` itself for PPO, or when no trajectory ended on an env error; for
            GiGPO and GRPO, a batch without those trajectories (possibly empty: then
            there is nothing to train on).
        """
        if self.config.estimator == "gae" or not batch.env_error.any():
            return batch
        return batch.select(np.flatnonzero(~batch.env_error))

    # ------------------------------------------------------------------ samples
    @staticmethod
    def _view(batch: StepBatch) -> TranscriptView | None:
        return transcript_view(batch) if batch.layout == "transcript" else None

    @staticmethod
    def num_samples(batch: StepBatch | int) -> int:
        """Samples of a batch (module docstring): steps in the window layout,
        trajectories in the transcript layout; an int is taken as the count itself."""
        if isinstance(batch, int):
            return batch
        if batch.layout == "transcript":
            return int(batch.last_step.sum())
        return len(batch)

    def _my_chunks(self, samples: np.ndarray) -> Iterator[tuple[np.ndarray, bool]]:
        """``(chunk, real)`` of each of this rank's micro-batches of ``samples``: its share
        (:func:`~algorithms.distributed.share`), then, up to
        :func:`~algorithms.distributed.passes`, padding chunks (``real`` False: the first
        sample, to be given zero weight) so that every rank makes the same number of
        passes. One process: every sample, no padding."""
        micro = self.learner.micro_batch_size
        made = 0
        for chunk in _chunks(distributed.share(samples, self.ranks), micro):
            made += 1
            yield chunk, True
        for _ in range(distributed.passes(len(samples), micro, self.ranks) - made):
            yield samples[:1], False

    def _micro_batches(self, batch: StepBatch, view: TranscriptView | None,
                       samples: np.ndarray
                       ) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor], bool]]:
        """``(rows, tensors, real)`` of each of this rank's micro-batches of ``samples``
        (steps or trajectories; see :meth:`_my_chunks`)."""
        for chunk, real in self._my_chunks(samples):
            yield (*self._tensors(batch, view, chunk), real)

    def _tensors(self, batch: StepBatch, view: TranscriptView | None, chunk: np.ndarray
                 ) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
        if view is None:
            return chunk, _rows(batch, chunk, self.device)
        return _transcript_rows(batch, view, chunk, self.device)

    # ------------------------------------------------------------------ phase 1
    def single_pass(self, batch: StepBatch | int) -> bool:
        """Whether :meth:`update` makes exactly one optimizer step over ``batch`` (a batch
        or its :meth:`num_samples`; one epoch, one mini-batch): the policy is then
        unchanged while the loss is built, so the old log-probs equal the current ones
        and need no separate forward pass."""
        return (self.learner.epochs == 1
                and self.learner.mini_batch_size >= self.num_samples(batch))

    @property
    def temperature(self) -> float:
        """The temperature every log-prob is scored at: ``generation.temperature``, the one
        training rollouts sample at (so scores are those of the behaviour policy)."""
        return self.config.generation.temperature

    @torch.no_grad()
    def score(self, batch: StepBatch, *, progress: Any = None,
              with_old_log_probs: bool = True) -> StepBatch:
        """Old log-probs, reference log-probs (when ``kl_coef > 0``) and values (PPO), at
        :attr:`temperature`.

        Args:
            batch: the unscored rollout batch.
            progress: optional tqdm-like bar, advanced once per micro-batch.
            with_old_log_probs: compute old log-probs; ``False`` (allowed only when
                :meth:`single_pass`) leaves them ``None`` and :meth:`update` uses the
                detached current log-probs, which are then identical.

        Returns:
            ``batch`` with ``old_log_probs`` (N, R) or ``None``, ``ref_log_probs`` (N, R)
            or ``None``, ``values`` (N,) or ``None`` and ``bootstrap_values`` (K,) (PPO
            with ``learner.bootstrap_truncated`` on a batch with bootstrap prompts) or
            ``None``. ``progress`` advances once per pass, :meth:`score_passes` in all.
        """
        n, width = batch.response_ids.shape
        if not with_old_log_probs and not self.single_pass(batch):
            raise ValueError("old log-probs can only be skipped for a single-pass update")
        old = np.zeros((n, width), dtype=np.float32) if with_old_log_probs else None
        need_policy_pass = with_old_log_probs or self.value_head is not None
        ref = np.zeros((n, width), dtype=np.float32) if self.learner.kl_coef > 0 else None
        values = np.zeros(n, dtype=np.float32) if self.config.use_critic else None
        was_training = self.model.training
        self.model.eval()
        try:
            view = self._view(batch)
            samples = np.arange(self.num_samples(batch))
            for index, rows, real in self._micro_batches(batch, view, samples):
                r = rows["response_ids"].shape[1]
                scored = None
                if need_policy_pass:
                    scored = _score(self.scorer, rows, temperature=self.temperature,
                                    with_values=self.value_head is not None)
                if not real:  # a padding pass (other ranks' collectives): nothing to keep
                    if ref is not None:
                        self._reference_log_probs(rows)
                    if values is not None and self.critic is not None:
                        self._values(rows, None)
                    continue
                if old is not None:
                    old[index, :r] = scored.log_probs.float().cpu().numpy()
                if ref is not None:
                    ref[index, :r] = self._reference_log_probs(rows)
                if values is not None:
                    head = scored.values if scored is not None else None
                    values[index] = self._values(rows, head).float().cpu().numpy()
                if progress is not None:
                    progress.update(1)
            bootstrap = None
            if self.config.bootstrap_truncated and batch.bootstrap_prompt_ids is not None:
                bootstrap = self._bootstrap_values(batch, progress)
        finally:
            self.model.train(was_training)
        # each row was filled by exactly one rank (the others hold zeros there)
        old, ref, values, bootstrap = (
            None if array is None else distributed.all_reduce_sum(array, self.ranks)
            for array in (old, ref, values, bootstrap))
        mask = batch.response_mask.astype(bool)
        if old is not None:
            old[~mask] = 0.0
        if ref is not None:
            ref[~mask] = 0.0
        return batch.with_scores(old_log_probs=old, ref_log_probs=ref, values=values,
                                 bootstrap_values=bootstrap)

    def score_passes(self, batch: StepBatch) -> int:
        """Micro-batch passes :meth:`score` makes on ``batch`` (its progress total)."""
        micro = self.learner.micro_batch_size
        passes = distributed.passes(self.num_samples(batch), micro, self.ranks)
        if self.config.bootstrap_truncated and batch.bootstrap_prompt_ids is not None:
            passes += distributed.passes(batch.bootstrap_prompt_ids.shape[0], micro,
                                         self.ranks)
        return passes

    def _bootstrap_values(self, batch: StepBatch, progress: Any = None) -> np.ndarray:
        """(K,) float32 critic values of ``batch.bootstrap_prompt_ids``, in micro-batches."""
        k = batch.bootstrap_prompt_ids.shape[0]
        values = np.zeros(k, dtype=np.float32)
        for index, real in self._my_chunks(np.arange(k)):
            ids, mask = _prompt_rows(batch.bootstrap_prompt_ids, batch.bootstrap_prompt_mask,
                                     index, self.device)
            computed = self._prompt_values(ids, mask).float().cpu().numpy()
            if real:  # a padding pass only matches the other ranks' collectives
                values[index] = computed
            if progress is not None:
                progress.update(1)
        return values

    def _reference_log_probs(self, rows: dict[str, torch.Tensor]) -> Any:
        if self.reference_scorer is not None:
            scored = _score(self.reference_scorer, rows, temperature=self.temperature)
        else:
            with self.model.disable_adapter():
                scored = _score(self.scorer, rows, temperature=self.temperature)
        return scored.log_probs.float().cpu().numpy()

    def _values(self, rows: dict[str, torch.Tensor], head_values: torch.Tensor | None
                ) -> torch.Tensor:
        if self.critic is not None and "sequence_ids" in rows:
            return self.critic.transcript_values(rows["sequence_ids"], rows["sequence_mask"],
                                                 rows["sequence_index"],
                                                 rows["response_starts"])
        if self.critic is not None:
            return self.critic(rows["prompt_ids"], rows["prompt_mask"])
        if head_values is None:
            raise RuntimeError("PPO needs a critic; none was built")
        return head_values

    def _prompt_values(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor
                       ) -> torch.Tensor:
        """Critic values of prompts with no response: (B, P), (B, P) -> (B,)."""
        if self.critic is not None:
            return self.critic(prompt_ids, prompt_mask)
        return self.scorer.prompt_values(prompt_ids, prompt_mask)

    # ------------------------------------------------------------------ phase 2
    def advantages(self, batch: StepBatch) -> Advantages:
        """Per-step advantages of a scored batch from the configured estimator
        (:func:`~algorithms.estimation.estimate_advantages`)."""
        return estimate_advantages(batch, self.config)

    # ------------------------------------------------------------------ phase 3
    def micro_batches_per_update(self, batch: StepBatch | int) -> int:
        """Forward/backward passes :meth:`update` makes for ``batch`` (a batch or its
        :meth:`num_samples`)."""
        learner = self.learner
        full, rest = divmod(self.num_samples(batch), learner.mini_batch_size)
        micro = learner.micro_batch_size
        per_mini = distributed.passes(learner.mini_batch_size, micro, self.ranks)
        last = distributed.passes(rest, micro, self.ranks)
        return learner.epochs * (full * per_mini + last)

    def update(self, batch: StepBatch, signals: Advantages, *, seed: int,
               progress: Any = None) -> dict[str, float]:
        """PPO-clip epochs over mini-batches; return averaged diagnostics.

        Args:
            batch: the scored batch (``old_log_probs`` set; ``values`` for PPO).
            signals: the output of :meth:`advantages`.
            seed: seeds mini-batch shuffling (``learner.shuffle``) and torch's RNG for
                this update.
            progress: optional tqdm-like bar, advanced once per micro-batch.

        Returns:
            ``policy_loss``, ``kl_ref``, ``entropy``, ``approx_kl``, ``clip_fraction``,
            ``dual_clip_fraction``, ``grad_norm`` (mean over optimizer steps),
            ``skipped_steps`` (share of optimizer steps skipped), ``value_loss`` and
            ``explained_variance`` (PPO), ``optimizer_steps``, ``update_tokens``.
        """
        if batch.old_log_probs is None and not self.single_pass(batch):
            raise ValueError("update needs old log-probs: call score() first")
        if self.config.use_critic and (signals.returns is None or batch.values is None):
            raise ValueError("PPO update needs returns and old values")
        learner = self.learner
        rng = np.random.default_rng(seed)
        devices = [self.device] if self.device.type == "cuda" else []
        totals: dict[str, list[float]] = {}
        tokens = 0
        view = self._view(batch)
        self.model.train()
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            for _ in range(learner.epochs):
                order = (rng.permutation(self.num_samples(batch)) if learner.shuffle
                         else np.arange(self.num_samples(batch)))
                for mini in _chunks(order, learner.mini_batch_size):
                    stats = self._mini_batch_step(batch, view, signals, mini, progress)
                    mini_rows = mini if view is None else view.rows_of(mini)
                    tokens += int(batch.response_mask[mini_rows].sum())
                    for key, value in stats.items():
                        totals.setdefault(key, []).append(value)
        result = {key: float(np.mean(values)) for key, values in totals.items()}
        result["optimizer_steps"] = float(len(totals.get("grad_norm", [])))
        result["update_tokens"] = float(tokens)
        if signals.returns is not None and batch.values is not None:
            variance = float(np.var(signals.returns))
            residual = float(np.var(signals.returns - batch.values))
            result["explained_variance"] = 1.0 - residual / variance if variance > 0 else 0.0
        return result

    @cached_property
    def loss_recipe(self) -> losses.LossRecipe:
        """The actor loss's terms, from ``learner`` (:func:`~algorithms.losses.policy_loss`)."""
        learner = self.learner
        return losses.LossRecipe(
            clip_eps_low=learner.clip_eps if learner.clip_eps_low is None
            else learner.clip_eps_low,
            clip_eps_high=learner.clip_eps if learner.clip_eps_high is None
            else learner.clip_eps_high,
            dual_clip=learner.dual_clip, aggregation=learner.loss_aggregation,
            kl_coef=learner.kl_coef, kl_estimator=learner.kl_estimator,
            entropy_coef=learner.entropy_coef, policy_loss=learner.policy_loss,
            # verl divides by the padded response width: the maximum response length
            norm_length=(self.config.generation.max_new_tokens
                         if learner.loss_aggregation == "seq-mean-token-sum-norm" else None))

    def _micro_weights(self, chunk_tokens: int, mini_tokens: int, real: bool
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
        if self.learner.micro_batch_weighting == "tokens":
            return share, share
        return self.learner.micro_batch_size / self.learner.mini_batch_size, share

    def _mini_batch_step(self, batch: StepBatch, view: TranscriptView | None,
                         signals: Advantages, mini: np.ndarray, progress: Any = None
                         ) -> dict[str, float]:
        """One optimizer step over the samples ``mini`` (steps, or trajectories with a
        ``view``)."""
        learner = self.learner
        recipe = self.loss_recipe
        mini_rows = mini if view is None else view.rows_of(mini)
        mini_tokens = max(1, int(batch.response_mask[mini_rows].sum()))
        sums = {"policy_loss": 0.0, "kl_ref": 0.0, "entropy": 0.0, "approx_kl": 0.0,
                "clip_fraction": 0.0, "dual_clip_fraction": 0.0}
        value_loss_sum = 0.0
        self.optimizer.zero_grad(set_to_none=True)
        if self.critic_optimizer is not None:
            self.critic_optimizer.zero_grad(set_to_none=True)
        # FSDP2 averages gradients over ranks: scaled by the world size, the sum of the
        # ranks' weighted losses has the one-process gradient (module docstring of
        # algorithms.distributed)
        scale = float(self.ranks.world_size)
        for micro, rows, real in self._micro_batches(batch, view, mini):
            mask = rows["response_mask"].float()
            weight, stats_weight = self._micro_weights(int(mask.sum().item()), mini_tokens,
                                                       real)
            scored = _score(self.scorer, rows, temperature=self.temperature,
                            with_entropy=True, entropy_grad=learner.entropy_coef > 0,
                            with_values=self.value_head is not None)
            token_advantages = losses.broadcast_to_tokens(signals.advantages[micro], mask)
            old_log_probs = rows.get("old_log_probs", scored.log_probs.detach())
            loss, stats = losses.policy_loss(
                scored.log_probs, old_log_probs, token_advantages, mask, recipe,
                ref_log_probs=rows.get("ref_log_probs"), entropy=scored.entropy)
            total = loss * weight
            if self.config.use_critic:
                value_loss = self._value_loss(batch, signals, micro, rows, scored.values)
                value_weight = len(micro) / len(mini_rows) if real else 0.0
                value_loss_sum += float(value_loss.item()) * value_weight
                if self.value_head is not None:
                    total = total + learner.value_coef * value_loss * value_weight
                else:
                    (value_loss * (value_weight * scale)).backward()
            (total * scale).backward()
            for key in sums:
                sums[key] += float(stats[key].item()) * stats_weight
            if progress is not None:
                progress.update(1)
        parameters = [p for group in self.optimizer.param_groups for p in group["params"]]
        grad_norm = distributed.global_norm(
            torch.nn.utils.clip_grad_norm_(parameters, learner.max_grad_norm))
        if np.isfinite(grad_norm):  # verl skips the step on a non-finite norm
            self.optimizer.step()
        if self.critic_optimizer is not None:
            critic_norm = distributed.global_norm(
                torch.nn.utils.clip_grad_norm_(self.critic.parameters(), learner.max_grad_norm))
            if np.isfinite(critic_norm):
                self.critic_optimizer.step()
        if self.config.use_critic:
            sums["value_loss"] = value_loss_sum
        stats = distributed.sum_stats(sums, self.ranks)
        stats["grad_norm"] = grad_norm
        stats["skipped_steps"] = float(not np.isfinite(grad_norm))
        return stats

    def _value_loss(self, batch: StepBatch, signals: Advantages, micro: np.ndarray,
                    rows: dict[str, torch.Tensor], head_values: torch.Tensor | None
                    ) -> torch.Tensor:
        values = self._values(rows, head_values)
        old_values = torch.as_tensor(batch.values[micro], dtype=torch.float32,
                                     device=self.device)
        returns = torch.as_tensor(signals.returns[micro], dtype=torch.float32,
                                  device=self.device)
        loss, _ = losses.clipped_value_loss(values, old_values, returns,
                                            torch.ones_like(returns, dtype=torch.bool),
                                            clip_range=self.learner.value_clip)
        return loss

    # ------------------------------------------------------------------ state
    @cached_property
    def model_identity(self) -> dict[str, Any]:
        """:func:`~algorithms.policy.model_identity` of the policy, computed once (the
        frozen weights it hashes never change during a run)."""
        return model_identity(self.policy)
