"""One env episode played as a growing chat: the layout other libraries' multi-turn loops train on.

verl's agent loops and TRL's ``rollout_func`` train on one token sequence per episode:
the first prompt, then the model's answer, the env's reply, the next answer, ... with
the env's tokens masked out of the loss. :class:`ChatEpisode` is the env side of that
loop, shared by :mod:`algorithms.integrations.verl` and ``examples/trl_grpo.py``: it
builds the user messages (the same wording as our per-step prompts,
:func:`algorithms.agent.prompts.render_user_message`, without the history block since the chat
holds it), parses each answer (:func:`algorithms.agent.parsing.parse_action`), steps the env,
charges the invalid-action penalty, and records every turn for the advantage estimator.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from algorithms.agent.parsing import parse_action
from algorithms.agent.prompts import render_user_message
from algorithms.config import EnvConfig, PromptConfig


@dataclass(frozen=True)
class Turn:
    """One agent step of a chat episode.

    Attributes:
        response: the model's decoded answer.
        action: the action sent to the env.
        format_ok: the answer had the required format.
        valid_action: the env could execute the action.
        env_reward: the env's reward.
        reward: ``env_reward`` minus the penalty when the format or the action was bad.
        anchor: the anchor of the state the action was taken in (``info["anchor"]``).
    """

    response: str
    action: str
    format_ok: bool
    valid_action: bool
    env_reward: float
    reward: float
    anchor: Hashable


@dataclass
class ChatEpisode:
    """The env side of one multi-turn chat episode.

    Args:
        env: a gym env (``gym.make("AgentGym/...")``).
        prompt: prompt settings (answer format, admissible actions shown or not).
        penalty: reward subtracted on a step with a bad format or an invalid action;
            ``None``: the recipe's value for the env's id (``EnvConfig.penalty``).
        max_turns: agent steps after which the episode is cut (``truncated``), on top of
            the env's own ``max_steps``.
    """

    env: Any
    prompt: PromptConfig = field(default_factory=PromptConfig)
    penalty: float | None = None
    max_turns: int = EnvConfig().max_steps
    turns: list[Turn] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.penalty is None:
            spec = getattr(self.env, "spec", None)
            env_id = spec.id if spec is not None else EnvConfig().env_id
            self.penalty = EnvConfig(env_id=env_id).penalty()
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")

    def start(self, *, seed: int | None = None, task_id: str | None = None) -> str:
        """Reset the env; return the first user message."""
        options = {"task_id": task_id} if task_id is not None else None
        observation, self.info = self.env.reset(seed=seed, options=options)
        self.turns, self.terminated, self.truncated = [], False, False
        return self._message(observation)

    def act(self, response: str) -> str | None:
        """Play the model's answer; return the next user message, or ``None`` when done."""
        if self.done:
            raise RuntimeError("the episode is over; call start() for a new one")
        parsed = parse_action(response, think=self.prompt.think, action_tag=self.prompt.action_tag,
                              style=self.prompt.env_style)
        anchor = self.info["anchor"]
        observation, env_reward, terminated, truncated, self.info = self.env.step(parsed.action)
        valid = bool(self.info["valid_action"])
        penalty = self.penalty if not (parsed.format_ok and valid) else 0.0
        self.turns.append(Turn(response=response, action=parsed.action, format_ok=parsed.format_ok,
                               valid_action=valid, env_reward=float(env_reward),
                               reward=float(env_reward) - penalty, anchor=anchor))
        self.terminated = bool(terminated)
        self.truncated = bool(truncated) or (not terminated and len(self.turns) >= self.max_turns)
        return None if self.done else self._message(observation)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def total_reward(self) -> float:
        """The episode return: the sum of the turns' rewards (penalties included)."""
        return float(sum(turn.reward for turn in self.turns))

    @property
    def success(self) -> bool:
        return bool(self.info.get("success", False))

    def _message(self, observation: str) -> str:
        return render_user_message(self.info["task"], (), observation,
                                   self.info["admissible_actions"], self.prompt)
