"""One generated game: configuration, construction and its two official files.

Game ``i`` of a configuration depends only on ``(seed, split, i)`` and the knobs, never on
how many games are generated, so a cache can grow without changing the games it holds.
Its task type is ``task_types[i % len(task_types)]`` (an even mix); the scene, targets,
object placement, task sentence and walkthrough are drawn from
``numpy.random.default_rng([seed, split_code, i])``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym.alfworld.gen.assets import goal_library, grammar_template, pddl_domain, tables
from agentgym.alfworld.gen.pddl import problem_text
from agentgym.alfworld.gen.scenes import GRID_SIZE, SPLIT_DIRS, scene_catalog, split_scenes
from agentgym.alfworld.gen.tasks import TASK_TYPES, Task, World, sample_world, task_options
from agentgym.alfworld.gen.walkthrough import build_walkthrough

GENERATOR_VERSION = 1
"""Bumped whenever generated games change; part of every cache key."""

_SPLIT_CODES = {"train": 0, "valid_seen": 1, "valid_unseen": 2}


@dataclass(frozen=True)
class GenerationConfig:
    """Everything that decides the generated games (the cache key).

    Attributes:
        seed: non-negative base seed.
        split: ``"train"``, ``"valid"`` (= ``"valid_unseen"``, held-out scenes) or
            ``"valid_seen"`` (train scenes, other games).
        task_types: task types to mix (default: all six, in :data:`TASK_TYPES` order).
        scene_types: restrict scenes to these types (``Kitchen``, ``LivingRoom``,
            ``Bedroom``, ``Bathroom``); ``None``: all.
        max_objects: cap on object instances per game; ``None``: 1-3 of every object
            type the scene has (targets and lamps are always placed).
    """

    seed: int = 0
    split: str = "train"
    task_types: tuple[str, ...] | None = TASK_TYPES
    scene_types: tuple[str, ...] | None = None
    max_objects: int | None = None
    _scenes: dict[str, tuple[int, ...]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.task_types is None:
            object.__setattr__(self, "task_types", TASK_TYPES)
        elif not isinstance(self.task_types, str | tuple):
            object.__setattr__(self, "task_types", tuple(self.task_types))
        if not isinstance(self.scene_types, str | tuple) and self.scene_types is not None:
            object.__setattr__(self, "scene_types", tuple(self.scene_types))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int | np.integer):
            raise TypeError(f"seed must be an int, got {self.seed!r}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if self.split not in SPLIT_DIRS:
            raise ValueError(f"unknown split {self.split!r}; expected one of {sorted(SPLIT_DIRS)}")
        if isinstance(self.task_types, str) or not self.task_types:
            raise ValueError("task_types must be a non-empty sequence of task type names")
        unknown = [t for t in self.task_types if t not in TASK_TYPES]
        if unknown:
            raise ValueError(f"unknown task types {unknown}; expected some of {list(TASK_TYPES)}")
        if len(set(self.task_types)) != len(self.task_types):
            raise ValueError(f"task_types has duplicates: {list(self.task_types)}")
        if self.scene_types is not None:
            known = sorted(tables().scene_types)
            if isinstance(self.scene_types, str) or not self.scene_types:
                raise ValueError("scene_types must be a non-empty sequence (or None)")
            bad = [s for s in self.scene_types if s not in known]
            if bad:
                raise ValueError(f"unknown scene types {bad}; expected some of {known}")
        if self.max_objects is not None and (
            isinstance(self.max_objects, bool)
            or not isinstance(self.max_objects, int)
            or self.max_objects < 1
        ):
            raise ValueError(
                f"max_objects must be a positive int or None, got {self.max_objects!r}"
            )
        for task_type in self.task_types:
            if not self.scenes_for(task_type):
                raise ValueError(
                    f"no {self.split_dir} scene supports {task_type}"
                    + (f" with scene types {list(self.scene_types)}" if self.scene_types else "")
                    + f" (it needs scene types {list(tables().goal_scene_types[task_type])})"
                )

    @property
    def split_dir(self) -> str:
        """The ``json_2.1.1`` folder of this split (``train``, ``valid_seen``, ``valid_unseen``)."""
        return SPLIT_DIRS[self.split]

    def scenes_for(self, task_type: str) -> tuple[int, ...]:
        """Floor plans of this split that support at least one task of ``task_type``."""
        if task_type not in self._scenes:
            catalog = scene_catalog()
            self._scenes[task_type] = tuple(
                n
                for n in split_scenes(self.split, self.scene_types)
                if task_options(task_type, catalog[n])
            )
        return self._scenes[task_type]

    def key(self) -> str:
        """A short stable hash of the configuration and :data:`GENERATOR_VERSION`."""
        payload = json.dumps(
            {
                "version": GENERATOR_VERSION,
                "seed": int(self.seed),
                "split": self.split_dir,
                "task_types": list(self.task_types),
                "scene_types": None if self.scene_types is None else sorted(self.scene_types),
                "max_objects": self.max_objects,
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class GeneratedGame:
    """A generated game and its official-format files.

    Attributes:
        index: the game's index in its configuration.
        task: the task.
        world: the initial state.
        task_dir: ``<task_type>-<Object>-None-<Receptacle or Lamp>-<scene>``.
        trial: ``trial_G<config key>_<index>``.
        game: the ``game.tw-pddl`` mapping.
        traj_data: the ``traj_data.json`` mapping.
    """

    index: int
    task: Task
    world: World
    task_dir: str
    trial: str
    game: dict[str, Any]
    traj_data: dict[str, Any]


def _choose(rng: np.random.Generator, items: Sequence[Any]) -> Any:
    return items[int(rng.integers(len(items)))]


def game_rng(config: GenerationConfig, index: int) -> np.random.Generator:
    """The generator of game ``index`` (independent of the number of games)."""
    return np.random.default_rng([int(config.seed), _SPLIT_CODES[config.split_dir], index])


def choose_task(config: GenerationConfig, index: int, rng: np.random.Generator) -> tuple[Task, int]:
    """Task type by index, then scene, object (and lamp), then target receptacle."""
    task_type = config.task_types[index % len(config.task_types)]
    scene_number = int(_choose(rng, config.scenes_for(task_type)))
    options = task_options(task_type, scene_catalog()[scene_number])
    objects = sorted({(o.object_type, o.toggle_type) for o in options})
    object_type, toggle_type = _choose(rng, objects)
    parents = sorted(
        {
            o.parent_type
            for o in options
            if (o.object_type, o.toggle_type) == (object_type, toggle_type)
        }
    )
    return Task(task_type, object_type, _choose(rng, parents), toggle_type), scene_number


def task_sentence(task: Task, rng: np.random.Generator) -> str:
    """A templated task sentence (``add_task_to_grammar``'s templates, e.g. "put a mug in cabinet")."""
    template = _choose(rng, goal_library()[task.task_type].templates)
    return template.format(
        obj=task.object_type.lower(),
        recep=task.parent_type.lower(),
        toggle=task.toggle_type.lower(),
        mrecep="",
    )


_HIGH_ACTIONS = {
    "go to": "GotoLocation",
    "open": "OpenObject",
    "take": "PickupObject",
    "move": "PutObject",
    "heat": "HeatObject",
    "cool": "CoolObject",
    "clean": "CleanObject",
    "use": "ToggleObject",
}


def _high_pddl(walkthrough: Sequence[str]) -> list[dict[str, Any]]:
    """The walkthrough as ALFRED-style high-level actions (``plan.high_pddl``)."""
    plan = []
    for high_idx, command in enumerate(walkthrough):
        verb = "go to" if command.startswith("go to ") else command.split(" ", 1)[0]
        rest = command[len(verb) :].strip()
        args = [name.rsplit(" ", 1)[0] for name in re.split(r" (?:from|to|with) ", rest)]
        plan.append(
            {
                "discrete_action": {"action": _HIGH_ACTIONS[verb], "args": args},
                "high_idx": high_idx,
            }
        )
    return plan


@functools.lru_cache(maxsize=8)
def _grammar_with(sentence: str) -> str:
    return grammar_template().replace("UNKNOWN GOAL", sentence)


def make_game(config: GenerationConfig, index: int, attempt: int = 0) -> GeneratedGame:
    """Builds game ``index`` of ``config`` (not yet verified).

    Args:
        config: the generation configuration.
        index: the game's index (>= 0).
        attempt: > 0 redraws the game from another stream (used after a failed replay).

    Returns:
        The :class:`GeneratedGame`.
    """
    rng = (
        game_rng(config, index)
        if attempt == 0
        else np.random.default_rng(
            [int(config.seed), _SPLIT_CODES[config.split_dir], index, attempt]
        )
    )
    task, scene_number = choose_task(config, index, rng)
    scene = scene_catalog()[scene_number]
    world = sample_world(task, scene, rng, max_objects=config.max_objects)
    walkthrough = build_walkthrough(world, task, rng)
    sentence = task_sentence(task, rng)
    trial = f"trial_G{config.key()}_{index:06d}"
    target = task.parent_type or task.toggle_type
    task_dir = f"{task.task_type}-{task.object_type}-None-{target}-{scene_number}"
    game = {
        "pddl_domain": pddl_domain(),
        "grammar": _grammar_with(sentence),
        "pddl_problem": problem_text(world, task, f"plan_{trial}"),
        "solvable": True,
        "walkthrough": walkthrough,
    }
    x, z, rotation, horizon = world.agent_location
    descriptions = [
        template.format(
            obj=task.object_type.lower(),
            recep=task.parent_type.lower(),
            toggle=task.toggle_type.lower(),
            mrecep="",
        )
        for template in goal_library()[task.task_type].templates
    ]
    traj_data = {
        "pddl_params": {
            "mrecep_target": "",
            "object_sliced": False,
            "object_target": task.object_type,
            "parent_target": task.parent_type,
            "toggle_target": task.toggle_type,
        },
        "plan": {"high_pddl": _high_pddl(walkthrough), "low_actions": []},
        "scene": {
            "floor_plan": f"FloorPlan{scene_number}",
            "scene_num": scene_number,
            "scene_type": scene.scene_type,
            "init_action": {
                "action": "TeleportFull",
                "horizon": horizon,
                "rotateOnTeleport": True,
                "rotation": rotation * 90,
                "x": x * GRID_SIZE,
                "z": z * GRID_SIZE,
            },
        },
        "task_id": trial,
        "task_type": task.task_type,
        "turk_annotations": {
            "anns": [
                {
                    "assignment_id": "agentgym-template",
                    "high_descs": list(walkthrough),
                    "task_desc": description[0].upper() + description[1:] + ".",
                    "votes": [1],
                }
                for description in descriptions
            ]
        },
        "agentgym": {
            "generator_version": GENERATOR_VERSION,
            "config_key": config.key(),
            "seed": int(config.seed),
            "split": config.split_dir,
            "index": index,
            "attempt": attempt,
            "task_desc": sentence,
        },
    }
    return GeneratedGame(index, task, world, task_dir, trial, game, traj_data)
