"""The KeyDoor house: layouts, optimal play, rewards, anchors in both modes."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the ids)
from agentgym.keydoor import DOOR_LOCKED, NOTHING_HAPPENS, KeyDoorEnv


def _path(env: KeyDoorEnv, start: int, goal: int) -> list[str]:
    """Moves from ``start`` to ``goal`` (east/west first, then north/south)."""
    moves = []
    x, y = start % env.width, start // env.width
    gx, gy = goal % env.width, goal // env.width
    moves += ["go east" if gx > x else "go west"] * abs(gx - x)
    moves += ["go south" if gy > y else "go north"] * abs(gy - y)
    return moves


def _optimal(env: KeyDoorEnv, task_id: str) -> list[str]:
    start, key, door = env.layout(task_id)
    if not env.key:
        return _path(env, start, door) + ["open door"]
    return _path(env, start, key) + ["take key"] + _path(env, key, door) + ["open door"]


@pytest.mark.parametrize("key", [True, False])
def test_the_shortest_solution_wins_in_exactly_its_length(key):
    env = KeyDoorEnv(width=3, height=2, num_tasks=20, key=key, max_steps=20,
                     success_reward=10.0)
    for task_id in env.task_ids:
        start, key_room, door = env.layout(task_id)
        assert len({start, key_room, door}) == 3
        _, info = env.reset(options={"task_id": task_id})
        actions = _optimal(env, task_id)
        assert len(actions) == env.shortest_solution(task_id)
        rewards = []
        for action in actions:
            assert action in info["admissible_actions"]
            _, reward, terminated, truncated, info = env.step(action)
            rewards.append(reward)
        assert terminated and not truncated and info["success"]
        assert rewards == [0.0] * (len(actions) - 1) + [10.0]  # sparse: only the win pays


def test_door_needs_the_key_and_bad_actions_are_flagged():
    env = KeyDoorEnv(width=2, height=2, num_tasks=4)
    task_id = env.task_ids[0]
    start, key, door = env.layout(task_id)
    env.reset(options={"task_id": task_id})
    for action in _path(env, start, door):
        env.step(action)
    observation, reward, terminated, _, info = env.step("open door")
    assert observation == DOOR_LOCKED and reward == 0 and not terminated
    assert info["valid_action"] and not info["has_key"]
    observation, _, _, _, info = env.step("fly away")
    assert observation == NOTHING_HAPPENS and not info["valid_action"]
    observation, _, _, _, info = env.step("  TAKE   key ")  # not here: not admissible
    assert not info["valid_action"]


def test_observation_anchors_alias_states_and_state_anchors_do_not():
    by_mode = {}
    for mode in ("observation", "state"):
        env = KeyDoorEnv(width=2, height=2, num_tasks=4, anchor=mode)
        task_id = env.task_ids[0]
        start, key, door = env.layout(task_id)
        _, info = env.reset(options={"task_id": task_id})
        first = env.step("nonsense")[4]["anchor"]  # "Nothing happens." in the start room
        for action in _path(env, start, key) + ["take key"]:
            env.step(action)
        second = env.step("nonsense")[4]["anchor"]  # the same text, holding the key
        by_mode[mode] = (first, second, info["anchor"])
    first, second, _ = by_mode["observation"]
    assert first == second == NOTHING_HAPPENS
    first, second, at_start = by_mode["state"]
    assert first != second and first == at_start  # same state as at reset, same anchor


def test_the_same_state_by_two_paths_has_one_state_anchor():
    env = KeyDoorEnv(width=2, height=2, num_tasks=8, anchor="state")
    task_id = next(t for t in env.task_ids if env.layout(t)[0] == 0)
    env.reset(options={"task_id": task_id})
    via_east = [env.step(a)[4]["anchor"] for a in ("go east", "go south")][-1]
    env.reset(options={"task_id": task_id})
    via_south = [env.step(a)[4]["anchor"] for a in ("go south", "go east")][-1]
    assert via_east == via_south


def test_bad_sizes_are_clear_errors_and_make_works():
    with pytest.raises(ValueError, match="width \\* height"):
        KeyDoorEnv(width=1, height=2)
    with pytest.raises(ValueError, match="num_tasks"):
        KeyDoorEnv(num_tasks=0)
    with pytest.raises(ValueError, match="unknown task id"):
        KeyDoorEnv().layout("nope")
    env = gym.make("AgentGym/KeyDoor-v0", width=2, height=2, anchor="state")
    observation, info = env.reset(seed=1)
    assert observation.startswith("You are in the") and info["task"].startswith("Take the key")
    env.close()


def test_first_task_numbers_held_out_tasks_with_their_own_layouts():
    whole = KeyDoorEnv(width=4, height=4, num_tasks=12)
    held_out = KeyDoorEnv(width=4, height=4, num_tasks=4, first_task=8)
    assert list(held_out.task_ids) == ["keydoor-0008", "keydoor-0009", "keydoor-0010",
                                       "keydoor-0011"]
    # task i's layout depends on i alone, not on where the env's numbering starts
    assert [held_out.layout(t) for t in held_out.task_ids] == \
        [whole.layout(t) for t in whole.task_ids[8:]]
    assert not set(held_out.task_ids) & set(KeyDoorEnv(width=4, height=4,
                                                       num_tasks=8).task_ids)
    with pytest.raises(ValueError, match="first_task"):
        KeyDoorEnv(first_task=-1)
