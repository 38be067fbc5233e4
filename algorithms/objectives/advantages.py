"""Advantage estimators for multi-turn agents: GRPO, GiGPO, HGPO, GraphGPO, RLOO,
REINFORCE++ and GAE.

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
    anchor_codes,
    as_ids,
    as_penalties,
    as_rewards,
    bootstrap_values,
    check_choice,
    check_eps,
    check_positive_eps,
    check_similarity_threshold,
    check_unit_interval,
    dense_ids,
    discounted_returns_sorted,
    extended_keys,
    normalize_in_groups,
    reverse_discounted_scan,
    reverse_distances,
    similarity_codes,
    step_group_index,
)

__all__ = [
    "GRAPH_GOAL_RETURN",
    "GiGPOTerms",
    "GraphGPOTerms",
    "HGPOTerms",
    "discounted_returns",
    "gae_advantages",
    "gigpo_advantages",
    "gigpo_terms",
    "graphgpo_advantages",
    "graphgpo_terms",
    "grpo_advantages",
    "hgpo_advantages",
    "hgpo_terms",
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
        eps: added to the variance, > 0 (a batch whose centred scores are all equal has
            variance 0); 1e-8 as verl's ``masked_whiten``.

    Returns:
        (N,) float64 advantages. A batch whose total weight is at most 1 (one token or
        row) has no variance: its advantages are ``x - mu`` (verl raises there).

    Raises:
        ValueError: as :func:`grpo_advantages`; ``eps <= 0``; bad ``token_counts``; a
            batch whose rows all have zero weight.
    """
    eps = check_positive_eps(eps, "a batch of equal centred scores has variance 0")
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


@dataclass(frozen=True)
class HGPOTerms:
    """The parts of the HGPO advantage, all (N,) in input row order.

    Attributes:
        advantages: (N,) float64 the advantage of each row (:func:`hgpo_advantages`).
        episode: (N,) float64 the episode relative advantage A_E (the base item's value,
            whether or not ``base_group`` lets it in).
        history: (N,) float64 the weighted mean of the row's nonzero history-group
            advantages alone (no base item): HGPO's step-level term, 0 where no history
            group of the row gave a nonzero advantage.
        returns: (N,) float64 discounted step returns R_t (after the row penalties).
        step_group_ids: (N,) int64 dense ids of the k = 1 history groups (the current
            anchor alone: GiGPO's step groups).
        history_groups: (N,) int64 how many history groups of two or more members the
            row joined (0 .. history_length + 1).
    """

    advantages: np.ndarray
    episode: np.ndarray
    history: np.ndarray
    returns: np.ndarray
    step_group_ids: np.ndarray
    history_groups: np.ndarray


