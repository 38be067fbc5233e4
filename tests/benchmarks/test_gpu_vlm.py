"""``python -m benchmarks.gpu_vlm``'s dry run (``--shape tiny --device cpu``): the steps of
the GPU script, on the CPU, with the tiny model."""

from __future__ import annotations

import json
import math
import re

import pytest

pytest.importorskip("transformers")
pytest.importorskip("PIL")

from benchmarks import gpu_vlm  # noqa: E402
from benchmarks.vlm_smoke import FINITE_METRICS  # noqa: E402


def test_the_gpu_script_dry_runs_on_the_cpu_with_finite_losses_and_moved_weights(
        tmp_path, capsys):
    code = gpu_vlm.main(["--shape", "tiny", "--device", "cpu", "--iterations", "1",
                         "--workdir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and out.strip().splitlines()[-1].startswith("gpu vlm: ok")
    assert out.count("update ") >= 2 and "\nfull:" in out and "\nlora:" in out
    for mode in ("full", "lora"):
        found = re.search(rf"\n{mode}: losses finite over 1 iterations; (\d+) of (\d+) "
                          "trained tensors moved", out)
        assert found and 0 < int(found[1]) <= int(found[2]), out
        rows = [json.loads(line) for line in
                (tmp_path / mode / "metrics.jsonl").read_text().splitlines()]
        assert len(rows) == 1 and rows[0]["update/optimizer_steps"] >= 1
        assert rows[0]["update/skipped_steps"] == 0.0
        assert all(math.isfinite(rows[0][key]) for key in FINITE_METRICS)


def test_the_check_fails_a_run_with_a_lost_or_non_finite_loss_or_weights_that_did_not_move():
    """:func:`gpu_vlm.run_problems`, the check behind ``gpu vlm: ok``: a NaN loss is left
    out of ``metrics.jsonl``, so a missing metric fails as a non-finite one does."""
    import torch

    model = torch.nn.Linear(3, 2)
    before = gpu_vlm.trained_sample(model)
    good = {"iteration": 1, "update/policy_loss": -0.1, "update/kl_ref": 0.0,
            "update/entropy": 4.0, "update/grad_norm": 0.1, "update/skipped_steps": 0.0}
    assert gpu_vlm.run_problems([good], before, model) == (
        ["none of the 2 trained tensors moved"], 0)
    with torch.no_grad():
        model.weight.add_(1e-3)
    assert gpu_vlm.run_problems([good], before, model) == ([], 1)
    lost = {k: v for k, v in good.items() if k != "update/policy_loss"}
    assert gpu_vlm.run_problems([lost], before, model)[0] == [
        "iteration 1: update/policy_loss missing (not finite)"]
    nan = {**good, "update/grad_norm": float("nan"), "update/skipped_steps": 1.0}
    assert gpu_vlm.run_problems([nan], before, model)[0] == [
        "iteration 1: update/grad_norm nan",
        "iteration 1: update/skipped_steps 1.0 (a non-finite gradient)"]
    assert gpu_vlm.run_problems([], before, model)[0] == ["no iteration recorded"]
    with torch.no_grad():
        model.bias[0] = float("inf")
    assert gpu_vlm.run_problems([good], before, model)[0] == [
        "1 trained tensors hold non-finite weights (first: bias)"]


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
