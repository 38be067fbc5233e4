"""Our FrozenLake against RAGEN's FrozenLake env as written, on the same maps and seeds.

Skipped unless ``AGENTGYM_RAGEN_PATH`` points at a RAGEN checkout and ``omegaconf``
(which ``ragen.utils`` imports) is importable. RAGEN's package ``__init__`` files (its
patches, every other env) are not run: the parent packages are stood in for.

RAGEN's env draws its own random map (random start and goal); the test puts our map into
it through Gymnasium's ``FrozenLakeEnv.__init__`` (which RAGEN's ``__init__`` calls) and
seeds it with Gymnasium's ``reset``, then compares the text after every step, the reward,
``done`` and success. The action words are mapped with RAGEN's own ``action_lookup``,
read as its env-state manager reads them (lower-cased, whole word).
"""

from __future__ import annotations

import types
from collections.abc import Iterator

import numpy as np
import pytest
from gymnasium.envs.toy_text.frozen_lake import MAPS, generate_random_map
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymnasiumFrozenLake

from agentgym.frozenlake import FrozenLakeEnv
from tests.differential import live_original
from tools import originals

ENV_VAR = "AGENTGYM_RAGEN_PATH"
WORDS = ("Left", "Down", "Right", "Up", " up ", "LEFT", "Left || Up", "go left", "")


@pytest.fixture(scope="module")
def ragen() -> Iterator[types.SimpleNamespace]:
    yield from live_original(ENV_VAR, originals.ragen_frozenlake,
                             what="RAGEN's FrozenLake env")


def _their_env(ragen, desc: list[str], *, is_slippery: bool, success_rate: float, seed: int):
    config = ragen.config.FrozenLakeEnvConfig(is_slippery=is_slippery, success_rate=success_rate)
    env = ragen.env.FrozenLakeEnv(config)
    GymnasiumFrozenLake.__init__(env, desc=desc, is_slippery=is_slippery,
                                 render_mode=config.render_mode, success_rate=success_rate)
    GymnasiumFrozenLake.reset(env, seed=seed)
    return env


@pytest.mark.parametrize(("maps", "is_slippery", "success_rate"), [
    ("4x4", True, 0.8), ("8x8", True, 1 / 3), ("random", True, 0.8), ("random", False, 1.0),
])
def test_text_rewards_and_ends_equal_ragens(ragen, maps, is_slippery, success_rate):
    words = {v.lower(): k for k, v in ragen.config.FrozenLakeEnvConfig().action_lookup.items()}
    rng = np.random.default_rng(0)
    for seed in range(25):
        if maps == "random":
            ours = FrozenLakeEnv(size=5, is_slippery=is_slippery, success_rate=success_rate,
                                 max_steps=None)
            task_id = f"frozenlake-5x5-{seed}"
            desc = generate_random_map(size=5, p=0.8, seed=seed)
        else:
            ours = FrozenLakeEnv(map_name=maps, is_slippery=is_slippery,
                                 success_rate=success_rate, max_steps=None)
            task_id, desc = f"frozenlake-{maps}", MAPS[maps]
        their = _their_env(ragen, list(desc), is_slippery=is_slippery,
                           success_rate=success_rate, seed=seed)
        observation, _ = ours.reset(seed=seed, options={"task_id": task_id})
        assert observation == their.render()
        for _ in range(30):
            text = str(rng.choice(WORDS))
            action = words.get(text.strip().lower())
            observation, reward, terminated, _, info = ours.step(text)
            assert info["valid_action"] == (action is not None), text
            if action is None:  # RAGEN does not step its env on an invalid action
                assert observation == their.render() and reward == 0.0
                continue
            their_obs, their_reward, done, their_info = their.step(action)
            assert observation == their_obs
            assert (reward, terminated) == (their_reward, done)
            assert info["success"] == their_info["success"]
            assert info["player_moved"] == their_info["action_is_effective"]
            if done:
                break
