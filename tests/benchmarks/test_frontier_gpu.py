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


def test_one_timed_iteration_on_cpu_leaves_no_checkpoint(tmp_path):
    """The script's dry run at its smallest: one HGPO-preset iteration of a random model
    of the smoke shape; the checkpoint written after it (16.6 GB at 1.5B with float32
    weights and AdamW moments) is gone once the figures are read."""
    from benchmarks.frontier_gpu import run_iteration
    from benchmarks.pipeline import save_random_model

    save_random_model("smoke", None, tmp_path / "model", "cpu")
    run_dir = tmp_path / "hgpo"
    timed = run_iteration({"preset": "hgpo-alfworld-1.5b", "model_path": str(tmp_path / "model"),
                           "device": "cpu", "groups": 1, "group_size": 2, "max_steps": 2,
                           "max_new_tokens": 4, "run_dir": str(run_dir)})
    assert timed["run_seconds"] >= timed["iteration_seconds"] > 0
    assert timed["trained_dtypes"] == ["float32"] and timed["torch_peak_mib"] is None
    assert (run_dir / "metrics.jsonl").exists() and not (run_dir / "checkpoints").exists()
