"""SQuAD normalization and exact match, pinned by hand-computed cases."""

from __future__ import annotations

import pytest

from agentgym.searchqa.em import em_score, exact_match, normalize_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Beatles", "beatles"),
        ("  the   BEATLES!! ", "beatles"),
        ("An apple a day", "apple day"),
        ("A", ""),
        ("theater", "theater"),  # articles only as whole words
        ("anatomy of an antelope", "anatomy of antelope"),
        ("U.S.A.", "usa"),
        ("Washington, D.C.", "washington dc"),
        ("rock'n'roll", "rocknroll"),
        ("1,000", "1000"),
        ("3.14", "314"),
        ("tab\tand\nnewline", "tab and newline"),
        ("Café Müller", "café müller"),  # non-ASCII letters stay
        ("1939–1945", "1939–1945"),  # the en dash is not ASCII punctuation
        ("the-the", "thethe"),  # punctuation goes first, so no article is left
        ("", ""),
        ("北京", "北京"),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_exact_match_any_gold_answer() -> None:
    assert exact_match("the Eiffel Tower", ["Tour Eiffel", "Eiffel Tower"])
    assert exact_match("eiffel tower.", "The Eiffel Tower")
    assert not exact_match("Eiffel", ["Eiffel Tower"])
    assert not exact_match("Eiffel Tower Paris", ["Eiffel Tower"])  # no substring credit
    assert not exact_match("anything", [])
    assert exact_match("", ["the"])  # both normalize to the empty string


def test_em_score_values() -> None:
    assert em_score("James Madison", ["james madison"]) == 1.0
    assert em_score("Thomas Jefferson", ["james madison"]) == 0.0


def test_normalization_is_idempotent() -> None:
    for text in ["The  U.S. of A!", "an Anagram", "Ärger — the end", "a b c"]:
        once = normalize_answer(text)
        assert normalize_answer(once) == once
