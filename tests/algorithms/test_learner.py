"""The learner on a tiny random Llama: every algo updates, zero advantages do not, the
critic fits, the LoRA reference is the base model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from agentgym.vector import make_vector_env  # noqa: E402
from algorithms.agent.rollout import RolloutSettings  # noqa: E402
from algorithms.config import ModelConfig, PromptConfig, TrainConfig, replace  # noqa: E402
from algorithms.training.estimation import Advantages  # noqa: E402
from algorithms.training.learner import Learner  # noqa: E402
from tests.algorithms.fakes import ScriptedEngine, collect_and_close, cut_rollout  # noqa: E402
from tests.algorithms.hand_batch import hand_batch  # noqa: E402
from tests.algorithms.tiny import make_model, make_policy  # noqa: E402

TASKS = ("doors-0001", "doors-0002")
CPU = torch.device("cpu")


def _config(algo: str, **learner: object) -> TrainConfig:
    base = TrainConfig(algo=algo)
    values = {"lr": 1e-3, "critic_lr": 1e-2, "mini_batch_size": 4, "micro_batch_size": 2,
              "kl_coef": 0.01, **learner}
    return replace(base, learner=values, generation={"temperature": 1.0},
                   env={"group_size": 2, "num_groups": 2}, run={"device": "cpu"})


def _rollout(tokenizer, *, num_rooms: int = 2, winner_every: int = 2,
             keep_bootstrap_prompts: bool = True):
    """Envs with even index play the solution, the others open a wrong door."""
    def answer(turn: int, position: int, prompt: str) -> str:
        for colour in ("red", "green", "blue"):
            if f"says: open {colour} door" in prompt:
                right = f"open {colour} door"
        if position % winner_every == 0:
            return f"<action> {right} </action>"
        return "<action> look </action>"

    engine = ScriptedEngine(tokenizer, answer)
    env = make_vector_env("AgentGym/Scripted-v0", 4, group_size=2, num_rooms=num_rooms,
                          hint=True, max_steps=3)
    settings = RolloutSettings(group_size=2, max_steps=3, temperature=1.0, max_new_tokens=12,
                               invalid_action_penalty=0.1,
                               prompt=PromptConfig(think=False, max_prompt_tokens=300),
                               keep_bootstrap_prompts=keep_bootstrap_prompts)
    return collect_and_close(env, engine, tokenizer, settings, TASKS, seed=3)


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("algo", ["gigpo", "grpo", "ppo"])
def test_one_step_changes_parameters(algo):
    policy = make_policy()
    config = _config(algo)
    learner = Learner(policy, config, CPU)
    batch = learner.score(_rollout(policy.tokenizer))
    assert batch.old_log_probs.shape == batch.response_ids.shape
    assert np.all(batch.old_log_probs[batch.response_mask == 0] == 0)
    assert np.all(batch.old_log_probs[batch.response_mask == 1] < 0)
    signals = learner.advantages(batch)
    assert np.abs(signals.advantages).max() > 0
    before = _snapshot(policy.model)
    stats = learner.update(batch, signals, seed=0)
    after = _snapshot(policy.model)
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    assert len(changed) == len(before), f"unchanged: {set(before) - set(changed)}"
    assert stats["grad_norm"] > 0 and stats["optimizer_steps"] == np.ceil(len(batch) / 4)
    # Later mini-batches see a policy that has moved from the one that sampled: the mean
    # approx KL to the old log-probs is positive (0 would mean old == current every time).
    assert stats["approx_kl"] > 0 and 0 <= stats["clip_fraction"] <= 1
    if algo == "ppo":
        assert learner.value_head is not None
        assert "value_loss" in stats and "explained_variance" in stats


def test_zero_advantages_give_zero_policy_gradient():
    policy = make_policy()
    learner = Learner(policy, _config("grpo", kl_coef=0.0, entropy_coef=0.0,
                                               weight_decay=0.0), CPU)
    batch = learner.score(_rollout(policy.tokenizer))
    zero = Advantages(advantages=np.zeros(len(batch)))
    before = _snapshot(policy.model)
    stats = learner.update(batch, zero, seed=0)
    assert stats["grad_norm"] == 0.0
    after = _snapshot(policy.model)
    assert all(torch.equal(before[n], after[n]) for n in before)


def test_first_pass_ratio_is_one():
    policy = make_policy()
    learner = Learner(policy, _config("grpo", kl_coef=0.0, mini_batch_size=64,
                                      micro_batch_size=64), CPU)
    batch = learner.score(_rollout(policy.tokenizer))
    stats = learner.update(batch, learner.advantages(batch), seed=0)
    assert stats["approx_kl"] < 1e-6 and stats["clip_fraction"] == 0.0


@pytest.mark.parametrize("critic", ["value_head", "separate"])
def test_ppo_critic_fits_constant_return(critic):
    policy = make_policy()
    config = replace(_config("ppo", lr=0.0, critic_lr=3e-2, kl_coef=0.0, value_clip=10.0,
                             mini_batch_size=64, micro_batch_size=64),
                     model={"critic": critic})
    backbone = make_model(len(policy.tokenizer), seed=5).model if critic == "separate" else None
    learner = Learner(policy, config, CPU, critic_backbone=backbone)
    # One room, every env wins at once: one step per trajectory, return exactly 1.
    batch = _rollout(policy.tokenizer, num_rooms=1, winner_every=1)
    assert np.all(batch.rewards == 1.0)
    for iteration in range(60):
        scored = learner.score(batch)
        signals = learner.advantages(scored)
        np.testing.assert_allclose(signals.returns, 1.0)
        learner.update(scored, signals, seed=iteration)
    values = learner.score(batch).values
    np.testing.assert_allclose(values, 1.0, atol=0.05)


def test_lora_reference_is_the_base_model():
    pytest.importorskip("peft")
    lora = ModelConfig(lora_rank=4, lora_alpha=8, lora_target_modules=("q_proj", "v_proj"))
    policy = make_policy(model_config=lora)
    config = dataclasses.replace(_config("grpo", lr=5e-2), model=lora)
    learner = Learner(policy, config, CPU)
    assert learner.reference is None  # no second copy with LoRA
    batch = learner.score(_rollout(policy.tokenizer))
    # LoRA's B starts at zero: policy == base model.
    np.testing.assert_allclose(batch.ref_log_probs, batch.old_log_probs, atol=1e-5)
    learner.update(batch, learner.advantages(batch), seed=0)
    again = learner.score(batch)
    np.testing.assert_allclose(again.ref_log_probs, batch.ref_log_probs, atol=1e-5)
    assert np.abs(again.old_log_probs - batch.old_log_probs).max() > 1e-4
    trainable = {n for n, p in policy.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)


@pytest.mark.parametrize(("steps", "mini", "micro", "epochs", "expected"),
                         [(10, 4, 2, 1, 5), (10, 4, 3, 2, 2 * (2 + 2 + 1)), (4, 8, 8, 1, 1)])
def test_micro_batch_count(steps, mini, micro, epochs, expected):
    policy = make_policy()
    config = _config("grpo", mini_batch_size=mini, micro_batch_size=micro, epochs=epochs,
                     kl_coef=0.0)
    learner = Learner(policy, config, CPU)
    assert learner.micro_batches_per_update(steps) == expected

    class Counter:
        count = 0

        def update(self, n):
            Counter.count += n

    batch = learner.score(_rollout(policy.tokenizer))
    learner.update(batch, learner.advantages(batch), seed=0, progress=Counter())
    assert Counter.count == learner.micro_batches_per_update(len(batch))


def test_single_pass_update_without_old_log_probs_is_identical():
    updated = []
    for with_old in (True, False):
        policy = make_policy(seed=3)
        learner = Learner(policy, _config("gigpo", mini_batch_size=64, micro_batch_size=4),
                          CPU)
        rollout = _rollout(policy.tokenizer)
        assert learner.single_pass(len(rollout))
        batch = learner.score(rollout, with_old_log_probs=with_old)
        assert (batch.old_log_probs is None) == (not with_old)
        learner.update(batch, learner.advantages(batch), seed=0)
        updated.append(_snapshot(policy.model))
    assert all(torch.allclose(updated[0][n], updated[1][n], atol=1e-7) for n in updated[0])


def test_skipping_old_log_probs_needs_a_single_pass():
    policy = make_policy()
    learner = Learner(policy, _config("grpo", mini_batch_size=2, micro_batch_size=2), CPU)
    with pytest.raises(ValueError, match="single-pass"):
        learner.score(_rollout(policy.tokenizer), with_old_log_probs=False)


def test_gradient_checkpointing_gives_the_same_update():
    updated = []
    for checkpointing in (False, True):
        policy = make_policy(seed=4, model_config=ModelConfig(
            gradient_checkpointing=checkpointing))
        learner = Learner(policy, _config("grpo", kl_coef=0.0), CPU)
        batch = learner.score(_rollout(policy.tokenizer))
        learner.update(batch, learner.advantages(batch), seed=0)
        updated.append(_snapshot(policy.model))
    assert all(torch.allclose(updated[0][n], updated[1][n], atol=1e-6) for n in updated[0])


def _ppo_learner(critic: str, **learner: object) -> Learner:
    """A PPO learner whose value head is random: zero-initialised heads make every V 0,
    which would hide whether a bootstrap happened."""
    policy = make_policy()
    config = replace(_config("ppo", gamma=0.9, gae_lambda=0.8, **learner),
                     model={"critic": critic})
    backbone = make_model(len(policy.tokenizer), seed=5).model if critic == "separate" else None
    learner_ = Learner(policy, config, CPU, critic_backbone=backbone)
    head = learner_.value_head if learner_.value_head is not None else learner_.critic.head
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        head.linear.weight.copy_(torch.randn(head.linear.weight.shape, generator=generator))
        head.linear.bias.fill_(0.5)
    return learner_


@pytest.mark.parametrize("critic", ["value_head", "separate"])
def test_ppo_bootstraps_cut_trajectories_from_the_next_state(critic):
    learner = _ppo_learner(critic)
    gamma = learner.learner.gamma
    batch = learner.score(cut_rollout(learner.policy.tokenizer, max_steps=2))
    returns = learner.advantages(batch).returns
    last = np.flatnonzero(batch.last_step)  # trajectories 0..3, see cut_rollout
    np.testing.assert_array_equal(batch.bootstrap_rows, last[[1, 2, 3]])
    v_next = batch.bootstrap_values.astype(np.float64)
    assert np.abs(gamma * v_next).min() > 0.05  # a missing bootstrap would show
    r = batch.rewards[last]
    np.testing.assert_allclose(returns[last], [r[0],                     # terminated
                                               r[1] + gamma * v_next[0],  # env's limit
                                               r[2] + gamma * v_next[1],  # env error
                                               r[3] + gamma * v_next[2]],  # rollout's limit
                               rtol=1e-6, atol=1e-6)
    # V(next) is the critic's value of the state the policy would have been in: the same
    # per-step value trajectory 3 gets for step 2 when the rollout runs one turn longer,
    # and trajectory 2 for its step 1 when its env does not crash.
    longer = learner.score(cut_rollout(learner.policy.tokenizer, max_steps=3))
    row = np.flatnonzero((longer.traj_ids == 3) & (longer.step_index == 2))[0]
    np.testing.assert_allclose(v_next[2], longer.values[row], atol=1e-5)
    healthy = learner.score(cut_rollout(learner.policy.tokenizer, max_steps=2, fail_at=None))
    row = np.flatnonzero((healthy.traj_ids == 2) & (healthy.step_index == 1))[0]
    np.testing.assert_allclose(v_next[1], healthy.values[row], atol=1e-5)


def test_ppo_without_bootstrap_treats_cuts_as_termination():
    learner = _ppo_learner("value_head", bootstrap_truncated=False)
    batch = learner.score(cut_rollout(learner.policy.tokenizer))
    assert batch.bootstrap_values is None
    returns = learner.advantages(batch).returns
    last = np.flatnonzero(batch.last_step)
    np.testing.assert_allclose(returns[last], batch.rewards[last], atol=1e-6)


def test_ppo_needs_the_bootstrap_prompts():
    learner = _ppo_learner("value_head")
    batch = learner.score(cut_rollout(learner.policy.tokenizer, keep_bootstrap_prompts=False))
    with pytest.raises(ValueError, match="keep_bootstrap_prompts"):
        learner.advantages(batch)


@pytest.mark.parametrize("algo", ["gigpo", "grpo"])
def test_group_estimators_ignore_bootstrap_prompts(algo):
    policy = make_policy()
    learner = Learner(policy, _config(algo, kl_coef=0.0), CPU)
    with_prompts = learner.score(learner.training_batch(cut_rollout(policy.tokenizer)))
    assert with_prompts.bootstrap_values is None
    assert with_prompts.bootstrap_rows is not None
    without = dataclasses.replace(with_prompts, bootstrap_rows=None, bootstrap_prompt_ids=None,
                                  bootstrap_prompt_mask=None)
    np.testing.assert_array_equal(learner.advantages(with_prompts).advantages,
                                  learner.advantages(without).advantages)


# ---------------------------------------------------------------- env errors


@pytest.mark.parametrize("algo", ["gigpo", "grpo"])
def test_group_statistics_leave_env_error_trajectories_out(algo):
    # Group 0: A wins (return 1), B fails (0), C crashed after one step (partial return 0).
    # Group 1: D and E finish; F crashed. A, B and C's first steps share an anchor.
    batch = hand_batch([(0, [0.0, 1.0], ["s0", "s1"], False),
                         (0, [0.0, 0.0, 0.0], ["s0", "x", "y"], False),
                         (0, [0.0], ["s0"], True),
                         (1, [0.5], ["u"], False),
                         (1, [0.0], ["v"], False),
                         (1, [0.5, 0.0], ["w", "z"], True)])
    learner = Learner(make_policy(), _config(algo, episode_stats="trajectories",
                                             penalty_in_returns=True), CPU)
    train = learner.training_batch(batch)
    np.testing.assert_array_equal(train.traj_ids, [0, 0, 1, 1, 1, 3, 4])
    got = learner.advantages(train).advantages
    # Statistics over the trajectories that finished: two per group, so +-1/sqrt(2).
    h = 1 / np.sqrt(2)
    episode = np.array([h, h, -h, -h, -h, h, -h])
    if algo == "grpo":
        np.testing.assert_allclose(got, episode, atol=1e-5)
    else:
        # Step group "s0" = A and B's first steps (returns 0.95 and 0), C's is not in it;
        # every other anchor is a singleton (step term 0).
        np.testing.assert_allclose(got, episode + [h, 0, -h, 0, 0, 0, 0], atol=1e-5)
    # The rule matters: with C and F in the statistics, every value would differ.
    with_crashes = dataclasses.replace(batch, env_error=np.zeros(len(batch), dtype=bool))
    kept = np.flatnonzero(~batch.env_error)
    old = learner.advantages(with_crashes).advantages[kept]
    assert np.all(np.abs(old - got) > 0.1)
    with pytest.raises(ValueError, match="training_batch"):
        learner.advantages(batch)


@pytest.mark.parametrize("algo", ["gigpo", "grpo"])
def test_a_crashed_trajectory_counts_as_if_it_never_started(algo):
    # cut_rollout: trajectory 2 (group 1, with 3) crashes on its step 1, or on its step 0.
    policy = make_policy()
    learner = Learner(policy, _config(algo), CPU)
    mid = learner.training_batch(cut_rollout(policy.tokenizer, fail_at=1))
    first = learner.training_batch(cut_rollout(policy.tokenizer, fail_at=0))
    np.testing.assert_array_equal(mid.traj_ids, [0, 0, 1, 3, 3])
    np.testing.assert_array_equal(first.traj_ids, mid.traj_ids)
    got = learner.advantages(mid).advantages
    np.testing.assert_array_equal(got, learner.advantages(first).advantages)
    # Group 0 is what it is without any crash; 3 is alone in group 1, so it gets 0.
    healthy = cut_rollout(policy.tokenizer, fail_at=None)
    expected = learner.advantages(healthy).advantages
    np.testing.assert_array_equal(got[:3], expected[:3])
    assert np.abs(got[:3]).max() > 0.1
    np.testing.assert_array_equal(got[3:], 0.0)


def test_ppo_trains_on_the_steps_before_an_env_error():
    learner = _ppo_learner("value_head")
    batch = cut_rollout(learner.policy.tokenizer, fail_at=1)
    assert learner.training_batch(batch) is batch  # nothing left out: the failed step
    assert (2, 1) not in set(zip(batch.traj_ids.tolist(), batch.step_index.tolist(),
                                 strict=True))


@pytest.mark.parametrize("algo", ["gigpo", "grpo", "ppo"])
@pytest.mark.parametrize("fail_at", [0, 1])
def test_an_iteration_with_env_errors_updates(algo, fail_at):
    policy = make_policy()
    learner = Learner(policy, _config(algo), CPU)
    rollout = cut_rollout(policy.tokenizer, fail_at=fail_at)
    batch = learner.score(learner.training_batch(rollout))
    signals = learner.advantages(batch)
    assert np.isfinite(signals.advantages).all()
    before = _snapshot(policy.model)
    stats = learner.update(batch, signals, seed=0)
    assert stats["grad_norm"] > 0
    assert stats["update_tokens"] == batch.response_mask.sum()
    after = _snapshot(policy.model)
    assert any(not torch.equal(before[n], after[n]) for n in before)


def test_score_progress_counts_the_bootstrap_passes():
    learner = _ppo_learner("value_head", micro_batch_size=2)
    batch = cut_rollout(learner.policy.tokenizer, max_steps=2)
    updates = []

    class Bar:
        def update(self, n):
            updates.append(n)

    learner.score(batch, progress=Bar())
    k = batch.bootstrap_prompt_ids.shape[0]
    assert k > 0
    assert sum(updates) == learner.score_passes(batch) == -(-len(batch) // 2) + -(-k // 2)


def test_scores_are_taken_at_the_configured_sampling_temperature():
    """Old, reference and current log-probs all use generation.temperature (one place)."""
    from algorithms.training.micro_batches import window_rows as _rows
    from algorithms.training.scoring import score_responses

    policy = make_policy()
    config = replace(_config("grpo", kl_coef=0.01, mini_batch_size=64, micro_batch_size=64),
                     generation={"temperature": 0.5})
    learner = Learner(policy, config, CPU)
    batch = learner.score(_rollout(policy.tokenizer))
    rows = _rows(batch, np.arange(len(batch)), CPU)
    with torch.no_grad():
        expected = score_responses(policy.model, rows["prompt_ids"], rows["prompt_mask"],
                                   rows["response_ids"], rows["response_mask"],
                                   temperature=0.5).log_probs.numpy()
    mask = batch.response_mask[:, :expected.shape[1]] == 1
    np.testing.assert_allclose(batch.old_log_probs[:, :expected.shape[1]][mask],
                               expected[mask], atol=1e-5)
    np.testing.assert_allclose(batch.ref_log_probs[:, :expected.shape[1]][mask],
                               expected[mask], atol=1e-5)
    # one optimizer step, taken on-policy: the ratio is 1 everywhere, approx_kl 0
    stats = learner.update(batch, learner.advantages(batch), seed=0)
    assert abs(stats["approx_kl"]) < 1e-6


# ---------------------------------------------------------------- recipe terms, by behaviour

def test_the_full_model_kl_reference_does_not_move_with_the_policy():
    """Without LoRA the reference is a frozen copy: after updates that change the policy,
    reference log-probs are the same to the bit (a live model would move with it)."""
    policy = make_policy()
    learner = Learner(policy, _config("grpo", lr=5e-2), CPU)
    batch = learner.score(_rollout(policy.tokenizer))
    np.testing.assert_allclose(batch.ref_log_probs, batch.old_log_probs, atol=1e-5)
    for seed in range(2):
        learner.update(batch, learner.advantages(batch), seed=seed)
    again = learner.score(batch)
    assert np.abs(again.old_log_probs - batch.old_log_probs).max() > 1e-3  # policy moved
    np.testing.assert_array_equal(again.ref_log_probs, batch.ref_log_probs)


def _mean_kl(batch, kind: str) -> float:
    from algorithms.objectives import losses

    mask = torch.as_tensor(batch.response_mask, dtype=torch.float32)
    tokens = losses.kl_penalty(torch.as_tensor(batch.old_log_probs),
                               torch.as_tensor(batch.ref_log_probs), kind=kind,
                               response_mask=mask)
    return float(losses.masked_mean(tokens, mask))


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_the_kl_penalty_pulls_the_policy_back_to_the_reference(kind):
    """Zero advantages and no entropy bonus leave the KL term alone: one small step must
    lower the KL estimate to the reference (k1: lower the sampled tokens' log-probs,
    its gradient direction). A flipped sign pushes the policy away."""
    policy = make_policy()
    learner = Learner(policy, _config("grpo", lr=1e-3, kl_coef=1.0, kl_estimator=kind,
                                      entropy_coef=0.0, mini_batch_size=64,
                                      micro_batch_size=64), CPU)
    with torch.no_grad():  # move the policy away from its frozen reference
        generator = torch.Generator().manual_seed(0)
        for parameter in policy.model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    batch = learner.score(_rollout(policy.tokenizer))
    kl_before = _mean_kl(batch, kind)
    assert kl_before > 1e-3
    learner.update(batch, Advantages(advantages=np.zeros(len(batch))), seed=0)
    after = learner.score(batch)
    mask = batch.response_mask == 1
    if kind == "k1":
        assert after.old_log_probs[mask].mean() < batch.old_log_probs[mask].mean()
    else:
        assert _mean_kl(after, kind) < kl_before


def test_gigpo_uses_the_configured_gamma():
    """One group of four trajectories whose steps all share one anchor state: the step
    group has every step, their discounted returns depend on gamma beyond an affine map,
    so the normalized step advantages change with gamma."""
    from algorithms.objectives.advantages import gigpo_terms

    policy = make_policy()
    batch = _rollout(policy.tokenizer)
    n = len(batch)
    rewards = np.zeros(n)
    last = np.flatnonzero(batch.last_step)
    rewards[last] = np.arange(1, len(last) + 1)  # every trajectory ends differently
    rewards[np.flatnonzero(~batch.last_step)[0]] = -0.5
    batch = dataclasses.replace(batch, rewards=rewards, group_ids=np.zeros(n, dtype=np.int64),
                                anchors=tuple("the same state" for _ in range(n)),
                                anchor_ids=np.zeros(n, dtype=np.int64))
    assert len(last) >= 3 and len(set(batch.step_index.tolist())) >= 2
    results = {}
    for gamma in (0.5, 0.9):
        learner = Learner(policy, _config("gigpo", gamma=gamma, kl_coef=0.0,
                                          penalty_in_returns=True,
                                          episode_stats="trajectories"), CPU)
        results[gamma] = learner.advantages(batch).advantages
        expected = gigpo_terms(rewards, batch.traj_ids, batch.group_ids, batch.anchors,
                               gamma=gamma).combined(1.0)
        np.testing.assert_allclose(results[gamma], expected)
    assert np.abs(results[0.5] - results[0.9]).max() > 1e-3


def _stale_update(correction: str, shift: float, **learner: object):
    """One GRPO update at ``run.max_staleness`` 1 of a batch whose recorded behaviour
    log-probs are the learner's own plus ``shift`` nats; its stats, batch, advantages and
    the updated weights."""
    policy = make_policy(seed=5)
    config = replace(_config("grpo", **{"kl_coef": 0.0, "entropy_coef": 0.0,
                                        "weight_decay": 0.0, "mini_batch_size": 64,
                                        "micro_batch_size": 64,
                                        "staleness_correction": correction, **learner}),
                     run={"max_staleness": 1})
    learner = Learner(policy, config.validate(), CPU)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # away from the reference (a copy made by the Learner)
        for parameter in policy.model.parameters():
            parameter.add_(0.02 * torch.randn(parameter.shape, generator=generator))
    batch = learner.score(_rollout(policy.tokenizer))
    behaviour = np.where(batch.response_mask == 1, batch.old_log_probs + shift, np.nan)
    batch = dataclasses.replace(batch, behaviour_log_probs=behaviour.astype(np.float32))
    signals = learner.advantages(batch)
    return learner.update(batch, signals, seed=0), batch, signals, _snapshot(policy.model)


def test_behaviour_clip_takes_ppo_ratio_against_the_engine_log_probs():
    # the engine gave each sampled token 1 nat more than the learner's policy before the
    # update: the ratio against it is exp(-1) = 0.37 on every token
    stats, batch, signals, _ = _stale_update("behaviour-clip", 1.0)
    mask = batch.response_mask == 1
    advantages = np.broadcast_to(signals.advantages[:, None], mask.shape)[mask]
    assert (advantages > 0).any() and (advantages < 0).any()
    ratio = np.exp(-1.0)
    # PPO's clip around the behaviour policy (eps 0.2): A > 0 keeps -A r; A < 0 takes the
    # clipped -A (1 - 0.2), which has no gradient
    per_token = np.where(advantages > 0, -advantages * ratio, -advantages * 0.8)
    assert stats["policy_loss"] == pytest.approx(per_token.mean(), rel=1e-4)
    assert stats["clip_fraction"] == pytest.approx((advantages < 0).mean(), abs=1e-6)
    # the decoupled objective on the same batch: ratio 1 around the learner's policy,
    # each token weighted by pi_old / pi_behaviour = exp(-1)
    decoupled, *_ = _stale_update("decoupled", 1.0)
    assert decoupled["policy_loss"] == pytest.approx((-advantages * ratio).mean(), rel=1e-4)
    assert decoupled["clip_fraction"] == 0.0
    # both log the same gap between the learner and the engine
    assert stats["behaviour_gap"] == pytest.approx(1.0, rel=1e-5)
    assert decoupled["behaviour_gap"] == pytest.approx(1.0, rel=1e-5)


def test_behaviour_clip_is_the_decoupled_update_when_nothing_is_stale():
    (decoupled, _, _, a), (clipped, _, _, b) = (
        _stale_update(correction, 0.0) for correction in ("decoupled", "behaviour-clip"))
    assert decoupled["policy_loss"] == pytest.approx(clipped["policy_loss"], rel=1e-6)
    assert decoupled["grad_norm"] == pytest.approx(clipped["grad_norm"], rel=1e-5)
    assert all(torch.allclose(a[n], b[n], atol=1e-7) for n in a)


def test_behaviour_clip_weights_the_kl_term_only_when_asked():
    # exp(-1) on every token reaches the KL term with behaviour_weight_kl, not without;
    # the clip term is the same either way
    plain, *_ = _stale_update("behaviour-clip", 1.0, kl_coef=0.1)
    weighted, *_ = _stale_update("behaviour-clip", 1.0, kl_coef=0.1, behaviour_weight_kl=True)
    assert plain["kl_ref"] > 0
    assert weighted["kl_ref"] == pytest.approx(plain["kl_ref"] * np.exp(-1.0), rel=1e-4)
    assert weighted["policy_loss"] == pytest.approx(plain["policy_loss"], rel=1e-6)
