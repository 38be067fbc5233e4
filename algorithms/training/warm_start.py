"""Start a run from another run's checkpoint (``--model.init-checkpoint``): an SFT warm start.

The checkpoint's trained weights become the run's *starting model*: full weights are
loaded as they are; LoRA adapters are attached with the checkpoint's own settings, loaded
and merged into the base weights. The run then wraps that model as usual (fresh LoRA
adapters when ``model.lora_rank`` > 0), so the policy starts as the checkpoint's model and
so does the KL reference (adapters off, or the frozen copy of a full fine-tune) -- as
verl-agent and RAGEN start RL from an SFT model path for both actor and reference.

Identity: a checkpoint records :func:`base_fingerprint` of the model it was trained from
(``meta["model"]["base_fingerprint"]``, written by :mod:`algorithms.sft.trainer`); it is compared
with this run's base model before any tensor is read, and a mismatch is refused with one
line (:class:`~algorithms.runs.checkpoint.CheckpointError`). An RL checkpoint without it
(trained with LoRA) is checked by its frozen-weights fingerprint instead, which is the
same hash of its base. Checkpoints written later by the warm-started run identify its
merged starting model, so resuming or evaluating them needs the same
``--model.init-checkpoint``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from algorithms.config import ModelConfig
from algorithms.engines.vllm import hf_weight_name
from algorithms.runs.checkpoint import (
    STARTED_FROM,
    CheckpointError,
    checkpoint_meta,
    load_checkpoint,
    resolve_checkpoint,
)
from algorithms.runs.distributed import full_tensor
from algorithms.training.lora import attach_lora
from algorithms.training.policy import Policy, wrap_model

_ADAPTER_MARK = "lora_"


def base_fingerprint(model: nn.Module) -> str:
    """SHA-256 of a model's base weights: every parameter but LoRA adapters.

    Names are the plain HF names (PEFT's prefixes stripped), so the hash of a model is the
    same with or without adapters attached, and equals
    :func:`~algorithms.training.policy.frozen_weights_fingerprint` of the model with adapters (all
    its base weights frozen). Reads every byte once (0.7 s for SmolLM2-135M on 2 cores).

    Returns:
        ``"sha256:<hex>"``.
    """
    weights = sorted((hf_weight_name(name) or name, parameter)
                     for name, parameter in model.named_parameters()
                     if _ADAPTER_MARK not in name)
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, parameter in weights:
            tensor = full_tensor(parameter.detach()).to("cpu").contiguous().reshape(-1)
            digest.update(f"{name}|{tensor.dtype}|{tuple(parameter.shape)}\n".encode())
            digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return f"sha256:{digest.hexdigest()}"


def _saved_base(meta: dict[str, Any]) -> tuple[str | None, str]:
    """The base-model fingerprint a checkpoint was trained from, and its source."""
    model = meta.get("model") or {}
    fingerprint = model.get("base_fingerprint") or model.get("frozen_fingerprint")
    return fingerprint, str(model.get("base_source", "an unknown model"))


def apply_init_checkpoint(policy: Policy, config: ModelConfig, *, seed: int = 0) -> Policy:
    """``policy`` rebuilt on the model of checkpoint ``config.init_checkpoint``.

    Args:
        policy: the freshly loaded policy (LoRA adapters, if any, untrained).
        config: the run's model settings (``init_checkpoint`` set; its LoRA settings are
            applied to the merged model).
        seed: seed of the fresh adapters' initialisation.

    Returns:
        A new :class:`Policy` on the same (now modified) base weights; ``source`` says
        which checkpoint it started from.

    Raises:
        CheckpointError: no checkpoint there, one trained from another base model, or
            weights that do not fit this model.
    """
    path = Path(str(config.init_checkpoint))
    meta = checkpoint_meta(path)
    saved, saved_source = _saved_base(meta)
    model = policy.model.unload() if policy.lora else policy.model  # adapters off, unmerged
    current = base_fingerprint(model)
    if saved is None:
        raise CheckpointError(
            f"--model.init-checkpoint {path}: the checkpoint does not say which base model "
            "it was trained from (a full fine-tune saved by an RL run); start from an --algo "
            "sft checkpoint, or a LoRA one")
    if saved != current:
        raise CheckpointError(
            f"--model.init-checkpoint {path} was trained from {saved_source} ({saved[:19]}), "
            f"not this run's model {policy.source} ({current[:19]}); pass that run's "
            "--model.name-or-path / --model.gguf-file / --model.dtype")
    weights = load_checkpoint(path, map_location="cpu", optimizer=False)["learner"]["model"]
    saved_model = meta.get("model") or {}
    lora = saved_model.get("lora")
    try:
        if lora is not None:
            targets = list(lora["target_modules"])
            adapters = ModelConfig(lora_rank=int(lora["rank"]), lora_alpha=lora["alpha"],
                                   lora_target_modules=tuple(targets))
            # a vision-language model's adapters were placed by a pattern (its language
            # model only, vision_model.language_lora_targets), saved as its one entry
            pattern = targets[0] if len(targets) == 1 and not targets[0].isidentifier() \
                else None
            wrapped = attach_lora(model, adapters, targets=pattern)
            _load_exactly(wrapped, weights, trained_only=True)
            model = wrapped.merge_and_unload()
        else:
            # a full fine-tune with frozen weights (a vision tower) stored only the trained
            # ones; the frozen ones are this base model's, checked by the fingerprint
            _load_exactly(model, weights,
                          trained_only=saved_model.get("frozen_fingerprint") is not None)
    except (ValueError, RuntimeError) as error:
        raise CheckpointError(f"--model.init-checkpoint {path} does not fit this run's "
                              f"model: {error}") from None
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    vision = getattr(policy, "vision", None)
    return wrap_model(model, policy.tokenizer, config,
                      source=f"{policy.source}{STARTED_FROM}{resolve_checkpoint(path)}",
                      path=policy.path, gguf_file=policy.gguf_file, seed=seed,
                      image_processor=None if vision is None else vision.image_processor)


def _load_exactly(model: nn.Module, weights: dict[str, torch.Tensor], *,
                  trained_only: bool) -> None:
    """Load ``weights`` into ``model``: every name must exist, and they must cover the
    adapters (``trained_only``: a LoRA checkpoint, or a full fine-tune that left some
    weights frozen, which are the base model's own) or every parameter."""
    names = {name for name, _ in model.named_parameters()}
    unknown = sorted(set(weights) - names)
    if unknown:
        raise ValueError(f"unknown weights {unknown[:3]}")
    needed = {name for name in names if _ADAPTER_MARK in name} if trained_only else names
    missing = sorted(needed - set(weights))
    if missing:
        raise ValueError(f"no weights for {missing[:3]}")
    with torch.no_grad():
        parameters = dict(model.named_parameters())
        for name, tensor in weights.items():
            parameters[name].copy_(tensor.to(parameters[name].dtype))
