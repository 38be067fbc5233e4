"""Tests for algorithms.objectives.advantages: hand-computed cases, loop reference, invariances."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.objectives.advantages import (
    discounted_returns,
    gae_advantages,
    gigpo_advantages,
    gigpo_terms,
    grpo_advantages,
    step_groups,
)
from tests.algorithms.reference_advantages import (
    ref_discounted_returns,
    ref_gae_advantages,
    ref_gigpo_advantages,
    ref_grpo_advantages,
    ref_step_groups,
)

EPS = 1e-6
TOL = {"rtol": 1e-9, "atol": 1e-9}


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two label arrays induce the same partition of the rows."""
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


# --------------------------------------------------------------------------- batches


@st.composite
def batches(draw, max_groups: int = 4, max_trajs: int = 4, max_len: int = 8):
    """A random step batch: rows interleaved at random or trajectory-major, time order
    kept per trajectory."""
    n_groups = draw(st.integers(1, max_groups))
    traj_group, traj_len = [], []
    for group in range(n_groups):
        for _ in range(draw(st.integers(1, max_trajs))):
            traj_group.append(group)
            traj_len.append(draw(st.integers(1, max_len)))
    labels = np.repeat(np.arange(len(traj_len)), traj_len)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):  # random interleaving of trajectories
        labels = labels[rng.permutation(labels.size)]
    # else trajectory-major with ascending ids, as the rollout builds batches (no sort)
    n = labels.size
    exact = draw(st.booleans())
    if exact:  # quarters: exact sums, so equal returns and zero-variance groups happen
        rewards = rng.integers(-4, 5, size=n) / 4.0
    else:
        rewards = rng.uniform(-10, 10, size=n)
    rewards[rng.random(n) < 0.5] = 0.0  # sparse rewards, as in agent tasks
    traj_offset = draw(st.integers(0, 1000))
    traj_ids = labels * 7 + traj_offset  # sparse, non-dense ids
    group_ids = np.asarray(traj_group)[labels] * 3 - 5
    anchors = [f"s{v}" for v in rng.integers(0, draw(st.integers(1, 6)), size=n)]
    values = rng.normal(size=n)
    return {
        "rewards": rewards,
        "traj_ids": traj_ids,
        "group_ids": group_ids,
        "anchors": anchors,
        "values": values,
        "seed": seed,
    }