def hgpo_terms(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    anchors: Any,
    *,
    history_length: int = 2,
    gamma: float = 0.95,
    normalize: Normalize = "std",
    length_weight_alpha: float = 1.0,
    base_group: bool = False,
    episode_stats: EpisodeStats = "trajectories",
    eps: float = 1e-6,
    penalties: Any = None,
) -> HGPOTerms:
    """HGPO's advantage and its parts (see :func:`hgpo_advantages`, same arguments).

    Returns:
        An :class:`HGPOTerms` of (N,) arrays.
    """
    rewards = as_rewards(rewards)
    n = rewards.shape[0]
    traj_ids = as_ids(traj_ids, "traj_ids", n)
    group_ids = as_ids(group_ids, "group_ids", n)
    gamma = check_unit_interval(gamma, "gamma")
    check_choice(normalize, _NORMALIZE_CHOICES, "normalize")
    check_choice(episode_stats, _EPISODE_STATS_CHOICES, "episode_stats")
    penalties = as_penalties(penalties, n, episode_stats)
    eps = check_positive_eps(eps, "a row with no nonzero item has weights summing to 0")
    if isinstance(history_length, bool) or not isinstance(history_length, (int, np.integer)) \
            or history_length < 0:
        raise ValueError(f"history_length must be an int >= 0, got {history_length!r}")
    alpha = float(length_weight_alpha)
    if not np.isfinite(alpha):
        raise ValueError(f"length_weight_alpha must be finite, got {length_weight_alpha!r}")
    if n == 0:
        step_group_ids = step_group_index(np.zeros(0, np.intp), anchors, None)
        empty = np.zeros(0, dtype=np.float64)
        return HGPOTerms(empty, empty.copy(), empty.copy(), empty.copy(), step_group_ids,
                         np.zeros(0, dtype=np.int64))
    trajectories = Trajectories(traj_ids)
    traj_groups, n_groups = trajectories.group_of_each(group_ids)
    group_index = traj_groups[trajectories.index]
    step_group_ids = step_group_index(group_index, anchors, None)
    episode = _episode_advantages(
        rewards, trajectories, traj_groups, n_groups, normalize, eps, episode_stats, penalties)
    returns = discounted_returns_sorted(rewards, trajectories, gamma)
    if penalties is not None:  # charged to the row's own step return only
        returns = returns - penalties
    # Work in trajectory-sorted order: the k - 1 steps before a row are the k - 1 rows
    # before it, while the sorted key stays the same.
    codes = trajectories.in_sorted_order(anchor_codes(anchors, n))
    sorted_key = trajectories.sorted_key
    sorted_returns = trajectories.in_sorted_order(returns)
    keys = trajectories.in_sorted_order(step_group_ids)  # k = 1: (group, anchor)
    rows = np.arange(n)
    weighted = np.zeros(n)
    weights = np.zeros(n)
    joined = np.zeros(n, dtype=np.int64)
    for k in range(1, history_length + 2):
        if k > 1:
            back = k - 1
            rows = rows[rows >= back]
            rows = rows[sorted_key[rows] == sorted_key[rows - back]]
            if rows.size == 0:
                break
            earlier = np.zeros(n, dtype=codes.dtype)
            earlier[back:] = codes[:-back]
            grown = np.zeros(n, dtype=np.int64)
            grown[rows] = extended_keys(keys, earlier, rows)
            keys = grown
        members = keys[rows]
        n_members = int(members.max()) + 1
        relative = normalize_in_groups(sorted_returns[rows], members, n_members, normalize,
                                       eps, ddof=0)
        joined[rows] += np.bincount(members, minlength=n_members)[members] >= 2
        nonzero = relative != 0.0
        weight = float(k + 1) ** alpha
        weighted[rows[nonzero]] += weight * relative[nonzero]
        weights[rows[nonzero]] += weight
    history = trajectories.in_input_order(weighted / (weights + eps))
    joined = trajectories.in_input_order(joined)
    if base_group:
        base = trajectories.in_sorted_order(episode)
        nonzero = base != 0.0
        weighted = weighted + np.where(nonzero, base, 0.0)
        weights = weights + nonzero
        advantages = trajectories.in_input_order(weighted / (weights + eps))
    else:
        advantages = history
    return HGPOTerms(advantages=advantages, episode=episode, history=history,
                     returns=returns, step_group_ids=step_group_ids, history_groups=joined)


