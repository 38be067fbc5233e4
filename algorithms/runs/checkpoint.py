"""Atomic checkpoints that load without running code: safetensors weights, JSON for the rest.

Layout under a run folder::

    checkpoints/iter_000010/weights.safetensors    trained weights, in the model's dtype
    checkpoints/iter_000010/optimizer.safetensors  optimizer tensors (newest checkpoint only)
    checkpoints/iter_000010/optimizer.json         optimizer structure and scalars
    checkpoints/iter_000010/rng.safetensors        torch's global RNG states
    checkpoints/iter_000010/meta.json              iteration, config, metrics, file sizes,
                                                   and the model identity (below)
    checkpoints/latest                             name of the newest complete checkpoint
    checkpoints/best                               the best one by evaluation success (JSON)

Loading never unpickles: tensors come from safetensors files (a flat name -> tensor
table, no code) and everything else from JSON, so a checkpoint from elsewhere cannot run
anything. Folders written by an older version (``state.pt``, a pickle) are refused.

Only trained weights are stored (:func:`algorithms.runs.run_checkpoint.learner_state`): with LoRA, the adapters
(and their optimizer state), not the base model they sit on. Such weights are right only
on the same base model with the same adapter settings, so ``meta.json`` keeps the
model's identity (:func:`algorithms.training.policy.model_identity`: a SHA-256 of the frozen
weights the checkpoint relies on, the LoRA rank, alpha and adapted modules) and
:func:`check_model_identity` refuses to load the checkpoint into any other model, with
the flags that would fit it.

Retention: the newest ``keep`` checkpoints, plus the one with the highest
``eval/success`` when evaluation ran at a saved iteration. Only the newest keeps its
optimizer state, the one thing ``--resume`` needs beyond the weights and by far the
largest part (AdamW keeps two tensors per weight); older checkpoints are stripped to
weights, RNG states and metadata once a newer one is complete.

Sharded checkpoints (a ``torchrun`` job, :mod:`algorithms.runs.distributed`): every rank
writes its shards with ``torch.distributed.checkpoint`` (DCP)::

    checkpoints/iter_000010/sharded/weights/     trained weights (DCP: __<rank>_0.distcp)
    checkpoints/iter_000010/sharded/optimizer/   optimizer state (newest checkpoint only)
    checkpoints/iter_000010/rng.safetensors, meta.json   as above (``meta["format"]``)

DCP reshards on load, so a checkpoint saved by N ranks resumes on M ranks, one process
included (DCP reads without a process group). DCP stores its index (``.metadata``) as a
pickle; it is read here with an unpickler that only rebuilds DCP's own metadata classes
and a few torch/builtin types (:class:`SafeDCPReader`), so a crafted file still cannot
run code. The tensor shards themselves are read with ``torch.load(weights_only=True)``.

Atomicity: a checkpoint is written into a temporary folder; every file is fsynced, then
the folder, then it is renamed into place and the parent folder is fsynced; ``latest``
and ``best`` are replaced the same way. A crash at any moment leaves the previous
checkpoint complete and pointed to. Task order and sampling seeds are functions of
``(seed, iteration)``, so the iteration number *is* the data-order state; torch's global
RNG states are saved and restored for anything outside the seeded generators.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from algorithms.runs.atomic import fsync_path, write_atomic

LATEST = "latest"
BEST = "best"
WEIGHTS_FILE = "weights.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
OPTIMIZER_META_FILE = "optimizer.json"
RNG_FILE = "rng.safetensors"
META_FILE = "meta.json"
LEGACY_FILE = "state.pt"
SHARDED_DIR = "sharded"
"""Folder of a sharded (DCP) checkpoint's ``weights`` and ``optimizer`` sub-folders."""
WEIGHT_SECTIONS = ("model", "value_head", "critic")
"""Keys of a learner state whose values are ``name -> tensor`` weight tables."""


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, incomplete or in a format this version refuses."""


def checkpoint_dir(run_dir: Path) -> Path:
    """The run's checkpoint folder."""
    return Path(run_dir) / "checkpoints"


