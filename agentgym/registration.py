"""Registration of the ``AgentGym/*`` ids: data, with lazy ``"module:Class"`` entry points.

Nothing heavy is imported here: an env's module (and the engine behind it) is imported
only when ``gym.make`` builds that env.

Envs of one's own join the same way: :func:`register` (``agentgym.register``) registers
an id with Gymnasium and AgentGym's vector entry point, so ``gym.make_vec(id,
num_envs, group_size=...)`` builds a :class:`~agentgym.vector.TextVectorEnv` of it. Every
function here that takes an env id also takes Gymnasium's import form
``"module:Env-v0"`` (``gym.make``'s: the module is imported first, and registers the id),
:func:`find_spec`.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from types import MappingProxyType
from typing import Any

import gymnasium as gym

from agentgym.env_ids import EnvIdError, constructor_arguments, env_creator, find_spec

__all__ = ["ENTRY_POINTS", "EnvIdError", "constructor_arguments", "data_problems",
           "env_creator", "find_spec", "invalid_action_penalty", "is_agentgym_env", "register",
           "register_envs", "tag_actions", "task_source"]

ENTRY_POINTS = MappingProxyType(
    {
        "AgentGym/ALFWorld-v0": "agentgym.alfworld.env:ALFWorldEnv",
        "AgentGym/WebShop-v0": "agentgym.webshop.env:WebShopEnv",
        "AgentGym/SearchQA-v0": "agentgym.searchqa.env:SearchQAEnv",
        "AgentGym/Scripted-v0": "agentgym.scripted:ScriptedTextEnv",
        "AgentGym/KeyDoor-v0": "agentgym.keydoor:KeyDoorEnv",
        "AgentGym/Sokoban-v0": "agentgym.sokoban.env:SokobanEnv",
        "AgentGym/SokobanVisual-v0": "agentgym.sokoban.visual:SokobanVisualEnv",
        "AgentGym/EZPoints-v0": "agentgym.gym_cards.env:EZPointsEnv",
        "AgentGym/NumberLine-v0": "agentgym.gym_cards.env:NumberLineEnv",
        "AgentGym/Blackjack-v0": "agentgym.gym_cards.env:BlackjackEnv",
        "AgentGym/FrozenLake-v0": "agentgym.frozenlake:FrozenLakeEnv",
    }
)
"""Every registered id and the class behind it."""

TAG_ACTION_FORMATS = MappingProxyType({"searchqa": "agentgym.searchqa.tags:TAG_ACTIONS"})
"""The answer formats of envs whose actions are tags of their own
(:class:`agentgym.core.TagActions`), by name, each imported only when asked for."""


def _make_vector_env(env_id: str, num_envs: int = 1, **kwargs: Any):
    """The vector entry point of every id: ``agentgym.vector.make_vector_env``.

    ``gym.make_vec`` passes ``num_envs`` and kwargs but not the id, so it is bound here.
    """
    from agentgym.vector import make_vector_env

    return make_vector_env(env_id, num_envs, **kwargs)


def register_envs() -> None:
    """Register every ``AgentGym/*`` id with Gymnasium (idempotent)."""
    for env_id, entry_point in ENTRY_POINTS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point=entry_point,
            vector_entry_point=functools.partial(_make_vector_env, env_id),
            # Each env enforces its own ``max_steps`` and reports ``truncated`` itself.
            max_episode_steps=None,
        )


def register(id: str, entry_point: Any, *, kwargs: dict[str, Any] | None = None,
             **options: Any) -> None:
    """Register a text env of your own with Gymnasium, as ``gym.register`` does, and with
    AgentGym's vector entry point, so that ``gym.make_vec(id, num_envs, group_size=G,
    backend=...)`` builds a :class:`~agentgym.vector.TextVectorEnv` (groups, per-env task
    ids, worker backends) instead of Gymnasium's ``SyncVectorEnv``, which takes no
    ``group_size``. Ids registered with plain ``gym.register`` get Gymnasium's vectorizers
    from ``gym.make_vec``; :func:`agentgym.vector.make_vector_env` builds ours for any id.

    The vector env's workers (``backend="subprocess"`` or ``"ray"``) are new processes:
    they build the env from ``"<module>:<id>"``, where ``<module>`` is the module that
    called :func:`register`, so that importing it registers the id there too: call it at
    the top level of that module (a script run as ``__main__`` is imported again by the
    workers anyway).

    Registering an id again with the same entry point, kwargs and options does nothing
    (a module imported twice: the spec, and the module its workers import, stay as they
    are); with anything else changed it replaces the spec, as ``gym.register`` does (which
    warns that it overrides it).

    Args:
        id: the env id, ``[namespace/]name-v<version>`` (e.g. ``"MyGames/Guess-v0"``).
        entry_point: the env's class, or ``"module:Class"`` (imported at ``gym.make``).
        kwargs: default constructor arguments (``gym.make``'s own override them).
        **options: other ``gym.register`` arguments (``max_episode_steps``, ...);
            ``vector_entry_point`` is AgentGym's.
    """
    if "vector_entry_point" in options:
        raise TypeError("agentgym.register sets the vector entry point itself; use "
                        "gym.register for a vector entry point of your own")
    existing = gym.registry.get(id)
    wanted = gym.envs.registration.EnvSpec(id=id, entry_point=entry_point,
                                           kwargs=dict(kwargs or {}), **options)
    if existing is not None and _same_registration(existing, wanted):
        return
    caller = sys._getframe(1).f_globals.get("__name__", "__main__")
    bound = id if caller in ("__main__", "__mp_main__") else f"{caller}:{id}"
    gym.register(id=id, entry_point=entry_point, kwargs=kwargs,
                 vector_entry_point=functools.partial(_make_vector_env, bound), **options)


def _same_registration(spec: Any, wanted: Any) -> bool:
    """Whether two ``EnvSpec`` agree on every field but the vector entry point (which
    :func:`register` binds to the module that registered the id first)."""
    return all(getattr(spec, f.name) == getattr(wanted, f.name)
               for f in dataclasses.fields(wanted) if f.name != "vector_entry_point")


def is_agentgym_env(env_id: str) -> bool:
    """Whether ``env_id`` is one of AgentGym's own ids (:data:`ENTRY_POINTS`, with or
    without a module in front)."""
    return env_id.rpartition(":")[2] in ENTRY_POINTS


def invalid_action_penalty(env_id: str) -> float:
    """The invalid-action penalty ``env_id``'s env declares
    (:attr:`agentgym.core.TextEnv.invalid_action_penalty`); the default of GiGPO's recipes
    for an id that is not registered or an env that declares none."""
    from agentgym.core import DEFAULT_INVALID_ACTION_PENALTY

    try:
        creator = env_creator(env_id)
    except gym.error.Error:
        return DEFAULT_INVALID_ACTION_PENALTY
    return float(getattr(creator, "invalid_action_penalty", DEFAULT_INVALID_ACTION_PENALTY))


def task_source(env_id: str, kwargs: dict[str, Any]) -> str:
    """One line saying where the tasks of ``gym.make(env_id, **kwargs)`` come from
    (:meth:`agentgym.core.TextEnv.task_source`), read without building the env."""
    try:
        declared = getattr(env_creator(env_id), "task_source", None)
    except gym.error.Error:  # not registered: nothing is declared
        declared = None
    source = declared(kwargs) if callable(declared) else None
    return source if source is not None else f"{env_id}'s own tasks"


def data_problems(env_id: str, kwargs: dict[str, Any]) -> list[str]:
    """What keeps ``gym.make(env_id, **kwargs)`` from finding its data, one line each
    (:meth:`agentgym.core.TextEnv.data_problems`), read without building the env; ``[]``
    for an env that declares no such check."""
    try:
        declared = getattr(env_creator(env_id), "data_problems", None)
    except gym.error.Error:  # not registered: nothing is declared
        declared = None
    return list(declared(kwargs)) if callable(declared) else []


def tag_actions(name: str) -> Any:
    """The :class:`~agentgym.core.TagActions` answer format named ``name`` (its module is
    imported now).

    Raises:
        KeyError: no format has that name.
    """
    from gymnasium.envs.registration import load_env_creator

    if name not in TAG_ACTION_FORMATS:
        raise KeyError(f"no answer format named {name!r}; known: "
                       f"{', '.join(sorted(TAG_ACTION_FORMATS))}")
    return load_env_creator(TAG_ACTION_FORMATS[name])
