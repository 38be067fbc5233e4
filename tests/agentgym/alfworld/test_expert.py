"""ALFWorld's declared expert: the game's stored walkthrough, while the episode follows it."""

from __future__ import annotations

import gymnasium as gym

import agentgym  # noqa: F401  (registers the ids)
from tests.agentgym.test_experts import play_expert


def test_alfworld_expert_follows_the_walkthrough_and_leaves_it_when_the_state_changes(
        alfworld_root):
    env = gym.make("AgentGym/ALFWorld-v0", data_path=str(alfworld_root),
                   split="valid_seen").unwrapped
    task_id = env.task_ids[0]
    walkthrough = env.walkthrough(task_id)
    actions, success = play_expert(env, task_id)
    assert success and tuple(actions) == walkthrough
    env.reset(options={"task_id": task_id})
    env.step("look")  # no change of state: the plan goes on
    env.step("jump over the moon")  # invalid: no change either
    assert env.expert_action() == walkthrough[0]
    env.step(walkthrough[0])
    assert env.expert_action() == walkthrough[1]
    detour = next(a for a in env.admissible_actions()
                  if a.startswith("go to") and a != walkthrough[1])
    env.step(detour)  # the agent moved elsewhere: the open-loop plan no longer holds
    assert env.expert_action() is None
    env.close()
