"""Scenes: which floor plans a split may use and what each one contains.

A :class:`SceneInfo` is the static, type-level view of a floor plan (which receptacle and
object types it has); it decides which tasks a scene supports. A scene's concrete
receptacle instances (ids and standing locations) come from :func:`build_receptacles`,
which reads the poses alfworld ships in ``FloorPlan<N>-openable.json`` and invents ids
and poses for the receptacle types that file leaves out (coffee machines, stove burners,
toasters, most garbage cans, towel holders, ...).

Locations follow the official generator: a standing pose ``(x, z, rotation, horizon)`` in
metres and degrees becomes the grid point ``loc|round(x/0.25)|round(z/0.25)|rot/90|horizon``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from agentgym.alfworld.gen.assets import SceneLayout, scene_layouts, tables

GRID_SIZE = 0.25
"""Metres per navigation grid step in AI2-THOR (``constants.AGENT_STEP_SIZE``)."""

LAMP_TYPES: tuple[str, ...] = ("DeskLamp", "FloorLamp")
"""Toggleable light sources used by look_at_obj_in_light."""

LAMP_HOLDER_TYPES: tuple[str, ...] = (
    "CoffeeTable",
    "CounterTop",
    "Desk",
    "DiningTable",
    "Dresser",
    "Shelf",
    "SideTable",
    "TVStand",
)
"""Receptacle types a lamp may stand in (alfworld has no table for it; the official games
put desk lamps on desks, dressers, side tables and shelves)."""

MULTI_INSTANCE_TYPES: dict[str, tuple[int, int]] = {
    "Cabinet": (1, 3),
    "Drawer": (1, 3),
    "Shelf": (1, 3),
    "StoveBurner": (4, 4),
}
"""Inclusive range of invented instances for receptacle types without poses (else 1)."""

BASIN_PARENTS: dict[str, str] = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}
"""Basin receptacles get THOR ids ``Sink|x|y|z|SinkBasin`` (the demangler names them
``sinkbasin``)."""

Location = tuple[int, int, int, int]
"""A navigation grid point ``(x, z, rotation / 90, horizon)``."""

SPLIT_DIRS: dict[str, str] = {
    "train": "train",
    "valid": "valid_unseen",
    "valid_unseen": "valid_unseen",
    "valid_seen": "valid_seen",
}
"""Split name -> the ``json_2.1.1`` folder it is written to. ``"valid"`` means held-out
scenes, like the official ``valid_unseen``; ``"valid_seen"`` uses the train scenes."""


@dataclass(frozen=True)
class SceneInfo:
    """Type-level content of one floor plan.

    Attributes:
        number: floor plan number.
        scene_type: ``Kitchen``, ``LivingRoom``, ``Bedroom`` or ``Bathroom``.
        receptacle_types: static receptacle types present (sorted).
        pickup_types: object types present that fit at least one present receptacle.
        lamp_types: lamp types present (look_at_obj_in_light needs one).
    """

    number: int
    scene_type: str
    receptacle_types: tuple[str, ...]
    pickup_types: tuple[str, ...]
    lamp_types: tuple[str, ...]


@dataclass(frozen=True)
class Receptacle:
    """One static receptacle instance.

    Attributes:
        thor_id: THOR-style id, e.g. ``Cabinet|+00.68|+00.50|-02.20``.
        rtype: receptacle type, e.g. ``Cabinet``.
        location: the grid point the agent stands at to use it.
        openable: has a door or drawer (must be opened before taking or putting).
    """

    thor_id: str
    rtype: str
    location: Location
    openable: bool


def receptacle_type(thor_id: str) -> str:
    """``Cabinet|x|y|z`` -> ``Cabinet``; ``Sink|x|y|z|SinkBasin`` -> ``SinkBasin``."""
    parts = thor_id.split("|")
    return parts[4] if len(parts) == 5 else parts[0]


def pose_to_location(pose: tuple[float, float, int, int]) -> Location:
    """Standing pose in metres/degrees -> grid location (as the official generator does)."""
    x, z, rotation, horizon = pose
    return (
        int(round(x / GRID_SIZE)),
        int(round(z / GRID_SIZE)),
        (int(round(rotation / 90)) % 4),
        int(horizon),
    )


def scene_type_of(number: int) -> str:
    """The scene type of a floor plan number (from alfworld's ``SCENE_TYPE``)."""
    for name, numbers in tables().scene_types.items():
        if number in numbers:
            return name
    raise ValueError(f"FloorPlan{number} has no scene type in alfworld's constants")


@functools.lru_cache(maxsize=1)
def scene_catalog() -> dict[int, SceneInfo]:
    """:class:`SceneInfo` of every floor plan alfworld ships, by number."""
    t = tables()
    static = set(t.static_receptacle_types)
    catalog: dict[int, SceneInfo] = {}
    for number, layout in scene_layouts().items():
        present = {receptacle_type(rid) for rid, _ in layout.receptacle_poses}
        present |= static & set(layout.object_types)
        present &= static
        rtypes = tuple(sorted(present))
        accepted = set().union(*(t.can_contain.get(r, ()) for r in rtypes)) if rtypes else set()
        pickup = tuple(sorted(o for o in layout.object_types if o in accepted and o not in static))
        lamps = tuple(sorted(o for o in layout.object_types if o in LAMP_TYPES))
        catalog[number] = SceneInfo(number, scene_type_of(number), rtypes, pickup, lamps)
    return catalog


def split_scenes(split: str, scene_types: tuple[str, ...] | None = None) -> tuple[int, ...]:
    """Floor plans a split may use, optionally restricted to some scene types.

    Args:
        split: ``"train"``/``"valid_seen"`` (alfworld's train scenes) or
            ``"valid"``/``"valid_unseen"`` (its held-out test scenes).
        scene_types: keep only these scene types (``None``: all).

    Returns:
        Sorted floor plan numbers that have layout files.
    """
    if split not in SPLIT_DIRS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(SPLIT_DIRS)}")
    t = tables()
    numbers = t.valid_scenes if SPLIT_DIRS[split] == "valid_unseen" else t.train_scenes
    catalog = scene_catalog()
    chosen = [n for n in numbers if n in catalog]
    if scene_types is not None:
        chosen = [n for n in chosen if catalog[n].scene_type in scene_types]
    return tuple(sorted(chosen))


