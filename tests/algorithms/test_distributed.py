"""Data-parallel training (algorithms.runs.distributed): 2 gloo ranks update like 1 process,
the work split never splits a group, every rank makes the same number of passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from algorithms.runs import distributed  # noqa: E402
from algorithms.runs.distributed import DistributedError, Ranks  # noqa: E402
from tests.algorithms.distributed_update import CASES  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
WEIGHT_TOLERANCE = 1e-5
"""Largest |w_2 ranks - w_1 process| after 6 AdamW steps at lr 1e-3 (measured: <= 3e-6;
gradients are summed in another order, AdamW normalises the difference)."""
SCORE_TOLERANCE = 1e-6
BF16_WEIGHT_TOLERANCE = 2e-3
"""The same for the cases under CPU mixed precision (``*-bf16``; measured: 1.0e-3 full
fine-tune, 2.5e-4 LoRA). Their scores agree to SCORE_TOLERANCE (the sharded model computes
what one process does: measured 0), their statistics to BF16_STATS_TOLERANCE (measured
<= 9e-5); the weights drift further because bfloat16 micro-batches cut differently on two
ranks round differently, and AdamW turns a small gradient's rounding into a step of up to
the learning rate (1e-3)."""
BF16_STATS_TOLERANCE = 1e-3


def torchrun(*args: str, nproc: int = 2, timeout: float = 600,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node nproc args...`` from the repo root."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={nproc}", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def _load(folder: Path, name: str) -> tuple[dict[str, torch.Tensor], dict]:
    from safetensors.torch import load_file

    return (load_file(str(folder / f"{name}.safetensors")),
            json.loads((folder / f"{name}.json").read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def updates(tmp_path_factory) -> tuple[Path, Path]:
    """Every case's update, by one process and by two gloo ranks."""
    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    single = subprocess.run([sys.executable, "-m", "tests.algorithms.distributed_update",
                             str(one)], cwd=REPO, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert single.returncode == 0, single.stderr[-3000:]
    ranks = torchrun("-m", "tests.algorithms.distributed_update", str(two))
    assert ranks.returncode == 0, ranks.stderr[-3000:]
    return one, two


@pytest.mark.parametrize("case", list(CASES))
def test_two_ranks_update_like_one_process(updates, case):
    one, two = updates
    (a, stats_a), (b, stats_b) = _load(one, case), _load(two, case)
    assert a.keys() == b.keys()
    bf16 = case.endswith("-bf16")
    for key in a:
        tolerance = (BF16_WEIGHT_TOLERANCE if bf16 else WEIGHT_TOLERANCE) \
            if key.startswith(("weights.", "critic.")) else SCORE_TOLERANCE
        difference = (a[key].float() - b[key].float()).abs().max().item()
        assert difference <= tolerance, f"{key}: {difference}"
    np.testing.assert_allclose(stats_b["advantages"], stats_a["advantages"], atol=1e-12)
    for key, value in stats_a["stats"].items():
        assert stats_b["stats"][key] == pytest.approx(
            value, abs=BF16_STATS_TOLERANCE if bf16 else 1e-5), key
    # the update did something: the equality is not that of two unchanged models
    assert stats_a["stats"]["grad_norm"] > 1e-3 and stats_a["stats"]["optimizer_steps"] == 6


def test_the_update_moved_the_weights(updates):
    """Against the initial weights, both runs moved (so equal weights are not trivial)."""
    from algorithms.config import ModelConfig
    from tests.algorithms.tiny import make_policy

    one, _ = updates
    torch.manual_seed(11)
    policy = make_policy(model_config=ModelConfig())
    trained, _ = _load(one, "gigpo")
    moved = max((trained[f"weights.model.{name}"] - value).abs().max().item()
                for name, value in policy.model.state_dict().items())
    assert moved > 1e-4


@pytest.mark.parametrize("groups,world", [(8, 2), (7, 2), (5, 3), (3, 3), (16, 1)])
def test_every_group_is_owned_by_exactly_one_rank(groups, world):
    owners = np.full(groups, -1)
    starts = []
    for rank in range(world):
        first, count = distributed.group_block(groups, Ranks(rank, world))
        assert count >= 1
        block = np.arange(first, first + count)
        assert np.all(owners[block] == -1), "a group owned twice"
        owners[block] = rank
        starts.append(first)
    assert np.all(owners >= 0) and starts == sorted(starts)  # contiguous, in rank order
    counts = np.bincount(owners, minlength=world)
    assert counts.max() - counts.min() <= 1


def test_more_ranks_than_groups_is_an_error():
    with pytest.raises(DistributedError, match="every rank needs at least one task group"):
        distributed.group_block(2, Ranks(0, 4))


@pytest.mark.parametrize("samples,micro,world", [(12, 3, 2), (7, 2, 3), (1, 4, 2), (0, 2, 2)])
def test_shares_cover_the_samples_and_passes_fit_every_share(samples, micro, world):
    index = np.arange(samples)
    shares = [distributed.share(index, Ranks(rank, world)) for rank in range(world)]
    assert sorted(np.concatenate(shares).tolist()) == index.tolist()
    runs = distributed.passes(samples, micro, Ranks(0, world))
    assert all(-(-len(part) // micro) <= runs for part in shares)
    assert runs == -(-len(shares[0]) // micro)


def test_one_process_shares_everything():
    index = np.arange(10)
    assert distributed.share(index, distributed.SINGLE).tolist() == index.tolist()
    assert distributed.passes(10, 4, distributed.SINGLE) == 3


def test_transformer_blocks_are_found():
    from tests.algorithms.tiny import make_policy

    blocks = distributed.transformer_blocks(make_policy().model)
    assert len(blocks) == 2
    with pytest.raises(DistributedError, match="transformer blocks"):
        distributed.transformer_blocks(torch.nn.Linear(2, 2))



# ---------------------------------------------------------------------- whole runs
def _train(run_dir: Path, algo: str, iterations: int, *flags: str, nproc: int = 1
           ) -> subprocess.CompletedProcess:
    args = ["-m", "tests.algorithms.distributed_train", str(run_dir), algo, str(iterations),
            *flags]
    if nproc > 1:
        result = torchrun(*args, nproc=nproc)
    else:
        result = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True,
                                text=True, timeout=600,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    a = {k: v for k, v in a.items() if not k.startswith("mirror.")}
    b = {k: v for k, v in b.items() if not k.startswith("mirror.")}
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_groups_are_owned_by_one_rank_and_start_on_the_tasks_of_one_process(tmp_path):
    _train(tmp_path / "one", "gigpo", 2)
    _train(tmp_path / "two", "gigpo", 2, nproc=2)
    one = json.loads((tmp_path / "one" / "groups-rank0.json").read_text())
    ranks = [json.loads((tmp_path / "two" / f"groups-rank{r}.json").read_text())
             for r in range(2)]
    for iteration, single in enumerate(one):
        owned = [log[iteration]["groups"] for log in ranks]
        assert sorted(g for groups in owned for g in groups) == [0, 1, 2]  # each once
        assert owned == [[0, 1], [2]]
        tasks = {g: t for log in ranks for g, t in log[iteration]["tasks"].items()}
        assert tasks == single["tasks"]  # the world size does not change the tasks
        rows = {g: n for log in ranks for g, n in log[iteration]["rows"].items()}
        assert rows == single["rows"]  # whole groups: every trajectory of a group
    metrics = [json.loads(line) for line in
               (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [1, 2]  # rank 0 logs once
    # the engine's full copy holds the trained weights (refreshed after the last update)
    final = _tensors(tmp_path / "two" / "final.safetensors")
    mirrored = [k for k in final if k.startswith("mirror.")]
    assert mirrored
    for key in mirrored:
        assert torch.equal(final[key], final["weights.model." + key.removeprefix("mirror.")])
    assert all(m["rollout/trajectories"] == 6 for m in metrics)


def test_two_ranks_overlap_their_rollouts_with_the_update(tmp_path):
    """Each rank's HF worker engine samples the next iteration while the ranks train; the
    collectives stay on the main threads (a mix-up would hang or fail the job)."""
    _train(tmp_path / "two", "grpo", 3, "--max-staleness", "1", nproc=2)
    metrics = [json.loads(line) for line in
               (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [m["overlap/staleness_mean"] for m in metrics] == [0.0, 1.0, 1.0]
    assert all(m["rollout/trajectories"] == 6 for m in metrics)
    assert all(np.isfinite(m["update/is_weight_mean"]) for m in metrics)
    ranks = [json.loads((tmp_path / "two" / f"groups-rank{r}.json").read_text())
             for r in range(2)]
    assert [[log[i]["groups"] for log in ranks] for i in range(3)] == [[[0, 1], [2]]] * 3


def _wait_for(path: Path, process: subprocess.Popen, timeout: float) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, "the job ended before it could be killed"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def _launch(run_dir: Path, algo: str, iterations: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node=2", "-m", "tests.algorithms.distributed_train",
               str(run_dir), algo, str(iterations)]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
)


def test_a_killed_two_rank_job_resumes_like_an_uninterrupted_one(tmp_path):
    job = _launch(tmp_path / "killed", "grpo", 20)
    try:
        _wait_for(tmp_path / "killed" / "checkpoints" / "latest", job, timeout=300)
    finally:
        _kill_all(job)  # torchrun and both ranks, mid-run
    latest = (tmp_path / "killed" / "checkpoints" / "latest").read_text()
    saved = int(latest.removeprefix("iter_"))
    assert saved < 20, "the job was not killed mid-run"
    total = saved + 1
    _train(tmp_path / "killed", "grpo", total, "--resume", nproc=2)
    _train(tmp_path / "straight", "grpo", total, nproc=2)
    difference = _max_difference(_tensors(tmp_path / "straight" / "final.safetensors"),
                                 _tensors(tmp_path / "killed" / "final.safetensors"))
    assert difference <= 1e-6
    metrics = (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(m)["iteration"] for m in metrics] == list(range(1, total + 1))


@pytest.mark.parametrize("lora", [False, True])
def test_a_two_rank_checkpoint_resumes_in_one_process(tmp_path, lora):
    flags = ("--lora",) if lora else ()
    _train(tmp_path, "gigpo", 1, *flags, nproc=2)
    meta = json.loads((tmp_path / "checkpoints" / "iter_000001" / "meta.json").read_text())
    # the two ranks hashed the frozen (LoRA: base) weights whole, gathering their shards;
    # the one-process resume below checks that hash against its own unsharded model
    assert (meta["model"]["lora"] is not None) == lora
    assert (meta["model"]["frozen_fingerprint"] or "").startswith("sha256:") == lora
    saved = _tensors(tmp_path / "final.safetensors")
    (tmp_path / "final.safetensors").unlink()
    _train(tmp_path, "gigpo", 2, "--resume", "--setup-only", *flags)
    assert _max_difference(saved, _tensors(tmp_path / "final.safetensors")) == 0.0
    assert any(k.startswith("exp_avg.") for k in saved)  # the moments came back too
    _train(tmp_path, "gigpo", 2, "--resume", *flags)
    metrics = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(m)["iteration"] for m in metrics] == [1, 2]


def test_a_one_process_checkpoint_resumes_on_two_ranks(tmp_path):
    _train(tmp_path, "ppo", 1)
    saved = _tensors(tmp_path / "final.safetensors")
    assert (tmp_path / "checkpoints" / "iter_000001" / "weights.safetensors").exists()
    (tmp_path / "final.safetensors").unlink()
    _train(tmp_path, "ppo", 2, "--resume", "--setup-only", nproc=2)
    assert _max_difference(saved, _tensors(tmp_path / "final.safetensors")) == 0.0


def _descendants(root: int) -> list[int]:
    """Pids of every process under ``root`` (torchrun starts its workers in sessions of
    their own, so killing its process group leaves them running)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack += children.get(pid, [])
    return found


def _descendant_with_rank(root: int, rank: int) -> int | None:
    """The pid of a process under ``root`` whose environment has ``RANK=rank``."""
    for pid in _descendants(root):
        try:
            environ = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return pid
    return None


def _kill_all(job: subprocess.Popen) -> None:
    import signal

    for pid in [job.pid, *_descendants(job.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    job.communicate(timeout=60)


def _signal_rank_1(job: subprocess.Popen, started: Path, signal_number: int
                   ) -> tuple[str, float]:
    """Once ``started`` exists (training is under way), send ``signal_number`` to rank 1
    and wait for the job to end; return its stderr and the seconds it took to end."""
    import time

    try:
        _wait_for(started, job, timeout=300)
        victim = _descendant_with_rank(job.pid, 1)
        assert victim is not None
        os.kill(victim, signal_number)
        start = time.monotonic()
        _, stderr = job.communicate(timeout=180)
        return stderr, time.monotonic() - start
    finally:
        if job.poll() is None:
            _kill_all(job)


def test_a_rank_killed_with_sigkill_ends_the_job_with_its_name(tmp_path):
    import signal

    job = _launch(tmp_path, "gigpo", 200)
    stderr, elapsed = _signal_rank_1(job, tmp_path / "metrics.jsonl", signal.SIGKILL)
    assert job.returncode != 0
    assert elapsed < 60
    assert "rank      : 1" in stderr or "rank: 1" in stderr, stderr[-3000:]
    assert "SIGKILL" in stderr or "Signal 9" in stderr, stderr[-3000:]


def test_blocks_of_groups_concatenate_to_the_rollout_of_all_groups():
    """Two ranks' blocks (group offsets 0 and 2), concatenated, equal one rollout of the
    4 groups: same tasks, rows, ids, anchors and bootstrap prompts."""
    from agentgym.vector import make_vector_env
    from algorithms.agent.rollout import RolloutSettings, collect_rollout
    from algorithms.agent.step_batch import concat_batches
    from algorithms.config import PromptConfig
    from tests.algorithms.fakes import ScriptedEngine
    from tests.algorithms.tiny import make_tokenizer

    tokenizer = make_tokenizer()

    def answer(turn: int, position: int, prompt: str) -> str:
        del turn, position  # the answer depends on the prompt alone
        return "<action> open red door </action>" if "open red" in prompt else \
            "<action> look </action>"

    settings = RolloutSettings(group_size=2, max_steps=3, temperature=1.0, max_new_tokens=12,
                               invalid_action_penalty=0.1,
                               prompt=PromptConfig(think=False, max_prompt_tokens=300),
                               keep_bootstrap_prompts=True)

    def rollout(groups: int, offset: int):
        env = make_vector_env("AgentGym/Scripted-v0", 2 * groups, group_size=2,
                              num_rooms=2, hint=True, max_steps=3, num_tasks=64)
        try:
            return collect_rollout(env, ScriptedEngine(tokenizer, answer), tokenizer, settings,
                                   group_task_ids=None, seed=5, group_offset=offset)
        finally:
            env.close()

    whole = rollout(4, 0)
    joined = concat_batches([rollout(2, 0), rollout(2, 2)], [0, 2], 2,
                            int(tokenizer.pad_token_id))
    assert len(set(whole.log.task_ids)) > 1
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "rewards",
                 "traj_ids", "group_ids", "anchor_ids", "step_index", "last_step", "success",
                 "bootstrap_rows", "bootstrap_prompt_ids", "bootstrap_prompt_mask"):
        np.testing.assert_array_equal(getattr(joined, name), getattr(whole, name), err_msg=name)
    assert joined.anchors == whole.anchors
    for name in ("task_ids", "actions", "observations"):
        assert getattr(joined.log, name) == getattr(whole.log, name), name


@pytest.mark.ray
@pytest.mark.slow  # a Ray cluster and its actors take ~30 s to start here
def test_two_ranks_put_their_envs_on_an_existing_ray_cluster(tmp_path):
    """``ray start --head`` (the cluster of a two-machine launch, on one machine), then a
    2-rank job with ``--env.backend ray --env.ray-address auto``: each rank connects
    as a driver of its own and its envs are its own actors on that cluster."""
    pytest.importorskip("ray")
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ray_env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    ray = [sys.executable, "-m", "ray.scripts.scripts"]
    started = subprocess.run([*ray, "start", "--head", f"--port={port}", "--num-cpus=2",
                              "--include-dashboard=false", "--disable-usage-stats"],
                             capture_output=True, text=True, timeout=180, env=ray_env)
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        _train(tmp_path, "grpo", 1, "--ray-address", "auto", nproc=2)
        logs = [json.loads((tmp_path / f"groups-rank{r}.json").read_text()) for r in range(2)]
        assert [log[0]["groups"] for log in logs] == [[0, 1], [2]]
        saved = json.loads((tmp_path / "config.json").read_text())["env"]
        assert saved["backend"] == "ray" and saved["ray_address"] == "auto"
    finally:
        subprocess.run([*ray, "stop", "--force"], capture_output=True, timeout=120,
                       env=ray_env)


# ---------------------------------------------------------------------- train.py itself
def _train_py(model: Path, run_dir: Path, *flags: str) -> list[str]:
    """``train.py`` on the cpu-demo env with the tiny model (as torchrun arguments)."""
    return ["train.py", "--model.name-or-path", str(model), "--run.output-dir",
            str(run_dir.parent), "--run.run-name", run_dir.name, "--run.no-tensorboard",
            "--run.torch-threads", "1", *flags]


def test_train_py_under_torchrun_trains_and_resumes(tmp_path, tiny_model_folder):
    run = tmp_path / "run"
    first = torchrun(*_train_py(tiny_model_folder, run, "--run.iterations", "1"))
    assert first.returncode == 0, first.stderr[-3000:]
    output = first.stdout
    assert output.count("[agentgym] preset=") == 1  # rank 0 alone prints
    assert "torchrun: 2 ranks (gloo)" in output and "sharded by 2 ranks" in output
    resumed = torchrun(*_train_py(tiny_model_folder, run, "--run.iterations", "2",
                                  "--resume"), nproc=1)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "(saved by 2 ranks)" in resumed.stdout
    metrics = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(m)["iteration"] for m in metrics] == [1, 2]


def test_a_hanging_rank_ends_the_job_after_the_timeout(tmp_path, tiny_model_folder):
    """Rank 1 stopped (SIGSTOP, as if hung): rank 0's next collective fails after
    --run.dist-timeout, it exits with one line naming the cause, torchrun ends the job."""
    import signal

    run = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node=2", *_train_py(tiny_model_folder, run, "--run.iterations",
                                                "500", "--run.dist-timeout", "10")]
    job = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    stderr, elapsed = _signal_rank_1(job, run / "metrics.jsonl", signal.SIGSTOP)
    assert job.returncode != 0
    assert elapsed < 120
    assert "train.py: rank 0: error: a collective with the other ranks failed" in stderr, \
        stderr[-3000:]


def test_ray_address_needs_the_ray_backend():
    from algorithms.config import ConfigError, TrainConfig, replace

    with pytest.raises(ConfigError, match="env.ray_address needs env.backend ray"):
        replace(TrainConfig(), env={"ray_address": "auto"}).validate()
    with pytest.raises(ConfigError, match="run.dist_timeout must be > 0"):
        replace(TrainConfig(), run={"dist_timeout": 0.0}).validate()


def test_no_ray_cluster_at_the_address_is_one_clear_error(monkeypatch):
    pytest.importorskip("ray")
    from agentgym.vector.ray_backend import connect_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConnectionError, match="no Ray cluster at 'auto'.*ray start --head"):
        connect_ray("auto")
