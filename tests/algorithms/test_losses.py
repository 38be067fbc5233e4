"""Tests for algorithms.objectives.losses: hand cases, a per-token loop reference, mask invariance."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from algorithms.objectives.losses import (  # noqa: E402
    AGGREGATIONS,
    KL_KINDS,
    LossRecipe,
    aggregate,
    broadcast_to_tokens,
    clipped_value_loss,
    entropy_from_logits,
    gspo_policy_loss,
    kl_penalty,
    logprobs_from_logits,
    masked_mean,
    masked_sum,
    masked_whiten,
    policy_loss,
    ppo_clip_policy_loss,
    step_value_loss,
)

F64 = torch.float64


def t(values, dtype=F64, **kwargs):
    return torch.tensor(values, dtype=dtype, **kwargs)


def random_batch(seed: int, batch: int = 4, length: int = 6):
    """Random policy-loss inputs with ragged response masks (one sequence fully masked)."""
    gen = torch.Generator().manual_seed(seed)
    logprobs = -torch.rand(batch, length, generator=gen, dtype=F64) * 3
    old = logprobs + torch.randn(batch, length, generator=gen, dtype=F64) * 0.3
    advantages = torch.randn(batch, length, generator=gen, dtype=F64)
    lengths = torch.randint(1, length + 1, (batch,), generator=gen)
    lengths[-1] = 0
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return logprobs, old, advantages, mask


# --------------------------------------------------------------------------- masked reductions


class TestMaskedReductions:
    def test_hand_computed(self):
        values = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        mask = t([[1, 1, 0], [0, 0, 0]], dtype=torch.int64)
        assert masked_sum(values, mask).item() == 3.0
        assert masked_mean(values, mask).item() == 1.5
        torch.testing.assert_close(masked_mean(values, mask, dim=-1), t([1.5, 0.0]))
        torch.testing.assert_close(masked_sum(values, mask.bool(), dim=0), t([1.0, 2.0, 0.0]))

    def test_empty_selection_is_zero_not_nan(self):
        values = t([1.0, 2.0], requires_grad=True)
        result = masked_mean(values, torch.zeros(2, dtype=torch.bool))
        assert result.item() == 0.0
        result.backward()
        torch.testing.assert_close(values.grad, t([0.0, 0.0]))

    def test_broadcast_mask_and_bad_shape(self):
        values = t([[1.0, 2.0], [3.0, 4.0]])
        assert masked_mean(values, torch.tensor([True, False])).item() == 2.0
        with pytest.raises(ValueError, match="broadcast"):
            masked_mean(values, torch.ones(3, dtype=torch.bool))

    def test_whiten(self):
        gen = torch.Generator().manual_seed(0)
        values = torch.randn(5, 7, generator=gen, dtype=F64) * 3 + 2
        mask = torch.rand(5, 7, generator=gen) < 0.6
        white = masked_whiten(values, mask)
        selected = white[mask]
        assert selected.mean().abs().item() < 1e-12
        assert selected.var(unbiased=True).item() == pytest.approx(1.0, rel=1e-6)
        assert (white[~mask] == 0).all()
        kept = masked_whiten(values, mask, shift_mean=False)[mask]
        assert kept.mean().item() == pytest.approx(values[mask].mean().item())

    def test_aggregations_hand_computed(self):
        losses = t([[1.0, 3.0, 100.0], [6.0, 100.0, 100.0], [100.0, 100.0, 100.0]])
        mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
        assert aggregate(losses, mask, "token-mean").item() == pytest.approx(10 / 3)
        assert aggregate(losses, mask, "seq-mean-token-mean").item() == pytest.approx(4.0)
        assert aggregate(losses, mask, "seq-mean-token-sum").item() == pytest.approx(5.0)
        # Dr.GRPO (verl's seq-mean-token-sum-norm): (1 + 3 + 6) / width 3, not / 2 sequences
        norm = aggregate(losses, mask, "seq-mean-token-sum-norm")
        assert norm.item() == pytest.approx(10 / 3)
        # the constant divisor: the configured maximum response length, not the width
        fixed = aggregate(losses, mask, "seq-mean-token-sum-norm", norm_length=512)
        assert fixed.item() == pytest.approx(10 / 512)
        # ignored by the other modes
        assert aggregate(losses, mask, "token-mean", norm_length=512).item() == \
            pytest.approx(10 / 3)
        with pytest.raises(ValueError, match="norm_length"):
            aggregate(losses, mask, "seq-mean-token-sum-norm", norm_length=0)
        with pytest.raises(ValueError):
            aggregate(losses, mask, "sum")
        with pytest.raises(ValueError):
            aggregate(losses[0], mask[0], "seq-mean-token-mean")


class TestBroadcast:
    def test_hand_computed(self):
        mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
        tokens = broadcast_to_tokens(torch.tensor([2.0, -1.0]), mask)
        torch.testing.assert_close(tokens, torch.tensor([[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]))

    def test_numpy_input_becomes_float32(self):
        tokens = broadcast_to_tokens(np.array([0.5, 1.5]), torch.ones(2, 2, dtype=torch.bool))
        assert tokens.dtype == torch.float32
        torch.testing.assert_close(tokens, torch.tensor([[0.5, 0.5], [1.5, 1.5]]))

    def test_bad_shapes_raise(self):
        with pytest.raises(ValueError):
            broadcast_to_tokens(torch.ones(3), torch.ones(2, 4))
        with pytest.raises(ValueError):
            broadcast_to_tokens(torch.ones(2, 1), torch.ones(2, 4))


# --------------------------------------------------------------------------- PPO loss


def loop_ppo_loss(logprobs, old, advantages, mask, low, high, dual_clip, aggregation):
    """Per-token Python reference of the PPO-clip loss."""
    per_seq, tokens = [], []
    for b in range(logprobs.shape[0]):
        seq = []
        for j in range(logprobs.shape[1]):
            if not mask[b, j]:
                continue
            ratio = math.exp(float(logprobs[b, j] - old[b, j]))
            adv = float(advantages[b, j])
            loss = max(-adv * ratio, -adv * min(max(ratio, 1 - low), 1 + high))
            if dual_clip is not None and adv < 0:
                loss = min(loss, -adv * dual_clip)
            seq.append(loss)
        tokens += seq
        if seq:
            per_seq.append(sum(seq) / len(seq) if aggregation.endswith("mean") else sum(seq))
    if aggregation == "token-mean":
        return sum(tokens) / len(tokens)
    if aggregation == "seq-mean-token-sum-norm":  # verl: sum of sums / padded width
        return sum(tokens) / logprobs.shape[1]
    return sum(per_seq) / len(per_seq)


class TestPPOClipLoss:
    def test_ratio_one_is_minus_mean_advantage(self):
        logprobs = t([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
        advantages = t([[1.0, 2.0], [3.0, 4.0]])
        mask = torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
        loss, stats = ppo_clip_policy_loss(logprobs, logprobs.detach(), advantages, mask)
        assert loss.item() == pytest.approx(-2.0)
        loss.backward()
        torch.testing.assert_close(logprobs.grad, t([[-1 / 3, -2 / 3], [-1.0, 0.0]]))
        assert stats["clip_fraction"].item() == 0.0
        assert stats["approx_kl"].item() == 0.0
        assert stats["ratio_mean"].item() == 1.0

    def test_clipping_hand_computed(self):
        old = t([[0.0, 0.0, 0.0, 0.0]]).log1p()  # log 1 = 0
        ratios = t([[1.5, 0.5, 1.25, 0.9]])
        logprobs = ratios.log().requires_grad_(True)
        advantages = t([[2.0, -1.0, 1.0, -1.0]])
        mask = torch.ones(1, 4, dtype=torch.bool)
        loss, stats = ppo_clip_policy_loss(logprobs, old, advantages, mask)
        # pessimistic max(-A r, -A clip(r)): 1.5 and 1.25 with A > 0 clip at 1.2,
        # 0.5 with A < 0 clips at 0.8, 0.9 is inside the range
        expected = [-2 * 1.2, 0.8, -1.2, 0.9]
        assert loss.item() == pytest.approx(sum(expected) / 4)
        assert stats["clip_fraction"].item() == pytest.approx(0.75)
        loss.backward()
        grads = logprobs.grad[0].tolist()
        assert grads[:3] == [0.0, 0.0, 0.0]  # clipped tokens get no gradient
        assert grads[3] == pytest.approx(0.9 / 4)  # d(-A r)/d logp = -A r
        # asymmetric: clip-higher 0.28 leaves ratio 1.25 alone, clips 1.5 at 1.28
        loss_high, _ = ppo_clip_policy_loss(
            logprobs, old, advantages, mask, clip_eps_low=0.2, clip_eps_high=0.28
        )
        assert loss_high.item() == pytest.approx((-2 * 1.28 + 0.8 - 1.25 + 0.9) / 4)

    def test_dual_clip_bounds_negative_advantages(self):
        old = torch.zeros(1, 2, dtype=F64)
        logprobs = t([[math.log(10.0), math.log(10.0)]])
        advantages = t([[-1.0, 1.0]])
        mask = torch.ones(1, 2, dtype=torch.bool)
        plain, _ = ppo_clip_policy_loss(logprobs, old, advantages, mask)
        dual, stats = ppo_clip_policy_loss(logprobs, old, advantages, mask, dual_clip=3.0)
        assert plain.item() == pytest.approx((10.0 - 1.2) / 2)
        assert dual.item() == pytest.approx((3.0 - 1.2) / 2)
        assert stats["dual_clip_fraction"].item() == pytest.approx(0.5)

    @pytest.mark.parametrize("aggregation", AGGREGATIONS)
    @pytest.mark.parametrize(("low", "high", "dual"), [(0.2, 0.2, None), (0.2, 0.28, 3.0)])
    @pytest.mark.parametrize("seed", range(5))
    def test_matches_loop_reference(self, aggregation, low, high, dual, seed):
        logprobs, old, advantages, mask = random_batch(seed)
        loss, _ = ppo_clip_policy_loss(
            logprobs,
            old,
            advantages,
            mask,
            clip_eps_low=low,
            clip_eps_high=high,
            dual_clip=dual,
            aggregation=aggregation,
        )
        expected = loop_ppo_loss(logprobs, old, advantages, mask, low, high, dual, aggregation)
        assert loss.item() == pytest.approx(expected, rel=1e-12)

    def test_per_sequence_advantages_broadcast(self):
        logprobs, old, _, mask = random_batch(0)
        step_adv = t([0.5, -1.0, 2.0, 0.0])
        per_seq, _ = ppo_clip_policy_loss(logprobs, old, step_adv, mask)
        per_token, _ = ppo_clip_policy_loss(
            logprobs, old, broadcast_to_tokens(step_adv, mask), mask
        )
        assert per_seq.item() == pytest.approx(per_token.item(), rel=1e-12)

    def test_bad_arguments_raise(self):
        logprobs, old, advantages, mask = random_batch(0)
        with pytest.raises(ValueError):
            ppo_clip_policy_loss(logprobs, old, advantages, mask, dual_clip=0.5)
        with pytest.raises(ValueError):
            ppo_clip_policy_loss(logprobs, old, advantages, mask, clip_eps_low=1.0)
        with pytest.raises(ValueError):
            ppo_clip_policy_loss(logprobs, old[:, :2], advantages, mask)


# --------------------------------------------------------------------------- value loss


def loop_gspo_loss(logprobs, old, advantages, mask, low, high):
    """Per-sequence Python reference of GSPO's loss value (seq-mean-token-mean)."""
    per_seq = []
    for b in range(logprobs.shape[0]):
        tokens = [j for j in range(logprobs.shape[1]) if mask[b, j]]
        if not tokens:
            continue
        mean_log_ratio = sum(float(logprobs[b, j] - old[b, j]) for j in tokens) / len(tokens)
        ratio = math.exp(min(mean_log_ratio, 10.0))
        losses = []
        for j in tokens:
            adv = float(advantages[b, j])
            losses.append(max(-adv * ratio, -adv * min(max(ratio, 1 - low), 1 + high)))
        per_seq.append(sum(losses) / len(losses))
    return sum(per_seq) / len(per_seq)


