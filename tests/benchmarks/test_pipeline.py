"""benchmarks/pipeline.py: the summary's arithmetic, the random model of a published shape,
the GPU memory sampler."""

from __future__ import annotations

import time

import pytest

from benchmarks import pipeline


def _run(staleness: int, seed: int, iteration_seconds: list[float], loop: float,
         trajectories: int = 8) -> dict:
    rows = [{"rollout/trajectories": trajectories, "time/iteration": t, "time/rollout": 1.0,
             "time/update": 2.0, "rollout/success": 0.5, "rollout/format_error_rate": 0.1}
            for t in iteration_seconds]
    return {"staleness": staleness, "seed": seed, "loop_seconds": loop, "rows": rows,
            "load": 1.0}


def test_summary_rates_and_steady_iterations(capsys):
    runs = [_run(0, 0, [10.0, 6.0, 6.0], loop=22.0), _run(1, 0, [10.0, 4.0, 4.0], loop=18.0)]
    summary = pipeline.summarize(runs)
    assert summary[0]["rates"] == [pytest.approx(24 / 22.0)]
    assert summary[1]["rates"] == [pytest.approx(24 / 18.0)]
    # "after the first": the first iteration's 10 s is left out
    assert summary[0]["steady_seconds_per_iteration"][0] == pytest.approx(6.0)
    assert summary[1]["steady_seconds_per_iteration"][0] == pytest.approx(4.0)
    assert summary[0]["phases"]["update"] == pytest.approx(2.0)
    assert summary[0]["samples"] == [8, 16, 24]
    pipeline.print_summary(summary, "hf")
    lines = capsys.readouterr().out.strip().splitlines()
    assert "K=1 vs K=0 after the first iteration: 1.50× iterations/s" in lines
    assert lines[-1] == f"K=1 vs K=0: {22.0 / 18.0:.2f}× samples/s (hf engine)"


def test_random_model_config_trains_all_weights_on_the_scale_given(tmp_path):
    scale = {"model_path": str(tmp_path / "m"), "device": "cpu", "groups": 3,
             "group_size": 2, "max_new_tokens": 5}
    config, policy = pipeline.run_config("random", "hf", 1, 7, 2, tmp_path / "run",
                                         scale=scale)
    assert policy is None
    assert config.model.name_or_path == scale["model_path"]
    assert config.model.lora_rank == 0 and config.model.gradient_checkpointing
    assert (config.env.num_groups, config.env.group_size) == (3, 2)
    assert config.generation.max_new_tokens == 5 and config.generation.batch_size == 6
    assert (config.run.device, config.run.max_staleness, config.run.seed) == ("cpu", 1, 7)
    assert (config.learner.lr, config.learner.kl_coef) == (1e-6, 0.01)


def test_save_random_model_has_the_shape_and_the_tokenizers_vocabulary(tmp_path):
    from transformers import AutoModelForCausalLM

    from algorithms.training.tiny_model import text_words, word_tokenizer

    tokenizer = word_tokenizer(text_words(["go north open the door"]))
    tokenizer.save_pretrained(tmp_path / "tok")
    weights = pipeline.save_random_model("smoke", str(tmp_path / "tok"), tmp_path / "m", "cpu")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    shape = pipeline.RANDOM_SHAPES["smoke"]
    assert model.config.num_hidden_layers == shape["num_hidden_layers"]
    assert model.config.hidden_size == shape["hidden_size"]
    assert model.config.vocab_size == len(tokenizer)
    assert weights == sum(p.numel() for p in model.parameters())


def test_gpu_memory_peak_keeps_the_largest_sample(monkeypatch):
    samples = iter([100, 300, 200])
    monkeypatch.setattr(pipeline, "gpu_memory_used", lambda: next(samples, 150))
    with pipeline.GpuMemoryPeak(seconds=0.001) as memory:
        time.sleep(0.05)
    assert memory.peak == 300


def test_gpu_memory_peak_is_none_without_a_gpu(monkeypatch):
    monkeypatch.setattr(pipeline, "gpu_memory_used", lambda: None)
    with pipeline.GpuMemoryPeak(seconds=0.001) as memory:
        time.sleep(0.01)
    assert memory.peak is None
