"""The overlapped rollout through the trainer (``run.max_staleness``): K = 0 is today's
run, K = 1 samples with the versions it records and corrects for them, the rollout and
the update overlap in time, faults end the run as the synchronous path does."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import time

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from algorithms.agent.metrics import read_metrics  # noqa: E402
from algorithms.config import ConfigError, replace  # noqa: E402
from algorithms.engines.hf import HFEngine  # noqa: E402
from algorithms.runs.checkpoint import latest_checkpoint  # noqa: E402
from algorithms.training.build import (
    check_overlap_engine,  # noqa: E402
    vector_env_factory,  # noqa: E402
)
from algorithms.training.learner import Learner  # noqa: E402
from algorithms.training.trainer import Trainer  # noqa: E402
from tests.algorithms.scripted_config import scripted_config  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402

# What acc5198 (before run.max_staleness existed) gave for scripted_config(algo,
# iterations=2) and make_policy(seed=0): the last batch's sampled tokens and actions
# (sha256 prefixes), and each iteration's losses.
TODAY = {
    "gigpo": {"tokens": "5a2ed0ea106c20b2", "actions": "57d394e48fb99be5",
              "entropy": [4.664341449737549, 4.665680408477783],
              "grad_norm": [4.0645078115630895e-05, 0.0002863862900994718],
              "kl_ref": [0.0, 0.00017213140381500125]},
    "ppo": {"tokens": "cb3387a185f3235c", "actions": "52b80b6936780dac",
            "policy_loss": [6.622738357719982e-09, 0.03448669612407684],
            "grad_norm": [1.5019330978393555, 1.3770520687103271],
            "value_loss": [0.020002713426947594, 0.015008549205958843],
            "kl_ref": [0.0, 9.16651333682239e-05]},
}

KL_ABS = 1e-8
"""Absolute tolerance of the KL term against ``TODAY``: a mean of k3 terms of differences of
float32 log-probs of ~5 nats, each rounded at ~3e-7, so CPUs whose float kernels differ
land ~1e-9 apart (measured: 3.4e-9 on the 2026-11-26 VM, where every other figure
matched)."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


@pytest.mark.parametrize("algo", ["gigpo", "ppo"])
def test_k0_is_the_synchronous_run_of_before(tmp_path, algo):
    trainer = Trainer(scripted_config(algo, iterations=2), policy=make_policy(seed=0),
                      run_dir=tmp_path)
    trainer.run()
    assert trainer.overlap is None
    expected = TODAY[algo]
    batch = trainer.last_batch
    assert _digest(batch.response_ids.tobytes()) == expected["tokens"]
    assert _digest(json.dumps(batch.log.actions).encode()) == expected["actions"]
    rows = read_metrics(tmp_path / "metrics.jsonl")
    for key, values in expected.items():
        if key not in ("tokens", "actions"):
            assert [row[f"update/{key}"] for row in rows] == pytest.approx(
                values, rel=1e-6, abs=KL_ABS if key == "kl_ref" else 1e-9)
    assert not any(key.startswith(("overlap/", "update/is_")) for key in rows[-1])


class CopyEngine(HFEngine):
    """The HF engine on its own copy of the weights (as the worker process has), keeping
    the weights of every version it was given."""

    def __init__(self, policy, *, delay: float = 0.0, fail_on_call: int | None = None):
        super().__init__(copy.deepcopy(policy.model), policy.tokenizer)
        self.versions = [self._snapshot()]
        self.delay = delay
        self.calls = 0
        self.fail_on_call = fail_on_call

    def _snapshot(self):
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def generate(self, prompts, **kwargs):
        self.calls += 1
        if self.fail_on_call is not None and self.calls >= self.fail_on_call:
            raise RuntimeError("the generation worker process died (exit code -9)")
        time.sleep(self.delay)
        return super().generate(prompts, **kwargs)

    def sync_weights(self, model) -> None:
        self.model.load_state_dict(model.state_dict())
        self.versions.append(self._snapshot())