def hgpo_advantages(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    anchors: Any,
    *,
    history_length: int = 2,
    gamma: float = 0.95,
    normalize: Normalize = "std",
    length_weight_alpha: float = 1.0,
    base_group: bool = False,
    episode_stats: EpisodeStats = "trajectories",
    eps: float = 1e-6,
    penalties: Any = None,
) -> np.ndarray:
    """HGPO advantage per step row (He et al., ICLR 2026, "Hierarchy-of-Groups Policy
    Optimization for Long-Horizon Agentic Tasks"; verl-agent's ``recipe/hgpo/core_hgpo.py``
    ``hgpo_advantage_estimate``).

    Every step ``t`` of a trajectory joins, inside its group, the *history groups* of its
    last ``k`` anchors, ``k = 1 .. min(history_length + 1, t + 1)``: the rows of the group
    (across trajectories and time) whose anchors at steps ``t - k + 1 .. t`` are equal, in
    order (``k = 1`` is GiGPO's anchor-state group; a step with fewer than ``k - 1``
    earlier steps joins no ``k`` group). In each history group ``G`` of two or more rows
    the discounted returns ``R_t`` (GiGPO Eq. 5, minus the row penalties) are normalized
    with the *population* std (ddof 0, as the reference's ``std(unbiased=False)``):
    ``A_k = (R_t - mean_G) / (std_G + eps)``, or ``R_t - mean_G`` for
    ``normalize="mean"``. The row's advantage is the weighted mean of its *nonzero* items:

        ``A = sum_i w_i A_i / (sum_i w_i + eps)``,  ``w_i = (k_i + 1) ** alpha``,

    over the items ``(k, A_k)`` with ``A_k != 0`` (the reference drops zero items, so a
    group whose returns are all equal, or a row equal to its group's mean, takes no
    weight); with ``base_group`` the episode advantage ``A_E`` (Eq. 3, sample std, as
    :func:`grpo_advantages`) joins as an item with ``k = 0`` (weight 1). No nonzero item:
    0. ``alpha = 0`` weighs every item the same.

    All-equal groups (the reference's float arithmetic): here a group whose returns (or
    whose base scores) are all equal scores exactly 0 and so takes no weight, the rule
    the reference's code states. The reference computes ``(r - mean) / (std + eps)``
    with ``mean`` and ``std`` from torch's own sums, so for some all-equal groups the mean
    is one rounding off the members: the deviation ``d`` is one ulp, the std is ``|d|``,
    and the item is ``d / (|d| + 1e-6)``: in float32 (as verl-agent runs it) up to +-0.66
    (measured: returns 9.9 x 17 rows give -0.656, 0.1 x 8 rows give -0.0074), in float64
    about 1e-9; either way it is nonzero, so it takes its weight and pulls the row's other
    items toward 0 (an item ``A_2`` beside a spurious ``k = 1`` item becomes
    ``(2 e + 3 A_2) / 5``). Which groups this hits depends on the values and the group's
    size through the order of torch's sums, not on a rule. Measured against verl-agent's
    code as it runs (float32): on ``benchmarks/recipe_parity.py``'s ALFWorld-shaped
    batches (seeds 0-5, 6 groups of 8, gamma 0.95, penalty 0.1; both normalizations and
    all 32 settings of history length, alpha and base group: 679,232 row advantages)
    none differed by more than 1e-3 (largest 1.5e-5, float32 rounding): there, equal
    nonzero returns in one group are rare. On 8 trajectories that walk one path and all
    win (the harness's accepted-difference batch), 8 of 24 rows got -0.49 there and 0
    here. In float64 the two agree to 1e-14 on all of these. The default is the rule
    without the rounding; there is no option for the rounding (it is torch's summation
    order, not a setting).

    Differences from the reference: a group of one row gets base item 0 (the reference's
    ``trajectory_advantages`` gives it ``score / (1 + eps)``, as GiGPO's episode term;
    :func:`grpo_advantages`); a row with no response tokens keeps its base item (the
    reference's token mean gives it 0).

    Args:
        rewards: (N,) float step rewards.
        traj_ids: (N,) int (or str) trajectory ids, rows in time order per trajectory.
        group_ids: (N,) int (or str) group ids, constant within a trajectory.
        anchors: length-N hashables (see :func:`step_groups`; exact equality: HGPO has no
            similarity grouping).
        history_length: the longest history before the current step that keys a group
            (``k`` up to ``history_length + 1``); verl-agent ties it to the prompt's
            history window (``env.history_length``, 2 in its scripts).
        gamma: discount of the step returns, in [0, 1]; 0.95 in the scripts.
        normalize: "std" (``mean_std_norm``) or "mean" (``mean_norm``), for the history
            groups and the base item.
        length_weight_alpha: alpha of the weights ``(k + 1) ** alpha``; 1.0 in the scripts.
        base_group: add the episode advantage as a ``k = 0`` item; ``False`` in the
            scripts.
        episode_stats: the base item's group statistics, "trajectories" (Eq. 3) or
            "steps" (verl-agent's, every row a member); see :func:`grpo_advantages`.
        eps: added to each std and to the weights' sum, > 0 (a row without a nonzero
            item divides 0 by it); 1e-6.
        penalties: optional (N,) row penalties, subtracted from the row's step return and
            its episode score (verl-agent's placement; needs ``episode_stats="steps"``).

    Returns:
        (N,) float64 advantages in input row order.

    Raises:
        ValueError: bad shapes, non-finite rewards, unknown options, ``eps <= 0``, a
            negative ``history_length``, or a trajectory whose rows carry two group ids.
        TypeError: unhashable anchors.
    """
    return hgpo_terms(
        rewards, traj_ids, group_ids, anchors, history_length=history_length, gamma=gamma,
        normalize=normalize, length_weight_alpha=length_weight_alpha, base_group=base_group,
        episode_stats=episode_stats, eps=eps, penalties=penalties).advantages


