"""AgentGym: Gymnasium text environments for training LLM agents with RL.

``import agentgym`` registers the ``AgentGym/*`` ids and stays light: it never imports
torch, ray, faiss, alfworld or transformers. An env of one's own registers with
:func:`register` (``docs/own-env.md``) and is checked against the contract with
``python -m agentgym.check ENV_ID`` (:mod:`agentgym.check`); a plain Gymnasium text env
trains through :class:`PlainTextEnv`.
"""

from agentgym.core import INFO_KEYS, TextEnv, TextSpace, Transition
from agentgym.plain import PlainTextEnv, make_text_env
from agentgym.registration import ENTRY_POINTS, register, register_envs

register_envs()

ENV_IDS: tuple[str, ...] = tuple(ENTRY_POINTS)

__all__ = ["ENV_IDS", "INFO_KEYS", "PlainTextEnv", "TextEnv", "TextSpace", "Transition",
           "make_text_env", "register", "register_envs"]
__version__ = "0.1.0"
