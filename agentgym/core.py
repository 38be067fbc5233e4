"""The env contract: a text space and a base class for text environments.

Every AgentGym environment is a ``gymnasium.Env[str, str]``:

* ``reset(*, seed=None, options=None) -> (observation, info)``
* ``step(action) -> (observation, reward, terminated, truncated, info)``

Observations are the raw environment text (no prompt template, no history).
``info`` carries the same keys at reset and at every step (:data:`INFO_KEYS`):

``task``               the instruction, ``str``
``task_id``            the id of the task being played, ``str``
``admissible_actions`` ``tuple[str, ...]`` (empty when actions are free-form)
``anchor``             a hashable key of the state in which the *next* action is taken
``success``            ``bool``, the task is solved
``valid_action``       ``bool``, the env could execute the last action (``True`` at reset)

Environments add their own keys (``task_type``, ``score``, ...) beside these.

Anchors, chosen at construction with ``anchor=``:

``"observation"``  the raw observation text (GiGPO's choice, Feng et al. 2025, Sec. 4.2);
``"state"``        a canonical key of the true environment state (:meth:`TextEnv.state_key`),
                   so equal texts in different states never share a step group and the
                   same state reached by two paths always does.

Bad actions never raise. A non-``str`` action, one longer than ``max_action_length``, or
one the env cannot execute gets feedback text, ``reward = 0`` and
``valid_action = False``; the episode goes on and the step counts towards ``max_steps``.
We chose not to raise ``TypeError`` on non-``str`` actions: Gymnasium's ``check_env``
does not require it, and an RL loop must never die on what a policy emits.

Stepping an episode that has already ended repeats its last observation with reward 0,
the same ``terminated``/``truncated`` flags and the same info (the same extension the
vector env documents).

Visual envs (:mod:`agentgym.visual`) keep all of this with one difference: they observe a
``Dict`` of ``"text"`` (the feedback text) and ``"image"`` (the current frame, an
``(H, W, 3)`` ``uint8`` array), and their ``"observation"`` anchor is the frame's key.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils.shared_memory import create_shared_memory

if TYPE_CHECKING:  # only annotations: agentgym.tools imports nothing of the contract
    from agentgym.tools import EnvTools

INFO_KEYS: tuple[str, ...] = (
    "task",
    "task_id",
    "admissible_actions",
    "anchor",
    "success",
    "valid_action",
)
AnchorMode = Literal["observation", "state"]
ANCHOR_MODES: tuple[str, ...] = ("observation", "state")

DEFAULT_MAX_TEXT_LENGTH = 1 << 20
"""Default bound on observation and action length, in characters (1 Mi)."""

_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n\téüß中文ёж→✓"


class TextSpace(spaces.Text):
    """Any Python ``str`` of at most ``max_length`` characters, unicode and spaces included.

    Gymnasium's :class:`~gymnasium.spaces.Text` accepts only characters from a fixed
    charset (alphanumerics by default). This subclass keeps the charset for
    :meth:`sample` only; :meth:`contains` accepts every string. Being a ``Text``, it works
    with ``gymnasium.vector.utils`` (``batch_space`` gives a ``Tuple`` of text spaces) and
    so with ``SyncVectorEnv`` / ``AsyncVectorEnv``.

    Args:
        max_length: the longest accepted string, in characters.
        sample_max_length: the longest string :meth:`sample` draws (sampling 1 Mi
            characters would be slow and useless).
        seed: seed of the space's own RNG.
    """

    def __init__(
        self,
        max_length: int = DEFAULT_MAX_TEXT_LENGTH,
        *,
        sample_max_length: int = 64,
        seed: int | np.random.Generator | None = None,
    ):
        super().__init__(max_length, min_length=0, charset=_SAMPLE_CHARSET, seed=seed)
        self.sample_max_length = min(sample_max_length, max_length)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        length = int(self.np_random.integers(0, self.sample_max_length + 1))
        chars = self.np_random.choice(len(self.character_list), size=length)
        return "".join(self.character_list[i] for i in chars)

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


@create_shared_memory.register(TextSpace)
def _no_text_shared_memory(space: TextSpace, n: int = 1, ctx: Any = None) -> Any:
    """Gymnasium's ``AsyncVectorEnv`` shared memory cannot carry arbitrary text: refuse."""
    raise TypeError(
        "TextSpace observations cannot go through Gymnasium's shared memory: use "
        "vector_kwargs={'shared_memory': False} with vectorization_mode='async', or "
        "AgentGym's own vector env (the default of gym.make_vec)."
    )


