"""The SFT warm start: data format, tokenization in the RL layout, the response-token loss,
checkpoints an RL run starts from, and a short run that teaches the tiny model KeyDoor."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from algorithms.agent.prompts import PromptBuilder  # noqa: E402
from algorithms.config import ConfigError, ModelConfig, PromptConfig, replace  # noqa: E402
from algorithms.presets import PRESETS  # noqa: E402
from algorithms.runs.checkpoint import CheckpointError  # noqa: E402
from algorithms.sft.data import (  # noqa: E402
    ExpertStep,
    ExpertTrajectory,
    NoExpertError,
    SFTDataError,
    build_examples,
    expert_trajectories,
    read_trajectories,
    render_answer,
    write_trajectories,
)
from algorithms.sft.trainer import (  # noqa: E402
    SFTTrainer,
    batch_rows,
    collate,
    main,
    response_nll,
    sft_steps,
)
from algorithms.training.scoring import score_responses  # noqa: E402
from algorithms.training.warm_start import apply_init_checkpoint, base_fingerprint  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402

KEYDOOR = "AgentGym/KeyDoor-v0"
KEYDOOR_KWARGS = {"width": 2, "height": 2, "key": False, "max_steps": 6}
DEMO_PROMPT = PRESETS["cpu-demo"].prompt  # <action> prefix, no think, history 1, lines


def keydoor_words() -> str:
    """Every word of the 2 x 2 KeyDoor tasks (the tiny word-level tokenizer's vocabulary)."""
    trajectories = expert_trajectories(KEYDOOR, KEYDOOR_KWARGS, 64)
    return " ".join(f"{t.task} {s.observation} {s.action} {' '.join(s.admissible_actions)}"
                    for t in trajectories for s in t.steps) + " You escaped!"


@pytest.fixture(scope="module")
def words() -> str:
    return keydoor_words()


def tiny(words: str, *, seed: int = 0, lora: int = 0, hidden: int = 32):
    config = ModelConfig(lora_rank=lora, lora_alpha=2 * lora if lora else 32)
    return make_policy(seed=seed, hidden=hidden, extra_text=words, split_tags=True,
                       model_config=config)


def sft_config(tmp_path, **sft):
    base = dataclasses.replace(PRESETS["cpu-demo"], algo="sft")
    return replace(base, model={"lora_rank": 0},
                   sft={"episodes": 8, "batch_size": 4, "micro_batch_size": 4, **sft},
                   run={"tensorboard": False, "save_every": 1000, "output_dir": str(tmp_path),
                        "eval_every": 0}).validate()


# ---------------------------------------------------------------------- format
def test_answers_follow_the_action_format():
    step = ExpertStep("You are in the hall.", "go east")
    assert render_answer("Open the door.", step, PromptConfig()) == (
        "<think>My task: Open the door. The next step towards it is go east.</think>\n"
        "<action>go east</action>")
    thought = dataclasses.replace(step, thought="The door is east.")
    assert render_answer("t", thought, PromptConfig()) == \
        "<think>The door is east.</think>\n<action>go east</action>"
    assert render_answer("t", step, PromptConfig(think=False)) == "<action>go east</action>"
    assert render_answer("t", step, PromptConfig(think=False, action_tag="")) == "go east"
    own = dataclasses.replace(step, response="<action>anything</action>")
    assert render_answer("t", own, PromptConfig()) == "<action>anything</action>"


def test_jsonl_round_trip(tmp_path):
    trajectories = expert_trajectories(KEYDOOR, KEYDOOR_KWARGS, 3)
    path = tmp_path / "data.jsonl"
    assert write_trajectories(path, trajectories) == 3
    assert read_trajectories(path) == trajectories
    first = json.loads(path.read_text().splitlines()[0])
    assert set(first) == {"task", "steps", "task_id", "success", "perturbed", "source"}
    assert set(first["steps"][0]) == {"observation", "admissible_actions", "action"}


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", "line 2: not valid JSON"),
    ("[1, 2]", "line 2: expected a JSON object, got list"),
    ('{"steps": [{"observation": "o", "action": "a"}]}', "line 2: 'task' must be a string"),
    ('{"task": "t", "steps": []}', "line 2: 'steps' must be a non-empty list"),
    ('{"task": "t", "steps": [{"observation": "o"}]}', r"line 2: steps\[0\].action must be"),
    ('{"task": "t", "steps": [{"observation": "o", "action": "a", "admissible_actions": "a"}]}',
     r"line 2: steps\[0\].admissible_actions must be a list of strings"),
    ('{"task": "t", "steps": [{"observation": "o", "action": "a", "thought": 3}]}',
     r"line 2: steps\[0\].thought must be a string"),
    ('{"task": "t", "steps": [{"observation": "o", "action": "a", "info": [1]}]}',
     r"line 2: steps\[0\].info must be an object"),
    ('{"task": "t", "steps": [{"observation": "o", "action": "a", "reward": 1}]}',
     r"line 2: steps\[0\] has unknown keys \['reward'\]"),
])
def test_malformed_lines_are_refused_with_their_line_number(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    good = '{"task": "t", "steps": [{"observation": "o", "action": "a"}]}'
    path.write_text(f"{good}\n{line}\n\n", encoding="utf-8")
    with pytest.raises(SFTDataError, match=message) as caught:
        read_trajectories(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


def test_the_check_command(tmp_path, capsys):
    path = tmp_path / "data.jsonl"
    assert main(["make-data", "--env-id", KEYDOOR, "--env-kwargs", json.dumps(KEYDOOR_KWARGS),
                 "--episodes", "5", "--out", str(path)]) == 0
    assert "5 trajectories" in capsys.readouterr().out
    assert main(["check", str(path)]) == 0
    first = [t.extra["task_id"] for t in read_trajectories(path)]
    assert main(["make-data", "--env-id", KEYDOOR, "--env-kwargs", json.dumps(KEYDOOR_KWARGS),
                 "--episodes", "5", "--task-order", "spread", "--out", str(path)]) == 0
    spread = [t.extra["task_id"] for t in read_trajectories(path)]
    assert len(set(spread)) == 5 and spread != first
    path.write_text("{}\n", encoding="utf-8")
    assert main(["check", str(path)]) == 1
    assert "line 1: 'task' must be a string" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "status", "start"), [
    (["make-data", "--env-id", KEYDOOR, "--env-kwargs", "[1]", "--out", "x.jsonl"], 2,
     "python -m algorithms.sft.trainer make-data: error: --env-kwargs must be a JSON object"),
    (["make-data", "--env-id", KEYDOOR, "--perturb", "2", "--out", "x.jsonl"], 2,
     "python -m algorithms.sft.trainer make-data: error: --perturb must be in [0, 1]"),
    (["make-data", "--env-id", "AgentGym/Nope-v0", "--out", "x.jsonl"], 2,
     "python -m algorithms.sft.trainer: error: unknown env id 'AgentGym/Nope-v0'"),
    (["check", "no-such-file.jsonl"], 1, "python -m algorithms.sft.trainer: error: "),
])
def test_the_data_makers_errors_are_one_line_with_the_kinds_exit_status(
        tmp_path, monkeypatch, capsys, args, status, start):
    """A command line that cannot run exits 2 (argparse's refusals too); a file that is not
    there, 1."""
    monkeypatch.chdir(tmp_path)
    try:
        code = main(args)
    except SystemExit as stop:
        code = stop.code
    (line,) = capsys.readouterr().err.splitlines()
    assert code == status and line.startswith(start), line


