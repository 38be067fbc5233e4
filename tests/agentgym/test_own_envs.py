"""Envs of one's own: ids in Gymnasium's import form, ``agentgym.register`` (and
``gym.make_vec`` with groups), and :class:`agentgym.PlainTextEnv` for plain Gymnasium
text envs."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import pytest

import agentgym
from agentgym import PlainTextEnv, make_text_env
from agentgym.env_ids import EnvIdError, constructor_arguments, env_creator, find_spec
from agentgym.plain import ADAPTER_ARGUMENTS, accepted_arguments
from agentgym.registration import is_agentgym_env
from agentgym.vector import TextVectorEnv, infos_to_list
from tests.agentgym import faulty_envs
from tests.agentgym.faulty_envs import PlainGuessEnv

PLAIN = f"{faulty_envs.MODULE}:AgentGymTest/PlainGuess-v0"


# ---------------------------------------------------------------------- ids
def test_find_spec_takes_both_forms_and_says_what_is_wrong():
    assert find_spec("AgentGym/Scripted-v0").id == "AgentGym/Scripted-v0"
    assert find_spec("examples.own_env:OwnEnv/NumberGuess-v0").id == "OwnEnv/NumberGuess-v0"
    assert env_creator(PLAIN) is PlainGuessEnv
    with pytest.raises(EnvIdError, match="'your_module:Byoe/NumberGuess-v0'"):
        find_spec("Byoe/NumberGuess-v0")
    with pytest.raises(EnvIdError, match="the module 'guessenv' cannot be imported"):
        find_spec("guessenv:Byoe/NumberGuess-v0")
    assert issubclass(EnvIdError, gym.error.Error)
    assert is_agentgym_env("AgentGym/KeyDoor-v0") and is_agentgym_env("x:AgentGym/KeyDoor-v0")
    assert not is_agentgym_env(PLAIN)


def test_a_plain_env_also_takes_the_adapters_arguments():
    assert constructor_arguments(PLAIN) == ("high", "tries")
    assert accepted_arguments(PLAIN) == ("high", "tries", *ADAPTER_ARGUMENTS)
    assert accepted_arguments("AgentGym/Scripted-v0") == constructor_arguments(
        "AgentGym/Scripted-v0")
    assert accepted_arguments(f"{faulty_envs.MODULE}:AgentGymTest/Kwargs-v0") is None


# ---------------------------------------------------------------------- register / make_vec
def test_register_binds_the_registering_module_for_the_workers():
    spec = gym.spec("AgentGymTest/PlainGuess-v0")
    assert spec.vector_entry_point.args == (PLAIN,)
    agentgym.register("AgentGymTest/PlainGuess-v0", PlainGuessEnv)  # again: nothing changes
    assert gym.spec("AgentGymTest/PlainGuess-v0") is spec
    with pytest.raises(TypeError, match="sets the vector entry point itself"):
        agentgym.register("AgentGymTest/Other-v0", PlainGuessEnv, vector_entry_point="x:y")


def test_registering_an_id_again_with_new_arguments_updates_its_spec_as_gym_does():
    """A second :func:`agentgym.register` of an id with other kwargs (or options) replaces
    the spec, as ``gym.register`` does; ``gym.make`` and the vector entry point then build
    the env with the new arguments. The same registration again leaves the spec as it is."""
    env_id = "AgentGymTest/Reregistered-v0"
    try:
        agentgym.register(env_id, PlainGuessEnv, kwargs={"high": 3})
        first = gym.spec(env_id)
        agentgym.register(env_id, PlainGuessEnv, kwargs={"high": 3})
        assert gym.spec(env_id) is first
        with warnings.catch_warnings():  # Gymnasium says it overrides the spec
            warnings.simplefilter("ignore")
            agentgym.register(env_id, PlainGuessEnv, kwargs={"high": 7}, max_episode_steps=4)
        spec = gym.spec(env_id)
        assert (spec.kwargs, spec.max_episode_steps) == ({"high": 7}, 4)
        assert spec.vector_entry_point.args == (f"{__name__}:{env_id}",)
        env = gym.make(env_id)
        try:
            assert env.unwrapped.high == 7
        finally:
            env.close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agentgym.register(env_id, PlainGuessEnv, kwargs={"high": 7})
        assert gym.spec(env_id).max_episode_steps is None
    finally:
        gym.registry.pop(env_id, None)


@pytest.mark.parametrize("backend", ["sync", "subprocess"])
def test_make_vec_builds_groups_of_a_registered_env(backend):
    venv = gym.make_vec("AgentGymTest/PlainGuess-v0", num_envs=4, group_size=2,
                        backend=backend, high=5)
    try:
        assert isinstance(venv, TextVectorEnv)
        _, infos = venv.reset(seed=3)
        rows = infos_to_list(infos, 4)
        assert rows[0]["task_id"] == rows[1]["task_id"] != rows[2]["task_id"] == rows[3]["task_id"]
        observations, _, _, _, infos = venv.step(["9"] * 4)
        assert not any(row.get("env_error") for row in infos_to_list(infos, 4))
    finally:
        venv.close()


def test_an_id_registered_with_plain_gym_register_gets_gymnasiums_vectorizer():
    gym.register("AgentGymTest/GymRegistered-v0", entry_point=PlainGuessEnv)
    with pytest.raises(TypeError, match="group_size"):
        gym.make_vec("AgentGymTest/GymRegistered-v0", num_envs=2, group_size=2)
    venv = gym.make_vec("AgentGymTest/GymRegistered-v0", num_envs=2)  # Gymnasium's own
    assert not isinstance(venv, TextVectorEnv)
    venv.close()


# ---------------------------------------------------------------------- PlainTextEnv
def test_the_adapter_fills_in_the_contract():
    env = make_text_env(PLAIN, high=6, max_steps=3)
    assert isinstance(env, PlainTextEnv) and env.env.unwrapped.high == 6
    observation, info = env.reset(seed=0)
    assert info["task"] == observation == "Guess my number from 1 to 6. Say one number."
    assert info["task_id"].startswith("seed-") and info["admissible_actions"] == ()
    assert info["anchor"] == observation and info["valid_action"] is True
    assert info["success"] is False
    secret = env.env.unwrapped._secret
    wrong = "1" if secret != 1 else "2"
    observation, reward, terminated, truncated, info = env.step(wrong)
    assert observation in ("Higher.", "Lower.") and info["guesses_left"] == 3
    _, reward, terminated, _, info = env.step(str(secret))
    assert reward == 1.0 and terminated and info["success"] is False  # the env says none
    env.close()


def test_task_ids_are_seeds_and_equal_seeds_give_equal_tasks():
    env = make_text_env(PLAIN, first_seed=100, num_seeds=10)
    assert list(env.unwrapped.task_ids[:2]) == ["seed-100", "seed-101"]
    _, first = env.reset(seed=5)
    secret = env.env.unwrapped._secret
    _, again = env.reset(seed=5)
    assert again["task_id"] == first["task_id"] and env.env.unwrapped._secret == secret
    env.reset(options={"task_id": first["task_id"]})
    assert env.env.unwrapped._secret == secret
    with pytest.raises(ValueError, match="expected 'seed-<seed>'"):
        env.reset(options={"task_id": "seed-5"})  # outside [100, 110)


def test_the_envs_own_truncation_ends_the_episode_and_a_finished_one_repeats():
    env = make_text_env(PLAIN, high=8, tries=2)
    env.reset(seed=1)
    secret = env.env.unwrapped._secret
    miss = "1" if secret != 1 else "2"
    assert env.step(miss)[2:4] == (False, False)
    observation, _, terminated, truncated, info = env.step(miss)
    assert (terminated, truncated) == (False, True)
    assert env.step(str(secret)) == (observation, 0.0, False, True, info)  # not played


def test_bad_actions_never_reach_the_env_and_are_invalid():
    env = make_text_env(PLAIN, max_action_length=10)
    env.reset(seed=0)
    for action in (None, 42, "9" * 11):
        observation, reward, _, _, info = env.step(action)
        assert observation.startswith("Invalid action") and info["valid_action"] is False
        assert reward == 0.0
    assert env.env.unwrapped._left == env.env.unwrapped.tries  # never stepped


class _InfoGuess(PlainGuessEnv):
    """The plain env with some of the contract's keys in its info and a state key."""

    def reset(self, *, seed=None, options=None):
        observation, info = super().reset(seed=seed)
        return observation, {"task": "find it", "admissible_actions": ["1", "2"]}

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, reward, terminated, truncated, {
            **info, "success": reward > 0, "valid_action": str(action).isdigit()}

    def state_key(self):
        return ("secret", self._secret, self._left)


