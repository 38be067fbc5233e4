"""The field's other estimators (RLOO, REINFORCE++ with the group baseline, Dr.GRPO, GSPO)
and DAPO's overlong punishment: hand-computed cases, loop references, invariances, and the
learner's dispatch from ``--algo``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from algorithms.config import (
    ALGO_SETTINGS,
    ConfigError,
    TrainConfig,
    replace,
    with_algo,
)
from algorithms.objectives.advantages import (
    grpo_advantages,
    overlong_penalties,
    reinforce_pp_advantages,
    rloo_advantages,
)
from tests.algorithms.hand_batch import hand_batch

TOL = {"rtol": 1e-12, "atol": 1e-12}


def random_rows(seed: int, groups: int = 4, size: int = 3, max_len: int = 4):
    """Random rows: ``groups`` groups of ``size`` trajectories of 1..max_len steps, the
    trajectories interleaved time-major; integer-valued rewards (ties happen)."""
    rng = np.random.default_rng(seed)
    rows = []
    for traj in range(groups * size):
        for step in range(int(rng.integers(1, max_len + 1))):
            rows.append((step, traj, traj // size, float(rng.integers(-2, 3))))
    rows.sort()  # time-major: every trajectory's first step, then the second steps, ...
    _, traj_ids, group_ids, rewards = map(np.array, zip(*rows, strict=True))
    penalties = np.where(rng.random(len(rows)) < 0.3, 0.1, 0.0)
    return rewards.astype(float), traj_ids, group_ids, penalties


def loop_members(rewards, traj_ids, group_ids, episode_stats, penalties=None):
    """{group: [(rows, score), ...]}: the members of each group, by a loop."""
    penalties = np.zeros(len(rewards)) if penalties is None else penalties
    returns = {t: rewards[traj_ids == t].sum() for t in np.unique(traj_ids)}
    members: dict = {}
    if episode_stats == "trajectories":
        for t in np.unique(traj_ids):
            rows = np.flatnonzero(traj_ids == t)
            members.setdefault(group_ids[rows[0]], []).append((rows, returns[t]))
    else:
        for i in range(len(rewards)):
            members.setdefault(group_ids[i], []).append(([i], returns[traj_ids[i]] - penalties[i]))
    return members


# --------------------------------------------------------------------------- RLOO

class TestRLOO:
    def test_hand_computed_over_trajectories(self):
        # group 0: returns 1, 0, 2 (baselines: mean of the others 1, 1.5, 0.5);
        # group 1: one trajectory (return 5) -> 0
        rewards = [0, 1, 0, 0, 0, 2, 5]
        traj_ids = [0, 0, 1, 1, 1, 2, 3]
        group_ids = [0, 0, 0, 0, 0, 0, 1]
        got = rloo_advantages(rewards, traj_ids, group_ids)
        np.testing.assert_allclose(got, [0, 0, -1.5, -1.5, -1.5, 1.5, 0], **TOL)

    def test_hand_computed_over_steps_with_a_row_penalty(self):
        # verl-agent: each row is a member with score R(tau) - its own penalty
        # rows' scores 1 - 0.1, 1, 0, 0, 0, 2 (n = 6, mean 3.9 / 6 = 0.65)
        rewards = [0, 1, 0, 0, 0, 2]
        got = rloo_advantages(rewards, [0, 0, 1, 1, 1, 2], [0] * 6, episode_stats="steps",
                              penalties=[0.1, 0, 0, 0, 0, 0])
        scores = np.array([0.9, 1, 0, 0, 0, 2])
        np.testing.assert_allclose(got, (scores - 0.65) * 6 / 5, **TOL)

    @pytest.mark.parametrize("episode_stats", ["trajectories", "steps"])
    @pytest.mark.parametrize("seed", range(6))
    def test_is_score_minus_the_mean_of_the_others(self, episode_stats, seed):
        rewards, traj_ids, group_ids, penalties = random_rows(seed)
        penalties = penalties if episode_stats == "steps" else None
        got = rloo_advantages(rewards, traj_ids, group_ids, episode_stats=episode_stats,
                              penalties=penalties)
        expected = np.zeros(len(rewards))
        for members in loop_members(rewards, traj_ids, group_ids, episode_stats,
                                    penalties).values():
            for k, (rows, score) in enumerate(members):
                others = [s for j, (_, s) in enumerate(members) if j != k]
                expected[rows] = score - np.mean(others) if others else 0.0
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)

    @pytest.mark.parametrize("seed", range(3))
    def test_is_n_over_n_minus_1_times_grpo_without_std(self, seed):
        rewards, traj_ids, group_ids, _ = random_rows(seed, size=4)
        grpo = grpo_advantages(rewards, traj_ids, group_ids, normalize="mean")
        np.testing.assert_allclose(rloo_advantages(rewards, traj_ids, group_ids),
                                   grpo * 4 / 3, **TOL)

    def test_equal_scores_and_empty_batch(self):
        assert np.array_equal(rloo_advantages([1.0, 1.0], [0, 1], [0, 0]), [0.0, 0.0])
        assert rloo_advantages([], [], []).shape == (0,)

    def test_penalties_need_step_statistics(self):
        with pytest.raises(ValueError, match="episode_stats='steps'"):
            rloo_advantages([0.0, 1.0], [0, 1], [0, 0], penalties=[0.1, 0.0])


# --------------------------------------------------------------------------- REINFORCE++

def torch_whiten_reference(centered: np.ndarray, token_counts: np.ndarray) -> np.ndarray:
    """verl's path: broadcast each row's value to its tokens, whiten the (N, T) matrix under
    the response mask (our losses.masked_whiten has verl's formula), read one token."""
    torch = pytest.importorskip("torch")
    from algorithms.objectives.losses import masked_whiten

    width = int(token_counts.max())
    mask = torch.arange(width)[None, :] < torch.as_tensor(token_counts)[:, None]
    values = torch.as_tensor(centered, dtype=torch.float64)[:, None].expand(-1, width)
    white = masked_whiten(values, mask, eps=1e-8)
    return white[:, 0].numpy()


class TestReinforcePP:
    def test_hand_computed(self):
        # one group of two trajectories (returns 3 and 1) and one of two (returns 0, 0):
        # group means 2 and 0 -> centered 1, -1, 0, 0; rows (one per trajectory) weigh 1
        got = reinforce_pp_advantages([3.0, 1.0, 0.0, 0.0], [0, 1, 2, 3], [0, 0, 1, 1])
        variance = 2.0 / 3.0  # mean 0; (1 + 1 + 0 + 0) / 4 * 4 / 3
        np.testing.assert_allclose(got, np.array([1, -1, 0, 0]) / np.sqrt(variance + 1e-8),
                                   **TOL)

    def test_eps_0_is_refused_where_equal_scores_would_whiten_0_by_0(self):
        # every group constant: centered all 0, batch variance 0; eps 0 gave NaN
        equal = ([1.0, 1.0, 2.0, 2.0], [0, 1, 2, 3], [0, 0, 1, 1])
        assert np.array_equal(reinforce_pp_advantages(*equal), np.zeros(4))
        for eps in (0.0, -1e-8, float("nan")):
            with pytest.raises(ValueError, match=r"^eps must be finite and > 0 \(a batch"):
                reinforce_pp_advantages(*equal, eps=eps)

    def test_rows_weigh_by_their_tokens(self):
        # centered 1, -1, 0, 0 with 3, 1, 1, 1 tokens: mean 2 / 6, then Bessel over 6 tokens
        counts = np.array([3, 1, 1, 1])
        got = reinforce_pp_advantages([3.0, 1.0, 0.0, 0.0], [0, 1, 2, 3], [0, 0, 1, 1],
                                      token_counts=counts)
        centered = np.array([1.0, -1.0, 0.0, 0.0])
        mean = 2 / 6
        variance = (3 * (1 - mean) ** 2 + (1 + mean) ** 2 + 2 * mean**2) / 6 * 6 / 5
        np.testing.assert_allclose(got, (centered - mean) / np.sqrt(variance + 1e-8), **TOL)

    @pytest.mark.parametrize("episode_stats", ["trajectories", "steps"])
    @pytest.mark.parametrize("seed", range(5))
    def test_matches_verls_token_matrix_whitening(self, episode_stats, seed):
        rewards, traj_ids, group_ids, penalties = random_rows(seed)
        penalties = penalties if episode_stats == "steps" else None
        counts = np.random.default_rng(seed).integers(1, 7, len(rewards))
        got = reinforce_pp_advantages(rewards, traj_ids, group_ids, episode_stats=episode_stats,
                                      penalties=penalties, token_counts=counts)
        centered = np.zeros(len(rewards))
        for members in loop_members(rewards, traj_ids, group_ids, episode_stats,
                                    penalties).values():
            scores = [score for _, score in members]
            for rows, score in members:
                centered[rows] = score - np.mean(scores) if len(scores) > 1 else 0.0
        np.testing.assert_allclose(got, torch_whiten_reference(centered, counts),
                                   rtol=1e-9, atol=1e-9)

    @pytest.mark.parametrize("seed", range(3))
    def test_invariances(self, seed):
        rewards, traj_ids, group_ids, _ = random_rows(seed)
        counts = np.random.default_rng(seed).integers(1, 5, len(rewards))
        base = reinforce_pp_advantages(rewards, traj_ids, group_ids, token_counts=counts)
        # zero weighted mean, unit Bessel-corrected weighted variance (up to eps)
        assert np.dot(counts, base) == pytest.approx(0.0, abs=1e-9)
        var = np.dot(counts, base**2) / (counts.sum() - 1)
        assert var == pytest.approx(1.0, rel=1e-6)
        # a shift of a group's returns and a positive scale change nothing (up to eps)
        _, first_rows = np.unique(traj_ids, return_index=True)
        shifted = rewards * 3.0
        shifted[first_rows] += 7.0 * group_ids[first_rows]
        again = reinforce_pp_advantages(shifted, traj_ids, group_ids, token_counts=counts)
        np.testing.assert_allclose(again, base, rtol=1e-6, atol=1e-6)
        # row order
        order = np.random.default_rng(seed).permutation(len(rewards))
        order = order[np.argsort(traj_ids[order], kind="stable")]  # keep time order per traj
        permuted = reinforce_pp_advantages(rewards[order], traj_ids[order], group_ids[order],
                                           token_counts=counts[order])
        np.testing.assert_allclose(permuted, base[order], rtol=1e-12, atol=1e-12)
        # no counts: every row weighs 1
        np.testing.assert_array_equal(
            reinforce_pp_advantages(rewards, traj_ids, group_ids),
            reinforce_pp_advantages(rewards, traj_ids, group_ids,
                                    token_counts=np.ones(len(rewards))))

    def test_bad_token_counts_raise(self):
        with pytest.raises(ValueError, match="token_counts has 1 rows"):
            reinforce_pp_advantages([0.0, 1.0], [0, 1], [0, 0], token_counts=[1])
        with pytest.raises(ValueError, match=">= 0"):
            reinforce_pp_advantages([0.0, 1.0], [0, 1], [0, 0], token_counts=[1, -1])
        with pytest.raises(ValueError, match="all 0"):
            reinforce_pp_advantages([0.0, 1.0], [0, 1], [0, 0], token_counts=[0, 0])


# --------------------------------------------------------------------------- overlong

def test_overlong_penalties_hand_computed():
    # DAPO: L_max 512, buffer 128 -> free up to 384 tokens, then linear to the factor
    got = overlong_penalties([10, 384, 400, 448, 512], max_response_length=512,
                             buffer_length=128, penalty_factor=1.0)
    np.testing.assert_allclose(got, [0, 0, 16 / 128, 0.5, 1.0], **TOL)
    half = overlong_penalties([448], max_response_length=512, buffer_length=128,
                              penalty_factor=0.5)
    assert half[0] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="buffer_length"):
        overlong_penalties([1], max_response_length=8, buffer_length=9)
    with pytest.raises(ValueError, match="penalty_factor"):
        overlong_penalties([1], max_response_length=8, buffer_length=4, penalty_factor=-1)


