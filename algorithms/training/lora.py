"""LoRA on the policy: attaching adapters (seeded), whether a model trains its adapters
only, and the adapter settings a checkpoint's adapter weights fit.

:func:`~algorithms.training.policy.wrap_model` attaches them when ``model.lora_rank > 0``
(on a vision-language model, on its language model only:
:func:`~algorithms.training.vision_model.language_lora_targets`). With adapters only
trained, disabling them gives the base model back, the KL reference without a copy
(:func:`adapters_only`).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from algorithms.config import ModelConfig
from algorithms.training import vision_model


def attach_lora(model: Any, config: ModelConfig, *, seed: int = 0,
                language_only: bool = False, targets: str | None = None) -> Any:
    """Wrap ``model`` with LoRA adapters on the configured modules that exist in it (with
    ``language_only``, a vision-language model's: those outside its vision tower,
    :func:`~algorithms.training.vision_model.language_lora_targets`; ``targets``: PEFT's
    ``target_modules`` pattern as given, e.g. a saved one).

    The adapters' random initialisation (PEFT draws ``lora_A`` from torch's global RNG;
    ``lora_B`` starts at zero, so the wrapped model computes what ``model`` did) is drawn
    inside :func:`torch.random.fork_rng` seeded with ``seed``: it is a function of the
    run's seed, and the caller's global RNG state is left as it was.
    """
    from peft import LoraConfig, get_peft_model

    chosen: list[str] | str
    if targets is not None:
        chosen = targets
    elif language_only:
        chosen = vision_model.language_lora_targets(model, config.lora_target_modules)
    else:
        present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        chosen = [t for t in config.lora_target_modules if t in present]
        if not chosen:
            raise ValueError(
                f"none of lora_target_modules {config.lora_target_modules} exist in the "
                f"model; module names include {sorted(present)[:20]}"
            )
    lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha,
                      lora_dropout=config.lora_dropout, target_modules=chosen,
                      bias="none", task_type="CAUSAL_LM")
    devices = sorted({parameter.device.index or 0 for parameter in model.parameters()
                      if parameter.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices), warnings.catch_warnings():
        # PEFT (0.21) reads transformers' deprecated ``is_gradient_checkpointing`` here,
        # a FutureWarning on every run that is not ours to fix; the value read is right
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated",
                                category=FutureWarning)
        torch.manual_seed(seed)
        return get_peft_model(model, lora)


def adapters_only(model: nn.Module) -> bool:
    """Whether a LoRA model trains its adapters and nothing else (disabling them then gives
    the base model back: the KL reference without a copy)."""
    return hasattr(model, "disable_adapter") and all(
        "lora_" in name for name, parameter in model.named_parameters()
        if parameter.requires_grad)


def lora_settings(model: Any) -> dict[str, Any] | None:
    """The LoRA adapter settings of ``model`` that its adapter weights only fit with:
    ``{"rank", "alpha", "target_modules"}`` (the adapted module names, sorted), or
    ``None`` for a model without adapters."""
    configs = getattr(model, "peft_config", None)
    if not configs:
        return None
    lora = configs["default"]
    targets = lora.target_modules
    return {"rank": int(lora.r), "alpha": lora.lora_alpha,
            "target_modules": [targets] if isinstance(targets, str) else sorted(targets)}
