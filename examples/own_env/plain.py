"""The same game as a plain Gymnasium env: no ``TextEnv``, none of AgentGym's info keys.

``train.py`` trains it through ``agentgym.PlainTextEnv`` (docs/own-env.md, "Plain
Gymnasium envs"): task ids become reset seeds, anchors come from the observation text,
actions are free-form text, ``valid_action`` is ``True`` unless the info says otherwise,
and ``success`` is read from ``info["success"]`` (given here).
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

from agentgym import TextSpace


class PlainNumberGuessEnv(gym.Env):
    """Guess a number from 1 to ``high``; the number comes from the reset's seed."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, high: int = 16):
        self.high = high
        self.observation_space = TextSpace()  # any str (gymnasium's Text refuses spaces)
        self.action_space = TextSpace()
        self._secret = 1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._secret = int(self.np_random.integers(1, self.high + 1))
        return f"I am thinking of a number from 1 to {self.high}. Guess it.", {}

    def step(self, action: Any):
        found = re.search(r"\d+", str(action))
        guess = int(found.group()) if found else None
        if guess == self._secret:
            return "Right!", 1.0, True, False, {"success": True}
        hint = ("Say a number." if guess is None
                else "Higher." if guess < self._secret else "Lower.")
        return hint, 0.0, False, False, {"success": False}
