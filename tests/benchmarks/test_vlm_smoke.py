"""``python -m benchmarks.vlm_smoke``: the tiny vision-language model through the trainer,
2 iterations and a resume, on visual Sokoban and EZPoints (its default)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("PIL")

from benchmarks import vlm_smoke  # noqa: E402


def test_vlm_smoke_passes_on_both_envs_and_reports_every_phase(tmp_path, capsys):
    assert vlm_smoke.main(["--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[-1].startswith("vlm smoke: ok (AgentGym/SokobanVisual-v0, "
                                "AgentGym/EZPoints-v0: 2 iterations + resume each")
    for env_id in vlm_smoke.DEFAULT_ENVS:
        assert any(line.startswith(f"{env_id}: ok") for line in lines), env_id
    for phase in vlm_smoke.PHASES:
        assert sum(line.split()[0] == phase for line in lines if line.strip()) == 2, phase
    assert out.count("12 of 12 rows show an image") == 2  # 2 groups x 2 x 3 steps each
    assert out.count("updates: every loss finite") == 2  # a NaN update would be skipped


def test_vlm_smoke_says_which_env_failed(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(vlm_smoke, "measured_run", _broken_resume(vlm_smoke.measured_run))
    assert vlm_smoke.main(["--workdir", str(tmp_path), "--env",
                           "tests.algorithms.visual_env:AgentGymTest/VisualGrid-v0"]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(line.startswith("AgentGymTest/VisualGrid-v0: FAILED") for line in lines)
    assert lines[-1] == "vlm smoke: FAILED (AgentGymTest/VisualGrid-v0)"


def _broken_resume(measured_run):
    """``measured_run`` whose resumed run ends with a weight off by one (a resume that does
    not replay the straight run)."""
    def run(config, run_dir, meter, *, setup_phase, policy=None):
        trainer = measured_run(config, run_dir, meter, setup_phase=setup_phase, policy=policy)
        if config.run.resume:
            import torch

            with torch.no_grad():
                next(trainer.policy.model.parameters()).add_(1.0)
        return trainer
    return run
