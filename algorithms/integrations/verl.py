"""GiGPO and AgentGym envs inside verl (``pip install verl``), without forking it.

Importing this module registers two things with verl:

- ``"gigpo"`` in verl's advantage-estimator registry
  (``verl.trainer.ppo.core_algos.register_adv_est``): :func:`compute_gigpo_advantage`,
  which calls our :func:`~algorithms.objectives.advantages.gigpo_advantages`.
- ``"agentgym"`` in verl's agent-loop registry
  (``verl.experimental.agent_loop.register``): :class:`AgentGymAgentLoop`, which plays
  one AgentGym env episode per sample as a growing chat.

How verl's batch maps onto GiGPO. verl's multi-turn agent loops give one row per
*trajectory*: ``responses`` holds every turn (the model's answers, mask 1, and the env's
replies, mask 0). So:

- a GiGPO *group* is verl's ``uid`` (the n rollouts of one prompt: one task, one seed);
- a *trajectory* is a row;
- a *step* is a turn: the k-th run of ones in the row's ``response_mask``;
- step rewards and anchors come from ``non_tensor_batch[TURN_REWARDS_KEY]`` and
  ``non_tensor_batch[TURN_ANCHORS_KEY]`` (one list per row, written by
  :class:`AgentGymAgentLoop` from the env's rewards, invalid-action penalties included,
  and ``info["anchor"]``). verl's ``token_level_rewards`` are not read: the turn rewards
  are the env's own signal, and their sum is the row's ``reward_score``.

Each turn's advantage ``A_E + step_weight * A_S`` is written on that turn's tokens;
``returns`` equal the advantages, as in verl's GRPO. A turn whose tokens were cut by
``response_length`` still counts in the returns of the turns before it.

One hook is needed: verl's ``compute_advantage`` passes registered estimators only
rewards, mask and ``uid`` (it hands ``non_tensor_batch`` to its own GDPO alone), and
GiGPO needs the anchors. :func:`install` wraps ``verl.trainer.ppo.ray_trainer.
compute_advantage`` with :func:`compute_advantage`, which gives ``"gigpo"`` the batch
and leaves every other estimator to verl. Called without the batch,
:func:`compute_gigpo_advantage` raises an error that says so.

Settings: ``algorithm.norm_adv_by_std_in_grpo`` picks ``normalize`` ("std" / "mean");
an optional ``algorithm.gigpo`` mapping sets ``gamma``, ``step_weight``,
``episode_stats`` and ``similarity_threshold``; unset values come from :class:`algorithms.config.LearnerConfig`
(gamma 0.95 across turns -- verl's own ``algorithm.gamma``, 1.0, is its per-token GAE
discount and is not used here).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from uuid import uuid4

import gymnasium as gym
import numpy as np
import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.protocol import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo import ray_trainer as verl_ray_trainer
from verl.workers.rollout.replica import TokenOutput

import agentgym  # noqa: F401  (registers the env ids)
from agentgym.openenv.codec import anchor_key
from algorithms.config import EnvConfig, LearnerConfig, PromptConfig
from algorithms.integrations.episode import ChatEpisode
from algorithms.integrations.multiturn import gigpo_token_advantages
from algorithms.precision import autocast

ESTIMATOR_NAME = "gigpo"
"""``algorithm.adv_estimator`` value that selects GiGPO."""

AGENT_LOOP_NAME = "agentgym"
"""``agent_name`` of :class:`AgentGymAgentLoop` (a dataset column, or
``actor_rollout_ref.rollout.agent.default_agent_loop``)."""

TURN_REWARDS_KEY = "agentgym_turn_rewards"
"""``non_tensor_batch`` key: per row, the list of its turns' rewards."""

TURN_ANCHORS_KEY = "agentgym_turn_anchors"
"""``non_tensor_batch`` key: per row, the list of its turns' anchor keys."""

EPISODE_KEY = "agentgym"
"""Key of a dataset row's ``extra_info`` that describes the episode to play."""


