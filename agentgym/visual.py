"""Visual envs: the text contract with a picture beside the text.

A visual env is a :class:`~agentgym.core.TextEnv` whose observation is a Gymnasium
``Dict`` (:func:`visual_observation_space`):

``"text"``   the env's feedback text (``str``), as a text env's observation;
``"image"``  the current frame, an ``(H, W, 3)`` ``uint8`` array (rows top to bottom, RGB),
             of a fixed shape per env instance. Every observation holds a fresh array.

Everything else is the text contract: the same info keys at reset and every step, bad
actions never raise, actions are ``str``. Anchors: ``anchor="state"`` is the env's true
state key as in text envs; ``anchor="observation"`` is the frame's
:func:`~agentgym.images.image_anchor` (``("image", shape, digest)``: equal exactly when the
pixels are equal), as verl-agent groups visual steps by the image array; the text is not
part of it.

``render_mode="rgb_array"`` makes ``render()`` return the last frame, ``"ansi"`` the last
text.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from agentgym.core import TextEnv, TextSpace
from agentgym.images import image_anchor


def visual_observation_space(height: int, width: int) -> spaces.Dict:
    """``Dict(text=TextSpace(), image=Box(0, 255, (height, width, 3), uint8))``."""
    return spaces.Dict({
        "text": TextSpace(),
        "image": spaces.Box(0, 255, shape=(height, width, 3), dtype=np.uint8),
    })


class VisualEnv(TextEnv):
    """Base of the visual envs (see the module docstring).

    Subclasses implement :meth:`render_image` (the current frame) beside the
    :class:`~agentgym.core.TextEnv` methods, and set ``self.observation_space`` to
    :func:`visual_observation_space` of their frame size in ``__init__``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array", "ansi"],
                                          "render_fps": 1}

    def render_image(self) -> np.ndarray:
        """The current frame, a new ``(H, W, 3)`` ``uint8`` array."""
        raise NotImplementedError

    def _observe(self, text: str) -> dict[str, Any]:
        return {"text": text, "image": self.render_image()}

    def observation_anchor(self, observation: Any) -> Hashable:
        """The frame's :func:`~agentgym.images.image_anchor`."""
        return image_anchor(observation["image"])

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        observation, info = super().reset(seed=seed, options=options)
        return _copied(observation), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        observation, *rest = super().step(action)
        return (_copied(observation), *rest)  # type: ignore[return-value]

    def render(self) -> Any:
        if not self._last_observation:
            return None
        if self.render_mode == "rgb_array":
            return self._last_observation["image"].copy()
        if self.render_mode == "ansi":
            return self._last_observation["text"]
        return None


def _copied(observation: dict[str, Any]) -> dict[str, Any]:
    """The observation with its own image array (the env keeps the last one)."""
    return {"text": observation["text"], "image": observation["image"].copy()}
