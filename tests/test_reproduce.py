"""docs/reproduce.md: every ``train.py`` command on the page resolves, and its dry run on
this CPU fails only for what a CPU machine lacks (GPUs, vLLM, the models, the data, disk).

A ``torchrun --nproc-per-node N`` command is dry-run as one of its ranks sees it: rank 0 of
``WORLD_SIZE`` N with N ranks on the machine."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

pytest.importorskip("tyro")

import train  # noqa: E402
from tests.test_readme import readme_blocks  # noqa: E402

PAGE = Path(__file__).parents[1] / "docs" / "reproduce.md"
MACHINE_CHECKS = {"gpus", "vllm", "model", "data", "disk"}
"""What a machine can lack while the command itself is right."""
ROWS = {"alfworld-1.5b", "alfworld-7b", "alfworld-7b-lora", "webshop-1.5b", "webshop-7b",
        "searchqa-3b", "sokoban-vl-3b", "ezpoints-vl-3b"}


def train_commands(text: str) -> list[list[str]]:
    """The ``train.py`` command lines of the page's bash blocks, split as a shell would
    (comments dropped, continuation lines joined)."""
    commands = []
    for block in readme_blocks(text, "docs/reproduce.md"):
        if block.language != "bash":
            continue
        for line in block.code.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if "train.py" in words:
                commands.append(words)
    return commands


def as_rank_zero(words: list[str]) -> tuple[list[str], dict[str, str]]:
    """``train.py``'s arguments in a command line, and the launcher variables rank 0 of it
    would see (none without torchrun)."""
    at = words.index("train.py")
    launcher = words[:at]
    if launcher in ([], ["python"]):
        return words[at + 1:], {}
    assert launcher[0] == "torchrun", launcher
    if "--nproc-per-node" in launcher:
        ranks = launcher[launcher.index("--nproc-per-node") + 1]
    else:
        ranks = next(w.split("=", 1)[1] for w in launcher if w.startswith("--nproc-per-node="))
    return words[at + 1:], {"WORLD_SIZE": ranks, "LOCAL_WORLD_SIZE": ranks, "RANK": "0"}


COMMANDS = train_commands(PAGE.read_text(encoding="utf-8"))


def test_the_page_gives_every_row_on_1_2_and_8_gpus():
    presets: dict[str, set[str]] = {}
    for words in COMMANDS:
        args, environ = as_rank_zero(words)
        if "--dry-run" in args:
            continue
        preset = args[args.index("--preset") + 1]
        presets.setdefault(preset, set()).add(environ.get("WORLD_SIZE", "1"))
    assert set(presets) == ROWS
    for preset in ("alfworld-1.5b", "searchqa-3b", "sokoban-vl-3b", "ezpoints-vl-3b"):
        assert presets[preset] == {"1", "2", "8"}, preset
    for preset in ("webshop-1.5b", "webshop-7b"):  # 6 groups: at most 6 ranks
        assert presets[preset] == {"1", "2", "6"}, preset
    assert presets["alfworld-7b"] | presets["alfworld-7b-lora"] == {"1", "2", "8"}


@pytest.mark.parametrize("words", COMMANDS, ids=[" ".join(w[-6:]) for w in COMMANDS])
def test_each_command_dry_runs_and_fails_only_for_what_this_machine_lacks(
        words, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    args, environ = as_rank_zero(words)
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "ALFWORLD_DATA"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        train.main([arg for arg in args if arg != "--dry-run"] + ["--dry-run"])
    out = capsys.readouterr().out
    failed = {line.split("FAIL  ", 1)[1].split(":")[0] for line in out.splitlines()
              if "  FAIL  " in line}
    assert stop.value.code in (0, 2) and (stop.value.code == 2) == bool(failed), out
    assert failed <= MACHINE_CHECKS, out
    assert not (tmp_path / "runs").exists()
