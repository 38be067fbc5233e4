"""``AgentGym/Sokoban-v0``: verl-agent's text Sokoban, without gym-sokoban.

Rules, rewards, text and action words are those of verl-agent's Sokoban env (its
``SokobanEnv`` over gym-sokoban, rendered in its default ``tiny_rgb_array`` text mode,
actions read by its ``sokoban_projection``), with verl-agent's default configuration:
a 6 x 6 room, one box, reverse-play depth 30, 15 steps.

* **Observation**: the grid, each cell written ``" <symbol> \\t"`` and rows joined by
  ``"\\n"``: ``#`` wall, ``_`` floor, ``O`` target, ``X`` box, ``√`` box on target,
  ``P`` player, ``S`` player on target.
* **Actions**: the text inside the agent's action tag. It is lower-cased and searched for
  ``"up"``, ``"down"``, ``"left"``, ``"right"``, ``"still"``, in that order; the first word
  found as a substring is the action (so ``"Up"``, ``"push up"`` and ``"upward"`` all
  move up). ``up/down/left/right`` push the box ahead when the cell behind it is free,
  else step if the cell ahead is free, else do nothing. ``"still"`` is a valid action
  that does nothing. Any other text is invalid (``valid_action=False``): nothing happens.
* **Rewards** (gym-sokoban's): -0.1 for every step, invalid or ``"still"`` steps
  included; +1 when a box lands on a target and -1 when one leaves it; +10 more when all
  boxes are on targets, which terminates the episode. Learners add their own
  invalid-action penalty on top, as verl-agent's trainer does.
* **Episodes** end ``terminated`` when solved, ``truncated`` after ``max_steps`` steps.
* **Anchors**: ``"observation"`` is the grid text (verl-agent's anchor); ``"state"`` is
  (player cell, sorted box cells).

Tasks: one room per seed. ``task_ids`` are ``"sokoban-<H>x<W>-<N>box-<seed>"`` for seeds
``first_seed ... first_seed + num_tasks - 1``; verl-agent trains on seeds below 65,535
and evaluates on seeds from 65,536 up (the defaults give the training range).
``options={"room": SokobanRoom}`` in ``reset`` plays a given room instead.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from agentgym.core import AnchorMode, TextEnv, Transition
from agentgym.seeded_tasks import SeededTaskIds
from agentgym.sokoban.rooms import MOVES, WALL, Cell, SokobanRoom, generate_room, render_room
from agentgym.sokoban.solver import first_move
from agentgym.tools import EnvTools, string_argument, tool

ACTION_WORDS: tuple[str, ...] = ("up", "down", "left", "right", "still")
"""The words verl-agent's projection looks for, in its search order."""

STEP_PENALTY = -0.1
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_PENALTY = -1.0
SOLVED_REWARD = 10.0
"""gym-sokoban's reward terms."""

_MOVE_BY_NAME = {name: (dr, dc) for name, dr, dc in MOVES}


def parse_action(action: str) -> str | None:
    """The action word verl-agent's projection reads in ``action``; ``None`` if none.

    Lower-cases, then returns the first of :data:`ACTION_WORDS` found as a substring.
    """
    text = action.lower()
    for word in ACTION_WORDS:
        if word in text:
            return word
    return None


