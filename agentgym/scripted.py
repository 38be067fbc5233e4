"""A small deterministic text env: tests, benchmarks and learning checks use it.

The agent crosses ``num_rooms`` rooms. Each room has the same doors; one of them leads on
(chosen per task by a seeded RNG). Opening it moves to the next room; opening the last
correct door wins (``success_reward``). A wrong door answers "Nothing happens." and
changes nothing, so the same text appears in different states -- exactly the aliasing
that separates ``anchor="observation"`` from ``anchor="state"``.

With ``hint=True`` each room shows a sign naming the right door, which makes the task
learnable from the observation alone (the learning tests use it). ``work_ms`` burns
that much pure-Python CPU per step and ``observation_size`` pads observations to a
size, for benchmarks.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from agentgym.core import AnchorMode, TextEnv, Transition
from agentgym.tools import EnvTools, string_argument, tool

DEFAULT_DOORS: tuple[str, ...] = ("red", "green", "blue")


class ScriptedTextEnv(TextEnv):
    """A door-picking task with a seeded solution per task.

    Args:
        num_tasks: number of distinct tasks (``task_ids`` are ``"doors-0000"`` ...).
        num_rooms: rooms to cross (steps of an optimal episode).
        doors: door colours; admissible actions are ``"open <colour> door"`` and ``"look"``.
        hint: show a sign naming the right door in every room.
        success_reward: reward for leaving the last room.
        work_ms: milliseconds of pure-Python work per step (benchmarks).
        observation_size: pad every observation with spaces to at least this many
            characters (benchmarks).
        anchor, max_steps, render_mode: see :class:`~agentgym.core.TextEnv`.
    """

    def __init__(
        self,
        *,
        num_tasks: int = 64,
        num_rooms: int = 3,
        doors: Sequence[str] = DEFAULT_DOORS,
        hint: bool = True,
        success_reward: float = 1.0,
        work_ms: float = 0.0,
        observation_size: int = 0,
        anchor: AnchorMode = "observation",
        max_steps: int | None = 10,
        render_mode: str | None = None,
    ):
        super().__init__(anchor=anchor, max_steps=max_steps, render_mode=render_mode)
        if num_tasks < 1 or num_rooms < 1 or len(doors) < 2:
            raise ValueError("need num_tasks >= 1, num_rooms >= 1 and at least two doors")
        self.num_rooms = num_rooms
        self.doors = tuple(doors)
        self.hint = hint
        self.success_reward = success_reward
        self.work_ms = work_ms
        self.observation_size = observation_size
        self._task_ids = tuple(f"doors-{i:04d}" for i in range(num_tasks))
        self._actions = tuple(f"open {d} door" for d in self.doors) + ("look",)
        self._solution: tuple[str, ...] = ()
        self._room = 0
        self._won = False

    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    def solution(self, task_id: str) -> tuple[str, ...]:
        """The winning action sequence of ``task_id``."""
        index = self._task_ids.index(task_id)
        rng = np.random.default_rng(index)
        picks = rng.integers(len(self.doors), size=self.num_rooms)
        return tuple(f"open {self.doors[i]} door" for i in picks)

    @property
    def task(self) -> str:
        return f"Cross all {self.num_rooms} rooms by opening the right doors."

    @property
    def success(self) -> bool:
        return self._won

    @classmethod
    def tools(cls, kwargs: dict[str, Any]) -> EnvTools:
        """``open_door(colour)`` and ``look()``."""
        doors = tuple(kwargs.get("doors", DEFAULT_DOORS))
        return EnvTools((
            tool("open_door", "Open one of the room's doors.", "open {colour} door",
                 colour=string_argument("The door's colour.", doors)),
            tool("look", "Look around the room.", "look")))

    def admissible_actions(self) -> tuple[str, ...]:
        return () if self._won else self._actions

    def state_key(self) -> Hashable:
        return (self._task_id, self._room, self._won)

    def _describe(self) -> str:
        text = f"You are in room {self._room + 1} of {self.num_rooms}. "
        text += "Doors: " + ", ".join(self.doors) + "."
        if self.hint:
            text += f" A sign says: {self._solution[self._room]}."
        return self._pad(text)

    def _pad(self, text: str) -> str:
        return text.ljust(self.observation_size)

    def _burn(self) -> None:
        if self.work_ms <= 0:
            return
        end = time.perf_counter() + self.work_ms / 1000.0
        x = 0
        while time.perf_counter() < end:
            for i in range(200):
                x = (x * 31 + i) % 1_000_003

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._solution = self.solution(task_id)
        self._room = 0
        self._won = False
        return self._describe(), {"room": 0}

    def _step_text(self, action: str) -> Transition:
        self._burn()
        command = " ".join(action.strip().lower().split())
        if command == "look":
            return Transition(self._describe(), info={"room": self._room})
        if command not in self._actions:
            return Transition(self._pad("Nothing happens."), valid_action=False,
                              info={"room": self._room})
        if command != self._solution[self._room]:
            return Transition(self._pad("Nothing happens."), info={"room": self._room})
        self._room += 1
        if self._room == self.num_rooms:
            self._won = True
            self._room -= 1
            return Transition(
                self._pad("You open the last door and step outside. You escaped!"),
                reward=self.success_reward,
                terminated=True,
                info={"room": self._room},
            )
        return Transition(self._describe(), info={"room": self._room})
