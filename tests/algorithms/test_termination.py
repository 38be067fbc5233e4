"""SIGTERM during a run (``algorithms.runs.termination``), with real signals: in a rollout
the last finished update is checkpointed at once; in an update the iteration finishes
within ``--run.term-grace`` and is checkpointed, or the run falls back to the state before
the update (never a half-applied one); a cut evaluation keeps its iteration. Every
resumed run equals an uninterrupted one. ``train.py`` ends with status 143 and the resume
command; under torchrun both ranks stop after the same iteration."""

from __future__ import annotations

import json
import os
import shlex
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


def _comparable(records: list[dict]) -> list[dict]:
    """Metric records without the keys that measure time (``time/*``, ``throughput/*``)."""
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))}
            for r in records]


def _track_iterations(monkeypatch) -> dict:
    """``{"iteration": i}``: the (0-based) iteration the trainer is in, kept up to date."""
    state = {"iteration": -1}
    trainer_iteration = Trainer.train_iteration

    def tracked(self, index, *args, **kwargs):
        state["iteration"] = index
        return trainer_iteration(self, index, *args, **kwargs)

    monkeypatch.setattr(Trainer, "train_iteration", tracked)
    return state


def _signal_in(monkeypatch, owner: type, method: str, *, iteration: int, times: int = 1,
               then_sleep: float = 0.0, after: bool = False) -> dict:
    """Send this process ``times`` real SIGTERMs in ``owner.<method>``, the first time it
    is called in (0-based) iteration ``iteration`` of the trainer's run -- before the
    original runs, or with ``after`` once it returned -- then sleep ``then_sleep``
    seconds (a phase that outlasts the grace). Returns :func:`_track_iterations`'s
    state."""
    original = getattr(owner, method)
    state = _track_iterations(monkeypatch)

    def fire() -> None:
        state["fired"] = True
        for _ in range(times):
            os.kill(os.getpid(), signal.SIGTERM)

    def wrapped(self, *args, **kwargs):
        now = state["iteration"] == iteration and not state.get("fired")
        if now and not after:
            fire()
        result = original(self, *args, **kwargs)
        if now and after:
            fire()
        if now:
            time.sleep(then_sleep)
        return result

    monkeypatch.setattr(owner, method, wrapped)
    return state