class TestGSPOLoss:
    def test_hand_computed_sequence_ratio_and_gradient(self):
        # token ratios 1.5 and 0.5: the sequence ratio is their geometric mean sqrt(0.75)
        old = torch.zeros(1, 3, dtype=F64)
        logprobs = t([[math.log(1.5), math.log(0.5), 5.0]], requires_grad=True)
        mask = torch.tensor([[1, 1, 0]], dtype=torch.bool)
        loss, stats = gspo_policy_loss(logprobs, old, t([1.0]), mask,
                                       clip_eps_low=0.2, clip_eps_high=0.2)
        ratio = math.sqrt(0.75)  # 0.866, inside [0.8, 1.2]: not clipped
        assert loss.item() == pytest.approx(-ratio)
        assert stats["ratio_mean"].item() == pytest.approx(ratio)
        assert stats["clip_fraction"].item() == 0.0
        assert stats["dual_clip_fraction"].item() == 0.0
        loss.backward()
        # each token: d(-A s exp(logp - sg logp))/dlogp = -A s, averaged over 2 tokens
        torch.testing.assert_close(logprobs.grad, t([[-ratio / 2, -ratio / 2, 0.0]]))

    def test_gradient_is_the_sequence_objectives(self):
        # GSPO-token with one advantage per sequence has GSPO's gradient:
        # d/dtheta of -A * exp(mean_t(logp_t - old_t)), unclipped
        logprobs, old, _, mask = random_batch(3)
        advantages = t([0.7, -1.3, 0.4, 2.0])
        lp = logprobs.clone().requires_grad_(True)
        loss, _ = gspo_policy_loss(lp, old, advantages, mask, clip_eps_low=0.99,
                                   clip_eps_high=100.0)
        loss.backward()
        lp2 = logprobs.clone().requires_grad_(True)
        lengths = mask.sum(-1)
        has = lengths > 0
        seq = torch.where(mask, lp2 - old, 0.0).sum(-1)[has] / lengths[has]
        (-(advantages[has] * seq.exp()).mean()).backward()
        torch.testing.assert_close(lp.grad, lp2.grad)

    def test_clipped_sequence_gets_no_gradient(self):
        old = torch.zeros(2, 2, dtype=F64)
        # sequence 0: ratio 1.5 with A > 0 clips at 1.0004; sequence 1: ratio 1.0001
        logprobs = t([[math.log(1.5)] * 2, [math.log(1.0001)] * 2], requires_grad=True)
        mask = torch.ones(2, 2, dtype=torch.bool)
        loss, stats = gspo_policy_loss(logprobs, old, t([1.0, 1.0]), mask,
                                       clip_eps_low=3e-4, clip_eps_high=4e-4)
        assert loss.item() == pytest.approx((-1.0004 - 1.0001) / 2)
        assert stats["clip_fraction"].item() == pytest.approx(0.5)
        loss.backward()
        assert logprobs.grad[0].tolist() == [0.0, 0.0]
        assert logprobs.grad[1].tolist() == pytest.approx([-1.0001 / 4] * 2)

    @pytest.mark.parametrize(("low", "high"), [(0.2, 0.2), (3e-4, 4e-4)])
    @pytest.mark.parametrize("seed", range(5))
    def test_matches_loop_reference(self, low, high, seed):
        logprobs, old, advantages, mask = random_batch(seed)
        loss, _ = gspo_policy_loss(logprobs, old, advantages, mask, clip_eps_low=low,
                                   clip_eps_high=high)
        expected = loop_gspo_loss(logprobs, old, advantages, mask, low, high)
        assert loss.item() == pytest.approx(expected, rel=1e-12)

    @pytest.mark.parametrize("seed", range(3))
    def test_one_token_responses_are_ppo_clip(self, seed):
        # with one token per response the sequence ratio is the token ratio
        logprobs, old, advantages, _ = random_batch(seed, batch=6, length=1)
        mask = torch.ones(6, 1, dtype=torch.bool)
        gspo, _ = gspo_policy_loss(logprobs, old, advantages, mask, clip_eps_low=0.1,
                                   clip_eps_high=0.3)
        ppo, _ = ppo_clip_policy_loss(logprobs, old, advantages, mask, clip_eps_low=0.1,
                                      clip_eps_high=0.3, aggregation="seq-mean-token-mean")
        assert gspo.item() == pytest.approx(ppo.item(), rel=1e-12)

    def test_log_ratio_clamped_above_at_10(self):
        old = torch.zeros(1, 1, dtype=F64)
        logprobs = t([[12.0]], requires_grad=True)
        loss, _ = gspo_policy_loss(logprobs, old, t([-1.0]), torch.ones(1, 1, dtype=torch.bool),
                                   clip_eps_low=0.2, clip_eps_high=0.2)
        assert loss.item() == pytest.approx(math.exp(10.0))
        loss.backward()
        assert logprobs.grad.item() == 0.0  # beyond the clamp

    def test_bad_inputs_raise(self):
        lp = torch.zeros(2, 3, dtype=F64)
        with pytest.raises(ValueError, match="clip_eps_low"):
            gspo_policy_loss(lp, lp, lp, lp > -1, clip_eps_low=1.0, clip_eps_high=0.2)
        with pytest.raises(ValueError, match="shape"):
            gspo_policy_loss(lp, lp[:, :2], lp, lp > -1, clip_eps_low=0.2, clip_eps_high=0.2)