# ---------------------------------------------------------------------- expert data
def test_expert_data_succeeds_and_perturbations_are_seeded():
    clean = expert_trajectories(KEYDOOR, KEYDOOR_KWARGS, 16)
    assert all(t.extra["success"] and not t.extra["perturbed"] for t in clean)
    noisy = expert_trajectories(KEYDOOR, KEYDOOR_KWARGS, 16, perturb=0.5, seed=3)
    assert noisy == expert_trajectories(KEYDOOR, KEYDOOR_KWARGS, 16, perturb=0.5, seed=3)
    perturbed = [(t, i) for t in noisy for i in t.extra["perturbed"]]
    steps = sum(len(t.steps) for t in noisy)
    assert 0.25 < len(perturbed) / steps < 0.75
    for trajectory, index in perturbed:  # a random admissible action, not the expert's
        step = trajectory.steps[index]
        assert step.action in step.admissible_actions
    assert sum(t.extra["success"] for t in noisy) < 16


def test_expert_episodes_play_the_first_tasks_or_tasks_spread_over_the_list():
    import gymnasium as gym

    env = gym.make(KEYDOOR, **KEYDOOR_KWARGS)
    all_ids = list(env.unwrapped.task_ids)
    env.close()
    n = len(all_ids)

    def played(episodes, order):
        return [t.extra["task_id"] for t in
                expert_trajectories(KEYDOOR, KEYDOOR_KWARGS, episodes, task_order=order)]

    assert played(3, "first") == all_ids[:3]
    assert played(3, "spread") == [all_ids[i * n // 3] for i in range(3)] != all_ids[:3]
    # more episodes than tasks: every task in turn, whichever the order
    assert played(n + 2, "spread") == played(n + 2, "first") == all_ids + all_ids[:2]


def test_an_env_without_expert_is_refused_in_one_line():
    with pytest.raises(NoExpertError, match="AgentGym/Scripted-v0 declares no expert.*--sft.data"):
        expert_trajectories("AgentGym/Scripted-v0", {}, 1)


def test_info_a_template_reads_is_kept_with_the_steps_and_fills_the_sft_prompts(
        tmp_path, words):
    """A template's ``{info[KEY]}`` reads the env's info in the RL prompt; generated SFT
    steps keep those keys (``info`` in the JSONL), so the SFT prompt is the same."""
    from algorithms.sft.data import kept_info

    assert kept_info({"room": "hall"}, ()) is None
    with pytest.raises(SFTDataError, match=r"reads \{info\[floor\]\}, but the env's info has "
                                           "no key 'floor'"):
        kept_info({"room": "hall"}, ("floor",))
    trajectories = expert_trajectories(KEYDOOR, KEYDOOR_KWARGS, 3, info_keys=("room",))
    rooms = [step.info["room"] for t in trajectories for step in t.steps]
    assert rooms and all(isinstance(room, str) for room in rooms)
    path = tmp_path / "data.jsonl"
    write_trajectories(path, trajectories)
    assert '"info": {"room": ' in path.read_text(encoding="utf-8")
    assert read_trajectories(path) == trajectories
    assert main(["make-data", "--env-id", KEYDOOR, "--env-kwargs", json.dumps(KEYDOOR_KWARGS),
                 "--episodes", "2", "--info-keys", "room,has_key", "--out", str(path)]) == 0
    assert set(read_trajectories(path)[0].steps[0].info) == {"room", "has_key"}
    template = tmp_path / "template.txt"
    template.write_text("{task} You are in the {info[room]} . {observation}", encoding="utf-8")
    prompt = replace(PRESETS["cpu-demo"], prompt={"template": str(template)}).prompt
    policy = tiny(" ".join([words, *rooms]))  # the rooms' names as words of their own
    examples, _ = build_examples(trajectories, policy.tokenizer, prompt,
                                 stop=("</action>",), max_new_tokens=8)
    texts = [policy.tokenizer.decode(list(e.input_ids)) for e in examples]
    assert all(f"You are in the {room} " in text for text, room in
               zip(texts, rooms, strict=True))
    with pytest.raises(ValueError, match=r"reads \{info\[room\]\}"):  # data without it
        build_examples(expert_trajectories(KEYDOOR, KEYDOOR_KWARGS, 1), policy.tokenizer,
                       prompt, stop=("</action>",), max_new_tokens=8)


# ---------------------------------------------------------------------- tokenization
def test_window_samples_are_the_rl_prompts_with_the_loss_on_the_response(words):
    policy = tiny(words)
    tokenizer = policy.tokenizer
    trajectory = expert_trajectories(KEYDOOR, KEYDOOR_KWARGS, 2)[1]
    assert len(trajectory.steps) == 2
    examples, stats = build_examples([trajectory], tokenizer, DEMO_PROMPT,
                                     stop=("</action>",), max_new_tokens=8)
    assert len(examples) == 2 and stats.steps == 2 and stats.steps_dropped == 0
    builder = PromptBuilder(tokenizer, DEMO_PROMPT)
    history: list[tuple[str, str]] = []
    for example, step in zip(examples, trajectory.steps, strict=True):
        prompt = builder.build(trajectory.task, history, step.observation,
                               step.admissible_actions).token_ids
        ids, mask = np.array(example.input_ids), np.array(example.loss_mask)
        assert tuple(ids[: len(prompt)]) == prompt  # the very prompt the rollout builds
        assert not mask[: len(prompt)].any() and mask[len(prompt):].all()
        # the response: the answer after the "<action>" prefix, ending at the stop string
        assert tokenizer.decode(ids[mask == 1].tolist()) == f"{step.action} </action>"
        history.append((step.observation, step.action))
    # without stop strings the response ends with EOS, as the engine's would
    bare, _ = build_examples([trajectory], tokenizer, DEMO_PROMPT, stop=(), max_new_tokens=8)
    assert bare[0].input_ids[-1] == tokenizer.eos_token_id and bare[0].loss_mask[-1] == 1


def test_transcript_samples_are_one_sequence_per_trajectory(words):
    tokenizer = tiny(words).tokenizer
    prompt = dataclasses.replace(DEMO_PROMPT, layout="transcript", history_window=0)
    trajectory = expert_trajectories(KEYDOOR, KEYDOOR_KWARGS, 2)[1]
    (example,), stats = build_examples([trajectory], tokenizer, prompt,
                                       stop=("</action>",), max_new_tokens=8)
    builder = PromptBuilder(tokenizer, prompt)
    first = list(builder.build(trajectory.task, [], trajectory.steps[0].observation,
                               trajectory.steps[0].admissible_actions).token_ids)

    def encode(text):
        return list(builder.encode_text(text))

    answer = [encode(f"{s.action}</action>") for s in trajectory.steps]
    expected = (first + answer[0] + encode(trajectory.steps[1].observation)
                + encode("<action>") + answer[1])
    assert list(example.input_ids) == expected
    mask = [0] * len(first) + [1] * len(answer[0]) + \
        [0] * (len(expected) - len(first) - len(answer[0]) - len(answer[1])) + [1] * len(answer[1])
    assert list(example.loss_mask) == mask
    assert stats.steps == 2


def test_an_answer_without_the_response_prefix_is_refused(words):
    tokenizer = tiny(words).tokenizer
    trajectory = ExpertTrajectory("t", (ExpertStep("o", "a", response="a</action>"),))
    with pytest.raises(SFTDataError, match="trajectory 0 step 0: .*response_prefix '<action>'"):
        build_examples([trajectory], tokenizer, DEMO_PROMPT, stop=("</action>",),
                       max_new_tokens=8)


# ---------------------------------------------------------------------- the loss
def test_the_loss_is_the_token_mean_cross_entropy_of_response_tokens_only(words):
    torch.manual_seed(0)
    model = tiny(words).model
    input_ids = torch.randint(3, 40, (2, 7))
    attention = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    loss_mask = torch.tensor([[0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 0, 0]])
    nll, tokens = response_nll(model, input_ids, attention, loss_mask)
    assert tokens == 3
    with torch.no_grad():  # by hand: token t is predicted by the logits at t - 1
        logits = model(input_ids=input_ids, attention_mask=attention).logits.log_softmax(-1)
    expected = -(logits[0, 2, input_ids[0, 3]] + logits[0, 3, input_ids[0, 4]]
                 + logits[1, 3, input_ids[1, 4]])
    assert torch.allclose(nll, expected, atol=1e-5)
    # prompt tokens are never targets: whatever token a prompt position would have to
    # predict next, only the masked positions' own tokens enter the loss
    changed = input_ids.clone()
    changed[0, 5:] = 0  # after the response (and masked out): no effect at all
    assert torch.allclose(response_nll(model, changed, attention, loss_mask)[0], nll)


def test_the_loss_agrees_with_the_rl_scorer(words):
    policy = tiny(words)
    trajectories = expert_trajectories(KEYDOOR, KEYDOOR_KWARGS, 4)
    examples, _ = build_examples(trajectories, policy.tokenizer, DEMO_PROMPT,
                                 stop=("</action>",), max_new_tokens=8)
    ids, attention, mask = collate(examples, int(policy.tokenizer.pad_token_id), torch.device("cpu"))
    with torch.no_grad():
        nll, tokens = response_nll(policy.model, ids, attention, mask)
        # the same rows as the learner sees them: left-padded prompts, right-padded responses
        prompts = [e.input_ids[: e.loss_mask.index(1)] for e in examples]
        responses = [e.input_ids[e.loss_mask.index(1):] for e in examples]
        from algorithms.agent.step_batch import pad_left, pad_right

        p_ids, p_mask = pad_left(prompts, 0)
        r_ids, r_mask = pad_right(responses, 0)
        scored = score_responses(policy.model, torch.tensor(p_ids), torch.tensor(p_mask),
                                 torch.tensor(r_ids), torch.tensor(r_mask))
    reference = -(scored.log_probs * torch.tensor(r_mask)).sum()
    assert tokens == int(r_mask.sum())
    assert torch.allclose(nll, reference, rtol=1e-4)


def test_micro_batches_do_not_change_the_step(tmp_path, words):
    updated = []
    for micro in (4, 1):
        policy = tiny(words)
        config = sft_config(tmp_path, micro_batch_size=micro)
        trainer = SFTTrainer(config, policy=policy, run_dir=tmp_path / f"micro{micro}")
        trainer.setup()
        trainer.sft_step(np.arange(4))
        updated.append({n: p.detach().clone() for n, p in policy.model.named_parameters()})
        trainer.close()
    for name, weight in updated[0].items():
        assert torch.allclose(weight, updated[1][name], atol=1e-6), name


def test_freed_heap_pages_go_back_around_each_forward_pass_without_changing_the_step(
        tmp_path, words, monkeypatch):
    import algorithms.sft.trainer as sft_trainer

    updated, calls = [], []
    for release in (True, False):
        policy = tiny(words)
        trainer = SFTTrainer(sft_config(tmp_path, micro_batch_size=2), policy=policy,
                             run_dir=tmp_path / f"release{release}")
        trainer.setup()
        trainer.release_memory = release
        released: list[int] = []
        monkeypatch.setattr(sft_trainer, "release_freed_memory",
                            lambda seen=released: seen.append(1))
        trainer.sft_step(np.arange(4))
        calls.append(len(released))
        updated.append({n: p.detach().clone() for n, p in policy.model.named_parameters()})
        trainer.close()
    assert calls == [4, 0]  # before and after each of the 2 micro-batches' forward passes
    for name, weight in updated[0].items():
        assert torch.equal(weight, updated[1][name]), name


def test_resume_continues_exactly(tmp_path, words):
    config = sft_config(tmp_path, max_steps=4, lr=1e-2)
    whole = tiny(words)
    SFTTrainer(config, policy=whole, run_dir=tmp_path / "whole").run()
    cut = replace(config, run={"save_every": 2})
    first = SFTTrainer(cut, policy=tiny(words), run_dir=tmp_path / "cut")
    first.setup()
    per_epoch = sft_steps(cut, len(first.examples))[1]
    for step in range(2):  # interrupted after the checkpoint of step 2
        first.sft_step(batch_rows(0, step, per_epoch, len(first.examples), 4))
    first.save(2, {})
    first.close()
    resumed = tiny(words)
    trainer = SFTTrainer(replace(cut, run={"resume": True}), policy=resumed,
                         run_dir=tmp_path / "cut")
    trainer.run()
    assert trainer.start_iteration == 2
    for name, weight in whole.model.named_parameters():
        assert torch.allclose(dict(resumed.model.named_parameters())[name], weight,
                              atol=1e-6), name


def test_batches_cover_each_epoch_once_in_a_seeded_order():
    rows = [batch_rows(7, step, 3, 10, 4) for step in range(6)]
    assert sorted(np.concatenate(rows[:3]).tolist()) == list(range(10))
    assert sorted(np.concatenate(rows[3:]).tolist()) == list(range(10))
    assert not np.array_equal(np.concatenate(rows[:3]), np.concatenate(rows[3:]))
    assert np.array_equal(batch_rows(7, 4, 3, 10, 4), rows[4])


def test_the_command_line_selects_sft():
    from algorithms.config import TrainConfig
    from train import parse_config

    config = parse_config(["--preset", "cpu-demo", "--algo", "sft", "--sft.perturb", "0.2",
                           "--sft.epochs", "3", "--model.init-checkpoint", "runs/x"])
    assert (config.algo, config.sft.perturb, config.sft.epochs) == ("sft", 0.2, 3)
    assert config.model.init_checkpoint == "runs/x" and config.estimator is None
    assert TrainConfig.from_dict(config.to_dict()) == config


def test_sft_settings_are_validated(tmp_path):
    with pytest.raises(ConfigError, match="sft.perturb must be in"):
        sft_config(tmp_path, perturb=1.5)
    with pytest.raises(ConfigError, match="sft.micro_batch_size must be <= batch_size"):
        sft_config(tmp_path, micro_batch_size=8)


# ---------------------------------------------------------------------- warm start
def _sft_checkpoint(tmp_path, words, *, lora: int):
    config = replace(sft_config(tmp_path, max_steps=2, lr=1e-2),
                     model={"lora_rank": lora, "lora_alpha": 2 * lora if lora else 32})
    policy = tiny(words, lora=lora)
    trainer = SFTTrainer(config, policy=policy, run_dir=tmp_path / f"sft-lora{lora}")
    trainer.run()
    return trainer.run_dir, policy


@pytest.mark.parametrize("lora", [0, 4])
def test_an_rl_run_starts_from_the_sft_model(tmp_path, words, lora):
    run_dir, trained = _sft_checkpoint(tmp_path, words, lora=lora)
    meta = json.loads((run_dir / "checkpoints" / "iter_000002" / "meta.json").read_text())
    assert meta["model"]["base_fingerprint"] == base_fingerprint(tiny(words).model)
    inputs = torch.randint(3, 40, (2, 9))
    with torch.no_grad():
        expected = trained.model(input_ids=inputs).logits
        base = tiny(words).model(input_ids=inputs).logits
    assert not torch.allclose(base, expected, atol=1e-3)  # SFT changed the model
    for rl_lora in (0, 8):  # the RL run's own adapters (or none) on the SFT model
        fresh = tiny(words, lora=rl_lora)
        config = ModelConfig(lora_rank=rl_lora, init_checkpoint=str(run_dir))
        started = apply_init_checkpoint(fresh, config)
        assert started.lora == (rl_lora > 0)
        with torch.no_grad():
            assert torch.allclose(started.model(input_ids=inputs).logits, expected, atol=1e-5)
        if rl_lora == 0 and lora == 0:  # weights equal after load
            for name, weight in trained.model.named_parameters():
                assert torch.equal(dict(started.model.named_parameters())[name], weight)
        if rl_lora:  # the KL reference (adapters off) is the SFT model too
            with torch.no_grad(), started.model.disable_adapter():
                assert torch.allclose(started.model(input_ids=inputs).logits, expected,
                                      atol=1e-5)


def test_a_checkpoint_of_another_base_model_is_refused(tmp_path, words):
    run_dir, _ = _sft_checkpoint(tmp_path, words, lora=4)
    other = tiny(words, seed=1, lora=4)
    with pytest.raises(CheckpointError, match="was trained from tiny test model") as caught:
        apply_init_checkpoint(other, ModelConfig(lora_rank=4, init_checkpoint=str(run_dir)))
    assert "\n" not in str(caught.value)
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        apply_init_checkpoint(other, ModelConfig(init_checkpoint=str(tmp_path / "none")))


def test_the_trainer_starts_rl_from_the_checkpoint(tmp_path, words):
    from algorithms.training.trainer import Trainer

    run_dir, trained = _sft_checkpoint(tmp_path, words, lora=0)
    config = replace(PRESETS["cpu-demo"], model={"lora_rank": 0,
                                                 "init_checkpoint": str(run_dir)},
                     run={"tensorboard": False, "iterations": 1, "output_dir": str(tmp_path)})
    trainer = Trainer(config, policy=tiny(words), run_dir=tmp_path / "rl")
    trainer.setup()
    try:
        for name, weight in trained.model.named_parameters():
            assert torch.equal(dict(trainer.policy.model.named_parameters())[name], weight)
            # the KL reference is a frozen copy of the SFT model
            assert torch.equal(dict(trainer.learner.reference.named_parameters())[name], weight)
    finally:
        trainer.close()


# ---------------------------------------------------------------------- it learns
def test_a_short_sft_run_teaches_the_tiny_model_keydoor(tmp_path, words):
    """From ~0 (an untrained model writes no action) to > 0.3 success on 32 episodes of
    the cpu-demo's 2 x 2 KeyDoor house, in about 20 s (measured: 0 -> 0.53)."""
    config = replace(sft_config(tmp_path, episodes=64, epochs=15, lr=3e-3, batch_size=16,
                                micro_batch_size=16),
                     env={"eval_episodes": 32})
    trainer = SFTTrainer(config, policy=tiny(words, hidden=64), run_dir=tmp_path / "learn")
    trainer.setup()
    before = trainer.evaluate_policy(0)
    after = trainer.run()
    after.update(trainer.evaluate_policy(1))
    print(f"\nsuccess {before['eval/success']:.2f} -> {after['eval/success']:.2f}, format "
          f"errors {before['eval/format_error_rate']:.2f} -> "
          f"{after['eval/format_error_rate']:.2f}")
    assert before["eval/success"] <= 0.1
    assert after["eval/success"] > 0.3
    assert after["eval/format_error_rate"] < 0.1
    assert after["sft/loss"] < 0.5


def test_a_log_file_gets_a_plain_line_per_checkpoint_and_no_bars(tmp_path, words, capsys):
    """Output captured (not a terminal): the SFT stage draws no bar (its episodes, its
    steps) and says its figures on one line where it writes a checkpoint."""
    config = replace(sft_config(tmp_path, max_steps=4), run={"save_every": 2, "progress": True})
    SFTTrainer(config, policy=tiny(words), run_dir=tmp_path / "run").run()
    captured = capsys.readouterr()
    assert "\r" not in captured.err and "it/s" not in captured.err
    lines = [line for line in captured.out.splitlines() if "SFT step" in line]
    assert [line.split(":")[0] for line in lines] == ["[agentgym] SFT step 2/4",
                                                      "[agentgym] SFT step 4/4"]
    assert all(" loss=" in line and " s/step, elapsed " in line for line in lines)