def _resume_equals_straight(tmp_path, config, run: Path, done: int) -> None:
    """Resuming ``run`` (stopped after ``done`` iterations) gives the metrics and weights
    of an uninterrupted run of ``config``."""
    resumed = Trainer(replace(config, run={"resume": True}), policy=make_policy(seed=0),
                      run_dir=run)
    resumed.run()
    assert resumed.start_iteration == done
    total = config.run.iterations
    assert _iterations(run) == list(range(1, total + 1))
    straight = Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path / "straight")
    straight.run()
    assert _comparable(read_metrics(run / "metrics.jsonl")) == _comparable(
        read_metrics(tmp_path / "straight" / "metrics.jsonl"))  # as if never stopped
    for (name, a), (_, b) in zip(straight.policy.model.named_parameters(),
                                 resumed.policy.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def _stop(config, run: Path) -> Terminated:
    with pytest.raises(Terminated) as stopped:
        Trainer(config, policy=make_policy(seed=0), run_dir=run).run()
    return stopped.value


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    from algorithms.runs.checkpoint import load_checkpoint

    return load_checkpoint(checkpoint, map_location="cpu", optimizer=False)["learner"]["model"]


def test_sigterm_in_a_rollout_checkpoints_the_last_update_at_once_and_resume_continues(
        tmp_path, monkeypatch):
    """In iteration 3's rollout (its second turn) the weights are iteration 2's: they are
    saved at once (no checkpoint was due: save_every 100), the rollout is abandoned, and
    the resumed run plays iteration 3 again exactly as an uninterrupted run does."""
    from algorithms.agent import rollout

    before = signal.getsignal(signal.SIGTERM)
    config = scripted_config("grpo", iterations=4, save_every=100)
    state = _track_iterations(monkeypatch)
    original = rollout._turn

    def turn(*args, **kwargs):
        if state["iteration"] == 2 and kwargs["turn"] == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    monkeypatch.setattr(rollout, "_turn", turn)
    stopped = _stop(config, tmp_path / "run")
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the run's only
    assert stopped.iteration == 2 and stopped.how == "in iteration 3's rollout"
    assert stopped.checkpoint == tmp_path / "run" / "checkpoints" / "iter_000002"
    assert latest_checkpoint(tmp_path / "run") == stopped.checkpoint
    assert _iterations(tmp_path / "run") == [1, 2]
    assert not (tmp_path / "run" / "records" / "train" / "iter_000003.jsonl.gz").exists()
    monkeypatch.undo()
    _resume_equals_straight(tmp_path, config, tmp_path / "run", 2)


def test_sigterm_in_an_update_that_ends_within_the_grace_checkpoints_it(tmp_path,
                                                                        monkeypatch):
    from algorithms.training.learner import Learner

    config = scripted_config("grpo", iterations=4, save_every=100)
    _signal_in(monkeypatch, Learner, "score", iteration=1)
    stopped = _stop(config, tmp_path / "run")
    assert stopped.iteration == 2 and stopped.how == ""  # iteration 2 finished
    assert stopped.checkpoint == tmp_path / "run" / "checkpoints" / "iter_000002"
    assert _iterations(tmp_path / "run") == [1, 2]
    monkeypatch.undo()
    _resume_equals_straight(tmp_path, config, tmp_path / "run", 2)


@pytest.mark.parametrize("where", ["scoring", "after an optimizer step"])
def test_an_update_that_outlasts_the_grace_falls_back_to_the_state_before_it(
        tmp_path, monkeypatch, where):
    """The SIGTERM comes while iteration 3 scores its batch; 1 s of grace is not enough
    (the scoring, or the update after its first optimizer step, sleeps 5 s): the run
    checkpoints iteration 2 -- the weights themselves when the update had not changed
    them yet, else the copy taken before its first step -- never the half-applied
    update."""
    from algorithms.training.learner import Learner

    config = scripted_config("grpo", iterations=4, save_every=1, term_grace=1.0)
    state = _signal_in(monkeypatch, Learner, "score", iteration=2,
                       then_sleep=5.0 if where == "scoring" else 0.0)
    if where != "scoring":
        original = Learner._mini_batch_step

        def slow_step(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            if state["iteration"] == 2:
                time.sleep(5.0)  # the grace runs out after a step changed the weights
            return result

        monkeypatch.setattr(Learner, "_mini_batch_step", slow_step)
    start = time.monotonic()
    trainer = Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path / "run")
    with pytest.raises(Terminated) as stopped:
        trainer.run()
    assert time.monotonic() - start < 60
    stop = stopped.value
    assert stop.iteration == 2 and stop.how == (
        "when iteration 3 did not finish within --run.term-grace 1 s")
    # written again by the stop: save_every 1 had saved iteration 2 already
    assert stop.checkpoint == tmp_path / "run" / "checkpoints" / "iter_000002"
    assert _iterations(tmp_path / "run") == [1, 2]
    live = {n: p.detach() for n, p in trainer.policy.model.named_parameters()
            if p.requires_grad}
    saved = _weights(stop.checkpoint)
    changed = any(not torch.equal(live[n], saved[n]) for n in live)
    assert changed == (where != "scoring")  # the copy, not the live weights, was saved
    monkeypatch.undo()
    _resume_equals_straight(tmp_path, config, tmp_path / "run", 2)


def test_an_update_that_had_changed_the_weights_before_the_signal_is_finished(
        tmp_path, monkeypatch):
    """A SIGTERM after the update's optimizer step, with no copy of the weights from
    before it: the update is finished even past the 0.2 s grace, then checkpointed."""
    from algorithms.training.learner import Learner

    config = scripted_config("grpo", iterations=4, save_every=100, term_grace=0.2)
    _signal_in(monkeypatch, Learner, "_mini_batch_step", iteration=1, after=True,
               then_sleep=1.0)
    stopped = _stop(config, tmp_path / "run")
    assert stopped.iteration == 2 and stopped.how == ""
    assert stopped.checkpoint == tmp_path / "run" / "checkpoints" / "iter_000002"
    assert _iterations(tmp_path / "run") == [1, 2]


def test_an_evaluation_that_outlasts_the_grace_is_cut_and_its_iteration_kept(
        tmp_path, monkeypatch):
    config = scripted_config("grpo", iterations=4, save_every=100, term_grace=0.2,
                             eval_every=2)
    original = Trainer.evaluate

    def slow_evaluation(self, iteration):
        if iteration == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5.0)
        return original(self, iteration)

    monkeypatch.setattr(Trainer, "evaluate", slow_evaluation)
    stopped = _stop(config, tmp_path / "run")
    assert stopped.iteration == 2 and stopped.how == (
        "when iteration 2 did not finish within --run.term-grace 0.2 s (its evaluation was "
        "cut)")
    assert stopped.checkpoint == tmp_path / "run" / "checkpoints" / "iter_000002"
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2]
    assert "eval/success" not in records[1] and "rollout/success" in records[1]