GRAPH_GOAL_RETURN = 10.0
"""The return of a step into the goal node of GraphGPO's state graph (its
``compute_graph_path_returns`` writes ``10 * gamma ** d``; 10 is ALFWorld's success
reward in verl-agent's scripts)."""


@dataclass(frozen=True)
class GraphGPOTerms:
    """The parts of the GraphGPO advantage, all (N,) in input row order.

    Attributes:
        episode: (N,) float64 episode relative advantage A_E (GiGPO Eq. 3).
        step: (N,) float64 step relative advantage: the graph returns normalized in the
            step groups.
        returns: (N,) float64 graph step returns ``10 * gamma ** e`` (after the penalties).
        distances: (N,) float64 edges from the row's next state to the goal (unreachable:
            the group's farthest reachable distance + 1).
        anchor_distances: (N,) float64 the same for the row's own state.
        step_group_ids: (N,) int64 dense step-group ids (exact anchors, Eq. 6).
    """

    episode: np.ndarray
    step: np.ndarray
    returns: np.ndarray
    distances: np.ndarray
    anchor_distances: np.ndarray
    step_group_ids: np.ndarray

    def combined(self, step_weight: float, episode_weight: float) -> np.ndarray:
        """(N,) ``A = step_weight * A_S + episode_weight * A_E`` (``episode_weight`` 0:
        the step term alone)."""
        step = float(step_weight) * self.step
        if float(episode_weight) == 0.0:
            return step
        return step + float(episode_weight) * self.episode