def _overlapped(algo: str = "gigpo", iterations: int = 3, **run):
    return scripted_config(algo, iterations=iterations, max_staleness=1, **run)


def test_k1_batches_carry_the_version_that_sampled_them_and_its_log_probs(tmp_path):
    config = _overlapped()
    policy = make_policy(seed=0)
    engine = CopyEngine(policy)
    trainer = Trainer(config, policy=policy, engine=engine, run_dir=tmp_path)
    trainer.setup()
    batches, metrics = [], []
    try:
        for iteration in range(3):
            metrics.append(trainer.train_iteration(iteration))
            batches.append(trainer.last_batch)
    finally:
        trainer.close()
    assert [set(b.policy_version.tolist()) for b in batches] == [{0}, {0}, {1}]
    assert [m["overlap/staleness_mean"] for m in metrics] == [0.0, 1.0, 1.0]
    assert all("update/is_weight_mean" in m and "update/behaviour_gap" in m for m in metrics)
    # the engine's recorded log-probs are those of the weights of the recorded version
    for batch in batches:
        version = int(batch.policy_version[0])
        model = copy.deepcopy(policy.model)
        model.load_state_dict(engine.versions[version])
        scorer = Learner(dataclasses.replace(policy, model=model), config,
                         torch.device("cpu"))
        scored = scorer.score(batch, with_old_log_probs=True)
        mask = batch.response_mask.astype(bool)
        assert np.isfinite(batch.behaviour_log_probs[mask]).all()
        np.testing.assert_allclose(batch.behaviour_log_probs[mask],
                                   scored.old_log_probs[mask], atol=2e-4)
    # one version per group (a group is never split across a weight sync)
    for batch in batches:
        for group in np.unique(batch.group_ids):
            assert len(set(batch.policy_version[batch.group_ids == group].tolist())) == 1


class SlowSteps:
    """A vector env whose steps take ``delay`` seconds longer."""

    def __init__(self, inner, delay: float):
        self._inner = inner
        self._delay = delay

    def step(self, actions):
        time.sleep(self._delay)
        return self._inner.step(actions)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_the_rollout_runs_while_the_update_runs(tmp_path):
    config = _overlapped(iterations=3)
    make = vector_env_factory(config.env)
    policy = make_policy(seed=0)
    trainer = Trainer(config, policy=policy, engine=CopyEngine(policy),
                      make_vec_env=lambda *args: SlowSteps(make(*args), 0.05),
                      run_dir=tmp_path)
    trainer.setup()
    updates: list[tuple[float, float]] = []
    update = trainer.learner.update

    def timed_update(*args, **kwargs):
        started = time.perf_counter()
        time.sleep(0.2)  # a slower update, so that the two surely meet
        result = update(*args, **kwargs)
        updates.append((started, time.perf_counter()))
        return result

    trainer.learner.update = timed_update
    trainer.run()
    spans = {iteration: (start, end) for iteration, start, end in trainer.overlap.spans}
    # iteration i + 1's rollout started before iteration i's update ended, and ended after
    # it started: the two ran at the same time
    for i, (u_start, u_end) in enumerate(updates[:-1]):
        r_start, r_end = spans[i + 1]
        assert r_start < u_end and r_end > u_start


def test_an_engine_dying_mid_overlap_ends_the_run_and_resume_continues(tmp_path):
    config = _overlapped(iterations=3)
    policy = make_policy(seed=0)
    # the scripted env takes 3 turns: call 7 is the third iteration's first turn, made in
    # the background while the second iteration trains
    trainer = Trainer(config, policy=policy, engine=CopyEngine(policy, fail_on_call=7),
                      run_dir=tmp_path)
    with pytest.raises(RuntimeError, match="generation worker process died"):
        trainer.run()
    checkpoint = latest_checkpoint(tmp_path)
    assert checkpoint is not None and checkpoint.name.endswith("2")
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]
    resumed = Trainer(replace(config, run={"resume": True}), policy=make_policy(seed=0),
                      engine=CopyEngine(make_policy(seed=0)), run_dir=tmp_path)
    resumed.run()
    assert resumed.start_iteration == 2
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]