@dataclass(frozen=True)
class Transition:
    """What a concrete env returns from :meth:`TextEnv._step_text`.

    Attributes:
        observation: the raw feedback text.
        reward: the env's reward for this step (no invalid-action penalty: learners add it).
        terminated: the episode ended inside the MDP (success, failure, an answer given).
        valid_action: the env could execute the action.
        info: env-specific extra info keys (never one of :data:`INFO_KEYS`).
    """

    observation: str
    reward: float = 0.0
    terminated: bool = False
    valid_action: bool = True
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TagActions:
    """How an agent's answer asks for an action of an env whose actions are tags of their
    own (Search-QA: ``<search>query</search>`` or ``<answer>text</answer>``), instead of
    an ``<action>`` tag around an action string. An env declares it
    (:attr:`TextEnv.tag_actions`); the agent loop reads it to stop generation, parse the
    answer and tell the model what to write, so it never names the env.

    Attributes:
        name: the answer format's id (``PromptConfig.env_style`` selects it by this name).
        stop_strings: where a response ends (generation stops right after the first).
        usage: what the model may write, as a clause: "either look something up with
            <search>your query</search> or ...".
        cut: ``text -> text`` up to the env's stop point.
        read: ``text -> (tag, content)`` of the action the answer asks for under the
            env's default rule, or ``None`` when it asks for none.
    """

    name: str
    stop_strings: tuple[str, ...]
    usage: str
    cut: Callable[[str], str]
    read: Callable[[str], tuple[str, str] | None]


DEFAULT_INVALID_ACTION_PENALTY = 0.1
"""The invalid-action penalty of GiGPO's recipes (verl-agent's ALFWorld and WebShop
scripts), :attr:`TextEnv.invalid_action_penalty` unless an env declares another."""


