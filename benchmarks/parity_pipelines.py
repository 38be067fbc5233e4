"""The ground both parity harnesses stand on: the synthetic ALFWorld-shaped batches, this
project's pipeline and verl-agent's on them, and the report the comparisons fill.

:mod:`benchmarks.recipe_parity` (every ``--algo``, DAPO's parts, the options; the command
line) and :mod:`benchmarks.frontier_parity` (HGPO and GraphGPO) both import this module
and neither imports the other's comparisons back: the recipe harness calls the frontier
one. What runs on each side, the precisions ("counted" in float64, "as run" in float32)
and the stand-ins for verl-agent's unused imports are described in
:mod:`benchmarks.recipe_parity`'s docstring.

- Batches: :func:`make_rollout` (groups of :data:`GROUP_SIZE`, up to :data:`MAX_STEPS`
  steps, the kinds of :data:`GROUP_KINDS`), as a :class:`Rollout`.
- This project: :func:`our_config`, :func:`our_learner`, :func:`our_advantages`,
  :func:`run_loss` (a :class:`MicroLoss` per micro-batch, :class:`LossOutputs`).
- verl-agent: :class:`VerlAgent` (its functions imported from a checkout, run as its
  trainer runs them, :class:`VerlSettings`; :func:`in_float64` for the counted column),
  or :class:`RuleTranscription` (its rules written out, ``--self-check``).
- The report: :class:`Report` (largest differences per term, :class:`Section`),
  :data:`PRECISIONS`, :data:`TOLERANCE`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import io
import math
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from algorithms.agent.step_batch import StepBatch, StepLog, intern_anchors
from algorithms.config import EnvConfig, TrainConfig, replace, with_algo
from algorithms.training.learner import Learner

GROUP_SIZE = 8


MAX_STEPS = 50


SUCCESS_REWARD = 10.0


PENALTY = EnvConfig(env_id="AgentGym/ALFWorld-v0").penalty()


RESPONSE_TOKENS = 24


PROMPT_TOKENS = 6


VOCAB = 32


TOLERANCE = 1e-6


NORMALIZATIONS = ("std", "mean")


VERL_MODE = {"std": "mean_std_norm", "mean": "mean_norm"}


ESTIMATORS = ("gigpo", "grpo", "rloo", "reinforce_pp")


VERL_ESTIMATOR = {"gigpo": "gigpo", "grpo": "grpo", "rloo": "rloo",
                  "reinforce_pp": "reinforce_plus_plus_baseline"}
"""This project's group estimators and verl's ``algorithm.adv_estimator`` for each."""


GSPO_CLIP = (3e-4, 4e-4)
"""``clip_ratio_low``, ``clip_ratio_high`` of verl-agent's ``examples/gspo_trainer``."""


@dataclass(frozen=True)
class GroupKind:
    """How the trajectories of one group behave.

    Attributes:
        states: distinct states of the group's random walk (few: large step groups; many:
            mostly singletons).
        success: probability that a trajectory succeeds (reward 10, terminated).
        invalid: probability that a step's action is invalid (penalty 0.1).
        early_failure: probability that a failing trajectory terminates before the step
            limit (reward 0) instead of being cut at 50 steps.
    """

    states: int
    success: float
    invalid: float
    early_failure: float = 0.2


GROUP_KINDS = (
    GroupKind(states=8, success=0.5, invalid=0.15),
    GroupKind(states=400, success=0.3, invalid=0.05),  # long walks: mostly singletons
    GroupKind(states=3, success=0.9, invalid=0.3),  # few states: step groups of dozens
    GroupKind(states=12, success=0.0, invalid=0.0, early_failure=0.0),  # all returns 0
    GroupKind(states=20, success=0.6, invalid=0.1, early_failure=0.5),
    GroupKind(states=5, success=0.2, invalid=0.2),
)


@dataclass(frozen=True)
class Rollout:
    """One synthetic batch, trajectory-major (what :mod:`algorithms.agent.rollout` builds).

    Attributes:
        batch: the (N,) step batch (rewards, penalties, ids, anchors, padded tokens).
        log_probs: (N, R) float64 log-probs under the policy being trained.
        old_log_probs: (N, R) float64 log-probs under the sampling policy.
        ref_log_probs: (N, R) float64 log-probs under the reference policy.
        entropies: (N, R) float64 per-token entropies.
        logits: (N, R, V) float64 next-token logits (for the entropy function).
    """

    batch: StepBatch
    log_probs: np.ndarray
    old_log_probs: np.ndarray
    ref_log_probs: np.ndarray
    entropies: np.ndarray
    logits: np.ndarray

    @property
    def response_mask(self) -> np.ndarray:
        """(N, R) bool mask of the response tokens."""
        return self.batch.response_mask.astype(bool)


def _anchor_text(room: int, state: int) -> str:
    """An ALFWorld-like observation; texts of nearby states differ in a few characters,
    so that fuzzy grouping (``similarity_threshold``) merges some of them."""
    return (f"You are in the middle of room {room}. Looking quickly around you, you see "
            f"a cabinet {state // 4 + 1}, a countertop {state % 4 + 1}, a drawer "
            f"{state % 3 + 1}, and a fridge 1. Nothing happens at spot {state}.")


