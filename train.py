"""Train an LLM agent with GiGPO, HGPO, GraphGPO, GRPO, RLOO, REINFORCE++, Dr.GRPO, GSPO or
PPO (or fine-tune it on expert trajectories) on an AgentGym text environment.

Examples::

    python train.py                                  # cpu-demo on a machine without a GPU
    python train.py --algo grpo --run.iterations 4   # same preset, GRPO, 4 iterations
    python train.py --preset alfworld-1.5b --algo gigpo
    python train.py --preset alfworld-7b-lora --resume
    python train.py --preset cpu-demo --eval-only --checkpoint runs/cpu-demo-gigpo-seed0
    python train.py --algo sft --sft.epochs 2        # supervised warm start (docs/sft.md)
    python train.py --model.init-checkpoint runs/cpu-demo-sft-seed0   # RL from it
    python train.py --preset cpu-alfworld            # SFT stage, then GiGPO, one run
    torchrun --nproc-per-node 2 train.py --preset alfworld-1.5b   # 2 GPUs, FSDP2
    python train.py --preset alfworld-1.5b --dry-run  # the plan and its checks; runs nothing
    agentgym-train --env.env-id my_env:MyEnv-v0      # from any folder (pip install -e .)

``--engine auto|hf|vllm|openai``, ``--resume``, ``--eval-only``, ``--checkpoint PATH`` and
``--agent MODULE:FUNCTION`` are short for ``--generation.engine``, ``--run.resume``,
``--run.eval-only``, ``--run.checkpoint`` and ``--agent.function`` (your own agent loop,
trained through the gateway: docs/own-agent.md). ``--preset NAME`` picks the
starting values (default: ``cpu-demo`` without a GPU,
``alfworld-1.5b`` with one); every other flag overrides a single field. Run
``python train.py --preset NAME --help`` to see that preset's values as the defaults.
``--dry-run`` resolves the command and checks the machine for it (data, model, GPUs,
vLLM, disk) without loading anything: exit status 0 when ready, 2 when a check failed.

The current folder is importable (as for ``python -m``), so ``--env.env-id
my_module:MyEnv-v0`` finds ``my_module.py`` there whichever way ``train.py`` is started:
``python train.py``, ``python -m train``, or the ``agentgym-train`` command that
``pip install -e .`` installs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agentgym.command_line import RUNTIME_ERROR, USAGE_ERROR
from algorithms.config import (
    ALGO_ESTIMATORS,
    ENV_KWARGS_FIELDS,
    ConfigError,
    TrainConfig,
    for_env_id,
    with_algo,
)
from algorithms.presets import GPU_PRESETS, PRESET_HELP, PRESETS

if TYPE_CHECKING:
    from algorithms.runs.termination import Terminated


def default_preset() -> str:
    """``alfworld-1.5b`` when a CUDA GPU is visible, else ``cpu-demo``."""
    try:
        import torch
    except ImportError:
        return "cpu-demo"
    return "alfworld-1.5b" if torch.cuda.is_available() else "cpu-demo"


class _OneLineParser(argparse.ArgumentParser):
    """The pre-parser of :func:`parse_config`: a bad value is a :class:`ConfigError` (one
    line, exit status 2 from :func:`cli`), not argparse's usage block."""

    def error(self, message: str):  # type: ignore[override]
        raise ConfigError(f"{message} (train.py --help lists every flag)")


