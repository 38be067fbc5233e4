"""The HF engine in a generation worker process: the same samples and log-probs as the
in-process engine, weight sync (full model and LoRA), errors from the worker, a killed
worker, calls from a background thread, and no process left behind.

Each worker start spawns a Python process that imports torch and transformers (about 5 s
on the shared 2-core machine), so the tests share workers where they can."""

from __future__ import annotations

import dataclasses
import gc
import os
import signal
import threading
import time

import pytest
import torch

pytest.importorskip("transformers")

from algorithms.config import ModelConfig  # noqa: E402
from algorithms.engines.hf import HFEngine  # noqa: E402
from algorithms.engines.hf_worker import (  # noqa: E402
    EngineWorkerError,
    HFWorkerEngine,
    SharedWeights,
    choose_transport,
    shared_memory_dir,
)
from tests.algorithms.tiny import make_policy  # noqa: E402

TEXTS = ["open red door", "You are in room 1 of 3 . look", "look", "open blue door look"]
LORA = ModelConfig(lora_rank=4, lora_alpha=8, gradient_checkpointing=True,
                   lora_target_modules=("q_proj", "k_proj", "v_proj", "up_proj"))
"""The cpu-demo's kind of policy: LoRA with gradient checkpointing (whose input-grad hook
does not pickle: a no-op in the worker's copy)."""


def _prompts(tokenizer) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]


def _in_process(policy, prompts, **kwargs):
    return HFEngine(policy.model, policy.tokenizer, batch_size=3).generate(prompts, **kwargs)


def _assert_same(rows, expected):
    assert rows == expected
    assert [row.log_probs for row in rows] == [row.log_probs for row in expected]


