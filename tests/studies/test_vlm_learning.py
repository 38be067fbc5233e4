"""The visual Sokoban learning check's plumbing (``studies/vlm_learning.py``): each image
token is one cell of the room, every word of the prompt and the moves is known, the SFT
samples show the frame the expert acted on, the random walker is measured on the held-out
rooms, and the stages run end to end on a tiny budget. The check itself (about 40 minutes a
seed) is run by hand; its figures are in docs/vlm.md."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("PIL")

from agentgym.sokoban.tiles import TILE  # noqa: E402
from agentgym.sokoban.visual import SokobanVisualEnv  # noqa: E402
from algorithms.sft.data import build_examples, expert_trajectories  # noqa: E402
from studies.vlm_learning import (  # noqa: E402
    ENV_ID,
    Budget,
    base_config,
    main,
    random_walker_success,
    sft_config,
    tiny_policy,
)


def test_each_image_token_is_one_cell_and_every_word_is_known(tmp_path):
    config = base_config(Budget(), 0, tmp_path)
    policy = tiny_policy(Budget(), 0, config)
    frame, _ = SokobanVisualEnv().reset(seed=3)
    inputs = policy.vision.encode([frame["image"]])
    merge = policy.vision.image_processor.merge_size
    # the frame as drawn (no upscaling): a grid of 6 x 6 merged tokens of 16 x 16 pixels
    assert inputs.image_grid_thw.tolist() == [[1, 6 * merge, 6 * merge]]
    assert policy.vision.token_counts(inputs) == [36]
    assert policy.vision.image_processor.patch_size * merge == TILE
    tokenizer = policy.tokenizer
    for move in ("up", "down", "left", "right"):
        assert tokenizer.convert_tokens_to_ids(move) != tokenizer.unk_token_id


def test_sft_samples_show_the_frame_the_expert_acted_on(tmp_path):
    config = sft_config(Budget(), 0, tmp_path)
    policy = tiny_policy(Budget(), 0, config)
    trajectories = expert_trajectories(ENV_ID, config.env.kwargs(), 2)
    examples, stats = build_examples(trajectories, policy.tokenizer, config.prompt,
                                     stop=config.stop_strings, max_new_tokens=4,
                                     vision=policy.vision)
    assert stats.prompts_cut == 0 and len(examples) == sum(len(t.steps) for t in trajectories)
    samples = iter(examples)
    env = SokobanVisualEnv()
    for trajectory in trajectories:
        observation, _ = env.reset(options={"task_id": trajectory.extra["task_id"]})
        for step in trajectory.steps:
            sample = next(samples)
            assert np.array_equal(sample.images[0], observation["image"])
            assert sample.input_ids.count(policy.vision.image_token_id) == 36
            assert step.action == env.expert_action()
            answer = [t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
            assert policy.tokenizer.convert_ids_to_tokens(answer) == [step.action, "</action>"]
            observation, *_ = env.step(step.action)


def test_the_random_walker_plays_the_held_out_rooms(tmp_path):
    budget = Budget(eval_episodes=4, walker_episodes=25)
    config = base_config(budget, 0, tmp_path)
    rate = random_walker_success(budget, 0, config)
    assert rate == random_walker_success(budget, 0, config)  # seeded
    assert 0 < rate < 1 and rate * 100 == int(round(rate * 100))  # 100 walks


@pytest.mark.slow
def test_the_stages_run_on_a_tiny_budget(tmp_path, capsys):
    results = main(["--seeds", "1", "--sft-episodes", "4", "--sft-steps", "2",
                    "--sft-batch", "4", "--iterations", "1", "--num-groups", "2",
                    "--group-size", "2", "--eval-episodes", "2", "--walker-episodes", "2",
                    "--out", str(tmp_path)])
    entry = results["seeds"][0]
    assert len(entry["gigpo"]["curve"]) == 1 and 0 <= entry["gigpo"]["eval_after"] <= 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("vlm learning: ")
    assert (tmp_path / "results-seeds0-0.json").is_file()