def test_sigterm_in_the_first_rollout_leaves_nothing_and_the_same_command_starts_again(
        tmp_path, monkeypatch):
    config = scripted_config("grpo", iterations=2)
    _sigterm_when(monkeypatch, "train_iteration", at=0)
    stopped = _stop(config, tmp_path / "run")
    assert stopped.checkpoint is None and stopped.iteration == 0
    assert stopped.reason == ("in iteration 1's rollout, before any update: nothing to keep; "
                              "the same command starts the run again")
    assert not (tmp_path / "run").exists()
    monkeypatch.undo()
    Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path / "run").run()
    assert _iterations(tmp_path / "run") == [1, 2]


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


def test_a_second_sigterm_ends_the_grace_at_once(tmp_path, monkeypatch):
    """Two SIGTERMs while iteration 2 scores (a 60 s grace): the second ends the grace,
    and the update, which had not changed the weights, falls back to iteration 1."""
    from algorithms.training.learner import Learner

    config = scripted_config("grpo", iterations=3, save_every=100, term_grace=60)
    _signal_in(monkeypatch, Learner, "score", iteration=1, times=2)
    start = time.monotonic()
    stopped = _stop(config, tmp_path / "run")
    assert time.monotonic() - start < 50
    assert stopped.iteration == 1 and stopped.how == "when a second SIGTERM came in iteration 2"
    assert stopped.checkpoint == tmp_path / "run" / "checkpoints" / "iter_000001"


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
    """SIGTERM to the whole process group, as SLURM sends it, once iteration 2 ended: the
    subprocess env worker ignores it, train.py checkpoints the last finished update (in a
    rollout) or the iteration in progress (an update that ends within the grace), and
    says so in one line with the command that resumes it."""
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
    command = shlex.join(_train_py(tiny_model_folder, run, *flags)[1:] + ["--resume"])
    resume = f"resume with: python train.py {command}"
    assert stderr.strip().splitlines()[-1] in (
        f"train.py: terminated (SIGTERM) in iteration {done + 1}'s rollout; iteration {done},"
        f" the last finished update, is checkpointed in {saved}; {resume}",
        f"train.py: terminated (SIGTERM) after iteration {done}, checkpointed in {saved}; "
        f"{resume}")
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
            f"{saved}; resume with: torchrun --nproc-per-node 2 train.py ") in stderr, \
        stderr[-3000:]
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
