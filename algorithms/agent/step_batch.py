"""The rollout's output: :class:`StepBatch`, one row per agent step, and the helpers that
build, cut and join such batches (:func:`assemble` from the rollout's env slots, padding,
anchor interning, :func:`concat_batches`).

Which fields have one entry per row is declared on the dataclass (:func:`per_row`) and
read from it (:data:`ROW_FIELDS`), so :meth:`StepBatch.select` and :func:`concat_batches`
carry every such field, a new one included.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from algorithms.agent.env_slot import EnvSlot

_PER_ROW = "per_row"


def per_row(**kwargs: Any) -> Any:
    """A :class:`StepBatch` (or :class:`StepLog`) field with one entry per row:
    :meth:`StepBatch.select` and :func:`concat_batches` carry every field declared this
    way (``kwargs``: as for :func:`dataclasses.field`)."""
    return field(metadata={_PER_ROW: True}, **kwargs)


@dataclass(frozen=True)
class StepLog:
    """The text of a batch's ``N`` rows: what the logs, the rollout records and the viewer
    read; the update reads none of it.

    Attributes:
        task_ids: N task ids.
        task_types: N task types (``""`` where the env reports none).
        actions: N actions sent to the env.
        response_texts: N decoded responses.
        observations: N observations each action answered (the env's raw text; empty
            for batches built without them).
        tasks: N task instructions (``info["task"]``; empty likewise).
        call_statuses: N ``tool-call`` answers' attempt statuses joined by ``,``
            (:mod:`algorithms.agent.tool_calls`; ``""`` in the tag format; empty for
            batches built without them).
        tool_results: N tool messages that answered each ``tool-call`` step (empty
            likewise).
        replies: N texts the env answered each action with (its next observation: the
            last step's is the episode's final one, "Game over ..." or "Invalid move";
            empty likewise).
        calls: N model calls of a loop of your own (``--agent``), each a JSON-able dict:
            the messages it answered, the response, its anchor, whether it joined the call
            before (:mod:`algorithms.gateway.episodes`); empty for the in-process loop.
    """

    task_ids: tuple[str, ...] = per_row()
    task_types: tuple[str, ...] = per_row()
    actions: tuple[str, ...] = per_row()
    response_texts: tuple[str, ...] = per_row()
    observations: tuple[str, ...] = per_row(default=())
    tasks: tuple[str, ...] = per_row(default=())
    call_statuses: tuple[str, ...] = per_row(default=())
    tool_results: tuple[str, ...] = per_row(default=())
    replies: tuple[str, ...] = per_row(default=())
    calls: tuple[dict[str, Any], ...] = per_row(default=())

    def __len__(self) -> int:
        return len(self.task_ids)


@dataclass(frozen=True)
class StepBatch:
    """One iteration's agent steps, sorted by trajectory then step.

    ``N`` steps; prompts are left-padded to ``P`` tokens, responses right-padded to ``R``.

    Attributes:
        prompt_ids: (N, P) int64 prompt token ids (pad id where ``prompt_mask`` is 0).
        prompt_mask: (N, P) int64, 1 on real prompt tokens.
        response_ids: (N, R) int64 response token ids.
        response_mask: (N, R) int64, 1 on real response tokens.
        rewards: (N,) float64 env reward minus the invalid-action penalty.
        env_rewards: (N,) float64 the env's reward.
        penalties: (N,) float64 the invalid-action penalty the step paid (0 on valid
            steps); where it lands is the learner's choice
            (``learner.penalty_in_returns``).
        invalid: (N,) bool, the step paid the penalty (bad format or invalid action).
        format_ok: (N,) bool, the answer had the required format.
        valid_action: (N,) bool, the env could execute the action.
        traj_ids: (N,) int64, one id per sub-env (trajectory) of the rollout.
        group_ids: (N,) int64, the vector env's ``group_id`` of each row's sub-env
            (``traj_id // group_size``).
        anchors: N hashable anchors of the state each action was taken in.
        step_index: (N,) int64, the step's turn number within its trajectory (0-based).
        last_step: (N,) bool, the trajectory's final step in the batch.
        success: (N,) bool, the trajectory ended in success (repeated on each step).
        truncated: (N,) bool, the trajectory ended without terminating (a step limit or
            an env error).
        env_error: (N,) bool, the trajectory ended on an env error (repeated on each
            step; the failed step itself is not in the batch).
        prompt_cut: (N,) bool, the prompt was cut to fit the token budget.
        log: the rows' text (:class:`StepLog`): what the logs, records and viewer read.
        env_errors: number of the rollout's trajectories that ended on an env error,
            in their reset or in a step (also those with no step in the batch).
        env_error_steps: number of agent steps whose env call failed (left out of the
            batch; one per trajectory that failed in a step).
        prompt_overflows: number of steps not taken because not even the task and the
            answer format fit in ``max_prompt_tokens`` (each ended its trajectory, cut).
        old_log_probs: (N, R) float32 log-probs under the sampling policy, once scored.
        ref_log_probs: (N, R) float32 log-probs under the reference policy, once scored.
        values: (N,) float32 critic values V(s_t), once scored (PPO).
        bootstrap_rows: (K,) int64 last-step row of each trajectory cut by a step limit
            or an env error, ascending, when the rollout kept bootstrap prompts; else
            ``None``.
        bootstrap_prompt_ids: (K, P') int64 left-padded prompt that would have followed
            each of those rows (the state the last step led to; see the module
            docstring).
        bootstrap_prompt_mask: (K, P') int64, 1 on real tokens.
        bootstrap_values: (K,) float32 critic values of those prompts, V(s_T), once
            scored (PPO with bootstrapping).
        anchor_ids: (N,) int64 dense ids of ``anchors`` (equal exactly when the anchors
            are equal; numbered in order of first appearance), or ``None``.
        next_anchors: N hashable anchors of the state each action led to (the env's
            ``info["anchor"]`` after the step: the next row's anchor, or for a
            trajectory's last row its terminal state's), or ``None`` when not recorded.
            GraphGPO's state graph reads them.
        budget_cut: (N,) bool, the trajectory ended because its transcript outgrew
            ``max_prompt_tokens`` (transcript layout; repeated on each step), or ``None``.
        behaviour_log_probs: (N, R) float32 log-probs of the response tokens as the
            engine reported them when it sampled them (the behaviour policy's; NaN past a
            response's end and where the engine reported none), or ``None`` when the
            engine reports no log-probs.
        policy_version: (N,) int64 policy version each row was sampled with (the number
            of updates behind its weights; :mod:`algorithms.training.overlap`), or
            ``None`` when not recorded.
        images: N tuples of the (H, W, 3) uint8 images each row's prompt showed (a visual
            env's observation, as the env drew it; ``()`` where none), or ``None`` when no
            prompt showed one. The learner encodes them again for every pass
            (:meth:`~algorithms.engines.vision.VisionProcessor.tensors`: the pixel inputs
            generation had).
        layout: ``"window"`` (each row's prompt built afresh) or ``"transcript"`` (each
            row's prompt is the trajectory's transcript so far; see the module docstring).
        bridge_extended: ``tool-call`` transcripts: turns whose chat render extended the
            earlier one (:class:`~algorithms.agent.chat_bridge.BridgeCounts`).
        bridge_kept: turns the chat template rewrote, bridged keeping the sampled tokens.
        bridge_ended: turns that ended their trajectory because they could not be
            bridged.
    """

    prompt_ids: np.ndarray = per_row()
    prompt_mask: np.ndarray = per_row()
    response_ids: np.ndarray = per_row()
    response_mask: np.ndarray = per_row()
    rewards: np.ndarray = per_row()
    env_rewards: np.ndarray = per_row()
    penalties: np.ndarray = per_row()
    invalid: np.ndarray = per_row()
    format_ok: np.ndarray = per_row()
    valid_action: np.ndarray = per_row()
    traj_ids: np.ndarray = per_row()
    group_ids: np.ndarray = per_row()
    anchors: tuple[Hashable, ...] = per_row()
    step_index: np.ndarray = per_row()
    last_step: np.ndarray = per_row()
    success: np.ndarray = per_row()
    truncated: np.ndarray = per_row()
    prompt_cut: np.ndarray = per_row()
    env_error: np.ndarray = per_row()
    log: StepLog = per_row()
    env_errors: int = 0
    env_error_steps: int = 0
    prompt_overflows: int = 0
    old_log_probs: np.ndarray | None = per_row(default=None, repr=False)
    ref_log_probs: np.ndarray | None = per_row(default=None, repr=False)
    values: np.ndarray | None = per_row(default=None, repr=False)
    bootstrap_rows: np.ndarray | None = field(default=None, repr=False)
    bootstrap_prompt_ids: np.ndarray | None = field(default=None, repr=False)
    bootstrap_prompt_mask: np.ndarray | None = field(default=None, repr=False)
    bootstrap_values: np.ndarray | None = field(default=None, repr=False)
    anchor_ids: np.ndarray | None = per_row(default=None)
    next_anchors: tuple[Hashable, ...] | None = per_row(default=None)
    budget_cut: np.ndarray | None = per_row(default=None)
    behaviour_log_probs: np.ndarray | None = per_row(default=None, repr=False)
    policy_version: np.ndarray | None = per_row(default=None)
    images: tuple[tuple[np.ndarray, ...], ...] | None = per_row(default=None, repr=False)
    layout: str = "window"
    bridge_extended: int = 0
    bridge_kept: int = 0
    bridge_ended: int = 0

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def with_version(self, version: int) -> StepBatch:
        """A copy whose rows all record ``version`` as their policy version."""
        return replace(self, policy_version=np.full(len(self), version, dtype=np.int64))

    def with_scores(self, **scores: np.ndarray | None) -> StepBatch:
        """A copy with ``old_log_probs`` / ``ref_log_probs`` / ``values`` /
        ``bootstrap_values`` set."""
        allowed = {"old_log_probs", "ref_log_probs", "values", "bootstrap_values"}
        unknown = set(scores) - allowed
        if unknown:
            raise ValueError(f"unknown score fields {unknown}")
        return replace(self, **scores)

    @property
    def num_trajectories(self) -> int:
        return int(self.last_step.sum())

    def select(self, rows: np.ndarray) -> StepBatch:
        """A batch of the rows ``rows`` only (scores and bootstrap prompts included).

        Args:
            rows: ascending row indices that take whole trajectories (every row of a
                trajectory or none), so that ``last_step`` stays right.

        Returns:
            The smaller batch; ``env_errors``, ``env_error_steps`` and
            ``prompt_overflows`` still count the whole rollout. Bootstrap prompts of
            left-out trajectories are dropped.
        """
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 1 or (rows.size > 1 and np.any(np.diff(rows) <= 0)):
            raise ValueError("rows must be ascending, distinct row indices")
        kept = np.zeros(len(self), dtype=bool)
        kept[rows] = True
        if np.any(kept[np.isin(self.traj_ids, self.traj_ids[rows])] == 0):
            raise ValueError("select() keeps whole trajectories only")
        changes: dict[str, Any] = _taken(self, rows)
        if self.bootstrap_rows is not None:
            keep = kept[self.bootstrap_rows]
            changes["bootstrap_rows"] = np.searchsorted(
                rows, self.bootstrap_rows[keep]).astype(np.int64)
            for name in ("bootstrap_prompt_ids", "bootstrap_prompt_mask",
                         "bootstrap_values"):
                value = getattr(self, name)
                if value is not None:
                    changes[name] = value[keep]
        return replace(self, **changes)


def _row_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.metadata.get(_PER_ROW))


ROW_FIELDS = _row_fields(StepBatch)
"""The :class:`StepBatch` fields with one entry per row (declared with :func:`per_row`)."""

LOG_FIELDS = _row_fields(StepLog)
"""The :class:`StepLog` fields (each with one entry per row)."""


def _taken(value: StepBatch | StepLog, rows: np.ndarray) -> dict[str, Any]:
    """The per-row fields of ``value`` at ``rows`` (fields left empty stay out)."""
    changes: dict[str, Any] = {}
    for name in _row_fields(type(value)):
        part = getattr(value, name)
        if part is None or (isinstance(part, tuple) and not part):
            continue
        if isinstance(part, StepLog):
            changes[name] = replace(part, **_taken(part, rows))
        elif isinstance(part, tuple):
            changes[name] = tuple(part[i] for i in rows)
        else:
            changes[name] = part[rows]
    return changes


def _joined(parts: Sequence[Any]) -> Any:
    """One per-row field of consecutive batches, joined (``None`` if any part is)."""
    if any(part is None for part in parts):
        return None
    if isinstance(parts[0], StepLog):
        return StepLog(**{name: _joined([getattr(part, name) for part in parts])
                          for name in LOG_FIELDS})
    if isinstance(parts[0], tuple):
        return tuple(item for part in parts for item in part)
    return np.concatenate(parts)


def pad_left(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-pad to a (N, max_len) int64 array; return ``(ids, mask)``."""
    width = max((len(s) for s in sequences), default=0)
    ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, sequence in enumerate(sequences):
        if len(sequence):
            ids[row, width - len(sequence):] = sequence
            mask[row, width - len(sequence):] = 1
    return ids, mask


def pad_right(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad to a (N, max_len) int64 array (at least 1 column); return ``(ids, mask)``."""
    width = max(1, max((len(s) for s in sequences), default=0))
    ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = sequence
        mask[row, : len(sequence)] = 1
    return ids, mask



def concat_batches(batches: Sequence[StepBatch], group_offsets: Sequence[int],
                   group_size: int, pad_id: int) -> StepBatch:
    """One unscored batch of the rollouts of consecutive blocks of groups.

    Args:
        batches: each block's batch (trajectory and group ids local, 0-based).
        group_offsets: the global index of each block's first group (ascending).
        group_size: trajectories per group (trajectory ``t`` of a block becomes
            ``t + group_offset * group_size``).
        pad_id: the tokenizer's pad id (prompts re-padded on the left, responses and
            bootstrap prompts likewise).

    Returns:
        The batch one rollout of all the groups would give (rows sorted by trajectory
        then step; anchors interned again over all rows; env error and overflow counts
        summed; behaviour and reference log-probs kept where every block has them).

    Raises:
        ValueError: scored batches, mixed layouts, or offsets not ascending.
    """
    if len(batches) != len(group_offsets) or not batches:
        raise ValueError("one group offset per batch, at least one batch")
    if any(np.diff(group_offsets) < 0):
        raise ValueError("group offsets must ascend (the blocks in order)")
    if any(b.old_log_probs is not None or b.values is not None for b in batches):
        raise ValueError("concatenate batches before scoring them")
    if len({b.layout for b in batches}) > 1:
        raise ValueError("batches of different layouts")
    if len(batches) == 1 and group_offsets[0] == 0:
        return batches[0]

    def rows(name: str) -> list[Any]:
        return [getattr(b, name) for b in batches]

    def padded(name: str, *, left: bool) -> np.ndarray:
        parts = rows(name)
        width = max(part.shape[1] for part in parts)
        fill = pad_id if name.endswith("_ids") else np.nan if name.endswith(
            "_log_probs") else 0
        gaps = [width - part.shape[1] for part in parts]
        return np.concatenate([np.pad(part, ((0, 0), (gap, 0) if left else (0, gap)),
                                      constant_values=fill)
                               for part, gap in zip(parts, gaps, strict=True)])

    changes: dict[str, Any] = {
        "prompt_ids": padded("prompt_ids", left=True),
        "prompt_mask": padded("prompt_mask", left=True),
        "response_ids": padded("response_ids", left=False),
        "response_mask": padded("response_mask", left=False),
        "traj_ids": np.concatenate([b.traj_ids + offset * group_size
                                    for b, offset in zip(batches, group_offsets, strict=True)]),
        "group_ids": np.concatenate([b.group_ids + offset
                                     for b, offset in zip(batches, group_offsets, strict=True)]),
        "env_errors": sum(b.env_errors for b in batches),
        "env_error_steps": sum(b.env_error_steps for b in batches),
        "prompt_overflows": sum(b.prompt_overflows for b in batches),
        **{name: sum(getattr(b, name) for b in batches)
           for name in ("bridge_extended", "bridge_kept", "bridge_ended")},
    }
    for name in ("behaviour_log_probs", "ref_log_probs"):  # recorded or scored by the engine
        changes[name] = (padded(name, left=False)
                         if all(getattr(b, name) is not None for b in batches) else None)
    for name in ROW_FIELDS:
        if name in changes or name in ("old_log_probs", "ref_log_probs", "values",
                                       "behaviour_log_probs"):
            continue
        changes[name] = _joined(rows(name))
    changes["anchor_ids"] = intern_anchors(changes["anchors"])
    if all(b.bootstrap_rows is not None for b in batches):
        starts = np.cumsum([0] + [len(b) for b in batches[:-1]])
        changes["bootstrap_rows"] = np.concatenate(
            [b.bootstrap_rows + start for b, start in zip(batches, starts, strict=True)])
        changes["bootstrap_prompt_ids"] = padded("bootstrap_prompt_ids", left=True)
        changes["bootstrap_prompt_mask"] = padded("bootstrap_prompt_mask", left=True)
    return replace(batches[0], **changes)


def intern_anchors(anchors: Sequence[Hashable]) -> np.ndarray:
    """(N,) int64 dense ids of ``anchors``: equal exactly when the anchors are equal,
    numbered 0, 1, ... in order of first appearance.

    Raises:
        TypeError: an anchor is not hashable.
    """
    table: dict[Hashable, int] = {}
    return np.fromiter((table.setdefault(anchor, len(table)) for anchor in anchors),
                       dtype=np.int64, count=len(anchors))


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
                    replies=tuple(s.reply for s in steps),
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
