"""Reading a Search-QA action: which ``<search>``/``<answer>`` block a turn asks for.

An action is the model's whole turn, e.g.
``"<think>I need the author.</think> <search>author of Blue Harbour</search>"``.
Three rules, chosen by name (the env's ``action_rule``):

``"search-r1"`` (the default) -- Search-R1's generation loop as written
(``search_r1/llm_agent/generation.py``), quirks included:

1. The turn stops right after its first ``</search>``; a turn without one stops right
   after its first ``</answer>``; a turn with neither is kept whole
   (:func:`cut_at_stop`; Search-R1 also drops the rest of the turn from the transcript).
2. The action is the first ``<search>`` or ``<answer>`` block of what is left: the
   leftmost opening tag that has a closing tag of the same kind after it, the block
   ending at the first such closing tag. Tags are exact (lower case, no spaces), so
   ``<SEARCH>q</SEARCH>`` is plain text; the content may span lines and is stripped.
3. Empty content is still an action: ``<search></search>`` searches for ``""`` and
   ``<answer> </answer>`` answers ``""``. Tags inside a ``<think>`` block count like any
   others.
4. No block: the action is invalid. Every search and answer is well formed (Search-R1's
   ``valid_action`` is 1 for both).

So ``<answer>a</answer> <search>q</search>`` answers ``a`` (the stop keeps both blocks
and the answer comes first) and ``<search>q</search> <answer>a</answer>`` searches.

``"verl-agent"`` -- the projection of the GiGPO reference (verl-agent's
``search_projection``): the same stop point, then the first ``<search>`` block if there
is one, else the first ``<answer>`` block, both matched case-insensitively; empty content
is an action. ``well_formed`` is ``False`` -- the action is still executed -- when the
whole turn (before the stop) holds both an opening ``<search>`` and ``<answer>`` tag,
either one twice or more, or a CJK ideograph (U+4E00 to U+9FFF).

``"agentgym"`` -- this project's earlier rule: tags and stop point case-insensitive;
complete ``<think>`` blocks are removed first, so tags merely mentioned while reasoning do
not count; an answer's text is the **last** ``<answer>`` block of the turn; empty content
is invalid; more than one opening tag makes the action not well formed.

``docs/envs/searchqa.md`` gives how often the rules disagree on fuzzed model output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from agentgym.core import TagActions

ActionKind = Literal["search", "answer", "invalid"]
ActionRule = Literal["search-r1", "verl-agent", "agentgym"]
ACTION_RULES: tuple[ActionRule, ...] = ("search-r1", "verl-agent", "agentgym")
DEFAULT_ACTION_RULE: ActionRule = "search-r1"
"""The rule of a default-constructed env: Search-R1's, as written."""

_ANY_CASE = re.IGNORECASE | re.DOTALL
_EXACT_BLOCK = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_ANY_CASE_BLOCK = re.compile(r"<(search|answer)>(.*?)</\1>", _ANY_CASE)
_SEARCH_BLOCK = re.compile(r"<search>(.*?)</search>", _ANY_CASE)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", _ANY_CASE)
_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", _ANY_CASE)
_OPENING_TAG = re.compile(r"<(search|answer)>", re.IGNORECASE)
_CJK_IDEOGRAPH = re.compile("[\u4e00-\u9fff]")
_STOPS = ("</search>", "</answer>")

NO_BLOCK = "no complete <search>...</search> or <answer>...</answer> block"


@dataclass(frozen=True)
class ParsedAction:
    """What an action asks for.

    Attributes:
        kind: ``"search"``, ``"answer"`` or ``"invalid"`` (nothing to execute).
        content: the stripped query or answer (``""`` when invalid; may be ``""`` for a
            search or answer under the ``"search-r1"`` and ``"verl-agent"`` rules).
        well_formed: the rule's validity flag (the env's ``valid_action``).
        problem: why the action is invalid or not well formed (``None`` when it is fine).
        thoughts: the stripped contents of the complete ``<think>`` blocks, in order.
    """

    kind: ActionKind
    content: str
    well_formed: bool
    problem: str | None
    thoughts: tuple[str, ...] = ()


