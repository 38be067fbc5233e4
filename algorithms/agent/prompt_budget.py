"""The ``prompt length`` check of a run, before its model loads: the run's own prompts of an
env's first steps, measured against ``--prompt.max-prompt-tokens``.

:mod:`agentgym.check` owns the check (it plays the probe episode and says the line) and
counts the env's text only, as it must stay free of ``algorithms``; this module gives it
a :class:`~agentgym.check.prompt_length.PromptCounter` that builds each step's whole prompt
with the run's :class:`~algorithms.agent.prompts.PromptBuilder` -- its wording or template,
answer format, chat template and response prefix -- and counts it with the tokenizer
``train.py`` gives (the run's, loaded alone where that is cheap:
:func:`algorithms.training.run_tokenizer.run_tokenizer`), else with an
:class:`EstimatingTokenizer` (:func:`~agentgym.check.prompt_length.estimate_tokens`), and
the line says which.

Window layout: each step's prompt uncut (the budget it is compared with is what would cut
it). Transcript layout: the first prompt, then for each later step the env's texts so far
and a response of ``--generation.max-new-tokens`` per turn (the most a transcript can
hold by then).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from agentgym.check.prompt_length import PromptCounter, estimate_tokens
from algorithms.config import TrainConfig


class EstimatingTokenizer:
    """A stand-in for a tokenizer that :class:`~algorithms.agent.prompts.PromptBuilder`
    can call: ids are one per estimated token (:func:`estimate_tokens`), and there is no
    chat template (the builder then writes ``User: ...\\nAssistant:``)."""

    chat_template = None

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [0] * estimate_tokens(text)}


def estimating_tokenizer() -> tuple[Any, str]:
    """The :class:`EstimatingTokenizer` and how the check's line names its count."""
    return EstimatingTokenizer(), "estimated"


def run_prompt_counter(config: TrainConfig,
                       load_tokenizer: Callable[[], tuple[Any, str]] = estimating_tokenizer
                       ) -> PromptCounter:
    """The :class:`~agentgym.check.prompt_length.PromptCounter` of ``config``'s prompts
    (module docstring).

    Args:
        config: the run's config (its prompt settings, budget, response length).
        load_tokenizer: ``() -> (tokenizer, how the line names the count)``; called on
            the first count, so a check that stops before the prompt length check loads
            none.
    """
    from algorithms.agent.prompts import PromptBuilder

    prompt = config.prompt
    uncut = dataclasses.replace(prompt, max_prompt_tokens=1 << 40)
    built: dict[str, Any] = {}

    def builder() -> PromptBuilder:
        if "builder" not in built:
            tokenizer, how = load_tokenizer()
            built["builder"], built["how"] = PromptBuilder(tokenizer, uncut), how
        return built["builder"]

    def count(task: str, history: Sequence[tuple[str, str]], observation: str,
              actions: Sequence[str]) -> int:
        prompts = builder()
        if prompt.layout == "window":
            return len(prompts.build(task, history, observation, actions).token_ids)
        texts = [*(seen for seen, _ in history), observation]
        total = len(prompts.build(task, [], texts[0], actions).token_ids)
        for text in texts[1:]:
            appended = len(prompts.encode_text(text))
            if prompt.max_observation_tokens is not None:
                appended = min(appended, prompt.max_observation_tokens)
            total += config.generation.max_new_tokens + appended
        return total

    def how() -> str:  # known once the tokenizer loaded
        builder()
        layout = ("" if prompt.layout == "window" else
                  "; transcripts with responses of --generation.max-new-tokens")
        return f"the run's prompts, {built['how']}{layout}"

    return PromptCounter(count=count, budget=prompt.max_prompt_tokens,
                         flag="--prompt.max-prompt-tokens", how=how)