def test_an_engine_sampling_with_the_training_model_is_refused(tmp_path):
    policy = make_policy(seed=0)
    with pytest.raises(ValueError, match="own copy of the weights"):
        check_overlap_engine(HFEngine(policy.model, policy.tokenizer), policy)
    trainer = Trainer(_overlapped(), policy=policy,
                      engine=HFEngine(policy.model, policy.tokenizer), run_dir=tmp_path)
    with pytest.raises(ValueError, match="own copy of the weights"):
        trainer.setup()
    assert not (tmp_path / "config.json").exists()  # a failed setup leaves nothing behind


def test_overlap_settings_are_checked():
    with pytest.raises(ConfigError, match="run.max_staleness must be >= 0"):
        scripted_config(max_staleness=-1).validate()
    with pytest.raises(ConfigError, match="dynamic_sampling is not supported"):
        replace(scripted_config("grpo", max_staleness=1),
                learner={"dynamic_sampling": True}).validate()
    with pytest.raises(ConfigError, match="tis_cap must be > 0"):
        replace(scripted_config(), learner={"tis_cap": 0.0}).validate()
    with pytest.raises(ConfigError, match="behaviour_weight_cap must be > 1"):
        replace(scripted_config(), learner={"behaviour_weight_cap": 1.0}).validate()
    with pytest.raises(ConfigError, match="'behaviour-clip' .* does not combine"):
        replace(scripted_config(max_staleness=1),
                learner={"staleness_correction": "behaviour-clip", "tis_cap": 2.0}).validate()


def test_tis_at_k0_weights_the_loss_and_logs_its_figures(tmp_path):
    config = replace(scripted_config("grpo", iterations=1), learner={"tis_cap": 2.0})
    trainer = Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path)
    last = trainer.run()
    assert trainer.overlap is None
    # the in-process HF engine samples with the learner's own weights: the gap is numerics
    assert last["update/behaviour_gap"] < 1e-4
    assert last["update/is_weight_max"] == pytest.approx(1.0, abs=1e-3)
    assert last["update/is_clipped_fraction"] == 0.0


def test_ctrl_c_during_an_overlapped_iteration_loses_nothing_committed(tmp_path):
    config = _overlapped(iterations=3)
    policy = make_policy(seed=0)
    engine = CopyEngine(policy, delay=0.05)
    trainer = Trainer(config, policy=policy, engine=engine, run_dir=tmp_path)
    trainer.setup()
    update = trainer.learner.update
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # iteration 2's update, with iteration 3's rollout under way
            raise KeyboardInterrupt
        return update(*args, **kwargs)

    trainer.learner.update = interrupted
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    assert trainer.overlap.spans[-1][0] == 2  # iteration 3's rollout had started
    assert latest_checkpoint(tmp_path).name == "iter_000001"
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1]
    resumed = Trainer(replace(config, run={"resume": True}), policy=make_policy(seed=0),
                      engine=CopyEngine(make_policy(seed=0)), run_dir=tmp_path)
    resumed.run()
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]


@pytest.mark.parametrize("lora", [False, True])
def test_k1_builds_the_hf_worker_engine_and_closes_it(tmp_path, lora):
    from algorithms.engines.hf_worker import HFWorkerEngine

    config = replace(_overlapped(iterations=2), model={"lora_rank": 4 if lora else 0})
    trainer = Trainer(config, policy=make_policy(seed=0, model_config=config.model),
                      run_dir=tmp_path)
    trainer.setup()
    engine = trainer.engine
    assert isinstance(engine, HFWorkerEngine)
    worker = engine._process
    trainer.run()
    assert not worker.is_alive()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["overlap/staleness_mean"] for r in rows] == [0.0, 1.0]
    # the first batch: the worker's weights are the learner's, the gap is numerics
    assert rows[0]["update/behaviour_gap"] < 1e-4


