"""AgentGym: Gymnasium text environments for training LLM agents with RL.

``import agentgym`` registers the ``AgentGym/*`` ids and stays light: it never imports
torch, ray, faiss, alfworld or transformers.
"""

from agentgym.core import INFO_KEYS, TextEnv, TextSpace, Transition
from agentgym.registration import ENTRY_POINTS, register_envs

register_envs()

ENV_IDS: tuple[str, ...] = tuple(ENTRY_POINTS)

__all__ = ["ENV_IDS", "INFO_KEYS", "TextEnv", "TextSpace", "Transition", "register_envs"]
__version__ = "0.1.0"
