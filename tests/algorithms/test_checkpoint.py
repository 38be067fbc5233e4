"""Checkpoints: exact round trip, retention (last K + best), durability, and no code runs
when one is loaded."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch

from algorithms.runs import checkpoint as ckpt
from algorithms.runs.checkpoint import (
    CheckpointError,
    best_checkpoint,
    flatten_state,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    unflatten_state,
)


def _learner_state(seed: int = 0, dtype: torch.dtype = torch.float32) -> dict:
    """A learner state as run_checkpoint.learner_state returns it, with real AdamW state."""
    generator = torch.Generator().manual_seed(seed)
    weights = {"layer.weight": torch.randn(4, 3, generator=generator).to(dtype),
               "layer.bias": torch.randn(4, generator=generator).to(dtype)}
    params = [torch.nn.Parameter(w.clone().float()) for w in weights.values()]
    optimizer = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95))
    sum((p ** 2).sum() for p in params).backward()
    optimizer.step()
    return {"model": weights, "optimizer": optimizer.state_dict(),
            "value_head": {"weight": torch.ones(1, 3, dtype=dtype)}}


def _assert_same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert set(a) == set(b), (set(a), set(b))
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        assert a == b


def test_round_trip_keeps_values_dtypes_and_optimizer_state(tmp_path):
    state = _learner_state(dtype=torch.bfloat16)
    folder = save_checkpoint(tmp_path, 3, state, {"config": {"algo": "grpo"}})
    payload = load_checkpoint(tmp_path)
    assert payload["iteration"] == 3 and payload["path"] == str(folder)
    _assert_same(state["model"], payload["learner"]["model"])  # bfloat16 stays bfloat16
    _assert_same(state["value_head"], payload["learner"]["value_head"])
    loaded = payload["learner"]["optimizer"]
    assert set(loaded["state"]) == {0, 1}  # integer parameter indices come back as ints
    for index in (0, 1):
        _assert_same(state["optimizer"]["state"][index], loaded["state"][index])
    assert loaded["param_groups"][0]["lr"] == 1e-3
    # torch accepts it back (JSON gave lists where the state had tuples)
    params = [torch.nn.Parameter(torch.zeros(4, 3)), torch.nn.Parameter(torch.zeros(4))]
    torch.optim.AdamW(params).load_state_dict(loaded)
    meta = payload["meta"]
    assert meta["weights_dtype"] == ["bfloat16"] and meta["config"] == {"algo": "grpo"}
    assert meta["sizes"]["weights.safetensors"] == (folder / "weights.safetensors").stat().st_size
    assert torch.equal(payload["rng"]["torch"], torch.get_rng_state())


def test_flatten_state_round_trip_and_refusals():
    state = {"a": [torch.arange(3), {"b": None, 2: (1.5, "x")}], "c": True}
    tensors: dict[str, torch.Tensor] = {}
    skeleton = flatten_state(state, "s", tensors)
    json.dumps(skeleton)  # plain JSON
    back = unflatten_state(json.loads(json.dumps(skeleton)), tensors)
    assert torch.equal(back["a"][0], torch.arange(3))
    assert back["a"][1] == {"b": None, 2: [1.5, "x"]} and back["c"] is True
    with pytest.raises(TypeError, match="object"):
        flatten_state({"x": object()}, "s", {})


def test_keeps_the_last_k_plus_the_best_and_strips_old_optimizer_state(tmp_path):
    scores = {1: 0.5, 2: 0.9, 3: 0.2, 4: None, 5: 0.4}
    for iteration, score in scores.items():
        save_checkpoint(tmp_path, iteration, _learner_state(iteration), {}, keep=2, score=score)
    root = tmp_path / "checkpoints"
    names = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert names == ["iter_000002", "iter_000004", "iter_000005"]
    assert best_checkpoint(tmp_path) == (root / "iter_000002", 0.9)
    assert latest_checkpoint(tmp_path) == root / "iter_000005"
    # only the newest keeps what --resume needs
    assert (root / "iter_000005" / "optimizer.safetensors").exists()
    for old in ("iter_000002", "iter_000004"):
        assert not (root / old / "optimizer.safetensors").exists()
        assert (root / old / "weights.safetensors").exists()
        with pytest.raises(CheckpointError, match="no optimizer state"):
            load_checkpoint(root / old)
        assert "optimizer" not in load_checkpoint(root / old, optimizer=False)["learner"]
    assert not list(root.glob(".tmp-*"))


def test_every_rename_is_preceded_and_followed_by_fsync(tmp_path, monkeypatch):
    """Files are fsynced before their rename and the folder after it (durable rename)."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "fsync", fsync)
    monkeypatch.setattr(ckpt.os, "replace", replace)
    monkeypatch.setattr("algorithms.runs.atomic.os.fsync", fsync)
    monkeypatch.setattr("algorithms.runs.atomic.os.replace", replace)
    save_checkpoint(tmp_path, 1, _learner_state(), {})
    root = str((tmp_path / "checkpoints").resolve())
    folder = f"{root}/iter_000001"
    synced = [path for kind, path in events if kind == "fsync"]
    for name in ("weights.safetensors", "optimizer.safetensors", "rng.safetensors"):
        assert f"{root}/.tmp-iter_000001/{name}" in synced
    renames = [i for i, (kind, _) in enumerate(events) if kind == "replace"]
    for index in renames:  # the folder of every renamed entry is fsynced right after
        target = events[index][1]
        parent = str(Path(target).resolve().parent)
        assert ("fsync", parent) in events[index + 1: index + 3], (target, events)
    # the checkpoint folder itself: its files and the folder fsynced before the rename
    move = events.index(("replace", folder))
    assert ("fsync", f"{root}/.tmp-iter_000001") in events[:move]
    assert events[renames[-1]][1] == f"{root}/latest"


