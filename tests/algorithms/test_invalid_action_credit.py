"""The mechanism behind C1 (docs/credit-assignment-log.md): step credit singles out an
invalid action taken in a state shared with valid actions, and GRPO does not.

An invalid action leaves the state unchanged, so its row shares its anchor with the valid
actions taken from that state, in its own trajectory and in others of the group; it
carries its penalty in its own step return. One hand-built group, played twice:

- trajectory 0: in state ``s0`` an invalid action (penalty 0.1, the state stays ``s0``),
  then the valid action, which succeeds (reward 10);
- trajectory 1: in ``s0`` the valid action at once (reward 10).

Rows: ``(s0, invalid)``, ``(s0, valid)`` of trajectory 0, ``(s0, valid)`` of trajectory 1;
one step group of three rows (the paper's Eq. 6). Every expected value below is computed
from the estimators' equations with the numbers written out, not by calling them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from algorithms.objectives.advantages import (
    gigpo_terms,
    graphgpo_terms,
    grpo_advantages,
    hgpo_terms,
)

GAMMA = 0.95  # GiGPO's and HGPO's discount (Eq. 5)
PENALTY = 0.1  # the learner's invalid-action penalty
TRAJ_IDS = np.array([0, 0, 1])
GROUP_IDS = np.zeros(3, dtype=int)
ANCHORS = ["s0", "s0", "s0"]
INVALID, VALID_SAME_TRAJ, VALID_OTHER = 0, 1, 2

# T4's loss (the cpu-demo preset's): the penalty is a negative reward in the returns and
# the episode statistics are over trajectories (Eq. 3).
REWARDS_IN_RETURNS = np.array([-PENALTY, 10.0, 10.0])
# verl-agent's placement: env rewards only, the penalty charged to its own row after the
# returns are discounted, episode statistics over the group's rows.
ENV_REWARDS = np.array([0.0, 10.0, 10.0])
ROW_PENALTIES = np.array([PENALTY, 0.0, 0.0])


def _sample_z(values):
    """(x - mean) / std with the sample std (ddof 1), written out."""
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return [(v - mean) / (std + 1e-6) for v in values]


def _population_z(values):
    """HGPO's normalization: the population std (ddof 0)."""
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / (std + 1e-6) for v in values]


def test_grpo_gives_the_invalid_step_its_trajectorys_advantage():
    """Under T4's loss the penalty lowers trajectory 0's return (9.9 against 10), and
    every step of trajectory 0 gets the same episode advantage: the invalid step is not
    singled out from the valid step after it."""
    advantages = grpo_advantages(REWARDS_IN_RETURNS, TRAJ_IDS, GROUP_IDS)
    low, high = _sample_z([10.0 - PENALTY, 10.0])
    assert advantages == pytest.approx([low, low, high], abs=1e-9)
    assert advantages[INVALID] == advantages[VALID_SAME_TRAJ]


def test_gigpos_step_term_puts_the_invalid_step_below_the_valid_alternatives():
    terms = gigpo_terms(REWARDS_IN_RETURNS, TRAJ_IDS, GROUP_IDS, ANCHORS, gamma=GAMMA)
    returns = [-PENALTY + GAMMA * 10.0, 10.0, 10.0]  # Eq. 5
    assert terms.returns == pytest.approx(returns)
    expected = _sample_z(returns)  # Eq. 7 in the one step group
    assert terms.step == pytest.approx(expected, abs=1e-9)
    # below both valid alternatives, by (R_invalid - R_valid) / std
    gap = terms.step[VALID_OTHER] - terms.step[INVALID]
    std = np.std(returns, ddof=1)
    assert gap == pytest.approx((10.0 - (-PENALTY + GAMMA * 10.0)) / (std + 1e-6))
    assert terms.step[INVALID] < 0 < terms.step[VALID_SAME_TRAJ] == terms.step[VALID_OTHER]
    # the combined advantage (Eq. 8) separates the two steps GRPO treats alike
    combined = terms.combined(1.0)
    assert combined[INVALID] < combined[VALID_SAME_TRAJ]
    assert combined[VALID_SAME_TRAJ] - combined[INVALID] == pytest.approx(
        expected[VALID_SAME_TRAJ] - expected[INVALID])


