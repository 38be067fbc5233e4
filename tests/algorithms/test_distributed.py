"""Data-parallel training (algorithms.distributed): 2 gloo ranks update like 1 process,
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

from algorithms import distributed  # noqa: E402
from algorithms.distributed import DistributedError, Ranks  # noqa: E402
from tests.algorithms.distributed_update import CASES  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
WEIGHT_TOLERANCE = 1e-5
"""Largest |w_2 ranks - w_1 process| after 6 AdamW steps at lr 1e-3 (measured: <= 3e-6;
gradients are summed in another order, AdamW normalises the difference)."""
SCORE_TOLERANCE = 1e-6


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
    for key in a:
        tolerance = WEIGHT_TOLERANCE if key.startswith(("weights.", "critic.")) else \
            SCORE_TOLERANCE
        difference = (a[key].float() - b[key].float()).abs().max().item()
        assert difference <= tolerance, f"{key}: {difference}"
    np.testing.assert_allclose(stats_b["advantages"], stats_a["advantages"], atol=1e-12)
    for key, value in stats_a["stats"].items():
        assert stats_b["stats"][key] == pytest.approx(value, abs=1e-5), key
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

