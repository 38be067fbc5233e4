"""ALFWorld's hand-coded expert, closed loop: it searches the room, as the original does.

ALFWorld (Shridhar et al., ICLR 2021) trains its DAgger agents with a second expert
besides the games' stored walkthroughs, ``expert_type: handcoded``
(``alfworld/agents/expert/handcoded_expert.py`` and ``handcoded_expert_tw.py``). It does
not know where things are: it reads the room from the text, searches the receptacles
where the object class is usually found first (ALFRED's ``VAL_RECEPTACLE_OBJECTS``),
remembers what it saw where, opens the closed receptacles it searches (and closes them
before it moves on when nothing of use was inside), takes the object when it sees it,
and decides how far the task has come from the game's true facts (what the agent
holds, whether it is hot / cool / clean, what lies in the target receptacle).
Because it acts from the episode so far, it has a sensible next action after *any*
action, including a random one: expert data with perturbed steps then shows recovery.

This is our own implementation of that behaviour, in one decision function
(:meth:`HandcodedExpert.act`) over a small memory that :meth:`HandcodedExpert.observe`
updates from each command and its feedback. Differences from the original, on purpose:

* the receptacle-to-object priors come from :func:`agentgym.alfworld.gen.assets.tables`
  (the same ``alfworld.gen.constants`` table the generator uses), not a second copy;
* it keeps where each *object* was last seen (the original keeps one receptacle per
  object class), so a pick-two task goes back for the second instance it saw;
* a wrong object in hand is put down where the agent stands when a receptacle there
  takes it (else, as the original always does, back where it was taken);
* receptacles that share the agent's place (two stove burners; the engine offers no
  "go to" for them) are searched there with ``examine`` / ``open``, without walking;
* only sink basins are tried for cleaning (the original falls back to a bathtub basin,
  which ``alfred.pddl`` does not allow);
* it returns only admissible commands: where its choice is not admissible (not seen in
  the runs of ``docs/envs/alfworld.md``) it plays a random admissible one from its
  seeded generator and counts it in :attr:`HandcodedExpert.fallbacks`.

Where the original draws with ``random.choice`` (which visible instance to take, which
of several target receptacles to use) this one draws from a ``numpy`` generator seeded
at construction, so an episode is reproducible for a seed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym.alfworld.engine import NOTHING_HAPPENS

NAME = re.compile(r"\b([a-z]+ \d+)\b")
"""A thing's name in ALFWorld's text: its lowercase class and a number ("cabinet 3")."""
_CONTENTS = re.compile(
    r"(?:On the ([a-z]+ \d+), you see|The ([a-z]+ \d+) is open\. In it, you see) ([^.]*)\.")
_CLOSED = re.compile(r"The ([a-z]+ \d+) is closed\.")
_FACT = re.compile(r"^(\w+)\((.*)\)$")

APPLIANCES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "pick_clean_then_place_in_recep": ("clean", ("sinkbasin",), "isclean"),
    "pick_heat_then_place_in_recep": ("heat", ("microwave",), "ishot"),
    "pick_cool_then_place_in_recep": ("cool", ("fridge",), "iscool"),
}
"""Task type -> (verb, receptacle classes that do it, the fact it makes true). Only sink
basins clean in ``alfred.pddl`` (the original's fall-back to a bathtub basin, for scenes
without a sink, is not admissible there)."""
LOOK_TASK = "look_at_obj_in_light"


def name_class(name: str) -> str:
    """The class of a thing's name: ``"cabinet 3"`` -> ``"cabinet"``."""
    return name.rsplit(" ", 1)[0]


def names_in(text: str) -> tuple[str, ...]:
    """Every thing's name in ``text``, in order (``"a mug 1, and a pen 2"`` -> both)."""
    return tuple(NAME.findall(text))


def receptacles_in_intro(intro: str) -> tuple[str, ...]:
    """The receptacles the room description lists, in its order (the task sentence,
    which may name classes but never numbered things, is left out)."""
    room, _, _ = intro.partition("Your task is to:")
    return names_in(room)


def contents_in(feedback: str) -> dict[str, tuple[str, ...]]:
    """What ``feedback`` shows inside or on receptacles: receptacle -> objects (possibly
    ``()`` for "you see nothing"), from "On the R, you see ..." and "The R is open. In
    it, you see ..." (arriving, opening, examining)."""
    return {on or inside: names_in(items) for on, inside, items in _CONTENTS.findall(feedback)}


def closed_in(feedback: str) -> tuple[str, ...]:
    """The receptacles ``feedback`` says are closed ("The drawer 2 is closed.")."""
    return tuple(_CLOSED.findall(feedback))