def test_hgpos_history_groups_put_the_invalid_step_below_the_valid_alternatives():
    """HGPO with history length 1 (T4's: the prompt's window): the k = 1 group is the
    step group (population std); the k = 2 group of the valid step after the invalid one
    (history s0, s0) has one member and adds nothing."""
    terms = hgpo_terms(REWARDS_IN_RETURNS, TRAJ_IDS, GROUP_IDS, ANCHORS, history_length=1,
                       gamma=GAMMA)
    returns = [-PENALTY + GAMMA * 10.0, 10.0, 10.0]
    k1 = _population_z(returns)
    weight = (1 + 1) ** 1.0  # w = (k + 1) ** alpha, alpha 1
    expected = [weight * a / (weight + 1e-6) for a in k1]
    assert terms.advantages == pytest.approx(expected, abs=1e-9)
    assert terms.advantages[INVALID] < 0 < terms.advantages[VALID_SAME_TRAJ]
    assert terms.advantages[VALID_SAME_TRAJ] == pytest.approx(terms.advantages[VALID_OTHER])


def test_graphgpos_graph_returns_put_the_invalid_step_below_the_valid_alternatives():
    """GraphGPO (decay 0.1): the invalid step leads back to s0, one edge from the goal
    (return 10 * 0.1 ** 1); the valid steps lead to the goal (10 * 0.1 ** 0)."""
    decay = 0.1
    next_anchors = ["s0", "end-a", "end-b"]
    success = np.array([True, True, True])
    terms = graphgpo_terms(REWARDS_IN_RETURNS, TRAJ_IDS, GROUP_IDS, ANCHORS, next_anchors,
                           success, gamma=decay)
    returns = [10.0 * decay ** 1, 10.0 * decay ** 0, 10.0 * decay ** 0]
    assert terms.returns == pytest.approx(returns)
    assert terms.step == pytest.approx(_sample_z(returns), abs=1e-9)
    assert terms.step[INVALID] < 0 < terms.step[VALID_SAME_TRAJ] == terms.step[VALID_OTHER]
    combined = terms.combined(1.0, 1.0)
    assert combined[INVALID] < combined[VALID_SAME_TRAJ]


@pytest.mark.parametrize("method", ["gigpo", "hgpo", "graphgpo"])
def test_without_the_invalid_action_the_step_term_is_zero(method):
    """The control: the same group with the invalid row's action made valid (no penalty,
    and it moves to the goal as the others do) gives the shared state no spread of
    returns, so the step term is zero everywhere: the gap above is the penalty's."""
    rewards = np.array([10.0, 10.0])
    traj_ids, group_ids, anchors = np.array([0, 1]), np.zeros(2, int), ["s0", "s0"]
    if method == "gigpo":
        step = gigpo_terms(rewards, traj_ids, group_ids, anchors, gamma=GAMMA).step
    elif method == "hgpo":
        step = hgpo_terms(rewards, traj_ids, group_ids, anchors, history_length=1,
                          gamma=GAMMA).advantages
    else:
        step = graphgpo_terms(rewards, traj_ids, group_ids, anchors, ["e0", "e1"],
                              np.array([True, True])).step
    assert np.all(step == 0.0)


def test_under_verl_agents_placement_the_row_penalty_singles_out_the_invalid_step_for_grpo_too():
    """verl-agent's placement (penalty on the row, episode statistics over rows): the
    invalid row's episode score is 10 - 0.1, the valid rows' 10, so GRPO's advantage of
    the invalid row is below its trajectory's valid row as well, and GiGPO's step term
    adds its own gap on top. Under T4's loss (penalty in the returns, statistics over
    trajectories) only the step term separates them (the tests above)."""
    grpo = grpo_advantages(ENV_REWARDS, TRAJ_IDS, GROUP_IDS, episode_stats="steps",
                           penalties=ROW_PENALTIES)
    scores = [10.0 - PENALTY, 10.0, 10.0]  # R(tau) - penalty per row
    assert grpo == pytest.approx(_sample_z(scores), abs=1e-9)
    assert grpo[INVALID] < grpo[VALID_SAME_TRAJ] == grpo[VALID_OTHER]
    terms = gigpo_terms(ENV_REWARDS, TRAJ_IDS, GROUP_IDS, ANCHORS, gamma=GAMMA,
                        episode_stats="steps", penalties=ROW_PENALTIES)
    returns = [GAMMA * 10.0 - PENALTY, 10.0, 10.0]  # discounted first, then charged
    assert terms.step == pytest.approx(_sample_z(returns), abs=1e-9)
    combined = terms.combined(1.0)
    assert (combined[VALID_SAME_TRAJ] - combined[INVALID]
            > grpo[VALID_SAME_TRAJ] - grpo[INVALID] > 0)
