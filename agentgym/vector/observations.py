"""Observations of a vector env: Gymnasium's batched layout, and the per-env list.

A text env's observations batch as a tuple of ``num_envs`` strings (``batch_space`` of a
text space is a ``Tuple``). A visual env's ``Dict`` of ``"text"`` and ``"image"``
(``agentgym.visual``) batches as Gymnasium batches any ``Dict`` space
(``gymnasium.vector.utils.concatenate``, what ``SyncVectorEnv`` returns):

    {"image": (num_envs, H, W, 3) uint8 array, "text": (str, ..., str)}

so a batch always lies in the vector env's ``observation_space``
(``batch_space(single_observation_space, num_envs)``). :func:`observation_rows` splits a
batch of either layout back into one observation per env, as the envs returned them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector.utils import concatenate, create_empty_array


def batch_observations(space: gym.Space, observations: Sequence[Any]) -> Any:
    """The batch of one observation per env, in ``batch_space(space, n)``.

    Args:
        space: one env's observation space.
        observations: ``n`` observations of ``space``.

    Returns:
        For a ``Dict`` space, a dict of batches (a new array per ``Box`` entry, so the
        caller may keep or change it); otherwise the tuple of the observations.
    """
    if isinstance(space, gym.spaces.Dict):
        return concatenate(space, list(observations),
                           create_empty_array(space, len(observations)))
    return tuple(observations)


def observation_rows(observations: Any, num_envs: int) -> list[Any]:
    """One observation per env from a vector env's batch (:func:`batch_observations`).

    Args:
        observations: a tuple of ``num_envs`` observations, or a dict of batches whose
            values each hold ``num_envs`` items (the ``Dict`` layout).
        num_envs: the number of envs.

    Returns:
        ``num_envs`` observations: the tuple's items, or for the ``Dict`` layout one dict
        per env whose values are that env's items (an image is a view of the batch's
        array, shape ``(H, W, 3)``).

    Raises:
        ValueError: a batch that does not hold ``num_envs`` observations.
    """
    if isinstance(observations, Mapping):
        rows: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        for key, values in observations.items():
            if len(values) != num_envs:
                raise ValueError(f"observation batch key {key!r} holds {len(values)} items "
                                 f"for {num_envs} envs")
            for index in range(num_envs):
                rows[index][key] = values[index]
        return rows
    rows_list = list(observations)
    if len(rows_list) != num_envs:
        raise ValueError(f"the observation batch holds {len(rows_list)} items for "
                         f"{num_envs} envs")
    return rows_list
