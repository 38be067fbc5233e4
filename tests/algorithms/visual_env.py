"""A tiny visual env for the vision-language tests: walk to the goal on a grid you only see.

``AgentGymTest/VisualGrid-v0`` (registered when this module is imported; also reachable
as ``tests.algorithms.visual_env:AgentGymTest/VisualGrid-v0``) follows the visual env
contract (``docs/env-contract.md``): it observes ``{"text": str, "image": (H, W, 3)
uint8}``, and its info has the text envs' keys. The agent (a red square) and the goal (a
green one) sit on a ``size`` x ``size`` grid drawn ``cell`` pixels per square; the text
never says where they are, so a policy that acts on where they are reads the image. The
task id is ``"<agent row><agent column>-<goal row><goal column>"``; actions are ``up``,
``down``, ``left`` and ``right``; reaching the goal ends the episode with reward 1 and
success. Anchors: the true position (``state``) or the image's bytes with the text
(``observation``: verl-agent anchors its visual envs on the image). The expert walks
rows first, then columns.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agentgym.core import TextEnv, TextSpace, Transition

ENV_ID = "AgentGymTest/VisualGrid-v0"
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
TASK = "Walk the red square onto the green square. The image shows the grid."
AGENT, GOAL, FLOOR, LINE = (220, 30, 30), (30, 180, 60), (245, 245, 245), (120, 120, 120)


class VisualGridEnv(TextEnv):
    """The visual grid (module docstring).

    Args:
        size: squares per side (>= 2).
        cell: pixels per square (>= 2).
        anchor, max_steps: as :class:`~agentgym.core.TextEnv`.
    """

    def __init__(self, *, size: int = 3, cell: int = 8, anchor: str = "state",
                 max_steps: int | None = 6):
        super().__init__(anchor=anchor, max_steps=max_steps)  # type: ignore[arg-type]
        if size < 2 or cell < 2:
            raise ValueError(f"size and cell must be >= 2, got {size}, {cell}")
        self.size, self.cell = size, cell
        side = size * cell
        self.observation_space = spaces.Dict({
            "text": TextSpace(), "image": spaces.Box(0, 255, (side, side, 3), np.uint8)})
        cells = [(r, c) for r in range(size) for c in range(size)]
        self._task_ids = tuple(f"{a[0]}{a[1]}-{g[0]}{g[1]}" for a in cells for g in cells
                               if a != g)
        self.agent = self.goal = (0, 0)

    # ------------------------------------------------------------------ the TextEnv part
    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        start, goal = task_id.split("-")
        self.agent = (int(start[0]), int(start[1]))
        self.goal = (int(goal[0]), int(goal[1]))
        return "The grid is in the image.", {}

    def _step_text(self, action: str) -> Transition:
        move = MOVES.get(action.strip().lower())
        if move is None:
            return Transition("Unknown action: say up, down, left or right.",
                              valid_action=False)
        row, column = self.agent[0] + move[0], self.agent[1] + move[1]
        if not (0 <= row < self.size and 0 <= column < self.size):
            return Transition("You bump into the wall.")
        self.agent = (row, column)
        done = self.agent == self.goal
        return Transition("You reached the goal." if done else "You moved.",
                          reward=1.0 if done else 0.0, terminated=done)

    def state_key(self) -> Hashable:
        return self.agent, self.goal

    def observation_anchor(self, observation: str) -> Hashable:
        return observation, self.image().tobytes()

    @property
    def task(self) -> str:
        return TASK

    @property
    def success(self) -> bool:
        return self.agent == self.goal

    def admissible_actions(self) -> tuple[str, ...]:
        return tuple(MOVES)

    def expert_action(self) -> str | None:
        if self.success:
            return None
        if self.agent[0] != self.goal[0]:
            return "down" if self.goal[0] > self.agent[0] else "up"
        return "right" if self.goal[1] > self.agent[1] else "left"

    # ------------------------------------------------------------------ the visual part
    def image(self) -> np.ndarray:
        """(size * cell, size * cell, 3) uint8: the grid, the goal and the agent."""
        side = self.size * self.cell
        picture = np.empty((side, side, 3), dtype=np.uint8)
        picture[:] = FLOOR
        for (row, column), color in ((self.goal, GOAL), (self.agent, AGENT)):
            picture[row * self.cell:(row + 1) * self.cell,
                    column * self.cell:(column + 1) * self.cell] = color
        picture[::self.cell, :] = LINE
        picture[:, ::self.cell] = LINE
        return picture

    def _visual(self, text: str) -> dict[str, Any]:
        return {"text": text, "image": self.image()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:  # type: ignore[override]
        text, info = super().reset(seed=seed, options=options)
        return self._visual(text), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:  # type: ignore[override]
        text, reward, terminated, truncated, info = super().step(action)
        return self._visual(text), reward, terminated, truncated, info


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=f"{__name__}:VisualGridEnv")


def vocabulary_texts() -> list[str]:
    """Texts whose words the tiny vision-language model's tokenizer should know: the
    env's, the default prompt's and the answer tags."""
    from algorithms.agent.prompts import answer_instruction, render_user_message
    from algorithms.config import PromptConfig

    env_texts = ("The grid is in the image. You bump into the wall. You moved. You reached "
                 "the goal. Unknown action: say up, down, left or right.")
    prompt = render_user_message(TASK, [(env_texts, "up")], env_texts, tuple(MOVES),
                                 PromptConfig(), actions_omitted=1)
    instructions = [answer_instruction(PromptConfig(think=think)) for think in (True, False)]
    return [prompt, *instructions, "<think> </think> <action> </action> [...]"]


def make_vision_policy(*, kind: str = "qwen2_5_vl", seed: int = 0, model_config: Any = None,
                       hidden: int = 32):
    """The tiny random vision-language model over :func:`vocabulary_texts`, wrapped like a
    loaded policy (:func:`studies.tiny_vlm.tiny_vlm_policy`)."""
    from studies.tiny_vlm import tiny_vlm_policy

    return tiny_vlm_policy(vocabulary_texts(), kind=kind, seed=seed, hidden=hidden,
                           model_config=model_config)


def visual_config(algo: str = "gigpo", *, iterations: int = 2, model: dict[str, Any] | None = None,
                  **run: Any):
    """A training config on the visual grid, sized for the tiny vision-language model:
    2 groups x 2, 3 steps, 8-token answers without ``<think>``."""
    from algorithms.config import TrainConfig, replace

    return replace(
        TrainConfig(algo=algo, preset="visual-test"),
        model=model or {},
        generation={"max_new_tokens": 8, "engine": "hf", "batch_size": 64},
        prompt={"think": False, "max_prompt_tokens": 400},
        env={"env_id": ENV_ID, "num_groups": 2, "group_size": 2, "max_steps": 3,
             "eval_episodes": 2},
        learner={"lr": 1e-3, "mini_batch_size": 8, "micro_batch_size": 4, "kl_coef": 0.01},
        run={"iterations": iterations, "save_every": 1, "keep_checkpoints": 2,
             "tensorboard": False, "progress": False, "device": "cpu", **run})
