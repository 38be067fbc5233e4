"""Registration of the ``AgentGym/*`` ids: data, with lazy ``"module:Class"`` entry points.

Nothing heavy is imported here: an env's module (and the engine behind it) is imported
only when ``gym.make`` builds that env.
"""

from __future__ import annotations

from types import MappingProxyType

import gymnasium as gym

ENTRY_POINTS = MappingProxyType(
    {
        "AgentGym/ALFWorld-v0": "agentgym.alfworld.env:ALFWorldEnv",
        "AgentGym/WebShop-v0": "agentgym.webshop.env:WebShopEnv",
        "AgentGym/SearchQA-v0": "agentgym.searchqa.env:SearchQAEnv",
        "AgentGym/Scripted-v0": "agentgym.scripted:ScriptedTextEnv",
    }
)
"""Every registered id and the class behind it."""

VECTOR_ENTRY_POINT = "agentgym.vector:make_vector_env"


def register_envs() -> None:
    """Register every ``AgentGym/*`` id with Gymnasium (idempotent)."""
    for env_id, entry_point in ENTRY_POINTS.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point=entry_point,
            vector_entry_point=VECTOR_ENTRY_POINT,
            # Each env enforces its own ``max_steps`` and reports ``truncated`` itself.
            max_episode_steps=None,
        )
