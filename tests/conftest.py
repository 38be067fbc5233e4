"""Shared fixtures: where the real benchmark samples live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("AGENTGYM_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def shared_data_path(*parts: str) -> Path:
    """Path under ``../shared/data``; skips the calling test when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real benchmark data not found at {path} (set AGENTGYM_SHARED_DATA)")
    return path


@pytest.fixture
def shared_data() -> Path:
    """The ``../shared/data`` folder (skips when absent)."""
    return shared_data_path()
