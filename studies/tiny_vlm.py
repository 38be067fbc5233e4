"""A tiny random vision-language model built in-process: Qwen2.5-VL or Qwen3-VL with a
word-level tokenizer and a Qwen2-VL image processor, no files, no downloads.

What the tests, ``benchmarks.vlm_smoke`` and the GPU script train and score when no VLM
weights are at hand: the real transformers classes (``Qwen2_5_VLForConditionalGeneration``,
``Qwen3VLForConditionalGeneration``), so every code path -- the vision tower, the merger,
3-D rotary positions, Qwen3-VL's deepstack features -- runs as it does for the 3B model,
only with widths of a few dozen.

- Tokenizer: one token per whitespace-separated word of the given texts (tags cut off the
  words they touch, as in :func:`algorithms.training.tiny_model.word_tokenizer`), plus the Qwen chat
  and vision special tokens (``<|im_start|>``, ``<|im_end|>`` -- the EOS --,
  ``<|vision_start|>``, ``<|image_pad|>``, ``<|vision_end|>``, ``<|video_pad|>``) and a
  chat template of Qwen's layout (``<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n``).
- Image processor: Qwen2-VL's (Pillow backend), patch 14 (Qwen2.5-VL) or 16 (Qwen3-VL),
  merge 2, with small pixel bounds so that an image is a handful of tokens.

:func:`save_tiny_vlm` writes one as a model folder (``config.json``, safetensors,
tokenizer, ``preprocessor_config.json``) that ``--model.name-or-path`` loads through
:func:`algorithms.training.policy.load_policy` like a hub checkpoint, and vLLM too.
:func:`qwen2_5_vl_3b_config` is Qwen2.5-VL-3B-Instruct's architecture, for random weights
of its shape on a GPU (``benchmarks/gpu_vlm.py``).

Why in ``studies/``: the model the vision-language study (:mod:`studies.vlm_learning`)
trains, which the tests and the benchmarks borrow (a benchmark may import a study, never the
reverse: ``tests/test_layers.py``), not a library feature; the tiny text model is one
(``--model.name-or-path tiny``, :mod:`algorithms.training.tiny_model`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import torch

from algorithms.config import ModelConfig
from algorithms.training.policy import Policy, wrap_model
from algorithms.training.tiny_model import TAG_PATTERN

Kind = Literal["qwen2_5_vl", "qwen3_vl"]
KINDS: tuple[str, ...] = ("qwen2_5_vl", "qwen3_vl")

PAD, UNKNOWN, EOS = "[PAD]", "[UNK]", "<|im_end|>"
CHAT_TOKENS = ("<|im_start|>",)
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""Qwen's chat layout, without its default system message (a shorter prompt)."""

PATCH_SIZE = {"qwen2_5_vl": 14, "qwen3_vl": 16}
"""The families' patch sizes (Qwen2.5-VL 14, Qwen3-VL 16)."""


def vlm_tokenizer(texts: Iterable[str]):
    """A word-level tokenizer over the words of ``texts`` with Qwen's chat and vision
    special tokens (ids: ``[PAD]`` 0, ``[UNK]`` 1, ``<|im_end|>`` 2, then the specials, then
    the sorted words) and :data:`CHAT_TEMPLATE`."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words: set[str] = {"user", "assistant", "system"}
    for text in texts:
        words.update(re.sub(TAG_PATTERN, lambda m: f" {m.group(0)} ", text).split())
    specials = (PAD, UNKNOWN, EOS, *CHAT_TOKENS, *VISION_TOKENS)
    vocab = {token: i for i, token in enumerate(specials)}
    for word in sorted(words - set(specials)):
        vocab.setdefault(word, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNKNOWN))
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Split(Regex(TAG_PATTERN), behavior="isolated")])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD,
                                        unk_token=UNKNOWN, eos_token=EOS)
    tokenizer.add_special_tokens({"additional_special_tokens": [*CHAT_TOKENS,
                                                                *VISION_TOKENS]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_image_processor(kind: Kind = "qwen2_5_vl", *, max_tokens: int = 4,
                         patch_size: int | None = None):
    """Qwen2-VL's image processor (Pillow backend) with the family's patch size (or
    ``patch_size``), merge 2 and pixel bounds from 1 to ``max_tokens`` image tokens
    (``max_tokens * (2 * patch) ** 2`` pixels at most): a 256 x 256 image becomes
    ``max_tokens`` tokens."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    patch = patch_size or PATCH_SIZE[kind]
    factor = 2 * patch
    return Qwen2VLImageProcessorPil(min_pixels=factor * factor,
                                    max_pixels=max_tokens * factor * factor,
                                    patch_size=patch, merge_size=2, temporal_patch_size=2)


