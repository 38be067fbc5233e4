"""What the learner trains and scores with: the KL reference, the critic, their scorers
(sharded under torchrun) and the optimizers, built from the policy and the config.

- Reference (``learner.kl_coef > 0``): a frozen copy of the policy's model; none with
  LoRA, whose reference is the base model with the adapters disabled (unless weights
  beside the adapters train too -- a vision tower with ``model.train_vision_tower`` --:
  then a frozen copy of the starting model).
- Critic (``config.use_critic``): a value head on the policy's trunk (``model.critic
  value_head``, trained by the policy's optimizer at ``critic_lr``) or a separate model
  (``separate``: loaded from ``model.critic_name_or_path``, or the policy's checkpoint,
  with its own optimizer).
- Data parallel (``ranks.world_size`` > 1, :mod:`algorithms.runs.distributed`): the policy, the
  reference and the critic are sharded with FSDP2 here, before the optimizers see their
  parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from algorithms.config import TrainConfig
from algorithms.objectives import losses
from algorithms.precision import autocast_dtype, mark_autocast
from algorithms.runs import distributed
from algorithms.runs.distributed import Ranks
from algorithms.training.lora import adapters_only
from algorithms.training.policy import Policy, frozen_copy, hidden_size, load_causal_lm, split_model
from algorithms.training.scoring import Scorer, SeparateCritic, ValueHead


@dataclass
class LearnerModels:
    """The modules and optimizers of a learner.

    Attributes:
        model: the policy's model (trained in place).
        reference: the frozen KL reference, or ``None`` (no KL, or LoRA).
        value_head: the ``value_head`` critic, or ``None``.
        critic: the ``separate`` critic, or ``None``.
        scorer: the policy's (and value head's) scorer, sharded under torchrun.
        reference_scorer: the reference's scorer, or ``None``.
        optimizer: AdamW over the policy's trainable parameters (group 0) and the value
            head's (group 1, at ``critic_lr``).
        critic_optimizer: AdamW of the ``separate`` critic, or ``None``.
        vision: the policy's :class:`~algorithms.engines.vision.VisionProcessor` (the
            images of a visual env's rows), or ``None``.
    """

    model: nn.Module
    reference: nn.Module | None
    value_head: ValueHead | None
    critic: SeparateCritic | None
    scorer: Scorer
    reference_scorer: Scorer | None
    optimizer: torch.optim.Optimizer
    critic_optimizer: torch.optim.Optimizer | None
    vision: Any = None


def build_learner_models(policy: Policy, config: TrainConfig, device: torch.device, *,
                         critic_backbone: nn.Module | None, ranks: Ranks) -> LearnerModels:
    """The reference, critic, scorers and optimizers of a learner of ``policy``
    (module docstring).

    Args:
        policy: the loaded policy.
        config: the full training config.
        device: where the models live.
        critic_backbone: a prebuilt backbone for a ``separate`` critic, or ``None`` to load
            it from ``model.critic_name_or_path`` (or the policy's checkpoint).
        ranks: this process's place in a data-parallel job.
    """
    learner = config.learner
    model = policy.model
    if config.use_critic and policy.vision is not None:
        raise ValueError("PPO's critic does not take images: train a vision-language policy "
                         "with a group estimator (--algo gigpo, grpo, ...)")
    reference = None
    if learner.kl_coef > 0 and not adapters_only(model):
        reference = frozen_copy(model)
    value_head: ValueHead | None = None
    critic: SeparateCritic | None = None
    if config.use_critic:
        width = hidden_size(model)
        if config.model.critic == "value_head":
            value_head = ValueHead(width).to(device)
        else:
            if critic_backbone is None:
                critic_name = config.model.critic_name_or_path
                lm = load_causal_lm(config.model, device, name_or_path=critic_name)[0]
                critic_backbone = split_model(lm)[0]
            critic = SeparateCritic(critic_backbone, width).to(device)
            if autocast_dtype(model) is not None:  # mixed precision: as the policy
                mark_autocast(critic, autocast_dtype(model))
    scorer = Scorer(model, value_head)
    reference_scorer = Scorer(reference) if reference is not None else None
    if ranks.distributed:
        distributed.shard(scorer, device=device, methods=("prompt_values",))
        if reference_scorer is not None:
            distributed.shard(reference_scorer, device=device)
        if critic is not None:
            distributed.shard(critic, device=device, methods=("transcript_values",))
    # after sharding: FSDP2 replaces the parameters with sharded ones
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=learner.lr, weight_decay=learner.weight_decay)
    if value_head is not None:
        optimizer.add_param_group({"params": list(value_head.parameters()),
                                   "lr": learner.critic_lr})
    critic_optimizer = None
    if critic is not None:
        critic_optimizer = torch.optim.AdamW(critic.parameters(), lr=learner.critic_lr,
                                             weight_decay=learner.weight_decay)
    return LearnerModels(model, reference, value_head, critic, scorer, reference_scorer,
                         optimizer, critic_optimizer, vision=policy.vision)


def loss_recipe(config: TrainConfig) -> losses.LossRecipe:
    """The actor loss's terms, from ``config.learner`` (:func:`~algorithms.objectives.losses.policy_loss`)."""
    learner = config.learner
    return losses.LossRecipe(
        clip_eps_low=learner.clip_eps if learner.clip_eps_low is None
        else learner.clip_eps_low,
        clip_eps_high=learner.clip_eps if learner.clip_eps_high is None
        else learner.clip_eps_high,
        dual_clip=learner.dual_clip, aggregation=learner.loss_aggregation,
        kl_coef=learner.kl_coef, kl_estimator=learner.kl_estimator,
        entropy_coef=learner.entropy_coef, policy_loss=learner.policy_loss,
        weight_kl=learner.behaviour_weight_kl,
        # verl divides by the padded response width: the maximum response length
        norm_length=(config.generation.max_new_tokens
                     if learner.loss_aggregation == "seq-mean-token-sum-norm" else None))
