"""Compute precision (:mod:`algorithms.precision`): which dtype ``auto`` resolves to, and
CPU mixed precision -- bfloat16 compute, float32 trained weights, optimizer state and
logits -- through loading, scoring, generation and the update."""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from algorithms import precision  # noqa: E402
from algorithms.config import ModelConfig  # noqa: E402
from algorithms.precision import (  # noqa: E402
    Float32Head,
    autocast_dtype,
    compute_dtype,
    resolve_dtype,
)
from algorithms.training.learner import Learner  # noqa: E402
from algorithms.training.policy import frozen_copy  # noqa: E402
from algorithms.training.scoring import score_responses  # noqa: E402
from tests.algorithms.test_learner import _config, _rollout, _snapshot  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402

CPU = torch.device("cpu")
LORA = {"lora_rank": 4, "lora_alpha": 8}


def _linear_weights(model: torch.nn.Module) -> dict[str, torch.dtype]:
    head = model.get_output_embeddings()
    return {name: module.weight.dtype for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and module is not head
            and "lora_" not in name}


# --- which dtype -------------------------------------------------------------------------

def test_auto_follows_the_cpus_bf16_capability(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    assert resolve_dtype("auto", CPU) == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    assert resolve_dtype("auto", CPU) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("float32", CPU) == torch.float32
    assert resolve_dtype("float16", CPU) == torch.float16
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        resolve_dtype("int8", CPU)


def test_a_cpu_without_bf16_keeps_float32_weights_and_no_autocast(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    policy = make_policy(model_config=ModelConfig(**LORA))
    assert {p.dtype for p in policy.model.parameters()} == {torch.float32}
    assert autocast_dtype(policy.model) is None
    assert type(policy.model.get_output_embeddings()) is torch.nn.Linear
    assert policy.model.config._attn_implementation != "eager"


@pytest.mark.cpu_bf16
@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64",
                    reason="reads the x86 flags of /proc/cpuinfo")
def test_the_capability_query_agrees_with_this_cpus_flags():
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    assert precision.cpu_has_bf16() == bool({"avx512_bf16", "amx_bf16"} & flags)
    expected = torch.bfloat16 if precision.cpu_has_bf16() else torch.float32
    assert resolve_dtype("auto", CPU) == expected


@pytest.mark.cpu_bf16  # the real query, on a pretended CPU
@pytest.mark.parametrize("features, answer", [("fp asimd bf16 i8mm sve", True),
                                              ("fp asimd evtstrm sve", False)])
def test_arm_reads_the_bf16_feature(monkeypatch, tmp_path, features, answer):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: {features}\n")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(precision, "CPUINFO", cpuinfo)
    assert precision.cpu_has_bf16() is answer
    monkeypatch.setattr(precision, "CPUINFO", tmp_path / "missing")
    assert precision.cpu_has_bf16() is False


def test_a_run_names_its_cpu_and_the_bfloat16_instructions_torch_finds(monkeypatch,
                                                                       tmp_path):
    """The CPU's model name and which of AMX / AVX512-BF16 torch reports: the kernels
    that decide a bfloat16 run's rounding, recorded beside its figures."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\n"
                       "model name\t: Example CPU 9000\nflags\t: fpu\n")
    monkeypatch.setattr(precision, "CPUINFO", cpuinfo)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False,
                        raising=False)
    assert precision.cpu_kernels() == "Example CPU 9000 (AMX)"
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert precision.cpu_kernels() == "Example CPU 9000 (no bfloat16 instructions)"
    monkeypatch.setattr(precision, "CPUINFO", tmp_path / "missing")
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    assert precision.cpu_kernels() == "arm (no bfloat16 instructions)"


# --- mixed precision: what is stored in which dtype -------------------------------------

def test_lora_stores_frozen_linears_in_bf16_and_the_rest_in_float32():
    policy = make_policy(model_config=ModelConfig(dtype="bfloat16", **LORA))
    model = policy.model
    assert set(_linear_weights(model).values()) == {torch.bfloat16}
    trained = {n: p.dtype for n, p in model.named_parameters() if p.requires_grad}
    assert trained and set(trained.values()) == {torch.float32}
    assert all("lora_" in n for n in trained)
    others = {n: p.dtype for n, p in model.named_parameters()
              if "lora_" not in n and "_proj." not in n}
    assert any("embed_tokens" in n for n in others) and any("norm" in n for n in others)
    assert set(others.values()) == {torch.float32}
    assert isinstance(model.get_output_embeddings(), Float32Head)
    assert autocast_dtype(model) == compute_dtype(model) == torch.bfloat16
    assert model.config._attn_implementation == "eager"


def test_full_fine_tune_keeps_float32_weights_and_a_bf16_reference():
    policy = make_policy(model_config=ModelConfig(dtype="bfloat16"))
    assert {p.dtype for p in policy.model.parameters()} == {torch.float32}
    assert compute_dtype(policy.model) == torch.bfloat16
    reference = frozen_copy(policy.model)
    assert set(_linear_weights(reference).values()) == {torch.bfloat16}
    assert reference.model.embed_tokens.weight.dtype == torch.float32
    assert not any(p.requires_grad for p in reference.parameters())


def test_bf16_is_mixed_precision_on_a_gpu_too_with_its_own_attention():
    """On a GPU bfloat16 keeps float32 trained weights (verl's FSDP actor does; the presets'
    lr 1e-6 steps would be rounded away in bfloat16) and SDPA's fused kernels."""
    cuda = torch.device("cuda")
    assert precision.mixed_precision(torch.bfloat16, cuda)
    assert precision.load_dtype(torch.bfloat16, cuda) == torch.float32
    assert not precision.mixed_precision(torch.float16, cuda)
    assert precision.load_dtype(torch.float16, cuda) == torch.float16
    assert not precision.mixed_precision(torch.float32, cuda)
    assert precision.attention_kernel("auto", torch.bfloat16, cuda) is None
    assert precision.attention_kernel("auto", torch.bfloat16, CPU) == "eager"
    assert precision.attention_kernel("auto", torch.float32, CPU) is None


def test_a_bf16_update_at_the_gpu_presets_lr_moves_every_trained_weight():
    """Why our policy keeps trained weights in float32 under bfloat16: one update at the
    GPU presets' lr (1e-6) of the full fine-tune that :func:`wrap_model` builds moves
    nearly every trained weight (AdamW's first step is about lr per weight; a bfloat16
    weight of 0.02 has a rounding step of about 1e-4, so stored in bfloat16 nearly none
    would move). Mixed precision is the same code on a CPU and on a GPU
    (:func:`precision.mixed_precision` is true for both)."""
    from algorithms.presets import PRESETS

    gpu = [config for config in PRESETS.values() if config.run.device != "cpu"
           and config.model.lora_rank == 0]
    assert gpu and {config.learner.lr for config in gpu} == {1e-6}
    assert {config.model.dtype for config in gpu} == {"auto"}  # bfloat16 on a GPU
    policy = make_policy(model_config=ModelConfig(dtype="bfloat16"))
    learner = Learner(policy, _config("gigpo", lr=1e-6), CPU)
    batch = learner.score(_rollout(policy.tokenizer))
    before = _snapshot(policy.model)
    assert learner.update(batch, learner.advantages(batch), seed=0)["grad_norm"] > 0
    after = _snapshot(policy.model)
    moved = sum(int((before[name] != after[name]).sum()) for name in before)
    assert moved / sum(weights.numel() for weights in before.values()) > 0.99
    assert all(not torch.equal(before[name], after[name]) for name in before)


def test_explicit_attention_kernel_wins_over_auto():
    policy = make_policy(model_config=ModelConfig(dtype="bfloat16", attn_implementation="sdpa"))
    assert policy.model.config._attn_implementation == "sdpa"


# --- mixed precision: what computes in which dtype --------------------------------------

def _rows():
    prompt = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = (prompt != 0).long()
    mask[1] = 1
    return prompt, mask, torch.tensor([[13, 14, 0], [15, 16, 17]]), \
        torch.tensor([[1, 1, 0], [1, 1, 1]])


def test_scoring_computes_in_bf16_with_float32_logits():
    """The same weights scored in float32 and under mixed precision: close, not equal
    (the matmuls ran in bfloat16), and the outputs are float32."""
    exact = make_policy(seed=3, model_config=ModelConfig(dtype="float32"))
    mixed = make_policy(seed=3, model_config=ModelConfig(dtype="bfloat16"))
    with torch.no_grad():
        a = score_responses(exact.model.eval(), *_rows(), with_entropy=True)
        b = score_responses(mixed.model.eval(), *_rows(), with_entropy=True)
    mask = _rows()[3].bool()
    assert b.log_probs.dtype == b.entropy.dtype == torch.float32
    gap = (a.log_probs - b.log_probs)[mask].abs().max().item()
    assert 0 < gap < 0.05
    head = mixed.model.get_output_embeddings()
    hidden = torch.randn(3, head.in_features)
    with precision.autocast(mixed.model):
        logits = head(hidden)
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, hidden @ head.weight.T, rtol=1e-6, atol=1e-6)