class TestPolicyLossRecipe:
    RECIPE = LossRecipe(clip_eps_low=0.2, clip_eps_high=0.28, dual_clip=3.0,
                        aggregation="token-mean", kl_coef=0.1, kl_estimator="k3",
                        entropy_coef=0.01)

    def test_gspo_clip_term_is_seq_mean_token_mean_kl_and_entropy_keep_the_recipe(self):
        logprobs, old, advantages, mask = random_batch(1)
        ref, entropy = old * 1.1, -logprobs
        recipe = dataclasses.replace(self.RECIPE, policy_loss="gspo")
        loss, stats = policy_loss(logprobs, old, advantages, mask, recipe,
                                  ref_log_probs=ref, entropy=entropy)
        clip, _ = gspo_policy_loss(logprobs, old, advantages, mask, clip_eps_low=0.2,
                                   clip_eps_high=0.28, aggregation="seq-mean-token-mean")
        kl = masked_mean(kl_penalty(logprobs, ref, "k3", response_mask=mask), mask)
        ent = masked_mean(entropy, mask)
        assert stats["policy_loss"].item() == pytest.approx(clip.item(), rel=1e-12)
        assert loss.item() == pytest.approx(clip.item() - 0.01 * ent.item() + 0.1 * kl.item(),
                                            rel=1e-12)
        assert "seq_ratio_max" not in stats

    def test_seq_mean_token_sum_norm_divides_every_term_by_norm_length(self):
        logprobs, old, advantages, mask = random_batch(2)
        ref, entropy = old * 1.1, -logprobs
        recipe = dataclasses.replace(self.RECIPE, aggregation="seq-mean-token-sum-norm",
                                     norm_length=512)
        loss, stats = policy_loss(logprobs, old, advantages, mask, recipe,
                                  ref_log_probs=ref, entropy=entropy)
        clip, _ = ppo_clip_policy_loss(logprobs, old, advantages, mask, clip_eps_low=0.2,
                                       clip_eps_high=0.28, dual_clip=3.0,
                                       aggregation="seq-mean-token-sum")
        sequences = int(mask.any(-1).sum())  # seq-mean-token-sum averages over these
        kl = masked_sum(kl_penalty(logprobs, ref, "k3", response_mask=mask), mask) / 512
        ent = masked_sum(entropy, mask) / 512
        assert stats["policy_loss"].item() == pytest.approx(clip.item() * sequences / 512,
                                                            rel=1e-12)
        assert stats["kl_ref"].item() == pytest.approx(kl.item(), rel=1e-12)
        assert stats["entropy"].item() == pytest.approx(ent.item(), rel=1e-12)

    def test_token_weights_reach_the_kl_term_only_with_weight_kl(self):
        logprobs, old, advantages, mask = random_batch(3)
        ref = old * 1.1
        weights = torch.rand(logprobs.shape, dtype=logprobs.dtype,
                             generator=torch.Generator().manual_seed(5)) * 2
        recipe = dataclasses.replace(self.RECIPE, entropy_coef=0.0)
        kl = kl_penalty(logprobs, ref, "k3", response_mask=mask)
        _, plain = policy_loss(logprobs, old, advantages, mask, recipe, ref_log_probs=ref,
                               token_weights=weights)
        assert plain["kl_ref"].item() == pytest.approx(masked_mean(kl, mask).item(),
                                                       rel=1e-12)
        weighted = dataclasses.replace(recipe, weight_kl=True)
        loss, stats = policy_loss(logprobs, old, advantages, mask, weighted,
                                  ref_log_probs=ref, token_weights=weights)
        expected_kl = masked_mean(kl * weights, mask)
        assert stats["kl_ref"].item() == pytest.approx(expected_kl.item(), rel=1e-12)
        assert stats["policy_loss"].item() == pytest.approx(plain["policy_loss"].item(),
                                                            rel=1e-12)
        assert loss.item() == pytest.approx(
            stats["policy_loss"].item() + 0.1 * expected_kl.item(), rel=1e-12)
        _, unweighted = policy_loss(logprobs, old, advantages, mask, weighted,
                                    ref_log_probs=ref)  # no weights: nothing to apply
        assert unweighted["kl_ref"].item() == pytest.approx(plain["kl_ref"].item(), rel=1e-12)

    def test_unknown_policy_loss_raises(self):
        lp, old, adv, mask = random_batch(0)
        recipe = dataclasses.replace(self.RECIPE, policy_loss="sapo", kl_coef=0.0,
                                     entropy_coef=0.0)
        with pytest.raises(ValueError, match="policy_loss"):
            policy_loss(lp, old, adv, mask, recipe)


