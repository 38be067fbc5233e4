"""The one learner loop: PPO-clip with a KL penalty, for every ``--algo`` but ``sft``:
the group estimators (GiGPO, HGPO, GraphGPO, GRPO, RLOO, REINFORCE++; Dr.GRPO and GSPO
through their loss settings) and PPO.

An iteration after the rollout:

0. :meth:`Learner.training_batch` -- the rollout's steps that are trained on. A step whose
   env call failed is never in a batch (see :mod:`algorithms.agent.rollout`); the group
   estimators also leave out the earlier steps of a trajectory that ended on an env error, PPO keeps
   them (reasons below).
1. :meth:`Learner.score` -- old log-probs under the sampling policy, reference log-probs
   (frozen copy, or the base model with LoRA adapters disabled), and critic values (PPO):
   V(s_t) of every step and, with ``learner.bootstrap_truncated``, V(s_T) of the prompt
   that would have followed each trajectory cut by a step limit or an env error.
2. :meth:`Learner.advantages` -- one advantage per step from the estimator the config
   names: ``gigpo`` (Eq. 8 of Feng et al. 2025), ``hgpo`` (weighted history groups),
   ``graphgpo`` (the episode advantage plus state-graph distance returns), ``grpo``
   (Eq. 3), ``rloo``, ``reinforce_pp`` (``docs/estimators.md``) or ``gae`` (turn-level GAE with the critic's
   values; a cut -- step limit or env error -- bootstraps from V(s_T), a termination does
   not).
3. :meth:`Learner.update` -- ``epochs`` passes over mini-batches (in batch order, or
   shuffled with ``learner.shuffle``); each mini-batch is one optimizer step accumulated
   over micro-batches. The step's advantage is given to every token of its response. The
   loss of a micro-batch is :func:`~algorithms.objectives.losses.policy_loss`:
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
In the transcript layout (:mod:`algorithms.agent.rollout`) a trajectory is one sample: one
forward pass over its whole transcript scores every response in it
(:func:`~algorithms.training.scoring.score_transcripts`), and the two sizes count trajectories.
Either way the per-token arrays the losses see are the same (N, R) response tokens with
the same step advantages -- the env's text between turns is never gathered, so it enters
no policy, KL or entropy term and no token mean -- and the advantage estimators run on
the same per-step rows, unchanged.

Randomness (mini-batch order, LoRA dropout) is drawn from generators seeded by
``(seed, iteration)``, so an iteration's result depends only on the weights, the
optimizer state and the batch -- which is what makes ``--resume`` exact.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import nn

from algorithms.agent.step_batch import StepBatch
from algorithms.config import TrainConfig
from algorithms.objectives import losses
from algorithms.objectives.behaviour_weights import behaviour_as_old, behaviour_weights
from algorithms.runs import distributed
from algorithms.runs.distributed import SINGLE, Ranks
from algorithms.training import batch_scoring
from algorithms.training.estimation import Advantages, estimate_advantages
from algorithms.training.learner_setup import build_learner_models, loss_recipe
from algorithms.training.micro_batches import (
    batch_view,
    chunks,
    micro_batches,
    micro_weights,
    num_samples,
)
from algorithms.training.policy import Policy, model_identity
from algorithms.training.transcript import TranscriptView


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

    Data parallel (``ranks.world_size`` > 1, :mod:`algorithms.runs.distributed`): the policy,
    the KL reference and the critic are sharded with FSDP2 as they are built
    (:mod:`algorithms.training.learner_setup`), before the optimizers see their parameters;
    every rank is given the same global batch and computes its share of each pass, so
    the result equals one process's up to summation order.

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
        self.config = config
        self.learner = config.learner
        self.device = device
        self.ranks = ranks
        self.models = build_learner_models(policy, config, device,
                                           critic_backbone=critic_backbone, ranks=ranks)
        # the same objects as self.models', named for the checkpoint code and the tests
        models = self.models
        self.model, self.reference = models.model, models.reference
        self.value_head, self.critic = models.value_head, models.critic
        self.scorer, self.reference_scorer = models.scorer, models.reference_scorer
        self.optimizer, self.critic_optimizer = models.optimizer, models.critic_optimizer

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
            the group estimators, a batch without those trajectories (possibly empty: then
            there is nothing to train on).
        """
        if self.config.estimator == "gae" or not batch.env_error.any():
            return batch
        return batch.select(np.flatnonzero(~batch.env_error))

    # ------------------------------------------------------------------ samples
    num_samples = staticmethod(num_samples)
    """Samples of a batch (module docstring): steps in the window layout, trajectories in
    the transcript layout (:func:`~algorithms.training.micro_batches.num_samples`)."""

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

    def score(self, batch: StepBatch, *, progress: Any = None,
              with_old_log_probs: bool = True) -> StepBatch:
        """Old log-probs, reference log-probs (when ``kl_coef > 0``) and values (PPO), at
        :attr:`temperature` (:func:`~algorithms.training.batch_scoring.score_batch`).

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
        if not with_old_log_probs and not self.single_pass(batch):
            raise ValueError("old log-probs can only be skipped for a single-pass update")
        return batch_scoring.score_batch(self.models, batch, self.config, ranks=self.ranks,
                                   device=self.device, temperature=self.temperature,
                                   with_old_log_probs=with_old_log_probs, progress=progress)

    def score_passes(self, batch: StepBatch) -> int:
        """Micro-batch passes :meth:`score` makes on ``batch`` (its progress total)."""
        return batch_scoring.score_passes(batch, self.config, self.ranks)


    # ------------------------------------------------------------------ phase 2
    def advantages(self, batch: StepBatch) -> Advantages:
        """Per-step advantages of a scored batch from the configured estimator
        (:func:`~algorithms.training.estimation.estimate_advantages`)."""
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
               progress: Any = None, before_step: Callable[[], None] | None = None
               ) -> dict[str, float]:
        """PPO-clip epochs over mini-batches; return averaged diagnostics.

        Args:
            batch: the scored batch (``old_log_probs`` set; ``values`` for PPO).
            signals: the output of :meth:`advantages`.
            seed: seeds mini-batch shuffling (``learner.shuffle``) and torch's RNG for
                this update.
            progress: optional tqdm-like bar, advanced once per micro-batch.
            before_step: called before each optimizer step, while the weights and the
                optimizer state are still those before it (a SIGTERM's fallback copy,
                :mod:`algorithms.runs.termination`).

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
        if self.behaviour_weighting and batch.behaviour_log_probs is None:
            raise ValueError(
                "run.max_staleness > 0 and learner.tis_cap weight each token by the "
                "engine's log-probs, and this batch has none: use an engine that reports "
                "them (hf, vllm)")
        learner = self.learner
        rng = np.random.default_rng(seed)
        devices = [self.device] if self.device.type == "cuda" else []
        totals: dict[str, list[float]] = {}
        tokens = 0
        view = batch_view(batch)
        self.model.train()
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            for _ in range(learner.epochs):
                order = (rng.permutation(self.num_samples(batch)) if learner.shuffle
                         else np.arange(self.num_samples(batch)))
                for mini in chunks(order, learner.mini_batch_size):
                    stats = self._mini_batch_step(batch, view, signals, mini, progress,
                                                  before_step)
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

    @property
    def behaviour_weighting(self) -> bool:
        """Whether the behaviour weights are computed
        (:mod:`algorithms.objectives.behaviour_weights`): with ``run.max_staleness`` > 0
        (the decoupled objective weights each token's policy loss by them; with
        :attr:`behaviour_clip` they reach only the KL term and the logs), and with
        ``learner.tis_cap`` (truncated importance sampling)."""
        return self.config.run.max_staleness > 0 or self.learner.tis_cap is not None

    @property
    def behaviour_clip(self) -> bool:
        """Whether PPO's ratio is taken against the behaviour policy's log-probs
        (``learner.staleness_correction`` ``"behaviour-clip"`` with ``run.max_staleness``
        > 0) instead of the decoupled objective's weights."""
        return (self.config.run.max_staleness > 0
                and self.learner.staleness_correction == "behaviour-clip")

    @cached_property
    def loss_recipe(self) -> losses.LossRecipe:
        """The actor loss's terms (:func:`~algorithms.training.learner_setup.loss_recipe`)."""
        return loss_recipe(self.config)

    def _mini_batch_step(self, batch: StepBatch, view: TranscriptView | None,
                         signals: Advantages, mini: np.ndarray, progress: Any = None,
                         before_step: Callable[[], None] | None = None
                         ) -> dict[str, float]:
        """One optimizer step over the samples ``mini`` (steps, or trajectories with a
        ``view``)."""
        learner = self.learner
        recipe = self.loss_recipe
        mini_rows = mini if view is None else view.rows_of(mini)
        mini_tokens = max(1, int(batch.response_mask[mini_rows].sum()))
        sums = {"policy_loss": 0.0, "kl_ref": 0.0, "entropy": 0.0, "approx_kl": 0.0,
                "clip_fraction": 0.0, "dual_clip_fraction": 0.0}
        if self.behaviour_weighting:
            sums.update(is_weight_mean=0.0, is_clipped_fraction=0.0, behaviour_gap=0.0)
        weight_max = 0.0
        value_loss_sum = 0.0
        self.optimizer.zero_grad(set_to_none=True)
        if self.critic_optimizer is not None:
            self.critic_optimizer.zero_grad(set_to_none=True)
        # FSDP2 averages gradients over ranks: scaled by the world size, the sum of the
        # ranks' weighted losses has the one-process gradient (module docstring of
        # algorithms.runs.distributed)
        scale = float(self.ranks.world_size)
        for micro, rows, real in micro_batches(batch, view, mini, learner.micro_batch_size,
                                               self.ranks, self.device, self.models.vision):
            mask = rows["response_mask"].float()
            weight, stats_weight = micro_weights(int(mask.sum().item()), mini_tokens, real,
                                                 learner)
            scored = batch_scoring.score_rows(self.scorer, rows, temperature=self.temperature,
                                        with_entropy=True, entropy_grad=learner.entropy_coef > 0,
                                        with_values=self.value_head is not None)
            token_advantages = losses.broadcast_to_tokens(signals.advantages[micro], mask)
            old_log_probs = rows.get("old_log_probs", scored.log_probs.detach())
            token_weights, weight_stats = micro_batch_token_weights(self, rows, old_log_probs, mask)
            kl_weights = None
            if self.behaviour_clip:
                # PPO's ratio against the behaviour policy (staleness_correction
                # "behaviour-clip"): the engine's log-probs replace the learner's as the
                # old policy, and the weights reach only the KL term (with
                # behaviour_weight_kl) and the logged statistics
                old_log_probs = behaviour_as_old(old_log_probs, rows["behaviour_log_probs"])
                token_weights, kl_weights = None, token_weights
            loss, stats = losses.policy_loss(
                scored.log_probs, old_log_probs, token_advantages, mask, recipe,
                ref_log_probs=rows.get("ref_log_probs"), entropy=scored.entropy,
                token_weights=token_weights, kl_weights=kl_weights)
            stats = {**stats, **weight_stats}
            if weight_stats and real:
                weight_max = max(weight_max, float(weight_stats["is_weight_max"].item()))
            total = loss * weight
            if self.config.use_critic:
                values = batch_scoring.critic_values(self.models, rows, scored.values)
                value_loss = losses.step_value_loss(values, batch.values[micro],
                                                    signals.returns[micro],
                                                    clip_range=learner.value_clip)
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
        if before_step is not None:
            before_step()
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
        if self.behaviour_weighting:
            stats["is_weight_max"] = max(distributed.all_gather_objects(weight_max, self.ranks))
        stats["grad_norm"] = grad_norm
        stats["skipped_steps"] = float(not np.isfinite(grad_norm))
        return stats

    # ------------------------------------------------------------------ state
    @cached_property
    def model_identity(self) -> dict[str, Any]:
        """:func:`~algorithms.training.policy.model_identity` of the policy, computed once (the
        frozen weights it hashes never change during a run)."""
        return model_identity(self.policy)


def micro_batch_token_weights(learner: Learner, rows: dict[str, torch.Tensor],
                              old_log_probs: torch.Tensor, mask: torch.Tensor
                              ) -> tuple[torch.Tensor | None, dict[str, Any]]:
    """A :class:`Learner` micro-batch's behaviour weights and their statistics (``None``
    and none when the loss is not weighted)."""
    if not learner.behaviour_weighting:
        return None, {}
    drop = (learner.learner.behaviour_weight_cap if learner.config.run.max_staleness > 0
            else None)
    return behaviour_weights(old_log_probs, rows["behaviour_log_probs"], mask,
                             truncate_at=learner.learner.tis_cap, drop_above=drop)
