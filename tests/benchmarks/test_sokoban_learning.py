"""The Sokoban learning check's plumbing (``benchmarks/sokoban_learning.py``): the SFT
warm start on the BFS expert feeds the RL stage, and the threshold reading is right. The
check itself (40 iterations x 2 seeds, ~40 minutes a seed) is run by hand; its figures are
in docs/envs/sokoban.md."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from benchmarks.sokoban_learning import Budget, first_at, run_rl, run_sft  # noqa: E402


def test_first_at_reads_the_moving_average():
    assert first_at([0.4, 0.6, 0.5, 0.2]) == 3           # (0.4 + 0.6 + 0.5) / 3 = 0.5
    assert first_at([0.9, 0.9, 0.0, 0.0, 0.6]) == 3
    assert first_at([0.1, 0.9, 0.2, 0.3, 0.9, 0.2]) is None  # best average 0.467
    assert first_at([0.1, 0.9, 0.2, 0.3, 0.9, 0.3]) == 6     # (0.3 + 0.9 + 0.3) / 3
    assert first_at([1.0, 1.0]) is None                  # fewer than 3 iterations


@pytest.mark.slow
def test_sft_then_rl_runs_end_to_end(tmp_path):
    budget = Budget(sft_episodes=8, sft_epochs=1, num_groups=2, group_size=2, iterations=1,
                    eval_episodes=2)
    sft_dir, sft = run_sft(budget, 0, tmp_path)
    assert (sft_dir / "checkpoints").is_dir() and sft["sft_format_errors"] <= 1.0
    result = run_rl("gigpo", budget, 0, tmp_path, sft_dir)
    assert len(result["curve"]) == 1 and 0.0 <= result["eval_after"] <= 1.0