def interleaving_permutation(traj_ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A row permutation that keeps each trajectory's rows in their relative order."""
    shuffled = traj_ids[rng.permutation(traj_ids.size)]
    rows_of = {t: list(np.flatnonzero(traj_ids == t)) for t in np.unique(traj_ids)}
    return np.array([rows_of[t].pop(0) for t in shuffled])


# --------------------------------------------------------------------------- discounted


class TestDiscountedReturns:
    def test_hand_computed(self):
        returns = discounted_returns([1.0, 2.0, 3.0], [0, 0, 0], gamma=0.5)
        np.testing.assert_allclose(returns, [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.0])

    def test_gamma_zero_is_exactly_the_rewards(self):
        rewards = np.array([0.1, -0.3, 7.0, 1e-300, 5.5])
        np.testing.assert_array_equal(
            discounted_returns(rewards, [1, 1, 2, 2, 2], gamma=0.0), rewards
        )

    def test_gamma_one_is_exactly_reward_to_go(self):
        rewards = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
        returns = discounted_returns(rewards, [5, 9, 5, 9, 5, 5], gamma=1.0)
        np.testing.assert_array_equal(returns, [1 + 4 + 16 + 32, 2 + 8, 52.0, 8.0, 48.0, 32.0])

    def test_time_major_equals_trajectory_major(self):
        # trajectory 0 rewards 1, 2, 3; trajectory 1 rewards 10, 20
        traj_major = discounted_returns([1, 2, 3, 10, 20], [0, 0, 0, 1, 1], gamma=0.9)
        time_major = discounted_returns([1, 10, 2, 20, 3], [0, 1, 0, 1, 0], gamma=0.9)
        np.testing.assert_array_equal(time_major, traj_major[[0, 3, 1, 4, 2]])
        np.testing.assert_allclose(traj_major, [1 + 1.8 + 2.43, 2 + 2.7, 3, 10 + 18, 20])

    @pytest.mark.parametrize("gamma", [0.01, 0.3, 0.5, 0.95, 0.999])
    def test_long_trajectories_are_stable(self, gamma):
        length = 300  # gamma**k underflows for small gamma; no division, so no overflow
        rewards = np.zeros(length)
        rewards[-1] = 10.0
        rewards[::7] = 1.0
        returns = discounted_returns(rewards, np.zeros(length, int), gamma=gamma)
        expected = ref_discounted_returns(rewards, np.zeros(length, int), gamma=gamma)
        assert np.all(np.isfinite(returns))
        np.testing.assert_allclose(returns, expected, rtol=1e-12, atol=0)
        assert returns[-1] == 10.0

    def test_powers_of_two_are_exact(self):
        rewards = np.zeros(60)
        rewards[-1] = 1.0
        returns = discounted_returns(rewards, np.zeros(60, int), gamma=0.5)
        np.testing.assert_array_equal(returns, 0.5 ** np.arange(59, -1, -1))

    def test_wide_id_range(self):
        rewards = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
        traj_ids = np.array([10**12, -5, 10**12, -5, 7])
        got = discounted_returns(rewards, traj_ids, gamma=0.5)
        np.testing.assert_array_equal(got, [1 + 1.5, 2 + 2.0, 3.0, 4.0, 5.0])
        adv, _ = gae_advantages(
            rewards, np.zeros(5), traj_ids, gamma=0.5, lam=1.0, last_values={10**12: 2.0}
        )
        np.testing.assert_array_equal(adv, [1 + 1.5 + 0.25 * 2, 2 + 2.0, 3.0 + 1.0, 4.0, 5.0])

    def test_small_integer_dtypes_do_not_overflow(self):
        traj_ids = np.array([-100, 100, -100, 100], dtype=np.int8)
        got = discounted_returns([1.0, 2.0, 3.0, 4.0], traj_ids, gamma=1.0)
        np.testing.assert_array_equal(got, [4.0, 6.0, 3.0, 4.0])
        adv = grpo_advantages([1.0, 2.0, 3.0, 4.0], traj_ids, traj_ids.astype(np.uint8) * 0)
        assert adv[0] < 0 < adv[1]
        # four singleton groups; offsets from -100 overflow int8 unless widened, and the
        # wrapped offset of 30 would collide with the offset of -25
        group_ids = np.array([-100, 100, 30, -25], dtype=np.int8)
        adv = grpo_advantages([1.0, 2.0, 3.0, 4.0], [0, 1, 2, 3], group_ids)
        np.testing.assert_array_equal(adv, [0.0, 0.0, 0.0, 0.0])

    def test_uint64_ids_near_the_top_of_the_range(self):
        top = np.iinfo(np.uint64).max
        traj_ids = np.array([top, top - 1, top], dtype=np.uint64)
        got = discounted_returns([1.0, 2.0, 3.0], traj_ids, gamma=0.5)
        np.testing.assert_array_equal(got, [1 + 1.5, 2.0, 3.0])
        adv, _ = gae_advantages(
            [1.0, 2.0, 3.0], np.zeros(3), traj_ids, gamma=0.5, lam=1.0, last_values={top - 1: 4.0}
        )
        np.testing.assert_array_equal(adv, [2.5, 4.0, 3.0])
        group_ids = np.array([top, top, top], dtype=np.uint64)
        adv = grpo_advantages([1.0, 2.0, 3.0], traj_ids, group_ids, normalize="mean")
        np.testing.assert_array_equal(adv, [1.0, -1.0, 1.0])  # returns 4 and 2, mean 3
        np.testing.assert_array_equal(step_groups(traj_ids, ["a", "a", "b"]), [1, 0, 2])

    def test_string_ids_and_empty(self):
        returns = discounted_returns([1.0, 1.0], np.array(["a", "b"]), gamma=0.5)
        np.testing.assert_array_equal(returns, [1.0, 1.0])
        assert discounted_returns([], [], gamma=0.9).shape == (0,)

    @pytest.mark.parametrize(
        ("rewards", "traj_ids", "gamma", "error"),
        [
            ([1.0, np.nan], [0, 0], 0.9, ValueError),
            ([1.0, np.inf], [0, 0], 0.9, ValueError),
            ([1.0, 2.0], [0], 0.9, ValueError),
            ([[1.0, 2.0]], [[0, 0]], 0.9, ValueError),
            ([1.0], [0], 1.5, ValueError),
            ([1.0], [0], -0.1, ValueError),
            ([1.0], [0.5], 0.9, TypeError),
        ],
    )
    def test_bad_input_raises(self, rewards, traj_ids, gamma, error):
        with pytest.raises(error):
            discounted_returns(rewards, traj_ids, gamma=gamma)

    @settings(max_examples=60, deadline=None)
    @given(batch=batches(max_len=20), gamma=st.sampled_from([0.0, 0.5, 0.95, 1.0]))
    def test_matches_loop_reference(self, batch, gamma):
        got = discounted_returns(batch["rewards"], batch["traj_ids"], gamma=gamma)
        want = ref_discounted_returns(batch["rewards"], batch["traj_ids"], gamma=gamma)
        np.testing.assert_allclose(got, want, **TOL)


# --------------------------------------------------------------------------- GRPO


class TestGRPO:
    def test_hand_computed_std(self):
        # trajectories 0..3 in one group, returns 1, 0, 0, 1 (traj 0 has two rows)
        rewards = [0.5, 0.0, 0.0, 1.0, 0.5]
        traj_ids = [0, 1, 2, 3, 0]
        adv = grpo_advantages(rewards, traj_ids, [7] * 5)
        std = math.sqrt(4 * 0.25 / 3)  # ddof = 1
        up, down = 0.5 / (std + EPS), -0.5 / (std + EPS)
        np.testing.assert_allclose(adv, [up, down, down, up, up], rtol=1e-12)

    def test_hand_computed_mean(self):
        adv = grpo_advantages([3.0, 1.0, 2.0], [0, 1, 2], [0, 0, 0], normalize="mean")
        np.testing.assert_array_equal(adv, [1.0, -1.0, 0.0])

    def test_singleton_group_gets_zero(self):
        adv = grpo_advantages([5.0, 2.0, 1.0, 0.0], [0, 0, 1, 2], [0, 0, 1, 1])
        assert adv[0] == adv[1] == 0.0  # group 0 has one trajectory (of two rows)
        assert adv[2] > 0 > adv[3]

    def test_zero_variance_group_gets_exact_zero(self):
        # returns 0.1 + 0.2 and 0.3 + 0.0 and 0.3 ... differ by one ulp: not constant
        adv = grpo_advantages([0.3, 0.3, 0.3], [0, 1, 2], [0, 0, 0])
        np.testing.assert_array_equal(adv, [0.0, 0.0, 0.0])
        adv = grpo_advantages([0.1] * 6, [0, 1, 2, 3, 4, 5], [0] * 6, normalize="mean")
        np.testing.assert_array_equal(adv, np.zeros(6))

    @pytest.mark.filterwarnings("error")
    def test_eps_zero_keeps_degenerate_groups_at_zero(self):
        adv = grpo_advantages([1.0, 2.0, 2.0, 3.0, 5.0], [0, 1, 2, 3, 4], [0, 1, 1, 2, 2], eps=0.0)
        np.testing.assert_allclose(adv, [0.0, 0.0, 0.0, -1 / math.sqrt(2), 1 / math.sqrt(2)])

    def test_episode_stats_steps_weighs_long_trajectories(self):
        # trajectory 0: one row, return 1; trajectory 1: three rows, return 0
        rewards, traj_ids, group_ids = [1.0, 0.0, 0.0, 0.0], [0, 1, 1, 1], [0] * 4
        by_traj = grpo_advantages(rewards, traj_ids, group_ids)
        by_step = grpo_advantages(rewards, traj_ids, group_ids, episode_stats="steps")
        a = 0.5 / (math.sqrt(0.5) + EPS)
        np.testing.assert_allclose(by_traj, [a, -a, -a, -a], rtol=1e-12)
        std = math.sqrt((0.75**2 + 3 * 0.25**2) / 3)
        np.testing.assert_allclose(
            by_step, [0.75 / (std + EPS)] + [-0.25 / (std + EPS)] * 3, rtol=1e-12
        )

    def test_trajectory_in_two_groups_raises(self):
        with pytest.raises(ValueError, match="one group"):
            grpo_advantages([1.0, 2.0], [0, 0], [0, 1])

    @pytest.mark.parametrize("kwargs", [{"normalize": "z"}, {"episode_stats": "x"}, {"eps": -1}])
    def test_bad_options_raise(self, kwargs):
        with pytest.raises(ValueError):
            grpo_advantages([1.0], [0], [0], **kwargs)

    @settings(max_examples=60, deadline=None)
    @given(
        batch=batches(),
        normalize=st.sampled_from(["std", "mean"]),
        episode_stats=st.sampled_from(["trajectories", "steps"]),
    )
    def test_matches_loop_reference(self, batch, normalize, episode_stats):
        args = (batch["rewards"], batch["traj_ids"], batch["group_ids"])
        kwargs = {"normalize": normalize, "episode_stats": episode_stats}
        got = grpo_advantages(*args, **kwargs)
        np.testing.assert_allclose(got, ref_grpo_advantages(*args, **kwargs), **TOL)


# --------------------------------------------------------------------------- step groups


class TestStepGroups:
    def test_hand_computed(self):
        ids = step_groups([0, 0, 1, 0, 1, 0], ["a", "b", "a", "a", "a", ("x", 1)])
        np.testing.assert_array_equal(ids, [0, 1, 3, 0, 3, 2])  # ordered by group first

    def test_arbitrary_hashables(self):
        anchors = [("room", 1), 3, "3", ("room", 1), frozenset({1}), 3]
        ids = step_groups([0] * 6, anchors)
        np.testing.assert_array_equal(ids, [0, 1, 2, 0, 3, 1])

    def test_object_array_of_tuples(self):
        anchors = np.empty(4, dtype=object)
        anchors[:] = [("a", 1), ("b", 2), ("a", 1), ("b", 3)]
        assert same_partition(step_groups([0, 0, 0, 0], anchors), np.array([0, 1, 0, 2]))

    def test_numpy_anchor_paths_agree_with_objects(self):
        group_ids = np.array([0, 0, 1, 1, 0])
        strings = ["x", "y", "x", "x", "y"]
        expected = step_groups(group_ids, strings)
        assert same_partition(expected, np.array([0, 1, 2, 2, 1]))
        assert same_partition(step_groups(group_ids, np.array(strings)), expected)
        assert same_partition(step_groups(group_ids, np.array([4, 2, 4, 4, 2])), expected)
        rows = np.array([[1, 0], [0, 1], [1, 0], [1, 0], [0, 1]])
        assert same_partition(step_groups(group_ids, rows), expected)

    def test_unhashable_anchor_raises(self):
        with pytest.raises(TypeError, match="hashable"):
            step_groups([0, 0], [[1], [2]])

    def test_length_mismatch_raises(self):
        with pytest.raises(ValueError):
            step_groups([0, 0, 0], ["a", "b"])

    def test_similarity_groups_near_duplicates(self):
        anchors = [
            "You arrive at cabinet 1. On the cabinet 1, you see a mug 2.",
            "Nothing happens.",
            "You arrive at cabinet 1. On the cabinet 1, you see a mug 3.",
            "You arrive at cabinet 1. On the cabinet 1, you see a mug 2.",
        ]
        exact = step_groups([0] * 4, anchors)
        fuzzy = step_groups([0] * 4, anchors, similarity_threshold=0.9)
        assert same_partition(exact, np.array([0, 1, 2, 0]))
        assert same_partition(fuzzy, np.array([0, 1, 0, 0]))
        # never across groups
        across = step_groups([0, 0, 1, 0], anchors, similarity_threshold=0.9)
        assert same_partition(across, np.array([0, 1, 2, 0]))

    def test_similarity_clusters_in_row_order_as_verl_agent(self):
        # A chain at threshold 0.96: "ab" ~ "aa" and "ab" ~ "bb" (ratio 62/64) but
        # "aa" !~ "bb" (60/64). A text is compared with each cluster's representative (its
        # first member) only, as verl-agent's build_step_group does: in row order ab, aa,
        # bb, ab represents one cluster of all three; in row order aa, ab, bb, aa does and
        # bb starts a cluster of its own.
        stem = "x" * 30
        ab, aa, bb = stem + "ab", stem + "aa", stem + "bb"
        ids = step_groups([0, 0, 0], [ab, aa, bb], similarity_threshold=0.96)
        assert same_partition(ids, np.array([0, 0, 0]))
        ids = step_groups([0, 0, 0], [aa, ab, bb], similarity_threshold=0.96)
        assert same_partition(ids, np.array([0, 0, 1]))
        # equal texts share a cluster wherever they stand
        ids = step_groups([0] * 4, [aa, bb, aa, bb], similarity_threshold=0.96)
        assert same_partition(ids, np.array([0, 1, 0, 1]))

    @pytest.mark.parametrize("threshold", [0.0, 1.0, 1.5])
    def test_similarity_threshold_range(self, threshold):
        with pytest.raises(ValueError):
            step_groups([0], ["a"], similarity_threshold=threshold)

    def test_similarity_needs_strings(self):
        with pytest.raises(TypeError, match="str"):
            step_groups([0, 0], ["a", 1], similarity_threshold=0.5)


# --------------------------------------------------------------------------- GiGPO


class TestGiGPO:
    def test_hand_computed(self):
        # one group, two trajectories, time-major rows; gamma = 0.5
        # traj 0: anchors s0, s1; rewards 0, 1   -> R = 1, returns 0.5, 1
        # traj 1: anchors s0, s2, s1; rewards 0, 0, 0 -> R = 0, returns 0, 0, 0
        rewards = [0.0, 0.0, 1.0, 0.0, 0.0]
        traj_ids = [0, 1, 0, 1, 1]
        anchors = ["s0", "s0", "s1", "s2", "s1"]
        adv = gigpo_advantages(rewards, traj_ids, [0] * 5, anchors, gamma=0.5)
        episode = 0.5 / (math.sqrt(0.5) + EPS)  # returns 1 and 0
        step_s0 = 0.25 / (math.sqrt(0.125) + EPS)  # returns 0.5 and 0
        step_s1 = 0.5 / (math.sqrt(0.5) + EPS)  # returns 1 (traj 0) and 0 (traj 1)
        expected = [
            episode + step_s0,
            -episode - step_s0,
            episode + step_s1,
            -episode + 0.0,  # s2 is a singleton step group
            -episode - step_s1,
        ]
        np.testing.assert_allclose(adv, expected, rtol=1e-12)
        terms = gigpo_terms(rewards, traj_ids, [0] * 5, anchors, gamma=0.5)
        np.testing.assert_allclose(terms.returns, [0.5, 0, 1, 0, 0])
        np.testing.assert_array_equal(terms.step_group_ids, [0, 0, 1, 2, 1])
        np.testing.assert_allclose(terms.combined(1.0), adv)
        half = gigpo_advantages(rewards, traj_ids, [0] * 5, anchors, gamma=0.5, step_weight=0.5)
        np.testing.assert_allclose(half, terms.episode + 0.5 * terms.step)

    def test_similarity_threshold_equals_merged_anchors(self):
        rewards, traj_ids, group_ids = [0.0, 0.0, 1.0, 0.0], [0, 1, 0, 1], [0, 0, 0, 0]
        fuzzy = ["You see a mug 1.", "You see a mug 2.", "Nothing.", "Nothing happens."]
        merged = ["mug", "mug", "Nothing.", "Nothing happens."]
        got = gigpo_advantages(rewards, traj_ids, group_ids, fuzzy, similarity_threshold=0.9)
        np.testing.assert_array_equal(got, gigpo_advantages(rewards, traj_ids, group_ids, merged))
        assert not np.array_equal(got, gigpo_advantages(rewards, traj_ids, group_ids, fuzzy))

    @settings(max_examples=40, deadline=None)
    @given(batch=batches(), normalize=st.sampled_from(["std", "mean"]))
    def test_distinct_anchors_equal_grpo(self, batch, normalize):
        n = batch["rewards"].size
        args = (batch["rewards"], batch["traj_ids"], batch["group_ids"])
        gigpo = gigpo_advantages(*args, list(range(n)), normalize=normalize)
        np.testing.assert_array_equal(gigpo, grpo_advantages(*args, normalize=normalize))

    @settings(max_examples=60, deadline=None)
    @given(
        batch=batches(),
        gamma=st.sampled_from([0.0, 0.95, 1.0]),
        normalize=st.sampled_from(["std", "mean"]),
        episode_stats=st.sampled_from(["trajectories", "steps"]),
        step_weight=st.sampled_from([0.0, 1.0, 0.3]),
    )
    def test_matches_loop_reference(self, batch, gamma, normalize, episode_stats, step_weight):
        args = (batch["rewards"], batch["traj_ids"], batch["group_ids"], batch["anchors"])
        kwargs = {
            "gamma": gamma,
            "normalize": normalize,
            "episode_stats": episode_stats,
            "step_weight": step_weight,
        }
        got = gigpo_advantages(*args, **kwargs)
        np.testing.assert_allclose(got, ref_gigpo_advantages(*args, **kwargs), **TOL)

    @settings(max_examples=40, deadline=None)
    @given(batch=batches())
    def test_permutation_equivariance_and_relabeling(self, batch):
        rng = np.random.default_rng(batch["seed"])
        rewards, traj_ids, group_ids = batch["rewards"], batch["traj_ids"], batch["group_ids"]
        anchors = batch["anchors"]
        base = gigpo_advantages(rewards, traj_ids, group_ids, anchors)
        perm = interleaving_permutation(traj_ids, rng)
        permuted = gigpo_advantages(
            rewards[perm], traj_ids[perm], group_ids[perm], [anchors[i] for i in perm]
        )
        np.testing.assert_allclose(permuted, base[perm], **TOL)
        relabeled = gigpo_advantages(
            rewards, 10_000 - traj_ids, group_ids * 11 + 3, [("obs", a) for a in anchors]
        )
        np.testing.assert_allclose(relabeled, base, **TOL)
        ids = step_groups(group_ids, anchors)
        assert same_partition(ids, ref_step_groups(group_ids, anchors))
        assert same_partition(step_groups(group_ids[perm], [anchors[i] for i in perm]), ids[perm])

    def test_trajectory_in_two_groups_raises(self):
        with pytest.raises(ValueError, match="one group.*'b'"):
            gigpo_advantages([1.0, 2.0, 3.0], ["a", "b", "b"], [0, 0, 1], ["x", "y", "z"])


# --------------------------------------------------------------------------- id kinds


@settings(max_examples=40, deadline=None)
@given(batch=batches(max_len=20))
def test_string_and_wide_ids_give_the_same_results(batch):
    """Every id path (compact ints, str ids, ids too wide for a presence table) agrees."""
    rewards, values, anchors = batch["rewards"], batch["values"], batch["anchors"]
    traj_ids, group_ids = batch["traj_ids"], batch["group_ids"]
    last_values = {t: 0.5 * t for t in np.unique(traj_ids)[::2].tolist()}
    relabelings = {
        "str": lambda ids: np.array([f"id-{i}" for i in ids.tolist()]),
        "wide": lambda ids: ids * 10**12 - 7,
    }
    base = (
        discounted_returns(rewards, traj_ids, gamma=0.9),
        grpo_advantages(rewards, traj_ids, group_ids, episode_stats="steps"),
        gigpo_advantages(rewards, traj_ids, group_ids, anchors),
        *gae_advantages(rewards, values, traj_ids, gamma=0.9, lam=0.8, last_values=last_values),
    )
    for relabel in relabelings.values():
        t, g = relabel(traj_ids), relabel(group_ids)
        mapping = {relabel(np.array([k]))[0].item(): v for k, v in last_values.items()}
        got = (
            discounted_returns(rewards, t, gamma=0.9),
            grpo_advantages(rewards, t, g, episode_stats="steps"),
            gigpo_advantages(rewards, t, g, anchors),
            *gae_advantages(rewards, values, t, gamma=0.9, lam=0.8, last_values=mapping),
        )
        for want, have in zip(base, got, strict=True):  # sums may run in another order
            np.testing.assert_allclose(have, want, **TOL)


# --------------------------------------------------------------------------- GAE


class TestGAE:
    def test_hand_computed_terminated(self):
        # gamma 0.5, lam 0.5, one trajectory, values 1, 2; rewards 0, 4
        adv, ret = gae_advantages([0.0, 4.0], [1.0, 2.0], [0, 0], gamma=0.5, lam=0.5)
        delta1 = 4.0 - 2.0  # terminated: V after the last step is 0
        delta0 = 0.0 + 0.5 * 2.0 - 1.0
        np.testing.assert_allclose(adv, [delta0 + 0.25 * delta1, delta1])
        np.testing.assert_allclose(ret, adv + [1.0, 2.0])

    def test_truncation_bootstraps_termination_does_not(self):
        rewards, values = [0.0, 1.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5]
        traj_ids = [3, 8, 3, 8]  # time-major: trajectory 3 rows 0, 2; trajectory 8 rows 1, 3
        kwargs = {"gamma": 0.9, "lam": 1.0}
        terminated, _ = gae_advantages(rewards, values, traj_ids, **kwargs)
        truncated, returns = gae_advantages(
            rewards, values, traj_ids, last_values={8: 2.0}, **kwargs
        )
        # trajectory 3 is terminated in both calls: unchanged
        np.testing.assert_array_equal(truncated[[0, 2]], terminated[[0, 2]])
        # trajectory 8 bootstraps V = 2: its last return is r + gamma * 2
        assert returns[3] == pytest.approx(0.0 + 0.9 * 2.0)
        assert returns[1] == pytest.approx(1.0 + 0.9 * (0.0 + 0.9 * 2.0))
        np.testing.assert_allclose(truncated[[1, 3]] - terminated[[1, 3]], [0.81 * 2, 0.9 * 2])
        # row-aligned array form: only each trajectory's last row is read; NaN = terminated
        per_row = np.array([123.0, -7.0, np.nan, 2.0])
        same, _ = gae_advantages(rewards, values, traj_ids, last_values=per_row, **kwargs)
        np.testing.assert_array_equal(same, truncated)
        # NaN in a mapping = terminated
        nan_map, _ = gae_advantages(
            rewards, values, traj_ids, last_values={3: np.nan, 8: 2.0}, **kwargs
        )
        np.testing.assert_array_equal(nan_map, truncated)

    def test_lambda_one_is_monte_carlo_lambda_zero_is_td(self):
        rewards, values, traj_ids = [1.0, 2.0, 3.0], [0.3, 0.2, 0.1], [0, 0, 0]
        adv, ret = gae_advantages(rewards, values, traj_ids, gamma=0.9, lam=1.0)
        np.testing.assert_allclose(ret, discounted_returns(rewards, traj_ids, gamma=0.9))
        adv0, _ = gae_advantages(rewards, values, traj_ids, gamma=0.9, lam=0.0)
        np.testing.assert_allclose(adv0, [1 + 0.9 * 0.2 - 0.3, 2 + 0.9 * 0.1 - 0.2, 3 - 0.1])

    @pytest.mark.parametrize(
        ("last_values", "match"),
        [({99: 1.0}, "not in traj_ids"), ({0: np.inf}, "finite"), (np.zeros(3), "shape")],
    )
    def test_bad_last_values_raise(self, last_values, match):
        with pytest.raises(ValueError, match=match):
            gae_advantages([0.0, 1.0], [0.0, 0.0], [0, 0], gamma=1, lam=1, last_values=last_values)

    def test_bad_values_raise(self):
        with pytest.raises(ValueError):
            gae_advantages([0.0, 1.0], [0.0, np.nan], [0, 0], gamma=1, lam=1)
        with pytest.raises(ValueError):
            gae_advantages([0.0, 1.0], [0.0], [0, 0], gamma=1, lam=1)
        with pytest.raises(ValueError):
            gae_advantages([0.0], [0.0], [0], gamma=1, lam=2)

    @settings(max_examples=60, deadline=None)
    @given(
        batch=batches(max_len=20),
        gamma=st.sampled_from([0.0, 0.9, 1.0]),
        lam=st.sampled_from([0.0, 0.95, 1.0]),
        form=st.sampled_from(["none", "mapping", "array"]),
    )
    def test_matches_loop_reference(self, batch, gamma, lam, form):
        rng = np.random.default_rng(batch["seed"])
        traj_ids = batch["traj_ids"]
        if form == "none":
            last_values = None
        elif form == "mapping":
            chosen = [t for t in np.unique(traj_ids).tolist() if rng.random() < 0.5]
            last_values = {t: float(rng.normal()) for t in chosen}
        else:
            last_values = np.where(
                rng.random(traj_ids.size) < 0.5, np.nan, rng.normal(size=traj_ids.size)
            )
        args = (batch["rewards"], batch["values"], traj_ids)
        kwargs = {"gamma": gamma, "lam": lam, "last_values": last_values}
        got_adv, got_ret = gae_advantages(*args, **kwargs)
        want_adv, want_ret = ref_gae_advantages(*args, **kwargs)
        np.testing.assert_allclose(got_adv, want_adv, **TOL)
        np.testing.assert_allclose(got_ret, want_ret, **TOL)


# --------------------------------------------------------------------------- purity


@settings(max_examples=25, deadline=None)
@given(batch=batches())
def test_inputs_are_never_mutated_nor_aliased(batch):
    arrays = {k: batch[k] for k in ("rewards", "traj_ids", "group_ids", "values")}
    anchors = batch["anchors"]
    before = {k: v.copy() for k, v in arrays.items()}
    anchors_before = list(anchors)
    last_values = np.full(arrays["rewards"].size, 0.5)
    outputs = [
        discounted_returns(arrays["rewards"], arrays["traj_ids"], gamma=0.0),
        discounted_returns(arrays["rewards"], arrays["traj_ids"], gamma=0.9),
        grpo_advantages(arrays["rewards"], arrays["traj_ids"], arrays["group_ids"]),
        gigpo_advantages(arrays["rewards"], arrays["traj_ids"], arrays["group_ids"], anchors),
        step_groups(arrays["group_ids"], anchors),
        *gae_advantages(
            arrays["rewards"],
            arrays["values"],
            arrays["traj_ids"],
            gamma=0.9,
            lam=0.9,
            last_values=last_values,
        ),
    ]
    for key, value in arrays.items():
        np.testing.assert_array_equal(value, before[key])
    assert anchors == anchors_before
    np.testing.assert_array_equal(last_values, 0.5)
    for output in outputs:
        for value in (*arrays.values(), last_values):
            assert not np.shares_memory(output, value)


def test_advantages_module_does_not_import_torch():
    code = "import sys, algorithms.objectives.advantages; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --------------------------------------------------------------------------- large batches


@pytest.mark.slow
def test_large_time_major_batch_matches_reference():
    rng = np.random.default_rng(123)
    lengths = rng.integers(1, 300, size=96)  # long trajectories: 9 scan rounds
    traj = np.repeat(np.arange(lengths.size), lengths)
    time_of_row = np.arange(traj.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    order = np.lexsort((traj, time_of_row))  # time-major
    traj_ids, group_ids = traj[order] * 3 + 1, traj[order] // 8
    rewards = np.where(rng.random(traj.size) < 0.2, rng.normal(size=traj.size), 0.0)
    anchors = [f"state {s}" for s in rng.integers(0, 30, size=traj.size)]
    values = rng.normal(size=traj.size)
    for gamma in (0.0, 0.5, 0.95, 1.0):
        np.testing.assert_allclose(
            discounted_returns(rewards, traj_ids, gamma=gamma),
            ref_discounted_returns(rewards, traj_ids, gamma=gamma),
            **TOL,
        )
    np.testing.assert_allclose(
        gigpo_advantages(rewards, traj_ids, group_ids, anchors),
        ref_gigpo_advantages(rewards, traj_ids, group_ids, anchors),
        **TOL,
    )
    last_values = {int(t): 1.5 for t in np.unique(traj_ids)[::2]}
    for got, want in zip(
        gae_advantages(rewards, values, traj_ids, gamma=0.99, lam=0.95, last_values=last_values),
        ref_gae_advantages(
            rewards, values, traj_ids, gamma=0.99, lam=0.95, last_values=last_values
        ),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.slow
def test_more_trajectories_than_a_16_bit_key():
    n_traj = 70_000  # beyond the radix-sort fast path
    rng = np.random.default_rng(5)
    traj_ids = np.concatenate([np.arange(n_traj), np.arange(0, n_traj, 2)]) * 1000
    rewards = rng.normal(size=traj_ids.size)
    got = discounted_returns(rewards, traj_ids, gamma=0.5)
    expected = rewards.copy()
    expected[:n_traj:2] += 0.5 * rewards[n_traj:]  # even trajectories have a second step
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # groups of two trajectories: advantages are +-(|d| / 2) / (|d| / sqrt(2) + eps)
    adv = grpo_advantages(rewards, traj_ids, traj_ids // 2000)
    episode = np.bincount(traj_ids // 1000, weights=rewards)
    gap = episode[0::2] - episode[1::2]
    expected_even = (gap / 2) / (np.abs(gap) / np.sqrt(2) + 1e-6)
    np.testing.assert_allclose(adv[:n_traj:2], expected_even, rtol=1e-9)
    np.testing.assert_allclose(adv[1:n_traj:2], -expected_even, rtol=1e-9)


def test_empty_batches():
    empty = np.zeros(0)
    ids = np.zeros(0, dtype=np.int64)
    assert grpo_advantages(empty, ids, ids).shape == (0,)
    assert gigpo_advantages(empty, ids, ids, []).shape == (0,)
    assert step_groups(ids, []).shape == (0,)
    advantages, returns = gae_advantages(empty, empty, ids, gamma=0.9, lam=0.9)
    assert advantages.shape == returns.shape == (0,)
