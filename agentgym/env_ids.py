"""Env ids, as ``gym.make`` takes them: a registered id or ``"module:Env-v0"``.

:func:`find_spec` resolves either form (plain ``gym.spec`` does not take the second);
:func:`env_creator` and :func:`constructor_arguments` read what builds the env without
building it. Nothing is imported here but the module an id names.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym


class EnvIdError(gym.error.Error):
    """An env id that names no registered env (or whose module cannot be imported); the
    message is one line that says what to do."""


def find_spec(env_id: str) -> Any:
    """The ``EnvSpec`` of ``env_id``, which may be Gymnasium's import form
    ``"module:Env-v0"`` (the module is imported first, as ``gym.make`` does: it registers
    the id). Plain ``gym.spec`` does not take that form.

    Raises:
        EnvIdError: the module cannot be imported, or the id is not registered (one line:
            the registered AgentGym ids, and how to name an env of one's own).
    """
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise EnvIdError(
                f"env id {env_id!r}: the module {module!r} cannot be imported "
                f"({type(error).__name__}: {error}); it must be importable from here (the "
                "current folder, $PYTHONPATH, or an installed package)") from None
    spec = gym.registry.get(name)
    if spec is not None:
        return spec
    if module:
        raise EnvIdError(f"env id {env_id!r}: importing {module!r} registered no env "
                         f"{name!r} (it should call agentgym.register or gym.register "
                         "with that id)")
    known = ", ".join(sorted(k for k in gym.registry if k.startswith("AgentGym/")))
    raise EnvIdError(
        f"unknown env id {env_id!r}; registered AgentGym ids: {known}; an env of your own: "
        f"name the module that registers it, as gym.make takes it: 'your_module:{name}' "
        "(docs/own-env.md)")


def env_creator(env_id: str) -> Any:
    """The class (or function) ``gym.make(env_id)`` builds the env with; its module is
    imported, no env is built. ``env_id`` may be ``"module:Env-v0"`` (:func:`find_spec`).

    Raises:
        EnvIdError: ``env_id`` is not registered (a ``gymnasium.error.Error``).
    """
    from gymnasium.envs.registration import load_env_creator

    entry_point = find_spec(env_id).entry_point
    return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point


def constructor_arguments(env_id: str) -> tuple[str, ...] | None:
    """The keyword arguments ``gym.make(env_id, ...)`` passes on to the env's class, read
    from its constructor's signature (the class's module is imported, no env is built).

    Returns:
        The argument names in signature order, or ``None`` when the entry point takes
        ``**kwargs`` (any name may be right) or its signature cannot be read.

    Raises:
        gymnasium.error.Error: ``env_id`` is not registered.
    """
    import inspect

    creator = env_creator(env_id)
    try:
        parameters = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return tuple(p.name for p in parameters
                 if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                               inspect.Parameter.POSITIONAL_OR_KEYWORD))
