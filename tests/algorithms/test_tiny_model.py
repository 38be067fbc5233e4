"""The smoke model (``--model.name-or-path tiny``): a tiny random Llama over the words of
the env's own text, rebuilt identically, trainable with LoRA."""

from __future__ import annotations

import json

import pytest
import torch

from algorithms.agent.prompts import PromptBuilder
from algorithms.config import TrainConfig, replace
from algorithms.precision import compute_dtype
from algorithms.presets import PRESETS
from algorithms.training.tiny_model import (
    SPECIAL_TOKENS,
    env_texts,
    load_tiny_policy,
    run_texts,
    text_words,
    word_tokenizer,
)

GUESS = "examples.own_env:OwnEnv/NumberGuess-v0"


def _config(**env) -> TrainConfig:
    demo = PRESETS["cpu-demo"]
    return replace(demo, model={"name_or_path": "tiny"},
                   env={"env_id": GUESS, "env_kwargs": "{}", **env})


def test_words_and_ids():
    assert text_words(["go <action>north</action>", "go"]) == {
        "go", "<action>", "north", "</action>"}
    assert text_words(["a<b>"], split_tags=False) == {"a<b>"}
    tokenizer = word_tokenizer({"b", "a"})
    assert [tokenizer.convert_ids_to_tokens(i) for i in range(5)] == [*SPECIAL_TOKENS, "a", "b"]
    assert tokenizer("a zzz b</action>")["input_ids"] == [3, 1, 4, 1]  # unknown: [UNK]


def test_the_env_text_is_played_from_the_first_seeds():
    seen = env_texts(GUESS, {"max_steps": 6}, episodes=2)
    tasks, _, first, actions = seen[0]
    assert tasks.startswith("I am thinking of a number from 1 to 16")
    assert first == "Guess a number from 1 to 16." and actions[:2] == ("1", "2")
    # the expert (halving) plays first: its episodes end in success
    assert any(observation.startswith("Right, it is") for _, _, observation, _ in seen)


def test_every_word_of_the_runs_prompts_is_known():
    config = _config()
    policy = load_tiny_policy(config, torch.device("cpu"))
    tokenizer = policy.tokenizer
    unknown = tokenizer.unk_token_id
    builder = PromptBuilder(tokenizer, config.prompt)
    for task, history, observation, actions in env_texts(GUESS, config.env.kwargs()):
        window = history[-config.prompt.history_window:]
        ids = builder.build(task, window, observation, actions).token_ids
        assert unknown not in ids
    assert policy.lora and policy.path == "tiny"
    assert "words from examples.own_env:OwnEnv/NumberGuess-v0's text" in policy.source


def test_it_is_rebuilt_identically_and_lora_is_seeded_by_the_run():
    config = _config()
    first = load_tiny_policy(config, torch.device("cpu"), seed=0)
    again = load_tiny_policy(config, torch.device("cpu"), seed=0)
    other = load_tiny_policy(config, torch.device("cpu"), seed=1)
    assert first.tokenizer.get_vocab() == again.tokenizer.get_vocab()
    weights = [dict(p.model.named_parameters()) for p in (first, again, other)]
    assert all(torch.equal(weights[0][n], weights[1][n]) for n in weights[0])
    lora = [n for n in weights[0] if "lora_A" in n]
    frozen = [n for n in weights[0] if "lora_" not in n]
    assert lora and not all(torch.equal(weights[0][n], weights[2][n]) for n in lora)
    assert all(torch.equal(weights[0][n], weights[2][n]) for n in frozen)


def test_the_evaluation_envs_words_join_the_vocabulary():
    plain = _config(env_id="tests.agentgym.faulty_envs:AgentGymTest/PlainGuess-v0",
                    eval_env_kwargs=json.dumps({"high": 3}))
    texts = run_texts(plain)
    assert any("from 1 to 8." in text for text in texts)  # training env (high 8)
    assert any("from 1 to 3." in text for text in texts)  # evaluation env


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_models_dtype_follows_the_config(dtype):
    config = replace(_config(), model={"dtype": dtype, "lora_rank": 0})
    policy = load_tiny_policy(config, torch.device("cpu"))
    # (on a CPU, bfloat16 is mixed precision: the trained weights stay float32)
    assert compute_dtype(policy.model) == getattr(torch, dtype)


def test_a_checkpoint_of_a_smoke_model_built_from_other_env_text_is_refused_naming_it():
    """Issue 60: the refusal suggested model flags, when the env's text (here its range
    of numbers) had changed the smoke model's vocabulary."""
    from algorithms.runs.checkpoint import CheckpointError, check_model_identity
    from algorithms.training.policy import model_identity

    trained = model_identity(load_tiny_policy(_config(), torch.device("cpu")))
    again = model_identity(load_tiny_policy(_config(), torch.device("cpu")))
    check_model_identity("runs/guess/checkpoints/iter_000001", trained, again)  # the same
    wider = model_identity(load_tiny_policy(_config(env_kwargs=json.dumps({"high": 32})),
                                            torch.device("cpu")))
    with pytest.raises(CheckpointError) as refused:
        check_model_identity("runs/guess/checkpoints/iter_000001", trained, wider)
    message = str(refused.value)
    words = trained["base_source"].split(" words from")[0].rsplit(" ", 1)[1]
    assert message.startswith(
        f"runs/guess/checkpoints/iter_000001 was trained on the tiny smoke model built from "
        f"{GUESS}'s text ({words} words), and this run's is built from the same env's text (")
    assert "the env kwargs and prompt flags" in message
    assert "--model.name-or-path" not in message and "--model.dtype" not in message