class TestValueLoss:
    def test_hand_computed(self):
        values = t([1.0, 0.0, 3.0], requires_grad=True)
        old = t([0.0, 0.0, 0.0])
        returns = t([2.0, 1.0, 0.0])
        mask = torch.tensor([True, True, False])
        loss, stats = clipped_value_loss(values, old, returns, mask, clip_range=0.5)
        # row 0: unclipped (1-2)^2 = 1, clipped (0.5-2)^2 = 2.25 -> 2.25 (no gradient)
        # row 1: (0-1)^2 = 1 both; row 2 masked
        assert loss.item() == pytest.approx(0.5 * (2.25 + 1.0) / 2)
        assert stats["clip_fraction"].item() == pytest.approx(0.5)
        loss.backward()
        torch.testing.assert_close(values.grad, t([0.0, -0.5, 0.0]))
        unclipped, _ = clipped_value_loss(values, old, returns, mask, clip_range=None)
        assert unclipped.item() == pytest.approx(0.5 * (1.0 + 1.0) / 2)

    def test_explained_variance(self):
        returns = t([1.0, 2.0, 3.0, 4.0])
        mask = torch.ones(4, dtype=torch.bool)
        _, perfect = clipped_value_loss(returns.clone(), returns, returns, mask)
        _, constant = clipped_value_loss(torch.full((4,), 2.5, dtype=F64), returns, returns, mask)
        assert perfect["explained_variance"].item() == pytest.approx(1.0)
        assert constant["explained_variance"].item() == pytest.approx(0.0)

    def test_step_value_loss_counts_every_step(self):
        """The learner's per-step value loss: NumPy old values and returns, no mask."""
        values = torch.tensor([1.0, 0.0, 2.0], requires_grad=True)
        old = np.array([0.5, 0.0, 0.0])
        returns = np.array([0.0, 1.0, 2.0])
        # row 0: unclipped 1, clipped (0.7-0)^2 = 0.49 -> 1; row 1: 1 both;
        # row 2: unclipped 0, clipped (0.2-2)^2 = 3.24 -> 3.24
        loss = step_value_loss(values, old, returns, clip_range=0.2)
        assert loss.dtype == torch.float32
        assert loss.item() == pytest.approx(0.5 * (1.0 + 1.0 + 3.24) / 3)
        unclipped = step_value_loss(values, old, returns, clip_range=None)
        assert unclipped.item() == pytest.approx(0.5 * (1.0 + 1.0 + 0.0) / 3)