def _move_trainable_weights(model, scale: float, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(scale * torch.randn(parameter.shape, generator=generator))


def _gone(pid: int) -> bool:
    """The process has exited and was reaped (no zombie left in the process table)."""
    return not os.path.exists(f"/proc/{pid}")


@pytest.mark.parametrize("transport", ["shared", "pipe"])
def test_worker_samples_like_the_in_process_engine_and_follows_synced_weights(transport):
    policy = make_policy(seed=1)
    prompts = _prompts(policy.tokenizer)
    sampling = {"temperature": 1.0, "max_new_tokens": 10, "seed": 3}
    worker = HFWorkerEngine(policy.model, policy.tokenizer, batch_size=3, threads=1,
                            weight_transport=transport)
    assert worker.weight_transport == transport
    if transport == "shared":  # the staging file's name is gone once the worker mapped it
        path = worker._shared.spec["path"]
        assert os.path.dirname(path) == shared_memory_dir() and not os.path.exists(path)
    try:
        before = _in_process(policy, prompts, **sampling)
        _assert_same(worker.generate(prompts, **sampling), before)
        stopped = worker.generate(prompts, **sampling, stop=(TEXTS[0].split()[0],))
        _assert_same(stopped, _in_process(policy, prompts, **sampling,
                                          stop=(TEXTS[0].split()[0],)))
        _assert_same(worker.generate(prompts, temperature=0.7, max_new_tokens=6, seed=1),
                     _in_process(policy, prompts, temperature=0.7, max_new_tokens=6, seed=1))

        _move_trainable_weights(policy.model, 0.1, seed=0)  # a full-model "update"
        after = _in_process(policy, prompts, **sampling)
        assert after != before
        _assert_same(worker.generate(prompts, **sampling), before)  # stale until synced
        worker.sync_weights(policy.model)
        _assert_same(worker.generate(prompts, **sampling), after)
        moved = [p.detach().clone() for p in policy.model.parameters()]
        _move_trainable_weights(policy.model, 0.1, seed=1)  # a snapshot, not live weights
        _assert_same(worker.generate(prompts, **sampling), after)
        with torch.no_grad():
            for parameter, value in zip(policy.model.parameters(), moved, strict=True):
                parameter.copy_(value)

        # from a background thread, while the main thread computes with torch
        results = {}
        thread = threading.Thread(
            target=lambda: results.update(rows=worker.generate(prompts, **sampling)))
        thread.start()
        product = torch.eye(64)
        while thread.is_alive():
            product = (product @ torch.randn(64, 64)).tanh()
        thread.join()
        _assert_same(results["rows"], after)

        # an exception inside the worker comes back as itself; the worker goes on
        with pytest.raises(ValueError, match="empty prompt") as caught:
            worker.generate([prompts[0], []], **sampling)
        assert "raised in the generation worker process" in caught.value.__notes__[0]
        _assert_same(worker.generate(prompts, **sampling), after)
    finally:
        worker.close()
    assert not worker._process.is_alive() and _gone(worker.pid)


@pytest.mark.parametrize("dtype", ["auto", "bfloat16"])
def test_lora_adapters_are_what_sync_sends(dtype):
    """Also under CPU mixed precision: the worker's copy computes as the parent's does
    (autocast, float32 head, eager attention cross in the pickled model)."""
    pytest.importorskip("peft")
    policy = make_policy(seed=1, model_config=dataclasses.replace(LORA, dtype=dtype))
    prompts = _prompts(policy.tokenizer)
    sampling = {"temperature": 1.0, "max_new_tokens": 10, "seed": 3}
    embeddings = policy.model.get_input_embeddings()
    hooks = dict(embeddings._forward_hooks)
    assert any("<locals>" in hook.__qualname__ for hook in hooks.values())
    worker = HFWorkerEngine(policy.model, policy.tokenizer, batch_size=3)
    assert embeddings._forward_hooks == hooks  # the parent's model is left as it was
    try:
        before = _in_process(policy, prompts, **sampling)
        _assert_same(worker.generate(prompts, **sampling), before)
        _move_trainable_weights(policy.model, 0.5, seed=0)  # the adapters only
        assert all("lora_" in name for name, parameter in policy.model.named_parameters()
                   if parameter.requires_grad)
        after = _in_process(policy, prompts, **sampling)
        assert [row.log_probs for row in after] != [row.log_probs for row in before]
        worker.sync_weights(policy.model)
        _assert_same(worker.generate(prompts, **sampling), after)

        plain = make_policy(seed=1)  # other trainable names: refused before sending
        with pytest.raises(ValueError, match="do not match the worker's: unknown"):
            worker.sync_weights(plain.model)
        _assert_same(worker.generate(prompts, **sampling), after)
    finally:
        worker.close()


def test_a_killed_worker_is_a_clear_error_for_the_pending_and_the_next_call():
    policy = make_policy(seed=1)
    worker = HFWorkerEngine(policy.model, policy.tokenizer, batch_size=64)
    errors = []

    def long_generation():
        try:  # 8 batches of 64 rows x up to 1000 tokens: ~10 s of work here, seconds on CI
            worker.generate([_prompts(policy.tokenizer)[0]] * 512, temperature=1.0,
                            max_new_tokens=1000, seed=0)
        except EngineWorkerError as error:
            errors.append((error, time.monotonic()))

    thread = threading.Thread(target=long_generation)
    thread.start()
    time.sleep(0.3)  # the kill lands before or during the request: either way an error
    assert thread.is_alive(), "the generation finished before the kill"
    killed_at = time.monotonic()
    os.kill(worker.pid, signal.SIGKILL)
    thread.join(timeout=10)
    assert not thread.is_alive()
    (error, raised_at), = errors
    assert raised_at - killed_at < 3.0
    assert str(error).startswith("the generation worker process died (exit code -9)")
    assert "\n" not in str(error)
    with pytest.raises(EngineWorkerError, match="exit code -9"):
        worker.generate([[5]], temperature=1.0, max_new_tokens=2, seed=0)
    with pytest.raises(EngineWorkerError, match="exit code -9"):
        worker.sync_weights(policy.model)
    worker.close()
    assert _gone(worker.pid)


def test_close_is_idempotent_and_garbage_collection_stops_the_worker():
    policy = make_policy(seed=1)
    worker = HFWorkerEngine(policy.model, policy.tokenizer)
    worker.release()  # a no-op
    worker.close()
    worker.close()
    assert _gone(worker.pid)
    with pytest.raises(EngineWorkerError, match="closed"):
        worker.generate([[5]], temperature=1.0, max_new_tokens=2, seed=0)

    worker = HFWorkerEngine(policy.model, policy.tokenizer)
    process = worker._process
    del worker
    gc.collect()
    assert not process.is_alive() and _gone(process.pid)


def test_the_worker_ends_with_the_interpreter_that_started_it():
    import subprocess
    import sys
    from pathlib import Path

    script = ("from tests.algorithms.tiny import make_policy\n"
              "from algorithms.engines.hf_worker import HFWorkerEngine\n"
              "policy = make_policy()\n"
              "worker = HFWorkerEngine(policy.model, policy.tokenizer)\n"
              "print(worker.pid, flush=True)\n")  # exits without close()
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr[-2000:]
    pid = int(result.stdout.split()[-1])
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid)


