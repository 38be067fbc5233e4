"""The training run: rollout -> scores -> advantages -> update, with logging and checkpoints.

:class:`Trainer` owns the run folder::

    runs/<run_name>/config.json          the resolved config
    runs/<run_name>/metrics.jsonl        one record per iteration (and per evaluation)
    runs/<run_name>/tensorboard/         TensorBoard event files
    runs/<run_name>/curves.png           success, return, error rates, episode length
    runs/<run_name>/checkpoints/         atomic checkpoints (see algorithms.runs.checkpoint)
    runs/<run_name>/records/             rollout records (see algorithms.agent.records)
    runs/<run_name>/eval/iter_XXXXXX.json  held-out results per task type

When a folder may be used, and what a failed setup leaves: :mod:`algorithms.runs.run_folder`.
Held-out evaluation: :mod:`algorithms.agent.evaluation`; an iteration's phases after its
rollout: :mod:`algorithms.training.update_phases`. Every seed of iteration ``k`` is
derived from ``(run.seed, k)`` (:mod:`algorithms.runs.seeds`), so resuming from the checkpoint
after iteration ``k`` replays iteration ``k + 1`` exactly as an uninterrupted run would.

Under ``torchrun`` (:mod:`algorithms.runs.distributed`) every rank runs a :class:`Trainer`:
each rolls out its block of the task groups with its own envs and engine, the batches are
gathered, and the sharded learner updates on the global batch. Rank 0 alone decides about
the run folder, prints, logs, plots and writes records; checkpoints are written by all
ranks together (``torch.distributed.checkpoint``, see :mod:`algorithms.runs.checkpoint`), and
evaluation episodes are split between the ranks.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from agentgym import registration
from algorithms.agent.evaluation import evaluate
from algorithms.agent.metrics import (
    MetricsLogger,
    iteration_metrics,
    plot_curves,
    run_logger,
)
from algorithms.agent.records import trajectory_records, write_run_records
from algorithms.agent.sampling import Sampler, rollout_settings
from algorithms.agent.step_batch import StepBatch
from algorithms.agent.tool_prompts import tool_call_note
from algorithms.config import TrainConfig
from algorithms.engines.hf_worker import trainable_names
from algorithms.runs import distributed
from algorithms.runs.console import (
    iteration_figures,
    iteration_line,
    on_terminal,
    progress_bar,
    prompt_cut_note,
    quiet_dependency_bars,
    torchrun_line,
)
from algorithms.runs.distributed import SINGLE, Ranks, WeightMirror
from algorithms.runs.run_checkpoint import (
    learner_state_copy,
    restore_run_checkpoint,
    restored_message,
    save_run_checkpoint,
)
from algorithms.runs.run_folder import (
    FolderLock,
    default_run_dir,
    take_run_folder,
)
from algorithms.runs.termination import StopNow, TermSignal
from algorithms.training.batch_scoring import worker_reference_log_probs
from algorithms.training.build import (
    VecEnvFactory,
    build_learner,
    build_policy,
    build_samplers,
    build_vec_env,
    check_model_sources,
    check_sft_stage_ran,
    engine_source,
    make_run_engine,
    sync_engine_weights,
    vector_env_factory,
)
from algorithms.training.learner import Learner
from algorithms.training.overlap import OverlappedSampler
from algorithms.training.policy import (
    Policy,
    resolve_device,
)
from algorithms.training.run_end import abandon_setup, close_run, stopped, terminated
from algorithms.training.update_phases import UPDATE_PHASES, learn, timed


class Trainer:
    """Runs training or evaluation for one :class:`~algorithms.config.TrainConfig`.

    Args:
        config: the resolved config.
        policy: an already loaded policy; by default loaded from ``config.model``.
        engine: a generation engine (anything with the engine protocol of
            :mod:`algorithms.engines`); by default built from ``config.generation``.
        make_vec_env: ``(env kwargs, num_envs, group_size) -> vector env``; by default
            :func:`~algorithms.training.build.vector_env_factory` of ``config.env``.
        run_dir: the run folder; by default ``run.output_dir / run_name``.
        ranks: this process's place in a torchrun job (default: one process).
    """

    def __init__(self, config: TrainConfig, *, policy: Policy | None = None,
                 engine: Any = None, make_vec_env: VecEnvFactory | None = None,
                 run_dir: Path | None = None, ranks: Ranks = SINGLE):
        self.config = config.validate()
        check_sft_stage_ran(config)
        self.ranks = ranks
        self.device = distributed.training_device(ranks, resolve_device(config.run.device))
        self.run_dir = Path(run_dir) if run_dir is not None else default_run_dir(config)
        self._policy = policy
        self.policy: Policy | None = None
        self.learner: Learner | None = None
        self.engine: Any = engine
        self.make_vec_env = make_vec_env if make_vec_env is not None else \
            vector_env_factory(config.env)
        self.mirror: WeightMirror | None = None
        self.vec_env: Any = None
        self.sampler: Sampler | None = None
        self.overlap: OverlappedSampler | None = None
        self.logger: MetricsLogger | None = None
        self.start_iteration = 0
        self.resumed_from: Path | None = None  # the checkpoint a resumed run started from
        self.folder_lock: FolderLock | None = None  # held from setup() to close()
        self.term = TermSignal(0.0)  # marks the iteration's phases (run() installs one)
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
    def setup(self) -> None:
        """Check the model source and the run folder, load the model, build learner,
        engine and envs; restore a checkpoint if asked.

        A setup that fails in a new run leaves no run files behind (see
        :func:`~algorithms.runs.run_folder.discard_new_run`), so the same command can be tried again."""
        config = self.config
        check_model_sources(config, policy_given=self._policy is not None)
        self.folder_lock, checkpoint = take_run_folder(config, self.run_dir, self.ranks)
        try:
            self._build(checkpoint)
        except BaseException:
            abandon_setup(self)  # a new run's files go, then the folder is given up
            raise

    def _build(self, checkpoint: Path | None) -> None:
        """:meth:`setup` after the run folder was checked."""
        config = self.config
        ranks = self.ranks
        kwargs = config.env.eval_kwargs() if config.run.eval_only else config.env.kwargs()
        self._say(f"tasks: {registration.task_source(config.env.env_id, kwargs)}")
        if ranks.distributed:
            self._say(torchrun_line(ranks.world_size, self.device.type, self.group_first,
                                    self.group_count, config.env.num_groups))
        if ranks.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        if not self.bars:  # a log file: no bars redrawn by the libraries either
            quiet_dependency_bars()
        if config.run.torch_threads is not None:
            torch.set_num_threads(config.run.torch_threads)
        self.policy = build_policy(config, self.device, ranks, self._say, self._policy)
        # the engine's copy of the policy is taken before the learner shards it
        engine_policy, self.mirror = engine_source(config, self.policy, self.device, ranks)
        trainable = trainable_names(self.policy.model)  # named before the sharding
        self.learner = build_learner(self.policy, config, self.device, ranks)
        if self.engine is None:
            self.engine = make_run_engine(config, engine_policy, self.device, ranks,
                                          trainable=trainable)
        transport = getattr(self.engine, "weight_transport", None)
        self._say(f"generation engine: {type(self.engine).__name__}"
                  + (f" (weight sync: {transport})" if transport else "")
                  + tool_call_note(config, self.policy.tokenizer))
        if checkpoint is not None:
            self._restore(checkpoint)
        elif config.model.init_checkpoint is not None:
            self._sync_engine()  # an engine that loaded the weights from disk
        if ranks.main:
            (self.run_dir / "config.json").write_text(
                json.dumps(config.to_dict(), indent=2), encoding="utf-8")
        if not config.run.eval_only:
            self.vec_env = build_vec_env(config, self.make_vec_env, self.group_count, ranks,
                                         self._say)
            self.sampler, self.overlap = build_samplers(
                config, self.vec_env, self.engine, self.policy, self.learner.temperature,
                ranks, self.group_first, bars=self.bars, say=self._say,
                sync=self._sync_engine, version=self.start_iteration,
                reference_in_worker=self._reference_in_worker)
        if ranks.main:
            self.logger = run_logger(self.run_dir, config, self.start_iteration)

    def _restore(self, checkpoint: Path) -> None:
        """Load ``checkpoint`` (:func:`~algorithms.runs.run_checkpoint.restore_run_checkpoint`)
        and give the engine its weights."""
        payload = restore_run_checkpoint(self.learner, checkpoint, device=self.device,
                                         optimizer=self.config.run.resume)
        self.start_iteration = int(payload["iteration"])
        if self.config.run.resume:
            self.resumed_from = Path(payload["path"])
        self._sync_engine()
        self._say(restored_message(payload, self.run_dir, resume=self.config.run.resume,
                                   world_size=self.ranks.world_size))

    def _sync_engine(self) -> None:
        """Give the engine the policy's current weights (through the mirror when the
        policy is sharded)."""
        sync_engine_weights(self.engine, self.policy.model, self.mirror)

    def _reference_in_worker(self, block: StepBatch) -> StepBatch:
        """``block`` with the KL reference's log-probs, scored in the HF engine's worker as
        the learner would score them (``run.reference_in_worker``)."""
        ref = self.engine.call(worker_reference_log_probs, block,
                               micro_batch_size=self.config.learner.micro_batch_size,
                               temperature=self.learner.temperature)
        return block.with_scores(ref_log_probs=ref)

    def _say(self, message: str) -> None:
        if self.progress:
            print(f"[agentgym] {message}", flush=True)

    # ------------------------------------------------------------------ one iteration
    def train_iteration(self, iteration: int) -> dict[str, float]:
        """Run iteration ``iteration`` (0-based); return its metrics.

        Rollout metrics cover the whole rollout (every rollout with
        ``learner.dynamic_sampling``); the update uses
        :meth:`~algorithms.training.learner.Learner.training_batch` of it (of its kept groups with
        dynamic sampling; ``update/steps`` rows), and is skipped when that is empty (every
        trajectory ended on an env error). ``last_batch`` is the batch trained on, scored
        (unscored and empty when the update was skipped because every trajectory crashed).
        """
        began = time.perf_counter()
        timings: dict[str, float] = {}
        with timed("rollout", timings):
            if self.overlap is not None:  # the weights an iteration starts with: version i
                rollout, sampled, sampling = self.overlap.sample(iteration, iteration)
            else:
                rollout, sampled, sampling = self.sampler.sample(iteration)
                self.engine.release()
        # overlapped: the rollout's own time, the wait for it and the pipeline's weight sync
        overlap_times = {k: v for k, v in sampling.items() if k.startswith("time/")}
        sampling = {k: v for k, v in sampling.items() if not k.startswith("time/")}
        # overlapped, the engine gets new weights when its rollouts are done (overlap.py)
        sync = self._sync_engine if self.overlap is None else _no_sync
        # GiGPO/GRPO leave out trajectories that ended on an env error (learner docstring).
        batch = self.learner.training_batch(sampled)
        signals, stats, lr = None, {}, None
        self.term.phase("update")  # a SIGTERM from here on: finish, or fall back
        if len(batch):
            batch, signals, stats, lr = learn(
                self.learner, batch, self.config, iteration=iteration, timings=timings,
                sync_weights=sync, bars=self.bars,
                before_step=lambda: self.term.changing(lambda: learner_state_copy(
                    self.learner)))
        else:
            self._say(f"iteration {iteration + 1}: every trajectory ended on an env error; "
                      "nothing to train on, the update is skipped")
            timings.update({f"time/{name}": 0.0 for name in UPDATE_PHASES})
        self.term.phase("finish")
        timings.update(overlap_times)
        metrics = iteration_metrics(rollout, sampling, len(batch), signals, stats, lr, timings)
        self.last_batch = batch
        if self.ranks.main:
            write_run_records(self.run_dir, self.config, "train", iteration + 1,
                              trajectory_records(rollout, self.policy.tokenizer,
                                                 iteration=iteration + 1, split="train",
                                                 limit=self.config.run.record_trajectories,
                                                 trained=batch, signals=signals),
                              num_trajectories=rollout.num_trajectories)
        metrics["time/iteration"] = time.perf_counter() - began  # evaluation left out
        return metrics

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, iteration: int) -> dict[str, float]:
        """Play ``env.eval_episodes`` held-out tasks once each; write per-task-type
        results (:func:`algorithms.agent.evaluation.evaluate`)."""
        config = self.config
        settings = rollout_settings(config, temperature=config.generation.eval_temperature,
                                    group_size=1, bootstrap=False, vision=self.policy.vision)
        if self.overlap is not None:  # the engine, free of rollouts, with these weights
            self.overlap.engine_ready(iteration)
        return evaluate(config, self.engine, self.policy.tokenizer, settings,
                        self.make_vec_env, iteration=iteration, ranks=self.ranks,
                        run_dir=self.run_dir, bars=self.bars, say=self._say)

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[str, float]:
        """Train (or evaluate) as configured; return the last metrics.

        Raises:
            Terminated: a SIGTERM stopped the run, with a checkpoint of the newest state
                that holds together: the last finished update for a signal in a rollout,
                the iteration in progress when it ended within ``run.term_grace`` seconds,
                else the state before its update (:mod:`algorithms.runs.termination`).
        """
        config = self.config
        with TermSignal(config.run.term_grace, announce=self.progress,
                        mid_iteration=not self.ranks.distributed) as term:
            self.term = term
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
        # the checkpoint of the last completed iteration, if there is one
        saved: Path | None = self.resumed_from
        if config.run.eval_before_train and self.start_iteration == 0:
            last = self.evaluate(0)
            if self.logger is not None:
                self.logger.log(0, last)
        term.loop_started()
        untrained = 0  # iterations in a row with nothing to train on
        cut_said = False  # the first prompts cut to fit the budget are said in one line
        with progress_bar(self.bars, total=config.run.iterations,
                          initial=self.start_iteration, desc="training (iterations)") as bar:
            for iteration in range(self.start_iteration, config.run.iterations):
                # every rank stops before the same iteration (a rank that saw no SIGTERM
                # follows the others)
                if distributed.any_rank(term.requested, self.ranks):
                    raise terminated(self, iteration, saved, last)
                previous = last
                try:
                    term.iteration_started(iteration)
                    last = self.train_iteration(iteration)
                    done = iteration + 1
                    if config.run.eval_every and done % config.run.eval_every == 0:
                        term.phase("evaluation")
                        last.update(self.evaluate(done))
                        term.phase("finish")
                except StopNow as stop:
                    term.iteration_finished()  # a further SIGTERM cannot cut what follows
                    raise stopped(self, stop, saved, previous, last) from None
                if self.logger is not None:
                    self.logger.log(done, last)
                untrained = untrained + 1 if last["update/steps"] == 0 else 0
                check_untrained(untrained, done, config.run.max_untrained_iterations, last)
                term.iteration_finished()
                bar.update(1)
                bar.set_postfix(**iteration_figures(last))
                note = None if cut_said else prompt_cut_note(last, config.prompt, done)
                if note:
                    self._say(note)
                    cut_said = True
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

    def save(self, iteration: int, metrics: dict[str, float],
             state: dict[str, Any] | None = None) -> Path:
        """Write an atomic checkpoint after ``iteration`` completed iterations
        (:func:`~algorithms.runs.run_checkpoint.save_run_checkpoint`; ``state``: a copy
        taken earlier instead of the learner's state now) and say what it holds."""
        path, message = save_run_checkpoint(self.learner, self.config, self.run_dir,
                                            iteration, metrics, self.ranks, state=state)
        self._say(message)
        return path

    def close(self) -> None:
        """Close the envs, the logger and the engine, and give the run folder up
        (:func:`close_run`)."""
        close_run(self)


class UntrainedRunError(RuntimeError):
    """``run.max_untrained_iterations`` iterations in a row had nothing to train on (one
    line; ``train.py`` exits with status 1)."""


def check_untrained(untrained: int, done: int, limit: int, metrics: dict[str, float]
                    ) -> None:
    """Stop a run whose last ``untrained`` iterations (the last one: ``done``) trained on
    nothing, when that reaches ``limit`` (``run.max_untrained_iterations``; 0: never).

    Raises:
        UntrainedRunError: naming the iterations and the env errors of the last one.
    """
    if not limit or untrained < limit:
        return
    first = done - untrained + 1
    errors = int(metrics.get("rollout/env_errors", 0))
    raise UntrainedRunError(
        f"iterations {first}-{done}: every trajectory ended on an env error ({errors} "
        f"episodes in iteration {done}), so nothing was trained on {untrained} times in a "
        f"row (--run.max-untrained-iterations {limit}); "
        "the envs' errors are logged above; python -m agentgym.check ENV_ID tests the env")


def _no_sync() -> None:
    """The weight sync of an overlapped iteration: the pipeline's (module docstring)."""