# --------------------------------------------------------------------------- KL, entropy


class TestKL:
    def test_hand_computed(self):
        logprobs = t([math.log(0.5)])
        ref = t([math.log(0.25)])
        log_r = math.log(0.5)
        assert kl_penalty(logprobs, ref, "k1").item() == pytest.approx(-log_r)
        assert kl_penalty(logprobs, ref, "k2").item() == pytest.approx(0.5 * log_r**2)
        k3 = 0.5 - log_r - 1
        assert kl_penalty(logprobs, ref, "k3").item() == pytest.approx(k3)
        assert kl_penalty(logprobs, ref, "low_var_kl").item() == pytest.approx(k3)

    def test_clamp_and_overflow(self):
        logprobs = t([-100.0, 0.0])
        ref = t([0.0, -100.0])
        clamped = kl_penalty(logprobs, ref, "low_var_kl")
        assert torch.isfinite(clamped).all() and clamped.max().item() == 10.0
        unclamped = kl_penalty(logprobs, ref, "k3", clamp=None)
        assert torch.isfinite(unclamped).all() and unclamped.max().item() > 1e8

    def test_unbiased_estimators_agree_with_exact_kl(self):
        gen = torch.Generator().manual_seed(0)
        p = torch.softmax(torch.randn(6, generator=gen, dtype=F64), 0)
        q = torch.softmax(torch.randn(6, generator=gen, dtype=F64), 0)
        exact = (p * (p / q).log()).sum().item()
        samples = torch.multinomial(p, 200_000, replacement=True, generator=gen)
        logp, logq = p.log()[samples], q.log()[samples]
        for kind in ("k1", "k3"):
            estimate = kl_penalty(logp, logq, kind, clamp=None).mean().item()
            assert estimate == pytest.approx(exact, rel=0.03)
        assert (kl_penalty(logp, logq, "k3", clamp=None) >= 0).all()

    def test_unknown_kind_raises(self):
        with pytest.raises(ValueError):
            kl_penalty(t([0.0]), t([0.0]), "k4")


