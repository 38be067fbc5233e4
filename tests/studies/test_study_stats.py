"""Hand-computed cases of the study's statistics (studies/study_stats.py)."""

import itertools
import math

import numpy as np
import pytest

from studies.study_stats import (
    bootstrap_ci,
    paired_comparison,
    paired_difference_ci,
    paired_permutation_test,
)


def test_bootstrap_of_equal_values_is_a_point():
    assert bootstrap_ci([0.25, 0.25, 0.25]) == (0.25, 0.25, 0.25)


def test_bootstrap_of_two_values_spans_both():
    # resampling [0, 1] twice: means 0, 0.5, 1 with chances 1/4, 1/2, 1/4, so the 2.5% and
    # 97.5% quantiles are 0 and 1
    mean, low, high = bootstrap_ci([0.0, 1.0], resamples=20_000)
    assert (mean, low, high) == (0.5, 0.0, 1.0)


def test_bootstrap_interval_of_a_larger_sample():
    # ten values 0/1 with mean 0.3: the mean's standard error is sqrt(0.3 * 0.7 / 10) =
    # 0.145, so the 95% interval is about 0.3 +- 0.28 (the bootstrap is discrete: 0 .. 0.6)
    mean, low, high = bootstrap_ci([1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    assert mean == pytest.approx(0.3)
    assert low == pytest.approx(0.0, abs=0.05) and high == pytest.approx(0.6, abs=0.05)


def test_bootstrap_drops_nan_and_returns_nan_for_nothing():
    assert bootstrap_ci([float("nan"), 0.5]) == (0.5, 0.5, 0.5)
    assert all(math.isnan(x) for x in bootstrap_ci([float("nan")]))


def test_permutation_of_three_equal_gains():
    # d = [1, 1, 1]: of the 8 sign flips only all-plus and all-minus reach |mean| 1
    assert paired_permutation_test([2, 2, 2], [1, 1, 1]) == pytest.approx(2 / 8)


def test_permutation_counts_ties_and_smaller_sums():
    # d = [1, 2, 3], |mean| 2: flips with |sum| >= 6 are +++ and --- only; 2/8
    assert paired_permutation_test([1, 2, 3], [0, 0, 0]) == pytest.approx(0.25)
    # d = [1, 1, 2], |sum| 4: +++ (4), --- (-4); ++- is 0, +-+ and -++ are 2: 2/8
    assert paired_permutation_test([1, 1, 2], [0, 0, 0]) == pytest.approx(0.25)
    # d = [3, 1]: |sum| 4 for ++ and --, 2 for +- and -+: 2/4
    assert paired_permutation_test([3, 1], [0, 0]) == pytest.approx(0.5)


def test_no_difference_gives_p_one_and_bad_input_is_refused():
    assert paired_permutation_test([0.5, 0.2], [0.5, 0.2]) == 1.0
    with pytest.raises(ValueError, match="equally long"):
        paired_permutation_test([1.0], [1.0, 2.0])


def test_twenty_pairs_are_enumerated_exactly():
    # 20 pairs all +1: only the all-plus and all-minus of the 2**20 flips reach |mean| 1
    assert paired_permutation_test([1.0] * 20, [0.0] * 20) == 2 / 2**20


def test_the_chunked_enumeration_equals_itertools_product():
    rng = np.random.default_rng(3)
    diff = np.round(rng.normal(size=12), 1)  # rounded: ties among the flips
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=diff.size)))
    stats = np.abs((signs * diff).mean(axis=1))
    expected = float((stats >= abs(diff.mean()) - 1e-12).mean())
    assert paired_permutation_test(diff, np.zeros_like(diff)) == expected


def test_sampled_permutation_beyond_the_exact_limit():
    # 21 pairs all +1: only 2 of 2**21 flips reach the observed mean; the sampled p-value
    # is (hits + 1) / (resamples + 1), about 1 / 10001
    p = paired_permutation_test([1.0] * 21, [0.0] * 21, resamples=10_000)
    assert p < 1e-3


def test_the_paired_interval_resamples_the_differences():
    # equal differences: the interval is a point; d = [0, 1]: resampled means 0, 0.5, 1,
    # so the 95% interval is [0, 1]
    assert paired_difference_ci([1.5, 2.5], [1.0, 2.0]) == (0.5, 0.5)
    assert paired_difference_ci([0.0, 3.0], [0.0, 2.0], resamples=20_000) == (0.0, 1.0)
    # pairing matters: a and b swing together, their differences do not
    a, b = [0.1, 0.9, 0.2, 0.8], [0.0, 0.8, 0.1, 0.7]
    assert paired_difference_ci(a, b) == pytest.approx((0.1, 0.1))
    with pytest.raises(ValueError, match="equally long"):
        paired_difference_ci([1.0], [1.0, 2.0])


def test_paired_comparison_pairs_only_the_common_seeds():
    # common seeds 1, 2: d = [0.5, 0.5], mean +0.5; of the 4 sign flips ++ and -- reach it
    result = paired_comparison({0: 9.0, 1: 1.0, 2: 1.0}, {1: 0.5, 2: 0.5, 3: 9.0})
    assert result["seeds"] == [1, 2]
    assert result["a"]["values"] == [1.0, 1.0] and result["b"]["values"] == [0.5, 0.5]
    assert result["mean_difference"] == pytest.approx(0.5)
    assert result["p_value"] == pytest.approx(2 / 4)
    assert result["a"]["ci95"] == [1.0, 1.0]
    assert result["difference_ci95"] == [0.5, 0.5]


def test_paired_comparison_without_common_seeds_fails():
    with pytest.raises(ValueError, match="no seed in common"):
        paired_comparison({0: 1.0}, {1: 1.0})
