"""How this process was started and how it ends: one process, or a rank of a torchrun job.

Free of torch, so that ``train.py`` can use it before (or without) importing the
training stack (``--help`` and a bad flag stay fast).
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from typing import NoReturn


def launched_with_ranks() -> bool:
    """Whether torchrun (or another launcher) set ``WORLD_SIZE`` > 1 for this process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def rank_prefix() -> str:
    """``"rank R: "`` in a torchrun job (for one-line error messages), else ``""``."""
    return f"rank {os.environ['RANK']}: " if launched_with_ranks() and "RANK" in os.environ \
        else ""


def run_worker(main: Callable[[], object]) -> None:
    """Run a script's ``main()``; in a torchrun job, end the process through
    :func:`exit_worker` with the status Python would give (0, ``sys.exit``'s code, or 1
    after printing the traceback of an uncaught exception). One process: just ``main()``.
    """
    if not launched_with_ranks():
        main()
        return
    try:
        main()
    except SystemExit as done:
        exit_worker(done.code)
    except BaseException:  # noqa: BLE001 - printed as Python would, then a status of 1
        sys.excepthook(*sys.exc_info())
        exit_worker(1)
    exit_worker(0)


def exit_worker(code: int | str | None = 0) -> NoReturn:
    """End this process with ``code`` (as ``sys.exit``: ``None`` is 0, a string is printed
    to stderr and gives 1), after the ``atexit`` handlers and a flush of stdout and
    stderr, but without the interpreter's teardown.

    Why: gloo's worker threads destroy a finished collective's work object, and with it
    a C++ reference to its tensors, after the waiting Python thread was woken; dropping
    that reference takes the GIL. When the main thread reaches the interpreter's teardown
    first, Python makes such a thread exit inside a C++ destructor and the process aborts
    ("terminate called without an active exception", SIGABRT) after a run that succeeded
    (a gdb backtrace showed exactly this: ``ProcessGroupGloo::runLoop`` ->
    ``~AsyncAllgatherCoalescedWork`` -> ``decref_pyobject`` -> ``take_gil`` ->
    ``pthread_exit`` during ``Py_FinalizeEx``). On this machine a minimal 2-rank FSDP2
    script aborted in 2-5 of every 10-12 runs; ended this way, in none of 20.
    """
    atexit._run_exitfuncs()  # what Python runs before its teardown (logging, Ray, ...)
    if code is None or isinstance(code, int):
        status = code or 0
    else:  # a message (as sys.exit prints it)
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing left to save
            pass
    os._exit(status)
