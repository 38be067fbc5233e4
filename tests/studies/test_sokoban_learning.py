"""The Sokoban learning check's plumbing (``studies/sokoban_learning.py``): the SFT
warm start on the BFS expert feeds the RL stage, the threshold reading is right, and the
samples show the model the grid the expert acted on. The check itself (SFT, then 25
iterations per method, ~20 minutes a seed) is run by hand; its figures are in
docs/envs/sokoban.md."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from agentgym.sokoban import SokobanEnv  # noqa: E402
from algorithms.sft.data import build_examples, expert_trajectories  # noqa: E402
from studies.sokoban_learning import (  # noqa: E402
    ENV_ID,
    Budget,
    first_at,
    run_rl,
    run_sft,
    sft_config,
    tiny_policy,
)

SYMBOLS = ("#", "_", "O", "X", "√", "P", "S")


def test_every_grid_symbol_is_its_own_known_token():
    tokenizer = tiny_policy(0).tokenizer
    ids = [tokenizer.convert_tokens_to_ids(symbol) for symbol in SYMBOLS]
    assert tokenizer.unk_token_id not in ids and len(set(ids)) == len(SYMBOLS)
    observation, _ = SokobanEnv().reset(seed=3)
    tokens = tokenizer.convert_ids_to_tokens(
        tokenizer(observation, add_special_tokens=False)["input_ids"])
    assert tokens == observation.split() and len(tokens) == 36   # tabs and newlines go


def test_sft_samples_show_the_grid_the_expert_acted_on(tmp_path):
    """The diagnosis of the 0.69-nats plateau (docs/envs/sokoban.md): each SFT sample's
    prompt holds the step's 36 cells in order, and its target is the expert's move from
    exactly that grid (replayed here on a fresh env), not the previous or next one."""
    config = sft_config(Budget(), 0, tmp_path)
    tokenizer = tiny_policy(0).tokenizer
    trajectories = expert_trajectories(ENV_ID, {}, 3)
    examples, stats = build_examples(trajectories, tokenizer, config.prompt,
                                     stop=config.stop_strings, max_new_tokens=4)
    assert stats.prompts_cut == 0 and len(examples) == sum(len(t.steps) for t in trajectories)
    samples = iter(examples)
    env = SokobanEnv()
    for trajectory in trajectories:
        observation, _ = env.reset(options={"task_id": trajectory.extra["task_id"]})
        for step in trajectory.steps:
            sample = next(samples)
            tokens = tokenizer.convert_ids_to_tokens(list(sample.input_ids))
            start = tokens.index("see:") + 1
            assert tokens[start:start + 36] == observation.split()
            assert step.action == env.expert_action()
            answer = [t for t, m in zip(tokens, sample.loss_mask, strict=True) if m]
            assert answer == [step.action, "</action>"]
            observation, *_ = env.step(step.action)


def test_first_at_reads_the_moving_average():
    assert first_at([0.4, 0.6, 0.5, 0.2]) == 3           # (0.4 + 0.6 + 0.5) / 3 = 0.5
    assert first_at([0.9, 0.9, 0.0, 0.0, 0.6]) == 3
    assert first_at([0.1, 0.9, 0.2, 0.3, 0.9, 0.2]) is None  # best average 0.467
    assert first_at([0.1, 0.9, 0.2, 0.3, 0.9, 0.3]) == 6     # (0.3 + 0.9 + 0.3) / 3
    assert first_at([1.0, 1.0]) is None                  # fewer than 3 iterations


@pytest.mark.slow
def test_sft_then_rl_runs_end_to_end(tmp_path):
    budget = Budget(sft_episodes=8, sft_steps=2, num_groups=2, group_size=2, iterations=1,
                    eval_episodes=2)
    sft_dir, sft = run_sft(budget, 0, tmp_path)
    assert (sft_dir / "checkpoints").is_dir() and sft["sft_format_errors"] <= 1.0
    result = run_rl("gigpo", budget, 0, tmp_path, sft_dir)
    assert len(result["curve"]) == 1 and 0.0 <= result["eval_after"] <= 1.0
