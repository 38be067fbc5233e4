"""Turn a model's answer into the action sent to the env, with a format flag.

A well-formed answer is ``<think>...</think><action>...</action>`` (or only the action tag
when thinking is off; for an env whose actions are tags of their own, such as Search-QA's
``<search>...</search>`` or ``<answer>...</answer>``, the action is that tag, read by the
rule the env declares: :class:`agentgym.core.TagActions`). A badly formed answer still yields a string for the env --
the learner charges the invalid-action penalty for the bad format -- so the episode goes
on, as in the GiGPO reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgym.core import TagActions
from agentgym.registration import tag_actions


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

    Rules (``style="default"``): the action is the content of the **first** complete
    ``<action_tag>...</action_tag>`` (tags matched case-insensitively), stripped; the text
    after that block is ignored, as the originals ignore it after cutting the response
    there (with stop strings on, generation already ended at ``</action_tag>``).
    ``format_ok`` requires a non-empty action and -- when ``think`` -- exactly one
    complete ``<think>...</think>`` before it. Without a complete action tag (say the
    token budget ran out inside it), the action is the text after an unclosed
    ``<action_tag>`` if any, else the last non-empty line, and ``format_ok`` is ``False``.

    Any other ``style`` names the answer format of an env whose actions are tags of their
    own (:func:`agentgym.registration.tag_actions`; ``"searchqa"``: Search-R1's
    ``generation.py``, the Search-QA env's default ``action_rule``): the response is cut at
    the format's stop point (Search-QA: right after its first ``</search>``, else after its
    first ``</answer>``) and the action the format reads there (Search-QA: the first match
    of ``<(search|answer)>(.*?)</\\1>``, case-sensitive) is sent to the env **with** its
    tags and its content stripped (the env reads the tag to tell a query from an answer).
    Empty content is still an action (an empty search, an empty answer): ``format_ok``
    needs only the match and the think rule. No match: the stripped cut is sent and
    ``format_ok`` is ``False``.

    An empty ``action_tag`` makes the whole answer (whitespace collapsed) the action;
    ``format_ok`` is then "not empty" (for tiny models that cannot learn a tag format).

    Args:
        text: the decoded response.
        think: whether a ``<think>`` block is required.
        action_tag: the tag that wraps the action (default style).
        style: ``"default"`` or the name of a tag-action format (``"searchqa"``).

    Returns:
        The :class:`ParsedAction`.
    """
    if style != "default":
        try:
            tags = tag_actions(style)
        except KeyError:
            raise ValueError(f"unknown parsing style {style!r}") from None
        return _parse_tags(text, tags, think=think)
    if not action_tag:
        action = " ".join(text.split())
        return ParsedAction(action=action, format_ok=bool(action))
    match = _tag_pattern(action_tag).search(text)
    if match is None:
        return ParsedAction(action=_fallback(text, action_tag), format_ok=False)
    cut = text[: match.end()]
    action = match.group(1).strip()
    think_ok = _think_ok(cut, before=f"<{action_tag}>") if think else True
    return ParsedAction(action=action, format_ok=bool(action) and think_ok)


def _parse_tags(text: str, tags: TagActions, *, think: bool) -> ParsedAction:
    # the env's own rule (one definition, declared by the env)
    read = tags.read(text)
    cut = tags.cut(text)
    if read is None:
        return ParsedAction(action=cut.strip(), format_ok=False)
    tag, content = read
    think_ok = _think_ok(cut, before=f"<{tag}>") if think else True
    return ParsedAction(action=f"<{tag}>{content}</{tag}>", format_ok=think_ok)


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
