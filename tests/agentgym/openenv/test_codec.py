"""The JSON forms of info and anchors (no OpenEnv needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import agentgym  # noqa: F401
from agentgym.core import INFO_KEYS
from agentgym.openenv.codec import anchor_key, info_to_json, to_json


def test_to_json_hand_cases():
    assert to_json((1, "a", (2.5, None))) == [1, "a", [2.5, None]]
    assert to_json({"k": np.int64(3), 4: np.float32(0.5)}) == {"k": 3, "4": 0.5}
    assert to_json(np.array([[1, 2]])) == [[1, 2]]
    assert to_json(frozenset({"b", "a", "c"})) == ["a", "b", "c"]
    assert type(to_json(np.bool_(True))) is bool


def test_to_json_refuses_objects():
    with pytest.raises(TypeError, match="no JSON form"):
        to_json({"x": object()})


def test_anchor_key_strings_are_themselves_and_structures_are_canonical():
    assert anchor_key("Nothing happens.") == "Nothing happens."
    assert anchor_key(("q", frozenset({"d2", "d1"}))) == '["q",["d1","d2"]]'
    assert anchor_key(("q", frozenset({"d1", "d2"}))) == anchor_key(("q", frozenset({"d2", "d1"})))
    assert anchor_key(("q", frozenset({"d1"}))) != anchor_key(("q", frozenset({"d2"})))
    assert anchor_key(("page", None, 1)) != anchor_key(("page", None, 2))


def test_anchor_key_does_not_depend_on_string_hashing():
    code = ("from agentgym.openenv.codec import anchor_key;"
            "print(anchor_key(('q', frozenset(f'doc{i}' for i in range(50)))))")
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True, cwd=os.getcwd())
        outputs.add(out.stdout)
    assert len(outputs) == 1


def test_info_to_json_keeps_every_key_and_is_json():
    env = gym.make("AgentGym/Scripted-v0", anchor="state")
    _, info = env.reset(seed=0)
    _, _, _, _, info = env.step("open red door")
    out = info_to_json(info)
    assert set(out) == set(info)
    assert out["anchor"] == anchor_key(info["anchor"])
    assert out["admissible_actions"] == list(info["admissible_actions"])
    assert json.loads(json.dumps(out)) == out


def test_info_to_json_requires_the_contract_keys():
    with pytest.raises(KeyError, match="anchor"):
        info_to_json({key: None for key in INFO_KEYS if key != "anchor"})


VISUAL_IDS = ("AgentGym/SokobanVisual-v0", "AgentGym/EZPoints-v0", "AgentGym/NumberLine-v0",
              "AgentGym/Blackjack-v0")


@pytest.mark.parametrize("env_id", VISUAL_IDS)
def test_visual_envs_are_refused_in_one_line_before_they_are_built(env_id):
    from agentgym.openenv.codec import check_text_env, observation_text

    with pytest.raises(ValueError, match=rf"serves text observations only: {env_id} observes "
                                         "a dict of text and an image") as error:
        check_text_env(env_id)
    assert "\n" not in str(error.value)
    observation, _ = gym.make(env_id).reset(seed=0)
    with pytest.raises(ValueError, match="serves text observations only"):
        observation_text(env_id, observation)


def test_text_envs_pass_the_text_check():
    from agentgym.openenv.codec import check_text_env, observation_text

    for env_id in ("AgentGym/Sokoban-v0", "AgentGym/KeyDoor-v0", "AgentGym/Scripted-v0"):
        check_text_env(env_id)
        observation, _ = gym.make(env_id).reset(seed=0)
        assert observation_text(env_id, observation) == observation
    check_text_env("NoSuchEnv-v0")  # unknown ids are gym.make's to report
