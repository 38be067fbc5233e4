"""The rollout on the scripted door env yields the expected step batch."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

from agentgym.scripted import ScriptedTextEnv  # noqa: E402
from agentgym.vector import make_vector_env  # noqa: E402
from algorithms.agent.prompts import PromptBuilder  # noqa: E402
from algorithms.agent.rollout import NoStepsError, RolloutSettings, collect_rollout, info_rows  # noqa: E402
from algorithms.config import PromptConfig  # noqa: E402
from tests.algorithms.fakes import (  # noqa: E402
    CUT_PROMPT,
    CUT_TASKS,
    ScriptedEngine,
    collect_and_close,
    cut_rollout,
    one_turn_settings,
)
from tests.algorithms.tiny import make_tokenizer  # noqa: E402

TASKS = ("doors-0003", "doors-0005")


def _settings(**prompt: object) -> RolloutSettings:
    return RolloutSettings(group_size=2, max_steps=3, temperature=1.0, max_new_tokens=16,
                           invalid_action_penalty=0.1,
                           prompt=PromptConfig(think=False, max_prompt_tokens=400, **prompt),
                           keep_bootstrap_prompts=False)


def _env(**kwargs: object):
    return make_vector_env("AgentGym/Scripted-v0", 4, group_size=2, num_rooms=2, hint=True,
                           max_steps=3, **kwargs)


def test_step_batch_ids_anchors_masks_penalties():
    tokenizer = make_tokenizer()
    solutions = [ScriptedTextEnv().solution(t) for t in TASKS]
    wrong = {s: next(f"open {c} door" for c in ("red", "green", "blue")
                     if f"open {c} door" not in s) for s in solutions}
    # env 0 wins in two steps; env 1 answers tag-less words (bad format, env: invalid);
    # env 2 opens a wrong door (valid, nothing happens); env 3 looks around.
    plans = {0: lambda t: f"<action> {solutions[0][t]} </action>",
             1: lambda t: "door door",
             2: lambda t: f"<action> {wrong[solutions[1]]} </action>",
             3: lambda t: "<action> look </action>"}
    active_by_turn = {0: [0, 1, 2, 3], 1: [0, 1, 2, 3], 2: [1, 2, 3]}
    engine = ScriptedEngine(tokenizer,
                            lambda turn, pos, _: plans[active_by_turn[turn][pos]](turn))
    env = _env()
    try:
        batch = collect_rollout(env, engine, tokenizer, _settings(), group_task_ids=TASKS,
                                seed=7)
    finally:
        env.close()

    np.testing.assert_array_equal(batch.traj_ids, [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
    np.testing.assert_array_equal(batch.group_ids, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(batch.step_index, [0, 1, 0, 1, 2, 0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(batch.last_step, [0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(batch.success, [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(batch.truncated, [0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(batch.env_rewards, [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(batch.format_ok, [1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(batch.valid_action, [1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(batch.invalid, [0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(batch.rewards, batch.env_rewards - 0.1 * batch.invalid)
    assert batch.log.actions[0] == solutions[0][0] and batch.log.actions[2] == "door door"
    assert set(batch.log.task_ids[:5]) == {TASKS[0]} and set(batch.log.task_ids[5:]) == {TASKS[1]}

    # Anchors: the observation the action was taken in (GiGPO's anchor state).
    probe = ScriptedTextEnv(num_rooms=2, hint=True, max_steps=3)
    first_obs, _ = probe.reset(options={"task_id": TASKS[0]})
    second_obs, *_ = probe.step(solutions[0][0])
    assert batch.anchors[0] == first_obs and batch.anchors[1] == second_obs
    # The text part: each row's observation is the one its action answered.
    assert batch.log.observations[:2] == (first_obs, second_obs)
    assert batch.anchors[2] == first_obs  # env 1: garbage, state unchanged ...
    assert batch.anchors[3] == "Nothing happens."  # ... but the text now differs
    assert batch.anchors[6] == "Nothing happens." and batch.anchors[9] == batch.anchors[8]
    # Next anchors: the state each action led to -- the next row's anchor, or after a
    # trajectory's last step its terminal state's (env 0's winning step).
    for row in np.flatnonzero(~batch.last_step):
        assert batch.next_anchors[row] == batch.anchors[row + 1]
    terminal, *_ = probe.step(solutions[0][1])
    assert batch.next_anchors[1] == terminal

    # Masks: left-padded prompts, right-padded responses; ids round-trip to the text.
    assert batch.prompt_ids.shape == batch.prompt_mask.shape
    assert batch.response_ids.shape == batch.response_mask.shape
    for row in range(len(batch)):
        prompt = batch.prompt_ids[row][batch.prompt_mask[row] == 1]
        assert np.all(batch.prompt_mask[row][: len(batch.prompt_mask[row]) - len(prompt)] == 0)
        response = batch.response_ids[row][batch.response_mask[row] == 1]
        assert batch.response_mask[row][: len(response)].all()
        assert response[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(list(response), skip_special_tokens=True) == \
            batch.log.response_texts[row]
    first_prompt = tokenizer.decode(list(batch.prompt_ids[0][batch.prompt_mask[0] == 1]))
    assert "A sign says: " + solutions[0][0] + "." in first_prompt
    assert "Actions you can take now: open red door" in first_prompt
    # The history window carries the previous (observation, action) pair.
    second_prompt = tokenizer.decode(list(batch.prompt_ids[1][batch.prompt_mask[1] == 1]))
    assert "You did: " + solutions[0][0] in second_prompt


def test_info_rows_respects_masks():
    infos = {"a": np.array([1, 0]), "_a": np.array([True, False]),
             "b": np.array(["x", "y"], dtype=object), "_b": np.array([True, True])}
    assert info_rows(infos, 2) == [{"a": 1, "b": "x"}, {"b": "y"}]


def test_group_task_ids_must_match_the_envs():
    tokenizer = make_tokenizer()
    engine = ScriptedEngine(tokenizer, lambda *_: "look")
    env = _env()
    try:
        with pytest.raises(ValueError, match="groups"):
            collect_rollout(env, engine, tokenizer, _settings(), group_task_ids=TASKS[:1],
                            seed=0)
    finally:
        env.close()


class _RelabelledGroups:
    """A vector env whose infos report other group ids (``group_id`` + ``shift``, or none
    with ``shift=None``): the rollout must take them as given."""

    def __init__(self, env, shift: int | None):
        self.env, self.shift = env, shift
        self.num_envs, self.group_size = env.num_envs, env.group_size

    def _relabel(self, infos):
        infos = dict(infos)
        if self.shift is None:
            del infos["group_id"], infos["_group_id"]
        else:
            infos["group_id"] = infos["group_id"] + self.shift
        return infos

    def reset(self, **kwargs):
        observations, infos = self.env.reset(**kwargs)
        return observations, self._relabel(infos)

    def step(self, actions):
        *outcome, infos = self.env.step(actions)
        return (*outcome, self._relabel(infos))


def test_group_ids_are_the_vector_envs():
    tokenizer = make_tokenizer()
    engine = ScriptedEngine(tokenizer, lambda *_: "<action> look </action>")
    env = _env()
    try:
        batch = collect_rollout(_RelabelledGroups(env, 10), engine, tokenizer, _settings(),
                                group_task_ids=TASKS, seed=0)
        np.testing.assert_array_equal(np.unique(batch.group_ids), [10, 11])
        np.testing.assert_array_equal(batch.group_ids, batch.traj_ids // 2 + 10)
        with pytest.raises(ValueError, match="no group_id"):
            collect_rollout(_RelabelledGroups(env, None), engine, tokenizer, _settings(),
                            group_task_ids=TASKS, seed=0)
    finally:
        env.close()


class _SeedRecorder(ScriptedEngine):
    def generate(self, prompts, *, seed, **kwargs):
        self.seeds = [*getattr(self, "seeds", []), seed]
        return super().generate(prompts, seed=seed, **kwargs)


@pytest.mark.parametrize("offset", [0, 2])
def test_reset_and_sampling_seeds_of_a_block_of_groups(offset):
    """A block at group offset ``g`` is reset as the vector env resets seed ``s + g`` (its
    group ``k`` plays what group ``g + k`` of one vector env of all groups plays), and turn
    ``t`` samples with seed ``(s + 7919 g) * 1009 + t``."""
    tokenizer = make_tokenizer()
    engine = _SeedRecorder(tokenizer, lambda *_: "<action> look </action>")
    env = make_vector_env("AgentGym/Scripted-v0", 4, group_size=2, num_rooms=2,
                          max_steps=2, num_tasks=64)
    try:
        _, infos = env.reset(seed=5 + offset)
        expected = [str(t) for t in infos["task_id"][::2]]
        block = {"group_offset": offset} if offset else {}  # 0: the default
        batch = collect_rollout(env, engine, tokenizer, _settings(), group_task_ids=None,
                                seed=5, **block)
    finally:
        env.close()
    first_rows = np.flatnonzero(batch.step_index == 0)
    assert [batch.log.task_ids[r] for r in first_rows[::2]] == expected
    assert engine.seeds == [(5 + 7_919 * offset) * 1_009 + t for t in range(len(engine.seeds))]
    assert len(engine.seeds) == 2


def test_the_rollout_and_the_vector_env_agree_on_the_group_size():
    tokenizer = make_tokenizer()
    env = make_vector_env("AgentGym/Scripted-v0", 4, group_size=1, num_rooms=2, max_steps=3)
    try:
        with pytest.raises(ValueError, match="group_size=1, the rollout settings 2"):
            collect_rollout(env, ScriptedEngine(tokenizer, lambda *_: "look"), tokenizer,
                            _settings(), group_task_ids=None, seed=0)
    finally:
        env.close()


class _FixedTaskEnv(ScriptedTextEnv):
    """Plays one task whatever the reset seed (an env that ignores group seeding)."""

    def __init__(self, task_id: str, **kwargs):
        super().__init__(**kwargs)
        self.fixed_task_id = task_id

    def task_id_for_seed(self, rng):
        return self.fixed_task_id


@pytest.mark.parametrize("tasks, same", [((TASKS[0], TASKS[1], TASKS[1], TASKS[1]), False),
                                          ((TASKS[0], TASKS[0], TASKS[1], TASKS[1]), True)])
def test_groups_whose_envs_start_on_different_tasks_are_refused(tasks, same):
    from agentgym.vector import TextVectorEnv

    tokenizer = make_tokenizer()
    engine = ScriptedEngine(tokenizer, lambda *_: "<action> look </action>")
    env = TextVectorEnv([lambda t=t: _FixedTaskEnv(t, num_rooms=2, max_steps=3)
                         for t in tasks], group_size=2)
    try:
        if same:
            batch = collect_rollout(env, engine, tokenizer, _settings(), group_task_ids=None,
                                    seed=0)
            assert set(np.array(batch.log.task_ids)[batch.group_ids == 1]) == {TASKS[1]}
        else:
            with pytest.raises(RuntimeError, match="group 0 started on different tasks"):
                collect_rollout(env, engine, tokenizer, _settings(), group_task_ids=None,
                                seed=0)
    finally:
        env.close()


def test_the_penalty_applies_to_bad_format_and_to_rejected_actions_each_alone():
    """Format and validity disagree row by row: well-formed and valid, bad format with a
    valid action, well-formed with a rejected action, bad format and rejected."""
    tokenizer = make_tokenizer()
    answers = {0: "<action> look </action>", 1: "<action> look",
               2: "<action> open door </action>", 3: "door door"}
    engine = ScriptedEngine(tokenizer, lambda turn, position, _: answers[position])
    batch = collect_and_close(_env(), engine, tokenizer, one_turn_settings(penalty=0.25), TASKS)
    np.testing.assert_array_equal(batch.traj_ids, [0, 1, 2, 3])
    np.testing.assert_array_equal(batch.format_ok, [1, 0, 1, 0])
    np.testing.assert_array_equal(batch.valid_action, [1, 1, 0, 0])
    np.testing.assert_array_equal(batch.invalid, [0, 1, 1, 1])
    np.testing.assert_allclose(batch.rewards, [0.0, -0.25, -0.25, -0.25])


def test_zero_penalty_still_flags_invalid_steps():
    tokenizer = make_tokenizer()
    engine = ScriptedEngine(tokenizer, lambda *_: "door door")
    batch = collect_and_close(_env(), engine, tokenizer, one_turn_settings(penalty=0.0), TASKS)
    assert batch.invalid.all() and (batch.rewards == 0).all()


class _BrokenTaskEnv(ScriptedTextEnv):
    """Fails to reset one task (an env fault the vector env contains)."""

    def _reset_task(self, task_id):
        if task_id == TASKS[1]:
            raise RuntimeError("simulated crash")
        return super()._reset_task(task_id)


def test_a_failed_reset_ends_those_trajectories_without_steps():
    from agentgym.vector import TextVectorEnv

    tokenizer = make_tokenizer()
    engine = ScriptedEngine(tokenizer, lambda *_: "<action> look </action>")
    env = TextVectorEnv([lambda: _BrokenTaskEnv(num_rooms=2, max_steps=3)] * 4, group_size=2)
    try:
        batch = collect_rollout(env, engine, tokenizer, _settings(), group_task_ids=TASKS,
                                seed=0)
    finally:
        env.close()
    assert set(batch.traj_ids.tolist()) == {0, 1} and batch.env_errors == 2
    assert len(batch) == 6 and not batch.invalid.any()
    # the failed envs were never prompted nor stepped: no step of theirs failed either
    assert batch.env_error_steps == 0 and all(len(call) == 2 for call in engine.calls)


class _ResetFailingEnv(ScriptedTextEnv):
    """Fails every reset (say its worker timed out in it)."""

    def _reset_task(self, task_id):
        raise RuntimeError("simulated crash")


def test_a_failed_reset_in_a_group_whose_task_the_env_picks():
    """Without ``group_task_ids`` (the trainer's rollouts) a failed reset knows no task id:
    its placeholder is not a different task, so the group check lets it through and the
    rest of the group plays on."""
    from agentgym.vector import TextVectorEnv

    tokenizer = make_tokenizer()
    engine = ScriptedEngine(tokenizer, lambda *_: "<action> look </action>")
    working = lambda: ScriptedTextEnv(num_rooms=2, max_steps=3)  # noqa: E731
    env = TextVectorEnv([working, lambda: _ResetFailingEnv(num_rooms=2, max_steps=3),
                         working, working], group_size=2)
    try:
        batch = collect_rollout(env, engine, tokenizer, _settings(), group_task_ids=None,
                                seed=0)
    finally:
        env.close()
    assert set(batch.traj_ids.tolist()) == {0, 2, 3} and batch.env_errors == 1
    assert not batch.env_error.any()


def _tokens(ids: np.ndarray, mask: np.ndarray) -> list[int]:
    return ids[mask == 1].tolist()


def test_bootstrap_prompts_are_kept_for_cut_trajectories_only():
    tokenizer = make_tokenizer()
    batch = cut_rollout(tokenizer, max_steps=2)
    np.testing.assert_array_equal(batch.traj_ids, [0, 0, 1, 2, 3, 3])
    last = np.flatnonzero(batch.last_step)
    np.testing.assert_array_equal(batch.truncated[last], [0, 1, 1, 1])
    assert batch.env_errors == 1
    # Cut by the env's step limit (1), by an env error (2) and by the rollout's step
    # limit (3); not the winner (0).
    np.testing.assert_array_equal(batch.bootstrap_rows, last[[1, 2, 3]])
    assert batch.bootstrap_rows.dtype == np.int64
    assert batch.bootstrap_prompt_ids.shape == batch.bootstrap_prompt_mask.shape
    assert batch.bootstrap_prompt_ids.shape[0] == 3

    # Trajectory 1: the observation its last action led to (room 2), with that action in
    # the history.
    probe = ScriptedTextEnv(num_rooms=2, max_steps=1)
    observation, info = probe.reset(options={"task_id": CUT_TASKS[0]})
    action = probe.solution(CUT_TASKS[0])[0]
    after, _, terminated, truncated, after_info = probe.step(action)
    assert truncated and not terminated and "room 2 of 2" in after
    expected = PromptBuilder(tokenizer, CUT_PROMPT).build(
        info["task"], [(observation, action)], after, after_info["admissible_actions"])
    assert _tokens(batch.bootstrap_prompt_ids[0], batch.bootstrap_prompt_mask[0]) == \
        list(expected.token_ids)

    # Trajectory 2, cut by the crash of its step 1: the prompt of that failed step, the
    # same as the prompt of step 1 when the env does not crash.
    healthy = cut_rollout(tokenizer, max_steps=2, fail_at=None)
    row = np.flatnonzero((healthy.traj_ids == 2) & (healthy.step_index == 1))[0]
    assert _tokens(batch.bootstrap_prompt_ids[1], batch.bootstrap_prompt_mask[1]) == \
        _tokens(healthy.prompt_ids[row], healthy.prompt_mask[row])

    # Trajectory 3, cut by the rollout: the prompt its next step gets when the rollout
    # runs one turn longer.
    longer = cut_rollout(tokenizer, max_steps=3)
    row = np.flatnonzero((longer.traj_ids == 3) & (longer.step_index == 2))[0]
    assert _tokens(batch.bootstrap_prompt_ids[2], batch.bootstrap_prompt_mask[2]) == \
        _tokens(longer.prompt_ids[row], longer.prompt_mask[row])


def test_an_env_error_on_the_first_step_leaves_nothing_to_bootstrap():
    batch = cut_rollout(make_tokenizer(), max_steps=2, fail_at=0)  # rows: 0 0 1 3 3
    np.testing.assert_array_equal(batch.bootstrap_rows, [2, 4])  # trajectories 1 and 3
    assert batch.bootstrap_prompt_ids.shape[0] == 2


def test_no_bootstrap_prompts_unless_asked():
    batch = cut_rollout(make_tokenizer(), keep_bootstrap_prompts=False)
    assert batch.bootstrap_rows is None and batch.bootstrap_prompt_ids is None
    assert batch.bootstrap_prompt_mask is None and batch.bootstrap_values is None


def _unpadded(batch, rows):
    """Prompt and response tokens of ``rows`` without padding."""
    return ([_tokens(batch.prompt_ids[r], batch.prompt_mask[r]) for r in rows],
            [_tokens(batch.response_ids[r], batch.response_mask[r]) for r in rows])


def test_the_step_whose_env_call_failed_is_left_out():
    tokenizer = make_tokenizer()
    crashed = cut_rollout(tokenizer, max_steps=2)  # env 2 crashes on its step 1
    healthy = cut_rollout(tokenizer, max_steps=2, fail_at=None)  # the same, no crash
    np.testing.assert_array_equal(healthy.traj_ids, [0, 0, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(crashed.traj_ids, [0, 0, 1, 2, 3, 3])
    # Every real step is there, unchanged; only trajectory 2's failed step 1 is gone.
    same = [0, 1, 2, 3, 5, 6]
    assert _unpadded(crashed, range(6)) == _unpadded(healthy, same)
    for name in ("rewards", "env_rewards", "invalid", "format_ok", "valid_action",
                 "group_ids", "step_index", "prompt_cut"):
        np.testing.assert_array_equal(getattr(crashed, name), getattr(healthy, name)[same],
                                      err_msg=name)
    assert crashed.anchors == tuple(healthy.anchors[i] for i in same)
    for name in ("actions", "response_texts", "task_ids"):
        assert getattr(crashed.log, name) == tuple(getattr(healthy.log, name)[i] for i in same)
    # Trajectory 2 ends on its step 0, cut by the error: truncated, failed, flagged.
    np.testing.assert_array_equal(crashed.last_step, [0, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(crashed.env_error, [0, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(crashed.truncated, [0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(crashed.success, [1, 1, 0, 0, 0, 0])
    assert crashed.env_errors == 1 and crashed.env_error_steps == 1
    assert not healthy.env_error.any() and healthy.env_errors == healthy.env_error_steps == 0


def test_a_failed_generation_is_handled_like_an_env_error_in_that_step():
    tokenizer = make_tokenizer()
    for step in (0, 1):
        crashed = cut_rollout(tokenizer, max_steps=2, fail_at=step)
        failed = cut_rollout(tokenizer, max_steps=2, fail_at=step, generation_fails=True)
        for name in ("traj_ids", "rewards", "env_error", "truncated", "success", "last_step",
                     "step_index", "group_ids"):
            np.testing.assert_array_equal(getattr(failed, name), getattr(crashed, name),
                                          err_msg=name)
        assert failed.log.response_texts == crashed.log.response_texts
        for name in ("bootstrap_rows", "bootstrap_prompt_ids", "bootstrap_prompt_mask"):
            np.testing.assert_array_equal(getattr(failed, name), getattr(crashed, name),
                                          err_msg=name)
        assert (failed.env_errors, failed.env_error_steps) == (1, 1)


def test_a_first_step_env_error_leaves_no_steps_of_that_trajectory():
    batch = cut_rollout(make_tokenizer(), max_steps=2, fail_at=0)
    np.testing.assert_array_equal(batch.traj_ids, [0, 0, 1, 3, 3])
    assert not batch.env_error.any()  # no row of trajectory 2 is left to flag
    assert batch.env_errors == 1 and batch.env_error_steps == 1
    np.testing.assert_array_equal(batch.group_ids, [0, 0, 0, 1, 1])


def test_a_rollout_without_a_single_step_is_an_error():
    from agentgym.vector import TextVectorEnv
    from tests.algorithms.fakes import StepFailingEnv

    tokenizer = make_tokenizer()
    engine = ScriptedEngine(tokenizer, lambda *_: "<action> look </action>")
    env = TextVectorEnv([lambda: StepFailingEnv(fail_at=0, num_rooms=2)] * 4, group_size=2)
    try:
        with pytest.raises(NoStepsError, match="no steps.*simulated crash"):
            collect_rollout(env, engine, tokenizer, _settings(), group_task_ids=TASKS, seed=0)
    finally:
        env.close()


class _WordyEnv(ScriptedTextEnv):
    """Task ``doors-0005`` has a task text too long for any prompt; every task offers a
    long admissible-action list (most of it ``look`` aliases the env rejects)."""

    @property
    def task(self) -> str:
        if self._task_id == TASKS[1]:
            return "Cross the rooms. " * 200
        return super().task

    def admissible_actions(self) -> tuple[str, ...]:
        return super().admissible_actions() + ("look",) * 150


def test_a_prompt_over_budget_is_cut_or_its_step_dropped_never_the_rollout():
    """The long action list is cut to fit (counted as a prompt cut); the group whose task
    cannot fit at all plays no step and is counted, and the other group plays on."""
    from agentgym.vector import TextVectorEnv

    tokenizer = make_tokenizer()
    engine = ScriptedEngine(tokenizer, lambda *_: "<action> look </action>")
    env = TextVectorEnv([lambda: _WordyEnv(num_rooms=2, hint=True, max_steps=3)] * 4,
                        group_size=2)
    settings = one_turn_settings(max_steps=2, max_prompt_tokens=150,
                                 keep_bootstrap_prompts=True)
    batch = collect_and_close(env, engine, tokenizer, settings, TASKS)
    assert set(batch.traj_ids.tolist()) == {0, 1} and len(batch) == 4
    assert batch.prompt_cut.all() and batch.prompt_mask.sum(1).max() <= 150
    assert batch.prompt_overflows == 2  # envs 2 and 3, at their first step
    assert batch.env_errors == 0
    assert batch.bootstrap_rows.tolist() == [1, 3]  # the rollout's cut, bootstrapped
