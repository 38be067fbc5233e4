"""Run folders a user can trust: no silent reuse, resume only what exists, eval-only apart."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from algorithms.agent.metrics import read_metrics  # noqa: E402
from algorithms.config import ConfigError, replace  # noqa: E402
from algorithms.runs.checkpoint import CheckpointError, latest_checkpoint  # noqa: E402
from algorithms.runs.run_folder import RunFolderError, default_run_dir  # noqa: E402
from algorithms.training.trainer import Trainer  # noqa: E402
from tests.algorithms.scripted_config import scripted_config  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402


def _train(run_dir, make_vec_env=None, **run):
    config = scripted_config("grpo", **{"iterations": 1, **run})
    trainer = Trainer(config, policy=make_policy(seed=0), run_dir=run_dir,
                      make_vec_env=make_vec_env)
    trainer.run()
    return trainer


def test_a_second_run_in_the_same_folder_is_refused(tmp_path):
    _train(tmp_path)
    before = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(RunFolderError, match=r"already holds a run .*--resume.*--run.run-name"
                                             r".*--run.overwrite"):
        _train(tmp_path)
    assert (tmp_path / "metrics.jsonl").read_text() == before  # nothing appended


def test_overwrite_replaces_the_old_run_and_keeps_foreign_files(tmp_path):
    _train(tmp_path, iterations=2)
    (tmp_path / "notes.txt").write_text("mine")
    _train(tmp_path, overwrite=True)
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1]
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.is_dir())
    assert names == ["iter_000001"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_resume_without_a_checkpoint_is_an_error(tmp_path):
    with pytest.raises(RunFolderError, match="no checkpoint to resume"):
        _train(tmp_path / "nosuchrun", resume=True)
    assert not (tmp_path / "nosuchrun").exists()


def test_resume_says_what_it_resumed(tmp_path, capsys):
    _train(tmp_path)
    config = scripted_config("grpo", iterations=2, resume=True, progress=True)
    Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path).run()
    out = capsys.readouterr().out
    checkpoint = tmp_path / "checkpoints" / "iter_000001"
    assert f"resumed {tmp_path} at iteration 1 from checkpoint {checkpoint}" in out
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]


def test_resume_with_other_settings_is_a_config_error(tmp_path):
    _train(tmp_path)
    changed = replace(scripted_config("grpo", iterations=2, resume=True), learner={"lr": 0.5})
    with pytest.raises(ConfigError, match="learner.lr"):
        Trainer(changed, policy=make_policy(seed=0), run_dir=tmp_path).run()


def test_resuming_a_run_saved_by_another_version_is_refused_before_it_loads(tmp_path):
    _train(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["generation"]["vllm_dtype"] = saved["generation"]["vllm"].pop("dtype")
    (tmp_path / "config.json").write_text(json.dumps(saved))
    metrics = (tmp_path / "metrics.jsonl").read_text()
    config = scripted_config("grpo", iterations=2, resume=True)
    with pytest.raises(ConfigError, match="another version of AgentGym \\(unknown: "
                                          "generation.vllm_dtype; missing: "
                                          "generation.vllm.dtype\\)"):
        Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path).run()
    assert (tmp_path / "metrics.jsonl").read_text() == metrics


def test_eval_only_writes_its_own_folder_and_leaves_the_run_alone(tmp_path):
    run = tmp_path / "runs" / "train-run"
    _train(run)
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    config = scripted_config("grpo", iterations=1, eval_only=True, checkpoint=str(run),
                             output_dir=str(tmp_path / "runs"),
                             progress=False)
    where = default_run_dir(config)
    assert where == run / "eval" / "iter_000001-default"
    evaluator = Trainer(config, policy=make_policy(seed=0))
    evaluator.run()
    assert evaluator.run_dir == where
    for path, data in files.items():  # the training run's files are untouched
        assert path.read_bytes() == data, path
    saved = json.loads((where / "config.json").read_text())
    assert saved["run"]["eval_only"] is True
    assert "eval/success" in read_metrics(where / "metrics.jsonl")[0]
    assert (where / "records" / "eval" / "iter_000001.jsonl.gz").exists()
    # a second evaluation of the same checkpoint and split is refused like a run
    with pytest.raises(RunFolderError, match="already holds a run"):
        Trainer(config, policy=make_policy(seed=0)).run()


def test_eval_only_of_a_missing_checkpoint_is_an_error(tmp_path):
    config = scripted_config("grpo", eval_only=True, checkpoint=str(tmp_path / "none"))
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        Trainer(config, policy=make_policy(seed=0))


def test_the_best_checkpoint_is_kept_beside_the_last(tmp_path):
    trainer = _train(tmp_path, iterations=3, eval_every=1, keep_checkpoints=1)
    root = tmp_path / "checkpoints"
    successes = {r["iteration"]: r["eval/success"] for r in read_metrics(tmp_path / "metrics.jsonl")}
    best = max(successes, key=lambda i: (successes[i], -i))  # the first of the highest
    kept = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert kept == sorted({f"iter_{best:06d}", "iter_000003"})
    assert latest_checkpoint(tmp_path) == root / "iter_000003"
    assert trainer.start_iteration == 0


def test_weights_only_checkpoints_evaluate_but_do_not_resume(tmp_path):
    _train(tmp_path, save_optimizer=False)
    folder = latest_checkpoint(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "rng.safetensors",
                                                         "weights.safetensors"]
    with pytest.raises(CheckpointError, match="no optimizer state"):
        _train(tmp_path, iterations=2, resume=True, save_optimizer=False)
    config = scripted_config("grpo", eval_only=True, checkpoint=str(tmp_path))
    Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path / "evaluated").run()
    assert (tmp_path / "evaluated" / "eval" / "iter_000001.json").exists()


def test_a_failed_setup_of_a_new_run_leaves_nothing_that_blocks_a_retry(tmp_path):
    """The envs fail to build after the config was written: the run's files go, the
    folder with them when it is empty, and the same command then starts cleanly."""
    broken = replace(scripted_config("grpo", iterations=1),
                     env={"env_kwargs": json.dumps({"num_rooms": 0})})
    with pytest.raises(RuntimeError, match="num_rooms >= 1"):
        Trainer(broken, policy=make_policy(seed=0), run_dir=tmp_path / "run").run()
    assert not (tmp_path / "run").exists()
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError, match="num_rooms >= 1"):
        Trainer(broken, policy=make_policy(seed=0), run_dir=tmp_path / "kept").run()
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["notes.txt"]
    _train(tmp_path / "run")  # no --run.overwrite needed
    assert [r["iteration"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1]


def test_a_failed_setup_of_a_resume_keeps_the_run(tmp_path):
    _train(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())

    def no_envs(*args, **kwargs):
        raise RuntimeError("no envs today")

    with pytest.raises(RuntimeError, match="no envs today"):
        _train(tmp_path, no_envs, iterations=2, resume=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert latest_checkpoint(tmp_path).name == "iter_000001"


def test_a_run_without_a_checkpoint_is_not_offered_for_resume(tmp_path):
    (tmp_path / "config.json").write_text("{}")  # a run stopped before its first checkpoint
    with pytest.raises(RunFolderError, match=r"already holds a run \(config.json\); it has no "
                                             r"checkpoint to resume .*--run.run-name NAME, or "
                                             r"replace it with --run.overwrite"):
        _train(tmp_path)


def test_a_finished_run_is_told_apart_from_one_to_continue(tmp_path):
    from algorithms.runs.run_folder import finished_run

    _train(tmp_path, iterations=2)
    finished = finished_run(scripted_config("grpo", iterations=2, resume=True), tmp_path)
    assert finished is not None
    line, metrics = finished
    assert line == (f"{tmp_path} is finished: its newest checkpoint, iter_000002, is after "
                    "iteration 2 (run.iterations 2); nothing to resume (raise "
                    "--run.iterations to train on)")
    assert "rollout/success" in metrics
    assert finished_run(scripted_config("grpo", iterations=3, resume=True), tmp_path) is None
    assert finished_run(scripted_config("grpo", iterations=2), tmp_path) is None
    assert finished_run(scripted_config("grpo", iterations=2, resume=True),
                        tmp_path / "elsewhere") is None


def _sft_checkpoint(run_dir, step: int, epoch: float) -> None:
    """The files :func:`finished_run` reads of an SFT checkpoint after ``step`` steps."""
    folder = run_dir / "checkpoints" / f"iter_{step:06d}"
    folder.mkdir(parents=True)
    (folder / "weights.safetensors").write_bytes(b"")
    (folder / "meta.json").write_text(json.dumps(
        {"iteration": step, "metrics": {"sft/epoch": epoch, "sft/loss": 0.5}}))
    (run_dir / "checkpoints" / "latest").write_text(folder.name)


@pytest.mark.parametrize(("sft", "finished"), [
    ({"max_steps": 4}, True), ({"max_steps": 5}, False), ({"epochs": 2}, True),
    ({"epochs": 3}, False)])
def test_an_sft_run_is_finished_at_its_steps_or_epochs(tmp_path, sft, finished):
    from algorithms.runs.run_folder import finished_run

    _sft_checkpoint(tmp_path, 4, 2.0)
    config = replace(scripted_config("grpo", resume=True), algo="sft", sft=sft)
    found = finished_run(config, tmp_path)
    assert (found is not None) == finished
    if finished:
        assert "is after optimizer step 4" in found[0] and found[1]["sft/loss"] == 0.5


_HOLDER = """
import sys, time
from pathlib import Path
from algorithms.runs.run_folder import lock_run_folder
lock = lock_run_folder(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(120)
"""


def _hold_in_another_process(run_dir):
    """A process that holds ``run_dir``'s lock until killed (what an orphaned worker of a
    stopped job does)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(run_dir)], cwd=root,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.skipif(__import__("sys").platform == "win32", reason="the lock is POSIX flock")
