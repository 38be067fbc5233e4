"""One style for the errors of every command: ``PROG: error: MESSAGE``, one line on
stderr, and an exit status that says which kind of mistake it was.

:data:`USAGE_ERROR` (2): the command cannot run as given (a flag, a value, a combination);
:data:`RUNTIME_ERROR` (1): it ran and failed. ``train.py`` and the ``python -m`` commands
of ``agentgym`` and ``algorithms`` follow it.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

USAGE_ERROR = 2
"""Exit status of a command that cannot run as given."""
RUNTIME_ERROR = 1
"""Exit status of a command that ran and failed."""


class OneLineParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose refusal of a command line is one line,
    ``PROG: error: MESSAGE (PROG --help lists the options)``, with exit status
    :data:`USAGE_ERROR`, instead of argparse's usage block and message."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} ({self.prog} --help lists the "
                               "options)\n")