# ---------------------------------------------------------------------- nested state <-> files
def flatten_state(value: Any, prefix: str, tensors: dict[str, torch.Tensor]) -> Any:
    """A JSON skeleton of ``value`` with every tensor moved into ``tensors``.

    Tensors become ``{"__tensor__": name}``; dicts whose keys are not all strings (an
    optimizer's ``state`` is keyed by parameter index) become ``{"__items__": [[k, v],
    ...]}`` so that their keys come back with their types.

    Args:
        value: nested dicts / lists / tuples of tensors and JSON scalars.
        prefix: name prefix of the tensors found inside ``value``.
        tensors: filled with ``name -> contiguous CPU tensor``.
    """
    if isinstance(value, torch.Tensor):
        tensors[prefix] = value.detach().cpu().contiguous()
        return {"__tensor__": prefix}
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            return {key: flatten_state(item, f"{prefix}.{key}", tensors)
                    for key, item in value.items()}
        return {"__items__": [[key, flatten_state(item, f"{prefix}.{key}", tensors)]
                              for key, item in value.items()]}
    if isinstance(value, (list, tuple)):
        return [flatten_state(item, f"{prefix}.{i}", tensors) for i, item in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot store {type(value).__name__} at {prefix} in a checkpoint")


def unflatten_state(skeleton: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`flatten_state` (lists stay lists; torch accepts them)."""
    if isinstance(skeleton, dict):
        if set(skeleton) == {"__tensor__"}:
            return tensors[skeleton["__tensor__"]]
        if set(skeleton) == {"__items__"}:
            return {key: unflatten_state(item, tensors) for key, item in skeleton["__items__"]}
        return {key: unflatten_state(item, tensors) for key, item in skeleton.items()}
    if isinstance(skeleton, list):
        return [unflatten_state(item, tensors) for item in skeleton]
    return skeleton


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write a safetensors file (fsynced with the rest of the folder by :func:`_commit`)."""
    save_file(tensors, str(path))


def _load_tensors(path: Path, device: str | torch.device) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path), device=str(device))
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path} is not a readable safetensors file: {error}") from None


# ---------------------------------------------------------------------- RNG
def rng_states() -> dict[str, torch.Tensor]:
    """torch's CPU and CUDA global RNG states (uint8 tensors)."""
    states = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for index, state in enumerate(torch.cuda.get_rng_state_all()):
            states[f"cuda.{index}"] = state
    return states


def restore_rng_states(states: dict[str, torch.Tensor]) -> None:
    """Inverse of :func:`rng_states` (CUDA states only where CUDA is available)."""
    torch.set_rng_state(states["torch"].cpu())
    cuda = [states[key].cpu() for key in sorted(states, key=_cuda_index) if key != "torch"]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[: torch.cuda.device_count()])


def _cuda_index(key: str) -> int:
    return int(key.split(".")[1]) if key.startswith("cuda.") else -1


# ---------------------------------------------------------------------- save
def save_checkpoint(run_dir: Path, iteration: int, state: dict[str, Any],
                    meta: dict[str, Any], *, keep: int = 2,
                    score: float | None = None) -> Path:
    """Write checkpoint ``iteration`` atomically, then apply the retention rule.

    Args:
        run_dir: the run folder.
        iteration: number of completed iterations.
        state: the learner's trainable state: weight tables under ``model``,
            ``value_head``, ``critic`` (saved as they are, in their dtype) and optimizer
            state dicts under any other key (none: a weights-only checkpoint).
        meta: JSON-able data (config, metrics) stored beside it.
        keep: newest checkpoints to keep (>= 1).
        score: this checkpoint's evaluation success, if evaluated; the highest one is
            kept as ``best`` besides the newest ``keep``.

    Returns:
        The checkpoint folder; its ``meta.json`` has ``sizes`` (bytes per file).
    """
    tmp = _temporary_folder(run_dir, iteration)
    weights: dict[str, torch.Tensor] = {}
    optimizer: dict[str, torch.Tensor] = {}
    optimizer_skeleton: dict[str, Any] = {}
    for key, value in state.items():
        if key in WEIGHT_SECTIONS:
            for weight_name, tensor in value.items():
                weights[f"{key}.{weight_name}"] = tensor.detach().cpu().contiguous()
        else:
            optimizer_skeleton[key] = flatten_state(value, key, optimizer)
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in weights.values()})
    _save_tensors(weights, tmp / WEIGHTS_FILE)
    if optimizer_skeleton:
        _save_tensors(optimizer, tmp / OPTIMIZER_FILE)
        write_atomic(tmp / OPTIMIZER_META_FILE, json.dumps(optimizer_skeleton))
    return _commit(run_dir, tmp, iteration, {"weights_dtype": dtypes, **meta}, keep=keep,
                   score=score)


