"""One learner update per case on the tiny Llama, run as one process or under torchrun.

``python -m tests.algorithms.distributed_update OUT_DIR`` (one process) and
``torchrun --nproc-per-node 2 -m tests.algorithms.distributed_update OUT_DIR`` (two gloo
ranks) score, estimate and update on the same scripted rollout for every case of
:data:`CASES`, and rank 0 writes ``OUT_DIR/<case>.safetensors``: the new weights (the
shards gathered), the scores and the update's statistics. ``test_distributed.py``
compares the two.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from algorithms.config import ModelConfig, replace
from algorithms.runs import distributed
from algorithms.runs.launch import run_worker
from algorithms.training.learner import Learner
from tests.algorithms.test_learner import _config, _rollout
from tests.algorithms.tiny import make_model, make_policy, resolve_auto_as_float32

CASES = {
    "gigpo": ("gigpo", 0, "value_head"),
    "grpo": ("grpo", 0, "value_head"),
    "ppo": ("ppo", 0, "value_head"),
    "ppo-separate-critic": ("ppo", 0, "separate"),
    "gigpo-lora": ("gigpo", 4, "value_head"),
    "grpo-lora": ("grpo", 4, "value_head"),
    "ppo-lora": ("ppo", 4, "value_head"),
    "gigpo-lora-bf16": ("gigpo", 4, "value_head", "bfloat16"),
    "gigpo-bf16": ("gigpo", 0, "value_head", "bfloat16"),
}
"""case -> (algo, LoRA rank, PPO critic[, model dtype: float32 unless named])."""


def run_case(name: str, ranks: distributed.Ranks, out: Path) -> None:
    algo, lora_rank, critic, *dtype = CASES[name]
    dtype = dtype[0] if dtype else "float32"
    model_config = ModelConfig(lora_rank=lora_rank, critic=critic, dtype=dtype)
    torch.manual_seed(11)  # LoRA's initialisation (rank 0's is broadcast anyway)
    policy = make_policy(model_config=model_config)
    # 3 mini-batches of 4 steps, micro-batches of 3: ranks get unequal shares and the
    # padding passes run. Token-weighted micro-batches: the update then does not depend on
    # how ranks cut a mini-batch (verl's equal weighting does, by design)
    config = replace(_config(algo, mini_batch_size=4, micro_batch_size=3, epochs=2,
                             micro_batch_weighting="tokens"),
                     model={"lora_rank": lora_rank, "critic": critic, "dtype": dtype})
    backbone = make_model(len(policy.tokenizer), seed=5).model if critic == "separate" else None
    learner = Learner(policy, config, torch.device("cpu"), critic_backbone=backbone,
                      ranks=ranks)
    batch = learner.score(_rollout(policy.tokenizer))
    signals = learner.advantages(batch)
    stats = learner.update(batch, signals, seed=7)
    tensors = {f"weights.{key}": distributed.full_tensor(value.detach()).clone()
               for key, value in learner.scorer.state_dict().items()}
    if learner.critic is not None:
        tensors.update({f"critic.{key}": distributed.full_tensor(value.detach()).clone()
                        for key, value in learner.critic.state_dict().items()})
    tensors["old_log_probs"] = torch.from_numpy(batch.old_log_probs)
    if batch.ref_log_probs is not None:
        tensors["ref_log_probs"] = torch.from_numpy(batch.ref_log_probs)
    if batch.values is not None:
        tensors["values"] = torch.from_numpy(batch.values)
    if ranks.main:
        save_file({k: v.contiguous() for k, v in tensors.items()},
                  str(out / f"{name}.safetensors"))
        (out / f"{name}.json").write_text(json.dumps(
            {"stats": stats, "steps": len(batch),
             "advantages": np.asarray(signals.advantages).tolist()}), encoding="utf-8")


def main() -> None:
    resolve_auto_as_float32()
    out = Path(sys.argv[1])
    names = sys.argv[2:] or list(CASES)
    ranks = distributed.init_from_environment(device="cpu", timeout_s=300)
    try:
        for name in names:
            run_case(name, ranks, out)
    finally:
        distributed.shutdown()


if __name__ == "__main__":
    run_worker(main)  # a torchrun worker ends without teardown (see there)