def parse_fact(fact: str) -> tuple[str, tuple[str, ...]]:
    """A fact of the engine (``"holds(agent1: agent, mug_bar_...: object)"``) as its
    lowercase predicate and argument ids (types dropped)."""
    match = _FACT.match(fact)
    if match is None:
        raise ValueError(f"not an ALFWorld fact: {fact!r}")
    arguments = tuple(a.rsplit(":", 1)[0].strip() for a in match.group(2).split(", ") if a)
    return match.group(1).lower(), arguments


@functools.lru_cache(maxsize=1)
def search_priors() -> dict[str, frozenset[str]]:
    """Object class -> receptacle classes where ALFRED places it (lowercase), from the
    generator's copy of ``alfworld.gen.constants.VAL_RECEPTACLE_OBJECTS``."""
    from agentgym.alfworld.gen.assets import tables

    priors: dict[str, set[str]] = {}
    for receptacle, objects in tables().can_contain.items():
        for obj in objects:
            priors.setdefault(obj.lower(), set()).add(receptacle.lower())
    return {obj: frozenset(receptacles) for obj, receptacles in priors.items()}


# ---------------------------------------------------------------------- the task and the facts
@dataclass(frozen=True)
class ExpertTask:
    """What the expert is asked to do (a game's ``pddl_params``, lowercase classes).

    Attributes:
        task_type: one of the six task types.
        object_class: the object to handle, e.g. ``"mug"``.
        parent_class: the receptacle class to put it in (``""`` for look_at_obj_in_light).
        toggle_class: the lamp class (``""`` unless look_at_obj_in_light).
    """

    task_type: str
    object_class: str
    parent_class: str = ""
    toggle_class: str = ""

    @classmethod
    def from_traj_data(cls, traj_data: Mapping[str, Any]) -> ExpertTask:
        """From a ``traj_data.json`` mapping (official and generated games have one)."""
        params = traj_data.get("pddl_params") or {}
        task = cls(task_type=str(traj_data.get("task_type", "")),
                   object_class=str(params.get("object_target", "")).lower(),
                   parent_class=str(params.get("parent_target", "")).lower(),
                   toggle_class=str(params.get("toggle_target", "")).lower())
        if not task.object_class or not (task.parent_class or task.toggle_class):
            raise ValueError(f"traj_data has no usable pddl_params: {dict(params)!r}")
        return task

    @property
    def required_fact(self) -> str:
        """The fact the object must have when placed ("ishot", ...; ``""``: none)."""
        return APPLIANCES[self.task_type][2] if self.task_type in APPLIANCES else ""


@dataclass(frozen=True)
class TrueState:
    """What the expert reads from the game's true facts (as the original's TextWorld
    variant does): the held object and its states, and where target objects lie.

    Attributes:
        held: the held object's name, or ``None``.
        held_facts: the unary facts of the held object (``{"ishot", "isclean"}``).
        placed: target-receptacle name -> target-class objects in it that have the
            required fact (what counts towards the goal).
    """

    held: str | None
    held_facts: frozenset[str]
    placed: Mapping[str, tuple[str, ...]]

    @classmethod
    def from_facts(cls, facts: Iterable[str], names: Mapping[str, str],
                   task: ExpertTask) -> TrueState:
        """From the engine's fluent facts and its id -> display name table."""
        parsed = [parse_fact(f) for f in facts]
        unary: dict[str, set[str]] = {}
        held = None
        for predicate, arguments in parsed:
            if predicate == "holds" and len(arguments) == 2:
                held = names.get(arguments[1], arguments[1])
            elif len(arguments) == 1:
                unary.setdefault(names.get(arguments[0], arguments[0]), set()).add(predicate)
        placed: dict[str, list[str]] = {}
        for predicate, arguments in parsed:
            if predicate != "inreceptacle" or len(arguments) != 2:
                continue
            obj, receptacle = (names.get(a, a) for a in arguments)
            if (task.parent_class and name_class(receptacle) == task.parent_class
                    and name_class(obj) == task.object_class
                    and (not task.required_fact or task.required_fact in unary.get(obj, ()))):
                placed.setdefault(receptacle, []).append(obj)
        return cls(held=held, held_facts=frozenset(unary.get(held, ())) if held else frozenset(),
                   placed={r: tuple(sorted(objs)) for r, objs in sorted(placed.items())})