class TestEntropyAndLogprobs:
    def test_uniform_and_against_torch_distributions(self):
        assert entropy_from_logits(torch.zeros(3, 8)).tolist() == pytest.approx([math.log(8)] * 3)
        logits = torch.randn(4, 5, 11, generator=torch.Generator().manual_seed(0), dtype=F64)
        expected = torch.distributions.Categorical(logits=logits).entropy()
        torch.testing.assert_close(entropy_from_logits(logits), expected)

    def test_minus_inf_logits_are_finite_with_finite_gradients(self):
        logits = t([[0.0, 0.0, -math.inf, -math.inf]], requires_grad=True)
        entropy = entropy_from_logits(logits)
        assert entropy.item() == pytest.approx(math.log(2))
        entropy.sum().backward()
        assert torch.isfinite(logits.grad).all()

    def test_half_precision_is_computed_in_float32(self):
        logits = torch.randn(2, 3, 7).to(torch.bfloat16)
        assert entropy_from_logits(logits).dtype == torch.float32

    def test_logprobs_from_logits(self):
        logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(1), dtype=F64)
        tokens = torch.randint(0, 7, (2, 3), generator=torch.Generator().manual_seed(2))
        expected = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]
        torch.testing.assert_close(logprobs_from_logits(logits, tokens), expected)


