"""Check an env against AgentGym's contract: ``python -m agentgym.check ENV_ID``.

:func:`check_env_contract` builds the env the way ``train.py`` does
(:func:`agentgym.plain.make_text_env`: a plain Gymnasium env inside
:class:`~agentgym.plain.PlainTextEnv`) and returns one :class:`CheckResult` per check, in
this order (the *fast* part, which ``train.py`` runs before the model loads on any env
that is not AgentGym's own, is the first thirteen; twelve in the ``state`` anchor mode,
which has no ``state keys`` check of its own):

``env id``            the id is registered (``"module:Env-v0"``: the module imports and
                      registers it)
``kind``              built on ``TextEnv``, or a plain env trained through the adapter
                      (never fails)
``build``             the env builds with the keyword arguments given (a constructor that
                      refuses one fails here, ``**kwargs`` constructors included)
``observations``      reset and every step of a probe episode return ``str``
``episode``           a probe episode (reset, then steps until it ends) raises nothing;
                      rewards are finite numbers, flags are ``bool``
``info keys``         every contract key (:data:`~agentgym.core.INFO_KEYS`) at reset and
                      at every step, with the contract's types
``anchors (MODE)``    every anchor of the probe episode hashes and pickles (the vector
                      env's workers send them), in the run's anchor mode
``state keys``        in the ``observation`` anchor mode: every ``state_key()`` of a probe
                      episode hashes and pickles too (the other mode's anchors: a list
                      state key would break every ``anchor="state"`` run)
``seeds and task ids``  two probe episodes from equal seeds go alike (task, observations,
                      rewards); a reset with ``options={"task_id": ...}`` starts that task
                      (same first observation); ``task_ids`` is not empty
``bad actions``       ``""``, a 1 Mi-character string and non-strings (``None``, ``42``,
                      ``b"..."``) never raise; non-strings are ``valid_action=False``
``finished episode``  stepping an episode that ended repeats its last observation with
                      reward 0, the same flags and the same info
``prompt length``     the prompts of the probe episode's steps against a token budget
                      (:mod:`agentgym.check.prompt_length`): a warning, not a failure,
                      when one is longer (a run would cut it)
``tools``             the env's tools (:func:`agentgym.tools.env_tools`: its own, or the
                      generic one) are valid schemas (:func:`agentgym.tools.tool_problems`)
                      that JSON can write, and every admissible action of the probe
                      episode and every action of the env's expert (when it declares one)
                      is written by a call, which writes it back (``to_action(to_call(a))
                      == a``)

and in the full check also:

``anchors (OTHER)``   the other anchor mode, as above (a second env)
``gymnasium check_env``  Gymnasium's own ``check_env`` on the env as registered (its
                      warnings are listed)
``vector env groups``  ``make_vector_env(id, 4, group_size=2)`` resets groups onto one task
                      each, takes per-env ``task_ids`` and steps without ``env_error``

Each check catches what the env raises and says it in one line; a check that cannot run
because an earlier one failed is left out (nothing after a failed build or reset; the
full part only after the fast part passed). Nothing here imports torch.
"""

from __future__ import annotations

import logging
import math
import pickle
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym.check.prompt_length import (
    PromptCounter,
    probe_steps,
    prompt_length_detail,
    text_counter,
)
from agentgym.check.tools_check import check_tools
from agentgym.core import ANCHOR_MODES, INFO_KEYS

PROBE_MAX_STEPS = 8
"""``max_steps`` of the envs the command-line check builds, so that its probe episode
ends (``train.py``'s check uses the run's own)."""

PROBE_ACTIONS = ("look", "1", "yes", "go north")
"""What the probe episode plays where the env lists no admissible actions."""

HUGE_ACTION_CHARS = (1 << 20) + 1
"""The length of the "huge" bad action: one over the contract's text bound (1 Mi)."""

