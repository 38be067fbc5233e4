"""Advantage estimators for multi-turn agents: GRPO, GiGPO, RLOO, REINFORCE++ and GAE.

Pure, deterministic NumPy functions (no torch, no trainer state). Every function takes one
row per agent step:

- ``rewards`` (N,) float: the step's env reward (with ``penalty_in_returns`` in the
  learner, minus the step's invalid-action penalty).
- ``penalties`` (N,) float, optional: a cost charged to the step's own row only, after the
  returns are computed (verl-agent's ``apply_invalid_action_penalty``): it is subtracted
  from the row's episode score and from its discounted step return, and never enters
  another row's return. See :func:`grpo_advantages`.
- ``traj_ids`` (N,) int (or str) ids; rows of one trajectory appear in time order, rows of
  different trajectories may interleave in any way (time-major or trajectory-major).
- ``group_ids`` (N,) int (or str) ids; a group is the set of trajectories rolled out from
  the same initial state, and every trajectory belongs to exactly one group.
- ``anchors``: length-N sequence of hashables (str, int, tuple, ...): the key of the
  environment state in which the step's action was taken.

Equation numbers refer to GiGPO (Feng et al., 2025, "Group-in-Group Policy Optimization for
LLM Agent Training", arXiv:2505.10978): Eq. 3 episode relative advantage, Eq. 5 discounted
return, Eq. 6 step (anchor-state) groups, Eq. 7 step relative advantage, Eq. 8 the combined
advantage.

Normalization convention (one choice, used everywhere here): inside a group,
``(x - mean) / (std + eps)`` with the sample standard deviation (``ddof=1``) and
``eps=1e-6`` for ``normalize="std"``; ``x - mean`` for ``normalize="mean"`` (the paper's
"w/o std" variant). A group with a single member gets exactly 0, and so does a group whose
members are all equal (no rounding noise from the mean). TRL (eps 1e-4), verl (singleton ->
raw score) and GRPO-Zero (ddof 0) choose differently; this module does not.

How the functions are made fast (no Python loop over rows; integer ids through presence
tables and 16-bit radix sorts, log-depth discounted scans) is
:mod:`algorithms.objectives.advantage_kernels`; what that buys is measured by
``benchmarks/advantages.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from algorithms.objectives.advantage_kernels import (
    Trajectories,
    as_ids,
    as_penalties,
    as_rewards,
    bootstrap_values,
    check_choice,
    check_eps,
    check_similarity_threshold,
    check_unit_interval,
    dense_ids,
    discounted_returns_sorted,
    normalize_in_groups,
    reverse_discounted_scan,
    step_group_index,
)

__all__ = [
    "GiGPOTerms",
    "discounted_returns",
    "gae_advantages",
    "gigpo_advantages",
    "gigpo_terms",
    "grpo_advantages",
    "overlong_penalties",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "step_groups",
]

Normalize = Literal["std", "mean"]
EpisodeStats = Literal["trajectories", "steps"]

_NORMALIZE_CHOICES = ("std", "mean")
_EPISODE_STATS_CHOICES = ("trajectories", "steps")


def discounted_returns(rewards: Any, traj_ids: Any, *, gamma: float) -> np.ndarray:
    """Per-step discounted return to the end of the trajectory (GiGPO Eq. 5).

    ``R_t = sum_{k >= 0} gamma**k * r_{t+k}`` over the remaining steps of the same
    trajectory; the last step's return is its own reward (no bootstrap).

    Args:
        rewards: (N,) float step rewards.
        traj_ids: (N,) int (or str) trajectory ids; each trajectory's rows in time order,
            trajectories interleaved in any way.
        gamma: discount in [0, 1]; 0 gives the rewards, 1 the undiscounted reward-to-go
            (both exact up to float addition).

    Returns:
        (N,) float64 returns, in the input row order.

    Raises:
        ValueError: on non-finite rewards, mismatched lengths or gamma outside [0, 1].
    """
    rewards = as_rewards(rewards)
    traj_ids = as_ids(traj_ids, "traj_ids", rewards.shape[0])
    gamma = check_unit_interval(gamma, "gamma")
    if rewards.size == 0:
        return np.zeros(0, dtype=np.float64)
    return discounted_returns_sorted(rewards, Trajectories(traj_ids), gamma)


def grpo_advantages(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    *,
    normalize: Normalize = "std",
    eps: float = 1e-6,
    episode_stats: EpisodeStats = "trajectories",
    penalties: Any = None,
) -> np.ndarray:
    """Episode relative advantage (GiGPO Eq. 3; GRPO), broadcast to every step row.

    The episode return is ``R(tau) = sum_t r_t`` over the trajectory. Inside each group
    ``A_E(tau) = (R(tau) - mean) / (std + eps)`` with the sample std (ddof=1) for
    ``normalize="std"``, or ``R(tau) - mean`` for ``normalize="mean"``. A group with one
    trajectory, or whose returns are all equal, gets exactly 0.

    Args:
        rewards: (N,) float step rewards.
        traj_ids: (N,) int (or str) trajectory ids, rows in time order per trajectory.
        group_ids: (N,) int (or str) group ids; constant within a trajectory.
        normalize: "std" or "mean" (the paper's "w/o std").
        eps: added to the std; 1e-6.
        episode_stats: "trajectories" (the paper's Eq. 3: each trajectory counted once)
            or "steps" (statistics over step rows, each row carrying its trajectory's
            return, so long trajectories weigh more: the verl-agent reference's default).
        penalties: optional (N,) row penalties (verl-agent's placement): row ``i``'s
            score is ``R(tau_i) - penalties[i]``, and the group's mean and std are taken
            over the scores of its rows. Needs ``episode_stats="steps"``. ``None``: no
            row penalty (all rows of a trajectory then share one value).

    Returns:
        (N,) float64 advantages.

    Raises:
        ValueError: on bad shapes, non-finite rewards, unknown options, or a trajectory
            whose rows carry more than one group id.
    """
    rewards = as_rewards(rewards)
    n = rewards.shape[0]
    traj_ids = as_ids(traj_ids, "traj_ids", n)
    group_ids = as_ids(group_ids, "group_ids", n)
    check_choice(normalize, _NORMALIZE_CHOICES, "normalize")
    check_choice(episode_stats, _EPISODE_STATS_CHOICES, "episode_stats")
    penalties = as_penalties(penalties, n, episode_stats)
    eps = check_eps(eps)
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    trajectories = Trajectories(traj_ids)
    traj_groups, n_groups = trajectories.group_of_each(group_ids)
    return _episode_advantages(
        rewards, trajectories, traj_groups, n_groups, normalize, eps, episode_stats, penalties
    )


def _episode_scores(
    rewards: np.ndarray,
    trajectories: Trajectories,
    traj_groups: np.ndarray,
    episode_stats: str,
    penalties: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The members of the episode-level groups: ``(scores, groups, to_rows)``.

    ``episode_stats="trajectories"``: one member per trajectory, (T,) episode returns and
    (T,) dense groups, and ``to_rows`` the (N,) trajectory index that spreads a per-member
    value over the rows. ``"steps"``: one member per row, (N,) scores ``R(tau) -
    penalties`` and (N,) groups, and ``to_rows`` ``None`` (the members are the rows).
    """
    episode_returns = np.bincount(trajectories.index, weights=rewards, minlength=trajectories.count)
    if episode_stats == "trajectories":
        return episode_returns, traj_groups, trajectories.index
    row_returns = episode_returns[trajectories.index]
    if penalties is not None:
        row_returns = row_returns - penalties
    return row_returns, traj_groups[trajectories.index], None


def _episode_advantages(
    rewards: np.ndarray,
    trajectories: Trajectories,
    traj_groups: np.ndarray,
    n_groups: int,
    normalize: str,
    eps: float,
    episode_stats: str,
    penalties: np.ndarray | None = None,
) -> np.ndarray:
    """(N,) Eq. 3 advantage of each row's trajectory; ``traj_groups``: (T,) dense groups;
    ``penalties``: (N,) row penalties (``episode_stats="steps"`` only) or ``None``."""
    scores, groups, to_rows = _episode_scores(
        rewards, trajectories, traj_groups, episode_stats, penalties)
    relative = normalize_in_groups(scores, groups, n_groups, normalize, eps)
    return relative if to_rows is None else relative[to_rows]


def _group_episode_inputs(
    rewards: Any, traj_ids: Any, group_ids: Any, episode_stats: str, penalties: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int] | None:
    """Validated episode-level members of a batch (see :func:`_episode_scores`) and the
    number of groups; ``None`` for an empty batch."""
    rewards = as_rewards(rewards)
    n = rewards.shape[0]
    traj_ids = as_ids(traj_ids, "traj_ids", n)
    group_ids = as_ids(group_ids, "group_ids", n)
    check_choice(episode_stats, _EPISODE_STATS_CHOICES, "episode_stats")
    penalties = as_penalties(penalties, n, episode_stats)
    if n == 0:
        return None
    trajectories = Trajectories(traj_ids)
    traj_groups, n_groups = trajectories.group_of_each(group_ids)
    scores, groups, to_rows = _episode_scores(
        rewards, trajectories, traj_groups, episode_stats, penalties)
    return scores, groups, to_rows, n_groups


def rloo_advantages(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    *,
    episode_stats: EpisodeStats = "trajectories",
    penalties: Any = None,
) -> np.ndarray:
    """REINFORCE leave-one-out advantage (RLOO; Ahmadian et al., 2024, arXiv:2402.14740).

    Each member of a group of ``n`` is compared with the mean of the *other* members:
    ``A_i = s_i - mean_{j != i} s_j = n / (n - 1) * (s_i - mean_j s_j)``, where the
    members and their scores ``s`` are those of :func:`grpo_advantages` (the episode
    return of each trajectory, or with ``episode_stats="steps"`` each row's ``R(tau) -
    penalty``, so ``n`` counts rows: verl-agent's ``compute_rloo_outcome_advantage`` with
    ``compute_mean_std_cross_steps=True``). No division by a std. A group with one
    member, or whose scores are all equal, gets exactly 0 (verl leaves a singleton's raw
    score; this module's convention, see the module docstring).

    Args:
        rewards: (N,) float step rewards.
        traj_ids: (N,) int (or str) trajectory ids, rows in time order per trajectory.
        group_ids: (N,) int (or str) group ids; constant within a trajectory.
        episode_stats: "trajectories" (each trajectory one member: the paper's RLOO) or
            "steps" (each row one member: verl-agent's trainer).
        penalties: optional (N,) row penalties, as in :func:`grpo_advantages` (needs
            ``episode_stats="steps"``).

    Returns:
        (N,) float64 advantages.

    Raises:
        ValueError: as :func:`grpo_advantages`.
    """
    members = _group_episode_inputs(rewards, traj_ids, group_ids, episode_stats, penalties)
    if members is None:
        return np.zeros(0, dtype=np.float64)
    scores, groups, to_rows, n_groups = members
    centered = normalize_in_groups(scores, groups, n_groups, "mean", 0.0)
    counts = np.bincount(groups, minlength=n_groups).astype(np.float64)
    scale = counts / np.maximum(counts - 1.0, 1.0)  # n / (n - 1); singletons are 0 anyway
    relative = centered * scale[groups]
    return relative if to_rows is None else relative[to_rows]


def reinforce_pp_advantages(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    *,
    episode_stats: EpisodeStats = "trajectories",
    penalties: Any = None,
    token_counts: Any = None,
    eps: float = 1e-8,
) -> np.ndarray:
    """REINFORCE++ with the group-mean baseline (Hu, 2025, arXiv:2501.03262).

    Two stages, as verl's ``compute_reinforce_plus_plus_baseline_outcome_advantage``:

    1. Inside each group, subtract the group mean: ``x_i = s_i - mean_j s_j`` (members
       and scores as in :func:`grpo_advantages`; a singleton or constant group gives 0).
    2. Whiten over the whole batch: ``A_i = (x_i - mu) / sqrt(var + eps)``, where ``mu``
       and ``var`` are the mean and the unbiased (Bessel-corrected) variance of ``x``
       over the batch's *response tokens*: verl broadcasts ``x`` to every token of the
       row's response and whitens the (rows, tokens) matrix under the response mask, so
       row ``i`` weighs ``token_counts[i]`` and the correction is ``W / (W - 1)`` with
       ``W`` the total token count.

    Args:
        rewards: (N,) float step rewards.
        traj_ids: (N,) int (or str) trajectory ids, rows in time order per trajectory.
        group_ids: (N,) int (or str) group ids; constant within a trajectory.
        episode_stats: "trajectories" or "steps" (verl-agent's trainer), as in
            :func:`grpo_advantages`.
        penalties: optional (N,) row penalties (needs ``episode_stats="steps"``).
        token_counts: optional (N,) non-negative response-token counts of the rows (the
            whitening weights); ``None``: every row weighs 1.
        eps: added to the variance; 1e-8 as verl's ``masked_whiten``.

    Returns:
        (N,) float64 advantages. A batch whose total weight is at most 1 (one token or
        row) has no variance: its advantages are ``x - mu`` (verl raises there).

    Raises:
        ValueError: as :func:`grpo_advantages`; bad ``token_counts``; a batch whose
            rows all have zero weight.
    """
    eps = check_eps(eps)
    rewards = as_rewards(rewards)
    n = rewards.shape[0]
    weights = None
    if token_counts is not None:
        weights = as_rewards(token_counts, "token_counts")
        if weights.shape[0] != n:
            raise ValueError(f"token_counts has {weights.shape[0]} rows, expected {n}")
        if np.any(weights < 0):
            raise ValueError("token_counts must be >= 0")
    members = _group_episode_inputs(rewards, traj_ids, group_ids, episode_stats, penalties)
    if members is None:
        return np.zeros(0, dtype=np.float64)
    scores, groups, to_rows, n_groups = members
    centered = normalize_in_groups(scores, groups, n_groups, "mean", 0.0)
    rows = centered if to_rows is None else centered[to_rows]
    if weights is None:
        weights = np.ones_like(rows)
    total = float(weights.sum())
    if total <= 0:
        raise ValueError("token_counts are all 0: nothing to whiten over")
    mean = float(np.dot(weights, rows)) / total
    deviations = rows - mean
    variance = float(np.dot(weights, deviations * deviations)) / total
    if total > 1:
        variance *= total / (total - 1.0)
    return deviations / np.sqrt(variance + eps)


def overlong_penalties(
    response_lengths: Any, *, max_response_length: int, buffer_length: int,
    penalty_factor: float = 1.0,
) -> np.ndarray:
    """DAPO's soft overlong punishment (Yu et al., 2025, arXiv:2503.14476), as a cost.

    A response longer than ``L_exp = max_response_length - buffer_length`` tokens pays
    ``penalty_factor * (length - L_exp) / buffer_length``, growing linearly to
    ``penalty_factor`` at ``max_response_length`` (verl's ``DAPORewardManager`` adds
    ``min(-(length - L_exp) / buffer_length * penalty_factor, 0)`` to the reward; this
    returns its negation, >= 0, to be charged like the invalid-action penalty).

    Args:
        response_lengths: (N,) response lengths in tokens.
        max_response_length: the longest response generation allows (tokens).
        buffer_length: the punishment interval, in (0, max_response_length].
        penalty_factor: the cost at the full length, >= 0.

    Returns:
        (N,) float64 costs, 0 for responses of at most ``L_exp`` tokens.

    Raises:
        ValueError: on a bad shape, a buffer outside (0, max_response_length], or a
            negative factor.
    """
    lengths = as_rewards(response_lengths, "response_lengths")
    if not 0 < buffer_length <= max_response_length:
        raise ValueError(f"buffer_length must be in (0, max_response_length = "
                         f"{max_response_length}], got {buffer_length}")
    if penalty_factor < 0:
        raise ValueError(f"penalty_factor must be >= 0, got {penalty_factor}")
    expected = max_response_length - buffer_length
    exceed = lengths - expected
    return np.maximum(exceed / buffer_length * float(penalty_factor), 0.0)


def step_groups(
    group_ids: Any, anchors: Any, *, similarity_threshold: float | None = None
) -> np.ndarray:
    """Anchor-state step groups (GiGPO Eq. 6): rows with equal ``(group_id, anchor)``.

    Steps taken from the same environment state inside one group form a step group,
    across trajectories and time steps. Anchors in different groups never share a step
    group.

    Args:
        group_ids: (N,) int (or str) group ids.
        anchors: length-N sequence of hashables (str, int, tuple, ...), or a 1-D numeric /
            string NumPy array, or a 2-D numeric array (one row per anchor). Object
            anchors are mapped to ints in one Python hashing pass over the rows; arrays
            with a native dtype take a loop-free ``np.unique`` path.
        similarity_threshold: None (exact equality, the default) or a ratio in (0, 1):
            str anchors of one group whose ``difflib`` similarity ratio reaches the
            threshold share a step group (greedy clustering against each cluster's first
            member, anchors visited in row order as verl-agent's ``build_step_group``
            does, so the clusters depend on the row order). Cost: quadratic in the
            number of distinct anchors per group and in their length, in Python.

    Returns:
        (N,) int dense step-group ids 0..K-1: rows share an id exactly when they share
        the group and the anchor (or the similarity cluster). Ids are ordered by group
        (group g's step groups come before those of any larger group id); the order
        inside a group is an implementation detail.

    Raises:
        ValueError: on mismatched lengths or a threshold outside (0, 1).
        TypeError: on unhashable anchors, or non-str anchors with a threshold.
    """
    group_ids = np.asarray(group_ids)
    if group_ids.ndim != 1:
        raise ValueError(f"group_ids must be 1-D (one row per step), got shape {group_ids.shape}")
    n = group_ids.shape[0]
    group_ids = as_ids(group_ids, "group_ids", n)
    check_similarity_threshold(similarity_threshold)
    _, group_index = dense_ids(group_ids)
    return step_group_index(group_index, anchors, similarity_threshold)


@dataclass(frozen=True)
class GiGPOTerms:
    """The parts of the GiGPO advantage, all (N,) in input row order.

    Attributes:
        episode: (N,) float64 episode relative advantage A_E (Eq. 3).
        step: (N,) float64 step relative advantage A_S (Eq. 7).
        returns: (N,) float64 discounted returns R_t (Eq. 5).
        step_group_ids: (N,) int64 dense step-group ids (Eq. 6).
    """

    episode: np.ndarray
    step: np.ndarray
    returns: np.ndarray
    step_group_ids: np.ndarray

    def combined(self, step_weight: float) -> np.ndarray:
        """(N,) ``A = A_E + step_weight * A_S`` (Eq. 8)."""
        return self.episode + float(step_weight) * self.step


def gigpo_terms(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    anchors: Any,
    *,
    gamma: float = 0.95,
    normalize: Normalize = "std",
    eps: float = 1e-6,
    episode_stats: EpisodeStats = "trajectories",
    similarity_threshold: float | None = None,
    penalties: Any = None,
) -> GiGPOTerms:
    """The episode and step terms of GiGPO, separately (for diagnostics and logging).

    Same arguments and semantics as :func:`gigpo_advantages` (minus ``step_weight``).

    Returns:
        A :class:`GiGPOTerms` with (N,) arrays.
    """
    rewards = as_rewards(rewards)
    n = rewards.shape[0]
    traj_ids = as_ids(traj_ids, "traj_ids", n)
    group_ids = as_ids(group_ids, "group_ids", n)
    gamma = check_unit_interval(gamma, "gamma")
    check_choice(normalize, _NORMALIZE_CHOICES, "normalize")
    check_choice(episode_stats, _EPISODE_STATS_CHOICES, "episode_stats")
    penalties = as_penalties(penalties, n, episode_stats)
    eps = check_eps(eps)
    check_similarity_threshold(similarity_threshold)
    if n == 0:
        step_group_ids = step_group_index(np.zeros(0, np.intp), anchors, similarity_threshold)
        empty = np.zeros(0, dtype=np.float64)
        return GiGPOTerms(empty, empty.copy(), empty.copy(), step_group_ids)
    trajectories = Trajectories(traj_ids)
    traj_groups, n_groups = trajectories.group_of_each(group_ids)
    group_index = traj_groups[trajectories.index]
    step_group_ids = step_group_index(group_index, anchors, similarity_threshold)
    episode = _episode_advantages(
        rewards, trajectories, traj_groups, n_groups, normalize, eps, episode_stats, penalties
    )
    returns = discounted_returns_sorted(rewards, trajectories, gamma)
    if penalties is not None:  # charged to the row's own step return only
        returns = returns - penalties
    n_step_groups = int(step_group_ids.max()) + 1
    step = normalize_in_groups(returns, step_group_ids, n_step_groups, normalize, eps)
    return GiGPOTerms(episode=episode, step=step, returns=returns, step_group_ids=step_group_ids)


def gigpo_advantages(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    anchors: Any,
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    normalize: Normalize = "std",
    eps: float = 1e-6,
    episode_stats: EpisodeStats = "trajectories",
    similarity_threshold: float | None = None,
    penalties: Any = None,
) -> np.ndarray:
    """GiGPO advantage ``A = A_E + step_weight * A_S`` per step row (GiGPO Eq. 8).

    - ``A_E``: episode relative advantage of the row's trajectory inside its group
      (Eq. 3), exactly :func:`grpo_advantages`.
    - ``A_S``: the row's discounted return ``R_t = sum_k gamma**k r_{t+k}`` (Eq. 5),
      normalized inside its step group (rows of one group with equal anchors, Eq. 6)
      the same way (Eq. 7): ``(R_t - mean) / (std + eps)``, ddof=1, or ``R_t - mean``.
      A singleton step group, or one whose returns are all equal, gets exactly 0, so
      with all-distinct anchors GiGPO equals GRPO.

    Args:
        rewards: (N,) float step rewards (env reward plus penalties).
        traj_ids: (N,) int (or str) trajectory ids, rows in time order per trajectory.
        group_ids: (N,) int (or str) group ids, constant within a trajectory.
        anchors: length-N hashables (see :func:`step_groups`).
        gamma: discount of the step returns, in [0, 1]; 0.95 in the paper.
        step_weight: omega, the weight of the step term; 1.0 in the paper.
        normalize: "std" or "mean", used for both terms.
        eps: added to the std; 1e-6.
        episode_stats: "trajectories" (paper) or "steps" (reference implementation);
            see :func:`grpo_advantages`.
        similarity_threshold: optional fuzzy grouping of str anchors, see
            :func:`step_groups` for its cost.
        penalties: optional (N,) row penalties (verl-agent's placement, see
            :func:`grpo_advantages`): also subtracted from the row's own step return
            ``R_t`` before the step groups are normalized.

    Returns:
        (N,) float64 advantages in input row order.
    """
    terms = gigpo_terms(
        rewards,
        traj_ids,
        group_ids,
        anchors,
        gamma=gamma,
        normalize=normalize,
        eps=eps,
        episode_stats=episode_stats,
        similarity_threshold=similarity_threshold,
        penalties=penalties,
    )
    return terms.combined(step_weight)


def gae_advantages(
    rewards: Any,
    values: Any,
    traj_ids: Any,
    *,
    gamma: float,
    lam: float,
    last_values: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Turn-level generalized advantage estimation (Schulman et al., 2016) for PPO.

    One value per agent step (turn). Inside each trajectory, in time order,
    ``delta_t = r_t + gamma * V_{t+1} - V_t`` and ``A_t = sum_k (gamma*lam)**k delta_{t+k}``;
    ``returns = A + V`` are the critic's targets. After the trajectory's last step,
    ``V_{T}`` is its bootstrap value when the trajectory was *truncated* and 0 when it
    *terminated*.

    ``last_values`` marks truncation, in one of three forms:

    - ``None``: every trajectory terminated (no bootstrap anywhere).
    - a mapping ``{traj_id: value}``: the listed trajectories were truncated and
      bootstrap with their (finite) value; an absent id or a NaN value means terminated.
    - an (N,) array aligned with the rows: only the entry at each trajectory's last row
      is read (say, V of the observation that followed it); finite = truncated and
      bootstrapped, NaN = terminated. Other entries are ignored.

    Args:
        rewards: (N,) float step rewards.
        values: (N,) float critic values V(s_t) of each step's state.
        traj_ids: (N,) int (or str) trajectory ids, rows in time order per trajectory.
        gamma: discount in [0, 1].
        lam: GAE lambda in [0, 1]; 0 gives one-step TD errors, 1 Monte Carlo returns
            minus V.
        last_values: truncation bootstrap, see above.

    Returns:
        (advantages, returns): two (N,) float64 arrays in input row order.

    Raises:
        ValueError: on bad shapes, non-finite rewards/values, infinite bootstrap values,
            unknown ids in a mapping, or gamma/lam outside [0, 1].
    """
    rewards = as_rewards(rewards)
    n = rewards.shape[0]
    values = as_rewards(values, "values")
    if values.shape != (n,):
        raise ValueError(f"values has {values.shape[0]} rows, expected {n}")
    traj_ids = as_ids(traj_ids, "traj_ids", n)
    gamma = check_unit_interval(gamma, "gamma")
    lam = check_unit_interval(lam, "lam")
    if n == 0:
        return np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.float64)
    trajectories = Trajectories(traj_ids)
    bootstrap = bootstrap_values(last_values, trajectories, n)

    # in trajectory-sorted order, the next row is the next step except after a last step
    sorted_values = trajectories.in_sorted_order(values)
    next_values = np.append(sorted_values[1:], 0.0)
    next_values[trajectories.last_positions] = bootstrap
    deltas = trajectories.in_sorted_order(rewards) + gamma * next_values - sorted_values
    sorted_advantages = reverse_discounted_scan(deltas, trajectories.sorted_key, gamma * lam)
    advantages = trajectories.in_input_order(sorted_advantages)
    return advantages, advantages + values
