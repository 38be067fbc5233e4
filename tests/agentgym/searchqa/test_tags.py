"""Tag parsing: the Search-R1 rule, with both tags, nested, missing, many, unicode."""

from __future__ import annotations

import pytest

from agentgym.searchqa.tags import parse_action


def test_single_search() -> None:
    parsed = parse_action("<think>I need the author.</think>\n<search> author of X </search>")
    assert (parsed.kind, parsed.content, parsed.well_formed) == ("search", "author of X", True)
    assert parsed.problem is None
    assert parsed.thoughts == ("I need the author.",)


def test_single_answer_is_stripped_and_multiline() -> None:
    parsed = parse_action("<answer>\n  Paris \n</answer>")
    assert (parsed.kind, parsed.content, parsed.well_formed) == ("answer", "Paris", True)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Paris",
        "<search>unclosed",
        "unopened</search>",
        "<answer>x</search>",
        "<search/>",
        "< search>q</search>",
        "<think>only thinking</think>",
        "＜search＞q＜/search＞",
    ],  # full-width brackets are not tags
)
def test_missing_or_broken_tags_are_invalid(text: str) -> None:
    parsed = parse_action(text)
    assert parsed.kind == "invalid"
    assert parsed.content == ""
    assert not parsed.well_formed
    assert "no complete" in parsed.problem


@pytest.mark.parametrize(
    "text", ["<search></search>", "<search>  \n </search>", "<answer> </answer>"]
)
def test_empty_blocks_are_invalid(text: str) -> None:
    parsed = parse_action(text)
    assert parsed.kind == "invalid"
    assert "empty" in parsed.problem


def test_search_then_answer_searches_and_is_flagged() -> None:
    parsed = parse_action("<search>q</search> <answer>x</answer>")
    assert (parsed.kind, parsed.content, parsed.well_formed) == ("search", "q", False)
    assert "2 <search>/<answer> tags" in parsed.problem


def test_answer_then_search_answers_and_is_flagged() -> None:
    # Search-R1 cuts at the first </search>; in that prefix the answer block comes first.
    parsed = parse_action("<answer>x</answer> <search>q</search>")
    assert (parsed.kind, parsed.content, parsed.well_formed) == ("answer", "x", False)


def test_many_answers_the_last_counts() -> None:
    parsed = parse_action("<answer>first</answer> hmm <answer>second</answer>")
    assert (parsed.kind, parsed.content, parsed.well_formed) == ("answer", "second", False)


def test_many_searches_the_first_is_executed() -> None:
    parsed = parse_action("<search>one</search><search>two</search><search>three</search>")
    assert (parsed.kind, parsed.content, parsed.well_formed) == ("search", "one", False)
    assert parsed.problem.startswith("3 ")


def test_nested_search_inside_answer_searches() -> None:
    parsed = parse_action("<answer><search>q</search></answer>")
    assert (parsed.kind, parsed.content, parsed.well_formed) == ("search", "q", False)


def test_nested_answer_inside_search_is_part_of_the_query() -> None:
    # Search-R1's non-greedy regex on the prefix up to the first </search>.
    parsed = parse_action("<search>q <answer>x</answer> r</search>")
    assert parsed.kind == "search"
    assert parsed.content == "q <answer>x</answer> r"
    assert not parsed.well_formed


def test_stray_opening_tag_flags_but_executes() -> None:
    parsed = parse_action("<answer>x</answer> and then <answer>")
    assert (parsed.kind, parsed.content, parsed.well_formed) == ("answer", "x", False)


def test_tags_mentioned_inside_think_are_ignored() -> None:
    parsed = parse_action(
        "<think>I could use <search> or <answer>x</answer></think><search>q</search>"
    )
    assert (parsed.kind, parsed.content, parsed.well_formed) == ("search", "q", True)
    assert parsed.thoughts == ("I could use <search> or <answer>x</answer>",)


def test_unclosed_think_does_not_hide_tags() -> None:
    parsed = parse_action("<think>hmm <search>q</search>")
    assert (parsed.kind, parsed.content, parsed.well_formed) == ("search", "q", True)


def test_case_insensitive_tags() -> None:
    assert parse_action("<SEARCH>q</Search>").content == "q"
    assert parse_action("<Answer>x</ANSWER>").kind == "answer"


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("<search>北京的人口</search>", "北京的人口"),
        ("<answer>Ærøskøbing</answer>", "Ærøskøbing"),
        ("<search>emoji 🎵 query</search>", "emoji 🎵 query"),
        ("<answer>Ωmega\u200b</answer>", "Ωmega\u200b"),  # zero-width space is not stripped
        ("<think>думаю</think><answer>Москва</answer>", "Москва"),
    ],
)
def test_unicode_content(text: str, content: str) -> None:
    assert parse_action(text).content == content


def test_text_around_tags_is_allowed() -> None:
    parsed = parse_action("Let me look this up. <search>who founded X</search> Thanks!")
    assert (parsed.kind, parsed.content, parsed.well_formed) == ("search", "who founded X", True)