# --------------------------------------------------------------------------- mask invariance


def _loss_functions():
    """name -> f(logprobs, old, advantages, mask, values) -> scalar loss."""

    def kl(kind):
        return lambda lp, old, adv, mask, v: masked_mean(
            kl_penalty(lp, old, kind, response_mask=mask), mask
        )

    def ppo(aggregation):
        return lambda lp, old, adv, mask, v: ppo_clip_policy_loss(
            lp, old, adv, mask, dual_clip=3.0, aggregation=aggregation
        )[0]

    functions = {f"ppo/{agg}": ppo(agg) for agg in AGGREGATIONS}
    functions.update({f"gspo/{agg}": lambda lp, old, adv, mask, v, agg=agg: gspo_policy_loss(
        lp, old, adv, mask, clip_eps_low=0.2, clip_eps_high=0.28, aggregation=agg)[0]
        for agg in AGGREGATIONS})
    functions["value"] = lambda lp, old, adv, mask, v: clipped_value_loss(v, old, adv, mask)[0]
    functions["value/seq"] = lambda lp, old, adv, mask, v: clipped_value_loss(
        v, old, adv, mask, aggregation="seq-mean-token-sum"
    )[0]
    functions.update({f"kl/{kind}": kl(kind) for kind in KL_KINDS})
    functions["entropy"] = lambda lp, old, adv, mask, v: masked_mean(
        entropy_from_logits(torch.stack([lp, old, 2 * lp], -1), response_mask=mask), mask
    )
    functions["whiten"] = lambda lp, old, adv, mask, v: masked_whiten(lp, mask).pow(3).sum()
    functions["broadcast"] = lambda lp, old, adv, mask, v: masked_mean(
        broadcast_to_tokens(adv[:, 0], mask) * lp, mask
    )
    return functions