def _temporary_folder(run_dir: Path, iteration: int) -> Path:
    """An empty ``checkpoints/.tmp-iter_XXXXXX`` to write checkpoint ``iteration`` into."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-iter_{iteration:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def _commit(run_dir: Path, tmp: Path, iteration: int, meta: dict[str, Any], *, keep: int,
            score: float | None) -> Path:
    """Finish the checkpoint written into ``tmp``: RNG states, ``meta.json`` (with the
    file sizes), fsync, rename into place, point ``latest`` (and ``best``) at it, prune."""
    root = checkpoint_dir(run_dir)
    name = f"iter_{iteration:06d}"
    final = root / name
    _save_tensors(rng_states(), tmp / RNG_FILE)
    # every file and folder once (DCP shards included); meta.json's write syncs tmp last
    for folder, _, files in os.walk(tmp):
        for file in files:
            fsync_path(Path(folder) / file)
        fsync_path(Path(folder))
    sizes = {str(p.relative_to(tmp)): p.stat().st_size for p in tmp.rglob("*") if p.is_file()}
    write_atomic(tmp / META_FILE, json.dumps(
        {"iteration": iteration, "score": score, "sizes": sizes, **meta}, indent=2,
        default=str))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_path(root)
    write_atomic(root / LATEST, name)
    if score is not None:
        best = best_checkpoint(run_dir)
        if best is None or score > best[1]:
            write_atomic(root / BEST, json.dumps({"name": name, "score": score}))
    _prune(root, name, keep)
    return final


def save_sharded_checkpoint(run_dir: Path, iteration: int, weights: dict[str, Any],
                            optimizer: dict[str, Any] | None, meta: dict[str, Any], *,
                            ranks: Any, keep: int = 2, score: float | None = None) -> Path:
    """Write checkpoint ``iteration`` of a torchrun job, every rank its shards (DCP).

    Called by every rank (it synchronises them). Rank 0 prepares the temporary folder,
    and, once every rank's shards are written, commits the checkpoint as
    :func:`save_checkpoint` does (RNG states, ``meta.json``, fsync, rename, ``latest``,
    retention); a job killed before that leaves the previous checkpoint in place.

    Args:
        run_dir: the run folder (shared by the ranks: one filesystem).
        iteration: number of completed iterations.
        weights: DCP state dict of the trained weights (sharded tensors).
        optimizer: DCP state dict of the optimizer states, or ``None`` (weights only).
        meta: JSON-able data (config, metrics) stored beside it.
        ranks: the job's :class:`~algorithms.runs.distributed.Ranks`.
        keep, score: as in :func:`save_checkpoint`.

    Returns:
        The checkpoint folder (on every rank).
    """
    import torch.distributed.checkpoint as dcp

    from algorithms.runs import distributed

    tmp = checkpoint_dir(run_dir) / f".tmp-iter_{iteration:06d}"
    if ranks.main:
        _temporary_folder(run_dir, iteration)
    distributed.barrier(ranks)
    dcp.save(weights, storage_writer=dcp.FileSystemWriter(str(tmp / SHARDED_DIR / "weights")))
    if optimizer is not None:
        dcp.save(optimizer,
                 storage_writer=dcp.FileSystemWriter(str(tmp / SHARDED_DIR / "optimizer")))
    distributed.barrier(ranks)
    final = checkpoint_dir(run_dir) / f"iter_{iteration:06d}"
    if ranks.main:
        final = _commit(run_dir, tmp, iteration,
                        {"format": "dcp", "world_size": ranks.world_size, **meta}, keep=keep,
                        score=score)
    distributed.barrier(ranks)
    return final


def _prune(root: Path, newest: str, keep: int) -> None:
    """Delete checkpoints outside the newest ``keep`` and ``best``; strip the optimizer
    state of all but ``newest``."""
    best = best_checkpoint(root.parent)
    existing = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("iter_"))
    kept = {p.name for p in existing[-max(1, keep):]} | ({best[0].name} if best else set())
    for folder in existing:
        if folder.name not in kept:
            shutil.rmtree(folder)
        elif folder.name != newest:
            for file in (OPTIMIZER_FILE, OPTIMIZER_META_FILE):
                (folder / file).unlink(missing_ok=True)
            shutil.rmtree(folder / SHARDED_DIR / "optimizer", ignore_errors=True)


def checkpoint_size(path: Path) -> int:
    """Bytes of the files in a checkpoint folder (its sub-folders included)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


