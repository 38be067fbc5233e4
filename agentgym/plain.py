"""Plain Gymnasium text envs made trainable: :class:`PlainTextEnv` and :func:`make_text_env`.

A *plain* env is any ``gymnasium.Env`` whose observations are text (``str``) and whose
actions are text, but which is not built on :class:`~agentgym.core.TextEnv` and may put
none of the contract's info keys (:data:`~agentgym.core.INFO_KEYS`) in its infos.
:class:`PlainTextEnv` wraps one and fills in what the contract needs; what the env does
not say is filled in as follows, and that is what a plain env gives up against a
``TextEnv`` of its own (``docs/own-env.md`` says the same):

``task``               the env's ``info["task"]`` at reset if it has one, else the
                       episode's first observation
``task_id``            ``"seed-<s>"``: task ids are reset seeds. ``reset(seed=s)`` draws a
                       task id from the seeded RNG, ``options={"task_id": "seed-<s>"}``
                       resets the env with ``seed=s``; the env must give equal episodes
                       for equal seeds (``python -m agentgym.check`` tests it)
``admissible_actions`` the env's ``info["admissible_actions"]`` if it has them, else
                       ``()``: actions are free-form text
``anchor``             ``anchor="observation"``: the observation text. ``anchor="state"``:
                       the env's own ``state_key()`` if it defines one, else its
                       ``info["anchor"]``, else the observation text too -- so GiGPO's
                       step groups come from the text only, and equal texts in different
                       states share a group
``success``            the env's ``info["success"]`` (or ``info["is_success"]``), else
                       ``False``: without it the success metrics stay 0 and the return is
                       the only measure
``valid_action``       the env's ``info["valid_action"]`` if it has one, else ``True``:
                       only non-text actions and actions over ``max_action_length``
                       characters (rejected before the env sees them) are invalid, so no
                       invalid-action penalty is charged for what the env silently ignores

The env's other info keys are passed on. An episode ends when the env terminates or
truncates (its own time limit, a ``max_episode_steps`` registration) or after
``max_steps`` steps; stepping a finished episode repeats its last step (the contract),
so the wrapped env is never stepped after its end. A non-``str`` observation raises
``TypeError`` (one line): AgentGym's agents read text.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import gymnasium as gym

from agentgym.core import INFO_KEYS, AnchorMode, TextEnv, Transition
from agentgym.seeded_tasks import SeededTaskIds

ADAPTER_ARGUMENTS: tuple[str, ...] = ("anchor", "max_steps", "first_seed", "num_seeds",
                                      "max_action_length")
"""The keyword arguments :func:`make_text_env` keeps for :class:`PlainTextEnv`; every
other one goes to the plain env's own constructor."""

DEFAULT_NUM_SEEDS = 2**31 - 1
"""Seeds (tasks) a :class:`PlainTextEnv` draws from by default: every ``int32`` seed."""


