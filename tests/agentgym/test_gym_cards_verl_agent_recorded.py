"""Our EZPoints, NumberLine and Blackjack against verl-agent's recorded gym-cards outputs
(``tests/data/originals/gym_cards.json.gz``, ``tools/record_originals.py``): no checkout
needed.

Recorded from verl-agent's gym-cards envs and ``gym_projection`` as written, on the deals
and random plays of ``test_gym_cards_verl_agent.py``, 150 deals per game (seeds 0-119 and
30 evaluation seeds from 65,536): validity, reward, ``terminated``, every one of their info keys and
values, and their frames as digests. Our frames (our own card faces) must equal theirs
outside the cards (NumberLine draws no cards: the whole frame); with their card files the
live test compares every pixel. Also: 3,000 random texts as their projection reads them,
and the EZPoints expert's actions, which score 10 in their env.
"""

from __future__ import annotations

import numpy as np
import pytest

from agentgym.gym_cards.env import BlackjackEnv, EZPointsEnv, NumberLineEnv
from agentgym.gym_cards.rules import ACTION_WORDS, read_action
from tests.agentgym.test_gym_cards_verl_agent import outside_cards
from tests.differential import recorded
from tools.originals import frame_digest, plain

pytestmark = pytest.mark.differential

CASES = recorded("gym_cards")
OURS = {"ezpoints": EZPointsEnv, "numberline": NumberLineEnv, "blackjack": BlackjackEnv}
MAX_STEPS = 12


def _compare(info: dict, image: np.ndarray, their_info: dict, their_frames: list[str],
             game: str, where: object) -> None:
    for key, value in their_info.items():
        assert plain(info[key]) == value, (where, key)
    whole, outside = their_frames
    if game == "numberline":  # no cards: every pixel
        assert frame_digest(image) == whole, where
    else:
        assert frame_digest(outside_cards(image, game)) == outside, where


@pytest.mark.parametrize("game", sorted(OURS))
def test_deals_steps_and_pictures_equal_their_recorded_ones(game):
    env = OURS[game](max_steps=MAX_STEPS, num_tasks=2**32 - 1)
    steps = ended = 0
    for deal in CASES["games"][game]:
        seed = deal["seed"]
        observation, info = env.reset(options={"task_id": f"{game}-{seed}"})
        _compare(info, observation["image"], deal["infos"][0], deal["frames"][0], game,
                 (seed, "reset"))
        for index, (text, _, valid, their_reward, their_terminated) in enumerate(deal["steps"]):
            observation, reward, terminated, truncated, info = env.step(text)
            where = (seed, index, text)
            their_info = deal["infos"][index + 1]
            assert info["valid_action"] == bool(valid), where
            assert reward == their_reward, where
            assert terminated == their_terminated, where
            if terminated:
                assert info["success"] == bool(their_info["won"]), where
            _compare(info, observation["image"], their_info, deal["frames"][index + 1], game,
                     where)
            if game == "ezpoints":
                formula = "".join(str(e) for e in their_info["Formula"])
                assert observation["text"] == f"The formula so far is '{formula}'.", where
            steps += 1
        # their episode ended where ours did: at their end, or at our step limit
        assert terminated or truncated, seed
        ended += terminated
    assert len(CASES["games"][game]) == 150
    assert steps >= 300 and ended > 25


def test_the_ezpoints_expert_plays_the_actions_that_scored_in_their_env():
    env = EZPointsEnv(num_tasks=2**32 - 1)
    won = 0
    for case in CASES["expert"]:
        env.reset(options={"task_id": f"ezpoints-{case['seed']}"})
        for action, _, valid, their_reward, their_terminated in case["actions"]:
            assert env.expert_action() == action, case["seed"]
            assert valid == 1
            _, reward, terminated, _, info = env.step(action)
            assert (reward, terminated) == (their_reward, their_terminated), case["seed"]
        assert env.expert_action() is None
        won += info["success"] and their_reward == 10
    assert won == len(CASES["expert"]) == 150


def test_every_random_text_reads_as_their_projection_read_it():
    texts = CASES["texts"]
    for game, answers in CASES["projection"].items():
        for text, (index, valid) in zip(texts, answers, strict=True):
            ours = read_action(text, game)
            assert (ours is not None) == bool(valid), (game, text)
            if valid:
                assert ACTION_WORDS[game][ours] == ACTION_WORDS[game][index], (game, text)
    assert len(texts) == 3_000
