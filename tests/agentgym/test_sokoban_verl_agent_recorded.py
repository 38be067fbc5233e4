"""Our Sokoban against verl-agent's recorded outputs (``tests/data/originals/sokoban.json.gz``,
``tools/record_originals.py``): no checkout needed.

Recorded from verl-agent's code as written: its ``reverse_playing`` on 350 random room
topologies (7 sizes, box counts and depths), its ``sokoban_projection`` on 879 action texts
(random ones among them), and its env in text mode on 140 random rooms (6x6 to 8x8, one or
two boxes), each played with 25 random texts and with a solution; every step's text,
reward, validity, movement and win. ``test_sokoban_verl_agent.py`` runs the same kinds of
comparison against a live checkout.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from agentgym.sokoban import SokobanEnv, SokobanRoom, parse_action
from agentgym.sokoban.rooms import reverse_play
from tests.differential import recorded

pytestmark = pytest.mark.differential

CASES = recorded("sokoban")
WORDS = {0: "still", 1: "up", 2: "down", 3: "left", 4: "right"}
"""Their action indices."""


def _room(episode: dict) -> SokobanRoom:
    return SokobanRoom(tuple(episode["fixed"]), tuple(episode["player"]),
                       tuple(tuple(box) for box in episode["box_cells"]))


def _configs() -> dict[str, list[dict]]:
    by_config = defaultdict(list)
    for episode in CASES["episodes"]:
        height, width = episode["size"]
        by_config[f"{height}x{width}-{episode['boxes']}box"].append(episode)
    return by_config


def test_reverse_play_keeps_the_rooms_their_reverse_playing_kept():
    compared = 0
    for case in CASES["reverse_play"]:
        ours = reverse_play(tuple(case["fixed"]), tuple(case["player"]),
                            search_depth=case["depth"])
        where = (case["fixed"], case["depth"])
        assert list(ours.player) == case["player_after"], where
        assert [list(t) for t in ours.targets] == case["targets"], where
        assert [list(b) for b in ours.boxes] == case["boxes"], where
        assert (ours.score, ours.displacement, ours.explored) == (
            case["score"], case["displacement"], case["explored"]), where
        compared += 1
    assert compared == 350


def test_action_texts_are_read_as_their_projection_read_them():
    env = SokobanEnv()
    for text, action, valid in CASES["projection"]:
        env.reset(seed=0)
        _, _, _, _, info = env.step(text)
        assert info["valid_action"] == bool(valid), text
        if valid:
            assert parse_action(text) == WORDS[action], text
    assert len(CASES["projection"]) > 800


@pytest.mark.parametrize("config", sorted(_configs()))
def test_texts_rewards_and_moves_equal_their_recorded_steps(config):
    episodes = _configs()[config]
    height, width = episodes[0]["size"]
    ours = SokobanEnv(dim_room=(height, width), num_boxes=episodes[0]["boxes"],
                      max_steps=None)
    steps = 0
    for episode in episodes:
        observation, _ = ours.reset(options={"room": _room(episode)})
        assert observation == episode["reset"], episode["seed"]
        for text, their_obs, their_reward, valid, moved, won in episode["steps"]:
            observation, reward, terminated, _, info = ours.step(text)
            where = (episode["seed"], episode["play"], text)
            assert observation == their_obs, where
            assert reward == pytest.approx(their_reward, abs=1e-12), where
            assert info["valid_action"] == bool(valid), where
            assert info["player_moved"] == moved, where
            assert terminated == info["success"] == won, where
            steps += 1
        if episode["play"] == "solution":  # every solution solves, in both
            assert episode["steps"][-1][-1] and terminated, episode["seed"]
    assert steps > 20 * len(episodes) // 2
