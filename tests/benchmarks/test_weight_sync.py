"""benchmarks/weight_sync.py: each timed sync carries new weights."""

from __future__ import annotations

import torch

from benchmarks.weight_sync import time_syncs


def test_each_timed_sync_carries_new_weights():
    model = torch.nn.Linear(3, 2)
    model.bias.requires_grad_(False)
    seen = []

    class Worker:
        def sync_weights(self, synced):
            seen.append((synced.weight.detach().clone(), synced.bias.detach().clone()))

    seconds = time_syncs(Worker(), model, repeats=3)
    assert len(seconds) == 3 and all(s >= 0 for s in seconds)
    assert len(seen) == 4  # one untimed warm-up, then the timed ones
    weights = [w for w, _ in seen]
    assert all(not torch.equal(a, b) for a, b in zip(weights, weights[1:], strict=False))
    assert all(torch.equal(b, seen[0][1]) for _, b in seen)  # frozen weights untouched
