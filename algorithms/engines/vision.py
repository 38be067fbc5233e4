"""Images in prompts: from a visual env's image to what a vision-language model is fed.

A visual env observes ``{"text": str, "image": (H, W, 3) uint8}`` (``docs/env-contract.md``).
The image of a step reaches the model in three places, all through this module so that
they always agree:

- the prompt's token ids (:mod:`algorithms.agent.prompts`): the image is written as
  ``<|vision_start|>`` + ``N`` image tokens + ``<|vision_end|>`` (the Qwen2-VL / Qwen2.5-VL /
  Qwen3-VL layout), ``N`` being the image's patch count after the processor's resize,
  divided by ``merge_size ** 2`` (:meth:`VisionProcessor.placeholder`);
- generation (the HF engine, :meth:`VisionProcessor.tensors`), and the data URL the
  OpenAI engine sends (:func:`png_data_url`);
- every scoring pass of the learner (old, reference and current log-probs), which encodes
  the stored images again with :meth:`VisionProcessor.tensors`: the encoding is a pure
  function of the image, so the pixel values are bit for bit those generation used and
  the sampling stays exactly on-policy.

Before the processor, every image goes through verl-agent's ``process_image``
(``agent_system/multi_turn_rollout/utils.py``) as its rollout applies it, written here
as :func:`resize_like_verl_agent`: an image of fewer than ``min_pixels`` pixels
(256 x 256 there) is scaled up, one of more than ``max_pixels`` (2048 x 2048) scaled down,
keeping its aspect ratio (each side ``int(side * sqrt(target / area))``, Pillow's default
filter), then the model's image processor resizes it to multiples of its patch size
within its own pixel bounds (``smart_resize``) and cuts it into patches.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym.images import check_image, png_bytes

VERL_AGENT_MIN_PIXELS = 256 * 256
"""verl-agent's ``process_image`` scales smaller images up to this many pixels."""
VERL_AGENT_MAX_PIXELS = 2048 * 2048
"""verl-agent's ``process_image`` scales larger images down to this many pixels."""

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_TOKEN = "<|image_pad|>"


def resize_like_verl_agent(image: np.ndarray, *, min_pixels: int = VERL_AGENT_MIN_PIXELS,
                           max_pixels: int = VERL_AGENT_MAX_PIXELS) -> np.ndarray:
    """verl-agent's ``process_image`` rule on an (H, W, 3) uint8 image.

    An image of more than ``max_pixels`` pixels is resized by the factor
    ``f = sqrt(max_pixels / (W * H))`` to ``(int(W * f), int(H * f))``; then one of fewer
    than ``min_pixels`` by ``sqrt(min_pixels / (W * H))`` likewise (with Pillow's default
    filter, bicubic). An image within the bounds comes back unchanged.

    Args:
        image: (H, W, 3) uint8.
        min_pixels, max_pixels: the bounds (verl-agent: 256 * 256 and 2048 * 2048).

    Returns:
        (H', W', 3) uint8.
    """
    from PIL import Image

    picture = Image.fromarray(check_image(image))
    for bound, too_far in ((max_pixels, lambda area: area > max_pixels),
                           (min_pixels, lambda area: area < min_pixels)):
        area = picture.width * picture.height
        if too_far(area):
            factor = math.sqrt(bound / area)
            picture = picture.resize((int(picture.width * factor),
                                      int(picture.height * factor)))
    return np.asarray(picture.convert("RGB"))


@dataclass(frozen=True)
class VisionInputs:
    """The pixel inputs of a list of images, as the model takes them.

    Attributes:
        pixel_values: (P, D) float32 patches of every image, image after image (``P`` the
            sum of the images' patch counts; ``D = 3 * temporal_patch * patch ** 2``).
        image_grid_thw: (n, 3) int64 (temporal, height, width) patch grid of each image.
    """

    pixel_values: np.ndarray
    image_grid_thw: np.ndarray


