"""Behaviour log-probs: :class:`~algorithms.engines.Response` rows, and the HF engine's
recorded log-probs against the learner's scorer (``score_responses``) on the tiny model."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

pytest.importorskip("transformers")

from algorithms.config import ModelConfig  # noqa: E402
from algorithms.engines import Response  # noqa: E402
from algorithms.engines.hf import HFEngine, plain_sampling_config  # noqa: E402
from algorithms.training.scoring import score_responses  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402

TOLERANCE = 1e-4
"""|recorded - scored| allowed per token (float32, tiny model): the engine's KV-cached
decoding and the scorer's one full forward pass differ only in summation order. Measured:
largest gap 9.5e-7 (T = 1.0) and 4.8e-7 (T = 0.7) over 16 rows of 24 tokens, with and
without LoRA."""

TEXTS = ["open red door", "You are in room 1 of 3 . look", "look", "open blue door look"]


def _prompts(tokenizer) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]


def _scored(model, prompts, responses, temperature: float) -> list[list[float]]:
    """The learner's log-probs of ``responses`` (left-padded prompts, right-padded
    responses, as the learner batches them)."""
    width = max(len(p) for p in prompts)
    length = max(len(r) for r in responses)
    prompt_ids = torch.zeros((len(prompts), width), dtype=torch.long)
    prompt_mask = torch.zeros_like(prompt_ids)
    response_ids = torch.zeros((len(prompts), length), dtype=torch.long)
    response_mask = torch.zeros_like(response_ids)
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        prompt_ids[row, width - len(prompt):] = torch.tensor(prompt)
        prompt_mask[row, width - len(prompt):] = 1
        response_ids[row, : len(response)] = torch.tensor(list(response))
        response_mask[row, : len(response)] = 1
    with torch.no_grad():
        scored = score_responses(model, prompt_ids, prompt_mask, response_ids, response_mask,
                                 temperature=temperature)
    return [scored.log_probs[row, : len(r)].tolist() for row, r in enumerate(responses)]


def _largest_gap(rows: list[Response], scored: list[list[float]]) -> float:
    return max(abs(a - b) for row, s in zip(rows, scored, strict=True)
               for a, b in zip(row.log_probs, s, strict=True))


# --- Response --------------------------------------------------------------------------

def test_response_is_a_plain_tuple_that_carries_its_log_probs():
    row = Response((5, 7, 9), [-0.5, -1.25, -2])
    assert row == (5, 7, 9) and (5, 7, 9) == row and hash(row) == hash((5, 7, 9))
    assert len(row) == 3 and list(row) == [5, 7, 9] and row[1] == 7
    assert type(row[:2]) is tuple and row[:2] == (5, 7)
    assert type(row + (1,)) is tuple
    assert row.log_probs == (-0.5, -1.25, -2.0)
    assert Response((1, 2)).log_probs is None and Response() == ()
    for copied in (pickle.loads(pickle.dumps(row)), pickle.loads(pickle.dumps(row, 0)),
                   copy.copy(row), copy.deepcopy(row)):
        assert type(copied) is Response and copied == row
        assert copied.log_probs == row.log_probs
    assert pickle.loads(pickle.dumps(Response((3,)))).log_probs is None
    with pytest.raises(ValueError, match="2 log-probs for 1 tokens"):
        Response((1,), (0.0, 0.0))


# --- HF engine -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_hf_log_probs_equal_the_learners_scores(temperature, lora, dtype):
    """Also under CPU mixed precision (bfloat16 compute, eager attention), within the same
    tolerance: measured largest gap 7.2e-6 over 6 seeds of this test's model."""
    model_config = ModelConfig(dtype=dtype, lora_rank=2, lora_alpha=4,
                               lora_target_modules=("q_proj",)) \
        if lora else ModelConfig(dtype=dtype)
    policy = make_policy(seed=1, model_config=model_config)
    if lora:  # a non-trivial adapter
        with torch.no_grad():
            for name, parameter in policy.model.named_parameters():
                if "lora_B" in name:
                    parameter.fill_(0.2)
    prompts = _prompts(policy.tokenizer)
    engine = HFEngine(policy.model, policy.tokenizer, batch_size=3)  # two batches
    rows = engine.generate(prompts, temperature=temperature, max_new_tokens=12, seed=5)
    assert all(type(row) is Response and len(row.log_probs) == len(row) for row in rows)
    assert all(value < 0 for row in rows for value in row.log_probs)
    assert _largest_gap(rows, _scored(policy.model, prompts, rows, temperature)) < TOLERANCE


