"""A tiny random model learns the scripted door task with GiGPO (GRPO for comparison).

The task: two rooms, each with a sign naming the right door; the answer is three words
(``open <colour> door``). A random 2-layer model starts near 0% success; GiGPO must
reach >= 90% on its training rollouts within a bounded number of iterations. GRPO runs
on the same task and seed with the same budget; both curves are printed (``-s``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from algorithms.metrics import read_metrics  # noqa: E402
from algorithms.trainer import Trainer  # noqa: E402
from tests.algorithms.scripted_config import scripted_config  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402

MAX_ITERATIONS = 60
TARGET = 0.9


def _curve(tmp_path, algo: str) -> list[float]:
    config = scripted_config(algo, iterations=MAX_ITERATIONS, num_groups=8, group_size=4,
                             lr=3e-3, save_every=10_000)
    trainer = Trainer(config, policy=make_policy(seed=0, hidden=64), run_dir=tmp_path / algo)
    trainer.setup()
    curve: list[float] = []
    try:
        for iteration in range(MAX_ITERATIONS):
            metrics = trainer.train_iteration(iteration)
            trainer.logger.log(iteration + 1, metrics)
            curve.append(metrics["rollout/success"])
            if len(curve) >= 3 and min(curve[-3:]) >= TARGET:
                break
    finally:
        trainer.close()
    assert len(read_metrics(tmp_path / algo / "metrics.jsonl")) == len(curve)
    return curve


@pytest.mark.slow
def test_gigpo_learns_the_door_task_and_grpo_is_compared(tmp_path):
    gigpo = _curve(tmp_path, "gigpo")
    grpo = _curve(tmp_path, "grpo")
    print("\nGiGPO success per iteration:", " ".join(f"{s:.2f}" for s in gigpo))
    print("GRPO  success per iteration:", " ".join(f"{s:.2f}" for s in grpo))
    assert gigpo[0] <= 0.25, "the untrained model should be near chance"
    assert min(gigpo[-3:]) >= TARGET, f"GiGPO did not reach {TARGET}: {gigpo}"
    assert max(grpo) > grpo[0], "GRPO should improve on the same task"
