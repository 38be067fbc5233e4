"""verl-agent's GiGPO recipe, pinned by behaviour on hand-computed cases (no verl-agent code
needed; ``benchmarks/recipe_parity.py`` compares with its functions).

The terms: the invalid-action penalty on its own row only, episode statistics across step
rows, dual-clip PPO, the entropy bonus, AdamW's weight decay, verl's micro-batch weighting,
mini-batches in batch order, a non-finite gradient norm skipping the step.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from algorithms.config import (  # noqa: E402
    ConfigError,
    LearnerConfig,
    TrainConfig,
    replace,
)
from algorithms.objectives import losses  # noqa: E402
from algorithms.training.estimation import Advantages  # noqa: E402
from algorithms.training.learner import Learner  # noqa: E402
from tests.algorithms.hand_batch import hand_batch  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402

CPU = torch.device("cpu")
EPS = 1e-6


def _config(algo: str = "gigpo", **learner: object) -> TrainConfig:
    return replace(TrainConfig(algo=algo), learner={"kl_coef": 0.0, **learner},
                   env={"group_size": 2, "num_groups": 1}, run={"device": "cpu"})


def _advantages(batch, **learner: object) -> np.ndarray:
    learner_ = Learner(make_policy(), _config(**learner), CPU)
    return learner_.advantages(batch).advantages


# ---------------------------------------------------------------- penalty placement

def test_the_penalty_lands_on_its_own_row_only():
    # Group of two: A = (invalid step, then the win: reward 10), B = two steps, reward 0.
    # A's first step and B's first step share the anchor s0.
    batch = hand_batch([(0, [0.0, 10.0], ["s0", "a1"], False),
                        (0, [0.0, 0.0], ["s0", "b1"], False)],
                       penalties=[[0.1, 0.0], [0.0, 0.0]])
    got = _advantages(batch)
    # Episode scores per row: 10 - 0.1, 10, 0, 0; statistics over the four rows.
    mean = (9.9 + 10 + 0 + 0) / 4  # 4.975
    std = math.sqrt((4.925 ** 2 + 5.025 ** 2 + 2 * 4.975 ** 2) / 3)
    episode = np.array([4.925, 5.025, -4.975, -4.975]) / (std + EPS)
    assert mean == pytest.approx(4.975)
    # Step returns from env rewards (0 + 0.95 * 10 = 9.5), then A's first row pays 0.1:
    # the step group {9.4, 0} gives +-4.7 / (4.7 * sqrt 2); the other rows are singletons.
    step = 4.7 / (4.7 * math.sqrt(2) + EPS)
    np.testing.assert_allclose(got, episode + [step, 0, -step, 0], rtol=1e-12)
    # the estimator's public function takes the penalties the same way
    from algorithms.objectives.advantages import gigpo_advantages

    direct = gigpo_advantages(batch.env_rewards, batch.traj_ids, batch.group_ids,
                              batch.anchors, episode_stats="steps", penalties=batch.penalties)
    np.testing.assert_allclose(direct, episode + [step, 0, -step, 0], rtol=1e-12)


def test_the_penalty_in_the_returns_is_the_named_option():
    batch = hand_batch([(0, [0.0, 10.0], ["s0", "a1"], False),
                        (0, [0.0, 0.0], ["s0", "b1"], False)],
                       penalties=[[0.1, 0.0], [0.0, 0.0]])
    got = _advantages(batch, penalty_in_returns=True)
    # Rewards -0.1, 10: both A rows score 9.9, B rows 0 (over the four rows).
    std = math.sqrt(4 * 4.95 ** 2 / 3)
    episode = np.array([4.95, 4.95, -4.95, -4.95]) / (std + EPS)
    # Step returns: -0.1 + 0.95 * 10 = 9.4 against 0 in s0: the same as above here.
    step = 4.7 / (4.7 * math.sqrt(2) + EPS)
    np.testing.assert_allclose(got, episode + [step, 0, -step, 0], rtol=1e-12)


@pytest.mark.parametrize("algo", ["gigpo", "grpo"])
def test_the_winning_step_of_a_success_with_an_invalid_step_keeps_a_positive_advantage(algo):
    # Four trajectories of one task all win (reward 1); A made one invalid step first.
    batch = hand_batch([(0, [0.0, 1.0], ["start", "near"], False),
                        (0, [1.0], ["start"], False),
                        (0, [1.0], ["start"], False),
                        (0, [1.0], ["start"], False)],
                       penalties=[[0.1, 0.0], [0.0], [0.0], [0.0]])
    learner = Learner(make_policy(), _config(algo), CPU)
    signals = learner.advantages(batch)
    episode = signals.advantages if signals.episode is None else signals.episode
    assert episode[1] > 0, "the winning step of A was pushed down"
    assert episode[0] < 0, "the invalid step itself must be pushed down"
    # With the penalty in the returns, A's whole trajectory is the group's worst: its
    # winning step's episode advantage turns negative (the behaviour the recipe removes).
    old = Learner(make_policy(), _config(algo, penalty_in_returns=True,
                                         episode_stats="trajectories"), CPU)
    old_signals = old.advantages(batch)
    old_episode = old_signals.advantages if old_signals.episode is None else old_signals.episode
    assert old_episode[1] < 0


def test_row_penalties_need_statistics_over_steps():
    from algorithms.objectives.advantages import grpo_advantages

    with pytest.raises(ValueError, match="episode_stats='steps'"):
        grpo_advantages([0.0, 1.0], [0, 1], [0, 0], penalties=[0.1, 0.0],
                        episode_stats="trajectories")
    with pytest.raises(ConfigError, match="--learner.penalty-in-returns"):
        _config("grpo", episode_stats="trajectories").validate()
    _config("grpo", episode_stats="trajectories", penalty_in_returns=True).validate()


# ---------------------------------------------------------------- the actor loss

def _recipe(**changes: object) -> losses.LossRecipe:
    base = losses.LossRecipe(clip_eps_low=0.2, clip_eps_high=0.2, dual_clip=3.0,
                             aggregation="token-mean", kl_coef=0.0, kl_estimator="k3",
                             entropy_coef=0.0)
    return dataclasses.replace(base, **changes)


def test_dual_clip_bounds_the_loss_of_a_bad_token_with_a_huge_ratio():
    old = torch.zeros(1, 1)
    new = torch.full((1, 1), math.log(100.0), requires_grad=True)  # ratio 100
    advantage = torch.full((1, 1), -1.0)
    mask = torch.ones(1, 1)
    loss, stats = losses.policy_loss(new, old, advantage, mask, _recipe())
    assert loss.item() == pytest.approx(3.0)  # -A * c, not -A * ratio = 100
    assert stats["dual_clip_fraction"].item() == 1.0
    loss.backward()
    assert new.grad.item() == 0.0
    unbounded, _ = losses.policy_loss(new, old, advantage, mask, _recipe(dual_clip=None))
    assert unbounded.item() == pytest.approx(100.0)
    tight, _ = losses.policy_loss(new, old, advantage, mask, _recipe(dual_clip=1.5))
    assert tight.item() == pytest.approx(1.5)  # any c > 1 is a bound


def test_the_entropy_bonus_raises_the_entropy():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5, requires_grad=True)
    tokens = torch.randint(0, 5, (2, 3))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    log_probs = losses.logprobs_from_logits(logits, tokens)
    entropy = losses.entropy_from_logits(logits)
    loss, stats = losses.policy_loss(log_probs, log_probs.detach(), torch.zeros(2, 3), mask,
                                     _recipe(entropy_coef=0.1), entropy=entropy)
    mean_entropy = (entropy * mask).sum() / mask.sum()
    assert loss.item() == pytest.approx(-0.1 * mean_entropy.item())  # the clip term is 0
    assert stats["entropy"].item() == pytest.approx(mean_entropy.item())
    loss.backward()
    with torch.no_grad():  # measured by hand, -sum p log p: the bonus must raise the real H
        stepped = logits - 1.0 * logits.grad
        before = (_hand_entropy(logits) * mask).sum() / mask.sum()
        after = (_hand_entropy(stepped) * mask).sum() / mask.sum()
    assert before == pytest.approx(mean_entropy.item())
    assert after > before


def _hand_entropy(logits: torch.Tensor) -> torch.Tensor:
    p = torch.softmax(logits, dim=-1)
    return -(p * torch.log(p)).sum(dim=-1)


def test_a_term_with_a_coefficient_needs_its_input():
    x = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="entropy"):
        losses.policy_loss(x, x, x, torch.ones(1, 1), _recipe(entropy_coef=0.1))
    with pytest.raises(ValueError, match="reference"):
        losses.policy_loss(x, x, x, torch.ones(1, 1), _recipe(kl_coef=0.1))


def test_the_learner_builds_the_recipe_from_the_config():
    learner = Learner(make_policy(), _config(clip_eps=0.3, clip_eps_high=0.28, dual_clip=None,
                                            loss_aggregation="seq-mean-token-sum",
                                            kl_coef=0.05, kl_estimator="low_var_kl",
                                            entropy_coef=0.02), CPU)
    assert learner.loss_recipe == losses.LossRecipe(
        clip_eps_low=0.3, clip_eps_high=0.28, dual_clip=None, aggregation="seq-mean-token-sum",
        kl_coef=0.05, kl_estimator="low_var_kl", entropy_coef=0.02)


def test_the_defaults_are_verl_agents():
    learner = LearnerConfig()
    assert (learner.entropy_coef, learner.weight_decay, learner.dual_clip,
            learner.loss_aggregation, learner.max_grad_norm, learner.epochs,
            learner.kl_coef, learner.kl_estimator) == (0.001, 0.01, 3.0, "token-mean", 1.0, 1,
                                                       0.01, "k3")
    assert (learner.penalty_in_returns, learner.episode_stats, learner.shuffle,
            learner.micro_batch_weighting) == (False, "steps", False, "equal")


@pytest.mark.parametrize("learner, message", [
    ({"dual_clip": 1.0}, "dual_clip"),
    ({"clip_eps_low": 1.0}, "clip_eps_low"),
    ({"entropy_coef": -0.1}, "entropy_coef"),
    ({"similarity_threshold": 1.5}, "similarity_threshold"),
])
def test_impossible_loss_settings_are_refused(learner, message):
    with pytest.raises(ConfigError, match=message):
        _config(**learner).validate()


def test_similarity_grouping_needs_gigpo():
    with pytest.raises(ConfigError, match="--algo gigpo"):
        _config("grpo", similarity_threshold=0.9).validate()


# ---------------------------------------------------------------- the optimizer step

def _update_batch():
    """Four one-step trajectories in two groups, responses of 1, 3, 2 and 1 tokens."""
    batch = hand_batch([(0, [1.0], ["a"], False), (0, [0.0], ["b"], False),
                        (1, [1.0], ["c"], False), (1, [0.0], ["d"], False)])
    ids = np.array([[5, 0, 0], [6, 7, 8], [9, 10, 0], [11, 0, 0]], dtype=np.int64)
    mask = (np.arange(3) < np.array([[1], [3], [2], [1]])).astype(np.int64)
    return dataclasses.replace(batch, response_ids=ids, response_mask=mask)


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_weight_decay_moves_a_weight_the_loss_does_not_touch():
    policy = make_policy()
    # 0.05, not the default 0.01 (which is also torch's AdamW default): the configured
    # value must reach the optimizer
    learner = Learner(policy, _config("grpo", lr=1e-3, weight_decay=0.05, entropy_coef=0.0),
                      CPU)
    batch = learner.score(_update_batch())
    before = _snapshot(policy.model)
    stats = learner.update(batch, Advantages(advantages=np.zeros(len(batch))), seed=0)
    assert stats["grad_norm"] == 0.0  # no term has a gradient
    after = _snapshot(policy.model)
    for name, weight in before.items():  # AdamW: w <- w * (1 - lr * decay)
        torch.testing.assert_close(after[name], weight * (1 - 1e-3 * 0.05), rtol=0, atol=1e-9)
    assert any(not torch.equal(after[n], before[n]) for n in before)


@pytest.mark.parametrize("weighting", ["equal", "tokens"])
def test_micro_batch_losses_add_up_as_configured(weighting):
    """Mini-batch of 4 rows in micro-batches of 2 (1 + 3 and 2 + 1 response tokens):
    ``equal`` (verl) averages the two micro-batches' token means, ``tokens`` takes the token
    mean over all 7 tokens."""
    policy = make_policy()
    config = _config("grpo", lr=0.0, weight_decay=0.0, entropy_coef=0.0, max_grad_norm=1e9,
                     mini_batch_size=4, micro_batch_size=2, micro_batch_weighting=weighting)
    learner = Learner(policy, config, CPU)
    batch = learner.score(_update_batch())
    advantages = np.array([1.0, -2.0, 0.5, 3.0])
    learner.update(batch, Advantages(advantages=advantages), seed=0)
    got = [p.grad.clone() for p in learner.optimizer.param_groups[0]["params"]]

    # Expected: differentiate the clip loss by hand-chosen weights (ratio 1: the loss of a
    # token is -A * ratio, and the micro-batches are rows [0, 1] and [2, 3], in order).
    fresh = make_policy()
    fresh.model.load_state_dict(policy.model.state_dict())
    learner_fresh = Learner(fresh, config, CPU)
    from algorithms.training.batch_scoring import score_rows as _score
    from algorithms.training.micro_batches import window_rows as _rows

    total = 0.0
    for rows, tokens in (([0, 1], 4), ([2, 3], 3)):
        index = np.array(rows)
        tensors = _rows(batch, index, CPU)
        scored = _score(learner_fresh.scorer, tensors, temperature=1.0)
        mask = tensors["response_mask"].float()
        ratio = torch.exp(scored.log_probs - scored.log_probs.detach())
        per_token = -torch.as_tensor(advantages[index], dtype=torch.float32)[:, None] * ratio
        summed = (per_token * mask).sum()
        weight = 1 / tokens / 2 if weighting == "equal" else 1 / 7
        total = total + summed * weight
    total.backward()
    expected = [p.grad for p in learner_fresh.optimizer.param_groups[0]["params"]]
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_the_learners_entropy_bonus_pushes_the_weights_up_the_entropy():
    """Zero advantages and no KL: the update's gradient is the entropy bonus's alone,
    ``-entropy_coef * d(token mean of H over the 7 response tokens)/dw``, and a small step
    against it raises the entropy (one micro-batch of the 4 rows)."""
    from algorithms.training.batch_scoring import score_rows as _score
    from algorithms.training.micro_batches import window_rows as _rows

    policy = make_policy()
    config = _config("grpo", lr=0.0, weight_decay=0.0, entropy_coef=0.1, max_grad_norm=1e9,
                     mini_batch_size=4, micro_batch_size=4)
    learner = Learner(policy, config, CPU)
    batch = learner.score(_update_batch())
    learner.update(batch, Advantages(advantages=np.zeros(len(batch))), seed=0)
    params = learner.optimizer.param_groups[0]["params"]
    got = [p.grad.clone() for p in params]
    assert any(g.abs().sum() > 0 for g in got), "the entropy bonus gave no gradient"

    def mean_entropy() -> torch.Tensor:
        tensors = _rows(batch, np.arange(4), CPU)
        scored = _score(learner.scorer, tensors, temperature=1.0, with_entropy=True)
        mask = tensors["response_mask"].float()
        return (scored.entropy * mask).sum() / 7

    for p in params:
        p.grad = None
    before = mean_entropy()
    (-0.1 * before).backward()
    for a, p in zip(got, params, strict=True):
        torch.testing.assert_close(a, p.grad, rtol=1e-5, atol=1e-8)
    with torch.no_grad():  # a step down the loss's gradient goes up the entropy
        for p, g in zip(params, got, strict=True):
            p -= 1.0 * g
        assert mean_entropy() > before.detach()


def test_mini_batches_follow_the_batch_order_unless_shuffled():
    policy = make_policy()
    for shuffle, expected_first in ((False, [0, 1]), (True, None)):
        config = _config("grpo", lr=0.0, entropy_coef=0.0, mini_batch_size=2,
                         micro_batch_size=2, shuffle=shuffle)
        learner = Learner(policy, config, CPU)
        seen: list[list[int]] = []
        original = learner._mini_batch_step

        def spy(batch, view, signals, mini, *rest, _original=original, _seen=seen):
            _seen.append(sorted(mini.tolist()))
            return _original(batch, view, signals, mini, *rest)

        learner._mini_batch_step = spy
        batch = learner.score(_update_batch())
        learner.update(batch, Advantages(advantages=np.zeros(len(batch))), seed=3)
        if expected_first is not None:
            assert seen == [[0, 1], [2, 3]]
        else:
            assert seen != [[0, 1], [2, 3]]  # seed 3 draws another order


def test_a_non_finite_gradient_skips_the_step():
    policy = make_policy()
    learner = Learner(policy, _config("grpo", lr=1e-2, entropy_coef=0.0), CPU)
    batch = learner.score(_update_batch())
    before = _snapshot(policy.model)
    stats = learner.update(batch, Advantages(advantages=np.full(len(batch), np.nan)), seed=0)
    assert stats["skipped_steps"] == 1.0 and not math.isfinite(stats["grad_norm"])
    after = _snapshot(policy.model)
    assert all(torch.equal(after[n], before[n]) for n in before)


def test_the_warmup_is_verls_constant_schedule_with_warmup():
    from algorithms.training.learner import warmup_factor

    # int(0.3 * 10) = 3 warmup iterations: factors 0, 1/3, 2/3, then 1.
    assert [warmup_factor(i, 10, 0.3) for i in range(5)] == [0.0, 1 / 3, 2 / 3, 1.0, 1.0]
    assert [warmup_factor(i, 10, 0.0) for i in range(3)] == [1.0, 1.0, 1.0]
    assert warmup_factor(0, 3, 0.2) == 1.0  # int(0.6) = 0: no warmup


def test_the_trainer_warms_the_learning_rate_up(tmp_path):
    from algorithms.agent.metrics import read_metrics
    from algorithms.training.trainer import Trainer
    from tests.algorithms.scripted_config import scripted_config

    config = replace(scripted_config("grpo", iterations=3, lr=1e-3),
                     learner={"lr_warmup_ratio": 1.0})
    Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path / "run").run()
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [row["update/lr"] for row in rows] == pytest.approx([0.0, 1e-3 / 3, 2e-3 / 3])


def test_the_learning_rate_is_set_on_the_policy_only():
    learner = Learner(make_policy(), _config("ppo", lr=1e-3, critic_lr=1e-2), CPU)
    learner.set_policy_lr(5e-4)
    assert [group["lr"] for group in learner.optimizer.param_groups] == [5e-4, 1e-2]


def test_equal_weighting_needs_whole_micro_batches():
    with pytest.raises(ConfigError, match="multiple of micro_batch_size"):
        _config(mini_batch_size=10, micro_batch_size=4).validate()
    _config(mini_batch_size=10, micro_batch_size=4, micro_batch_weighting="tokens").validate()
