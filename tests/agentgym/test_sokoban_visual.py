"""``AgentGym/SokobanVisual-v0``: the text Sokoban's rooms and rules, seen as tiles."""

from __future__ import annotations

import numpy as np
import pytest

from agentgym.sokoban import SokobanEnv, SokobanRoom
from agentgym.sokoban.tiles import (
    DEFAULT_TILES,
    TILE,
    TILE_KINDS,
    load_tiles,
    render_room_image,
    room_codes,
)
from agentgym.sokoban.visual import LEGEND, TASK, SokobanVisualEnv

ROOM = SokobanRoom.from_rows([
    "######",
    "#P_O_#",
    "#_X_√#",
    "#____#",
    "######",
])


def _blocks(image: np.ndarray) -> np.ndarray:
    """(H, W, 16, 16, 3): the tile in every cell of a frame."""
    height, width = image.shape[0] // TILE, image.shape[1] // TILE
    return image.reshape(height, TILE, width, TILE, 3).transpose(0, 2, 1, 3, 4)


def test_every_cell_shows_its_tile_in_gym_sokobans_codes():
    codes = room_codes(ROOM.fixed, ROOM.player, ROOM.boxes)
    assert codes.tolist() == [
        [0, 0, 0, 0, 0, 0],
        [0, 5, 1, 2, 1, 0],
        [0, 1, 4, 1, 3, 0],
        [0, 1, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 0],
    ]
    image = render_room_image(ROOM.fixed, ROOM.player, ROOM.boxes)
    assert image.shape == (5 * TILE, 6 * TILE, 3) and image.dtype == np.uint8
    assert np.array_equal(_blocks(image), DEFAULT_TILES[codes])
    on_target = room_codes(ROOM.fixed, (1, 3), ROOM.boxes)
    assert on_target[1, 3] == 6 and on_target[1, 1] == 1


def test_our_tiles_follow_the_prompts_description():
    wall, floor, target, box_on_target, box, player, player_on_target = DEFAULT_TILES
    assert len(TILE_KINDS) == 7 and DEFAULT_TILES.shape == (7, 16, 16, 3)
    assert len({tile.tobytes() for tile in DEFAULT_TILES}) == 7
    red = np.array([232, 24, 24])
    assert (floor == 0).all()
    assert (target[7:9, 7:9] == red).all() and (target[2, 2:14] == red).all()  # diamond, edge
    assert (target[0] == 0).all()  # black beyond the outline
    yellow = (box[..., 0] > 200) & (box[..., 1] > 150) & (box[..., 2] < 60)
    assert yellow.mean() > 0.3 and (box[0, 0] != red).any()
    assert (box_on_target[0, :] == red).all() and (box_on_target[:, 15] == red).all()
    green = (player[..., 1] > 150) & (player[..., 0] < 100)
    assert green.mean() > 0.3 and (player[5, 5] == 0).all()  # a black eye
    assert (player_on_target[2, 2] == red).all() and (player[2, 2] == 0).all()
    assert (wall != wall[0, 0]).any(axis=-1).any()  # bricks and mortar


def test_rooms_rewards_and_state_anchors_equal_the_text_env():
    text = SokobanEnv(anchor="state")
    visual = SokobanVisualEnv(anchor="state")
    rng = np.random.default_rng(0)
    for seed in range(40):
        observation, info = visual.reset(seed=seed)
        text_observation, text_info = text.reset(seed=seed)
        assert info["task_id"] == text_info["task_id"] and info["anchor"] == text_info["anchor"]
        assert observation["text"] == LEGEND and info["task"] == TASK
        assert observation["image"].shape == (96, 96, 3)
        for _ in range(15):
            action = str(rng.choice(["up", "down", "left", "right", "still", "jump"]))
            step = visual.step(action)
            text_step = text.step(action)
            assert step[1:4] == text_step[1:4]
            assert {k: v for k, v in step[4].items() if k != "task"} == \
                {k: v for k, v in text_step[4].items() if k != "task"}
            room = text.room
            assert np.array_equal(step[0]["image"],
                                  render_room_image(room.fixed, room.player, room.boxes))
            if step[2] or step[3]:
                break


