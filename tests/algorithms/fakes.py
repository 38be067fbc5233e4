"""A scripted generation engine: answers from a fixed table, for rollout tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class ScriptedEngine:
    """Returns ``answer(turn, position, prompt_text)`` for each prompt, tokenized.

    Args:
        tokenizer: the tokenizer used to decode prompts and encode answers.
        answer: ``(turn, position_among_active_envs, prompt_text) -> response text``.
        eos: append the EOS token to every response.
    """

    def __init__(self, tokenizer: Any, answer: Callable[[int, int, str], str], *,
                 eos: bool = True):
        self.tokenizer = tokenizer
        self.answer = answer
        self.eos = eos
        self.turn = 0
        self.calls: list[list[tuple[int, ...]]] = []

    def generate(self, prompts: Sequence[Sequence[int]], *, temperature: float,
                 max_new_tokens: int, seed: int) -> list[tuple[int, ...]]:
        self.calls.append([tuple(p) for p in prompts])
        out = []
        for position, prompt in enumerate(prompts):
            text = self.tokenizer.decode(list(prompt))
            ids = self.tokenizer(self.answer(self.turn, position, text),
                                 add_special_tokens=False)["input_ids"]
            if self.eos:
                ids = ids + [self.tokenizer.eos_token_id]
            out.append(tuple(ids[:max_new_tokens]))
        self.turn += 1
        return out

    def sync_weights(self, model: Any) -> None:
        """Nothing to sync."""

    def release(self) -> None:
        """Nothing to free."""
