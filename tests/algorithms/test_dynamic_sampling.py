"""DAPO's dynamic sampling with verl-agent's semantics: which groups are kept, when more
rollouts follow, what happens at the cap, and the trainer's loop."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from algorithms.agent.dynamic_sampling import sample_until_full, varied_group_rows
from tests.algorithms.hand_batch import hand_batch


def _group(group: int, returns: list[float], errors: list[bool] | None = None):
    """Trajectories of one group: two steps each, the return on the last step."""
    errors = errors or [False] * len(returns)
    return [(group, [0.0, r], [f"g{group}s0", f"g{group}t{i}"], e)
            for i, (r, e) in enumerate(zip(returns, errors, strict=True))]


def test_varied_group_rows_hand_computed():
    batch = hand_batch(_group(0, [10.0, 0.0]) + _group(1, [0.0, 0.0]) + _group(2, [10.0, 10.0])
                       + _group(3, [10.0, 0.0, 0.0], [True, False, False])
                       + _group(4, [10.0, 0.0, 3.0], [False, False, True])
                       + _group(5, [1.0]))
    got = varied_group_rows(batch.env_rewards, batch.traj_ids, batch.group_ids,
                            batch.env_error)
    kept_groups = sorted(set(batch.group_ids[got].tolist()))
    # 1 and 2: all equal; 3: the finished two are equal (the crashed one does not count);
    # 5: one trajectory. Group 4 keeps all its rows, the crashed trajectory's too.
    assert kept_groups == [0, 4]
    assert got.sum() == 4 + 6
    assert varied_group_rows([], [], []).shape == (0,)


def test_the_penalty_does_not_make_a_group_varied():
    # verl-agent compares the env's episode returns; the invalid-action penalty comes later
    batch = hand_batch(_group(0, [0.0, 0.0]), penalties=[[0.1, 0.0], [0.0, 0.0]])
    assert not varied_group_rows(batch.env_rewards, batch.traj_ids, batch.group_ids).any()


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="one length"):
        varied_group_rows([0.0, 1.0], [0], [0, 0])
    with pytest.raises(ValueError, match="finite"):
        varied_group_rows([np.nan], [0], [0])


class FakeRollouts:
    """``rollout(r)`` returns the r-th scripted batch of two groups of two and records r."""

    def __init__(self, *returns_per_round: list[list[float]]):
        self.batches = [hand_batch(_group(0, g0) + _group(1, g1)) for g0, g1 in returns_per_round]
        self.rounds: list[int] = []

    def __call__(self, round_: int):
        self.rounds.append(round_)
        return self.batches[round_]


def _sample(rollouts: FakeRollouts, max_rollouts: int = 10):
    return sample_until_full(rollouts, num_groups=2, group_size=2, max_rollouts=max_rollouts,
                             pad_id=0)


def test_rolls_out_until_the_kept_groups_fill_the_batch():
    rollouts = FakeRollouts(([10.0, 0.0], [0.0, 0.0]),   # keeps group 0
                            ([0.0, 0.0], [0.0, 0.0]),    # keeps nothing
                            ([10.0, 0.0], [10.0, 0.0]),  # keeps both: 3 >= 2, stop
                            ([10.0, 0.0], [10.0, 0.0]))
    sample = _sample(rollouts)
    assert rollouts.rounds == [0, 1, 2]
    assert (sample.rollouts, sample.groups_kept, sample.groups_sampled) == (3, 3, 6)
    # not cut back to 2 groups (verl-agent keeps every kept group); ids r * 2 + g
    assert sorted(set(sample.batch.group_ids.tolist())) == [0, 4, 5]
    assert sorted(set(sample.sampled.group_ids.tolist())) == [0, 1, 2, 3, 4, 5]
    # every trained row is a row of the sampled rollouts, with the same ids
    sampled = set(zip(sample.sampled.traj_ids.tolist(), sample.sampled.step_index.tolist(),
                      strict=True))
    trained = set(zip(sample.batch.traj_ids.tolist(), sample.batch.step_index.tolist(),
                      strict=True))
    assert trained < sampled and len(trained) == 3 * 2 * 2
    assert len(set(sample.batch.traj_ids.tolist())) == 6  # whole groups: all their steps


def test_one_rollout_when_the_first_is_full():
    rollouts = FakeRollouts(([10.0, 0.0], [0.0, 1.0]))
    sample = _sample(rollouts)
    assert rollouts.rounds == [0] and sample.rollouts == 1
    assert len(sample.batch) == len(sample.sampled) == len(rollouts.batches[0])


def test_the_rollout_at_the_cap_is_kept_whole():
    uniform = ([0.0, 0.0], [10.0, 10.0])
    rollouts = FakeRollouts(uniform, uniform, uniform, uniform)
    sample = _sample(rollouts, max_rollouts=3)
    assert rollouts.rounds == [0, 1, 2]
    # rollouts 0 and 1 kept nothing; rollout 2, the last allowed, is kept unfiltered
    assert sorted(set(sample.batch.group_ids.tolist())) == [4, 5]
    assert (sample.rollouts, sample.groups_kept, sample.groups_sampled) == (3, 2, 6)


def test_a_cap_of_one_filters_nothing():
    rollouts = FakeRollouts(([0.0, 0.0], [0.0, 0.0]))
    sample = _sample(rollouts, max_rollouts=1)
    assert sample.groups_kept == 2 and len(sample.batch) == len(rollouts.batches[0])


def test_sample_until_full_refuses_bad_sizes():
    with pytest.raises(ValueError, match="max_rollouts"):
        _sample(FakeRollouts(([1.0, 0.0], [1.0, 0.0])), max_rollouts=0)


# --------------------------------------------------------------------------- the trainer

def test_the_trainer_trains_on_the_kept_groups(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    import algorithms.agent.sampling as sampling_module
    from algorithms.agent.metrics import read_metrics
    from algorithms.config import replace
    from algorithms.training.trainer import Trainer
    from tests.algorithms.scripted_config import scripted_config
    from tests.algorithms.tiny import make_policy

    real = sampling_module.collect_rollout
    seeds: list[int] = []

    def scripted_returns(*args, **kwargs):
        """The real rollout, its rewards replaced: rollout 0 all 0 (both groups dropped),
        rollout 1 group 0 varied (kept), rollout 2 (the cap) all 0 but kept whole."""
        batch = real(*args, **kwargs)
        seeds.append(kwargs["seed"])
        rewards = np.zeros(len(batch))
        if len(seeds) == 2:
            rewards[batch.last_step & (batch.traj_ids == 0)] = 1.0
        return dataclasses.replace(batch, env_rewards=rewards,
                                   rewards=rewards - batch.penalties,
                                   env_error=np.zeros(len(batch), bool))

    monkeypatch.setattr(sampling_module, "collect_rollout", scripted_returns)
    config = replace(scripted_config("grpo", iterations=1),
                     learner={"dynamic_sampling": True, "dynamic_sampling_max_rollouts": 3})
    trainer = Trainer(config, policy=make_policy(), run_dir=tmp_path)
    trainer.run()
    assert len(set(seeds)) == 3  # three rollouts, each with fresh tasks' seed
    metrics = read_metrics(tmp_path / "metrics.jsonl")[-1]
    assert metrics["rollout/dynamic_sampling_rollouts"] == 3
    assert (metrics["rollout/groups_kept"], metrics["rollout/groups_sampled"]) == (3, 6)
    trained = trainer.last_batch
    assert sorted(set(trained.group_ids.tolist())) == [2, 4, 5]
    assert metrics["update/steps"] == len(trained)
    assert metrics["rollout/trajectories"] == 12  # the metrics describe every rollout
