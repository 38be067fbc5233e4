"""Tests for algorithms.objectives.behaviour_weights and the weighted clip term: hand cases."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from algorithms.objectives.behaviour_weights import behaviour_as_old, behaviour_weights  # noqa: E402
from algorithms.objectives.losses import (  # noqa: E402
    LossRecipe,
    gspo_policy_loss,
    policy_loss,
    ppo_clip_policy_loss,
)

NAN = float("nan")


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def test_weights_are_the_probability_ratio_of_old_to_behaviour():
    old = t([[math.log(0.5), math.log(0.2), 0.0]])
    behaviour = t([[math.log(0.25), math.log(0.4), 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    weights, stats = behaviour_weights(old, behaviour, mask)
    assert weights.flatten().tolist() == pytest.approx([2.0, 0.5, 1.0])
    assert stats["is_weight_mean"].item() == pytest.approx(1.25)
    assert stats["is_weight_max"].item() == pytest.approx(2.0)
    assert stats["is_clipped_fraction"].item() == 0.0
    assert stats["behaviour_gap"].item() == pytest.approx(math.log(2.0))


def test_truncation_caps_and_the_filter_drops():
    old = t([[math.log(0.9), math.log(0.6), math.log(0.3)]])
    behaviour = t([[math.log(0.1), math.log(0.4), math.log(0.3)]])  # w = 9, 1.5, 1
    mask = torch.ones(1, 3)
    truncated, stats = behaviour_weights(old, behaviour, mask, truncate_at=2.0)
    assert truncated.flatten().tolist() == pytest.approx([2.0, 1.5, 1.0])
    assert stats["is_clipped_fraction"].item() == pytest.approx(1 / 3)
    assert stats["is_weight_max"].item() == pytest.approx(9.0)  # the untruncated weight
    dropped, _ = behaviour_weights(old, behaviour, mask, drop_above=5.0)
    assert dropped.flatten().tolist() == pytest.approx([0.0, 1.5, 1.0])
    both, _ = behaviour_weights(old, behaviour, mask, truncate_at=1.2, drop_above=5.0)
    assert both.flatten().tolist() == pytest.approx([0.0, 1.2, 1.0])


def test_unknown_behaviour_log_probs_and_masked_tokens_weigh_one():
    old = t([[-1.0, -2.0], [-3.0, -4.0]])
    behaviour = t([[NAN, -1.0], [-3.0, NAN]])
    mask = torch.tensor([[1, 1], [0, 1]])
    weights, stats = behaviour_weights(old, behaviour, mask)
    assert weights.flatten().tolist() == pytest.approx([1.0, math.exp(-1.0), 1.0, 1.0])
    assert stats["is_weight_mean"].item() == pytest.approx(math.exp(-1.0))  # one known
    empty, stats = behaviour_weights(old, t([[NAN, NAN], [NAN, NAN]]), mask)
    assert torch.equal(empty, torch.ones(2, 2, dtype=torch.float64))
    assert stats["is_weight_max"].item() == 1.0


def test_weights_carry_no_gradient_and_shapes_must_match():
    old = torch.zeros(1, 2, requires_grad=True)
    weights, _ = behaviour_weights(old, torch.zeros(1, 2), torch.ones(1, 2))
    assert not weights.requires_grad
    with pytest.raises(ValueError, match="shape mismatch"):
        behaviour_weights(torch.zeros(1, 2), torch.zeros(1, 3), torch.ones(1, 2))


def test_the_clip_term_is_weighted_token_by_token():
    # ratio 1 everywhere: per-token loss -A; token-mean over 2 tokens
    logp = t([[-1.0, -2.0]]).requires_grad_()
    advantages = t([[1.0, 3.0]])
    mask = torch.ones(1, 2)
    weights = t([[2.0, 0.5]])
    loss, _ = ppo_clip_policy_loss(logp, logp.detach(), advantages, mask, token_weights=weights)
    assert loss.item() == pytest.approx((-1.0 * 2.0 + -3.0 * 0.5) / 2)
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-1.0, -0.75])
    plain, _ = ppo_clip_policy_loss(logp, logp.detach(), advantages, mask)
    ones, _ = ppo_clip_policy_loss(logp, logp.detach(), advantages, mask,
                                   token_weights=torch.ones(1, 2))
    assert ones.item() == plain.item()
    gspo, _ = gspo_policy_loss(logp, logp.detach(), advantages, mask, clip_eps_low=0.1,
                               clip_eps_high=0.1, token_weights=weights)
    assert gspo.item() == pytest.approx((-2.0 - 1.5) / 2)


def test_policy_loss_weights_the_clip_term_only():
    logp = t([[-1.0, -2.0]])
    ref = t([[-1.5, -2.5]])
    entropy = t([[0.3, 0.7]])
    advantages = t([[1.0, 1.0]])
    mask = torch.ones(1, 2)
    recipe = LossRecipe(clip_eps_low=0.2, clip_eps_high=0.2, dual_clip=None,
                        aggregation="token-mean", kl_coef=0.2, kl_estimator="low_var_kl",
                        entropy_coef=0.1)
    plain, plain_stats = policy_loss(logp, logp, advantages, mask, recipe,
                                     ref_log_probs=ref, entropy=entropy)
    zero, stats = policy_loss(logp, logp, advantages, mask, recipe, ref_log_probs=ref,
                              entropy=entropy, token_weights=torch.zeros(1, 2))
    assert stats["policy_loss"].item() == 0.0
    assert stats["kl_ref"].item() == plain_stats["kl_ref"].item()
    assert zero.item() == pytest.approx(plain.item() - plain_stats["policy_loss"].item())


def test_behaviour_as_old_takes_the_engine_log_probs_where_known():
    old = t([[-1.0, -2.0, -3.0]]).requires_grad_()
    behaviour = t([[-0.5, NAN, -4.0]])
    taken = behaviour_as_old(old, behaviour)
    assert taken.tolist() == [[-0.5, -2.0, -4.0]]
    assert not taken.requires_grad
    with pytest.raises(ValueError, match="shape mismatch"):
        behaviour_as_old(torch.zeros(1, 2), torch.zeros(1, 3))
