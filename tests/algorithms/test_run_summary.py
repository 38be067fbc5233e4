"""The end-of-run summary and the four-panel curves."""

from __future__ import annotations

import json

import pytest

from algorithms.agent.metrics import CURVE_PANELS, plot_curves, run_summary


def _records():
    return [
        {"iteration": 1, "rollout/success": 0.125, "rollout/return": 0.1,
         "rollout/format_error_rate": 0.75, "rollout/invalid_action_rate": 0.9,
         "rollout/episode_length": 6.0},
        {"iteration": 2, "eval/success": 0.5},  # evaluation records are skipped
        {"iteration": 3, "rollout/success": 0.5, "rollout/return": 0.45,
         "rollout/format_error_rate": 0.25, "rollout/invalid_action_rate": 0.4,
         "rollout/episode_length": 4.5},
    ]


def test_summary_reports_first_and_last_iteration_against_the_untrained_policy():
    text = run_summary(_records(), "runs/x/curves.png")
    lines = text.splitlines()
    assert lines[0] == ("what moved, iteration 1 (before any update) -> iteration 3 "
                        "(mean of iterations 3-3):")
    assert "  success                0.125 ->   0.500  (+0.375)  mean 0.500" in lines
    assert "  format-error rate      0.750 ->   0.250  (-0.500)  mean 0.250" in lines
    assert "  invalid-action rate    0.900 ->   0.400  (-0.500)  mean 0.400" in lines
    assert lines[-1] == "curves: runs/x/curves.png"
    assert run_summary([]) == ""
    single = run_summary(_records()[:1])
    assert "one iteration only" in single and "curves:" not in single and "mean" not in single


def test_summary_mean_covers_every_iteration_after_the_untrained_one():
    records = [{"iteration": i, "rollout/success": v} for i, v in
               enumerate([0.0, 0.25, 0.75, 0.0], start=1)]
    text = run_summary(records)
    assert text.splitlines()[0].endswith("(mean of iterations 2-4):")
    assert "  success                0.000 ->   0.000  (+0.000)  mean 0.333" in text


def test_curves_have_four_panels_with_integer_iteration_ticks(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    captured = {}
    original = plt.Figure.savefig

    def keep(figure, *args, **kwargs):
        captured["figure"] = figure
        return original(figure, *args, **kwargs)

    plt.Figure.savefig = keep
    try:
        path = plot_curves(metrics, tmp_path / "curves.png")
    finally:
        plt.Figure.savefig = original
    assert path.exists()
    axes = captured["figure"].axes
    assert [axis.get_title() for axis in axes] == [title for title, _ in CURVE_PANELS]
    labels = [line.get_label() for line in axes[2].get_lines()]
    assert labels == ["rollout format error rate", "rollout invalid action rate"]
    ticks = axes[0].get_xticks()
    assert all(float(t).is_integer() for t in ticks)


def test_gigpo_term_metrics_count_steps_that_shared_a_state():
    import numpy as np

    from algorithms.agent.metrics import gigpo_term_metrics

    # step groups: {0, 1, 2} (size 3), {3} alone, {4, 5} (size 2): 5 of 6 steps shared.
    metrics = gigpo_term_metrics(np.array([1.0, -1.0, 1.0, -1.0, 0.5, -0.5]),
                                 np.array([0.3, -0.3, 0.0, 0.0, 0.2, -0.2]),
                                 np.array([0, 0, 0, 1, 2, 2]))
    assert metrics["advantage/shared_state_share"] == pytest.approx(5 / 6)
    assert metrics["advantage/episode_abs_mean"] == pytest.approx(5 / 6)
    assert metrics["advantage/step_abs_mean"] == pytest.approx(1.0 / 6)
    # nonzero step terms: steps 0, 1, 4, 5; none of them has a zero episode term
    assert metrics["advantage/step_nonzero_share"] == pytest.approx(4 / 6)
    assert metrics["advantage/step_only_share"] == 0.0
    assert gigpo_term_metrics(np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)) == {}


def test_gigpo_term_metrics_count_steps_only_the_step_term_moves():
    import numpy as np

    from algorithms.agent.metrics import gigpo_term_metrics

    # an all-equal episode group (A_E = 0 for steps 0-3) whose shared state {0, 1} led to
    # different returns, and whose {2, 3} did not; a tiny term (1e-12) counts as zero
    metrics = gigpo_term_metrics(np.array([0.0, 0.0, 0.0, 0.0, 1.0, -1.0]),
                                 np.array([0.5, -0.5, 0.0, 1e-12, 0.4, 0.0]),
                                 np.array([0, 0, 1, 1, 2, 3]))
    assert metrics["advantage/shared_state_share"] == pytest.approx(4 / 6)
    assert metrics["advantage/step_nonzero_share"] == pytest.approx(3 / 6)
    assert metrics["advantage/step_only_share"] == pytest.approx(2 / 6)


def test_gigpo_term_metrics_correlate_the_two_terms():
    import numpy as np

    from algorithms.agent.metrics import gigpo_term_metrics

    ids = np.array([0, 0, 1, 1])
    episode = np.array([1.0, -1.0, 1.0, -1.0])
    # a step term that is a scaled copy of the episode term, its mirror, and an orthogonal one
    assert gigpo_term_metrics(episode, 0.5 * episode, ids)[
        "advantage/step_episode_corr"] == pytest.approx(1.0)
    assert gigpo_term_metrics(episode, -episode, ids)[
        "advantage/step_episode_corr"] == pytest.approx(-1.0)
    assert gigpo_term_metrics(episode, np.array([1.0, 1.0, -1.0, -1.0]), ids)[
        "advantage/step_episode_corr"] == pytest.approx(0.0)
    # a constant term has no correlation to report
    assert "advantage/step_episode_corr" not in gigpo_term_metrics(episode, np.zeros(4), ids)


def test_summary_tells_what_the_step_groups_did():
    records = _records()
    records[0].update({"advantage/shared_state_share": 0.5, "advantage/episode_abs_mean": 0.8,
                       "advantage/step_abs_mean": 0.2})
    records[2].update({"advantage/shared_state_share": 0.7, "advantage/episode_abs_mean": 0.6,
                       "advantage/step_abs_mean": 0.4})
    lines = run_summary(records).splitlines()
    assert "GiGPO's step groups (mean of 2 iterations):" in lines
    assert "  60% of the steps shared their state with other steps of their group" in lines
    assert "  mean |step advantage| 0.300 beside mean |episode advantage| 0.700" in lines
    assert not any("nonzero step advantage" in line for line in lines)  # older records
    for record, (nonzero, only) in zip((records[0], records[2]), ((0.3, 0.1), (0.5, 0.2)),
                                       strict=True):
        record.update({"advantage/step_nonzero_share": nonzero,
                       "advantage/step_only_share": only})
    lines = run_summary(records).splitlines()
    assert ("  40% got a nonzero step advantage; 15% got one where the episode advantage "
            "was zero (a gradient GRPO would not give)") in lines
    assert not any("correlation" in line for line in lines)
    records[0]["advantage/step_episode_corr"] = 0.5
    records[2]["advantage/step_episode_corr"] = 0.7
    assert "  correlation of the step and episode advantages +0.60" \
        in run_summary(records).splitlines()
    assert "step groups" not in run_summary(_records())  # GRPO / PPO runs log none
