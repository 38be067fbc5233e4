"""Numeric precision: the dtype a model computes in, and the dtype its weights are kept in.

``model.dtype: auto`` resolves (:func:`resolve_dtype`) to bfloat16 on a GPU, and on a CPU
to bfloat16 where the CPU has bfloat16 instructions (:func:`cpu_has_bf16`), else to
float32: without them bfloat16 is emulated and slower than float32.

bfloat16 is *mixed* precision (:func:`mixed_precision`), on a CPU and on a GPU alike:

- the weights of the linear layers that do not train (a LoRA run's base model, the full
  fine-tune's KL reference) are stored in bfloat16 (:func:`store_frozen_linears`): they
  are nearly all the weights and all the matmul time;
- every other weight stays in float32: the trained ones (LoRA adapters, a full
  fine-tune's weights, the value head, a separate critic), and with them their gradients
  and AdamW moments; and the embeddings, norms and LM head, so that the residual stream
  between the layers adds up in float32;
- every forward pass of the policy -- generation in the HF engine, scoring (old,
  reference and updated log-probs, values), the SFT loss -- runs under
  ``torch.autocast("cpu", torch.bfloat16)`` (:func:`autocast`): linear layers and
  attention compute in bfloat16 (float32 trained weights are cast once per autocast
  region: torch caches the casts of weights that require grad);
- the LM head computes in float32 (:class:`Float32Head`): the logits behind sampling,
  log-probs, entropy and KL are float32 products of the hidden states. A bfloat16 logit
  is rounded to 8 significant bits (steps of 0.125 at 16), so generation and scoring,
  whose hidden states differ by rounding, would round logits to neighbouring values.

Generation and scoring run the same computation in the same dtypes, and on a CPU with
eager attention (:func:`attention_kernel`) they agree: measured on SmolLM2-135M with a
trained LoRA adapter, a sampled token's log-prob under the HF engine (KV-cached decoding)
and under the scorer (one forward pass) differ by at most 1.6e-5 nats (mean 8.3e-6;
float32: 2.5e-5), against up to 0.10 (mean 0.018) with SDPA's bfloat16 CPU kernels, whose
one-row (decoding) and many-row (scoring) paths round differently (docs/precision.md).

On a GPU the float32 trained weights are what verl's FSDP actor keeps (its actor loads in
float32 and FSDP computes in bfloat16), and they matter: the GPU presets fine-tune every
weight at lr 1e-6, and AdamW's steps of about 1e-6 are far below a bfloat16 weight's
rounding step (about 1e-4 at 0.02), so weights stored in bfloat16 barely move (measured:
5 AdamW steps at lr 1e-6 changed 1.9% of a 512 x 512 bfloat16 matrix of scale 0.02). Under
torchrun on GPUs FSDP2 keeps float32 master weights itself (``model.dtype`` auto loads
float32 there) and this module's mixed precision is not used. ``float16`` is never mixed:
the whole model in float16.
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

AUTOCAST_ATTRIBUTE = "agentgym_autocast_dtype"
"""Attribute set on a model that computes under autocast (its value: the compute dtype)."""

CPUINFO = Path("/proc/cpuinfo")
"""Where an aarch64 Linux CPU lists its features (:func:`cpu_has_bf16`)."""

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

_X86_BF16_QUERIES = (("AMX", "_is_amx_tile_supported"),
                     ("AVX512-BF16", "_is_avx512_bf16_supported"))
"""torch's capability queries for the x86 instructions oneDNN's bfloat16 kernels use."""


def _x86_bf16_instructions() -> list[str]:
    """The names of the :data:`_X86_BF16_QUERIES` torch answers yes to (a torch without
    a query counts as no)."""
    return [label for label, query in _X86_BF16_QUERIES
            if getattr(torch.cpu, query, lambda: False)()]


def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 instructions, so that bfloat16 matmuls beat float32.

    x86: torch's own capability queries (``torch.cpu._is_avx512_bf16_supported`` and
    ``_is_amx_tile_supported``: AVX512-BF16 or AMX, the instructions oneDNN's bfloat16
    kernels use; without them oneDNN emulates bfloat16, slower than float32). aarch64:
    the ``bf16`` feature in ``/proc/cpuinfo`` (Armv8.6 BFMMLA/BFDOT). Anything else: no.
    """
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i386", "i686"):
        return bool(_x86_bf16_instructions())
    if machine in ("aarch64", "arm64"):
        try:
            text = CPUINFO.read_text()
        except OSError:
            return False
        return any(line.split(":", 1)[0].strip() == "Features" and
                   "bf16" in line.split(":", 1)[1].split() for line in text.splitlines()
                   if ":" in line)
    return False


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The compute dtype of ``model.dtype`` on ``device``: ``"auto"`` -> bfloat16 on a
    GPU, and on a CPU bfloat16 if :func:`cpu_has_bf16` else float32; any other name ->
    that dtype."""
    if dtype == "auto":
        if device.type == "cuda" or cpu_has_bf16():
            return torch.bfloat16
        return torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def mixed_precision(compute: torch.dtype, device: torch.device) -> bool:
    """Whether models computing in ``compute`` on ``device`` keep trained weights in
    float32 and compute under autocast: bfloat16 on a CPU or a GPU (module docstring)."""
    return compute == torch.bfloat16 and device.type in ("cpu", "cuda")


def load_dtype(compute: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype a model computing in ``compute`` on ``device`` is loaded in: float32 under
    :func:`mixed_precision` (:func:`store_frozen_linears` then narrows the frozen linear
    weights), else ``compute``."""
    return torch.float32 if mixed_precision(compute, device) else compute