# ---------------------------------------------------------------------- model identity
def _describe_lora(lora: dict[str, Any] | None) -> str:
    if lora is None:
        return "no LoRA (all weights trained)"
    return (f"LoRA rank {lora['rank']}, alpha {lora['alpha']} on "
            f"{', '.join(lora['target_modules'])}")


def _lora_flags(lora: dict[str, Any] | None) -> str:
    if lora is None:
        return "--model.lora-rank 0"
    return (f"--model.lora-rank {lora['rank']} --model.lora-alpha {lora['alpha']} "
            f"--model.lora-target-modules {' '.join(lora['target_modules'])}")


def checkpoint_meta(path: Path) -> dict[str, Any]:
    """The ``meta.json`` of a checkpoint folder (or a run folder's newest checkpoint),
    read without loading any tensor.

    Raises:
        CheckpointError: no (complete) checkpoint there, or a refused format.
    """
    return json.loads((resolve_checkpoint(Path(path)) / META_FILE).read_text(encoding="utf-8"))


def check_model_identity(path: Path, saved: dict[str, Any] | None,
                         current: dict[str, Any]) -> None:
    """Refuse to load checkpoint ``path`` into a model its weights do not fit.

    Args:
        path: the checkpoint folder (for the message).
        saved: the identity stored in its ``meta.json`` (``meta["model"]``); ``None`` for
            a checkpoint written before identities were stored, which is not checked.
        current: :func:`algorithms.training.policy.model_identity` of the model about to load it.

    Raises:
        CheckpointError: other LoRA settings (rank, alpha or adapted modules; or adapters
            on one side only), or other frozen weights than those the checkpoint was
            trained on (a checkpoint that stores only part of the model, e.g. LoRA
            adapters, on another base model). The message says what differs and which
            flags fit the checkpoint.
    """
    if saved is None:
        return
    smoke = _smoke_model(saved.get("base_source")), _smoke_model(current.get("base_source"))
    if None not in smoke and not _same_smoke_model(*smoke):
        (words, env, _), (now_words, now_env, _) = smoke
        same_env = "the same env's" if env == now_env else f"{now_env}'s"
        raise CheckpointError(
            f"{path} was trained on the tiny smoke model built from {env}'s text "
            f"({words} words), and this run's is built from {same_env} text ({now_words} "
            "words, another vocabulary): its vocabulary is the env's text (episodes from the "
            "first seeds, shaped by the env kwargs and prompt flags), which changed since, so "
            "the checkpoint's token ids mean other words; train the smoke model again, or "
            "run with the env, env kwargs and prompt flags it was trained with")
    if saved.get("lora") != current.get("lora"):
        raise CheckpointError(
            f"{path} was trained with {_describe_lora(saved.get('lora'))}, but this run's "
            f"model has {_describe_lora(current.get('lora'))}; load it with "
            f"{_lora_flags(saved.get('lora'))}")
    fingerprint = saved.get("frozen_fingerprint")
    if fingerprint is not None and fingerprint != current.get("frozen_fingerprint"):
        start = _started_from(saved.get("base_source"))
        if start is not None and start != _started_from(current.get("base_source")):
            fix = (f"pass --model.init-checkpoint {start} (the checkpoint its run started "
                   "from)")
        else:
            fix = "pass the training run's --model.name-or-path / --model.gguf-file / " \
                  "--model.dtype"
        raise CheckpointError(
            f"{path} stores only the trained weights of a model whose other weights differ "
            f"from this run's: trained on {saved.get('base_source')} ({fingerprint[:19]}), "
            f"loading into {current.get('base_source')} "
            f"({str(current.get('frozen_fingerprint'))[:19]}); {fix}")


SMOKE_MODEL = re.compile(r"the tiny smoke model \(.*?, (\d+) words from (.+)'s text"
                         r"(?:, vocabulary ([0-9a-f]+))?\)")
