"""The experts envs declare (``TextEnv.expert_action``): KeyDoor, ALFWorld, WebShop, visual
Sokoban, EZPoints."""

from __future__ import annotations

import pytest

import agentgym  # noqa: F401  (registers the ids)
from agentgym.keydoor import KeyDoorEnv
from agentgym.scripted import ScriptedTextEnv


def play_expert(env, task_id: str, limit: int = 60) -> tuple[list[str], bool]:
    """The expert's actions on ``task_id`` until the episode ends; and its success."""
    _, info = env.reset(options={"task_id": task_id})
    actions: list[str] = []
    for _ in range(limit):
        action = env.expert_action()
        if action is None:
            break
        actions.append(action)
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return actions, bool(info["success"])


@pytest.mark.parametrize("key", [True, False])
def test_keydoor_expert_takes_a_shortest_path_on_every_task(key):
    env = KeyDoorEnv(width=3, height=3, key=key, max_steps=30)
    for task_id in env.task_ids:
        actions, success = play_expert(env, task_id)
        assert success and len(actions) == env.shortest_solution(task_id)
        assert ("take key" in actions) == key
    assert env.expert_action() is None  # won: nothing left to do


def test_keydoor_expert_recovers_after_a_wasted_move():
    env = KeyDoorEnv(width=2, height=2, key=False)
    env.reset(options={"task_id": "keydoor-0000"})
    start, _, door = env.layout("keydoor-0000")
    wrong = next(name for name, room in env.neighbours(start).items()
                 if env.distance(room, door) > env.distance(start, door))
    env.step(f"go {wrong}")
    left = []
    while (action := env.expert_action()) is not None:
        left.append(action)
        env.step(action)
    assert env.success and len(left) == env.distance(start, door) + 2  # back, then on


def test_an_env_without_expert_says_so():
    with pytest.raises(NotImplementedError, match="ScriptedTextEnv declares no expert"):
        ScriptedTextEnv().expert_action()


def test_webshop_expert_is_the_oracle_and_buys_the_target():
    from agentgym.webshop.env import WebShopEnv
    from agentgym.webshop.oracle import run_oracle

    env = WebShopEnv(split="test", nouns="simple", max_steps=30)
    for task_id in list(env.task_ids)[:10]:
        actions, success = play_expert(env, task_id)
        score, oracle_actions = run_oracle(env, task_id)
        assert actions == oracle_actions
        assert success == (score == 1.0)
    assert env.expert_action() is None  # bought: the episode is over


def test_visual_sokoban_expert_is_the_text_envs_bfs():
    from agentgym.sokoban import SokobanEnv
    from agentgym.sokoban.visual import SokobanVisualEnv

    visual, text = SokobanVisualEnv(), SokobanEnv()
    for task_id in list(visual.task_ids)[:30]:
        actions, success = play_expert(visual, task_id)
        assert success and (actions, success) == play_expert(text, task_id)
    assert visual.expert_action() is None  # solved


def test_ezpoints_expert_wins_every_deal_in_four_steps():
    pytest.importorskip("PIL", reason="the gym-cards envs draw with Pillow (the vision extra)")
    from agentgym.gym_cards.env import EZPointsEnv
    from agentgym.gym_cards.rules import action_text

    env = EZPointsEnv(num_tasks=500)
    for task_id in env.task_ids:
        actions, success = play_expert(env, task_id)
        assert success and len(actions) == 4 and actions[-1] == action_text("=")
        assert all(action in env.admissible_actions() for action in actions)
    assert env.expert_action() is None  # the episode is over
    env.reset(options={"task_id": "ezpoints-1"})  # 4 and 3
    env.step(action_text("*"))
    assert env.expert_action() is None  # a formula that starts with "*" never scores
