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

Cost: O(N) for integer ids in a compact range (up to 65,536 trajectories: a 16-bit radix
``argsort``, presence tables, ``np.bincount``), O(N log N) otherwise (``np.unique`` for str or
widely spread ids); discounted sums take ceil(log2(longest trajectory)) vectorized passes.
There is no Python loop over rows: arbitrary anchor objects are hashed by one C-level
``map(dict.setdefault, ...)`` pass, and the optional similarity grouping loops over
*distinct* anchors only.

Where the time goes (about 20k rows, see ``benchmarks/advantages.py``): episode terms need
no sort (``np.bincount`` over trajectories). Discounted returns and GAE need each
trajectory's rows in time order. Rows that already come sorted by trajectory id (the
trajectory-major batches :mod:`algorithms.rollout` builds) are detected in one O(N) check
and used as they are; interleaved rows (time-major) are stably sorted first, and the sort
plus one gather and one scatter take about a third of the time. The log-depth scan is the
rest: six rounds of five array operations for trajectories of up to 50 steps. GiGPO with
object anchors spends about half of its time in the dict pass over the anchors.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np

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


# --------------------------------------------------------------------------- validation


def _as_rewards(rewards: Any, name: str = "rewards") -> np.ndarray:
    """(N,) finite float64 view or copy of ``rewards``; never written to."""
    array = np.asarray(rewards, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one row per step), got shape {array.shape}")
    if not np.isfinite(array).all():
        bad = np.flatnonzero(~np.isfinite(array))
        raise ValueError(
            f"{name} must be finite; {bad.size} row(s) are not, first at row {bad[0]}: "
            f"{array[bad[0]]!r}"
        )
    return array


def _as_penalties(penalties: Any, n: int, episode_stats: str) -> np.ndarray | None:
    """(N,) finite float64 row penalties, or ``None`` when there are none."""
    if penalties is None:
        return None
    array = _as_rewards(penalties, "penalties")
    if array.shape[0] != n:
        raise ValueError(f"penalties has {array.shape[0]} rows, expected {n}")
    if episode_stats != "steps" and np.any(array != 0.0):
        raise ValueError(
            "row penalties need episode_stats='steps' (each row's own score enters the "
            "group statistics); with episode_stats='trajectories' put the penalty in the "
            "rewards instead (penalty_in_returns)")
    return array


def _as_ids(ids: Any, name: str, n: int) -> np.ndarray:
    """(N,) integer or string id array, validated against the row count ``n``."""
    array = np.asarray(ids)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one row per step), got shape {array.shape}")
    if array.shape[0] != n:
        raise ValueError(f"{name} has {array.shape[0]} rows, expected {n}")
    if array.size and array.dtype.kind not in "iuUS":
        raise TypeError(f"{name} must hold integer (or str) ids, got dtype {array.dtype}")
    return array


