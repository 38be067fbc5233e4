"""Multi-turn rollouts over a vectorized text env, collected into a typed step batch.

Every agent step is one training sample: the per-step prompt
(:mod:`algorithms.agent.prompts`), the sampled response, the parsed action and its reward. A
step whose answer is badly formatted, or whose action the env reports as not valid
(``info["valid_action"]``), costs ``invalid_action_penalty`` (GiGPO recipes: 0.1, 0.01 for
Search-QA); the env's own reward never includes it.

The ``N = num_groups * group_size`` sub-envs are reset with
``options={"task_ids": [...]}`` so the ``group_size`` envs of a group play the same task
from the same initial state (or with one seed, which the vector env turns into one seed
per group). Group ids are the vector env's (``info["group_id"]``), trajectory ids the
sub-env indices. Each sub-env's trajectory in the making is one
:class:`~algorithms.agent.env_slot.EnvSlot`; its prompts come from the layout's
:class:`~algorithms.agent.prompt_strategies.PromptStrategy`. The loop steps the whole batch until
every env has terminated or truncated, or ``max_steps`` turns have passed; finished envs get
an empty action, which the vector env ignores (it repeats their last observation with
reward 0).

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
:meth:`algorithms.training.learner.Learner.training_batch`).

Layouts (``prompt.layout``). ``window``: each step's prompt is built afresh from the task,
the last ``history_window`` (observation, action) pairs and the current observation.
``transcript``: the first step's prompt is built the same way (no history); every later
step's prompt is the previous one followed by the previous response's tokens and the
env's text (its next observation, tokenized on its own and appended verbatim: for
Search-QA that is Search-R1's ``\n\n<information>...</information>\n\n``), so the
last row of a trajectory holds its whole transcript
(:func:`algorithms.training.transcript.transcript_view`). The
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

Prompts too long for ``max_prompt_tokens`` are cut (:mod:`algorithms.agent.prompts`: history,
then the observation's start, then the admissible-action list's tail). Only when not even
the task and the answer format fit is a step impossible: that trajectory ends there,
truncated, without the step (counted in ``prompt_overflows``; no bootstrap prompt, since
none fits) and the rest of the rollout goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentgym.vector.observations import observation_rows
from algorithms.agent.env_slot import EnvSlot, StepRecord, split_observation
from algorithms.agent.prompt_strategies import PromptStrategy, prompt_strategy
from algorithms.agent.prompts import BuiltPrompt, PromptBuilder, PromptTooLongError
from algorithms.agent.step_batch import StepBatch, assemble  # the rollout's output
from algorithms.config import PromptConfig
from algorithms.engines import FailedGeneration


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


@dataclass(frozen=True)
class RolloutSettings:
    """What one rollout needs besides the env and the engine.

    Attributes:
        group_size: trajectories per group (the vector env's ``group_size``).
        max_steps: turns at most.
        temperature: sampling temperature.
        max_new_tokens: response length limit.
        invalid_action_penalty: reward subtracted on a badly formatted or invalid step.
        prompt: prompt settings (also the parsing style).
        keep_bootstrap_prompts: keep the next prompt of every trajectory cut by a step
            limit or an env error (PPO's GAE bootstraps from its value; see the module
            docstring).
        stop: stop strings passed to the engine (a response ends right after the first).
        vision: a vision-language policy's
            :class:`~algorithms.engines.vision.VisionProcessor` (prompts with a visual
            env's images), or ``None`` (a text policy).
        tools: the env's :class:`~agentgym.tools.EnvTools` (the ``tool-call`` action
            format; ``None`` in the tag format).
    """

    group_size: int
    max_steps: int
    temperature: float
    max_new_tokens: int
    invalid_action_penalty: float
    prompt: PromptConfig
    keep_bootstrap_prompts: bool
    stop: tuple[str, ...] = ()
    vision: Any = None
    tools: Any = None


class NoStepsError(RuntimeError):
    """No env of a rollout made a single step: every one failed to reset or crashed on its
    first step (see the envs' ``info["env_error"]``)."""


@dataclass
class _Tally:
    """What a rollout counts besides its steps."""

    env_error_steps: int = 0
    prompt_overflows: int = 0
    first_error: str = ""

    def prompt(self, strategy: PromptStrategy, slot: EnvSlot) -> BuiltPrompt | None:
        """``strategy``'s prompt for ``slot``, or ``None`` (counted) when none fits."""
        try:
            return strategy.prompt(slot)
        except PromptTooLongError:
            self.prompt_overflows += 1
            return None


def sampling_seed(seed: int, group_offset: int, turn: int) -> int:
    """The engine's sampling seed of ``turn`` in the rollout of the block of groups that
    starts at ``group_offset`` (different per block)."""
    return (seed + 7_919 * group_offset) * 1_009 + turn


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
            ``num_envs = len(group_task_ids) * group_size`` and ``settings.group_size``
            as its ``group_size``.
        engine: a :class:`~algorithms.engines.GenerationEngine`.
        tokenizer: the policy's tokenizer (prompts, decoding, pad id).
        settings: see :class:`RolloutSettings`.
        group_task_ids: one task id per group; ``None`` lets the env pick from ``seed``
            (groups then rely on the vector env's group seeding).
        seed: reset seed and the base of the per-turn sampling seeds.
        progress: optional tqdm-like bar, advanced once per turn.
        group_offset: the global index of ``vec_env``'s first group, when it holds one
            rank's block of a larger rollout (:mod:`algorithms.runs.distributed`): the vector
            env is reset with seed ``seed + group_offset``, so that its group ``g`` gets
            the seed group ``group_offset + g`` gets in one vector env of all groups
            (the vector env's seed rule), and the sampling seeds differ per block.
            Trajectory ids are the sub-env indices and group ids the vector env's
            ``group_id``, both local (0-based); :func:`concat_batches` places the blocks.

    Returns:
        The :class:`StepBatch` (unscored).

    Raises:
        ValueError: the vector env's size or group size does not match.
        RuntimeError: the envs of a group did not start on the same task.
        NoStepsError: no env made a single step (every one failed to reset or in its
            first step).
    """
    num_envs = int(vec_env.num_envs)
    group_size = settings.group_size
    if num_envs % group_size:
        raise ValueError(f"num_envs={num_envs} is not a multiple of group_size={group_size}")
    if int(vec_env.group_size) != group_size:
        raise ValueError(f"the vector env has group_size={vec_env.group_size}, the rollout "
                         f"settings {group_size}")
    options = None
    if group_task_ids is not None:
        if len(group_task_ids) * group_size != num_envs:
            raise ValueError(f"{len(group_task_ids)} groups x {group_size} != {num_envs} envs")
        options = {"task_ids": [str(t) for t in group_task_ids for _ in range(group_size)]}
    observations, infos = vec_env.reset(seed=seed + group_offset, options=options)
    slots = [EnvSlot.after_reset(i, observation, row) for i, (observation, row)
             in enumerate(zip(observation_rows(observations, num_envs),
                              info_rows(infos, num_envs), strict=True))]
    tally = _Tally(first_error=next((str(s.info["env_error"]) for s in slots if s.env_error),
                                    ""))
    if all(slot.env_error for slot in slots):
        raise NoStepsError(f"every env failed to reset; the first error: {tally.first_error}")
    _check_groups(slots)
    strategy = rollout_strategy(tokenizer, settings)
    for turn in range(settings.max_steps):
        live: list[tuple[EnvSlot, BuiltPrompt]] = []
        for slot in slots:
            prompt = tally.prompt(strategy, slot) if slot.active else None
            if prompt is not None:
                live.append((slot, prompt))
            elif slot.active:
                slot.end(truncated=True)  # no prompt fits: the trajectory ends here, cut
        if not live:
            break
        _turn(vec_env, engine, tokenizer, settings, strategy, live, tally,
              seed=sampling_seed(seed, group_offset, turn), turn=turn)
        if progress is not None:
            progress.update(1)
            progress.set_postfix(active=sum(slot.active for slot in slots))
    for slot in slots:
        if slot.active:  # still running at max_steps: cut by the rollout
            slot.end(truncated=True)
            if settings.keep_bootstrap_prompts:
                slot.bootstrap = _token_ids(tally.prompt(strategy, slot))
    if not any(slot.steps for slot in slots):
        reason = (f"the first error: {tally.first_error}" if tally.first_error else
                  f"{tally.prompt_overflows} first prompts did not fit in max_prompt_tokens")
        raise NoStepsError(f"the rollout produced no steps: all {num_envs} envs failed in "
                           f"their reset or first step; {reason}")
    return assemble(slots, int(tokenizer.pad_token_id),
                    keep_bootstrap=settings.keep_bootstrap_prompts,
                    layout=settings.prompt.layout, env_error_steps=tally.env_error_steps,
                    prompt_overflows=tally.prompt_overflows,
                    bridge=getattr(strategy, "counts", None))


def rollout_strategy(tokenizer: Any, settings: RolloutSettings) -> PromptStrategy:
    """The prompt strategy of ``settings``' action format and layout."""
    if settings.prompt.action_format == "tool-call":
        from agentgym.tools import generic_tools
        from algorithms.agent.tool_prompts import end_token_ids, tool_prompt_strategy

        return tool_prompt_strategy(tokenizer, settings.prompt,
                                    settings.tools or generic_tools(),
                                    end_token_ids(tokenizer))
    return prompt_strategy(PromptBuilder(tokenizer, settings.prompt, settings.vision),
                           settings.prompt)


def _turn(vec_env: Any, engine: Any, tokenizer: Any, settings: RolloutSettings,
          strategy: PromptStrategy, live: list[tuple[EnvSlot, BuiltPrompt]], tally: _Tally,
          *, seed: int, turn: int) -> None:
    """One turn: sample a response for every live slot, step the vector env (an empty
    action for the others), and take each outcome into its slot."""
    # images go to the engine only when a prompt shows one (text engines never see them)
    images = ({"images": [prompt.images for _, prompt in live]}
              if any(prompt.images for _, prompt in live) else {})
    responses = engine.generate([prompt.token_ids for _, prompt in live],
                                temperature=settings.temperature,
                                max_new_tokens=settings.max_new_tokens, seed=seed,
                                stop=settings.stop, **images)
    # A response the engine could not produce ends its trajectory as an env error.
    failed = {position: response.error for position, response in enumerate(responses)
              if isinstance(response, FailedGeneration)}
    responses = [() if position in failed else response
                 for position, response in enumerate(responses)]
    texts = tokenizer.batch_decode([list(r) for r in responses], skip_special_tokens=True)
    # The parser reads the answer as the model "wrote" it: the prefix the prompt
    # ended with (PromptConfig.response_prefix) followed by the sampled response.
    prefix = settings.prompt.response_prefix
    parsed = [strategy.read(prefix + text) for text in texts]
    actions = [""] * int(vec_env.num_envs)
    for (slot, _), answer in zip(live, parsed, strict=True):
        actions[slot.index] = answer.action
    next_observations, rewards, terminated, truncated, next_infos = vec_env.step(
        tuple(actions))
    next_rows = info_rows(next_infos, int(vec_env.num_envs))
    next_observations = observation_rows(next_observations, int(vec_env.num_envs))
    for position, (slot, prompt) in enumerate(live):
        index = slot.index
        error = failed.get(position) or next_rows[index].get("env_error")
        if error:
            # The generation or the env call failed: the action had no outcome, so the
            # step is no sample (module docstring). The trajectory ends here, cut.
            slot.env_error, slot.success = True, False
            slot.end(truncated=True)
            tally.env_error_steps += 1
            tally.first_error = tally.first_error or str(error)
            if settings.keep_bootstrap_prompts:  # the state the failed step was in
                slot.bootstrap = prompt.token_ids
            continue
        answer = parsed[position]
        valid = bool(next_rows[index].get("valid_action", True))
        reply, next_image = split_observation(next_observations[index])
        penalty = settings.invalid_action_penalty if not (answer.format_ok and valid) else 0.0
        slot.steps.append(StepRecord(
            prompt=prompt.token_ids, response=tuple(responses[position]),
            env_reward=float(rewards[index]), penalty=penalty, format_ok=answer.format_ok,
            valid=valid, step=turn, anchor=slot.info["anchor"],
            next_anchor=next_rows[index].get("anchor"),
            task_id=str(slot.info.get("task_id", "")),
            task_type=str(slot.info.get("task_type", "") or ""), action=answer.action,
            text=texts[position], prompt_cut=prompt.was_cut, observation=slot.observation,
            task=str(slot.info.get("task", "")),
            log_probs=getattr(responses[position], "log_probs", None), images=prompt.images,
            reply=reply,
            call_statuses=",".join(a.status for a in getattr(answer, "attempts", ()))))
        slot.history.append((slot.observation, answer.action))
        slot.answers.append(prefix + texts[position])
        slot.feedbacks.append(getattr(answer, "feedback", ""))
        slot.observation, slot.image = reply, next_image
        slot.info = next_rows[index]
        finished = bool(terminated[index]) or bool(truncated[index])
        if finished:
            slot.truncated = not bool(terminated[index])
        slot.success = bool(slot.info.get("success", False))
        strategy.advance(slot, prompt, responses[position], finished)
        if slot.views:  # the tool-call format: the tool message that answered the step
            from algorithms.agent.tool_prompts import tool_message

            slot.steps[-1] = replace(slot.steps[-1], tool_result=tool_message(
                slot.feedbacks[-1], slot.views[len(slot.steps)]))
        if not finished and (slot.budget_cut or slot.bridge_ended):
            # the transcript outgrew the budget, or its next turn could not be bridged
            finished = slot.truncated = True
        if finished:
            slot.active = False
            if settings.keep_bootstrap_prompts and slot.truncated:
                # cut by the env's step limit or the transcript budget
                slot.bootstrap = _token_ids(tally.prompt(strategy, slot))


def _token_ids(prompt: BuiltPrompt | None) -> tuple[int, ...] | None:
    return None if prompt is None else prompt.token_ids


def _check_groups(slots: Sequence[EnvSlot]) -> None:
    """Every group's envs started on one task (groups by the vector env's ``group_id``).

    An env whose reset failed has a placeholder task id ("" when the env was to pick its
    task from the seed): it started on no task, so it is left out of the check.
    """
    tasks: dict[int, set[Any]] = {}
    for slot in slots:
        if "task_id" in slot.info and not slot.env_error:
            tasks.setdefault(slot.group, set()).add(slot.info["task_id"])
    for group in sorted(tasks):
        if len(tasks[group]) > 1:
            raise RuntimeError(
                f"group {group} started on different tasks {sorted(map(str, tasks[group]))}"
                "; groups need the same task in every env"
            )
