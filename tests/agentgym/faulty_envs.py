"""Envs for the vector env and contract-check tests: faults on command, an env that must
never be stepped after its episode ended, and envs that break the contract in the ways a
user's env did (issue 43: an unhashable anchor, a non-string observation, a raising step,
a ``**kwargs`` constructor, a plain Gymnasium env). Module-level so that worker processes
can import them; importing this module registers the ``AgentGymTest/*`` ids of the latter
with :func:`agentgym.register` (so ``"tests.agentgym.faulty_envs:<id>"`` names them
anywhere)."""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import time
from collections.abc import Hashable
from typing import Any

import gymnasium as gym
from gymnasium import spaces

import agentgym
from agentgym.core import TextSpace, Transition
from agentgym.scripted import ScriptedTextEnv

RAISE = "!raise"
SIGKILL = "!sigkill"
SEGFAULT = "!segfault"
EXIT = "!exit"
HANG = "!hang"
FAULT_ACTIONS = (RAISE, SIGKILL, SEGFAULT, EXIT, HANG)
FAULTY_TASK = "!raise-on-reset"
HANGING_TASK = "!hang-on-reset"
HANG_S = 30.0
"""How long a hanging env sleeps: long next to any test's ``step_timeout``, yet bounded,
so that a vector env that fails to time it out makes a test fail instead of hang."""


class InjectedFault(RuntimeError):
    """The exception a :class:`FaultyTextEnv` raises on command."""


class FaultyTextEnv(ScriptedTextEnv):
    """The scripted door env, which misbehaves on command.

    Actions ``"!raise"`` (an exception escapes ``step``), ``"!sigkill"`` (the process
    kills itself with SIGKILL), ``"!segfault"`` (a real segmentation fault) and
    ``"!exit"`` (``os._exit(3)``) and ``"!hang"`` (sleeps :data:`HANG_S` seconds);
    resetting with task id ``"!raise-on-reset"`` raises, with ``"!hang-on-reset"`` it
    sleeps :data:`HANG_S` seconds.
    """

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        if task_id == FAULTY_TASK:
            raise InjectedFault("injected fault in reset")
        if task_id == HANGING_TASK:
            time.sleep(HANG_S)
        return super()._reset_task(task_id)

    def _step_text(self, action: str) -> Transition:
        if action == RAISE:
            raise InjectedFault("injected fault in step")
        if action == SIGKILL:
            os.kill(os.getpid(), signal.SIGKILL)
        if action == SEGFAULT:
            ctypes.string_at(0)
        if action == EXIT:
            os._exit(3)
        if action == HANG:
            time.sleep(HANG_S)
        return super()._step_text(action)


class BrokenInitEnv(ScriptedTextEnv):
    """Cannot be built."""

    def __init__(self, **kwargs: Any):
        raise InjectedFault("injected fault in __init__")


class StrictCounterEnv(gym.Env[str, str]):
    """A plain Gymnasium text env (not a ``TextEnv``) whose episode ends after
    ``length`` steps, and which raises if it is stepped after that: only a vector env
    that really freezes finished envs can drive it through a batch."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, length: int = 2):
        self.length = length
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self._count = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._count = 0
        return "count 0", {"count": 0}

    def step(self, action: Any):
        if self._count >= self.length:
            raise AssertionError("stepped after the episode ended")
        self._count += 1
        done = self._count >= self.length
        return f"count {self._count} after {action!r}", 1.0, done, False, {"count": self._count}


class MarkerGuardedEnv(FaultyTextEnv):
    """A :class:`FaultyTextEnv` that cannot be built while the file ``marker`` exists
    (to make rebuilding an env, or restarting a worker, fail on demand)."""

    def __init__(self, marker: str, **kwargs: Any):
        if os.path.exists(marker):
            raise InjectedFault(f"cannot be built while {marker} exists")
        super().__init__(**kwargs)


class MarkerHangingEnv(FaultyTextEnv):
    """A :class:`FaultyTextEnv` whose construction hangs :data:`HANG_S` seconds while the
    file ``marker`` exists (a replacement worker that never finishes building its envs)."""

    def __init__(self, marker: str, **kwargs: Any):
        if os.path.exists(marker):
            time.sleep(HANG_S)
        super().__init__(**kwargs)


UNLOADABLE = "!unloadable"
"""Action after which :class:`UnloadableInfoEnv` puts an :class:`Unloadable` in its info."""


def refuse_to_load() -> None:
    """What unpickling an :class:`Unloadable` calls: it raises."""
    raise InjectedFault("this object refuses to be unpickled")


class Unloadable:
    """Pickles fine in the worker; unpickling it (in the parent) raises."""

    def __reduce__(self) -> tuple:
        return refuse_to_load, ()


class UnloadableInfoEnv(FaultyTextEnv):
    """A :class:`FaultyTextEnv` whose step info holds an :class:`Unloadable` after the
    action :data:`UNLOADABLE`."""

    def _step_text(self, action: str) -> Transition:
        if action == UNLOADABLE:
            return Transition("here is something", info={"blob": Unloadable()})
        return super()._step_text(action)


# ---------------------------------------------------------------------- contract breaches
MODULE = __name__
"""This module's name: ``f"{MODULE}:{id}"`` names an id below from anywhere."""


