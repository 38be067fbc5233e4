"""Infos of a vector env: Gymnasium's dict-of-arrays layout, and a list-of-dicts adapter.

Gymnasium batches per-env info dicts into one dict (``VectorEnv._add_info``): each key maps
to an array of length ``num_envs`` and a boolean mask ``"_key"`` says which envs have it.
Numbers and bools become typed arrays, other values (str, tuples, ...) object arrays,
nested dicts are batched recursively. :class:`~agentgym.vector.TextVectorEnv` keeps that
layout exactly; :func:`infos_to_list` turns it back into one dict per env for libraries
that want that (like Gymnasium's ``DictInfoToList`` wrapper, but as a plain function).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def infos_to_list(infos: Mapping[str, Any], num_envs: int) -> list[dict[str, Any]]:
    """Split batched infos into one dict per env.

    Only masked-in keys appear in an env's dict; NumPy scalars are turned back into
    Python ``bool``/``int``/``float``/``str``, so an env's dict equals the info the env
    returned (plus the keys the vector env adds, ``group_id`` and maybe ``env_error``).

    Args:
        infos: ``{key: array (num_envs, ...), "_key": bool array (num_envs,)}``, nested
            dicts allowed.
        num_envs: the number of envs.

    Returns:
        ``num_envs`` dicts.

    Raises:
        ValueError: a value or mask does not have ``num_envs`` entries.
    """
    per_env: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    for key, values in infos.items():
        if key.startswith("_") and key[1:] in infos:
            continue  # a mask
        mask = infos.get(f"_{key}")
        if mask is None:  # no mask: the key belongs to every env
            mask = np.ones(num_envs, dtype=bool)
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (num_envs,):
            raise ValueError(f"mask '_{key}' has shape {mask.shape}, expected ({num_envs},)")
        if isinstance(values, Mapping):
            nested = infos_to_list(values, num_envs)
            for i in np.flatnonzero(mask):
                per_env[i][key] = nested[i]
            continue
        if len(values) != num_envs:
            raise ValueError(f"info '{key}' has {len(values)} entries, expected {num_envs}")
        for i in np.flatnonzero(mask):
            per_env[i][key] = _to_python(values[i])
    return per_env


def _to_python(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value
