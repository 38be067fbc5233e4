"""LoRA checkpoints: only the adapters and their optimizer state are stored, the base model
is identified by a fingerprint, and loading refuses a model the adapters do not fit."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

from safetensors import safe_open  # noqa: E402

from algorithms.agent.metrics import read_metrics  # noqa: E402
from algorithms.config import ModelConfig, replace  # noqa: E402
from algorithms.runs.checkpoint import (  # noqa: E402
    CheckpointError,
    check_model_identity,
    latest_checkpoint,
    load_checkpoint,
)
from algorithms.training.lora import lora_settings  # noqa: E402
from algorithms.training.policy import frozen_weights_fingerprint, model_identity  # noqa: E402
from algorithms.training.trainer import Trainer  # noqa: E402
from tests.algorithms.scripted_config import scripted_config  # noqa: E402
from tests.algorithms.tiny import make_model, make_policy  # noqa: E402

LORA = ModelConfig(lora_rank=4, lora_alpha=8, lora_target_modules=("q_proj", "v_proj"))


def _lora_config(**run: object):
    return dataclasses.replace(scripted_config("gigpo", lr=5e-2, **run), model=LORA)


def _trained(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()
            if p.requires_grad}


def _train_lora_run(tmp_path, iterations: int = 1) -> Trainer:
    trainer = Trainer(_lora_config(iterations=iterations), policy=make_policy(model_config=LORA),
                      run_dir=tmp_path / "run")
    trainer.run()
    return trainer


def test_a_lora_checkpoint_holds_the_adapters_and_their_optimizer_state_only(tmp_path):
    trainer = _train_lora_run(tmp_path)
    folder = latest_checkpoint(tmp_path / "run")
    adapters = _trained(trainer)
    with safe_open(str(folder / "weights.safetensors"), "pt") as weights:
        stored = set(weights.keys())
    assert stored == {f"model.{name}" for name in adapters}
    assert all("lora_" in name for name in stored)
    frozen = sum(p.numel() for p in trainer.policy.model.parameters() if not p.requires_grad)
    assert frozen > 10 * sum(p.numel() for p in adapters.values())  # the base is not stored
    payload = load_checkpoint(folder)
    moments = payload["learner"]["optimizer"]["state"]
    assert len(moments) == len(adapters)  # AdamW state of the adapters only
    assert sorted(tuple(m["exp_avg"].shape) for m in moments.values()) == \
        sorted(tuple(p.shape) for p in adapters.values())
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["model"] == model_identity(trainer.policy)
    assert meta["model"]["lora"] == {"rank": 4, "alpha": 8,
                                     "target_modules": ["q_proj", "v_proj"]}
    assert meta["model"]["frozen_fingerprint"].startswith("sha256:")


def test_eval_only_loads_lora_adapters_onto_the_same_base(tmp_path):
    trainer = _train_lora_run(tmp_path)
    trained = _trained(trainer)
    assert any(torch.count_nonzero(w) for n, w in trained.items() if "lora_B" in n)
    config = _lora_config(iterations=1, eval_only=True, checkpoint=str(tmp_path / "run"))
    evaluator = Trainer(config, policy=make_policy(model_config=LORA),
                        run_dir=tmp_path / "eval")
    metrics = evaluator.run()
    loaded = _trained(evaluator)
    assert set(loaded) == set(trained)
    assert all(torch.equal(trained[name], loaded[name]) for name in trained)
    assert "eval/success" in metrics


def test_resume_with_lora_reproduces_the_next_iteration(tmp_path):
    straight = Trainer(_lora_config(iterations=2), policy=make_policy(model_config=LORA),
                       run_dir=tmp_path / "straight")
    straight.run()
    Trainer(_lora_config(iterations=1), policy=make_policy(model_config=LORA),
            run_dir=tmp_path / "resumed").run()
    resumed = Trainer(_lora_config(iterations=2, resume=True),
                      policy=make_policy(model_config=LORA), run_dir=tmp_path / "resumed")
    resumed.run()
    assert resumed.start_iteration == 1
    a, b = _trained(straight), _trained(resumed)
    assert all(torch.allclose(a[name], b[name], atol=1e-6) for name in a)
    last = [read_metrics(tmp_path / run / "metrics.jsonl")[-1] for run in ("straight", "resumed")]
    assert last[0]["update/policy_loss"] == pytest.approx(last[1]["update/policy_loss"],
                                                          abs=1e-6)


def test_adapters_on_another_base_model_are_refused(tmp_path):
    _train_lora_run(tmp_path)
    config = _lora_config(iterations=1, eval_only=True, checkpoint=str(tmp_path / "run"))
    other_base = make_policy(seed=1, model_config=LORA)  # same shapes, other weights
    with pytest.raises(CheckpointError, match="other weights differ from this run's"):
        Trainer(config, policy=other_base, run_dir=tmp_path / "eval").setup()


@pytest.mark.parametrize(("model", "flags"), [
    (ModelConfig(), "--model.lora-rank 4 --model.lora-alpha 8 "
                    "--model.lora-target-modules q_proj v_proj"),
    (ModelConfig(lora_rank=8, lora_alpha=8, lora_target_modules=("q_proj", "v_proj")),
     "--model.lora-rank 4"),
    (ModelConfig(lora_rank=4, lora_alpha=16, lora_target_modules=("q_proj", "v_proj")),
     "--model.lora-alpha 8"),
])
def test_other_lora_settings_are_refused_with_the_flags_that_fit(tmp_path, model, flags):
    _train_lora_run(tmp_path)
    config = dataclasses.replace(
        _lora_config(iterations=1, eval_only=True, checkpoint=str(tmp_path / "run")),
        model=model)
    with pytest.raises(CheckpointError, match="was trained with LoRA rank 4, alpha 8") as error:
        Trainer(config, policy=make_policy(model_config=model), run_dir=tmp_path / "e").setup()
    assert flags in str(error.value)


def test_a_full_checkpoint_into_a_lora_model_is_refused(tmp_path):
    Trainer(scripted_config("grpo", iterations=1), policy=make_policy(),
            run_dir=tmp_path / "full").run()
    meta = json.loads((latest_checkpoint(tmp_path / "full") / "meta.json").read_text())
    assert meta["model"]["lora"] is None and meta["model"]["frozen_fingerprint"] is None
    config = _lora_config(iterations=1, eval_only=True, checkpoint=str(tmp_path / "full"))
    with pytest.raises(CheckpointError, match="load it with --model.lora-rank 0"):
        Trainer(config, policy=make_policy(model_config=LORA), run_dir=tmp_path / "e").setup()


def test_a_checkpoint_that_does_not_fit_is_a_checkpoint_error(tmp_path):
    """Without a stored identity (older checkpoints) the weights' own names still refuse
    a model they do not fit, as a CheckpointError (one line from train.py)."""
    _train_lora_run(tmp_path)
    folder = latest_checkpoint(tmp_path / "run")
    meta = json.loads((folder / "meta.json").read_text())
    del meta["model"]
    (folder / "meta.json").write_text(json.dumps(meta))
    config = replace(scripted_config("grpo", iterations=1, eval_only=True,
                                     checkpoint=str(folder)))
    with pytest.raises(CheckpointError, match="does not fit this run's model"):
        Trainer(config, policy=make_policy(), run_dir=tmp_path / "e").setup()


def test_the_fingerprint_covers_the_frozen_weights_whatever_the_wrapping():
    from peft import LoraConfig, get_peft_model

    plain = make_model(40, seed=3)
    assert frozen_weights_fingerprint(plain) is None  # full fine-tuning: nothing frozen
    assert lora_settings(plain) is None
    for parameter in plain.parameters():
        parameter.requires_grad_(False)
    bare = frozen_weights_fingerprint(plain)
    wrapped = get_peft_model(make_model(40, seed=3),
                             LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    assert frozen_weights_fingerprint(wrapped) == bare  # PEFT names map back to HF names
    assert lora_settings(wrapped) == {"rank": 2, "alpha": 4, "target_modules": ["q_proj"]}
    with torch.no_grad():
        next(p for p in plain.parameters()).view(-1)[0] += 1e-3  # one element
    assert frozen_weights_fingerprint(plain) != bare
    assert frozen_weights_fingerprint(make_model(40, seed=3).to(torch.bfloat16)
                                      .requires_grad_(False)) != bare  # the dtype counts


def test_check_model_identity_rules(tmp_path):
    identity = {"base_source": "a", "frozen_fingerprint": "sha256:" + "0" * 64,
                "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj"]}}
    check_model_identity(tmp_path, None, identity)  # no stored identity: not checked
    check_model_identity(tmp_path, identity, {**identity, "base_source": "b"})  # info only
    with pytest.raises(CheckpointError, match="trained on a .* loading into b"):
        check_model_identity(tmp_path, identity,
                             {**identity, "base_source": "b",
                              "frozen_fingerprint": "sha256:" + "1" * 64})
    full = {"base_source": "a", "frozen_fingerprint": None, "lora": None}
    check_model_identity(tmp_path, full, {**full, "base_source": "other model"})
    # a warm-started run's checkpoint, loaded without the checkpoint that run started
    # from: the message names that one, not the base model's flags
    warm = {**identity, "base_source": "a, started from /runs/x/sft/checkpoints/iter_000008"}
    plain = {**identity, "base_source": "a", "frozen_fingerprint": "sha256:" + "1" * 64}
    with pytest.raises(CheckpointError, match=r"; pass --model.init-checkpoint "
                                              r"/runs/x/sft/checkpoints/iter_000008 \("):
        check_model_identity(tmp_path, warm, plain)
    with pytest.raises(CheckpointError, match="--model.name-or-path"):
        check_model_identity(tmp_path, warm, {**plain, "base_source": warm["base_source"]})


def test_the_adapters_initialisation_is_a_function_of_the_seed():
    """So that a LoRA run is reproduced by its seed alone, and seeds differ."""
    from algorithms.training.lora import attach_lora

    def lora_a(seed: int) -> torch.Tensor:
        model = attach_lora(make_model(40, seed=0), LORA, seed=seed)
        return torch.cat([p.detach().flatten() for n, p in model.named_parameters()
                          if "lora_A" in n])

    before = torch.get_rng_state()
    first = lora_a(0)
    assert torch.equal(torch.get_rng_state(), before)  # the global RNG is left alone
    torch.manual_seed(12345)
    assert torch.equal(lora_a(0), first)
    assert not torch.equal(lora_a(1), first)
