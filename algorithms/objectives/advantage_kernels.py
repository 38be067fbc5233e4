"""The array kernels behind :mod:`algorithms.objectives.advantages`: input checks, trajectory
segments, group statistics and anchor codes.

Everything here works on one row per agent step without a Python loop over rows:

- Integer ids in a compact range (the usual 0..T-1) are densified by presence tables in
  O(N + span) (:func:`dense_ids`); str or widely spread ids go through ``np.unique``,
  O(N log N).
- Trajectories (:class:`Trajectories`) are found without sorting when the rows already
  come sorted by trajectory id (the trajectory-major batches :mod:`algorithms.agent.rollout`
  builds: one O(N) check); interleaved rows are stably sorted on a 16-bit key, which
  NumPy's ``argsort`` does as an O(N) radix sort.
- Discounted sums (returns, GAE) are segmented log-depth scans
  (:func:`reverse_discounted_scan`): ceil(log2(longest trajectory)) passes of O(N) array
  operations.
- Anchors (:func:`anchor_codes`) are coded by one C-level ``map(dict.setdefault, ...)``
  pass for Python objects, loop-free ``np.unique`` for arrays; the optional similarity
  grouping (:func:`similarity_codes`) loops over *distinct* anchors of a group only.

How fast that is against a per-group loop and against verl-agent's code:
``benchmarks/advantages.py`` (figures in docs/benchmarks.md).
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Mapping
from functools import cached_property
from typing import Any

import numpy as np


def as_rewards(rewards: Any, name: str = "rewards") -> np.ndarray:
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


def as_penalties(penalties: Any, n: int, episode_stats: str) -> np.ndarray | None:
    """(N,) finite float64 row penalties, or ``None`` when there are none."""
    if penalties is None:
        return None
    array = as_rewards(penalties, "penalties")
    if array.shape[0] != n:
        raise ValueError(f"penalties has {array.shape[0]} rows, expected {n}")
    if episode_stats != "steps" and np.any(array != 0.0):
        raise ValueError(
            "row penalties need episode_stats='steps' (each row's own score enters the "
            "group statistics); with episode_stats='trajectories' put the penalty in the "
            "rewards instead (penalty_in_returns)")
    return array


def as_ids(ids: Any, name: str, n: int) -> np.ndarray:
    """(N,) integer or string id array, validated against the row count ``n``."""
    array = np.asarray(ids)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one row per step), got shape {array.shape}")
    if array.shape[0] != n:
        raise ValueError(f"{name} has {array.shape[0]} rows, expected {n}")
    if array.size and array.dtype.kind not in "iuUS":
        raise TypeError(f"{name} must hold integer (or str) ids, got dtype {array.dtype}")
    return array


def check_choice(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_unit_interval(value: float, name: str) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


def check_similarity_threshold(threshold: float | None) -> None:
    if threshold is not None and not 0.0 < float(threshold) < 1.0:
        raise ValueError(f"similarity_threshold must be in (0, 1), got {threshold}")


def check_eps(eps: float) -> float:
    """``eps`` of an estimator whose every division by ``std + eps`` skips degenerate
    groups (they score exactly 0), so that eps 0 is a plain division by the std."""
    eps = float(eps)
    if not (np.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    return eps


def check_positive_eps(eps: float, why: str) -> float:
    """``eps`` of an estimator that divides by ``x + eps`` where ``x`` can be 0 (HGPO's sum
    of weights, REINFORCE++'s batch variance): eps 0 would make that 0 / 0, NaN.

    Raises:
        ValueError: ``eps`` not finite or not > 0 (the message says ``why``).
    """
    eps = float(eps)
    if not (np.isfinite(eps) and eps > 0.0):
        raise ValueError(f"eps must be finite and > 0 ({why}), got {eps}")
    return eps


def widened(ids: np.ndarray) -> np.ndarray:
    """Integer ids as a 64-bit array, so that ``ids - ids.min()`` cannot overflow."""
    if ids.dtype.itemsize == 8:
        return ids
    return ids.astype(np.uint64 if ids.dtype.kind == "u" else np.int64)


def dense_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ids (sorted) and the (N,) dense index 0..K-1 of each row.

    Integer ids spanning a range of at most a few times N (the usual 0..T-1 or
    slightly sparse ids) go through a presence table in O(N + span) without sorting;
    other ids (str, very sparse ints) through ``np.unique`` in O(N log N).
    """
    if ids.size and ids.dtype.kind in "iu":
        low, high = int(ids.min()), int(ids.max())  # Python ints: no overflow
        span = high - low + 1
        if span <= 4 * ids.size + 1024:
            wide = widened(ids)
            offsets = (wide - low).astype(np.intp, copy=False)
            distinct, index = dense_codes(offsets, span)
            uniques = distinct.astype(wide.dtype) + wide.dtype.type(low)  # 64-bit: no overflow
            return uniques.astype(ids.dtype), index
    uniques, index = np.unique(ids, return_inverse=True)
    return uniques, index.reshape(-1).astype(np.intp, copy=False)


def dense_codes(codes: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``codes`` in [0, span) (sorted), and the (N,) dense rank of each, O(N + span)."""
    present = np.zeros(span, dtype=bool)
    present[codes] = True
    distinct = np.flatnonzero(present)
    rank = np.empty(span, dtype=np.intp)
    rank[distinct] = np.arange(distinct.size)
    return distinct, rank[codes]


class Trajectories:
    """Which trajectory each row belongs to, and the rows sorted by trajectory.

    Every part is computed on first use: GRPO needs the dense index but no sort,
    discounted returns and GAE need the sort but no dense index.

    Attributes:
        index: (N,) dense trajectory index 0..T-1 of each row (ids in sorted order).
        count: T, the number of trajectories.
        grouped: True when the rows already come sorted by trajectory id (a
            trajectory-major batch with ascending ids, as :mod:`algorithms.agent.rollout` builds
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
        return dense_ids(self._traj_ids)[1]

    @cached_property
    def count(self) -> int:
        return int(self.index.max()) + 1 if self.index.size else 0

    @cached_property
    def _key(self) -> np.ndarray:
        """(N,) sort key ordered and equal like the ids; 16-bit where possible."""
        ids = self._traj_ids
        if ids.dtype.kind in "iu":
            wide = widened(ids)
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
        distinct, group_of_traj = dense_ids(groups)
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


def reverse_discounted_scan(values: np.ndarray, sorted_key: np.ndarray, coef: float) -> np.ndarray:
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


def discounted_returns_sorted(
    rewards: np.ndarray, trajectories: Trajectories, gamma: float
) -> np.ndarray:
    """(N,) returns in the original row order (Eq. 5)."""
    sorted_returns = reverse_discounted_scan(
        trajectories.in_sorted_order(rewards), trajectories.sorted_key, gamma
    )
    return trajectories.in_input_order(sorted_returns)


def normalize_in_groups(
    values: np.ndarray, group_index: np.ndarray, n_groups: int, normalize: str, eps: float,
    ddof: int = 1,
) -> np.ndarray:
    """Group-relative scores ``(x - mean) / (std + eps)`` (or ``x - mean``).

    Args:
        values: (M,) float64.
        group_index: (M,) dense group index in [0, n_groups).
        n_groups: number of groups.
        normalize: "std" or "mean".
        eps: added to the std.
        ddof: the std's delta degrees of freedom: 1 (the sample std, GiGPO's and GRPO's)
            or 0 (the population std, HGPO's history groups).

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
    stds = np.sqrt(squares / np.maximum(counts - ddof, 1))
    # Zero squares: a singleton or constant group (or spreads below 1e-154, whose
    # squares underflow); such groups score exactly 0, whatever eps is.
    degenerate = (counts < 2) | (squares == 0.0)
    with np.errstate(divide="ignore"):
        scales = np.where(degenerate, 0.0, 1.0 / (stds + eps))
    return deviations * scales[group_index]


def anchor_codes(anchors: Any, n: int) -> np.ndarray:
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
            return dense_ids(anchors)[1]
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
    return dense_codes(first_rows, n)[1]


def similarity_codes(
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


def step_group_index(
    group_index: np.ndarray, anchors: Any, similarity_threshold: float | None
) -> np.ndarray:
    """(N,) dense step-group ids from dense group indices and raw anchors."""
    n = group_index.size
    if n == 0:
        if len(anchors) != 0:
            raise ValueError(f"anchors has {len(anchors)} rows, expected 0")
        return np.zeros(0, dtype=np.intp)
    codes = anchor_codes(anchors, n)
    if similarity_threshold is not None:
        codes = similarity_codes(anchors, group_index, codes, float(similarity_threshold))
    keys = group_index * (int(codes.max()) + 1) + codes
    span = int(keys.max()) + 1
    if span <= 4 * n + 1024:
        return dense_codes(keys, span)[1]
    return dense_ids(keys)[1]


def bootstrap_values(last_values: Any, trajectories: Trajectories, n: int) -> np.ndarray:
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



def extended_keys(keys: np.ndarray, codes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Dense ids of the pairs ``(keys[rows], codes[rows])``: a key grown by one more code.

    Args:
        keys: (N,) int dense keys (only ``rows`` are read).
        codes: (N,) int codes in [0, C) to append (only ``rows`` are read).
        rows: (M,) rows whose pairs are coded.

    Returns:
        (M,) int dense ids 0..K-1, equal exactly when both parts are equal.
    """
    if rows.size == 0:
        return np.zeros(0, dtype=np.intp)
    width = int(codes[rows].max()) + 1
    pairs = keys[rows].astype(np.int64) * width + codes[rows]
    span = int(pairs.max()) + 1
    if span <= 4 * rows.size + 1024:
        return dense_codes(pairs, span)[1]
    return dense_ids(pairs)[1]


def reverse_distances(sources: np.ndarray, targets: np.ndarray, goals: np.ndarray,
                      n_nodes: int) -> np.ndarray:
    """Edges-to-go from every node to its nearest goal, along directed edges.

    Breadth-first from all goals at once over the reversed edges (every edge weighs 1,
    so this is the reverse Dijkstra of GraphGPO's ``all_to_target_shortest_paths``): one
    O(E) array pass per distance level, no Python loop over edges.

    Args:
        sources: (E,) int node of each edge's start.
        targets: (E,) int node of each edge's end.
        goals: (G,) int goal nodes (distance 0).
        n_nodes: the number of nodes.

    Returns:
        (n_nodes,) float64 distances; ``inf`` where no goal is reachable.
    """
    distances = np.full(n_nodes, np.inf)
    distances[goals] = 0.0
    frontier = np.zeros(n_nodes, dtype=bool)
    frontier[goals] = True
    level = 0.0
    while frontier.any():
        level += 1.0
        reached = sources[frontier[targets]]
        reached = reached[np.isinf(distances[reached])]
        frontier = np.zeros(n_nodes, dtype=bool)
        frontier[reached] = True
        distances[reached] = level
    return distances