def parse_command(argv: Sequence[str] | None = None) -> tuple[TrainConfig, bool]:
    """The resolved config of a command line, and whether it asks for ``--dry-run``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    dry_run = "--dry-run" in argv
    return parse_config([arg for arg in argv if arg != "--dry-run"]), dry_run


def parse_config(argv: Sequence[str] | None = None) -> TrainConfig:
    """The resolved :class:`~algorithms.config.TrainConfig` of a command line.

    Raises:
        ConfigError: a flag or value that cannot be read, or settings that do not work
            together (one line; ``--help`` exits as usual)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = _OneLineParser(add_help=False)
    pre.add_argument("--preset", choices=sorted(PRESETS), default=None)
    pre.add_argument("--engine", choices=("auto", "hf", "vllm", "openai"), default=None)
    pre.add_argument("--resume", action="store_true")
    pre.add_argument("--eval-only", action="store_true")
    pre.add_argument("--checkpoint", default=None)
    pre.add_argument("--algo", default=None)
    pre.add_argument("--agent", default=None)
    known, rest = pre.parse_known_args(argv)
    if known.agent is not None:  # short for --agent.function
        rest = [*rest, "--agent.function", known.agent]
    # Short aliases of --generation.engine, --run.resume, --run.eval-only, --run.checkpoint.
    if known.engine is not None:
        rest = [*rest, "--generation.engine", known.engine]
    if known.resume:
        rest = [*rest, "--run.resume"]
    if known.eval_only:
        rest = [*rest, "--run.eval-only"]
    if known.checkpoint is not None:
        rest = [*rest, "--run.checkpoint", known.checkpoint]
    name = known.preset or default_preset()
    width = max(map(len, PRESETS))
    presets = "\n".join(f"  {key:<{width}}  {PRESET_HELP[key]}" for key in PRESETS)
    default = PRESETS[name]
    if known.algo is not None:
        rest = [*rest, "--algo", known.algo]  # tyro checks the name
        if known.algo in ALGO_ESTIMATORS:  # the algorithm's settings, before other flags
            default = with_algo(default, known.algo)
    description = (
        f"{__doc__.split('Examples::')[0].strip()}\n\nPreset in use: {name} "
        f"(choose with --preset NAME; the defaults below are this preset's values). Add "
        f"--dry-run to any command to see its plan and check this machine for it, loading "
        f"nothing (docs/reproduce.md).\n\n"
        f"The flags most runs need (value: this preset's):\n{essential_flags(default)}\n\n"
        f"Presets:\n{presets}\n\nEvery flag, by section:"
    )
    config = read_flags(default, rest, description)
    # a preset's env kwargs are its env's: dropped for another env, unless given here
    flags = {arg.split("=")[0].replace("_", "-") for arg in rest}
    given = frozenset(name for name in ENV_KWARGS_FIELDS
                      if f"--env.{name.replace('_', '-')}" in flags)
    config, note = for_env_id(config, default, given)
    config = config.validate()
    if note and os.environ.get("RANK", "0") == "0":
        print(f"[agentgym] note: {note}", flush=True)
    return config


def read_flags(default: TrainConfig, args: list[str], description: str) -> TrainConfig:
    """tyro's reading of ``args`` over ``default``; a flag or value it refuses is a
    :class:`ConfigError` whose message is tyro's, on one line (tyro draws a box)."""
    import contextlib
    import io

    import tyro

    def read() -> TrainConfig:
        return tyro.cli(TrainConfig, default=default, args=args, description=description)

    if "-h" in args or "--help" in args:
        return read()
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            config = read()
    except SystemExit as stop:
        if stop.code in (0, None):
            raise
        raise ConfigError(f"{tyro_message(said.getvalue())} (train.py --help lists every "
                          "flag)") from None
    sys.stderr.write(said.getvalue())  # a warning of a parse that succeeded
    return config


def tyro_message(text: str) -> str:
    """The message in tyro's error box, on one line (``Unrecognized options: --bogus``):
    the lines after the box's title up to its next rule, frames stripped. tyro draws the
    box with or without its frame (by its output's encoding); both read the same."""
    rule = set("─-━═╭╮╰╯+ ")
    lines: list[str] = []
    title_seen = False
    for line in text.splitlines():
        inner = line.strip().strip("│|").strip()
        if not inner:
            continue
        if not title_seen:
            title_seen = True
            continue
        if set(inner) <= rule:
            if lines:
                break
            continue
        lines.append(inner)
    message = " ".join(" ".join(lines).split())
    return message or " ".join(text.split())


