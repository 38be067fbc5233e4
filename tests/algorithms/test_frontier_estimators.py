"""HGPO and GraphGPO (:func:`hgpo_advantages`, :func:`graphgpo_advantages`): hand-computed
cases, the loop references of ``reference_advantages.py``, invariances, errors, and the
learner's path to them (``--algo hgpo`` / ``--algo graphgpo``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from algorithms.config import TrainConfig, replace, with_algo
from algorithms.objectives.advantages import (
    graphgpo_advantages,
    graphgpo_terms,
    grpo_advantages,
    hgpo_advantages,
    hgpo_terms,
)
from algorithms.training.estimation import estimate_advantages
from tests.algorithms.hand_batch import hand_batch
from tests.algorithms.reference_advantages import ref_graph_returns, ref_hgpo_advantages

EPS = 1e-6


# --------------------------------------------------------------------------- HGPO

def test_hgpo_is_zero_when_no_history_recurs_and_the_base_item_alone_with_it():
    rewards = np.array([0.0, 10.0, 0.0, 0.0, 3.0])
    traj = np.array([0, 0, 1, 1, 2])
    group = np.zeros(5, dtype=int)
    anchors = ["a0", "a1", "b0", "b1", "c0"]  # no state, so no history, is shared
    for history in (0, 1, 4):
        assert np.all(hgpo_advantages(rewards, traj, group, anchors,
                                      history_length=history) == 0.0)
    with_base = hgpo_advantages(rewards, traj, group, anchors, base_group=True)
    episode = grpo_advantages(rewards, traj, group)
    np.testing.assert_allclose(with_base, episode / (1 + EPS), rtol=0, atol=1e-15)


def test_hgpo_weights_its_history_groups_by_length_hand_computed():
    # one group: S -> A -> win (10) and S -> A -> fail; gamma 0.5: returns 2.5, 5, 10 / 0
    rewards = [0.0, 0.0, 10.0, 0.0, 0.0, 0.0]
    traj, group = [0, 0, 0, 1, 1, 1], [0] * 6
    anchors = ["S", "A", "G", "S", "A", "F"]
    # mean normalization: S {2.5, 0} -> +-1.25; A {5, 0} and (S, A) {5, 0} -> +-2.5;
    # (A, G) / (A, F) and the k = 3 paths are singletons
    for alpha, step1 in ((1.0, (2 * 2.5 + 3 * 2.5) / (5 + EPS)),
                         (0.0, (2.5 + 2.5) / (2 + EPS)),
                         (2.0, (4 * 2.5 + 9 * 2.5) / (13 + EPS))):
        got = hgpo_advantages(rewards, traj, group, anchors, history_length=2, gamma=0.5,
                              normalize="mean", length_weight_alpha=alpha)
        step0 = 2 ** alpha * 1.25 / (2 ** alpha + EPS)
        np.testing.assert_allclose(got, [step0, step1, 0, -step0, -step1, 0], atol=1e-12)
    # the base item (episode returns 10 vs 0: +-5) joins with weight 1
    got = hgpo_advantages(rewards, traj, group, anchors, history_length=2, gamma=0.5,
                          normalize="mean", base_group=True)
    expected = [(5 + 2 * 1.25) / (3 + EPS), (5 + 2 * 2.5 + 3 * 2.5) / (6 + EPS), 5 / (1 + EPS)]
    np.testing.assert_allclose(got, expected + [-v for v in expected], atol=1e-12)
    # history 0: the anchor groups alone (k = 1); std: the population std
    got = hgpo_advantages(rewards, traj, group, anchors, history_length=0, gamma=0.5)
    s = 1.25 / (1.25 + EPS)
    np.testing.assert_allclose(got[:2], [2 * s / (2 + EPS), 2 * (2.5 / (2.5 + EPS)) / (2 + EPS)],
                               atol=1e-12)


def test_hgpo_a_group_of_equal_returns_takes_no_weight():
    # k = 1: A's returns {10, 10, 0} vary; k = 2: (Q, A) {10, 10} are equal -> no item
    rewards = [0.0, 10.0, 0.0, 10.0, 0.0, 0.0]
    traj, group = [0, 0, 1, 1, 2, 2], [0] * 6
    anchors = ["Q", "A", "Q", "A", "P", "A"]
    got = hgpo_advantages(rewards, traj, group, anchors, gamma=1.0, normalize="mean")
    a1 = 10 - 20 / 3
    assert got[1] == pytest.approx(2 * a1 / (2 + EPS), abs=1e-12)  # not 2 a1 / 5
    # 17 equal returns of 9.9 (a float64 sum that torch rounds): exactly 0 here
    rewards = np.full(17, 9.9)
    got = hgpo_terms(rewards, np.arange(17), np.zeros(17, dtype=int), ["S"] * 17)
    assert np.all(got.history == 0.0) and np.all(got.history_groups == 1)


def test_hgpo_equals_the_loop_reference_and_ignores_row_order():
    rng = np.random.default_rng(3)
    for _ in range(20):
        lengths = rng.integers(1, 9, size=8)
        traj = np.repeat(np.arange(8), lengths)
        group = traj // 4
        anchors = [f"s{int(x)}" for x in rng.integers(0, 3, size=traj.size)]
        rewards = np.where(rng.random(traj.size) < 0.2, 10.0, 0.0)
        history = int(rng.integers(0, 4))
        for normalize in ("std", "mean"):
            for base in (False, True):
                settings = dict(history_length=history, gamma=0.9, normalize=normalize,
                                length_weight_alpha=1.5, base_group=base)
                got = hgpo_advantages(rewards, traj, group, anchors, **settings)
                want = ref_hgpo_advantages(rewards, traj, group, anchors, **settings)
                np.testing.assert_allclose(got, want, atol=1e-10)
                # time-major interleaving of the same rows: the same advantages
                order = np.lexsort((traj, np.concatenate([np.arange(n) for n in lengths])))
                shuffled = hgpo_advantages(rewards[order], traj[order], group[order],
                                           [anchors[i] for i in order], **settings)
                np.testing.assert_allclose(shuffled, got[order], atol=1e-12)


def test_hgpo_steps_statistics_and_penalties_reach_the_base_item():
    rewards, traj, group = [0.0, 10.0, 0.0, 0.0], [0, 0, 1, 1], [0] * 4
    penalties = [0.1, 0.0, 0.0, 0.1]
    terms = hgpo_terms(rewards, traj, group, ["a", "b", "c", "d"], base_group=True,
                       episode_stats="steps", penalties=penalties)
    episode = grpo_advantages(rewards, traj, group, episode_stats="steps",
                              penalties=penalties)
    np.testing.assert_allclose(terms.episode, episode)
    np.testing.assert_allclose(terms.advantages, episode / (1 + EPS))
    np.testing.assert_allclose(terms.returns, [0.95 * 10 - 0.1, 10, 0, -0.1])


@pytest.mark.parametrize("kwargs, error, match", [
    ({"history_length": -1}, ValueError, "history_length"),
    ({"history_length": 1.5}, ValueError, "history_length"),
    ({"length_weight_alpha": float("nan")}, ValueError, "length_weight_alpha"),
    ({"normalize": "max"}, ValueError, "normalize"),
    ({"penalties": [0.1, 0.0]}, ValueError, "episode_stats='steps'"),
    ({"eps": 0.0}, ValueError, "eps must be finite and > 0"),
    ({"eps": -1e-6}, ValueError, "eps must be finite and > 0"),
])
def test_hgpo_refuses_bad_settings(kwargs, error, match):
    with pytest.raises(error, match=match):
        hgpo_advantages([0.0, 1.0], [0, 1], [0, 0], ["a", "b"], **kwargs)


def test_hgpo_of_an_empty_batch():
    assert hgpo_advantages([], [], [], []).shape == (0,)


def test_hgpo_refuses_eps_0_where_a_row_without_items_would_divide_0_by_0():
    """A row with no nonzero item has weights 0, and its advantage ``0 / (0 + eps)``;
    eps 0 made it NaN. GiGPO and GraphGPO at eps 0 stay finite (a degenerate group scores
    exactly 0 without dividing), and keep their eps-0 results."""
    rewards, traj, group = [0.0, 1.0, 0.0, 0.0], [7, 7, 8, 8], [0, 0, 0, 0]
    anchors = ["A", "B", "A", "C"]  # B and C are singletons: no nonzero item
    assert np.all(np.isfinite(hgpo_advantages(rewards, traj, group, anchors)))
    with pytest.raises(ValueError, match=r"^eps must be finite and > 0 .*, got 0\.0$"):
        hgpo_advantages(rewards, traj, group, anchors, eps=0.0)
    from algorithms.objectives.advantages import gigpo_advantages

    np.testing.assert_allclose(gigpo_advantages(rewards, traj, group, anchors, eps=0.0),
                               [2 ** -0.5 + 2 ** -0.5, 2 ** -0.5, -(2 ** -0.5) - 2 ** -0.5,
                                -(2 ** -0.5)], rtol=1e-15)
    graph = graphgpo_advantages(rewards, traj, group, anchors, ["B", "G", "C", "D"],
                                np.array([True, True, False, False]), eps=0.0)
    np.testing.assert_allclose(graph, [2 * 2 ** -0.5, 2 ** -0.5, -2 * 2 ** -0.5, -(2 ** -0.5)],
                               rtol=1e-15)


# --------------------------------------------------------------------------- GraphGPO

def _line_and_detour():
    """One group: trajectory 0 walks s0 -> s1 -> s2 -> s3 -> s4 and wins; trajectory 1
    goes s0 -> x1 -> x2 and fails there (its terminal state x3)."""
    traj = np.array([0] * 5 + [1] * 3)
    anchors = ["s0", "s1", "s2", "s3", "s4", "s0", "x1", "x2"]
    nexts = ["s1", "s2", "s3", "s4", "s5", "x1", "x2", "x3"]
    success = np.array([True] * 5 + [False] * 3)
    rewards = np.array([0, 0, 0, 0, 10.0, 0, 0, 0])
    return rewards, traj, np.zeros(8, dtype=int), anchors, nexts, success


def test_graphgpo_returns_on_a_line_are_10_gamma_to_the_distance():
    rewards, traj, group, anchors, nexts, success = _line_and_detour()
    terms = graphgpo_terms(rewards, traj, group, anchors, nexts, success, gamma=0.5)
    # the winner's step t leads to a state 4 - t edges from the goal (its last: the goal)
    np.testing.assert_array_equal(terms.distances[:5], [4, 3, 2, 1, 0])
    np.testing.assert_allclose(terms.returns[:5], 10 * 0.5 ** np.array([4, 3, 2, 1, 0]))
    np.testing.assert_array_equal(terms.anchor_distances[:5], [5, 4, 3, 2, 1])


def test_graphgpo_unreachable_states_get_one_past_the_farthest():
    rewards, traj, group, anchors, nexts, success = _line_and_detour()
    terms = graphgpo_terms(rewards, traj, group, anchors, nexts, success, gamma=0.5)
    # x1, x2, x3 cannot reach the goal: the farthest reachable is s0 (5), so 6
    np.testing.assert_array_equal(terms.distances[5:], [6, 6, 6])
    np.testing.assert_allclose(terms.returns[5:], 10 * 0.5 ** 6)
    # the gained distance: one edge closer scores 10, a step away 10 gamma^2
    gained = graphgpo_terms(rewards, traj, group, anchors, nexts, success, gamma=0.5,
                            normalize_distance=True)
    np.testing.assert_allclose(gained.returns, 10 * 0.5 ** np.array([0, 0, 0, 0, 0, 2, 1, 1]))
    # a group without a success reaches only its goal: every state is 1 away
    failed = graphgpo_terms(rewards * 0, traj, group, anchors, nexts, np.zeros(8, bool),
                            gamma=0.5)
    np.testing.assert_array_equal(failed.distances, np.ones(8))
    assert np.all(failed.step == 0.0) and np.all(failed.episode == 0.0)


def test_graphgpo_combines_the_step_groups_and_the_episode_term():
    rewards, traj, group, anchors, nexts, success = _line_and_detour()
    terms = graphgpo_terms(rewards, traj, group, anchors, nexts, success, gamma=0.5,
                           normalize="mean")
    # s0 is the only shared state: 10 * 0.5^4 against 10 * 0.5^6
    high, low = 10 * 0.5 ** 4, 10 * 0.5 ** 6
    np.testing.assert_allclose(terms.step, [(high - low) / 2, 0, 0, 0, 0, (low - high) / 2,
                                            0, 0])
    np.testing.assert_allclose(terms.episode, [5] * 5 + [-5] * 3)
    got = graphgpo_advantages(rewards, traj, group, anchors, nexts, success, gamma=0.5,
                              normalize="mean", step_weight=2.0, episode_weight=0.5)
    np.testing.assert_allclose(got, 2 * terms.step + 0.5 * terms.episode)
    alone = graphgpo_advantages(rewards, traj, group, anchors, nexts, success, gamma=0.5,
                                normalize="mean", episode_weight=0.0)
    np.testing.assert_allclose(alone, terms.step)


def test_graphgpo_normalizes_its_step_groups_with_the_sample_std_hand_computed():
    """One group of three: 0 walks S -> A -> goal and wins, 1 walks S -> B -> X, 2 walks
    S -> A -> Y; both fail. Distances: A 1, S 2, and B, X, Y cannot reach the goal: 3 (one
    past S). Returns (gamma 0.1) ``10 * 0.1 ** d(next)``: S rows 1, 0.01, 1; A rows 10 and
    0.01; B's row a singleton. Each step group divides by its *sample* std (ddof 1) plus
    1e-6, and so does the episode term (returns 10, 0, 0)."""
    rewards = np.array([0.0, 10.0, 0.0, 0.0, 0.0, 0.0])
    traj, group = np.array([0, 0, 1, 1, 2, 2]), np.zeros(6, dtype=int)
    anchors = ["S", "A", "S", "B", "S", "A"]
    nexts = ["A", "G", "B", "X", "A", "Y"]
    success = np.array([True, True, False, False, False, False])
    terms = graphgpo_terms(rewards, traj, group, anchors, nexts, success, gamma=0.1)
    np.testing.assert_allclose(terms.returns, [1.0, 10.0, 0.01, 0.01, 1.0, 0.01], rtol=1e-12)
    # S: mean 0.67, deviations 0.33, -0.66, 0.33; sample variance 0.6534 / 2
    s_scale = 1 / (np.sqrt(0.6534 / 2) + EPS)
    # A: mean 5.005, deviations +-4.995; sample std 4.995 * sqrt(2)
    a_scale = 1 / (4.995 * np.sqrt(2) + EPS)
    np.testing.assert_allclose(terms.step, [0.33 * s_scale, 4.995 * a_scale, -0.66 * s_scale,
                                            0.0, 0.33 * s_scale, -4.995 * a_scale], rtol=1e-10)
    # episode: mean 10 / 3, deviations 20 / 3, -10 / 3, -10 / 3; sample variance 100 / 3
    e_scale = 1 / (np.sqrt(100 / 3) + EPS)
    np.testing.assert_allclose(terms.episode, np.repeat([20 / 3, -10 / 3, -10 / 3], 2) * e_scale,
                               rtol=1e-10)
    got = graphgpo_advantages(rewards, traj, group, anchors, nexts, success, gamma=0.1)
    np.testing.assert_allclose(got, terms.step + terms.episode, rtol=1e-15)


def test_graphgpo_similarity_merges_graph_nodes_not_step_groups():
    # trajectory 1's "s1 (lit)" is s1 up to one word: merged, it is 3 edges from the goal
    rewards = np.array([0, 0, 10.0, 0, 0])
    traj, group = np.array([0, 0, 0, 1, 1]), np.zeros(5, dtype=int)
    anchors = ["room s0 with a table", "room s1 with a chair", "room s2 with a bed",
               "room s0 with a table", "room s1 with a chair (lit)"]
    nexts = ["room s1 with a chair", "room s2 with a bed", "room s3", "room s1 with a chair (lit)",
             "room s9"]
    success = np.array([True, True, True, False, False])
    exact = graphgpo_terms(rewards, traj, group, anchors, nexts, success, gamma=0.5)
    merged = graphgpo_terms(rewards, traj, group, anchors, nexts, success, gamma=0.5,
                            similarity_threshold=0.8)
    assert exact.distances[3] == 4 and merged.distances[3] == 2  # via the merged s1
    # the step groups stay exact: "(lit)" is a step group of its own either way
    np.testing.assert_array_equal(exact.step_group_ids, merged.step_group_ids)


def test_graphgpo_groups_with_the_same_texts_have_graphs_of_their_own():
    # group 0 wins along A -> B; group 1 walks the same texts B -> A and fails: its
    # states must not reach group 0's goal
    rewards = np.array([0.0, 10.0, 0.0, 0.0])
    traj, group = np.array([0, 0, 1, 1]), np.array([0, 0, 1, 1])
    anchors, nexts = ["A", "B", "B", "A"], ["B", "C", "A", "B"]
    success = np.array([True, True, False, False])
    terms = graphgpo_terms(rewards, traj, group, anchors, nexts, success, gamma=0.5)
    np.testing.assert_array_equal(terms.distances, [1, 0, 1, 1])
    np.testing.assert_array_equal(terms.anchor_distances, [2, 1, 1, 1])


def test_graphgpo_equals_the_loop_reference_and_ignores_row_order():
    rng = np.random.default_rng(5)
    for _ in range(20):
        lengths = rng.integers(1, 7, size=8)
        traj = np.repeat(np.arange(8), lengths)
        group = traj // 4
        states = rng.integers(0, 5, size=traj.size + 8)
        anchors = [f"g{g} s{int(s)}" for g, s in zip(group, states[:traj.size], strict=True)]
        nexts = [anchors[i + 1] if i + 1 < traj.size and traj[i + 1] == traj[i]
                 else f"g{group[i]} s{int(states[traj.size + traj[i]])}"
                 for i in range(traj.size)]
        success = np.repeat(rng.random(8) < 0.5, lengths)
        rewards = np.zeros(traj.size)
        for normalize_distance in (False, True):
            got = graphgpo_terms(rewards, traj, group, anchors, nexts, success, gamma=0.3,
                                 normalize_distance=normalize_distance).returns
            want = ref_graph_returns(traj, group, anchors, nexts, success, gamma=0.3,
                                     normalize_distance=normalize_distance)
            np.testing.assert_allclose(got, want, rtol=1e-13)
            order = np.lexsort((traj, np.concatenate([np.arange(n) for n in lengths])))
            shuffled = graphgpo_terms(rewards[order], traj[order], group[order],
                                      [anchors[i] for i in order], [nexts[i] for i in order],
                                      success[order], gamma=0.3,
                                      normalize_distance=normalize_distance).returns
            np.testing.assert_allclose(shuffled, got[order], rtol=1e-13)


def test_graphgpo_refuses_bad_inputs():
    args = ([0.0, 1.0], [0, 1], [0, 0], ["a", "b"], ["c", "d"])
    with pytest.raises(ValueError, match="success must be"):
        graphgpo_advantages(*args, [1, 0])
    with pytest.raises(ValueError, match="next_anchors"):
        graphgpo_advantages([0.0, 1.0], [0, 1], [0, 0], ["a", "b"], ["c"],
                            np.array([True, False]))
    with pytest.raises(TypeError, match="str anchors"):
        graphgpo_advantages([0.0, 1.0], [0, 1], [0, 0], [1, 2], [3, 4],
                            np.array([True, False]), similarity_threshold=0.9)
    assert graphgpo_advantages([], [], [], [], [], np.zeros(0, bool)).shape == (0,)


# --------------------------------------------------------------------------- learner

def test_the_learner_runs_hgpo_with_the_prompts_history_window():
    batch = hand_batch([(0, [0.0, 0.0, 10.0], ["S", "A", "B"], False),
                        (0, [0.0, 0.0, 0.0], ["S", "A", "C"], False),
                        (0, [0.0, 0.0, 10.0], ["T", "A", "C"], False)])
    for window, setting in ((1, None), (0, None), (3, 1)):
        config = replace(with_algo(TrainConfig(), "hgpo"), prompt={"history_window": window},
                         learner={"hgpo_history_length": setting})
        got = estimate_advantages(batch, config)
        history = window if setting is None else setting
        want = hgpo_terms(batch.env_rewards, batch.traj_ids, batch.group_ids, batch.anchors,
                          history_length=history, episode_stats="steps",
                          penalties=batch.penalties)
        np.testing.assert_array_equal(got.advantages, want.advantages)
        np.testing.assert_array_equal(got.step, want.history)
        np.testing.assert_array_equal(got.episode, want.episode)
        np.testing.assert_array_equal(got.step_group_ids, want.step_group_ids)
    with_history = estimate_advantages(batch, replace(with_algo(TrainConfig(), "hgpo"),
                                                      prompt={"history_window": 1}))
    without = estimate_advantages(batch, replace(with_algo(TrainConfig(), "hgpo"),
                                                 prompt={"history_window": 0}))
    # (S, A) {9.5, 0} joins A's {9.5, 0, 9.5} with a history window of 1
    assert np.abs(with_history.advantages - without.advantages).max() > 0.1


def test_the_learner_runs_hgpo_over_the_whole_transcript_in_the_transcript_layout():
    """In the transcript layout a step's prompt holds its trajectory so far, not the last
    ``prompt.history_window`` pairs (0 in the transcript presets): HGPO's history groups
    then reach back to the trajectory's start (``history_length`` one less than the
    longest trajectory), unless ``learner.hgpo_history_length`` says otherwise."""
    window = hand_batch([(0, [0.0, 0.0, 0.0, 10.0], ["S", "A", "B", "C"], False),
                         (0, [0.0, 0.0, 0.0, 0.0], ["S", "A", "B", "D"], False),
                         (0, [0.0, 0.0, 0.0, 10.0], ["T", "A", "B", "C"], False)])
    batch = dataclasses.replace(window, layout="transcript")
    config = replace(with_algo(TrainConfig(), "hgpo"),
                     prompt={"layout": "transcript", "history_window": 0})
    got = estimate_advantages(batch, config)
    want = hgpo_terms(batch.env_rewards, batch.traj_ids, batch.group_ids, batch.anchors,
                      history_length=3, episode_stats="steps", penalties=batch.penalties)
    np.testing.assert_array_equal(got.advantages, want.advantages)
    np.testing.assert_array_equal(got.step, want.history)
    # the window's 0 would group by the current state alone: C's rows, 10 and 10, tie
    short = hgpo_terms(batch.env_rewards, batch.traj_ids, batch.group_ids, batch.anchors,
                       history_length=0, episode_stats="steps", penalties=batch.penalties)
    assert np.abs(want.advantages - short.advantages).max() > 0.1
    # an explicit history length wins, as in the window layout
    chosen = estimate_advantages(batch, replace(config, learner={"hgpo_history_length": 1}))
    np.testing.assert_array_equal(chosen.advantages, hgpo_terms(
        batch.env_rewards, batch.traj_ids, batch.group_ids, batch.anchors, history_length=1,
        episode_stats="steps", penalties=batch.penalties).advantages)


def test_graphgpo_decays_with_its_own_field_and_not_with_the_discount():
    batch = hand_batch([(0, [0.0, 10.0], ["S", "A"], False), (0, [0.0, 0.0], ["S", "B"], False)])
    batch = dataclasses.replace(batch, next_anchors=("A", "T", "B", "U"),
                                success=np.array([True, True, False, False]))
    config = replace(with_algo(TrainConfig(), "graphgpo"), learner={"graphgpo_decay": 0.3})
    got = estimate_advantages(batch, config)
    terms = graphgpo_terms(batch.env_rewards, batch.traj_ids, batch.group_ids, batch.anchors,
                           batch.next_anchors, batch.success, gamma=0.3,
                           episode_stats="steps", penalties=batch.penalties)
    np.testing.assert_array_equal(got.advantages, terms.combined(1.0, 1.0))
    discounted = estimate_advantages(batch, replace(config, learner={"gamma": 0.5}))
    np.testing.assert_array_equal(discounted.advantages, got.advantages)


def test_the_learner_runs_graphgpo_from_the_recorded_next_states():
    batch = hand_batch([(0, [0.0, 10.0], ["S", "A"], False), (0, [0.0, 0.0], ["S", "B"], False)])
    config = with_algo(TrainConfig(), "graphgpo")
    with pytest.raises(ValueError, match="next_anchors"):
        estimate_advantages(batch, config)
    batch = dataclasses.replace(batch, next_anchors=("A", "T", "B", "U"),
                                success=np.array([True, True, False, False]))
    got = estimate_advantages(batch, config)
    terms = graphgpo_terms(batch.env_rewards, batch.traj_ids, batch.group_ids, batch.anchors,
                           batch.next_anchors, batch.success, gamma=0.1,
                           episode_stats="steps", penalties=batch.penalties)
    np.testing.assert_array_equal(got.advantages, terms.combined(1.0, 1.0))
    np.testing.assert_array_equal(got.step, terms.step)
    np.testing.assert_array_equal(got.episode, terms.episode)
    np.testing.assert_array_equal(got.step_group_ids, terms.step_group_ids)
    # S -> A -> goal: 1 and 10; B and U cannot reach it: one past S's 2 edges
    np.testing.assert_allclose(terms.returns, [1.0, 10.0, 0.01, 0.01], rtol=1e-12)
    weighted = estimate_advantages(batch, replace(config, learner={
        "graphgpo_episode_weight": 0.0, "step_weight": 2.0}))
    np.testing.assert_array_equal(weighted.advantages, 2.0 * terms.step)
