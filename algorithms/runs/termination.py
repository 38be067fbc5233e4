"""SIGTERM during a training run: keep the work done, write a checkpoint, stop.

Batch schedulers end a job with SIGTERM and, a grace period later, SIGKILL (SLURM:
``KillWait``, 30 s by default; torchrun likewise kills workers 30 s after forwarding its
own SIGTERM to them). Python's default for SIGTERM is to die on the spot, which loses
every iteration since the last checkpoint. Inside :class:`TermSignal` a SIGTERM instead
stops the run with a checkpoint of the newest consistent state, and the trainer raises
:class:`Terminated`. What that state is depends on where the signal finds the iteration
in progress (the trainer marks its phases):

``rollout``      the weights are still those of the last finished update: the rollout
                 is abandoned at once (its seeds come from ``(run.seed, iteration)``, so a
                 resumed run plays it again exactly) and the last finished iteration is
                 checkpointed (unless its checkpoint exists already).
``update``       scoring, advantages, the update, the engine's weight sync: the iteration
                 may finish within ``grace_s`` seconds of the signal, and is then
                 checkpointed. If it does not, the run falls back to the state before
                 the update: the weights themselves while the update has not changed
                 them yet, else a copy of them taken before its first optimizer step
                 (:meth:`changing`; taken only when a SIGTERM is pending then, so a run
                 that is never signalled never copies). An update that had started
                 changing the weights before the signal came has no such copy: it is
                 finished, past the grace if need be, never saved half-applied.
``evaluation``   the held-out evaluation after an update: the iteration's update is
                 complete, so when the grace runs out the evaluation is cut and the
                 iteration is checkpointed without it.
``finish``       the short bookkeeping of an iteration (metrics, records, logs): it is
                 finished, then the iteration is checkpointed.

Between two iterations (while a checkpoint is written, say) the run stops before the
next one. A second SIGTERM ends the grace at once (the same rules; an update that
cannot fall back then stops without a checkpoint, the last one on disk stays). Before
the iteration loop (loading the model, evaluating only) :class:`Terminated` is raised at
once, like ``KeyboardInterrupt`` on Ctrl-C. Under torchrun (``mid_iteration`` off) the
ranks could not agree on a stop inside an iteration, whose collectives each rank enters
on its own: there the iteration in progress finishes within the grace and is
checkpointed by every rank together, or the run stops at the grace's end with the last
checkpoint it has. (Python runs the handlers between bytecodes: a long C call, a blocked
collective say, delays them.)

Free of torch. Signal handlers can only be installed from the main thread; elsewhere
:class:`TermSignal` does nothing.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

PHASES = ("rollout", "update", "evaluation", "finish")
"""The phases of an iteration, as the module docstring describes them."""


class Terminated(BaseException):
    """The run stopped on SIGTERM (a ``BaseException``, like ``KeyboardInterrupt``, so
    that no ``except Exception`` on the way, say an env error handler, swallows it).

    Attributes:
        checkpoint: the checkpoint that holds the state the run stopped with (written on
            the way out, or the newest one when it already held that state), or ``None``
            when there is none (``reason`` says why).
        iteration: completed iterations in that state (``None``: outside the loop).
        reason: why no checkpoint was written; empty when one was.
        how: where the signal found the run, as the stop line says it (``"in iteration
            3's rollout"``); empty for a stop after a finished iteration.
    """

    def __init__(self, *, checkpoint: Path | None = None, iteration: int | None = None,
                 reason: str = "", how: str = ""):
        self.checkpoint = checkpoint
        self.iteration = iteration
        self.reason = reason
        self.how = how
        super().__init__(reason or how or f"stopped after iteration {iteration}")


class StopNow(BaseException):
    """Raised by :class:`TermSignal`'s handlers inside an iteration (``mid_iteration``)
    to abandon it; the trainer catches it and writes the checkpoint it names.

    Attributes:
        keep: ``"before"``: the state before the iteration, which the weights still hold
            (a rollout; an update that has not changed them yet); ``"copy"``: that state
            from :attr:`TermSignal.fallback` (an update that had changed them);
            ``"after"``: the iteration's finished update (its evaluation cut).
        iteration: the iteration in progress (0-based).
        how: the stop line's account (:attr:`Terminated.how`).
    """

    def __init__(self, keep: str, iteration: int, how: str):
        self.keep = keep
        self.iteration = iteration
        self.how = how
        super().__init__(how)


class TermSignal:
    """Within ``with TermSignal(grace_s) as term:``, SIGTERM is handled as described in
    the module docstring; the previous SIGTERM and SIGALRM handlers are restored on exit.

    The training loop calls :meth:`loop_started` once, then brackets each iteration with
    :meth:`iteration_started` and :meth:`iteration_finished`, marks its phases in between
    (:meth:`phase`, :meth:`changing` before each optimizer step), and asks
    :attr:`requested` before starting the next one (a SIGTERM between two iterations,
    while a checkpoint is written, say, stops the run there).

    Args:
        grace_s: seconds an iteration past its rollout may still run after SIGTERM; 0
            ends it at once (by the rules of the module docstring).
        announce: write one line to stderr when a SIGTERM comes inside an iteration (rank
            0 of a torchrun job only, so the line is not repeated per rank).
        mid_iteration: stop inside an iteration by the phase rules (one process); off,
            an iteration is finished within the grace or the run stops without a new
            checkpoint (torchrun).
    """

    def __init__(self, grace_s: float, *, announce: bool = True, mid_iteration: bool = True):
        self.grace_s = grace_s
        self.announce = announce
        self.mid_iteration = mid_iteration
        self.requested = False
        self.fallback: Any = None
        """The state before the update in progress (:meth:`changing`), or ``None``."""
        self._signalled_at = 0.0
        self._in_loop = False
        self._iteration: int | None = None  # the one in progress (0-based), if any
        self._phase = "finish"
        self._changed = False  # the update in progress made an optimizer step
        self._overdue = False  # the grace ran out where the iteration must finish
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

    # ------------------------------------------------------------------ the loop's marks
    def loop_started(self) -> None:
        """The iteration loop begins: from now on a SIGTERM stops the run cleanly."""
        self._in_loop = True

    def iteration_started(self, iteration: int) -> None:
        """Iteration ``iteration`` (0-based) begins with its rollout.

        Raises:
            StopNow: a SIGTERM came since the loop last asked :attr:`requested`.
            Terminated: likewise without ``mid_iteration``, when its grace ran out.
        """
        self._iteration = iteration
        self._phase = "rollout"
        self._changed = False
        self._overdue = False
        self.fallback = None
        if self.requested:
            if self.mid_iteration:
                raise StopNow("before", iteration, self._where())
            self._arm(self.grace_s - (time.monotonic() - self._signalled_at))

    def phase(self, name: str) -> None:
        """The iteration in progress enters phase ``name`` (:data:`PHASES`); the grace's
        end, if it came while the iteration could not stop, takes effect now.

        Raises:
            StopNow: the grace ran out before, and ``name`` can stop at once.
        """
        if name not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {name!r}")
        self._phase = name
        if self._overdue and name == "evaluation":
            self._overdue = False
            self._out_of_grace()

    def changing(self, copy_state: Callable[[], Any]) -> None:
        """The update is about to change the weights (an optimizer step). Before its first
        step, with a SIGTERM pending, ``copy_state()`` is kept as :attr:`fallback`, the
        state to fall back to."""
        if self._changed or self._iteration is None:
            return
        if self.requested and self.mid_iteration:
            self.fallback = copy_state()
        self._changed = True

    def iteration_finished(self) -> None:
        """The iteration in progress ended: the grace alarm is off (the checkpoint that
        follows may take its time)."""
        self._iteration = None
        self._phase = "finish"
        self.fallback = None
        self._cancel_alarm()

    # ------------------------------------------------------------------ handlers
    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        if not self._in_loop:
            self._cancel_alarm()
            raise Terminated(iteration=self._iteration, reason="it came before training began")
        if self.requested:  # a second one: the grace ends now
            self._cancel_alarm()
            self._out_of_grace(second=True)
            return
        self.requested = True
        self._signalled_at = time.monotonic()
        if self._iteration is None:  # between iterations: the loop stops before the next
            return
        if self.mid_iteration and self._phase == "rollout":
            raise StopNow("before", self._iteration, self._where())
        if self.announce:  # os.write: print() may be what was cut
            _write_stderr(f"\n[agentgym] SIGTERM: finishing iteration {self._iteration + 1} "
                          f"(up to {self.grace_s:g} s, --run.term-grace), then writing a "
                          "checkpoint\n")
        self._arm(self.grace_s)

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        self._out_of_grace()

    def _arm(self, seconds: float) -> None:
        if seconds <= 0 or not hasattr(signal, "setitimer"):
            self._out_of_grace()
            return
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def _where(self) -> str:
        """Where the signal found the iteration in progress, for the stop line."""
        number = "?" if self._iteration is None else self._iteration + 1
        if self._phase == "rollout":
            return f"in iteration {number}'s rollout"
        return (f"when iteration {number} did not finish within --run.term-grace "
                f"{self.grace_s:g} s")

    def _out_of_grace(self, *, second: bool = False) -> None:
        """The grace is over (or a second SIGTERM came): stop as the phase allows."""
        iteration = self._iteration
        if iteration is None:
            return  # between iterations: the loop stops before the next
        how = (f"when a second SIGTERM came in iteration {iteration + 1}" if second
               else self._where())
        if not self.mid_iteration:
            self._iteration = None
            raise Terminated(iteration=iteration, reason=how.removeprefix("when "))
        if self._phase == "rollout" or (self._phase == "update" and not self._changed):
            raise StopNow("before", iteration, how)
        if self._phase == "update" and self.fallback is not None:
            raise StopNow("copy", iteration, how)
        if self._phase == "evaluation":
            raise StopNow("after", iteration, f"{how} (its evaluation was cut)")
        if second:  # an update that cannot fall back, cut: no consistent state to save
            self._iteration = None
            raise Terminated(iteration=iteration, reason=(
                f"{how.removeprefix('when ')}, in an update that had changed the weights: "
                "nothing new could be saved"))
        self._overdue = True  # finished (an update that changed the weights; bookkeeping)

    def _cancel_alarm(self) -> None:
        if self._installed and hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_REAL, 0)


def _write_stderr(text: str) -> None:
    try:
        os.write(2, text.encode())
    except OSError:
        pass
