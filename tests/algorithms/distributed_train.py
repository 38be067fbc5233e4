"""A training run on the scripted env with the tiny Llama, as one process or under torchrun.

``[torchrun --nproc-per-node 2 -m] tests.algorithms.distributed_train RUN_DIR ALGO
ITERATIONS [--resume] [--lora] [--setup-only] [--ray-address ADDRESS] [--max-staleness K]``. Rank 0 writes, into ``RUN_DIR``:

- ``final.safetensors``: the policy's (gathered) weights, the optimizer's moments and
  (torchrun) the engine's weight mirror, after the run (or, with ``--setup-only``, right after setup and any resume);
- ``groups-rank<R>.json`` (every rank): per rollout, the global group ids and task ids
  that rank rolled out (``test_distributed.py`` checks ownership with it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from algorithms.agent import sampling as sampling_module
from algorithms.config import replace
from algorithms.runs import distributed
from algorithms.runs.launch import run_worker
from algorithms.training.trainer import Trainer
from tests.algorithms.scripted_config import scripted_config
from tests.algorithms.tiny import make_policy, resolve_auto_as_float32

NUM_GROUPS = 3
"""Groups per iteration: 2 ranks get 2 and 1 (unequal blocks on purpose)."""


def _record_rollouts(ranks: distributed.Ranks, out: Path) -> None:
    """Wrap the sampler's ``collect_rollout`` to log which groups this rank rolled out."""
    log: list[dict] = []
    collect = sampling_module.collect_rollout

    def recording(*args, **kwargs):
        batch = collect(*args, **kwargs)
        offset = kwargs.get("group_offset", 0)
        if kwargs.get("group_task_ids") is None:  # training rollouts, not evaluation
            groups = sorted({int(g) + offset for g in batch.group_ids})
            tasks = {int(g) + offset: t for g, t in zip(batch.group_ids, batch.log.task_ids,
                                                         strict=True)}
            log.append({"offset": offset, "groups": groups,
                        "tasks": {str(g): tasks[g] for g in groups},
                        "rows": {str(g): int((batch.group_ids + offset == g).sum())
                                 for g in groups}})
            (out / f"groups-rank{ranks.rank}.json").write_text(json.dumps(log),
                                                               encoding="utf-8")
        return batch

    sampling_module.collect_rollout = recording


def _dump(trainer: Trainer, path: Path) -> None:
    """Full weights and AdamW moments (gathered from the shards) to ``path`` (rank 0)."""
    tensors = {}
    for name, parameter in trainer.learner.scorer.named_parameters():
        tensors[f"weights.{name}"] = distributed.full_tensor(parameter.detach()).clone()
        state = trainer.learner.optimizer.state.get(parameter, {})
        for key in ("exp_avg", "exp_avg_sq"):
            if key in state:
                tensors[f"{key}.{name}"] = distributed.full_tensor(state[key]).clone()
    if trainer.mirror is not None:  # what the engine samples from (refreshed each update)
        for name, parameter in trainer.mirror.model.named_parameters():
            tensors[f"mirror.{name}"] = parameter.detach().clone()
    if trainer.ranks.main:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))


def main() -> None:
    resolve_auto_as_float32()
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("algo")
    parser.add_argument("iterations", type=int)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--setup-only", action="store_true")
    parser.add_argument("--ray-address", default=None)
    parser.add_argument("--max-staleness", type=int, default=0)
    args = parser.parse_args()
    # generous: on a loaded machine one rank may wait minutes for the other at a collective
    ranks = distributed.init_from_environment(device="cpu", timeout_s=300)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    _record_rollouts(ranks, args.run_dir)
    config = scripted_config(args.algo, iterations=args.iterations, num_groups=NUM_GROUPS,
                             resume=args.resume, save_every=1,
                             max_staleness=args.max_staleness)
    # mini-batches smaller than the batch: several optimizer steps, moments that matter;
    # token-weighted micro-batches, so that 1 and 2 ranks update alike
    config = replace(config, learner={"mini_batch_size": 4, "micro_batch_size": 3,
                                      "micro_batch_weighting": "tokens"},
                     model={"lora_rank": 4 if args.lora else 0})
    if args.ray_address is not None:
        config = replace(config, env={"backend": "ray", "ray_address": args.ray_address,
                                      "num_workers": 1})
    torch.manual_seed(0)
    trainer = Trainer(config, policy=make_policy(seed=0, model_config=config.model),
                      run_dir=args.run_dir, ranks=ranks)
    try:
        if args.setup_only:
            trainer.setup()
        else:
            trainer.run()
        _dump(trainer, args.run_dir / "final.safetensors")
    finally:
        trainer.close()
        distributed.shutdown()


if __name__ == "__main__":
    run_worker(main)  # a torchrun worker ends without teardown (see there)
