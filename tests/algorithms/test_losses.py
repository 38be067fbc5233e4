"""Tests for algorithms.losses: hand cases, a per-token loop reference, mask invariance."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from algorithms.losses import (  # noqa: E402
    AGGREGATIONS,
    KL_KINDS,
    aggregate,
    broadcast_to_tokens,
    clipped_value_loss,
    entropy_from_logits,
    kl_penalty,
    logprobs_from_logits,
    masked_mean,
    masked_sum,
    masked_whiten,
    ppo_clip_policy_loss,
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
        lambda lp, o, a: clipped_value_loss(lp, o, a, mask, clip_range=0.1)[1],
    ):
        clean, noisy = fn(logprobs, old, advantages), fn(*dirty)
        assert clean.keys() == noisy.keys()
        for key in clean:
            torch.testing.assert_close(noisy[key], clean[key], rtol=0, atol=0)
