"""Your agent loop, played episode by episode in processes of its own (``--agent``).

:func:`load_agent` imports ``MODULE:FUNCTION`` (the current folder importable, as
``train.py`` makes it); a name that does not import is a :class:`AgentLoadError` naming
what failed. :func:`play_episodes` calls ``FUNCTION(base_url, task)`` once per
:class:`EpisodeJob`, at most ``concurrency`` at a time, each in a fresh process forked
from a clean server process (``multiprocessing``'s ``forkserver``: no copy of the trainer's
threads, model or locks). So nothing a loop does reaches the trainer: an exception, a
result that is no reward, a hang, a crash of the process itself all become an
:class:`EpisodeOutcome` with an ``error`` and a ``failure`` kind. A loop still running
``timeout`` seconds after its start is killed; ``on_end`` is called for every job as it
ends (the harness closes the episode's session there, so a call still in flight gets 404).

Inside the process ``OPENAI_BASE_URL`` is the episode's session URL and ``OPENAI_API_KEY``
is set (to ``agentgym`` unless the environment has one; the gateway accepts any), so a loop
that builds ``openai.OpenAI()`` with no arguments reaches its own session.

What a loop returns (:func:`read_result`): a finite ``float`` (the episode's reward), or a
dict with exactly one of ``"reward"`` (a float: the reward of the episode, given to its last
model call) and ``"rewards"`` (one float per model call, in the order the calls finished),
and optionally ``"anchors"`` (one JSON value per model call: its step anchor) and
``"success"`` (a bool; default: the episode's rewards sum to more than 0).
"""

from __future__ import annotations

import importlib
import math
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import wait
from typing import Any

from algorithms.config import ConfigError

FAILURES: tuple[str, ...] = ("exception", "timeout", "bad_result", "no_calls", "crashed")
"""The kinds of failed episode, as the metrics count them (``agent/<kind>``): the loop
raised; ran past ``agent.timeout``; returned no reward :func:`read_result` accepts (or
anchors / rewards not one per call); returned without a model call; its process died
without an answer."""

RESULT_KEYS: frozenset[str] = frozenset({"reward", "rewards", "anchors", "success"})
"""The keys a loop's dict result may have."""


class AgentLoadError(ConfigError):
    """``--agent MODULE:FUNCTION`` names nothing callable (one line; exit status 2)."""


