"""One sub-env's state during a rollout (:class:`EnvSlot`), and the step batch built from
the slots when the rollout ends (:func:`assemble`)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from algorithms.agent.prompts import BuiltPrompt
from algorithms.agent.step_batch import StepBatch, StepLog, intern_anchors, pad_left, pad_right


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


def assemble(slots: Sequence[EnvSlot], pad_id: int, *, keep_bootstrap: bool, layout: str,
             env_error_steps: int, prompt_overflows: int,
             bridge: Any = None) -> StepBatch:
    """The :class:`StepBatch` of the slots' steps, sorted by trajectory then step.

    Args:
        slots: every sub-env's slot, in index order.
        pad_id: the tokenizer's pad id.
        keep_bootstrap: fill the bootstrap fields from the slots' ``bootstrap`` prompts.
        layout: the prompt layout.
        env_error_steps: agent steps whose env call failed.
        prompt_overflows: steps not taken because no prompt fitted.
        bridge: the chat bridge's :class:`~algorithms.agent.chat_bridge.BridgeCounts`
            (``tool-call`` transcripts), or ``None``.
    """
    steps = [step for slot in slots for step in slot.steps]
    owners = [slot for slot in slots for _ in slot.steps]
    traj_ids = np.array([slot.index for slot in owners], dtype=np.int64)
    last = np.ones(len(steps), dtype=bool)
    last[:-1] = traj_ids[1:] != traj_ids[:-1]
    prompt_ids, prompt_mask = pad_left([s.prompt for s in steps], pad_id)
    response_ids, response_mask = pad_right([s.response for s in steps], pad_id)
    behaviour = None
    if any(s.log_probs is not None for s in steps):
        behaviour = np.full(response_ids.shape, np.nan, dtype=np.float32)
        for row, step in enumerate(steps):
            if step.log_probs is not None:
                behaviour[row, : len(step.log_probs)] = step.log_probs
    env_rewards = np.array([s.env_reward for s in steps], dtype=np.float64)
    penalties = np.array([s.penalty for s in steps], dtype=np.float64)
    bootstrap: dict[str, np.ndarray] = {}
    if keep_bootstrap:
        ends = np.cumsum([len(slot.steps) for slot in slots]) - 1
        kept = [(int(end), slot.bootstrap) for slot, end in zip(slots, ends, strict=True)
                if slot.steps and slot.bootstrap is not None]
        ids, mask = pad_left([prompt for _, prompt in kept], pad_id)
        bootstrap = {"bootstrap_rows": np.array([row for row, _ in kept], dtype=np.int64),
                     "bootstrap_prompt_ids": ids, "bootstrap_prompt_mask": mask}
    return StepBatch(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask,
        response_ids=response_ids, response_mask=response_mask,
        rewards=env_rewards - penalties, env_rewards=env_rewards, penalties=penalties,
        invalid=~(np.array([s.format_ok and s.valid for s in steps], dtype=bool)),
        format_ok=np.array([s.format_ok for s in steps], dtype=bool),
        valid_action=np.array([s.valid for s in steps], dtype=bool),
        traj_ids=traj_ids,
        group_ids=np.array([slot.group for slot in owners], dtype=np.int64),
        anchors=tuple(s.anchor for s in steps),
        step_index=np.array([s.step for s in steps], dtype=np.int64),
        last_step=last,
        success=np.array([slot.success for slot in owners], dtype=bool),
        truncated=np.array([slot.truncated for slot in owners], dtype=bool),
        prompt_cut=np.array([s.prompt_cut for s in steps], dtype=bool),
        log=StepLog(task_ids=tuple(s.task_id for s in steps),
                    task_types=tuple(s.task_type for s in steps),
                    actions=tuple(s.action for s in steps),
                    response_texts=tuple(s.text for s in steps),
                    observations=tuple(s.observation for s in steps),
                    tasks=tuple(s.task for s in steps),
                    call_statuses=tuple(s.call_statuses for s in steps),
                    tool_results=tuple(s.tool_result for s in steps)),
        env_error=np.array([slot.env_error for slot in owners], dtype=bool),
        env_errors=sum(slot.env_error for slot in slots),
        env_error_steps=env_error_steps,
        prompt_overflows=prompt_overflows,
        anchor_ids=intern_anchors([s.anchor for s in steps]),
        next_anchors=tuple(s.next_anchor for s in steps),
        budget_cut=np.array([slot.budget_cut for slot in owners], dtype=bool),
        behaviour_log_probs=behaviour,
        images=(tuple(s.images for s in steps) if any(s.images for s in steps) else None),
        layout=layout,
        bridge_extended=0 if bridge is None else bridge.extended,
        bridge_kept=0 if bridge is None else bridge.kept,
        bridge_ended=0 if bridge is None else bridge.ended,
        **bootstrap,
    )
