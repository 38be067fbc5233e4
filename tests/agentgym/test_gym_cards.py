"""gym-cards' EZPoints, NumberLine and Blackjack (agentgym/gym_cards): hand-computed cases.

The deals pinned here were read off gym-cards' own envs (``reset(seed=s)``); the
differential test (``test_gym_cards_verl_agent.py``) checks them on 300 seeds per game.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("PIL", reason="the gym-cards envs draw with Pillow (the vision extra)")

from agentgym.core import INFO_KEYS  # noqa: E402
from agentgym.gym_cards import pictures  # noqa: E402
from agentgym.gym_cards.env import BlackjackEnv, EZPointsEnv, NumberLineEnv  # noqa: E402
from agentgym.gym_cards.rules import (  # noqa: E402
    ACTION_WORDS,
    action_text,
    blackjack_reward,
    evaluate_formula,
    ezpoints_deal,
    hand_total,
    numberline_start,
    read_action,
    solve_ezpoints,
)

TABLE = (0x35, 0x65, 0x4D)


def a(word: str) -> str:
    return action_text(word)


def _word(text: str, game: str) -> str | None:
    index = read_action(text, game)
    return None if index is None else ACTION_WORDS[game][index]


@pytest.mark.parametrize(("game", "text", "word"), [
    ("ezpoints", '{"action": "3"}', "3"),
    ("ezpoints", '{"thoughts": "3 and 4", "action": "10"}', "10"),  # after the key only
    ("ezpoints", '"action": "12"', None),  # 1 and 2: two words
    ("ezpoints", '"action": "1"', "1"),
    ("ezpoints", "3", "3"),  # no key: the last character
    ("ezpoints", "10", None),  # no key: "0"
    ("ezpoints", "=", "="),
    ("ezpoints", '{"action" : "4"}', None),  # not the key as written: the last character "}"
    ("ezpoints", "", None),
    ("ezpoints", '"action": "10"}. then 3', None),  # 10 and 3
    ("numberline", '"action": "+-"', None),
    ("numberline", "+", "+"),
    ("numberline", '{"action": "-"}', "-"),
    ("numberline", "x-", "-"),
    ("blackjack", "hit", None),  # no key: "t"
    ("blackjack", '"ACTION": "Stand"', "stand"),  # lower-cased first
    ("blackjack", '"action": "hit or stand"', None),
    ("blackjack", '"action":"stand"', "stand"),
])
def test_actions_are_read_as_verl_agents_projection_reads_them(game, text, word):
    assert _word(text, game) == word


def test_every_canonical_answer_reads_as_its_word():
    for game, words in ACTION_WORDS.items():
        assert [_word(action_text(w), game) for w in words] == list(words)


def test_deals_pinned_from_gym_cards():
    assert ezpoints_deal(0) == (["H4", "C8"], [4, 8])
    assert ezpoints_deal(2) == (["H2", "S6"], [2, 6])
    assert ezpoints_deal(5) == (["DJ", "D2"], [10, 2])
    assert numberline_start(0) == (3, 4) and numberline_start(2) == (0, 1)


def test_every_ezpoints_deal_can_reach_12():
    values = {"T": 10, "J": 10, "Q": 10, "K": 10}
    for seed in range(2_000):
        cards, numbers = ezpoints_deal(seed)
        assert len(cards) == len(numbers) == 2 and all(2 <= n <= 10 for n in numbers)
        assert sum(numbers) == 12 or numbers[0] * numbers[1] == 12
        assert [values.get(c[1]) or int(c[1]) for c in cards] == numbers
        assert all(c[0] in "HSDC" for c in cards)


@pytest.mark.parametrize(("formula", "value"), [
    ([3, "*", "+", 4], 12), ([3, 4], 34), ([3, "+"], None), ([], None), (["+", 3, "*", 4], 12),
    ([2, "*", "*", 3], 8), ([10, "+", 2], 12),
])
def test_formulas_are_read_as_python_reads_their_characters(formula, value):
    assert evaluate_formula(formula) == value


def test_only_ezpoints_characters_are_evaluated():
    with pytest.raises(ValueError, match="not an EZPoints formula"):
        evaluate_formula(["__import__('os')"])


@pytest.mark.parametrize(("numbers", "formula", "words"), [
    ([4, 8], [], ["4", "+", "8", "="]),
    ([2, 6], [], ["2", "*", "6", "="]),
    ([6, 6], [], ["6", "+", "6", "="]),
    ([3, 4], ["+"], ["3", "*", "4", "="]),  # "+3*4" is 12
    ([4, 8], [4, "+", 8], ["="]),
    ([3, 4], [3, "+"], None),  # 3 + 4 is 7, and no other formula is 12
    ([3, 4], ["*"], None),
])
def test_the_ezpoints_solver_finds_a_shortest_scoring_continuation(numbers, formula, words):
    assert solve_ezpoints(numbers, formula) == words


def test_an_ezpoints_episode_by_hand():
    env = EZPointsEnv(anchor="observation")
    observation, info = env.reset(options={"task_id": "ezpoints-0"})  # H4, C8
    assert (info["Cards"], info["Numbers"], info["Formula"], info["won"]) == (
        ["H4", "C8"], [4, 8], [], False)
    assert observation["text"] == "The formula so far is ''."
    assert observation["image"].shape == (300, 300, 3)
    assert info["admissible_actions"] == tuple(a(w) for w in ACTION_WORDS["ezpoints"])
    start = info["anchor"]
    observation, reward, terminated, truncated, info = env.step(a("4"))
    assert (reward, terminated, info["Formula"]) == (0.0, False, [4])
    assert observation["text"] == "The formula so far is '4'." and info["anchor"] != start
    after_four = info["anchor"]
    for refused in ("4", "3"):  # used up, not on the cards: valid, nothing happens
        _, reward, _, _, info = env.step(a(refused))
        assert info["valid_action"] and reward == 0.0 and info["Formula"] == [4]
        assert info["anchor"] == after_four
    _, _, _, _, info = env.step("no key here")
    assert info["valid_action"] is False and info["Formula"] == [4]
    env.step(a("+"))
    observation, _, _, _, info = env.step('{"thoughts": "4 + 8 = 12", "action": "8"}')
    assert observation["text"] == "The formula so far is '4+8'."
    observation, reward, terminated, truncated, info = env.step(a("="))
    assert (reward, terminated, truncated) == (10.0, True, False)
    assert info["success"] is True and info["won"] is True and info["Formula"] == [4, "+", 8]


def test_a_long_ezpoints_formula_takes_no_more_characters_until_max_steps():
    env = EZPointsEnv(anchor="state")
    env.reset(options={"task_id": "ezpoints-0"})
    for word in ("+", "*", "+", "*", "+", "*"):
        env.step(a(word))
    _, reward, terminated, truncated, info = env.step(a("4"))
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["Formula"] == ["+", "*", "+", "*", "+", "*"]
    assert info["anchor"] == (("H4", "C8"), ("+", "*", "+", "*", "+", "*"))
    _, reward, terminated, truncated, info = env.step(a("="))  # not evaluated any more
    assert (reward, terminated, truncated, info["won"]) == (0.0, False, True, False)


def test_a_wrong_ezpoints_formula_scores_0():
    env = EZPointsEnv()
    env.reset(options={"task_id": "ezpoints-2"})  # 2, 6: 2 + 6 is 8
    for word in ("2", "+", "6"):
        env.step(a(word))
    _, reward, terminated, _, info = env.step(a("="))
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    env.reset(options={"task_id": "ezpoints-2"})
    env.step(a("2"))
    _, reward, terminated, _, _ = env.step(a("="))  # one card unused
    assert (reward, terminated) == (0.0, True)


def test_a_numberline_episode_by_hand():
    env = NumberLineEnv(anchor="state")
    observation, info = env.reset(options={"task_id": "numberline-0"})  # from 3 to 4
    assert (info["Target"], info["Current"], info["anchor"]) == (4, 3, (4, 3))
    assert observation["text"] == "The image shows the target number and the current number."
    steps = [env.step(a(w)) for w in ("-", "+", "+")]
    assert [s[1] for s in steps] == [-1.0, 0.0, 1.0]
    assert [s[4]["Current"] for s in steps] == [2, 3, 4]
    assert steps[-1][2] is True and steps[-1][4]["success"] and steps[-1][4]["won"]
    env.reset(options={"task_id": "numberline-2"})  # from 0 to 1
    _, reward, _, _, info = env.step(a("-"))  # below 0: stays, no closer
    assert (reward, info["Current"]) == (-1.0, 0)
    for _ in range(8):
        _, _, terminated, truncated, _ = env.step(a("-"))
    assert not terminated and not truncated
    assert env.step(a("-"))[3] is True  # the 10th step


def test_blackjack_totals_and_scores():
    ace, king, queen, nine, five = (1, "A", "S"), (10, "K", "H"), (10, "Q", "D"), (9, "9", "C"), \
        (5, "5", "H")
    assert hand_total([ace, king]) == 21 and hand_total([ace, ace, nine]) == 21
    assert hand_total([ace, ace]) == 12 and hand_total([king, queen, five]) == 25
    assert blackjack_reward([king, queen], [king, nine]) == 1.0
    assert blackjack_reward([king, nine], [king, queen]) == 0.0  # a loss scores 0
    assert blackjack_reward([king, nine], [king, nine]) == 0.0
    assert blackjack_reward([king, queen, five], [king, queen, five]) == 0.0  # both bust
    assert blackjack_reward([ace, ace], [king, queen, five]) == 1.0


def test_a_blackjack_episode_pinned_from_gym_cards():
    env = BlackjackEnv(anchor="state")
    _, info = env.reset(options={"task_id": "blackjack-0"})
    assert info["Dealer Card"] == [(10, "Q", "H"), (4, "4", "D")]
    assert info["Player Card"] == [(1, "A", "C"), (1, "A", "C")]
    assert info["anchor"] == (((10, "Q", "H"), (4, "4", "D")), ((1, "A", "C"), (1, "A", "C")))
    _, reward, terminated, _, info = env.step(a("stand"))
    assert (reward, terminated, info["won"], info["success"]) == (1.0, True, True, True)
    assert info["Dealer Card"][2] == (10, "Q", "H")  # the dealer draws to 24: bust


def test_blackjack_ends_on_stand_or_bust():
    env = BlackjackEnv()
    for seed in range(200):
        env.reset(options={"task_id": f"blackjack-{seed}"})
        _, reward, terminated, _, info = env.step(a("stand"))
        dealer = hand_total(info["Dealer Card"])
        assert terminated and (dealer >= 17) and reward in (0.0, 1.0)
        env.reset(options={"task_id": f"blackjack-{seed}"})
        for _ in range(15):
            _, reward, terminated, truncated, info = env.step(a("hit"))
            if terminated:
                break
        assert terminated and hand_total(info["Player Card"]) > 21 and reward == 0.0


@pytest.mark.parametrize("env_class", [EZPointsEnv, NumberLineEnv, BlackjackEnv])
def test_every_step_carries_the_contract_and_the_original_info_keys(env_class):
    own = {EZPointsEnv: {"Cards", "Numbers", "Formula", "won"},
           NumberLineEnv: {"Target", "Current", "won"},
           BlackjackEnv: {"Dealer Card", "Player Card", "won"}}[env_class]
    env = env_class()
    rng = np.random.default_rng(0)
    for seed in range(20):
        observation, info = env.reset(seed=seed)
        assert set(info) == set(INFO_KEYS) | own
        for _ in range(10):
            words = ACTION_WORDS[env.game]
            text = a(str(rng.choice(words))) if rng.random() < 0.8 else "??"
            observation, _, terminated, truncated, info = env.step(text)
            assert set(info) == set(INFO_KEYS) | own
            assert env.observation_space.contains(observation)
            if terminated or truncated:
                break


def test_pictures_have_gym_cards_layout():
    faces = pictures.CardFaces()
    frame = pictures.ezpoints_frame(["H4", "C8"], "", faces)
    assert frame.shape == (300, 300, 3) and tuple(frame[0, 0]) == TABLE
    assert tuple(frame[150, 70]) != TABLE and tuple(frame[150, 220]) != TABLE  # two cards
    assert tuple(frame[150, 145]) == TABLE  # the gap between them
    assert not np.array_equal(frame, pictures.ezpoints_frame(["H4", "C8"], "4 +", faces))
    assert np.array_equal(frame[:250], pictures.ezpoints_frame(["H4", "C8"], "4 +", faces)[:250])
    line = pictures.numberline_frame(4, 3)
    assert tuple(line[0, 0]) == (255, 255, 255) and (line[60:100, 30:200] < 100).any()
    assert not np.array_equal(line, pictures.numberline_frame(4, 2))
    table = pictures.blackjack_frame("HQ", ["C2", "D3", "H4", "S5", "C6", "D7"], faces)
    assert tuple(table[60, 40]) != TABLE and tuple(table[60, 110]) != TABLE  # up, back
    assert tuple(table[200, 250]) != TABLE  # the fourth player card
    assert tuple(table[280, 40]) != TABLE and tuple(table[280, 110]) == TABLE  # row two: one
    back = np.asarray(faces.picture(pictures.BACK, 70, 98))
    assert back[..., 2].mean() > back[..., 0].mean()  # blue
    with pytest.raises(ValueError, match="not a card name"):
        pictures.draw_card("X9", 70, 98)


def test_card_images_must_be_a_folder_with_the_cards(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        EZPointsEnv(card_images=tmp_path / "missing")
    env = EZPointsEnv(card_images=tmp_path)
    with pytest.raises(FileNotFoundError, match="no card picture"):
        env.reset(options={"task_id": "ezpoints-0"})


def test_without_pillow_the_env_says_which_extra_to_install(monkeypatch):
    for name in ("PIL", "PIL.Image", "PIL.ImageDraw", "PIL.ImageFont"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'agentgym-text\[vision\]'"):
        EZPointsEnv()
