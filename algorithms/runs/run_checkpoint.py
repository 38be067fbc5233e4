"""A training run's checkpoints: the learner's state written after an iteration, and read
back to resume or evaluate.

The file format, the atomic commit and the sharded (DCP) layout are
:mod:`algorithms.runs.checkpoint`'s; this module decides what of the learner goes in (weights,
optimizer state unless ``run.save_optimizer`` is off, the config, the metrics, the model
identity), says what was written in one line for the user, and converts the learner's
state: full tensors (:func:`learner_state`, one process) or DCP state dicts
(:func:`sharded_learner_state`, FSDP2 shards under torchrun); either loads into a learner
on any number of ranks.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from algorithms.runs.checkpoint import (
    WEIGHT_SECTIONS,
    CheckpointError,
    check_model_identity,
    checkpoint_meta,
    checkpoint_size,
    is_sharded,
    load_checkpoint,
    load_sharded_checkpoint,
    resolve_checkpoint,
    restore_rng_states,
    save_checkpoint,
    save_sharded_checkpoint,
)
from algorithms.config import TrainConfig
from algorithms.runs.distributed import Ranks


def megabytes(size: int) -> str:
    """``size`` bytes as ``"12.3 MB"``."""
    return f"{size / 1e6:.1f} MB"


def save_run_checkpoint(learner: Any, config: TrainConfig, run_dir: Path, iteration: int,
                        metrics: dict[str, float], ranks: Ranks,
                        state: dict[str, Any] | None = None) -> tuple[Path, str]:
    """Write an atomic checkpoint after ``iteration`` completed iterations.

    Metrics without a value (NaN: say success when every episode crashed) are stored as
    ``null``, so that ``meta.json`` stays valid JSON. Under torchrun every rank takes part
    (sharded checkpoint).

    Args:
        state: the learner state to write (:func:`learner_state_copy` taken earlier; one
            process only); by default :func:`learner_state` now.

    Returns:
        The checkpoint folder and the line that tells the user what it holds.
    """
    finite = {key: value if not isinstance(value, float) or math.isfinite(value) else None
              for key, value in metrics.items()}
    score = finite.get("eval/success")
    # every rank computes the identity (its hash gathers sharded weights: a collective)
    meta = {"config": config.to_dict(), "metrics": finite, "model": learner.model_identity}
    keep = config.run.keep_checkpoints
    if ranks.distributed:
        state = sharded_learner_state(learner, optimizer=config.run.save_optimizer)
        path = save_sharded_checkpoint(run_dir, iteration, state["weights"],
                                       state["optimizer"], meta, ranks=ranks, keep=keep,
                                       score=score)
        if not ranks.main:
            return path, ""
        sizes = json.loads((path / "meta.json").read_text(encoding="utf-8"))["sizes"]
        optimizer = sum(v for k, v in sizes.items() if "/optimizer/" in k)
        return path, (f"checkpoint {path}: {megabytes(checkpoint_size(path))} (sharded by "
                      f"{ranks.world_size} ranks; optimizer state {megabytes(optimizer)})")
    if state is None:
        state = learner_state(learner)
    if not config.run.save_optimizer:
        state = {key: value for key, value in state.items() if key in WEIGHT_SECTIONS}
    path = save_checkpoint(run_dir, iteration, state, meta, keep=keep, score=score)
    meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    sizes = meta["sizes"]
    optimizer = sizes.get("optimizer.safetensors", 0)
    kept = ("kept in the newest checkpoint only" if optimizer else
            "not saved: --run.no-save-optimizer")
    weights = "LoRA adapter weights" if learner.policy.lora else "weights"
    return path, (f"checkpoint {path}: {megabytes(checkpoint_size(path))} "
                  f"({weights} {megabytes(sizes['weights.safetensors'])} in "
                  f"{'/'.join(meta['weights_dtype'])}, optimizer state "
                  f"{megabytes(optimizer)}, {kept})")


def restore_run_checkpoint(learner: Any, checkpoint: Path, *, device: Any,
                           optimizer: bool) -> dict[str, Any]:
    """Load ``checkpoint`` (either format, saved by any number of ranks) into ``learner``,
    with the optimizer state when ``optimizer``, and restore the RNG states it saved.

    Returns:
        The checkpoint's payload: ``iteration``, ``meta``, ``path``.

    Raises:
        CheckpointError: the checkpoint belongs to another model, or its tensors do not
            fit this one.
    """
    folder = resolve_checkpoint(checkpoint)
    # before any tensor is read: adapters on another base model, or other adapters
    check_model_identity(folder, checkpoint_meta(folder).get("model"), learner.model_identity)
    sharded = is_sharded(folder)
    if sharded:
        payload = load_sharded_checkpoint(folder, sharded_learner_state(learner, optimizer=optimizer),
                                          optimizer=optimizer)
    else:
        payload = load_checkpoint(folder, map_location=device, optimizer=optimizer)
    try:
        if sharded:
            load_sharded_learner_state(learner, payload["learner"])
        else:
            load_learner_state(learner, payload["learner"])
    except (ValueError, RuntimeError) as error:  # names or shapes that do not fit
        raise CheckpointError(f"{folder} does not fit this run's model: {error}") from None
    if payload["rng"] is not None:
        restore_rng_states(payload["rng"])
    return payload


def restored_message(payload: dict[str, Any], run_dir: Path, *, resume: bool,
                     world_size: int) -> str:
    """What a run says after :func:`restore_run_checkpoint` returned ``payload``: resumed
    (or evaluating) at which iteration from which checkpoint, and by how many ranks it
    was saved when that is not ``world_size``."""
    verb = "resumed" if resume else "evaluating"
    saved = payload["meta"].get("world_size", 1)
    return (f"{verb} {run_dir} at iteration {int(payload['iteration'])} from checkpoint "
            f"{payload['path']}" + (f" (saved by {saved} ranks)" if saved != world_size else ""))


# ------------------------------------------------------------------ the learner's state
def learner_state(learner: Any) -> dict[str, Any]:
    """Everything training changes (for checkpoints): the weights that require a
    gradient (with LoRA only the adapters, never the frozen base), the value head or
    critic, and the optimizer states (which hold moments of those weights only)."""
    state: dict[str, Any] = {
        "model": {name: p.detach().cpu() for name, p in learner.model.named_parameters()
                  if p.requires_grad},
        "optimizer": learner.optimizer.state_dict(),
    }
    if learner.value_head is not None:
        state["value_head"] = learner.value_head.state_dict()
    if learner.critic is not None:
        state["critic"] = learner.critic.state_dict()
        state["critic_optimizer"] = learner.critic_optimizer.state_dict()
    return state


def learner_state_copy(learner: Any) -> dict[str, Any]:
    """:func:`learner_state` as a copy that later optimizer steps leave as it is (tensors
    cloned, optimizer states deep-copied): the state to fall back to when a SIGTERM cuts
    an update (:mod:`algorithms.runs.termination`). One process only."""
    return copy.deepcopy(learner_state(learner))


def load_learner_state(learner: Any, state: dict[str, Any]) -> None:
    """Inverse of :func:`learner_state`; optimizer states absent from ``state``
    (a checkpoint loaded for evaluation only) are left as they are. A sharded learner
    (torchrun) takes its shards of the full tensors: a one-process checkpoint resumes
    on any number of ranks."""
    trainable = {n for n, p in learner.model.named_parameters() if p.requires_grad}
    unknown = set(state["model"]) - {n for n, _ in learner.model.named_parameters()}
    if unknown:
        raise ValueError(f"checkpoint has unknown weights: {sorted(unknown)[:5]}")
    missing = trainable - set(state["model"])
    if missing:
        raise ValueError(f"checkpoint has no trained weights for: {sorted(missing)[:5]}")
    if learner.ranks.distributed:
        _load_full_learner_state(learner, state)
        return
    learner.model.load_state_dict(state["model"], strict=False)
    if "optimizer" in state:
        learner.optimizer.load_state_dict(state["optimizer"])
    if learner.value_head is not None:
        learner.value_head.load_state_dict(state["value_head"])
    if learner.critic is not None:
        learner.critic.load_state_dict(state["critic"])
        if "critic_optimizer" in state:
            learner.critic_optimizer.load_state_dict(state["critic_optimizer"])


def _optimizer_targets(learner: Any) -> list[tuple[Any, Any, list[str], str, str]]:
    """``(module, optimizer, parameter names in optimizer order, weights key,
    optimizer key)`` of each trained module; names relative to ``module``."""
    names = [f"model.{n}" for n, p in learner.model.named_parameters() if p.requires_grad]
    if learner.value_head is not None:
        names += [f"value_head.{n}" for n, _ in learner.value_head.named_parameters()]
    targets = [(learner.scorer, learner.optimizer, names, "scorer", "optimizer")]
    if learner.critic is not None:
        targets.append((learner.critic, learner.critic_optimizer,
                        [n for n, _ in learner.critic.named_parameters()], "critic",
                        "critic_optimizer"))
    return targets


def _load_full_learner_state(learner: Any, state: dict[str, Any]) -> None:
    """:func:`load_learner_state` into sharded modules (full tensors in ``state``)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    full = StateDictOptions(full_state_dict=True, strict=False)
    weights = {f"model.{k}": v for k, v in state["model"].items()}
    if learner.value_head is not None:
        weights.update({f"value_head.{k}": v for k, v in state["value_head"].items()})
    sections = {"scorer": weights}
    if learner.critic is not None:
        sections["critic"] = state["critic"]
    for module, optimizer, names, weights_key, optimizer_key in _optimizer_targets(learner):
        set_model_state_dict(module, sections[weights_key], options=full)
        saved = state.get(optimizer_key)
        if saved is not None:  # index-keyed (torch's format) -> parameter names
            by_name = {
                "state": {names[int(i)]: value for i, value in saved["state"].items()},
                "param_groups": [{**group, "params": [names[int(i)] for i in
                                                      group["params"]]}
                                 for group in saved["param_groups"]]}
            set_optimizer_state_dict(module, optimizer, by_name, options=full)