@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    Attributes:
        name: the check (see the module docstring).
        passed: whether the env passed it.
        detail: one line: what was seen, or what is broken and what to do.
        warning: passed, with something a run should know (``prompt length``).
    """

    name: str
    passed: bool
    detail: str
    warning: bool = False

    @property
    def line(self) -> str:
        """``PASS  name: detail``, ``WARN  name: detail`` or ``FAIL  name: detail``."""
        status = "FAIL" if not self.passed else "WARN" if self.warning else "PASS"
        return f"{status}  {self.name}: {self.detail}"


class Breach(Exception):
    """A check's failure, raised inside a check with its one-line detail."""


def a_type(value: Any) -> str:
    """``"a list"``, ``"an int"``: the type of ``value`` with its article."""
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def one_line(error: BaseException) -> str:
    """``Type: first line of the message``."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


@dataclass
class Episode:
    """What a probe episode saw, up to the error that stopped it (if any).

    Attributes:
        observations: the reset's observation, then each step's.
        infos: the reset's info, then each step's.
        actions: each step's action.
        rewards, terminated, truncated: each step's.
        error: ``"reset(seed=0)"`` or ``"step N (action ...)"`` and what it raised.
        error_type: the type of that exception.
        ended: the episode terminated or truncated.
        after: what one more step after the end returned (``obs, reward, terminated,
            truncated, info``), or the one-line error it raised.
    """

    observations: list[Any] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    rewards: list[Any] = field(default_factory=list)
    terminated: list[Any] = field(default_factory=list)
    truncated: list[Any] = field(default_factory=list)
    error: str | None = None
    error_type: type | None = None
    ended: bool = False
    after: tuple[Any, ...] | str | None = None


def probe_action(info: dict[str, Any], step: int) -> str:
    """The probe's action at ``step``: the env's admissible actions in turn, else
    :data:`PROBE_ACTIONS`."""
    actions = info.get("admissible_actions") or PROBE_ACTIONS
    try:
        return str(actions[step % len(actions)])
    except (TypeError, KeyError):
        return PROBE_ACTIONS[step % len(PROBE_ACTIONS)]


def play_probe(env: Any, max_steps: int | None, *, seed: int | None = 0,
               options: dict[str, Any] | None = None) -> Episode:
    """Reset ``env`` with ``seed`` and step it until its episode ends, at most
    ``max_steps + 1`` steps (:data:`PROBE_MAX_STEPS` + 1 without a limit: one more than
    the limit shows a limit that is not kept); then, if it ended, once more."""
    episode = Episode()
    try:
        observation, info = env.reset(seed=seed, options=options)
    except Exception as error:  # noqa: BLE001 - reported, not raised
        call = f"reset(seed={seed})" if options is None else f"reset(options={options})"
        episode.error, episode.error_type = f"{call} raised {one_line(error)}", type(error)
        return episode
    episode.observations.append(observation)
    episode.infos.append(dict(info))
    limit = (max_steps if max_steps is not None else PROBE_MAX_STEPS) + 1
    for step in range(limit):
        action = probe_action(episode.infos[-1], step)
        try:
            observation, reward, terminated, truncated, info = env.step(action)
        except Exception as error:  # noqa: BLE001
            episode.error = f"step {step + 1} (action {action!r}) raised {one_line(error)}"
            episode.error_type = type(error)
            return episode
        episode.observations.append(observation)
        episode.infos.append(dict(info))
        episode.actions.append(action)
        episode.rewards.append(reward)
        episode.terminated.append(terminated)
        episode.truncated.append(truncated)
        if terminated or truncated:
            episode.ended = True
            break
    if episode.ended:
        try:
            episode.after = env.step(probe_action(episode.infos[-1], limit))
        except Exception as error:  # noqa: BLE001
            episode.after = f"raised {one_line(error)}"
    return episode


def info_problem(info: Any, where: str) -> str | None:
    """What is wrong with one info dict under the contract, or ``None``."""
    if not isinstance(info, dict):
        return f"{where}: info is {a_type(info)}, not a dict"
    missing = [key for key in INFO_KEYS if key not in info]
    if missing:
        return f"{where}: info lacks {', '.join(missing)}"
    expected: dict[str, tuple[type, ...]] = {
        "task": (str,), "task_id": (str,), "admissible_actions": (tuple,),
        "success": (bool, np.bool_), "valid_action": (bool, np.bool_)}
    for key, types in expected.items():
        if not isinstance(info[key], types):
            return f"{where}: info[{key!r}] is {a_type(info[key])}, not a {types[0].__name__}"
    bad = [a for a in info["admissible_actions"] if not isinstance(a, str)]
    if bad:
        return (f"{where}: info['admissible_actions'] holds {a_type(bad[0])} "
                f"({bad[0]!r}); actions are str")
    return None


def anchor_problem(anchor: Any) -> str | None:
    """Why ``anchor`` cannot group steps (not hashable, or not picklable), or ``None``."""
    try:
        hash(anchor)
    except TypeError as error:
        return (f"{a_type(anchor)} anchor is not hashable ({error}); return a "
                "hashable value (a tuple, not a list; a str; an int)")
    try:
        pickle.loads(pickle.dumps(anchor))
    except Exception as error:  # noqa: BLE001
        return (f"{a_type(anchor)} anchor does not pickle ({one_line(error)}); the "
                "vector env's workers send anchors between processes")
    return None


def _first_difference(first: Episode, second: Episode) -> str:
    """Where two probe episodes first differ: ``"the observation after step 2"``, ``"the
    reward of step 3"``, or an error in one of them."""
    for index, (a, b) in enumerate(zip(first.observations, second.observations,
                                       strict=False)):
        if not same(a, b):
            return "the first observation" if index == 0 else \
                f"the observation after step {index}"
        if index < min(len(first.rewards), len(second.rewards)) and \
                not same(first.rewards[index], second.rewards[index]):
            return f"the reward of step {index + 1}"
    if len(first.observations) != len(second.observations):
        return "their length"
    return f"one of them {first.error or second.error}"