# ----------------------------------------------------------------------------- estimator
@dataclass(frozen=True)
class GiGPOSettings:
    """GiGPO's knobs as read from verl's ``algorithm`` config (defaults: LearnerConfig)."""

    gamma: float = LearnerConfig.gamma
    step_weight: float = LearnerConfig.step_weight
    normalize: str = LearnerConfig.normalize
    episode_stats: str = LearnerConfig.episode_stats
    similarity_threshold: float | None = LearnerConfig.similarity_threshold

    @classmethod
    def from_verl(cls, config: Any, norm_adv_by_std: bool | None = None) -> GiGPOSettings:
        """Read ``config.gigpo`` (optional mapping) and ``norm_adv_by_std_in_grpo``."""
        section = config.get("gigpo", None) if config is not None else None
        section = dict(section) if section is not None else {}
        known = {f.name for f in fields(cls)} - {"normalize"}
        unknown = set(section) - known
        if unknown:
            raise ValueError(f"unknown algorithm.gigpo keys {sorted(unknown)}; known: {sorted(known)}")
        if norm_adv_by_std is None:
            norm_adv_by_std = config.get("norm_adv_by_std_in_grpo", True) if config is not None else True
        return cls(normalize="std" if norm_adv_by_std else "mean", **section)


@core_algos.register_adv_est(ESTIMATOR_NAME)
def compute_gigpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    non_tensor_batch: Mapping[str, np.ndarray] | None = None,
    norm_adv_by_std_in_grpo: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's estimator signature for GiGPO on per-trajectory multi-turn rows.

    Args:
        token_level_rewards: (B, L) verl's token rewards; only its dtype and device are used.
        response_mask: (B, L) 1 on the model's tokens.
        index: (B,) verl's ``uid`` per row: the GiGPO groups.
        config: verl's ``algorithm`` config (see the module docstring for what is read).
        non_tensor_batch: the batch's non-tensor columns, with :data:`TURN_REWARDS_KEY` and
            :data:`TURN_ANCHORS_KEY`.
        norm_adv_by_std_in_grpo: overrides ``config.norm_adv_by_std_in_grpo``.

    Returns:
        ``(advantages, returns)``, both (B, L), equal, zero off the model's tokens.
    """
    if non_tensor_batch is None:
        raise ValueError(
            "GiGPO needs the batch's turn rewards and anchors, which verl's compute_advantage "
            "passes to registered estimators only for GDPO: call "
            "algorithms.integrations.verl.install() before training (it wraps "
            "verl.trainer.ppo.ray_trainer.compute_advantage), or call "
            "algorithms.integrations.verl.compute_advantage(data, 'gigpo', ...) yourself."
        )
    missing = [key for key in (TURN_REWARDS_KEY, TURN_ANCHORS_KEY) if key not in non_tensor_batch]
    if missing:
        raise KeyError(f"non_tensor_batch lacks {missing}: the rows must come from the "
                       f"{AGENT_LOOP_NAME!r} agent loop (or carry those lists)")
    groups = index if index is not None else non_tensor_batch.get("uid")
    if groups is None:
        raise KeyError("GiGPO needs group ids: verl's uid (index=) or non_tensor_batch['uid']")
    settings = GiGPOSettings.from_verl(config, norm_adv_by_std_in_grpo)
    advantages = gigpo_token_advantages(
        response_mask.detach().cpu().numpy(), list(groups),
        list(non_tensor_batch[TURN_REWARDS_KEY]), list(non_tensor_batch[TURN_ANCHORS_KEY]),
        gamma=settings.gamma, step_weight=settings.step_weight, normalize=settings.normalize,
        episode_stats=settings.episode_stats, similarity_threshold=settings.similarity_threshold,
    )
    tensor = torch.as_tensor(advantages, dtype=token_level_rewards.dtype,
                             device=token_level_rewards.device)
    return tensor, tensor.clone()


_VERL_COMPUTE_ADVANTAGE = verl_ray_trainer.compute_advantage


def compute_advantage(
    data: DataProto,
    adv_estimator: Any,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> DataProto:
    """verl's ``compute_advantage``, with the batch's non-tensor columns given to GiGPO.

    Same signature and result as ``verl.trainer.ppo.ray_trainer.compute_advantage`` for
    every other estimator (it is called unchanged).
    """
    name = getattr(adv_estimator, "value", adv_estimator)
    if name != ESTIMATOR_NAME:
        return _VERL_COMPUTE_ADVANTAGE(data, adv_estimator, gamma=gamma, lam=lam,
                                       num_repeat=num_repeat,
                                       norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
                                       config=config)
    if "response_mask" not in data.batch.keys():
        data.batch["response_mask"] = verl_ray_trainer.compute_response_mask(data)
    advantages, returns = compute_gigpo_advantage(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        config=config,
        non_tensor_batch=data.non_tensor_batch,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
    )
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    return data


def install() -> None:
    """Make verl's PPO trainer use :func:`compute_advantage` (idempotent)."""
    verl_ray_trainer.compute_advantage = compute_advantage


