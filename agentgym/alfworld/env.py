"""``AgentGym/ALFWorld-v0``: ALFWorld's text games on the real engine, as a ``TextEnv``.

Data, in this order: ``data_path=``, ``$ALFWORLD_DATA``, ``~/.cache/alfworld`` (the
official games, see :mod:`agentgym.alfworld.data`); when none holds games, procedurally
generated games from :func:`agentgym.alfworld.generate.ensure_generated_games` (cached on
disk, generated on the first reset that needs them).

Observations: at reset, the engine's room description and task ("You are in the middle of
a room. ... Your task is to: ...") without TextWorld's "-= Welcome to TextWorld, ALFRED! =-"
banner; at each step, the engine's feedback unchanged. Any string is played: TextWorld
strips it and looks it up among the admissible commands, exactly (case-sensitive); a
command that is not there gets "Nothing happens." and changes nothing.

``valid_action`` is ``True`` iff ``action.strip()`` is one of ``admissible_actions`` (the
engine's admissible commands without "help"). "help" is still passed to the engine, which
prints its command list, but it counts as invalid: policies are shown the admissible list,
which does not offer it.

Reward: ``success_reward`` (10, the GiGPO recipe) on the step that solves the task, else
0; solving terminates the episode, and ``max_steps`` (50) truncates it.

Info extras: ``task_type`` (one of the six), ``won`` (same as ``success``, the key name
alfworld and verl-agent use).

Expert (``expert_action``, the demonstrations of ``python -m algorithms.sft.trainer
make-data``): ``expert="walkthrough"`` (the default) replays the game's stored
walkthrough, an open-loop plan; ``expert="handcoded"`` is ALFWorld's hand-coded expert
(:mod:`agentgym.alfworld.handcoded_expert`), which searches the room from what it has
seen and acts sensibly after any action.

Anchors: ``"observation"`` is the raw text; ``"state"`` is a digest of the sorted true
PDDL facts whose predicate some action can change (where the agent is, what it holds,
what is open, hot, clean, where each object lies, ...), so "Nothing happens." in two
different states never shares a step group and a state reached by two paths always does.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentgym.alfworld.data import (
    GAME_FILENAME,
    GAMES_DIRNAME,
    TASK_TYPES,
    TRAJ_FILENAME,
    GameRecord,
    available_splits,
    collect_games,
    find_data_root,
    validate_task_types,
)
from agentgym.core import AnchorMode, TextEnv, Transition
from agentgym.tools import EnvTools, string_argument, tool

BANNER = "-= Welcome to TextWorld, ALFRED! =-"
TASK_PREFIX = "Your task is to: "
HELP_COMMAND = "help"
DEFAULT_NUM_GENERATED_GAMES = 60
"""Games generated per split when no official data is found (10 per task type)."""
EXPERTS: tuple[str, ...] = ("walkthrough", "handcoded")
"""Values of ``expert=``: the stored walkthrough (open loop) or the hand-coded expert."""
GENERATED_SPLITS: tuple[str, ...] = ("train", "valid", "valid_seen", "valid_unseen")
"""Split names accepted for generated games ("valid" is "valid_unseen": alfworld's
held-out scenes; "valid_seen" holds other games of the train scenes)."""


def strip_banner(text: str) -> str:
    """``text`` without TextWorld's welcome banner and the blank lines after it."""
    if text.startswith(BANNER):
        return text[len(BANNER):].lstrip("\n")
    return text


def task_of(intro: str) -> str:
    """The task sentence after "Your task is to: " in an intro text ("" if absent)."""
    _, found, task = intro.rpartition(TASK_PREFIX)
    return task.strip() if found else ""


