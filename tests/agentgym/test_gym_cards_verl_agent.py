"""Our EZPoints, NumberLine and Blackjack against verl-agent's ``gym_cards`` code as written.

Skipped unless ``AGENTGYM_VERL_AGENT_PATH`` points at a verl-agent checkout, and unless
what their code imports is importable: Pillow (their envs), ``torch`` (their projection
module). Their package ``__init__`` files (Ray) are not run: the parent packages are stood
in for, and only the env modules and ``projection.py`` are loaded. Their pictures need the
DejaVu fonts (Debian ``fonts-dejavu-core``); without them their envs cannot draw, and the
test skips.

For each game, on 240 training seeds and 60 evaluation seeds (300 deals): the deal (their
``reset(seed=s)`` against our task ``<game>-s``), then every step of a random play with
action texts of every kind (JSON answers, bare words, several words, garbage), each text
read by their ``gym_projection`` and stepped in their env as verl-agent's worker does
(``truncated`` dropped): validity, reward, ``terminated``, their info keys and values, and
the picture -- pixel for pixel when our env draws with their card files (``card_images``),
and with our own card faces: the same pixels everywhere outside the cards.
"""

from __future__ import annotations

import types
from collections.abc import Iterator

import numpy as np
import pytest

from agentgym.gym_cards.env import BlackjackEnv, EZPointsEnv, GymCardsEnv, NumberLineEnv
from agentgym.gym_cards.rules import action_text
from tests.differential import live_original
from tools import originals

ENV_VAR = "AGENTGYM_VERL_AGENT_PATH"
SEEDS = [*range(240), *(65_536 + 7_919 * k for k in range(60))]
THEIR_NAMES = {"ezpoints": "gym_cards/EZPoints-v0", "numberline": "gym_cards/NumberLine-v0",
               "blackjack": "gym_cards/Blackjack-v0"}
OURS = {"ezpoints": EZPointsEnv, "numberline": NumberLineEnv, "blackjack": BlackjackEnv}
TEXTS = {
    "ezpoints": [action_text(w) for w in ("1", "2", "3", "4", "5", "6", "7", "8", "9", "10",
                                           "+", "*", "=")]
    + ['{"thoughts": "3 times 4", "action": "3"}', '{"action": "12"}', "10", "3", "+",
       '"action": "10"', '"action": "1 0"', "garbage", "", '{"action" : "4"}'],
    "numberline": [action_text("+"), action_text("-"), '{"thoughts": "x", "action": "+"}',
                   '{"action": "+-"}', "+", "-", "plus", "", '"action":"-"'],
    "blackjack": [action_text("hit"), action_text("stand"), '{"thoughts": "17", "action": "hit"}',
                  "hit", "stand", '"action": "hit or stand"', '"ACTION": "Stand"', "", "t"],
}
CARD_BOXES = {  # (x, y, width, height) of every card on their frames
    "ezpoints": [(5, 55, 135, 189), (153, 55, 135, 189)],
    "blackjack": [(5, 25, 70, 98), (78, 25, 70, 98)]
    + [(5 + 74 * (i % 5), 150 + 102 * (i // 5), 70, 98) for i in range(10)],
}


@pytest.fixture(scope="module")
def verl_agent() -> Iterator[types.SimpleNamespace]:
    yield from live_original(ENV_VAR, originals.verl_agent_gym_cards,
                             what="verl-agent's gym_cards")


def outside_cards(image: np.ndarray, game: str) -> np.ndarray:
    """The frame with every card's box blanked (where our card faces differ)."""
    masked = image.copy()
    for x, y, width, height in CARD_BOXES.get(game, []):
        masked[y:y + height, x:x + width] = 0
    return masked


def _plain(value):
    """Lists for tuples, Python scalars for NumPy ones (their faces and suits are
    ``numpy.str_``), recursively."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _compare(info: dict, image: np.ndarray, their_image: np.ndarray, their_info: dict,
             game: str, exact: bool, where: object) -> None:
    for key, value in their_info.items():
        assert _plain(info[key]) == _plain(value), (where, key)
    if exact:
        assert np.array_equal(image, their_image), where
    else:
        assert np.array_equal(outside_cards(image, game), outside_cards(their_image, game)), \
            where


@pytest.mark.parametrize("game", ["ezpoints", "numberline", "blackjack"])
@pytest.mark.parametrize("faces", ["theirs", "ours"])
def test_deals_steps_and_pictures_equal_theirs(verl_agent, game, faces):
    exact = faces == "theirs" or game == "numberline"
    env: GymCardsEnv = OURS[game](card_images=verl_agent.img if faces == "theirs" else None,
                                  max_steps=12, num_tasks=2**32 - 1)
    their = verl_agent.envs[game]()
    rng = np.random.default_rng(0)
    compared = steps = ended = 0
    for seed in SEEDS:
        observation, info = env.reset(options={"task_id": f"{game}-{seed}"})
        their_image, their_info = their.reset(seed=seed)
        _compare(info, observation["image"], their_image, their_info, game, exact,
                 (seed, "reset"))
        for _ in range(env.max_steps):
            text = str(rng.choice(TEXTS[game]))
            indices, valids = verl_agent.projection([text], THEIR_NAMES[game])
            their_image, their_reward, their_terminated, _, their_info = their.step(indices[0])
            observation, reward, terminated, truncated, info = env.step(text)
            where = (seed, text)
            assert info["valid_action"] == bool(valids[0]), where
            assert reward == float(their_reward), where
            assert terminated == bool(their_terminated), where
            if terminated:
                assert info["success"] == bool(their_info["won"]), where
            _compare(info, observation["image"], their_image, their_info, game, exact, where)
            if game == "ezpoints":
                formula = "".join(str(e) for e in their_info["Formula"])
                assert observation["text"] == f"The formula so far is '{formula}'.", where
            steps += 1
            if terminated or truncated:
                ended += terminated
                break
        compared += 1
    assert compared == len(SEEDS) == 300
    assert steps >= 2 * len(SEEDS) and ended > 50


def test_the_ezpoints_expert_scores_in_their_env(verl_agent):
    env = EZPointsEnv(num_tasks=2**32 - 1)
    their = verl_agent.envs["ezpoints"]()
    won = 0
    for seed in SEEDS:
        env.reset(options={"task_id": f"ezpoints-{seed}"})
        their.reset(seed=seed)
        while (action := env.expert_action()) is not None:
            index, valid = verl_agent.projection([action], THEIR_NAMES["ezpoints"])
            assert valid == [1]
            _, their_reward, their_terminated, _, _ = their.step(index[0])
            _, reward, terminated, _, info = env.step(action)
            assert (reward, terminated) == (float(their_reward), their_terminated)
        won += info["success"] and their_reward == 10
    assert won == len(SEEDS)


def test_every_text_reads_as_their_projection_reads_it(verl_agent):
    from agentgym.gym_cards.rules import ACTION_WORDS, read_action

    rng = np.random.default_rng(1)
    alphabet = list('0123456789+-*= "actionhitsandz:{}') + ['"action":', "10", "hit", "stand"]
    texts = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 12)))) for _ in range(3_000)]
    for game, name in THEIR_NAMES.items():
        indices, valids = verl_agent.projection(list(texts), name)
        for text, index, valid in zip(texts, indices, valids, strict=True):
            ours = read_action(text, game)
            assert (ours is not None) == bool(valid), (game, text)
            if valid:
                assert ACTION_WORDS[game][ours] == ACTION_WORDS[game][index], (game, text)
