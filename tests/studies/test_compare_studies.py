"""Comparisons across two credit-assignment studies (studies/compare_studies.py):
hand-computed cases, the committed seeds-0-9 figures it must reproduce, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studies.compare_studies import main, seed_values

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
T4 = "credit_assignment_smollm2_g8_mb16_kl0.01_sft2p0.5_t4.json"


def _study(method: str, seeds: dict[int, tuple[float, list[float]]]) -> dict:
    """A result JSON with the fields the comparison reads: per seed (final, curve)."""
    return {"runs": {"keydoor": {method: {
        str(seed): {"final_success": final, "iterations": list(range(1, len(curve) + 1)),
                    "rollout/success": curve}
        for seed, (final, curve) in seeds.items()}}}}


STUDY = _study("gigpo-state-std", {0: (0.5, [0.0, 0.2, 0.4, 0.6]),
                                   1: (0.25, [0.1, 0.1, 0.3, 0.5]),
                                   2: (0.75, [0.2, 0.2, 0.2, 0.2])})


def test_final_is_the_last_held_out_success():
    assert seed_values(STUDY, "keydoor", "gigpo-state-std", "final") == {0: 0.5, 1: 0.25,
                                                                          2: 0.75}


def test_train_is_the_mean_over_the_iterations_both_ends_included():
    values = seed_values(STUDY, "keydoor", "gigpo-state-std", "train", (3, 4))
    assert values == pytest.approx({0: 0.5, 1: 0.4, 2: 0.2})
    values = seed_values(STUDY, "keydoor", "gigpo-state-std", "train", (2, 2))
    assert values == pytest.approx({0: 0.2, 1: 0.1, 2: 0.2})


def test_unknown_task_method_measure_and_iterations_are_named():
    with pytest.raises(KeyError, match="alfworld"):
        seed_values(STUDY, "alfworld", "gigpo-state-std", "final")
    with pytest.raises(KeyError, match="it has \\['gigpo-state-std'\\]"):
        seed_values(STUDY, "keydoor", "ppo", "final")
    with pytest.raises(ValueError, match="unknown measure"):
        seed_values(STUDY, "keydoor", "gigpo-state-std", "best")
    with pytest.raises(ValueError, match="needs iterations"):
        seed_values(STUDY, "keydoor", "gigpo-state-std", "train")
    with pytest.raises(ValueError, match="logged iterations 1..4, not 3..5"):
        seed_values(STUDY, "keydoor", "gigpo-state-std", "train", (3, 5))


@pytest.mark.parametrize("argv, task, line", [
    # the two post-hoc leads of docs/credit-assignment.md, from the committed results
    (["--measure", "train", "--iterations", "5", "8",
      f"{RESULTS}/credit_assignment_full_h48-g16.json:gigpo-state-std",
      f"{RESULTS}/credit_assignment_full_h48-g16.json:grpo-std"],
     "keydoor", "a - b: +0.033 [+0.014, +0.053], paired permutation p = 0.016 (10 seeds)"),
    ([f"{RESULTS}/credit_assignment_full_h48-eq3.json:gigpo-state-std",
      f"{RESULTS}/credit_assignment_full_h48-omega1.json:gigpo-state-std"],
     "keydoor", "a - b: +0.055 [+0.020, +0.098], paired permutation p = 0.016 (10 seeds)"),
    # T1 of docs/credit-assignment.md (GiGPO against GRPO with SmolLM2), from its JSON
    (["--measure", "train", "--iterations", "2", "6",
      f"{RESULTS}/credit_assignment_smollm2.json:gigpo",
      f"{RESULTS}/credit_assignment_smollm2.json:grpo"],
     "cpu-demo", "a - b: +0.182 [+0.090, +0.268], paired permutation p = 0.016 (10 seeds)"),
    ([f"{RESULTS}/credit_assignment_smollm2.json:gigpo",
      f"{RESULTS}/credit_assignment_smollm2.json:grpo"],
     "cpu-demo", "a - b: +0.106 [-0.087, +0.294], paired permutation p = 0.359 (10 seeds)"),
    # T4 of docs/credit-assignment.md (GiGPO against GRPO where GRPO learns), from its JSON
    (["--measure", "train", "--iterations", "2", "12",
      f"{RESULTS}/{T4}:gigpo", f"{RESULTS}/{T4}:grpo"],
     "cpu-demo", "a - b: +0.057 [-0.045, +0.186], paired permutation p = 0.467 (10 seeds)"),
])
def test_the_documented_comparisons_are_reproduced(argv, task, line, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{task}, ") and out[-1] == line


def test_the_interval_is_the_paired_bootstrap_of_the_differences(tmp_path, capsys):
    """Seeds whose differences are all 0.25 give a zero-width interval at 0.25 whatever the
    sides' own spread; one seed with a larger difference widens it on that side only."""
    same = _study("gigpo-state-std", {s: (0.25 + s / 8, [0.0]) for s in range(4)})
    other = _study("grpo-std", {s: (s / 8, [0.0]) for s in range(4)})
    for name, study in (("a.json", same), ("b.json", other)):
        (tmp_path / name).write_text(json.dumps(study))
    assert main([f"{tmp_path}/a.json:gigpo-state-std", f"{tmp_path}/b.json:grpo-std"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        "a - b: +0.250 [+0.250, +0.250], paired permutation p = 0.125 (4 seeds)"
    same["runs"]["keydoor"]["gigpo-state-std"]["3"]["final_success"] = 1.375  # diff 1.0
    (tmp_path / "a.json").write_text(json.dumps(same))
    assert main([f"{tmp_path}/a.json:gigpo-state-std", f"{tmp_path}/b.json:grpo-std"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    low, high = (float(x) for x in last.split("[")[1].split("]")[0].split(", "))
    assert last.startswith("a - b: +0.438 [") and low == 0.25 and 0.438 < high <= 1.0


LM_STUDY = {"task": "keydoor-key", "runs": {"gigpo": {
    "3": {"heldout_success": 0.625, "iterations": [1, 2, 3], "train_success": [0.0, 0.5, 0.25]},
    "4": {"heldout_success": 0.125, "iterations": [1, 2, 3], "train_success": [0.5, 1.0, 0.0]}}}}


def test_a_pretrained_lm_study_is_read_in_its_own_names():
    assert seed_values(LM_STUDY, None, "gigpo", "final") == {3: 0.625, 4: 0.125}
    assert seed_values(LM_STUDY, "keydoor-key", "gigpo", "train", (2, 3)) == \
        pytest.approx({3: 0.375, 4: 0.5})
    with pytest.raises(KeyError, match="no task 'keydoor' in this study \\(it ran 'keydoor-key'"):
        seed_values(LM_STUDY, "keydoor", "gigpo", "final")
    with pytest.raises(KeyError, match="it has \\['gigpo'\\]"):
        seed_values(LM_STUDY, None, "grpo", "final")


def test_command_line_errors_are_one_line(tmp_path, capsys):
    study = tmp_path / "study.json"
    study.write_text(json.dumps(STUDY))
    assert main([f"{study}:ppo", f"{study}:gigpo-state-std"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "no method 'ppo' for keydoor in this study (it has ['gigpo-state-std'])")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert main([f"{broken}:gigpo-state-std", f"{study}:gigpo-state-std"]) == 2
    assert "broken.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--measure", "train", f"{study}:a", f"{study}:b"])
    with pytest.raises(SystemExit):
        main(["no-method-here", f"{study}:b"])
