"""The two prompt layouts behind one interface (algorithms.agent.prompt_strategies), by hand:
the window prompt is built from the slot; the transcript grows by the response, the env's
text (its first ``max_observation_tokens``) and the answer opener, and ends over budget."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("transformers")

from algorithms.agent.env_slot import EnvSlot  # noqa: E402
from algorithms.agent.prompt_strategies import (  # noqa: E402
    TranscriptPrompts,
    WindowPrompts,
    prompt_strategy,
)
from algorithms.agent.prompts import BuiltPrompt, PromptBuilder  # noqa: E402
from algorithms.config import PromptConfig  # noqa: E402
from tests.algorithms.tiny import make_tokenizer  # noqa: E402

INFO = {"task": "open the red door", "admissible_actions": ("look", "open red door"),
        "group_id": 0}


def _slot() -> EnvSlot:
    slot = EnvSlot.after_reset(0, "You see a red door and a green door.", dict(INFO))
    slot.history = [("a hall", "look"), ("a room", "go north")]
    return slot


def _builder(**config: object) -> PromptBuilder:
    return PromptBuilder(make_tokenizer(), PromptConfig(think=False, **config))


def test_the_window_prompt_is_built_from_the_slot():
    builder = _builder(history_window=1)
    slot = _slot()
    expected = builder.build(INFO["task"], slot.history, slot.observation,
                             INFO["admissible_actions"])
    assert WindowPrompts(builder).prompt(slot) == expected
    assert "go north" in expected.text and "a hall" not in expected.text
    assert isinstance(prompt_strategy(builder, builder.config), WindowPrompts)


def test_the_transcript_grows_by_response_env_text_and_opener():
    builder = _builder(layout="transcript", max_prompt_tokens=500, max_observation_tokens=3,
                       response_prefix="<action>")
    strategy = prompt_strategy(builder, builder.config)
    assert isinstance(strategy, TranscriptPrompts)
    slot = EnvSlot.after_reset(0, "You see a red door and a green door.", dict(INFO))
    first = strategy.prompt(slot)  # the first turn: the window prompt (no history yet)
    assert first == builder.build(INFO["task"], [], slot.observation,
                                  INFO["admissible_actions"])
    slot.observation = "The red door opens onto a garden."
    env_ids = builder.encode_text(slot.observation)
    opener = builder.encode_text("<action>")
    strategy.advance(slot, first, (4, 5), finished=False)
    assert slot.pending.token_ids == first.token_ids + (4, 5) + env_ids[:3] + opener
    assert slot.pending.observation_chars_cut == len(env_ids) - 3 and slot.pending.was_cut
    assert not slot.budget_cut
    pending = slot.pending
    assert strategy.prompt(slot) is pending and slot.pending is None  # taken once


def test_a_live_transcript_over_budget_is_cut_a_finished_one_kept_or_dropped():
    builder = _builder(layout="transcript", max_prompt_tokens=200)
    strategy = TranscriptPrompts(builder, builder.config)
    prompt = BuiltPrompt(tuple(range(190)), "", 0, 0, 0)
    slot = _slot()
    strategy.advance(slot, prompt, tuple(range(20)), finished=False)
    assert slot.budget_cut and len(slot.pending.token_ids) > 200
    ended = _slot()
    strategy.advance(ended, prompt, tuple(range(20)), finished=True)  # terminated
    assert ended.pending is None and not ended.budget_cut
    cut = _slot()
    cut.truncated = True  # a step limit: the transcript is the bootstrap prompt
    strategy.advance(cut, prompt, tuple(range(20)), finished=True)
    assert cut.pending is not None and not cut.budget_cut


def test_an_unknown_layout_is_refused():
    builder = _builder()
    with pytest.raises(ValueError, match="unknown prompt layout 'tree'"):
        prompt_strategy(builder, SimpleNamespace(layout="tree"))


def test_a_transcript_exactly_at_the_budget_goes_on():
    slot = _slot()
    env_ids = _builder().encode_text(slot.observation)
    prompt = BuiltPrompt(tuple(range(50)), "", 0, 0, 0)
    length = 50 + 5 + len(env_ids)
    for budget, cut in ((length, False), (length - 1, True)):
        builder = _builder(layout="transcript", max_prompt_tokens=budget)
        slot = _slot()
        TranscriptPrompts(builder, builder.config).advance(slot, prompt, tuple(range(5)),
                                                           finished=False)
        assert len(slot.pending.token_ids) == length and slot.budget_cut == cut