def test_a_folder_in_use_by_another_process_is_refused_and_left_alone(tmp_path):
    """Two processes in one folder would write over each other's metrics and
    checkpoints; the second is refused before it touches anything, named by the holder's
    pid, whatever its mode (resume included), and the folder is free once the holder is
    killed."""
    _train(tmp_path, iterations=2)
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()
              and p.name != ".lock"}
    holder = _hold_in_another_process(tmp_path)
    try:
        for run in ({"iterations": 3, "resume": True}, {"overwrite": True}, {}):
            with pytest.raises(RunFolderError,
                               match=rf"in use by another run \(pid {holder.pid}, since "):
                _train(tmp_path, **run)
        after = {p.name: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()
                 and p.name != ".lock"}
        assert after == before  # nothing deleted, appended or rewritten
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / ".lock").exists()  # the killed holder's file stays; its lock went
    _train(tmp_path, iterations=3, resume=True)  # the kernel dropped the dead one's lock
    assert not (tmp_path / ".lock").exists()
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]


def test_one_process_holds_a_folder_once_and_gives_it_up_on_close(tmp_path):
    from algorithms.runs.run_folder import lock_run_folder

    first = lock_run_folder(tmp_path / "run")
    assert first is not None and first.created
    with pytest.raises(RunFolderError, match=r"in use by another run \(pid \d+"):
        lock_run_folder(tmp_path / "run")  # a second trainer in this process, too
    first.release()
    assert not (tmp_path / "run" / ".lock").exists()  # an ended run leaves no lock file
    lock_run_folder(tmp_path / "run").release(remove_folder=True)  # free again
    assert (tmp_path / "run").exists()  # it existed when the second lock was taken
    lock = lock_run_folder(tmp_path / "new")
    lock.release(remove_folder=True)
    assert not (tmp_path / "new").exists()  # the lock made it, and nothing else is there
