"""The ``prompt length`` check: how long the prompts of an env's first steps are, against a
token budget.

A prompt that does not fit ``train.py``'s ``--prompt.max-prompt-tokens`` loses its history,
then the start of its observation (``algorithms.agent.prompts``): a run on an env with long
observations trains on cut prompts. This check measures, before any run, the prompts of
the probe episode's steps (each step's task, earlier (observation, action) pairs within
the history window, observation and admissible actions) with a :class:`PromptCounter`,
and warns when one is over the budget.

Two counters, so that ``agentgym`` stays free of ``algorithms`` and torch:

- ``train.py``'s check (``algorithms.agent.env_check``) builds the real prompts -- the
  run's wording or template, its chat template, its tokenizer and budget -- and passes a
  counter of its own.
- ``python -m agentgym.check`` counts the env's text only (the prompt's own wording and
  chat template come on top): exactly with ``--tokenizer`` (a ``tokenizer.json``, or a
  model folder holding one, read by the ``tokenizers`` package when it is installed), else
  by :func:`estimate_tokens`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HISTORY_WINDOW = 2
"""The command line's default history window: ``train.py``'s (``PromptConfig.history_window``,
GiGPO's 2; a test keeps the two equal)."""

TOKENS_PER_PIECE = 1.25
"""Tokens per word, digit or punctuation run in :func:`estimate_tokens`. Measured with
SmolLM2-135M's tokenizer on the first steps of five envs (task, observation, admissible
actions): 1.03 (KeyDoor) to 1.27 (ALFWorld) tokens per piece overall, at most 1.36 in one
step (ALFWorld's); characters per token ranged from 1.9 (NumberGuess) to 3.9 (Search-QA),
too wide for a count of characters."""

PIECE = re.compile(r"[^\W\d_]+|\d|[^\w\s]+|\s*\n\s*")
"""What a BPE tokenizer keeps apart at least: a run of letters, each digit, a run of
punctuation, a line break."""

StepText = tuple[str, Sequence[tuple[str, str]], str, Sequence[str]]
"""One step's prompt material: task, every earlier (observation, action) pair, the
observation, the admissible actions."""


def estimate_tokens(text: str) -> int:
    """About how many tokens ``text`` is: its words, digits and punctuation runs
    (:data:`PIECE`) times :data:`TOKENS_PER_PIECE`, rounded up.

    >>> estimate_tokens("You see a drawer 1, a drawer 2.")
    16
    """
    return math.ceil(len(PIECE.findall(text)) * TOKENS_PER_PIECE)


def env_text(task: str, history: Sequence[tuple[str, str]], observation: str,
             actions: Sequence[str]) -> str:
    """The env's part of a step's prompt: the task, the (observation, action) pairs
    given, the observation and the admissible actions, one per line."""
    pairs = [part for pair in history for part in pair]
    return "\n".join([task, *pairs, observation, *actions])


@dataclass(frozen=True)
class PromptCounter:
    """How the check counts a step's prompt, and the budget it compares with.

    Attributes:
        count: tokens of one step's prompt, from its :data:`StepText` (every earlier
            pair: the counter applies its history window).
        budget: the longest prompt a run takes (``None``: measure only).
        flag: the flag that sets the budget, as the check's line names it.
        how: what is counted, as the line says it ("the run's prompts, its tokenizer"),
            asked once the steps are counted (a counter that loads its tokenizer on the
            first count knows then which it got).
    """

    count: Callable[[str, Sequence[tuple[str, str]], str, Sequence[str]], int]
    budget: int | None
    flag: str
    how: Callable[[], str]


def text_counter(budget: int | None = None, *, history_window: int = HISTORY_WINDOW,
                 tokenizer: str | None = None) -> PromptCounter:
    """The command line's counter: the env's text (:func:`env_text`, the last
    ``history_window`` pairs), counted by ``tokenizer`` (:func:`load_tokenizer`) or
    estimated (:func:`estimate_tokens`).

    Raises:
        ValueError: ``tokenizer`` cannot be read (one line).
    """
    pairs = f"{history_window} history pair{'s' if history_window != 1 else ''}"
    if tokenizer is None:
        tokens: Callable[[str], int] = estimate_tokens
        how = (f"estimated: the env's text with {pairs} at {TOKENS_PER_PIECE:g} tokens per "
               "word; the prompt's own wording comes on top")
    else:
        encoder = load_tokenizer(tokenizer)
        tokens = lambda text: len(encoder.encode(text, add_special_tokens=False).ids)  # noqa: E731
        how = (f"the env's text with {pairs}, by {tokenizer}; the prompt's own wording "
               "comes on top")

    def count(task: str, history: Sequence[tuple[str, str]], observation: str,
              actions: Sequence[str]) -> int:
        window = list(history[-history_window:]) if history_window > 0 else []
        return tokens(env_text(task, window, observation, actions))

    return PromptCounter(count, budget, "--max-prompt-tokens", lambda: how)


def load_tokenizer(path: str) -> Any:
    """A ``tokenizers.Tokenizer`` from ``path``: a ``tokenizer.json`` file, or a folder
    holding one (a Hugging Face model folder).

    Raises:
        ValueError: the ``tokenizers`` package is missing, or ``path`` holds no readable
            ``tokenizer.json``.
    """
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ValueError("--tokenizer needs the tokenizers package (pip install tokenizers; "
                         "without --tokenizer the check estimates)") from None
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "tokenizer.json"
    try:
        return Tokenizer.from_file(str(file))
    except Exception as error:  # noqa: BLE001 - a missing or malformed file, in one line
        raise ValueError(f"--tokenizer {path}: no readable tokenizer.json ({error})") from None


def probe_steps(observations: Sequence[Any], infos: Sequence[dict[str, Any]],
                actions: Sequence[str], ended: bool) -> list[StepText]:
    """The prompt material of a probe episode's steps: one per observation an action was
    (or would be) taken in -- the final observation of an ended episode is none.

    Args:
        observations: the reset's observation, then each step's.
        infos: the matching infos.
        actions: the action taken at each step.
        ended: the episode ended at its last observation.
    """
    count = len(observations) - (1 if ended else 0)
    steps: list[StepText] = []
    for index in range(count):
        history = [(str(observations[j]), actions[j]) for j in range(index)]
        info = infos[index]
        listed = info.get("admissible_actions") or ()
        steps.append((str(info.get("task", "")), history, str(observations[index]),
                      tuple(str(a) for a in listed)))
    return steps


def prompt_length_detail(steps: Sequence[StepText], counter: PromptCounter
                         ) -> tuple[str, bool]:
    """The check's line and whether it is a warning: the longest of ``steps``' prompts,
    and how many are over the budget (they will be cut)."""
    if not steps:
        return "no step to measure", False
    lengths = [counter.count(*step) for step in steps]
    longest = max(lengths)
    how = counter.how()
    where = f"step {lengths.index(longest) + 1}"
    if counter.budget is None:
        return (f"the {len(steps)} prompts of the probe episode are at most {longest} tokens "
                f"({where}; {how}); give {counter.flag} N (your run's budget) to "
                "compare"), False
    over = sum(length > counter.budget for length in lengths)
    if not over:
        return (f"the {len(steps)} prompts of the probe episode are at most {longest} tokens "
                f"({how}), within {counter.flag} {counter.budget}"), False
    return (f"{over} of the {len(steps)} prompts of the probe episode are longer than "
            f"{counter.flag} {counter.budget} (up to {longest} tokens at {where}; "
            f"{how}): a run cuts them, dropping their history first, then the start "
            "of the observation; raise the budget or shorten the env's text"), True
