"""Data-parallel training on ``torch.distributed``: ranks, FSDP2 sharding, global batches.

``torchrun --nproc-per-node N train.py ...`` starts N processes (ranks); each calls
:func:`init_from_environment`, which joins the process group (NCCL on GPUs, gloo on CPU)
with a timeout, so a rank that dies or hangs ends the job instead of blocking it.

The split of work (one iteration):

1. Rollout: rank ``r`` owns a contiguous block of the iteration's task groups
   (:func:`group_block`), with its own envs and its own generation engine; its groups'
   reset seeds are those a single process would give them, so every group starts on the
   same task whatever the world size. No group is ever split between ranks, so GRPO and
   GiGPO group and step-group statistics never cross ranks.
2. The ranks' batches are gathered (:func:`gather_batches`, a few MB of token ids): every
   rank then holds the same global batch, in the order one process would have collected
   it, and computes the same advantages and the same mini-batch order.
3. Scoring and update: sample ``i`` of each mini-batch is computed by rank
   ``i mod world_size`` (:func:`share`); every rank runs the same number of micro-batches
   (:func:`passes`; a rank with fewer samples runs zero-weight padding micro-batches,
   since FSDP2's collectives must match). Each micro-batch's loss is weighted by its
   share of the *global* mini-batch's response tokens, and multiplied by the world size
   because FSDP2 averages gradients over ranks (gloo has no pre-multiplied sum), so the
   summed gradient equals the one-process gradient of the whole mini-batch: the token
   mean, the KL and entropy terms and the critic loss are global. Scores are combined by
   an all-reduce (each row is filled by exactly one rank, the others add zeros).
4. The policy is sharded with FSDP2 (``fully_shard`` on each transformer block, then on
   the :class:`~algorithms.training.scoring.Scorer` that holds the policy and its value head, so
   that tied embeddings and the LM head live in one group). The generation engine does
   not sample from the sharded model: it holds a full copy (:class:`WeightMirror`), filled
   parameter by parameter from the shards once per iteration (``DTensor.full_tensor``).
   Memory: one full copy of the weights per rank besides the shards (on the training
   device for the HF engine, in host memory for vLLM, which keeps its own copy on its GPU).

Results do not depend on the world size beyond floating-point summation order (and the
sampled tokens, which depend on the batch composition an engine sees).
"""

from __future__ import annotations

import copy
import datetime
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from algorithms.runs.launch import launched_with_ranks


@dataclass(frozen=True)
class Ranks:
    """Where this process stands in the job.

    Attributes:
        rank: this process's global rank.
        world_size: number of processes.
        local_rank: rank on this machine (its GPU index).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0: the one that logs, writes metrics, records and checkpoint metadata."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


SINGLE = Ranks()
"""One process, no process group."""


class DistributedError(RuntimeError):
    """A launch that cannot work (more ranks than groups, a bad torchrun environment)."""


def init_from_environment(*, device: str, timeout_s: float) -> Ranks:
    """Join the process group torchrun describes (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); :data:`SINGLE` without one.

    Args:
        device: the run's ``run.device`` (``auto``/``cuda``: NCCL, one GPU per local rank;
            ``cpu``: gloo).
        timeout_s: how long a collective waits for the other ranks before it fails
            (``--run.dist-timeout``).

    Raises:
        DistributedError: torchrun's variables are incomplete, or a GPU run has fewer GPUs
            than local ranks.
    """
    if not launched_with_ranks():
        return SINGLE
    import torch.distributed as dist

    try:
        ranks = Ranks(rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                      local_rank=int(os.environ.get("LOCAL_RANK", "0")))
    except (KeyError, ValueError) as error:
        raise DistributedError(f"WORLD_SIZE > 1 but the launcher's variables are incomplete "
                               f"({error}); start the run with torchrun") from None
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        if torch.cuda.device_count() <= ranks.local_rank:
            raise DistributedError(
                f"local rank {ranks.local_rank} has no GPU ({torch.cuda.device_count()} "
                "visible); use --nproc-per-node <= the number of GPUs, or --run.device cpu")
        torch.cuda.set_device(ranks.local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo",
                                timeout=datetime.timedelta(seconds=timeout_s))
    return ranks


def shutdown() -> None:
    """Leave the process group (if any)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def training_device(ranks: Ranks, device: torch.device) -> torch.device:
    """The device of this rank: its own GPU (``cuda:<local_rank>``) or the CPU."""
    if device.type == "cuda" and ranks.distributed:
        return torch.device("cuda", ranks.local_rank)
    return device


# ---------------------------------------------------------------------- work split
def group_block(num_groups: int, ranks: Ranks) -> tuple[int, int]:
    """``(first, count)``: the contiguous block of the iteration's ``num_groups`` task
    groups that rank ``ranks.rank`` rolls out (the first ``num_groups % world_size``
    ranks get one more).

    Raises:
        DistributedError: fewer groups than ranks (a rank would have nothing to do).
    """
    if num_groups < ranks.world_size:
        raise DistributedError(
            f"env.num_groups={num_groups} is smaller than the world size "
            f"{ranks.world_size}: every rank needs at least one task group")
    base, extra = divmod(num_groups, ranks.world_size)
    first = ranks.rank * base + min(ranks.rank, extra)
    return first, base + (1 if ranks.rank < extra else 0)


def share(samples: np.ndarray, ranks: Ranks) -> np.ndarray:
    """This rank's samples of ``samples``: every ``world_size``-th, from ``rank``."""
    return samples[ranks.rank::ranks.world_size]