def trainable_sum(model, offset: float) -> float:
    """A function the worker runs on its model (module level: it crosses by name)."""
    return float(sum(p.detach().sum() for p in model.parameters() if p.requires_grad)) + offset


def refuse(model, message: str) -> None:
    raise ValueError(message)


def test_call_runs_a_function_on_the_workers_synced_model():
    policy = make_policy(seed=1)
    worker = HFWorkerEngine(policy.model, policy.tokenizer, batch_size=3)
    try:
        assert worker.call(trainable_sum, 0.0) == pytest.approx(
            trainable_sum(policy.model, 0.0), rel=1e-6)
        _move_trainable_weights(policy.model, 0.5, seed=0)
        moved = trainable_sum(policy.model, 1.0)
        assert worker.call(trainable_sum, 1.0) != pytest.approx(moved, rel=1e-6)
        worker.sync_weights(policy.model)
        assert worker.call(trainable_sum, offset=1.0) == pytest.approx(moved, rel=1e-6)
        with pytest.raises(ValueError, match="no such thing") as raised:
            worker.call(refuse, "no such thing")
        assert "raised in the generation worker process" in "".join(raised.value.__notes__)
        sampling = {"temperature": 1.0, "max_new_tokens": 4, "seed": 3}
        prompts = _prompts(policy.tokenizer)
        assert len(worker.generate(prompts, **sampling)) == len(prompts)  # still serves
    finally:
        worker.close()


def test_auto_transport_is_shared_only_where_the_staging_file_fits(tmp_path, monkeypatch):
    assert choose_transport("pipe", 10, str(tmp_path)) == "pipe"
    assert choose_transport("shared", 10, str(tmp_path)) == "shared"
    free = 1_000

    class Usage:
        def __init__(self, free):
            self.free = free

    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(free))
    assert choose_transport("auto", 500, str(tmp_path)) == "shared"
    assert choose_transport("auto", 501, str(tmp_path)) == "pipe"  # keeps as much spare
    with pytest.raises(ValueError, match="weight_transport must be one of"):
        choose_transport("udp", 10, str(tmp_path))


def test_shared_weights_map_the_same_bytes_in_another_mapping(tmp_path):
    tensors = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16),
               "c": torch.arange(4, dtype=torch.int64).reshape(2, 2)}
    shared = SharedWeights.create(tensors, str(tmp_path))
    # every tensor starts on an aligned offset (a dtype view of the bytes needs it)
    assert all(offset % 64 == 0 for _, offset, _, _ in shared.spec["layout"])
    other = SharedWeights.attach(shared.spec)  # as the worker maps it
    shared.unlink()
    assert list(tmp_path.iterdir()) == []  # the name is gone, the mappings stay
    for name, tensor in tensors.items():
        shared.views[name].copy_(tensor)
    for name, tensor in tensors.items():
        assert other.views[name].dtype == tensor.dtype
        assert torch.equal(other.views[name], tensor)
    shared.unlink()  # idempotent


def test_a_staging_file_without_room_is_an_error_that_leaves_no_file(tmp_path, monkeypatch):
    import errno

    def full(descriptor, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    with pytest.raises(OSError, match="No space left"):
        SharedWeights.create({"a": torch.zeros(1000)}, str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_file_system_without_fallocate_gets_a_sparse_staging_file(tmp_path, monkeypatch):
    import errno

    def unsupported(descriptor, offset, length):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported, raising=False)
    shared = SharedWeights.create({"a": torch.zeros(10)}, str(tmp_path))
    shared.views["a"].copy_(torch.arange(10.0))
    assert torch.equal(SharedWeights.attach(shared.spec).views["a"], torch.arange(10.0))
    shared.unlink()