"""What the smoke model's ``source`` says (:func:`algorithms.training.tiny_model.load_tiny_policy`):
its word count, env and vocabulary digest (absent before digests were written)."""


def _smoke_model(source: Any) -> tuple[int, str, str | None] | None:
    """``(words, env id, vocabulary digest)`` of a smoke model's ``base_source``, or
    ``None`` for any other model. Without a digest on either side only words and env are
    compared (a digest of ``None`` matches any)."""
    match = SMOKE_MODEL.search(str(source or ""))
    if match is None:
        return None
    return int(match.group(1)), match.group(2), match.group(3)


def _same_smoke_model(first: tuple[int, str, str | None],
                      second: tuple[int, str, str | None]) -> bool:
    """Whether two :func:`_smoke_model` descriptions are of one vocabulary (the digests
    compared where both sides have one)."""
    if first[2] is not None and second[2] is not None:
        return first[2] == second[2]
    return first[:2] == second[:2]


STARTED_FROM = ", started from "
"""What a warm-started policy's ``source`` says before the checkpoint it started from
(:func:`algorithms.training.warm_start.apply_init_checkpoint`)."""


def _started_from(source: Any) -> str | None:
    """The ``--model.init-checkpoint`` a model's ``base_source`` records, if any."""
    text = str(source or "")
    return text.rpartition(STARTED_FROM)[2] if STARTED_FROM in text else None


# ---------------------------------------------------------------------- find and load
def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of ``run_dir``, or ``None``."""
    root = checkpoint_dir(run_dir)
    pointer = root / LATEST
    if not pointer.exists():
        return None
    path = root / pointer.read_text(encoding="utf-8").strip()
    return path if (path / META_FILE).exists() else None


def best_checkpoint(run_dir: Path) -> tuple[Path, float] | None:
    """``(folder, evaluation success)`` of the run's best checkpoint, or ``None``."""
    pointer = checkpoint_dir(run_dir) / BEST
    if not pointer.exists():
        return None
    record = json.loads(pointer.read_text(encoding="utf-8"))
    path = checkpoint_dir(run_dir) / record["name"]
    return (path, float(record["score"])) if (path / META_FILE).exists() else None


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint folder, or a run folder's latest checkpoint.

    Raises:
        CheckpointError: neither; or a folder written by an older version (a pickle,
            which is never loaded).
    """
    path = Path(path)
    if (path / LEGACY_FILE).exists():
        raise CheckpointError(
            f"{path} holds a checkpoint in the old format ({LEGACY_FILE}, a pickle); it is "
            "not loaded because unpickling a file can run any code in it")
    if (path / META_FILE).exists() and ((path / WEIGHTS_FILE).exists()
                                        or (path / SHARDED_DIR / "weights").is_dir()):
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise CheckpointError(f"no checkpoint at {path} (expected a checkpoint folder with "
                              f"{WEIGHTS_FILE}, or a run folder with checkpoints/{LATEST})")
    return resolve_checkpoint(latest)


def load_checkpoint(path: Path, *, map_location: str | torch.device = "cpu",
                    optimizer: bool = True) -> dict[str, Any]:
    """Read a checkpoint folder (or a run folder: its latest checkpoint), running no code
    from it.

    Args:
        path: checkpoint or run folder.
        map_location: device of the loaded tensors.
        optimizer: also load the optimizer state (``--resume``); an error when the
            checkpoint has none (only the newest checkpoint of a run keeps it).

    Returns:
        ``{"iteration", "learner", "rng", "meta", "path"}``; ``learner`` has the weight
        tables and, with ``optimizer``, the optimizer state dicts.

    Raises:
        CheckpointError: no (complete) checkpoint there, a refused format, or no
            optimizer state when it was asked for.
    """
    path = resolve_checkpoint(path)
    meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    learner: dict[str, Any] = {}
    for name, tensor in _load_tensors(path / WEIGHTS_FILE, map_location).items():
        section, weight_name = name.split(".", 1)
        learner.setdefault(section, {})[weight_name] = tensor
    if optimizer:
        if not (path / OPTIMIZER_FILE).exists():
            raise CheckpointError(
                f"{path} has no optimizer state (only a run's newest checkpoint keeps it, "
                "unless the run was saved with --run.no-save-optimizer), so training cannot "
                "resume from it; evaluate it with --eval-only instead")
        tensors = _load_tensors(path / OPTIMIZER_FILE, map_location)
        skeleton = json.loads((path / OPTIMIZER_META_FILE).read_text(encoding="utf-8"))
        learner.update(unflatten_state(skeleton, tensors))
    rng = _load_tensors(path / RNG_FILE, "cpu") if (path / RNG_FILE).exists() else None
    return {"iteration": int(meta["iteration"]), "learner": learner, "rng": rng,
            "meta": meta, "path": str(path)}


# ---------------------------------------------------------------------- sharded (DCP)
def is_sharded(path: Path) -> bool:
    """Whether the checkpoint at ``path`` (or a run folder's newest) is a DCP one."""
    return (resolve_checkpoint(Path(path)) / SHARDED_DIR).is_dir()


_DCP_METADATA_MODULES = ("torch.distributed.checkpoint.",)
_DCP_METADATA_NAMES = {
    ("torch", "Size"), ("torch", "device"), ("torch._utils", "_rebuild_tensor_v2"),
    ("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"),
    ("builtins", "slice"), ("builtins", "complex"),
    ("torch.serialization", "_get_layout"),  # a layout by its name
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),  # the checkpoint id
}


