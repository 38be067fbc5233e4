"""An iteration's rollout (algorithms.agent.sampling) and the vector envs it is given
(algorithms.training.build)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from algorithms.agent.metrics import read_metrics  # noqa: E402
from algorithms.config import replace  # noqa: E402
from algorithms.training.trainer import Trainer  # noqa: E402
from tests.algorithms.scripted_config import scripted_config  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402


def test_a_rollout_without_steps_is_tried_again(tmp_path, monkeypatch):
    import algorithms.agent.sampling as sampling_module
    from algorithms.agent.rollout import NoStepsError

    calls = []
    real = sampling_module.collect_rollout

    def flaky(*args, **kwargs):
        calls.append(kwargs["seed"])
        if len(calls) == 1:
            raise NoStepsError("the rollout produced no steps: worker died")
        return real(*args, **kwargs)

    monkeypatch.setattr(sampling_module, "collect_rollout", flaky)
    trainer = Trainer(scripted_config("grpo", iterations=1), policy=make_policy(),
                      run_dir=tmp_path)
    trainer.run()
    assert len(calls) == 2 and calls[0] != calls[1]  # a second try, with a new reset seed
    assert read_metrics(tmp_path / "metrics.jsonl")[-1]["update/steps"] > 0


def test_rollout_retries_run_out(tmp_path, monkeypatch):
    import algorithms.agent.sampling as sampling_module
    from algorithms.agent.rollout import NoStepsError

    calls = []

    def broken(*args, **kwargs):
        calls.append(kwargs["seed"])
        raise NoStepsError("the rollout produced no steps: worker died")

    monkeypatch.setattr(sampling_module, "collect_rollout", broken)
    config = replace(scripted_config("grpo", iterations=1), run={"rollout_retries": 1})
    with pytest.raises(NoStepsError):
        Trainer(config, policy=make_policy(), run_dir=tmp_path).run()
    assert len(calls) == 2


def test_step_timeout_reaches_the_vector_env(tmp_path):
    config = replace(scripted_config("grpo", iterations=1),
                     env={"backend": "subprocess", "num_workers": 1, "step_timeout": 7.5})
    trainer = Trainer(config, policy=make_policy(), run_dir=tmp_path)
    vec_env = trainer.make_vec_env(config.env.kwargs(), num_envs=2, group_size=2)
    try:
        assert vec_env.step_timeout == 7.5
    finally:
        vec_env.close()
