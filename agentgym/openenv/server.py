"""Any registered ``AgentGym/*`` env as an OpenEnv server, built with OpenEnv's own library.

:class:`AgentGymEnvironment` is an ``openenv.core.env_server.Environment`` around one
``gym.make(env_id, **env_kwargs)``; :func:`create_app` hands it to OpenEnv's
``create_fastapi_app``, which serves ``/ws`` (one session per WebSocket, the path
OpenEnv's ``EnvClient`` uses), ``/reset``, ``/step``, ``/state``, ``/schema``,
``/metadata`` and ``/health``.

- Sessions: each WebSocket gets its own env instance, built on the session's first
  ``reset``; OpenEnv closes it (``env.close()``) when the client disconnects or sends
  ``close``. At most ``max_sessions`` at once; one more is refused with OpenEnv's
  ``CAPACITY_REACHED`` error. ``session_timeout`` (seconds) reaps idle HTTP sessions.
- Engines run one call at a time per process (a lock around ``make`` / ``reset`` /
  ``step`` / ``close``): ALFWorld's planner rewrites ``sys.argv`` and ``sys.stdout`` and
  must never run in two threads at once, and env steps are GIL-bound Python anyway. For
  throughput, run several servers (processes) and spread clients over them.
- Text only: a visual env (a ``Dict`` observation of text and an image) is refused in one
  line (``ValueError``) when the app or a session is made, before the env is built; an
  env that turns out to observe anything but ``str`` is refused at its first ``reset``.
- Errors: a malformed message or action gets OpenEnv's error form
  (``{"type": "error", "data": {"message", "code"}}`` over WebSocket, 422 over HTTP);
  ``step`` before ``reset`` gets ``EXECUTION_ERROR`` over WebSocket and 409 over
  stateless HTTP (where every request sees a fresh env). Any action text is executed by
  the env, which answers a bad one with feedback and ``valid_action=False``.
"""

from __future__ import annotations

import functools
import threading
import uuid
from typing import Any

import gymnasium as gym
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.env_server import ConcurrencyConfig, Environment, create_fastapi_app
from openenv.core.env_server.types import EnvironmentMetadata

from agentgym.openenv.codec import check_text_env, info_to_json, observation_text
from agentgym.openenv.models import TextAction, TextObservation, TextState
from agentgym.registration import ENTRY_POINTS

DEFAULT_MAX_SESSIONS = 8
"""Concurrent WebSocket sessions (env instances) one server holds by default."""

_ENGINE_LOCK = threading.RLock()


class ResetNeededError(RuntimeError):
    """``step`` or ``state`` of a session whose env has not been reset."""


class AgentGymEnvironment(Environment[TextAction, TextObservation, TextState]):
    """One session's env: OpenEnv's ``Environment`` around ``gym.make(env_id, **env_kwargs)``.

    The gym env is built on the first :meth:`reset` (so OpenEnv's ``/metadata`` and
    ``/schema`` probes cost nothing) and closed by :meth:`close`.

    Args:
        env_id: a registered ``AgentGym/*`` id.
        env_kwargs: keyword arguments for ``gym.make``.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None):
        super().__init__()
        if env_id not in gym.registry:
            raise ValueError(f"unknown env id {env_id!r}; registered: {sorted(ENTRY_POINTS)}")
        check_text_env(env_id)
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self._env: gym.Env | None = None
        self._state = TextState(env_id=env_id)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        **kwargs: Any,
    ) -> TextObservation:
        """Start an episode: ``env.reset(seed=seed, options={"task_id": task_id})``.

        ``task_id`` plays that task (else the seed picks one, as in gym). Unknown keyword
        arguments are refused, not ignored, so a typo never plays an unintended task.
        """
        if kwargs:
            raise ValueError(f"unknown reset arguments {sorted(kwargs)}; "
                             "accepted: seed, episode_id, task_id")
        options = {"task_id": task_id} if task_id is not None else None
        with _ENGINE_LOCK:
            if self._env is None:
                self._env = gym.make(self.env_id, **self.env_kwargs)
            observation, info = self._env.reset(seed=seed, options=options)
        self._state = TextState(
            env_id=self.env_id,
            episode_id=episode_id or uuid.uuid4().hex,
            step_count=0,
            task_id=info["task_id"],
        )
        return TextObservation(text=observation_text(self.env_id, observation), reward=None,
                               done=False, info=info_to_json(info))

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        """``env.step(action.text)``. ``timeout_s`` is not enforced (OpenEnv passes it on)."""
        if self._env is None:
            raise ResetNeededError(f"{self.env_id}: call reset before step")
        with _ENGINE_LOCK:
            observation, reward, terminated, truncated, info = self._env.step(action.text)
        state = self._state
        self._state = state.model_copy(update={
            "step_count": state.step_count + 1,
            "terminated": bool(terminated),
            "truncated": bool(truncated),
        })
        return TextObservation(
            text=observation_text(self.env_id, observation),
            reward=float(reward),
            done=bool(terminated or truncated),
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=info_to_json(info),
        )

    @property
    def state(self) -> TextState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=self.env_id,
            description=f"AgentGym text environment {self.env_id} "
                        f"(gym.make kwargs: {self.env_kwargs or 'defaults'})",
            version=_agentgym_version(),
        )

    def close(self) -> None:
        """Close the gym env (OpenEnv calls this when the session ends)."""
        if self._env is not None:
            with _ENGINE_LOCK:
                self._env.close()
            self._env = None


def _agentgym_version() -> str:
    import agentgym

    return agentgym.__version__


def create_app(
    env_id: str,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_timeout: float | None = None,
    check_env: bool = True,
    **env_kwargs: Any,
) -> FastAPI:
    """The OpenEnv FastAPI app that serves ``gym.make(env_id, **env_kwargs)``.

    Args:
        env_id: a registered ``AgentGym/*`` id.
        max_sessions: concurrent WebSocket sessions (env instances), at least 1.
        session_timeout: seconds after which an idle HTTP session is reaped; ``None``
            keeps sessions until they close.
        check_env: build one env and reset it before serving, so that bad kwargs or
            missing data fail here with the env's own error, not in a client's session
            (and data caches are warm before the first client).
        **env_kwargs: passed to ``gym.make``.

    Returns:
        The app, ready for ``uvicorn.run(app, host=..., port=...)``.
    """
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
    check_text_env(env_id)  # a visual env is refused whether or not one is built here
    if check_env:
        probe = AgentGymEnvironment(env_id, env_kwargs)
        try:
            probe.reset(seed=0)
        finally:
            probe.close()
    app = create_fastapi_app(
        functools.partial(AgentGymEnvironment, env_id, env_kwargs),
        TextAction,
        TextObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=max_sessions, session_timeout=session_timeout
        ),
        env_name=env_id.split("/")[-1],
        state_cls=TextState,
    )

    async def _reset_needed(request: Request, exc: ResetNeededError) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    app.add_exception_handler(ResetNeededError, _reset_needed)
    return app
