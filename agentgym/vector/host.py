"""The envs of one worker, and what every backend does with them.

An :class:`EnvHost` owns a few envs and runs ``reset``/``step`` requests on them. The three
backends only move requests and results around: ``"sync"`` calls one host in-process,
``"subprocess"`` runs one host per worker process, ``"ray"`` one host per Ray actor. So
the per-env behaviour -- result normalisation, exception containment, rebuilding a
broken env -- is written once, here, and the backends give identical results.

Exception containment: an exception that escapes an env's ``reset`` or ``step`` becomes an
:class:`EnvFailure` for that env only. The env instance is closed and dropped; it is
rebuilt from its ``env_fn`` at its next reset, so a half-broken env never serves another
episode. The other envs of the host are not touched.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

EnvFn = Callable[[], gym.Env]
StepResult = tuple[str, float, bool, bool, dict[str, Any]]
"""``(observation, reward, terminated, truncated, info)`` of one env."""
ResetResult = tuple[str, dict[str, Any]]
"""``(observation, info)`` of one env."""
ResetRequest = tuple[int, "int | None", "dict[str, Any] | None"]
"""``(local env index, seed, options)``."""
StepRequest = tuple[int, Any]
"""``(local env index, action)``."""

MAX_TRACEBACK_CHARS = 4000
"""Tracebacks in ``env_error`` messages are cut to their last this-many characters."""


@dataclass(frozen=True)
class EnvFailure:
    """An env could not answer a request: it raised, or its worker died.

    Attributes:
        message: what happened, for ``info["env_error"]`` (includes the traceback when
            there is one).
    """

    message: str


@dataclass(frozen=True)
class EnvSpaces:
    """What the vector env needs to know about one sub-env to build its batched spaces."""

    observation_space: gym.Space
    action_space: gym.Space
    metadata: dict[str, Any]
    render_mode: str | None


def format_exception(error: BaseException, where: str) -> str:
    """``"<where> raised <Type>: <message>"`` followed by the (cut) traceback."""
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    if len(trace) > MAX_TRACEBACK_CHARS:
        trace = "..." + trace[-MAX_TRACEBACK_CHARS:]
    return f"{where} raised {type(error).__name__}: {error}\n{trace}"


class EnvHost:
    """A few envs, addressed by local index ``0 .. len(env_fns) - 1``.

    Nothing is built in the constructor; :meth:`start` builds the envs.

    Args:
        env_fns: zero-argument callables that build the envs.
        env_indices: the global (vector env) index of each env, used in messages.
    """

    def __init__(self, env_fns: Sequence[EnvFn], env_indices: Sequence[int]):
        if len(env_fns) != len(env_indices):
            raise ValueError("env_fns and env_indices must have the same length")
        self._env_fns = list(env_fns)
        self._env_indices = list(env_indices)
        self._envs: list[gym.Env | None] = [None] * len(self._env_fns)

    def start(self) -> list[EnvSpaces]:
        """Build every env; return their spaces. Raises whatever an ``env_fn`` raises."""
        try:
            for j, env_fn in enumerate(self._env_fns):
                self._envs[j] = env_fn()
        except BaseException:
            self.close()
            raise
        return [self._spaces(env) for env in self._envs if env is not None]

    def pid(self) -> int:
        """The id of the process that runs these envs."""
        return os.getpid()

    def reset(self, requests: Sequence[ResetRequest]) -> list[ResetResult | EnvFailure]:
        """Reset the requested envs, rebuilding broken ones first."""
        results: list[ResetResult | EnvFailure] = []
        for j, seed, options in requests:
            env = self._envs[j]
            if env is None:
                try:
                    env = self._envs[j] = self._env_fns[j]()
                except Exception as error:  # the env_fn is user code: contain it
                    results.append(EnvFailure(format_exception(error, self._where(j, "env_fn"))))
                    continue
            try:
                observation, info = env.reset(seed=seed, options=options)
                results.append((observation, dict(info)))
            except Exception as error:  # user env code: contain it (see module docstring)
                results.append(self._fail(j, error, "reset()"))
        return results

    def step(self, requests: Sequence[StepRequest]) -> list[StepResult | EnvFailure]:
        """Step the requested envs (the caller never steps a finished env)."""
        results: list[StepResult | EnvFailure] = []
        for j, action in requests:
            env = self._envs[j]
            if env is None:
                results.append(EnvFailure(f"{self._where(j, 'step()')}: env is broken, reset it"))
                continue
            try:
                observation, reward, terminated, truncated, info = env.step(action)
                results.append(
                    (observation, float(reward), bool(terminated), bool(truncated), dict(info))
                )
            except Exception as error:  # user env code: contain it (see module docstring)
                results.append(self._fail(j, error, "step()"))
        return results

    def close(self) -> None:
        """Close every env (errors while closing are swallowed: nothing is left to save)."""
        for j, env in enumerate(self._envs):
            self._envs[j] = None
            if env is not None:
                try:
                    env.close()
                except Exception:  # best effort at shutdown
                    pass

    def _fail(self, j: int, error: Exception, method: str) -> EnvFailure:
        failure = EnvFailure(format_exception(error, self._where(j, method)))
        env, self._envs[j] = self._envs[j], None
        if env is not None:
            try:
                env.close()
            except Exception:  # the env is already broken
                pass
        return failure

    def _where(self, j: int, method: str) -> str:
        return f"env {self._env_indices[j]} {method}"

    @staticmethod
    def _spaces(env: gym.Env) -> EnvSpaces:
        return EnvSpaces(
            observation_space=env.observation_space,
            action_space=env.action_space,
            metadata=dict(env.metadata),
            render_mode=env.render_mode,
        )