def make_rollout(seed: int, num_groups: int = 6) -> Rollout:
    """A batch of ``num_groups`` groups of 8 trajectories (group kinds: :data:`GROUP_KINDS`
    in turn).

    A trajectory walks randomly over its group's states from the group's shared initial
    state (so step 0 of the group is one step group of 8); each row records the state its
    step led to (``next_anchors``: the next row's, or the terminal state's). It succeeds (env reward 10 on
    its last step, terminated) at a random step, fails early (terminated, reward 0) or runs
    to the 50-step limit (truncated). Each step is invalid (penalty 0.1) with the group's
    probability. Groups with the same ``g % 3`` share their observation texts, which must
    not join their step groups.

    Args:
        seed: seeds every random draw.
        num_groups: groups in the batch.

    Returns:
        The rollout, about ``num_groups * 8 * 25`` rows.
    """
    rng = np.random.default_rng(seed)
    # (trajectory, group, step, env reward, invalid, anchor, next anchor) per row
    rows: list[tuple[int, int, int, float, bool, str, str]] = []
    success, truncated = [], []
    for group in range(num_groups):
        kind = GROUP_KINDS[group % len(GROUP_KINDS)]
        for member in range(GROUP_SIZE):
            traj = group * GROUP_SIZE + member
            won = bool(rng.random() < kind.success)
            if won:
                length = int(rng.integers(1, MAX_STEPS + 1))
            elif rng.random() < kind.early_failure:
                length = int(rng.integers(1, MAX_STEPS))
            else:
                length = MAX_STEPS
            success.append(won)
            truncated.append(not won and length == MAX_STEPS)
            state = 0
            for step in range(length):
                reward = SUCCESS_REWARD if (won and step == length - 1) else 0.0
                invalid = bool(rng.random() < kind.invalid)
                before = state
                state = (state + int(rng.choice([-1, 0, 1, 2]))) % kind.states
                rows.append((traj, group, step, reward, invalid,
                             _anchor_text(group % 3, before), _anchor_text(group % 3, state)))
    n = len(rows)
    traj_ids = np.array([row[0] for row in rows], dtype=np.int64)
    env_rewards = np.array([row[3] for row in rows], dtype=np.float64)
    invalid = np.array([row[4] for row in rows], dtype=bool)
    penalties = np.where(invalid, PENALTY, 0.0)
    last = np.ones(n, dtype=bool)
    last[:-1] = traj_ids[1:] != traj_ids[:-1]
    response_lengths = rng.integers(1, RESPONSE_TOKENS + 1, size=n)
    prompt_lengths = rng.integers(1, PROMPT_TOKENS + 1, size=n)
    columns = np.arange(RESPONSE_TOKENS)
    response_mask = (columns[None, :] < response_lengths[:, None]).astype(np.int64)
    prompt_mask = (np.arange(PROMPT_TOKENS)[None, :]
                   >= PROMPT_TOKENS - prompt_lengths[:, None]).astype(np.int64)
    anchors = tuple(row[5] for row in rows)
    batch = StepBatch(
        prompt_ids=rng.integers(1, 100, size=(n, PROMPT_TOKENS)) * prompt_mask,
        prompt_mask=prompt_mask,
        response_ids=rng.integers(1, 100, size=(n, RESPONSE_TOKENS)) * response_mask,
        response_mask=response_mask,
        rewards=env_rewards - penalties, env_rewards=env_rewards, penalties=penalties,
        invalid=invalid, format_ok=np.ones(n, dtype=bool), valid_action=~invalid,
        traj_ids=traj_ids, group_ids=np.array([row[1] for row in rows], dtype=np.int64),
        anchors=anchors, step_index=np.array([row[2] for row in rows], dtype=np.int64),
        last_step=last, success=np.array(success)[traj_ids],
        truncated=np.array(truncated)[traj_ids],
        log=StepLog(task_ids=tuple(f"task-{row[1]}" for row in rows), task_types=("",) * n,
                    actions=("look",) * n, response_texts=("",) * n),
        prompt_cut=np.zeros(n, dtype=bool),
        env_error=np.zeros(n, dtype=bool), anchor_ids=intern_anchors(anchors),
        next_anchors=tuple(row[6] for row in rows),
    )
    old = -rng.exponential(1.0, size=(n, RESPONSE_TOKENS))
    # mostly small policy changes, a few large ones (ratios past 1 + eps and past the dual
    # clip's c = 3)
    shift = rng.normal(0.0, 0.4, size=old.shape)
    jumps = rng.random(old.shape) < 0.03
    shift[jumps] = rng.uniform(-2.5, 2.5, size=int(jumps.sum()))
    return Rollout(
        batch=batch, log_probs=old + shift, old_log_probs=old,
        ref_log_probs=old + rng.normal(0.0, 0.3, size=old.shape),
        entropies=rng.uniform(0.0, 3.0, size=old.shape),
        logits=rng.normal(0.0, 3.0, size=(n, RESPONSE_TOKENS, VOCAB)),
    )


def our_config(algo: str = "gigpo", normalize: str | None = None, **learner_changes: Any
               ) -> TrainConfig:
    """The config ``train.py --algo algo`` builds from ``TrainConfig()``: ``with_algo`` (the
    algorithm's :data:`~algorithms.config.ALGO_SETTINGS`), then ``normalize`` (``None``:
    the algorithm's) and ``learner_changes`` as flags would set them, validated like a
    run's config. ``generation.max_new_tokens`` is :data:`RESPONSE_TOKENS`, the width verl
    pads the responses to here (its ``max_response_length``: Dr.GRPO's loss divisor and
    the overlong punishment's end)."""
    changes = dict(learner_changes)
    if normalize is not None:
        changes["normalize"] = normalize
    config = replace(with_algo(TrainConfig(), algo),
                     generation={"max_new_tokens": RESPONSE_TOKENS}, learner=changes)
    return config.validate()


def our_learner(config: TrainConfig) -> Learner:
    """A :class:`Learner` that holds only ``config``: :meth:`Learner.advantages`,
    :func:`~algorithms.training.estimation.rewards_and_penalties` and :attr:`Learner.loss_recipe`
    read nothing else (no model is needed)."""
    learner = Learner.__new__(Learner)
    learner.config = config
    learner.learner = config.learner
    return learner


def our_advantages(rollout: Rollout, config: TrainConfig) -> np.ndarray:
    """(N,) float64 advantages, as :meth:`Learner.advantages` computes them."""
    return our_learner(config).advantages(rollout.batch).advantages


@dataclass
class LossOutputs:
    """One side's loss terms on a rollout (every mini-batch of it, in batch order).

    Attributes:
        per_token: (N, R) the loss of each token taken alone (its micro-batch loss if it
            were the only token): clip term, minus the entropy bonus, plus the KL term.
        micro_losses: (M,) the aggregated loss of each micro-batch, before weighting.
        mini_losses: (K,) each mini-batch's loss, the weighted sum of its micro-batches'.
        grad_log_probs: (N, R) gradient of the sum of the mini-batch losses with respect
            to the log-probs.
        grad_entropies: (N, R) the same with respect to the entropies.
    """

    per_token: torch.Tensor
    micro_losses: torch.Tensor
    mini_losses: torch.Tensor
    grad_log_probs: torch.Tensor
    grad_entropies: torch.Tensor


# micro_loss(log_probs, old, advantages, mask, ref, entropies) -> 0-d loss; all (B, T)
MicroLoss = Callable[..., torch.Tensor]


def mini_batches(n: int, mini_batch_size: int, micro_batch_size: int
                 ) -> Iterator[list[np.ndarray]]:
    """The micro-batches (row indices) of each mini-batch: consecutive rows in batch order,
    the last mini-batch and micro-batch possibly smaller (the learner's order with
    ``shuffle=False``; verl's ``batch.split(ppo_mini_batch_size)`` then
    ``split(ppo_micro_batch_size_per_gpu)``)."""
    for start in range(0, n, mini_batch_size):
        mini = np.arange(start, min(start + mini_batch_size, n))
        yield [mini[i: i + micro_batch_size] for i in range(0, len(mini), micro_batch_size)]


