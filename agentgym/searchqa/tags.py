"""Reading a Search-R1 action: ``<think>``, ``<search>`` and ``<answer>`` tags.

An action is the model's whole turn, e.g.
``"<think>I need the author.</think> <search>author of Blue Harbour</search>"``.
Tags are matched case-insensitively (``<SEARCH>`` works); a block is an opening tag, any
text (newlines included) and the first matching closing tag.

The rule (Search-R1's stop-and-extract behaviour, plus the validity flag of the GiGPO
reference, verl-agent's ``search_projection``):

1. Complete ``<think>...</think>`` blocks are removed first, so tags a model merely
   *mentions* while reasoning do not count. (Search-R1 does not do this; it would
   search for ``"tags</think><search>q"`` in ``<think>use <search> tags</think>
   <search>q</search>``.)
2. Search-R1 stops generation at the first ``</search>``, else at the first
   ``</answer>``; the first complete ``<search>``/``<answer>`` block of that prefix is
   the action. So ``<search>q</search><answer>x</answer>`` searches for ``q``, and
   ``<answer>x</answer><search>q</search>`` answers.
3. For an answer, the text of the **last** complete ``<answer>`` block of the action is
   the prediction: Search-R1's reward reads the last ``<answer>`` of the sequence.
4. ``well_formed`` is ``False`` when the action holds more than one opening
   ``<search>``/``<answer>`` tag (both kinds, or one kind twice, nested ones included),
   as verl-agent flags them: the action is still executed, but the env reports
   ``valid_action=False`` so the learner can apply its format penalty.
5. No complete block, or an empty query/answer after stripping whitespace: the action
   is ``"invalid"`` and nothing is executed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

ActionKind = Literal["search", "answer", "invalid"]

_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.IGNORECASE | re.DOTALL)
_ACTION_BLOCK = re.compile(r"<(search|answer)>(.*?)</\1>", re.IGNORECASE | re.DOTALL)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_OPENING_TAG = re.compile(r"<(search|answer)>", re.IGNORECASE)
_SEARCH_CLOSE = re.compile(r"</search>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer>", re.IGNORECASE)

FORMAT_HINT = (
    "To search, write your query between <search> and </search>. "
    "To give your final answer, write it between <answer> and </answer>."
)


@dataclass(frozen=True)
class ParsedAction:
    """What an action asks for.

    Attributes:
        kind: ``"search"``, ``"answer"`` or ``"invalid"`` (nothing to execute).
        content: the stripped query or answer (``""`` when invalid).
        well_formed: exactly one ``<search>``/``<answer>`` tag and a non-empty content.
        problem: why the action is invalid or not well formed (``None`` when it is fine).
        thoughts: the stripped contents of the complete ``<think>`` blocks, in order.
    """

    kind: ActionKind
    content: str
    well_formed: bool
    problem: str | None
    thoughts: tuple[str, ...] = ()


def _stop_prefix(text: str) -> str:
    """The text up to Search-R1's stop point: the first ``</search>``, else ``</answer>``."""
    for closing in (_SEARCH_CLOSE, _ANSWER_CLOSE):
        match = closing.search(text)
        if match is not None:
            return text[: match.end()]
    return text


def parse_action(text: str) -> ParsedAction:
    """Parse one action with the rule of the module docstring.

    Example::

        >>> parse_action("<think>hm</think><search> who wrote X </search>")
        ParsedAction(kind='search', content='who wrote X', well_formed=True, problem=None, thoughts=('hm',))
    """
    thoughts = tuple(m.group(1).strip() for m in _THINK_BLOCK.finditer(text))
    body = _THINK_BLOCK.sub(" ", text)
    first = _ACTION_BLOCK.search(_stop_prefix(body))
    if first is None:
        return ParsedAction(
            "invalid",
            "",
            False,
            "no complete <search>...</search> or <answer>...</answer> block",
            thoughts,
        )
    kind: ActionKind = "search" if first.group(1).lower() == "search" else "answer"
    if kind == "search":
        content = first.group(2).strip()
    else:
        content = _ANSWER_BLOCK.findall(body)[-1].strip()
    if not content:
        return ParsedAction("invalid", "", False, f"the <{kind}> block is empty", thoughts)
    tag_count = len(_OPENING_TAG.findall(body))
    if tag_count > 1:
        problem = f"{tag_count} <search>/<answer> tags in one action; only the {kind} was executed"
        return ParsedAction(kind, content, False, problem, thoughts)
    return ParsedAction(kind, content, True, None, thoughts)