def alfworld_data_problems(cls: type, kwargs: dict[str, Any]) -> list[str]:
    """A data path that holds no games, a split that is not there, an official split
    without game files, or no alfworld package to generate games with (the
    constructor reads no game, so building one here is cheap)."""
    download = ("run alfworld-download (it writes to $ALFWORLD_DATA, else "
                "~/.cache/alfworld) or point $ALFWORLD_DATA at its folder")
    try:
        env = cls(**kwargs)
    except FileNotFoundError as error:
        return [f"{error}; {download}"]
    except (ValueError, TypeError) as error:
        return [str(error)]
    root, split = env.data_root, env.split
    env.close()
    if root is None:
        import importlib.util

        if importlib.util.find_spec("alfworld") is None:
            return ["ALFWorld games are generated with the alfworld package, which is not "
                    "installed: pip install -e '.[alfworld]'"]
        return []
    games = root / GAMES_DIRNAME / split
    if next(games.glob(f"*/*/{GAME_FILENAME}"), None) is None:
        return [f"no ALFWorld game files ({GAME_FILENAME}) in {games}: an incomplete "
                f"download? {download}"]
    return []


def alfworld_tools() -> EnvTools:
    """One tool per command of ALFWorld's grammar (``alfworld/data/alfred.twl2``; not
    ``help``): ``go_to(receptacle)`` -> ``go to {receptacle}``, ``take(object, source)`` ->
    ``take {object} from {source}``, ``move(object, target)`` -> ``move {object} to
    {target}``, ..., ``look()``, ``inventory()``."""
    def thing(what: str) -> dict[str, Any]:
        return string_argument(f"The {what}'s name with its number, as the observation "
                               "writes it (e.g. 'cabinet 1').")

    return EnvTools((
        tool("go_to", "Walk to a receptacle.", "go to {receptacle}",
             receptacle=thing("receptacle")),
        tool("take", "Pick up an object from a receptacle.", "take {object} from {source}",
             object=thing("object"), source=thing("receptacle")),
        tool("move", "Put the object you hold in or on a receptacle.",
             "move {object} to {target}", object=thing("object"),
             target=thing("receptacle")),
        tool("put_into", "Put an object into a container object you hold.",
             "put {object} into {container}", object=thing("object"),
             container=thing("container")),
        tool("put_in", "Put a container object you hold in a receptacle.",
             "put {object} in {receptacle}", object=thing("container"),
             receptacle=thing("receptacle")),
        tool("open", "Open a receptacle.", "open {receptacle}",
             receptacle=thing("receptacle")),
        tool("close", "Close a receptacle.", "close {receptacle}",
             receptacle=thing("receptacle")),
        tool("heat", "Heat an object with an appliance (e.g. a microwave).",
             "heat {object} with {appliance}", object=thing("object"),
             appliance=thing("appliance")),
        tool("cool", "Cool an object with an appliance (e.g. a fridge).",
             "cool {object} with {appliance}", object=thing("object"),
             appliance=thing("appliance")),
        tool("clean", "Clean an object with an appliance (e.g. a sink basin).",
             "clean {object} with {appliance}", object=thing("object"),
             appliance=thing("appliance")),
        tool("slice", "Slice an object with a knife you hold.", "slice {object} with {knife}",
             object=thing("object"), knife=thing("knife")),
        tool("use", "Use an object (e.g. turn on a desk lamp).", "use {object}",
             object=thing("object")),
        tool("examine", "Look closely at an object or a receptacle.", "examine {target}",
             target=thing("object or receptacle")),
        tool("look", "Look around where you are.", "look"),
        tool("inventory", "List what you carry.", "inventory")))


