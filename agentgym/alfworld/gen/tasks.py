"""Tasks and worlds: what the agent must do, and where everything starts.

A :class:`Task` names a task type and its targets (the ``pddl_params`` of a
``traj_data.json``). :func:`task_options` lists every task a scene supports, from
alfworld's compatibility tables; :func:`sample_world` places objects in the scene's
receptacles so that the task is solvable and not already solved:

* the targets exist (two or more instances for pick_two_obj_and_place);
* for the place tasks no instance of the target type starts in a receptacle of the
  target type (so the goal is false at the start);
* look_at_obj_in_light's lamp stands inside a receptacle (the goal and ``use`` need it);
* clean needs a SinkBasin, heat a Microwave, cool a Fridge in the scene; the target
  receptacle is never that appliance, nor a sink or bathtub basin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentgym.alfworld.gen.assets import tables
from agentgym.alfworld.gen.scenes import (
    LAMP_HOLDER_TYPES,
    Location,
    Receptacle,
    SceneInfo,
    build_receptacles,
)

TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
"""The six ALFWorld task types (alfworld's ``TASK_TYPES`` 1-6, in that order)."""

APPLIANCES: dict[str, str] = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
"""The receptacle type each state-changing task needs (``clean/heat/cool X with Y``)."""

BASIN_TYPES: tuple[str, ...] = ("BathtubBasin", "SinkBasin")
"""Never a task's target receptacle (no official game puts things in a basin as its goal)."""

MAX_INSTANCES = 3
"""Most instances of one object type (alfworld's ``MAX_NUM_OF_OBJ_INSTANCES``)."""


@dataclass(frozen=True)
class Task:
    """A task type and its targets (the ``pddl_params`` of ``traj_data.json``).

    Attributes:
        task_type: one of :data:`TASK_TYPES`.
        object_type: the object to handle, e.g. ``Mug``.
        parent_type: the receptacle type to put it in (``""`` for look_at_obj_in_light).
        toggle_type: the lamp type (``""`` unless look_at_obj_in_light).
    """

    task_type: str
    object_type: str
    parent_type: str = ""
    toggle_type: str = ""


@dataclass(frozen=True)
class PlacedObject:
    """One object instance in the initial state.

    Attributes:
        thor_id: THOR-style id, e.g. ``Mug|+00.71|+00.92|-02.20``.
        otype: object type.
        receptacle: THOR id of the receptacle it starts in.
        location: its own grid point (``objectAtLocation``; never a receptacle's).
    """

    thor_id: str
    otype: str
    receptacle: str
    location: Location


@dataclass(frozen=True)
class World:
    """The initial state of one game.

    Attributes:
        scene: the floor plan.
        receptacles: static receptacles (sorted by id).
        objects: object instances (sorted by id).
        agent_location: where the agent starts (no receptacle stands there).
    """

    scene: SceneInfo
    receptacles: tuple[Receptacle, ...]
    objects: tuple[PlacedObject, ...]
    agent_location: Location

    def receptacle(self, thor_id: str) -> Receptacle:
        """The receptacle with this THOR id."""
        for receptacle in self.receptacles:
            if receptacle.thor_id == thor_id:
                return receptacle
        raise KeyError(thor_id)


def _holders(scene: SceneInfo, otype: str, exclude: str = "") -> list[str]:
    can_contain = tables().can_contain
    return [r for r in scene.receptacle_types if r != exclude and otype in can_contain.get(r, ())]


def task_options(task_type: str, scene: SceneInfo) -> list[Task]:
    """Every task of ``task_type`` that ``scene`` supports (empty if none).

    Args:
        task_type: one of :data:`TASK_TYPES`.
        scene: the scene's type-level content.

    Returns:
        Tasks in a deterministic (sorted) order.
    """
    t = tables()
    if scene.scene_type not in t.goal_scene_types.get(task_type, ()):
        return []
    if task_type == "look_at_obj_in_light":
        if not set(LAMP_HOLDER_TYPES) & set(scene.receptacle_types):
            return []
        return [
            Task(task_type, otype, "", lamp)
            for lamp in scene.lamp_types
            for otype in scene.pickup_types
            if _holders(scene, otype)
        ]
    appliance = APPLIANCES.get(task_type, "")
    if appliance and appliance not in scene.receptacle_types:
        return []
    needed = {
        "pick_clean_then_place_in_recep": t.cleanable,
        "pick_heat_then_place_in_recep": t.heatable,
        "pick_cool_then_place_in_recep": t.coolable,
    }.get(task_type)
    options = []
    for otype in scene.pickup_types:
        if needed is not None and otype not in needed:
            continue
        for parent in _holders(scene, otype):
            if parent == appliance or parent in BASIN_TYPES:
                continue
            if _holders(scene, otype, exclude=parent):
                options.append(Task(task_type, otype, parent))
    return options


def _object_id(rng: np.random.Generator, otype: str, used: set[str]) -> str:
    while True:
        coords = "|".join(f"{rng.uniform(-3.0, 3.0):+06.2f}" for _ in range(3))
        thor_id = f"{otype}|{coords}"
        if thor_id not in used:
            used.add(thor_id)
            return thor_id


def _object_location(receptacle: Receptacle, taken: set[Location]) -> Location:
    """The receptacle's grid point seen from another horizon, free of receptacles."""
    x, z, rotation, _ = receptacle.location
    for horizon in (60, 45, 15, 0, -15, -30, 75, 90):
        location = (x, z, rotation, horizon)
        if location not in taken:
            return location
    return (x, z, (rotation + 2) % 4, 89)


def sample_world(
    task: Task,
    scene: SceneInfo,
    rng: np.random.Generator,
    *,
    max_objects: int | None = None,
) -> World:
    """Places objects in a scene so that ``task`` is solvable and not yet solved.

    Args:
        task: the task (one of :func:`task_options` for ``scene``).
        scene: the scene.
        rng: the game's random generator (consumed).
        max_objects: cap on object instances (targets and lamps always included);
            ``None`` places 1-3 instances of every object type the scene has.

    Returns:
        The initial :class:`World`.
    """
    receptacles = build_receptacles(scene.number, rng)
    taken = {r.location for r in receptacles}
    can_contain = tables().can_contain
    used_ids = {r.thor_id for r in receptacles}
    objects: list[PlacedObject] = []

    def place(otype: str, candidates: list[Receptacle]) -> None:
        receptacle = candidates[int(rng.integers(len(candidates)))]
        objects.append(
            PlacedObject(
                _object_id(rng, otype, used_ids),
                otype,
                receptacle.thor_id,
                _object_location(receptacle, taken),
            )
        )

    def holders(otype: str, exclude: str = "") -> list[Receptacle]:
        return [
            r for r in receptacles if r.rtype != exclude and otype in can_contain.get(r.rtype, ())
        ]

    # Targets first: they are never dropped by max_objects.
    low = 2 if task.task_type == "pick_two_obj_and_place" else 1
    target_count = int(rng.integers(low, MAX_INSTANCES + 1))
    target_holders = holders(task.object_type, exclude=task.parent_type)
    if not target_holders:
        raise ValueError(f"no receptacle can hold {task.object_type} in FloorPlan{scene.number}")
    for _ in range(target_count):
        place(task.object_type, target_holders)
    for lamp in scene.lamp_types:
        lamp_holders = [r for r in receptacles if r.rtype in LAMP_HOLDER_TYPES]
        if lamp_holders:
            place(lamp, lamp_holders)
        elif lamp == task.toggle_type:
            raise ValueError(f"no receptacle can hold the {lamp} in FloorPlan{scene.number}")
    others = [o for o in scene.pickup_types if o != task.object_type]
    order = rng.permutation(len(others))
    for index in order:
        otype = others[int(index)]
        count = int(rng.integers(1, MAX_INSTANCES + 1))
        for _ in range(count):
            if max_objects is not None and len(objects) >= max_objects:
                break
            place(otype, holders(otype))
    start = _start_location(rng, receptacles, taken | {o.location for o in objects})
    return World(scene, receptacles, tuple(sorted(objects, key=lambda o: o.thor_id)), start)


def _start_location(
    rng: np.random.Generator, receptacles: tuple[Receptacle, ...], taken: set[Location]
) -> Location:
    xs = [r.location[0] for r in receptacles]
    zs = [r.location[1] for r in receptacles]
    for _ in range(1000):
        location = (
            int(rng.integers(min(xs), max(xs) + 1)),
            int(rng.integers(min(zs), max(zs) + 1)),
            int(rng.integers(0, 4)),
            30,
        )
        if location not in taken:
            return location
    raise RuntimeError("could not find a free start location")
