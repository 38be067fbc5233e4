"""PDDL problems in the official ALFWorld layout.

Names are THOR ids mangled like alfworld's generator (``|`` -> ``_bar_``, ``+`` ->
``_plus_``, ``-`` -> ``_minus_``, ``.`` -> ``_dot_``, ``,`` -> ``_comma_``); alfworld's
demangler turns them back into "cabinet 1" style names (basins keep ``...|SinkBasin`` so
they read "sinkbasin 1"). The problem declares, like the official files, every object
type (``AppleType - otype``) and static receptacle type (``CabinetType - rtype``) as
constants, then the instances, the locations and the initial facts:

``receptacleType objectType canContain pickupable isReceptacleObject openable atLocation
cleanable heatable coolable toggleable sliceable inReceptacle receptacleAtLocation
objectAtLocation``

followed by the task type's goal formula from ``alfworld.gen.goal_library``.
"""

from __future__ import annotations

from agentgym.alfworld.gen.assets import goal_library, tables
from agentgym.alfworld.gen.scenes import LAMP_TYPES, Location
from agentgym.alfworld.gen.tasks import Task, World

_MANGLE = (("|", "_bar_"), ("+", "_plus_"), ("-", "_minus_"), (".", "_dot_"), (",", "_comma_"))


def mangle(thor_id: str) -> str:
    """THOR id -> PDDL name, e.g. ``Cabinet|+00.68|-02.20`` -> ``Cabinet_bar__plus_00_dot_68_bar__minus_02_dot_20``."""
    for old, new in _MANGLE:
        thor_id = thor_id.replace(old, new)
    return thor_id


def location_name(location: Location) -> str:
    """Grid location -> PDDL name, e.g. ``(-3, 2, 1, 30)`` -> ``loc_bar__minus_3_bar_2_bar_1_bar_30``."""
    return mangle("loc|{}|{}|{}|{}".format(*location))


def goal_text(task: Task) -> str:
    """The task's ``(:goal ...)`` block (also closing ``(define ...``)."""
    spec = goal_library()[task.task_type]
    text = spec.pddl.format(obj=task.object_type, recep=task.parent_type, toggle=task.toggle_type)
    return text.replace("#", "-")


def problem_text(world: World, task: Task, problem_name: str) -> str:
    """The PDDL problem of a game.

    Args:
        world: the initial state.
        task: the task (its goal formula ends the problem).
        problem_name: the problem's name (``plan_<trial>`` in the official files).

    Returns:
        The problem as text, deterministic for a given world and task.
    """
    t = tables()
    indent = "\n        "
    receptacles = world.receptacles
    objects = world.objects
    locations = sorted(
        {r.location for r in receptacles} | {o.location for o in objects} | {world.agent_location}
    )
    declarations = [f"{otype}Type - otype" for otype in t.otypes]
    declarations += [f"{rtype}Type - rtype" for rtype in t.static_receptacle_types]
    declarations += [f"{mangle(o.thor_id)} - object" for o in objects]
    declarations += [f"{mangle(r.thor_id)} - receptacle" for r in receptacles]
    declarations += [f"{location_name(loc)} - location" for loc in locations]

    otypes = set(t.otypes)
    present_rtypes = sorted({r.rtype for r in receptacles})
    facts: list[str] = []
    facts += [f"(receptacleType {mangle(r.thor_id)} {r.rtype}Type)" for r in receptacles]
    facts += [f"(objectType {mangle(o.thor_id)} {o.otype}Type)" for o in objects]
    facts += [
        f"(canContain {rtype}Type {otype}Type)"
        for rtype in present_rtypes
        for otype in t.can_contain.get(rtype, ())
        if otype in otypes
    ]
    facts += [f"(pickupable {mangle(o.thor_id)})" for o in objects if o.otype not in LAMP_TYPES]
    movable = set(t.movable_receptacle_types)
    facts += [f"(isReceptacleObject {mangle(o.thor_id)})" for o in objects if o.otype in movable]
    facts += [f"(openable {mangle(r.thor_id)})" for r in receptacles if r.openable]
    facts.append(f"(atLocation agent1 {location_name(world.agent_location)})")
    for predicate, kinds in (
        ("cleanable", t.cleanable),
        ("heatable", t.heatable),
        ("coolable", t.coolable),
        ("toggleable", t.toggleable),
        ("sliceable", t.sliceable),
    ):
        facts += [f"({predicate} {mangle(o.thor_id)})" for o in objects if o.otype in kinds]
    facts += [f"(inReceptacle {mangle(o.thor_id)} {mangle(o.receptacle)})" for o in objects]
    facts += [
        f"(receptacleAtLocation {mangle(r.thor_id)} {location_name(r.location)})"
        for r in receptacles
    ]
    facts += [
        f"(objectAtLocation {mangle(o.thor_id)} {location_name(o.location)})" for o in objects
    ]
    return (
        f"\n(define (problem {problem_name})\n(:domain alfred)\n(:objects\nagent1 - agent"
        + indent
        + indent.join(declarations)
        + "\n        )\n\n(:init\n"
        + indent
        + indent.join(facts)
        + "\n        )\n\n"
        + goal_text(task)
    )
