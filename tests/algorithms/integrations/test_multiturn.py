"""GiGPO on per-trajectory multi-turn rows (pure; no verl or TRL needed)."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.integrations.multiturn import gigpo_token_advantages, turn_spans
from algorithms.objectives.advantages import gigpo_advantages, grpo_advantages


def test_turn_spans_are_the_runs_of_ones():
    assert turn_spans(np.array([0, 1, 1, 0, 0, 1, 0, 1])) == [(1, 3), (5, 6), (7, 8)]
    assert turn_spans(np.array([1, 1, 1])) == [(0, 3)]
    assert turn_spans(np.zeros(4)) == []


def test_hand_computed_case():
    # Two trajectories of one group; both start in state s0. Episode returns 1 and 0:
    # A_E = +-1/sqrt(2) (ddof 1). Step group {s0}: returns 0.95 and 0 -> +-1/sqrt(2).
    mask = np.array([[1, 1, 0, 1, 0], [1, 0, 1, 1, 0]])
    out = gigpo_token_advantages(mask, ["g", "g"], [[0.0, 1.0], [0.0, 0.0]],
                                 [["s0", "s1"], ["s0", "s2"]], gamma=0.95,
                                 episode_stats="trajectories")
    a_e = 0.5 / (np.sqrt(0.5) + 1e-6)  # (x - mean) / (std + 1e-6), ddof 1
    a_s = 0.475 / (np.std([0.95, 0.0], ddof=1) + 1e-6)
    expected = np.array([[a_e + a_s, a_e + a_s, 0, a_e, 0], [-a_e - a_s, 0, -a_e, -a_e, 0]])
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_equals_gigpo_on_flat_steps_and_masks_nothing_else():
    rng = np.random.default_rng(0)
    rows, length = 12, 40
    mask = np.zeros((rows, length), dtype=np.int64)
    rewards, anchors, n_turns = [], [], []
    for row in range(rows):
        turns = int(rng.integers(1, 5))
        position = int(rng.integers(0, 3))
        for _ in range(turns):
            width = int(rng.integers(1, 5))
            mask[row, position:position + width] = 1
            position += width + int(rng.integers(1, 4))
        n_turns.append(turns)
        rewards.append(rng.normal(size=turns).round(1).tolist())
        anchors.append([f"s{int(a)}" for a in rng.integers(0, 3, size=turns)])
    groups = [f"uid{row // 4}" for row in range(rows)]
    out = gigpo_token_advantages(mask, groups, rewards, anchors, episode_stats="trajectories")
    flat = gigpo_advantages(np.concatenate(rewards), np.repeat(np.arange(rows), n_turns),
                            np.repeat(groups, n_turns), sum(anchors, []))
    position = 0
    for row in range(rows):
        for turn, (start, end) in enumerate(turn_spans(mask[row])):
            assert np.all(out[row, start:end] == flat[position + turn])
        position += n_turns[row]
    assert np.all(out[mask == 0] == 0)


def test_one_turn_rows_with_distinct_anchors_are_grpo():
    mask = np.ones((6, 3), dtype=np.int64)
    rewards = [[1.0], [0.0], [2.0], [5.0], [1.0], [1.0]]
    groups = ["a", "a", "a", "b", "b", "b"]
    out = gigpo_token_advantages(mask, groups, rewards, [[f"s{i}"] for i in range(6)])
    grpo = grpo_advantages(np.array([r[0] for r in rewards]), np.arange(6), np.array(groups))
    np.testing.assert_allclose(out, np.repeat(grpo[:, None], 3, axis=1))


def test_truncated_rows_keep_all_turns_in_the_returns():
    # Row 0's second turn was cut from the response: its reward still reaches turn 0.
    full = gigpo_token_advantages(np.array([[1, 0, 1], [1, 0, 1]]), ["g", "g"],
                                  [[0.0, 1.0], [0.0, 0.0]], [["s", "x"], ["s", "y"]])
    cut = gigpo_token_advantages(np.array([[1, 0, 0], [1, 0, 1]]), ["g", "g"],
                                 [[0.0, 1.0], [0.0, 0.0]], [["s", "x"], ["s", "y"]])
    np.testing.assert_array_equal(cut[:, 0], full[:, 0])
    assert cut[0, 2] == 0


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="3 answer spans but only 2"):
        gigpo_token_advantages(np.array([[1, 0, 1, 0, 1]]), ["g"], [[0.0, 1.0]], [["a", "b"]])
    with pytest.raises(ValueError, match="2 rewards but 1 anchors"):
        gigpo_token_advantages(np.array([[1, 0, 1]]), ["g"], [[0.0, 1.0]], [["a"]])
    with pytest.raises(ValueError, match="1 rows but 2 group ids"):
        gigpo_token_advantages(np.array([[1]]), ["g", "h"], [[0.0]], [["a"]])
