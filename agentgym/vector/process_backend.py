"""The ``"subprocess"`` backend: envs in worker processes, one pipe per worker.

Protocol: one pickled message per worker per call, each way (pickle protocol 5 over a
``multiprocessing`` socket pair). A step sends ``("step", [(local index, action), ...])``
to every worker that has an unfinished env, then collects the replies as they come,
watching each worker's pipe and process sentinel at once.

Start method: ``spawn``. Workers are our direct children (so :meth:`ProcessBackend.close`
reaps them itself and a test can check there are none left), they never inherit the
parent's threads or locks (forking a process that runs threads -- Ray, tokenizers,
torch -- can deadlock the child), and the behaviour is the same on Linux and macOS.
The cost: a worker starts a fresh interpreter and imports its envs' modules (~0.3 s for
the scripted env), and scripts that build a subprocess vector env need the usual
``if __name__ == "__main__":`` guard.

Fault tolerance: when a worker dies (SIGKILL, segfault, ``os._exit``, an error in the
worker loop) every env it hosted gets an :class:`~agentgym.vector.host.EnvFailure`
saying how it died; a replacement is started at once and serves those envs' next reset.
Workers ignore SIGINT (the parent handles Ctrl-C and closes them) and exit when the
parent's end of their pipe closes, so they never outlive a killed parent for long. A
call interrupted in the parent (Ctrl-C) while workers owe it a reply replaces those
workers, so that no late reply is read as the answer to a later call; their envs'
episodes are lost (a step reports ``env_error``; a reset starts afresh).

Timeouts: with ``step_timeout`` set, a ``reset``/``step`` call waits at most that long
for the workers' replies (one deadline for the whole call, counted from when the
requests were sent; a worker answers for all its requested envs at once). A worker that
has not answered by then is killed with SIGKILL (a hanging env cannot be asked to stop),
reaped, and replaced exactly like a dead one: every env it hosted gets an
:class:`~agentgym.vector.host.EnvFailure` saying it timed out and after how long. The
replies of the workers that did answer are returned as usual. A replacement worker that
is still building its envs when a reset needs them gets at most
``max(step_timeout, REBUILD_TIMEOUT_S)`` more to finish (else it is killed, its envs fail
that reset, and a new one is tried at the next). Building the envs at construction is not
timed.

A replacement that cannot be started (the OS refuses a new process) fails only its own
envs, each reset, until one can be; the other workers go on. A reply the parent cannot
unpickle (an info value whose class loads only in the worker, say) fails the envs of
that worker for that call with the unpickling traceback; the worker itself is fine.

POSIX only (Linux, macOS): the parent waits on pipes and process sentinels with
``select.poll``.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import pickle
import select
import signal
import time
import traceback
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from agentgym.vector import backend as backend_module
from agentgym.vector.backend import (
    DEFAULT_STEP_TIMEOUT,
    PICKLE_PROTOCOL,
    WorkerBackend,
    describe_env_block,
    dumps_env_fns,
    format_seconds,
    partition,
)
from agentgym.vector.host import (
    EnvFailure,
    EnvFn,
    EnvHost,
    EnvSpaces,
    format_exception,
)

START_METHOD = "spawn"
CLOSE_TIMEOUT_S = 5.0
"""How long :meth:`ProcessBackend.close` waits for workers to exit before terminating them."""

MAX_POLL_MS = 2**31 - 1
"""The longest timeout ``select.poll`` takes (a C int of milliseconds, about 25 days)."""

TIMED_OUT = ("timed_out",)
"""What :meth:`ProcessBackend._gather` gives for a worker that did not answer in time."""

UNREADABLE = "unreadable"
"""First item of what :meth:`ProcessBackend._gather` gives for a reply that could not be
unpickled (the second is the formatted error)."""


def _dumps(message: Any) -> bytes:
    return pickle.dumps(message, protocol=PICKLE_PROTOCOL)


def _worker_main(conn: Connection, payload: bytes, env_indices: list[int]) -> None:
    """Body of a worker process: build the envs, then answer requests until told to stop.

    Ctrl-C and SIGTERM, which reach every process of a terminal's foreground group or of
    a scheduler's job, are ignored: the parent decides when its workers stop (it may
    finish the iteration in progress first), and they end when it closes them or when it
    dies (the pipe closes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    host: EnvHost | None = None
    try:
        try:
            host = EnvHost(pickle.loads(payload), env_indices)
            spaces = host.start()
        except Exception:  # report why the envs could not be built, then exit
            conn.send_bytes(_dumps(("init_error", traceback.format_exc())))
            return
        conn.send_bytes(_dumps(("ready", spaces)))
        while True:
            try:
                command, args = pickle.loads(conn.recv_bytes())
            except EOFError:  # the parent is gone
                return
            if command == "close":
                return
            if command == "reset":
                results = host.reset(args)
            elif command == "step":
                results = host.step(args)
            else:
                raise ValueError(f"unknown worker command {command!r}")
            conn.send_bytes(_dumps_results(results, args, env_indices))
    finally:
        if host is not None:
            host.close()
        conn.close()


def _dumps_results(results: list[Any], args: Sequence[tuple], env_indices: list[int]) -> bytes:
    """Pickle a reply; a result that cannot be pickled becomes an EnvFailure."""
    try:
        return _dumps(("ok", results))
    except Exception:  # find the culprits, keep the rest
        safe: list[Any] = []
        for request, result in zip(args, results, strict=True):
            try:
                _dumps(result)
                safe.append(result)
            except Exception as error:
                where = f"pickling the result of env {env_indices[request[0]]}"
                safe.append(EnvFailure(format_exception(error, where)))
        return _dumps(("ok", safe))


def _dumps_request(command: str, args: list[tuple]) -> bytes:
    """Pickle a request; in a step, an action that cannot be pickled is sent as ``None``
    (the env rejects it as an invalid action, as it would the original non-text object)."""
    try:
        return _dumps((command, args))
    except Exception:
        if command != "step":
            raise
        safe = []
        for j, action in args:
            try:
                _dumps(action)
            except Exception:
                action = None
            safe.append((j, action))
        return _dumps((command, safe))


def _not_ready(reply: tuple) -> str:
    """Why a worker's first reply is not ``("ready", spaces)``."""
    if reply[0] == UNREADABLE:
        return "built its envs, but the parent could not unpickle their spaces"
    return "could not build its envs"


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "stopped answering (its pipe closed)"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-exitcode} ({name})"
    return f"exited with code {exitcode}"


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, ctx: Any, index: int, envs: range, payload: bytes):
        self.index = index
        self.envs = envs
        self._ctx = ctx
        self._payload = payload
        self.process: Any = None
        self.conn: Connection | None = None
        self.ready = False

    def start(self) -> None:
        """Start the process. Raises ``OSError`` when it cannot be started."""
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main,
            args=(child_conn, self._payload, list(self.envs)),
            name=f"agentgym-env-worker-{self.index}",
            daemon=True,
        )
        try:
            process.start()
        except BaseException:
            parent_conn.close()
            raise
        finally:
            child_conn.close()
        self.process, self.conn, self.ready = process, parent_conn, False

    def send(self, data: bytes) -> bool:
        """Send bytes; ``False`` when the worker is gone."""
        try:
            self.conn.send_bytes(data)
        except OSError:  # BrokenPipeError, ConnectionResetError
            return False
        return True

    def reap(self, timeout: float = 1.0) -> int | None:
        """Make sure the process is gone and collected; return its exit code."""
        process, self.process, self.ready = self.process, None, False
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if process is None:
            return None
        process.join(timeout)
        if process.is_alive():
            process.terminate()
            process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
        exitcode = process.exitcode
        process.close()
        return exitcode

    def kill(self) -> None:
        """SIGKILL the process (it may be stuck in env code) and reap it."""
        if self.process is not None:
            try:
                self.process.kill()
            except OSError:  # already gone
                pass
        self.reap()

    @property
    def name(self) -> str:
        pid = self.process.pid if self.process is not None else "?"
        return f"worker process {pid} ({describe_env_block(self.envs)})"