class _MetadataUnpickler(pickle.Unpickler):
    """Rebuilds DCP's metadata classes and plain torch/builtin values; refuses the rest
    (a crafted ``.metadata`` that names ``os.system`` or any other callable fails)."""

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith(_DCP_METADATA_MODULES) or (module, name) in _DCP_METADATA_NAMES:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None),
                                            (torch.dtype, torch.layout, torch.memory_format)):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"refused {module}.{name} in DCP metadata")


def _safe_reader(path: Path) -> Any:
    """A DCP ``FileSystemReader`` whose metadata is read with :class:`_MetadataUnpickler`."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeDCPReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            metadata_path = self._get_metadata_path(kwargs.get("rank"))
            with self.fs.create_stream(metadata_path, "rb") as stream:
                metadata = _MetadataUnpickler(stream).load()
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeDCPReader(str(path))


def _cause(error: BaseException) -> str:
    """The innermost error line of a (DCP-wrapped) exception's text."""
    lines = [line.strip() for line in str(error).splitlines() if "Error" in line]
    return lines[-1] if lines else (str(error) or type(error).__name__)


def load_sharded_checkpoint(path: Path, state: dict[str, Any], *,
                            optimizer: bool = True) -> dict[str, Any]:
    """Read a sharded (DCP) checkpoint into ``state``, on any number of ranks.

    Args:
        path: checkpoint or run folder.
        state: ``{"weights": ..., "optimizer": ...}`` DCP state dicts of the learner as it
            is now (their tensors say which shards each rank needs; filled in place).
        optimizer: also load the optimizer state (``--resume``).

    Returns:
        ``{"iteration", "learner", "rng", "meta", "path"}`` as :func:`load_checkpoint`,
        ``learner`` being ``state`` filled in.

    Raises:
        CheckpointError: no checkpoint, no optimizer state when it was asked for, or a
            refused or unreadable index.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    path = resolve_checkpoint(path)
    meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    parts = [("weights", state["weights"])]
    if optimizer:
        if not (path / SHARDED_DIR / "optimizer").is_dir():
            raise CheckpointError(
                f"{path} has no optimizer state (only a run's newest checkpoint keeps it), so "
                "training cannot resume from it; evaluate it with --eval-only instead")
        parts.append(("optimizer", state["optimizer"]))
    for name, part in parts:
        try:
            dcp.load(part, storage_reader=_safe_reader(path / SHARDED_DIR / name))
        except (CheckpointException, pickle.UnpicklingError, AssertionError, OSError,
                ValueError, RuntimeError) as error:  # DCP wraps the unpickler's refusal
            raise CheckpointError(f"{path / SHARDED_DIR / name} cannot be loaded: "
                                  f"{_cause(error)}") from None
    rng = _load_tensors(path / RNG_FILE, "cpu") if (path / RNG_FILE).exists() else None
    return {"iteration": int(meta["iteration"]), "learner": state, "rng": rng, "meta": meta,
            "path": str(path)}