@pytest.mark.parametrize("name", sorted(_loss_functions()))
@pytest.mark.parametrize("seed", range(3))
def test_masked_tokens_never_change_loss_or_gradient(name, seed):
    fn = _loss_functions()[name]
    logprobs, old, advantages, mask = random_batch(seed)
    values = torch.randn(logprobs.shape, generator=torch.Generator().manual_seed(seed), dtype=F64)

    def run(garbage):
        inputs = [x.clone() for x in (logprobs, old, advantages, values)]
        if garbage is not None:
            for x in inputs:
                x[~mask] = garbage
        lp, v = inputs[0].requires_grad_(True), inputs[3].requires_grad_(True)
        loss = fn(lp, inputs[1], inputs[2], mask, v)
        loss.backward()
        return loss.detach(), lp.grad, v.grad

    clean_loss, clean_lp_grad, clean_v_grad = run(None)
    for garbage in (1e6, -1e6, math.inf, -math.inf, math.nan):
        loss, lp_grad, v_grad = run(garbage)
        torch.testing.assert_close(loss, clean_loss, rtol=0, atol=0)
        for grad, clean in ((lp_grad, clean_lp_grad), (v_grad, clean_v_grad)):
            if clean is None:
                assert grad is None
                continue
            torch.testing.assert_close(grad, clean, rtol=0, atol=0)
            assert (grad[~mask] == 0).all()


@pytest.mark.parametrize("garbage", [1e6, math.inf, -math.inf, math.nan])
def test_masked_tokens_never_change_diagnostics(garbage):
    logprobs, old, advantages, mask = random_batch(7)
    dirty = [x.clone() for x in (logprobs, old, advantages)]
    for x in dirty:
        x[~mask] = garbage
    for fn in (
        lambda lp, o, a: ppo_clip_policy_loss(lp, o, a, mask, dual_clip=2.0)[1],
        lambda lp, o, a: gspo_policy_loss(lp, o, a, mask, clip_eps_low=0.1,
                                          clip_eps_high=0.2)[1],
        lambda lp, o, a: clipped_value_loss(lp, o, a, mask, clip_range=0.1)[1],
    ):
        clean, noisy = fn(logprobs, old, advantages), fn(*dirty)
        assert clean.keys() == noisy.keys()
        for key in clean:
            torch.testing.assert_close(noisy[key], clean[key], rtol=0, atol=0)