def passes(num_samples: int, micro_batch_size: int, ranks: Ranks) -> int:
    """Micro-batches every rank runs over ``num_samples`` shared by :func:`share`: those
    of the largest share (rank 0's)."""
    largest = -(-num_samples // ranks.world_size)
    return -(-largest // micro_batch_size)


# ---------------------------------------------------------------------- collectives
def all_gather_objects(value: Any, ranks: Ranks) -> list[Any]:
    """Every rank's ``value`` (picklable), in rank order; ``[value]`` on one process."""
    if not ranks.distributed:
        return [value]
    import torch.distributed as dist

    gathered: list[Any] = [None] * ranks.world_size
    dist.all_gather_object(gathered, value)
    return gathered


def any_rank(flag: bool, ranks: Ranks) -> bool:
    """Whether ``flag`` holds on any rank (a collective under torchrun)."""
    if not ranks.distributed:
        return flag
    return any(all_gather_objects(flag, ranks))


def all_reduce_sum(array: np.ndarray, ranks: Ranks) -> np.ndarray:
    """Element-wise sum of ``array`` over ranks (a new array; ``array`` on one process)."""
    if not ranks.distributed:
        return array
    import torch.distributed as dist

    tensor = torch.from_numpy(np.ascontiguousarray(array)).clone()
    if dist.get_backend() == "nccl":
        tensor = tensor.cuda()
    dist.all_reduce(tensor)
    return tensor.cpu().numpy()


def sum_stats(stats: dict[str, float], ranks: Ranks) -> dict[str, float]:
    """``stats`` summed over ranks (same keys, in the same order, on every rank)."""
    if not ranks.distributed or not stats:
        return stats
    keys = list(stats)
    total = all_reduce_sum(np.array([stats[k] for k in keys], dtype=np.float64), ranks)
    return dict(zip(keys, (float(v) for v in total), strict=True))


def barrier(ranks: Ranks) -> None:
    if ranks.distributed:
        import torch.distributed as dist

        dist.barrier()


def broadcast_object(value: Any, ranks: Ranks) -> Any:
    """Rank 0's ``value`` on every rank."""
    if not ranks.distributed:
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# ---------------------------------------------------------------------- sharding
def transformer_blocks(module: nn.Module) -> list[nn.Module]:
    """The repeated blocks of a transformer (the longest ``nn.ModuleList`` named
    ``layers``, ``h`` or ``blocks`` inside ``module``), the units FSDP2 shards one by one.

    Raises:
        DistributedError: no such list (an architecture this module does not know).
    """
    lists = [child for name, child in module.named_modules()
             if isinstance(child, nn.ModuleList) and name.rsplit(".", 1)[-1]
             in ("layers", "h", "blocks") and len(child)]
    if not lists:
        raise DistributedError(f"cannot find the transformer blocks of {type(module).__name__} "
                               "(an nn.ModuleList named layers, h or blocks)")
    return list(max(lists, key=len))


def fsdp_kwargs(device: torch.device) -> dict[str, Any]:
    """``fully_shard`` keyword arguments: on GPUs bfloat16 compute with float32 gradient
    reduction (mixed precision); on CPU (gloo) the weights' own dtype."""
    if device.type != "cuda":
        return {}
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                              reduce_dtype=torch.float32)}


def shard(root: nn.Module, *, device: torch.device, methods: tuple[str, ...] = ()) -> nn.Module:
    """Shard ``root`` in place with FSDP2 (after giving every rank rank 0's weights): each
    transformer block, then ``root`` (the rest: embeddings, final norm, LM head, heads);
    ``methods`` of ``root`` other than
    ``forward`` that run the model are registered so that FSDP2 gathers for them too."""
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    broadcast_module(root)
    kwargs = fsdp_kwargs(device)
    for block in transformer_blocks(root):
        fully_shard(block, **kwargs)
    fully_shard(root, **kwargs)
    for method in methods:
        register_fsdp_forward_method(root, method)
    return root


@torch.no_grad()
def broadcast_module(module: nn.Module) -> None:
    """Give every rank rank 0's parameters and buffers (FSDP2 shards what each rank holds,
    so randomly initialised parts, e.g. LoRA adapters, must agree before sharding)."""
    import torch.distributed as dist

    for tensor in [*module.parameters(), *module.buffers()]:
        dist.broadcast(tensor.data, src=0)


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a sharded ``DTensor`` (a collective: every rank calls it, in
    the same order); a plain tensor as it is."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


class WeightMirror:
    """A full, unsharded copy of the policy that a generation engine samples from.

    Built from the policy *before* it is sharded; :meth:`refresh` copies the sharded
    weights into it one parameter at a time (peak extra memory: one full parameter).

    Args:
        model: the policy model, not yet sharded.
        device: where the copy lives (the HF engine: the training device; vLLM: ``cpu``).
        dtype: the copy's dtype (``None``: the model's).
    """

    def __init__(self, model: nn.Module, device: torch.device,
                 dtype: torch.dtype | None = None):
        self.model = copy.deepcopy(model).to(device=device, dtype=dtype)
        self.model.requires_grad_(False)
        self._parameters = dict(self.model.named_parameters())

    @torch.no_grad()
    def refresh(self, sharded: nn.Module) -> None:
        """Copy every parameter of ``sharded`` (same names) into the mirror."""
        for name, parameter in sharded.named_parameters():
            target = self._parameters.get(name)
            if target is None:
                raise KeyError(f"the mirror has no parameter {name!r}")
            target.copy_(full_tensor(parameter.detach()).to(target.device, target.dtype))


def global_norm(norm: torch.Tensor) -> float:
    """A gradient norm from ``clip_grad_norm_`` over sharded parameters, as a float."""
    return float(full_tensor(norm))
