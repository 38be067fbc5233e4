"""algorithms.runs.launch: a torchrun worker ends with the status Python would give, after the
atexit handlers and a flush, but without the interpreter's teardown (where gloo's
threads abort a finished run); one process ends as usual."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from algorithms.runs import launch

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import atexit, os, sys
from pathlib import Path
from algorithms.runs.launch import run_worker

marks = Path(sys.argv[1])

class Teardown:
    def __init__(self, path):  # late in the teardown builtins are gone: hold what to call
        self.path, self.open, self.write = str(path), os.open, os.write
        self.flags = os.O_WRONLY | os.O_CREAT

    def __del__(self):  # runs in the interpreter's teardown, if there is one
        self.write(self.open(self.path, self.flags), b"ran")

KEEP = Teardown(marks / "teardown")
atexit.register(lambda: marks.joinpath("atexit").write_text("ran"))

def main():
    sys.stdout.write("no newline, still buffered")
{body}

run_worker(main)
"""


def _run(body: str, tmp_path: Path, world_size: str | None) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.format(body=textwrap.indent(textwrap.dedent(body), "    ")),
                      encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    if world_size is not None:
        env.update(WORLD_SIZE=world_size, RANK="1")
    return subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("body,status,stderr", [
    ("return 'ignored'", 0, ""),
    ("sys.exit()", 0, ""),
    ("sys.exit(3)", 3, ""),
    ("sys.exit('train.py: rank 1: error: a bad thing')", 1,
     "train.py: rank 1: error: a bad thing"),
    ("raise ValueError('boom')", 1, "ValueError: boom"),
])
def test_a_worker_ends_with_pythons_status_without_teardown(tmp_path, body, status, stderr):
    result = _run(body, tmp_path, world_size="2")
    assert result.returncode == status, result.stderr
    assert stderr in result.stderr
    assert result.stdout == "no newline, still buffered"  # flushed before the exit
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "teardown").exists()  # the teardown was skipped


@pytest.mark.parametrize("world_size", [None, "1"])
def test_one_process_ends_as_usual(tmp_path, world_size):
    result = _run("sys.exit(3)", tmp_path, world_size=world_size)
    assert result.returncode == 3
    assert result.stdout == "no newline, still buffered"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "teardown").read_text() == "ran"


def test_one_process_lets_exceptions_through(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit, match="7"):
        launch.run_worker(lambda: sys.exit(7))


def test_launch_does_not_import_torch():
    """train.py imports it before the training stack: --help stays fast."""
    code = "import sys, algorithms.runs.launch; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr
