"""A tiny random model learns the scripted door task with GiGPO (GRPO for comparison).

The task: two rooms, each with a sign naming the right door (``ScriptedTextEnv`` with
``hint=True``, at most 3 steps). Each door action is one token of the test tokenizer and
the answer is one token, so a random 2-layer Llama starts near 0% success (about 4% of
its answers are even valid actions); it must learn to answer with a valid action (the
invalid-action penalty) and then to copy the sign's door. GiGPO must reach >= 90% success
on three consecutive iterations of training rollouts within ``MAX_ITERATIONS``, and so must
GRPO on the same task, seed and budget; both curves are printed (``pytest -s``). It runs in
the default suite (well under a minute for both).

Measured here (seed 0, 8 groups x 4): GiGPO held >= 0.9 from iteration 51 (stopped at 53),
GRPO from iteration 40 (stopped at 42) -- on this one-token task GiGPO has no edge.

The test keeps the loss it was written and measured with, the project's earlier one
(``CPU_DEMO_LOSS``, as the cpu-demo does). Under verl-agent's recipe (the learner's default)
GiGPO did not learn this task within the budget on seed 0: success hovered at 0.1-0.4
through all 80 iterations; with only the penalty switched back into the returns it held
>= 0.9 from iteration 64, with only the statistics over trajectories it reached 0.5-0.6.
GRPO reached 0.9 under verl-agent's recipe, but not with only the penalty switched back
(0.25-0.63 at iteration 80). One seed each: single-seed curves of this task move a lot.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from algorithms.agent.metrics import read_metrics  # noqa: E402
from algorithms.config import replace  # noqa: E402
from algorithms.presets import CPU_DEMO_LOSS  # noqa: E402
from algorithms.training.trainer import Trainer  # noqa: E402
from tests.algorithms.scripted_config import scripted_config  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402

MAX_ITERATIONS = 80
TARGET = 0.9


def _curve(tmp_path, algo: str) -> list[float]:
    config = scripted_config(algo, iterations=MAX_ITERATIONS, num_groups=8, group_size=4,
                             lr=1e-3, save_every=10_000)
    config = replace(config, generation={"max_new_tokens": 1},
                     prompt={"history_window": 0},
                     learner={"kl_coef": 0.0, "epochs": 4, "mini_batch_size": 16,
                              "micro_batch_size": 16, **CPU_DEMO_LOSS})
    policy = make_policy(seed=0, hidden=64, action_tokens=True)
    trainer = Trainer(config, policy=policy, run_dir=tmp_path / algo)
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


@pytest.mark.parametrize("algo", ["gigpo", "grpo"])
def test_the_door_task_is_learned(tmp_path, algo):
    curve = _curve(tmp_path, algo)
    print(f"\n{algo} success per iteration:", " ".join(f"{s:.2f}" for s in curve))
    assert curve[0] <= 0.25, "the untrained model should be near chance"
    assert min(curve[-3:]) >= TARGET, f"{algo} did not reach {TARGET}: {curve}"
