"""The seeds of a run (algorithms.runs.seeds)."""

from __future__ import annotations

import numpy as np


def test_seeds_are_independent_per_iteration():
    from algorithms.runs.seeds import iteration_seed

    seeds = {iteration_seed(0, i, s) for i in range(50) for s in range(3)}
    assert len(seeds) == 150 and all(0 <= s < 2**31 for s in seeds)
    assert np.unique([iteration_seed(1, 0, 0), iteration_seed(0, 1, 0)]).size == 2
