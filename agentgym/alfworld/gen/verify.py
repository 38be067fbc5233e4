"""Replay verification through the real engine (plain TextWorld + alfworld's demangler).

Each generated game is loaded once into ``textworld.envs.pddl.PddlEnv`` wrapped in
``alfworld.agents.environment.alfred_tw_env.AlfredDemangler`` -- the stack alfworld's
``AlfredTWEnv`` plays games with -- and its walkthrough is replayed on the engine's state
(``PddlState``: fast-downward's applicable operators, ``apply`` and ``check_goal``). A
game passes when every command is admissible when issued, the goal does not hold before
the last command, and holds after it. No planner is called.

Two shortcuts keep a replay cheap without changing what is checked:

* ``PddlEnv.step`` renders *every* applicable action into a command (most of a step's
  cost) to look one up. The replay renders, with the engine's own grammar code (the
  same calls as ``PddlEnv._gather_infos``), only the applicable actions that involve an
  object or receptacle named in the command, and applies the first whose command equals
  it -- the action ``PddlEnv.step`` would pick. A command no candidate renders to fails.
* ``PddlState`` translates the problem twice (once more for its replanner) and
  ``PddlEnv.reset`` translates it again after ``load``. The replay never replans nor
  resets, so the replanner's translation reuses the first one's result.

One engine is kept per process and games are ``load()``-ed into it, because every
``PddlEnv`` dlopens its own copy of fast-downward's library and never closes it.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.alfworld.gen.assets import alfworld_module


class VerificationError(RuntimeError):
    """A generated game's walkthrough does not win it on the real engine."""


@dataclass(frozen=True)
class Replay:
    """What one replay saw.

    Attributes:
        observations: the engine's feedback text after each command.
        won: whether the goal holds after the last command (always ``True`` when
            :func:`replay` returns).
    """

    observations: tuple[str, ...]
    won: bool


@functools.lru_cache(maxsize=1)
def _engine() -> Any:
    textworld = alfworld_module("textworld")
    pddl_env = alfworld_module("textworld.envs.pddl")
    tw_env = alfworld_module("alfworld.agents.environment.alfred_tw_env")
    infos = textworld.EnvInfos(admissible_commands=True, won=True)
    return tw_env.AlfredDemangler(pddl_env.PddlEnv(infos))


@contextlib.contextmanager
def _one_translation() -> Iterator[None]:
    """Within the block, ``pddl2sas(..., optimize=True)`` reuses the previous translation.

    Only ``PddlState``'s replanner reads the optimized translation; a replay never
    replans. The patch is undone on exit, and so is the translator's rewrite of
    ``sys.argv``.
    """
    fast_downward = alfworld_module("fast_downward")
    original = fast_downward.pddl2sas
    argv = list(sys.argv)
    last: dict[tuple[str, str], Any] = {}

    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        key = (domain, problem)
        if optimize and key in last:
            return last[key]
        result = original(domain, problem, verbose=verbose, optimize=optimize)
        last[key] = result
        return result

    fast_downward.pddl2sas = pddl2sas
    try:
        yield
    finally:
        fast_downward.pddl2sas = original
        sys.argv[:] = argv


def _names_in(command: str) -> Any:
    def present(name: str) -> bool:
        return re.search(rf"(?<!\S){re.escape(name)}(?!\S)", command) is not None

    return present


def _render(pddl_env: Any, action: Any, names: Mapping[str, str], context_facts: list) -> str:
    """The command ``PddlEnv._gather_infos`` renders for ``action`` (same calls)."""
    infos = pddl_env._entity_infos
    context = {
        "state": pddl_env._pddl_state,
        "facts": context_facts,
        "variables": {ph.name: infos[var.name] for ph, var in action.mapping.items()},
        "mapping": action.mapping,
        "entity_infos": infos,
    }
    action.command_template = pddl_env._logic.grammar.derive(action.command_template, context)
    return action.format_command(names)


def _feedback(pddl_env: Any, action: Any) -> str:
    """The feedback ``PddlEnv.step`` renders after applying ``action`` (same calls)."""
    state = pddl_env._pddl_state
    infos = pddl_env._entity_infos
    context = {
        "state": state,
        "facts": list(state.facts),
        "variables": {ph.name: infos[var.name] for ph, var in action.mapping.items()},
        "mapping": action.mapping,
        "entity_infos": infos,
    }
    return pddl_env._logic.grammar.derive(action.feedback_rule, context)


def replay(game: Mapping[str, Any], walkthrough: Sequence[str] | None = None) -> Replay:
    """Plays ``walkthrough`` (default: the game's own) on the real engine; checks it wins.

    Args:
        game: a ``game.tw-pddl`` mapping (``pddl_domain``, ``grammar``, ``pddl_problem``, ...).
        walkthrough: commands to play; ``None`` uses ``game["walkthrough"]``.

    Returns:
        The :class:`Replay`.

    Raises:
        VerificationError: a command was not admissible, the goal held too early, or the
            last command did not reach it.
    """
    commands = list(game["walkthrough"] if walkthrough is None else walkthrough)
    if not commands:
        raise VerificationError("empty walkthrough")
    env = _engine()
    with _one_translation():
        env.load(dict(game))
    pddl_env = env._wrapped_env
    state = pddl_env._pddl_state
    names = {key: info.name for key, info in pddl_env._entity_infos.items()}
    if state.check_goal():
        raise VerificationError("the goal already holds in the initial state")
    observations = []
    for step, command in enumerate(commands):
        present = _names_in(command)
        facts = list(state.facts)
        rendered = []
        chosen = None
        for action in state.all_applicable_actions():
            entities = [
                names[var.name]
                for var in action.mapping.values()
                if var.type in ("object", "receptacle")
            ]
            if entities and not any(present(name) for name in entities):
                continue
            text = _render(pddl_env, action, names, facts)
            rendered.append(text)
            if text == command:
                chosen = action
                break
        if chosen is None:
            raise VerificationError(
                f"step {step}: {command!r} is not admissible; "
                f"admissible commands naming its objects: {sorted(set(rendered))}"
            )
        state.apply(chosen)
        observations.append(_feedback(pddl_env, chosen))
        won = bool(state.check_goal())
        if won and step < len(commands) - 1:
            raise VerificationError(f"won early at step {step} ({command!r})")
    if not won:
        raise VerificationError(f"walkthrough ended without winning: {commands}")
    return Replay(tuple(observations), True)