class VisionProcessor:
    """The image side of a vision-language policy: resizing, patching and the image's
    place in the token ids (module docstring).

    Args:
        image_processor: the model's Hugging Face image processor (a Qwen2-VL one:
            ``merge_size``, returns ``pixel_values`` and ``image_grid_thw``).
        tokenizer: the model's tokenizer, which knows ``<|vision_start|>``,
            ``<|image_pad|>`` and ``<|vision_end|>``.
        min_pixels, max_pixels: :func:`resize_like_verl_agent`'s bounds (``0`` and a huge
            ``max_pixels`` leave images as the env drew them).

    Raises:
        ValueError: the tokenizer lacks one of the vision tokens, or the image processor
            is not a Qwen2-VL-style one.
    """

    def __init__(self, image_processor: Any, tokenizer: Any, *,
                 min_pixels: int = VERL_AGENT_MIN_PIXELS,
                 max_pixels: int = VERL_AGENT_MAX_PIXELS):
        if not hasattr(image_processor, "merge_size"):
            raise ValueError(f"{type(image_processor).__name__} is not a Qwen2-VL-style image "
                             "processor (no merge_size): only the Qwen2-VL, Qwen2.5-VL and "
                             "Qwen3-VL families are supported")
        ids = {}
        unknown = getattr(tokenizer, "unk_token_id", None)
        for token in (VISION_START, IMAGE_TOKEN, VISION_END):
            token_id = tokenizer.convert_tokens_to_ids(token)
            if token_id is None or token_id == unknown:
                raise ValueError(f"the tokenizer has no {token} token: not a Qwen-VL tokenizer")
            ids[token] = int(token_id)
        if min_pixels < 0 or max_pixels < max(1, min_pixels):
            raise ValueError(f"image pixel bounds must be 0 <= min_pixels <= max_pixels, got "
                             f"{min_pixels}, {max_pixels}")
        self.image_processor = image_processor
        self.image_token_id = ids[IMAGE_TOKEN]
        self.min_pixels = min_pixels
        self.max_pixels = max_pixels
        self.merge_length = int(image_processor.merge_size) ** 2

    def prepared(self, image: np.ndarray) -> np.ndarray:
        """``image`` as the image processor receives it (:func:`resize_like_verl_agent`)."""
        return resize_like_verl_agent(image, min_pixels=self.min_pixels,
                                      max_pixels=self.max_pixels)

    def encode(self, images: Sequence[np.ndarray]) -> VisionInputs:
        """The pixel inputs of ``images`` (each (H, W, 3) uint8), in order.

        Raises:
            ValueError: no images, or one that is not (H, W, 3) uint8.
        """
        if not images:
            raise ValueError("encode() needs at least one image")
        prepared = [self.prepared(image) for image in images]
        encoded = self.image_processor(images=prepared, return_tensors="np")
        return VisionInputs(
            pixel_values=np.asarray(encoded["pixel_values"], dtype=np.float32),
            image_grid_thw=np.asarray(encoded["image_grid_thw"], dtype=np.int64))

    def token_counts(self, inputs: VisionInputs) -> list[int]:
        """Image tokens each image of ``inputs`` takes in the prompt."""
        return [int(np.prod(grid)) // self.merge_length for grid in inputs.image_grid_thw]

    def placeholder(self, count: int) -> str:
        """The text an image of ``count`` image tokens is written as in the prompt."""
        return VISION_START + IMAGE_TOKEN * count + VISION_END

    def collapsed(self, token_ids: Sequence[int]) -> list[int]:
        """``token_ids`` with each image's run of image tokens cut to one, the form
        servers and vLLM expand themselves (``<|vision_start|><|image_pad|><|vision_end|>``
        per image)."""
        out: list[int] = []
        for token in token_ids:
            if token == self.image_token_id and out and out[-1] == self.image_token_id:
                continue
            out.append(int(token))
        return out

    def pixel_bounds(self) -> dict[str, int]:
        """The image processor's pixel bounds as ``{"min_pixels", "max_pixels"}`` (what
        vLLM's ``mm_processor_kwargs`` take for the Qwen-VL families; empty when the
        processor does not say)."""
        size = getattr(self.image_processor, "size", None) or {}
        bounds = {"min_pixels": size.get("shortest_edge") or getattr(
                      self.image_processor, "min_pixels", None),
                  "max_pixels": size.get("longest_edge") or getattr(
                      self.image_processor, "max_pixels", None)}
        return {key: int(value) for key, value in bounds.items() if value}

    def tensors(self, rows: Sequence[Sequence[np.ndarray]], device: Any) -> dict[str, Any]:
        """``pixel_values`` (float32) and ``image_grid_thw`` tensors of a batch whose row
        ``i`` shows ``rows[i]``'s images (rows without images add none), row after row:
        the order in which the model fills the image tokens of a batch. Empty when no row
        has an image."""
        import torch

        images = [image for row in rows for image in row]
        if not images:
            return {}
        inputs = self.encode(images)
        return {"pixel_values": torch.as_tensor(inputs.pixel_values, device=device),
                "image_grid_thw": torch.as_tensor(inputs.image_grid_thw, device=device)}


def png_data_url(image: np.ndarray) -> str:
    """``image`` as a ``data:image/png;base64,...`` URL (the OpenAI chat format's
    ``image_url``)."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(image)).decode("ascii")