def run_loss(rollout: Rollout, token_advantages: torch.Tensor, micro_loss: MicroLoss,
             weight: Callable[[int, int], float], sizes: tuple[int, int],
             dtype: torch.dtype, *, trim: bool, per_token_positions: np.ndarray | None = None
             ) -> LossOutputs:
    """One side's :class:`LossOutputs`.

    Args:
        rollout: the batch.
        token_advantages: (N, R) per-token advantages (0 off the mask).
        micro_loss: the side's loss of one micro-batch.
        weight: ``(micro-batch tokens, mini-batch tokens) -> loss weight``.
        sizes: ``(mini_batch_size, micro_batch_size)`` in rows.
        dtype: float32 or float64 for every float input.
        trim: cut each micro-batch to its longest response (the learner does; verl
            keeps the padded width: a lone token is then a row of that width with one
            unmasked token, which matters where verl divides by the width).
        per_token_positions: flat indices, among the response tokens in row-major order,
            of the tokens whose lone-token loss is computed (one call each; the others
            stay 0); ``None``: every token, batched with ``torch.func.vmap``.
    """
    mask = torch.as_tensor(rollout.response_mask)
    log_probs = torch.tensor(rollout.log_probs, dtype=dtype, requires_grad=True)
    entropies = torch.tensor(rollout.entropies, dtype=dtype, requires_grad=True)
    old = torch.as_tensor(rollout.old_log_probs, dtype=dtype)
    ref = torch.as_tensor(rollout.ref_log_probs, dtype=dtype)
    advantages = token_advantages.to(dtype)
    micro_values, mini_values = [], []
    for micros in mini_batches(mask.shape[0], *sizes):
        mini_tokens = int(mask[np.concatenate(micros)].sum())
        total = torch.zeros((), dtype=dtype)
        for rows in micros:
            index = slice(int(rows[0]), int(rows[-1]) + 1)  # consecutive rows
            width = max(1, int(mask[index].sum(1).max())) if trim else mask.shape[1]
            pick = (lambda t, i=index, w=width: t[i, :w])  # noqa: E731
            loss = micro_loss(pick(log_probs), pick(old), pick(advantages), pick(mask),
                              pick(ref), pick(entropies))
            micro_values.append(loss.detach())
            total = total + loss * weight(int(pick(mask).sum()), mini_tokens)
        mini_values.append(total)
    minis = torch.stack(mini_values)
    grads = torch.autograd.grad(minis.sum(), [log_probs, entropies], allow_unused=True)
    grad_log_probs, grad_entropies = (torch.zeros_like(leaf) if grad is None else grad
                                      for grad, leaf in zip(grads, (log_probs, entropies),
                                                            strict=True))
    flat_mask = mask.reshape(-1)
    per_token = torch.zeros(mask.numel(), dtype=dtype)
    pad = 0 if trim else mask.shape[1] - 1

    def one(*tensors: torch.Tensor) -> torch.Tensor:
        return micro_loss(*(torch.nn.functional.pad(t.reshape(1, 1), (0, pad))
                            for t in tensors))

    columns = [t.detach().reshape(-1)[flat_mask] for t in
               (log_probs, old, advantages, mask.to(dtype), ref, entropies)]
    values = torch.zeros(len(columns[0]), dtype=dtype)
    if per_token_positions is None:
        values = torch.func.vmap(one)(*columns)
    else:
        with torch.no_grad():
            for position in per_token_positions.tolist():
                values[position] = one(*(column[position] for column in columns))
    per_token[flat_mask] = values
    return LossOutputs(per_token=per_token.reshape(mask.shape),
                       micro_losses=torch.stack(micro_values), mini_losses=minis.detach(),
                       grad_log_probs=grad_log_probs, grad_entropies=grad_entropies)


STUBBED_IF_MISSING = (
    "aiohttp", "cachetools", "openai", "datasets",
    "agent_system.environments.env_package.discovery.discoveryworld",
)
"""Modules that ``verl.trainer.ppo.ray_trainer`` imports, directly or through its other
imports, and that none of the functions called here uses (module docstring)."""