ESSENTIAL_FLAGS: tuple[tuple[str, str | None], ...] = (
    ("--preset NAME", None), ("--algo", "algo"), ("--engine", "generation.engine"),
    ("--resume", "run.resume"), ("--eval-only", "run.eval_only"),
    ("--checkpoint PATH", "run.checkpoint"), ("--run.iterations", "run.iterations"),
    ("--run.seed", "run.seed"), ("--run.run-name", "run.run_name"),
    ("--run.eval-every", "run.eval_every"), ("--model.name-or-path", "model.name_or_path"),
    ("--model.lora-rank", "model.lora_rank"),
    ("--model.init-checkpoint", "model.init_checkpoint"), ("--env.env-id", "env.env_id"),
    ("--env.num-groups", "env.num_groups"), ("--env.group-size", "env.group_size"),
    ("--env.max-steps", "env.max_steps"), ("--learner.lr", "learner.lr"),
    ("--generation.max-new-tokens", "generation.max_new_tokens"),
    ("--sft.warm-start", "sft.warm_start"),
)
"""The 20 flags ``--help`` lists first: flag and the config field it sets (``None``: not a
field). Their text is the field's docstring, so each is documented once."""


def essential_flags(config: TrainConfig) -> str:
    """:data:`ESSENTIAL_FLAGS` as aligned lines: flag, ``config``'s value (whole: a longer
    one takes its own line), the first sentence of the field's docstring, and the values a
    field takes when that sentence does not name them all."""
    import textwrap

    from algorithms.config import field_docs

    lines = []
    for flag, path in ESSENTIAL_FLAGS:
        if path is None:
            value, text = config.preset, "Starting values: one of the presets below."
        else:
            *sections, name = path.split(".")
            owner = config
            for section in sections:
                owner = getattr(owner, section)
            value, text = getattr(owner, name), first_sentence(field_docs(type(owner))[name])
            choices = field_choices(type(owner), name)
            if choices and not all(choice in text for choice in choices):
                text = f"{text} One of: {', '.join(choices)}."
        head = f"  {flag:<28} {value!s:<24} "
        if len(head) > 56:  # a long value (a model id) keeps its whole name
            lines.append(head.rstrip())
            head = " " * 56
        lines.append(textwrap.fill(text, width=110, initial_indent=head,
                                   subsequent_indent=" " * 56))
    return "\n".join(lines)


def field_choices(section: type, name: str) -> tuple[str, ...]:
    """The values a ``Literal`` field of a config dataclass takes (``()`` for others)."""
    import typing

    hint = typing.get_type_hints(section)[name]
    if typing.get_origin(hint) is typing.Literal:
        return tuple(str(value) for value in typing.get_args(hint))
    return ()


