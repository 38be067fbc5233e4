"""The transcript layout: one growing sequence per trajectory, env text never trained on,
one forward pass per trajectory equal to the per-turn forwards, the same advantages as the
window layout."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from agentgym.vector import make_vector_env  # noqa: E402
from algorithms.agent.metrics import rollout_metrics  # noqa: E402
from algorithms.agent.rollout import RolloutSettings, collect_rollout  # noqa: E402
from algorithms.config import PromptConfig, TrainConfig, replace  # noqa: E402
from algorithms.training.learner import Learner  # noqa: E402
from algorithms.training.transcript import transcript_view  # noqa: E402
from tests.algorithms.fakes import ScriptedEngine  # noqa: E402
from tests.algorithms.tiny import make_model, make_policy, make_tokenizer  # noqa: E402

TASKS = ("doors-0001", "doors-0002")
CPU = torch.device("cpu")
COLOURS = ("red", "green", "blue")


def _answer(turn: int, position: int, prompt: str) -> str:
    """Even envs open the door the newest hint names, odd ones look around."""
    if position % 2:
        return "<action> look </action>"
    newest = max(COLOURS, key=lambda c: prompt.rfind(f"says: open {c} door"))
    return f"<action> open {newest} door </action>"


def _rollout(tokenizer, layout: str, *, max_prompt_tokens: int = 600, max_steps: int = 3,
             keep_bootstrap_prompts: bool = True, stop: tuple[str, ...] = (),
             max_observation_tokens: int | None = None):
    engine = ScriptedEngine(tokenizer, _answer)
    env = make_vector_env("AgentGym/Scripted-v0", 4, group_size=2, num_rooms=3, hint=True,
                          max_steps=max_steps)
    settings = RolloutSettings(
        group_size=2, max_steps=max_steps, temperature=1.0, max_new_tokens=12,
        invalid_action_penalty=0.1,
        prompt=PromptConfig(think=False, max_prompt_tokens=max_prompt_tokens, layout=layout,
                            max_observation_tokens=max_observation_tokens),
        keep_bootstrap_prompts=keep_bootstrap_prompts, stop=stop)
    try:
        return collect_rollout(env, engine, tokenizer, settings, group_task_ids=TASKS,
                               seed=5), engine
    finally:
        env.close()


def _tokens(ids: np.ndarray, mask: np.ndarray) -> list[int]:
    return [int(t) for t in ids[mask == 1]]


def test_each_prompt_is_the_last_one_plus_response_plus_env_text():
    tokenizer = make_tokenizer()
    batch, engine = _rollout(tokenizer, "transcript", stop=("</action>",))
    assert batch.layout == "transcript" and set(engine.stops) == {("</action>",)}
    assert batch.step_index.max() >= 1
    for row in range(1, len(batch)):
        if batch.traj_ids[row] != batch.traj_ids[row - 1]:
            continue
        previous = _tokens(batch.prompt_ids[row - 1], batch.prompt_mask[row - 1])
        response = _tokens(batch.response_ids[row - 1], batch.response_mask[row - 1])
        # the observation anchor is the env's text the step was taken after
        env_text = tokenizer(batch.anchors[row], add_special_tokens=False)["input_ids"]
        assert _tokens(batch.prompt_ids[row], batch.prompt_mask[row]) == \
            previous + response + env_text
        assert tokenizer.decode(response).endswith("</action>")  # stopped, no EOS
    view = transcript_view(batch)
    assert view.num_sequences == batch.num_trajectories
    for row in range(len(batch)):
        sequence = view.sequence_ids[view.sequence_index[row]]
        start = view.response_starts[row]
        length = int(batch.response_mask[row].sum())
        np.testing.assert_array_equal(sequence[start:start + length],
                                      batch.response_ids[row][:length])
    last = np.flatnonzero(batch.last_step)
    np.testing.assert_array_equal(view.sequence_mask.sum(1),
                                  batch.prompt_mask[last].sum(1) + batch.response_mask[last].sum(1))
    assert not batch.budget_cut.any()
    assert rollout_metrics(batch)["rollout/transcript_cut_rate"] == 0.0


def test_env_text_keeps_its_first_tokens_with_max_observation_tokens():
    tokenizer = make_tokenizer()
    batch, _ = _rollout(tokenizer, "transcript", max_observation_tokens=4)
    expected_cut = np.zeros(len(batch), dtype=bool)
    for row in np.flatnonzero(batch.step_index > 0):
        previous = _tokens(batch.prompt_ids[row - 1], batch.prompt_mask[row - 1])
        response = _tokens(batch.response_ids[row - 1], batch.response_mask[row - 1])
        env_text = tokenizer(batch.anchors[row], add_special_tokens=False)["input_ids"]
        assert _tokens(batch.prompt_ids[row], batch.prompt_mask[row]) == \
            previous + response + env_text[:4]
        expected_cut[row] = len(env_text) > 4
    assert expected_cut.any() and not expected_cut.all()
    np.testing.assert_array_equal(batch.prompt_cut, expected_cut)


def test_a_transcript_over_budget_ends_its_trajectory_cut_and_counted():
    tokenizer = make_tokenizer()
    full, _ = _rollout(tokenizer, "transcript")
    first_prompts = full.prompt_mask[full.step_index == 0].sum(1)
    second_prompts = full.prompt_mask[full.step_index == 1].sum(1)
    budget = int(second_prompts.min()) - 1  # every second turn's transcript is too long
    assert budget >= first_prompts.max()
    batch, _ = _rollout(tokenizer, "transcript", max_prompt_tokens=budget)
    np.testing.assert_array_equal(batch.step_index, 0)
    assert batch.budget_cut.all() and batch.truncated.all()
    assert (batch.prompt_mask.sum(1) <= budget).all()
    assert rollout_metrics(batch)["rollout/transcript_cut_rate"] == 1.0
    # PPO bootstraps from the transcript that did not fit (the state the cut left)
    np.testing.assert_array_equal(batch.bootstrap_rows, np.arange(len(batch)))
    for k, row in enumerate(batch.bootstrap_rows):
        expected = _tokens(full.prompt_ids[full.step_index == 1][k],
                           full.prompt_mask[full.step_index == 1][k])
        assert _tokens(batch.bootstrap_prompt_ids[k], batch.bootstrap_prompt_mask[k]) == \
            expected
        assert len(expected) > budget and row == k


def _learner(algo: str, policy, *, critic: str = "value_head", **learner: object) -> Learner:
    values = {"lr": 1e-3, "mini_batch_size": 64, "micro_batch_size": 2, "kl_coef": 0.05,
              **learner}
    config = replace(TrainConfig(algo=algo), learner=values, model={"critic": critic},
                     env={"group_size": 2, "num_groups": 2}, run={"device": "cpu"})
    backbone = make_model(len(policy.tokenizer), seed=5).model if critic == "separate" else None
    return Learner(policy, config, CPU, critic_backbone=backbone)


@pytest.mark.parametrize("algo", ["gigpo", "grpo"])
def test_transcript_and_window_give_the_same_advantages(algo):
    tokenizer = make_tokenizer()
    window, _ = _rollout(tokenizer, "window")
    transcript, _ = _rollout(tokenizer, "transcript")
    np.testing.assert_array_equal(window.rewards, transcript.rewards)
    assert window.anchors == transcript.anchors
    np.testing.assert_array_equal(window.anchor_ids, transcript.anchor_ids)
    learner = _learner(algo, make_policy())
    first, second = learner.advantages(window), learner.advantages(transcript)
    np.testing.assert_array_equal(first.advantages, second.advantages)
    assert np.abs(first.advantages).max() > 0


def _scored(algo: str, batch, critic: str = "value_head", **learner: object):
    torch.manual_seed(0)
    policy = make_policy(seed=1)
    learner_ = _learner(algo, policy, critic=critic, **learner)
    head = learner_.value_head or (learner_.critic.head if learner_.critic else None)
    if head is not None:  # a non-zero head, so that values are compared for real
        torch.nn.init.normal_(head.linear.weight, std=0.5)
    return learner_.score(batch), policy


@pytest.mark.parametrize(("algo", "critic"), [("gigpo", "value_head"), ("ppo", "value_head"),
                                              ("ppo", "separate")])
def test_one_forward_per_trajectory_equals_the_per_turn_forwards(algo, critic):
    tokenizer = make_tokenizer()
    batch, _ = _rollout(tokenizer, "transcript")
    per_turn = dataclasses.replace(batch, layout="window")  # each row: its own forward
    calls = []
    whole, policy = _scored(algo, batch, critic, micro_batch_size=3)
    single, _ = _scored(algo, per_turn, critic, micro_batch_size=3)
    mask = batch.response_mask.astype(bool)
    for name in ("old_log_probs", "ref_log_probs"):
        np.testing.assert_allclose(getattr(whole, name)[mask], getattr(single, name)[mask],
                                   atol=2e-5, rtol=0)
    if algo == "ppo":
        assert np.abs(whole.values).max() > 1e-3
        np.testing.assert_allclose(whole.values, single.values, atol=2e-5)
        np.testing.assert_allclose(whole.bootstrap_values, single.bootstrap_values, atol=2e-5)
    if critic == "separate":
        return
    # passes: one per micro-batch of 3 trajectories, not one per micro-batch of 3 steps
    learner = _learner(algo, policy, micro_batch_size=3)
    assert learner.score_passes(batch) - learner.score_passes(per_turn) == \
        -(-batch.num_trajectories // 3) - -(-len(batch) // 3)
    hook = policy.model.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        learner.score(batch)
    finally:
        hook.remove()
    # the policy's backbone: one pass per 3 trajectories (+ PPO's bootstrap prompts; the
    # KL reference is a separate copy)
    assert len(calls) == -(-batch.num_trajectories // 3) + \
        (-(-len(batch.bootstrap_rows) // 3) if algo == "ppo" else 0)


def test_env_tokens_change_no_loss_and_no_gradient():
    """One update over the transcripts equals one over the per-turn prompts: the env's text
    between turns adds no term to the policy loss, KL, entropy or token count."""
    tokenizer = make_tokenizer()
    batch, _ = _rollout(tokenizer, "transcript")
    results = []
    for layout in ("transcript", "window"):
        policy = make_policy(seed=2)
        learner = _learner("gigpo", policy, mini_batch_size=64, micro_batch_size=3,
                           entropy_coef=0.01, micro_batch_weighting="tokens")
        view = dataclasses.replace(batch, layout=layout)
        scored = learner.score(view)
        stats = learner.update(scored, learner.advantages(scored), seed=0)
        weights = torch.cat([p.detach().flatten() for p in policy.model.parameters()])
        results.append((stats, weights))
    (transcript_stats, transcript_weights), (window_stats, window_weights) = results
    assert transcript_stats["update_tokens"] == window_stats["update_tokens"] == \
        float(batch.response_mask.sum())
    for key in ("policy_loss", "kl_ref", "entropy", "grad_norm"):
        assert transcript_stats[key] == pytest.approx(window_stats[key], abs=1e-5), key
    assert transcript_stats["optimizer_steps"] == window_stats["optimizer_steps"] == 1
    assert transcript_stats["grad_norm"] > 0
    # 5e-6 (was 1e-6 under the earlier loss): the two layouts sum a mini-batch's gradient
    # from different micro-batches, and AdamW's first step divides each gradient by its own
    # magnitude, so a weight whose gradient is ~1e-8 (AdamW's eps) moves by an amount that
    # float rounding shifts: under verl-agent's recipe one weight of 22,016 differed by
    # 1.5e-6 (relative 3.7e-5); the losses and gradient norm above still agree to 1e-5.
    torch.testing.assert_close(transcript_weights, window_weights, atol=5e-6, rtol=0)
