"""A training run's checkpoints: the learner's state written after an iteration, and read
back to resume or evaluate.

The file format, the atomic commit and the sharded (DCP) layout are
:mod:`algorithms.checkpoint`'s; this module decides what of the learner goes in (weights,
optimizer state unless ``run.save_optimizer`` is off, the config, the metrics, the model
identity), and says what was written in one line for the user.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from algorithms.checkpoint import (
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
from algorithms.distributed import Ranks


def megabytes(size: int) -> str:
    """``size`` bytes as ``"12.3 MB"``."""
    return f"{size / 1e6:.1f} MB"


def save_run_checkpoint(learner: Any, config: TrainConfig, run_dir: Path, iteration: int,
                        metrics: dict[str, float], ranks: Ranks) -> tuple[Path, str]:
    """Write an atomic checkpoint after ``iteration`` completed iterations.

    Metrics without a value (NaN: say success when every episode crashed) are stored as
    ``null``, so that ``meta.json`` stays valid JSON. Under torchrun every rank takes part
    (sharded checkpoint).

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
        state = learner.sharded_state(optimizer=config.run.save_optimizer)
        path = save_sharded_checkpoint(run_dir, iteration, state["weights"],
                                       state["optimizer"], meta, ranks=ranks, keep=keep,
                                       score=score)
        if not ranks.main:
            return path, ""
        sizes = json.loads((path / "meta.json").read_text(encoding="utf-8"))["sizes"]
        optimizer = sum(v for k, v in sizes.items() if "/optimizer/" in k)
        return path, (f"checkpoint {path}: {megabytes(checkpoint_size(path))} (sharded by "
                      f"{ranks.world_size} ranks; optimizer state {megabytes(optimizer)})")
    state = learner.trainable_state()
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
        payload = load_sharded_checkpoint(folder, learner.sharded_state(optimizer=optimizer),
                                          optimizer=optimizer)
    else:
        payload = load_checkpoint(folder, map_location=device, optimizer=optimizer)
    try:
        if sharded:
            learner.load_sharded_state(payload["learner"])
        else:
            learner.load_trainable_state(payload["learner"])
    except (ValueError, RuntimeError) as error:  # names or shapes that do not fit
        raise CheckpointError(f"{folder} does not fit this run's model: {error}") from None
    if payload["rng"] is not None:
        restore_rng_states(payload["rng"])
    return payload