def same(first: Any, second: Any) -> bool:
    """Equality that also holds for NumPy arrays and containers of them."""
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(same(first[k], second[k]) for k in first)
    if isinstance(first, (list, tuple)) and isinstance(second, (list, tuple)):
        return (type(first) is type(second) and len(first) == len(second)
                and all(same(a, b) for a, b in zip(first, second, strict=True)))
    try:
        equal = first == second
        if isinstance(equal, np.ndarray):
            return bool(np.array_equal(first, second))
        return bool(equal)
    except Exception:  # noqa: BLE001 - objects that refuse comparison
        return repr(first) == repr(second)


def check_observations(episode: Episode) -> str:
    """The ``observations`` check: reset and every step of the probe returned ``str``."""
    if episode.error is not None and episode.error_type is TypeError and \
            "observation" in episode.error:
        raise Breach(episode.error)
    for index, observation in enumerate(episode.observations):
        if not isinstance(observation, str):
            where = "reset" if index == 0 else f"step {index}"
            raise Breach(f"{where} returned {a_type(observation)} observation "
                         f"({observation!r:.60}); observations are str")
    return f"str at reset and at {len(episode.observations) - 1} steps"


def check_episode(episode: Episode) -> str:
    """The ``episode`` check: the probe raised nothing, its rewards are finite numbers and
    its flags ``bool``."""
    if episode.error is not None:
        raise Breach(f"{episode.error}; envs must not raise (bad actions get feedback "
                     "text and valid_action=False)")
    for step, reward in enumerate(episode.rewards, start=1):
        try:
            finite = math.isfinite(float(reward))
        except (TypeError, ValueError):
            finite = False
        if not finite:
            raise Breach(f"step {step} returned the reward {reward!r}; rewards are finite "
                         "numbers")
    flags = episode.terminated + episode.truncated
    bad = [flag for flag in flags if not isinstance(flag, (bool, np.bool_))]
    if bad:
        raise Breach(f"a step returned terminated/truncated of type "
                     f"{type(bad[0]).__name__}; they are bool")
    end = "ended" if episode.ended else "did not end"
    return f"reset and {len(episode.rewards)} steps, no error; the episode {end}"


