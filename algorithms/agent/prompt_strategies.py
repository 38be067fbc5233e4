"""The two prompt layouts of a rollout behind one interface (``prompt.layout``).

:class:`WindowPrompts` builds each step's prompt afresh from the task, the last
``history_window`` (observation, action) pairs and the current observation
(:class:`~algorithms.agent.prompts.PromptBuilder`). :class:`TranscriptPrompts` builds the first
prompt the same way and every later one as the previous prompt followed by the previous
response's tokens and the env's text (tokenized on its own, appended verbatim), then the
response prefix's tokens; a transcript that would outgrow ``max_prompt_tokens`` ends its
trajectory (``budget_cut``) rather than being cut in the middle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from algorithms.agent.env_slot import EnvSlot
from algorithms.agent.parsing import ParsedAction, parse_action
from algorithms.agent.prompts import BuiltPrompt, PromptBuilder
from algorithms.config import PromptConfig


class PromptStrategy(Protocol):
    """How a rollout gets each sub-env's prompt."""

    def prompt(self, slot: EnvSlot) -> BuiltPrompt:
        """The prompt of ``slot``'s current state (its next turn, or the bootstrap prompt
        after its last one).

        Raises:
            PromptTooLongError: not even the task and the answer format fit.
        """
        ...

    def advance(self, slot: EnvSlot, prompt: BuiltPrompt, response: Sequence[int],
                finished: bool) -> None:
        """Take in a step whose outcome is already in ``slot`` (``observation``, ``info``,
        ``history``, ``truncated``): ``prompt`` and ``response`` are the step's,
        ``finished`` whether the env ended the episode."""
        ...

    def read(self, text: str) -> Any:
        """What an answer (the response prefix and the decoded response) asks for: an
        object with ``action`` (the env's action text) and ``format_ok``."""
        ...


def read_tags(config: PromptConfig, text: str) -> ParsedAction:
    """The tag format's reading of an answer (:func:`~algorithms.agent.parsing.parse_action`
    with ``config``'s think rule, action tag and env style)."""
    return parse_action(text, think=config.think, action_tag=config.action_tag,
                        style=config.env_style)


class WindowPrompts:
    """Every prompt built afresh from the slot's task, history window and observation."""

    def __init__(self, builder: PromptBuilder):
        self.builder = builder

    def read(self, text: str) -> ParsedAction:
        return read_tags(self.builder.config, text)

    def prompt(self, slot: EnvSlot) -> BuiltPrompt:
        info = slot.info
        return self.builder.build(str(info.get("task", "")), slot.history, slot.observation,
                                  tuple(info.get("admissible_actions", ()) or ()),
                                  images=() if slot.image is None else (slot.image,),
                                  info=info)

    def advance(self, slot: EnvSlot, prompt: BuiltPrompt, response: Sequence[int],
                finished: bool) -> None:
        del slot, prompt, response, finished  # the next prompt is built from the slot


class TranscriptPrompts:
    """The first prompt as in the window layout (no history), then the growing transcript.

    Args:
        builder: the prompt builder (first prompts, tokenizing env text).
        config: ``max_prompt_tokens`` (the transcript's budget), ``max_observation_tokens``
            and ``response_prefix``.
    """

    def __init__(self, builder: PromptBuilder, config: PromptConfig):
        self.first = WindowPrompts(builder)
        self.builder = builder
        self.budget = config.max_prompt_tokens
        self.max_env_tokens = config.max_observation_tokens
        # each later answer is opened by the prefix too, after the env text
        self.opener = builder.encode_text(config.response_prefix) \
            if config.response_prefix else ()

    def read(self, text: str) -> ParsedAction:
        return read_tags(self.builder.config, text)

    def prompt(self, slot: EnvSlot) -> BuiltPrompt:
        if slot.image is not None:
            raise ValueError("the transcript layout does not take images (a visual env): use "
                             "--prompt.layout window")
        pending, slot.pending = slot.pending, None
        return pending if pending is not None else self.first.prompt(slot)

    def advance(self, slot: EnvSlot, prompt: BuiltPrompt, response: Sequence[int],
                finished: bool) -> None:
        """Extend the transcript when the trajectory goes on or was cut (its bootstrap
        prompt); mark ``budget_cut`` when the extension of a live one is over budget."""
        if finished and not slot.truncated:
            return
        slot.pending = extended(prompt, response, self.builder.encode_text(slot.observation),
                                self.max_env_tokens, opener=self.opener)
        if not finished and len(slot.pending.token_ids) > self.budget:
            slot.budget_cut = True


def extended(prompt: BuiltPrompt, response: Sequence[int], env_text: Sequence[int],
             max_env_tokens: int | None, opener: Sequence[int] = ()) -> BuiltPrompt:
    """The transcript after ``prompt``: its tokens, the response, the env's text (its first
    ``max_env_tokens`` tokens when set; a cut is reported as ``observation_chars_cut``,
    here in tokens, so the step's ``prompt_cut`` counts it), then ``opener`` (the
    response prefix's tokens, never cut)."""
    cut = 0
    if max_env_tokens is not None and len(env_text) > max_env_tokens:
        cut = len(env_text) - max_env_tokens
        env_text = env_text[:max_env_tokens]
    return BuiltPrompt(tuple(prompt.token_ids) + tuple(response) + tuple(env_text)
                       + tuple(opener), "", 0, 0, cut)


def prompt_strategy(builder: PromptBuilder, config: PromptConfig) -> PromptStrategy:
    """The strategy of ``config.layout``."""
    if config.layout == "transcript":
        return TranscriptPrompts(builder, config)
    if config.layout == "window":
        return WindowPrompts(builder)
    raise ValueError(f"unknown prompt layout {config.layout!r} (window or transcript)")