# --------------------------------------------------------------------------- config

def test_with_algo_sets_each_algorithms_settings():
    gspo = with_algo(TrainConfig(), "gspo")
    assert (gspo.algo, gspo.estimator, gspo.learner.policy_loss, gspo.learner.clip_eps_low,
            gspo.learner.clip_eps_high) == ("gspo", "grpo", "gspo", 3e-4, 4e-4)
    dr = with_algo(TrainConfig(), "dr_grpo")
    assert (dr.estimator, dr.learner.normalize, dr.learner.loss_aggregation) == (
        "grpo", "mean", "seq-mean-token-sum-norm")
    assert with_algo(TrainConfig(), "rloo").estimator == "rloo"
    assert with_algo(TrainConfig(), "reinforce_pp").estimator == "reinforce_pp"
    assert not with_algo(TrainConfig(), "rloo").use_critic
    for algo in ("rloo", "reinforce_pp", "dr_grpo", "gspo"):
        with_algo(TrainConfig(), algo).validate()
    with pytest.raises(ConfigError, match="unknown algo"):
        with_algo(TrainConfig(), "dapo")
    graph = with_algo(TrainConfig(), "graphgpo")
    assert (graph.estimator, graph.learner.graphgpo_decay, graph.learner.gamma) == (
        "graphgpo", 0.1, 0.95)  # its recipe's decay, in a field of its own
    hgpo = with_algo(graph, "hgpo")
    assert (hgpo.estimator, hgpo.learner.gamma) == ("hgpo", 0.95)
    for algo in ("hgpo", "graphgpo"):
        with_algo(TrainConfig(), algo).validate()
    assert set(ALGO_SETTINGS) == {"dr_grpo", "gspo"}


