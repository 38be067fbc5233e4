"""A key-and-door house: a small text grid world where step credit matters.

The house is a ``width`` x ``height`` grid of named rooms, each joined to its neighbours.
A task places the agent, a key and a locked door in three different rooms (chosen per task
by a seeded RNG) and says where the key and the door are (``key=False``: no key, an
unlocked door). The agent must walk to the key,
``take key``, walk to the door and ``open door``: only that last action is rewarded
(``success_reward``, which terminates). Everything else earns 0, so the reward is sparse
and the shortest solution is ``distance(start, key) + distance(key, door) + 2`` steps.

What makes it a test of step-level credit (GiGPO) rather than episode-level credit (GRPO):

* states recur: every trajectory of a group starts in the same room and the house is
  small, so the same (room, key held) state is visited by many trajectories of a group,
  and by the same trajectory several times;
* moves can be wasted or loop (walking away from the goal and back, ``open door`` without
  the key), so a successful episode still holds bad steps, which only a per-state
  comparison of returns can tell apart from good ones.

Observations describe the room, its exits (with the neighbouring room's name), whether the
key or the door is there and whether the agent carries the key. Feedback of a wasted or
rejected action is a short text that does not name the room ("Nothing happens.", "The
door is locked."), so with ``anchor="observation"`` such steps taken in different states
share one step group -- the aliasing GiGPO's paper accepts -- while ``anchor="state"`` keys
steps by (task, room, key held) and never mixes them.

Actions (case and spacing ignored): ``go north|south|east|west`` towards an existing
neighbour, ``take key`` where the key lies, ``open door`` where the door is. Those are the
``admissible_actions``; anything else answers "Nothing happens." with
``valid_action=False``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from agentgym.core import AnchorMode, TextEnv, Transition
from agentgym.tools import EnvTools, string_argument, tool

ROOM_NAMES: tuple[str, ...] = (
    "hall", "kitchen", "library", "study", "pantry", "cellar", "attic", "garden",
    "bedroom", "bathroom", "gallery", "workshop", "office", "nursery", "chapel", "armory",
)
"""Room names, row-major (north-west first); a house has at most this many rooms."""

DIRECTIONS: tuple[tuple[str, int, int], ...] = (
    ("north", 0, -1), ("south", 0, 1), ("east", 1, 0), ("west", -1, 0),
)
"""(name, dx, dy) of each move; y grows southwards."""

NOTHING_HAPPENS = "Nothing happens."
DOOR_LOCKED = "The door is locked. You need the key."


class KeyDoorEnv(TextEnv):
    """Fetch the key, then open the locked door, in a small grid of named rooms.

    Args:
        width: rooms from west to east.
        height: rooms from north to south (``width * height`` between 3 and 16).
        num_tasks: distinct (start, key, door) placements; ``task_ids`` are
            ``"keydoor-0000"`` ...
        first_task: number of the first task (``task_ids`` start at
            ``"keydoor-<first_task>"``; task ``i``'s layout depends on ``i`` alone), so an
            evaluation env with ``first_task=num_tasks`` of the training env holds
            held-out tasks.
        success_reward: reward of the winning ``open door``.
        key: the door is locked and needs the key; ``False``: no key, the door opens at
            once (a shorter task: ``distance(start, door) + 1`` steps).
        anchor, max_steps, render_mode: see :class:`~agentgym.core.TextEnv`.
    """

    def __init__(
        self,
        *,
        width: int = 3,
        height: int = 3,
        num_tasks: int = 64,
        first_task: int = 0,
        success_reward: float = 1.0,
        key: bool = True,
        anchor: AnchorMode = "observation",
        max_steps: int | None = 15,
        render_mode: str | None = None,
    ):
        super().__init__(anchor=anchor, max_steps=max_steps, render_mode=render_mode)
        if width < 1 or height < 1 or not 3 <= width * height <= len(ROOM_NAMES):
            raise ValueError(f"need 3 <= width * height <= {len(ROOM_NAMES)} rooms, got "
                             f"width={width}, height={height}")
        if num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")
        if first_task < 0:
            raise ValueError(f"first_task must be >= 0, got {first_task}")
        self.width = width
        self.height = height
        self.success_reward = success_reward
        self.key = key
        self.first_task = first_task
        self._task_ids = tuple(f"keydoor-{i:04d}"
                               for i in range(first_task, first_task + num_tasks))
        self._layout: tuple[int, int, int] = (0, 1, 2)  # start, key, door room indices
        self._room = 0
        self._has_key = False
        self._won = False

    @classmethod
    def tools(cls, kwargs: dict[str, Any]) -> EnvTools:
        """``go(direction)``, ``take_key()`` (only in a house with a key) and
        ``open_door()``: the three kinds of action."""
        tools = [tool("go", "Walk through an exit to the neighbouring room.", "go {direction}",
                      direction=string_argument("The exit to take.",
                                                [name for name, _, _ in DIRECTIONS]))]
        if kwargs.get("key", True):
            tools.append(tool("take_key", "Take the key, where it lies in your room.",
                              "take key"))
        tools.append(tool("open_door", "Open the door, where it is in your room.",
                          "open door"))
        return EnvTools(tuple(tools))

    # ------------------------------------------------------------------ the house
    @property
    def num_rooms(self) -> int:
        return self.width * self.height

    def room_name(self, room: int) -> str:
        return ROOM_NAMES[room]

    def neighbours(self, room: int) -> dict[str, int]:
        """Direction name -> neighbouring room index, in :data:`DIRECTIONS` order."""
        x, y = room % self.width, room // self.width
        found = {}
        for name, dx, dy in DIRECTIONS:
            nx, ny = x + dx, y + dy
            if 0 <= nx < self.width and 0 <= ny < self.height:
                found[name] = ny * self.width + nx
        return found

    def distance(self, a: int, b: int) -> int:
        """Moves between rooms ``a`` and ``b`` (Manhattan distance: no inner walls)."""
        return abs(a % self.width - b % self.width) + abs(a // self.width - b // self.width)

    def layout(self, task_id: str) -> tuple[int, int, int]:
        """(start, key, door) room indices of ``task_id``, three different rooms."""
        try:
            index = self._task_ids.index(task_id)
        except ValueError:
            raise ValueError(f"unknown task id {task_id!r}") from None
        rng = np.random.default_rng([self.first_task + index, self.width, self.height])
        start, key, door = rng.choice(self.num_rooms, size=3, replace=False)
        return int(start), int(key), int(door)

    def shortest_solution(self, task_id: str) -> int:
        """Steps of an optimal episode of ``task_id``."""
        start, key, door = self.layout(task_id)
        if not self.key:
            return self.distance(start, door) + 1
        return self.distance(start, key) + self.distance(key, door) + 2

    # ------------------------------------------------------------------ TextEnv
    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    @property
    def task(self) -> str:
        _, key, door = self._layout
        if not self.key:
            return f"Open the door in the {self.room_name(door)}."
        return (f"Take the key in the {self.room_name(key)}, then open the locked door in "
                f"the {self.room_name(door)}.")

    @property
    def success(self) -> bool:
        return self._won

    def admissible_actions(self) -> tuple[str, ...]:
        if self._won:
            return ()
        actions = [f"go {name}" for name in self.neighbours(self._room)]
        if self._key_here():
            actions.append("take key")
        if self._room == self._layout[2]:
            actions.append("open door")
        return tuple(actions)

    def state_key(self) -> Hashable:
        return (self._task_id, self._room, self._has_key, self._won)

    def expert_action(self) -> str | None:
        """A shortest-path move: towards the key until it is carried (``key=True``), then
        towards the door; ``take key`` / ``open door`` on arrival; ``None`` once won.
        Among moves that shorten the path, the first in :data:`DIRECTIONS` order."""
        if self._won or self._task_id is None:
            return None
        if self._key_here():
            return "take key"
        _, key, door = self._layout
        target = key if self.key and not self._has_key else door
        if self._room == target:
            return "open door"
        for name, room in self.neighbours(self._room).items():
            if self.distance(room, target) < self.distance(self._room, target):
                return f"go {name}"
        raise AssertionError("a grid without inner walls always has a shorter move")

    def _key_here(self) -> bool:
        return self.key and not self._has_key and self._room == self._layout[1]

    def _describe(self) -> str:
        exits = ", ".join(f"{name} to the {self.room_name(room)}"
                          for name, room in self.neighbours(self._room).items())
        text = f"You are in the {self.room_name(self._room)}. Exits: {exits}."
        if self._key_here():
            text += " A key lies here."
        if self._room == self._layout[2]:
            text += " A locked door is here." if self.key else " A door is here."
        if self._has_key:
            text += " You carry the key."
        return text

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._layout = self.layout(task_id)
        self._room = self._layout[0]
        self._has_key = False
        self._won = False
        return self._describe(), self._extra()

    def _extra(self) -> dict[str, Any]:
        return {"room": self.room_name(self._room), "has_key": self._has_key}

    def _step_text(self, action: str) -> Transition:
        command = " ".join(action.strip().lower().split())
        if command not in self.admissible_actions():
            return Transition(NOTHING_HAPPENS, valid_action=False, info=self._extra())
        if command == "take key":
            self._has_key = True
            return Transition("You take the key. " + self._describe(), info=self._extra())
        if command == "open door":
            if self.key and not self._has_key:
                return Transition(DOOR_LOCKED, info=self._extra())
            self._won = True
            return Transition("You unlock the door and step outside. You escaped!",
                              reward=self.success_reward, terminated=True, info=self._extra())
        self._room = self.neighbours(self._room)[command.removeprefix("go ")]
        return Transition(self._describe(), info=self._extra())
