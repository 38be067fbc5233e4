"""The parts a run is built from: the policy, the generation engine, the vector envs and
the samplers that roll out with them.

:class:`~algorithms.training.trainer.Trainer` builds each with the functions here unless it is
handed one (``policy=``, ``engine=``, ``make_vec_env=``): tests and other libraries pass
their own parts instead of patching the trainer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from algorithms.agent.sampling import Sampler
from algorithms.agent.step_batch import StepBatch
from algorithms.config import TINY_MODEL, ConfigError, EnvConfig, TrainConfig
from algorithms.engines import make_engine, resolve_engine
from algorithms.precision import cpu_kernels
from algorithms.precision import describe as describe_precision
from algorithms.runs.distributed import Ranks, WeightMirror
from algorithms.runs.memory import release_around_each_call
from algorithms.training.learner import Learner
from algorithms.training.overlap import OverlappedSampler
from algorithms.training.policy import (
    Policy,
    check_model_source,
    default_model_conversion,
    load_policy,
)

VecEnvFactory = Callable[[dict[str, Any], int, int], Any]
"""``(env kwargs, num_envs, group_size) -> vector env``."""


def check_sft_stage_ran(config: TrainConfig) -> None:
    """Refuse an RL trainer for a config whose SFT warm start has not run yet (it would
    train silently without the warm start asked for).

    Raises:
        ConfigError: ``sft.warm_start`` is set and the stage's checkpoint is not the
            config's start yet.
    """
    if config.sft_stage_first:
        raise ConfigError(
            "sft.warm_start: the SFT stage runs before the RL trainer is built; call "
            "algorithms.sft.stage.run_stage(config, run_dir) first and build the Trainer "
            "with the config it returns (train.py does), or pass "
            "--model.init-checkpoint of an SFT run")


def check_model_sources(config: TrainConfig, *, policy_given: bool) -> None:
    """Fail in one line, before any retries, when the policy's model (unless a policy was
    given) or the ``separate`` critic's cannot be had
    (:func:`~algorithms.training.policy.check_model_source`)."""
    if not policy_given:
        check_model_source(config.model.name_or_path)
    if config.use_critic and config.model.critic == "separate":
        check_model_source(config.model.critic_name_or_path)


def build_policy(config: TrainConfig, device: torch.device, ranks: Ranks,
                 say: Callable[[str], None], policy: Policy | None = None) -> Policy:
    """The run's policy on ``device``: ``policy`` when given, else loaded
    (:func:`load_run_policy`), with ``model.init_checkpoint``'s weights
    (:func:`with_init_checkpoint`); says what it is."""
    if policy is None:
        policy = load_run_policy(config, device, ranks, say)
    policy = with_init_checkpoint(policy, config, device, ranks)
    say(f"policy: {policy.source}; "
        f"{sum(p.numel() for p in policy.model.parameters()) / 1e6:.1f}M parameters; "
        f"{describe_precision(policy.model)}"
        + (f" on {cpu_kernels()}" if device.type == "cpu" else ""))
    policy.model.to(device)
    return policy


def build_learner(policy: Policy, config: TrainConfig, device: torch.device,
                  ranks: Ranks) -> Learner:
    """The learner of ``policy``; freed heap pages go back to the system around each
    micro-batch's forward pass (:mod:`algorithms.runs.memory`), so that the next pass starts
    from live memory."""
    learner = Learner(policy, config, device, ranks=ranks)
    for scorer in (learner.scorer, learner.reference_scorer):
        if scorer is not None:
            release_around_each_call(scorer)
    return learner


def load_run_policy(config: TrainConfig, device: torch.device, ranks: Ranks,
                    say: Callable[[str], None]) -> Policy:
    """Load the policy of ``config.model`` on ``device`` (float32 master weights for FSDP2
    mixed precision under torchrun on GPUs); ``tiny``: build the smoke model
    (:mod:`algorithms.training.tiny_model`)."""
    if config.model.name_or_path == TINY_MODEL:
        from algorithms.training.tiny_model import load_tiny_policy

        say(f"building the tiny smoke model from {config.env.env_id}'s text on {device}")
        model = run_model_config(config, device, ranks)
        return load_tiny_policy(dataclasses.replace(config, model=model), device,
                                seed=config.run.seed)
    convert_to = default_model_conversion() if config.model.name_or_path is None else None
    say(f"loading the policy ({config.model.name_or_path or 'default model'}) on {device}" + (
        "" if convert_to is None else
        f"; converting the default GGUF model to HF format first (once, tens of seconds on "
        f"a CPU; then loaded from {convert_to})"))
    return load_policy(run_model_config(config, device, ranks), device, seed=config.run.seed)


def run_model_config(config: TrainConfig, device: torch.device, ranks: Ranks) -> Any:
    """``config.model`` as this process loads it: under torchrun on GPUs, ``dtype`` auto or
    bfloat16 means float32 master weights (FSDP2 computes in bfloat16, its own mixed
    precision in place of :mod:`algorithms.precision`'s)."""
    model = config.model
    if ranks.distributed and device.type == "cuda" and model.dtype in ("auto", "bfloat16"):
        return dataclasses.replace(model, dtype="float32")
    return model


def with_init_checkpoint(policy: Policy, config: TrainConfig, device: torch.device,
                         ranks: Ranks) -> Policy:
    """``policy`` with ``model.init_checkpoint``'s weights loaded, e.g. an SFT warm start
    (unchanged without one)."""
    if config.model.init_checkpoint is None:
        return policy
    from algorithms.training.warm_start import apply_init_checkpoint

    return apply_init_checkpoint(policy, run_model_config(config, device, ranks),
                                 seed=config.run.seed)


def engine_source(config: TrainConfig, policy: Policy, device: torch.device,
                  ranks: Ranks) -> tuple[Policy, WeightMirror | None]:
    """The policy the engine samples from, and the mirror behind it: ``policy`` itself in
    one process; under torchrun a full copy of it (refreshed from the shards after each
    update; on a GPU the HF engine's copy samples in bfloat16, like FSDP2's compute).
    Call it before the learner shards the policy: FSDP2's modules cannot be copied."""
    if not ranks.distributed:
        return policy, None
    on_host = resolve_engine(config.generation, policy) != "hf"
    mirror = WeightMirror(
        policy.model, torch.device("cpu") if on_host else device,
        dtype=torch.bfloat16 if device.type == "cuda" and not on_host else None)
    return dataclasses.replace(policy, model=mirror.model), mirror


def make_run_engine(config: TrainConfig, policy: Policy, device: torch.device,
                    ranks: Ranks, *, trainable: frozenset[str] | None = None) -> Any:
    """The generation engine of ``config.generation`` sampling from ``policy`` (see
    :func:`engine_source`); sampling seeds differ per rank. With ``run.max_staleness`` > 0
    the HF engine samples in a worker process with its own copy of the weights
    (:class:`~algorithms.engines.hf_worker.HFWorkerEngine`, on ``device``'s GPU, else on
    CPU cores), so that the rollout and the update run at the same time; it is sent the
    weights named ``trainable`` after each update (default: ``policy``'s parameters with
    ``requires_grad``; a torchrun job's engine samples from the frozen weight mirror and
    names the policy's)."""
    max_len = config.prompt.max_prompt_tokens + config.generation.max_new_tokens
    if config.run.max_staleness > 0 and resolve_engine(config.generation, policy) == "hf":
        from algorithms.engines.hf_worker import HFWorkerEngine

        if getattr(policy, "vision", None) is not None:
            raise ValueError("run.max_staleness > 0 samples with the HF engine in a worker "
                             "process, which does not take images: train a vision-language "
                             "policy with --run.max-staleness 0 (or the vllm engine)")

        return HFWorkerEngine(policy.model, policy.tokenizer,
                              batch_size=config.generation.batch_size,
                              top_p=config.generation.top_p,
                              threads=config.run.torch_threads or 1, trainable=trainable,
                              device=str(device) if device.type == "cuda" else "cpu")
    return make_engine(config.generation, policy, device,
                       seed=config.run.seed + 1_000_003 * ranks.rank, max_model_len=max_len)


def sync_engine_weights(engine: Any, model: torch.nn.Module, mirror: WeightMirror | None
                        ) -> None:
    """Give ``engine`` the weights of ``model``: through ``mirror``'s full copy when the
    policy is sharded (see :func:`engine_source`), else directly."""
    if mirror is not None:
        mirror.refresh(model)
        engine.sync_weights(mirror.model)
    else:
        engine.sync_weights(model)


def vector_env_factory(env: EnvConfig) -> VecEnvFactory:
    """Builds ``env.env_id``'s vector envs with the configured backend, workers and step
    timeout (connecting to ``env.ray_address``'s Ray cluster first when set)."""

    def make(kwargs: dict[str, Any], num_envs: int, group_size: int) -> Any:
        from agentgym.vector import make_vector_env

        if env.backend == "ray" and env.ray_address is not None:
            from agentgym.vector.ray_backend import connect_ray

            connect_ray(env.ray_address)
        return make_vector_env(env.env_id, num_envs, group_size=group_size,
                               backend=env.backend, num_workers=env.num_workers,
                               step_timeout=env.step_timeout, **kwargs)

    return make


def build_vec_env(config: TrainConfig, make_vec_env: VecEnvFactory, group_count: int,
                  ranks: Ranks, say: Callable[[str], None]) -> Any:
    """The training envs of this rank: ``group_count`` groups of ``env.group_size``, made
    by ``make_vec_env`` with the training kwargs."""
    env = config.env
    if config.agent.function is not None:  # your loop plays (--agent): no envs of ours
        return None
    say(f"building {group_count * env.group_size} {env.env_id} envs ({env.backend} backend"
        f"{', per rank' if ranks.distributed else ''})")
    return make_vec_env(env.kwargs(), group_count * env.group_size, env.group_size)


def check_reference_engine(engine: Any, ranks: Ranks) -> None:
    """Refuse ``run.reference_in_worker`` where the reference cannot be scored in the
    engine: an engine other than the HF worker engine (vLLM), or several ranks.

    Raises:
        ValueError: in one line, naming what to change.
    """
    if not hasattr(engine, "call"):
        raise ValueError(f"run.reference_in_worker scores the KL reference in the HF engine's "
                         f"worker; this run's engine is {type(engine).__name__} "
                         f"(set --generation.engine hf, or leave the option off)")
    if ranks.distributed:
        raise ValueError("run.reference_in_worker runs on one process only (under torchrun "
                         "each rank's engine holds a weight mirror); leave it off")


def check_overlap_engine(engine: Any, policy: Policy) -> None:
    """Refuse an engine that samples with the learner's own model object (the in-process
    HF engine): overlapped, the update would change the weights under a rollout.

    Raises:
        ValueError: ``engine.model`` is ``policy.model``.
    """
    if getattr(engine, "model", None) is policy.model:
        raise ValueError(
            "run.max_staleness > 0 needs an engine with its own copy of the weights (the HF "
            "worker engine, vLLM); this engine samples with the training model itself")


def build_samplers(config: TrainConfig, vec_env: Any, engine: Any, policy: Policy,
                   temperature: float, ranks: Ranks, group_first: int, *, bars: bool,
                   say: Callable[[str], None], sync: Callable[[], None], version: int,
                   reference_in_worker: Callable[[StepBatch], StepBatch]
                   ) -> tuple[Sampler, OverlappedSampler | None]:
    """The run's :class:`~algorithms.agent.sampling.Sampler` (rollouts sampled at
    ``temperature``, the one the learner scores at: ``Learner.temperature``) and, with
    ``run.max_staleness > 0``, the :class:`~algorithms.training.overlap.OverlappedSampler`
    around it (``sync``: the engine's weight sync; ``version``: the policy version of the
    first iteration; ``reference_in_worker``: the KL reference scored in the engine's
    worker, with ``run.reference_in_worker``), else ``None``.

    Raises:
        ValueError: the engine cannot run the overlapped rollout
            (:func:`check_overlap_engine`) or score the reference
            (:func:`check_reference_engine`).
    """
    if config.agent.function is not None:  # --agent: your loop through the gateway
        if ranks.distributed:
            raise ConfigError("--agent runs in one process; torchrun is not supported with it")
        from algorithms.gateway.harness import HarnessSampler

        return HarnessSampler(config, engine, policy.tokenizer, say=say), None
    sampler = Sampler(config, vec_env, engine, policy.tokenizer, temperature, ranks,
                      group_first, bars, say, vision=policy.vision)
    if config.run.max_staleness == 0:
        return sampler, None
    check_overlap_engine(engine, policy)
    score_block = None
    if config.run.reference_in_worker:
        check_reference_engine(engine, ranks)
        score_block = reference_in_worker
    return sampler, OverlappedSampler(
        sampler, max_staleness=config.run.max_staleness, iterations=config.run.iterations,
        sync=sync, version=version, score_block=score_block)
