"""``AgentGym/FrozenLake-v0``: Gymnasium's FrozenLake-v1, as text the way RAGEN renders it.

The dynamics are Gymnasium's own ``FrozenLakeEnv`` (its maps, ``is_slippery``,
``success_rate``, rewards: 1 on reaching the goal, else 0; a hole or the goal ends the
episode). This env only turns its state into text and text into its actions, as RAGEN's
FrozenLake env does by default (``observation_format="grid"``, its action words):

* **Observation**: one character per cell, rows joined by ``"\\n"``: ``P`` player,
  ``_`` frozen (the start too, once the player has left it), ``O`` hole, ``G`` goal,
  ``X`` player in a hole, ``√`` player on the goal. The 4 x 4 map at the start::

      P___
      _O_O
      ___O
      O__G

* **Actions**: ``Left``, ``Down``, ``Right``, ``Up``, read as RAGEN's env manager reads
  one action (surrounding spaces stripped, case ignored, the whole word must match). Any
  other text is invalid (``valid_action=False``): the lake is not stepped, reward 0.
* **Episodes** end ``terminated`` in a hole or on the goal, ``truncated`` after
  ``max_steps`` (100, Gymnasium's limit for FrozenLake-v1).
* **Anchors**: ``"observation"`` is the grid text; ``"state"`` is the player's
  (row, column).

Maps: ``map_name`` (Gymnasium's ``"4x4"`` or ``"8x8"``, one task), ``desc`` (your own
rows of ``S``/``F``/``H``/``G``, one task), or ``size``: random maps from Gymnasium's
``generate_random_map(size, p, seed)``, one task per seed, ``task_ids``
``"frozenlake-<size>x<size>-<seed>"``.

Slips are drawn from the env's ``np_random`` (seeded by ``reset(seed=...)``), which the
Gymnasium lake shares, so equal seeds and equal actions give equal episodes.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from gymnasium.envs.toy_text.frozen_lake import MAPS, generate_random_map
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymnasiumFrozenLake

from agentgym.core import AnchorMode, TextEnv, Transition
from agentgym.seeded_tasks import SeededTaskIds
from agentgym.tools import EnvTools, string_argument, tool

ACTIONS: dict[str, int] = {"left": 0, "down": 1, "right": 2, "up": 3}
"""RAGEN's action words (lower-cased) and Gymnasium's action numbers."""

ACTION_WORDS: tuple[str, ...] = ("Left", "Down", "Right", "Up")
"""The words as RAGEN lists them to the agent."""

_TILE_SYMBOLS = {"S": "_", "F": "_", "H": "O", "G": "G"}
_PLAYER_SYMBOLS = {"S": "P", "F": "P", "H": "X", "G": "√"}


def render_lake(desc: Sequence[str], cell: tuple[int, int]) -> str:
    """RAGEN's ``grid`` text of map ``desc`` with the player on ``cell`` = (row, column)."""
    return "\n".join(
        "".join(_PLAYER_SYMBOLS[tile] if (r, c) == cell else _TILE_SYMBOLS[tile]
                for c, tile in enumerate(row))
        for r, row in enumerate(desc)
    )


def _check_desc(desc: Sequence[str]) -> tuple[str, ...]:
    rows = tuple(str(row) for row in desc)
    if not rows or any(len(row) != len(rows[0]) for row in rows) or not rows[0]:
        raise ValueError(f"desc must be non-empty rows of equal length, got {desc!r}")
    tiles = "".join(rows)
    if set(tiles) - set("SFHG") or tiles.count("S") != 1 or "G" not in tiles:
        raise ValueError(f"desc rows hold S, F, H, G with exactly one S and a G, got {desc!r}")
    return rows