def load_agent(spec: str) -> Callable[..., Any]:
    """The function ``spec`` (``MODULE:FUNCTION``) names, imported with the current folder
    on ``sys.path``.

    Raises:
        AgentLoadError: ``spec`` is not ``MODULE:FUNCTION``, the module is not found or
            raised while importing, or it has no callable of that name.
    """
    module_name, _, name = str(spec).partition(":")
    if not module_name or not name:
        raise AgentLoadError(f"--agent takes MODULE:FUNCTION (e.g. examples.own_agent:agent), "
                             f"got {spec!r}")
    here = os.getcwd()
    if not any(os.path.abspath(entry or os.curdir) == here for entry in sys.path):
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
            raise AgentLoadError(f"--agent {spec}: no module named {module_name!r} (looked in "
                                 f"the current folder {here} and on sys.path)") from None
        raise AgentLoadError(f"--agent {spec}: importing {module_name} failed: it needs the "
                             f"package {error.name!r}, which is not installed") from None
    except Exception as error:  # noqa: BLE001 - the user's module: any error is theirs
        raise AgentLoadError(f"--agent {spec}: importing {module_name} raised "
                             f"{type(error).__name__}: {error}") from None
    function = getattr(module, name, None)
    if function is None:
        raise AgentLoadError(f"--agent {spec}: module {module_name} "
                             f"({getattr(module, '__file__', '?')}) has no {name!r}")
    if not callable(function):
        raise AgentLoadError(f"--agent {spec}: {module_name}.{name} is a "
                             f"{type(function).__name__}, not a function")
    return function


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to play: its position in the iteration, its task, its session URL
    (``""`` until :func:`play_episodes`' ``on_start`` gives it one)."""

    index: int
    task: dict[str, Any]
    base_url: str = ""


@dataclass(frozen=True)
class LoopResult:
    """What a loop returned, checked (:func:`read_result`).

    Attributes:
        reward: the episode's reward (``None`` when ``rewards`` was given).
        rewards: one reward per model call, or ``None``.
        anchors: one anchor per model call (hashable: JSON lists and objects become
            their canonical JSON text), or ``None``.
        success: the loop's own success flag, or ``None``.
    """

    reward: float | None
    rewards: tuple[float, ...] | None = None
    anchors: tuple[Any, ...] | None = None
    success: bool | None = None


@dataclass(frozen=True)
class EpisodeOutcome:
    """How one episode ended: a :class:`LoopResult`, or a failure.

    Attributes:
        index: the job's index.
        result: the checked result (``None`` when the episode failed).
        failure: one of :data:`FAILURES` (``None`` when it did not fail).
        error: one line saying what went wrong (``""`` when nothing did).
        elapsed_s: seconds from the process's start to its end.
    """

    index: int
    result: LoopResult | None
    failure: str | None = None
    error: str = ""
    elapsed_s: float = 0.0


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {type(value).__name__} {value!r:.60}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{what} must be finite, got {number}")
    return number


def _hashable_anchor(anchor: Any) -> Any:
    """A loop's anchor as a hashable key: strings, numbers, booleans and ``None`` as they
    are, lists and objects as their canonical JSON text (keys sorted)."""
    import json

    if anchor is None or isinstance(anchor, (str, int, float, bool)):
        return anchor
    try:
        return json.dumps(anchor, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise ValueError(f"anchor {anchor!r:.60} is not JSON ({error})") from None


def read_result(value: Any) -> LoopResult:
    """A loop's return value, checked (module docstring).

    Raises:
        ValueError: naming what is wrong with it.
    """
    if not isinstance(value, dict):
        return LoopResult(reward=_finite(value, "the returned reward"))
    unknown = sorted(map(str, set(value) - RESULT_KEYS))
    if unknown:
        raise ValueError(f"the returned dict has keys {unknown}; it takes "
                         f"{sorted(RESULT_KEYS)}")
    if ("reward" in value) == ("rewards" in value):
        raise ValueError("the returned dict needs exactly one of 'reward' (the episode's) "
                         "and 'rewards' (one per model call)")
    rewards = None
    if "rewards" in value:
        if not isinstance(value["rewards"], (list, tuple)):
            raise ValueError("'rewards' must be a list, one number per model call")
        rewards = tuple(_finite(r, f"rewards[{i}]") for i, r in enumerate(value["rewards"]))
    anchors = None
    if value.get("anchors") is not None:
        if not isinstance(value["anchors"], (list, tuple)):
            raise ValueError("'anchors' must be a list, one anchor per model call")
        anchors = tuple(_hashable_anchor(a) for a in value["anchors"])
    success = value.get("success")
    if success is not None and not isinstance(success, bool):
        raise ValueError(f"'success' must be true or false, got {success!r:.60}")
    reward = None if rewards is not None else _finite(value["reward"], "'reward'")
    return LoopResult(reward=reward, rewards=rewards, anchors=anchors, success=success)


def _first_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _play(spec: str, paths: list[str], cwd: str, environ: dict[str, str], base_url: str,
          task: dict[str, Any], connection: Any) -> None:
    """The episode's process: the trainer's ``sys.path``, folder and environment (the
    fork server's may be older), then import the loop, play, send back ``("ok", value)``
    or ``("error", kind, message)``."""
    sys.path[:] = paths
    os.environ.clear()
    os.environ.update(environ)
    try:
        os.chdir(cwd)
    except OSError:
        pass
    os.environ["OPENAI_BASE_URL"] = base_url
    os.environ.setdefault("OPENAI_API_KEY", "agentgym")
    try:
        function = load_agent(spec)
        value = function(base_url, task)
    except BaseException as error:  # noqa: BLE001 - the loop's own failure, reported
        frames = traceback.extract_tb(error.__traceback__)
        where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
        connection.send(("error", "exception",
                         _first_line(f"{type(error).__name__}: {error}{where}")))
        return
    try:
        connection.send(("ok", value))
    except Exception as error:  # noqa: BLE001 - a value that does not pickle
        connection.send(("error", "bad_result", _first_line(
            f"returned a {type(value).__name__} that cannot be sent back ({error})")))


def _context(spec: str) -> Any:
    """``forkserver`` (``spawn`` where there is none), its server preloading ``openai`` and
    the loop's module, so that each episode's process starts with them imported (importing
    ``openai`` took 1.1 s of CPU here); preloading is skipped quietly for a module that is
    not installed, and takes effect when the server first starts."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["openai", str(spec).partition(":")[0]])
    return context


def play_episodes(spec: str, jobs: Sequence[EpisodeJob], *, concurrency: int,
                  timeout: float, on_start: Callable[[EpisodeJob], str] | None = None,
                  on_end: Callable[[EpisodeJob], None] | None = None
                  ) -> list[EpisodeOutcome]:
    """Play every job, at most ``concurrency`` at once, each within ``timeout`` seconds
    (module docstring); return their outcomes in job order.

    Args:
        spec: the loop, ``MODULE:FUNCTION`` (imported again in each process).
        jobs: the episodes.
        concurrency: processes at once (>= 1).
        timeout: seconds one episode may take (> 0).
        on_start: called with each job right before its process starts; returns its
            ``base_url`` (the harness opens the episode's session there, so that the
            gateway waits only for sessions whose loop runs). ``None``: the job's own.
        on_end: called with each job (its ``base_url`` filled) as soon as it ended,
            however it ended.
    """
    context = _context(spec)
    paths, cwd = list(sys.path), os.getcwd()
    waiting = list(reversed(jobs))
    running: dict[Any, tuple[EpisodeJob, Any, float]] = {}  # connection -> job, process, t0
    outcomes: dict[int, EpisodeOutcome] = {}

    def finish(connection: Any, outcome: EpisodeOutcome) -> None:
        job, process, _ = running.pop(connection)
        if process.is_alive():
            process.kill()
        process.join(5)
        connection.close()
        outcomes[job.index] = outcome
        if on_end is not None:
            on_end(job)

    while waiting or running:
        while waiting and len(running) < concurrency:
            job = waiting.pop()
            if on_start is not None:
                job = replace(job, base_url=on_start(job))
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_play, daemon=True, name=f"agent-episode-{job.index}",
                                      args=(spec, paths, cwd, dict(os.environ),
                                            job.base_url, job.task, send))
            process.start()
            send.close()  # the child holds its end: EOF here once it exits
            running[receive] = (job, process, time.monotonic())
        first_deadline = min(t0 for _, _, t0 in running.values()) + timeout
        ready = wait(list(running), timeout=max(0.0, first_deadline - time.monotonic()))
        now = time.monotonic()
        for connection in ready:
            job, process, started = running[connection]
            try:
                message = connection.recv()
            except (EOFError, OSError):
                process.join(5)
                finish(connection, EpisodeOutcome(
                    job.index, None, "crashed", f"the loop's process exited (code "
                    f"{process.exitcode}) without returning", now - started))
                continue
            if message[0] == "ok":
                try:
                    result = read_result(message[1])
                except ValueError as error:
                    finish(connection, EpisodeOutcome(job.index, None, "bad_result",
                                                      _first_line(str(error)), now - started))
                    continue
                finish(connection, EpisodeOutcome(job.index, result, None, "", now - started))
            else:
                finish(connection, EpisodeOutcome(job.index, None, message[1], message[2],
                                                  now - started))
        for connection in [c for c, (_, _, t0) in running.items() if now - t0 >= timeout]:
            job, _, started = running[connection]
            finish(connection, EpisodeOutcome(
                job.index, None, "timeout", f"still running after --agent.timeout "
                f"{timeout:g} s (stopped)", now - started))
    return [outcomes[job.index] for job in jobs]