class ALFWorldEnv(TextEnv):
    """ALFWorld (Shridhar et al., ICLR 2021) text games through TextWorld's PDDL engine.

    Args:
        data_path: root holding ``json_2.1.1/<split>/...`` (default: ``$ALFWORLD_DATA``,
            then ``~/.cache/alfworld``, then generated games).
        split: ``"train"``, ``"valid_seen"`` or ``"valid_unseen"`` (for generated games
            also ``"valid"``, an alias of ``"valid_unseen"``).
        task_types: keep only these task types (``None``: all six).
        num_generated_games: games per split to generate when no official data is found.
        generation_seed: seed of the generated games.
        success_reward: reward for solving the task.
        expert: what :meth:`expert_action` plays: ``"walkthrough"`` (the game's stored
            plan, while the episode follows it) or ``"handcoded"`` (ALFWorld's
            hand-coded, observation-based expert; it needs the game's
            ``traj_data.json``, which official and generated games have).
        anchor, max_steps, max_action_length, render_mode: see :class:`~agentgym.core.TextEnv`.

    Raises:
        FileNotFoundError: ``data_path`` holds no ``json_2.1.1`` folder.
        ValueError: unknown split, task type or expert.
    """

    tools = alfworld_tools()
    """The env's actions as tools (:func:`alfworld_tools`)."""

    @classmethod
    def task_source(cls, kwargs: dict[str, Any]) -> str:
        root = find_data_root(kwargs.get("data_path"))
        return (f"official ALFWorld games in {root}" if root is not None else
                "ALFWorld games generated from the alfworld package (no official data: "
                "alfworld-download fetches it to $ALFWORLD_DATA, else ~/.cache/alfworld)")

    @classmethod
    def data_problems(cls, kwargs: dict[str, Any]) -> list[str]:
        """What is missing for ``cls(**kwargs)`` (:func:`alfworld_data_problems`)."""
        return alfworld_data_problems(cls, kwargs)

    def __init__(
        self,
        *,
        data_path: str | os.PathLike[str] | None = None,
        split: str = "train",
        task_types: Sequence[str] | None = None,
        num_generated_games: int = DEFAULT_NUM_GENERATED_GAMES,
        generation_seed: int = 0,
        success_reward: float = 10.0,
        expert: str = "walkthrough",
        anchor: AnchorMode = "observation",
        max_steps: int | None = 50,
        max_action_length: int = 1 << 16,
        render_mode: str | None = None,
    ):
        super().__init__(anchor=anchor, max_steps=max_steps,
                         max_action_length=max_action_length, render_mode=render_mode)
        if expert not in EXPERTS:
            raise ValueError(f"expert must be one of {list(EXPERTS)}, got {expert!r}")
        self.expert = expert
        self.task_types = validate_task_types(task_types)
        self.split = split
        self.success_reward = float(success_reward)
        self.num_generated_games = int(num_generated_games)
        self.generation_seed = int(generation_seed)
        self.data_root: Path | None = find_data_root(data_path)
        if self.data_root is not None:
            splits = available_splits(self.data_root)
            if split not in splits:
                raise ValueError(f"ALFWorld split {split!r} not found in {self.data_root}; "
                                 f"available: {list(splits)}")
        else:
            if split not in GENERATED_SPLITS:
                raise ValueError(
                    f"no official ALFWorld data found (pass data_path= or set $ALFWORLD_DATA); "
                    f"generated games have the splits {sorted(GENERATED_SPLITS)}, got {split!r}"
                )
            if self.num_generated_games < 1:
                raise ValueError(f"num_generated_games must be >= 1, got {num_generated_games}")
        self._games: dict[str, GameRecord] | None = None
        self.games_root: Path | None = None
        """Where the games lie (known after the first reset or ``task_ids`` access)."""
        self._task_ids: tuple[str, ...] = ()
        self._engine: Any = None
        self._loaded_task: str | None = None
        self._task = ""
        self._task_type = ""
        self._admissible: tuple[str, ...] = ()
        self._won = False
        self._walkthrough: tuple[str, ...] = ()
        self._expert_index: int | None = None
        self._handcoded: Any = None
        self._handcoded_action: str | None = None
        self._expert_task: Any = None  # the loaded game's targets, read once per game

    # ------------------------------------------------------------------ data
    @property
    def generated(self) -> bool:
        """Whether this env plays generated games (no official data was found)."""
        return self.data_root is None

    def _ensure_games(self) -> dict[str, GameRecord]:
        if self._games is None:
            if self.data_root is not None:
                root, split = self.data_root, self.split
            else:
                wanted = None if self.task_types == TASK_TYPES else list(self.task_types)
                root = _generated_root(self.split, self.num_generated_games,
                                       self.generation_seed, wanted)
                split = _generated_split_dir(root, self.split)
            games = collect_games(root, split, self.task_types)
            self.games_root = root
            self._games = {g.task_id: g for g in games}
            self._task_ids = tuple(g.task_id for g in games)
        return self._games

    @property
    def task_ids(self) -> Sequence[str]:
        """The split's game ids (trial folders relative to the data root), sorted."""
        self._ensure_games()
        return self._task_ids

    def game(self, task_id: str) -> GameRecord:
        """The record of ``task_id`` (its game file and task type)."""
        games = self._ensure_games()
        record = games.get(task_id)
        if record is None:
            raise ValueError(f"unknown ALFWorld task id {task_id!r} (split {self.split!r}, "
                             f"task types {list(self.task_types)}; see env.task_ids)")
        return record

    def walkthrough(self, task_id: str) -> tuple[str, ...]:
        """The stored expert walkthrough of ``task_id`` (from its game file)."""
        import json

        with open(self.game(task_id).game_file, encoding="utf-8") as f:
            return tuple(json.load(f).get("walkthrough") or ())

    # ------------------------------------------------------------------ contract
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        record = self.game(task_id)
        if self._engine is None:
            from agentgym.alfworld.engine import AlfredEngine

            self._engine = AlfredEngine()
        if self._loaded_task != task_id:
            self._loaded_task = None
            self._engine.load(record.game_file)
            self._loaded_task = task_id
            self._expert_task = None
        intro = self._engine.reset()
        self._walkthrough = tuple(self._engine.walkthrough)
        self._expert_index = 0
        self._task = task_of(intro)
        self._task_type = record.task_type
        self._read_engine()
        observation = strip_banner(intro)
        if self.expert == "handcoded":
            if self._expert_task is None:
                self._expert_task = _expert_task(record)
            self._handcoded = _handcoded_expert(record, self._expert_task, observation)
            self._handcoded_action = None
        return observation, self._extras()

    def _step_text(self, action: str) -> Transition:
        valid = action.strip() in self._admissible
        if self.expert == "handcoded":
            feedback = self._engine.step(action)
            self._read_engine()
            self._handcoded.observe(action, feedback)
            self._handcoded_action = None
        else:
            feedback = self._step_along_walkthrough(action)
        return Transition(
            observation=feedback,
            reward=self.success_reward if self._won else 0.0,
            terminated=self._won,
            valid_action=valid,
            info=self._extras(),
        )

    def _step_along_walkthrough(self, action: str) -> str:
        """Play ``action``, keeping the walkthrough's place (see :meth:`_walkthrough_action`)."""
        expected = self._walkthrough_action()
        off_plan = expected is not None and action.strip() != expected
        facts_before = self._plan_facts() if off_plan else ()
        feedback = self._engine.step(action)
        self._read_engine()
        if self._expert_index is not None:
            if not off_plan:
                self._expert_index += 1
            elif self._plan_facts() != facts_before:
                self._expert_index = None  # the walkthrough cannot continue from here
        return feedback

    def expert_action(self) -> str | None:
        """The next command of the expert chosen with ``expert=``.

        ``"walkthrough"``: the game's stored plan while the episode follows it, ``None``
        once a state-changing different action left it (:meth:`_walkthrough_action`).
        ``"handcoded"``: ALFWorld's hand-coded expert, which acts after any action,
        always with an admissible command; ``None`` once the task is solved."""
        if self.expert == "handcoded":
            return self._handcoded_expert_action()
        return self._walkthrough_action()

    @property
    def handcoded_expert(self) -> Any:
        """The current episode's :class:`~agentgym.alfworld.handcoded_expert.HandcodedExpert`
        (its memory, ``fallbacks``); ``None`` unless ``expert="handcoded"`` and reset."""
        return self._handcoded

    def _handcoded_expert_action(self) -> str | None:
        """The hand-coded expert's next command (always admissible; the same until the
        next step), from what it has seen and the true facts; ``None`` once the task is
        solved or before a reset."""
        if self._handcoded is None or self._won or not self._admissible:
            return None
        if self._handcoded_action is None:
            from agentgym.alfworld.handcoded_expert import TrueState

            state = TrueState.from_facts(self.state_facts(), self._engine.display_names,
                                         self._handcoded.task)
            self._handcoded_action = self._handcoded.act(state, self._admissible)
        return self._handcoded_action

    def _walkthrough_action(self) -> str | None:
        """The next command of the game's stored walkthrough (the expert plan the game
        file carries: alfworld's for official games, the generator's for generated ones),
        while the episode has followed it. A different action that left the true state
        unchanged ("look", "inventory", an invalid command; the engine's ``checked`` marks,
        which only record what was looked at, do not count) keeps the plan; one that
        changed the state leaves it, and the expert then has no action (``None``), as after
        the last command."""
        if self._expert_index is None or self._expert_index >= len(self._walkthrough):
            return None
        return self._walkthrough[self._expert_index]

    def _plan_facts(self) -> tuple[str, ...]:
        """The state facts the walkthrough depends on (all but ``checked`` marks)."""
        return tuple(f for f in self.state_facts() if not f.startswith("checked("))

    def _read_engine(self) -> None:
        self._admissible = tuple(c for c in self._engine.admissible_commands if c != HELP_COMMAND)
        self._won = bool(self._engine.won)

    def _extras(self) -> dict[str, Any]:
        return {"task_type": self._task_type, "won": self._won}

    def state_facts(self) -> tuple[str, ...]:
        """The sorted true facts that actions can change (what the state anchor digests)."""
        if self._engine is None or self._loaded_task is None:
            return ()
        return self._engine.fluent_facts()

    def state_key(self) -> str:
        digest = hashlib.blake2b("\n".join(self.state_facts()).encode(), digest_size=16)
        return digest.hexdigest()

    @property
    def task(self) -> str:
        return self._task

    @property
    def task_type(self) -> str:
        """The current game's task type."""
        return self._task_type

    @property
    def success(self) -> bool:
        return self._won

    def admissible_actions(self) -> tuple[str, ...]:
        return self._admissible

    def close(self) -> None:
        """Give the engine's fast-downward copy back to this process's pool."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
            self._loaded_task = None
        super().close()


def _expert_task(record: GameRecord) -> Any:
    """The hand-coded expert's targets for ``record``'s game (its ``traj_data.json``)."""
    import json

    from agentgym.alfworld.handcoded_expert import ExpertTask

    traj_file = record.game_file.parent / TRAJ_FILENAME
    try:
        with open(traj_file, encoding="utf-8") as f:
            return ExpertTask.from_traj_data(json.load(f))
    except (OSError, ValueError) as error:
        raise RuntimeError(f"expert='handcoded' needs the game's task targets from "
                           f"{traj_file}: {error}") from error


def _handcoded_expert(record: GameRecord, task: Any, intro: str) -> Any:
    """A fresh hand-coded expert for ``record``'s game, its generator seeded from the
    task id (so an episode of a game is reproducible)."""
    from agentgym.alfworld.handcoded_expert import HandcodedExpert

    digest = hashlib.blake2b(record.task_id.encode(), digest_size=8).digest()
    return HandcodedExpert(task, intro, seed=int.from_bytes(digest, "little"))


def _generated_split_dir(root: Path, split: str) -> str:
    """The folder under ``root/json_2.1.1`` that holds the generated games of ``split``."""
    present = available_splits(root)
    for name in (split, "valid_unseen" if split == "valid" else split):
        if name in present:
            return name
    if len(present) == 1:
        return present[0]
    raise RuntimeError(f"generated ALFWorld games for split {split!r} not found in {root}; "
                       f"it holds {list(present)}")


def _generated_root(split: str, num_games: int, seed: int,
                    task_types: list[str] | None) -> Path:
    try:
        from agentgym.alfworld.generate import ensure_generated_games
    except ImportError as error:
        raise RuntimeError(
            "No official ALFWorld games were found (pass data_path=, set $ALFWORLD_DATA, or run "
            "alfworld-download) and the game generator agentgym.alfworld.generate is not "
            f"available ({error})."
        ) from error
    root = ensure_generated_games(split=split, num_games=num_games, seed=seed,
                                  task_types=task_types, cache_dir=None)
    return Path(root)
