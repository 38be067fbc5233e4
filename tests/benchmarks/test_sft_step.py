"""benchmarks/sft_step.py: both variants run the same SFT steps on the longest samples."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.sft_step import run_variant
from benchmarks.train_iteration import PeakMemory


@pytest.mark.slow  # the default model, Search-QA's BM25 index, one SFT step per variant: ~40 s
@pytest.mark.skipif(not PeakMemory().available, reason="peak memory needs Linux")
def test_variants_run_the_same_steps_on_the_longest_samples():
    with_release = run_variant("cpu-searchqa", True, episodes=2, steps=1, threads=1)
    without = run_variant("cpu-searchqa", False, episodes=2, steps=1, threads=1)
    assert with_release["rows"] == without["rows"]
    assert with_release["rows"] == sorted(with_release["rows"], reverse=True)
    assert with_release["losses"] == pytest.approx(without["losses"], abs=1e-6)
    for result in (with_release, without):
        assert len(result["peaks"]) == len(result["seconds"]) == 1
        assert np.isfinite(result["losses"]).all()
        assert result["peaks"][0] >= result["after"][0] > 0