def test_hf_log_probs_are_cut_with_the_tokens_at_a_stop_string_and_at_eos():
    policy = make_policy(seed=1)
    tokenizer = policy.tokenizer
    prompts = _prompts(tokenizer)
    engine = HFEngine(policy.model, tokenizer, batch_size=8)
    free = engine.generate(prompts, temperature=1.0, max_new_tokens=12, seed=2)
    # a stop string that the first row's sample contains, from its third token on
    stop = tokenizer.decode([free[0][2]])
    stopped = engine.generate(prompts, temperature=1.0, max_new_tokens=12, seed=2,
                              stop=(stop,))
    assert len(stopped[0]) <= 3 < len(free[0])
    for cut, whole in zip(stopped, free, strict=True):
        assert cut == whole[: len(cut)]
        assert cut.log_probs == pytest.approx(whole.log_probs[: len(cut)], abs=TOLERANCE)
    assert _largest_gap(stopped, _scored(policy.model, prompts, stopped, 1.0)) < TOLERANCE
    eos = tokenizer.eos_token_id
    with torch.no_grad():  # point EOS's (tied) output row along the hidden states: rows end
        hidden = policy.model.model(input_ids=torch.tensor([prompts[1]])).last_hidden_state
        direction = hidden[0].mean(0)
        policy.model.lm_head.weight[eos] = 2.0 * direction / direction.norm()
    rows = engine.generate(prompts * 2, temperature=1.0, max_new_tokens=12, seed=0)
    ended = [row for row in rows if row[-1] == eos]
    assert 0 < len(ended) < len(rows) and all(len(row.log_probs) == len(row) for row in rows)
    assert _largest_gap(rows, _scored(policy.model, prompts * 2, rows, 1.0)) < TOLERANCE


def test_hf_tokens_are_transformers_own_sampling_and_greedy_log_probs_are_zero():
    """The warpers moved into the processor list (so the recorder can follow them) draw
    the very tokens ``generate`` draws from ``plain_sampling_config`` alone."""
    policy = make_policy(seed=1)
    prompt = _prompts(policy.tokenizer)[1]
    engine = HFEngine(policy.model, policy.tokenizer, top_p=0.8)
    for temperature in (1.0, 0.7):
        row = engine.generate([prompt], temperature=temperature, max_new_tokens=10, seed=4)[0]
        config = plain_sampling_config(temperature=temperature, top_p=0.8, max_new_tokens=10,
                                       pad_token_id=0, eos_token_id=2)
        with torch.random.fork_rng():
            torch.manual_seed(4 * 100_003)
            output = policy.model.generate(input_ids=torch.tensor([prompt]),
                                           attention_mask=torch.ones(1, len(prompt),
                                                                     dtype=torch.long),
                                           generation_config=config)
        assert row == engine._trim(output[0, len(prompt):].tolist())
    greedy = engine.generate([prompt], temperature=0.0, max_new_tokens=5, seed=0)[0]
    assert greedy.log_probs == (0.0,) * len(greedy)


def test_hf_log_probs_under_top_p_are_those_of_the_truncated_law():
    """With ``top_p < 1`` the token is drawn from the renormalised nucleus: its recorded
    log-prob is the scorer's (untruncated) one plus -log(nucleus mass)."""
    from transformers import TopPLogitsWarper

    policy = make_policy(seed=1)
    prompt = _prompts(policy.tokenizer)[0]
    engine = HFEngine(policy.model, policy.tokenizer, top_p=0.5)
    row = engine.generate([prompt], temperature=0.7, max_new_tokens=1, seed=0)[0]
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([prompt])).logits[:, -1] / 0.7
    kept = TopPLogitsWarper(top_p=0.5)(None, logits.clone()).isfinite()[0]
    full = torch.log_softmax(logits[0], dim=-1)
    mass = full[kept].exp().sum()
    assert 0.5 <= mass < 0.99 and kept[row[0]]
    scored = _scored(policy.model, [prompt], [row], 0.7)[0][0]
    assert row.log_probs[0] == pytest.approx(scored - mass.log().item(), abs=TOLERANCE)


# --- vision-language models ----------------------------------------------------------

VLM_KINDS = ("qwen2_5_vl", "qwen3_vl")


def _grid_image(seed: int, height: int, width: int):
    import numpy as np

    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize("kind", VLM_KINDS)