def test_an_algo_name_that_does_not_tell_the_truth_is_refused():
    with pytest.raises(ConfigError, match="--algo gspo means learner.policy_loss 'gspo'"):
        TrainConfig(algo="gspo").validate()
    with pytest.raises(ConfigError, match="--algo dr_grpo means learner.normalize"):
        replace(with_algo(TrainConfig(), "dr_grpo"), learner={"normalize": "std"}).validate()
    # GSPO's clip range is its script's value, not its definition
    replace(with_algo(TrainConfig(), "gspo"), learner={"clip_eps_high": 1e-3}).validate()


@pytest.mark.parametrize("algo, learner, message", [
    ("ppo", {"dynamic_sampling": True}, "group estimator"),
    ("grpo", {"dynamic_sampling": True, "dynamic_sampling_max_rollouts": 0},
     "dynamic_sampling_max_rollouts"),
    ("grpo", {"overlong_buffer": 10_000}, "overlong_buffer"),
    ("grpo", {"overlong_buffer": 8, "overlong_penalty_factor": -1.0}, "overlong_penalty"),
    ("rloo", {"episode_stats": "trajectories"}, "penalty-in-returns"),
])
def test_impossible_settings_are_refused(algo, learner, message):
    with pytest.raises(ConfigError, match=message):
        replace(with_algo(TrainConfig(), algo), learner=learner).validate()


