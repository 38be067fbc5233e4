"""The training run: rollout -> scores -> advantages -> update, with logging and checkpoints.

:class:`Trainer` owns the run folder::

    runs/<run_name>/config.json          the resolved config
    runs/<run_name>/metrics.jsonl        one record per iteration (and per evaluation)
    runs/<run_name>/tensorboard/         TensorBoard event files
    runs/<run_name>/curves.png           success, return, error rates, episode length
    runs/<run_name>/checkpoints/         atomic checkpoints (see algorithms.checkpoint)
    runs/<run_name>/records/             rollout records (see algorithms.records)
    runs/<run_name>/eval/iter_XXXXXX.json  held-out results per task type

A folder that already holds a run is never silently reused: a new run there is refused
(:class:`RunFolderError`) unless ``run.overwrite``; ``run.resume`` needs a checkpoint
there. ``run.eval_only`` writes to a folder of its own (:func:`eval_only_dir`).

Every seed of iteration ``k`` is derived from ``(run.seed, k)``: the reset seed (so the
task order), the sampling seeds and the mini-batch order. Resuming from the checkpoint
after iteration ``k`` therefore replays iteration ``k + 1`` exactly as an uninterrupted
run would.

Under ``torchrun`` (:mod:`algorithms.distributed`) every rank runs a :class:`Trainer`:
each rolls out its block of the task groups with its own envs and engine, the batches are
gathered, and the sharded learner updates on the global batch. Rank 0 alone decides about
the run folder, prints, logs, plots and writes records; checkpoints are written by all
ranks together (``torch.distributed.checkpoint``, see :mod:`algorithms.checkpoint`), and
evaluation episodes are split between the ranks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentgym import registration
from algorithms import distributed
from algorithms.checkpoint import (
    WEIGHT_SECTIONS,
    CheckpointError,
    check_model_identity,
    checkpoint_meta,
    checkpoint_size,
    is_sharded,
    latest_checkpoint,
    load_checkpoint,
    load_sharded_checkpoint,
    resolve_checkpoint,
    restore_rng_states,
    save_checkpoint,
    save_sharded_checkpoint,
)
from algorithms.config import ConfigError, TrainConfig
from algorithms.console import iteration_line, on_terminal, quiet_dependency_bars
from algorithms.distributed import SINGLE, Ranks, WeightMirror
from algorithms.dynamic_sampling import sample_until_full
from algorithms.engines import make_engine
from algorithms.learner import Learner, warmup_factor
from algorithms.memory import release_around_each_call, release_freed_memory
from algorithms.metrics import (
    MetricsLogger,
    advantage_metrics,
    gigpo_term_metrics,
    plot_curves,
    rollout_metrics,
    step_group_metrics,
    trajectory_table,
)
from algorithms.policy import (
    Policy,
    check_model_source,
    default_model_conversion,
    load_policy,
    resolve_device,
)
from algorithms.records import records_path, trajectory_records, write_records
from algorithms.rollout import (
    NoStepsError,
    RolloutSettings,
    StepBatch,
    collect_rollout,
    concat_batches,
)
from algorithms.termination import Terminated, TermSignal

RUN_FILES = ("config.json", "metrics.jsonl", "tensorboard", "curves.png", "checkpoints",
             "records", "eval", "wandb")
"""What a run writes in its folder (``run.overwrite`` deletes these, nothing else)."""


class RunFolderError(ConfigError):
    """A run folder that cannot be used as asked (reuse without overwrite, nothing to
    resume)."""


def default_run_dir(config: TrainConfig) -> Path:
    """``output_dir/run_name``, the name defaulting to ``<preset>-<algo>-seed<seed>``;
    for ``eval_only`` without a ``run_name``, :func:`eval_only_dir`."""
    run = config.run
    if run.eval_only and run.run_name is None:
        return eval_only_dir(config)
    name = run.run_name or f"{config.preset}-{config.algo}-seed{run.seed}"
    return Path(run.output_dir) / name


def eval_only_dir(config: TrainConfig) -> Path:
    """Where ``--eval-only`` writes: ``<run>/eval/<checkpoint>-<split>`` for a checkpoint
    of ``<run>``, or ``output_dir/initial-<preset>/eval/initial-<split>`` for the
    untrained model. ``<split>`` is the evaluation env's ``split`` (``default`` when it
    sets none)."""
    split = str(config.env.eval_kwargs().get("split", "default"))
    if config.run.checkpoint is None:
        base = Path(config.run.output_dir) / f"initial-{config.preset}"
        return base / "eval" / f"initial-{split}"
    folder = resolve_checkpoint(Path(config.run.checkpoint))
    return folder.parent.parent / "eval" / f"{folder.name}-{split}"


def holds_run(run_dir: Path) -> list[str]:
    """The run files present in ``run_dir`` (empty: the folder holds no run)."""
    return [name for name in RUN_FILES if (Path(run_dir) / name).exists()]


def iteration_seed(seed: int, iteration: int, stream: int, attempt: int = 0,
                   round_: int = 0) -> int:
    """A 31-bit seed for ``stream`` of ``iteration`` (independent of every other pair);
    ``attempt`` > 0 gives a retry of that stream a seed of its own, and ``round_`` > 0 a
    further rollout of dynamic sampling."""
    entropy = [seed, iteration, stream] + ([attempt, round_] if round_ else
                                           [attempt] if attempt else [])
    state = np.random.SeedSequence(entropy).generate_state(1)[0]
    return int(state) & 0x7FFFFFFF


def _tqdm(progress: bool, **kwargs: Any) -> Any:
    from tqdm.auto import tqdm

    return tqdm(disable=not progress, dynamic_ncols=True, **kwargs)


class Trainer:
    """Runs training or evaluation for one :class:`~algorithms.config.TrainConfig`.

    Args:
        config: the resolved config.
        policy: an already loaded policy (tests); by default loaded from ``config.model``.
        run_dir: the run folder; by default ``run.output_dir / run_name``.
        ranks: this process's place in a torchrun job (default: one process).
    """

    def __init__(self, config: TrainConfig, *, policy: Policy | None = None,
                 run_dir: Path | None = None, ranks: Ranks = SINGLE):
        self.config = config.validate()
        self.ranks = ranks
        self.device = distributed.training_device(ranks, resolve_device(config.run.device))
        self.run_dir = Path(run_dir) if run_dir is not None else default_run_dir(config)
        self._policy = policy
        self.policy: Policy | None = None
        self.learner: Learner | None = None
        self.engine: Any = None
        self.mirror: WeightMirror | None = None
        self.vec_env: Any = None
        self.logger: MetricsLogger | None = None
        self.start_iteration = 0
        self.group_first, self.group_count = distributed.group_block(
            config.env.num_groups, ranks)

    @property
    def progress(self) -> bool:
        """Progress bars and messages: on, and rank 0 of a torchrun job."""
        return self.config.run.progress and self.ranks.main

    @property
    def bars(self) -> bool:
        """Progress bars (redrawn in place) rather than one plain line per iteration:
        :attr:`progress`, and stdout and stderr are terminals (not a log file)."""
        return self.progress and on_terminal()

    # ------------------------------------------------------------------ setup
    def prepare_run_dir(self) -> Path | None:
        """Check the run folder against the run's mode, before anything is loaded.

        Returns:
            The checkpoint to load: the newest of the run (resume), the one to evaluate
            (eval-only), or ``None``.

        Raises:
            RunFolderError: a new run in a folder holding one (without
                ``run.overwrite``), or a resume with nothing to resume.
            ConfigError: a resume with settings that differ from the saved ones.
            CheckpointError: the checkpoint to evaluate is missing or refused.
        """
        config = self.config
        run = config.run
        if run.eval_only:
            checkpoint = resolve_checkpoint(Path(run.checkpoint)) if run.checkpoint else None
        elif run.resume:
            checkpoint = latest_checkpoint(self.run_dir)
            if checkpoint is None:
                raise RunFolderError(
                    f"--resume: no checkpoint to resume in {self.run_dir} (no "
                    "checkpoints/latest there); check --run.run-name / --run.output-dir, "
                    "or start the run without --resume")
            saved = self.run_dir / "config.json"
            if saved.exists():
                stored = TrainConfig.from_dict(json.loads(saved.read_text(encoding="utf-8")))
                changed = _config_changes(stored.to_dict(), config.to_dict())
                if changed:
                    raise ConfigError(
                        f"--run.resume with a config that differs from {saved} "
                        f"({'; '.join(changed)}); resume with the same settings (only run.* "
                        "may change)")
        else:
            checkpoint = None
        present = holds_run(self.run_dir)
        if present and not run.resume:
            if not run.overwrite:
                hint = ("evaluate into another folder with --run.run-name NAME" if run.eval_only
                        else "continue it with --resume, or pick another folder with "
                        "--run.run-name NAME" if latest_checkpoint(self.run_dir) is not None
                        else "it has no checkpoint to resume (it stopped before its first "
                        "one); pick another folder with --run.run-name NAME")
                raise RunFolderError(
                    f"{self.run_dir} already holds a run ({', '.join(present)}); {hint}, or "
                    "replace it with --run.overwrite")
            for name in present:
                path = self.run_dir / name
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        return checkpoint

    def _prepare_on_rank0(self) -> Path | None:
        """:meth:`prepare_run_dir` decided by rank 0 alone (only it touches the folder);
        every rank gets its answer, or raises its error."""
        if not self.ranks.distributed:
            return self.prepare_run_dir()
        answer: tuple[str, str] | Path | None = None
        if self.ranks.main:
            try:
                answer = self.prepare_run_dir()
            except (ConfigError, CheckpointError) as error:
                answer = (type(error).__name__, str(error))
        answer = distributed.broadcast_object(answer, self.ranks)
        if isinstance(answer, tuple):
            kind = CheckpointError if answer[0] == "CheckpointError" else ConfigError
            raise kind(answer[1])
        return answer

    def setup(self) -> None:
        """Check the model source and the run folder, load the model, build learner,
        engine and envs; restore a checkpoint if asked.

        A setup that fails in a new run leaves no run files behind (see
        :meth:`_discard_new_run`), so the same command can be tried again."""
        config = self.config
        if self._policy is None:  # one line now, not after minutes of retries
            check_model_source(config.model.name_or_path)
        if config.use_critic and config.model.critic == "separate":
            check_model_source(config.model.critic_name_or_path)
        checkpoint = self._prepare_on_rank0()
        try:
            self._build(checkpoint)
        except BaseException:
            self.close()
            if not config.run.resume:
                self._discard_new_run()
            raise

    def _discard_new_run(self) -> None:
        """Delete the run files a failed setup of a new run wrote (rank 0), and the run
        folder when that leaves it empty. :meth:`prepare_run_dir` left none there before
        (it refuses a folder holding a run, or empties it with ``run.overwrite``), so
        every file removed is this setup's."""
        if not self.ranks.main:
            return
        for name in holds_run(self.run_dir):
            path = self.run_dir / name
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink()
        with contextlib.suppress(OSError):  # not empty: something of the user's is there
            self.run_dir.rmdir()

    def _build(self, checkpoint: Path | None) -> None:
        """:meth:`setup` after the run folder was checked."""
        config = self.config
        ranks = self.ranks
        kwargs = config.env.eval_kwargs() if config.run.eval_only else config.env.kwargs()
        self._say(f"tasks: {registration.task_source(config.env.env_id, kwargs)}")
        if ranks.distributed:
            self._say(f"torchrun: {ranks.world_size} ranks "
                      f"({'NCCL' if self.device.type == 'cuda' else 'gloo'}); rank 0 rolls "
                      f"out groups {self.group_first}..{self.group_first + self.group_count - 1}"
                      f" of {config.env.num_groups}; FSDP2 shards the policy")
        if ranks.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        if not self.bars:  # a log file: no bars redrawn by the libraries either
            quiet_dependency_bars()
        if config.run.torch_threads is not None:
            torch.set_num_threads(config.run.torch_threads)
        if self._policy is None:
            convert_to = default_model_conversion() if config.model.name_or_path is None \
                else None
            self._say(f"loading the policy ({config.model.name_or_path or 'default model'}) "
                      f"on {self.device}" + (
                          "" if convert_to is None else
                          f"; converting the default GGUF model to HF format first (once, "
                          f"tens of seconds on a CPU; then loaded from {convert_to})"))
        model_config = config.model
        if ranks.distributed and self.device.type == "cuda" and model_config.dtype == "auto":
            # FSDP2 mixed precision: float32 master weights, bfloat16 compute
            model_config = dataclasses.replace(model_config, dtype="float32")
        self.policy = self._policy if self._policy is not None else \
            load_policy(model_config, self.device, seed=config.run.seed)
        if config.model.init_checkpoint is not None:  # e.g. an SFT warm start
            from algorithms.warm_start import apply_init_checkpoint

            self.policy = apply_init_checkpoint(self.policy, model_config, seed=config.run.seed)
        self._say(f"policy: {self.policy.source}; "
                  f"{sum(p.numel() for p in self.policy.model.parameters()) / 1e6:.1f}M "
                  "parameters")
        self.policy.model.to(self.device)
        engine_policy = self.policy
        if ranks.distributed:
            # the engine samples from a full copy, refreshed from the shards (distributed)
            from algorithms.engines import resolve_engine

            on_host = resolve_engine(config.generation, self.policy) != "hf"
            # on a GPU the HF engine's copy samples in bfloat16, like FSDP2's compute
            self.mirror = WeightMirror(
                self.policy.model, torch.device("cpu") if on_host else self.device,
                dtype=torch.bfloat16 if self.device.type == "cuda" and not on_host else None)
            engine_policy = dataclasses.replace(self.policy, model=self.mirror.model)
        self.learner = Learner(self.policy, config, self.device, ranks=ranks)
        # freed heap pages go back to the system around each micro-batch's forward pass
        # and each phase, so that the next pass starts from live memory (algorithms.memory)
        for scorer in (self.learner.scorer, self.learner.reference_scorer):
            if scorer is not None:
                release_around_each_call(scorer)
        max_len = config.prompt.max_prompt_tokens + config.generation.max_new_tokens
        self.engine = make_engine(config.generation, engine_policy, self.device,
                                  seed=config.run.seed + 1_000_003 * ranks.rank,
                                  max_model_len=max_len)
        self._say(f"generation engine: {type(self.engine).__name__}")
        if checkpoint is not None:
            self._restore(checkpoint)
        elif config.model.init_checkpoint is not None:
            self._sync_engine()  # an engine that loaded the weights from disk
        if ranks.main:
            (self.run_dir / "config.json").write_text(
                json.dumps(config.to_dict(), indent=2), encoding="utf-8")
        if not config.run.eval_only:
            self._say(f"building {self.group_count * config.env.group_size} "
                      f"{config.env.env_id} envs ({config.env.backend} backend"
                      f"{', per rank' if ranks.distributed else ''})")
            self.vec_env = self._make_vec_env(config.env.kwargs(),
                                              self.group_count * config.env.group_size,
                                              config.env.group_size)
        if ranks.main:
            self.logger = MetricsLogger(
                self.run_dir, tensorboard=config.run.tensorboard, wandb=config.run.wandb,
                wandb_project=config.run.wandb_project, config=config.to_dict(),
                truncate_after=self.start_iteration if config.run.resume else None)

    def _restore(self, checkpoint: Path) -> None:
        """Load ``checkpoint`` (either format, any number of ranks it was saved from)."""
        config = self.config
        optimizer = config.run.resume
        folder = resolve_checkpoint(checkpoint)
        # before any tensor is read: adapters on another base model, or other adapters
        check_model_identity(folder, checkpoint_meta(folder).get("model"),
                             self.learner.model_identity)
        sharded = is_sharded(folder)
        if sharded:
            payload = load_sharded_checkpoint(folder, self.learner.sharded_state(
                optimizer=optimizer), optimizer=optimizer)
        else:
            payload = load_checkpoint(folder, map_location=self.device, optimizer=optimizer)
        try:
            if sharded:
                self.learner.load_sharded_state(payload["learner"])
            else:
                self.learner.load_trainable_state(payload["learner"])
        except (ValueError, RuntimeError) as error:  # names or shapes that do not fit
            raise CheckpointError(f"{folder} does not fit this run's model: {error}") from None
        if payload["rng"] is not None:
            restore_rng_states(payload["rng"])
        self.start_iteration = int(payload["iteration"])
        self._sync_engine()
        verb = "resumed" if config.run.resume else "evaluating"
        saved = payload["meta"].get("world_size", 1)
        self._say(f"{verb} {self.run_dir} at iteration {self.start_iteration} from "
                  f"checkpoint {payload['path']}"
                  + (f" (saved by {saved} ranks)" if saved != self.ranks.world_size else ""))

    def _sync_engine(self) -> None:
        """Give the engine the policy's current weights (through the mirror when the
        policy is sharded)."""
        if self.mirror is not None:
            self.mirror.refresh(self.policy.model)
            self.engine.sync_weights(self.mirror.model)
        else:
            self.engine.sync_weights(self.policy.model)

    def _say(self, message: str) -> None:
        if self.progress:
            print(f"[agentgym] {message}", flush=True)

    def _make_vec_env(self, kwargs: dict[str, Any], num_envs: int, group_size: int) -> Any:
        from agentgym.vector import make_vector_env

        env = self.config.env
        if env.backend == "ray" and env.ray_address is not None:
            from agentgym.vector.ray_backend import connect_ray

            connect_ray(env.ray_address)
        return make_vector_env(env.env_id, num_envs, group_size=group_size,
                               backend=env.backend, num_workers=env.num_workers,
                               step_timeout=env.step_timeout, **kwargs)

    def _sample(self, iteration: int) -> tuple[StepBatch, StepBatch, dict[str, float]]:
        """``(rollout, batch, metrics)``: the iteration's rollout, the part of it to train
        on, and dynamic sampling's counts (``learner.dynamic_sampling``: rollouts of fresh
        groups until enough groups with varied returns are kept,
        :mod:`algorithms.dynamic_sampling`; without it the rollout is the batch)."""
        config = self.config
        if not config.learner.dynamic_sampling:
            rollout = self._rollout(iteration)
            return rollout, rollout, {}
        sample = sample_until_full(
            lambda round_: self._rollout(iteration, round_),
            num_groups=config.env.num_groups, group_size=config.env.group_size,
            max_rollouts=config.learner.dynamic_sampling_max_rollouts,
            pad_id=int(self.policy.tokenizer.pad_token_id))
        return sample.sampled, sample.batch, {
            "rollout/dynamic_sampling_rollouts": float(sample.rollouts),
            "rollout/groups_sampled": float(sample.groups_sampled),
            "rollout/groups_kept": float(sample.groups_kept)}

    def _rollout(self, iteration: int, round_: int = 0) -> StepBatch:
        """The iteration's training rollout (its ``round_``-th with dynamic sampling), tried
        again (new reset seed) when no env made a single step, up to
        ``run.rollout_retries`` times."""
        config = self.config
        retries = config.run.rollout_retries
        # sampled at the temperature the learner scores at (Learner.temperature)
        settings = self._settings(temperature=self.learner.temperature,
                                  group_size=config.env.group_size,
                                  bootstrap=config.bootstrap_truncated)
        attempt = 0
        while True:
            seed = iteration_seed(config.run.seed, iteration, 0, attempt, round_)
            try:
                with _tqdm(self.bars, total=config.env.max_steps, leave=False,
                           desc=f"iter {iteration + 1} rollout"
                           f"{f' {round_ + 1}' if round_ else ''} (turns)") as bar:
                    mine: StepBatch | str = collect_rollout(
                        self.vec_env, self.engine, self.policy.tokenizer, settings,
                        group_task_ids=None, seed=seed, progress=bar,
                        group_offset=self.group_first)
            except NoStepsError as error:
                mine = str(error)
            # every rank sees every block's outcome, so all decide alike
            blocks = distributed.all_gather_objects((self.group_first, mine), self.ranks)
            done = [(first, batch) for first, batch in blocks if not isinstance(batch, str)]
            if done:
                return concat_batches([b for _, b in done], [f for f, _ in done],
                                      config.env.group_size,
                                      int(self.policy.tokenizer.pad_token_id))
            error = NoStepsError(blocks[0][1])
            if attempt == retries:
                raise error
            attempt += 1
            self._say(f"iteration {iteration + 1}: {error}; rollout again "
                      f"({attempt}/{retries})")

    def _settings(self, *, temperature: float, group_size: int,
                  bootstrap: bool) -> RolloutSettings:
        config = self.config
        return RolloutSettings(group_size=group_size, max_steps=config.env.max_steps,
                               temperature=temperature,
                               max_new_tokens=config.generation.max_new_tokens,
                               invalid_action_penalty=config.env.penalty(),
                               prompt=config.prompt, keep_bootstrap_prompts=bootstrap,
                               stop=config.stop_strings)

    # ------------------------------------------------------------------ one iteration
    def train_iteration(self, iteration: int) -> dict[str, float]:
        """Run iteration ``iteration`` (0-based); return its metrics.

        Rollout metrics cover the whole rollout (every rollout with
        ``learner.dynamic_sampling``); the update uses
        :meth:`~algorithms.learner.Learner.training_batch` of it (of its kept groups with
        dynamic sampling; ``update/steps`` rows),
        and is skipped when that is empty (every trajectory ended on an env error).
        ``last_batch`` is the batch trained on, scored (unscored and empty when the
        update was skipped because every trajectory crashed).
        """
        config = self.config
        learner = self.learner
        timings: dict[str, float] = {}
        progress = self.bars

        @contextmanager
        def phase(name: str):
            start = time.perf_counter()
            release_freed_memory()  # what the step before freed (algorithms.memory)
            yield
            release_freed_memory()
            timings[f"time/{name}"] = time.perf_counter() - start

        with phase("rollout"):
            rollout, sampled_batch, sampling = self._sample(iteration)
            self.engine.release()
        # GiGPO/GRPO leave out trajectories that ended on an env error (learner docstring).
        batch = learner.training_batch(sampled_batch)
        signals = None
        stats: dict[str, float] = {}
        if len(batch):
            with phase("log_probs"):
                with _tqdm(progress, total=learner.score_passes(batch), leave=False,
                           desc=f"iter {iteration + 1} log-probs (micro-batches)") as bar:
                    batch = learner.score(
                        batch, progress=bar,
                        with_old_log_probs=not learner.single_pass(batch))
            with phase("advantages"):
                signals = learner.advantages(batch)
            with phase("update"):
                lr = config.learner.lr * warmup_factor(iteration, config.run.iterations,
                                                       config.learner.lr_warmup_ratio)
                learner.set_policy_lr(lr)
                with _tqdm(progress, total=learner.micro_batches_per_update(batch),
                           leave=False,
                           desc=f"iter {iteration + 1} update (micro-batches)") as bar:
                    stats = learner.update(batch, signals,
                                           seed=iteration_seed(config.run.seed, iteration, 1),
                                           progress=bar)
            with phase("weight_sync"):
                self._sync_engine()
        else:
            self._say(f"iteration {iteration + 1}: every trajectory ended on an env error; "
                      "nothing to train on, the update is skipped")
            for name in ("log_probs", "advantages", "update", "weight_sync"):
                timings[f"time/{name}"] = 0.0
        metrics = rollout_metrics(rollout)
        metrics.update(sampling)
        metrics["update/steps"] = float(len(batch))
        if signals is not None:
            metrics.update(advantage_metrics(signals.advantages))
            if signals.step_group_ids is not None:
                metrics.update(step_group_metrics(signals.step_group_ids))
                metrics.update(gigpo_term_metrics(signals.episode, signals.step,
                                                  signals.step_group_ids))
        metrics.update({f"update/{k}": v for k, v in stats.items()})
        if stats:
            metrics["update/lr"] = lr
        metrics.update(timings)
        generated = float(rollout.response_mask.sum())
        metrics["throughput/rollout_tokens_per_s"] = generated / max(timings["time/rollout"],
                                                                     1e-9)
        metrics["throughput/update_tokens_per_s"] = stats.get("update_tokens", 0.0) / max(
            timings["time/update"], 1e-9)
        self.last_batch = batch
        if not self.ranks.main:
            return metrics
        self._write_records("train", iteration + 1, trajectory_records(
            rollout, self.policy.tokenizer, iteration=iteration + 1, split="train",
            limit=config.run.record_trajectories, trained=batch, signals=signals),
            num_trajectories=rollout.num_trajectories)
        return metrics

    def _write_records(self, split: str, iteration: int, records: list[dict[str, Any]],
                       num_trajectories: int) -> None:
        if not records:
            return
        write_records(records_path(self.run_dir, split, iteration), records,
                      {"split": split, "iteration": iteration, "algo": self.config.algo,
                       "env_id": self.config.env.env_id,
                       "rollout_trajectories": num_trajectories})

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, iteration: int) -> dict[str, float]:
        """Play ``env.eval_episodes`` held-out tasks once each; write per-task-type results.

        Tasks are the first ``eval_episodes`` ids of the evaluation env (built with
        ``env.eval_kwargs()``), played with ``generation.eval_temperature``. Episodes
        that ended on an env error are listed (``env_error``) and counted
        (``env_errors``) but left out of success, return and length, as in
        :mod:`algorithms.metrics`.
        """
        import gymnasium as gym

        import agentgym  # noqa: F401  (registers the ids)

        config = self.config
        probe = gym.make(config.env.env_id, **config.env.eval_kwargs())
        try:
            task_ids = list(probe.unwrapped.task_ids)[: config.env.eval_episodes]
        finally:
            probe.close()
        if not task_ids:
            raise RuntimeError(f"the evaluation env {config.env.env_id} has no tasks")
        chunk = max(1, min(len(task_ids), config.env.num_groups * config.env.group_size))
        # chunks are dealt to the ranks in turn; each rank plays its own
        starts = list(range(0, len(task_ids), chunk))[self.ranks.rank::self.ranks.world_size]
        parts: list[tuple[int, list[dict[str, Any]], list[dict[str, Any]]]] = []
        settings = self._settings(temperature=config.generation.eval_temperature, group_size=1,
                                  bootstrap=False)
        eval_env = self._make_vec_env(config.env.eval_kwargs(), chunk, 1) if starts else None
        try:
            with _tqdm(self.bars, total=len(task_ids), leave=False,
                       desc="evaluation (episodes)") as bar:
                for start in starts:
                    part = task_ids[start: start + chunk]
                    part = part + [part[-1]] * (chunk - len(part))
                    keep = min(chunk, len(task_ids) - start)
                    try:
                        batch = collect_rollout(eval_env, self.engine, self.policy.tokenizer,
                                                settings, group_task_ids=part,
                                                seed=iteration_seed(config.run.seed,
                                                                    iteration, 2 + start))
                    except NoStepsError as error:  # every episode of the chunk crashed
                        self._say(f"evaluation: {error}")
                        batch = None
                    chunk_batches = [(batch, part[:keep])]
                    parts.append((start, _eval_rows(chunk_batches), _eval_records(
                        chunk_batches, self.policy.tokenizer, iteration,
                        config.run.record_trajectories, offset=start)))
                    bar.update(keep)
        finally:
            if eval_env is not None:
                eval_env.close()
            self.engine.release()
        gathered = sorted((item for rank_parts in
                           distributed.all_gather_objects(parts, self.ranks)
                           for item in rank_parts), key=lambda item: item[0])
        results = _eval_summary([row for _, rows, _ in gathered for row in rows])
        metrics = {"eval/success": _nan(results["success"]),
                   "eval/return": _nan(results["return"]),
                   "eval/episode_length": _nan(results["episode_length"]),
                   "eval/format_error_rate": _nan(results["format_error_rate"]),
                   "eval/invalid_action_rate": _nan(results["invalid_action_rate"]),
                   "eval/env_errors": float(results["env_errors"])}
        for task_type, row in results["per_task_type"].items():
            metrics[f"eval/success/{task_type}"] = row["success"]
        if not self.ranks.main:
            return metrics
        records = [record for _, _, chunk_records in gathered for record in chunk_records]
        self._write_records("eval", iteration, records[: config.run.record_trajectories],
                            num_trajectories=len(task_ids))
        out = self.run_dir / "eval"
        out.mkdir(parents=True, exist_ok=True)
        (out / f"iter_{iteration:06d}.json").write_text(json.dumps(results, indent=2),
                                                        encoding="utf-8")
        return metrics

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[str, float]:
        """Train (or evaluate) as configured; return the last metrics.

        Raises:
            Terminated: a SIGTERM stopped the run (see :mod:`algorithms.termination`):
                after the iteration in progress, with a checkpoint of it, when that
                iteration ended within ``run.term_grace`` seconds; else at once.
        """
        config = self.config
        with TermSignal(config.run.term_grace, announce=self.progress) as term:
            if self.learner is None:
                self.setup()
            try:
                return self._loop(term)
            finally:
                self.close()

    def _loop(self, term: TermSignal) -> dict[str, float]:
        config = self.config
        last: dict[str, float] = {}
        if config.run.eval_only:
            last = self.evaluate(self.start_iteration)
            if self.logger is not None:
                self.logger.log(self.start_iteration, last)
            return last
        started = time.perf_counter()
        saved: Path | None = None  # the checkpoint of the last completed iteration, if any
        if config.run.eval_before_train and self.start_iteration == 0:
            last = self.evaluate(0)
            if self.logger is not None:
                self.logger.log(0, last)
        term.loop_started()
        with _tqdm(self.bars, total=config.run.iterations, initial=self.start_iteration,
                   desc="training (iterations)") as bar:
            for iteration in range(self.start_iteration, config.run.iterations):
                # every rank stops before the same iteration (a rank that saw no SIGTERM
                # follows the others)
                if iteration > self.start_iteration and self._any_rank(term.requested):
                    raise Terminated(checkpoint=saved or self.save(iteration, last),
                                     iteration=iteration)
                term.iteration_started(iteration)
                last = self.train_iteration(iteration)
                done = iteration + 1
                if config.run.eval_every and done % config.run.eval_every == 0:
                    last.update(self.evaluate(done))
                if self.logger is not None:
                    self.logger.log(done, last)
                term.iteration_finished()
                bar.update(1)
                bar.set_postfix(success=f"{last['rollout/success']:.2f}",
                                ret=f"{last['rollout/return']:.2f}")
                if not self.bars:
                    self._say(iteration_line(done, config.run.iterations,
                                             self.start_iteration,
                                             time.perf_counter() - started, last))
                saved = None
                if done % config.run.save_every == 0 or done == config.run.iterations:
                    saved = self.save(done, last)
                if self.logger is not None:
                    plot_curves(self.logger.path, self.run_dir / "curves.png")
        return last

    def _any_rank(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank (a collective under torchrun)."""
        if not self.ranks.distributed:
            return flag
        return any(distributed.all_gather_objects(flag, self.ranks))

    def save(self, iteration: int, metrics: dict[str, float]) -> Path:
        """Write an atomic checkpoint after ``iteration`` completed iterations.

        Metrics without a value (NaN: say success when every episode crashed) are
        stored as ``null``, so that ``meta.json`` stays valid JSON.
        """
        finite = {key: value if not isinstance(value, float) or math.isfinite(value) else None
                  for key, value in metrics.items()}
        score = finite.get("eval/success")
        # every rank computes the identity (its hash gathers sharded weights: a collective)
        meta = {"config": self.config.to_dict(), "metrics": finite,
                "model": self.learner.model_identity}
        keep = self.config.run.keep_checkpoints
        if self.ranks.distributed:
            state = self.learner.sharded_state(optimizer=self.config.run.save_optimizer)
            path = save_sharded_checkpoint(self.run_dir, iteration, state["weights"],
                                           state["optimizer"], meta, ranks=self.ranks,
                                           keep=keep, score=score)
            if self.ranks.main:
                sizes = json.loads((path / "meta.json").read_text(encoding="utf-8"))["sizes"]
                optimizer = sum(v for k, v in sizes.items() if "/optimizer/" in k)
                self._say(f"checkpoint {path}: {_megabytes(checkpoint_size(path))} "
                          f"(sharded by {self.ranks.world_size} ranks; optimizer state "
                          f"{_megabytes(optimizer)})")
            return path
        state = self.learner.trainable_state()
        if not self.config.run.save_optimizer:
            state = {key: value for key, value in state.items() if key in WEIGHT_SECTIONS}
        path = save_checkpoint(self.run_dir, iteration, state, meta, keep=keep, score=score)
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        sizes = meta["sizes"]
        optimizer = sizes.get("optimizer.safetensors", 0)
        kept = ("kept in the newest checkpoint only" if optimizer else
                "not saved: --run.no-save-optimizer")
        weights = "LoRA adapter weights" if self.policy.lora else "weights"
        self._say(f"checkpoint {path}: {_megabytes(checkpoint_size(path))} "
                  f"({weights} {_megabytes(sizes['weights.safetensors'])} in "
                  f"{'/'.join(meta['weights_dtype'])}, optimizer state "
                  f"{_megabytes(optimizer)}, {kept})")
        return path

    def close(self) -> None:
        """Close the envs, the logger and the engine (a vLLM engine shuts down here, while
        a torchrun job's process group still exists)."""
        if self.vec_env is not None:
            self.vec_env.close()
            self.vec_env = None
        if self.logger is not None:
            self.logger.close()
        if self.engine is not None and hasattr(self.engine, "close"):
            self.engine.close()
            self.engine = None


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _eval_records(batches: list[tuple[StepBatch | None, list[str]]], tokenizer: Any,
                  iteration: int, limit: int, offset: int = 0) -> list[dict[str, Any]]:
    """Records of the first ``limit`` evaluation episodes, numbered across chunks from
    ``offset`` (the first chunk's first episode)."""
    records: list[dict[str, Any]] = []
    for batch, tasks in batches:
        if batch is not None and len(records) < limit:
            # the chunk's first len(tasks) trajectories are its own (the rest repeat)
            part = trajectory_records(batch, tokenizer, iteration=iteration, split="eval",
                                      limit=min(limit - len(records), len(tasks)))
            for record in part:
                record["traj_id"] += offset
                record["group"] = record["traj_id"]
            records += part
        offset += len(tasks)
    return records


def _config_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``"section.field: saved X, now Y"`` for each setting outside ``run`` that differs."""
    changes = []
    for name in sorted(set(saved) | set(current)):
        if name == "run":
            continue
        old, new = saved.get(name), current.get(name)
        if isinstance(old, dict) and isinstance(new, dict):
            changes += [f"{name}.{key}: saved {old.get(key)!r}, now {new.get(key)!r}"
                        for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
        elif old != new:
            changes.append(f"{name}: saved {old!r}, now {new!r}")
    return changes


def _crashed_eval_row(task_id: str) -> dict[str, Any]:
    """The row of an evaluation episode that failed in its reset or first step."""
    return {"task_id": task_id, "task_type": "", "success": False, "return": 0.0,
            "length": 0, "format_errors": 0, "invalid_actions": 0, "env_error": True}


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _mean_or_none(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _step_rate(rows: list[dict[str, Any]], key: str) -> float | None:
    """The share of the steps of ``rows`` counted in ``key`` (as :func:`rollout_metrics`
    rates, over steps, not episodes)."""
    steps = sum(r["length"] for r in rows)
    return sum(r[key] for r in rows) / steps if steps else None


def _eval_rows(batches: list[tuple[StepBatch | None, list[str]]]) -> list[dict[str, Any]]:
    """One row per evaluation episode of ``batches``, which pairs each chunk's batch
    (``None``: no env of the chunk made a step) with the task ids of its first
    trajectories (the others repeat a task to fill the chunk)."""
    rows: list[dict[str, Any]] = []
    for batch, tasks in batches:
        if batch is None:
            rows += [_crashed_eval_row(task_id) for task_id in tasks]
            continue
        table = trajectory_table(batch)
        found = {int(t): i for i, t in enumerate(table["traj_ids"])}
        first = {int(t): i for i, t in reversed(list(enumerate(batch.traj_ids)))}
        for traj, task_id in enumerate(tasks):
            index = found.get(traj)
            if index is None:  # failed in its reset or first step: no steps, no outcome
                rows.append(_crashed_eval_row(task_id))
                continue
            rows.append({"task_id": batch.task_ids[first[traj]],
                         "task_type": str(table["task_types"][index]) or "all",
                         "success": bool(table["success"][index]),
                         "return": float(table["returns"][index]),
                         "length": int(table["lengths"][index]),
                         "format_errors": int(table["format_errors"][index]),
                         "invalid_actions": int(table["invalid_actions"][index]),
                         "env_error": bool(table["env_error"][index])})
    return rows


def _eval_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Success, return and length over the episodes that ended, overall and per task
    type, with the rows themselves (``tasks``)."""
    ended = [r for r in rows if not r["env_error"]]
    per_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in ended:
        per_type[row["task_type"]].append(row)
    return {
        "episodes": len(rows),
        "env_errors": len(rows) - len(ended),
        "success": _mean_or_none([r["success"] for r in ended]),
        "return": _mean_or_none([r["return"] for r in ended]),
        "episode_length": _mean_or_none([r["length"] for r in ended]),
        "format_error_rate": _step_rate(ended, "format_errors"),
        "invalid_action_rate": _step_rate(ended, "invalid_actions"),
        "per_task_type": {
            task_type: {"episodes": len(group),
                        "success": float(np.mean([r["success"] for r in group])),
                        "return": float(np.mean([r["return"] for r in group]))}
            for task_type, group in sorted(per_type.items())
        },
        "tasks": rows,
    }