def test_the_value_head_computes_in_float32_under_autocast():
    from algorithms.training.scoring import ValueHead

    head = ValueHead(8)
    with torch.no_grad():
        head.linear.weight.normal_()
    hidden = torch.randn(4, 8, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        values = head(hidden)
    assert values.dtype == torch.float32
    torch.testing.assert_close(values, hidden.float() @ head.linear.weight[0] +
                               head.linear.bias, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("lora", [True, False])
def test_an_update_trains_float32_weights_with_float32_optimizer_state(lora):
    model_config = ModelConfig(dtype="bfloat16", **(LORA if lora else {}))
    policy = make_policy(model_config=model_config)
    learner = Learner(policy, _config("gigpo"), CPU)
    batch = learner.score(_rollout(policy.tokenizer))
    assert np.all(batch.old_log_probs[batch.response_mask == 1] < 0)
    before = _snapshot(policy.model)
    stats = learner.update(batch, learner.advantages(batch), seed=0)
    assert stats["grad_norm"] > 0
    trained = {n for n, p in policy.model.named_parameters() if p.requires_grad}
    after = _snapshot(policy.model)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed == trained
    state = learner.models.optimizer.state
    moments = [state[p]["exp_avg"] for p in policy.model.parameters() if p.requires_grad]
    assert moments and {m.dtype for m in moments} == {torch.float32}
    assert {p.dtype for n, p in policy.model.named_parameters() if n in trained} == \
        {torch.float32}


@pytest.mark.parametrize("dtype, engine_dtype", [("bfloat16", torch.bfloat16),
                                                 ("float32", torch.float32)])
def test_the_vllm_engine_takes_the_policys_compute_dtype(monkeypatch, dtype, engine_dtype):
    """``generation.vllm.dtype: auto`` is the policy's compute dtype, not the dtype of its
    (float32) trained weights."""
    from algorithms.config import GenerationConfig
    from algorithms.engines.vllm import VLLMEngine

    seen = {}
    monkeypatch.setattr(VLLMEngine, "__init__",
                        lambda self, path, *, dtype, **kwargs: seen.update(dtype=dtype))
    policy = make_policy(model_config=ModelConfig(dtype=dtype, **LORA))
    VLLMEngine.for_policy(policy, GenerationConfig(), device=CPU, seed=0, max_model_len=64)
    assert seen["dtype"] == engine_dtype


def test_the_run_log_says_which_precision():
    from algorithms.precision import describe

    mixed = make_policy(model_config=ModelConfig(dtype="bfloat16", **LORA))
    assert describe(mixed.model).startswith("bfloat16 compute, mixed precision")
    assert describe(make_policy(model_config=ModelConfig(dtype="float32")).model) == \
        "float32 weights and compute"


def test_a_model_flagged_quantized_is_cast_by_torch():
    """transformers flags a model converted from GGUF ``is_quantized`` (its weights are
    dequantized floats) and its ``.float()`` refuses such a model: mixed precision casts
    with torch's ``Module.float`` (the first ``python train.py`` on a fresh machine, which
    converts the default GGUF model, failed on this)."""
    from algorithms.training.policy import wrap_model
    from tests.algorithms.tiny import make_model, make_tokenizer

    tokenizer = make_tokenizer()
    model = make_model(len(tokenizer), seed=0).to(torch.bfloat16)
    model.is_quantized = True
    with pytest.raises(ValueError, match="quantized"):
        model.float()
    policy = wrap_model(model, tokenizer, ModelConfig(dtype="bfloat16", **LORA),
                        source="test", path="tiny", gguf_file=None)
    assert set(_linear_weights(policy.model).values()) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for n, p in policy.model.named_parameters()
               if "lora_" in n or "norm" in n or "embed_tokens" in n)


@pytest.mark.parametrize("dtype, loaded", [("auto", "float32"), ("bfloat16", "float32"),
                                           ("float16", "float16"), ("float32", "float32")])
def test_torchrun_on_gpus_loads_float32_master_weights_for_fsdp2(dtype, loaded):
    """Under torchrun on GPUs FSDP2's own mixed precision computes in bfloat16 over float32
    weights, so bfloat16 (or auto) loads float32; a single process keeps the dtype."""
    from algorithms.config import TrainConfig, replace
    from algorithms.runs.distributed import Ranks
    from algorithms.training.build import run_model_config

    config = replace(TrainConfig(), model={"dtype": dtype})
    cuda = torch.device("cuda")
    assert run_model_config(config, cuda, Ranks(0, 2)).dtype == loaded
    assert run_model_config(config, cuda, Ranks(0, 1)).dtype == dtype
    assert run_model_config(config, CPU, Ranks(0, 2)).dtype == dtype
