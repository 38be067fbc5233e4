"""Our visual Sokoban against verl-agent's recorded ``rgb_array`` frames
(``tests/data/originals/sokoban_visual.json.gz``, ``tools/record_originals.py``): no
checkout needed.

Recorded from verl-agent's Sokoban env in its visual mode on the 240 rooms of
``test_sokoban_visual_verl_agent.py`` (200 of 6 x 6 with one box, 40 of 7 x 7 with two),
played with random texts and with a solution: the reward, validity and win of every step
and each frame as its tile grid (which of gym-sokoban's tiles stands in every 16 x 16
block) and a digest of its pixels. Compared here: the frame's size, the tile of every
cell (our frame read against our tiles), the steps, and that two of our frames get the
same anchor exactly when their frames are equal. That our frames equal theirs pixel for
pixel when drawn with gym-sokoban's tile files needs those files: the live test.
"""

from __future__ import annotations

import numpy as np
import pytest

from agentgym.sokoban import SokobanRoom
from agentgym.sokoban.tiles import TILE
from agentgym.sokoban.visual import SokobanVisualEnv
from tests.differential import recorded

pytestmark = pytest.mark.differential

EPISODES = recorded("sokoban_visual")["episodes"]


def _tile_codes(image: np.ndarray, tiles: np.ndarray) -> str:
    """The index of the tile in every 16 x 16 block, row-major, one digit each ('?' where
    none matches)."""
    height, width = image.shape[0] // TILE, image.shape[1] // TILE
    blocks = image.reshape(height, TILE, width, TILE, 3).transpose(0, 2, 1, 3, 4)
    codes = np.full((height, width), -1)
    for code, tile in enumerate(tiles):
        codes[(blocks == tile).all(axis=(2, 3, 4))] = code
    return "".join("?" if c < 0 else str(int(c)) for c in codes.reshape(-1))


@pytest.mark.parametrize("size", ["6x6", "7x7"])
def test_frames_rewards_and_ends_equal_their_recorded_ones(size):
    episodes = [e for e in EPISODES if f"{e['size'][0]}x{e['size'][1]}" == size]
    anchors: dict[object, str] = {}
    frames = 0
    for episode in episodes:
        ours = SokobanVisualEnv(dim_room=tuple(episode["size"]), num_boxes=episode["boxes"],
                                max_steps=None)
        room = SokobanRoom(tuple(episode["fixed"]), tuple(episode["player"]),
                           tuple(tuple(box) for box in episode["box_cells"]))
        observation, info = ours.reset(options={"room": room})
        pairs = [(observation, info)]
        for text, their_reward, valid, won in episode["steps"]:
            observation, reward, terminated, _, info = ours.step(text)
            where = (episode["seed"], episode["play"], text)
            assert reward == pytest.approx(their_reward, abs=1e-12), where
            assert info["valid_action"] == bool(valid), where
            assert terminated == info["success"] == won, where
            pairs.append((observation, info))
        assert len(pairs) == len(episode["frames"])
        for (observation, info), (shape, codes, their_digest) in zip(
                pairs, episode["frames"], strict=True):
            image = observation["image"]
            assert list(image.shape) == shape == [16 * episode["size"][0],
                                                  16 * episode["size"][1], 3]
            assert _tile_codes(image, ours.tiles) == codes, episode["seed"]
            # their step groups key on the frame's pixels; equal frames, equal anchors
            assert anchors.setdefault(info["anchor"], their_digest) == their_digest
            frames += 1
        if episode["play"] == "solution":
            assert episode["steps"][-1][-1]  # every solution solves
    assert len(set(anchors.values())) == len(anchors)  # distinct anchors, distinct frames
    assert frames > 1_000