def tiny_vlm_config(kind: Kind, tokenizer: Any, *, hidden: int = 32, layers: int = 2,
                    vision_hidden: int = 16, vision_layers: int = 2,
                    patch_size: int | None = None, rope_theta: float | None = None) -> Any:
    """The config of a tiny ``kind`` model over ``tokenizer``: ``layers`` language layers
    of width ``hidden`` (4 heads of ``hidden / 4``, 2 key-value heads, MLP ``2 * hidden``),
    a ``vision_layers``-block vision tower of width ``vision_hidden`` with patches of
    ``patch_size`` pixels (default: the family's, :data:`PATCH_SIZE`), tied embeddings.

    ``rope_theta``: the language model's rotary base (default: the family's, 1e6 for
    Qwen2.5-VL, 5e5 for Qwen3-VL). With a head of 16 dimensions, an image token's height
    and width get 2 of the 8 rotary frequencies each, which at the family's base turn by a
    few hundredths of a radian per row or column: a base of about 100 makes where an image
    token sits visible to such a small model."""
    from transformers import Qwen2_5_VLConfig, Qwen3VLConfig

    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in VISION_TOKENS}
    patch = patch_size or PATCH_SIZE[kind]
    head = hidden // 4
    # the 3-D rotary sections (temporal, height, width) cover head / 2 frequencies
    sections = [head // 2 - 2 * (head // 6), head // 6, head // 6]
    text = dict(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=8192, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    tokens = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                  vision_start_token_id=ids["<|vision_start|>"],
                  vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=True)
    vision = dict(depth=vision_layers, hidden_size=vision_hidden,
                  intermediate_size=2 * vision_hidden, num_heads=2, out_hidden_size=hidden,
                  patch_size=patch, spatial_merge_size=2, temporal_patch_size=2)
    theta = {} if rope_theta is None else {"rope_theta": float(rope_theta)}
    if kind == "qwen2_5_vl":
        text["rope_scaling"] = {"type": "mrope", "mrope_section": sections, **theta}
        vision.update(window_size=4 * patch,
                      fullatt_block_indexes=[vision_layers - 1])
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **tokens)
    if kind == "qwen3_vl":
        text.update(head_dim=head, rope_scaling={"rope_type": "default",
                                                 "mrope_section": sections,
                                                 "mrope_interleaved": True, **theta})
        vision.update(num_position_embeddings=64, deepstack_visual_indexes=[0])
        return Qwen3VLConfig(text_config=text, vision_config=vision, **tokens)
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def model_from_config(config: Any, *, seed: int = 0) -> Any:
    """A randomly initialised ``*ForConditionalGeneration`` of ``config`` (deterministic
    for ``seed``; the caller's RNG state is left as it was)."""
    from transformers import AutoModelForImageTextToText

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return AutoModelForImageTextToText.from_config(config)


def tiny_vlm(texts: Iterable[str], *, kind: Kind = "qwen2_5_vl", seed: int = 0,
             hidden: int = 32, layers: int = 2, max_tokens: int = 4,
             vision_hidden: int = 16, patch_size: int | None = None,
             rope_theta: float | None = None) -> tuple[Any, Any, Any]:
    """``(model, tokenizer, image_processor)``: a tiny random ``kind`` model over
    :func:`vlm_tokenizer` of ``texts`` (:func:`tiny_vlm_config`, :func:`tiny_image_processor`)."""
    tokenizer = vlm_tokenizer(texts)
    model = model_from_config(tiny_vlm_config(kind, tokenizer, hidden=hidden, layers=layers,
                                              vision_hidden=vision_hidden,
                                              patch_size=patch_size, rope_theta=rope_theta),
                              seed=seed)
    return model, tokenizer, tiny_image_processor(kind, max_tokens=max_tokens,
                                                  patch_size=patch_size)


def tiny_vlm_policy(texts: Iterable[str], *, kind: Kind = "qwen2_5_vl", seed: int = 0,
                    hidden: int = 32, layers: int = 2, max_tokens: int = 4,
                    vision_hidden: int = 16, patch_size: int | None = None,
                    rope_theta: float | None = None,
                    model_config: ModelConfig | None = None) -> Policy:
    """:func:`tiny_vlm` wrapped like a loaded vision policy (LoRA and the vision tower's
    freezing per ``model_config``; default: full weights, tower frozen)."""
    model, tokenizer, image_processor = tiny_vlm(texts, kind=kind, seed=seed, hidden=hidden,
                                                 layers=layers, max_tokens=max_tokens,
                                                 vision_hidden=vision_hidden,
                                                 patch_size=patch_size, rope_theta=rope_theta)
    return wrap_model(model, tokenizer, model_config or ModelConfig(),
                      source=f"tiny random {kind}", path=f"tiny-{kind}", gguf_file=None,
                      seed=seed, image_processor=image_processor)


def save_tiny_vlm(folder: str | Path, texts: Iterable[str], *, kind: Kind = "qwen2_5_vl",
                  seed: int = 0, hidden: int = 32, layers: int = 2,
                  max_tokens: int = 4) -> Path:
    """Write :func:`tiny_vlm` as a model folder (weights, config, tokenizer and
    ``preprocessor_config.json``) that ``--model.name-or-path`` loads; returns it."""
    folder = Path(folder)
    model, tokenizer, image_processor = tiny_vlm(texts, kind=kind, seed=seed, hidden=hidden,
                                                 layers=layers, max_tokens=max_tokens)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    image_processor.save_pretrained(folder)
    return folder


def qwen2_5_vl_3b_config() -> Any:
    """Qwen2.5-VL-3B-Instruct's architecture (its hub ``config.json``'s sizes): 36 language
    layers of width 2048 (16 heads, 2 key-value heads, MLP 11008, vocabulary 151,936, tied
    embeddings, rotary sections 16/24/24), a 32-block vision tower of width 1280 (MLP 3420,
    16 heads, patch 14, window 112, full attention in blocks 7, 15, 23, 31) merged into
    2048. Random weights of this shape measure memory and time without the weights."""
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(
        text_config=dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008,
                         num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
                         max_position_embeddings=128000, rms_norm_eps=1e-6,
                         rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
                         rope_theta=1000000.0, bos_token_id=151643, eos_token_id=151645),
        vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                           out_hidden_size=2048, patch_size=14, spatial_merge_size=2,
                           temporal_patch_size=2, window_size=112, tokens_per_second=2,
                           fullatt_block_indexes=[7, 15, 23, 31]),
        image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
        vision_end_token_id=151653, tie_word_embeddings=True)
