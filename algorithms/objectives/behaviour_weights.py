"""Per-token importance weights against the behaviour policy: the policy whose log-probs
the engine recorded when it sampled the tokens (``StepBatch.behaviour_log_probs``).

Two uses, one weight ``w = pi_old / pi_behaviour`` per token, ``pi_old`` the learner's
policy before this update (the "proximal" policy of the decoupled objective):

- **Decoupled PPO** (Fu et al. 2025, AReaL, eq. 5), for rollouts sampled by weights up to
  ``run.max_staleness`` updates old: the PPO-clip term keeps its ratio against
  ``pi_old`` (the trust region is around the current weights), and each token's loss is
  multiplied by ``w``, which moves the expectation from the behaviour policy to
  ``pi_old``. Tokens whose ``w`` exceeds ``drop_above`` are left out (weight 0), as
  AReaL's ``behav_imp_weight_cap`` does.
- **Truncated importance sampling** (TIS; Yao et al. 2025, "Your efficient RL framework
  secretly brings you off-policy RL training"; verl's ``tis_imp_ratio_cap``): ``min(w, C)``
  corrects the gap between the engine's numerics and the learner's even on-policy.

The weights carry no gradient.

The alternative to the decoupled objective, ``learner.staleness_correction
"behaviour-clip"``, is PPO's objective with the behaviour policy as its old policy
(:func:`behaviour_as_old`): no weight, the clip around ``pi_behaviour``.
"""

from __future__ import annotations

import torch

from algorithms.objectives.losses import masked_mean


def behaviour_weights(old_log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor,
                      response_mask: torch.Tensor, *, truncate_at: float | None = None,
                      drop_above: float | None = None
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token weights ``w = exp(old - behaviour)``, truncated and filtered.

    Args:
        old_log_probs: (B, T) log-probs of the response tokens under the learner's policy
            before this update.
        behaviour_log_probs: (B, T) the same as the engine reported them when sampling;
            NaN where unknown (such a token gets weight 1).
        response_mask: (B, T) bool or 0/1, the tokens that count.
        truncate_at: ``min(w, truncate_at)`` (TIS), or ``None``.
        drop_above: tokens with ``w > drop_above`` get weight 0 (decoupled PPO's filter),
            or ``None``. Applied to the untruncated weight.

    Returns:
        ``(weights, stats)``: (B, T) float32 weights (1 on masked-out tokens), and 0-d
        statistics over the masked tokens with a known behaviour log-prob:
        ``is_weight_mean`` and ``is_weight_max`` (of the untruncated ``w``),
        ``is_clipped_fraction`` (share truncated or dropped) and ``behaviour_gap`` (mean
        ``|old - behaviour|``, the log-prob gap between the learner and the engine).
    """
    if old_log_probs.shape != behaviour_log_probs.shape:
        raise ValueError(f"shape mismatch: old_log_probs {tuple(old_log_probs.shape)}, "
                         f"behaviour_log_probs {tuple(behaviour_log_probs.shape)}")
    with torch.no_grad():
        old = old_log_probs.detach().float()
        behaviour = behaviour_log_probs.detach().float().to(old.device)
        known = ~torch.isnan(behaviour) & response_mask.to(old.device).bool()
        log_w = torch.where(known, old - torch.nan_to_num(behaviour), torch.zeros_like(old))
        raw = torch.exp(log_w.clamp(max=20.0))
        weights = raw
        clipped = torch.zeros_like(known)
        if truncate_at is not None:
            clipped = clipped | (raw > truncate_at)
            weights = weights.clamp(max=truncate_at)
        if drop_above is not None:
            dropped = raw > drop_above
            clipped = clipped | dropped
            weights = torch.where(dropped, torch.zeros_like(weights), weights)
        weights = torch.where(known, weights, torch.ones_like(weights))
        count = known.sum()
        stats = {
            "is_weight_mean": masked_mean(raw, known),
            "is_weight_max": (raw[known].max() if count > 0
                              else torch.ones((), device=old.device)),
            "is_clipped_fraction": masked_mean(clipped.float(), known),
            "behaviour_gap": masked_mean(log_w.abs(), known),
        }
    return weights, stats


def behaviour_as_old(old_log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor
                     ) -> torch.Tensor:
    """The old log-probs for PPO's ratio against the behaviour policy: the engine's
    log-probs where it reported them, the learner's ``old_log_probs`` where not (NaN).

    Args:
        old_log_probs: (B, T) the learner's log-probs of the response tokens before this
            update.
        behaviour_log_probs: (B, T) the engine's, NaN where unknown.

    Returns:
        (B, T) float32, no gradient.
    """
    if old_log_probs.shape != behaviour_log_probs.shape:
        raise ValueError(f"shape mismatch: old_log_probs {tuple(old_log_probs.shape)}, "
                         f"behaviour_log_probs {tuple(behaviour_log_probs.shape)}")
    old = old_log_probs.detach().float()
    behaviour = behaviour_log_probs.detach().float().to(old.device)
    return torch.where(torch.isnan(behaviour), old, behaviour)