def _check_choice(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _check_unit_interval(value: float, name: str) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


def _check_similarity_threshold(threshold: float | None) -> None:
    if threshold is not None and not 0.0 < float(threshold) < 1.0:
        raise ValueError(f"similarity_threshold must be in (0, 1), got {threshold}")


def _check_eps(eps: float) -> float:
    eps = float(eps)
    if not (np.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    return eps


# --------------------------------------------------------------------------- segments


def _widened(ids: np.ndarray) -> np.ndarray:
    """Integer ids as a 64-bit array, so that ``ids - ids.min()`` cannot overflow."""
    if ids.dtype.itemsize == 8:
        return ids
    return ids.astype(np.uint64 if ids.dtype.kind == "u" else np.int64)


def _dense_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ids (sorted) and the (N,) dense index 0..K-1 of each row.

    Integer ids spanning a range of at most a few times N (the usual 0..T-1 or
    slightly sparse ids) go through a presence table in O(N + span) without sorting;
    other ids (str, very sparse ints) through ``np.unique`` in O(N log N).
    """
    if ids.size and ids.dtype.kind in "iu":
        low, high = int(ids.min()), int(ids.max())  # Python ints: no overflow
        span = high - low + 1
        if span <= 4 * ids.size + 1024:
            wide = _widened(ids)
            offsets = (wide - low).astype(np.intp, copy=False)
            distinct, index = _dense_codes(offsets, span)
            uniques = distinct.astype(wide.dtype) + wide.dtype.type(low)  # 64-bit: no overflow
            return uniques.astype(ids.dtype), index
    uniques, index = np.unique(ids, return_inverse=True)
    return uniques, index.reshape(-1).astype(np.intp, copy=False)


def _dense_codes(codes: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``codes`` in [0, span) (sorted), and the (N,) dense rank of each, O(N + span)."""
    present = np.zeros(span, dtype=bool)
    present[codes] = True
    distinct = np.flatnonzero(present)
    rank = np.empty(span, dtype=np.intp)
    rank[distinct] = np.arange(distinct.size)
    return distinct, rank[codes]


class _Trajectories:
    """Which trajectory each row belongs to, and the rows sorted by trajectory.

    Every part is computed on first use: GRPO needs the dense index but no sort,
    discounted returns and GAE need the sort but no dense index.

    Attributes:
        index: (N,) dense trajectory index 0..T-1 of each row (ids in sorted order).
        count: T, the number of trajectories.
        grouped: True when the rows already come sorted by trajectory id (a
            trajectory-major batch with ascending ids, as :mod:`algorithms.rollout` builds
            them); the sort, the gather and the scatter back are then skipped.
        order: (N,) stable permutation that sorts rows by trajectory id, keeping time
            order inside each trajectory.
        sorted_key: (N,) non-decreasing key of each sorted row: the rows of one trajectory
            are contiguous, and sorted rows ``i`` and ``i + d`` belong to the same
            trajectory exactly when their keys are equal.
        last_positions: (T,) sorted position of each trajectory's last row.
        ids: (T,) the distinct trajectory ids, sorted.
    """

    def __init__(self, traj_ids: np.ndarray) -> None:
        self._traj_ids = traj_ids

    @cached_property
    def index(self) -> np.ndarray:
        return _dense_ids(self._traj_ids)[1]

    @cached_property
    def count(self) -> int:
        return int(self.index.max()) + 1 if self.index.size else 0

    @cached_property
    def _key(self) -> np.ndarray:
        """(N,) sort key ordered and equal like the ids; 16-bit where possible."""
        ids = self._traj_ids
        if ids.dtype.kind in "iu":
            wide = _widened(ids)
            low = wide.min()
            if int(wide.max()) - int(low) < 1 << 16:
                return (wide - low).astype(np.uint16)  # no dense index needed
        return self.index.astype(np.uint16) if self.count <= 1 << 16 else self.index

    @cached_property
    def grouped(self) -> bool:
        key = self._key
        return bool((key[1:] >= key[:-1]).all())

    @cached_property
    def order(self) -> np.ndarray:
        # A 16-bit key lets NumPy's stable argsort use its O(N) radix sort.
        return np.argsort(self._key, kind="stable")

    @cached_property
    def sorted_key(self) -> np.ndarray:
        return self._key if self.grouped else self._key[self.order]

    def in_sorted_order(self, values: np.ndarray) -> np.ndarray:
        """(N,) ``values`` (input row order) in sorted row order; never a view to write to."""
        return values if self.grouped else values[self.order]

    def input_rows(self, positions: np.ndarray) -> np.ndarray:
        """Input row numbers of the given sorted positions."""
        return positions if self.grouped else self.order[positions]

    @cached_property
    def last_positions(self) -> np.ndarray:
        return np.flatnonzero(np.append(self.sorted_key[1:] != self.sorted_key[:-1], True))

    @cached_property
    def ids(self) -> np.ndarray:
        return self._traj_ids[self.input_rows(self.last_positions)]

    def group_of_each(self, group_ids: np.ndarray) -> tuple[np.ndarray, int]:
        """(T,) dense group index of each trajectory, and the number of groups.

        Densifies T ids instead of N. Raises ValueError if the rows of a trajectory
        carry more than one group id.
        """
        groups = np.empty(self.count, dtype=group_ids.dtype)
        groups[self.index] = group_ids  # keeps one of each trajectory's group ids
        split = groups[self.index] != group_ids
        if split.any():
            bad = np.unique(self.index[split])
            first_row = int(np.argmax(split))
            raise ValueError(
                f"every trajectory must belong to one group; {bad.size} do not, e.g. "
                f"trajectory {self._traj_ids[first_row]!r}"
            )
        distinct, group_of_traj = _dense_ids(groups)
        return group_of_traj, distinct.size

    def in_input_order(self, sorted_values: np.ndarray) -> np.ndarray:
        """(N,) values given in sorted row order, put back in input row order.

        May return ``sorted_values`` itself (grouped input): pass a fresh array.
        """
        if self.grouped:
            return sorted_values
        values = np.empty_like(sorted_values)
        values[self.order] = sorted_values
        return values


def _reverse_discounted_scan(values: np.ndarray, sorted_key: np.ndarray, coef: float) -> np.ndarray:
    """Segmented ``out[i] = sum_k coef**k * values[i + k]`` up to each segment's end.

    A log-depth (Hillis-Steele) scan: after the round with stride ``d`` every position
    holds the discounted sum of its next ``2 * d`` values, so ceil(log2(longest
    segment)) rounds of O(N) array operations do the whole batch. Only non-negative
    powers coef**d <= 1 appear (no division by coef**t, hence no overflow for small coef
    or long segments); coef = 0 gives exactly ``values`` and coef = 1 plain suffix sums.

    Args:
        values: (N,) float64, rows sorted by segment, time order inside.
        sorted_key: (N,) non-decreasing segment key of each row.
        coef: the discount in [0, 1].

    Returns:
        (N,) float64 new array.
    """
    out = values.astype(np.float64, copy=True)
    stride = 1
    while stride < out.size:
        same_segment = sorted_key[stride:] == sorted_key[:-stride]
        if not same_segment.any():  # no segment is longer than ``stride``: done
            break
        # The addend is built from the old values before the in-place add; values are
        # finite, so multiplying by the 0/1 "same segment" gate is exact.
        addend = out[stride:] * coef**stride
        addend *= same_segment
        out[:-stride] += addend
        stride *= 2
    return out


def _discounted_returns_sorted(
    rewards: np.ndarray, trajectories: _Trajectories, gamma: float
) -> np.ndarray:
    """(N,) returns in the original row order (Eq. 5)."""
    sorted_returns = _reverse_discounted_scan(
        trajectories.in_sorted_order(rewards), trajectories.sorted_key, gamma
    )
    return trajectories.in_input_order(sorted_returns)


# --------------------------------------------------------------------------- group stats


def _normalize_in_groups(
    values: np.ndarray, group_index: np.ndarray, n_groups: int, normalize: str, eps: float
) -> np.ndarray:
    """Group-relative scores ``(x - mean) / (std + eps)`` (or ``x - mean``).

    Args:
        values: (M,) float64.
        group_index: (M,) dense group index in [0, n_groups).
        n_groups: number of groups.
        normalize: "std" (sample std, ddof=1) or "mean".
        eps: added to the std.

    Returns:
        (M,) float64; exactly 0 for members of singleton groups and of groups whose
        values are all equal.
    """
    if values.size == 0:
        return np.zeros(0, dtype=np.float64)
    counts = np.bincount(group_index, minlength=n_groups)
    # Shift by one member's value (``out[index] = values`` keeps *some* member per slot):
    # a singleton or constant group then has deviations that are exactly zero.
    representative = np.zeros(n_groups)
    representative[group_index] = values
    shifted = values - representative[group_index]
    means = np.bincount(group_index, weights=shifted, minlength=n_groups) / np.maximum(counts, 1)
    deviations = shifted - means[group_index]
    if normalize == "mean":
        return deviations
    squares = np.bincount(group_index, weights=deviations * deviations, minlength=n_groups)
    stds = np.sqrt(squares / np.maximum(counts - 1, 1))
    # Zero squares: a singleton or constant group (or spreads below 1e-154, whose
    # squares underflow); such groups score exactly 0, whatever eps is.
    degenerate = (counts < 2) | (squares == 0.0)
    with np.errstate(divide="ignore"):
        scales = np.where(degenerate, 0.0, 1.0 / (stds + eps))
    return deviations * scales[group_index]


# --------------------------------------------------------------------------- public API


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
    rewards = _as_rewards(rewards)
    traj_ids = _as_ids(traj_ids, "traj_ids", rewards.shape[0])
    gamma = _check_unit_interval(gamma, "gamma")
    if rewards.size == 0:
        return np.zeros(0, dtype=np.float64)
    return _discounted_returns_sorted(rewards, _Trajectories(traj_ids), gamma)


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
    rewards = _as_rewards(rewards)
    n = rewards.shape[0]
    traj_ids = _as_ids(traj_ids, "traj_ids", n)
    group_ids = _as_ids(group_ids, "group_ids", n)
    _check_choice(normalize, _NORMALIZE_CHOICES, "normalize")
    _check_choice(episode_stats, _EPISODE_STATS_CHOICES, "episode_stats")
    penalties = _as_penalties(penalties, n, episode_stats)
    eps = _check_eps(eps)
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    trajectories = _Trajectories(traj_ids)
    traj_groups, n_groups = trajectories.group_of_each(group_ids)
    return _episode_advantages(
        rewards, trajectories, traj_groups, n_groups, normalize, eps, episode_stats, penalties
    )


def _episode_scores(
    rewards: np.ndarray,
    trajectories: _Trajectories,
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
    trajectories: _Trajectories,
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
    relative = _normalize_in_groups(scores, groups, n_groups, normalize, eps)
    return relative if to_rows is None else relative[to_rows]


def _group_episode_inputs(
    rewards: Any, traj_ids: Any, group_ids: Any, episode_stats: str, penalties: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int] | None:
    """Validated episode-level members of a batch (see :func:`_episode_scores`) and the
    number of groups; ``None`` for an empty batch."""
    rewards = _as_rewards(rewards)
    n = rewards.shape[0]
    traj_ids = _as_ids(traj_ids, "traj_ids", n)
    group_ids = _as_ids(group_ids, "group_ids", n)
    _check_choice(episode_stats, _EPISODE_STATS_CHOICES, "episode_stats")
    penalties = _as_penalties(penalties, n, episode_stats)
    if n == 0:
        return None
    trajectories = _Trajectories(traj_ids)
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
    centered = _normalize_in_groups(scores, groups, n_groups, "mean", 0.0)
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
    eps = _check_eps(eps)
    rewards = _as_rewards(rewards)
    n = rewards.shape[0]
    weights = None
    if token_counts is not None:
        weights = _as_rewards(token_counts, "token_counts")
        if weights.shape[0] != n:
            raise ValueError(f"token_counts has {weights.shape[0]} rows, expected {n}")
        if np.any(weights < 0):
            raise ValueError("token_counts must be >= 0")
    members = _group_episode_inputs(rewards, traj_ids, group_ids, episode_stats, penalties)
    if members is None:
        return np.zeros(0, dtype=np.float64)
    scores, groups, to_rows, n_groups = members
    centered = _normalize_in_groups(scores, groups, n_groups, "mean", 0.0)
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
    lengths = _as_rewards(response_lengths, "response_lengths")
    if not 0 < buffer_length <= max_response_length:
        raise ValueError(f"buffer_length must be in (0, max_response_length = "
                         f"{max_response_length}], got {buffer_length}")
    if penalty_factor < 0:
        raise ValueError(f"penalty_factor must be >= 0, got {penalty_factor}")
    expected = max_response_length - buffer_length
    exceed = lengths - expected
    return np.maximum(exceed / buffer_length * float(penalty_factor), 0.0)


def _anchor_codes(anchors: Any, n: int) -> np.ndarray:
    """(N,) int codes, equal exactly when the anchors are equal.

    NumPy arrays are coded without a Python loop: 1-D integers by a presence table,
    other 1-D dtypes and rows of 2-D arrays by ``np.unique``. Anything else goes through a dict in one
    ``map(dict.setdefault, ...)`` pass over the rows (C-level, no Python bytecode per
    row), coded by first occurrence: equality is Python's ``==``/``hash``, so ``1``,
    ``1.0`` and ``True`` are the same anchor, and unhashable anchors (lists, dicts) raise.
    """
    if isinstance(anchors, np.ndarray) and anchors.dtype.kind != "O":
        if anchors.shape[:1] != (n,) or anchors.ndim > 2:
            raise ValueError(f"anchors must have {n} rows (1-D or 2-D), got {anchors.shape}")
        if anchors.ndim == 1 and anchors.dtype.kind in "iu":
            return _dense_ids(anchors)[1]
        axis = 0 if anchors.ndim == 2 else None
        _, codes = np.unique(anchors, axis=axis, return_inverse=True)
        return codes.reshape(-1)
    if isinstance(anchors, np.ndarray) and anchors.ndim != 1:
        raise ValueError(f"object anchors must be 1-D, got shape {anchors.shape}")
    if len(anchors) != n:
        raise ValueError(f"anchors has {len(anchors)} rows, expected {n}")
    table: dict[Any, int] = {}
    try:
        # One C-level pass: each row gets the row number of its anchor's first occurrence.
        first_rows = np.fromiter(map(table.setdefault, anchors, range(n)), dtype=np.intp, count=n)
    except TypeError as error:
        raise TypeError(
            f"anchors must be hashable (str, int, tuple, ...); convert lists or arrays to "
            f"tuples first ({error})"
        ) from error
    return _dense_codes(first_rows, n)[1]


def _similarity_codes(
    anchors: Any, group_index: np.ndarray, exact_codes: np.ndarray, threshold: float
) -> np.ndarray:
    """(N,) cluster codes: within a group, similar str anchors share a code.

    Per group, the distinct anchor strings are visited in the order of their first row
    (verl-agent's ``build_step_group`` visits rows in batch order: a text equal to an
    earlier one joins that one's cluster, so visiting distinct texts is the same); each
    joins the first existing cluster whose representative (its first member) has
    ``difflib.SequenceMatcher(None, text, representative).ratio() >= threshold`` (verl's
    ``are_similar``, difflib's default autojunk included), else starts a new cluster. The
    clusters therefore depend on the row order, as verl-agent's do: a chain of texts each
    similar to the next can fall into one cluster or two. Cost: up to U*(U-1)/2 comparisons
    per group with U distinct anchors, each O(L**2) in the string length L in the worst
    case: a Python loop over distinct anchors, not vectorized. Fine for ALFWorld-size
    batches (a few hundred distinct short observations per group); slow for long
    WebShop pages.
    """
    texts = list(anchors)
    is_str = np.fromiter((isinstance(text, str) for text in texts), dtype=bool, count=len(texts))
    if not is_str.all():
        row = int(np.argmin(is_str))
        raise TypeError(
            f"similarity grouping needs str anchors; row {row} is {type(texts[row]).__name__}"
        )
    objects = np.array(texts, dtype=object)
    pair_keys = group_index.astype(np.int64) * (int(exact_codes.max()) + 1) + exact_codes
    _, first_rows, pair_inverse = np.unique(pair_keys, return_index=True, return_inverse=True)
    pair_groups = group_index[first_rows]
    pair_texts = objects[first_rows]
    visit = np.lexsort((first_rows, pair_groups))  # by group, then by first row
    cluster_of_pair = np.empty(first_rows.size, dtype=np.int64)
    next_cluster = 0
    current_group = -1
    representatives: list[tuple[str, int]] = []
    for pair in visit.tolist():
        if pair_groups[pair] != current_group:
            current_group = pair_groups[pair]
            representatives = []
        text = pair_texts[pair]
        matcher = difflib.SequenceMatcher(None)
        matcher.set_seq1(text)
        for rep_text, rep_cluster in representatives:
            matcher.set_seq2(rep_text)
            if (
                matcher.real_quick_ratio() >= threshold
                and matcher.quick_ratio() >= threshold
                and matcher.ratio() >= threshold
            ):
                cluster_of_pair[pair] = rep_cluster
                break
        else:
            cluster_of_pair[pair] = next_cluster
            representatives.append((text, next_cluster))
            next_cluster += 1
    return cluster_of_pair[pair_inverse.reshape(-1)]


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
    group_ids = _as_ids(group_ids, "group_ids", n)
    _check_similarity_threshold(similarity_threshold)
    _, group_index = _dense_ids(group_ids)
    return _step_group_index(group_index, anchors, similarity_threshold)


def _step_group_index(
    group_index: np.ndarray, anchors: Any, similarity_threshold: float | None
) -> np.ndarray:
    """(N,) dense step-group ids from dense group indices and raw anchors."""
    n = group_index.size
    if n == 0:
        if len(anchors) != 0:
            raise ValueError(f"anchors has {len(anchors)} rows, expected 0")
        return np.zeros(0, dtype=np.intp)
    codes = _anchor_codes(anchors, n)
    if similarity_threshold is not None:
        codes = _similarity_codes(anchors, group_index, codes, float(similarity_threshold))
    keys = group_index * (int(codes.max()) + 1) + codes
    span = int(keys.max()) + 1
    if span <= 4 * n + 1024:
        return _dense_codes(keys, span)[1]
    return _dense_ids(keys)[1]


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
    rewards = _as_rewards(rewards)
    n = rewards.shape[0]
    traj_ids = _as_ids(traj_ids, "traj_ids", n)
    group_ids = _as_ids(group_ids, "group_ids", n)
    gamma = _check_unit_interval(gamma, "gamma")
    _check_choice(normalize, _NORMALIZE_CHOICES, "normalize")
    _check_choice(episode_stats, _EPISODE_STATS_CHOICES, "episode_stats")
    penalties = _as_penalties(penalties, n, episode_stats)
    eps = _check_eps(eps)
    _check_similarity_threshold(similarity_threshold)
    if n == 0:
        step_group_ids = _step_group_index(np.zeros(0, np.intp), anchors, similarity_threshold)
        empty = np.zeros(0, dtype=np.float64)
        return GiGPOTerms(empty, empty.copy(), empty.copy(), step_group_ids)
    trajectories = _Trajectories(traj_ids)
    traj_groups, n_groups = trajectories.group_of_each(group_ids)
    group_index = traj_groups[trajectories.index]
    step_group_ids = _step_group_index(group_index, anchors, similarity_threshold)
    episode = _episode_advantages(
        rewards, trajectories, traj_groups, n_groups, normalize, eps, episode_stats, penalties
    )
    returns = _discounted_returns_sorted(rewards, trajectories, gamma)
    if penalties is not None:  # charged to the row's own step return only
        returns = returns - penalties
    n_step_groups = int(step_group_ids.max()) + 1
    step = _normalize_in_groups(returns, step_group_ids, n_step_groups, normalize, eps)
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


def _bootstrap_values(last_values: Any, trajectories: _Trajectories, n: int) -> np.ndarray:
    """(T,) value after each trajectory's last step: the bootstrap, 0 when terminated."""
    n_traj = trajectories.last_positions.size
    if last_values is None:
        return np.zeros(n_traj)
    if isinstance(last_values, Mapping):
        ids = trajectories.ids.tolist()
        known = set(ids)
        if not known.issuperset(last_values):
            unknown = next(key for key in last_values if key not in known)
            raise ValueError(f"last_values has ids that are not in traj_ids, e.g. {unknown!r}")
        # one C-level pass over the T ids (float() of each value happens in fromiter)
        per_traj = np.fromiter(
            map(last_values.get, ids, itertools.repeat(np.nan)), dtype=np.float64, count=len(ids)
        )
    else:
        per_row = np.asarray(last_values, dtype=np.float64)
        if per_row.shape != (n,):
            raise ValueError(
                f"last_values must be None, a mapping traj_id -> value, or an (N,) = ({n},) "
                f"array; got shape {per_row.shape}"
            )
        per_traj = per_row[trajectories.input_rows(trajectories.last_positions)]
    if np.isinf(per_traj).any():
        raise ValueError("last_values must be finite (bootstrap) or NaN (terminated), got inf")
    return np.where(np.isnan(per_traj), 0.0, per_traj)


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
    rewards = _as_rewards(rewards)
    n = rewards.shape[0]
    values = _as_rewards(values, "values")
    if values.shape != (n,):
        raise ValueError(f"values has {values.shape[0]} rows, expected {n}")
    traj_ids = _as_ids(traj_ids, "traj_ids", n)
    gamma = _check_unit_interval(gamma, "gamma")
    lam = _check_unit_interval(lam, "lam")
    if n == 0:
        return np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.float64)
    trajectories = _Trajectories(traj_ids)
    bootstrap = _bootstrap_values(last_values, trajectories, n)

    # in trajectory-sorted order, the next row is the next step except after a last step
    sorted_values = trajectories.in_sorted_order(values)
    next_values = np.append(sorted_values[1:], 0.0)
    next_values[trajectories.last_positions] = bootstrap
    deltas = trajectories.in_sorted_order(rewards) + gamma * next_values - sorted_values
    sorted_advantages = _reverse_discounted_scan(deltas, trajectories.sorted_key, gamma * lam)
    advantages = trajectories.in_input_order(sorted_advantages)
    return advantages, advantages + values
