"""ALFWorld for AgentGym: ``gym.make("AgentGym/ALFWorld-v0")``.

Light on import: alfworld, textworld and fast-downward load only when an env resets
(:mod:`agentgym.alfworld.engine`). Modules: :mod:`~agentgym.alfworld.env` (the
``TextEnv``), :mod:`~agentgym.alfworld.data` (finding games), :mod:`~agentgym.alfworld.engine`
(the cached TextWorld-PDDL engine), ``generate`` (generated games, the offline default).
"""

from agentgym.alfworld.data import OFFICIAL_SPLITS, TASK_TYPES

__all__ = ["OFFICIAL_SPLITS", "TASK_TYPES"]
