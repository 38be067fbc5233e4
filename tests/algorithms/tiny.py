"""A tiny randomly initialised Llama and a word-level tokenizer, built in-process (no files).

Used by the learner, rollout, resume and learning tests: a forward/backward pass takes
milliseconds, so the tests exercise the real code paths without the 135M default model.
The model and tokenizer are the smoke model's (:mod:`algorithms.training.tiny_model`,
``--model.name-or-path tiny``), over a fixed vocabulary of the scripted env's words.
"""

from __future__ import annotations

import torch

from agentgym.scripted import DEFAULT_DOORS
from algorithms.agent.prompts import answer_instruction, render_user_message
from algorithms.config import ModelConfig, PromptConfig
from algorithms.training.policy import Policy, wrap_model
from algorithms.training.tiny_model import SPECIAL_TOKENS, tiny_llama, word_tokenizer

__all__ = ["SPECIAL_TOKENS", "make_model", "make_policy", "make_tokenizer"]

# Tiny matrices gain nothing from intra-op threads, and on a shared, loaded CPU a second
# thread made a forward pass ~10x slower (measured: 0.11 s vs 0.01 s).
torch.set_num_threads(1)


def resolve_auto_as_float32() -> None:
    """Make ``model.dtype: auto`` resolve in this process as on a CPU without bfloat16
    instructions: what ``tests/conftest.py`` does for every in-process test, for the
    scripts the tests start as subprocesses (torchrun ranks), whose tolerances are
    float32's."""
    from algorithms import precision

    precision.cpu_has_bf16 = lambda: False


def _corpus() -> str:
    rooms = " ".join(f"{i} {i}." for i in range(10))
    doors = " ".join(f"open {d} door" for d in DEFAULT_DOORS)
    sample = render_user_message(
        "Cross all 3 rooms by opening the right doors.",
        [("You are in room 1 of 3. Doors: red, green, blue.", "look")],
        "You escaped! Nothing happens. A sign says: open red door.",
        ("open red door", "look"),
        PromptConfig(),
    )
    instructions = " ".join(
        answer_instruction(PromptConfig(think=t, action_tag=a))
        for t in (True, False) for a in ("action", "")
    )
    return " ".join([rooms, doors, sample, instructions, "<action> </action> <think> </think>",
                     "You open the last door and step outside. User Assistant"])


def make_tokenizer(*, action_tokens: bool = False, extra_text: str = "",
                   split_tags: bool = False):
    """:func:`~algorithms.training.tiny_model.word_tokenizer` over the scripted env's and
    the prompt's words (whitespace-split, tags left on the words they touch, so the
    vocabulary stays the one these tests were written with).

    With ``action_tokens`` every door action (``"open red door"`` ...) is one added token,
    so a one-token answer can be a whole action (the learning test). ``extra_text``'s
    words join the vocabulary (another env's words; the default vocabulary is unchanged).
    ``split_tags`` also cuts ``<tag>`` / ``</tag>`` off the words they touch when text is
    tokenized, so that ``go north</action>`` is three tokens (text written without
    spaces: SFT answers).
    """
    words = set(_corpus().split()) | set(extra_text.split())
    tokenizer = word_tokenizer(words, split_tags=split_tags)
    if action_tokens:
        tokenizer.add_tokens([f"open {door} door" for door in DEFAULT_DOORS] + ["."])
    return tokenizer


def make_model(vocab_size: int, *, seed: int = 0, hidden: int = 32, layers: int = 2):
    """:func:`~algorithms.training.tiny_model.tiny_llama` of width 32 (deterministic for
    ``seed``)."""
    return tiny_llama(vocab_size, seed=seed, hidden=hidden, layers=layers, max_positions=1024)


def make_policy(*, seed: int = 0, model_config: ModelConfig | None = None,
                hidden: int = 32, action_tokens: bool = False, extra_text: str = "",
                split_tags: bool = False) -> Policy:
    """The tiny model and tokenizer wrapped like a loaded policy (LoRA per config)."""
    tokenizer = make_tokenizer(action_tokens=action_tokens, extra_text=extra_text,
                               split_tags=split_tags)
    model = make_model(len(tokenizer), seed=seed, hidden=hidden)
    return wrap_model(model, tokenizer, model_config or ModelConfig(), source="tiny test model",
                      path="tiny", gguf_file=None)