def test_observation_anchors_follow_the_frame():
    env = SokobanVisualEnv()
    observation, info = env.reset(options={"room": ROOM})
    start = info["anchor"]
    assert start[:2] == ("image", (80, 96, 3))
    assert env.step("jump")[4]["anchor"] == start  # invalid: the same frame
    assert env.step("up")[4]["anchor"] == start  # into a wall: the same frame
    moved = env.step("right")[4]["anchor"]
    assert moved != start
    assert env.step("left")[4]["anchor"] == start  # back where it started


def test_invalid_action_feedback_goes_before_the_legend():
    env = SokobanVisualEnv(invalid_action_feedback=True)
    env.reset(options={"room": ROOM})
    observation, *_, info = env.step("jump")
    first, rest = observation["text"].split("\n", 1)
    assert first.startswith("Invalid action: 'jump'") and rest == LEGEND
    assert info["valid_action"] is False


def test_frames_are_fresh_arrays_and_render_modes():
    env = SokobanVisualEnv(render_mode="rgb_array")
    assert env.render() is None
    observation, _ = env.reset(seed=1)
    observation["image"][:] = 0  # the caller's copy
    assert np.array_equal(env.render(), env.render_image()) and env.render().any()
    env.step("up")
    env.render()[:] = 0
    assert env.render().any()
    ansi = SokobanVisualEnv(render_mode="ansi")
    ansi.reset(seed=1)
    assert ansi.render() == LEGEND
    with pytest.raises(ValueError, match="render_mode"):
        SokobanVisualEnv(render_mode="human")


def test_tiles_dir_draws_with_the_files_there(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    for kind, tile in zip(TILE_KINDS, DEFAULT_TILES[::-1], strict=True):
        pil.fromarray(tile).save(tmp_path / f"{kind}.png")
    assert np.array_equal(load_tiles(tmp_path), DEFAULT_TILES[::-1])
    env = SokobanVisualEnv(tiles_dir=tmp_path)
    observation, _ = env.reset(options={"room": ROOM})
    codes = room_codes(ROOM.fixed, ROOM.player, ROOM.boxes)
    assert np.array_equal(_blocks(observation["image"]), DEFAULT_TILES[::-1][codes])
    pil.new("RGB", (8, 8)).save(tmp_path / "wall.png")
    with pytest.raises(ValueError, match="8 x 8, expected 16 x 16"):
        load_tiles(tmp_path)
    pil.fromarray(DEFAULT_TILES[0]).save(tmp_path / "wall.png")
    (tmp_path / "floor.png").unlink()
    with pytest.raises(FileNotFoundError, match="floor.png"):
        SokobanVisualEnv(tiles_dir=tmp_path)


def test_vector_env_carries_frames_and_a_failed_reset_gets_a_black_one():
    import gymnasium as gym

    from agentgym.vector import observation_rows

    venv = gym.make_vec("AgentGym/SokobanVisual-v0", num_envs=3, group_size=1, backend="sync")
    try:
        batch, infos = venv.reset(
            seed=0, options={"task_ids": [None, "sokoban-6x6-1box-nope", None]})
        assert batch["image"].shape == (3, 96, 96, 3) and venv.observation_space.contains(batch)
        observations = observation_rows(batch, 3)
        assert observations[0]["text"] == LEGEND and observations[0]["image"].any()
        assert observations[1]["text"] == "" and observations[1]["image"].shape == (96, 96, 3)
        assert not observations[1]["image"].any() and "env_error" in infos
        assert all(venv.single_observation_space.contains(o) for o in observations)
        batch, rewards, *_ = venv.step(["up", "up", "up"])
        assert observation_rows(batch, 3)[0]["image"].shape == (96, 96, 3)
    finally:
        venv.close()