class SokobanEnv(TextEnv):
    """Push every box onto a target in a generated room (see the module docstring).

    Args:
        dim_room: (height, width) of the room, outer wall included.
        num_boxes: boxes (and targets) per room.
        search_depth: reverse-play depth bound of room generation.
        num_tasks: how many seeds (rooms) ``task_ids`` spans.
        first_seed: the seed of the first task.
        invalid_action_feedback: on an invalid action, put ``"Invalid action: ..."`` on a
            line before the grid. ``False`` (verl-agent's behaviour): the observation is
            the unchanged grid, so with ``anchor="observation"`` the step after an invalid
            action shares the step group of the state it stayed in.
        anchor, max_steps, render_mode: see :class:`~agentgym.core.TextEnv`.
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
        anchor: AnchorMode = "observation",
        max_steps: int | None = 15,
        render_mode: str | None = None,
    ):
        super().__init__(anchor=anchor, max_steps=max_steps, render_mode=render_mode)
        height, width = (int(x) for x in dim_room)
        if height < 4 or width < 4:
            raise ValueError(f"dim_room must be at least (4, 4), got {tuple(dim_room)}")
        if num_boxes < 1:
            raise ValueError(f"num_boxes must be >= 1, got {num_boxes}")
        if search_depth < 3:
            raise ValueError(f"search_depth must be >= 3, got {search_depth}")
        self.dim_room = (height, width)
        self.num_boxes = num_boxes
        self.search_depth = search_depth
        self.invalid_action_feedback = invalid_action_feedback
        self._task_ids = SeededTaskIds(f"sokoban-{height}x{width}-{num_boxes}box",
                                       first_seed, num_tasks)
        self._room: SokobanRoom | None = None
        self._player: Cell = (0, 0)
        self._boxes: set[Cell] = set()
        self._targets: frozenset[Cell] = frozenset()
        self._given_room: SokobanRoom | None = None

    # ------------------------------------------------------------------ rooms
    def room_for(self, task_id: str) -> SokobanRoom:
        """The room of ``task_id`` (generated from its seed; the same every time)."""
        seed = self._task_ids.seed_of(task_id)
        height, width = self.dim_room
        return generate_room(np.random.default_rng(seed), height, width, self.num_boxes,
                             search_depth=self.search_depth)

    @property
    def room(self) -> SokobanRoom:
        """The current state as a room (after :meth:`reset`)."""
        if self._room is None:
            raise RuntimeError("call reset() first")
        return SokobanRoom(self._room.fixed, self._player, tuple(sorted(self._boxes)))

    @property
    def boxes_on_target(self) -> int:
        return len(self._boxes & self._targets)

    # ------------------------------------------------------------------ TextEnv
    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    @property
    def task(self) -> str:
        return "Push every box (X) onto a target (O); you (P) can push boxes but not pull them."

    @property
    def success(self) -> bool:
        return self._room is not None and self._boxes == set(self._targets)

    @classmethod
    def tools(cls, kwargs: dict[str, Any]) -> EnvTools:
        """``move(direction)``: up, down, left or right (pushing a box ahead)."""
        return EnvTools((tool("move", "Step one cell, pushing the box ahead if there is one "
                                      "and the cell behind it is free.", "{direction}",
                              direction=string_argument(
                                  "The direction to step in.",
                                  [w for w in ACTION_WORDS if w != "still"])),))

    def admissible_actions(self) -> tuple[str, ...]:
        return ("up", "down", "left", "right")

    def expert_action(self) -> str | None:
        """The first move of a shortest solution from the current state (breadth-first
        search, :func:`agentgym.sokoban.solver.first_move`); ``None`` once solved, before
        ``reset`` or when the room can no longer be solved (a box pushed into a dead
        corner, e.g. by a perturbed expert step)."""
        if self._room is None:
            return None
        return first_move(self._room.fixed, self._player, self._boxes, self._targets)

    def state_key(self) -> Hashable:
        return (self._player, tuple(sorted(self._boxes)))

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode; ``options={"room": SokobanRoom}`` plays that room.

        The given room's task id is ``"custom"``. Otherwise see :meth:`TextEnv.reset`.
        """
        options = dict(options or {})
        room = options.pop("room", None)
        if room is None:
            return super().reset(seed=seed, options=options)
        if not isinstance(room, SokobanRoom):
            raise TypeError(f"options['room'] must be a SokobanRoom, got {type(room).__name__}")
        self._given_room = room
        try:
            return super().reset(seed=seed, options={**options, "task_id": "custom"})
        finally:
            self._given_room = None

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        room = self._given_room if self._given_room is not None else self.room_for(task_id)
        self._room = room
        self._player = room.player
        self._boxes = set(room.boxes)
        self._targets = frozenset(room.targets)
        return self._render(), self._extra(player_moved=False)

    def _render(self) -> str:
        assert self._room is not None
        return render_room(self._room.fixed, self._player, frozenset(self._boxes))

    def _extra(self, *, player_moved: bool) -> dict[str, Any]:
        return {"boxes_on_target": self.boxes_on_target, "player_moved": player_moved}

    def _step_text(self, action: str) -> Transition:
        word = parse_action(action)
        if word is None:
            observation = self._render()
            if self.invalid_action_feedback:
                observation = (f"Invalid action: {action[:80]!r} is not one of up, down, "
                               f"left, right.\n{observation}")
            return Transition(observation, reward=STEP_PENALTY, valid_action=False,
                              info=self._extra(player_moved=False))
        before = self.boxes_on_target
        moved = word != "still" and self._move(*_MOVE_BY_NAME[word])
        after = self.boxes_on_target
        reward = STEP_PENALTY
        if after > before:
            reward += BOX_ON_TARGET_REWARD
        elif after < before:
            reward += BOX_OFF_TARGET_PENALTY
        solved = self.success
        if solved:
            reward += SOLVED_REWARD
        return Transition(self._render(), reward=reward, terminated=solved,
                          info=self._extra(player_moved=moved))

    def _move(self, dr: int, dc: int) -> bool:
        """Push or step one cell; whether the player moved."""
        assert self._room is not None
        fixed = self._room.fixed
        r, c = self._player
        ahead = (r + dr, c + dc)
        if fixed[ahead[0]][ahead[1]] == WALL:
            return False
        if ahead in self._boxes:
            beyond = (r + 2 * dr, c + 2 * dc)
            inside = 0 <= beyond[0] < len(fixed) and 0 <= beyond[1] < len(fixed[0])
            if not inside or fixed[beyond[0]][beyond[1]] == WALL or beyond in self._boxes:
                return False
            self._boxes.remove(ahead)
            self._boxes.add(beyond)
        self._player = ahead
        return True
