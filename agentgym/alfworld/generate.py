"""Generated ALFWorld games: the embedded default when no official data exists.

Games are built from what the installed ``alfworld`` package ships (scene layouts,
compatibility tables, goal formulas, the PDDL domain and the TextWorld grammar), written
in the official layout, and each one's walkthrough is verified by one replay through the
real TextWorld PDDL engine with alfworld's demangler. No planner, no download.

Layout written (the same as ``alfworld-download``'s)::

    <root>/json_2.1.1/<split_dir>/<task_type>-<Object>-None-<Receptacle|Lamp>-<scene>/
        trial_G<config key>_<index>/{game.tw-pddl, traj_data.json}

``split="train"`` writes ``train`` (alfworld's train scenes); ``split="valid"`` writes
``valid_unseen`` (its held-out scenes, like the official out-of-distribution split);
``split="valid_seen"`` writes ``valid_seen`` (train scenes, games disjoint from train's).

Python::

    from agentgym.alfworld.generate import ensure_generated_games, generate_games
    root = ensure_generated_games(split="train", num_games=60, seed=0)  # cached
    dirs = generate_games("out", num_games=12, seed=3, task_types=["look_at_obj_in_light"])

CLI::

    python -m agentgym.alfworld.generate --out DIR --num N [--seed S] [--split train|valid]
        [--task-types T ...] [--scene-types Kitchen ...] [--max-objects K] [--workers W]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from agentgym.alfworld.data import TASK_TYPES
from agentgym.alfworld.gen.assets import AlfworldMissingError
from agentgym.alfworld.gen.game import (
    GENERATOR_VERSION,
    GeneratedGame,
    GenerationConfig,
    make_game,
)
from agentgym.alfworld.gen.scenes import SPLIT_DIRS
from agentgym.alfworld.gen.store import (
    cleanup_staging,
    copy_trial,
    write_game,
    written_trials,
)
from agentgym.alfworld.gen.verify import VerificationError, replay
from agentgym.command_line import OneLineParser

__all__ = [
    "DEFAULT_NUM_GAMES",
    "GENERATOR_VERSION",
    "MAX_ATTEMPTS",
    "TASK_TYPES",
    "build_verified_game",
    "default_cache_dir",
    "ensure_generated_games",
    "generate_games",
    "main",
]

DEFAULT_NUM_GAMES = 60
"""Games :func:`ensure_generated_games` makes when not told (10 per task type)."""

MAX_ATTEMPTS = 3
"""Redraws of one game whose walkthrough fails its replay before giving up."""


def default_cache_dir() -> Path:
    """``$AGENTGYM_CACHE/alfworld``, else ``~/.cache/agentgym/alfworld``."""
    base = os.environ.get("AGENTGYM_CACHE")
    root = Path(base).expanduser() if base else Path.home() / ".cache" / "agentgym"
    return root / "alfworld"


def build_verified_game(
    config: GenerationConfig, index: int, *, verify: bool = True
) -> GeneratedGame:
    """Game ``index`` of ``config``, replayed on the real engine when ``verify``.

    A game whose walkthrough fails its replay is redrawn (up to :data:`MAX_ATTEMPTS`
    times, with a warning); that would be a generator bug, so it should never happen.

    Raises:
        VerificationError: no attempt produced a winning walkthrough.
    """
    errors = []
    for attempt in range(MAX_ATTEMPTS):
        game = make_game(config, index, attempt)
        if not verify:
            return game
        try:
            replay(game.game)
        except VerificationError as error:
            errors.append(f"attempt {attempt}: {error}")
            warnings.warn(
                f"generated game {index} ({game.task_dir}) failed its replay: {error}",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        return game
    raise VerificationError(f"game {index} of {config}: " + "; ".join(errors))


def _build_and_write(args: tuple[GenerationConfig, int, bool, str]) -> Path:
    config, index, verify, root = args
    game = build_verified_game(config, index, verify=verify)
    return write_game(Path(root), config.split_dir, game)


def _run(
    config: GenerationConfig,
    indices: Sequence[int],
    root: Path,
    *,
    verify: bool,
    workers: int,
    progress: bool,
    description: str,
) -> list[Path]:
    """Builds, verifies and writes ``indices``; returns trial folders in index order.

    ``progress``: a tqdm bar on a terminal; where stderr is not one (a log file), one line
    when generation starts and one when it ends instead of a redraw per game."""
    from tqdm.auto import tqdm

    tasks = [(config, index, verify, str(root)) for index in indices]
    terminal = sys.stderr.isatty()
    bar = tqdm(total=len(tasks), desc=description, unit="game",
               disable=not (progress and terminal))
    started = time.perf_counter()
    if progress and not terminal:
        print(f"{description}: {len(tasks)} games ...", file=sys.stderr, flush=True)
    try:
        if workers <= 1 or len(tasks) <= 1:
            paths = []
            for task in tasks:
                paths.append(_build_and_write(task))
                bar.update()
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                paths = []
                for path in pool.map(_build_and_write, tasks, chunksize=1):
                    paths.append(path)
                    bar.update()
    finally:
        bar.close()
        cleanup_staging(root)
    if progress and not terminal:
        print(f"{description}: {len(tasks)} games in {time.perf_counter() - started:.0f} s",
              file=sys.stderr, flush=True)
    return paths


def _config(
    seed: int,
    split: str,
    task_types: Iterable[str] | None,
    scene_types: Iterable[str] | None,
    max_objects: int | None,
) -> GenerationConfig:
    return GenerationConfig(
        seed=seed,
        split=split,
        task_types=None if task_types is None else tuple(task_types),
        scene_types=None if scene_types is None else tuple(scene_types),
        max_objects=max_objects,
    )


def _check_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def generate_games(
    out_dir: str | os.PathLike[str],
    *,
    num_games: int,
    seed: int = 0,
    split: str = "train",
    task_types: Iterable[str] | None = None,
    scene_types: Iterable[str] | None = None,
    max_objects: int | None = None,
    verify: bool = True,
    workers: int = 1,
    progress: bool = True,
) -> list[Path]:
    """Generates games ``0 .. num_games-1`` of a configuration under ``out_dir``.

    Same arguments, same bytes: game ``i`` depends only on ``(seed, split, i)`` and the
    knobs. Games already present (same configuration) are kept, not rewritten.

    Args:
        out_dir: the data root to write (``out_dir/json_2.1.1/<split_dir>/...``).
        num_games: how many games (>= 1).
        seed: base seed (>= 0).
        split: ``"train"``, ``"valid"`` (held-out scenes, written as ``valid_unseen``)
            or ``"valid_seen"``.
        task_types: task types to mix evenly (default: all six).
        scene_types: restrict to these scene types (default: all four).
        max_objects: cap on object instances per game (default: 1-3 of every object
            type in the scene; fewer objects make smaller, faster games).
        verify: replay every walkthrough through the real engine (default ``True``).
        workers: processes to use (1: in this process).
        progress: show a tqdm progress bar (two plain lines where stderr is not a terminal).

    Returns:
        The trial folders, in index order.

    Raises:
        ValueError: on a bad argument (unknown split or task type, impossible
            combination such as heat tasks in bedrooms, non-positive counts).
        AlfworldMissingError: ``alfworld`` / ``textworld`` are not installed.
    """
    _check_count("num_games", num_games, 1)
    _check_count("workers", workers, 1)
    config = _config(seed, split, task_types, scene_types, max_objects)
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    present = written_trials(root, config.split_dir, config.key())
    missing = [i for i in range(num_games) if i not in present]
    if missing:
        _run(
            config,
            missing,
            root,
            verify=verify,
            workers=workers,
            progress=progress,
            description=f"generating ALFWorld {config.split_dir} games",
        )
    present = written_trials(root, config.split_dir, config.key())
    return [present[i] for i in range(num_games)]


def ensure_generated_games(
    split: str = "train",
    num_games: int = DEFAULT_NUM_GAMES,
    seed: int = 0,
    task_types: Iterable[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    scene_types: Iterable[str] | None = None,
    max_objects: int | None = None,
    verify: bool = True,
    workers: int = 1,
    progress: bool = True,
) -> Path:
    """A cached data root holding exactly games ``0 .. num_games-1`` of a configuration.

    The root is ``<cache_dir>/generated-<key>/n<num_games>``, where ``key`` hashes the
    generator version, seed, split and knobs. Only missing games are made: those found
    in a sibling root of the same key (another ``num_games``) are hard-linked or copied,
    the rest are generated (with a progress bar), each written atomically, so two
    processes may fill the same cache at once.

    Args:
        split: ``"train"`` or ``"valid"`` (also ``"valid_seen"`` / ``"valid_unseen"``).
        num_games: how many games the root holds (>= 1).
        seed: base seed (>= 0).
        task_types: task types to mix evenly (default: all six).
        cache_dir: the cache folder (default :func:`default_cache_dir`).
        scene_types: restrict to these scene types.
        max_objects: cap on object instances per game.
        verify: replay every new walkthrough through the real engine.
        workers: processes to use for new games.
        progress: show a tqdm progress bar (two plain lines where stderr is not a terminal).

    Returns:
        The data root: ``root / "json_2.1.1" / split_dir`` holds the games, where
        ``split_dir`` is ``train``, ``valid_unseen`` (for ``"valid"``) or ``valid_seen``.
    """
    _check_count("num_games", num_games, 1)
    _check_count("workers", workers, 1)
    config = _config(seed, split, task_types, scene_types, max_objects)
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    family = base / f"generated-{config.key()}"
    root = family / f"n{num_games}"
    present = written_trials(root, config.split_dir, config.key())
    missing = {i for i in range(num_games) if i not in present}
    if missing and family.is_dir():
        for sibling in sorted(family.iterdir()):
            if sibling == root or not sibling.is_dir() or not missing:
                continue
            for index, trial in written_trials(sibling, config.split_dir, config.key()).items():
                if index in missing:
                    copy_trial(trial, root, trial.relative_to(sibling))
                    missing.discard(index)
        cleanup_staging(root)
    if missing:
        _run(
            config,
            sorted(missing),
            root,
            verify=verify,
            workers=workers,
            progress=progress,
            description=f"generating ALFWorld {config.split_dir} games (cached in {root})",
        )
    return root


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m agentgym.alfworld.generate",
        description=(
            "Generate ALFWorld games (game.tw-pddl + traj_data.json in the official "
            "json_2.1.1 layout) from the scenes the alfworld package ships; every "
            "walkthrough is verified on the real TextWorld engine."
        ),
    )
    parser.add_argument("--out", required=True, type=Path, help="data root to write into")
    parser.add_argument("--num", required=True, type=int, help="number of games (>= 1)")
    parser.add_argument("--seed", type=int, default=0, help="base seed (>= 0, default 0)")
    parser.add_argument(
        "--split",
        default="train",
        choices=sorted(SPLIT_DIRS),
        help="train scenes (train) or held-out scenes (valid = valid_unseen); default train",
    )
    parser.add_argument(
        "--task-types",
        nargs="+",
        choices=TASK_TYPES,
        metavar="TASK",
        default=None,
        help=f"task types to mix evenly (default: all of {', '.join(TASK_TYPES)})",
    )
    parser.add_argument(
        "--scene-types",
        nargs="+",
        choices=("Bathroom", "Bedroom", "Kitchen", "LivingRoom"),
        metavar="SCENE",
        default=None,
        help="restrict scenes to these types",
    )
    parser.add_argument(
        "--max-objects", type=int, default=None, help="cap on object instances per game"
    )
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the replay of each walkthrough"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.num < 1:
        parser.error(f"--num must be >= 1, got {args.num}")
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    if args.max_objects is not None and args.max_objects < 1:
        parser.error(f"--max-objects must be >= 1, got {args.max_objects}")
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    start = time.perf_counter()
    try:
        paths = generate_games(
            args.out,
            num_games=args.num,
            seed=args.seed,
            split=args.split,
            task_types=args.task_types,
            scene_types=args.scene_types,
            max_objects=args.max_objects,
            verify=not args.no_verify,
            workers=args.workers,
            progress=not args.quiet,
        )
    except (ValueError, AlfworldMissingError) as error:
        parser.error(str(error))
    elapsed = time.perf_counter() - start
    split_dir = SPLIT_DIRS[args.split]
    print(
        f"{len(paths)} games in {args.out / 'json_2.1.1' / split_dir} "
        f"({elapsed:.1f} s, {'verified' if not args.no_verify else 'not verified'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
