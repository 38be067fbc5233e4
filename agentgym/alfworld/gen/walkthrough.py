"""Constructive walkthroughs: the expert's commands, built from the world, not planned.

The commands use the current grammar's verbs (``alfworld/data/alfred.twl2``): ``go to R``,
``open R``, ``take O from R``, ``move O to R``, ``heat/cool/clean O with R``, ``use L``.
Names are those alfworld's demangler gives in the game ("cabinet 3", "sinkbasin 1"),
computed with that same demangler from the PDDL names.

Movement follows the engine's rules: ``go to R`` is only emitted when the agent is not
already standing at R's location (receptacles sharing a location have no ``go to``
between them; the planner drops that no-op move), and an openable receptacle is opened
once before the first ``take`` or ``move`` there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentgym.alfworld.gen.assets import alfworld_module
from agentgym.alfworld.gen.pddl import mangle
from agentgym.alfworld.gen.scenes import Location, Receptacle
from agentgym.alfworld.gen.tasks import APPLIANCES, PlacedObject, Task, World


def display_names(world: World) -> dict[str, str]:
    """THOR id -> the name the game shows (e.g. ``"cabinet 3"``), via alfworld's demangler.

    The engine lower-cases PDDL names (fast-downward does) before the demangler numbers
    them, so the same is done here.
    """
    misc = alfworld_module("alfworld.agents.utils.misc")
    thor_ids = [r.thor_id for r in world.receptacles] + [o.thor_id for o in world.objects]
    pddl_ids = {mangle(thor_id).lower(): thor_id for thor_id in thor_ids}

    @dataclass(frozen=True)
    class _Info:
        id: str

    demangler = misc.Demangler(game_infos={pid: _Info(pid) for pid in pddl_ids})
    return {
        thor_id: demangler.demangle_alfred_name(pid).strip() for pid, thor_id in pddl_ids.items()
    }


@dataclass
class _Agent:
    """Tracks the agent while a walkthrough is built."""

    names: dict[str, str]
    location: Location
    commands: list[str]
    opened: set[str]

    def reach(self, receptacle: Receptacle) -> None:
        if self.location != receptacle.location:
            self.commands.append(f"go to {self.names[receptacle.thor_id]}")
            self.location = receptacle.location

    def open(self, receptacle: Receptacle) -> None:
        if receptacle.openable and receptacle.thor_id not in self.opened:
            self.commands.append(f"open {self.names[receptacle.thor_id]}")
            self.opened.add(receptacle.thor_id)

    def take(self, obj: PlacedObject, world: World) -> None:
        source = world.receptacle(obj.receptacle)
        self.reach(source)
        self.open(source)
        self.commands.append(f"take {self.names[obj.thor_id]} from {self.names[source.thor_id]}")

    def put(self, obj: PlacedObject, target: Receptacle) -> None:
        self.reach(target)
        self.open(target)
        self.commands.append(f"move {self.names[obj.thor_id]} to {self.names[target.thor_id]}")

    def apply(self, verb: str, obj: PlacedObject, appliance: Receptacle) -> None:
        self.reach(appliance)
        self.commands.append(
            f"{verb} {self.names[obj.thor_id]} with {self.names[appliance.thor_id]}"
        )


_VERBS = {
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
}


def _pick(rng: np.random.Generator, items: list) -> object:
    return items[int(rng.integers(len(items)))]


def build_walkthrough(world: World, task: Task, rng: np.random.Generator) -> list[str]:
    """The commands that solve ``task`` in ``world``.

    Target instances (which mug, which cabinet) are drawn from ``rng``.

    Args:
        world: the initial state.
        task: the task.
        rng: the game's random generator (consumed).

    Returns:
        Commands in the game's grammar, e.g. ``["go to countertop 1", "take mug 1 from
        countertop 1", "go to microwave 1", "heat mug 1 with microwave 1", ...]``.
    """
    names = display_names(world)
    agent = _Agent(names, world.agent_location, [], set())
    targets = [o for o in world.objects if o.otype == task.object_type]
    if not targets:
        raise ValueError(f"no {task.object_type} in the world")
    if task.task_type == "look_at_obj_in_light":
        obj = _pick(rng, targets)
        lamps = [o for o in world.objects if o.otype == task.toggle_type]
        lamp = _pick(rng, lamps)
        agent.take(obj, world)
        agent.reach(world.receptacle(lamp.receptacle))
        agent.commands.append(f"use {names[lamp.thor_id]}")
        return agent.commands
    parents = [r for r in world.receptacles if r.rtype == task.parent_type]
    parent = _pick(rng, parents)
    order = [targets[int(i)] for i in rng.permutation(len(targets))]
    if task.task_type == "pick_two_obj_and_place":
        for obj in order[:2]:
            agent.take(obj, world)
            agent.put(obj, parent)
        return agent.commands
    obj = order[0]
    agent.take(obj, world)
    if task.task_type in APPLIANCES:
        appliances = [r for r in world.receptacles if r.rtype == APPLIANCES[task.task_type]]
        agent.apply(_VERBS[task.task_type], obj, _pick(rng, appliances))
    agent.put(obj, parent)
    return agent.commands