def first_sentence(text: str) -> str:
    """The docstring's first sentence, markup-free, on one line ("e.g." and "i.e." do not
    end it)."""
    import re

    flat = " ".join(text.replace("``", "").split())
    end = re.search(r"(?<!e\.g)(?<!i\.e)\.(\s|$)", flat)
    return flat if end is None else flat[:end.start() + 1]


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Parse the command line, then train or evaluate; return the last metrics. With
    ``--dry-run``, print the plan and its checks and exit (:func:`dry_run`).

    Under ``torchrun`` every rank runs this; rank 0 alone prints."""
    config, dry = parse_command(argv)
    if dry:
        sys.exit(dry_run(config))
    from algorithms.agent.env_check import check_run_env
    from algorithms.agent.metrics import read_metrics
    from algorithms.agent.summary import run_summary
    from algorithms.runs import distributed
    from algorithms.runs.run_folder import default_run_dir, finished_run
    from algorithms.runs.termination import Terminated
    from algorithms.sft.stage import STAGE_DIR, needs_stage, run_stage
    from algorithms.training.run_tokenizer import run_tokenizer
    from algorithms.training.trainer import Trainer

    ranks = distributed.init_from_environment(device=config.run.device,
                                              timeout_s=config.run.dist_timeout)
    say = (lambda line: print(f"[agentgym] {line}", flush=True)) if ranks.main \
        else (lambda line: None)
    try:
        # before anything loads: a finished run to resume, an env that breaks the contract
        finished = finished_run(config, default_run_dir(config))
        if finished is not None:
            say(finished[0])
            return finished[1]
        check_run_env(config, say, lambda: run_tokenizer(config))
        if config.agent.function is not None:  # --agent: the loop imports, the tasks read
            from algorithms.gateway.agent_loop import load_agent
            from algorithms.gateway.tasks import read_task_file

            load_agent(config.agent.function)
            if config.agent.tasks is not None:
                read_task_file(config.agent.tasks)
        if needs_stage(config):  # --sft.warm-start: the SFT stage first, in <run>/sft
            run_dir = default_run_dir(config)
            try:
                config = run_stage(config, run_dir, ranks=ranks, say=say)
            except KeyboardInterrupt:
                raise Interrupted(run_dir / STAGE_DIR, argv=argv) from None
        if config.algo == "sft" and not config.run.eval_only:
            from algorithms.sft.trainer import SFTTrainer

            trainer = SFTTrainer(config, ranks=ranks)
        else:
            trainer = Trainer(config, ranks=ranks)
        if not ranks.main:
            return trainer.run()
        print(f"[agentgym] preset={config.preset} algo={config.algo} env={config.env.env_id} "
              f"run_dir={trainer.run_dir}", flush=True)
        note = data_note(config)
        if note:
            print(f"[agentgym] note: {note}", flush=True)
        try:
            metrics = trainer.run()
        except KeyboardInterrupt:
            raise Interrupted(trainer.run_dir, argv=argv) from None
        except Terminated as stop:
            raise Interrupted(trainer.run_dir, stop, argv=argv) from None
    finally:
        distributed.shutdown()
    keys = [k for k in ("rollout/success", "rollout/return", "sft/loss", "eval/success",
                        "eval/format_error_rate") if k in metrics]
    summary = " ".join(f"{k}={metrics[k]:.3f}" for k in keys)
    print(f"[agentgym] done: {summary} (metrics: {trainer.run_dir / 'metrics.jsonl'})",
          flush=True)
    if not config.run.eval_only:
        records = read_metrics(trainer.run_dir / "metrics.jsonl")
        report = run_summary(records, trainer.run_dir / "curves.png",
                             prompt_budget=config.prompt.max_prompt_tokens)
        if report:
            print("[agentgym] " + report.replace("\n", "\n[agentgym] "), flush=True)
        evaluations = evaluation_line(records)
        if evaluations:
            print(f"[agentgym] {evaluations}", flush=True)
    print(f"[agentgym] view the rollouts and curves: python -m agentgym.viewer "
          f"{trainer.run_dir}", flush=True)
    return metrics


def dry_run(config: TrainConfig) -> int:
    """``--dry-run``: the plan of ``config`` and the checks of this machine for it
    (:mod:`algorithms.runs.dry_run`), printed by rank 0; nothing is loaded or written.
    Returns the exit status: 0 ready, 2 a check failed."""
    from algorithms.agent.env_check import contract_checks
    from algorithms.runs.dry_run import dry_run as check

    main_rank = os.environ.get("RANK", "0") == "0"
    say = (lambda line: print(f"[agentgym] {line}", flush=True)) if main_rank \
        else (lambda line: None)
    return check(config, say, gpu_presets=GPU_PRESETS,
                 preset_help=PRESET_HELP.get(config.preset, ""),
                 env_checks=contract_checks(config))


def evaluation_line(records: list[dict[str, float]]) -> str | None:
    """The held-out evaluations of a run on one line (success, format-error rate per
    evaluated iteration), or ``None`` when it has none."""
    parts = [f"iteration {int(r['iteration'])}: success {r['eval/success']:.3f}"
             + (f", format errors {r['eval/format_error_rate']:.3f}"
                if "eval/format_error_rate" in r else "")
             for r in records if "eval/success" in r]
    return "held-out evaluation: " + "; ".join(parts) if parts else None


def data_note(config: TrainConfig) -> str | None:
    """One line for a data variable that this run's env does not read: ``$ALFWORLD_DATA``
    set while the run trains another env (the cpu-demo preset trains KeyDoor). The
    variable only says where ALFWorld's games are; the preset and flags choose the env,
    so that one command always trains the same thing (and ``$ALFWORLD_DATA`` is often set
    for good, as alfworld's own scripts need it)."""
    import os

    if "ALFWORLD_DATA" not in os.environ or config.env.env_id == "AgentGym/ALFWorld-v0":
        return None
    return (f"$ALFWORLD_DATA is set, but this run trains {config.env.env_id} (preset "
            f"{config.preset}), which does not read it; to train on those ALFWorld games "
            "use --preset cpu-alfworld (on a GPU: --preset alfworld-1.5b)")


class Interrupted(Exception):
    """Ctrl-C (exit status 130) or SIGTERM (143) during a run; the message says where its
    newest checkpoint is and the command that resumes it.

    Args:
        run_dir: the run folder.
        stop: the SIGTERM stop (``None``: Ctrl-C).
        argv: the command line's arguments (default: this process's), for the resume
            command.
    """

    def __init__(self, run_dir: Path, stop: Terminated | None = None,
                 argv: Sequence[str] | None = None):
        from algorithms.runs.checkpoint import latest_checkpoint

        self.status = 130 if stop is None else 143
        resume = f"resume with: {resume_command(argv)}"
        if stop is not None and stop.checkpoint is not None:
            if not stop.how:
                super().__init__(f"terminated (SIGTERM) after iteration {stop.iteration}, "
                                 f"checkpointed in {stop.checkpoint}; {resume}")
            else:
                super().__init__(f"terminated (SIGTERM) {stop.how}; iteration "
                                 f"{stop.iteration}, the last finished update, is "
                                 f"checkpointed in {stop.checkpoint}; {resume}")
            return
        what = "interrupted" if stop is None else f"terminated by SIGTERM: {stop.reason}"
        if not run_dir.exists():  # a new run stopped before its first update: removed
            super().__init__(what)
            return
        latest = latest_checkpoint(run_dir)
        where = (f"the last checkpoint is {latest}; {resume}" if latest is not None
                 else f"no checkpoint was written in {run_dir}")
        super().__init__(f"{what}; {where}")


def resume_command(argv: Sequence[str] | None = None) -> str:
    """The command that resumes this run: the program as it was started, its arguments
    (``argv``; default this process's) and ``--resume``; under torchrun on one machine
    the ``torchrun --nproc-per-node N`` launch in front.

    >>> resume_command(["--algo", "grpo", "--run.run-name", "my run"])  # python train.py
    "python train.py --algo grpo --run.run-name 'my run' --resume"
    """
    import shlex

    from algorithms.runs.launch import launched_with_ranks

    args = [a for a in (sys.argv[1:] if argv is None else argv)
            if a not in ("--resume", "--run.resume")]
    started = sys.argv[0] or ""
    if os.path.basename(started) == "train.py":  # as it was typed, relative if below here
        program = f"python {os.path.relpath(started) if os.path.isabs(started) else started}"
    elif os.path.basename(started).startswith("agentgym"):  # an installed command
        program = os.path.basename(started)
    else:  # called from Python (a test, a notebook)
        program = "python train.py"
    if launched_with_ranks():
        local = os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))
        if local == os.environ.get("WORLD_SIZE"):
            program = f"torchrun --nproc-per-node {local} {program.removeprefix('python ')}"
    return f"{program} {shlex.join([*args, '--resume'])}"