def check_info_keys(episode: Episode, hint: Callable[[str], str]) -> str:
    """The ``info keys`` check: every contract key, with its type, at reset and at every
    step of the probe; ``hint(problem)`` says what to do about a broken one."""
    for index, info in enumerate(episode.infos):
        problem = info_problem(info, "reset" if index == 0 else f"step {index}")
        if problem is not None:
            raise Breach(f"{problem} ({hint(problem)})")
    if not episode.infos:
        raise Breach("no info to check: the reset failed")
    if episode.infos[0]["valid_action"] is not True:
        raise Breach("reset: info['valid_action'] must be True")
    return f"{', '.join(INFO_KEYS)} at reset and at {len(episode.infos) - 1} steps"


def check_anchors(episode: Episode) -> str:
    """The ``anchors (MODE)`` check: every anchor of the probe hashes and pickles."""
    if not episode.infos:
        raise Breach(f"no anchor to check: {episode.error}")
    for index, info in enumerate(episode.infos):
        if "anchor" not in info:
            raise Breach(f"{'reset' if index == 0 else f'step {index}'}: no anchor")
        problem = anchor_problem(info["anchor"])
        if problem is not None:
            where = "reset" if index == 0 else f"step {index}"
            raise Breach(f"{where}: {problem}")
    kinds = sorted({type(info["anchor"]).__name__ for info in episode.infos})
    return (f"{len(episode.infos)} anchors hash and pickle ({', '.join(kinds)})"
            + (f"; the probe stopped early: {episode.error}" if episode.error else ""))


def check_state_keys(env: Any, max_steps: int | None) -> str:
    """Every ``state_key()`` of a probe episode hashes and pickles (the anchors of the
    ``state`` mode, which the run's ``observation`` mode never computes)."""
    from agentgym.core import TextEnv

    inner = env.unwrapped
    if not isinstance(inner, TextEnv):
        return "not a TextEnv: no state_key() to check"
    _, info = env.reset(seed=0)
    keys: list[Any] = []
    limit = max_steps if max_steps is not None else PROBE_MAX_STEPS
    for step in range(limit + 1):
        keys.append(inner.state_key())
        problem = anchor_problem(keys[-1])
        if problem is not None:
            raise Breach(f"{'reset' if step == 0 else f'step {step}'}: the state key "
                         f"(state_key(), the anchor of every anchor='state' run): "
                         f"{problem}")
        if step == limit:
            break
        try:
            _, _, terminated, truncated, info = env.step(probe_action(info, step))
        except Exception:  # noqa: BLE001 - a step that raises is the episode check's
            break
        if terminated or truncated:
            keys.append(inner.state_key())
            problem = anchor_problem(keys[-1])
            if problem is not None:
                raise Breach(f"step {step + 1}: the state key (state_key(), the anchor "
                             f"of every anchor='state' run): {problem}")
            break
    kinds = sorted({type(key).__name__ for key in keys})
    return f"{len(keys)} state keys hash and pickle ({', '.join(kinds)})"


def info_hint(problem: str, *, plain: bool, text_env: bool) -> str:
    """What to do about an info ``problem``: for an env built on ``TextEnv``, which
    fills the keys in, the part of the env that fed the wrong value; for a plain env,
    the info key the adapter copied; for any other, the contract, or ``TextEnv``."""
    if plain and "admissible_actions" in problem:
        return ("agentgym.PlainTextEnv copies your env's info['admissible_actions']: "
                "list str actions")
    if not text_env:
        return ("the contract: agentgym/core.py, or build the env on agentgym.TextEnv, "
                "which fills them in")
    if "'task'" in problem:
        return "TextEnv takes info['task'] from your env's task property: return a str"
    if "admissible_actions" in problem:
        return ("TextEnv takes info['admissible_actions'] from your env's "
                "admissible_actions(): return str actions")
    if "'success'" in problem:
        return "TextEnv takes info['success'] from your env's success property"
    return ("TextEnv fills these keys in: a wrapper around the env, or an override of "
            "TextEnv's reset or step, changed them")