def store_frozen_linears(model: nn.Module, compute: torch.dtype) -> None:
    """Store the weights (and biases) of ``model``'s linear layers in ``compute``, in place,
    except its output embedding (the LM head stays float32); every other weight is left as
    it is. For models whose linear layers do not train: a LoRA run's base model (call it
    before the adapters are attached), a KL reference."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for module in model.modules():
        if isinstance(module, nn.Linear) and module is not head:
            module.to(compute)


class Float32Head(nn.Linear):
    """An LM head (``nn.Linear``) that computes its logits in float32 under autocast.

    :func:`mark_autocast` gives a model's output embedding this class in place: its
    parameters, their names and any weight tying are untouched.
    """

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (..., V) float32 logits."""
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            bias = None if self.bias is None else self.bias.float()
            return nn.functional.linear(hidden.float(), self.weight.float(), bias)


def attention_kernel(setting: str, compute: torch.dtype, device: torch.device) -> str | None:
    """The attention implementation to set for ``ModelConfig.attn_implementation``
    ``setting`` (``None``: keep the model's own). ``auto`` is ``eager`` under
    :func:`mixed_precision` on a CPU: measured on SmolLM2-135M in bfloat16
    (docs/precision.md), SDPA's CPU kernels gave a sampled token a log-prob that differs
    between generation (KV-cached, one query row) and scoring (all rows) by 0.018 nats on
    average and up to 0.10, eager attention by at most 1.6e-5; and eager's backward pass
    was the faster. On a GPU ``auto`` keeps the model's own (SDPA's fused kernels)."""
    if setting == "auto":
        return "eager" if device.type == "cpu" and mixed_precision(compute, device) else None
    return setting


def mark_autocast(model: nn.Module, compute: torch.dtype) -> None:
    """Make :func:`autocast` run ``model``'s forward passes in ``compute``; give its LM
    head float32 logits (:class:`Float32Head`); and turn off PEFT's cast of each LoRA
    layer's input to the adapter's (float32) dtype: under autocast the adapters' matmuls
    run in ``compute`` like the rest, and the cast would only copy activations back and
    forth."""
    setattr(model, AUTOCAST_ATTRIBUTE, compute)
    for module in model.modules():
        if hasattr(module, "cast_input_dtype_enabled"):  # a PEFT tuner layer
            module.cast_input_dtype_enabled = False
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is nn.Linear:
        head.__class__ = Float32Head


def autocast_dtype(model: Any) -> torch.dtype | None:
    """The dtype ``model`` computes in under autocast, or ``None`` (no autocast)."""
    return getattr(model, AUTOCAST_ATTRIBUTE, None)


def compute_dtype(model: Any) -> torch.dtype:
    """The dtype ``model``'s forward passes compute in: its autocast dtype, else the dtype
    of its first floating-point parameter."""
    marked = autocast_dtype(model)
    if marked is not None:
        return marked
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.float32


@contextlib.contextmanager
def autocast(model: Any) -> Iterator[None]:
    """Run the enclosed forward passes of ``model`` in its compute dtype: a
    ``torch.autocast`` region for a model marked by :func:`mark_autocast`, nothing
    otherwise. Nested regions are free (torch keeps one cast cache for the outermost)."""
    dtype = autocast_dtype(model)
    if dtype is None:
        yield
        return
    device = next(model.parameters()).device.type
    with torch.autocast(device_type=device, dtype=dtype):
        yield


def cpu_kernels() -> str:
    """This CPU's model name and the bfloat16 instruction sets torch finds on it, e.g.
    ``"Intel(R) Xeon(R) Processor (AMX, AVX512-BF16)"``.

    oneDNN picks its bfloat16 kernels by these instructions (AMX tiles where present,
    else AVX512-BF16), and the kernels round differently, so one seed's bfloat16 run
    follows another trajectory on another CPU (docs/precision.md, "Reproducibility across
    CPUs").
    A run records this beside its figures.
    """
    name = platform.processor() or platform.machine()
    try:
        for line in CPUINFO.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                name = value.strip()
                break
    except OSError:
        pass
    found = _x86_bf16_instructions()
    return f"{name} ({', '.join(found) if found else 'no bfloat16 instructions'})"


def describe(model: Any) -> str:
    """One phrase for the run's log: the dtype ``model`` computes in and, under mixed
    precision, what stays float32."""
    compute = str(compute_dtype(model)).removeprefix("torch.")
    if autocast_dtype(model) is None:
        return f"{compute} weights and compute"
    return (f"{compute} compute, mixed precision (frozen linear weights in {compute}; "
            "trained weights, optimizer state, embeddings and logits in float32)")