def sharded_learner_state(learner: Any, *, optimizer: bool = True) -> dict[str, Any]:
    """DCP state dicts of what training changes: ``{"weights": {"scorer": ...,
    "critic": ...}, "optimizer": {...} or None}`` (sharded tensors under torchrun,
    plain ones in one process; only trained weights, so LoRA saves its adapters)."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    weights: dict[str, Any] = {}
    optimizers: dict[str, Any] = {}
    for module, optim, names, weights_key, optimizer_key in _optimizer_targets(learner):
        trained = set(names)
        weights[weights_key] = {k: v for k, v in get_model_state_dict(module).items()
                                if k in trained}
        if optimizer:
            optimizers[optimizer_key] = get_optimizer_state_dict(module, optim)
    return {"weights": weights, "optimizer": optimizers if optimizer else None}


def load_sharded_learner_state(learner: Any, state: dict[str, Any]) -> None:
    """Inverse of :func:`sharded_learner_state` (a state it returned, filled by DCP)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    partial = StateDictOptions(strict=False)
    for module, optim, _, weights_key, optimizer_key in _optimizer_targets(learner):
        set_model_state_dict(module, state["weights"][weights_key], options=partial)
        if state.get("optimizer") is not None:
            set_optimizer_state_dict(module, optim, state["optimizer"][optimizer_key],
                                     options=partial)
