"""How many weights a model has, and how large a run's checkpoints will be, read from the
headers of its weight files without loading it (``train.py --dry-run``).

A safetensors file starts with an 8-byte little-endian length and a JSON header naming
each tensor's shape; a GGUF file lists its tensors' names and dimensions after its
key-value metadata. Neither read touches the weights themselves: a 7B model's headers are
a few hundred kB.

Checkpoint sizes follow :mod:`algorithms.runs.checkpoint`: a checkpoint holds the trained
weights only (LoRA: the adapters), in float32 under the default mixed precision (2 bytes
with ``--model.dtype float16``), and the newest one also the AdamW moments, two tensors
per trained weight (12 bytes a weight in float32: measured 16.6 GB for Qwen2.5-1.5B's
1.386 B weights, docs/gpu.md).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from algorithms.config import TrainConfig

Shapes = dict[str, tuple[int, ...]]
"""Tensor name -> shape."""

VISION_TOWER_PART = "visual"
"""The name part of a vision-language model's vision tower (Qwen2-VL, Qwen2.5-VL,
Qwen3-VL: ``visual.blocks...``), whose weights LoRA leaves alone."""

GGUF_MODULES: dict[str, str] = {
    "attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_output": "o_proj",
    "ffn_gate": "gate_proj", "ffn_up": "up_proj", "ffn_down": "down_proj"}
"""GGUF's tensor names for the Llama/Qwen linear layers, as transformers names them."""

_GGUF_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
"""GGUF metadata value types -> bytes (8: string, 9: array are read apart)."""


class WeightFileError(ValueError):
    """A weight file whose header cannot be read."""


