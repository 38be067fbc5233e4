"""TextVectorEnv semantics on the in-process backend: API, groups, task ids, frozen-done,
infos, the differential test against Gymnasium's SyncVectorEnv, and gym.make_vec."""

from __future__ import annotations

import functools
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym  # noqa: F401  (registers the AgentGym/* ids)
from agentgym.core import INFO_KEYS, TextSpace
from agentgym.scripted import ScriptedTextEnv
from agentgym.vector import TextVectorEnv, infos_to_list, make_vector_env
from tests.agentgym.faulty_envs import RAISE, FaultyTextEnv, StrictCounterEnv

SCRIPTED = functools.partial(ScriptedTextEnv, num_tasks=8, max_steps=6)
ACTIONS = ("open red door", "open green door", "open blue door", "look", "dance", "")


def scripted_vector(num_envs: int = 4, **kwargs: Any) -> TextVectorEnv:
    return TextVectorEnv([SCRIPTED] * num_envs, **kwargs)


def assert_infos_equal(ours: dict[str, Any], theirs: dict[str, Any], num_envs: int) -> None:
    """Same keys, dtypes, masks and values (our extra ``group_id`` aside)."""
    ours = {k: v for k, v in ours.items() if k not in ("group_id", "_group_id")}
    assert ours.keys() == theirs.keys()
    for key in ours:
        if isinstance(ours[key], np.ndarray):
            assert ours[key].dtype == theirs[key].dtype, key
    assert infos_to_list(ours, num_envs) == infos_to_list(theirs, num_envs)


# ---------------------------------------------------------------------- construction
def test_is_a_gymnasium_vector_env_with_autoreset_disabled():
    with scripted_vector(4, group_size=2) as venv:
        assert isinstance(venv, gym.vector.VectorEnv)
        assert venv.metadata["autoreset_mode"] is AutoresetMode.DISABLED
        assert (venv.num_envs, venv.group_size) == (4, 2)
        assert venv.single_observation_space == TextSpace()
        assert isinstance(venv.observation_space, gym.spaces.Tuple)
        assert len(venv.action_space) == 4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"group_size": 3}, "multiple of group_size"),
        ({"group_size": 0}, "group_size"),
        ({"backend": "threads"}, "backend"),
        ({"backend": "subprocess", "num_workers": 5}, "num_workers"),
        ({"backend": "subprocess", "num_workers": 0}, "num_workers"),
    ],
)
def test_bad_arguments_are_clear_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        scripted_vector(4, **kwargs)


def test_ray_backend_without_ray_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(ImportError, match=r"agentgym-text\[ray\]"):
        scripted_vector(2, backend="ray")


def test_env_that_cannot_be_built_raises():
    def broken():
        raise RuntimeError("no data")

    with pytest.raises(RuntimeError, match="no data"):
        TextVectorEnv([SCRIPTED, broken])


def test_different_spaces_are_rejected():
    short = functools.partial(ScriptedTextEnv, max_steps=6)

    class ShortActions(ScriptedTextEnv):
        def __init__(self):
            super().__init__()
            self.action_space = TextSpace(max_length=10)

    with pytest.raises(RuntimeError, match="action space"):
        TextVectorEnv([short, ShortActions])


# ---------------------------------------------------------------------- reset / groups
def test_reset_returns_tuple_of_str_and_contract_infos():
    with scripted_vector(4) as venv:
        observations, infos = venv.reset(seed=0)
    assert isinstance(observations, tuple) and len(observations) == 4
    assert all(isinstance(o, str) for o in observations)
    for key in (*INFO_KEYS, "group_id"):
        assert infos[f"_{key}"].all(), key
    assert "env_error" not in infos
    assert infos["valid_action"].dtype == np.bool_ and infos["valid_action"].all()