class FrozenLakeEnv(TextEnv):
    """Cross the frozen lake to the goal without falling in a hole (see the module docstring).

    Args:
        map_name: Gymnasium's map, ``"4x4"`` or ``"8x8"`` (used when ``desc`` and
            ``size`` are ``None``).
        desc: a map of your own, rows of ``S`` (start), ``F`` (frozen), ``H`` (hole),
            ``G`` (goal).
        size: play random ``size`` x ``size`` maps, one per seed.
        p: probability that a random map's tile is frozen (Gymnasium's default 0.8).
        num_tasks: random maps only: how many seeds ``task_ids`` spans.
        first_seed: random maps only: the seed of the first task.
        is_slippery: moves may slip sideways (Gymnasium's default ``True``).
        success_rate: probability that a slippery move goes where intended
            (Gymnasium's default 1/3; RAGEN's FrozenLake config uses 0.8).
        invalid_action_feedback: on an invalid action, put ``"Invalid action: ..."`` on a
            line before the grid; ``False`` (RAGEN's env): the unchanged grid.
        anchor, max_steps, render_mode: see :class:`~agentgym.core.TextEnv`.
    """

    def __init__(
        self,
        *,
        map_name: str = "4x4",
        desc: Sequence[str] | None = None,
        size: int | None = None,
        p: float = 0.8,
        num_tasks: int = 65_535,
        first_seed: int = 0,
        is_slippery: bool = True,
        success_rate: float = 1.0 / 3.0,
        invalid_action_feedback: bool = False,
        anchor: AnchorMode = "observation",
        max_steps: int | None = 100,
        render_mode: str | None = None,
    ):
        super().__init__(anchor=anchor, max_steps=max_steps, render_mode=render_mode)
        if desc is not None and size is not None:
            raise ValueError("give desc or size, not both")
        if not 0.0 <= success_rate <= 1.0:
            raise ValueError(f"success_rate must be in [0, 1], got {success_rate}")
        self._fixed_desc: tuple[str, ...] | None = None
        self._random_ids: SeededTaskIds | None = None
        if size is not None:
            if size < 2:
                raise ValueError(f"size must be >= 2, got {size}")
            if not 0.0 < p <= 1.0:
                raise ValueError(f"p must be in (0, 1], got {p}")
            self._random_ids = SeededTaskIds(f"frozenlake-{size}x{size}", first_seed, num_tasks)
            self._task_ids: Sequence[str] = self._random_ids
        elif desc is not None:
            self._fixed_desc = _check_desc(desc)
            self._task_ids = ("frozenlake-custom",)
        else:
            if map_name not in MAPS:
                raise ValueError(f"map_name must be one of {sorted(MAPS)}, got {map_name!r}")
            self._fixed_desc = tuple(MAPS[map_name])
            self._task_ids = (f"frozenlake-{map_name}",)
        self.size = size
        self.p = p
        self.is_slippery = is_slippery
        self.success_rate = success_rate
        self.invalid_action_feedback = invalid_action_feedback
        self._lake: GymnasiumFrozenLake | None = None
        self._lake_task: str | None = None
        self._desc: tuple[str, ...] = ()

    # ------------------------------------------------------------------ maps
    def desc_for(self, task_id: str) -> tuple[str, ...]:
        """The map of ``task_id``: rows of ``S``, ``F``, ``H``, ``G``."""
        if self._random_ids is not None:
            seed = self._random_ids.seed_of(task_id)
            assert self.size is not None
            return tuple(generate_random_map(size=self.size, p=self.p, seed=seed))
        if task_id not in self._task_ids:
            raise ValueError(f"unknown task id {task_id!r}: this env plays {self._task_ids[0]!r}")
        assert self._fixed_desc is not None
        return self._fixed_desc

    @property
    def lake(self) -> GymnasiumFrozenLake:
        """The Gymnasium FrozenLake being played (after :meth:`reset`)."""
        if self._lake is None:
            raise RuntimeError("call reset() first")
        return self._lake

    @property
    def cell(self) -> tuple[int, int]:
        """The player's (row, column)."""
        ncol = self.lake.ncol
        return int(self.lake.s) // ncol, int(self.lake.s) % ncol

    def _tile(self) -> str:
        r, c = self.cell
        return self._desc[r][c]

    # ------------------------------------------------------------------ TextEnv
    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    @property
    def task(self) -> str:
        text = "Walk from the start to the goal (G) without falling into a hole (O)."
        if self.is_slippery and self.success_rate < 1.0:
            text += " The ice is slippery: a move may take you sideways."
        return text

    @property
    def success(self) -> bool:
        return self._lake is not None and self._tile() == "G"

    @classmethod
    def tools(cls, kwargs: dict[str, Any]) -> EnvTools:
        """``move(direction)``, one of RAGEN's four words."""
        return EnvTools((tool("move", "Move one cell on the lake (on slippery ice the move "
                                      "may slide sideways).", "{direction}",
                              direction=string_argument("The direction to move in.",
                                                        ACTION_WORDS)),))

    def admissible_actions(self) -> tuple[str, ...]:
        return ACTION_WORDS

    def state_key(self) -> Hashable:
        return self.cell

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        if self._lake is None or task_id != self._lake_task:
            self._desc = self.desc_for(task_id)
            self._lake = GymnasiumFrozenLake(desc=list(self._desc), is_slippery=self.is_slippery,
                                             success_rate=self.success_rate)
            self._lake_task = task_id
        self._lake.np_random = self.np_random  # one generator: reset(seed) fixes the slips
        self._lake.reset()
        return self._render(), self._extra(player_moved=False)

    def _render(self) -> str:
        return render_lake(self._desc, self.cell)

    def _extra(self, *, player_moved: bool) -> dict[str, Any]:
        return {"cell": self.cell, "tile": self._tile(), "player_moved": player_moved}

    def _step_text(self, action: str) -> Transition:
        gym_action = ACTIONS.get(action.strip().lower())
        if gym_action is None:
            observation = self._render()
            if self.invalid_action_feedback:
                observation = (f"Invalid action: {action[:80]!r} is not one of Left, Down, "
                               f"Right, Up.\n{observation}")
            return Transition(observation, valid_action=False,
                              info=self._extra(player_moved=False))
        before = self.cell
        _, reward, terminated, _, _ = self.lake.step(gym_action)
        return Transition(self._render(), reward=float(reward), terminated=bool(terminated),
                          info=self._extra(player_moved=self.cell != before))