def cut_at_stop(text: str, *, ignore_case: bool = False) -> str:
    """The turn up to its stop point: after the first ``</search>``, else ``</answer>``.

    Args:
        text: the model's turn.
        ignore_case: find the closing tags in any case (the ``"agentgym"`` rule).

    Returns:
        ``text`` itself when it holds neither closing tag.

    Example::

        >>> cut_at_stop("<search>a</search> b </search>")
        '<search>a</search>'
    """
    for closing in _STOPS:
        if ignore_case:
            found = re.search(re.escape(closing), text, re.IGNORECASE)
            end = found.end() if found is not None else -1
        else:
            position = text.find(closing)
            end = position + len(closing) if position != -1 else -1
        if end != -1:
            return text[:end]
    return text


def parse_action(text: str, rule: ActionRule = DEFAULT_ACTION_RULE) -> ParsedAction:
    """Parse one turn with one of the rules of the module docstring.

    Args:
        text: the model's whole turn.
        rule: ``"search-r1"``, ``"verl-agent"`` or ``"agentgym"``.

    Returns:
        The :class:`ParsedAction`.

    Raises:
        ValueError: for an unknown rule.

    Example::

        >>> parse_action("<think>hm</think><search> who wrote X </search>")
        ParsedAction(kind='search', content='who wrote X', well_formed=True, problem=None, thoughts=('hm',))
    """
    thoughts = tuple(m.group(1).strip() for m in _THINK_BLOCK.finditer(text))
    if rule == "search-r1":
        return _search_r1(text, thoughts)
    if rule == "verl-agent":
        return _verl_agent(text, thoughts)
    if rule == "agentgym":
        return _agentgym(text, thoughts)
    raise ValueError(f"unknown action rule {rule!r}; expected one of {ACTION_RULES}")


def _invalid(thoughts: tuple[str, ...], problem: str = NO_BLOCK) -> ParsedAction:
    return ParsedAction("invalid", "", False, problem, thoughts)


def _search_r1(text: str, thoughts: tuple[str, ...]) -> ParsedAction:
    block = _EXACT_BLOCK.search(cut_at_stop(text))
    if block is None:
        return _invalid(thoughts)
    kind: ActionKind = "search" if block.group(1) == "search" else "answer"
    return ParsedAction(kind, block.group(2).strip(), True, None, thoughts)


def _verl_agent(text: str, thoughts: tuple[str, ...]) -> ParsedAction:
    kept = cut_at_stop(text)
    kind: ActionKind = "search"
    block = _SEARCH_BLOCK.search(kept)
    if block is None:
        kind, block = "answer", _ANSWER_BLOCK.search(kept)
    if block is None:
        return _invalid(thoughts)
    tags = [m.group(1).lower() for m in _OPENING_TAG.finditer(text)]
    searches, answers = tags.count("search"), tags.count("answer")
    problem = None
    if searches and answers:
        problem = "both <search> and <answer> tags in one action"
    elif searches > 1 or answers > 1:
        problem = f"{len(tags)} <{tags[0]}> tags in one action"
    elif _CJK_IDEOGRAPH.search(text):
        problem = "CJK characters in the action"
    return ParsedAction(kind, block.group(1).strip(), problem is None, problem, thoughts)


def _agentgym(text: str, thoughts: tuple[str, ...]) -> ParsedAction:
    body = _THINK_BLOCK.sub(" ", text)
    first = _ANY_CASE_BLOCK.search(cut_at_stop(body, ignore_case=True))
    if first is None:
        return _invalid(thoughts)
    kind: ActionKind = "search" if first.group(1).lower() == "search" else "answer"
    if kind == "search":
        content = first.group(2).strip()
    else:
        content = _ANSWER_BLOCK.findall(body)[-1].strip()
    if not content:
        return _invalid(thoughts, f"the <{kind}> block is empty")
    tag_count = len(_OPENING_TAG.findall(body))
    if tag_count > 1:
        problem = f"{tag_count} <search>/<answer> tags in one action; only the {kind} was executed"
        return ParsedAction(kind, content, False, problem, thoughts)
    return ParsedAction(kind, content, True, None, thoughts)


def _read(text: str) -> tuple[str, str] | None:
    """``(tag, content)`` of the action ``text`` asks for under the default rule."""
    parsed = parse_action(text, DEFAULT_ACTION_RULE)
    return None if parsed.kind == "invalid" else (parsed.kind, parsed.content)


TAG_ACTIONS = TagActions(
    name="searchqa", stop_strings=_STOPS,
    usage=("either look something up with <search>your query</search> or, when you know "
           "it, give the final answer as <answer>short answer</answer>"),
    cut=cut_at_stop, read=_read)
"""What the agent loop reads of this format (:class:`agentgym.core.TagActions`):
Search-R1's stop strings and rule (:func:`cut_at_stop`, :func:`parse_action`)."""
