"""The ``"sync"`` backend: every env in this process, stepped one after the other.

An exception escaping an env is contained (see :mod:`agentgym.vector.host`); a crash of
the interpreter itself (segfault, SIGKILL) takes the whole program down, as with any
in-process code -- use ``"subprocess"`` when envs can crash.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym.vector.host import EnvFailure, EnvFn, EnvHost, ResetResult, StepResult


class SyncBackend:
    """All envs in one in-process :class:`~agentgym.vector.host.EnvHost`.

    Args:
        env_fns: zero-argument callables building the envs.

    Raises:
        RuntimeError: an ``env_fn`` raised (chained to its exception).
    """

    def __init__(self, env_fns: Sequence[EnvFn]):
        self._host = EnvHost(env_fns, range(len(env_fns)))
        try:
            self.spaces = self._host.start()
        except Exception as error:  # same error type as the worker backends
            raise RuntimeError(
                f"could not build the envs: {type(error).__name__}: {error}"
            ) from error

    def reset(
        self, requests: Mapping[int, tuple[int | None, dict[str, Any] | None]]
    ) -> dict[int, ResetResult | EnvFailure]:
        indices = list(requests)
        results = self._host.reset([(i, *requests[i]) for i in indices])
        return dict(zip(indices, results, strict=True))

    def step(self, requests: Mapping[int, Any]) -> dict[int, StepResult | EnvFailure]:
        indices = list(requests)
        results = self._host.step([(i, requests[i]) for i in indices])
        return dict(zip(indices, results, strict=True))

    def worker_pids(self) -> tuple[int | None, ...]:
        return (os.getpid(),) * len(self.spaces)

    def close(self) -> None:
        self._host.close()
