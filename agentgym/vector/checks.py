"""What :class:`~agentgym.vector.TextVectorEnv` accepts: its constructor's arguments, the
sub-envs' spaces, a batch of actions and the ``reset_mask`` / ``task_ids`` reset options.

Each check raises the error the vector env's docstrings name (``ValueError``,
``TypeError``, ``RuntimeError``) with a message that says what was expected.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym.vector.backend import BACKENDS, check_step_timeout
from agentgym.vector.host import EnvSpaces


def check_arguments(env_fns: list[Callable[[], gym.Env]], group_size: Any, backend: str,
                    num_workers: Any, step_timeout: float | None
                    ) -> tuple[int, float | None]:
    """Check the constructor's arguments (see :class:`~agentgym.vector.TextVectorEnv`).

    Returns:
        ``(num_workers, step_timeout)``: the worker count (default
        ``min(num_envs, os.cpu_count())``) and the checked timeout.

    Raises:
        ValueError: no or non-callable ``env_fns``, a bad ``group_size``, ``backend``,
            ``num_workers`` or ``step_timeout``.
    """
    num_envs = len(env_fns)
    if num_envs == 0:
        raise ValueError("env_fns is empty")
    if not all(callable(fn) for fn in env_fns):
        raise ValueError("env_fns must be zero-argument callables returning envs")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if num_envs % group_size != 0:
        raise ValueError(
            f"the number of envs ({num_envs}) must be a multiple of group_size ({group_size})"
        )
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if num_workers is None:
        num_workers = min(num_envs, os.cpu_count() or 1)
    elif isinstance(num_workers, bool) or not isinstance(num_workers, int):
        raise ValueError(f"num_workers must be an int or None, got {num_workers!r}")
    elif not 1 <= num_workers <= num_envs:
        raise ValueError(f"num_workers must be in [1, {num_envs}], got {num_workers}")
    return num_workers, check_step_timeout(step_timeout, backend)


def check_spaces(spaces: Sequence[EnvSpaces]) -> EnvSpaces:
    """The first env's spaces, after checking that every env has the same.

    Raises:
        RuntimeError: an env's observation or action space differs from env 0's.
    """
    first = spaces[0]
    for i, env_spaces in enumerate(spaces):
        if env_spaces.observation_space != first.observation_space:
            raise RuntimeError(
                f"env {i} has observation space {env_spaces.observation_space}, "
                f"env 0 has {first.observation_space}"
            )
        if env_spaces.action_space != first.action_space:
            raise RuntimeError(
                f"env {i} has action space {env_spaces.action_space}, "
                f"env 0 has {first.action_space}"
            )
    return first


def check_actions(actions: Any, num_envs: int) -> Sequence[Any]:
    """``actions`` when it is a sequence (list, tuple, 1-D array) of ``num_envs`` items.

    Raises:
        ValueError: it is not.
    """
    if isinstance(actions, np.ndarray):
        if actions.ndim != 1:
            raise ValueError(f"actions must be 1-D, got an array of shape {actions.shape}")
    elif isinstance(actions, (str, bytes)) or not isinstance(actions, Sequence):
        raise ValueError(
            f"actions must be a sequence of {num_envs} actions (list, tuple or "
            f"1-D array), got {type(actions).__name__}"
        )
    if len(actions) != num_envs:
        raise ValueError(f"expected {num_envs} actions, got {len(actions)}")
    return actions


def pop_reset_mask(options: dict[str, Any] | None, num_envs: int) -> np.ndarray:
    """Take ``options["reset_mask"]`` out of ``options``: a bool array ``(num_envs,)`` with
    at least one ``True``; every env when there is none.

    Raises:
        TypeError: the mask is not a bool NumPy array.
        ValueError: it has the wrong shape or no ``True``.
    """
    if options is None or "reset_mask" not in options:
        return np.ones(num_envs, dtype=np.bool_)
    mask = options.pop("reset_mask")
    if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
        raise TypeError("options['reset_mask'] must be a numpy array of dtype bool")
    if mask.shape != (num_envs,):
        raise ValueError(
            f"options['reset_mask'] must have shape ({num_envs},), got {mask.shape}"
        )
    if not mask.any():
        raise ValueError("options['reset_mask'] must contain at least one True")
    return mask


def pop_task_ids(options: dict[str, Any] | None, num_envs: int) -> list[Any] | None:
    """Take ``options["task_ids"]`` out of ``options``: one task id (or ``None``) per env;
    ``None`` when there is none.

    Raises:
        ValueError: it is not a sequence of ``num_envs`` entries.
    """
    if options is None or "task_ids" not in options:
        return None
    task_ids = options.pop("task_ids")
    if isinstance(task_ids, (str, bytes)) or not isinstance(task_ids, (Sequence, np.ndarray)):
        raise ValueError(
            f"options['task_ids'] must be a sequence of {num_envs} task ids (or None)"
        )
    if len(task_ids) != num_envs:
        raise ValueError(
            f"options['task_ids'] has {len(task_ids)} entries, expected {num_envs}"
        )
    return list(task_ids)