class ProcessBackend(WorkerBackend):
    """Envs in ``num_workers`` worker processes, contiguous blocks of envs per worker.

    Args:
        env_fns: zero-argument callables building the envs (picklable).
        num_workers: number of worker processes (``1 .. len(env_fns)``).
        step_timeout: seconds a ``reset``/``step`` call waits for the workers before it
            kills and replaces those that have not answered (``None``: wait forever).
            Validated by the caller (:func:`~agentgym.vector.backend.check_step_timeout`).

    Raises:
        TypeError: ``env_fns`` cannot be pickled.
        RuntimeError: a worker could not build its envs (the message has its traceback).
    """

    def __init__(
        self,
        env_fns: Sequence[EnvFn],
        num_workers: int,
        step_timeout: float | None = DEFAULT_STEP_TIMEOUT,
    ):
        self._step_timeout = step_timeout
        blocks = partition(len(env_fns), num_workers)
        ctx = mp.get_context(START_METHOD)
        self._workers = [
            _Worker(ctx, w, block, dumps_env_fns([env_fns[i] for i in block]))
            for w, block in enumerate(blocks)
        ]
        self._worker_of = [w for w, block in enumerate(blocks) for _ in block]
        self._closed = False
        self.spaces: list[EnvSpaces] = []
        try:
            for worker in self._workers:
                worker.start()
            replies = self._gather({w.index: w for w in self._workers})
            for worker in self._workers:
                reply, name = replies[worker.index], worker.name
                if reply is None:
                    raise RuntimeError(f"{name} {_describe_exit(worker.reap())} while starting")
                if reply[0] != "ready":
                    raise RuntimeError(f"{name} {_not_ready(reply)}:\n{reply[1]}")
                worker.ready = True
                self.spaces.extend(reply[1])
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ requests
    def worker_pids(self) -> tuple[int | None, ...]:
        pids = [w.process.pid if w.process is not None else None for w in self._workers]
        return tuple(pids[w] for w in self._worker_of)

    def _run(self, command: str, requests: Mapping[int, tuple]) -> dict[int, Any]:
        if self._closed:
            raise RuntimeError("the backend is closed")
        by_worker = self._by_worker(requests)
        results: dict[int, Any] = {}
        waiting: dict[int, _Worker] = {}
        try:
            for w, indices in by_worker.items():
                worker = self._workers[w]
                error = self._ensure_ready(worker, command)
                if error is None:
                    start = worker.envs.start
                    data = _dumps_request(command,
                                          [(i - start, *requests[i]) for i in indices])
                    if worker.send(data):
                        waiting[w] = worker
                        continue
                    error = self._restart_dead(worker, command)
                self._fail_all(results, worker, error)
            deadline = None
            if self._step_timeout is not None:
                deadline = time.monotonic() + self._step_timeout
            replies = self._gather(waiting, deadline)
        except BaseException:
            # Interrupted (Ctrl-C) with requests in flight: a reply still owed would be read
            # as the answer to the next call, so the workers asked are replaced.
            for worker in waiting.values():
                worker.kill()
                self._start_replacement(worker)
            raise
        for w, reply in replies.items():
            worker = self._workers[w]
            if reply is TIMED_OUT:
                self._fail_all(results, worker, self._restart_timed_out(worker, command))
            elif reply is None:
                self._fail_all(results, worker, self._restart_dead(worker, command))
            elif reply[0] == UNREADABLE:
                self._fail_all(results, worker, f"the reply of {worker.name} to {command}() "
                                                f"could not be read:\n{reply[1]}")
            else:
                results.update(zip(by_worker[w], reply[1], strict=True))
        return results

    # ------------------------------------------------------------------ workers
    def _gather(
        self, waiting: Mapping[int, _Worker], deadline: float | None = None
    ) -> dict[int, tuple | None]:
        """Wait for one message from each worker; ``None`` for a worker that died,
        :data:`TIMED_OUT` for one still silent at ``deadline`` (``time.monotonic()``
        time; ``None``: wait forever).

        Polls every waiting worker's pipe and process sentinel at once with a raw
        ``select.poll`` (``multiprocessing.connection.wait`` builds a Python selector on
        every call: about a third of the backend's per-step CPU time in a profile).
        The sentinel catches a death even when a grandchild still holds the pipe open.
        """
        poller = select.poll()
        by_fd: dict[int, _Worker] = {}
        for worker in waiting.values():
            for fd in (worker.conn.fileno(), worker.process.sentinel):
                by_fd[fd] = worker
                poller.register(fd, select.POLLIN)
        replies: dict[int, tuple | None] = {}
        while len(replies) < len(waiting):
            timeout_ms = None
            if deadline is not None:  # poll takes a C int: wait in rounds of at most that
                timeout_ms = min(max(0, math.ceil((deadline - time.monotonic()) * 1000)),
                                 MAX_POLL_MS)
            events = poller.poll(timeout_ms)
            if not events and deadline is not None and time.monotonic() >= deadline:
                for worker in waiting.values():
                    replies.setdefault(worker.index, TIMED_OUT)
                break
            for fd, _ in events:
                worker = by_fd[fd]
                if worker.index in replies:
                    continue
                reply = None  # the process ended, or its pipe closed, without a reply
                try:
                    if fd == worker.conn.fileno() or worker.conn.poll():
                        data = worker.conn.recv_bytes()
                        try:
                            reply = pickle.loads(data)
                        except Exception as error:  # whole message read: still in sync
                            reply = (UNREADABLE, format_exception(error, "unpickling it"))
                except (EOFError, OSError):
                    pass
                replies[worker.index] = reply
                poller.unregister(worker.conn.fileno())
                poller.unregister(worker.process.sentinel)
        return replies

    def _ensure_ready(self, worker: _Worker, command: str) -> str | None:
        """Make sure a (re)started worker has built its envs, waiting at most
        ``max(step_timeout, REBUILD_TIMEOUT_S)`` (nothing is timed without a
        ``step_timeout``); else return why not (the worker is then stopped, and started
        again at the next call that needs it)."""
        if worker.process is None:
            error = self._start_replacement(worker)
            if error is not None:
                return (f"the worker process for {describe_env_block(worker.envs)} could not "
                        f"be started for {command}() ({error}); it will be tried again at "
                        "the next reset")
        if worker.ready:
            return None
        name = worker.name
        limit = backend_module.REBUILD_TIMEOUT_S
        deadline = backend_module.rebuild_deadline(self._step_timeout, limit)
        reply = self._gather({worker.index: worker}, deadline)[worker.index]
        if reply is TIMED_OUT:
            worker.kill()
            waited = format_seconds(max(self._step_timeout, limit))
            return (f"{name} had not rebuilt its envs {waited} after {command}() needed "
                    "them (max(step_timeout, REBUILD_TIMEOUT_S)); it was killed and will be "
                    "tried again at the next reset")
        if reply is None:
            how = _describe_exit(worker.reap())
            return f"{name} {how} while restarting; it will be tried again at the next reset"
        if reply[0] != "ready":
            worker.reap()
            return (f"{name} {_not_ready(reply)}; it will be tried again at the next "
                    f"reset:\n{reply[1]}")
        for i, spaces in zip(worker.envs, reply[1], strict=True):
            if (spaces.observation_space, spaces.action_space) != (
                self.spaces[i].observation_space,
                self.spaces[i].action_space,
            ):
                worker.reap()
                return f"{name} rebuilt env {i} with different spaces than before"
        worker.ready = True
        return None

    def _restart_dead(self, worker: _Worker, command: str) -> str:
        name = worker.name
        how = _describe_exit(worker.reap())
        restarted = self._restarted(worker)
        return f"{name} {how} during {command}(); {restarted} and its episodes were ended " \
               "(truncated)"

    def _restart_timed_out(self, worker: _Worker, command: str) -> str:
        name = worker.name
        worker.kill()
        restarted = self._restarted(worker)
        return (
            f"{name} timed out after {format_seconds(self._step_timeout)} (step_timeout) "
            f"without answering {command}(); it was killed, {restarted} and its episodes "
            "were ended (truncated)"
        )

    def _restarted(self, worker: _Worker) -> str:
        """Start a replacement; say whether it started (for an env_error message)."""
        error = self._start_replacement(worker)
        if error is None:
            return "the worker was restarted"
        return (f"the worker could not be restarted ({error}; it will be tried again at the "
                "next reset)")

    @staticmethod
    def _start_replacement(worker: _Worker) -> str | None:
        """Start ``worker`` again (it boots while the other envs go on and serves the next
        reset); ``None``, or why it could not be started."""
        try:
            worker.start()
        except OSError as error:  # cannot spawn right now: tried again at the next use
            worker.process, worker.conn, worker.ready = None, None, False
            return f"{type(error).__name__}: {error}"
        return None

    @staticmethod
    def _fail_all(results: dict[int, Any], worker: _Worker, message: str) -> None:
        for i in worker.envs:
            results[i] = EnvFailure(message)

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Ask every worker to exit, then terminate/kill stragglers and reap them all."""
        if self._closed:
            return
        self._closed = True
        close_message = _dumps(("close", None))
        for worker in self._workers:
            if worker.process is not None and worker.conn is not None:
                worker.send(close_message)
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for worker in self._workers:
            if worker.process is not None:
                worker.process.join(max(0.0, deadline - time.monotonic()))
            worker.reap()