# ----------------------------------------------------------------------------- agent loop
@dataclass(frozen=True)
class EpisodeSpec:
    """What one dataset row asks the agent loop to play (``extra_info["agentgym"]``, a
    mapping or its JSON text).

    Attributes:
        env_id: registered id.
        env_kwargs: ``gym.make`` keyword arguments.
        seed: reset seed (the n rollouts of a row share it, so they form a GiGPO group).
        task_id: play this task instead of a seeded one.
        prompt: :class:`~algorithms.config.PromptConfig` fields (answer format).
    """

    env_id: str = EnvConfig.env_id
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    task_id: str | None = None
    prompt: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> EpisodeSpec:
        extra = row.get("extra_info") or {}
        spec = extra.get(EPISODE_KEY) if isinstance(extra, Mapping) else None
        if isinstance(spec, str):
            spec = json.loads(spec)
        if not isinstance(spec, Mapping):
            raise KeyError(f"the {AGENT_LOOP_NAME!r} agent loop needs extra_info[{EPISODE_KEY!r}] "
                           "(env_id, env_kwargs, seed or task_id): see episode_row()")
        unknown = set(spec) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown extra_info[{EPISODE_KEY!r}] keys {sorted(unknown)}")
        return cls(**spec)


def episode_row(env_id: str, *, seed: int | None = None, task_id: str | None = None,
                env_kwargs: Mapping[str, Any] | None = None,
                prompt: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A verl dataset row (for a parquet file) that plays one episode with
    :class:`AgentGymAgentLoop`.

    ``prompt`` is a placeholder message (verl's ``RLHFDataset`` requires the column and
    turns it into ``raw_prompt``); the loop builds the real prompt from the env's first
    observation. The episode spec is stored as JSON text, which parquet keeps as is.
    """
    spec = {"env_id": env_id, "seed": seed, "task_id": task_id,
            "env_kwargs": dict(env_kwargs or {}), "prompt": dict(prompt or {})}
    return {
        "data_source": env_id,
        "agent_name": AGENT_LOOP_NAME,
        "prompt": [{"role": "user", "content": f"Play {env_id} (seed {seed}, task {task_id})."}],
        "extra_info": {EPISODE_KEY: json.dumps(spec)},
    }


@register(AGENT_LOOP_NAME)
class AgentGymAgentLoop(AgentLoopBase):
    """A verl agent loop that plays one AgentGym episode per sample as a growing chat.

    Each turn: generate with verl's LLM server from the chat so far, parse the action,
    step the env (:class:`~algorithms.integrations.episode.ChatEpisode`), append the
    env's reply as a user message. Ends when the env terminates or truncates,
    ``actor_rollout_ref.rollout.multi_turn.max_assistant_turns`` is reached (default: the
    env's ``max_steps`` recipe, :class:`~algorithms.config.EnvConfig`), or the response
    reaches ``response_length``. The env runs in the loop's coroutine (no thread: ALFWorld's
    planner is not thread-safe); a step takes milliseconds.

    Output: verl's :class:`AgentLoopOutput` with ``reward_score`` = the episode return
    (penalties included) and ``extra_fields`` :data:`TURN_REWARDS_KEY`,
    :data:`TURN_ANCHORS_KEY` (anchor keys), ``agentgym_actions``, ``agentgym_success``,
    ``agentgym_task_id``.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.response_length = int(self.rollout_config.response_length)
        multi_turn = self.rollout_config.get("multi_turn", None)
        max_turns = multi_turn.get("max_assistant_turns", None) if multi_turn is not None else None
        self.max_turns = int(max_turns) if max_turns else EnvConfig.max_steps

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        spec = EpisodeSpec.from_row(kwargs)
        env = gym.make(spec.env_id, **spec.env_kwargs)
        episode = ChatEpisode(env, prompt=PromptConfig(**spec.prompt), max_turns=self.max_turns)
        request_id = uuid4().hex
        metrics = {"generate_sequences": 0.0, "tool_calls": 0.0, "num_preempted": -1}
        try:
            message = episode.start(seed=spec.seed, task_id=spec.task_id)
            messages = [{"role": "user", "content": message}]
            token_ids = await self.ct_build_initial_tokens(messages)
            mask: list[int] = []
            logprobs: list[float] = []
            while True:
                started = time.perf_counter()
                output: TokenOutput = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=token_ids, sampling_params=sampling_params)
                metrics["generate_sequences"] += time.perf_counter() - started
                merged, mask, merged_logprobs = await self.ct_merge_assistant_token(
                    token_ids, output.token_ids, mask,
                    logprobs if (logprobs or output.log_probs) else None,
                    assistant_logprobs=output.log_probs or None)
                token_ids = merged.token_ids
                logprobs = merged_logprobs or []
                answer = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
                started = time.perf_counter()
                message = episode.act(answer)
                metrics["tool_calls"] += time.perf_counter() - started
                if message is None or len(mask) >= self.response_length:
                    break
                previous = list(messages)
                messages += [{"role": "assistant", "content": answer},
                             {"role": "user", "content": message}]
                merged, new_mask, new_logprobs = await self.ct_merge_context_msg(
                    previous, messages, token_ids, mask, logprobs or None)
                if len(new_mask) >= self.response_length:
                    break
                token_ids, mask, logprobs = merged.token_ids, new_mask, new_logprobs or []
        finally:
            env.close()
        prompt_ids = token_ids[: len(token_ids) - len(mask)]
        response_ids = token_ids[len(token_ids) - len(mask):]
        limit = self.response_length
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:limit],
            response_mask=mask[:limit],
            response_logprobs=logprobs[:limit] if logprobs else None,
            reward_score=episode.total_reward,
            num_turns=2 * len(episode.turns) + 1,
            metrics=metrics,
            extra_fields={
                TURN_REWARDS_KEY: [turn.reward for turn in episode.turns],
                TURN_ANCHORS_KEY: [anchor_key(turn.anchor) for turn in episode.turns],
                "agentgym_actions": [turn.action for turn in episode.turns],
                "agentgym_success": episode.success,
                "agentgym_task_id": episode.info["task_id"],
            },
        )


