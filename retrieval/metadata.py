"""The small JSON file that marks a saved retriever folder and says how to load it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_metadata(path: Path, format_version: int, fields: dict[str, Any]) -> None:
    """Write ``{"format_version": ..., **fields}`` to ``path`` as indented JSON."""
    meta = {"format_version": format_version, **fields}
    path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def read_metadata(path: Path, format_version: int, kind: str) -> dict[str, Any]:
    """Read a metadata file written by :func:`write_metadata`.

    Raises:
        FileNotFoundError: ``path`` is missing (the folder is not a ``kind`` folder).
        ValueError: the file was written in another format version.
    """
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: not a {kind} folder")
    meta = json.loads(path.read_text(encoding="utf-8"))
    if meta.get("format_version") != format_version:
        raise ValueError(f"{path}: unsupported format_version {meta.get('format_version')!r}")
    return meta
