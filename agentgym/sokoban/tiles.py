"""Pictures of Sokoban rooms: one 16 x 16 tile per cell, drawn with NumPy.

verl-agent's visual Sokoban (``env.sokoban.mode='rgb_array'``) shows gym-sokoban's
``room_to_rgb`` frame: the room with every cell replaced by a 16 x 16 RGB tile, so an
``H x W`` room is a ``16H x 16W`` image (96 x 96 for 6 x 6). We draw the same seven kinds
of tile (in gym-sokoban's order :data:`TILE_KINDS`) with our own code, to the description
verl-agent's visual prompt gives of them: red-brown brick walls, black floor, a target as
a black tile with a red square outline and a small red diamond in the middle, a box as a
yellow crate with a thin orange frame and an orange X, a box on a target with a red rim, the
player as a small green alien with two antennae and black eyes (with the red outline when
it stands on a target). Colours and shapes are ours, not gym-sokoban's pixels.

:func:`load_tiles` reads gym-sokoban's own tile files from a folder the user names (its
``gym_sokoban/envs/surface``); with them the frames are pixel for pixel gym-sokoban's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from agentgym.images import require_pillow
from agentgym.sokoban.rooms import TARGET, WALL, Cell

TILE = 16
"""Tile side in pixels (gym-sokoban's)."""

TILE_KINDS: tuple[str, ...] = ("wall", "floor", "box_target", "box_on_target", "box",
                               "player", "player_on_target")
"""The kinds of tile, in gym-sokoban's order (its room codes 0-6); also its file names."""

Tiles = np.ndarray
"""``(7, 16, 16, 3)`` ``uint8``: one tile per kind of :data:`TILE_KINDS`."""

_BLACK = (0, 0, 0)
_BRICK, _MORTAR = (176, 68, 30), (168, 152, 140)
_RED = (232, 24, 24)
_CRATE, _CRATE_MARK = (236, 196, 28), (226, 112, 18)
_ALIEN = (52, 196, 40)


def _grid() -> tuple[np.ndarray, np.ndarray]:
    return np.mgrid[0:TILE, 0:TILE]  # rows, columns


def _filled(colour: tuple[int, int, int]) -> np.ndarray:
    tile = np.empty((TILE, TILE, 3), dtype=np.uint8)
    tile[...] = colour
    return tile


def _wall() -> np.ndarray:
    """Courses of bricks 4 px high, joints offset by half a brick every other course."""
    tile = _filled(_BRICK)
    rows, cols = _grid()
    course = rows // 4
    bed_joint = rows % 4 == 3
    head_joint = (cols + 4 * (course % 2)) % 8 == 7
    tile[bed_joint | head_joint] = _MORTAR
    return tile


def _target_marks(tile: np.ndarray) -> np.ndarray:
    """A red square outline 2 px inside the tile and a red diamond in its middle."""
    rows, cols = _grid()
    outline = ((np.minimum(rows, cols) == 2) | (np.maximum(rows, cols) == 13)) & \
        (np.minimum(rows, cols) >= 2) & (np.maximum(rows, cols) <= 13)
    tile[outline] = _RED
    return tile


def _target() -> np.ndarray:
    tile = _target_marks(_filled(_BLACK))
    rows, cols = _grid()
    tile[np.abs(rows - 7.5) + np.abs(cols - 7.5) <= 2.5] = _RED
    return tile


def _crate() -> np.ndarray:
    """A yellow crate: an orange frame 1 px wide and an orange X corner to corner."""
    tile = _filled(_CRATE)
    rows, cols = _grid()
    frame = (np.minimum(rows, cols) == 0) | (np.maximum(rows, cols) == 15)
    cross = (np.abs(rows - cols) <= 1) | (np.abs(rows + cols - 15) <= 1)
    tile[frame | cross] = _CRATE_MARK
    return tile


def _box_on_target() -> np.ndarray:
    tile = _crate()
    rows, cols = _grid()
    tile[(np.minimum(rows, cols) <= 1) | (np.maximum(rows, cols) >= 14)] = _RED
    return tile


def _alien(tile: np.ndarray) -> np.ndarray:
    """A green alien: two antennae, a round head with two black eyes, a body and legs."""
    rows, cols = _grid()
    head = ((rows - 7.0) ** 2 / 16 + (cols - 7.5) ** 2 / 30 <= 1) & (rows <= 8)
    antennae = ((rows >= 1) & (rows <= 3)) & ((cols == 4 - (rows == 1)) |
                                                (cols == 11 + (rows == 1)))
    body = (rows >= 8) & (rows <= 12) & (cols >= 3) & (cols <= 12)
    legs = (rows >= 13) & (rows <= 14) & ((cols == 5) | (cols == 6) | (cols == 9) | (cols == 10))
    tile[head | antennae | body | legs] = _ALIEN
    eyes = (rows >= 5) & (rows <= 6) & ((cols == 5) | (cols == 6) | (cols == 9) | (cols == 10))
    tile[eyes] = _BLACK
    return tile


def draw_tiles() -> Tiles:
    """AgentGym's own seven tiles, ``(7, 16, 16, 3)`` ``uint8`` in :data:`TILE_KINDS` order."""
    tiles = [_wall(), _filled(_BLACK), _target(), _box_on_target(), _crate(),
             _alien(_filled(_BLACK)), _alien(_target_marks(_filled(_BLACK)))]
    return np.stack(tiles)


DEFAULT_TILES: Tiles = draw_tiles()
DEFAULT_TILES.flags.writeable = False


def load_tiles(directory: str | Path) -> Tiles:
    """gym-sokoban's tiles, read from ``directory`` (its ``gym_sokoban/envs/surface``
    folder: ``wall.png``, ``floor.png``, ... as named by :data:`TILE_KINDS`). Needs Pillow
    (the ``vision`` extra).

    Raises:
        FileNotFoundError: a tile file is missing.
        ValueError: a tile is not a 16 x 16 image.
    """
    image_module = require_pillow().Image
    folder = Path(directory)
    tiles = []
    for kind in TILE_KINDS:
        path = folder / f"{kind}.png"
        if not path.is_file():
            raise FileNotFoundError(f"no Sokoban tile {path} (expected gym-sokoban's "
                                    f"surface folder with {', '.join(TILE_KINDS)} .png)")
        with image_module.open(path) as picture:
            tile = np.asarray(picture.convert("RGB"), dtype=np.uint8)
        if tile.shape != (TILE, TILE, 3):
            raise ValueError(f"Sokoban tile {path} is {tile.shape[1]} x {tile.shape[0]}, "
                             f"expected {TILE} x {TILE}")
        tiles.append(tile)
    stacked = np.stack(tiles)
    stacked.flags.writeable = False
    return stacked


def room_codes(fixed: Sequence[str], player: Cell, boxes: Iterable[Cell]) -> np.ndarray:
    """``(H, W)`` int array of gym-sokoban's room codes (indices into :data:`TILE_KINDS`):
    0 wall, 1 floor, 2 target, 3 box on target, 4 box, 5 player, 6 player on target."""
    codes = np.array([[0 if s == WALL else 2 if s == TARGET else 1 for s in row]
                      for row in fixed], dtype=np.int64)
    targets = codes == 2
    for r, c in boxes:
        codes[r, c] = 3 if targets[r, c] else 4
    codes[player] = 6 if targets[player] else 5
    return codes


def render_room_image(fixed: Sequence[str], player: Cell, boxes: Iterable[Cell],
                      tiles: Tiles = DEFAULT_TILES) -> np.ndarray:
    """The room as gym-sokoban's ``room_to_rgb`` lays it out: ``(16H, 16W, 3)`` ``uint8``,
    cell (r, c) at rows ``16r .. 16r + 15``, columns ``16c .. 16c + 15``."""
    codes = room_codes(fixed, player, boxes)
    height, width = codes.shape
    picture = tiles[codes]  # (H, W, 16, 16, 3)
    return np.ascontiguousarray(picture.transpose(0, 2, 1, 3, 4)).reshape(
        height * TILE, width * TILE, 3)
