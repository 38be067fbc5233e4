"""An iteration's training data: the rollout of this rank's groups, gathered across ranks,
tried again when no env made a step, and dynamic sampling's extra rollouts.

:class:`Sampler` holds what a rollout needs (envs, engine, tokenizer, this rank's block of
groups); :func:`rollout_settings` turns the config into one rollout's settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from algorithms.agent.dynamic_sampling import sample_until_full
from algorithms.agent.rollout import NoStepsError, RolloutSettings, collect_rollout
from algorithms.agent.step_batch import StepBatch, concat_batches
from algorithms.config import TrainConfig
from algorithms.runs import distributed
from algorithms.runs.console import progress_bar
from algorithms.runs.distributed import Ranks
from algorithms.runs.seeds import iteration_seed


def rollout_settings(config: TrainConfig, *, temperature: float, group_size: int,
                     bootstrap: bool, vision: Any = None) -> RolloutSettings:
    """One rollout's settings from ``config`` (steps, tokens, penalty, prompt, stop
    strings; the env's tools in the ``tool-call`` format) at ``temperature``,
    ``group_size`` trajectories per task, keeping the
    prompts that bootstrap truncated trajectories when ``bootstrap``; ``vision``: the
    policy's :class:`~algorithms.engines.vision.VisionProcessor` (``None``: text)."""
    tools = None
    if config.prompt.action_format == "tool-call":
        from agentgym.tools import env_tools

        tools = env_tools(config.env.env_id, config.env.kwargs())
    return RolloutSettings(group_size=group_size, max_steps=config.env.max_steps,
                           temperature=temperature,
                           max_new_tokens=config.generation.max_new_tokens,
                           invalid_action_penalty=config.env.penalty(),
                           prompt=config.prompt, keep_bootstrap_prompts=bootstrap,
                           stop=config.stop_strings, vision=vision, tools=tools)


@dataclass
class Sampler:
    """Rolls out this rank's block of groups (``group_first`` onwards) and gathers every
    rank's blocks into the global batch, in the order one process would produce.

    Attributes:
        config: the run's config.
        vec_env: this rank's vector env (``group_count * group_size`` envs).
        engine: the generation engine.
        tokenizer: the policy's tokenizer.
        temperature: the sampling temperature (the one the learner scores at).
        ranks: this process's place in a torchrun job.
        group_first: the global index of this rank's first group.
        bars: draw progress bars.
        say: prints a message for the user.
        vision: the policy's :class:`~algorithms.engines.vision.VisionProcessor`, or
            ``None`` (a text policy).
    """

    config: TrainConfig
    vec_env: Any
    engine: Any
    tokenizer: Any
    temperature: float
    ranks: Ranks
    group_first: int
    bars: bool
    say: Callable[[str], None]
    vision: Any = None

    def sample(self, iteration: int, *, collected: StepBatch | str | None = None,
               before_retry: Callable[[], None] | None = None
               ) -> tuple[StepBatch, StepBatch, dict[str, float]]:
        """``(rollout, batch, metrics)``: the iteration's rollout, the part of it to train
        on, and dynamic sampling's counts (``learner.dynamic_sampling``: rollouts of fresh
        groups until enough groups with varied returns are kept,
        :mod:`algorithms.agent.dynamic_sampling`; without it the rollout is the batch).

        Args:
            iteration: the iteration (0-based): its seeds.
            collected: this rank's first try, already made by :meth:`collect` (the
                overlapped rollout, :mod:`algorithms.training.overlap`), or ``None``.
            before_retry: called before a rollout tries again (the overlapped rollout
                waits there until the envs and the engine are free).
        """
        config = self.config
        if not config.learner.dynamic_sampling:
            rollout = self.rollout(iteration, collected=collected, before_retry=before_retry)
            return rollout, rollout, {}
        if collected is not None:
            raise ValueError("dynamic sampling cannot start from a collected rollout")
        sample = sample_until_full(
            lambda round_: self.rollout(iteration, round_),
            num_groups=config.env.num_groups, group_size=config.env.group_size,
            max_rollouts=config.learner.dynamic_sampling_max_rollouts,
            pad_id=int(self.tokenizer.pad_token_id))
        return sample.sampled, sample.batch, {
            "rollout/dynamic_sampling_rollouts": float(sample.rollouts),
            "rollout/groups_sampled": float(sample.groups_sampled),
            "rollout/groups_kept": float(sample.groups_kept)}

    def collect(self, iteration: int, round_: int = 0, attempt: int = 0, *,
                bars: bool | None = None) -> StepBatch | str:
        """This rank's rollout of its groups (no collective call: it may run in a
        background thread), or the message of the :class:`NoStepsError` it raised.

        Args:
            iteration, round_, attempt: seed the envs' resets and the sampling.
            bars: draw the rollout's progress bar (default: :attr:`bars`).
        """
        settings = rollout_settings(self.config, temperature=self.temperature,
                                    group_size=self.config.env.group_size,
                                    bootstrap=self.config.bootstrap_truncated,
                                    vision=self.vision)
        seed = iteration_seed(self.config.run.seed, iteration, 0, attempt, round_)
        try:
            with progress_bar(self.bars if bars is None else bars,
                              total=self.config.env.max_steps, leave=False,
                              desc=f"iter {iteration + 1} rollout"
                              f"{f' {round_ + 1}' if round_ else ''} (turns)") as bar:
                return collect_rollout(self.vec_env, self.engine, self.tokenizer, settings,
                                       group_task_ids=None, seed=seed, progress=bar,
                                       group_offset=self.group_first)
        except NoStepsError as error:
            return str(error)

    def rollout(self, iteration: int, round_: int = 0, *,
                collected: StepBatch | str | None = None,
                before_retry: Callable[[], None] | None = None) -> StepBatch:
        """The iteration's training rollout (its ``round_``-th with dynamic sampling), tried
        again (new reset seed) when no env made a single step, up to
        ``run.rollout_retries`` times. ``collected``: this rank's first try, made already
        (:meth:`collect`); ``before_retry``: called before each new try.

        Raises:
            NoStepsError: no env of any rank made a step in the last try.
        """
        config = self.config
        retries = config.run.rollout_retries
        attempt = 0
        while True:
            mine = (collected if attempt == 0 and collected is not None
                    else self.collect(iteration, round_, attempt))
            # every rank sees every block's outcome, so all decide alike
            blocks = distributed.all_gather_objects((self.group_first, mine), self.ranks)
            done = [(first, batch) for first, batch in blocks if not isinstance(batch, str)]
            if done:
                return concat_batches([b for _, b in done], [f for f, _ in done],
                                      config.env.group_size, int(self.tokenizer.pad_token_id))
            error = NoStepsError(blocks[0][1])
            if attempt == retries:
                raise error
            attempt += 1
            self.say(f"iteration {iteration + 1}: {error}; rollout again "
                     f"({attempt}/{retries})")
            if before_retry is not None:
                before_retry()
