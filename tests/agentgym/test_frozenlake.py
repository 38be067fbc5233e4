"""FrozenLake: Gymnasium's dynamics, RAGEN's text and action words, tasks, anchors."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.envs.toy_text.frozen_lake import generate_random_map
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers the ids)
from agentgym.frozenlake import FrozenLakeEnv, render_lake

START_4X4 = "P___\n_O_O\n___O\nO__G"


def test_rendering_and_a_winning_walk_on_the_4x4_map():
    env = FrozenLakeEnv(is_slippery=False)
    observation, info = env.reset(seed=0)
    assert observation == START_4X4 and info["task_id"] == "frozenlake-4x4"
    walk = ["Down", "Down", "Right", "Right", "Down", "Right"]
    rewards = []
    for action in walk:
        observation, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
    assert observation == "____\n_O_O\n___O\nO__√"  # player on the goal; the start is "_"
    assert rewards == [0.0] * 5 + [1.0]
    assert terminated and not truncated and info["success"] and info["cell"] == (3, 3)


def test_a_hole_ends_the_episode_without_reward():
    env = FrozenLakeEnv(is_slippery=False)
    env.reset(seed=0)
    env.step("Right")
    observation, reward, terminated, _, info = env.step("Down")
    assert observation == "____\n_X_O\n___O\nO__G"  # X: the player in the hole
    assert reward == 0.0 and terminated and not info["success"] and info["tile"] == "H"


def test_action_words_as_ragen_reads_one_action():
    env = FrozenLakeEnv(is_slippery=False)
    env.reset(seed=0)
    for text, cell in [("Right", (0, 1)), (" right ", (0, 2)), ("LEFT", (0, 1)), ("up", (0, 1))]:
        _, reward, _, _, info = env.step(text)
        assert info["valid_action"] and info["cell"] == cell, text
    for text in ("Left || Up", "go left", "l", "", "Right."):
        observation, reward, terminated, _, info = env.step(text)
        assert not info["valid_action"] and reward == 0.0 and not terminated
        assert observation == "_P__\n_O_O\n___O\nO__G" and info["cell"] == (0, 1)
    env = FrozenLakeEnv(is_slippery=False, invalid_action_feedback=True)
    env.reset(seed=0)
    observation = env.step("jump")[0]
    assert observation == "Invalid action: 'jump' is not one of Left, Down, Right, Up.\n" + START_4X4


@pytest.mark.parametrize("success_rate", [1 / 3, 0.8])
def test_slips_are_gymnasiums_own_for_the_same_seed(success_rate):
    theirs = gym.make("FrozenLake-v1", map_name="8x8", success_rate=success_rate).unwrapped
    ours = FrozenLakeEnv(map_name="8x8", success_rate=success_rate, max_steps=None)
    words = ["Left", "Down", "Right", "Up"]
    for seed in range(20):
        state, _ = theirs.reset(seed=seed)
        ours.reset(seed=seed, options={"task_id": "frozenlake-8x8"})
        for step in range(40):
            action = (seed * 7 + step * 3) % 4
            state, reward, terminated, _, _ = theirs.step(action)
            _, our_reward, our_terminated, _, info = ours.step(words[action])
            assert info["cell"] == (state // 8, state % 8)
            assert (our_reward, our_terminated) == (reward, terminated)
            if terminated:
                break


def test_equal_seeds_give_equal_episodes():
    def episode(seed: int) -> list[str]:
        env = FrozenLakeEnv()
        env.reset(seed=seed)
        return [env.step(word)[0] for word in ["Right", "Down", "Down", "Right", "Down"] * 3]

    assert episode(3) == episode(3)
    assert len({tuple(episode(seed)) for seed in range(10)}) > 1  # the ice is slippery


def test_random_maps_are_gymnasiums_one_per_seed():
    env = FrozenLakeEnv(size=6, p=0.7, num_tasks=50, first_seed=10)
    assert env.task_ids[0] == "frozenlake-6x6-10" and len(env.task_ids) == 50
    for seed in (10, 33, 59):
        desc = generate_random_map(size=6, p=0.7, seed=seed)
        observation, info = env.reset(options={"task_id": f"frozenlake-6x6-{seed}"})
        assert env.desc_for(info["task_id"]) == tuple(desc)
        assert observation == render_lake(desc, (0, 0))
    first = env.reset(seed=1)
    assert env.reset(seed=1) == first
    with pytest.raises(ValueError, match="unknown task id"):
        env.reset(options={"task_id": "frozenlake-6x6-60"})


def test_a_map_of_your_own_and_bad_arguments():
    env = FrozenLakeEnv(desc=["SFH", "FFG"], is_slippery=False)
    observation, info = env.reset(seed=0)
    assert observation == "P_O\n__G" and info["task_id"] == "frozenlake-custom"
    assert env.step("Down")[0] == "__O\nP_G"
    for kwargs, message in [({"map_name": "5x5"}, "map_name"), ({"desc": ["SF", "FF"]}, "desc"),
                            ({"desc": ["SG"], "size": 4}, "not both"), ({"size": 1}, "size"),
                            ({"size": 4, "p": 0.0}, "p must"), ({"success_rate": 2.0}, "success")]:
        with pytest.raises(ValueError, match=message):
            FrozenLakeEnv(**kwargs)


def test_anchors_and_truncation():
    env = FrozenLakeEnv(is_slippery=False, anchor="state", max_steps=3)
    _, info = env.reset(seed=0)
    assert info["anchor"] == (0, 0)
    assert env.step("Right")[4]["anchor"] == (0, 1)
    assert env.step("nonsense")[4]["anchor"] == (0, 1)
    _, _, terminated, truncated, _ = env.step("Left")
    assert truncated and not terminated
    env = FrozenLakeEnv(is_slippery=False)
    observation, info = env.reset(seed=0)
    assert info["anchor"] == observation


@pytest.mark.parametrize("kwargs", [{"anchor": "state"}, {"size": 5}, {"map_name": "8x8"}])
def test_check_env(kwargs):
    env = gym.make("AgentGym/FrozenLake-v0", **kwargs)
    check_env(env.unwrapped)
    env.close()
