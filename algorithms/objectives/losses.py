"""Token-level losses for PPO / GRPO / GiGPO updates of a language-model policy (torch).

Shapes: ``B`` sequences (one per agent step: the step's response), ``T`` response tokens,
``V`` vocabulary. ``response_mask`` (B, T) is True (or nonzero) on the tokens that count.

Masking contract: every function given a mask *selects* with it (``torch.where``) before
any arithmetic, so whatever sits under a masked token (padding garbage, ``inf``, ``nan``)
never changes a loss, a statistic or a gradient, and masked positions get exactly zero
gradient. (``kl_penalty`` and ``entropy_from_logits`` take the mask as an optional
``response_mask``; pass it when padding may hold non-finite values.)

The advantages come from :mod:`algorithms.objectives.advantages` (one value per step, broadcast to
the step's tokens with :func:`broadcast_to_tokens`). GiGPO (Feng et al., 2025,
arXiv:2505.10978) optimizes the PPO-clip objective with its combined advantage (Eq. 8)
and a KL penalty to the reference policy (the low-variance k3 estimator); PPO adds a
critic trained with :func:`clipped_value_loss`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

__all__ = [
    "AGGREGATIONS",
    "KL_KINDS",
    "POLICY_LOSSES",
    "LossRecipe",
    "aggregate",
    "broadcast_to_tokens",
    "clipped_value_loss",
    "entropy_from_logits",
    "gspo_policy_loss",
    "kl_penalty",
    "logprobs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_whiten",
    "policy_loss",
    "ppo_clip_policy_loss",
]

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                      "seq-mean-token-sum-norm"]
KLKind = Literal["k1", "k2", "k3", "low_var_kl"]
PolicyLossKind = Literal["vanilla", "gspo"]

AGGREGATIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                 "seq-mean-token-sum-norm")
POLICY_LOSSES: tuple[str, ...] = ("vanilla", "gspo")
KL_KINDS: tuple[str, ...] = ("k1", "k2", "k3", "low_var_kl")

# exp() of a log-ratio beyond this bound overflows float32/bf16 and means the token's
# probability changed by a factor of e**20; such ratios are clamped (zero gradient there).
_MAX_LOG_RATIO = 20.0


def _bool_mask(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask`` as a bool tensor broadcast to ``like``'s shape."""
    if mask.dtype != torch.bool:
        mask = mask != 0
    mask = mask.to(like.device)
    try:
        return mask.expand_as(like)
    except RuntimeError as error:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to {tuple(like.shape)}"
        ) from error


