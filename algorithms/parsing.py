"""Turn a model's answer into the action sent to the env, with a format flag.

A well-formed answer is ``<think>...</think><action>...</action>`` (or only the action tag
when thinking is off; for Search-QA the action is a ``<search>...</search>`` or
``<answer>...</answer>`` tag). A badly formed answer still yields a string for the env --
the learner charges the invalid-action penalty for the bad format -- so the episode goes
on, as in the GiGPO reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SEARCHQA_TAGS = ("search", "answer")


@dataclass(frozen=True)
class ParsedAction:
    """The action extracted from one answer.

    Attributes:
        action: the text sent to the env (never ``None``; may be empty).
        format_ok: the answer had the required structure.
    """

    action: str
    format_ok: bool


def _tag_pattern(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<{tag}>(.*?)</{tag}>", re.DOTALL | re.IGNORECASE)


def parse_action(
    text: str, *, think: bool = True, action_tag: str = "action", style: str = "default"
) -> ParsedAction:
    """Extract the action from ``text``.

    Rules (``style="default"``): the action is the content of the **last** complete
    ``<action_tag>...</action_tag>``, stripped. ``format_ok`` requires exactly one such
    tag, a non-empty action, and -- when ``think`` -- one complete ``<think>...</think>``
    before it. Without a complete action tag, the action is the text after an unclosed
    ``<action_tag>`` if any, else the last non-empty line, and ``format_ok`` is ``False``.

    ``style="searchqa"``: the action is the last complete ``<search>`` or ``<answer>`` tag,
    sent to the env **with** its tags (the env reads the tag to tell a query from an
    answer); the same think rule applies.

    An empty ``action_tag`` makes the whole answer (whitespace collapsed) the action;
    ``format_ok`` is then "not empty" (for tiny models that cannot learn a tag format).

    Args:
        text: the decoded response.
        think: whether a ``<think>`` block is required.
        action_tag: the tag that wraps the action (default style).
        style: ``"default"`` or ``"searchqa"``.

    Returns:
        The :class:`ParsedAction`.
    """
    if style == "searchqa":
        return _parse_searchqa(text, think=think)
    if style != "default":
        raise ValueError(f"unknown parsing style {style!r}")
    if not action_tag:
        action = " ".join(text.split())
        return ParsedAction(action=action, format_ok=bool(action))
    matches = _tag_pattern(action_tag).findall(text)
    think_ok = _think_ok(text, before=f"<{action_tag}>") if think else True
    if matches:
        action = matches[-1].strip()
        ok = len(matches) == 1 and bool(action) and think_ok
        return ParsedAction(action=action, format_ok=ok)
    return ParsedAction(action=_fallback(text, action_tag), format_ok=False)


def _parse_searchqa(text: str, *, think: bool) -> ParsedAction:
    found: list[tuple[int, str]] = []
    for tag in _SEARCHQA_TAGS:
        for match in _tag_pattern(tag).finditer(text):
            found.append((match.start(), f"<{tag}>{match.group(1).strip()}</{tag}>"))
    if not found:
        return ParsedAction(action=text.strip(), format_ok=False)
    found.sort()
    first_tag = found[-1][1].split(">", 1)[0] + ">"
    think_ok = _think_ok(text, before=first_tag) if think else True
    inner = re.sub(r"<[^>]+>", "", found[-1][1]).strip()
    return ParsedAction(action=found[-1][1], format_ok=len(found) == 1 and bool(inner)
                        and think_ok)


def _think_ok(text: str, *, before: str) -> bool:
    blocks = _tag_pattern("think").findall(text)
    if len(blocks) != 1:
        return False
    end = text.lower().find("</think>")
    start = text.lower().find(before.lower())
    return start == -1 or end < start


def _fallback(text: str, action_tag: str) -> str:
    lowered = text.lower()
    opening = f"<{action_tag}>"
    position = lowered.rfind(opening)
    if position != -1:
        return text[position + len(opening):].strip()
    without_think = _tag_pattern("think").sub(" ", text)
    lines = [line.strip() for line in without_think.splitlines() if line.strip()]
    return lines[-1] if lines else ""