def test_train_py_applies_the_algo_before_other_flags():
    pytest.importorskip("tyro")
    import train

    config = train.parse_config(["--preset", "cpu-demo", "--algo", "gspo",
                                 "--learner.clip-eps-high", "0.001"])
    assert (config.algo, config.learner.policy_loss, config.learner.clip_eps_low,
            config.learner.clip_eps_high) == ("gspo", "gspo", 3e-4, 1e-3)
    assert config.preset == "cpu-demo" and config.env.env_id == "AgentGym/KeyDoor-v0"
    dr = train.parse_config(["--preset", "cpu-demo", "--algo", "dr_grpo"])
    assert dr.learner.loss_aggregation == "seq-mean-token-sum-norm"


# --------------------------------------------------------------------------- the learner

@pytest.fixture(scope="module")
def tiny_policy():
    pytest.importorskip("transformers")
    from tests.algorithms.tiny import make_policy

    return make_policy()


def _learner(policy, algo: str, **learner: object):
    import torch

    from algorithms.training.learner import Learner

    config = replace(with_algo(TrainConfig(), algo), learner={"kl_coef": 0.0, **learner},
                     env={"group_size": 2, "num_groups": 2}, run={"device": "cpu"},
                     generation={"max_new_tokens": 64})
    return Learner(policy, config, torch.device("cpu"))


def _two_groups():
    # group 0: A wins after an invalid step, B fails; group 1: C and D both fail
    return hand_batch([(0, [0.0, 10.0], ["s0", "a1"], False),
                       (0, [0.0, 0.0], ["s0", "b1"], False),
                       (1, [0.0], ["c0"], False), (1, [0.0, 0.0], ["c0", "d1"], False)],
                      penalties=[[0.1, 0.0], [0.0, 0.0], [0.0], [0.0, 0.1]])


def test_the_learner_dispatches_rloo_and_reinforce_pp(tiny_policy):
    batch = _two_groups()
    tokens = np.array([1, 3, 2, 2, 1, 4, 1])
    batch = dataclasses.replace(batch, response_mask=(np.arange(4)[None, :]
                                                      < tokens[:, None]).astype(np.int64),
                                response_ids=np.ones((7, 4), dtype=np.int64))
    rloo = _learner(tiny_policy, "rloo").advantages(batch)
    expected = rloo_advantages(batch.env_rewards, batch.traj_ids, batch.group_ids,
                               episode_stats="steps", penalties=batch.penalties)
    np.testing.assert_array_equal(rloo.advantages, expected)
    # by hand, group 0: row scores 9.9, 10, 0, 0 (mean 4.975, n = 4)
    np.testing.assert_allclose(rloo.advantages[:4],
                               (np.array([9.9, 10, 0, 0]) - 4.975) * 4 / 3, **TOL)
    rpp = _learner(tiny_policy, "reinforce_pp").advantages(batch)
    np.testing.assert_array_equal(rpp.advantages, reinforce_pp_advantages(
        batch.env_rewards, batch.traj_ids, batch.group_ids, episode_stats="steps",
        penalties=batch.penalties, token_counts=tokens))


