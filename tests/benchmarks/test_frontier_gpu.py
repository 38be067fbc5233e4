"""``python -m benchmarks.frontier_gpu``'s measure of how much an update moved the
trained weights (the GPU check of float32 trained weights, docs/gpu.md)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from benchmarks.frontier_gpu import weights_moved  # noqa: E402


def test_weights_moved_counts_changed_elements_of_trained_weights_only():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[1].requires_grad_(False)
    before = {name: p.detach().clone() for name, p in model.named_parameters()
              if p.requires_grad}  # 0.weight (4), 0.bias (2)
    with torch.no_grad():
        model[0].weight[0, 0] += 1.0
        model[0].bias[1] -= 1.0
        model[1].weight.zero_()  # not trained: not counted
    moved = weights_moved(before, model)
    assert moved == {"trained_weights_changed": 2 / 6, "trained_dtypes": ["float32"]}
