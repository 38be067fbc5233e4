"""Helpers of the differential tests (this project against the code it reproduces).

Each differential test compares with the original's outputs recorded under
``tests/data/originals/`` (``tools/record_originals.py``; no checkout needed) and is marked
``differential``: under ``AGENTGYM_REQUIRE_DIFFERENTIAL=1`` (CI) such a test that skips
fails instead (``tests/conftest.py``). The older tests that run an original beside ours
when a checkout is named (``AGENTGYM_VERL_AGENT_PATH``, ...) load it with
:func:`live_original`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tools import originals


def live_original(env_var: str, loader: Callable[..., Any], *args: Any,
                  what: str = "the original") -> Iterator[Any]:
    """For a module-scoped fixture: the original that ``loader`` loads from the checkout
    ``$env_var`` names (skips without one, or when a dependency of the original is
    missing; fails when the folder is not such a checkout)."""
    root = os.environ.get(env_var)
    if not root:
        pytest.skip(f"set {env_var} to a checkout to compare with {what}")
    with contextlib.ExitStack() as stack:
        try:
            loaded = stack.enter_context(loader(root, *args))
        except FileNotFoundError as error:
            pytest.fail(f"{env_var}={root}: {error}")
        except originals.OriginalUnavailable as error:
            pytest.skip(str(error))
        yield loaded


def recorded(name: str) -> dict[str, Any]:
    """The cases of the fixture ``name`` (a missing fixture fails, never skips)."""
    return originals.read_fixture(name)["cases"]