def test_hf_vlm_log_probs_equal_the_learners_scores_with_the_same_pixels(kind):
    """Prompts with images of different sizes and a text-only prompt, in two generate
    batches: the engine's recorded log-probs equal the scorer's on the same pixel inputs
    (re-encoded from the images), responses with sampled image tokens included."""
    from tests.algorithms.visual_env import make_vision_policy

    policy = make_vision_policy(kind=kind, seed=3)
    vision, tokenizer = policy.vision, policy.tokenizer
    images = [(_grid_image(0, 24, 24),), (_grid_image(1, 300, 90),), (),
              (_grid_image(2, 40, 64),)]
    counts = [vision.token_counts(vision.encode(row))[0] if row else 0 for row in images]
    assert len(set(counts) - {0}) > 1  # images of different token counts
    prompts = [tokenizer(("Now you see: " + vision.placeholder(count) if count else "look")
                         + " up down", add_special_tokens=False)["input_ids"]
               for count in counts]
    engine = HFEngine(policy.model, tokenizer, batch_size=3, vision=vision)
    rows = engine.generate(prompts, temperature=1.0, max_new_tokens=16, seed=7,
                           images=images)
    assert all(len(row.log_probs) == len(row) for row in rows)
    width = max(len(p) for p in prompts)
    length = max(len(r) for r in rows)
    prompt_ids = torch.zeros((len(prompts), width), dtype=torch.long)
    prompt_mask = torch.zeros_like(prompt_ids)
    response_ids = torch.zeros((len(prompts), length), dtype=torch.long)
    response_mask = torch.zeros_like(response_ids)
    for row, (prompt, response) in enumerate(zip(prompts, rows, strict=True)):
        prompt_ids[row, width - len(prompt):] = torch.tensor(prompt)
        prompt_mask[row, width - len(prompt):] = 1
        response_ids[row, : len(response)] = torch.tensor(list(response))
        response_mask[row, : len(response)] = 1
    with torch.no_grad():
        scored = score_responses(policy.model, prompt_ids, prompt_mask, response_ids,
                                 response_mask, vision=vision.tensors(images, "cpu"))
    gap = max(abs(a - b) for row, response in enumerate(rows)
              for a, b in zip(response.log_probs, scored.log_probs[row].tolist(), strict=False))
    assert gap < TOLERANCE
    # the pixels matter: other images give other log-probs
    other = [tuple(_grid_image(9, *image.shape[:2]) for image in row) for row in images]
    with torch.no_grad():
        moved = score_responses(policy.model, prompt_ids, prompt_mask, response_ids,
                                response_mask, vision=vision.tensors(other, "cpu"))
    changed = (moved.log_probs - scored.log_probs).abs() * response_mask
    assert changed[[0, 1, 3]].max() > 1e-4 and changed[2].max() == 0


@pytest.mark.parametrize(("kind", "lora", "tower", "dtype"),
                         [("qwen2_5_vl", False, False, "float32"),
                          ("qwen2_5_vl", True, True, "float32"),
                          ("qwen3_vl", True, False, "float32"),
                          ("qwen2_5_vl", True, False, "bfloat16"),
                          ("qwen3_vl", False, True, "bfloat16")])
def test_vlm_rollout_batch_scores_on_policy(kind, lora, tower, dtype):
    """The visual grid rolled out by the HF engine, then scored as the learner scores it
    (its micro-batches re-encode the stored images): the old log-probs equal the
    behaviour log-probs the engine recorded, on every response token. Also under CPU
    mixed precision (bfloat16 compute; with LoRA the frozen tower's and language model's
    linear weights stored in bfloat16)."""
    import numpy as np

    from agentgym.vector import make_vector_env
    from algorithms.agent.rollout import RolloutSettings, collect_rollout
    from algorithms.config import PromptConfig
    from algorithms.runs.distributed import SINGLE
    from algorithms.training.micro_batches import micro_batches
    from algorithms.training.scoring import Scorer
    from tests.algorithms.visual_env import ENV_ID, make_vision_policy

    config = ModelConfig(lora_rank=2 if lora else 0, lora_alpha=4, train_vision_tower=tower,
                         dtype=dtype)
    policy = make_vision_policy(kind=kind, seed=1, model_config=config)
    if lora:
        with torch.no_grad():
            for name, parameter in policy.model.named_parameters():
                if "lora_B" in name:
                    parameter.fill_(0.1)
    vec_env = make_vector_env(ENV_ID, 4, group_size=2, max_steps=3)
    settings = RolloutSettings(group_size=2, max_steps=3, temperature=1.0, max_new_tokens=10,
                               invalid_action_penalty=0.1, prompt=PromptConfig(think=False),
                               keep_bootstrap_prompts=False, vision=policy.vision)
    engine = HFEngine(policy.model, policy.tokenizer, batch_size=3, vision=policy.vision)
    batch = collect_rollout(vec_env, engine, policy.tokenizer, settings, group_task_ids=None,
                            seed=3)
    vec_env.close()
    assert batch.images is not None and all(len(row) == 1 for row in batch.images)
    scorer = Scorer(policy.model)
    old = np.zeros(batch.response_ids.shape, dtype=np.float32)
    with torch.no_grad():
        for index, rows, _ in micro_batches(batch, None, np.arange(len(batch)), 5, SINGLE,
                                            torch.device("cpu"), policy.vision):
            assert rows["image_grid_thw"].shape[0] == len(index)
            log_probs, _, _ = scorer(rows, temperature=1.0)
            old[index, :log_probs.shape[1]] = log_probs.numpy()
    mask = batch.response_mask.astype(bool)
    assert np.abs(old[mask] - batch.behaviour_log_probs[mask]).max() < TOLERANCE
