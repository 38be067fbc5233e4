"""Our FrozenLake against RAGEN's recorded outputs (``tests/data/originals/frozenlake.json.gz``,
``tools/record_originals.py``): no checkout needed.

Recorded from RAGEN's FrozenLake env as written, given our map and seed (as
``test_frozenlake_ragen.py`` gives them to a live checkout): 7 configurations (Gymnasium's
4x4 and 8x8 maps, random 5x5 maps; slippery at success rates 0.8, 1/3 and 0.5, and not
slippery) x 100 seeds, each played with up to 30 random action words; the text at reset
and after every step, reward, end, success and movement.
"""

from __future__ import annotations

import pytest

from agentgym.frozenlake import FrozenLakeEnv
from tests.differential import recorded

pytestmark = pytest.mark.differential

EPISODES = recorded("frozenlake")["episodes"]
CONFIGS = sorted({(e["maps"], e["slippery"], e["success_rate"]) for e in EPISODES})


@pytest.mark.parametrize(("maps", "is_slippery", "success_rate"), CONFIGS)
def test_text_rewards_and_ends_equal_ragens_recorded_steps(maps, is_slippery, success_rate):
    episodes = [e for e in EPISODES
                if (e["maps"], e["slippery"], e["success_rate"]) == (maps, is_slippery,
                                                                      success_rate)]
    steps = ended = 0
    for episode in episodes:
        seed = episode["seed"]
        if maps == "random":
            ours = FrozenLakeEnv(size=5, is_slippery=is_slippery, success_rate=success_rate,
                                 max_steps=None)
            task_id = f"frozenlake-5x5-{seed}"
        else:
            ours = FrozenLakeEnv(map_name=maps, is_slippery=is_slippery,
                                 success_rate=success_rate, max_steps=None)
            task_id = f"frozenlake-{maps}"
        observation, _ = ours.reset(seed=seed, options={"task_id": task_id})
        assert observation == episode["reset"], seed
        for text, *theirs in episode["steps"]:
            before = observation
            observation, reward, terminated, _, info = ours.step(text)
            where = (seed, text)
            if theirs == [None]:  # RAGEN does not step its env on an invalid action
                assert not info["valid_action"], where
                assert observation == before and reward == 0.0, where
                continue
            their_obs, their_reward, done, success, moved = theirs
            assert info["valid_action"], where
            assert observation == their_obs, where
            assert (reward, terminated) == (their_reward, done), where
            assert info["success"] == success, where
            assert info["player_moved"] == moved, where
            steps += 1
            ended += done
    assert len(episodes) == 100 and steps > 500 and ended > 0
