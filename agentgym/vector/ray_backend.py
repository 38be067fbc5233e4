"""The ``"ray"`` backend: envs in Ray actors, one :class:`~agentgym.vector.host.EnvHost` each.

Ray is imported only here, and only when this backend is built. If Ray is not running
yet, the backend starts a local instance (``ray.init(num_cpus=..., include_dashboard=
False)``); a caller who wants a cluster calls ``ray.init(address=...)`` first and the
backend uses it. Envs never initialise Ray themselves. The backend does not shut Ray
down on ``close()`` (other users of the same Ray instance may still need it); it kills
its own actors.

Actors use Ray's default resources (they need a node with a CPU to be placed on but do
not hold it), so any number of them fit a small local instance. An actor that dies
(``ray.exceptions.RayActorError``: SIGKILL, segfault, out of memory) or fails a call is
killed and replaced at once; its envs' episodes end truncated with ``env_error`` and the
replacement serves their next reset.

Timeouts: with ``step_timeout`` set, a ``reset``/``step`` call waits for its actors'
results with ``ray.wait(..., timeout=step_timeout)`` (one deadline for the whole call; an
actor answers for all its requested envs at once). An actor whose result is not ready
by then is killed (``ray.kill``, which also stops the hanging call) and replaced like a
dead one; its envs' episodes end truncated with an ``env_error`` saying it timed out and
after how long. The results that were ready are returned as usual. Starting an actor and
building its envs is not timed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym.vector import backend as backend_module
from agentgym.vector.backend import (
    DEFAULT_STEP_TIMEOUT,
    WorkerBackend,
    describe_env_block,
    format_seconds,
    partition,
)
from agentgym.vector.host import EnvFailure, EnvFn, EnvHost, EnvSpaces

RAY_INSTALL_HINT = "backend='ray' needs Ray: pip install 'agentgym-text[ray]'"
CLOSE_TIMEOUT_S = 5.0
"""How long :meth:`RayBackend.close` lets actors close their envs before killing them."""
MAX_ERROR_CHARS = 4000


def ensure_ray(num_cpus: int) -> Any:
    """Import Ray and start a local instance with ``num_cpus`` CPUs unless one is running.

    Returns:
        the ``ray`` module.
    """
    try:
        import ray
    except ImportError as error:
        raise ImportError(RAY_INSTALL_HINT) from error
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, num_cpus=num_cpus, include_dashboard=False)
    return ray


def connect_ray(address: str) -> Any:
    """Join the Ray cluster at ``address`` (``"auto"``: the one ``ray start`` joined this
    machine to), so that the ``ray`` backend's actors go there; nothing if this process
    is already connected.

    Returns:
        the ``ray`` module.

    Raises:
        ImportError: Ray is not installed.
        ConnectionError: no cluster answers at ``address``.
    """
    try:
        import ray
    except ImportError as error:
        raise ImportError(RAY_INSTALL_HINT) from error
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False)
        except ConnectionError as error:
            raise ConnectionError(
                f"no Ray cluster at {address!r} ({error}); start one with `ray start --head` "
                "(and `ray start --address HEAD:6379` on the other machines)") from None
    return ray


class RayBackend(WorkerBackend):
    """Envs in ``num_workers`` Ray actors, contiguous blocks of envs per actor.

    Args:
        env_fns: zero-argument callables building the envs (serialisable by Ray).
        num_workers: number of actors (``1 .. len(env_fns)``).
        step_timeout: seconds a ``reset``/``step`` call waits for the actors before it
            kills and replaces those that have not answered (``None``: wait forever).
            Validated by the caller (:func:`~agentgym.vector.backend.check_step_timeout`).

    Raises:
        ImportError: Ray is not installed.
        RuntimeError: an actor could not build its envs.
    """

    def __init__(
        self,
        env_fns: Sequence[EnvFn],
        num_workers: int,
        step_timeout: float | None = DEFAULT_STEP_TIMEOUT,
    ):
        self._step_timeout = step_timeout
        self._ray = ensure_ray(num_cpus=max(1, min(num_workers, os.cpu_count() or 1)))
        self._blocks = partition(len(env_fns), num_workers)
        self._env_fns = list(env_fns)
        self._worker_of = [w for w, block in enumerate(self._blocks) for _ in block]
        self._actor_class = self._ray.remote(max_restarts=0, max_task_retries=0)(EnvHost)
        self._actors: list[Any] = [None] * num_workers
        self._ready_refs: list[Any] = [None] * num_workers
        self._pids: list[int | None] = [None] * num_workers
        self._closed = False
        self.spaces: list[EnvSpaces] = []
        try:
            for w in range(num_workers):
                self._launch(w)
            for w in range(num_workers):
                try:
                    spaces = self._ray.get(self._ready_refs[w])
                    self._pids[w] = self._ray.get(self._actors[w].pid.remote())
                except self._ray.exceptions.RayError as error:
                    raise RuntimeError(
                        f"ray actor for {describe_env_block(self._blocks[w])} could not build "
                        f"its envs: {_short(error)}"
                    ) from error
                self._ready_refs[w] = None
                self.spaces.extend(spaces)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ requests
    def worker_pids(self) -> tuple[int | None, ...]:
        return tuple(self._pids[w] for w in self._worker_of)

    def _run(self, command: str, requests: Mapping[int, tuple]) -> dict[int, Any]:
        if self._closed:
            raise RuntimeError("the backend is closed")
        by_worker = self._by_worker(requests)
        results: dict[int, Any] = {}
        refs: dict[int, Any] = {}
        for w, indices in by_worker.items():
            error = self._ensure_ready(w)
            if error is not None:
                self._fail_all(results, w, error)
                continue
            start = self._blocks[w].start
            method = getattr(self._actors[w], command)
            refs[w] = method.remote([(i - start, *requests[i]) for i in indices])
        if self._step_timeout is not None and refs:
            ready, _ = self._ray.wait(
                list(refs.values()), num_returns=len(refs), timeout=self._step_timeout
            )
            ready = set(ready)
            for w in [w for w, ref in refs.items() if ref not in ready]:
                del refs[w]
                self._fail_all(results, w, self._restart_timed_out(w, command))
        for w, ref in refs.items():
            try:
                results.update(zip(by_worker[w], self._ray.get(ref), strict=True))
            except self._ray.exceptions.RayError as error:
                self._fail_all(results, w, self._restart_dead(w, command, error))
        return results

    # ------------------------------------------------------------------ actors
    def _launch(self, w: int) -> None:
        block = self._blocks[w]
        actor = self._actor_class.remote([self._env_fns[i] for i in block], list(block))
        self._actors[w] = actor
        self._ready_refs[w] = actor.start.remote()
        self._pids[w] = None

    def _ensure_ready(self, w: int) -> str | None:
        """Make sure a (re)launched actor has built its envs, waiting at most
        ``max(step_timeout, REBUILD_TIMEOUT_S)`` (nothing is timed without a
        ``step_timeout``); else return why not (the actor is then killed, and launched
        again at the next call that needs it)."""
        name = f"ray actor for {describe_env_block(self._blocks[w])}"
        if self._actors[w] is None:
            error = self._relaunch(w)
            if error is not None:
                return (f"{name} could not be launched ({error}); it will be tried again at "
                        "the next reset")
        if self._ready_refs[w] is None:
            return None
        limit = backend_module.REBUILD_TIMEOUT_S
        deadline = backend_module.rebuild_deadline(self._step_timeout, limit)

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        try:
            spaces = self._ray.get(self._ready_refs[w], timeout=left())
            self._pids[w] = self._ray.get(self._actors[w].pid.remote(), timeout=left())
        except self._ray.exceptions.GetTimeoutError:
            self._kill(w)
            return (f"{name} had not rebuilt its envs "
                    f"{format_seconds(max(self._step_timeout, limit))} after a call needed "
                    "them (max(step_timeout, REBUILD_TIMEOUT_S)); it was killed and will be "
                    "tried again at the next reset")
        except self._ray.exceptions.RayError as error:
            self._kill(w)
            return (
                f"{name} could not rebuild its envs; it will be tried again at the next "
                f"reset: {_short(error)}"
            )
        for i, new in zip(self._blocks[w], spaces, strict=True):
            old = self.spaces[i]
            if (new.observation_space, new.action_space) != (
                old.observation_space,
                old.action_space,
            ):
                self._kill(w)
                return f"{name} rebuilt env {i} with different spaces than before"
        self._ready_refs[w] = None
        return None

    def _restart_dead(self, w: int, command: str, error: Exception) -> str:
        return self._restart(
            w, f"failed during {command}();", f"and its episodes were ended (truncated): "
                                              f"{_short(error)}")

    def _restart_timed_out(self, w: int, command: str) -> str:
        return self._restart(
            w, f"timed out after {format_seconds(self._step_timeout)} (step_timeout) without "
               f"answering {command}(); it was killed,", "and its episodes were ended "
                                                         "(truncated)")

    def _restart(self, w: int, what_happened: str, consequence: str) -> str:
        """Kill and relaunch actor ``w``; the env_error message for its envs (saying
        whether the relaunch worked)."""
        pid = self._pids[w]
        self._kill(w)
        error = self._relaunch(w)
        restarted = "it was restarted" if error is None else (
            f"it could not be restarted ({error}; it will be tried again at the next reset)")
        return (f"ray actor {pid} ({describe_env_block(self._blocks[w])}) {what_happened} "
                f"{restarted} {consequence}")

    def _relaunch(self, w: int) -> str | None:
        """Launch actor ``w`` (it boots while the other envs go on and serves the next
        reset); ``None``, or why Ray refused (then it is launched again at the next use)."""
        try:
            self._launch(w)
        except Exception as error:  # Ray refused: tried again at the next use
            self._actors[w] = None
            self._ready_refs[w] = None
            return _short(error)
        return None

    def _kill(self, w: int) -> None:
        actor, self._actors[w] = self._actors[w], None
        self._ready_refs[w] = None
        self._pids[w] = None
        if actor is not None:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # already gone: nothing left to kill
                pass

    def _fail_all(self, results: dict[int, Any], w: int, message: str) -> None:
        for i in self._blocks[w]:
            results[i] = EnvFailure(message)

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Let every actor close its envs (bounded wait), then kill the actors."""
        if self._closed:
            return
        self._closed = True
        refs = []
        for actor in self._actors:
            if actor is not None:
                try:
                    refs.append(actor.close.remote())
                except Exception:  # a dead actor cannot take calls; it is killed below
                    pass
        if refs:
            try:
                self._ray.wait(refs, num_returns=len(refs), timeout=CLOSE_TIMEOUT_S)
            except Exception:  # best effort: the actors are killed right after
                pass
        for w in range(len(self._actors)):
            self._kill(w)


def _short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_ERROR_CHARS else "..." + text[-MAX_ERROR_CHARS:]
