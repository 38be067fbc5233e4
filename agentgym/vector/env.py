"""``TextVectorEnv``: a group-aware ``gymnasium.vector.VectorEnv`` for text envs.

Semantics (the same for every backend):

* **Autoreset disabled** (``metadata["autoreset_mode"] = AutoresetMode.DISABLED``), with
  one extension: a finished sub-env (``terminated or truncated``) ignores further actions
  and repeats its last observation with reward 0, the same flags and the same info, until
  it is reset. LLM rollout loops step the whole batch every turn; code that never steps a
  finished env sees exactly ``SyncVectorEnv(autoreset_mode=DISABLED)``.
* **Groups.** ``reset(seed=s)`` resets env ``i`` with seed ``s + i // group_size``, so each
  block of ``group_size`` consecutive envs plays one task (GiGPO/GRPO groups). Infos
  carry ``group_id = i // group_size``, always -- also when ``options["task_ids"]`` gives
  envs of different blocks the same task. ``reset()`` without a seed draws one seed per
  group from the vector env's own RNG (``np_random``) when ``group_size > 1``, so groups
  still share a task; with ``group_size == 1`` every env gets ``seed=None`` (as in
  Gymnasium). A list of seeds, one per env, is used as given.
* **Per-env tasks.** ``reset(options={"task_ids": [...]})`` (one id or ``None`` per env)
  passes ``{"task_id": id}`` to each env; other option keys go to every env unchanged.
  The envs validate ids: an env that rejects its id by raising fails that reset (see
  Faults below) without affecting the others.
  ``options={"reset_mask": bool array}`` resets only the masked envs (Gymnasium's
  ``DISABLED``-mode protocol); the others keep their state and get no reset info.
* **Infos** use Gymnasium's dict-of-arrays layout with ``_key`` masks. Every env's info
  has the contract keys (``task``, ``task_id``, ``admissible_actions``, ``anchor``,
  ``success``, ``valid_action``), the env's own keys, and ``group_id``.
  :func:`~agentgym.vector.infos_to_list` gives a list of dicts.
* **Faults.** When an env raises, or the worker process/actor hosting it dies, that
  env's episode ends: the step returns its last observation, reward 0,
  ``truncated=True``, and its last info plus ``env_error`` (a description with the
  traceback or the signal). Every other env of a dead worker ends the same way; the
  other workers' envs go on. The env (or worker) is rebuilt and serves the next reset.
  ``env_error`` is masked in only for those envs. A failed *reset* gives the observation
  ``""`` (a visual env's: empty text and a black frame), an episode that is already over
  (``truncated`` on the next step) and an info whose contract keys are placeholders, so every env always has them: ``task=""``,
  ``task_id`` = the requested id or ``""``, ``admissible_actions=()``,
  ``anchor=("env_error", i)`` (never equal to a real anchor), ``success=False``,
  ``valid_action=True``. Learners should treat ``env_error`` steps as cut episodes,
  not as agent mistakes.
* **Timeouts** (``step_timeout``, worker backends only). A worker or actor that has not
  answered a ``reset``/``step`` call within ``step_timeout`` seconds counts as dead: it
  is killed and rebuilt, and its envs' episodes end as above, with an ``env_error``
  saying it timed out and after how long. The other workers' results of that call come
  back normally. The default, ``None``, waits forever. The ``"sync"`` backend refuses a
  timeout (``ValueError``): a call into in-process env code cannot be interrupted.
* **Observations** come batched as Gymnasium batches them, in ``observation_space``
  (``batch_space`` of one env's space): a tuple of ``num_envs`` texts, or for visual
  envs (a ``Dict`` of ``"text"`` and ``"image"``) ``{"image": (num_envs, H, W, 3) uint8,
  "text": tuple of num_envs str}``, a new array each call
  (:mod:`agentgym.vector.observations`; :func:`~agentgym.vector.observation_rows` gives
  one observation per env).
* **Actions.** A batch must be a sequence (list, tuple, 1-D array) of ``num_envs`` items,
  else ``ValueError``. Individual bad actions (empty, huge, non-text) never raise: the
  envs answer them with feedback and ``valid_action=False``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from agentgym.vector.backend import DEFAULT_STEP_TIMEOUT, Backend
from agentgym.vector.checks import (
    check_actions,
    check_arguments,
    check_spaces,
    pop_reset_mask,
    pop_task_ids,
)
from agentgym.vector.host import EnvFailure
from agentgym.vector.observations import batch_observations

logger = logging.getLogger(__name__)

EMPTY_OBSERVATION = ""
"""Observation of a text env whose reset failed (:func:`empty_observation`)."""


def empty_observation(space: gym.Space) -> Any:
    """The observation of an env whose reset failed: :data:`EMPTY_OBSERVATION`, or for a
    visual env (a ``Dict`` space with ``"text"`` and ``"image"``) empty text and a black
    frame of the space's shape."""
    if isinstance(space, gym.spaces.Dict) and "image" in space.spaces:
        image_space = space.spaces["image"]
        return {"text": EMPTY_OBSERVATION,
                "image": np.zeros(image_space.shape, dtype=image_space.dtype)}
    return EMPTY_OBSERVATION