class ContractCheck:
    """The checks of one env id and its keyword arguments (module docstring).

    Args:
        env_id: a registered id, or ``"module:Env-v0"``.
        env_kwargs: the env's own constructor arguments (not ``anchor`` / ``max_steps``).
        anchor: the anchor mode of the fast part.
        max_steps: the ``max_steps`` the envs are built with (``None``: not passed).
        prompts: how the ``prompt length`` check counts and what it compares with
            (default: :func:`~agentgym.check.prompt_length.text_counter`, no budget).
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, *,
                 anchor: str = "observation", max_steps: int | None = PROBE_MAX_STEPS,
                 prompts: PromptCounter | None = None):
        if anchor not in ANCHOR_MODES:
            raise ValueError(f"anchor must be one of {ANCHOR_MODES}, got {anchor!r}")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.anchor = anchor
        self.max_steps = max_steps
        self.prompts = prompts if prompts is not None else text_counter()
        self.results: list[CheckResult] = []
        self.plain = False
        self.text_env = False  # built on TextEnv (the adapter of a plain env aside)

    # ------------------------------------------------------------------ running
    def run(self, *, fast: bool = False) -> list[CheckResult]:
        """Run the checks (the fast part only with ``fast``); return every result."""
        self.results = []
        if not self._check("env id", self._env_id):
            return self.results
        self._check("kind", self._kind)
        env = self._build(self.anchor)
        if env is None:
            return self.results
        try:
            episode = play_probe(env, self.max_steps)
            fast_passed = self._probe_checks(env, episode)
        finally:
            env.close()
        if fast or not fast_passed:
            return self.results
        other = next(mode for mode in ANCHOR_MODES if mode != self.anchor)
        second = self._build(other, name=f"anchors ({other})", quiet=True)
        if second is not None:
            try:
                self._check(f"anchors ({other})",
                            lambda: check_anchors(play_probe(second, self.max_steps)))
            finally:
                second.close()
        self._check("gymnasium check_env", self._gymnasium_check_env)
        self._check("vector env groups", self._vector_groups)
        return self.results

    def _probe_checks(self, env: Any, episode: Episode) -> bool:
        """The fast checks after the build; return whether all passed. A probe that
        stopped at its reset leaves nothing else to check."""
        before = len(self.results)
        texts = self._check("observations", lambda: check_observations(episode))
        if texts or episode.error is None:  # not the same failure twice
            self._check("episode", lambda: check_episode(episode))
        if episode.infos:
            self._check("info keys", lambda: check_info_keys(
                episode, lambda problem: info_hint(problem, plain=self.plain,
                                                   text_env=self.text_env)))
            self._check(f"anchors ({self.anchor})", lambda: check_anchors(episode))
            if self.anchor == "observation":
                self._check("state keys", lambda: check_state_keys(env, self.max_steps))
            self._check("seeds and task ids", lambda: self._seeds(env))
            self._check("bad actions", lambda: self._bad_actions(env))
            if episode.error is None:
                self._check("finished episode", lambda: self._finished(episode))
            if texts:
                self._check("prompt length", lambda: prompt_length_detail(
                    probe_steps(episode.observations, episode.infos, episode.actions,
                                episode.ended), self.prompts))
            self._check("tools", lambda: check_tools(env, episode, self._kwargs(self.anchor),
                                                     self.max_steps))
        return all(result.passed for result in self.results[before:])

    def _check(self, name: str, check: Callable[[], str | tuple[str, bool]]) -> bool:
        """Run one check: its detail on success (with whether it is a warning, when the
        check says), :class:`Breach`'s (or the exception's) on failure; return whether it
        passed."""
        try:
            detail = check()
        except Breach as breach:
            self.results.append(CheckResult(name, False, str(breach)))
            return False
        except Exception as error:  # noqa: BLE001 - the env's own error, reported
            self.results.append(CheckResult(name, False, f"raised {one_line(error)}"))
            return False
        warning = False
        if isinstance(detail, tuple):
            detail, warning = detail
        self.results.append(CheckResult(name, True, detail, warning))
        return True

    def _kwargs(self, anchor: str) -> dict[str, Any]:
        kwargs = {**self.env_kwargs, "anchor": anchor}
        if self.max_steps is not None:
            kwargs["max_steps"] = self.max_steps
        return kwargs

    def _build(self, anchor: str, *, name: str = "build", quiet: bool = False) -> Any:
        """The env under the contract (:func:`~agentgym.plain.make_text_env`), or ``None``
        after a failed check ``name``."""
        from agentgym.plain import PlainTextEnv, make_text_env

        made: list[Any] = []

        def build() -> str:
            from agentgym.core import TextEnv

            try:
                made.append(make_text_env(self.env_id, **self._kwargs(anchor)))
                self.plain = isinstance(made[0], PlainTextEnv)
                self.text_env = isinstance(made[0].unwrapped, TextEnv) and not self.plain
            except TypeError as error:
                given = ", ".join(sorted(self.env_kwargs)) or "none"
                cause = one_line(error).split(" was raised from the environment creator")[0]
                raise Breach(f"gym.make({self.env_id!r}, ...) raised {cause} "
                             f"(env kwargs given: {given}; train.py adds anchor and "
                             "max_steps for an env built on TextEnv)") from None
            return f"built with anchor={anchor!r}, max_steps={self.max_steps}" + (
                f", env kwargs {self.env_kwargs}" if self.env_kwargs else "")

        if quiet:
            try:
                build()
            except Exception as error:  # noqa: BLE001
                detail = str(error) if isinstance(error, Breach) else f"raised {one_line(error)}"
                self.results.append(CheckResult(name, False, f"building it: {detail}"))
                return None
            return made[0]
        return made[0] if self._check(name, build) else None

    # ------------------------------------------------------------------ the checks
    def _env_id(self) -> str:
        from agentgym.env_ids import EnvIdError, find_spec

        try:
            spec = find_spec(self.env_id)
        except EnvIdError as error:
            raise Breach(str(error)) from None
        entry = spec.entry_point if isinstance(spec.entry_point, str) else \
            getattr(spec.entry_point, "__qualname__", repr(spec.entry_point))
        return f"{spec.id} is registered (entry point {entry})"

    def _kind(self) -> str:
        from agentgym.env_ids import env_creator
        from agentgym.plain import is_text_env_class

        kind = is_text_env_class(env_creator(self.env_id))
        if kind:
            return "built on agentgym.TextEnv"
        plain = ("train.py trains it through agentgym.PlainTextEnv (anchors from the "
                 "observation text, free-form actions unless its info lists "
                 "admissible_actions, task ids from seeds; docs/own-env.md)")
        if kind is None:
            return ("built by a function: a TextEnv it returns is used as it is, another "
                    f"env {plain}")
        return f"not built on agentgym.TextEnv: {plain}"

    def _seeds(self, env: Any) -> str:
        # a step that raises is the "episode" check's; here the episodes up to it count
        first = play_probe(env, self.max_steps, seed=1)
        again = play_probe(env, self.max_steps, seed=1)
        if not first.infos or not again.infos:
            raise Breach(f"reset(seed=1) failed: {first.error or again.error}")
        tasks = first.infos[0].get("task_id"), again.infos[0].get("task_id")
        if not same(*tasks):
            raise Breach(f"two episodes from reset(seed=1) started different tasks "
                         f"({tasks[0]!r} and {tasks[1]!r}); equal seeds must give equal "
                         "tasks (draw them from the env's np_random, which reset(seed=) "
                         "seeds)")
        if not (same(first.observations, again.observations)
                and same(first.rewards, again.rewards) and first.error == again.error):
            raise Breach(f"two episodes from reset(seed=1) played the same task "
                         f"{tasks[0]!r} with the same actions but went differently "
                         f"({_first_difference(first, again)}): the env's randomness after "
                         "the task draw is not seeded by reset(seed=) (use self.np_random, "
                         "not random or np.random, or seed them from it)")
        task_id = first.infos[0]["task_id"]
        # the task, not the env's own randomness after it (say slippery moves): compare
        # the start
        replay, replay_info = env.reset(options={"task_id": task_id})
        if replay_info.get("task_id") != task_id or not same(replay, first.observations[0]):
            raise Breach(f"reset(options={{'task_id': {task_id!r}}}) did not start the task "
                         f"that reset(seed=1) drew (task {replay_info.get('task_id')!r}, or "
                         "another first observation)")
        task_ids = getattr(env.unwrapped, "task_ids", None)
        if task_ids is None or len(task_ids) == 0:
            raise Breach("env.unwrapped.task_ids is empty or missing; evaluation plays its "
                         "first ones")
        env.reset(options={"task_id": task_ids[0]})
        return (f"reset(seed=1) twice: task {task_id!r}, the same {len(first.rewards)}-step "
                f"episode; reset by task_id starts it; {len(task_ids)} task ids")

    def _bad_actions(self, env: Any) -> str:
        bad: tuple[tuple[str, Any], ...] = (
            ("empty", ""), ("huge", "x" * HUGE_ACTION_CHARS), ("None", None), ("42", 42),
            ("bytes", b"look"))
        for label, action in bad:
            env.reset(seed=0)
            try:
                observation, _, _, _, info = env.step(action)
            except Exception as error:  # noqa: BLE001
                raise Breach(f"the {label} action raised {one_line(error)}; bad actions must "
                             "get feedback text and valid_action=False") from None
            if not isinstance(observation, str):
                raise Breach(f"the {label} action returned {a_type(observation)} "
                             "observation")
            if not isinstance(action, str) and info.get("valid_action") is not False:
                raise Breach(f"the non-string action {label} got valid_action="
                             f"{info.get('valid_action')!r}; it must be False")
        return "empty, huge (1 Mi + 1 characters), None, 42 and bytes actions: no error"

    def _finished(self, episode: Episode) -> str:
        if not episode.ended:
            raise Breach(f"the probe episode did not end within {len(episode.rewards)} steps "
                         f"though the env was built with max_steps={self.max_steps}")
        if isinstance(episode.after, str):
            raise Breach(f"a step after the episode ended {episode.after}")
        observation, reward, terminated, truncated, info = episode.after
        if not (same(observation, episode.observations[-1]) and float(reward) == 0.0
                and terminated == episode.terminated[-1]
                and truncated == episode.truncated[-1] and same(info, episode.infos[-1])):
            raise Breach("a step after the episode ended did not repeat the last observation "
                         "with reward 0, the same flags and the same info (TextEnv does it)")
        return (f"step {len(episode.rewards) + 1}, after the end, repeats step "
                f"{len(episode.rewards)} with reward 0")

    def _gymnasium_check_env(self) -> str:
        import gymnasium as gym
        from gymnasium.utils.env_checker import check_env

        from agentgym.plain import ADAPTER_ARGUMENTS

        if self.plain:  # the env as registered, without the adapter's arguments
            kwargs = {k: v for k, v in self.env_kwargs.items() if k not in ADAPTER_ARGUMENTS}
        else:
            kwargs = self._kwargs(self.anchor)
        env = gym.make(self.env_id, **kwargs)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                check_env(env.unwrapped, skip_render_check=True)
        finally:
            env.close()
        notes = sorted({" ".join(str(w.message).split())[:160] for w in caught})
        if not notes:
            return "passed"
        return f"passed with {len(notes)} warning(s): " + " | ".join(notes)

    def _vector_groups(self) -> str:
        from agentgym.vector import infos_to_list, make_vector_env

        # the failures are reported here, not also logged by the vector env
        vector_logger = logging.getLogger("agentgym.vector")
        level = vector_logger.level
        vector_logger.setLevel(logging.CRITICAL)
        venv = None
        try:
            venv = make_vector_env(self.env_id, 4, group_size=2, **self._kwargs(self.anchor))
            _, infos = venv.reset(seed=0)
            rows = infos_to_list(infos, 4)
            errors = [row["env_error"] for row in rows if row.get("env_error")]
            if errors:
                raise Breach(f"a reset failed in the vector env: {errors[0].splitlines()[0]}")
            tasks = [row["task_id"] for row in rows]
            if tasks[0] != tasks[1] or tasks[2] != tasks[3]:
                raise Breach(f"group resets gave tasks {tasks}; the two envs of a group must "
                             "play one task (equal seeds, equal tasks)")
            wanted = [tasks[2], tasks[2], tasks[0], tasks[0]]
            _, infos = venv.reset(options={"task_ids": wanted})
            got = [row["task_id"] for row in infos_to_list(infos, 4)]
            if got != wanted:
                raise Breach(f"reset(options={{'task_ids': {wanted}}}) played {got}")
            _, _, _, _, infos = venv.step(("",) * 4)
            errors = [row["env_error"] for row in infos_to_list(infos, 4)
                      if row.get("env_error")]
            if errors:
                raise Breach(f"a step failed in the vector env: {errors[0].splitlines()[0]}")
        finally:
            if venv is not None:
                venv.close()
            vector_logger.setLevel(level)
        return f"4 envs in groups of 2: tasks {tasks}; per-env task_ids and a step work"


def check_env_contract(env_id: str, env_kwargs: dict[str, Any] | None = None, *,
                       anchor: str = "observation", max_steps: int | None = PROBE_MAX_STEPS,
                       fast: bool = False, prompts: PromptCounter | None = None
                       ) -> list[CheckResult]:
    """Check ``env_id`` built with ``env_kwargs`` against the contract (module docstring).

    Args:
        env_id: a registered id, or ``"module:Env-v0"``.
        env_kwargs: the env's own constructor arguments.
        anchor: the anchor mode of the fast part (the full check tries both).
        max_steps: the envs' ``max_steps`` (``None``: not passed).
        fast: only the fast part.
        prompts: the ``prompt length`` check's counter and budget (default: the env's
            text, estimated, no budget).

    Returns:
        One :class:`CheckResult` per check run.
    """
    return ContractCheck(env_id, env_kwargs, anchor=anchor, max_steps=max_steps,
                         prompts=prompts).run(fast=fast)


def report(results: list[CheckResult], seconds: float) -> str:
    """The last line of a check: how many passed (and warned), how long it took."""
    failed = sum(not r.passed for r in results)
    warned = sum(r.passed and r.warning for r in results)
    warnings = f", {warned} with a warning" if warned else ""
    if failed:
        return f"{failed} of {len(results)} checks failed{warnings} ({seconds:.1f} s)"
    return f"all {len(results)} checks passed{warnings} ({seconds:.1f} s)"


def timed_check(env_id: str, env_kwargs: dict[str, Any] | None = None,
                **options: Any) -> tuple[list[CheckResult], float]:
    """:func:`check_env_contract` and the seconds it took."""
    began = time.perf_counter()
    results = check_env_contract(env_id, env_kwargs, **options)
    return results, time.perf_counter() - began


__all__ = ["Breach", "CheckResult", "ContractCheck", "PromptCounter", "anchor_problem",
           "check_env_contract", "info_problem", "report", "text_counter", "timed_check"]
