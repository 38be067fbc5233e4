"""Supervised warm start: ``python train.py --algo sft`` (and ``python -m algorithms.sft.trainer``).

The policy is fine-tuned on expert trajectories tokenized exactly as the RL stage builds
its prompts (:func:`algorithms.sft.data.build_examples`): same layout (window or
transcript), template, chat template and response prefix. The loss is the cross-entropy
of the response tokens only, averaged over the batch's response tokens (token mean):

    loss = - sum_{t in responses} log p(x_t | x_<t) / (number of response tokens)

Prompt tokens (and, in the transcript layout, the env's text) are context, never
targets. LoRA or full fine-tuning follows ``model.lora_rank``; AdamW at ``sft.lr`` with
``learner.weight_decay`` and clipping at ``learner.max_grad_norm``.

The run folder is a training run's (``metrics.jsonl`` with ``sft/loss`` and
``throughput/sft_tokens_per_s`` per optimizer step, ``checkpoints/iter_<step>``,
``config.json``, ``sft_data.jsonl`` when the data were generated), and its checkpoints
record the base model's fingerprint, so an RL run starts from one with
``--model.init-checkpoint RUN_OR_CHECKPOINT`` (:mod:`algorithms.training.warm_start`). With
``run.eval_every`` > 0 the policy is evaluated before training, every ``eval_every``
steps and after the last (``eval/success``, ``eval/format_error_rate``, ...: the rollout
metrics of :func:`algorithms.agent.metrics.rollout_metrics` on held-out episodes).

The batch order of epoch ``e`` is a permutation seeded by ``(run.seed, e)``, so
``--resume`` continues exactly.

Command line::

    python -m algorithms.sft.trainer make-data --env-id AgentGym/KeyDoor-v0 \\
        --env-kwargs '{"width": 2, "height": 2, "key": false}' --episodes 256 \\
        --perturb 0.1 --out keydoor.jsonl
    python -m algorithms.sft.trainer check keydoor.jsonl
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentgym.command_line import RUNTIME_ERROR, USAGE_ERROR, OneLineParser
from algorithms.agent.evaluation import held_out_task_ids
from algorithms.agent.metrics import plot_curves, rollout_metrics, run_logger
from algorithms.agent.rollout import NoStepsError, collect_rollout
from algorithms.agent.sampling import rollout_settings
from algorithms.agent.step_batch import concat_batches
from algorithms.agent.task_choice import TASK_ORDERS
from algorithms.config import ConfigError, TrainConfig, replace
from algorithms.engines import make_engine
from algorithms.precision import autocast
from algorithms.runs.console import progress_bar, quiet_dependency_bars, sft_step_line
from algorithms.runs.memory import release_freed_memory
from algorithms.runs.run_folder import take_run_folder
from algorithms.runs.seeds import iteration_seed
from algorithms.sft.data import (
    SFTDataError,
    SFTExample,
    build_examples,
    expert_trajectories,
    read_trajectories,
    write_trajectories,
)
from algorithms.templates import template_info_keys
from algorithms.training.build import load_run_policy
from algorithms.training.learner import Learner
from algorithms.training.policy import model_identity, split_model
from algorithms.training.trainer import Trainer
from algorithms.training.vision_model import vision_hidden_states
from algorithms.training.warm_start import apply_init_checkpoint, base_fingerprint

DATA_FILE = "sft_data.jsonl"
"""Where a run that generated its expert data writes them (in the run folder)."""


def response_nll(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 loss_mask: torch.Tensor, vision: dict[str, torch.Tensor] | None = None
                 ) -> tuple[torch.Tensor, int]:
    """Summed negative log-likelihood of the masked tokens, and their count.

    Token ``t`` is predicted from the hidden state at ``t - 1``; only positions with
    ``loss_mask == 1`` are put through the LM head (a prompt of 2,000 tokens costs no
    vocabulary-sized logits). Position ids follow the attention mask.

    Args:
        model: causal LM (PEFT-wrapped or not), or a vision-language model.
        input_ids: (B, L) right-padded sequences.
        attention_mask: (B, L) 1 on real tokens.
        loss_mask: (B, L) 1 on the tokens to predict (never column 0).
        vision: ``pixel_values`` and ``image_grid_thw`` of the rows' prompt images
            (:meth:`~algorithms.engines.vision.VisionProcessor.tensors`), or ``None``; the
            image tokens of the context (``loss_mask`` 0) are the images.

    Returns:
        ``(nll_sum, tokens)``: a scalar float32 tensor and the number of masked tokens.
    """
    backbone, lm_head = split_model(model)
    targets = loss_mask[:, 1:].bool()
    with autocast(model):  # the policy's compute dtype (algorithms.precision)
        if vision:
            hidden = vision_hidden_states(backbone, input_ids, attention_mask,
                                          context=loss_mask == 0,
                                          pixel_values=vision["pixel_values"],
                                          image_grid_thw=vision["image_grid_thw"])
        else:
            positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
            hidden = backbone(input_ids=input_ids, attention_mask=attention_mask,
                              position_ids=positions, use_cache=False).last_hidden_state
        logits = lm_head(hidden[:, :-1][targets]).float()
    nll = torch.nn.functional.cross_entropy(logits, input_ids[:, 1:][targets], reduction="sum")
    return nll, int(targets.sum())


def collate(examples: Sequence[SFTExample], pad_id: int, device: torch.device
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad examples: ``(input_ids, attention_mask, loss_mask)``, each (B, L) int64."""
    width = max(len(example.input_ids) for example in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, example in enumerate(examples):
        length = len(example.input_ids)
        ids[row, :length] = torch.tensor(example.input_ids, dtype=torch.long)
        attention[row, :length] = 1
        mask[row, :length] = torch.tensor(example.loss_mask, dtype=torch.long)
    return ids.to(device), attention.to(device), mask.to(device)


def sft_steps(config: TrainConfig, num_examples: int) -> tuple[int, int]:
    """``(optimizer steps in all, steps per epoch)``: ``sft.max_steps`` when set, else
    ``sft.epochs`` passes of ``ceil(num_examples / sft.batch_size)`` steps."""
    per_epoch = max(1, math.ceil(num_examples / config.sft.batch_size))
    total = config.sft.max_steps if config.sft.max_steps is not None else \
        config.sft.epochs * per_epoch
    return total, per_epoch


def batch_rows(seed: int, step: int, per_epoch: int, num_examples: int,
               batch_size: int) -> np.ndarray:
    """The example indices of optimizer step ``step`` (0-based): its epoch's permutation,
    seeded by ``(seed, epoch)``, cut into batches."""
    epoch, position = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(num_examples)
    return order[position * batch_size:(position + 1) * batch_size]


class SFTTrainer(Trainer):
    """The ``--algo sft`` run: setup, the supervised loop, evaluation, checkpoints.

    Shares :class:`~algorithms.training.trainer.Trainer`'s run folder rules (``--resume``,
    ``--run.overwrite``), checkpoints and logging; builds no training envs.

    Args:
        config: the resolved config (``algo="sft"``).
        policy: an already loaded policy (tests); by default loaded from ``config.model``.
        run_dir: the run folder; by default ``run.output_dir / run_name``.
    """

    def __init__(self, config: TrainConfig, *, policy: Any = None,
                 run_dir: Path | None = None, **kwargs: Any):
        super().__init__(config, policy=policy, run_dir=run_dir, **kwargs)
        self.examples: list[SFTExample] = []
        self.release_memory = True
        """Return freed heap pages to the system before and after each micro-batch's forward
        pass (:mod:`algorithms.runs.memory`, as the RL learner does); ``False`` only to
        measure what that saves (``benchmarks/sft_step.py``)."""

    def setup(self) -> None:
        """Check the run folder, load the model (and ``--model.init-checkpoint``), build
        the optimizer, read or generate the data and tokenize it; restore a checkpoint
        on ``--resume``."""
        config = self.config
        if self.ranks.distributed:
            raise ConfigError("--algo sft runs in one process; start it without torchrun")
        self.folder_lock, checkpoint = take_run_folder(config, self.run_dir, self.ranks)
        try:
            self._build_stage(checkpoint)
        except BaseException:
            self.close()  # gives the folder up (its files stay, as a resume needs them)
            raise

    def _build_stage(self, checkpoint: Path | None) -> None:
        """:meth:`setup` after the run folder was taken."""
        config = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not self.bars:  # a log file: no libraries' bars
            quiet_dependency_bars()
        if config.run.torch_threads is not None:
            torch.set_num_threads(config.run.torch_threads)
        policy = self._policy if self._policy is not None else \
            load_run_policy(config, self.device, self.ranks, self._say)
        if config.model.init_checkpoint is not None:
            policy = apply_init_checkpoint(policy, config.model, seed=config.run.seed)
        self.policy = policy
        self.policy.model.to(self.device)
        fingerprint = base_fingerprint(self.policy.model)  # before any weight is trained
        # the Learner only lends its optimizer and checkpoint state: no KL reference copy
        self.learner = Learner(self.policy, replace(config, learner={"kl_coef": 0.0}),
                               self.device)
        self.learner.model_identity = {**model_identity(self.policy),
                                       "base_fingerprint": fingerprint}
        self.learner.set_policy_lr(config.sft.lr)
        if checkpoint is not None:
            self._restore(checkpoint)
        (self.run_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2),
                                                  encoding="utf-8")
        self.examples = self._examples()
        self.logger = run_logger(self.run_dir, config, self.start_iteration)

    def _sync_engine(self) -> None:
        """Give the engine the current weights (no engine before the first evaluation)."""
        if self.engine is not None:
            super()._sync_engine()

    def _examples(self) -> list[SFTExample]:
        """The tokenized data: ``sft.data``, or expert episodes generated on the env."""
        config = self.config
        if config.sft.data is not None:
            trajectories = read_trajectories(config.sft.data)
            where = config.sft.data
        else:
            with progress_bar(self.bars, total=config.sft.episodes, leave=False,
                              desc="expert episodes") as bar:
                trajectories = expert_trajectories(
                    config.env.env_id, config.env.kwargs(), config.sft.episodes,
                    perturb=config.sft.perturb, seed=config.run.seed,
                    task_order=config.env.task_order, progress=bar,
                    info_keys=template_info_keys(config.prompt))
            where = self.run_dir / DATA_FILE
            write_trajectories(where, trajectories)
        tools = None
        if config.prompt.action_format == "tool-call":
            from agentgym.tools import env_tools

            tools = env_tools(config.env.env_id, config.env.kwargs())
        examples, stats = build_examples(
            trajectories, self.policy.tokenizer, config.prompt, stop=config.stop_strings,
            max_new_tokens=config.generation.max_new_tokens, vision=self.policy.vision,
            tools=tools)
        if not examples:
            raise SFTDataError(f"{where}: no step fits the prompt settings")
        successes = [t.extra["success"] for t in trajectories if "success" in t.extra]
        rate = f", {np.mean(successes):.0%} successful" if successes else ""
        self._say(f"SFT data: {len(trajectories)} trajectories{rate} from {where}; "
                  f"{stats.steps} steps as {len(examples)} {config.prompt.layout} samples "
                  f"({stats.prompts_cut} prompts cut, {stats.responses_cut} responses cut, "
                  f"{stats.steps_dropped} steps dropped for length)")
        return examples

    # ------------------------------------------------------------------ the loop
    def sft_step(self, rows: np.ndarray) -> dict[str, float]:
        """One optimizer step on ``examples[rows]``: micro-batches, each loss divided by
        the batch's response tokens (so the step's gradient is that of the token mean
        over the whole batch), clipping, AdamW. A non-finite gradient norm skips it."""
        sft = self.config.sft
        model = self.policy.model
        model.train()
        chosen = [self.examples[i] for i in rows]
        tokens = sum(example.response_tokens for example in chosen)
        forwarded = sum(len(example.input_ids) for example in chosen)
        optimizer = self.learner.optimizer
        optimizer.zero_grad(set_to_none=True)
        pad_id = int(self.policy.tokenizer.pad_token_id)
        nll_total = 0.0
        for start in range(0, len(chosen), sft.micro_batch_size):
            micro = chosen[start:start + sft.micro_batch_size]
            ids, attention, mask = collate(micro, pad_id, self.device)
            vision = (self.policy.vision.tensors([e.images for e in micro], self.device)
                      if self.policy.vision is not None else None)
            if self.release_memory:  # the pass grows from live memory, not a fragmented heap
                release_freed_memory()
            nll, _ = response_nll(model, ids, attention, mask, vision or None)
            if self.release_memory:  # and so does the backward pass
                release_freed_memory()
            (nll / max(tokens, 1)).backward()
            nll_total += float(nll.detach())
        parameters = [p for p in model.parameters() if p.requires_grad]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(parameters,
                                                         self.config.learner.max_grad_norm))
        if math.isfinite(grad_norm):
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return {"sft/loss": nll_total / max(tokens, 1), "sft/response_tokens": float(tokens),
                "sft/tokens": float(forwarded), "update/grad_norm": grad_norm,
                "update/skipped": float(not math.isfinite(grad_norm))}

    def run(self) -> dict[str, float]:
        """Train as configured (``run.eval_only``: evaluate only); return the last
        metrics."""
        if self.learner is None:
            self.setup()
        config = self.config
        total, per_epoch = sft_steps(config, len(self.examples))
        last: dict[str, float] = {}
        try:
            if config.run.eval_every and self.start_iteration == 0 and total > 0:
                last = self.evaluate_policy(0)
                self.logger.log(0, last)
            started = time.perf_counter()
            with progress_bar(self.bars, total=total, initial=self.start_iteration,
                              desc="SFT (optimizer steps)") as bar:
                for step in range(self.start_iteration, total):
                    rows = batch_rows(config.run.seed, step, per_epoch, len(self.examples),
                                      config.sft.batch_size)
                    began = time.perf_counter()
                    last = self.sft_step(rows)
                    elapsed = time.perf_counter() - began
                    done = step + 1
                    last.update({"sft/epoch": done / per_epoch, "update/lr": config.sft.lr,
                                 "time/update": elapsed,
                                 "throughput/sft_tokens_per_s": last["sft/tokens"] / elapsed})
                    if config.run.eval_every and (done % config.run.eval_every == 0
                                                  or done == total):
                        last.update(self.evaluate_policy(done))
                    self.logger.log(done, last)
                    if done % config.run.save_every == 0 or done == total:
                        if not self.bars:  # a log file: a plain line where a checkpoint is
                            self._say(sft_step_line(done, total, self.start_iteration,
                                                    time.perf_counter() - started, last))
                        self.save(done, last)
                    bar.update(1)
                    bar.set_postfix(loss=f"{last['sft/loss']:.3f}")
            plot_curves(self.logger.path, self.run_dir / "curves.png")
        finally:
            self.close()
        return last

    def evaluate_policy(self, step: int) -> dict[str, float]:
        """Play ``env.eval_episodes`` tasks of the evaluation env (``env.task_order``) once
        each at ``generation.eval_temperature``; return their rollout metrics under ``eval/``
        (success, return, format-error and invalid-action rates, ...)."""
        import agentgym  # noqa: F401  (registers the ids)
        from agentgym.vector import make_vector_env

        config = self.config
        if self.engine is None:
            self.engine = make_engine(
                config.generation, self.policy, self.device, seed=config.run.seed,
                max_model_len=config.prompt.max_prompt_tokens
                + config.generation.max_new_tokens)
        self.policy.model.eval()
        self._sync_engine()
        kwargs = config.env.eval_kwargs()
        task_ids = held_out_task_ids(config)
        chunk = max(1, min(len(task_ids), config.env.num_groups * config.env.group_size))
        settings = rollout_settings(config, temperature=config.generation.eval_temperature,
                                    group_size=1, bootstrap=False, vision=self.policy.vision)
        batches, offsets = [], []
        with progress_bar(self.bars, total=len(task_ids), leave=False,
                          desc="evaluation (episodes)") as bar:
            for start in range(0, len(task_ids), chunk):
                part = task_ids[start:start + chunk]
                env = make_vector_env(config.env.env_id, len(part), group_size=1,
                                      backend=config.env.backend,
                                      num_workers=config.env.num_workers, **kwargs)
                try:
                    batches.append(collect_rollout(
                        env, self.engine, self.policy.tokenizer, settings,
                        group_task_ids=part,
                        seed=iteration_seed(config.run.seed, step, 2 + start)))
                    offsets.append(start)
                except NoStepsError as error:
                    self._say(f"evaluation: {error}")
                finally:
                    env.close()
                bar.update(len(part))
        self.engine.release()
        if not batches:
            return {"eval/success": float("nan")}
        batch = concat_batches(batches, offsets, 1, int(self.policy.tokenizer.pad_token_id))
        metrics = rollout_metrics(batch, prefix="eval")
        self._say(f"step {step}: eval success {metrics['eval/success']:.3f}, format errors "
                  f"{metrics['eval/format_error_rate']:.3f} ({len(task_ids)} episodes)")
        return metrics


