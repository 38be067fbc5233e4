"""One sub-env's state during a rollout (:class:`EnvSlot`, its steps as
:class:`StepRecord`); the step batch built from the slots when the rollout ends is
:func:`algorithms.agent.step_batch.assemble`'s."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from algorithms.agent.prompts import BuiltPrompt


@dataclass(frozen=True)
class StepRecord:
    """One agent step as it happened: the batch row it becomes."""

    prompt: tuple[int, ...]
    response: tuple[int, ...]
    env_reward: float
    penalty: float
    format_ok: bool
    valid: bool
    step: int
    anchor: Hashable
    next_anchor: Hashable
    """The anchor of the state the step led to (the env's ``info["anchor"]`` after it)."""
    task_id: str
    task_type: str
    action: str
    text: str
    prompt_cut: bool
    observation: str
    task: str
    log_probs: tuple[float, ...] | None = None
    """The response tokens' log-probs as the engine sampled them, when it reports them."""
    images: tuple[np.ndarray, ...] = ()
    """The images the step's prompt showed (a visual env's observation), as the env drew
    them."""
    call_statuses: str = ""
    """The ``tool-call`` format: the statuses of the answer's call attempts, joined by
    ``,`` (:mod:`algorithms.agent.tool_calls`); ``""`` in the tag format."""
    tool_result: str = ""
    """The ``tool-call`` format: the tool message that answered the step."""
    reply: str = ""
    """The env's text after the action (its next observation; the last step's is the
    episode's final observation)."""


def split_observation(observation: Any) -> tuple[str, np.ndarray | None]:
    """``(text, image)`` of an env observation: a text env's ``str`` (no image), or a
    visual env's ``{"text": str, "image": (H, W, 3) uint8}`` (``docs/env-contract.md``).

    Raises:
        ValueError: a visual observation whose image is not (H, W, 3) uint8.
    """
    if isinstance(observation, Mapping) and "image" in observation:
        from agentgym.images import check_image

        image = observation["image"]
        return str(observation.get("text", "")), None if image is None else check_image(image)
    return str(observation), None


@dataclass
class EnvSlot:
    """A sub-env's trajectory in the making.

    Attributes:
        index: the sub-env's index in the vector env (its trajectory id in the batch).
        group: its group id, as the vector env reports it (``info["group_id"]``).
        observation: the current observation (text).
        image: the current observation's image (a visual env's), else ``None``.
        info: the current info (one sub-env's dict).
        history: every (observation, action) pair of the trajectory so far, oldest first.
        pending: the prompt of the next turn when the prompt strategy derived it from the
            last step (transcript layout), else ``None``.
        active: the trajectory goes on.
        success: the env reported success after the last step.
        truncated: the trajectory ended (or will have ended) without terminating.
        env_error: the trajectory ended on an env error (in its reset or a step).
        budget_cut: the trajectory ended because its transcript outgrew the budget.
        bootstrap: token ids of the prompt after the trajectory's last step, when kept.
        steps: the trajectory's steps, in order.
        views: the ``tool-call`` format: each observation as the chat shows it, the
            first one's first.
        answers: each step's answer as the model wrote it (response prefix included).
        feedbacks: each step's parser error line (``""`` where the call was ``ok``).
        chat: the ``tool-call`` transcript's chat so far
            (:class:`~algorithms.agent.chat_bridge.ChatTranscript`), else ``None``.
        bridge_ended: the trajectory ended because its next turn could not be bridged.
    """

    index: int
    group: int
    observation: str
    info: dict[str, Any]
    image: np.ndarray | None = None
    history: list[tuple[str, str]] = field(default_factory=list)
    pending: BuiltPrompt | None = None
    active: bool = True
    success: bool = False
    truncated: bool = False
    env_error: bool = False
    budget_cut: bool = False
    bootstrap: tuple[int, ...] | None = None
    steps: list[StepRecord] = field(default_factory=list)
    views: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    feedbacks: list[str] = field(default_factory=list)
    chat: Any = None
    bridge_ended: bool = False

    @classmethod
    def after_reset(cls, index: int, observation: Any, info: dict[str, Any]) -> EnvSlot:
        """The slot of sub-env ``index`` after its reset (``info``: its reset info, with the
        vector env's ``group_id``). An env whose reset failed (``info["env_error"]``) starts
        ended: truncated, with no steps."""
        if "group_id" not in info:
            raise ValueError(f"env {index}'s info has no group_id: the rollout takes group ids "
                             "from the vector env (agentgym.vector.TextVectorEnv)")
        failed = bool(info.get("env_error"))
        text, image = split_observation(observation)
        return cls(index=index, group=int(info["group_id"]), observation=text, image=image,
                   info=info, active=not failed, truncated=failed, env_error=failed)

    def end(self, *, truncated: bool) -> None:
        """End the trajectory here."""
        self.active = False
        self.truncated = truncated
