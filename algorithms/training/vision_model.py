"""Vision-language policies: telling them from text models, loading them, what of them
trains, and their forward pass over prompts with images.

A policy is a vision-language model (``model.kind vision``; ``auto`` reads the model's
``config.json``: a ``vision_config`` means one) when it is loaded with
``AutoModelForImageTextToText``. Its tokenizer and image processor come from
``AutoProcessor`` (or, where that cannot be built -- transformers' Qwen-VL processors
insist on a video processor, which needs torchvision -- from ``AutoTokenizer`` and
``AutoImageProcessor``, the same files). Supported: the Qwen2-VL family layout (Qwen2-VL,
Qwen2.5-VL, Qwen3-VL): a vision tower ``model.visual`` (patch embedding, blocks, merger)
beside the language model ``model.language_model``.

What trains: LoRA adapters (``model.lora_rank`` > 0) sit on the language model's
projections only, never on the vision tower's (whose MLP has the same module names); the
vision tower, merger included, is frozen unless ``model.train_vision_tower``, which
trains all its weights (with or without LoRA on the language model).

Forward pass (:func:`vision_hidden_states`): the model's own vision features are written
into the embeddings of the *prompt's* image tokens, with the 3-D rotary positions the
model's ``get_rope_index`` gives a sequence whose only image tokens are the prompt's. This
is what ``generate`` computes (the image is encoded once, at the prefill; every
generated token is text), so a response that happens to contain an image token is
scored as the text token it was when it was sampled, and the log-probs of the learner
equal the engine's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

VISION_TOWER = "visual"
"""The attribute of the Qwen-VL backbone (``model.model``) that holds the vision tower."""


def is_vision_config(config: Any) -> bool:
    """Whether a transformers config describes a vision-language model (it has a
    ``vision_config``)."""
    return getattr(config, "vision_config", None) is not None


def resolve_model_kind(kind: str, name_or_path: str | None, *, gguf_file: str | None = None,
                       trust_remote_code: bool = False) -> str:
    """``"text"`` or ``"vision"``: ``kind`` unless it is ``"auto"``, which reads the model's
    config (the offline default and GGUF files are text models; a config that cannot be
    read is left to the loader, which says why, as a text model)."""
    if kind != "auto":
        return kind
    if name_or_path is None or gguf_file is not None:
        return "text"
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError):
        return "text"
    return "vision" if is_vision_config(config) else "text"


def load_processors(path: str, *, min_pixels: int | None = None,
                    max_pixels: int | None = None, trust_remote_code: bool = False
                    ) -> tuple[Any, Any]:
    """``(tokenizer, image_processor)`` of the model at ``path``: ``AutoProcessor``'s, or
    ``AutoTokenizer``'s and ``AutoImageProcessor``'s where the processor cannot be built
    (module docstring). ``min_pixels`` / ``max_pixels`` override the image processor's
    pixel bounds."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    try:
        processor = AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code)
        tokenizer, image_processor = processor.tokenizer, processor.image_processor
    except (ImportError, AttributeError, TypeError, ValueError):
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        image_processor = AutoImageProcessor.from_pretrained(
            path, trust_remote_code=trust_remote_code)
    set_pixel_bounds(image_processor, min_pixels=min_pixels, max_pixels=max_pixels)
    return tokenizer, image_processor


def set_pixel_bounds(image_processor: Any, *, min_pixels: int | None,
                     max_pixels: int | None) -> None:
    """Set a Qwen2-VL image processor's pixel bounds (``None``: keep its own): they are its
    ``size`` ``shortest_edge`` / ``longest_edge`` (transformers 5) or its
    ``min_pixels`` / ``max_pixels`` (4.x), read by its ``smart_resize``."""
    if min_pixels is None and max_pixels is None:
        return
    size = dict(image_processor.size) if getattr(image_processor, "size", None) else {}
    if min_pixels is not None:
        size["shortest_edge"] = min_pixels
        if hasattr(image_processor, "min_pixels"):
            image_processor.min_pixels = min_pixels
    if max_pixels is not None:
        size["longest_edge"] = max_pixels
        if hasattr(image_processor, "max_pixels"):
            image_processor.max_pixels = max_pixels
    image_processor.size = {key: value for key, value in size.items() if value is not None}


def load_vision_lm(path: str, dtype: torch.dtype, *, trust_remote_code: bool = False) -> Any:
    """The vision-language model at ``path`` (``AutoModelForImageTextToText``)."""
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(path, dtype=dtype,
                                                       trust_remote_code=trust_remote_code)


def _plain(model: nn.Module) -> nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def vision_tower(model: nn.Module) -> tuple[str, nn.Module]:
    """``(name, module)`` of the vision tower of a Qwen-VL model (PEFT-wrapped or not):
    the module name as ``named_modules`` of ``model`` gives it.

    Raises:
        TypeError: the model has no ``model.visual``.
    """
    plain = _plain(model)
    tower = getattr(getattr(plain, "model", None), VISION_TOWER, None)
    if tower is None:
        raise TypeError(f"{type(plain).__name__} has no vision tower at model.{VISION_TOWER}: "
                        "only the Qwen2-VL, Qwen2.5-VL and Qwen3-VL families are supported")
    for name, module in model.named_modules():
        if module is tower:
            return name, tower
    raise TypeError("the vision tower is not a submodule of the model")  # pragma: no cover