class _Placeholder:
    """An attribute of a stand-in module: any attribute or call gives another one (some
    modules call into their imports at import time)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str) -> _Placeholder:
        return _Placeholder(f"{self._name}.{attribute}")

    def __call__(self, *args: Any, **kwargs: Any) -> _Placeholder:
        return _Placeholder(f"{self._name}()")


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on ``sys.meta_path``: an empty stand-in for a module of
    :data:`STUBBED_IF_MISSING` (or below one) that no real finder found."""

    def __init__(self) -> None:
        self.stubbed: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if any(name == root or name.startswith(root + ".") for root in STUBBED_IF_MISSING):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attribute: _Placeholder(f"{spec.name}.{attribute}")
        if not any(spec.name.startswith(done + ".") for done in self.stubbed):
            self.stubbed.append(spec.name)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _Float64Names:
    """A module seen through a function's globals, with ``float32`` meaning ``float64``."""

    def __init__(self, module: types.ModuleType, float64: Any):
        self._module = module
        self.float32 = float64

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def in_float64(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``'s own code (its code object, unchanged) with ``np.float32`` and
    ``torch.float32`` in its module's names read as float64.

    verl-agent casts to float32 by name in the functions that build the step returns, the
    episode scores and the penalty; this runs the same statements in float64, to tell
    their float32 rounding apart from a difference of rule.

    Raises:
        RuntimeError: the function's module names neither numpy ``np`` nor ``torch``.
    """
    names = dict(function.__globals__)
    if names.get("np") is not np and names.get("torch") is not torch:
        raise RuntimeError(f"{function.__qualname__}: its module imports neither numpy as "
                           "np nor torch as torch; cannot run it in float64")
    if names.get("np") is np:
        names["np"] = _Float64Names(np, np.float64)
    if names.get("torch") is torch:
        names["torch"] = _Float64Names(torch, torch.float64)
    return types.FunctionType(function.__code__, names, function.__name__,
                              function.__defaults__, function.__closure__)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """torch's default dtype set to ``dtype`` inside the block."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


class _NoTokenizer:
    """The reward managers' tokenizer, used only to decode examples for printing."""

    eos_token = ""

    def decode(self, ids: Any, **kwargs: Any) -> str:
        return ""


@dataclass(frozen=True)
class VerlSettings:
    """verl-agent's settings that the comparisons vary (``run_alfworld.sh`` over
    ``ppo_trainer.yaml`` by default).

    Attributes:
        gamma: ``algorithm.gamma``.
        step_advantage_w: ``algorithm.gigpo.step_advantage_w``.
        use_invalid_action_penalty: ``actor.use_invalid_action_penalty``.
        invalid_action_penalty_coef: ``actor.invalid_action_penalty_coef``.
        penalty_in_env_rewards: the env's own rewards carry the penalty (an env that
            charges it itself; with ``use_invalid_action_penalty=False`` this is this
            project's ``penalty_in_returns``).
        cross_steps: ``compute_mean_std_cross_steps`` of the episode statistics (the
            trainer always passes True; False calls the functions directly).
        enable_similarity: ``algorithm.gigpo.enable_similarity``.
        similarity_thresh: ``algorithm.gigpo.similarity_thresh``.
        overlong_buffer: ``reward_model.overlong_buffer.len`` (0: off): the reward of
            ``DAPORewardManager``'s overlong punishment (its score function giving 0)
            added to the token-level scores, with ``max_resp_len`` :data:`RESPONSE_TOKENS`.
        overlong_penalty_factor: ``reward_model.overlong_buffer.penalty_factor``.
        clip_ratio: ``actor.clip_ratio`` (low and high unless given).
        clip_ratio_low: ``actor.clip_ratio_low``.
        clip_ratio_high: ``actor.clip_ratio_high``.
        clip_ratio_c: ``actor.clip_ratio_c`` (dual clip).
        loss_mode: ``actor.policy_loss.loss_mode`` ("vanilla" or "gspo").
        loss_agg_mode: ``actor.loss_agg_mode``.
        entropy_coeff: ``actor.entropy_coeff``.
        kl_loss_coef: ``actor.kl_loss_coef`` (``use_kl_loss=True``).
        kl_loss_type: ``actor.kl_loss_type``.
    """

    gamma: float = 0.95
    step_advantage_w: float = 1.0
    use_invalid_action_penalty: bool = True
    invalid_action_penalty_coef: float = 0.1
    penalty_in_env_rewards: bool = False
    cross_steps: bool = True
    enable_similarity: bool = False
    similarity_thresh: float = 0.95
    overlong_buffer: int = 0
    overlong_penalty_factor: float = 1.0
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0
    loss_mode: str = "vanilla"
    loss_agg_mode: str = "token-mean"
    entropy_coeff: float = 0.001
    kl_loss_coef: float = 0.01
    kl_loss_type: str = "low_var_kl"


def _clip_range(settings: VerlSettings) -> tuple[float, float]:
    """``(clip_ratio_low, clip_ratio_high)`` as ``dp_actor`` reads them: each falls back
    to ``clip_ratio``."""
    low = settings.clip_ratio if settings.clip_ratio_low is None else settings.clip_ratio_low
    high = (settings.clip_ratio if settings.clip_ratio_high is None
            else settings.clip_ratio_high)
    return low, high


class VerlAgent:
    """verl-agent's functions, imported from a checkout.

    Args:
        path: the checkout (the folder holding ``verl/`` and ``gigpo/``).
        deps: optional folder of extra packages (put first on ``sys.path``).

    Raises:
        SystemExit: the checkout is not one, or its imports fail (one-line message).
    """

    def __init__(self, path: str | Path, deps: str | Path | None = None):
        root = Path(path).expanduser().resolve()
        if not (root / "verl" / "trainer" / "ppo" / "core_algos.py").is_file() or not (
                root / "gigpo" / "core_gigpo.py").is_file():
            raise SystemExit(f"--verl-agent {path}: not a verl-agent checkout (no "
                             "verl/trainer/ppo/core_algos.py or gigpo/core_gigpo.py)")
        for folder in (root, deps):
            if folder is not None and str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
        self.root = root
        self.finder = _StandInFinder()
        sys.meta_path.append(self.finder)
        try:
            self.protocol = importlib.import_module("verl.protocol")
            self.core_algos = importlib.import_module("verl.trainer.ppo.core_algos")
            self.functional = importlib.import_module("verl.utils.torch_functional")
            self.core_gigpo = importlib.import_module("gigpo.core_gigpo")
            self.ray_trainer = importlib.import_module("verl.trainer.ppo.ray_trainer")
            rewards = importlib.import_module("agent_system.reward_manager")
            self.dapo = importlib.import_module("verl.workers.reward_manager.dapo")
            self.rollout_utils = importlib.import_module(
                "agent_system.multi_turn_rollout.utils")
        except ImportError as error:
            raise SystemExit(f"cannot import verl-agent from {root}: {error} (see the "
                             "install command in benchmarks/recipe_parity.py)") from error
        finally:  # later imports see the real import system again
            sys.meta_path.remove(self.finder)
        self.reward_manager = rewards.EpisodeRewardManager(tokenizer=_NoTokenizer(),
                                                           num_examine=0)

    @property
    def stubbed(self) -> tuple[str, ...]:
        """The modules that were stood in for (not installed)."""
        return tuple(self.finder.stubbed)

    # ---------------------------------------------------------------- advantages
    def _data(self, rollout: Rollout, settings: VerlSettings, float64: bool) -> Any:
        """The trainer's batch after the rollout loop: one row per active step, each
        trajectory's rows together (``gather_rollout_data``), the env rewards and the
        episode sums in float32 as the loop keeps them (float64 with ``float64``)."""
        batch = rollout.batch
        rewards = batch.rewards if settings.penalty_in_env_rewards else batch.env_rewards
        dtype = np.float64 if float64 else np.float32
        rewards = rewards.astype(dtype)
        episode = np.zeros(int(batch.traj_ids.max()) + 1, dtype=dtype)
        for traj, reward in zip(batch.traj_ids.tolist(), rewards, strict=True):
            episode[traj] += reward  # the loop's running sums, step by step
        prompts = torch.as_tensor(batch.prompt_ids)
        responses = torch.as_tensor(batch.response_ids)
        tensors = {
            "prompts": prompts, "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": torch.cat([torch.as_tensor(batch.prompt_mask),
                                         torch.as_tensor(batch.response_mask)], dim=1),
        }
        n = len(batch)
        non_tensors = {
            "rewards": np.array(list(rewards), dtype=object),
            "traj_uid": np.array([f"traj-{t}" for t in batch.traj_ids], dtype=object),
            "uid": np.array([f"group-{g}" for g in batch.group_ids], dtype=object),
            "active_masks": np.array([True] * n, dtype=object),
            "anchor_obs": np.array(list(batch.anchors), dtype=object),
            "is_action_valid": ~batch.invalid,
            "episode_rewards": episode[batch.traj_ids],
            "episode_lengths": np.bincount(batch.traj_ids)[batch.traj_ids].astype(dtype),
            "data_source": np.array(["alfworld"] * n, dtype=object),
        }
        return self.protocol.DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)

    def advantages(self, rollout: Rollout, estimator: str, normalize: str,
                   settings: VerlSettings = VerlSettings(), *, float64: bool = False
                   ) -> dict[str, torch.Tensor]:
        """The trainer's advantage phase on ``rollout`` (module docstring).

        Args:
            rollout: the batch.
            estimator: one of :data:`ESTIMATORS` (verl's :data:`VERL_ESTIMATOR`).
            normalize: "std" (``mean_std_norm``; GRPO ``norm_adv_by_std_in_grpo``) or
                "mean" (RLOO and REINFORCE++ have no such setting).
            settings: verl's settings.
            float64: run verl's code with its float32 read as float64 (:func:`in_float64`,
                torch's default dtype float64); ``False``: as verl runs it.

        Returns:
            ``advantages`` (N, R); ``scores`` (N, R), the ``token_level_rewards`` the
            estimator sees (after the penalty); for GiGPO ``step_rewards`` (N,), the
            step returns it sees (after the penalty).
        """
        data = self._data(rollout, settings, float64)
        run = in_float64 if float64 else (lambda function: function)
        out: dict[str, torch.Tensor] = {}
        quiet = contextlib.redirect_stdout(io.StringIO())  # build_step_group prints
        with quiet, default_dtype(torch.float64 if float64 else torch.get_default_dtype()):
            if estimator == "gigpo":
                data.batch["step_rewards"] = run(
                    self.core_gigpo.compute_step_discounted_returns)(
                    batch=data, gamma=settings.gamma)
            data.batch["response_mask"] = self.ray_trainer.compute_response_mask(data)
            data.batch["token_level_scores"] = run(type(self.reward_manager).__call__)(
                self.reward_manager, data)
            if settings.overlong_buffer:
                data.batch["token_level_scores"] = data.batch["token_level_scores"] + \
                    self._overlong_rewards(data, settings.overlong_buffer,
                                           settings.overlong_penalty_factor, float64)
            if settings.use_invalid_action_penalty:
                data, _ = run(self.ray_trainer.apply_invalid_action_penalty)(
                    data, invalid_action_penalty_coef=settings.invalid_action_penalty_coef)
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]
            if estimator == "gigpo":
                out["step_rewards"] = data.batch["step_rewards"].clone()
            out["scores"] = data.batch["token_level_rewards"].clone()
            if settings.cross_steps:
                data = self.ray_trainer.compute_advantage(
                    data, adv_estimator=self.ray_trainer.AdvantageEstimator(
                        VERL_ESTIMATOR[estimator]),
                    gamma=settings.gamma, lam=1.0, num_repeat=1, multi_turn=False,
                    norm_adv_by_std_in_grpo=normalize == "std",
                    step_advantage_w=settings.step_advantage_w,
                    gigpo_mode=VERL_MODE[normalize],
                    gigpo_enable_similarity=settings.enable_similarity,
                    gigpo_similarity_thresh=settings.similarity_thresh)
                out["advantages"] = data.batch["advantages"]
            else:
                out["advantages"] = self._trajectory_stats(data, estimator, normalize,
                                                           settings)
        return out

    def _trajectory_stats(self, data: Any, estimator: str, normalize: str,
                          settings: VerlSettings) -> torch.Tensor:
        """verl's estimators with ``compute_mean_std_cross_steps=False`` (each
        trajectory's first row counted once), which the trainer does not expose: GRPO,
        RLOO and REINFORCE++ through their ``core_algos`` functions, GiGPO through the
        parts ``compute_gigpo_outcome_advantage`` combines."""
        scores = data.batch["token_level_rewards"]
        mask = data.batch["response_mask"]
        group = data.non_tensor_batch["uid"]
        traj = data.non_tensor_batch["traj_uid"]
        if estimator == "grpo":
            return self.core_algos.compute_grpo_outcome_advantage(
                scores, mask, group, traj, norm_adv_by_std_in_grpo=normalize == "std",
                compute_mean_std_cross_steps=False)[0]
        if estimator == "rloo":
            return self.core_algos.compute_rloo_outcome_advantage(
                scores, mask, group, traj, compute_mean_std_cross_steps=False)[0]
        if estimator == "reinforce_pp":
            return self.core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
                scores, mask, group, traj, compute_mean_std_cross_steps=False)[0]
        gigpo = self.core_gigpo
        remove_std = normalize == "mean"
        episode = gigpo.episode_norm_reward(scores, mask, group, traj,
                                            remove_std=remove_std,
                                            compute_mean_std_cross_steps=False)
        step_groups = gigpo.build_step_group(data.non_tensor_batch["anchor_obs"], group,
                                             settings.enable_similarity,
                                             settings.similarity_thresh)
        step = gigpo.step_norm_reward(data.batch["step_rewards"], mask, step_groups,
                                      remove_std=remove_std)
        return episode + settings.step_advantage_w * step

    # ---------------------------------------------------------------- loss
    def micro_loss(self, settings: VerlSettings = VerlSettings()) -> MicroLoss:
        """One micro-batch's ``policy_loss`` as ``dp_actor.update_policy`` builds it
        (before its division by the gradient-accumulation steps)."""
        algos = self.core_algos

        policy_loss_fn = {"vanilla": algos.compute_policy_loss,
                          "gspo": algos.compute_policy_loss_gspo}[settings.loss_mode]
        low, high = _clip_range(settings)

        def loss(log_probs, old, advantages, mask, ref, entropies):
            mask = mask.to(torch.int64)  # verl's response mask: the attention mask's tail
            pg_loss = policy_loss_fn(
                old_log_prob=old, log_prob=log_probs, advantages=advantages,
                response_mask=mask, cliprange=settings.clip_ratio, cliprange_low=low,
                cliprange_high=high, clip_ratio_c=settings.clip_ratio_c,
                loss_agg_mode=settings.loss_agg_mode)[0]
            total = pg_loss
            if settings.entropy_coeff != 0:
                entropy = algos.agg_loss(loss_mat=entropies, loss_mask=mask,
                                         loss_agg_mode=settings.loss_agg_mode)
                total = pg_loss - entropy * settings.entropy_coeff
            kld = algos.kl_penalty(logprob=log_probs, ref_logprob=ref,
                                   kl_penalty=settings.kl_loss_type)
            kl = algos.agg_loss(loss_mat=kld, loss_mask=mask,
                                loss_agg_mode=settings.loss_agg_mode)
            return total + kl * settings.kl_loss_coef

        return loss

    def loss(self, rollout: Rollout, token_advantages: torch.Tensor, sizes: tuple[int, int],
             dtype: torch.dtype, settings: VerlSettings = VerlSettings(),
             per_token_positions: np.ndarray | None = None) -> LossOutputs:
        """verl's loss terms on ``rollout``: each micro-batch's loss divided by
        ``gradient_accumulation = ppo_mini_batch_size // ppo_micro_batch_size_per_gpu``
        (one rank: the sizes in rows are the learner's; ``per_token_positions``: see
        :func:`run_loss`)."""
        mini, micro = sizes
        accumulation = mini // micro
        return run_loss(rollout, token_advantages, self.micro_loss(settings),
                        lambda micro_tokens, mini_tokens: 1.0 / accumulation, sizes, dtype,
                        trim=False, per_token_positions=per_token_positions)

    def gspo_term(self, rollout: Rollout, token_advantages: torch.Tensor, dtype: torch.dtype
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """``compute_policy_loss_gspo`` on the whole batch as ``dp_actor`` calls it with
        the GSPO example's settings (``loss_agg_mode`` token-mean, which the function
        ignores): ``(loss, gradient wrt the log-probs)``."""
        log_probs = torch.tensor(rollout.log_probs, dtype=dtype, requires_grad=True)
        loss = self.core_algos.compute_policy_loss_gspo(
            old_log_prob=torch.as_tensor(rollout.old_log_probs, dtype=dtype),
            log_prob=log_probs, advantages=token_advantages.to(dtype),
            response_mask=torch.as_tensor(rollout.batch.response_mask), cliprange=0.2,
            cliprange_low=GSPO_CLIP[0], cliprange_high=GSPO_CLIP[1], clip_ratio_c=3.0,
            loss_agg_mode="token-mean")[0]
        (gradient,) = torch.autograd.grad(loss, log_probs)
        return loss.detach(), gradient

    # ---------------------------------------------------------------- DAPO's parts
    def _overlong_rewards(self, data: Any, buffer: int, factor: float, float64: bool
                          ) -> torch.Tensor:
        """(N, R) ``DAPORewardManager.__call__``'s reward tensor with a score function that
        gives 0: each row's overlong reward at its last response token."""
        manager = self.dapo.DAPORewardManager(
            tokenizer=_NoTokenizer(), num_examine=0,
            compute_score=lambda **kwargs: 0.0, max_resp_len=RESPONSE_TOKENS,
            overlong_buffer_cfg=types.SimpleNamespace(enable=True, len=buffer,
                                                      penalty_factor=factor, log=False))
        n = len(data)
        data.non_tensor_batch.setdefault(
            "reward_model", np.array([{"ground_truth": ""}] * n, dtype=object))
        run = in_float64 if float64 else (lambda function: function)
        with default_dtype(torch.float64 if float64 else torch.float32):
            return run(type(manager).__call__)(manager, data)

    def overlong(self, rollout: Rollout, buffer: int, factor: float, *, float64: bool
                 ) -> np.ndarray:
        """(N,) each row's overlong cost: minus the sum of its row of
        :meth:`_overlong_rewards`."""
        data = self._data(rollout, VerlSettings(), float64)
        rewards = self._overlong_rewards(data, buffer, factor, float64)
        return -rewards.sum(dim=-1).double().numpy()

    def kept_rows(self, batch: StepBatch, last_try: bool, *, float64: bool = False
                  ) -> np.ndarray:
        """(N,) the rows of the trajectories ``agent_system.multi_turn_rollout.utils.
        filter_group_data`` keeps (environment ``g * n + m`` is member ``m`` of group
        ``g``; episode rewards summed step by step in float32 as the rollout loop keeps
        them, float64 with ``float64``)."""
        trajectories = int(batch.traj_ids.max()) + 1
        dtype = np.float64 if float64 else np.float32
        episode = np.zeros(trajectories, dtype=dtype)
        for traj, reward in zip(batch.traj_ids.tolist(), batch.env_rewards.astype(dtype),
                                strict=True):
            episode[traj] += reward
        steps = np.bincount(batch.traj_ids, minlength=trajectories)
        batch_list = [[{"uid": f"group-{traj // GROUP_SIZE}"}] * int(steps[traj])
                      for traj in range(trajectories)]
        config = types.SimpleNamespace(
            data=types.SimpleNamespace(train_batch_size=trajectories // GROUP_SIZE),
            env=types.SimpleNamespace(rollout=types.SimpleNamespace(n=GROUP_SIZE)))
        success = np.zeros(trajectories, dtype=bool)
        success[batch.traj_ids] = batch.success
        kept = self.rollout_utils.filter_group_data(
            batch_list=batch_list, episode_rewards=episode, episode_lengths=steps,
            success={"success_rate": success}, traj_uid=np.arange(trajectories),
            tool_callings=np.zeros(trajectories), config=config, last_try=last_try)[4]
        return np.isin(batch.traj_ids, kept)

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        """``verl.utils.torch_functional.entropy_from_logits``: (..., V) -> (...)."""
        return self.functional.entropy_from_logits(logits)


class RuleTranscription:
    """verl-agent's rules as read, transcribed here (NumPy loops for the advantages,
    elementwise torch for the loss so that autograd gives the gradients): the reference
    of ``--self-check``, which needs no verl-agent checkout. Written from the rules, not
    from verl's code; a check of this project's code and of the harness itself.

    Rules: step returns discounted backwards over each trajectory's env rewards; the row
    penalty subtracted from the row's step return and from its episode score (the
    trajectory's reward sum); episode statistics over the group's rows (or each
    trajectory's first row), sample std, ``(x - mean) / (std + 1e-6)`` or ``x - mean``,
    mean 0 and std 1 for a group of one; step groups of equal anchors within a group
    (or, with similarity, each row joins the first cluster, in row order, whose first
    anchor has a ``difflib`` ratio >= the threshold), a step group of one scoring 0;
    RLOO ``n / (n - 1) * (x - mean)`` over the group's ``n`` members (a group of one: the
    raw score); REINFORCE++ ``x - mean`` (mean 0 for a group of one), then whitened over
    every response token of the batch, ``(v - mu) / sqrt(var + 1e-8)``, ``var`` with
    Bessel's correction over the token count; DAPO's overlong cost
    ``max(0, (len - (L_max - L)) / L * f)`` subtracted from the row's episode score;
    PPO-clip with dual clip ``min(loss, -A * c)`` where A < 0; GSPO: each response's
    ratio ``exp(mean of its log-ratios)`` for every token (gradient of the token's own
    log-prob), clipped, no dual clip, its term averaged per response then over responses;
    k3 KL clamped to [-10, 10]; token-mean, sequence means, or the sum over the
    micro-batch divided by its padded width; each micro-batch's loss divided by
    ``mini // micro``; dynamic sampling keeps a group unless its trajectories' returns
    are all equal (everything on the last try).
    """

    stubbed: tuple[str, ...] = ()
    root = "(rules transcribed in benchmarks/recipe_parity.py)"

    def advantages(self, rollout: Rollout, estimator: str, normalize: str,
                   settings: VerlSettings = VerlSettings(), *, float64: bool = False
                   ) -> dict[str, torch.Tensor]:
        """Same contract as :meth:`VerlAgent.advantages` (always float64)."""
        batch = rollout.batch
        rewards = batch.rewards if settings.penalty_in_env_rewards else batch.env_rewards
        penalty = np.zeros(len(batch))
        if settings.use_invalid_action_penalty:
            penalty = settings.invalid_action_penalty_coef * batch.invalid
        rows_of: dict[int, list[int]] = {}
        for row, traj in enumerate(batch.traj_ids.tolist()):
            rows_of.setdefault(traj, []).append(row)
        returns = np.zeros(len(batch))
        scores = np.zeros(len(batch))
        for rows in rows_of.values():
            running = 0.0
            for row in reversed(rows):
                running = rewards[row] + settings.gamma * running
                returns[row] = running
            scores[rows] = sum(rewards[row] for row in rows)
        returns -= penalty
        scores -= penalty
        if settings.overlong_buffer:
            scores -= self.overlong(rollout, settings.overlong_buffer,
                                    settings.overlong_penalty_factor, float64=True)
        first = np.zeros(len(batch), dtype=bool)
        first[[rows[0] for rows in rows_of.values()]] = True
        counted = np.ones(len(batch), dtype=bool) if settings.cross_steps else first
        groups = batch.group_ids.tolist()
        mask = torch.as_tensor(rollout.response_mask, dtype=torch.float64)
        if estimator == "rloo":
            advantages = self._leave_one_out(scores, groups, counted)
        elif estimator == "reinforce_pp":
            centered = self._normalized(scores, groups, "mean", counted, single_mean=0.0)
            advantages = self._whitened_over_tokens(centered, rollout.response_mask.sum(1))
        else:
            advantages = self._normalized(scores, groups, normalize, counted,
                                          single_mean=0.0)
        if estimator == "gigpo":
            step = self._normalized(returns, self._step_groups(batch, settings), normalize,
                                    np.ones(len(batch), dtype=bool), single_mean=None)
            advantages = advantages + settings.step_advantage_w * step
        return {"advantages": torch.as_tensor(advantages)[:, None] * mask,
                "step_rewards": torch.as_tensor(returns)}

    @staticmethod
    def _leave_one_out(values: np.ndarray, keys: Sequence[Any], counted: np.ndarray
                       ) -> np.ndarray:
        """``x - mean of the others = n / (n - 1) * (x - mean)`` within groups of equal
        ``keys`` (``n`` counted rows); a group of one keeps its value."""
        members: dict[Any, list[float]] = {}
        for key, value, count in zip(keys, values.tolist(), counted.tolist(), strict=True):
            if count:
                members.setdefault(key, []).append(value)
        out = values.astype(np.float64)
        for row, key in enumerate(keys):
            group = members[key]
            if len(group) > 1:
                others = (sum(group) - values[row]) / (len(group) - 1)
                out[row] = values[row] - others
        return out

    @staticmethod
    def _whitened_over_tokens(values: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Each row's value given to each of its ``tokens`` response tokens, whitened over
        all of them: mean, unbiased variance (token count - 1), ``/ sqrt(var + 1e-8)``."""
        spread = [value for value, count in zip(values.tolist(), tokens.tolist(), strict=True)
                  for _ in range(count)]
        mean = sum(spread) / len(spread)
        variance = sum((v - mean) ** 2 for v in spread) / (len(spread) - 1)
        return (values - mean) / math.sqrt(variance + 1e-8)

    @staticmethod
    def _normalized(values: np.ndarray, keys: Sequence[Any], normalize: str,
                    counted: np.ndarray, single_mean: float | None) -> np.ndarray:
        """``values`` normalized within groups of equal ``keys``, the statistics over the
        ``counted`` rows; a group of one counted row has mean ``single_mean`` (its own
        value when None) and std 1."""
        members: dict[Any, list[float]] = {}
        for key, value, count in zip(keys, values.tolist(), counted.tolist(), strict=True):
            if count:
                members.setdefault(key, []).append(value)
        out = np.zeros(len(values))
        for row, key in enumerate(keys):
            group = members[key]
            if len(group) == 1:
                mean, std = (group[0] if single_mean is None else single_mean), 1.0
            else:
                mean = sum(group) / len(group)
                std = math.sqrt(sum((v - mean) ** 2 for v in group) / (len(group) - 1))
            centered = values[row] - mean
            out[row] = centered if normalize == "mean" else centered / (std + 1e-6)
        return out

    @staticmethod
    def _step_groups(batch: StepBatch, settings: VerlSettings) -> list[tuple[int, int]]:
        """(group, cluster) key of each row."""
        import difflib

        keys: list[tuple[int, int]] = []
        clusters: dict[int, list[str]] = {}
        for group, anchor in zip(batch.group_ids.tolist(), batch.anchors, strict=True):
            representatives = clusters.setdefault(group, [])
            for index, representative in enumerate(representatives):
                if (anchor == representative if not settings.enable_similarity else
                        difflib.SequenceMatcher(None, anchor, representative).ratio()
                        >= settings.similarity_thresh):
                    keys.append((group, index))
                    break
            else:
                representatives.append(anchor)
                keys.append((group, len(representatives) - 1))
        return keys

    def loss(self, rollout: Rollout, token_advantages: torch.Tensor, sizes: tuple[int, int],
             dtype: torch.dtype, settings: VerlSettings = VerlSettings(),
             per_token_positions: np.ndarray | None = None) -> LossOutputs:
        """Same contract as :meth:`VerlAgent.loss`."""
        low, high = _clip_range(settings)

        def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
            mask = mask.to(values.dtype)
            if mode == "token-mean":
                return (values * mask).sum() / mask.sum()
            if mode == "seq-mean-token-sum-norm":
                return (values * mask).sum() / mask.shape[-1]
            sums = (values * mask).sum(-1)
            if mode == "seq-mean-token-mean":
                sums = sums / mask.sum(-1)
            return sums.mean()

        def micro_loss(log_probs, old, advantages, mask, ref, entropies):
            mode = settings.loss_agg_mode
            if settings.loss_mode == "gspo":
                per_token = self._gspo_per_token(log_probs, old, advantages, mask, low, high)
                policy = aggregate(per_token, mask, "seq-mean-token-mean")
            else:
                ratio = torch.exp(log_probs - old)
                clipped = torch.clamp(ratio, 1 - low, 1 + high)
                per_token = torch.maximum(-advantages * ratio, -advantages * clipped)
                bounded = torch.minimum(per_token, -advantages * settings.clip_ratio_c)
                per_token = torch.where(advantages < 0, bounded, per_token)
                policy = aggregate(per_token, mask, mode)
            log_ratio = ref - log_probs
            kl = torch.clamp(torch.exp(log_ratio) - log_ratio - 1, -10, 10)
            return (policy - settings.entropy_coeff * aggregate(entropies, mask, mode)
                    + settings.kl_loss_coef * aggregate(kl, mask, mode))

        accumulation = sizes[0] // sizes[1]
        return run_loss(rollout, token_advantages, micro_loss,
                        lambda micro_tokens, mini_tokens: 1.0 / accumulation, sizes, dtype,
                        trim=False, per_token_positions=per_token_positions)

    @staticmethod
    def _gspo_per_token(log_probs: torch.Tensor, old: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, low: float, high: float) -> torch.Tensor:
        """(B, T) GSPO's clipped term of each token: the response's mean log-ratio as the
        value (clamped above at 10), the token's own log-prob as the gradient."""
        mask = mask.to(log_probs.dtype)
        mean_log_ratio = ((log_probs - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        log_ratio = log_probs - log_probs.detach() + mean_log_ratio.detach()[:, None]
        ratio = torch.exp(torch.clamp(log_ratio, max=10.0))
        return torch.maximum(-advantages * ratio,
                             -advantages * torch.clamp(ratio, 1 - low, 1 + high))

    def gspo_term(self, rollout: Rollout, token_advantages: torch.Tensor, dtype: torch.dtype
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Same contract as :meth:`VerlAgent.gspo_term`."""
        log_probs = torch.tensor(rollout.log_probs, dtype=dtype, requires_grad=True)
        mask = torch.as_tensor(rollout.response_mask, dtype=dtype)
        per_token = self._gspo_per_token(
            log_probs, torch.as_tensor(rollout.old_log_probs, dtype=dtype),
            token_advantages.to(dtype), mask, *GSPO_CLIP)
        loss = ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
        (gradient,) = torch.autograd.grad(loss, log_probs)
        return loss.detach(), gradient

    def overlong(self, rollout: Rollout, buffer: int, factor: float, *, float64: bool
                 ) -> np.ndarray:
        """Same contract as :meth:`VerlAgent.overlong` (always float64)."""
        lengths = rollout.response_mask.sum(1)
        expected = RESPONSE_TOKENS - buffer
        return np.array([max(0.0, (length - expected) / buffer * factor)
                         for length in lengths.tolist()])

    def kept_rows(self, batch: StepBatch, last_try: bool, *, float64: bool = False
                  ) -> np.ndarray:
        """Same contract as :meth:`VerlAgent.kept_rows`."""
        if last_try:
            return np.ones(len(batch), dtype=bool)
        returns: dict[int, dict[int, float]] = {}
        for group, traj, reward in zip(batch.group_ids.tolist(), batch.traj_ids.tolist(),
                                       batch.env_rewards.tolist(), strict=True):
            trajectories = returns.setdefault(group, {})
            trajectories[traj] = trajectories.get(traj, 0.0) + reward
        varied = {group: len(set(values.values())) > 1 for group, values in returns.items()}
        return np.array([varied[group] for group in batch.group_ids.tolist()])

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        """``-sum(p * log p)`` over the last dim."""
        log_p = torch.log_softmax(logits, dim=-1)
        return -(log_p.exp() * log_p).sum(-1)


COUNTED = "float64"


AS_RUN = "float32"


@dataclass(frozen=True)
class Section:
    """One block of the defaults table: an algorithm's terms (or DAPO's parts).

    Attributes:
        title: the heading (this project's side vs verl-agent's).
        terms: the terms, named as the report and the worst line name them (unique across
            sections).
    """

    title: str
    terms: tuple[str, ...]


def _max_abs(a: Any, b: Any) -> float:
    a = (a.detach().double().numpy() if isinstance(a, torch.Tensor)
         else np.asarray(a, dtype=np.float64))
    b = (b.detach().double().numpy() if isinstance(b, torch.Tensor)
         else np.asarray(b, dtype=np.float64))
    return float(np.max(np.abs(a - b))) if a.size else 0.0


@dataclass
class Report:
    """Everything one run measured.

    Attributes:
        defaults: term -> (normalization, precision) -> largest difference.
        options: option name -> comparison label -> term -> largest difference.
        single_row: "estimator, normalization" -> (difference on the single row, largest
            elsewhere).
        rows: rows per seed; tokens: response tokens per seed.
        sweeps: "hgpo" or "graphgpo" -> "setting, normalization" -> largest counted
            difference (``benchmarks/frontier_parity.py``).
        accepted: label -> (largest difference, rows above the tolerance, rows) of
            HGPO's all-equal history groups (not counted).
    """

    defaults: dict[str, dict[tuple[str, str], float]] = field(default_factory=dict)
    options: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    single_row: dict[str, tuple[float, float]] = field(default_factory=dict)
    sweeps: dict[str, dict[str, float]] = field(default_factory=dict)
    accepted: dict[str, tuple[float, int, int]] = field(default_factory=dict)
    rows: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def record(self, term: str, column: tuple[str, str], value: float) -> None:
        cells = self.defaults.setdefault(term, {})
        cells[column] = max(cells.get(column, 0.0), value)

    def record_sweep(self, estimator: str, label: str, value: float) -> None:
        cells = self.sweeps.setdefault(estimator, {})
        cells[label] = max(cells.get(label, 0.0), value)

    def record_option(self, option: str, label: str, values: dict[str, float]) -> None:
        cells = self.options.setdefault(option, {}).setdefault(label, {})
        for term, value in values.items():
            cells[term] = max(cells.get(term, 0.0), value)

    def worst(self) -> tuple[float, str]:
        """The largest counted difference and ``"term, normalization"``."""
        worst, where = -1.0, ""
        for term, cells in self.defaults.items():
            for (normalize, precision), value in cells.items():
                if precision == COUNTED and value > worst:
                    worst, where = value, f"{term}, {normalize}"
        return worst, where


PRECISIONS = ((COUNTED, True, torch.float64), (AS_RUN, False, torch.float32))
"""``(column, verl's advantages in float64, dtype of both losses)``."""


def _cell(value: float | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.1e}"