def cli() -> None:
    """``python train.py``: every error ends with one line on stderr, ``train.py: error:
    ...``, and no traceback; the exit status says which kind
    (:data:`agentgym.command_line.USAGE_ERROR`, ``RUNTIME_ERROR``).

    - 2, the command cannot run as given (a :class:`~algorithms.config.ConfigError`): a
      flag or value that cannot be read, an unknown preset, algorithm or env id, a bad
      setting or env kwargs JSON, settings that do not work together, a run folder that
      cannot be used as asked, a resume with other settings, an env that breaks the env
      contract (the check before the model loads, :mod:`algorithms.agent.env_check`); and
      ``--dry-run`` when a check failed.
    - 1, the run failed: a checkpoint that is missing or refused, a data path that does not
      exist, a model that does not load, an engine that cannot run here, a missing
      optional package, a failed collective of a torchrun job; a run that cannot train --
      no env made a step, or ``--run.max-untrained-iterations`` iterations in a row had
      nothing to train on.
    - 130, Ctrl-C, with one line saying where the last checkpoint is; 143, SIGTERM
      likewise, after a checkpoint of the newest state that holds together
      (:mod:`algorithms.runs.termination`), with the command that resumes it.

    The current folder is put on ``sys.path`` first (:func:`importable_here`)."""
    import gymnasium

    from algorithms.agent.rollout import NoStepsError
    from algorithms.engines import EngineUnavailableError
    from algorithms.runs.checkpoint import CheckpointError
    from algorithms.runs.distributed import DistributedError
    from algorithms.runs.launch import rank_prefix
    from algorithms.runs.termination import Terminated
    from algorithms.sft.data import SFTDataError
    from algorithms.training.policy import PolicyLoadError
    from algorithms.training.trainer import UntrainedRunError

    where = rank_prefix()

    def fail(message: object, status: int) -> None:
        print(f"train.py: {where}error: {message}", file=sys.stderr, flush=True)
        sys.exit(status)

    importable_here()
    try:
        main()
    except ConfigError as error:
        fail(error, USAGE_ERROR)
    except Interrupted as error:
        print(f"\ntrain.py: {error}", file=sys.stderr, flush=True)
        sys.exit(error.status)
    except Terminated:  # a torchrun rank other than 0 (rank 0 says it)
        sys.exit(143)
    except KeyboardInterrupt:  # before the run started
        print("\ntrain.py: interrupted before the run started", file=sys.stderr, flush=True)
        sys.exit(130)
    except ModuleNotFoundError as error:
        fail(f"this run needs the package {error.name!r}, which is not installed (see "
             "README, Install)", RUNTIME_ERROR)
    except (CheckpointError, EngineUnavailableError, PolicyLoadError, DistributedError,
            FileNotFoundError, SFTDataError, NoStepsError, UntrainedRunError,
            gymnasium.error.Error) as error:
        fail(error, RUNTIME_ERROR)
    except Exception as error:
        peer = distributed_failure(error)
        if peer is None:
            raise
        fail(peer, RUNTIME_ERROR)


