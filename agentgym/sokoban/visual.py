"""``AgentGym/SokobanVisual-v0``: ``AgentGym/Sokoban-v0`` seen as a picture.

The rooms, rules, rewards, action words, expert and ``"state"`` anchor are those of
:class:`~agentgym.sokoban.env.SokobanEnv` (the same room for the same task id); only what
the agent observes differs, as in verl-agent's visual mode (``env.sokoban.mode='rgb_array'``,
``run_sokoban.sh``): the room is shown as gym-sokoban's ``rgb_array`` frame, one 16 x 16
tile per cell (96 x 96 pixels for 6 x 6; :mod:`agentgym.sokoban.tiles`), and the text
carries no grid.

* **Observation**: ``{"text": LEGEND, "image": frame}`` (:mod:`agentgym.visual`). The text
  says what the tiles look like (:data:`LEGEND`); with ``invalid_action_feedback=True`` an
  invalid action's line comes before it.
* **Anchors**: ``"observation"`` is the frame's image anchor (verl-agent's visual anchor is
  the frame); ``"state"`` is (player cell, sorted box cells), as in the text env.
* ``tiles_dir``: a folder with gym-sokoban's own tile files
  (``gym_sokoban/envs/surface``) to draw with them instead of ours, pixel for pixel
  verl-agent's frames (needs Pillow, the ``vision`` extra).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agentgym.core import AnchorMode
from agentgym.sokoban.env import SokobanEnv
from agentgym.sokoban.tiles import DEFAULT_TILES, TILE, load_tiles, render_room_image
from agentgym.visual import VisualEnv, visual_observation_space

LEGEND = (
    "The image shows the room from above, one square tile per cell: walls are red-brown "
    "bricks, the floor is black, a target is a black tile with a red square outline and a "
    "small red diamond, a box is a yellow crate with an orange X (with a red rim when it "
    "stands on a target), and you are the small green alien with two antennae and black "
    "eyes (outlined in red when you stand on a target)."
)
"""The text of every observation: what the picture's tiles are."""

TASK = ("Push every box onto a target. Each move (up, down, left or right) walks one cell; "
        "walking into a box pushes it one cell if the cell behind it is free. Boxes cannot "
        "be pulled.")


class SokobanVisualEnv(VisualEnv, SokobanEnv):
    """Sokoban observed as a picture (see the module docstring).

    Args:
        tiles_dir: draw with the tile files in this folder (gym-sokoban's ``surface``
            folder) instead of AgentGym's own tiles.
        dim_room, num_boxes, search_depth, num_tasks, first_seed, invalid_action_feedback,
        anchor, max_steps: as :class:`~agentgym.sokoban.env.SokobanEnv`.
        render_mode: ``None``, ``"rgb_array"`` or ``"ansi"``.
    """

    def __init__(
        self,
        *,
        dim_room: tuple[int, int] | list[int] = (6, 6),
        num_boxes: int = 1,
        search_depth: int = 30,
        num_tasks: int = 65_535,
        first_seed: int = 0,
        invalid_action_feedback: bool = False,
        tiles_dir: str | Path | None = None,
        anchor: AnchorMode = "observation",
        max_steps: int | None = 15,
        render_mode: str | None = None,
    ):
        super().__init__(dim_room=dim_room, num_boxes=num_boxes, search_depth=search_depth,
                         num_tasks=num_tasks, first_seed=first_seed,
                         invalid_action_feedback=invalid_action_feedback, anchor=anchor,
                         max_steps=max_steps, render_mode=render_mode)
        self.tiles = DEFAULT_TILES if tiles_dir is None else load_tiles(tiles_dir)
        height, width = self.dim_room
        self.observation_space = visual_observation_space(height * TILE, width * TILE)

    @property
    def task(self) -> str:
        return TASK

    def _render(self) -> str:
        return LEGEND

    def render_image(self) -> np.ndarray:
        if self._room is None:
            raise RuntimeError("call reset() first")
        return render_room_image(self._room.fixed, self._player, self._boxes, self.tiles)