def test_group_seeding_gives_each_group_one_task():
    """Env i is reset with seed s + i // G: hand-check against single envs."""
    with scripted_vector(6, group_size=3) as venv:
        _, infos = venv.reset(seed=11)
    expected = [SCRIPTED().reset(seed=11 + i // 3)[1]["task_id"] for i in range(6)]
    assert list(infos["task_id"]) == expected
    assert infos["group_id"].tolist() == [0, 0, 0, 1, 1, 1]
    assert infos["group_id"].dtype == np.int64


def test_unseeded_reset_still_shares_a_task_per_group():
    with scripted_vector(8, group_size=4) as venv:
        for _ in range(3):
            _, infos = venv.reset()
            task_ids = list(infos["task_id"])
            assert len(set(task_ids[:4])) == 1 and len(set(task_ids[4:])) == 1


def test_unseeded_groups_follow_the_vector_rng():
    """After reset(seed=s), later unseeded resets are reproducible."""
    runs = []
    for _ in range(2):
        with scripted_vector(4, group_size=2) as venv:
            venv.reset(seed=5)
            runs.append([list(venv.reset()[1]["task_id"]) for _ in range(3)])
    assert runs[0] == runs[1]


def test_seed_list_is_used_as_given():
    with scripted_vector(3) as venv:
        _, infos = venv.reset(seed=[4, 4, 9])
    expected = [SCRIPTED().reset(seed=s)[1]["task_id"] for s in (4, 4, 9)]
    assert list(infos["task_id"]) == expected
    with scripted_vector(3) as venv, pytest.raises(ValueError, match="3 seeds"):
        venv.reset(seed=[1, 2])


def test_task_ids_option_sets_tasks_per_env_and_keeps_group_ids():
    task_ids = ["doors-0003", None, "doors-0003", "doors-0007"]
    options = {"task_ids": task_ids}
    with scripted_vector(4, group_size=2) as venv:
        _, infos = venv.reset(seed=2, options=options)
    assert options == {"task_ids": task_ids}  # the caller's dict is not touched
    seeded = SCRIPTED().reset(seed=2)[1]["task_id"]  # env 1: seed 2 + 1 // 2
    assert list(infos["task_id"]) == ["doors-0003", seeded, "doors-0003", "doors-0007"]
    assert infos["group_id"].tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("task_ids", ["doors-0001", ["doors-0001"], 3])
def test_bad_task_ids_are_value_errors(task_ids):
    with scripted_vector(2) as venv, pytest.raises(ValueError, match="task_ids"):
        venv.reset(options={"task_ids": task_ids})


def test_reset_mask_resets_only_masked_envs():
    with scripted_vector(3) as venv:
        first, _ = venv.reset(seed=0)
        venv.step(["look", "open red door", "open red door"])
        observations, infos = venv.reset(
            seed=[None, 40, None], options={"reset_mask": np.array([False, True, False])}
        )
        assert infos["_task_id"].tolist() == [False, True, False]
        assert infos["_group_id"].tolist() == [False, True, False]
        assert observations[1] == SCRIPTED().reset(seed=40)[0]
        with pytest.raises(TypeError, match="reset_mask"):
            venv.reset(options={"reset_mask": [True, True, True]})
        with pytest.raises(ValueError, match="at least one"):
            venv.reset(options={"reset_mask": np.zeros(3, dtype=bool)})


# ---------------------------------------------------------------------- step
def test_step_types_and_a_solved_episode():
    env = SCRIPTED()
    _, info = env.reset(seed=3)
    solution = env.solution(info["task_id"])
    with scripted_vector(2, group_size=2) as venv:
        venv.reset(seed=3)
        for action in solution:
            observations, rewards, terminated, truncated, infos = venv.step([action, "look"])
            assert rewards.dtype == np.float64 and rewards.shape == (2,)
            assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_
            assert isinstance(observations, tuple)
        assert rewards.tolist() == [1.0, 0.0]
        assert terminated.tolist() == [True, False]
        assert infos["success"].tolist() == [True, False]


def test_finished_env_repeats_its_last_transition_and_is_never_stepped():
    """StrictCounterEnv raises if stepped after its end: the vector env must freeze it."""
    fns = [functools.partial(StrictCounterEnv, length=n) for n in (1, 2, 3)]
    with TextVectorEnv(fns) as venv:
        venv.reset(seed=0)
        history = [venv.step(["a", "b", "c"]) for _ in range(5)]
    last_obs = [history[0][0][0], history[1][0][1], history[2][0][2]]
    for t, (observations, rewards, terminated, truncated, infos) in enumerate(history):
        per_env = infos_to_list(infos, 3)
        for i, length in enumerate((1, 2, 3)):
            if t + 1 > length:  # finished: frozen
                assert observations[i] == last_obs[i]
                assert rewards[i] == 0.0
                assert terminated[i] and not truncated[i]
                assert per_env[i] == {"count": length, "group_id": i}
            else:
                assert rewards[i] == 1.0
                assert terminated[i] == (t + 1 == length)
    assert "env_error" not in history[-1][4]


def test_frozen_env_ignores_actions_on_scripted_env():
    env = SCRIPTED()
    _, info = env.reset(seed=1)
    solution = env.solution(info["task_id"])
    with scripted_vector(1) as venv:
        venv.reset(seed=1)
        for action in solution:
            final = venv.step([action])
        for action in ("look", RAISE, "open red door"):
            again = venv.step([action])
            assert again[0] == final[0]
            assert again[1].tolist() == [0.0]
            assert again[2].tolist() == final[2].tolist()
            assert again[3].tolist() == final[3].tolist()
            assert infos_to_list(again[4], 1) == infos_to_list(final[4], 1)


def test_max_steps_truncation_then_frozen():
    with scripted_vector(2) as venv:
        venv.reset(seed=0)
        for _ in range(6):
            _, _, terminated, truncated, _ = venv.step(["look", "look"])
        assert truncated.tolist() == [True, True] and not terminated.any()
        _, rewards, _, truncated, _ = venv.step(["look", "look"])
        assert truncated.all() and not rewards.any()


@pytest.mark.parametrize(
    "actions", ["open red door", b"ab", 7, None, {"a": 1}, ["look"], ["look"] * 3]
)
def test_bad_action_batches_are_value_errors(actions):
    with scripted_vector(2) as venv:
        venv.reset(seed=0)
        with pytest.raises(ValueError, match="actions"):
            venv.step(actions)


def test_action_batches_may_be_tuples_or_arrays():
    with scripted_vector(2) as venv:
        venv.reset(seed=0)
        a = venv.step(("look", "look"))
        b = venv.step(np.array(["look", "look"]))
    assert a[0] == b[0]
    with scripted_vector(2) as venv:
        venv.reset(seed=0)
        with pytest.raises(ValueError, match="1-D"):
            venv.step(np.array([["look"], ["look"]]))


def test_step_before_reset_and_after_close():
    venv = scripted_vector(2)
    with pytest.raises(gym.error.ResetNeeded):
        venv.step(["look", "look"])
    venv.close()
    venv.close()  # idempotent
    with pytest.raises(gym.error.ClosedEnvironmentError):
        venv.reset(seed=0)


action_values = st.one_of(
    st.text(max_size=300),
    st.sampled_from(ACTIONS),
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.binary(max_size=20),
    st.lists(st.text(max_size=5), max_size=3),
    st.sampled_from(["x" * 70_000, "\x00\x1b[2J\u202e", "é" * (1 << 20)]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(st.lists(action_values, min_size=3, max_size=3), min_size=1, max_size=4))
def test_fuzzed_actions_never_raise(batch):
    with scripted_vector(3, group_size=3) as venv:
        venv.reset(seed=0)
        done = np.zeros(3, dtype=bool)
        for actions in batch:
            observations, rewards, terminated, truncated, infos = venv.step(actions)
            assert all(isinstance(o, str) for o in observations)
            assert np.isfinite(rewards).all()
            assert "env_error" not in infos
            for i, action in enumerate(actions):
                if not done[i] and not isinstance(action, str):
                    assert not infos["valid_action"][i]
                if not done[i] and action in ACTIONS[:4]:
                    assert infos["valid_action"][i]
            done |= terminated | truncated


# ---------------------------------------------------------------------- infos
def test_infos_to_list_round_trips_env_infos():
    env = SCRIPTED()
    with scripted_vector(3, group_size=3) as venv:
        _, infos = venv.reset(seed=4)
        per_env = infos_to_list(infos, 3)
    _, expected = env.reset(seed=4)
    for i in range(3):
        assert per_env[i] == {**expected, "group_id": 0}
        assert type(per_env[i]["success"]) is bool
        assert type(per_env[i]["group_id"]) is int


def test_infos_to_list_only_masked_in_keys_and_nested():
    infos = {
        "a": np.array([1, 0, 3]),
        "_a": np.array([True, False, True]),
        "nested": {"b": np.array(["x", None, None], dtype=object), "_b": np.array([1, 0, 0], bool)},
        "_nested": np.array([True, False, False]),
    }
    assert infos_to_list(infos, 3) == [{"a": 1, "nested": {"b": "x"}}, {}, {"a": 3}]
    with pytest.raises(ValueError, match=r"expected \(4,\)"):
        infos_to_list({"a": np.zeros(3), "_a": np.ones(3, bool)}, 4)


def test_env_error_is_set_only_for_the_failing_env():
    fns = [functools.partial(FaultyTextEnv, num_tasks=8, max_steps=6)] * 3
    with TextVectorEnv(fns) as venv:
        venv.reset(seed=0)
        observations, rewards, terminated, truncated, infos = venv.step(["look", RAISE, "look"])
        assert truncated.tolist() == [False, True, False] and not terminated.any()
        assert infos["_env_error"].tolist() == [False, True, False]
        assert "InjectedFault: injected fault in step" in infos["env_error"][1]
        assert infos["_task_id"].all()  # the contract keys stay (from the last good step)
        frozen = venv.step(["look", "look", "look"])
        assert frozen[3].tolist() == [False, True, False]
        assert frozen[4]["env_error"][1] == infos["env_error"][1]
        _, infos = venv.reset(seed=0)
        assert "env_error" not in infos  # the env was rebuilt


# ---------------------------------------------------------------------- differential
def random_actions(rng: np.random.Generator, n: int) -> list[str]:
    return [ACTIONS[int(k)] for k in rng.integers(len(ACTIONS), size=n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_stock_sync_vector_env_with_autoreset_disabled(seed):
    """Driven the stock way (reset_mask for finished envs), both give identical batches."""
    n = 4
    ours = TextVectorEnv([SCRIPTED] * n)
    stock = SyncVectorEnv([SCRIPTED] * n, autoreset_mode=AutoresetMode.DISABLED)
    rng = np.random.default_rng(seed)
    try:
        a, b = ours.reset(seed=seed), stock.reset(seed=seed)
        assert a[0] == b[0]
        assert_infos_equal(a[1], b[1], n)
        resets = 0
        for t in range(40):
            actions = random_actions(rng, n)
            a, b = ours.step(actions), stock.step(actions)
            assert a[0] == b[0]
            for k in (1, 2, 3):
                assert a[k].dtype == b[k].dtype
                np.testing.assert_array_equal(a[k], b[k])
            assert_infos_equal(a[4], b[4], n)
            done = a[2] | a[3]
            if done.any():
                resets += 1
                options = {"reset_mask": done}
                ra = ours.reset(seed=100 + t, options=dict(options))
                rb = stock.reset(seed=100 + t, options=dict(options))
                assert ra[0] == rb[0]
                assert_infos_equal(ra[1], rb[1], n)
        assert resets > 0
    finally:
        ours.close()
        stock.close()


# ---------------------------------------------------------------------- gym.make_vec
def test_make_vector_env_passes_env_kwargs():
    with make_vector_env("AgentGym/Scripted-v0", 4, group_size=2, num_tasks=3) as venv:
        _, infos = venv.reset(seed=0)
        assert set(infos["task_id"]) <= {"doors-0000", "doors-0001", "doors-0002"}
        assert venv.group_size == 2


def test_make_vector_env_needs_an_id_outside_make_vec():
    with pytest.raises(TypeError, match="env_id"):
        make_vector_env(num_envs=2)


def test_make_vec_vector_entry_point():
    venv = gym.make_vec(
        "AgentGym/Scripted-v0",
        num_envs=4,
        vectorization_mode="vector_entry_point",
        group_size=2,
        num_tasks=5,
    )
    try:
        assert isinstance(venv, TextVectorEnv)
        assert venv.spec.id == "AgentGym/Scripted-v0"
        _, infos = venv.reset(seed=1)
        assert infos["group_id"].tolist() == [0, 0, 1, 1]
        assert infos["task_id"][0] == infos["task_id"][1]
    finally:
        venv.close()


def test_make_vec_default_mode_is_ours():
    venv = gym.make_vec("AgentGym/Scripted-v0", num_envs=2)
    try:
        assert isinstance(venv, TextVectorEnv)
    finally:
        venv.close()


@pytest.mark.parametrize(
    ("mode", "vector_kwargs"),
    [("sync", {}), ("async", {"shared_memory": False})],
)
def test_make_vec_stock_modes_give_the_same_observations(mode, vector_kwargs):
    stock = gym.make_vec(
        "AgentGym/Scripted-v0",
        num_envs=2,
        vectorization_mode=mode,
        vector_kwargs={**vector_kwargs, "autoreset_mode": AutoresetMode.DISABLED},
    )
    ours = make_vector_env("AgentGym/Scripted-v0", 2)
    try:
        assert stock.reset(seed=3)[0] == ours.reset(seed=3)[0]
        actions = ("open red door", "héllo wörld ✓")
        assert stock.step(actions)[0] == ours.step(actions)[0]
    finally:
        stock.close()
        ours.close()


def test_make_vec_async_with_shared_memory_is_a_clear_error():
    """Text observations must not go through Gymnasium's shared memory: AsyncVectorEnv
    reads a Text buffer once, at construction (strings are copies, not views), so every
    later observation is that stale snapshot; characters outside the space's charset
    cannot be written at all; and the buffer takes 4 bytes x 1 Mi characters per env."""
    with pytest.raises(TypeError, match="shared_memory"):
        gym.make_vec("AgentGym/Scripted-v0", num_envs=2, vectorization_mode="async")


# ---------------------------------------------------------------------- visual envs
@pytest.mark.parametrize("env_id", ["AgentGym/SokobanVisual-v0", "AgentGym/EZPoints-v0"])
def test_visual_observations_batch_as_stock_sync_vector_env_batches_them(env_id):
    """A Dict observation batches as Gymnasium batches it (a dict of a (n, H, W, 3) image
    array and a tuple of texts), inside ``observation_space``, equal to the stock
    vectorizer's; ``observation_rows`` gives back each env's own observation."""
    from agentgym.vector import observation_rows

    n = 3
    make = functools.partial(gym.make, env_id)
    ours = TextVectorEnv([make] * n)
    stock = SyncVectorEnv([make] * n, autoreset_mode=AutoresetMode.DISABLED)
    single = gym.make(env_id)
    rng = np.random.default_rng(0)
    try:
        batches = [(ours.reset(seed=5)[0], stock.reset(seed=5)[0])]
        actions = single.unwrapped.admissible_actions()
        for _ in range(3):
            chosen = [str(rng.choice(actions)) for _ in range(n)]
            batches.append((ours.step(chosen)[0], stock.step(chosen)[0]))
        for mine, theirs in batches:
            assert set(mine) == {"image", "text"} and ours.observation_space.contains(mine)
            assert mine["image"].shape == (n, *single.observation_space["image"].shape)
            assert mine["text"] == theirs["text"]
            np.testing.assert_array_equal(mine["image"], theirs["image"])
        # the rows are the envs' own observations, each env as played alone
        rows = observation_rows(batches[0][0], n)
        for index, row in enumerate(rows):
            alone, _ = single.reset(seed=5 + index)
            assert row["text"] == alone["text"]
            np.testing.assert_array_equal(row["image"], alone["image"])
        again = ours.step([actions[0]] * n)[0]  # a new array each call
        assert again["image"] is not batches[-1][0]["image"]
    finally:
        ours.close()
        stock.close()
        single.close()


def test_a_failed_visual_reset_observes_empty_text_and_a_black_frame():
    from agentgym.vector import observation_rows

    with make_vector_env("AgentGym/SokobanVisual-v0", 2) as venv:
        observations, infos = venv.reset(options={"task_ids": ["no-such-room", None]})
        assert infos["env_error"][0] and not infos["_env_error"][1]
        rows = observation_rows(observations, 2)
        assert rows[0]["text"] == "" and not rows[0]["image"].any()
        assert rows[0]["image"].shape == rows[1]["image"].shape and rows[1]["image"].any()


def test_observation_rows_refuses_a_batch_of_the_wrong_size():
    from agentgym.vector import observation_rows

    assert observation_rows(("a", "b"), 2) == ["a", "b"]
    with pytest.raises(ValueError, match="3 items for 2 envs"):
        observation_rows(("a", "b", "c"), 2)
    with pytest.raises(ValueError, match="'image' holds 1 items for 2 envs"):
        observation_rows({"image": np.zeros((1, 2, 2, 3), np.uint8), "text": ("a", "b")}, 2)