def _lora_overlapped(tmp_path, *, reference_in_worker: bool, iterations: int = 3):
    config = replace(_overlapped(iterations=iterations, reference_in_worker=reference_in_worker),
                     model={"lora_rank": 4}, learner={"micro_batch_size": 4})
    trainer = Trainer(config, policy=make_policy(seed=0, model_config=config.model),
                      run_dir=tmp_path)
    trainer.setup()
    batches, metrics = [], []
    try:
        for iteration in range(iterations):
            metrics.append(trainer.train_iteration(iteration))
            batches.append(trainer.last_batch)
    finally:
        trainer.close()
    return trainer, batches, metrics


def test_reference_in_worker_moves_the_reference_pass_and_changes_nothing_else(tmp_path):
    _, learner_batches, learner_rows = _lora_overlapped(tmp_path / "learner",
                                                        reference_in_worker=False)
    trainer, worker_batches, worker_rows = _lora_overlapped(tmp_path / "worker",
                                                            reference_in_worker=True)
    assert all(row["time/worker_reference"] > 0 for row in worker_rows)
    assert not any("time/worker_reference" in row for row in learner_rows)
    for ours, theirs in zip(worker_batches, learner_batches, strict=True):
        # the same samples (the worker samples as before) and the same reference scores
        np.testing.assert_array_equal(ours.response_ids, theirs.response_ids)
        mask = ours.response_mask.astype(bool)
        np.testing.assert_allclose(ours.ref_log_probs, theirs.ref_log_probs, atol=1e-6)
        assert (ours.ref_log_probs[~mask] == 0).all() and (ours.ref_log_probs[mask] < 0).all()
    for ours, theirs in zip(worker_rows, learner_rows, strict=True):
        for key in ("update/kl_ref", "update/policy_loss", "update/grad_norm"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-7), key
    # and they are the learner's own reference pass over the batch (adapters off)
    batch = dataclasses.replace(worker_batches[-1], ref_log_probs=None, old_log_probs=None)
    rescored = trainer.learner.score(batch, with_old_log_probs=True)
    np.testing.assert_allclose(worker_batches[-1].ref_log_probs, rescored.ref_log_probs,
                               atol=1e-6)


def test_reference_in_worker_settings_are_checked():
    with pytest.raises(ConfigError, match=r"needs --run.max-staleness >= 1, LoRA"):
        replace(scripted_config(reference_in_worker=True), model={"lora_rank": 0}).validate()
    with pytest.raises(ConfigError, match=r"needs a KL term"):
        replace(scripted_config(max_staleness=1, reference_in_worker=True),
                model={"lora_rank": 4}, learner={"kl_coef": 0.0}).validate()
    with pytest.raises(ConfigError, match=r"needs --generation.engine hf"):
        replace(scripted_config(max_staleness=1, reference_in_worker=True),
                model={"lora_rank": 4}, generation={"engine": "vllm"}).validate()
    replace(scripted_config(max_staleness=1, reference_in_worker=True),
            model={"lora_rank": 4}).validate()


def test_reference_in_worker_refuses_other_engines_and_several_ranks():
    from algorithms.runs.distributed import Ranks
    from algorithms.training.build import check_reference_engine

    with pytest.raises(ValueError, match="this run's engine is CopyEngine"):
        check_reference_engine(CopyEngine(make_policy(seed=0)), Ranks())

    class Callable_:
        def call(self, function, *args, **kwargs):
            return function(*args, **kwargs)

    with pytest.raises(ValueError, match="one process only"):
        check_reference_engine(Callable_(), Ranks(rank=0, world_size=2))
    check_reference_engine(Callable_(), Ranks())


def test_k1_with_the_ratio_against_the_behaviour_policy_trains(tmp_path):
    config = replace(_overlapped(iterations=3),
                     learner={"staleness_correction": "behaviour-clip"})
    policy = make_policy(seed=0)
    trainer = Trainer(config, policy=policy, engine=CopyEngine(policy), run_dir=tmp_path)
    trainer.run()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [row["overlap/staleness_mean"] for row in rows] == [0.0, 1.0, 1.0]
    assert all(np.isfinite(row["update/grad_norm"]) and "update/behaviour_gap" in row
               for row in rows)