def _coordinate(rng: np.random.Generator, low: float, high: float) -> str:
    """A THOR-style id coordinate such as ``+01.25`` or ``-00.40``."""
    return f"{rng.uniform(low, high):+06.2f}"


def _fresh_location(
    rng: np.random.Generator, bounds: tuple[int, int, int, int], used: set[Location]
) -> Location:
    """A grid point inside ``bounds`` (x_lo, x_hi, z_lo, z_hi) not in ``used``."""
    x_lo, x_hi, z_lo, z_hi = bounds
    for _ in range(1000):
        location = (
            int(rng.integers(x_lo, x_hi + 1)),
            int(rng.integers(z_lo, z_hi + 1)),
            int(rng.integers(0, 4)),
            int(rng.choice([0, 30, 60])),
        )
        if location not in used:
            return location
    raise RuntimeError("could not find a free grid location (scene too crowded)")


def scene_bounds(layout: SceneLayout) -> tuple[int, int, int, int]:
    """Grid bounding box (x_lo, x_hi, z_lo, z_hi) of a scene's known standing poses."""
    points = [pose_to_location(pose) for _, pose in layout.receptacle_poses]
    if not points:
        return (-8, 8, -8, 8)
    xs, zs = [p[0] for p in points], [p[1] for p in points]
    return (min(xs) - 1, max(xs) + 1, min(zs) - 1, max(zs) + 1)


def build_receptacles(number: int, rng: np.random.Generator) -> tuple[Receptacle, ...]:
    """Receptacle instances of a scene: shipped poses plus invented ones.

    Receptacles listed in ``FloorPlan<N>-openable.json`` keep their ids and poses (several
    may share a standing location, as in the official games). Types present in the scene
    but absent from that file get ``MULTI_INSTANCE_TYPES`` (default 1) instances with
    random THOR-style ids and fresh locations; the instances of a multi-instance type
    share locations pairwise (two stove burners reachable from one spot).

    Args:
        number: floor plan number.
        rng: the game's random generator (consumed).

    Returns:
        Receptacles sorted by THOR id.
    """
    t = tables()
    layout = scene_layouts()[number]
    info = scene_catalog()[number]
    openable = set(t.openable_types)
    receptacles: list[Receptacle] = []
    used_locations: set[Location] = set()
    for rid, pose in layout.receptacle_poses:
        rtype = receptacle_type(rid)
        if rtype not in info.receptacle_types:
            continue
        location = pose_to_location(pose)
        used_locations.add(location)
        receptacles.append(Receptacle(rid, rtype, location, rtype in openable))
    listed = {r.rtype for r in receptacles}
    bounds = scene_bounds(layout)
    used_ids = {r.thor_id for r in receptacles}
    for rtype in info.receptacle_types:
        if rtype in listed:
            continue
        low, high = MULTI_INSTANCE_TYPES.get(rtype, (1, 1))
        count = int(rng.integers(low, high + 1))
        location: Location | None = None
        for index in range(count):
            if index % 2 == 0:
                location = _fresh_location(rng, bounds, used_locations)
                used_locations.add(location)
            assert location is not None
            while True:
                coords = "|".join(_coordinate(rng, -3.0, 3.0) for _ in range(3))
                head = BASIN_PARENTS.get(rtype, rtype)
                thor_id = f"{head}|{coords}" + (f"|{rtype}" if rtype in BASIN_PARENTS else "")
                if thor_id not in used_ids:
                    used_ids.add(thor_id)
                    break
            receptacles.append(Receptacle(thor_id, rtype, location, rtype in openable))
    return tuple(sorted(receptacles, key=lambda r: r.thor_id))
