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
    from studies.tiny_vlm import qwen2_5_vl_3b_config

    config = qwen2_5_vl_3b_config()
    with __import__("torch").device("meta"):
        from transformers import AutoModelForImageTextToText

        model = AutoModelForImageTextToText.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    assert 3.7e9 < total < 3.8e9  # Qwen2.5-VL-3B-Instruct: 3.75 B weights


def test_the_tokenizer_is_padded_to_exactly_the_vocabulary():
    """The 3B shape's tokenizer: the env's words, then fillers up to the model's
    vocabulary, never beyond (it once padded *past* it by the env's words)."""
    texts = ["You are pushing boxes: <action>up</action>", "box on target w7"]
    tokenizer = gpu_vlm.padded_tokenizer(texts, 300)
    assert len(tokenizer) == 300
    assert tokenizer.convert_tokens_to_ids("boxes:") != tokenizer.unk_token_id
    with pytest.raises(ValueError, match="overflow the vocabulary"):
        gpu_vlm.padded_tokenizer(texts, 10)


def test_a_second_mode_does_not_keep_the_first_modes_model(tmp_path, monkeypatch):
    import contextlib
    import io
    import weakref

    made, alive_at_next = [], []
    make = gpu_vlm.random_policy

    def tracked(*args, **kwargs):
        alive_at_next.append([ref() is not None for ref in made])
        policy = make(*args, **kwargs)
        made.append(weakref.ref(policy.model))
        return policy

    monkeypatch.setattr(gpu_vlm, "random_policy", tracked)
    with contextlib.redirect_stdout(io.StringIO()):
        assert gpu_vlm.main(["--shape", "tiny", "--device", "cpu", "--iterations", "1",
                             "--workdir", str(tmp_path)]) == 0
    assert alive_at_next == [[], [False]]