def importable_here() -> None:
    """Put the current folder on ``sys.path`` (first after the script's own folder), as
    ``python -m`` does, so that ``--env.env-id my_module:MyEnv-v0`` imports
    ``my_module`` from the folder the command was started in, whichever way it started:
    ``python CHECKOUT/train.py`` puts the checkout there instead, and an installed
    command (``agentgym-train``) its ``bin`` folder."""
    here = os.getcwd()
    if not any(os.path.abspath(entry or os.curdir) == here for entry in sys.path):
        sys.path.insert(1 if sys.path else 0, here)


def run() -> None:
    """The ``agentgym-train`` command, ``python train.py`` and ``python -m train``:
    :func:`cli`, ended as a torchrun rank must end
    (:func:`algorithms.runs.launch.run_worker`)."""
    from algorithms.runs.launch import run_worker

    run_worker(cli)


def distributed_failure(error: BaseException) -> str | None:
    """A one-line cause for a failed collective of a torchrun job (another rank died, or
    did not answer within --run.dist-timeout), or ``None`` for any other error."""
    from algorithms.runs.launch import launched_with_ranks

    if not launched_with_ranks():
        return None
    import torch.distributed as dist

    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    if isinstance(error, getattr(dist, "DistError", ())) or any(
            word in text.lower() for word in ("timed out", "connection", "gloo", "nccl")):
        return (f"a collective with the other ranks failed ({text}): another rank died or "
                "did not answer within --run.dist-timeout; torchrun's report names it")
    return None


if __name__ == "__main__":
    run()  # under torchrun, each rank ends without teardown (see run_worker)