class TextEnv(gym.Env[str, str]):
    """Base class of AgentGym's text environments; see the module docstring for the contract.

    Subclasses implement:

    * :attr:`task_ids` -- the ids of the tasks this env can play (sorted, stable);
    * :meth:`_reset_task` -- start ``task_id``, return the first observation and extra info;
    * :meth:`_step_text` -- execute a ``str`` action, return a :class:`Transition`;
    * :meth:`state_key` -- a hashable canonical key of the current true state;
    * :attr:`task`, :attr:`success`, :meth:`admissible_actions`.

    They may override :meth:`observation_anchor` (what part of the text forms the
    ``"observation"`` anchor) and :meth:`task_id_for_seed`, and declare what an agent
    loop needs to know about them: :attr:`invalid_action_penalty`, :meth:`task_source`
    and :meth:`tools` (read by ``algorithms/``, which names no env).

    Args:
        anchor: ``"observation"`` or ``"state"``.
        max_steps: steps after which the episode is truncated; ``None`` for no limit.
        max_action_length: longer actions are rejected as invalid without being parsed.
        render_mode: ``None`` or ``"ansi"`` (``render()`` returns the last observation).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}
    invalid_action_penalty: ClassVar[float] = DEFAULT_INVALID_ACTION_PENALTY
    """What an invalid action (or a badly formed answer) costs the agent in this env's
    training recipe; a trainer charges it (the env's reward never includes it)."""
    tag_actions: ClassVar[TagActions | None] = None
    """The env's own action tags, when its actions are written that way
    (:class:`TagActions`); ``None``: actions are plain strings."""
    observation_space: TextSpace = TextSpace()
    action_space: TextSpace = TextSpace()

    def __init__(
        self,
        *,
        anchor: AnchorMode = "observation",
        max_steps: int | None = None,
        max_action_length: int = 1 << 16,
        render_mode: str | None = None,
    ):
        if anchor not in ANCHOR_MODES:
            raise ValueError(f"anchor must be one of {ANCHOR_MODES}, got {anchor!r}")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.anchor_mode: AnchorMode = anchor
        self.max_steps = max_steps
        self.max_action_length = max_action_length
        self.render_mode = render_mode
        self.observation_space = TextSpace()
        self.action_space = TextSpace(max_length=max_action_length)
        self._task_id: str | None = None
        self._last_observation = ""
        self._last_info: dict[str, Any] = {}
        self._elapsed_steps = 0
        self._terminated = False
        self._truncated = False

    # ------------------------------------------------------------------ to implement
    @property
    def task_ids(self) -> Sequence[str]:
        """The ids of the tasks this env plays, in a stable order."""
        raise NotImplementedError

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        """Start ``task_id``; return the first observation and env-specific info."""
        raise NotImplementedError

    def _step_text(self, action: str) -> Transition:
        """Execute a ``str`` action (already length-checked)."""
        raise NotImplementedError

    def state_key(self) -> Hashable:
        """A hashable, canonical key of the current true state (the ``"state"`` anchor)."""
        raise NotImplementedError

    @property
    def task(self) -> str:
        """The current task's instruction."""
        raise NotImplementedError

    @property
    def success(self) -> bool:
        """Whether the current task is solved."""
        raise NotImplementedError

    def admissible_actions(self) -> tuple[str, ...]:
        """The actions the env can execute now; ``()`` when actions are free-form."""
        return ()

    def expert_action(self) -> str | None:
        """The next action of the env's own expert in the current state (demonstrations
        for supervised warm starts, ``python -m algorithms.sft.trainer make-data``).

        An env declares an expert by overriding this; the default raises
        :class:`NotImplementedError`. The expert may be privileged (it may read the hidden
        goal or the true state). It returns ``None`` where it has no action: the episode
        is over, or it cannot act from this state (an open-loop expert plan that an
        earlier, different action left behind).
        """
        raise NotImplementedError(f"{type(self).__name__} declares no expert "
                                  "(TextEnv.expert_action)")

    @classmethod
    def task_source(cls, kwargs: dict[str, Any]) -> str | None:
        """Where the tasks of an env built with ``kwargs`` come from, in a few words (a
        trainer prints it when a run starts), read without building the env; ``None``
        (the default): the env's own tasks, nothing to choose."""
        return None

    @classmethod
    def tools(cls, kwargs: dict[str, Any]) -> EnvTools | None:
        """The env's actions as tools (:mod:`agentgym.tools`), for agents that act through
        their chat template's tools (``docs/tool-calls.md``), read without building the
        env: ``kwargs`` are the constructor's keyword arguments. ``None`` (the default):
        the env declares none, and such agents get one generic tool whose one string
        argument is the action text (:func:`agentgym.tools.generic_tools`). A class
        attribute holding an :class:`~agentgym.tools.EnvTools` declares them too.
        ``python -m agentgym.check`` checks what an env declares."""
        return None

    @classmethod
    def data_problems(cls, kwargs: dict[str, Any]) -> list[str]:
        """What keeps an env built with ``kwargs`` from finding its data, one line each
        saying what to do (``train.py --dry-run`` prints them), read without building the
        env or generating anything: a data path that does not exist, a split that is not
        there, a server that does not answer. ``[]`` (the default): nothing to check."""
        return []

    # ------------------------------------------------------------------ overridable
    def observation_anchor(self, observation: str) -> Hashable:
        """The ``"observation"`` anchor of ``observation`` (default: the text itself)."""
        return observation

    def task_id_for_seed(self, rng: np.random.Generator) -> str:
        """Pick a task with ``rng`` (the env's ``np_random``, just seeded by ``reset``)."""
        ids = self.task_ids
        if len(ids) == 0:
            raise RuntimeError(f"{type(self).__name__} has no tasks to play")
        return ids[int(rng.integers(len(ids)))]

    # ------------------------------------------------------------------ the contract
    @property
    def task_id(self) -> str | None:
        """The id of the task being played (``None`` before the first reset)."""
        return self._task_id

    @property
    def elapsed_steps(self) -> int:
        return self._elapsed_steps

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode.

        ``options={"task_id": id}`` plays that task; otherwise the task is drawn from the
        env's RNG, so ``reset(seed=s)`` always gives the same task for the same ``s``.
        """
        super().reset(seed=seed)
        options = options or {}
        task_id = options.get("task_id")
        if task_id is None:
            task_id = self.task_id_for_seed(self.np_random)
        # No episode until this one has started: a reset that raises leaves the env
        # needing a reset (step() raises ResetNeeded), not stepping the old episode
        # while it reports the rejected task id.
        self._task_id = None
        observation, extra = self._reset_task(str(task_id))
        self._task_id = str(task_id)
        self._elapsed_steps = 0
        self._terminated = False
        self._truncated = False
        return self._finish(observation, valid_action=True, extra=extra)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task_id is None:
            raise gym.error.ResetNeeded("Call reset() before step().")
        if self._terminated or self._truncated:
            return (
                self._last_observation,
                0.0,
                self._terminated,
                self._truncated,
                dict(self._last_info),
            )
        rejection = self._reject_reason(action)
        if rejection is not None:
            transition = Transition(observation=rejection, valid_action=False)
        else:
            transition = self._step_text(action)
        self._elapsed_steps += 1
        self._terminated = bool(transition.terminated)
        self._truncated = (
            not self._terminated
            and self.max_steps is not None
            and self._elapsed_steps >= self.max_steps
        )
        observation, info = self._finish(
            transition.observation, valid_action=transition.valid_action, extra=transition.info
        )
        return (
            observation,
            float(transition.reward),
            self._terminated,
            self._truncated,
            info,
        )

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_observation
        return None

    # ------------------------------------------------------------------ helpers
    def _reject_reason(self, action: Any) -> str | None:
        if not isinstance(action, str):
            return f"Invalid action: expected text, got {type(action).__name__}."
        if len(action) > self.max_action_length:
            return (
                f"Invalid action: {len(action)} characters is longer than the limit of "
                f"{self.max_action_length}."
            )
        return None

    def _observe(self, text: str) -> Any:
        """What the agent observes when the env's feedback text is ``text``: the text itself
        (a visual env adds the current frame, :class:`agentgym.visual.VisualEnv`)."""
        return text

    def _finish(
        self, text: str, *, valid_action: bool, extra: dict[str, Any]
    ) -> tuple[Any, dict[str, Any]]:
        clash = set(extra) & set(INFO_KEYS)
        if clash:
            raise RuntimeError(f"{type(self).__name__} returned reserved info keys {clash}")
        observation = self._observe(text)
        if self.anchor_mode == "observation":
            anchor = self.observation_anchor(observation)
        else:
            anchor = self.state_key()
        info = {
            "task": self.task,
            "task_id": self._task_id,
            "admissible_actions": tuple(self.admissible_actions()),
            "anchor": anchor,
            "success": bool(self.success),
            "valid_action": bool(valid_action),
            **extra,
        }
        self._last_observation = observation
        self._last_info = info
        return observation, dict(info)