def _graph_nodes(anchors: Any, next_anchors: Any, group_index: np.ndarray,
                 to_goal: np.ndarray, n_groups: int, similarity_threshold: float | None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Node ids of each row's state and next state in its group's graph.

    Returns ``(state_nodes, next_nodes, goal_nodes, node_groups)``: (N,), (N,), (G,) and
    (V,) ints; node ``goal_nodes[g]`` is group ``g``'s goal (never equal to a state), and
    ``next_nodes`` is the goal on the rows in ``to_goal``.
    """
    n = group_index.size
    states = list(anchors)
    nexts = list(next_anchors)
    if len(states) != n or len(nexts) != n:
        raise ValueError(f"anchors and next_anchors must have {n} rows, got "
                         f"{len(states)} and {len(nexts)}")
    # The states in the order GraphGPO's canonicalizer meets them: row by row, the
    # state, then the next state (the goal is no text and is met by no one).
    order_rows = np.repeat(np.arange(n), 2)
    is_next = np.tile(np.array([False, True]), n)
    keep = ~(is_next & to_goal[order_rows])
    texts = [nexts[row] if after else states[row]
             for row, after in zip(order_rows[keep].tolist(), is_next[keep].tolist(),
                                   strict=True)]
    visit_groups = group_index[order_rows[keep]]
    codes = anchor_codes(texts, len(texts))
    if similarity_threshold is not None:
        codes = similarity_codes(texts, visit_groups, codes, float(similarity_threshold))
    node_keys = visit_groups.astype(np.int64) * (int(codes.max()) + 1) + codes
    _, node_of_visit = np.unique(node_keys, return_inverse=True)
    node_of_visit = node_of_visit.reshape(-1)
    n_states = int(node_of_visit.max()) + 1
    node_groups = np.empty(n_states + n_groups, dtype=np.intp)
    node_groups[node_of_visit] = visit_groups
    node_groups[n_states:] = np.arange(n_groups)
    goal_nodes = n_states + np.arange(n_groups)
    slots = np.full(2 * n, -1, dtype=np.intp)
    slots[np.flatnonzero(keep)] = node_of_visit
    state_nodes = slots[0::2]
    next_nodes = np.where(to_goal, goal_nodes[group_index], slots[1::2])
    return state_nodes, next_nodes, goal_nodes, node_groups


def graphgpo_terms(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    anchors: Any,
    next_anchors: Any,
    success: Any,
    *,
    gamma: float = 0.1,
    normalize: Normalize = "std",
    normalize_distance: bool = False,
    similarity_threshold: float | None = None,
    episode_stats: EpisodeStats = "trajectories",
    eps: float = 1e-6,
    penalties: Any = None,
) -> GraphGPOTerms:
    """GraphGPO's terms (see :func:`graphgpo_advantages`, same arguments but the weights).

    Returns:
        A :class:`GraphGPOTerms` of (N,) arrays.
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
    success = np.asarray(success)
    if success.shape != (n,) or success.dtype != bool:
        raise ValueError(f"success must be an (N,) = ({n},) bool array, got "
                         f"{success.dtype} {success.shape}")
    if n == 0:
        step_group_ids = step_group_index(np.zeros(0, np.intp), anchors, None)
        empty = np.zeros(0, dtype=np.float64)
        return GraphGPOTerms(empty, empty.copy(), empty.copy(), empty.copy(), empty.copy(),
                             step_group_ids)
    trajectories = Trajectories(traj_ids)
    traj_groups, n_groups = trajectories.group_of_each(group_ids)
    group_index = traj_groups[trajectories.index]
    last_rows = np.zeros(n, dtype=bool)
    last_rows[trajectories.input_rows(trajectories.last_positions)] = True
    to_goal = last_rows & success
    state_nodes, next_nodes, goal_nodes, node_groups = _graph_nodes(
        anchors, next_anchors, group_index, to_goal, n_groups, similarity_threshold)
    distances = reverse_distances(state_nodes, next_nodes, goal_nodes, node_groups.size)
    # Unreachable: one past the group's farthest reachable node (GraphGPO's rule; a group
    # without a success reaches only its goal, so all its states get 1).
    reachable = np.isfinite(distances)
    farthest = np.zeros(n_groups)
    np.maximum.at(farthest, node_groups[reachable], distances[reachable])
    distances = np.where(reachable, distances, farthest[node_groups] + 1.0)
    next_distances = distances[next_nodes]
    state_distances = distances[state_nodes]
    exponents = next_distances - state_distances + 1.0 if normalize_distance else next_distances
    returns = GRAPH_GOAL_RETURN * np.power(gamma, exponents)
    if penalties is not None:
        returns = returns - penalties
    step_group_ids = step_group_index(group_index, anchors, None)
    step = normalize_in_groups(returns, step_group_ids, int(step_group_ids.max()) + 1,
                               normalize, eps)
    episode = _episode_advantages(
        rewards, trajectories, traj_groups, n_groups, normalize, eps, episode_stats, penalties)
    return GraphGPOTerms(episode=episode, step=step, returns=returns,
                         distances=next_distances, anchor_distances=state_distances,
                         step_group_ids=step_group_ids)


def graphgpo_advantages(
    rewards: Any,
    traj_ids: Any,
    group_ids: Any,
    anchors: Any,
    next_anchors: Any,
    success: Any,
    *,
    gamma: float = 0.1,
    step_weight: float = 1.0,
    episode_weight: float = 1.0,
    normalize: Normalize = "std",
    normalize_distance: bool = False,
    similarity_threshold: float | None = None,
    episode_stats: EpisodeStats = "trajectories",
    eps: float = 1e-6,
    penalties: Any = None,
) -> np.ndarray:
    """GraphGPO advantage per step row (Cheng et al., ICML 2026, arXiv:2605.26684, "Beyond
    Trajectory-Level Attribution: Graph-Based Credit Assignment for Agentic Reinforcement
    Learning"; its recipe's ``core_graph.py``: ``ComplexGraph``,
    ``compute_graph_path_returns``, ``compute_graphgpo_outcome_advantage``).

    1. Each group's rollout makes a directed graph: one node per distinct state (the
       anchors and the next states), one edge ``anchor -> next`` per row, and a goal
       node, which the last step of every successful trajectory leads to instead of its
       terminal state.
    2. ``d(s)``: edges from ``s`` to the goal (breadth-first over the reversed edges:
       every edge weighs 1). A state that cannot reach the goal gets ``D + 1``, ``D`` the
       largest distance in the group's graph; in a group without a success only the goal
       is reachable (``D = 0``), so every state gets 1.
    3. Step return ``R = 10 * gamma ** d(s')`` for the row's next state ``s'``; with
       ``normalize_distance``, ``R = 10 * gamma ** (d(s') - d(s) + 1)`` (10 for a step
       one edge closer, ``10 gamma`` for a step that stays as far, ...); minus the row's
       penalty.
    4. ``A_S``: ``R`` normalized in the step groups (equal anchors in a group, GiGPO
       Eq. 6-7, sample std; never fuzzy: ``similarity_threshold`` merges graph nodes
       only, as the reference's ``enable_similarity``); ``A_E``: GiGPO's episode term.
       ``A = step_weight * A_S + episode_weight * A_E``.

    Next states come from the rollout: ``next_anchors[i]`` is the anchor of the state row
    ``i``'s action led to (the next row's anchor, or the terminal state's for a
    trajectory's last row); the goal replaces it on the last row of a trajectory with
    ``success``. (The reference marks the goal where the episode's env reward sum is
    above 0, the same in its ALFWorld and WebShop, whose only reward is 10 on success.)
    The goal is a node of its own: the reference names it ``'success'``, so an anchor
    equal (or, with similarity, ``>= threshold`` similar) to that word would merge with
    it there, never here. Similarity: per group, the states are met in row order (each
    row's state, then its next state) and each joins the first earlier cluster whose
    first member is ``>= threshold`` similar (difflib), as the reference's
    ``StateCanonicalizer``.

    Args:
        rewards: (N,) float step rewards (the episode term's scores; the graph returns
            do not read them).
        traj_ids: (N,) int (or str) trajectory ids, rows in time order per trajectory.
        group_ids: (N,) int (or str) group ids, constant within a trajectory.
        anchors: length-N hashables: the state each action was taken in.
        next_anchors: length-N hashables: the state each action led to.
        success: (N,) bool: the row's trajectory succeeded (read on its last row).
        gamma: decay of the graph returns, in [0, 1]; 0.10 in the ALFWorld script, 0.20
            in the WebShop one.
        step_weight: weight of ``A_S`` (``step_advantage_w``, 1.0).
        episode_weight: weight of ``A_E`` (``episode_advantage_w``, 1.0; 0: ``A_S``
            alone).
        normalize: "std" (``mean_std_norm``) or "mean" (``mean_norm``), both terms.
        normalize_distance: returns from the distance gained, not the distance left.
        similarity_threshold: ``None`` (exact states) or a difflib ratio in (0, 1) above
            which str states share a node.
        episode_stats: "trajectories" (Eq. 3) or "steps" (verl-agent's trainer).
        eps: added to the std; 1e-6.
        penalties: optional (N,) row penalties, subtracted from the row's graph return
            and episode score (verl-agent's placement; needs ``episode_stats="steps"``).

    Returns:
        (N,) float64 advantages in input row order.

    Raises:
        ValueError: bad shapes, non-finite rewards, unknown options, a bad ``success``.
        TypeError: unhashable anchors, or non-str anchors with a similarity threshold.
    """
    terms = graphgpo_terms(
        rewards, traj_ids, group_ids, anchors, next_anchors, success, gamma=gamma,
        normalize=normalize, normalize_distance=normalize_distance,
        similarity_threshold=similarity_threshold, episode_stats=episode_stats, eps=eps,
        penalties=penalties)
    return terms.combined(step_weight, episode_weight)


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
