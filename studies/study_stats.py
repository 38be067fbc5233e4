"""Statistics of a multi-seed comparison: a bootstrap interval, a paired permutation test, and
both over the seeds two runs share.

Pure functions of per-seed figures (``studies/credit_assignment.py`` and
``studies/compare_studies.py`` use them; their hand-computed cases are in
``tests/studies/test_study_stats.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

EXACT_PERMUTATION_MAX = 20
"""Up to this many pairs the permutation test enumerates every sign flip (2**n, in chunks
of :data:`_SIGN_CHUNK` rows: 20 pairs are 1,048,576 assignments)."""

_SIGN_CHUNK = 1 << 16


def bootstrap_ci(values: Sequence[float], *, level: float = 0.95, resamples: int = 10_000,
                 seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``values`` and its percentile-bootstrap interval.

    ``resamples`` samples of ``len(values)`` draws with replacement; the interval is the
    ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of their means (numpy's linear
    interpolation). NaN values are dropped first.

    Returns:
        ``(mean, low, high)``; all NaN when no value is left.
    """
    data = np.asarray(values, dtype=float)
    data = data[~np.isnan(data)]
    if data.size == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, data.size, size=(resamples, data.size))
    means = data[draws].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(data.mean()), float(low), float(high)


def paired_permutation_test(a: Sequence[float], b: Sequence[float], *,
                            resamples: int = 100_000, seed: int = 0) -> float:
    """Two-sided p-value of the mean paired difference ``a - b`` under the null that each
    pair's sign is exchangeable (the two methods were run on the same seeds).

    The statistic is ``|mean(d)|``; the p-value is the share of sign assignments whose
    statistic is at least the observed one (a tolerance of 1e-12 counts ties). Up to
    :data:`EXACT_PERMUTATION_MAX` pairs every assignment is enumerated (the observed one
    included); beyond, ``resamples`` random ones plus the observed one.

    Raises:
        ValueError: ``a`` and ``b`` differ in length or are empty.
    """
    first, second = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if first.shape != second.shape or first.size == 0:
        raise ValueError(f"need two equally long, non-empty samples, got {first.size} and "
                         f"{second.size}")
    diff = first - second
    observed = abs(diff.mean())
    if diff.size <= EXACT_PERMUTATION_MAX:
        return _exact_share(diff, observed)
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(resamples, diff.size))
    stats = np.abs((signs * diff).mean(axis=1))
    return float(((stats >= observed - 1e-12).sum() + 1) / (resamples + 1))


def _exact_share(diff: np.ndarray, observed: float) -> float:
    """The share of all 2**n sign assignments of ``diff`` whose ``|mean|`` is at least
    ``observed`` (ties within 1e-12 count), enumerated chunk by chunk: assignment ``k``'s
    sign ``j`` is ``-1`` where bit ``n - 1 - j`` of ``k`` is set (``itertools.product``'s
    order, the observed assignment first)."""
    n = diff.size
    total = 1 << n
    bits = np.arange(n - 1, -1, -1, dtype=np.int64)
    hits = 0
    for start in range(0, total, _SIGN_CHUNK):
        codes = np.arange(start, min(total, start + _SIGN_CHUNK), dtype=np.int64)
        signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)
        hits += int((np.abs((signs * diff).mean(axis=1)) >= observed - 1e-12).sum())
    return hits / total


def paired_difference_ci(a: Sequence[float], b: Sequence[float], *, level: float = 0.95,
                         resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """The percentile-bootstrap interval of the mean paired difference ``a - b``: the
    seeds (pairs) are resampled with replacement, :func:`bootstrap_ci` on the differences.

    Raises:
        ValueError: ``a`` and ``b`` differ in length or are empty.
    """
    first, second = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if first.shape != second.shape or first.size == 0:
        raise ValueError(f"need two equally long, non-empty samples, got {first.size} and "
                         f"{second.size}")
    _, low, high = bootstrap_ci(first - second, level=level, resamples=resamples, seed=seed)
    return low, high


def paired_comparison(first: Mapping[int, float], second: Mapping[int, float]) -> dict[str, Any]:
    """The paired comparison of two ``{seed: figure}`` maps over the seeds both have.

    Returns:
        ``seeds``, per side ``a``/``b`` the values, mean and 95% bootstrap ``ci95``, the
        ``mean_difference`` (a − b), its 95% paired-bootstrap interval
        ``difference_ci95`` (:func:`paired_difference_ci`) and the two-sided paired
        permutation ``p_value``.

    Raises:
        ValueError: no seed in common.
    """
    common = sorted(set(first) & set(second))
    if not common:
        raise ValueError(f"no seed in common: {sorted(first)} against {sorted(second)}")
    out: dict[str, Any] = {"seeds": common}
    for side, values in (("a", first), ("b", second)):
        row = [values[s] for s in common]
        mean, low, high = bootstrap_ci(row)
        out[side] = {"values": row, "mean": mean, "ci95": [low, high]}
    out["mean_difference"] = float(np.mean(np.subtract(out["a"]["values"], out["b"]["values"])))
    out["difference_ci95"] = list(paired_difference_ci(out["a"]["values"], out["b"]["values"]))
    out["p_value"] = paired_permutation_test(out["a"]["values"], out["b"]["values"])
    return out