def safetensors_shapes(path: Path) -> Shapes:
    """The tensor shapes in one ``.safetensors`` file's header."""
    with open(path, "rb") as file:
        head = file.read(8)
        if len(head) != 8:
            raise WeightFileError(f"{path}: too short for a safetensors file")
        (length,) = struct.unpack("<Q", head)
        if length > 100 << 20:
            raise WeightFileError(f"{path}: a {length}-byte header is not safetensors")
        try:
            header = json.loads(file.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise WeightFileError(f"{path}: unreadable safetensors header ({error})") from None
    return {name: tuple(int(d) for d in entry["shape"]) for name, entry in header.items()
            if name != "__metadata__"}


def gguf_shapes(path: Path) -> Shapes:
    """The tensor shapes (GGUF's dimension order) listed in a ``.gguf`` file, read past
    its metadata without decoding it."""
    with open(path, "rb") as file:
        def take(fmt: str) -> tuple:
            size = struct.calcsize(fmt)
            data = file.read(size)
            if len(data) != size:
                raise WeightFileError(f"{path}: the GGUF header ends early")
            return struct.unpack(fmt, data)

        def skip_string() -> None:
            (length,) = take("<Q")
            file.seek(length, 1)

        def skip_value(kind: int) -> None:
            if kind == 8:
                skip_string()
            elif kind == 9:
                item, count = take("<IQ")
                if item in _GGUF_SCALARS:
                    file.seek(_GGUF_SCALARS[item] * count, 1)
                else:
                    for _ in range(count):
                        skip_value(item)
            elif kind in _GGUF_SCALARS:
                file.seek(_GGUF_SCALARS[kind], 1)
            else:
                raise WeightFileError(f"{path}: unknown GGUF value type {kind}")

        magic, version = take("<4sI")
        if magic != b"GGUF" or version < 2:
            raise WeightFileError(f"{path}: not a GGUF file of version 2 or later")
        tensors, entries = take("<QQ")
        for _ in range(entries):
            skip_string()
            skip_value(take("<I")[0])
        shapes: Shapes = {}
        for _ in range(tensors):
            (length,) = take("<Q")
            name = file.read(length).decode("utf-8")
            (dims,) = take("<I")
            shapes[name] = tuple(int(d) for d in take(f"<{dims}Q"))
            take("<IQ")  # the tensor type and data offset
    return shapes


def folder_shapes(folder: Path) -> Shapes | None:
    """The tensor shapes of an HF model folder's safetensors weights (sharded or not), or
    ``None`` when it holds none (a folder of ``.bin`` weights, or an incomplete download).
    """
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        files = sorted({folder / name for name in weight_map.values()})
    else:
        files = sorted(folder.glob("*.safetensors"))
    if not files or not all(path.is_file() for path in files):
        return None
    shapes: Shapes = {}
    for path in files:
        shapes.update(safetensors_shapes(path))
    return shapes


def count(shapes: Iterable[tuple[int, ...]]) -> int:
    """The number of weights in tensors of these shapes."""
    total = 0
    for shape in shapes:
        size = 1
        for dimension in shape:
            size *= dimension
        total += size
    return total


def in_vision_tower(name: str) -> bool:
    """Whether the tensor ``name`` belongs to a vision-language model's vision tower."""
    return VISION_TOWER_PART in name.split(".")


def module_name(name: str) -> str:
    """The linear layer a weight tensor belongs to, as transformers names it:
    ``model.layers.0.self_attn.q_proj.weight`` -> ``q_proj``, GGUF's
    ``blk.0.attn_q.weight`` -> ``q_proj``."""
    parts = name.split(".")
    owner = parts[-2] if len(parts) >= 2 else name
    return GGUF_MODULES.get(owner, owner)


def lora_weights(shapes: Shapes, rank: int, targets: Iterable[str]) -> int:
    """LoRA's trained weights over these tensors: ``rank * (in + out)`` per adapted
    linear layer (its ``A`` and ``B``), on the layers named ``targets`` outside a vision
    tower (LoRA adapts a vision-language model's language model only)."""
    wanted = set(targets)
    return sum(rank * sum(shape) for name, shape in shapes.items()
               if name.endswith(".weight") and len(shape) == 2 and not in_vision_tower(name)
               and module_name(name) in wanted)


def trained_weights(shapes: Shapes, config: TrainConfig) -> int:
    """The weights a run trains: LoRA's adapters, or every weight (a vision tower's only
    with ``model.train_vision_tower``)."""
    model = config.model
    if model.lora_rank > 0:
        return lora_weights(shapes, model.lora_rank, model.lora_target_modules)
    return count(shape for name, shape in shapes.items()
                 if model.train_vision_tower or not in_vision_tower(name))


@dataclass(frozen=True)
class CheckpointSizes:
    """What a run's checkpoints take on disk, in bytes.

    Attributes:
        weights: one checkpoint's trained weights (an older checkpoint, the best one).
        newest: the newest checkpoint: weights and, unless ``--run.no-save-optimizer``,
            the optimizer state.
        peak: the most on disk at once: while the next checkpoint is written, the newest,
            the ``run.keep_checkpoints - 1`` older ones, the best one (when the run
            evaluates) and the one being written; plus the SFT stage's last checkpoint
            when the run starts with one.
    """

    weights: int
    newest: int
    peak: int


def checkpoint_sizes(trained: int, config: TrainConfig) -> CheckpointSizes:
    """The sizes of a run's checkpoints that trains ``trained`` weights (a PPO critic of
    its own, ``model.critic separate``, counted as a second copy of them)."""
    if config.algo == "ppo" and config.model.critic == "separate":
        trained *= 2
    weights = trained * (2 if config.model.dtype == "float16" else 4)
    newest = weights * (3 if config.run.save_optimizer else 1)
    best = weights if config.run.eval_every > 0 else 0
    stage = newest if config.sft_stage_first else 0
    peak = 2 * newest + (config.run.keep_checkpoints - 1) * weights + best + stage
    return CheckpointSizes(weights=weights, newest=newest, peak=peak)


def size_text(size: int) -> str:
    """``size`` bytes for people: ``"18.5 GB"``, ``"59 MB"``."""
    if size >= 10**9:
        return f"{size / 10**9:.1f} GB"
    return f"{max(size / 10**6, 0.1):.3g} MB"
