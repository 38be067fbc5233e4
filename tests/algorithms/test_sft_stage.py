"""``--sft.warm-start``: the SFT stage inside an RL run (algorithms/sft/stage.py)."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("transformers")

from algorithms.config import ConfigError, replace  # noqa: E402
from algorithms.presets import PRESETS  # noqa: E402
from algorithms.runs.run_folder import RunFolderError  # noqa: E402
from algorithms.sft.stage import FINISHED, STAGE_DIR, needs_stage, run_stage  # noqa: E402
from algorithms.sft.trainer import SFTTrainer  # noqa: E402
from algorithms.training.trainer import Trainer  # noqa: E402
from tests.algorithms.test_sft import keydoor_words, tiny  # noqa: E402


@pytest.fixture(scope="module")
def words() -> str:
    return keydoor_words()


def rl_config(tmp_path, **run):
    """The cpu-demo RL run with a 2-step SFT stage, sized for the tiny model."""
    return replace(PRESETS["cpu-demo"], model={"lora_rank": 0},
                   sft={"warm_start": True, "episodes": 8, "batch_size": 4,
                        "micro_batch_size": 4, "max_steps": 2, "lr": 1e-2},
                   run={"tensorboard": False, "progress": False, "iterations": 1,
                        "output_dir": str(tmp_path), **run}).validate()


class Factory:
    """Builds the stage's trainer on the tiny model and remembers it."""

    def __init__(self, words: str):
        self.words, self.trainers = words, []

    def __call__(self, config):
        trainer = SFTTrainer(config, policy=tiny(self.words))
        self.trainers.append(trainer)
        return trainer


def test_the_stage_trains_then_rl_starts_from_it(tmp_path, words):
    run_dir = tmp_path / "run"
    config = rl_config(tmp_path)
    factory = Factory(words)
    lines = []
    started = run_stage(config, run_dir, trainer_factory=factory, say=lines.append)
    stage_dir = run_dir / STAGE_DIR
    assert started.model.init_checkpoint == str(stage_dir)
    assert dataclasses.replace(started, model=config.model) == config  # nothing else changes
    stage = factory.trainers[0].config
    assert stage.algo == "sft" and stage.run.eval_every == 0
    assert stage.model == config.model and stage.prompt == config.prompt
    assert (stage_dir / "checkpoints" / "iter_000002").is_dir()
    assert (stage_dir / "sft_data.jsonl").exists()
    finished = json.loads((stage_dir / FINISHED).read_text())
    assert finished["checkpoint"].endswith("iter_000002") and "sft/loss" in finished["metrics"]
    assert "training the warm start" in lines[0]
    # the RL run starts from the stage's weights (and its KL reference too)
    trained = {n: p.detach().clone() for n, p in
               factory.trainers[0].policy.model.named_parameters()}
    trainer = Trainer(started, policy=tiny(words), run_dir=run_dir)
    trainer.setup()
    try:
        weights = dict(trainer.policy.model.named_parameters())
        assert all(torch.equal(weights[n], w) for n, w in trained.items())
    finally:
        trainer.close()
    # a finished stage is reused (resume), not trained again
    again = run_stage(rl_config(tmp_path, resume=True), run_dir, trainer_factory=factory,
                      say=lines.append)
    assert again.model.init_checkpoint == str(stage_dir) and len(factory.trainers) == 1
    assert "reusing" in lines[-1]
    # --run.overwrite trains it again
    run_stage(rl_config(tmp_path, overwrite=True), run_dir, trainer_factory=factory,
              say=lines.append)
    assert len(factory.trainers) == 2 and factory.trainers[1].config.run.overwrite


def test_an_unfinished_stage_is_continued(tmp_path, words):
    run_dir = tmp_path / "run"
    factory = Factory(words)
    run_stage(rl_config(tmp_path), run_dir, trainer_factory=factory, say=lambda line: None)
    (run_dir / STAGE_DIR / FINISHED).unlink()  # as if it had stopped after its checkpoint
    run_stage(rl_config(tmp_path), run_dir, trainer_factory=factory, say=lambda line: None)
    assert factory.trainers[1].config.run.resume
    assert factory.trainers[1].start_iteration == 2


def test_a_folder_holding_a_run_is_refused_before_the_stage_trains(tmp_path, words):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    factory = Factory(words)
    with pytest.raises(RunFolderError, match="already holds a run"):
        run_stage(rl_config(tmp_path), run_dir, trainer_factory=factory)
    assert not factory.trainers


def test_a_stage_folder_in_use_is_refused_and_left_alone(tmp_path, words):
    """The stage's folder held by another trainer (here: one in this process; a second
    process is refused alike, tests/algorithms/test_run_folders.py): refused, not
    trained into."""
    from algorithms.runs.run_folder import lock_run_folder

    run_dir = tmp_path / "run"
    held = lock_run_folder(run_dir / STAGE_DIR)
    try:
        with pytest.raises(RunFolderError, match="in use by another run"):
            run_stage(rl_config(tmp_path), run_dir, trainer_factory=Factory(words),
                      say=lambda line: None)
        assert sorted(p.name for p in (run_dir / STAGE_DIR).iterdir()) == [".lock"]
    finally:
        held.release()


def test_when_there_is_no_stage(tmp_path):
    config = rl_config(tmp_path)
    assert needs_stage(config)
    for other in (replace(config, sft={"warm_start": False}),
                  dataclasses.replace(config, algo="sft"),
                  replace(config, run={"eval_only": True}),
                  replace(config, model={"init_checkpoint": str(tmp_path)})):
        assert not needs_stage(other)
        assert run_stage(other, tmp_path / "run", trainer_factory=None) is other
    with pytest.raises(ConfigError, match="one process"):
        run_stage(config, tmp_path / "run", ranks=SimpleNamespace(distributed=True))


def test_a_trainer_built_without_its_stage_is_refused(tmp_path, words):
    """A Trainer given a config that asks for a warm start it has not run would train
    from the base model without saying so: it is refused, pointing at run_stage."""
    with pytest.raises(ConfigError, match="run_stage"):
        Trainer(rl_config(tmp_path), policy=tiny(words), run_dir=tmp_path / "run")


def test_the_stage_settings_are_validated_with_the_rl_run():
    config = replace(PRESETS["cpu-demo"], sft={"warm_start": True, "lr": 0.0})
    with pytest.raises(ConfigError, match="sft.lr"):
        config.validate()
    replace(config, sft={"warm_start": False}).validate()
