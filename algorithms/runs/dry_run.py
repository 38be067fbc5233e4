"""``train.py --dry-run``: the plan of a run and whether this machine is ready for it,
before anything heavy loads.

The config is resolved as the run would resolve it (presets, flags, validation), then the
checks of :mod:`algorithms.runs.readiness` look at the data, the model's files, the GPUs
against the layout (torchrun's ranks, FSDP2, one vLLM engine per GPU), vLLM and its torch,
the run folder and the disk for the checkpoints; ``train.py`` adds the fast contract check
a run makes on an env of one's own (:mod:`algorithms.agent.env_check`). No model is loaded, no
engine started, no env data generated and nothing written. Under torchrun every rank runs
it and rank 0 prints; append ``--dry-run`` to any command to check it.

:func:`plan` returns a :class:`DryRun`; :func:`dry_run` prints it and returns the exit
status: 0 when every check passed, 2 when one failed (each failure is one line saying what
to do).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from algorithms.config import TrainConfig
from algorithms.runs import readiness
from algorithms.runs.readiness import Check, Layout

READY, NOT_READY = 0, 2
"""The exit statuses of a dry run: ready, or a check failed."""


@dataclass(frozen=True)
class DryRun:
    """The plan of one run and its checks.

    Attributes:
        rows: the plan, ``(label, text)`` in print order.
        checks: every check, in order.
    """

    rows: tuple[tuple[str, str], ...]
    checks: tuple[Check, ...]

    @property
    def failed(self) -> tuple[Check, ...]:
        """The checks that did not pass."""
        return tuple(check for check in self.checks if not check.passed)

    @property
    def status(self) -> int:
        """:data:`READY` or :data:`NOT_READY`."""
        return NOT_READY if self.failed else READY

    def text(self) -> str:
        """The plan, the checks and a verdict, as ``train.py --dry-run`` prints them."""
        width = max(len(label) for label, _ in self.rows)
        lines = ["dry run: the plan (nothing is loaded or written)"]
        lines += [f"  {label:<{width}}  {text}" for label, text in self.rows]
        lines.append("checks:")
        lines += [f"  {check.line}" for check in self.checks]
        if self.failed:
            lines.append(f"not ready: {len(self.failed)} of {len(self.checks)} checks failed "
                         "(each FAIL line says what to do)")
        else:
            warned = sum(check.warning for check in self.checks)
            also = (f", {warned} with a warning (the WARN line{'s' if warned > 1 else ''})"
                    if warned else "")
            lines.append(f"ready: {len(self.checks)} checks passed{also}; run the same "
                         "command without --dry-run")
        return "\n".join(lines)


def plan(config: TrainConfig, *, environ: Mapping[str, str] | None = None,
         visible_gpus: int | None = None, gpu_presets: frozenset[str] = frozenset(),
         preset_help: str = "", env_checks: Sequence[Check] = ()) -> DryRun:
    """The plan and checks of ``config`` on this machine.

    Args:
        config: a resolved, validated config.
        environ: the launcher's variables (``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``);
            default ``os.environ``.
        visible_gpus: CUDA GPUs to assume (default: those this process sees).
        gpu_presets: the presets written for GPUs (they need one under ``run.device
            auto``).
        preset_help: the preset's one-line description.
        env_checks: checks of the env made by a room above this one (``train.py``: the
            contract check of an env of one's own,
            :func:`algorithms.agent.env_check.contract_checks`).
    """
    environ = os.environ if environ is None else environ
    visible = readiness.visible_gpus() if visible_gpus is None else visible_gpus
    layout = Layout.of(config, environ, visible)
    data, sources = readiness.data_checks(config)
    model = readiness.model_facts(config)
    engine, vllm = readiness.engine_plan(config, layout, readiness.gpu_extra_pin())
    folder, run_dir = readiness.run_folder_check(config)
    disk, checkpoints = readiness.disk_check(config, run_dir, model.shapes)
    env = config.env
    trained = ("LoRA rank " f"{config.model.lora_rank}" if config.model.lora_rank > 0
               else "every weight" if config.model.train_vision_tower
               or config.model.kind != "vision" else "every weight but the vision tower")
    size = (f", {weights_text(readiness.model_size.count(model.shapes.values()))} weights"
            if model.shapes else "")
    run = config.run
    iterations = ("evaluation only" if run.eval_only else
                  f"{run.iterations}, a checkpoint every {run.save_every}"
                  + (f", evaluation every {run.eval_every}" if run.eval_every else "")
                  + (", an SFT stage first" if config.sft_stage_first else ""))
    rows = (
        ("preset", config.preset + (f": {preset_help}" if preset_help else "")),
        ("algo", f"{config.algo}" + (f" (estimator {config.estimator})"
                                     if config.estimator not in (None, config.algo) else "")),
        ("env", f"{env.env_id}, {env.num_groups} groups x {env.group_size}, "
                f"{env.max_steps} steps"),
        ("data", sources),
        ("model", f"{model.description}{size}; trains {trained}"),
        ("engine", engine),
        ("devices", layout.describe(config)),
        ("run folder", folder.detail if folder.passed else "(see the check)"),
        ("iterations", iterations),
        ("checkpoints", checkpoints),
    )
    checks = [*data, model.check, readiness.gpu_check(config, layout, gpu_presets),
              *readiness.layout_checks(config, layout), *([vllm] if vllm else []), folder,
              disk, *env_checks]
    return DryRun(rows=rows, checks=tuple(checks))


def weights_text(count: int) -> str:
    """A number of weights for people: ``1.54 B``, ``135 M``."""
    return f"{count / 1e9:.2f} B" if count >= 1e9 else f"{count / 1e6:.0f} M"


def dry_run(config: TrainConfig, say: Callable[[str], None] = print, **options) -> int:
    """Print :func:`plan`'s text through ``say`` (one call per line); return its exit
    status. ``options`` go to :func:`plan`."""
    result = plan(config, **options)
    for line in result.text().splitlines():
        say(line)
    return result.status
