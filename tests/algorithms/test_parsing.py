"""Action parsing: (action, format_ok) for well- and badly-formed answers."""

from __future__ import annotations

import pytest

from algorithms.agent.parsing import ParsedAction, parse_action


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>go</think><action>open red door</action>", ParsedAction("open red door", True)),
        ("<think>a\nb</think>\n<action>  look </action>", ParsedAction("look", True)),
        ("<THINK>x</THINK><ACTION>look</ACTION>", ParsedAction("look", True)),
        # missing think block
        ("<action>look</action>", ParsedAction("look", False)),
        # think after the action
        ("<action>look</action><think>x</think>", ParsedAction("look", False)),
        # two actions: the first one is executed, the rest ignored (the originals' cut)
        ("<think>x</think><action>a</action><action>b</action>", ParsedAction("a", True)),
        ("<think>x</think><action>a</action><think>y</think><action>b</action>",
         ParsedAction("a", True)),
        # empty action
        ("<think>x</think><action> </action>", ParsedAction("", False)),
        # cut by the token budget inside the tag: a format error
        ("<think>x</think><action>go north", ParsedAction("go north", False)),
        ("<think>x</think><action>go north</act", ParsedAction("go north</act", False)),
        # no tags at all: the last non-empty line is sent
        ("I will look around.\n\ngo west\n", ParsedAction("go west", False)),
        ("<think>only thinking</think>", ParsedAction("", False)),
        ("", ParsedAction("", False)),
    ],
)
def test_default_style(text, expected):
    assert parse_action(text) == expected


def test_without_think():
    assert parse_action("<action>look</action>", think=False) == ParsedAction("look", True)
    assert parse_action("look", think=False) == ParsedAction("look", False)


def test_empty_tag_makes_the_whole_answer_the_action():
    assert parse_action("  open  red\ndoor ", think=False, action_tag="") == \
        ParsedAction("open red door", True)
    assert parse_action("   ", think=False, action_tag="") == ParsedAction("", False)


def test_custom_tag():
    assert parse_action("<think>x</think><act>look</act>", action_tag="act") == \
        ParsedAction("look", True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>need facts</think><search>capital of France</search>",
         ParsedAction("<search>capital of France</search>", True)),
        ("<think>known</think><answer> Paris </answer>", ParsedAction("<answer>Paris</answer>", True)),
        # Search-R1's cut: after the first </search>, else the first </answer>
        ("<think>x</think><search>a</search><answer>b</answer>",
         ParsedAction("<search>a</search>", True)),
        ("<think>x</think><answer>b</answer><search>a</search>",
         ParsedAction("<answer>b</answer>", True)),
        ("<think>x</think><answer>b</answer><answer>c</answer>",
         ParsedAction("<answer>b</answer>", True)),
        # empty content is still an action
        ("<think>x</think><search></search>", ParsedAction("<search></search>", True)),
        ("<think>x</think><answer> </answer>", ParsedAction("<answer></answer>", True)),
        # case-sensitive tags, as in Search-R1
        ("<think>x</think><Search>a</Search>", ParsedAction("<think>x</think><Search>a</Search>",
                                                          False)),
        # mismatched tags are no action
        ("<think>x</think><search>a</answer>", ParsedAction("<think>x</think><search>a</answer>",
                                                           False)),
        # cut by the token budget inside the tag
        ("<think>x</think><search>capital of", ParsedAction("<think>x</think><search>capital of",
                                                           False)),
        ("<answer>Paris</answer>", ParsedAction("<answer>Paris</answer>", False)),
        ("Paris", ParsedAction("Paris", False)),
    ],
)
def test_searchqa_style(text, expected):
    assert parse_action(text, style="searchqa") == expected


def test_unknown_style():
    with pytest.raises(ValueError, match="style"):
        parse_action("x", style="nope")