_SEED_LIMIT = 2**31 - 1


class TextVectorEnv(VectorEnv):
    """Batches of text envs with groups, per-env tasks and crash-tolerant workers.

    See the module docstring for the exact semantics.

    Args:
        env_fns: zero-argument callables returning the sub-envs (``TextEnv`` or any
            ``gym.Env[str, str]``). For ``"subprocess"``/``"ray"`` they must be
            picklable (cloudpickle is used: lambdas work; ``functools.partial`` of a
            class is the robust choice).
        group_size: envs per group; ``len(env_fns)`` must be a multiple of it.
        backend: ``"sync"`` (in this process), ``"subprocess"`` (worker processes) or
            ``"ray"`` (Ray actors; Ray is started locally if not running).
        num_workers: worker processes / actors for ``"subprocess"``/``"ray"``; each
            hosts a contiguous block of envs. Default: ``min(num_envs, os.cpu_count())``.
            Ignored by ``"sync"``.
        step_timeout: seconds each ``reset``/``step`` call waits for a worker or actor
            (which answers for all its envs at once) before killing and rebuilding it
            and ending its envs' episodes as truncated with ``env_error``. ``None`` (the
            default, :data:`~agentgym.vector.DEFAULT_STEP_TIMEOUT`) waits forever.
            Building envs is not timed. Only for ``"subprocess"`` and ``"ray"``.

    Attributes:
        num_envs: number of sub-envs.
        group_size: envs per group.
        backend: the backend's name.
        step_timeout: the timeout in seconds, or ``None``.

    Raises:
        ValueError: bad ``group_size``, ``backend``, ``num_workers`` or
            ``step_timeout``, or a ``step_timeout`` with the ``"sync"`` backend (in-process
            env code cannot be interrupted, so the bound could not be kept).
        RuntimeError: a sub-env could not be built, or the sub-envs' spaces differ.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.DISABLED}

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        group_size: int = 1,
        backend: str = "sync",
        num_workers: int | None = None,
        step_timeout: float | None = DEFAULT_STEP_TIMEOUT,
    ):
        env_fns = list(env_fns)
        num_envs = len(env_fns)
        num_workers, step_timeout = check_arguments(env_fns, group_size, backend, num_workers,
                                                    step_timeout)
        self.num_envs = num_envs
        self.group_size = group_size
        self.backend = backend
        self.num_workers = 1 if backend == "sync" else num_workers
        self.step_timeout = step_timeout
        self._backend: Backend = _make_backend(backend, env_fns, num_workers, step_timeout)
        try:
            first = check_spaces(self._backend.spaces)
        except BaseException:
            self._backend.close()
            raise
        self.metadata = {**first.metadata, "autoreset_mode": AutoresetMode.DISABLED}
        self.render_mode = first.render_mode
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

        self._observations: list[Any] = [empty_observation(self.single_observation_space)
                                         for _ in range(num_envs)]
        self._infos: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self._terminated = np.zeros(num_envs, dtype=np.bool_)
        self._truncated = np.zeros(num_envs, dtype=np.bool_)
        self._needs_reset = np.ones(num_envs, dtype=np.bool_)
        self._group_ids = np.arange(num_envs) // group_size

    # ------------------------------------------------------------------ gymnasium API
    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs (or those in ``options["reset_mask"]``).

        Args:
            seed: ``int`` -- env ``i`` gets ``seed + i // group_size``; a sequence --
                one seed (or ``None``) per env; ``None`` -- see the module docstring.
            options: passed to every env, except ``"task_ids"`` (one task id or ``None``
                per env, sent as that env's ``options["task_id"]``) and ``"reset_mask"``
                (bool array ``(num_envs,)``: reset only these envs).

        Returns:
            ``(observations, infos)``: the batch of ``num_envs`` observations (a tuple;
            for visual envs a dict of batches, see :mod:`agentgym.vector.observations`)
            and the batched infos of the envs that were reset.
        """
        self._check_open()
        options = dict(options) if options is not None else None
        reset_mask = pop_reset_mask(options, self.num_envs)
        task_ids = pop_task_ids(options, self.num_envs)
        seeds = self._seeds(seed)
        requests: dict[int, tuple[int | None, dict[str, Any] | None]] = {}
        for i in np.flatnonzero(reset_mask):
            i = int(i)
            env_options = options
            if task_ids is not None and task_ids[i] is not None:
                env_options = {**(options or {}), "task_id": task_ids[i]}
            requests[i] = (seeds[i], env_options)

        results = self._backend.reset(requests)
        infos: dict[str, Any] = {}
        for i in requests:
            result = results[i]
            self._needs_reset[i] = False
            self._terminated[i] = False
            if isinstance(result, EnvFailure):
                _log_failure(i, "reset", result)
                self._observations[i] = empty_observation(self.single_observation_space)
                self._infos[i] = _failed_reset_info(i, requests[i][1], result.message)
                self._truncated[i] = True
            else:
                self._observations[i], self._infos[i] = result
                self._truncated[i] = False
            infos = self._add_info(infos, self._env_info(i), i)
        self._end_lost_episodes(results, requests)
        return self._batch(), infos

    def step(
        self, actions: Sequence[Any]
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every unfinished env; finished envs repeat their last transition.

        Args:
            actions: ``num_envs`` actions (actions for finished envs are ignored).

        Returns:
            ``(observations, rewards, terminated, truncated, infos)``: the batch of
            ``num_envs`` observations (as :meth:`reset`), float64 rewards
            ``(num_envs,)``, bool flags ``(num_envs,)`` and the batched infos of every env.

        Raises:
            ValueError: ``actions`` is not a sequence of ``num_envs`` items.
            gymnasium.error.ResetNeeded: an env was never reset.
        """
        self._check_open()
        actions = check_actions(actions, self.num_envs)
        if self._needs_reset.any():
            missing = np.flatnonzero(self._needs_reset).tolist()
            raise gym.error.ResetNeeded(f"call reset() before step(); envs never reset: {missing}")
        active = np.flatnonzero(~(self._terminated | self._truncated)).tolist()
        results = self._backend.step({i: actions[i] for i in active}) if active else {}

        rewards = np.zeros(self.num_envs, dtype=np.float64)
        for i in active:
            result = results[i]
            if isinstance(result, EnvFailure):
                _log_failure(i, "step", result)
                self._truncated[i] = True
                self._infos[i] = {**self._infos[i], "env_error": result.message}
            else:
                observation, rewards[i], terminated, truncated, self._infos[i] = result
                self._observations[i] = observation
                self._terminated[i], self._truncated[i] = terminated, truncated
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            infos = self._add_info(infos, self._env_info(i), i)
        return (
            self._batch(),
            rewards,
            self._terminated.copy(),
            self._truncated.copy(),
            infos,
        )

    def _batch(self) -> Any:
        """The current observations in the batched layout
        (:func:`~agentgym.vector.observations.batch_observations`)."""
        return batch_observations(self.single_observation_space, self._observations)

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the workers and close every sub-env (``close()`` calls this once)."""
        self._backend.close()

    def __enter__(self) -> TextVectorEnv:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # VectorEnv has no finaliser: without one, a dropped subprocess vector env would
        # keep its workers until the interpreter exits.
        if getattr(self, "_backend", None) is not None and not self.closed:
            try:
                self.close()
            except Exception:  # interpreter shutdown: modules may already be gone
                pass

    # ------------------------------------------------------------------ extras
    def worker_pids(self) -> tuple[int | None, ...]:
        """The id of the process running each env (this process for ``"sync"``;
        ``None`` while that env's worker is being restarted)."""
        self._check_open()
        return self._backend.worker_pids()

    def __repr__(self) -> str:
        name = self.spec.id if self.spec is not None else "?"
        return (
            f"TextVectorEnv({name}, num_envs={self.num_envs}, group_size={self.group_size}, "
            f"backend={self.backend!r}, step_timeout={self.step_timeout!r})"
        )

    # ------------------------------------------------------------------ helpers
    def _env_info(self, i: int) -> dict[str, Any]:
        return {**self._infos[i], "group_id": int(self._group_ids[i])}

    def _end_lost_episodes(self, results: dict[int, Any], requested: Any) -> None:
        """A worker died during a partial reset: end its other envs' episodes too."""
        for i, result in results.items():
            if i in requested or not isinstance(result, EnvFailure):
                continue
            if self._needs_reset[i] or self._terminated[i] or self._truncated[i]:
                continue
            _log_failure(i, "reset of a neighbour", result)
            self._truncated[i] = True
            self._infos[i] = {**self._infos[i], "env_error": result.message}

    def _check_open(self) -> None:
        if self.closed:
            raise gym.error.ClosedEnvironmentError("the vector env is closed")

    def _seeds(self, seed: Any) -> list[int | None]:
        if seed is None:
            if self.group_size == 1:
                return [None] * self.num_envs
            group_seeds = self.np_random.integers(
                _SEED_LIMIT, size=self.num_envs // self.group_size
            )
            return [int(group_seeds[g]) for g in self._group_ids]
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            super().reset(seed=int(seed))  # seeds the vector env's own RNG
            return [int(seed) + int(g) for g in self._group_ids]
        if isinstance(seed, Sequence) and not isinstance(seed, (str, bytes)):
            if len(seed) != self.num_envs:
                raise ValueError(f"expected {self.num_envs} seeds, got {len(seed)}")
            return list(seed)
        raise TypeError(f"seed must be an int, a sequence of {self.num_envs} seeds or None")


def _log_failure(i: int, during: str, failure: EnvFailure) -> None:
    headline = failure.message.splitlines()[0] if failure.message else "unknown error"
    logger.warning("env %d failed during %s; its episode ends truncated: %s", i, during, headline)


def _failed_reset_info(i: int, options: dict[str, Any] | None, message: str) -> dict[str, Any]:
    """Placeholder contract keys for an env whose reset failed (see the module docstring)."""
    task_id = (options or {}).get("task_id")
    return {
        "task": "",
        "task_id": "" if task_id is None else str(task_id),
        "admissible_actions": (),
        "anchor": ("env_error", i),
        "success": False,
        "valid_action": True,
        "env_error": message,
    }


def _make_backend(
    name: str,
    env_fns: list[Callable[[], gym.Env]],
    num_workers: int,
    step_timeout: float | None,
) -> Backend:
    if name == "sync":
        from agentgym.vector.sync_backend import SyncBackend

        return SyncBackend(env_fns)
    if name == "subprocess":
        from agentgym.vector.process_backend import ProcessBackend

        return ProcessBackend(env_fns, num_workers, step_timeout)
    from agentgym.vector.ray_backend import RayBackend

    return RayBackend(env_fns, num_workers, step_timeout)


# ---------------------------------------------------------------------- make_vector_env
def make_single_env(env_id: str, env_kwargs: dict[str, Any]) -> gym.Env:
    """:func:`agentgym.plain.make_text_env` (``gym.make(env_id, **env_kwargs)``, a plain
    Gymnasium env in a :class:`~agentgym.plain.PlainTextEnv`): a picklable env constructor
    for workers (importing this module in a worker registers the ``AgentGym/*`` ids; an
    ``"module:Env-v0"`` id imports its module there)."""
    from agentgym.plain import make_text_env

    return make_text_env(env_id, **env_kwargs)


def make_vector_env(
    env_id: str,
    num_envs: int = 1,
    *,
    group_size: int = 1,
    backend: str = "sync",
    num_workers: int | None = None,
    step_timeout: float | None = DEFAULT_STEP_TIMEOUT,
    **env_kwargs: Any,
) -> TextVectorEnv:
    """A :class:`TextVectorEnv` of ``num_envs`` copies of a registered env.

    Also the ``vector_entry_point`` of every ``AgentGym/*`` id and of every id registered
    with :func:`agentgym.register`, so ``gym.make_vec("AgentGym/Scripted-v0", num_envs=8,
    group_size=4, backend="subprocess", num_tasks=16)`` builds one;
    ``vectorization_mode="sync"`` or ``"async"`` give Gymnasium's own vector envs instead.
    An env not built on :class:`~agentgym.core.TextEnv` (a plain Gymnasium text env)
    comes wrapped in :class:`~agentgym.plain.PlainTextEnv`, so every sub-env's info has
    the contract's keys.

    Args:
        env_id: a registered id, e.g. ``"AgentGym/ALFWorld-v0"``, or
            ``"module:Env-v0"`` (``gym.make_vec`` binds it through
            :mod:`agentgym.registration`).
        num_envs: number of sub-envs.
        group_size, backend, num_workers, step_timeout: see :class:`TextVectorEnv`.
        **env_kwargs: passed to every ``gym.make(env_id, ...)``.
    """
    env_fn = functools.partial(make_single_env, env_id, dict(env_kwargs))
    return TextVectorEnv(
        [env_fn] * num_envs,
        group_size=group_size,
        backend=backend,
        num_workers=num_workers,
        step_timeout=step_timeout,
    )
