"""Our Sokoban against verl-agent's code as written, on the same rooms.

Skipped unless ``AGENTGYM_VERL_AGENT_PATH`` points at a verl-agent checkout, and unless
what their Sokoban env imports is importable: old ``gym`` (0.26), ``gym_sokoban`` (0.0.6,
which also needs ``imageio`` and ``pkg_resources``), ``torch``, ``transformers``,
``matplotlib``. Their package ``__init__`` files (Ray, OmegaConf) are not run: the
parent packages are stood in for, and only the Sokoban modules are loaded.

Compared: the rooms reverse play keeps (their ``reverse_playing`` on the same topology,
targets and player), the text at reset, and after every step of random and solving play
(injected into their env): the text, the reward, the validity their projection gives,
whether the player moved, and success.
"""

from __future__ import annotations

import types
from collections.abc import Iterator

import numpy as np
import pytest

from agentgym.sokoban import SokobanEnv, SokobanRoom, generate_room, parse_action
from agentgym.sokoban.rooms import (
    FLOOR,
    TARGET,
    WALL,
    place_player_and_targets,
    reverse_play,
    room_topology,
)
from tests.agentgym.test_sokoban import solve
from tests.differential import live_original
from tools import originals

ENV_VAR = "AGENTGYM_VERL_AGENT_PATH"
CODES = {WALL: 0, FLOOR: 1, TARGET: 2}
ACTION_TEXTS = ("up", "Down", "push left", "RIGHT", "still", "upward", "go north", "", "hop",
                "Move Right.", "down up")


@pytest.fixture(scope="module")
def verl_agent() -> Iterator[types.SimpleNamespace]:
    yield from live_original(ENV_VAR, originals.verl_agent_sokoban,
                             what="verl-agent's Sokoban env")


def _their_env(verl_agent, dim_room=(6, 6), num_boxes=1, max_steps=15):
    return verl_agent.env.SokobanEnv("tiny_rgb_array", dim_room=dim_room, num_boxes=num_boxes,
                                     max_steps=max_steps, search_depth=30)


def _inject(their, room: SokobanRoom) -> None:
    """Put ``room`` into their env as their ``reset`` leaves a generated one."""
    fixed = np.array([[CODES[symbol] for symbol in row] for row in room.fixed])
    state = fixed.copy()
    for box in room.boxes:
        state[box] = 3 if fixed[box] == 2 else 4
    state[room.player] = 5
    their.room_fixed, their.room_state = fixed, state
    their.player_position = np.array(room.player)
    their.num_env_steps = their.reward_last = their.boxes_on_target = 0


def _their_projection(verl_agent, text: str) -> tuple[int, int]:
    actions, valids = verl_agent.projection.sokoban_projection(
        [f"<think>plan</think><action>{text}</action>"])
    return actions[0], valids[0]


def test_reverse_play_keeps_the_same_room_as_theirs(verl_agent):
    their_utils = verl_agent.room_utils
    compared = 0
    for height, width, num_boxes, depth in [(6, 6, 1, 30), (7, 7, 2, 30), (8, 8, 3, 30),
                                            (6, 6, 1, 100)]:
        for seed in range(60):
            rng = np.random.default_rng(seed)
            floor = room_topology(rng, height, width, int(1.7 * (height + width)))
            placed = place_player_and_targets(rng, floor, num_boxes)
            if placed is None:
                continue
            fixed, player = placed
            structure = np.array([[CODES[symbol] for symbol in row] for row in fixed])
            state = structure.copy()
            state[player] = 5
            state[state == 2] = 4
            ours = reverse_play(fixed, player, search_depth=depth)
            room, mapping, _ = their_utils.reverse_playing(state, structure, depth)
            assert tuple(int(x) for x in np.argwhere(room == 5)[0]) == ours.player
            assert tuple(tuple(int(x) for x in k) for k in mapping) == ours.targets
            assert tuple(tuple(int(x) for x in v) for v in mapping.values()) == ours.boxes
            assert their_utils.best_room_score == ours.score
            assert their_utils.box_displacement_score(mapping) == ours.displacement
            assert len(their_utils.explored_states) == ours.explored
            compared += 1
    assert compared > 150


def test_action_text_is_read_as_their_projection_reads_it(verl_agent):
    env = SokobanEnv()
    words = {0: "still", 1: "up", 2: "down", 3: "left", 4: "right"}
    for text in ACTION_TEXTS + ("UP", "Left!", "stand still", "pickup", "update", "north"):
        action, valid = _their_projection(verl_agent, text)
        env.reset(seed=0)
        _, _, _, _, info = env.step(text)
        assert info["valid_action"] == bool(valid), text
        if valid:
            assert parse_action(text) == words[action], text


@pytest.mark.parametrize(("dim_room", "num_boxes"), [((6, 6), 1), ((7, 7), 2)])
def test_text_rewards_and_moves_equal_theirs_on_the_same_rooms(verl_agent, dim_room, num_boxes):
    ours = SokobanEnv(dim_room=dim_room, num_boxes=num_boxes, max_steps=None)
    their = _their_env(verl_agent, dim_room, num_boxes, max_steps=1000)
    rng = np.random.default_rng(0)
    solved = 0
    for seed in range(40):
        room = generate_room(np.random.default_rng(seed), *dim_room, num_boxes)
        random_play = [str(rng.choice(ACTION_TEXTS)) for _ in range(25)]
        for texts in (random_play, solve(room)):
            observation, _ = ours.reset(options={"room": room})
            _inject(their, room)
            assert observation == their.render("tiny_rgb_array")
            for text in texts:
                action, valid = _their_projection(verl_agent, text)
                their_obs, their_reward, _, their_info = their.step(action)
                observation, reward, terminated, _, info = ours.step(text)
                assert observation == their_obs, (seed, text)
                assert reward == pytest.approx(their_reward, abs=1e-12), (seed, text)
                assert info["valid_action"] == bool(valid)
                assert info["player_moved"] == their_info["action_is_effective"]
                assert terminated == info["success"] == their_info["won"] == their.success()
                if terminated:
                    solved += 1
                    break
    assert solved >= 40  # every solution solves, in both