def test_the_learner_charges_the_overlong_cost_on_the_rows_own_penalty(tiny_policy):
    batch = _two_groups()
    tokens = np.array([64, 60, 1, 1, 1, 1, 56])  # max_new_tokens 64, buffer 16 -> free to 48
    batch = dataclasses.replace(batch, response_mask=(np.arange(64)[None, :]
                                                      < tokens[:, None]).astype(np.int64),
                                response_ids=np.ones((7, 64), dtype=np.int64))
    from algorithms.training.estimation import overlong_costs, rewards_and_penalties

    learner = _learner(tiny_policy, "grpo", overlong_buffer=16, overlong_penalty_factor=1.0)
    rewards, penalties = rewards_and_penalties(batch, learner.config)
    np.testing.assert_array_equal(rewards, batch.env_rewards)
    np.testing.assert_allclose(penalties, batch.penalties + [1.0, 0.75, 0, 0, 0, 0, 0.5],
                               **TOL)
    in_returns = _learner(tiny_policy, "grpo", overlong_buffer=16, penalty_in_returns=True)
    rewards, none = rewards_and_penalties(batch, in_returns.config)
    assert none is None
    np.testing.assert_allclose(rewards, batch.rewards - [1.0, 0.75, 0, 0, 0, 0, 0.5], **TOL)
    off = _learner(tiny_policy, "grpo")
    assert overlong_costs(batch, off.config) is None


def test_the_learner_builds_the_gspo_and_dr_grpo_recipes(tiny_policy):
    gspo = _learner(tiny_policy, "gspo").loss_recipe
    assert (gspo.policy_loss, gspo.clip_eps_low, gspo.clip_eps_high, gspo.aggregation,
            gspo.norm_length) == ("gspo", 3e-4, 4e-4, "token-mean", None)
    dr = _learner(tiny_policy, "dr_grpo").loss_recipe
    # verl's constant divisor: the padded response width, the maximum response length
    assert (dr.policy_loss, dr.aggregation, dr.norm_length) == (
        "vanilla", "seq-mean-token-sum-norm", 64)
    batch = _two_groups()
    np.testing.assert_array_equal(
        _learner(tiny_policy, "dr_grpo").advantages(batch).advantages,
        grpo_advantages(batch.env_rewards, batch.traj_ids, batch.group_ids, normalize="mean",
                        episode_stats="steps", penalties=batch.penalties))


@pytest.mark.parametrize("algo", ["rloo", "reinforce_pp", "dr_grpo", "gspo"])
def test_each_algo_trains_end_to_end(tmp_path, algo):
    # one iteration on the scripted env: the weights move, the loss is finite
    pytest.importorskip("transformers")
    import torch

    from algorithms.training.trainer import Trainer
    from tests.algorithms.scripted_config import scripted_config
    from tests.algorithms.tiny import make_policy

    base = scripted_config("grpo", iterations=1, save_every=10)
    config = with_algo(base, algo)
    if algo == "gspo":  # the script's 4e-4 range would clip a 1e-3 step at once
        config = replace(config, learner={"clip_eps_low": 0.2, "clip_eps_high": 0.2,
                                          "mini_batch_size": 4, "micro_batch_size": 4})
    trainer = Trainer(config, policy=make_policy(seed=2), run_dir=tmp_path)
    before = {n: p.detach().clone() for n, p in trainer._policy.model.named_parameters()}
    metrics = trainer.run()
    after = dict(trainer.policy.model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before)
    assert np.isfinite(metrics["update/policy_loss"]) and metrics["update/steps"] > 0


@pytest.mark.parametrize("algo", ["grpo", "rloo", "gigpo"])
def test_the_terms_logged_beside_the_advantages(algo):
    """What the metrics and records read: the episode term (for GRPO and RLOO the whole
    advantage), and for GiGPO the step term and the step groups (A = A_E + w A_S, Eq. 8)."""
    from algorithms.training.estimation import estimate_advantages

    batch = _two_groups()
    config = with_algo(TrainConfig(), algo)
    result = estimate_advantages(batch, config)
    if algo != "gigpo":
        np.testing.assert_array_equal(result.episode, result.advantages)
        assert result.step_group_ids is None
        return
    np.testing.assert_allclose(result.advantages,
                               result.episode + config.learner.step_weight * result.step)
    groups = result.step_group_ids
    assert groups[0] == groups[2] != groups[1]  # A's and B's first steps share s0
    assert groups[4] == groups[5] != groups[0]  # C's and D's c0, in the other task
