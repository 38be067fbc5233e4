"""The end-of-run summary (what moved, its noise, GiGPO's step groups, cut prompts) and
the four-panel curves."""

from __future__ import annotations

import json

import pytest

from algorithms.agent.metrics import CURVE_PANELS, plot_curves
from algorithms.agent.summary import run_summary, success_standard_error


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


def test_summary_sets_iteration_1_against_the_mean_of_the_later_ones_labelled_so():
    text = run_summary(_records(), "runs/x/curves.png")
    lines = text.splitlines()
    assert lines[0] == ("what moved: iteration 1 (sampled before any update) against "
                        "iteration 3 (after one update):")
    assert lines[1] == "  " + " " * 20 + "   iteration 1   iteration 3        change"
    assert "  success                      0.125         0.500        +0.375" in lines
    assert "  format-error rate            0.750         0.250        -0.500" in lines
    assert "  invalid-action rate          0.900         0.400        -0.500" in lines
    assert lines[-1] == "curves: runs/x/curves.png"
    assert run_summary([]) == ""
    single = run_summary(_records()[:1]).splitlines()
    assert single[0] == ("what moved: only iteration 1 (sampled before any update); nothing "
                         "was trained before its rollout")
    assert "  success                0.125" in single and not any("curves:" in s
                                                                  for s in single)


def test_summary_mean_covers_every_iteration_after_the_untrained_one():
    records = [{"iteration": i, "rollout/success": v} for i, v in
               enumerate([0.0, 0.25, 0.75, 0.0], start=1)]
    lines = run_summary(records).splitlines()
    assert lines[0] == ("what moved: iteration 1 (sampled before any update) against the "
                        "mean of iterations 2-4 (the policy in training); iteration 4 is "
                        "the last:")
    assert lines[1].split() == ["iteration", "1", "mean", "of", "2-4", "change", "iteration",
                                "4"]
    assert "  success                      0.000         0.333        +0.333         0.000" \
        in lines
    assert not any(line.startswith("noise:") for line in lines)  # no episode counts


def _counted(successes: list[float], episodes: int = 8) -> list[dict[str, float]]:
    return [{"iteration": i, "rollout/success": v, "rollout/trajectories": float(episodes),
             "rollout/env_errors": 0.0} for i, v in enumerate(successes, start=1)]


def test_the_standard_error_of_a_success_rate_is_the_binomial_one():
    assert success_standard_error(0.5, 8) == pytest.approx(0.17678, abs=1e-5)
    assert success_standard_error(0.375, 8) == pytest.approx(0.17116, abs=1e-5)  # ~0.17
    assert success_standard_error(0.0, 8) == 0.0 and success_standard_error(0.5, 0) == 0.0


def test_a_drop_from_050_to_038_over_8_episodes_is_called_within_noise():
    lines = run_summary(_counted([0.5, 0.375])).splitlines()
    # pooled p = 7/16; the difference's error sqrt(p(1-p)(1/8 + 1/8)) = 0.248
    assert lines[-2] == ("noise: 8 episodes per iteration; a success rate p of n episodes "
                         "has standard error sqrt(p(1-p)/n): 0.18 for one iteration at this "
                         "run's p = 0.44")
    assert lines[-1] == ("  the change in success, -0.125, is 0.5 standard errors (0.25): "
                         "within noise (under 2)")


def test_the_noise_line_covers_the_mean_of_the_later_iterations():
    lines = run_summary(_counted([0.0, 0.25, 0.5, 0.375, 0.375, 0.375])).splitlines()
    # pooled p = 15/48; 0.164 for 8 episodes, 0.073 for 40; the change's error
    # sqrt(p(1-p)(1/8 + 1/40)) = 0.180, and 0.375 / 0.180 = 2.09
    assert lines[-2].endswith("0.16 for one iteration at this run's p = 0.31, 0.07 for the "
                              "mean of iterations 2-6 (40 episodes)")
    assert lines[-1] == ("  the change in success, +0.375, is 2.1 standard errors (0.18): "
                         "beyond noise (2 or more)")
    crashed = _counted([0.5, 0.5])
    crashed[1]["rollout/env_errors"] = 2.0  # their outcome is unknown: 6 episodes count
    assert "noise: 6-8 episodes per iteration" in run_summary(crashed)
    never = run_summary(_counted([0.0, 0.0])).splitlines()
    assert never[-1].endswith("0.18 for one iteration at p = 0.5, the largest (this run's "
                              "rate was 0 throughout)")


def test_the_summary_repeats_the_share_of_cut_prompts_with_the_budget_flag():
    records = _counted([0.0, 0.5, 0.5])
    for record, rate, steps in zip(records, (0.6, 0.9, 0.5), (10.0, 10.0, 20.0),
                                   strict=True):
        record.update({"rollout/prompt_cut_rate": rate, "rollout/steps": steps})
    line = run_summary(records, prompt_budget=320).splitlines()[-1]
    # (6 + 9 + 10) / 40 steps, weighted by steps (the mean of the rates would be 67%)
    assert line == ("prompts cut to fit --prompt.max-prompt-tokens 320: 62% of the run's "
                    "steps (iteration 1 60%, iteration 3 50%); the model did not see all of "
                    "their history or observation (raise the flag to keep them whole)")
    for record in records:
        record["rollout/prompt_cut_rate"] = 0.0
    assert "prompts cut" not in run_summary(records, prompt_budget=320)


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
    assert "GiGPO's step groups (the mean of 2 iterations):" in lines
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
    lines = run_summary(records).splitlines()
    assert "  correlation of the step and episode advantages +0.60" in lines
    # the figures again in plain words: 0.3 / 0.7 = 0.43 times the episode's credit
    assert ("  in plain words: GiGPO compares the actions taken from one same state in a "
            "group's episodes by the returns that followed them; that gave 40% of the steps "
            "credit of their own, 15% where GRPO would give none; that credit was 0.43 times "
            "the episode's in size, partly agreeing with the episode's verdict (correlation "
            "+0.60)") in lines
    assert "step groups" not in run_summary(_records())  # GRPO / PPO runs log none
