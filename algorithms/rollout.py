"""Multi-turn rollouts over a vectorized text env, collected into a typed step batch.

Every agent step is one training sample: the per-step prompt
(:mod:`algorithms.prompts`), the sampled response, the parsed action and its reward. A
step whose answer is badly formatted, or whose action the env reports as not valid
(``info["valid_action"]``), costs ``invalid_action_penalty`` (GiGPO recipes: 0.1, 0.01 for
Search-QA); the env's own reward never includes it.

The ``N = num_groups * group_size`` sub-envs are reset with
``options={"task_ids": [...]}`` so the ``group_size`` envs of a group play the same task
from the same initial state. The loop steps the whole batch until every env has
terminated or truncated, or ``max_steps`` turns have passed; finished envs get an empty
action, which the vector env ignores (it repeats their last observation with reward 0).

Generation errors: a response the engine could not produce (a
:class:`~algorithms.engines.FailedGeneration`, e.g. a server request that failed after its
retries) is handled exactly like an env error in that step: the env still receives an
empty action (its outcome is discarded), and the trajectory ends there.

Env errors: when the vector env reports ``info["env_error"]`` for a step (the env raised,
its worker died, or the call ran past ``step_timeout``), the action sent in that step had
no outcome: the reward 0 is a placeholder and the "next" observation a repeat of the last
one. That step is *not* a sample and is left out of the batch (counted in
``env_error_steps``). Its trajectory keeps its earlier steps, which really happened, and
ends there: truncated, not successful, with ``env_error`` set on its rows (an env whose
reset failed yields no steps at all). Dropping the step, rather than keeping it with a
zero loss mask, means every consumer of the batch -- group statistics, GiGPO step groups,
GAE, the policy, KL and entropy terms and their token means, critic targets, mini-batch
counts, per-step metrics -- sees only real steps, with no mask that each of them would
have to honour; the failure itself is logged by the vector env and counted here. Which of
the trajectory's earlier steps are trained on depends on the estimator (see
:meth:`algorithms.learner.Learner.training_batch`).

Layouts (``prompt.layout``). ``window``: each step's prompt is built afresh from the task,
the last ``history_window`` (observation, action) pairs and the current observation.
``transcript``: the first step's prompt is built the same way (no history); every later
step's prompt is the previous one followed by the previous response's tokens and the
env's text (its next observation, tokenized on its own and appended verbatim: for
Search-QA that is Search-R1's ``\n\n<information>...</information>\n\n``), so the
last row of a trajectory holds its whole transcript (:func:`transcript_view`). The
response tokens are kept as sampled (a response that ended on EOS keeps it). A transcript
that would outgrow ``max_prompt_tokens`` is never cut in the middle: the trajectory ends
there, truncated, with ``budget_cut`` set (counted in the metrics). With
``max_observation_tokens`` the env's text keeps only its first tokens (Search-R1's
``max_obs_length``); the next step's ``prompt_cut`` counts that cut.

Anchors are interned to dense integers (``anchor_ids``, equal exactly when the anchors
are equal) so that GiGPO's step grouping takes its integer path; ``anchors`` keeps the
original objects for logs.

Truncation and bootstrapping: a trajectory is *truncated* when it ends without
terminating -- cut by the env's step limit, by the rollout's ``max_steps``, or by an env
error. With ``keep_bootstrap_prompts`` the rollout keeps, for every truncated trajectory,
the prompt the policy would have been given after its last step in the batch, so that
PPO can bootstrap GAE from the critic's value of it: for a step-limit cut, the
observation that followed its last step, with that step in the history; for an env
error, the prompt of the failed step itself -- the last real state, in which the action
that got no outcome was taken. Like a step limit, an env error is an outside event that
cuts the episode, not the end of the task, so it is bootstrapped the same way (when the
failed step was the trajectory's first, there is no step to bootstrap).

Prompts too long for ``max_prompt_tokens`` are cut (:mod:`algorithms.prompts`: history,
then the observation's start, then the admissible-action list's tail). Only when not even
the task and the answer format fit is a step impossible: that trajectory ends there,
truncated, without the step (counted in ``prompt_overflows``; no bootstrap prompt, since
none fits) and the rest of the rollout goes on.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from algorithms.config import PromptConfig
from algorithms.engines import FailedGeneration
from algorithms.parsing import parse_action
from algorithms.prompts import BuiltPrompt, PromptBuilder, PromptTooLongError

_PER_ROW = "per_row"


def per_row(**kwargs: Any) -> Any:
    """A :class:`StepBatch` field with one entry per row: :meth:`StepBatch.select` and
    :func:`concat_batches` carry every field declared this way (``kwargs``: as for
    :func:`dataclasses.field`)."""
    return field(metadata={_PER_ROW: True}, **kwargs)


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
        group_ids: (N,) int64, ``traj_id // group_size``.
        anchors: N hashable anchors of the state each action was taken in.
        step_index: (N,) int64, the step's turn number within its trajectory (0-based).
        last_step: (N,) bool, the trajectory's final step in the batch.
        success: (N,) bool, the trajectory ended in success (repeated on each step).
        truncated: (N,) bool, the trajectory ended without terminating (a step limit or
            an env error).
        env_error: (N,) bool, the trajectory ended on an env error (repeated on each
            step; the failed step itself is not in the batch).
        task_ids: N task ids.
        task_types: N task types (``""`` where the env reports none).
        actions: N actions sent to the env.
        response_texts: N decoded responses.
        prompt_cut: (N,) bool, the prompt was cut to fit the token budget.
        observations: N observations each action answered (the env's raw text; empty
            for batches built without them).
        tasks: N task instructions (``info["task"]``; empty likewise).
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
        budget_cut: (N,) bool, the trajectory ended because its transcript outgrew
            ``max_prompt_tokens`` (transcript layout; repeated on each step), or ``None``.
        layout: ``"window"`` (each row's prompt built afresh) or ``"transcript"`` (each
            row's prompt is the trajectory's transcript so far; see the module docstring).
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
    task_ids: tuple[str, ...] = per_row()
    task_types: tuple[str, ...] = per_row()
    actions: tuple[str, ...] = per_row()
    response_texts: tuple[str, ...] = per_row()
    prompt_cut: np.ndarray = per_row()
    env_error: np.ndarray = per_row()
    env_errors: int = 0
    env_error_steps: int = 0
    prompt_overflows: int = 0
    observations: tuple[str, ...] = per_row(default=())
    tasks: tuple[str, ...] = per_row(default=())
    old_log_probs: np.ndarray | None = per_row(default=None, repr=False)
    ref_log_probs: np.ndarray | None = per_row(default=None, repr=False)
    values: np.ndarray | None = per_row(default=None, repr=False)
    bootstrap_rows: np.ndarray | None = field(default=None, repr=False)
    bootstrap_prompt_ids: np.ndarray | None = field(default=None, repr=False)
    bootstrap_prompt_mask: np.ndarray | None = field(default=None, repr=False)
    bootstrap_values: np.ndarray | None = field(default=None, repr=False)
    anchor_ids: np.ndarray | None = per_row(default=None)
    budget_cut: np.ndarray | None = per_row(default=None)
    layout: str = "window"

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

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
        changes: dict[str, Any] = {}
        for name in _ROW_FIELDS:
            value = getattr(self, name)
            if value is None or (isinstance(value, tuple) and not value):
                continue
            changes[name] = (tuple(value[i] for i in rows) if isinstance(value, tuple)
                             else value[rows])
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


_ROW_FIELDS = tuple(f.name for f in fields(StepBatch) if f.metadata.get(_PER_ROW))
"""The :class:`StepBatch` fields with one entry per row (declared with :func:`per_row`)."""


@dataclass(frozen=True)
class TranscriptView:
    """A transcript-layout batch as one token sequence per trajectory (``T`` of them).

    Attributes:
        sequence_ids: (T, L) int64 whole transcripts (the last row's prompt and
            response), right-padded with 0 (masked).
        sequence_mask: (T, L) int64, 1 on real tokens.
        row_offsets: (T + 1,) int64; the rows of sequence ``t`` are
            ``row_offsets[t]:row_offsets[t + 1]``.
        sequence_index: (N,) int64 the sequence of each row.
        response_starts: (N,) int64 the column of each row's first response token in its
            sequence (its prompt's length); the token there is predicted from column
            ``response_starts - 1``.
    """

    sequence_ids: np.ndarray
    sequence_mask: np.ndarray
    row_offsets: np.ndarray
    sequence_index: np.ndarray
    response_starts: np.ndarray

    @property
    def num_sequences(self) -> int:
        return int(self.sequence_ids.shape[0])

    def rows_of(self, sequences: np.ndarray) -> np.ndarray:
        """The rows of ``sequences`` (ascending within each), in the given order."""
        parts = [np.arange(self.row_offsets[t], self.row_offsets[t + 1]) for t in sequences]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def transcript_view(batch: StepBatch) -> TranscriptView:
    """The trajectories of a transcript-layout batch as whole sequences.

    Raises:
        ValueError: the batch is not in the transcript layout, or a row's prompt and
            response are not the prefix of its trajectory's transcript that the layout
            guarantees.
    """
    if batch.layout != "transcript":
        raise ValueError(f"transcript_view needs a transcript-layout batch, not {batch.layout!r}")
    last = np.flatnonzero(batch.last_step)
    offsets = np.concatenate([[0], last + 1]).astype(np.int64)
    prompt_lengths = batch.prompt_mask.sum(1)
    response_lengths = batch.response_mask.sum(1)
    sequences = []
    for row in last:
        prompt = batch.prompt_ids[row][batch.prompt_mask[row] == 1]
        sequences.append(np.concatenate([prompt, batch.response_ids[row][:response_lengths[row]]]))
    ids, mask = pad_right(sequences, 0)
    sequence_index = np.repeat(np.arange(len(last)), np.diff(offsets)).astype(np.int64)
    for row in range(len(batch)):
        sequence = sequences[sequence_index[row]]
        start, length = prompt_lengths[row], response_lengths[row]
        prompt = batch.prompt_ids[row][batch.prompt_mask[row] == 1]
        if (start + length > len(sequence) or not np.array_equal(sequence[:start], prompt)
                or not np.array_equal(sequence[start:start + length],
                                      batch.response_ids[row][:length])):
            raise ValueError(f"row {row} is not a prefix of its trajectory's transcript")
    return TranscriptView(ids, mask, offsets, sequence_index,
                          prompt_lengths.astype(np.int64))


@dataclass
class _Step:
    prompt: tuple[int, ...]
    response: tuple[int, ...]
    env_reward: float
    penalty: float
    format_ok: bool
    valid: bool
    traj: int
    group: int
    anchor: Hashable
    step: int
    task_id: str
    task_type: str
    action: str
    text: str
    prompt_cut: bool
    observation: str
    task: str


def info_rows(infos: dict[str, Any], num_envs: int) -> list[dict[str, Any]]:
    """Gymnasium dict-of-arrays infos (``_key`` masks) to one dict per sub-env."""
    rows: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    for key, values in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        if isinstance(values, dict):
            nested = info_rows(values, num_envs)
            for index in range(num_envs):
                if mask is None or bool(mask[index]):
                    rows[index][key] = nested[index]
            continue
        for index in range(num_envs):
            if mask is None or bool(mask[index]):
                rows[index][key] = values[index]
    return rows


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


@dataclass(frozen=True)
class RolloutSettings:
    """What one rollout needs besides the env and the engine.

    Attributes:
        group_size: trajectories per group.
        max_steps: turns at most.
        temperature: sampling temperature.
        max_new_tokens: response length limit.
        invalid_action_penalty: reward subtracted on a badly formatted or invalid step.
        prompt: prompt settings (also the parsing style).
        keep_bootstrap_prompts: keep the next prompt of every trajectory cut by a step
            limit or an env error (PPO's GAE bootstraps from its value; see the module
            docstring).
        stop: stop strings passed to the engine (a response ends right after the first).
    """

    group_size: int
    max_steps: int
    temperature: float
    max_new_tokens: int
    invalid_action_penalty: float
    prompt: PromptConfig
    keep_bootstrap_prompts: bool
    stop: tuple[str, ...] = ()


class NoStepsError(RuntimeError):
    """No env of a rollout made a single step: every one failed to reset or crashed on its
    first step (see the envs' ``info["env_error"]``)."""


def collect_rollout(
    vec_env: Any,
    engine: Any,
    tokenizer: Any,
    settings: RolloutSettings,
    *,
    group_task_ids: Sequence[str] | None,
    seed: int,
    progress: Any = None,
    group_offset: int = 0,
) -> StepBatch:
    """Roll out every sub-env of ``vec_env`` and collect the steps.

    Args:
        vec_env: a vector text env (``agentgym.vector.TextVectorEnv`` API) with
            ``num_envs = len(group_task_ids) * group_size``.
        engine: a :class:`~algorithms.engines.GenerationEngine`.
        tokenizer: the policy's tokenizer (prompts, decoding, pad id).
        settings: see :class:`RolloutSettings`.
        group_task_ids: one task id per group; ``None`` lets the env pick from ``seed``
            (groups then rely on the vector env's group seeding).
        seed: reset seed and the base of the per-turn sampling seeds.
        progress: optional tqdm-like bar, advanced once per turn.
        group_offset: the global index of ``vec_env``'s first group, when it holds one
            rank's block of a larger rollout (:mod:`algorithms.distributed`): group ``g``
            is reset with seed ``seed + group_offset + g``, as in one vector env of all
            groups, and the sampling seeds differ per block. Trajectory and group ids
            stay local (0-based); :func:`concat_batches` shifts them.

    Returns:
        The :class:`StepBatch` (unscored).

    Raises:
        RuntimeError: the envs of a group did not start on the same task.
        NoStepsError: no env made a single step (every one failed to reset or in its
            first step).
    """
    num_envs = int(vec_env.num_envs)
    group_size = settings.group_size
    if num_envs % group_size:
        raise ValueError(f"num_envs={num_envs} is not a multiple of group_size={group_size}")
    options = None
    if group_task_ids is not None:
        if len(group_task_ids) * group_size != num_envs:
            raise ValueError(f"{len(group_task_ids)} groups x {group_size} != {num_envs} envs")
        options = {"task_ids": [str(t) for t in group_task_ids for _ in range(group_size)]}
    reset_seed: int | list[int] = seed
    if group_offset:
        reset_seed = [seed + group_offset + i // group_size for i in range(num_envs)]
    observations, infos = vec_env.reset(seed=reset_seed, options=options)
    rows = info_rows(infos, num_envs)
    # An env whose reset failed reports ``env_error`` (with placeholder contract keys):
    # its episode is over before it starts and yields no steps (counted in env_errors).
    env_errors = np.array([bool(row.get("env_error")) for row in rows], dtype=bool)
    if env_errors.all():
        raise NoStepsError(f"every env failed to reset; the first error: "
                           f"{rows[0]['env_error']}")
    _check_groups(rows, group_size)
    builder = PromptBuilder(tokenizer, settings.prompt)
    transcript = settings.prompt.layout == "transcript"
    budget = settings.prompt.max_prompt_tokens
    histories: list[list[tuple[str, str]]] = [[] for _ in range(num_envs)]
    # transcript layout: each live env's prompt for its next turn (the transcript so far)
    contexts: dict[int, BuiltPrompt] = {}
    active = ~env_errors
    budget_cut = np.zeros(num_envs, dtype=bool)
    steps: list[_Step] = []
    final_success = np.zeros(num_envs, dtype=bool)
    final_truncated = env_errors.copy()
    env_error_steps = 0
    first_error = next((str(row["env_error"]) for row in rows if row.get("env_error")), "")
    bootstrap_prompts: dict[int, tuple[int, ...]] = {}  # traj -> next prompt (cut)
    # transcript layout: each later answer is opened by the prefix too, after the env text
    prefix_ids = builder.encode_text(settings.prompt.response_prefix) \
        if settings.prompt.response_prefix else ()
    overflows = 0

    def prompt_or_none(index: int, row: dict[str, Any], observation: Any
                       ) -> BuiltPrompt | None:
        nonlocal overflows
        try:
            return _prompt(builder, row, histories[index], observation)
        except PromptTooLongError:
            overflows += 1
            return None

    for turn in range(settings.max_steps):
        built = {int(i): contexts.pop(int(i)) if transcript and turn > 0
                 else prompt_or_none(int(i), rows[i], observations[i])
                 for i in np.flatnonzero(active)}
        for index in [i for i, prompt in built.items() if prompt is None]:
            active[index] = False  # no prompt fits: the trajectory ends here, cut
            final_truncated[index] = True
        indices = np.flatnonzero(active)
        if indices.size == 0:
            break
        prompts = [built[int(i)] for i in indices]
        responses = engine.generate([p.token_ids for p in prompts],
                                    temperature=settings.temperature,
                                    max_new_tokens=settings.max_new_tokens,
                                    seed=(seed + 7_919 * group_offset) * 1_009 + turn,
                                    stop=settings.stop)
        # A response the engine could not produce ends its trajectory as an env error.
        failed = {position: response.error for position, response in enumerate(responses)
                  if isinstance(response, FailedGeneration)}
        responses = [() if position in failed else response
                     for position, response in enumerate(responses)]
        texts = tokenizer.batch_decode([list(r) for r in responses], skip_special_tokens=True)
        # The parser reads the answer as the model "wrote" it: the prefix the prompt
        # ended with (PromptConfig.response_prefix) followed by the sampled response.
        prefix = settings.prompt.response_prefix
        parsed = [parse_action(prefix + text, think=settings.prompt.think,
                               action_tag=settings.prompt.action_tag,
                               style=settings.prompt.env_style) for text in texts]
        actions = [""] * num_envs
        for position, index in enumerate(indices):
            actions[index] = parsed[position].action
        next_observations, rewards, terminated, truncated, next_infos = vec_env.step(
            tuple(actions))
        next_rows = info_rows(next_infos, num_envs)
        for position, index in enumerate(indices):
            error = failed.get(position) or next_rows[index].get("env_error")
            if error:
                # The generation or the env call failed: the action had no outcome, so the
                # step is no sample (module docstring). The trajectory ends here, cut.
                env_errors[index] = True
                env_error_steps += 1
                first_error = first_error or str(error)
                final_truncated[index] = True
                final_success[index] = False
                active[index] = False
                if settings.keep_bootstrap_prompts:  # the state the failed step was in
                    bootstrap_prompts[int(index)] = prompts[position].token_ids
                continue
            valid = bool(next_rows[index].get("valid_action", True))
            ok = parsed[position].format_ok
            penalty = settings.invalid_action_penalty if (not ok or not valid) else 0.0
            steps.append(_Step(
                prompt=prompts[position].token_ids, response=tuple(responses[position]),
                env_reward=float(rewards[index]), penalty=penalty, format_ok=ok, valid=valid,
                traj=int(index), group=int(index) // group_size, anchor=rows[index]["anchor"],
                step=turn, task_id=str(rows[index].get("task_id", "")),
                task_type=str(rows[index].get("task_type", "") or ""),
                action=parsed[position].action, text=texts[position],
                prompt_cut=prompts[position].was_cut,
                observation=str(observations[index]),
                task=str(rows[index].get("task", "")),
            ))
            histories[index].append((str(observations[index]), parsed[position].action))
            finished = bool(terminated[index]) or bool(truncated[index])
            if finished:
                final_truncated[index] = not bool(terminated[index])
            final_success[index] = bool(next_rows[index].get("success", False))
            following = None  # the prompt of the next turn, when it is needed
            if transcript and (not finished or final_truncated[index]):
                following = _extended(prompts[position], responses[position],
                                      builder.encode_text(str(next_observations[index])),
                                      settings.prompt.max_observation_tokens,
                                      opener=prefix_ids)
                if not finished and len(following.token_ids) > budget:
                    # the transcript outgrew the budget: the trajectory ends here, cut
                    finished = budget_cut[index] = final_truncated[index] = True
            if finished:
                active[index] = False
                if settings.keep_bootstrap_prompts and final_truncated[index]:
                    # cut by the env's step limit or the transcript budget
                    if following is None:
                        following = prompt_or_none(int(index), next_rows[index],
                                                   next_observations[index])
                    if following is not None:
                        bootstrap_prompts[int(index)] = following.token_ids
            elif transcript:
                contexts[int(index)] = following
        observations, rows = next_observations, next_rows
        if progress is not None:
            progress.update(1)
            progress.set_postfix(active=int(active.sum()))
    final_truncated |= active  # still running at max_steps: cut by the rollout
    if settings.keep_bootstrap_prompts:
        for index in np.flatnonzero(active):
            following = contexts[int(index)] if transcript else \
                prompt_or_none(int(index), rows[index], observations[index])
            if following is not None:
                bootstrap_prompts[int(index)] = following.token_ids
    if not steps:
        reason = (f"the first error: {first_error}" if first_error else
                  f"{overflows} first prompts did not fit in max_prompt_tokens")
        raise NoStepsError(f"the rollout produced no steps: all {num_envs} envs failed in "
                           f"their reset or first step; {reason}")
    return _assemble(steps, tokenizer, final_success, final_truncated, env_errors,
                     env_error_steps,
                     bootstrap_prompts if settings.keep_bootstrap_prompts else None,
                     budget_cut=budget_cut, layout=settings.prompt.layout,
                     prompt_overflows=overflows)


def _extended(prompt: BuiltPrompt, response: Sequence[int], env_text: Sequence[int],
              max_env_tokens: int | None, opener: Sequence[int] = ()) -> BuiltPrompt:
    """The transcript after ``prompt``: its tokens, the response, the env's text (its first
    ``max_env_tokens`` tokens when set; a cut is reported as ``observation_chars_cut``,
    here in tokens, so the step's ``prompt_cut`` counts it), then ``opener`` (the
    response prefix's tokens, never cut)."""
    cut = 0
    if max_env_tokens is not None and len(env_text) > max_env_tokens:
        cut = len(env_text) - max_env_tokens
        env_text = env_text[:max_env_tokens]
    return BuiltPrompt(tuple(prompt.token_ids) + tuple(response) + tuple(env_text)
                       + tuple(opener), "", 0, 0, cut)


def _prompt(builder: PromptBuilder, row: dict[str, Any], history: list[tuple[str, str]],
            observation: Any) -> BuiltPrompt:
    """The prompt of a sub-env in the state ``observation`` / ``row`` (its info)."""
    return builder.build(str(row.get("task", "")), history, str(observation),
                         tuple(row.get("admissible_actions", ()) or ()))


def _check_groups(rows: list[dict[str, Any]], group_size: int) -> None:
    # An env whose reset failed has a placeholder task id ("" when the env was to pick
    # its task from the seed): it started on no task, so it is left out of the check.
    for start in range(0, len(rows), group_size):
        tasks = {rows[i]["task_id"] for i in range(start, start + group_size)
                 if "task_id" in rows[i] and not rows[i].get("env_error")}
        if len(tasks) > 1:
            raise RuntimeError(
                f"group {start // group_size} started on different tasks {sorted(map(str, tasks))}"
                "; groups need the same task in every env"
            )


def _bootstrap_rows(last: np.ndarray, traj_ids: np.ndarray, prompts: dict[int, tuple[int, ...]]
                    ) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """(K,) int64 last-step rows of the trajectories in ``prompts`` (ascending), and
    their prompts in the same order.

    Args:
        last: (N,) bool, the trajectory's last step (rows sorted by trajectory).
        traj_ids: (N,) int64 trajectory of each row.
        prompts: trajectory id -> token ids of the prompt after its last step.
    """
    last_rows = np.flatnonzero(last)
    keep = np.array([int(traj_ids[row]) in prompts for row in last_rows], dtype=bool)
    rows = last_rows[keep].astype(np.int64)
    return rows, [prompts[int(traj_ids[row])] for row in rows]


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
        summed).

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
        fill = pad_id if name.endswith("_ids") else 0
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
    }
    for name in _ROW_FIELDS:
        if name in changes or name in ("old_log_probs", "ref_log_probs", "values"):
            continue
        parts = rows(name)
        if any(part is None for part in parts):
            changes[name] = None
        elif isinstance(parts[0], tuple):
            changes[name] = tuple(item for part in parts for item in part)
        else:
            changes[name] = np.concatenate(parts)
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


def _assemble(steps: list[_Step], tokenizer: Any, final_success: np.ndarray,
              final_truncated: np.ndarray, env_errors: np.ndarray, env_error_steps: int,
              bootstrap_prompts: dict[int, tuple[int, ...]] | None, *,
              budget_cut: np.ndarray, layout: str, prompt_overflows: int = 0) -> StepBatch:
    steps = sorted(steps, key=lambda s: (s.traj, s.step))
    pad_id = int(tokenizer.pad_token_id)
    prompt_ids, prompt_mask = pad_left([s.prompt for s in steps], pad_id)
    response_ids, response_mask = pad_right([s.response for s in steps], pad_id)
    traj_ids = np.array([s.traj for s in steps], dtype=np.int64)
    last = np.ones(len(steps), dtype=bool)
    last[:-1] = traj_ids[1:] != traj_ids[:-1]
    env_rewards = np.array([s.env_reward for s in steps], dtype=np.float64)
    penalties = np.array([s.penalty for s in steps], dtype=np.float64)
    bootstrap: dict[str, np.ndarray] = {}
    if bootstrap_prompts is not None:
        rows, prompts = _bootstrap_rows(last, traj_ids, bootstrap_prompts)
        ids, mask = pad_left(prompts, pad_id)
        bootstrap = {"bootstrap_rows": rows, "bootstrap_prompt_ids": ids,
                     "bootstrap_prompt_mask": mask}
    return StepBatch(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask,
        response_ids=response_ids, response_mask=response_mask,
        rewards=env_rewards - penalties, env_rewards=env_rewards, penalties=penalties,
        invalid=~(np.array([s.format_ok and s.valid for s in steps], dtype=bool)),
        format_ok=np.array([s.format_ok for s in steps], dtype=bool),
        valid_action=np.array([s.valid for s in steps], dtype=bool),
        traj_ids=traj_ids,
        group_ids=np.array([s.group for s in steps], dtype=np.int64),
        anchors=tuple(s.anchor for s in steps),
        step_index=np.array([s.step for s in steps], dtype=np.int64),
        last_step=last,
        success=final_success[traj_ids],
        truncated=final_truncated[traj_ids],
        task_ids=tuple(s.task_id for s in steps),
        task_types=tuple(s.task_type for s in steps),
        actions=tuple(s.action for s in steps),
        response_texts=tuple(s.text for s in steps),
        prompt_cut=np.array([s.prompt_cut for s in steps], dtype=bool),
        observations=tuple(s.observation for s in steps),
        tasks=tuple(s.task for s in steps),
        env_error=env_errors[traj_ids],
        env_errors=int(env_errors.sum()),
        env_error_steps=env_error_steps,
        prompt_overflows=prompt_overflows,
        anchor_ids=intern_anchors([s.anchor for s in steps]),
        budget_cut=budget_cut[traj_ids],
        layout=layout,
        **bootstrap,
    )
