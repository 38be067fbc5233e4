"""Vectorized text envs: :class:`TextVectorEnv`, :func:`make_vector_env`, :func:`infos_to_list`,
:func:`observation_rows`.

``TextVectorEnv`` is a ``gymnasium.vector.VectorEnv`` with autoreset disabled, groups of
envs sharing a task (``group_size``), per-env task ids, and three backends with identical
results for equal seeds: ``"sync"`` (in-process), ``"subprocess"`` (worker processes)
and ``"ray"`` (Ray actors). Dead workers, and workers that do not answer within
``step_timeout`` seconds, are restarted; their episodes end truncated with
``info["env_error"]``. See :mod:`agentgym.vector.env` for the exact semantics.

Nothing heavy is imported here: Ray is imported only by the ``"ray"`` backend.
"""

from agentgym.vector.backend import BACKENDS, DEFAULT_STEP_TIMEOUT
from agentgym.vector.env import TextVectorEnv, make_vector_env
from agentgym.vector.infos import infos_to_list
from agentgym.vector.observations import observation_rows

__all__ = ["BACKENDS", "DEFAULT_STEP_TIMEOUT", "TextVectorEnv", "infos_to_list", "make_vector_env",
           "observation_rows"]
