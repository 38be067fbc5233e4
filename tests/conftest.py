"""Shared fixtures: where the real benchmark samples live; differential tests that may not
skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("AGENTGYM_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
REQUIRE_SHARED_DATA = os.environ.get("AGENTGYM_REQUIRE_SHARED_DATA") == "1"
"""Set by CI (``.ci/run``): a missing data file fails its test instead of skipping it."""
REQUIRE_DIFFERENTIAL_ENV = "AGENTGYM_REQUIRE_DIFFERENTIAL"
"""Set to 1 by CI (``.ci/run``): a test marked ``differential`` that skips fails instead."""


def missing_shared_data(path: Path) -> str:
    """The message for a missing data path; raises when the data is required."""
    message = f"real benchmark data not found at {path} (set AGENTGYM_SHARED_DATA)"
    if REQUIRE_SHARED_DATA:
        raise FileNotFoundError(message + "; AGENTGYM_REQUIRE_SHARED_DATA=1 requires it")
    return message


def shared_data_path(*parts: str) -> Path:
    """Path under ``../shared/data``; skips the calling test when it is absent (fails
    under ``AGENTGYM_REQUIRE_SHARED_DATA=1``)."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(missing_shared_data(path))
    return path


@pytest.fixture
def shared_data() -> Path:
    """The ``../shared/data`` folder (skips when absent)."""
    return shared_data_path()


@pytest.fixture(autouse=True)
def cpu_without_bf16(request):
    """In-process tests run in float32 on every CPU: ``model.dtype: auto`` resolves as on a
    CPU without bfloat16 instructions, so a test's numbers do not depend on the machine
    that runs it. Tests of bfloat16 ask for it by name (``dtype="bfloat16"``), or are
    marked ``cpu_bf16`` to see the machine's own answer. Subprocesses (``train.py`` runs)
    are not patched: they take this machine's default. The patch has a ``MonkeyPatch`` of
    its own, so a test's ``monkeypatch.undo()`` leaves it in place."""
    if request.node.get_closest_marker("cpu_bf16") is not None:
        yield
        return
    try:
        import algorithms.precision as precision
    except ImportError:  # no torch: nothing resolves a dtype
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(precision, "cpu_has_bf16", lambda: False)
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under ``AGENTGYM_REQUIRE_DIFFERENTIAL=1`` a skipped ``differential`` test (in any
    phase: a ``skipif`` mark, a skipping fixture, ``pytest.skip`` in the test) is
    reported as failed, with the skip's reason."""
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and not hasattr(report, "wasxfail")
            and os.environ.get(REQUIRE_DIFFERENTIAL_ENV) == "1"
            and item.get_closest_marker("differential") is not None):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        reason = str(reason).removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = (f"a differential test skipped under {REQUIRE_DIFFERENTIAL_ENV}=1 "
                           f"(CI): {reason}")