class UnhashableAnchorEnv(ScriptedTextEnv):
    """The scripted door env whose ``state_key`` is a list: ``anchor="state"`` anchors
    cannot be hashed (GiGPO's step groups need them as dict keys)."""

    def state_key(self) -> Hashable:
        return [self._task_id, self._room]  # type: ignore[return-value]


class RaisingStepEnv(ScriptedTextEnv):
    """The scripted door env whose every step raises."""

    def _step_text(self, action: str) -> Transition:
        raise InjectedFault(f"injected fault in step ({action!r})")


class KwargsEnv(ScriptedTextEnv):
    """The scripted door env behind a ``**kwargs`` constructor that forwards everything to
    its base class, which takes no ``width``: the constructor's signature names nothing,
    so only building it shows a wrong argument."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)


class IntObservationEnv(gym.Env):
    """A plain Gymnasium env (Gymnasium's toy-text style) whose observations are ints:
    AgentGym's agents read text."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Discrete(10)
        self.action_space = TextSpace()
        self._position = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._position = int(self.np_random.integers(5))
        return self._position, {}

    def step(self, action: Any):
        self._position = min(self._position + 1, 9)
        return self._position, 0.0, self._position == 9, False, {}


class PlainGuessEnv(gym.Env):
    """A plain Gymnasium text env (no ``TextEnv``, none of AgentGym's info keys): guess a
    number in ``[1, high]`` from "higher" / "lower" answers within ``tries`` guesses;
    reward 1 for a right guess. The number comes from the reset's seed."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, high: int = 8, tries: int = 4):
        self.high = high
        self.tries = tries
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self._secret = 1
        self._left = tries

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._secret = int(self.np_random.integers(1, self.high + 1))
        self._left = self.tries
        return f"Guess my number from 1 to {self.high}. Say one number.", {}

    def step(self, action: Any):
        self._left -= 1
        words = str(action).split()
        guess = int(words[0]) if words and words[0].isdigit() else None
        if guess == self._secret:
            return "Right!", 1.0, True, False, {"guesses_left": self._left}
        hint = ("Say a number." if guess is None
                else "Higher." if guess < self._secret else "Lower.")
        return hint, 0.0, False, self._left <= 0, {"guesses_left": self._left}


class ToolsMissAnActionEnv(ScriptedTextEnv):
    """Its tools write no ``jump``, one of its admissible actions."""

    @classmethod
    def tools(cls, kwargs: dict[str, Any]) -> Any:
        from agentgym.tools import EnvTools, tool

        return EnvTools((tool("look", "Look around.", "look"),))

    def admissible_actions(self) -> tuple[str, ...]:
        return ("jump", *super().admissible_actions())


class BadToolSchemaEnv(ScriptedTextEnv):
    """A tool without a description."""

    @classmethod
    def tools(cls, kwargs: dict[str, Any]) -> Any:
        from agentgym.tools import EnvTools, tool

        return EnvTools((tool("look", "", "look"),))


class UnseededStepEnv(ScriptedTextEnv):
    """The scripted door env whose answers add a number from Python's global ``random``
    (which ``reset(seed=)`` does not seed): the task is the seed's, the episode is not."""

    def _step_text(self, action: str) -> Transition:
        import random

        transition = super()._step_text(action)
        return Transition(observation=f"{transition.observation} ({random.random():.6f})",
                          reward=transition.reward, terminated=transition.terminated,
                          valid_action=transition.valid_action, info=transition.info)


class UnseededTaskEnv(ScriptedTextEnv):
    """The scripted door env whose task draw ignores the seed: each reset, of any instance,
    takes the next task (as a draw from unseeded global state would, but never the same
    task twice running, so the check's verdict cannot depend on what ran before)."""

    _draws = itertools.count()

    def task_id_for_seed(self, rng: Any) -> str:
        ids = list(self.task_ids)
        return ids[next(UnseededTaskEnv._draws) % len(ids)]


class IntTaskEnv(ScriptedTextEnv):
    """The scripted door env built on ``TextEnv`` whose ``task`` property is an int (the
    task's number): ``TextEnv`` copies it into ``info["task"]``."""

    @property
    def task(self) -> str:
        return int(str(self._task_id).rsplit("-", 1)[-1])  # type: ignore[return-value]


class IntActionsPlainEnv(PlainGuessEnv):
    """The plain number-guessing env whose info lists its admissible actions as ints."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = super().reset(seed=seed, options=options)
        return observation, {**info, "admissible_actions": tuple(range(1, self.high + 1))}


BREACHES = {
    "AgentGymTest/UnseededStep-v0": UnseededStepEnv,
    "AgentGymTest/UnseededTask-v0": UnseededTaskEnv,
    "AgentGymTest/IntTask-v0": IntTaskEnv,
    "AgentGymTest/IntActionsPlain-v0": IntActionsPlainEnv,
    "AgentGymTest/UnhashableAnchor-v0": UnhashableAnchorEnv,
    "AgentGymTest/RaisingStep-v0": RaisingStepEnv,
    "AgentGymTest/Kwargs-v0": KwargsEnv,
    "AgentGymTest/IntObservation-v0": IntObservationEnv,
    "AgentGymTest/PlainGuess-v0": PlainGuessEnv,
    "AgentGymTest/ToolsMissAnAction-v0": ToolsMissAnActionEnv,
    "AgentGymTest/BadToolSchema-v0": BadToolSchemaEnv,
}
"""The envs of the contract tests, by the id they are registered under."""

for _env_id, _entry_point in BREACHES.items():
    agentgym.register(_env_id, _entry_point)
