"""SIGTERM during a run (``algorithms.runs.termination``), with real signals: the iteration in
progress finishes and is checkpointed within ``--run.term-grace``, the run ends with
status 143 saying where the checkpoint is, and ``--resume`` continues it; under torchrun
both ranks stop after the same iteration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from algorithms.agent.metrics import read_metrics  # noqa: E402
from algorithms.config import replace  # noqa: E402
from algorithms.runs.checkpoint import latest_checkpoint  # noqa: E402
from algorithms.runs.termination import Terminated  # noqa: E402
from algorithms.training.build import vector_env_factory  # noqa: E402
from algorithms.training.trainer import Trainer  # noqa: E402
from tests.algorithms.scripted_config import scripted_config  # noqa: E402
from tests.algorithms.test_distributed import _train_py  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _sigterm_when(monkeypatch, method: str, at: int | None = None) -> None:
    """Send this process a real SIGTERM when ``Trainer.<method>`` is called (for
    ``train_iteration``: as iteration ``at``, 0-based, starts)."""
    original = getattr(Trainer, method)

    def wrapped(self, *args, **kwargs):
        if at is None or args[0] == at:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, method, wrapped)


def _iterations(run_dir: Path) -> list[int]:
    return [record["iteration"] for record in read_metrics(run_dir / "metrics.jsonl")]


def test_sigterm_checkpoints_the_iteration_in_progress_and_resume_continues(
        tmp_path, monkeypatch):
    before = signal.getsignal(signal.SIGTERM)
    config = scripted_config("grpo", iterations=4, save_every=100)
    _sigterm_when(monkeypatch, "train_iteration", at=1)
    with pytest.raises(Terminated) as stopped:
        Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path / "run").run()
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the run's only
    assert stopped.value.iteration == 2  # iteration 2 was in progress, and finished
    assert stopped.value.checkpoint == tmp_path / "run" / "checkpoints" / "iter_000002"
    assert latest_checkpoint(tmp_path / "run") == stopped.value.checkpoint
    assert _iterations(tmp_path / "run") == [1, 2]
    monkeypatch.undo()
    resumed = Trainer(replace(config, run={"resume": True}), policy=make_policy(seed=0),
                      run_dir=tmp_path / "run")
    resumed.run()
    assert resumed.start_iteration == 2 and _iterations(tmp_path / "run") == [1, 2, 3, 4]
    straight = Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path / "straight")
    straight.run()
    for (name, a), (_, b) in zip(straight.policy.model.named_parameters(),
                                 resumed.policy.model.named_parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name  # as if never stopped


def test_an_iteration_that_outlasts_the_grace_stops_with_the_last_checkpoint(
        tmp_path, monkeypatch):
    """Each env step takes 50 ms, an iteration about 0.6 s: 0.2 s of grace is not enough,
    so the run stops inside iteration 3 and the checkpoint of iteration 2 is the last."""
    config = replace(scripted_config("grpo", iterations=4, term_grace=0.2),
                     env={"env_kwargs": json.dumps({"num_rooms": 2, "hint": True,
                                                    "work_ms": 50})})
    _sigterm_when(monkeypatch, "train_iteration", at=2)
    start = time.monotonic()
    with pytest.raises(Terminated) as stopped:
        Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path).run()
    assert stopped.value.checkpoint is None and stopped.value.iteration == 2
    assert stopped.value.reason == "iteration 3 did not finish within --run.term-grace 0.2 s"
    assert latest_checkpoint(tmp_path).name == "iter_000002"
    assert _iterations(tmp_path) == [1, 2]
    assert time.monotonic() - start < 60


def test_sigterm_during_setup_stops_at_once_and_leaves_no_run(tmp_path, monkeypatch):
    config = scripted_config("grpo", iterations=1)
    real = vector_env_factory(config.env)

    def make_vec_env(*args):  # built after the config was written
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args)

    with pytest.raises(Terminated, match="it came before training began"):
        Trainer(config, policy=make_policy(seed=0), make_vec_env=make_vec_env,
                run_dir=tmp_path / "run").run()
    assert not (tmp_path / "run").exists()


def test_a_second_sigterm_stops_at_once(tmp_path, monkeypatch):
    original = Trainer.train_iteration

    def twice(self, iteration):
        if iteration == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, iteration)

    monkeypatch.setattr(Trainer, "train_iteration", twice)
    with pytest.raises(Terminated, match="a second one came") as stopped:
        Trainer(scripted_config("grpo", iterations=3), policy=make_policy(seed=0),
                run_dir=tmp_path).run()
    assert stopped.value.checkpoint is None
    assert latest_checkpoint(tmp_path).name == "iter_000001"


# ---------------------------------------------------------------------- train.py
def _run_until(command: list[str], marker: str, **kwargs) -> subprocess.Popen:
    """Start ``command`` (its own session); return once a line of its stdout holds
    ``marker``."""
    job = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"}, **kwargs)
    lines = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = job.stdout.readline()
        if not line and job.poll() is not None:
            break
        lines.append(line)
        if marker in line:
            return job
    os.killpg(job.pid, signal.SIGKILL)
    raise AssertionError(f"{marker!r} never printed:\n{''.join(lines)}{job.stderr.read()}")


def _finish(job: subprocess.Popen) -> tuple[str, str]:
    try:
        return job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)


def test_train_py_on_sigterm_exits_143_with_the_checkpoint_and_resumes(tmp_path,
                                                                        tiny_model_folder):
    """SIGTERM to the whole process group, as SLURM sends it: the subprocess env worker
    ignores it (the iteration's episodes end normally), train.py checkpoints the iteration
    in progress and says so in one line."""
    run = tmp_path / "run"
    flags = ("--run.iterations", "40", "--run.save-every", "100", "--env.backend",
             "subprocess", "--env.num-workers", "1")
    job = _run_until([sys.executable, *_train_py(tiny_model_folder, run, *flags)],
                     "[agentgym] iteration 2/40")
    os.killpg(job.pid, signal.SIGTERM)
    _, stderr = _finish(job)
    assert job.returncode == 143, stderr[-3000:]
    saved = latest_checkpoint(run)
    done = int(saved.name.removeprefix("iter_"))
    assert 2 <= done < 40
    assert stderr.strip().splitlines()[-1] == (
        f"train.py: terminated (SIGTERM) after iteration {done}, checkpointed in {saved} "
        "(continue with --resume and the same flags)")
    records = read_metrics(run / "metrics.jsonl")
    assert [r["iteration"] for r in records] == list(range(1, done + 1))
    assert records[-1]["rollout/env_errors"] == 0  # the worker was not killed by it
    resumed = subprocess.run([sys.executable, *_train_py(
        tiny_model_folder, run, *flags[:1], str(done + 1), *flags[2:], "--resume")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed {run} at iteration {done}" in resumed.stdout
    assert _iterations(run) == list(range(1, done + 2))


def test_torchrun_forwards_sigterm_and_both_ranks_stop_after_the_same_iteration(
        tmp_path, tiny_model_folder):
    run = tmp_path / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node=2"]
    flags = ("--run.iterations", "40", "--run.save-every", "100")
    job = _run_until([*torchrun, *_train_py(tiny_model_folder, run, *flags)],
                     "[agentgym] iteration 2/40")
    os.kill(job.pid, signal.SIGTERM)  # torchrun alone; it forwards SIGTERM to its workers
    _, stderr = _finish(job)
    assert job.returncode != 0
    saved = latest_checkpoint(run)
    done = int(saved.name.removeprefix("iter_"))
    assert 2 <= done < 40
    assert (f"train.py: terminated (SIGTERM) after iteration {done}, checkpointed in "
            f"{saved}") in stderr, stderr[-3000:]
    meta = json.loads((saved / "meta.json").read_text())
    assert meta["world_size"] == 2  # written by both ranks together
    # torchrun prints its own SignalException traceback; the workers print none
    assert 'train.py", line' not in stderr and "algorithms/" not in stderr, stderr[-3000:]
    resumed = subprocess.run(
        [*torchrun, *_train_py(tiny_model_folder, run, "--run.iterations", str(done + 1),
                               "--run.save-every", "100", "--resume")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _iterations(run) == list(range(1, done + 2))
