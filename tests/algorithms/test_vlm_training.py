"""A vision-language policy through the trainer on the visual grid: the update moves what
should move, checkpoints hold what trained, and a resumed run replays the next iteration."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("PIL")

from agentgym.viewer.data import read_records  # noqa: E402
from algorithms.agent.metrics import read_metrics  # noqa: E402
from algorithms.config import ModelConfig  # noqa: E402
from algorithms.runs.checkpoint import latest_checkpoint, load_checkpoint  # noqa: E402
from algorithms.training.trainer import Trainer  # noqa: E402
from algorithms.training.vision_model import vision_tower  # noqa: E402
from tests.algorithms.visual_env import make_vision_policy, visual_config  # noqa: E402

NONDETERMINISTIC = ("time/", "throughput/")


def _deterministic(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if not k.startswith(NONDETERMINISTIC)}


def _weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


LORA_TOWER = {"lora_rank": 2, "lora_alpha": 4, "train_vision_tower": True}


def test_vlm_resume_reproduces_the_next_iteration(tmp_path):
    """LoRA on the language model and a trained vision tower: the checkpoint holds both,
    and resuming from it replays iteration 2 exactly."""
    config = ModelConfig(**LORA_TOWER)
    straight = Trainer(visual_config(iterations=2, model=LORA_TOWER),
                       policy=make_vision_policy(seed=0, model_config=config),
                       run_dir=tmp_path / "straight")
    straight.run()
    first = Trainer(visual_config(iterations=1, model=LORA_TOWER),
                    policy=make_vision_policy(seed=0, model_config=config),
                    run_dir=tmp_path / "resumed")
    first.run()
    resumed = Trainer(visual_config(iterations=2, resume=True, model=LORA_TOWER),
                      policy=make_vision_policy(seed=0, model_config=config),
                      run_dir=tmp_path / "resumed")
    resumed.run()
    assert resumed.start_iteration == 1
    a = read_metrics(tmp_path / "straight" / "metrics.jsonl")
    b = read_metrics(tmp_path / "resumed" / "metrics.jsonl")
    assert _deterministic(a[1]) == pytest.approx(_deterministic(b[1]), abs=1e-6)
    wa, wb = _weights(straight.policy.model), _weights(resumed.policy.model)
    assert all(torch.allclose(wa[n], wb[n], atol=1e-6) for n in wa)
    assert straight.last_batch.log.actions == resumed.last_batch.log.actions
    assert straight.last_batch.images is not None
    saved = load_checkpoint(latest_checkpoint(tmp_path / "straight"))["learner"]["model"]
    tower = vision_tower(straight.policy.model)[0]
    assert any(name.startswith(tower) for name in saved)
    assert any("lora_" in name for name in saved)
    assert all(name.startswith(tower) or "lora_" in name for name in saved)


def test_vlm_full_fine_tune_moves_the_language_model_not_the_frozen_tower(tmp_path):
    policy = make_vision_policy(seed=2)
    before = _weights(policy.model)
    trainer = Trainer(visual_config(iterations=1), policy=policy, run_dir=tmp_path)
    trainer.run()
    after = _weights(policy.model)
    tower = vision_tower(policy.model)[0]
    moved = {n for n in before if not torch.equal(before[n], after[n])}
    assert moved and not any(n.startswith(tower) for n in moved)
    assert any(".language_model.layers." in n for n in moved)
    saved = load_checkpoint(latest_checkpoint(tmp_path))["learner"]["model"]
    assert saved and not any(n.startswith(tower) for n in saved)
    # the records keep what the model saw: a prompt with the image's tokens
    records = read_records(tmp_path / "records" / "train" / "iter_000001.jsonl.gz")
    assert "<|image_pad|>" in records[0]["steps"][0]["prompt"]


def test_ppo_refuses_a_vision_policy(tmp_path):
    with pytest.raises(ValueError, match="critic does not take images"):
        Trainer(visual_config("ppo", iterations=1), policy=make_vision_policy(),
                run_dir=tmp_path).setup()