def test_the_envs_own_keys_and_state_key_are_used():
    env = PlainTextEnv(_InfoGuess(), anchor="state")
    _, info = env.reset(seed=0)
    assert info["task"] == "find it" and info["admissible_actions"] == ("1", "2")
    assert info["anchor"] == ("secret", env.env._secret, 4)
    _, _, _, _, info = env.step("no number")
    assert info["valid_action"] is False and info["success"] is False
    _, _, _, _, info = env.step(str(env.env._secret))
    assert info["success"] is True
    plain = PlainTextEnv(PlainGuessEnv(), anchor="state")
    observation, info = plain.reset(seed=0)
    assert info["anchor"] == observation  # no state key: the text


def test_a_non_text_observation_is_one_line():
    env = make_text_env(f"{faulty_envs.MODULE}:AgentGymTest/IntObservation-v0")
    with pytest.raises(TypeError, match="returned an int observation from reset"):
        env.reset(seed=0)


def test_a_textenv_is_built_as_registered():
    env = make_text_env("AgentGym/Scripted-v0", anchor="state", max_steps=2)
    assert not isinstance(env.unwrapped, PlainTextEnv) and env.unwrapped.max_steps == 2
    assert math.isfinite(env.unwrapped.invalid_action_penalty)
    env.close()


def _scripted_env(**kwargs):
    from agentgym.scripted import ScriptedTextEnv

    return ScriptedTextEnv(**kwargs)


def _plain_env(**kwargs):
    return PlainGuessEnv(**kwargs)


def test_a_function_entry_point_is_judged_by_the_env_it_builds():
    from agentgym.check import check_env_contract

    gym.register("AgentGymTest/FunctionScripted-v0", entry_point=_scripted_env)
    gym.register("AgentGymTest/FunctionPlain-v0", entry_point=_plain_env)
    scripted = make_text_env("AgentGymTest/FunctionScripted-v0", anchor="state", max_steps=2)
    assert not isinstance(scripted, PlainTextEnv) and scripted.unwrapped.max_steps == 2
    plain = make_text_env("AgentGymTest/FunctionPlain-v0", high=3, max_steps=2)
    assert isinstance(plain, PlainTextEnv) and plain.env.unwrapped.high == 3
    for env_id in ("AgentGymTest/FunctionScripted-v0", "AgentGymTest/FunctionPlain-v0"):
        results = check_env_contract(env_id, {"first_seed": 5} if "Plain" in env_id else {})
        assert all(r.passed for r in results), [r.line for r in results if not r.passed]
