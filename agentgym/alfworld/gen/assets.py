"""What the installed ``alfworld`` package ships, read once per process.

Everything the generator builds comes from these files of ``alfworld==0.4.2``:

* ``alfworld/data/alfred.pddl``  the PDDL domain (copied verbatim into every game),
* ``alfworld/data/alfred.twl2``  the TextWorld grammar (its ``UNKNOWN GOAL`` is replaced
  by the task sentence, as ``alfworld.agents.utils.misc.add_task_to_grammar`` does),
* ``alfworld/gen/layouts/FloorPlan<N>-objects.json``   object types present in scene N,
* ``alfworld/gen/layouts/FloorPlan<N>-openable.json``  receptacle ids -> standing pose,
* ``alfworld/gen/constants.py``  compatibility tables and the train / test scene lists,
* ``alfworld/gen/goal_library.py``  PDDL goal formulas and task sentence templates.

Nothing is downloaded. Importing ``alfworld`` sets ``os.environ["ALFWORLD_DATA"]`` as a
side effect; :func:`alfworld_module` undoes that so that callers can still tell whether a
user pointed ``$ALFWORLD_DATA`` at official data.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

_LAYOUT_NAME = re.compile(r"^FloorPlan(\d+)-objects\.json$")


class AlfworldMissingError(ImportError):
    """Raised when the ``alfworld`` package (the generator's only data source) is absent."""


def alfworld_module(name: str) -> ModuleType:
    """Imports ``name`` (a module of the ``alfworld`` package) without leaking env vars.

    Args:
        name: dotted module name, e.g. ``"alfworld.gen.constants"``.

    Returns:
        The imported module.

    Raises:
        AlfworldMissingError: when ``alfworld`` is not installed.
    """
    before = os.environ.get("ALFWORLD_DATA")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.split(".")[0] in ("alfworld", "textworld"):
            raise AlfworldMissingError(
                "generating ALFWorld games needs the alfworld extra: "
                "pip install 'alfworld==0.4.2' 'textworld[pddl]==1.7.0'"
            ) from error
        raise
    finally:
        if before is None:
            os.environ.pop("ALFWORLD_DATA", None)
        else:
            os.environ["ALFWORLD_DATA"] = before
    return module


@functools.lru_cache(maxsize=1)
def alfworld_root() -> Path:
    """The folder of the installed ``alfworld`` package (found without importing it)."""
    spec = importlib.util.find_spec("alfworld")
    if spec is None or not spec.submodule_search_locations:
        raise AlfworldMissingError(
            "generating ALFWorld games needs the alfworld extra: "
            "pip install 'alfworld==0.4.2' 'textworld[pddl]==1.7.0'"
        )
    return Path(next(iter(spec.submodule_search_locations)))


@functools.lru_cache(maxsize=1)
def pddl_domain() -> str:
    """The ALFRED PDDL domain shipped as ``alfworld/data/alfred.pddl``."""
    return (alfworld_root() / "data" / "alfred.pddl").read_text()


@functools.lru_cache(maxsize=1)
def grammar_template() -> str:
    """The TextWorld grammar shipped as ``alfworld/data/alfred.twl2`` (task: UNKNOWN GOAL)."""
    text = (alfworld_root() / "data" / "alfred.twl2").read_text()
    if "UNKNOWN GOAL" not in text:
        raise RuntimeError("alfred.twl2 has no 'UNKNOWN GOAL' placeholder: unsupported alfworld")
    return text


@dataclass(frozen=True)
class SceneLayout:
    """The static content of one AI2-THOR floor plan, as alfworld ships it.

    Attributes:
        number: the floor plan number (``FloorPlan<number>``).
        object_types: THOR object types present in the scene (sorted, unique).
        receptacle_poses: receptacle id (``Type|x|y|z`` or ``Sink|x|y|z|SinkBasin``)
            -> standing pose ``(x, z, rotation_degrees, horizon_degrees)`` in metres.
    """

    number: int
    object_types: tuple[str, ...]
    receptacle_poses: tuple[tuple[str, tuple[float, float, int, int]], ...]


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise RuntimeError(f"cannot read alfworld layout file {path}: {error}") from error


@functools.lru_cache(maxsize=1)
def scene_layouts() -> dict[int, SceneLayout]:
    """All floor plans with both an objects and an openable layout file, by number."""
    folder = alfworld_root() / "gen" / "layouts"
    layouts: dict[int, SceneLayout] = {}
    for path in sorted(folder.iterdir()):
        match = _LAYOUT_NAME.match(path.name)
        if match is None:
            continue
        number = int(match.group(1))
        openable_path = folder / f"FloorPlan{number}-openable.json"
        if not openable_path.exists():
            continue
        objects = _read_json(path)
        poses = _read_json(openable_path)
        if not isinstance(objects, list) or not isinstance(poses, dict):
            raise RuntimeError(f"unexpected layout format for FloorPlan{number}")
        receptacle_poses = tuple(
            (str(rid), (float(p[0]), float(p[1]), int(p[2]), int(p[3])))
            for rid, p in sorted(poses.items())
        )
        layouts[number] = SceneLayout(
            number, tuple(sorted(set(map(str, objects)))), receptacle_poses
        )
    if not layouts:
        raise RuntimeError(f"no FloorPlan layouts found under {folder}")
    return layouts


@dataclass(frozen=True)
class Tables:
    """alfworld's compatibility tables (``alfworld.gen.constants``), as sorted tuples/dicts.

    Attributes:
        train_scenes: floor plans used for training games (``TRAIN_SCENE_NUMBERS``).
        valid_scenes: held-out floor plans (``TEST_SCENE_NUMBERS``).
        scene_types: scene type name -> floor plan numbers (``SCENE_TYPE``).
        goal_scene_types: task type -> scene types it may use (``GOALS_VALID``).
        can_contain: static receptacle type -> object types it accepts
            (``VAL_RECEPTACLE_OBJECTS``).
        static_receptacle_types: receptacle types that cannot be carried.
        movable_receptacle_types: carriable receptacles (Bowl, Mug, ...).
        openable_types: receptacle types with a door or drawer (``OPENABLE_CLASS_LIST``).
        cleanable, heatable, coolable, toggleable, sliceable: object types with that
            property (``VAL_ACTION_OBJECTS``).
        otypes: every object type constant declared in a problem (``OBJECTS_SET`` minus
            static receptacles), as the official generator declares them.
    """

    train_scenes: tuple[int, ...]
    valid_scenes: tuple[int, ...]
    scene_types: dict[str, tuple[int, ...]]
    goal_scene_types: dict[str, tuple[str, ...]]
    can_contain: dict[str, tuple[str, ...]]
    static_receptacle_types: tuple[str, ...]
    movable_receptacle_types: tuple[str, ...]
    openable_types: tuple[str, ...]
    cleanable: frozenset[str]
    heatable: frozenset[str]
    coolable: frozenset[str]
    toggleable: frozenset[str]
    sliceable: frozenset[str]
    otypes: tuple[str, ...]


@functools.lru_cache(maxsize=1)
def tables() -> Tables:
    """Reads :class:`Tables` from ``alfworld.gen.constants`` (sets sorted for determinism)."""
    c = alfworld_module("alfworld.gen.constants")
    static = set(c.RECEPTACLES) - set(c.MOVABLE_RECEPTACLES)
    actions = c.VAL_ACTION_OBJECTS
    return Tables(
        train_scenes=tuple(sorted(c.TRAIN_SCENE_NUMBERS)),
        valid_scenes=tuple(sorted(c.TEST_SCENE_NUMBERS)),
        scene_types={k: tuple(v) for k, v in sorted(c.SCENE_TYPE.items())},
        goal_scene_types={k: tuple(sorted(v)) for k, v in sorted(c.GOALS_VALID.items())},
        can_contain={k: tuple(sorted(v)) for k, v in sorted(c.VAL_RECEPTACLE_OBJECTS.items())},
        static_receptacle_types=tuple(sorted(static)),
        movable_receptacle_types=tuple(sorted(c.MOVABLE_RECEPTACLES)),
        openable_types=tuple(sorted(c.OPENABLE_CLASS_LIST)),
        cleanable=frozenset(actions["Cleanable"]),
        heatable=frozenset(actions["Heatable"]),
        coolable=frozenset(actions["Coolable"]),
        toggleable=frozenset(actions["Toggleable"]),
        sliceable=frozenset(actions["Sliceable"]),
        otypes=tuple(sorted(set(c.OBJECTS_SET) - static)),
    )


@dataclass(frozen=True)
class GoalSpec:
    """One task type's goal formula and sentence templates (``alfworld.gen.goal_library``).

    Attributes:
        pddl: the ``(:goal ...)`` block with ``{obj}``, ``{recep}``, ``{toggle}`` fields
            and ``#`` for PDDL's ``-`` (the official generator's convention); it also
            closes the ``(define ...`` form.
        templates: task sentences, e.g. ``"put a {obj} in {recep}"``.
    """

    pddl: str
    templates: tuple[str, ...]


@functools.lru_cache(maxsize=1)
def goal_library() -> dict[str, GoalSpec]:
    """Goal formulas and sentence templates by task type name."""
    glib = alfworld_module("alfworld.gen.goal_library")
    return {
        name: GoalSpec(str(entry["pddl"]), tuple(entry["templates"]))
        for name, entry in sorted(glib.gdict.items())
    }
