"""Writing games in the official layout, atomically, and finding the ones already written.

A game lands at ``<root>/json_2.1.1/<split_dir>/<task_dir>/<trial>/`` with
``game.tw-pddl`` and ``traj_data.json``. It is first written to ``<root>/.tmp/`` and then
renamed into place, so a trial folder either holds both files or does not exist; when two
processes race to write the same game (same bytes, by determinism) the second rename
fails and its copy is dropped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from agentgym.alfworld.gen.game import GeneratedGame

DATA_DIR = "json_2.1.1"
"""The official data folder name under an ALFWorld data root."""

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"

_TRIAL = re.compile(r"^trial_G([0-9a-f]{12})_(\d{6,})$")


def game_bytes(game: GeneratedGame) -> tuple[bytes, bytes]:
    """The exact bytes of ``game.tw-pddl`` (official style) and ``traj_data.json``."""
    return (
        json.dumps(game.game).encode(),
        json.dumps(game.traj_data, indent=2).encode(),
    )


def trial_path(root: Path, split_dir: str, game: GeneratedGame) -> Path:
    """Where a game's trial folder goes under a data root."""
    return root / DATA_DIR / split_dir / game.task_dir / game.trial


def _publish(staged: Path, final: Path) -> Path:
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staged, final)
    except OSError:
        if not (final / GAME_FILE).exists():
            shutil.rmtree(staged, ignore_errors=True)
            raise
        shutil.rmtree(staged, ignore_errors=True)  # another process won the race
    return final


def _staging_dir(root: Path, attempts: int = 10) -> Path:
    """A fresh staging folder under ``<root>/.tmp``. Another process's
    :func:`cleanup_staging` may remove the empty ``.tmp`` between its creation here and
    ``mkdtemp``: then it is made again."""
    tmp = root / ".tmp"
    for _ in range(attempts - 1):
        tmp.mkdir(parents=True, exist_ok=True)
        try:
            return Path(tempfile.mkdtemp(prefix="game-", dir=tmp))
        except FileNotFoundError:
            continue
    tmp.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="game-", dir=tmp))


def write_game(root: Path, split_dir: str, game: GeneratedGame) -> Path:
    """Writes a game under ``root`` atomically; keeps an existing copy.

    Args:
        root: the data root (the folder holding ``json_2.1.1``).
        split_dir: ``train``, ``valid_seen`` or ``valid_unseen``.
        game: the game.

    Returns:
        The trial folder.
    """
    final = trial_path(root, split_dir, game)
    if (final / GAME_FILE).exists():
        return final
    staged = _staging_dir(root)
    game_data, traj_data = game_bytes(game)
    (staged / GAME_FILE).write_bytes(game_data)
    (staged / TRAJ_FILE).write_bytes(traj_data)
    return _publish(staged, final)


def copy_trial(source: Path, root: Path, relative: Path) -> Path:
    """Links (or copies) a trial folder to ``root / relative`` atomically."""
    final = root / relative
    if (final / GAME_FILE).exists():
        return final
    staged = _staging_dir(root)
    for name in (GAME_FILE, TRAJ_FILE):
        try:
            os.link(source / name, staged / name)
        except OSError:
            shutil.copyfile(source / name, staged / name)
    return _publish(staged, final)


def written_trials(root: Path, split_dir: str, key: str) -> dict[int, Path]:
    """Index -> trial folder of the complete games of config ``key`` under ``root``."""
    found: dict[int, Path] = {}
    split_root = root / DATA_DIR / split_dir
    if not split_root.is_dir():
        return found
    for task_dir in sorted(split_root.iterdir()):
        if not task_dir.is_dir():
            continue
        for trial in sorted(task_dir.iterdir()):
            match = _TRIAL.match(trial.name)
            if match and match.group(1) == key and (trial / GAME_FILE).is_file():
                if (trial / TRAJ_FILE).is_file():
                    found[int(match.group(2))] = trial
    return found


STALE_STAGING_S = 3600.0
"""Staging folders older than this (seconds) belong to killed writers and are removed."""


def cleanup_staging(root: Path) -> None:
    """Removes stale staging folders of killed writers, then ``<root>/.tmp`` if empty."""
    tmp = root / ".tmp"
    if not tmp.is_dir():
        return
    now = time.time()
    for entry in tmp.iterdir():
        try:
            if now - entry.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue
    try:
        tmp.rmdir()
    except OSError:
        pass  # another writer is staging a game right now