class _Payload:
    """Unpickling this runs ``touch MARKER``: what a hostile checkpoint would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_checkpoint_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps({"learner": _Payload(marker)})
    # 1. the old pickle format, as torch.save wrote it: refused before it is opened
    old = tmp_path / "old" / "checkpoints" / "iter_000001"
    old.mkdir(parents=True)
    (old / "state.pt").write_bytes(evil)
    (old / "meta.json").write_text('{"iteration": 1}')
    (old.parent / "latest").write_text("iter_000001")
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(old)
    # 2. a pickle disguised under the new file names: safetensors only parses a header
    fake = tmp_path / "fake"
    save_checkpoint(fake, 1, _learner_state(), {})
    folder = latest_checkpoint(fake)
    for name in ("weights.safetensors", "optimizer.safetensors", "rng.safetensors"):
        (folder / name).write_bytes(evil)
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_checkpoint(fake)
    # 3. a pickle in the JSON files is just text that is not JSON
    save_checkpoint(fake, 2, _learner_state(), {})
    (latest_checkpoint(fake) / "optimizer.json").write_bytes(evil)
    with pytest.raises((UnicodeDecodeError, json.JSONDecodeError)):
        load_checkpoint(fake)
    assert not marker.exists()
    # the test's payload is real: unpickling it does run the command
    pickle.loads(evil)
    assert marker.exists()


def test_a_crash_while_writing_leaves_the_previous_checkpoint(tmp_path):
    for iteration in (1, 2):
        save_checkpoint(tmp_path, iteration, {"w": torch.tensor([float(iteration)])},
                        {"note": iteration})
    # a crash mid-write leaves a temporary folder that is never taken for a checkpoint
    (tmp_path / "checkpoints" / ".tmp-iter_000003").mkdir()
    (tmp_path / "checkpoints" / ".latest.tmp").write_text("iter_000003")
    assert latest_checkpoint(tmp_path).name == "iter_000002"
    payload = load_checkpoint(tmp_path)
    assert payload["iteration"] == 2 and payload["meta"]["note"] == 2
    assert torch.equal(payload["learner"]["w"], torch.tensor([2.0]))
    save_checkpoint(tmp_path, 3, {"w": torch.tensor([3.0])}, {})  # and the next save works
    assert load_checkpoint(tmp_path)["iteration"] == 3


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path)


def _sharded(run_dir: Path) -> Path:
    """A one-process DCP checkpoint of a small state (DCP needs no process group)."""
    from algorithms.runs.checkpoint import save_sharded_checkpoint
    from algorithms.runs.distributed import SINGLE

    weights = {"scorer": {"w": torch.arange(6.0).reshape(2, 3)}}
    optimizer = {"scorer": {"state": {"w": {"exp_avg": torch.ones(2, 3)}}}}
    return save_sharded_checkpoint(run_dir, 1, weights, optimizer, {"note": 1}, ranks=SINGLE)


def test_a_sharded_checkpoint_loads_back(tmp_path):
    from algorithms.runs.checkpoint import is_sharded, load_sharded_checkpoint

    folder = _sharded(tmp_path)
    assert is_sharded(tmp_path) and latest_checkpoint(tmp_path) == folder
    state = {"weights": {"scorer": {"w": torch.zeros(2, 3)}},
             "optimizer": {"scorer": {"state": {"w": {"exp_avg": torch.zeros(2, 3)}}}}}
    payload = load_sharded_checkpoint(tmp_path, state)
    assert payload["iteration"] == 1 and payload["meta"]["format"] == "dcp"
    assert torch.equal(state["weights"]["scorer"]["w"], torch.arange(6.0).reshape(2, 3))
    assert torch.equal(state["optimizer"]["scorer"]["state"]["w"]["exp_avg"], torch.ones(2, 3))


def test_a_malicious_sharded_checkpoint_index_runs_nothing(tmp_path):
    from algorithms.runs.checkpoint import load_sharded_checkpoint

    marker = tmp_path / "pwned"
    folder = _sharded(tmp_path / "run")
    index = folder / "sharded" / "weights" / ".metadata"
    index.write_bytes(pickle.dumps(_Payload(marker)))
    state = {"weights": {"scorer": {"w": torch.zeros(2, 3)}}, "optimizer": None}
    with pytest.raises(CheckpointError, match="refused posix.system|refused os.system"):
        load_sharded_checkpoint(tmp_path / "run", state, optimizer=False)
    assert not marker.exists()