# ---------------------------------------------------------------------- memory
@dataclass
class Memory:
    """What the expert has seen so far in an episode (updated by :meth:`observe`).

    Attributes:
        receptacles: the room's receptacles, in the room description's order.
        location: the receptacle the agent stands at (``None``: the middle of the room).
        seen_inside: receptacle -> objects last seen in or on it (its contents are known).
        where: object -> receptacle where it was last seen or put.
        closed: receptacles known to be closed.
        opened_for_search: receptacles the agent opened and has not closed again, nor
            taken from or put into (those are left open, as the original leaves them).
        taken_from: object -> receptacle it was last taken from.
    """

    receptacles: tuple[str, ...]
    location: str | None = None
    seen_inside: dict[str, set[str]] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    opened_for_search: set[str] = field(default_factory=set)
    taken_from: dict[str, str] = field(default_factory=dict)

    def observe(self, command: str, feedback: str) -> None:
        """Update from a played command and the engine's answer to it."""
        command = command.strip()
        if feedback.strip() == NOTHING_HAPPENS:
            return
        verb, _, rest = command.partition(" ")
        if verb == "go" and rest.startswith("to "):
            self.location = rest[3:]
        elif verb == "open":
            self.closed.discard(rest)
            self.opened_for_search.add(rest)
        elif verb == "close":
            self.closed.add(rest)
            self.opened_for_search.discard(rest)
        elif verb == "take":
            obj, _, receptacle = rest.partition(" from ")
            self.where.pop(obj, None)
            self.taken_from[obj] = receptacle
            self.opened_for_search.discard(receptacle)  # it held what was wanted
            self.seen_inside.get(receptacle, set()).discard(obj)
        elif verb == "move":
            obj, _, receptacle = rest.partition(" to ")
            self.where[obj] = receptacle
            self.opened_for_search.discard(receptacle)
            if receptacle in self.seen_inside:
                self.seen_inside[receptacle].add(obj)
        for receptacle in closed_in(feedback):
            self.closed.add(receptacle)
        for receptacle, objects in contents_in(feedback).items():
            for obj in self.seen_inside.get(receptacle, ()):
                if self.where.get(obj) == receptacle:
                    del self.where[obj]
            self.seen_inside[receptacle] = set(objects)
            self.where.update({obj: receptacle for obj in objects})
            self.closed.discard(receptacle)


