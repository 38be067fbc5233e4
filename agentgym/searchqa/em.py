"""Exact match after SQuAD answer normalization: the Search-QA reward.

Search-R1 (Jin et al. 2025, Sec. 3.4) rewards a trajectory with EM(a_pred, a_gold): 1 when
the predicted answer equals any gold answer after the normalization of the SQuAD
evaluation script (Rajpurkar et al. 2016), else 0. Normalization, in this order:

1. lowercase;
2. remove ASCII punctuation (``string.punctuation``; other symbols such as "–" stay);
3. drop the articles "a", "an", "the" as whole words;
4. collapse runs of whitespace to one space and strip the ends.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD normalization of an answer string (see the module docstring).

    Example: ``normalize_answer("The  Beatles!") == "beatles"``.
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golden_answers: str | Iterable[str]) -> bool:
    """Whether ``prediction`` equals any gold answer after :func:`normalize_answer`.

    Args:
        prediction: the model's answer (the text inside ``<answer>...</answer>``).
        golden_answers: one gold answer or several (aliases); an empty collection never
            matches.
    """
    if isinstance(golden_answers, str):
        golden_answers = (golden_answers,)
    predicted = normalize_answer(prediction)
    return any(normalize_answer(gold) == predicted for gold in golden_answers)


def em_score(prediction: str, golden_answers: str | Iterable[str]) -> float:
    """:func:`exact_match` as a reward: 1.0 or 0.0."""
    return 1.0 if exact_match(prediction, golden_answers) else 0.0
