"""The env contract (agentgym/core.py) on every registered id, and the scripted test env.

Every ``AgentGym/*`` id must build with no arguments and pass Gymnasium's ``check_env``.
An id whose own module is not in the tree yet is skipped; any other import error fails.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Hashable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence
from gymnasium.vector.utils import batch_space
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym
from agentgym.core import INFO_KEYS, TextEnv, TextSpace
from agentgym.registration import ENTRY_POINTS
from agentgym.scripted import ScriptedTextEnv
from agentgym.visual import VisualEnv

REPO_ROOT = Path(__file__).resolve().parents[2]
HEAVY_MODULES = (
    "torch",
    "ray",
    "faiss",
    "alfworld",
    "textworld",
    "transformers",
    "spacy",
    "sentence_transformers",
)




_ENVS: dict[str, gym.Env] = {}


@pytest.fixture(scope="module", params=agentgym.ENV_IDS)
def registered_env(request) -> gym.Env:
    """One env per registered id, built once per module (some are slow to build)."""
    if request.param not in _ENVS:
        _ENVS[request.param] = gym.make(request.param)
    yield _ENVS[request.param]


def teardown_module() -> None:
    for env in _ENVS.values():
        env.close()
    _ENVS.clear()


# ---------------------------------------------------------------------- registration
def test_ids_are_registered_lazily_with_our_vector_entry_point():
    assert "AgentGym/Scripted-v0" in agentgym.ENV_IDS
    for env_id, entry_point in ENTRY_POINTS.items():
        spec = gym.spec(env_id)
        assert spec.entry_point == entry_point
        # a per-id callable: gym.make_vec does not pass the id to a vector entry point
        assert callable(spec.vector_entry_point)
        assert spec.max_episode_steps is None


def test_constructor_arguments_come_from_the_signature_without_building_the_env():
    from agentgym.registration import constructor_arguments

    assert constructor_arguments("AgentGym/KeyDoor-v0") == (
        "width", "height", "num_tasks", "first_task", "success_reward", "key", "anchor",
        "max_steps", "render_mode")
    for env_id in ENTRY_POINTS:
        assert {"anchor", "max_steps"} <= set(constructor_arguments(env_id))
    gym.register(id="AgentGymTest/AnyKwargs-v0", entry_point=lambda **kwargs: None)
    try:
        assert constructor_arguments("AgentGymTest/AnyKwargs-v0") is None
    finally:
        del gym.registry["AgentGymTest/AnyKwargs-v0"]
    with pytest.raises(gym.error.Error):
        constructor_arguments("AgentGym/Nope-v0")


def test_envs_declare_their_penalty_and_task_source_without_being_built(monkeypatch):
    from agentgym.registration import invalid_action_penalty, task_source

    penalties = {env_id: invalid_action_penalty(env_id) for env_id in ENTRY_POINTS}
    assert penalties.pop("AgentGym/SearchQA-v0") == 0.01  # verl-agent's run_search.sh
    assert set(penalties.values()) == {0.1}
    assert invalid_action_penalty("AgentGym/Nope-v0") == 0.1  # not registered
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    assert task_source("AgentGym/ALFWorld-v0", {}).startswith(
        "ALFWorld games generated from the alfworld package")
    assert task_source("AgentGym/WebShop-v0", {"data": "/d"}) == "WebShop data in /d"
    assert task_source("AgentGym/WebShop-v0", {}) == "the generated WebShop catalog"
    assert task_source("AgentGym/SearchQA-v0", {"data_path": "/q.jsonl"}) == \
        "Search-QA questions from /q.jsonl"
    assert task_source("AgentGym/SearchQA-v0", {}) == "the generated Search-QA knowledge base"
    assert task_source("AgentGym/KeyDoor-v0", {}) == "AgentGym/KeyDoor-v0's own tasks"
    assert task_source("AgentGym/Nope-v0", {}) == "AgentGym/Nope-v0's own tasks"


def test_envs_say_what_keeps_them_from_their_data_without_being_built(monkeypatch, tmp_path):
    """Every registered env answers data_problems with its defaults (nothing missing: the
    generated data is made on first use, not here), and one line per missing path."""
    from agentgym.registration import data_problems

    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert {env_id: data_problems(env_id, {}) for env_id in ENTRY_POINTS} == {
        env_id: [] for env_id in ENTRY_POINTS}
    assert not (tmp_path / ".cache").exists()  # nothing generated
    assert data_problems("AgentGym/Nope-v0", {}) == []
    (alfworld,) = data_problems("AgentGym/ALFWorld-v0", {"data_path": str(tmp_path / "no")})
    assert alfworld.startswith(f"ALFWorld data_path '{tmp_path / 'no'}' does not exist; run "
                               "alfworld-download")
    (tmp_path / "alf" / "json_2.1.1" / "train").mkdir(parents=True)
    (empty,) = data_problems("AgentGym/ALFWorld-v0", {"data_path": str(tmp_path / "alf")})
    assert empty.startswith("no ALFWorld game files (game.tw-pddl) in ")
    (shop,) = data_problems("AgentGym/WebShop-v0", {"data": str(tmp_path)})
    assert shop.startswith(f"no WebShop product file in {tmp_path}")
    (corpus,) = data_problems("AgentGym/SearchQA-v0", {"data_path": str(tmp_path),
                                                       "corpus_path": "/no/corpus.jsonl"})
    assert corpus == "corpus file not found: /no/corpus.jsonl"


def test_an_env_with_tag_actions_declares_them():
    from agentgym.registration import env_creator, tag_actions

    declared = {env_id: env_creator(env_id).tag_actions for env_id in ENTRY_POINTS}
    searchqa = declared.pop("AgentGym/SearchQA-v0")
    assert searchqa is tag_actions("searchqa") and searchqa.name == "searchqa"
    assert set(declared.values()) == {None}
    assert searchqa.stop_strings == ("</search>", "</answer>")
    # Search-R1's rule: cut after the first </search>; the first complete block is read
    text = "<think>x</think><answer>a</answer> <search> q </search> tail </search>"
    assert searchqa.cut(text) == "<think>x</think><answer>a</answer> <search> q </search>"
    assert searchqa.read(text) == ("answer", "a")
    assert searchqa.read("<SEARCH>q</SEARCH>") is None
    with pytest.raises(KeyError, match="no answer format named 'nope'"):
        tag_actions("nope")


def test_import_agentgym_stays_light():
    code = (
        "import sys, agentgym, agentgym.vector; "
        f"print(' '.join(m for m in {HEAVY_MODULES!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"import agentgym pulled in: {result.stdout}"


# ---------------------------------------------------------------------- every env
@pytest.mark.parametrize("env_id", agentgym.ENV_IDS)
def test_check_env(env_id):
    env = gym.make(env_id)
    try:
        check_env(env.unwrapped)
    finally:
        env.close()


def test_contract_info_keys_at_reset_and_step(registered_env):
    env = registered_env.unwrapped
    assert isinstance(env, TextEnv)
    observation, info = env.reset(seed=0)
    _check_observation(env, observation)
    _check_info(info)
    assert info["valid_action"] is True
    action = info["admissible_actions"][0] if info["admissible_actions"] else "look"
    observation, reward, terminated, truncated, info = env.step(action)
    _check_observation(env, observation)
    assert math.isfinite(reward)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    _check_info(info)


def test_equal_seeds_give_equal_tasks(registered_env):
    env = registered_env.unwrapped
    first = env.reset(seed=123)
    second = env.reset(seed=123)
    assert data_equivalence(first[0], second[0])
    assert first[1]["task_id"] == second[1]["task_id"]
    task_id = env.task_ids[-1]
    assert env.reset(options={"task_id": task_id})[1]["task_id"] == task_id


actions = st.one_of(
    st.text(max_size=200),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=31), max_size=20),
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.binary(max_size=10),
    st.lists(st.integers(), max_size=3),
    st.sampled_from(["", " ", "x" * (1 << 20), "é✓中文" * 1000, "\x00"]),
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(actions, min_size=1, max_size=5))
def test_fuzzed_actions_never_raise(registered_env, steps):
    env = registered_env.unwrapped
    env.reset(seed=0)
    for action in steps:
        observation, reward, terminated, truncated, info = env.step(action)
        _check_observation(env, observation)
        assert math.isfinite(reward)
        _check_info(info)
        if not isinstance(action, str) and not (terminated or truncated):
            assert info["valid_action"] is False


def _check_observation(env: TextEnv, observation: object) -> None:
    """A text env observes a ``str``; a visual env a dict of text and an RGB frame."""
    assert env.observation_space.contains(observation)
    if isinstance(env, VisualEnv):
        assert set(observation) == {"text", "image"} and isinstance(observation["text"], str)
        image = observation["image"]
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    else:
        assert isinstance(observation, str)


def _check_info(info: dict) -> None:
    for key in INFO_KEYS:
        assert key in info, key
    assert isinstance(info["task"], str)
    assert isinstance(info["task_id"], str)
    assert isinstance(info["admissible_actions"], tuple)
    assert all(isinstance(a, str) for a in info["admissible_actions"])
    assert isinstance(info["anchor"], Hashable)
    hash(info["anchor"])
    assert isinstance(info["success"], bool)
    assert isinstance(info["valid_action"], bool)


# ---------------------------------------------------------------------- TextSpace
def test_text_space_accepts_any_unicode_string_up_to_its_bound():
    space = TextSpace(max_length=10)
    for text in ("", "two words", "héllo ✓", "\n\t\x00", "中文"):
        assert space.contains(text)
    assert not space.contains("x" * 11)
    assert not space.contains(b"bytes") and not space.contains(None) and not space.contains(3)
    assert TextSpace().contains("x" * (1 << 20))


def test_text_space_samples_belong_and_batch():
    space = TextSpace(seed=0)
    samples = [space.sample() for _ in range(50)]
    assert all(space.contains(s) and len(s) <= 64 for s in samples)
    assert TextSpace(seed=3).sample() == TextSpace(seed=3).sample()
    batched = batch_space(space, 3)
    assert isinstance(batched, gym.spaces.Tuple) and batched.contains(("a b", "é", ""))
    assert TextSpace(5) == TextSpace(5) != TextSpace(6)


# ---------------------------------------------------------------------- TextEnv base
def make_scripted(**kwargs) -> ScriptedTextEnv:
    return ScriptedTextEnv(num_tasks=8, **kwargs)


def test_step_before_reset_raises_reset_needed():
    with pytest.raises(gym.error.ResetNeeded):
        make_scripted().step("look")


def test_a_failed_reset_leaves_no_episode_to_step():
    """A reset that raises must not leave the old episode running under the new task id."""
    from tests.agentgym.faulty_envs import FAULTY_TASK, FaultyTextEnv, InjectedFault

    env = FaultyTextEnv(num_tasks=8)
    env.reset(options={"task_id": "doors-0001"})
    env.step("look")
    with pytest.raises(InjectedFault):
        env.reset(options={"task_id": FAULTY_TASK})
    assert env.task_id is None
    with pytest.raises(gym.error.ResetNeeded):
        env.step("look")
    _, info = env.reset(options={"task_id": "doors-0002"})
    assert info["task_id"] == env.task_id == "doors-0002" and env.elapsed_steps == 0


@pytest.mark.parametrize("kwargs", [{"anchor": "text"}, {"max_steps": 0}, {"render_mode": "human"}])
def test_bad_constructor_arguments(kwargs):
    with pytest.raises(ValueError):
        make_scripted(**kwargs)


def test_non_text_and_too_long_actions_are_invalid_not_errors():
    env = make_scripted()
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step(42)
    assert "expected text, got int" in observation
    assert (reward, terminated, info["valid_action"]) == (0.0, False, False)
    observation, *_, info = env.step("x" * (env.max_action_length + 1))
    assert "longer than the limit" in observation and info["valid_action"] is False
    assert env.elapsed_steps == 2  # both count towards max_steps


def test_max_steps_truncates_and_finished_episode_is_frozen():
    env = make_scripted(max_steps=2)
    env.reset(seed=0)
    assert env.step("look")[3] is False
    last = env.step("look")
    assert last[3] is True and last[2] is False
    again = env.step("open red door")
    assert again == (last[0], 0.0, False, True, last[4])


def test_solution_wins_with_the_success_reward():
    env = make_scripted(success_reward=10.0)
    _, info = env.reset(seed=5)
    rewards = []
    for action in env.solution(info["task_id"]):
        observation, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
    assert rewards == [0.0, 0.0, 10.0]
    assert terminated and not truncated and info["success"] is True
    assert info["admissible_actions"] == ()
    frozen = env.step("look")
    assert frozen == (observation, 0.0, True, False, info)


def test_hint_names_the_right_door():
    env = make_scripted()
    observation, info = env.reset(seed=2)
    assert f"A sign says: {env.solution(info['task_id'])[0]}." in observation
    observation, _ = make_scripted(hint=False).reset(seed=2)
    assert "sign" not in observation


def test_observation_anchor_is_the_text_and_state_anchor_is_the_state():
    """'Nothing happens.' in rooms 1 and 2: one observation anchor, two state anchors."""
    by_mode = {}
    for mode in ("observation", "state"):
        env = make_scripted(anchor=mode, hint=False)
        _, info = env.reset(seed=0)
        solution = env.solution(info["task_id"])
        wrong = next(f"open {d} door" for d in env.doors if f"open {d} door" != solution[0])
        wrong_2 = next(f"open {d} door" for d in env.doors if f"open {d} door" != solution[1])
        anchors = [env.step(wrong)[4]["anchor"]]  # room 1, nothing happens
        anchors.append(env.step(solution[0])[4]["anchor"])  # room 2
        anchors.append(env.step(wrong_2)[4]["anchor"])  # room 2, nothing happens
        anchors.append(env.step("look")[4]["anchor"])  # room 2 again, by another path
        by_mode[mode] = anchors
    observation = by_mode["observation"]
    assert observation[0] == observation[2] == "Nothing happens."
    state = by_mode["state"]
    assert state[0] != state[2]
    assert state[1] == state[2] == state[3]


def test_render_ansi_returns_the_last_observation():
    env = make_scripted(render_mode="ansi")
    observation, _ = env.reset(seed=0)
    assert env.render() == observation
    assert make_scripted().render() is None


def test_scripted_benchmark_knobs():
    env = make_scripted(observation_size=1024, work_ms=5)
    observation, _ = env.reset(seed=0)
    assert len(observation) == 1024 and observation.startswith("You are in room 1")
    start = time.perf_counter()
    observation, *_ = env.step("look")
    assert time.perf_counter() - start >= 0.005
    assert len(observation) == 1024


def test_task_ids_are_stable_and_seeds_spread_over_them():
    env = make_scripted()
    assert list(env.task_ids) == [f"doors-{i:04d}" for i in range(8)]
    seen = {env.reset(seed=s)[1]["task_id"] for s in range(64)}
    assert len(seen) == 8
    assert env.solution("doors-0003") == make_scripted().solution("doors-0003")
    rng_tasks = [make_scripted().task_id_for_seed(np.random.default_rng(1)) for _ in range(3)]
    assert len(set(rng_tasks)) == 1
