"""Generation engines: sample responses for a batch of tokenized prompts.

Every engine implements :class:`GenerationEngine`. ``hf`` (transformers ``generate``) runs
anywhere; ``vllm`` runs on a CUDA GPU or vLLM's CPU backend and receives the new weights
in place after every update; ``openai`` asks an OpenAI-compatible server (evaluation
only: it cannot receive weights). :func:`make_engine` builds the one the config asks for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from algorithms.config import GenerationConfig


class EngineUnavailableError(RuntimeError):
    """The requested engine cannot run here (missing package, no device, no server)."""


@dataclass(frozen=True)
class FailedGeneration:
    """Stands in :meth:`GenerationEngine.generate`'s result for a response the engine could
    not produce (a server request that failed after its retries). The rollout ends that
    trajectory there as an env error, like a crashed env step: the run goes on.

    Attributes:
        error: what went wrong, for the logs.
    """

    error: str


class Response(tuple):
    """One generated response: the tuple of its token ids, carrying the behaviour
    log-probs the engine recorded while sampling it.

    It is a plain ``tuple`` in every other respect (equality with a tuple of the same ids,
    hashing, ``len``, iteration; slicing and ``+`` give plain tuples), so code that only
    wants the tokens never sees the difference. Pickling, ``copy`` and multiprocessing
    keep ``log_probs``.

    Args:
        tokens: the response token ids.
        log_probs: one float per token: log p(token) under the distribution the token was
            sampled from (softmax(logits / temperature), renormalised over the top-p
            nucleus when ``top_p < 1``; 0.0 for every token of greedy decoding), or
            ``None`` when the engine cannot report them.

    Raises:
        ValueError: ``log_probs`` and ``tokens`` differ in length.

    >>> row = Response((5, 7), (-0.5, -1.25))
    >>> row == (5, 7), row[:1], row.log_probs
    (True, (5,), (-0.5, -1.25))
    """

    log_probs: tuple[float, ...] | None

    def __new__(cls, tokens: Sequence[int] = (),
                log_probs: Sequence[float] | None = None) -> Response:
        row = super().__new__(cls, tokens)
        if log_probs is not None:
            log_probs = tuple(float(value) for value in log_probs)
            if len(log_probs) != len(row):
                raise ValueError(f"Response: {len(log_probs)} log-probs for {len(row)} tokens")
        row.log_probs = log_probs
        return row

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (tuple(self), self.log_probs))

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (tuple(self), self.log_probs)


class GenerationEngine(Protocol):
    """What the rollout needs from an engine."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        temperature: float,
        max_new_tokens: int,
        seed: int,
        stop: Sequence[str] = (),
        images: Sequence[Sequence[Any]] | None = None,
    ) -> list[tuple[int, ...]]:
        """Sample one response per prompt; return the response token ids (EOS included
        when the model stopped by itself, padding never), or a :class:`FailedGeneration`
        for a response that could not be produced (remote engines only).

        ``images`` (passed only when a prompt shows one: a visual env and a vision-language
        policy): per prompt, the (H, W, 3) uint8 images its image tokens stand for, in
        order (:mod:`algorithms.engines.vision`).

        A row may be a :class:`Response` (a tuple of the ids carrying the sampled tokens'
        behaviour log-probs, cut with the tokens): the HF, HF-worker and vLLM engines
        return those; the OpenAI engine returns plain tuples.

        A row ends right after the token that completes the first of ``stop`` to appear
        in its decoded response (:func:`stop_length`); that token is kept, nothing after
        it is generated, and the other rows go on."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the engine sample from ``model``'s current weights."""
        ...

    def release(self) -> None:
        """Free accelerator memory between rollouts (no-op where nothing is held)."""
        ...


def resolve_engine(config: GenerationConfig, policy: Any) -> str:
    """``config.engine``, with ``auto`` resolved: ``vllm`` where the vllm package is
    installed, runs here (a CUDA GPU or its CPU backend) and the policy is a local HF
    folder without GGUF (what vLLM loads; e.g. the converted default model); ``hf``
    otherwise (the fallback, which runs anywhere)."""
    if config.engine != "auto":
        return config.engine
    import importlib.util
    import os

    if (importlib.util.find_spec("vllm") is None or policy.gguf_file
            or not os.path.isfile(os.path.join(str(policy.path), "config.json"))):
        return "hf"
    from algorithms.engines.vllm import vllm_backend

    try:
        vllm_backend()
    except EngineUnavailableError:
        return "hf"
    return "vllm"


def stop_length(tokens: Sequence[int], stop: Sequence[str],
                decode: Callable[[Sequence[int]], str]) -> int | None:
    """Length of the shortest prefix of ``tokens`` whose text contains a stop string.

    This is where every engine ends a response: right after the token that completes the
    first stop string to appear (a token that carries characters past the stop string is
    kept whole, as vLLM does with ``include_stop_str_in_output``). Found by bisection, as
    "the prefix's text contains a stop string" only turns from false to true.

    Args:
        tokens: the generated token ids (no prompt).
        stop: the stop strings (empty: never stop).
        decode: token ids -> text (special tokens skipped).

    Returns:
        The number of tokens to keep, or ``None`` when no stop string appears.
    """
    if not stop or not tokens or not _has_stop(decode(tokens), stop):
        return None
    low, high = 1, len(tokens)  # the shortest prefix with a stop string is in [low, high]
    while low < high:
        middle = (low + high) // 2
        if _has_stop(decode(tokens[:middle]), stop):
            high = middle
        else:
            low = middle + 1
    return low


def _has_stop(text: str, stop: Sequence[str]) -> bool:
    return any(s and s in text for s in stop)


def make_engine(config: GenerationConfig, policy: Any, device: Any, *, seed: int,
                max_model_len: int) -> GenerationEngine:
    """The engine ``config.engine`` names (``auto``: :func:`resolve_engine`), for ``policy``
    (an :class:`~algorithms.training.policy.Policy`).

    Raises:
        EngineUnavailableError: ``vllm`` without the package or a device it runs on;
            ``openai`` without a reachable server.
    """
    engine = resolve_engine(config, policy)
    if engine == "hf":
        from algorithms.engines.hf import HFEngine

        return HFEngine(policy.model, policy.tokenizer, batch_size=config.batch_size,
                        top_p=config.top_p, vision=getattr(policy, "vision", None))
    if engine == "vllm":
        from algorithms.engines.vllm import VLLMEngine

        return VLLMEngine.for_policy(policy, config, device=device, seed=seed,
                                     max_model_len=max_model_len)
    if engine == "openai":
        from algorithms.engines.openai import OpenAIEngine

        return OpenAIEngine.from_config(config, policy.tokenizer, seed=seed)
    raise ValueError(f"unknown engine {engine!r}")