class HFTokenServer:
    """A CPU stand-in for verl's LLM server client: ``generate`` with an HF model.

    verl's agent loops talk to vLLM / SGLang servers started by its AgentLoopManager
    (GPU). This object has the one method an agent loop calls,
    ``await generate(request_id=..., prompt_ids=..., sampling_params=...)``, returning
    verl's ``TokenOutput`` (sampled ids and their log-probabilities), so an agent loop
    can be run and debugged on a CPU with a small model.

    Args:
        model: a causal LM (``transformers``).
        tokenizer: its tokenizer (for the end-of-sequence id).
        max_new_tokens: tokens per answer.
        seed: seed of the sampling RNG.
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int = 32, seed: int = 0):
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.generator = torch.Generator().manual_seed(seed)

    async def generate(self, *, request_id: str, prompt_ids: list[int],
                       sampling_params: dict[str, Any], **kwargs: Any) -> TokenOutput:
        temperature = float(sampling_params.get("temperature", 1.0))
        ids = torch.tensor([prompt_ids])
        new_ids: list[int] = []
        logprobs: list[float] = []
        past = None
        with torch.no_grad():
            for _ in range(self.max_new_tokens):
                with autocast(self.model):
                    out = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()
                if temperature > 0:
                    log_probs = torch.log_softmax(logits / temperature, dim=-1)
                    token = int(torch.multinomial(log_probs.exp(), 1, generator=self.generator))
                else:
                    log_probs = torch.log_softmax(logits, dim=-1)
                    token = int(torch.argmax(logits))
                new_ids.append(token)
                logprobs.append(float(log_probs[token]))
                if token == self.tokenizer.eos_token_id:
                    break
                ids = torch.tensor([[token]])
        return TokenOutput(token_ids=new_ids, log_probs=logprobs, stop_reason="completed")
