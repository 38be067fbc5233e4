"""JSON forms of an env's ``info`` and anchors, for clients in other processes, and the
check that an observation is text.

Pure functions, no OpenEnv import: the server sends exactly :func:`info_to_json` of what
``gym.make(...)`` returns, and tests compare the two. The wire format carries text
observations only: a visual env (``agentgym.visual``, a ``Dict`` of text and an image) is
refused in one line (:func:`check_text_env`, :func:`observation_text`).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from agentgym.core import INFO_KEYS


def _refusal(env_id: str) -> str:
    return (f"agentgym.openenv serves text observations only: {env_id} observes a dict of "
            "text and an image (a visual env); play it in-process (gym.make, "
            "agentgym.vector)")


def check_text_env(env_id: str) -> None:
    """Refuse, before building it, an env id whose class is a visual env.

    Raises:
        ValueError: the id's entry point is an :class:`agentgym.visual.VisualEnv` (one line).
    """
    import gymnasium as gym

    from agentgym.visual import VisualEnv

    spec = gym.registry.get(env_id)
    if spec is None or not isinstance(spec.entry_point, str):
        return
    try:
        creator = gym.envs.registration.load_env_creator(spec.entry_point)
    except (ImportError, AttributeError, gym.error.Error):
        return  # gym.make reports it when the env is built
    if isinstance(creator, type) and issubclass(creator, VisualEnv):
        raise ValueError(_refusal(env_id))


def observation_text(env_id: str, observation: Any) -> str:
    """``observation`` as the wire's text.

    Raises:
        ValueError: it is not a ``str`` (a visual env's dict; one line).
    """
    if not isinstance(observation, str):
        raise ValueError(_refusal(env_id))
    return observation


def to_json(value: Any) -> Any:
    """``value`` as plain JSON data (dict / list / str / int / float / bool / None).

    Tuples and lists become lists, sets and frozensets sorted lists (sorted by their JSON
    text, so the order never depends on Python's string hashing), NumPy scalars and arrays
    Python numbers and lists, mapping keys strings. Non-finite floats are kept (JSON
    encoders write them as ``NaN`` / ``Infinity``).

    Raises:
        TypeError: for a value with no JSON form (an env put an object in its info).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return [to_json(v) for v in value.tolist()]
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_json(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, ensure_ascii=False))
    raise TypeError(f"info value of type {type(value).__name__} has no JSON form: {value!r}")


def anchor_key(anchor: Hashable) -> str:
    """A string key of an anchor: equal anchors give equal keys, different ones different.

    A ``str`` anchor (``anchor="observation"``, and ALFWorld's state digest) is its own
    key. Any other anchor (the tuples of WebShop's and Search-QA's ``"state"`` mode) is
    its canonical JSON text (:func:`to_json`, sorted keys, no spaces). One env's anchors
    are all strings or all structured, so keys never collide within an env.
    """
    if isinstance(anchor, str):
        return anchor
    return json.dumps(to_json(anchor), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def info_to_json(info: Mapping[str, Any]) -> dict[str, Any]:
    """An env's ``info`` as JSON data, with ``anchor`` replaced by :func:`anchor_key`.

    Every key of :data:`~agentgym.core.INFO_KEYS` and every env-specific key is kept;
    ``admissible_actions`` becomes a list.
    """
    missing = [key for key in INFO_KEYS if key not in info]
    if missing:
        raise KeyError(f"info lacks the contract keys {missing}")
    out = {str(k): to_json(v) for k, v in info.items() if k != "anchor"}
    out["anchor"] = anchor_key(info["anchor"])
    return out

