"""SIGTERM during a training run: finish the iteration in progress, checkpoint it, stop.

Batch schedulers end a job with SIGTERM and, a grace period later, SIGKILL (SLURM:
``KillWait``, 30 s by default; torchrun likewise kills workers 30 s after forwarding its
own SIGTERM to them). Python's default for SIGTERM is to die on the spot, which loses
the iteration in progress and every iteration since the last checkpoint. Inside
:class:`TermSignal` a SIGTERM instead asks the run to stop after the iteration in
progress; the trainer then writes a checkpoint of it and raises :class:`Terminated`. If
that iteration has not finished ``grace_s`` seconds after the signal, or a second SIGTERM
comes, or the run is not in its iteration loop yet (loading the model, evaluating only),
:class:`Terminated` is raised at once, like ``KeyboardInterrupt`` on Ctrl-C. (Python runs
the handlers between bytecodes: a long C call, a blocked collective say, delays them.)

Free of torch. Signal handlers can only be installed from the main thread; elsewhere
:class:`TermSignal` does nothing.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any


class Terminated(BaseException):
    """The run stopped on SIGTERM (a ``BaseException``, like ``KeyboardInterrupt``, so
    that no ``except Exception`` on the way, say an env error handler, swallows it).

    Attributes:
        checkpoint: the checkpoint written on the way out (the iteration that was in
            progress), or ``None`` when none was (``reason`` says why).
        iteration: completed iterations at the stop (``None``: outside the loop).
        reason: why no checkpoint was written; empty when one was.
    """

    def __init__(self, *, checkpoint: Path | None = None, iteration: int | None = None,
                 reason: str = ""):
        self.checkpoint = checkpoint
        self.iteration = iteration
        self.reason = reason
        super().__init__(reason or f"stopped after iteration {iteration}")


class TermSignal:
    """Within ``with TermSignal(grace_s) as term:``, SIGTERM is handled as described in
    the module docstring; the previous SIGTERM and SIGALRM handlers are restored on exit.

    The training loop calls :meth:`loop_started` once, then brackets each iteration with
    :meth:`iteration_started` and :meth:`iteration_finished`, and asks :attr:`requested`
    before starting the next one (a SIGTERM between two iterations, while a checkpoint
    is written, say, stops the run there).

    Args:
        grace_s: seconds the iteration in progress may still run after SIGTERM; 0 stops
            inside an iteration at once (between two, the run still stops cleanly).
        announce: write one line to stderr when a SIGTERM lets the iteration finish
            (rank 0 of a torchrun job only, so the line is not repeated per rank).
    """

    def __init__(self, grace_s: float, *, announce: bool = True):
        self.grace_s = grace_s
        self.announce = announce
        self.requested = False
        self._signalled_at = 0.0
        self._in_loop = False
        self._iteration: int | None = None  # the one in progress (0-based), if any
        self._installed = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> TermSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._on_term)
            if hasattr(signal, "setitimer"):
                self._previous[signal.SIGALRM] = signal.signal(signal.SIGALRM,
                                                               self._on_alarm)
            self._installed = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._installed:
            return
        self._cancel_alarm()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._installed = False

    def loop_started(self) -> None:
        """The iteration loop begins: from now on a SIGTERM stops the run cleanly."""
        self._in_loop = True

    def iteration_started(self, iteration: int) -> None:
        """Iteration ``iteration`` (0-based) begins; a SIGTERM from now on lets it finish
        within the grace (counted from the signal, if one came already).

        Raises:
            Terminated: the grace of an earlier SIGTERM has run out already.
        """
        self._iteration = iteration
        if self.requested:
            self._arm(self.grace_s - (time.monotonic() - self._signalled_at))

    def iteration_finished(self) -> None:
        """The iteration in progress ended: the grace alarm is off (the checkpoint that
        follows may take its time)."""
        self._iteration = None
        self._cancel_alarm()

    # ------------------------------------------------------------------ handlers
    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        if self.requested or not self._in_loop:
            self._cancel_alarm()
            raise Terminated(iteration=self._iteration, reason=(
                "a second one came" if self.requested else "it came before training began"))
        self.requested = True
        self._signalled_at = time.monotonic()
        if self._iteration is None:  # between iterations: the loop stops before the next
            return
        if self.announce and self.grace_s > 0:  # os.write: print() may be what was cut
            _write_stderr(f"\n[agentgym] SIGTERM: finishing iteration {self._iteration + 1} "
                          f"(up to {self.grace_s:g} s, --run.term-grace), then writing a "
                          "checkpoint\n")
        self._arm(self.grace_s)

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        self._out_of_grace()

    def _arm(self, seconds: float) -> None:
        if seconds <= 0 or not hasattr(signal, "setitimer"):
            self._out_of_grace()
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def _out_of_grace(self) -> None:
        iteration = self._iteration
        self._iteration = None
        raise Terminated(iteration=iteration, reason=(
            f"iteration {'?' if iteration is None else iteration + 1} did not finish within "
            f"--run.term-grace {self.grace_s:g} s"))

    def _cancel_alarm(self) -> None:
        if self._installed and hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_REAL, 0)


def _write_stderr(text: str) -> None:
    try:
        os.write(2, text.encode())
    except OSError:
        pass