def set_vision_tower_trainable(model: nn.Module, trainable: bool) -> None:
    """Freeze (or unfreeze: every weight, merger included) the vision tower."""
    for parameter in vision_tower(model)[1].parameters():
        parameter.requires_grad_(trainable)


def language_lora_targets(model: nn.Module, targets: Sequence[str]) -> str:
    """A PEFT ``target_modules`` pattern (a regular expression PEFT matches against each
    module's full name) for the modules named ``targets`` that lie outside the vision
    tower: LoRA on the language model only.

    Raises:
        ValueError: none of ``targets`` exists outside the vision tower.
    """
    tower = vision_tower(model)[0]
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()
               if name and not (name == tower or name.startswith(tower + "."))}
    chosen = [target for target in targets if target in present]
    if not chosen:
        raise ValueError(f"none of lora_target_modules {tuple(targets)} exist in the language "
                         f"model; module names include {sorted(present)[:20]}")
    return rf"(?!{re.escape(tower)}\.).*\.({'|'.join(map(re.escape, chosen))})"


def vision_hidden_states(backbone: nn.Module, input_ids: torch.Tensor,
                         attention_mask: torch.Tensor, *, context: torch.Tensor,
                         pixel_values: torch.Tensor, image_grid_thw: torch.Tensor
                         ) -> torch.Tensor:
    """Last hidden states of sequences whose prompts show images: (B, L) -> (B, L, H).

    Args:
        backbone: the Qwen-VL model under the LM head (``model.model``).
        input_ids, attention_mask: (B, L) sequences (prompts and their responses, padded
            on either side).
        context: (B, L) bool, the prompt tokens: only image tokens there are images (a
            response's are the text tokens they were when sampled).
        pixel_values: (patches, D) pixel values of the rows' images, row after row.
        image_grid_thw: (n, 3) patch grid of each image.

    Raises:
        ValueError: the prompts' image tokens and the images' token counts differ.
    """
    config = backbone.config
    context = context.bool() & attention_mask.bool()
    places = (input_ids == config.image_token_id) & context
    positions = _rope_positions(backbone, input_ids, places, context, image_grid_thw,
                                attention_mask)
    embeddings = backbone.get_input_embeddings()(input_ids)
    image_embeddings, deepstack = _image_features(backbone, pixel_values, image_grid_thw)
    image_embeddings = image_embeddings.to(embeddings.device, embeddings.dtype)
    if int(places.sum()) != image_embeddings.shape[0]:
        raise ValueError(f"the prompts hold {int(places.sum())} image tokens, their images "
                         f"{image_embeddings.shape[0]}")
    embeddings = embeddings.masked_scatter(places.unsqueeze(-1), image_embeddings)
    extra: dict[str, Any] = {}
    if deepstack is not None:  # Qwen3-VL: vision features added to the first LM layers
        extra = {"visual_pos_masks": places,
                 "deepstack_visual_embeds": [level.to(embeddings.dtype) for level in deepstack]}
    return backbone.language_model(inputs_embeds=embeddings, attention_mask=attention_mask,
                                   position_ids=positions, use_cache=False,
                                   **extra).last_hidden_state


def _rope_positions(backbone: nn.Module, input_ids: torch.Tensor, places: torch.Tensor,
                    context: torch.Tensor, image_grid_thw: torch.Tensor,
                    attention_mask: torch.Tensor) -> torch.Tensor:
    """(3, B, L) rotary positions (temporal, height, width) of sequences whose only images
    are at ``places``, from the model's ``get_rope_index``: transformers >= 5.2x takes the
    token types (``mm_token_type_ids``); earlier versions find an image as
    ``<|vision_start|>`` followed by an image token, so a ``<|vision_start|>`` outside the
    context is hidden from it (positions depend on the token types, not the ids)."""
    import inspect

    parameters = inspect.signature(backbone.get_rope_index).parameters
    if "mm_token_type_ids" in parameters:
        positions, _ = backbone.get_rope_index(input_ids, mm_token_type_ids=places.int(),
                                               image_grid_thw=image_grid_thw,
                                               attention_mask=attention_mask)
        return positions
    start = backbone.config.vision_start_token_id
    hidden = input_ids.masked_fill((input_ids == start) & ~context, 0 if start else 1)
    positions, _ = backbone.get_rope_index(hidden, image_grid_thw=image_grid_thw,
                                           attention_mask=attention_mask)
    return positions


def _image_features(backbone: nn.Module, pixel_values: torch.Tensor,
                    image_grid_thw: torch.Tensor
                    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """``(features, deepstack)``: the (tokens, H) features of every image, image after
    image, and Qwen3-VL's per-level deepstack features (``None`` for other families), in
    the return shapes of transformers 5 (an output object) and 4.x (tensors, tuples)."""
    def joined(value: Any) -> torch.Tensor:
        return torch.cat(list(value), dim=0) if isinstance(value, (list, tuple)) else value

    features = backbone.get_image_features(pixel_values, image_grid_thw)
    if hasattr(features, "pooler_output"):
        deepstack = getattr(features, "deepstack_features", None)
        embeddings = features.pooler_output
    elif isinstance(features, tuple) and len(features) == 2 and isinstance(features[1], list):
        embeddings, deepstack = features  # Qwen3-VL in transformers 4.x
    else:
        embeddings, deepstack = features, None
    return joined(embeddings), (None if deepstack is None
                                else [joined(level) for level in deepstack])
