"""Generation engines: sample responses for a batch of tokenized prompts.

Both engines implement :class:`GenerationEngine`. ``hf`` (transformers ``generate``) runs
anywhere; ``vllm`` runs on a GPU and receives the new weights in place after every
update. :func:`make_engine` builds the one the config asks for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from algorithms.config import GenerationConfig


class EngineUnavailableError(RuntimeError):
    """The requested engine cannot run here (missing package or no GPU)."""


class GenerationEngine(Protocol):
    """What the rollout needs from an engine."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        temperature: float,
        max_new_tokens: int,
        seed: int,
    ) -> list[tuple[int, ...]]:
        """Sample one response per prompt; return the response token ids (EOS included
        when the model stopped by itself, padding never)."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the engine sample from ``model``'s current weights."""
        ...

    def release(self) -> None:
        """Free accelerator memory between rollouts (no-op where nothing is held)."""
        ...


def make_engine(config: GenerationConfig, policy: Any, device: Any, *, seed: int,
                max_model_len: int) -> GenerationEngine:
    """The engine ``config.engine`` names, for ``policy`` (an :class:`~algorithms.policy.Policy`).

    Raises:
        EngineUnavailableError: ``vllm`` without the package or without a GPU.
    """
    if config.engine == "hf":
        from algorithms.engines.hf import HFEngine

        return HFEngine(policy.model, policy.tokenizer, batch_size=config.batch_size,
                        top_p=config.top_p)
    if config.engine == "vllm":
        from algorithms.engines.vllm import VLLMEngine

        return VLLMEngine.for_policy(policy, config, device=device, seed=seed,
                                     max_model_len=max_model_len)
    raise ValueError(f"unknown engine {config.engine!r}")
