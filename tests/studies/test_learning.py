"""The learning benchmark's short version: step-level credit makes a policy learn KeyDoor.

One seed, 12 iterations of GiGPO (state anchors, mean-only normalization, the setting that
learns in ``studies/learning.py``) on a 3 x 3 house without a key: the trained policy's
training-rollout success must rise well above the untrained policy's. Measured here: the
first two iterations average 0.12, the last three 0.74 (11-32 s, measured with other
jobs running).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("torch")

from studies.learning import (  # noqa: E402
    BenchSpec,
    format_table,
    iterations_to,
    moving_average,
    run_one,
    summarize,
)


def _spec() -> BenchSpec:
    base = BenchSpec(width=3, height=3, num_tasks=8, max_steps=8, key=False, num_groups=4,
                     group_size=8)
    return dataclasses.replace(base, learner=dataclasses.replace(base.learner,
                                                                 normalize="mean"))


def test_gigpo_learns_keydoor_above_the_untrained_policy():
    result = run_one("gigpo-state", _spec(), seed=2, iterations=12)
    untrained = float(np.mean(result.success[:2]))
    trained = float(np.mean(result.success[-3:]))
    print("\nsuccess per iteration:", " ".join(f"{s:.2f}" for s in result.success))
    assert trained >= untrained + 0.3, (untrained, trained, result.success)
    assert result.invalid_rate[-1] < result.invalid_rate[0]
    shares = result.step_group_shares[0]
    assert abs(sum(shares.values()) - 1.0) < 1e-9  # the Fig. 3 bins cover every step
    assert shares["1"] < 0.5  # states recur: most steps share their step group


def test_moving_average_and_iterations_to_threshold():
    values = [0.0, 0.3, 0.6, 0.9, 0.9, 0.9]
    np.testing.assert_allclose(moving_average(values, 3), [0.0, 0.15, 0.3, 0.6, 0.8, 0.9])
    assert iterations_to(values, 0.5) == 4
    assert iterations_to(values, 0.9) == 6
    assert iterations_to(values, 0.95) is None


def test_summary_table_counts_runs_that_never_reach_a_threshold():
    from studies.learning import RunResult

    runs = [RunResult("grpo", seed, success=curve, episode_length=[5.0] * 4,
                      invalid_rate=[0.0] * 4, seconds=[1.0] * 4)
            for seed, curve in enumerate([[0, 0.6, 0.6, 0.6], [0, 0, 0, 0.9],
                                          [0, 0.9, 0.9, 0.9]])]
    table = summarize(runs)["grpo"]
    assert table["iterations_to_50"] == [4, None, 3]  # 3-iteration moving average
    assert table["median_to_50"] == 4.0  # the run that never got there counts as 5
    assert table["median_to_90"] is None  # only one of three runs got there
    assert table["untrained_success"] == 0.0
    text = format_table(summarize(runs), 4)
    assert "| grpo | 4 (4, -, 3) | never (-, -, 4) |" in text