# ---------------------------------------------------------------------- the expert
class HandcodedExpert:
    """ALFWorld's hand-coded expert for one episode (see the module docstring).

    Usage: build it with the task and the intro text, then per step
    ``act(state, admissible)`` for the next command and ``observe(command, feedback)``
    with whatever command was played (the expert's or another).

    Where it stands: every receptacle it cannot "go to" is at the agent's place (some
    receptacles share one, e.g. two stove burners; arriving names only the one gone to).
    Whether such a receptacle is closed: whether "open" it is admissible.

    Args:
        task: the task's targets.
        intro: the observation at reset (the room description lists the receptacles).
        seed: seed of the generator behind its random choices.
    """

    def __init__(self, task: ExpertTask, intro: str, seed: int | Sequence[int] = 0):
        self.task = task
        self.memory = Memory(receptacles_in_intro(intro))
        self.rng = np.random.default_rng(seed)
        self.fallbacks = 0
        """Steps where its choice was not admissible and a random admissible one was played."""
        self._destination: str | None = None
        self._goal_receptacle: str | None = None
        self._priors = search_priors()
        self._admissible: frozenset[str] = frozenset()
        self._here: tuple[str, ...] = ()

    def observe(self, command: str, feedback: str) -> None:
        """Record a played command (the expert's or any other) and its feedback."""
        self.memory.observe(command, feedback)
        if self.memory.location == self._destination:
            self._destination = None

    def act(self, state: TrueState, admissible: Sequence[str]) -> str:
        """The next command: always one of ``admissible`` (which must not be empty)."""
        if not admissible:
            raise ValueError("no admissible command to choose from")
        self._admissible = frozenset(admissible)
        memory = self.memory
        here = [r for r in memory.receptacles if f"go to {r}" not in self._admissible]
        self._here = tuple(sorted(here, key=lambda r: r != memory.location))
        command = self._choose(state)
        if command in self._admissible:
            return command
        self.fallbacks += 1
        return str(admissible[int(self.rng.integers(len(admissible)))])

    # ------------------------------------------------------------------ decisions
    def _choose(self, state: TrueState) -> str:
        task, held = self.task, state.held
        if held is not None and name_class(held) != task.object_class:
            return self._put_down(held)
        if held is None:
            return self._fetch(state)
        if task.required_fact and task.required_fact not in state.held_facts:
            return self._transform(held)
        if task.task_type == LOOK_TASK:
            return self._use_lamp()
        return self._place(held, state)

    def _closed(self, receptacle: str) -> bool:
        if receptacle in self._here:
            return f"open {receptacle}" in self._admissible
        return receptacle in self.memory.closed

    def _at(self, receptacle: str, command: str) -> str:
        """``command`` at ``receptacle`` (opened first if closed), else go there."""
        if receptacle not in self._here:
            self._destination = receptacle
            return f"go to {receptacle}"
        if self._closed(receptacle):
            return f"open {receptacle}"
        return command

    def _fetch(self, state: TrueState) -> str:
        """Find and take an object of the target class that is not already in place
        (for pick-two: not the first one, in the target receptacle)."""
        done = state.placed.get(self._placed_receptacle(state) or "", ())
        return self._take_one_of(self.task.object_class, exclude=set(done))

    @staticmethod
    def _placed_receptacle(state: TrueState) -> str | None:
        """The target receptacle holding the most objects in place (``None``: none)."""
        if not state.placed:
            return None
        return max(state.placed, key=lambda r: (len(state.placed[r]), r))

    def _take_one_of(self, object_class: str, exclude: set[str]) -> str:
        """Take a seen object of ``object_class`` here, else go where one was seen, else
        search."""
        where = self.memory.where
        known = sorted(o for o, r in where.items() if name_class(o) == object_class
                       and o not in exclude)
        here = [o for o in known if where[o] in self._here]
        if here:
            choice = here[int(self.rng.integers(len(here)))]
            return self._at(where[choice], f"take {choice} from {where[choice]}")
        if known:
            if self._destination not in {where[o] for o in known}:
                self._destination = where[known[int(self.rng.integers(len(known)))]]
            return f"go to {self._destination}"
        return self._explore(object_class)

    def _explore(self, object_class: str) -> str:
        """Look into an unseen receptacle here (open or examine it), else close what was
        opened here, else go to the next unseen receptacle (likely ones first)."""
        memory = self.memory
        for receptacle in self._here:
            if receptacle not in memory.seen_inside:
                return f"open {receptacle}" if self._closed(receptacle) else f"examine {receptacle}"
        for receptacle in self._here:
            if receptacle in memory.opened_for_search and not self._closed(receptacle):
                return f"close {receptacle}"
        unseen = [r for r in memory.receptacles if r not in memory.seen_inside
                  and r not in self._here]
        if not unseen:  # everything seen and the object not found: look again
            memory.seen_inside.clear()
            unseen = [r for r in memory.receptacles if r not in self._here]
        if self._destination not in unseen:
            likely = self._priors.get(object_class, frozenset())
            ranked = [r for r in reversed(unseen) if name_class(r) in likely]
            ranked += [r for r in reversed(unseen) if name_class(r) not in likely]
            self._destination = ranked[0]
        return f"go to {self._destination}"

    def _choose_among(self, receptacles: list[str]) -> str:
        """A receptacle of ``receptacles`` here, else a random one (kept while it fits)."""
        if self._destination in receptacles:
            return self._destination
        here = [r for r in self._here if r in receptacles]
        return here[0] if here else receptacles[int(self.rng.integers(len(receptacles)))]

    def _of_class(self, classes: Iterable[str]) -> list[str]:
        wanted = set(classes)
        return [r for r in self.memory.receptacles if name_class(r) in wanted]

    def _transform(self, held: str) -> str:
        """Clean, heat or cool the held object with a fitting receptacle."""
        verb, classes, _ = APPLIANCES[self.task.task_type]
        appliances = self._of_class(classes)
        if not appliances:
            return f"{verb} {held}"  # not admissible: counted as a fallback
        appliance = self._choose_among(appliances)
        if appliance in self._here:
            return f"{verb} {held} with {appliance}"
        self._destination = appliance
        return f"go to {appliance}"

    def _use_lamp(self) -> str:
        """Use a seen lamp where it stands, else search for one."""
        where = self.memory.where
        lamps = sorted(o for o in where if name_class(o) == self.task.toggle_class)
        here = [lamp for lamp in lamps if where[lamp] in self._here]
        if here:
            return f"use {here[0]}"
        if lamps:
            return self._at(where[lamps[0]], f"use {lamps[0]}")
        return self._explore(self.task.toggle_class)

    def _place(self, held: str, state: TrueState) -> str:
        """Put the held object into a target receptacle (for pick-two, the one that
        already holds the first object)."""
        targets = self._of_class([self.task.parent_class])
        if not targets:
            return f"move {held} to {self.task.parent_class}"  # not admissible: a fallback
        placed = self._placed_receptacle(state)
        if placed is not None:
            self._goal_receptacle = placed
        elif self._goal_receptacle not in targets:
            self._goal_receptacle = self._choose_among(targets)
        return self._at(self._goal_receptacle, f"move {held} to {self._goal_receptacle}")

    def _put_down(self, held: str) -> str:
        """Put a wrong object down where the agent stands if a receptacle here takes it,
        else back where it was taken from."""
        for receptacle in self._here:
            if f"move {held} to {receptacle}" in self._admissible:
                return f"move {held} to {receptacle}"
        origin = self.memory.taken_from.get(held, self.memory.receptacles[0])
        return self._at(origin, f"move {held} to {origin}")