# ---------------------------------------------------------------------- command line
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m algorithms.sft.trainer make-data|check ...`` (see the module docstring)."""
    parser = OneLineParser(
        prog="python -m algorithms.sft.trainer",
        description="Expert trajectories for the SFT warm start (train with "
                    "python train.py --algo sft; format: docs/sft.md).")
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("make-data", help="play an env's expert; write JSONL")
    make.add_argument("--env-id", required=True, help="e.g. AgentGym/KeyDoor-v0")
    make.add_argument("--env-kwargs", default="{}", help="constructor arguments, JSON")
    make.add_argument("--episodes", type=int, default=256)
    make.add_argument("--max-steps", type=int, default=None,
                      help="the env's max_steps (default: the env's own)")
    make.add_argument("--perturb", type=float, default=0.0,
                      help="share of steps that play a random other admissible action")
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--task-order", choices=TASK_ORDERS, default="first",
                      help="play the env's first tasks, or tasks spread over its list")
    make.add_argument("--out", required=True, help="the JSONL file to write")
    make.add_argument("--info-keys", default="",
                      help="comma-separated info keys to keep per step, for a prompt "
                           "template's {info[KEY]} placeholders (e.g. Formula)")
    check = commands.add_parser("check", help="validate a JSONL file")
    check.add_argument("path")
    args = parser.parse_args(argv)
    import gymnasium

    if args.command == "make-data":
        try:
            kwargs = json.loads(args.env_kwargs)
        except json.JSONDecodeError as error:
            make.error(f"--env-kwargs must be a JSON object: {error}")
        if not isinstance(kwargs, dict):
            make.error(f"--env-kwargs must be a JSON object, got {args.env_kwargs!r}")
        if not 0 <= args.perturb <= 1 or args.episodes < 1:
            make.error("--perturb must be in [0, 1] and --episodes >= 1")
    try:
        if args.command == "check":
            trajectories = read_trajectories(args.path)
            steps = sum(len(t.steps) for t in trajectories)
            print(f"{args.path}: {len(trajectories)} trajectories, {steps} steps, valid")
            return 0
        if args.max_steps is not None:
            kwargs["max_steps"] = args.max_steps
        trajectories = expert_trajectories(
            args.env_id, kwargs, args.episodes, perturb=args.perturb, seed=args.seed,
            task_order=args.task_order,
            info_keys=[key for key in args.info_keys.split(",") if key])
        write_trajectories(args.out, trajectories)
        success = np.mean([t.extra["success"] for t in trajectories])
        steps = sum(len(t.steps) for t in trajectories)
        print(f"{args.out}: {len(trajectories)} trajectories, {steps} steps, "
              f"{success:.0%} successful")
        return 0
    except (ValueError, OSError, gymnasium.error.Error) as error:  # SFTDataError,
        # NoExpertError, an unknown env id (a usage error, as in train.py)
        print(f"python -m algorithms.sft.trainer: error: {error}", file=sys.stderr)
        return USAGE_ERROR if isinstance(error, gymnasium.error.Error) else RUNTIME_ERROR


if __name__ == "__main__":
    sys.exit(main())

