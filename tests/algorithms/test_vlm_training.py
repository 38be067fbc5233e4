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
    first = records[0]["steps"][0]
    assert "<|image_pad|>" in first["prompt"] and first["images"][0].endswith(".png")
    # the observation anchor holds the image's bytes: written short
    assert first["anchor"].startswith("('The grid is in the image.', <1728 bytes sha256:")


def test_ppo_refuses_a_vision_policy(tmp_path):
    with pytest.raises(ValueError, match="critic does not take images"):
        Trainer(visual_config("ppo", iterations=1), policy=make_vision_policy(),
                run_dir=tmp_path).setup()


# --- SFT on a visual env's expert ------------------------------------------------------

def _expert(episodes: int = 6):
    from algorithms.sft.data import expert_trajectories
    from tests.algorithms.visual_env import ENV_ID

    return expert_trajectories(ENV_ID, {"max_steps": 6}, episodes)


def test_visual_expert_data_round_trip_with_png_images(tmp_path):
    import numpy as np

    from algorithms.sft.data import SFTDataError, read_trajectories, write_trajectories

    trajectories = _expert()
    assert all(t.extra["success"] for t in trajectories)
    assert all(step.image is not None for t in trajectories for step in t.steps)
    path = tmp_path / "data" / "grid.jsonl"
    path.parent.mkdir()
    write_trajectories(path, trajectories)
    assert (path.parent / "grid_images" / "000000_000.png").is_file()
    back = read_trajectories(path)
    for ours, theirs in zip(trajectories, back, strict=True):
        assert [s.action for s in ours.steps] == [s.action for s in theirs.steps]
        for a, b in zip(ours.steps, theirs.steps, strict=True):
            assert np.array_equal(a.image, b.image)
    (path.parent / "grid_images" / "000000_000.png").write_bytes(b"not a png")
    with pytest.raises(SFTDataError, match=r"line 1: steps\[0\].image .* cannot read it"):
        read_trajectories(path)


def test_sft_loss_on_images_agrees_with_the_rl_scorer():
    """An SFT sample of a visual step is the RL prompt with its image; its loss is the RL
    scorer's negative log-likelihood of the same response on the same pixels."""
    from algorithms.agent.step_batch import pad_left, pad_right
    from algorithms.config import PromptConfig
    from algorithms.sft.data import build_examples
    from algorithms.sft.trainer import collate, response_nll
    from algorithms.training.scoring import score_responses

    policy = make_vision_policy(seed=4, model_config=ModelConfig(lora_rank=2))
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.fill_(0.1)
    prompt = PromptConfig(think=False)
    examples, stats = build_examples(_expert(3), policy.tokenizer, prompt,
                                     stop=("</action>",), max_new_tokens=8,
                                     vision=policy.vision)
    assert stats.steps == len(examples) > 2 and all(len(e.images) == 1 for e in examples)
    image_id = policy.vision.image_token_id
    assert all(e.input_ids.count(image_id) == 4 for e in examples)
    ids, attention, mask = collate(examples, int(policy.tokenizer.pad_token_id), "cpu")
    vision = policy.vision.tensors([e.images for e in examples], "cpu")
    with torch.no_grad():
        nll, tokens = response_nll(policy.model, ids, attention, mask, vision)
        prompts = [e.input_ids[: e.loss_mask.index(1)] for e in examples]
        responses = [e.input_ids[e.loss_mask.index(1):] for e in examples]
        p_ids, p_mask = pad_left(prompts, 0)
        r_ids, r_mask = pad_right(responses, 0)
        scored = score_responses(policy.model, torch.tensor(p_ids), torch.tensor(p_mask),
                                 torch.tensor(r_ids), torch.tensor(r_mask), vision=vision)
    assert tokens == int(r_mask.sum())
    assert torch.allclose(nll, -(scored.log_probs * torch.tensor(r_mask)).sum(), rtol=1e-4)


@pytest.mark.parametrize("lora", [0, 2])
def test_sft_on_the_visual_expert_then_an_rl_run_starts_from_it(tmp_path, lora):
    from algorithms.config import replace
    from algorithms.sft.trainer import SFTTrainer
    from algorithms.training.warm_start import apply_init_checkpoint

    model = {"lora_rank": lora, "lora_alpha": 2 * lora if lora else 32}
    config = replace(visual_config(iterations=1, model=model), algo="sft",
                     sft={"episodes": 6, "batch_size": 4, "micro_batch_size": 2,
                          "max_steps": 2, "lr": 1e-2},
                     run={"save_every": 1000})
    trained = make_vision_policy(seed=5, model_config=ModelConfig(**model))
    before = _weights(trained.model)
    SFTTrainer(config, policy=trained, run_dir=tmp_path / "sft").run()
    assert (tmp_path / "sft" / "sft_data_images").is_dir()
    moved = {n for n, w in _weights(trained.model).items() if not torch.equal(w, before[n])}
    tower = vision_tower(trained.model)[0]
    assert moved and not any(n.startswith(tower) for n in moved)
    inputs = torch.tensor([[3, 10, 11, 12, 13]])
    with torch.no_grad():
        expected = trained.model(input_ids=inputs).logits
    for rl_lora in (0, 2):
        fresh = make_vision_policy(seed=5, model_config=ModelConfig(lora_rank=rl_lora))
        started = apply_init_checkpoint(fresh, ModelConfig(lora_rank=rl_lora,
                                                           init_checkpoint=str(tmp_path / "sft")))
        assert started.vision is not None and started.lora == (rl_lora > 0)
        with torch.no_grad():
            assert torch.allclose(started.model(input_ids=inputs).logits, expected, atol=1e-5)
        if rl_lora:  # fresh adapters on the language model of the SFT model
            assert all(".language_model." in n for n, p in started.model.named_parameters()
                       if p.requires_grad)


def test_the_overlapped_hf_worker_refuses_a_vision_policy(tmp_path):
    with pytest.raises(ValueError, match="does not take images"):
        Trainer(visual_config(iterations=1, max_staleness=1), policy=make_vision_policy(),
                run_dir=tmp_path).setup()
