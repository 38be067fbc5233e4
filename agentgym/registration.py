"""Registration of the ``AgentGym/*`` ids: data, with lazy ``"module:Class"`` entry points.

Nothing heavy is imported here: an env's module (and the engine behind it) is imported
only when ``gym.make`` builds that env.
"""

from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Any

import gymnasium as gym

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


def env_creator(env_id: str) -> Any:
    """The class (or function) ``gym.make(env_id)`` builds the env with; its module is
    imported, no env is built.

    Raises:
        gymnasium.error.Error: ``env_id`` is not registered.
    """
    from gymnasium.envs.registration import load_env_creator

    entry_point = gym.spec(env_id).entry_point
    return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point


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
