"""A number-guessing game on ``agentgym.TextEnv``: the env of docs/own-env.md.

The env thinks of a number from 1 to ``high``; the agent guesses, and hears "Higher." or
"Lower." until it is right (reward 1) or ``max_steps`` guesses are spent. The admissible
actions are the numbers still possible, so a policy that listens can always win in
``ceil(log2(high + 1))`` guesses (the expert does: it halves the range).

What a ``TextEnv`` subclass writes (``agentgym/core.py`` has the contract):

- ``task_ids``: the tasks, in a stable order (here one per secret number);
- ``_reset_task(task_id)``: start that task, return the first observation and extra info;
- ``_step_text(action)``: play one ``str`` action, return a ``Transition`` (text, reward,
  ``terminated``, ``valid_action``, extra info); never raise on a bad action;
- ``state_key()``: a hashable key of the true state (the ``anchor="state"`` anchor);
- ``task``, ``success``, and optionally ``admissible_actions()`` and ``expert_action()``.

``TextEnv`` does the rest: seeding (equal seeds, equal tasks), the info keys, anchors in
both modes, rejecting non-text and over-long actions, ``max_steps`` truncation, and
repeating a finished episode's last step.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from typing import Any

from agentgym import TextEnv, Transition


class NumberGuessEnv(TextEnv):
    """Guess a number from 1 to ``high`` from "higher" / "lower" answers.

    Args:
        high: the largest number (tasks: one per number, ``"number-01"`` ...).
        anchor, max_steps, render_mode: see ``agentgym.TextEnv``.
    """

    def __init__(self, *, high: int = 16, anchor: str = "observation",
                 max_steps: int | None = 6, render_mode: str | None = None):
        super().__init__(anchor=anchor, max_steps=max_steps, render_mode=render_mode)
        if high < 2:
            raise ValueError(f"high must be >= 2, got {high}")
        self.high = high
        self._task_ids = tuple(f"number-{n:02d}" for n in range(1, high + 1))
        self._secret = 1
        self._low, self._top = 1, high
        self._won = False

    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    @property
    def task(self) -> str:
        return (f"I am thinking of a number from 1 to {self.high}. Find it: guess a number, "
                "and I will say higher or lower.")

    @property
    def success(self) -> bool:
        return self._won

    def admissible_actions(self) -> tuple[str, ...]:
        return () if self._won else tuple(str(n) for n in range(self._low, self._top + 1))

    def state_key(self) -> Hashable:
        # the true state: which number, and what is known about it (a tuple: hashable)
        return (self._secret, self._low, self._top, self._won)

    def expert_action(self) -> str | None:
        return None if self._won else str((self._low + self._top) // 2)

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        if task_id not in self._task_ids:
            raise ValueError(f"unknown task id {task_id!r}")
        self._secret = int(task_id.split("-")[1])
        self._low, self._top, self._won = 1, self.high, False
        return f"Guess a number from 1 to {self.high}.", {"low": 1, "high": self.high}

    def _step_text(self, action: str) -> Transition:
        found = re.search(r"\d+", action)
        guess = int(found.group()) if found else None
        if guess is None or not 1 <= guess <= self.high:
            return Transition(f"Say one number from 1 to {self.high}.", valid_action=False,
                              info=self._range())
        if guess == self._secret:
            self._won = True
            return Transition(f"Right, it is {guess}!", reward=1.0, terminated=True,
                              info=self._range())
        if guess < self._secret:
            self._low = max(self._low, guess + 1)
            return Transition("Higher.", info=self._range())
        self._top = min(self._top, guess - 1)
        return Transition("Lower.", info=self._range())

    def _range(self) -> dict[str, Any]:
        return {"low": self._low, "high": self._top}
