"""Rollout records hold exactly what the rollout and the update saw."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

pytest.importorskip("transformers")

from agentgym.viewer.data import RECORD_FORMAT, read_records  # noqa: E402
from algorithms.agent.records import FORMAT, recorded_trajectories  # noqa: E402
from algorithms.training.trainer import Trainer  # noqa: E402
from tests.algorithms.scripted_config import scripted_config  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402


def test_training_records_match_the_batch_and_its_advantages(tmp_path):
    config = scripted_config("gigpo", iterations=1, num_groups=3, group_size=2,
                             record_trajectories=4, eval_every=1)
    trainer = Trainer(config, policy=make_policy(seed=3), run_dir=tmp_path)
    trainer.run()
    batch = trainer.last_batch  # nothing crashed: the whole rollout was trained on
    signals = trainer.learner.advantages(batch)
    path = tmp_path / "records" / "train" / "iter_000001.jsonl.gz"
    with gzip.open(path, "rt") as handle:
        header = json.loads(handle.readline())
    assert header == {"kind": "header", "format": 1, "split": "train", "iteration": 1,
                      "algo": "gigpo", "env_id": "AgentGym/Scripted-v0",
                      "rollout_trajectories": 6, "trajectories": 4, "groups": 2}
    records = read_records(path)
    assert [r["traj_id"] for r in records] == [0, 1, 2, 3]  # whole groups, in order
    tokenizer = trainer.policy.tokenizer
    rows_seen = 0
    for record in records:
        rows = np.flatnonzero(batch.traj_ids == record["traj_id"])
        assert record["group"] == record["traj_id"] // 2 and record["trained"]
        assert record["task_id"] == batch.log.task_ids[rows[0]]
        assert record["task"] and record["task"] == batch.log.tasks[rows[0]]
        assert record["outcome"]["length"] == len(rows) == len(record["steps"])
        assert record["outcome"]["success"] == bool(batch.success[rows[0]])
        assert record["outcome"]["return"] == pytest.approx(batch.env_rewards[rows].sum())
        for step, row in zip(record["steps"], rows, strict=True):
            rows_seen += 1
            assert step["step"] == batch.step_index[row]
            assert step["response"] == batch.log.response_texts[row]
            assert step["action"] == batch.log.actions[row]
            assert step["observation"] == batch.log.observations[row]
            assert step["observation"] in step["prompt"]  # the prompt shows it
            tokens = batch.prompt_ids[row][batch.prompt_mask[row] == 1].tolist()
            assert tokenizer(step["prompt"], add_special_tokens=False)["input_ids"] == tokens
            assert step["reward"] == pytest.approx(batch.rewards[row])
            assert step["valid_action"] == bool(batch.valid_action[row])
            assert step["advantage"] == pytest.approx(signals.advantages[row])
            assert step["episode_advantage"] + config.learner.step_weight * \
                step["step_advantage"] == pytest.approx(step["advantage"])
            group = signals.step_group_ids[row]
            assert step["step_group"] == group
            members = np.flatnonzero(signals.step_group_ids == group)
            assert step["step_group_size"] == len(members)
            assert step["step_group_members"] == [
                [int(batch.traj_ids[m]), int(batch.step_index[m])] for m in members]
            # observation anchors are not written twice
            assert step["anchor"] is None
    assert rows_seen == int(np.isin(batch.traj_ids, [0, 1, 2, 3]).sum())
    evaluation = read_records(tmp_path / "records" / "eval" / "iter_000001.jsonl.gz")
    assert [r["traj_id"] for r in evaluation] == [0, 1, 2, 3]  # the 4 eval episodes
    assert all(s["advantage"] is None and s["step_group"] is None
               for r in evaluation for s in r["steps"])


def test_record_limit_takes_whole_groups_first():
    class Batch:
        traj_ids = np.array([0, 0, 1, 2, 3, 4, 5])
        last_step = np.array([0, 1, 1, 1, 1, 1, 1], dtype=bool)

        def __len__(self):
            return 7

    batch = Batch()
    groups = np.array([0, 0, 0, 1, 1, 2, 2])
    assert recorded_trajectories(batch, groups, 4) == [0, 1, 2, 3]
    assert recorded_trajectories(batch, groups, 5) == [0, 1, 2, 3]
    assert recorded_trajectories(batch, groups, 6) == [0, 1, 2, 3, 4, 5]
    assert recorded_trajectories(batch, groups, 1) == [0]  # part of an oversized group
    assert recorded_trajectories(batch, groups, 0) == []


def test_records_are_off_with_zero(tmp_path):
    config = scripted_config("grpo", iterations=1, record_trajectories=0)
    Trainer(config, policy=make_policy(seed=0), run_dir=tmp_path).run()
    assert not (tmp_path / "records").exists()


def test_the_viewer_reads_the_format_the_trainer_writes():
    assert FORMAT == RECORD_FORMAT


def test_the_final_observation_is_the_envs_reply_to_the_last_action(tmp_path):
    """Replaying a recorded trajectory's actions from its task gives, after the last one,
    the record's final observation; every earlier reply is the next step's observation."""
    import gymnasium as gym

    config = scripted_config("grpo", iterations=1, record_trajectories=4)
    trainer = Trainer(config, policy=make_policy(seed=1), run_dir=tmp_path)
    trainer.run()
    batch = trainer.last_batch
    for row in range(len(batch) - 1):
        if batch.traj_ids[row] == batch.traj_ids[row + 1]:
            assert batch.log.replies[row] == batch.log.observations[row + 1]
    records = read_records(tmp_path / "records" / "train" / "iter_000001.jsonl.gz")
    env = gym.make(config.env.env_id, max_steps=config.env.max_steps,
                   **json.loads(config.env.env_kwargs))
    for record in records:
        observation, _ = env.reset(options={"task_id": record["task_id"]})
        for step in record["steps"]:
            assert observation == step["observation"]
            observation, *_ = env.step(step["action"])
        assert record["final_observation"] == observation
    env.close()
