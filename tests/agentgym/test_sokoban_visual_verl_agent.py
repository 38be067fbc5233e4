"""Our visual Sokoban against verl-agent's Sokoban env in its visual mode (``'rgb_array'``,
gym-sokoban's ``room_to_rgb`` frames), on the same rooms.

Skipped as ``test_sokoban_verl_agent.py`` is (its fixture is reused): unless
``AGENTGYM_VERL_AGENT_PATH`` points at a checkout and their dependencies import (old
``gym``, ``gym_sokoban``, ``imageio``, ``pkg_resources``, ``torch``, ``transformers``,
``matplotlib``).

On 240 rooms (200 of 6 x 6 with one box, 40 of 7 x 7 with two), at reset and after every
step of random and solving play injected into both envs: the frame's size; which tile
stands in every cell (each 16 x 16 block of their frame matched to gym-sokoban's tile
files, each of ours to our tiles); the frame pixel for pixel when our env draws with
gym-sokoban's tile files (``tiles_dir``); the reward, the validity and the end; and that
two frames get the same anchor exactly when their frames are equal.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from agentgym.sokoban import generate_room
from agentgym.sokoban.tiles import DEFAULT_TILES, TILE, TILE_KINDS, load_tiles
from agentgym.sokoban.visual import SokobanVisualEnv
from tests.agentgym.test_sokoban import solve
from tests.agentgym.test_sokoban_verl_agent import (  # noqa: F401  (the fixture)
    ACTION_TEXTS,
    _inject,
    _their_projection,
    verl_agent,
)

ROOMS = [((6, 6), 1, seed) for seed in range(200)] + [((7, 7), 2, seed) for seed in range(40)]


def _surface_dir() -> Path:
    import gym_sokoban

    return Path(gym_sokoban.__file__).parent / "envs" / "surface"


def _tile_codes(image: np.ndarray, tiles: np.ndarray) -> np.ndarray:
    """The index of the tile in every 16 x 16 block of ``image`` (-1 where none matches)."""
    height, width = image.shape[0] // TILE, image.shape[1] // TILE
    blocks = image.reshape(height, TILE, width, TILE, 3).transpose(0, 2, 1, 3, 4)
    codes = np.full((height, width), -1)
    for code, tile in enumerate(tiles):
        codes[(blocks == tile).all(axis=(2, 3, 4))] = code
    return codes


def test_our_tiles_are_seven_different_pictures():
    assert DEFAULT_TILES.shape == (len(TILE_KINDS), TILE, TILE, 3)
    flat = DEFAULT_TILES.reshape(len(TILE_KINDS), -1)
    assert len({row.tobytes() for row in flat}) == len(TILE_KINDS)


@pytest.mark.parametrize("tiles", ["theirs", "ours"])
def test_frames_rewards_and_ends_equal_theirs_on_the_same_rooms(verl_agent, tiles):  # noqa: F811
    their_tiles = load_tiles(_surface_dir())
    rng = np.random.default_rng(0)
    anchors: dict[tuple, bytes] = {}
    compared = frames = solved = 0
    for dim_room, num_boxes, seed in ROOMS:
        ours = SokobanVisualEnv(dim_room=dim_room, num_boxes=num_boxes, max_steps=None,
                                tiles_dir=_surface_dir() if tiles == "theirs" else None)
        their = verl_agent.env.SokobanEnv("rgb_array", dim_room=dim_room, num_boxes=num_boxes,
                                          max_steps=1000, search_depth=30)
        room = generate_room(np.random.default_rng(seed), *dim_room, num_boxes)
        random_play = [str(rng.choice(ACTION_TEXTS)) for _ in range(20)]
        for texts in (random_play, solve(room)):
            observation, info = ours.reset(options={"room": room})
            _inject(their, room)
            pairs = [(observation, info, their.render("rgb_array"))]
            for text in texts:
                action, valid = _their_projection(verl_agent, text)
                their_frame, their_reward, _, their_info = their.step(action)
                observation, reward, terminated, _, info = ours.step(text)
                assert reward == pytest.approx(their_reward, abs=1e-12), (seed, text)
                assert info["valid_action"] == bool(valid), (seed, text)
                assert terminated == info["success"] == their_info["won"], (seed, text)
                pairs.append((observation, info, their_frame))
                if terminated:
                    solved += 1
                    break
            for observation, info, their_frame in pairs:
                image = observation["image"]
                assert image.shape == their_frame.shape == (16 * dim_room[0],
                                                            16 * dim_room[1], 3)
                codes = _tile_codes(image, ours.tiles)
                assert (codes >= 0).all() and np.array_equal(
                    codes, _tile_codes(their_frame, their_tiles)), seed
                if tiles == "theirs":
                    assert np.array_equal(image, their_frame), seed
                # their step groups key on the frame's pixels (to_hashable); a digest here
                their_key = (their_frame.shape, hashlib.sha256(their_frame.tobytes()).digest())
                assert anchors.setdefault(info["anchor"], their_key) == their_key
                frames += 1
        compared += 1
    assert compared == len(ROOMS) == 240 and solved >= 240  # every solution solves
    assert frames > 5_000
    # equal frames, equal anchors: distinct anchors are distinct frames
    assert len(set(anchors.values())) == len(anchors)
