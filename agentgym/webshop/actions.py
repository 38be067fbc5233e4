"""WebShop's actions as text: how ``search[...]`` / ``click[...]`` are read, and what is
admissible on a page (see :mod:`agentgym.webshop.env` for the two parsings)."""

from __future__ import annotations

import re
from typing import Literal

from agentgym.webshop.pages import Page

ActionParsing = Literal["upstream", "lenient"]
ACTION_PARSINGS: tuple[str, ...] = ("upstream", "lenient")
SEARCH_PLACEHOLDER = "search[<your query>]"
"""The admissible-action template that stands for every ``search[...]`` (not an action)."""

_LENIENT_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
_UPSTREAM_ACTION = re.compile(r"(.+)\[(.+)\]")  # WebShop's parse_action, matched at the start


def parse_action(action: str, parsing: ActionParsing) -> tuple[str, str] | None:
    """``(verb, argument)`` as ``parsing`` reads ``action``, else ``None``.

    >>> parse_action("click[Buy Now] thanks", "upstream")
    ('click', 'buy now')
    >>> parse_action(" Click [ Buy Now ] ", "lenient")
    ('click', 'buy now')
    >>> parse_action(" Click [ Buy Now ] ", "upstream")  # a verb the env does not know
    (' Click ', ' buy now ')
    """
    if parsing == "lenient":
        match = _LENIENT_ACTION.match(action)
        if match is None:
            return None
        return match.group(1).lower(), match.group(2).strip().lower()
    match = _UPSTREAM_ACTION.match(action)
    if match is None:
        return None
    return match.group(1), match.group(2).lower()


def admissible_actions(page: Page) -> tuple[str, ...]:
    """:data:`SEARCH_PLACEHOLDER` when ``page`` has a search bar, then ``click[x]`` for
    every clickable of it."""
    search = (SEARCH_PLACEHOLDER,) if page.has_search_bar else ()
    return search + tuple(f"click[{c}]" for c in page.clickables)
