"""``python -m benchmarks.gpu_vlm``'s dry run (``--shape tiny --device cpu``): the steps of
the GPU script, on the CPU, with the tiny model."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("PIL")

from benchmarks import gpu_vlm  # noqa: E402


def test_the_gpu_script_dry_runs_on_the_cpu(tmp_path, capsys):
    code = gpu_vlm.main(["--shape", "tiny", "--device", "cpu", "--iterations", "1",
                         "--workdir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and out.strip().splitlines()[-1].startswith("gpu vlm: ok")
    assert out.count("update ") >= 2 and "\nfull:" in out and "\nlora:" in out


def test_the_3b_shape_is_qwen2_5_vl_3b():
    from benchmarks.tiny_vlm import qwen2_5_vl_3b_config

    config = qwen2_5_vl_3b_config()
    with __import__("torch").device("meta"):
        from transformers import AutoModelForImageTextToText

        model = AutoModelForImageTextToText.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    assert 3.7e9 < total < 3.8e9  # Qwen2.5-VL-3B-Instruct: 3.75 B weights
