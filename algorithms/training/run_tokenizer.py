"""The run's tokenizer without its model: what ``train.py``'s prompt length check counts
with before the model loads (:mod:`algorithms.agent.prompt_budget`)."""

from __future__ import annotations

from typing import Any

from algorithms.agent.prompt_budget import EstimatingTokenizer
from algorithms.config import TINY_MODEL, TrainConfig


def run_tokenizer(config: TrainConfig) -> tuple[Any, str]:
    """The run's tokenizer, loaded without its model where that is cheap, and how the
    check's line names the count; an :class:`EstimatingTokenizer` elsewhere."""
    model = config.model
    if model.name_or_path == TINY_MODEL:
        from algorithms.training.tiny_model import run_texts, text_words, word_tokenizer

        return word_tokenizer(text_words(run_texts(config))), "the smoke model's tokenizer"
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return EstimatingTokenizer(), "estimated (transformers is not installed)"
    if model.name_or_path is None:
        from algorithms.training.policy import PolicyLoadError, converted_default_model

        try:
            cached = converted_default_model()
        except PolicyLoadError as error:
            return EstimatingTokenizer(), f"estimated ({error})"
        if cached is None:
            return EstimatingTokenizer(), ("estimated: the default model is converted when "
                                           "it first loads")
        path, gguf_file, name = str(cached), None, "the default model's tokenizer"
    else:
        path, gguf_file = model.name_or_path, model.gguf_file
        name = f"{model.name_or_path}'s tokenizer"
    kwargs: dict[str, Any] = {"local_files_only": True,
                              "trust_remote_code": model.trust_remote_code}
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    try:
        return AutoTokenizer.from_pretrained(path, **kwargs), name
    except (OSError, ValueError, ImportError, KeyError) as error:
        reason = str(error).strip().splitlines()[0][:120] if str(error).strip() else \
            type(error).__name__
        return EstimatingTokenizer(), f"estimated (no local tokenizer: {reason})"
