"""``python -m benchmarks.vlm_smoke``: the tiny vision-language model through the trainer,
2 iterations and a resume, on the tests' visual grid."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("PIL")

from benchmarks import vlm_smoke  # noqa: E402


def test_vlm_smoke_passes_and_reports_every_phase(tmp_path, capsys):
    assert vlm_smoke.main(["--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[-1].startswith("vlm smoke: ok")
    for phase in vlm_smoke.PHASES:
        assert any(line.split()[0] == phase for line in lines if line.strip()), phase
    assert "12 of 12 rows show an image" in out