def _select(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` where ``mask``, exactly 0 elsewhere (and 0 gradient there)."""
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))


def masked_sum(
    values: torch.Tensor, mask: torch.Tensor, dim: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    """Sum of ``values`` over the positions where ``mask`` is set.

    Args:
        values: (...) tensor.
        mask: bool or 0/1 tensor broadcastable to ``values``.
        dim: dimension(s) to reduce; None reduces everything.

    Returns:
        The reduced tensor (0-d when ``dim`` is None).
    """
    mask = _bool_mask(mask, values)
    selected = _select(values, mask)
    return selected.sum() if dim is None else selected.sum(dim=dim)


def masked_mean(
    values: torch.Tensor, mask: torch.Tensor, dim: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    """Mean of ``values`` over the positions where ``mask`` is set; 0 where none is.

    Args:
        values: (...) tensor.
        mask: bool or 0/1 tensor broadcastable to ``values``.
        dim: dimension(s) to reduce; None reduces everything.

    Returns:
        The reduced tensor (0-d when ``dim`` is None). An empty selection gives 0 (not
        NaN), still attached to the graph.
    """
    mask = _bool_mask(mask, values)
    total = masked_sum(values, mask, dim)
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return total / count.clamp_min(1).to(total.dtype)


def _masked_variance(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Population variance of the masked positions (0-d)."""
    return masked_mean((values - masked_mean(values, mask)) ** 2, mask)


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, *, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """Whiten ``values`` with the mean and unbiased variance of the masked positions.

    ``(x - mean) / sqrt(var + eps)`` (``mean`` added back when ``shift_mean`` is False),
    a common normalization of PPO's GAE advantages over a batch.

    Args:
        values: (...) tensor.
        mask: bool or 0/1 tensor broadcastable to ``values``.
        shift_mean: subtract the mean (True) or keep it.
        eps: added to the variance.

    Returns:
        Tensor shaped like ``values``; exactly 0 at masked positions.
    """
    mask = _bool_mask(mask, values)
    mean = masked_mean(values, mask)
    centered = _select(values - mean, mask)
    count = mask.sum().to(values.dtype)
    variance = (centered**2).sum() / (count - 1).clamp_min(1)
    whitened = centered * torch.rsqrt(variance + eps)
    if not shift_mean:
        whitened = whitened + mean
    return _select(whitened, mask)


def aggregate(
    loss_per_token: torch.Tensor, mask: torch.Tensor, aggregation: Aggregation = "token-mean",
    *, norm_length: int | None = None,
) -> torch.Tensor:
    """Reduce a (B, T) per-token loss to a scalar.

    Args:
        loss_per_token: (B, T) tensor (any shape for "token-mean").
        mask: (B, T) bool or 0/1 response mask.
        aggregation: "token-mean": mean over all unmasked tokens of the batch (each
            token weighs the same; long responses weigh more). "seq-mean-token-mean":
            mean over each sequence's tokens, then over sequences (each sequence weighs
            the same; GRPO's original form). "seq-mean-token-sum": sum over each
            sequence's tokens, then mean over sequences. Sequences without any unmasked
            token are left out of sequence means. "seq-mean-token-sum-norm" (Dr.GRPO,
            Liu et al., 2025, arXiv:2503.20783): the sum over every unmasked token of
            the batch divided by a constant, ``norm_length`` -- verl's ``agg_loss``
            divides by ``loss_mask.shape[-1]``, the padded response width, which is the
            configured maximum response length in verl's rollouts (despite the name,
            the sequences are summed, not averaged).
        norm_length: the constant divisor of "seq-mean-token-sum-norm" (> 0); ``None``:
            ``T``, the mask's width (verl's divisor when responses are padded to the
            maximum length). Ignored by the other aggregations.

    Returns:
        0-d tensor.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    mask = _bool_mask(mask, loss_per_token)
    if aggregation == "token-mean":
        return masked_mean(loss_per_token, mask)
    if loss_per_token.dim() != 2:
        raise ValueError(f"{aggregation} needs (B, T) losses, got {tuple(loss_per_token.shape)}")
    if aggregation == "seq-mean-token-sum-norm":
        divisor = loss_per_token.shape[-1] if norm_length is None else norm_length
        if not divisor > 0:
            raise ValueError(f"norm_length must be > 0, got {divisor}")
        return masked_sum(loss_per_token, mask) / float(divisor)
    if aggregation == "seq-mean-token-mean":
        per_sequence = masked_mean(loss_per_token, mask, dim=-1)
    else:
        per_sequence = masked_sum(loss_per_token, mask, dim=-1)
    return masked_mean(per_sequence, mask.any(dim=-1))


def broadcast_to_tokens(
    step_values: torch.Tensor | np.ndarray, response_mask: torch.Tensor
) -> torch.Tensor:
    """Give every response token its step's value (e.g. the step's advantage).

    Args:
        step_values: (B,) one value per sequence (tensor or NumPy array).
        response_mask: (B, T) bool or 0/1 mask.

    Returns:
        (B, T) tensor on the mask's device: ``step_values[b]`` on unmasked tokens, 0
        elsewhere. Float64 NumPy input becomes float32 (the training dtype).
    """
    if isinstance(step_values, np.ndarray):
        dtype = torch.float32 if step_values.dtype.kind == "f" else None
        step_values = torch.as_tensor(step_values, dtype=dtype)
    step_values = step_values.to(response_mask.device)
    if step_values.dim() != 1 or response_mask.dim() != 2:
        raise ValueError(
            f"need (B,) step values and a (B, T) mask, got {tuple(step_values.shape)} and "
            f"{tuple(response_mask.shape)}"
        )
    if step_values.shape[0] != response_mask.shape[0]:
        raise ValueError(
            f"{step_values.shape[0]} step values for {response_mask.shape[0]} sequences"
        )
    per_token = step_values[:, None].expand(response_mask.shape)
    return _select(per_token, _bool_mask(response_mask, per_token))


def ppo_clip_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_low: float | None = None,
    clip_eps_high: float | None = None,
    dual_clip: float | None = None,
    aggregation: Aggregation = "token-mean",
    norm_length: int | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip policy loss (Schulman et al., 2017), as GRPO and GiGPO use it.

    Per token, ``ratio = exp(logp - old_logp)`` and
    ``loss = max(-A * ratio, -A * clip(ratio, 1 - eps_low, 1 + eps_high))``; with
    ``dual_clip = c`` (Ye et al., 2020), tokens with ``A < 0`` are further bounded by
    ``-A * c`` so that a huge ratio on a bad action cannot blow up the loss.
    The per-token loss is reduced by ``aggregation`` (see :func:`aggregate`).

    Args:
        logprobs: (B, T) log-probabilities of the sampled tokens under the policy being
            trained (requires grad).
        old_logprobs: (B, T) the same under the policy that sampled them (no grad).
        advantages: (B, T) per-token advantages, or (B,) per-sequence ones (broadcast
            to all of the sequence's tokens).
        response_mask: (B, T) bool or 0/1 mask of the tokens that count.
        clip_eps: symmetric clip range, used for a side not given below.
        clip_eps_low: lower clip range (ratio >= 1 - clip_eps_low); None -> clip_eps.
        clip_eps_high: upper clip range (ratio <= 1 + clip_eps_high); None -> clip_eps.
            A larger high side is DAPO's "clip-higher".
        dual_clip: None, or the dual-clip constant c > 1.
        aggregation: one of :data:`AGGREGATIONS` (see :func:`aggregate`).
        norm_length: the divisor of "seq-mean-token-sum-norm" (see :func:`aggregate`).
        token_weights: (B, T) no-grad weights multiplying each token's clipped loss
            before aggregation (the behaviour-policy weights of
            :mod:`algorithms.objectives.behaviour_weights`), or ``None``.

    Returns:
        ``(loss, stats)``: the 0-d loss, and detached 0-d diagnostics over unmasked
        tokens: ``clip_fraction`` (the clipped branch is active), ``dual_clip_fraction``,
        ``approx_kl`` (k3 estimate of KL(old || new): ``ratio - 1 - log ratio``) and
        ``ratio_mean``. Log-ratios are clamped to +-20 before ``exp``.
    """
    low = clip_eps if clip_eps_low is None else clip_eps_low
    high = clip_eps if clip_eps_high is None else clip_eps_high
    if not (0.0 <= low < 1.0 and high >= 0.0):
        raise ValueError(f"need 0 <= clip_eps_low < 1 and clip_eps_high >= 0, got {low}, {high}")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    if advantages.dim() == 1 and logprobs.dim() == 2:
        advantages = advantages[:, None].expand_as(logprobs)
    if not logprobs.shape == old_logprobs.shape == advantages.shape:
        raise ValueError(
            f"shape mismatch: logprobs {tuple(logprobs.shape)}, old_logprobs "
            f"{tuple(old_logprobs.shape)}, advantages {tuple(advantages.shape)}"
        )
    mask = _bool_mask(response_mask, logprobs)
    advantages = _select(advantages.to(logprobs.dtype), mask)
    log_ratio = _select(logprobs - old_logprobs.detach().to(logprobs.dtype), mask)
    log_ratio = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)

    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - low, 1.0 + high)
    per_token = torch.maximum(unclipped, clipped)
    dual_active = torch.zeros_like(mask)
    if dual_clip is not None:
        bound = -advantages * dual_clip
        dual_active = (advantages < 0) & (per_token > bound)
        per_token = torch.where(advantages < 0, torch.minimum(per_token, bound), per_token)
    if token_weights is not None:
        per_token = per_token * token_weights.detach().to(per_token.dtype)
    loss = aggregate(per_token, mask, aggregation, norm_length=norm_length)

    with torch.no_grad():
        stats = {
            "clip_fraction": masked_mean((clipped > unclipped).to(ratio.dtype), mask),
            "dual_clip_fraction": masked_mean(dual_active.to(ratio.dtype), mask),
            "approx_kl": masked_mean(ratio - 1.0 - log_ratio, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    return loss, stats


def gspo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_eps_low: float,
    clip_eps_high: float,
    aggregation: Aggregation = "seq-mean-token-mean",
    norm_length: int | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO's sequence-level clipped policy loss (Zheng et al., 2025, arXiv:2507.18071).

    The importance ratio of a response is the geometric mean of its tokens' ratios,
    ``s_i = exp(mean_t (logp_t - old_logp_t))`` over its unmasked tokens, and every token
    of the response uses that one ratio in the clipped objective. As verl's
    ``compute_policy_loss_gspo`` writes it, each token carries
    ``log s_it = sg[log s_i] + logp_t - sg[logp_t]`` (the value is ``log s_i``, the
    gradient is that of ``logp_t``; GSPO-token), clamped above at 10 before ``exp``;
    then ``loss = max(-A * s_it, -A * clip(s_it, 1 - eps_low, 1 + eps_high))`` per token
    (no dual clip), reduced by ``aggregation``.

    Args:
        logprobs: (B, T) log-probabilities of the sampled tokens under the policy being
            trained (requires grad).
        old_logprobs: (B, T) the same under the policy that sampled them.
        advantages: (B, T) per-token or (B,) per-sequence advantages.
        response_mask: (B, T) bool or 0/1 mask of the tokens that count.
        clip_eps_low: the ratio is clipped at ``1 - clip_eps_low`` (verl-agent's GSPO
            example: 3e-4).
        clip_eps_high: the ratio is clipped at ``1 + clip_eps_high`` (example: 4e-4).
        aggregation: one of :data:`AGGREGATIONS`; verl always uses
            "seq-mean-token-mean" for GSPO, whatever its ``loss_agg_mode`` says.
        norm_length: the divisor of "seq-mean-token-sum-norm".
        token_weights: (B, T) no-grad weights multiplying each token's clipped loss, or
            ``None`` (as :func:`ppo_clip_policy_loss`).

    Returns:
        ``(loss, stats)``: the 0-d loss and detached 0-d ``clip_fraction``,
        ``dual_clip_fraction`` (always 0), ``approx_kl`` (k3 estimate over tokens, as
        :func:`ppo_clip_policy_loss`), ``ratio_mean`` (of the sequence ratios, over
        tokens) and ``seq_ratio_max``.
    """
    if not (0.0 <= clip_eps_low < 1.0 and clip_eps_high >= 0.0):
        raise ValueError(f"need 0 <= clip_eps_low < 1 and clip_eps_high >= 0, got "
                         f"{clip_eps_low}, {clip_eps_high}")
    if advantages.dim() == 1 and logprobs.dim() == 2:
        advantages = advantages[:, None].expand_as(logprobs)
    if logprobs.dim() != 2 or not logprobs.shape == old_logprobs.shape == advantages.shape:
        raise ValueError(
            f"need (B, T) inputs of one shape: logprobs {tuple(logprobs.shape)}, old_logprobs "
            f"{tuple(old_logprobs.shape)}, advantages {tuple(advantages.shape)}")
    mask = _bool_mask(response_mask, logprobs)
    advantages = _select(advantages.to(logprobs.dtype), mask)
    safe_logprobs = _select(logprobs, mask)
    log_ratio = _select(logprobs - old_logprobs.detach().to(logprobs.dtype), mask)
    lengths = mask.sum(dim=-1).clamp_min(1).to(logprobs.dtype)
    seq_log_ratio = log_ratio.sum(dim=-1) / lengths  # (B,)
    token_log_ratio = safe_logprobs - safe_logprobs.detach() + seq_log_ratio.detach()[:, None]
    ratio = torch.exp(token_log_ratio.clamp(max=10.0))
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high)
    per_token = torch.maximum(unclipped, clipped)
    if token_weights is not None:
        per_token = per_token * token_weights.detach().to(per_token.dtype)
    loss = aggregate(per_token, mask, aggregation, norm_length=norm_length)
    with torch.no_grad():
        clamped_log_ratio = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        has_tokens = mask.any(dim=-1)
        stats = {
            "clip_fraction": masked_mean((clipped > unclipped).to(ratio.dtype), mask),
            "dual_clip_fraction": torch.zeros((), dtype=ratio.dtype, device=ratio.device),
            "approx_kl": masked_mean(clamped_log_ratio.exp() - 1.0 - clamped_log_ratio, mask),
            "ratio_mean": masked_mean(ratio, mask),
            "seq_ratio_max": (seq_log_ratio[has_tokens].clamp(max=10.0).exp().max()
                              if has_tokens.any() else torch.ones((), device=ratio.device)),
        }
    return loss, stats


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_range: float | None = 0.2,
    aggregation: Aggregation = "token-mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped value loss for the critic.

    Per position, ``v_clip = old + clip(v - old, -clip_range, clip_range)`` and
    ``loss = 0.5 * max((v - R)**2, (v_clip - R)**2)``; with ``clip_range=None`` simply
    ``0.5 * (v - R)**2``.

    Args:
        values: (B, T) (or (B,) per step) critic outputs being trained.
        old_values: same shape, the critic's outputs at rollout time (no grad).
        returns: same shape, the targets (``returns`` of :func:`gae_advantages`).
        response_mask: bool or 0/1 mask of the same shape.
        clip_range: clip range of the value update, or None for no clipping.
        aggregation: see :func:`aggregate` ("token-mean" for 1-D inputs).

    Returns:
        ``(loss, stats)``: the 0-d loss and detached 0-d ``clip_fraction`` (the clipped
        term is the larger one) and ``explained_variance`` of ``returns`` by ``values``.
    """
    if clip_range is not None and clip_range < 0:
        raise ValueError(f"clip_range must be >= 0 or None, got {clip_range}")
    if not values.shape == old_values.shape == returns.shape:
        raise ValueError(
            f"shape mismatch: values {tuple(values.shape)}, old_values "
            f"{tuple(old_values.shape)}, returns {tuple(returns.shape)}"
        )
    mask = _bool_mask(response_mask, values)
    values = _select(values, mask)
    old_values = _select(old_values.detach().to(values.dtype), mask)
    returns = _select(returns.detach().to(values.dtype), mask)
    unclipped = (values - returns) ** 2
    if clip_range is None:
        per_token = 0.5 * unclipped
        clipped_wins = torch.zeros_like(mask)
    else:
        clipped_values = old_values + (values - old_values).clamp(-clip_range, clip_range)
        clipped = (clipped_values - returns) ** 2
        per_token = 0.5 * torch.maximum(unclipped, clipped)
        clipped_wins = clipped > unclipped
    loss = aggregate(per_token, mask, aggregation)
    with torch.no_grad():
        residual_var = _masked_variance(returns - values, mask)
        returns_var = _masked_variance(returns, mask)
        stats = {
            "clip_fraction": masked_mean(clipped_wins.to(values.dtype), mask),
            "explained_variance": 1.0 - residual_var / returns_var.clamp_min(1e-12),
        }
    return loss, stats


def step_value_loss(
    values: torch.Tensor,
    old_values: np.ndarray,
    returns: np.ndarray,
    *,
    clip_range: float | None,
) -> torch.Tensor:
    """:func:`clipped_value_loss` of one value per step, every step counted.

    Args:
        values: (B,) critic outputs being trained.
        old_values: (B,) the critic's outputs at rollout time.
        returns: (B,) the targets.
        clip_range: clip range of the value update, or None for no clipping.

    Returns:
        The 0-d loss.
    """
    def to_tensor(array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(array), dtype=torch.float32,
                               device=values.device)

    returns_t = to_tensor(returns)
    loss, _ = clipped_value_loss(values, to_tensor(old_values), returns_t,
                                 torch.ones_like(returns_t, dtype=torch.bool),
                                 clip_range=clip_range)
    return loss


def kl_penalty(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    kind: KLKind = "low_var_kl",
    clamp: float | None = 10.0,
    *,
    response_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from sampled tokens (Schulman, 2020).

    With ``log_r = ref_logp - logp`` for a token sampled from the policy:

    - "k1": ``-log_r`` (unbiased, high variance, can be negative).
    - "k2": ``0.5 * log_r**2`` (biased, low variance, >= 0).
    - "k3" / "low_var_kl" (same estimator): ``exp(log_r) - log_r - 1`` (unbiased,
      low variance, >= 0); GiGPO's recipe uses it with coefficient 0.01.

    Args:
        logprobs: (B, T) token log-probabilities under the policy (requires grad).
        ref_logprobs: (B, T) the same under the frozen reference policy.
        kind: the estimator.
        clamp: bound on the per-token estimate, ``[-clamp, clamp]`` (zero gradient
            beyond); None for no bound. ``log_r`` is also clamped to +-20 before ``exp``.
        response_mask: optional (B, T) mask; masked tokens then get exactly 0 and zero
            gradient even if their inputs are garbage (inf/nan). Without it, reducing
            with :func:`masked_mean` hides masked values but not NaN gradients from
            non-finite padding.

    Returns:
        (B, T) per-token estimates; reduce with :func:`masked_mean` / :func:`aggregate`.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"kind must be one of {KL_KINDS}, got {kind!r}")
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(f"shape mismatch: {tuple(logprobs.shape)} vs {tuple(ref_logprobs.shape)}")
    log_ratio = ref_logprobs.detach().to(logprobs.dtype) - logprobs
    mask = None if response_mask is None else _bool_mask(response_mask, log_ratio)
    if mask is not None:
        log_ratio = _select(log_ratio, mask)
    if kind == "k1":
        estimate = -log_ratio
    elif kind == "k2":
        estimate = 0.5 * log_ratio**2
    else:
        log_ratio = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        estimate = torch.exp(log_ratio) - log_ratio - 1.0
    if clamp is not None:
        estimate = estimate.clamp(-clamp, clamp)
    return estimate if mask is None else _select(estimate, mask)


def entropy_from_logits(
    logits: torch.Tensor, *, response_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Entropy of the categorical distribution given by ``logits`` over the last dim.

    ``H = -sum_v p_v log p_v``, computed from ``log_softmax`` (stable for large logits;
    ``-inf`` logits, e.g. a masked vocabulary, contribute exactly 0 and no NaN gradient).
    Half-precision logits are computed in float32.

    Args:
        logits: (..., V).
        response_mask: optional (...) mask; masked positions then get exactly 0 and
            zero gradient whatever their logits hold.

    Returns:
        (...) entropies in nats.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    mask = None
    if response_mask is not None:
        mask = _bool_mask(response_mask, logits[..., 0])
        logits = _select(logits, mask[..., None])
    log_p = torch.log_softmax(logits, dim=-1)
    p = log_p.exp()
    safe_log_p = torch.where(p > 0, log_p, torch.zeros((), dtype=log_p.dtype, device=log_p.device))
    entropy = -(p * safe_log_p).sum(dim=-1)
    return entropy if mask is None else _select(entropy, mask)


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probability of each given token under ``logits``.

    Args:
        logits: (B, T, V) next-token logits aligned with ``tokens``.
        tokens: (B, T) int64 token ids.

    Returns:
        (B, T) ``log softmax(logits)[b, t, tokens[b, t]]`` (float32 for half inputs).
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    picked = torch.gather(logits, -1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


@dataclass(frozen=True)
class LossRecipe:
    """The terms of the actor loss and their settings (see :func:`policy_loss`).

    Attributes:
        clip_eps_low: lower clip range, ratio >= 1 - clip_eps_low.
        clip_eps_high: upper clip range, ratio <= 1 + clip_eps_high.
        dual_clip: dual-clip constant c > 1, or None for none.
        aggregation: "token-mean", "seq-mean-token-mean" or "seq-mean-token-sum" (all
            three terms).
        kl_coef: weight of the KL-to-reference term (0: no term, no reference needed).
        kl_estimator: "k1", "k2", "k3" or "low_var_kl" (:func:`kl_penalty`).
        entropy_coef: weight of the entropy bonus (0: no term, no entropy needed).
        policy_loss: "vanilla" (:func:`ppo_clip_policy_loss`, token ratios) or "gspo"
            (:func:`gspo_policy_loss`, sequence ratios; no dual clip, and its term is
            always aggregated "seq-mean-token-mean" as verl does, while the KL and
            entropy terms keep ``aggregation``): verl's ``policy_loss.loss_mode``.
        norm_length: the constant divisor of "seq-mean-token-sum-norm" (verl: the
            maximum response length); ``None``: the micro-batch's response width.
        weight_kl: multiply each token's KL estimate by the clip term's token weights as
            well (:func:`policy_loss`'s ``token_weights``): the KL estimator then averages
            over the policy the weights correct to, not over the behaviour policy that
            sampled the tokens. False: the KL term is not weighted (verl).
    """

    clip_eps_low: float
    clip_eps_high: float
    dual_clip: float | None
    aggregation: Aggregation
    kl_coef: float
    kl_estimator: KLKind
    entropy_coef: float
    policy_loss: PolicyLossKind = "vanilla"
    norm_length: int | None = None
    weight_kl: bool = False


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    recipe: LossRecipe,
    *,
    ref_log_probs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    token_weights: torch.Tensor | None = None,
    kl_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The actor loss of one micro-batch: PPO-clip, minus the entropy bonus, plus the KL.

    ``L = agg(L_clip) - entropy_coef * agg(H) + kl_coef * agg(KL(pi || pi_ref))``, each
    term aggregated over the micro-batch's response tokens the same way (``recipe.
    aggregation``; GSPO's clip term: "seq-mean-token-mean"), as verl's
    ``dp_actor.update_policy`` builds it from ``compute_policy_loss`` (or
    ``compute_policy_loss_gspo``), ``agg_loss`` and ``kl_penalty``. A term whose coefficient is
    0 is not computed (its input may then be ``None``).

    Args:
        log_probs: (B, T) log-probs of the response tokens under the policy being trained
            (requires grad).
        old_log_probs: (B, T) the same under the policy that sampled them.
        advantages: (B, T) per-token advantages (or (B,) per sequence).
        response_mask: (B, T) bool or 0/1 mask of the tokens that count.
        recipe: the terms' settings.
        ref_log_probs: (B, T) log-probs under the reference policy; needed when
            ``recipe.kl_coef > 0``.
        entropy: (B, T) per-token entropies of the policy (with grad); needed when
            ``recipe.entropy_coef > 0``, and reported as a statistic whenever given.
        token_weights: (B, T) no-grad weights of the clip term's tokens (the decoupled
            objective's or TIS's behaviour weights,
            :mod:`algorithms.objectives.behaviour_weights`), or ``None``; the entropy
            term is not weighted, the KL term only with ``recipe.weight_kl``.
        kl_weights: (B, T) no-grad weights of the KL term's tokens with
            ``recipe.weight_kl``, where they differ from ``token_weights`` (PPO's ratio
            against the behaviour policy weights no clip-term token but may weight the
            KL); ``None``: ``token_weights``.

    Returns:
        ``(loss, stats)``: the 0-d loss, and detached 0-d ``policy_loss`` (the aggregated
        clip term), ``kl_ref`` and ``entropy`` (aggregated like the loss; 0 when not
        computed), plus :func:`ppo_clip_policy_loss`'s ``clip_fraction``,
        ``dual_clip_fraction``, ``approx_kl`` and ``ratio_mean``.

    Raises:
        ValueError: a term with a nonzero coefficient misses its input.
    """
    norm_length = recipe.norm_length
    if recipe.policy_loss == "gspo":
        clip_loss, stats = gspo_policy_loss(
            log_probs, old_log_probs, advantages, response_mask,
            clip_eps_low=recipe.clip_eps_low, clip_eps_high=recipe.clip_eps_high,
            aggregation="seq-mean-token-mean", token_weights=token_weights)
        stats.pop("seq_ratio_max")
    elif recipe.policy_loss == "vanilla":
        clip_loss, stats = ppo_clip_policy_loss(
            log_probs, old_log_probs, advantages, response_mask,
            clip_eps_low=recipe.clip_eps_low, clip_eps_high=recipe.clip_eps_high,
            dual_clip=recipe.dual_clip, aggregation=recipe.aggregation,
            norm_length=norm_length, token_weights=token_weights)
    else:
        raise ValueError(f"policy_loss must be one of {POLICY_LOSSES}, got "
                         f"{recipe.policy_loss!r}")
    loss = clip_loss
    zero = torch.zeros((), dtype=clip_loss.dtype, device=clip_loss.device)
    entropy_term = zero
    if entropy is not None:
        entropy_term = aggregate(entropy, response_mask, recipe.aggregation,
                                 norm_length=norm_length)
    if recipe.entropy_coef != 0:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs the per-token entropy")
        loss = loss - recipe.entropy_coef * entropy_term
    kl_term = zero
    if recipe.kl_coef != 0:
        if ref_log_probs is None:
            raise ValueError("kl_coef > 0 needs the reference log-probs")
        kl_tokens = kl_penalty(log_probs, ref_log_probs, kind=recipe.kl_estimator,
                               response_mask=response_mask)
        weights = token_weights if kl_weights is None else kl_weights
        if recipe.weight_kl and weights is not None:
            kl_tokens = kl_tokens * weights.detach().to(kl_tokens.dtype)
        kl_term = aggregate(kl_tokens, response_mask, recipe.aggregation,
                            norm_length=norm_length)
        loss = loss + recipe.kl_coef * kl_term
    stats = {**stats, "policy_loss": clip_loss.detach(), "kl_ref": kl_term.detach(),
             "entropy": entropy_term.detach()}
    return loss, stats