class PlainTextEnv(TextEnv):
    """A plain Gymnasium text env behind AgentGym's env contract (module docstring).

    Args:
        env: the plain env (``gym.make(...)`` of it, or an instance).
        first_seed: the seed of the first task (``task_ids`` are ``"seed-<s>"`` for
            ``s`` in ``[first_seed, first_seed + num_seeds)``); an evaluation plays the
            first ones, so held-out tasks are a ``first_seed`` far from training's.
        num_seeds: how many seeds ``task_ids`` spans.
        anchor, max_steps, max_action_length: see :class:`~agentgym.core.TextEnv`.
        name: what messages call the env (default: its spec's id, else its class).
    """

    def __init__(self, env: gym.Env, *, first_seed: int = 0,
                 num_seeds: int = DEFAULT_NUM_SEEDS, anchor: AnchorMode = "observation",
                 max_steps: int | None = None, max_action_length: int = 1 << 16,
                 name: str | None = None):
        super().__init__(anchor=anchor, max_steps=max_steps,
                         max_action_length=max_action_length)
        self.env = env
        self.name = name or (env.spec.id if env.spec is not None else type(env).__name__)
        self._task_ids = SeededTaskIds("seed", first_seed, num_seeds)
        self._task = ""
        self._info: dict[str, Any] = {}
        self._observation = ""
        self._env_truncated = False

    # ------------------------------------------------------------------ TextEnv
    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        seed = self._task_ids.seed_of(task_id)
        observation, info = self.env.reset(seed=seed)
        self._observation = self._text(observation, "reset")
        self._info = dict(info)
        task = self._info.get("task")
        self._task = task if isinstance(task, str) else self._observation
        self._env_truncated = False
        return self._observation, self._extra()

    def _step_text(self, action: str) -> Transition:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._observation = self._text(observation, "step")
        self._info = dict(info)
        self._env_truncated = bool(truncated)
        valid = self._info.get("valid_action", True)
        return Transition(observation=self._observation, reward=float(reward),
                          terminated=bool(terminated), valid_action=bool(valid),
                          info=self._extra())

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """:meth:`TextEnv.step`, where the wrapped env's own truncation ends the episode
        too."""
        observation, reward, terminated, truncated, info = super().step(action)
        if self._env_truncated and not terminated and not truncated:
            self._truncated = truncated = True
        return observation, reward, terminated, truncated, info

    def state_key(self) -> Hashable:
        own = getattr(self.env.unwrapped, "state_key", None)
        if callable(own):
            return own()
        return self._info.get("anchor", self._observation)

    @property
    def task(self) -> str:
        return self._task

    @property
    def success(self) -> bool:
        return bool(self._info.get("success", self._info.get("is_success", False)))

    def admissible_actions(self) -> tuple[str, ...]:
        return tuple(self._info.get("admissible_actions", ()) or ())

    def close(self) -> None:
        self.env.close()
        super().close()

    # ------------------------------------------------------------------ helpers
    def _text(self, observation: Any, where: str) -> str:
        if not isinstance(observation, str):
            kind = type(observation).__name__
            article = "an" if kind[0].lower() in "aeiou" else "a"
            raise TypeError(f"{self.name} returned {article} {kind} observation from {where}(); "
                            "AgentGym's agents read text: return a str")
        return observation

    def _extra(self) -> dict[str, Any]:
        """The env's own info keys (the contract's are filled in by :class:`TextEnv`)."""
        return {key: value for key, value in self._info.items() if key not in INFO_KEYS}

    def __repr__(self) -> str:
        return f"PlainTextEnv({self.name})"


def is_text_env_class(creator: Any) -> bool | None:
    """Whether the entry point ``creator`` builds a :class:`TextEnv`: ``True`` or ``False``
    for a class, ``None`` for a function (known only once it has built one)."""
    if isinstance(creator, type):
        return issubclass(creator, TextEnv)
    return None


def make_text_env(env_id: str, **kwargs: Any) -> TextEnv:
    """An env of ``env_id`` under AgentGym's contract: ``gym.make(env_id, **kwargs)`` for
    an env built on :class:`TextEnv`, else the plain env in a :class:`PlainTextEnv`.

    For a plain env the keyword arguments of :data:`ADAPTER_ARGUMENTS` (``anchor``,
    ``max_steps``, ...) go to the adapter, the rest to ``gym.make``. ``env_id`` may be
    ``"module:Env-v0"``.

    Raises:
        gymnasium.error.Error: ``env_id`` is not registered.
        TypeError: the env's constructor refuses a keyword argument.
    """
    from agentgym.env_ids import env_creator

    kind = is_text_env_class(env_creator(env_id))
    if kind:
        return gym.make(env_id, **kwargs)
    adapter = {key: kwargs.pop(key) for key in ADAPTER_ARGUMENTS if key in kwargs}
    env = gym.make(env_id, **kwargs)
    if kind is None and isinstance(env.unwrapped, TextEnv):  # a function built a TextEnv
        env.close()
        return gym.make(env_id, **kwargs, **adapter)
    return PlainTextEnv(env, name=env_id, **adapter)


def accepted_arguments(env_id: str) -> tuple[str, ...] | None:
    """The keyword arguments :func:`make_text_env` takes for ``env_id``: its constructor's
    (:func:`~agentgym.env_ids.constructor_arguments`), and for a plain env also the
    adapter's (:data:`ADAPTER_ARGUMENTS`); ``None`` when the constructor takes
    ``**kwargs`` or cannot be read (only building it tells).

    Raises:
        gymnasium.error.Error: ``env_id`` is not registered.
    """
    from agentgym.env_ids import constructor_arguments, env_creator

    accepted = constructor_arguments(env_id)
    if accepted is None or is_text_env_class(env_creator(env_id)):
        return accepted
    return accepted + tuple(a for a in ADAPTER_ARGUMENTS if a not in accepted)
