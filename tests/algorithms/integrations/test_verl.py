"""GiGPO and the AgentGym agent loop inside the real verl package, on CPU.

Slow: needs verl (``pip install verl==0.9.1``, plus ``cachetools``, which verl 0.9.1
imports without declaring), which CI does not install (it pins transformers 5.10 and
pulls Ray's and wandb's stacks).

How far this goes on CPU: verl's own ``DataProto``, estimator registry and
``compute_advantage``; our agent loop constructed by verl's ``AgentLoopBase`` (its
continuous-token builder on the real SmolLM2 tokenizer) and run for whole episodes, with
generation by :class:`HFTokenServer` (SmolLM2 on CPU) in place of verl's vLLM / SGLang
server. Not run: verl's ``AgentLoopManager`` / ``AgentLoopWorker`` Ray actors and the
``RayPPOTrainer`` loop, which start GPU inference servers and FSDP workers.
"""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("verl.experimental.agent_loop.agent_loop",
                    reason="verl is not installed (pip install verl==0.9.1 cachetools)")
torch = pytest.importorskip("torch")

from omegaconf import OmegaConf  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo import ray_trainer as verl_ray_trainer  # noqa: E402
from verl.trainer.ppo.core_algos import AdvantageEstimator  # noqa: E402

import agentgym  # noqa: E402,F401
from agentgym.openenv.codec import anchor_key  # noqa: E402
from algorithms.config import LearnerConfig  # noqa: E402
from algorithms.integrations import verl as integration  # noqa: E402
from algorithms.integrations.multiturn import turn_spans  # noqa: E402
from algorithms.objectives.advantages import gigpo_advantages  # noqa: E402

pytestmark = pytest.mark.slow


def _batch(seed: int = 0, rows: int = 8, length: int = 24):
    """A verl DataProto of per-trajectory rows: spans of model tokens, turn rewards, anchors."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((rows, length), dtype=np.int64)
    rewards, anchors = [], []
    for row in range(rows):
        turns, position = int(rng.integers(1, 4)), 0
        for _ in range(turns):
            width = int(rng.integers(1, 4))
            mask[row, position:position + width] = 1
            position += width + 2
        rewards.append([float(r) for r in rng.integers(-1, 3, size=turns)])
        anchors.append([f"state-{int(a)}" for a in rng.integers(0, 2, size=turns)])
    uids = [f"uid-{row // 4}" for row in range(rows)]
    token_rewards = torch.zeros(rows, length)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": token_rewards, "response_mask": torch.as_tensor(mask)},
        non_tensors={
            "uid": np.array(uids, dtype=object),
            integration.TURN_REWARDS_KEY: np.array(rewards + [None], dtype=object)[:-1],
            integration.TURN_ANCHORS_KEY: np.array(anchors + [None], dtype=object)[:-1],
        },
    )
    return data, mask, uids, rewards, anchors


def _expected(mask, uids, rewards, anchors, **kwargs) -> np.ndarray:
    kwargs.setdefault("episode_stats", LearnerConfig.episode_stats)  # the integration's default
    n_turns = [len(r) for r in rewards]
    flat = gigpo_advantages(np.concatenate(rewards), np.repeat(np.arange(len(rewards)), n_turns),
                            np.repeat(uids, n_turns), sum(anchors, []), **kwargs)
    out, position = np.zeros(mask.shape), 0
    for row, turns in enumerate(n_turns):
        for turn, (start, end) in enumerate(turn_spans(mask[row])):
            out[row, start:end] = flat[position + turn]
        position += turns
    return out


def test_gigpo_is_in_verls_registry():
    assert core_algos.get_adv_estimator_fn("gigpo") is integration.compute_gigpo_advantage


def test_estimator_on_a_verl_batch_equals_our_function():
    data, mask, uids, rewards, anchors = _batch()
    config = OmegaConf.create({"adv_estimator": "gigpo", "norm_adv_by_std_in_grpo": True,
                               "gigpo": {"gamma": 0.9, "step_weight": 0.5}})
    out = integration.compute_advantage(data, "gigpo", config=config)
    expected = _expected(mask, uids, rewards, anchors, gamma=0.9, step_weight=0.5)
    np.testing.assert_allclose(out.batch["advantages"].numpy(), expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(out.batch["advantages"], out.batch["returns"])
    # verl's registry entry called the way verl calls estimators, plus the batch:
    fn = core_algos.get_adv_estimator_fn("gigpo")
    advantages, _ = fn(token_level_rewards=data.batch["token_level_rewards"],
                       response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"],
                       config=OmegaConf.create({"norm_adv_by_std_in_grpo": False}),
                       non_tensor_batch=data.non_tensor_batch)
    np.testing.assert_allclose(advantages.numpy(), _expected(mask, uids, rewards, anchors,
                                                             normalize="mean"), atol=1e-6)


def test_verls_unpatched_dispatcher_gets_a_clear_error_and_install_fixes_it():
    data, mask, uids, rewards, anchors = _batch(1)
    original = verl_ray_trainer.compute_advantage
    try:
        if original is integration.compute_advantage:  # installed by an earlier test
            original = integration._VERL_COMPUTE_ADVANTAGE
        with pytest.raises(ValueError, match="install"):
            original(data, "gigpo", config=OmegaConf.create({}))
        integration.install()
        out = verl_ray_trainer.compute_advantage(data, "gigpo", config=OmegaConf.create({}))
        np.testing.assert_allclose(out.batch["advantages"].numpy(),
                                   _expected(mask, uids, rewards, anchors), atol=1e-6)
    finally:
        verl_ray_trainer.compute_advantage = original


def test_other_estimators_pass_through_and_gigpo_without_steps_matches_verls_grpo():
    # One turn per row, all anchors distinct: GiGPO reduces to GRPO, so it must equal
    # verl's own GRPO on the same rewards (placed on each row's last token).
    rows, length = 8, 5
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 4, size=rows).astype(float)
    mask = torch.ones(rows, length, dtype=torch.int64)
    token_rewards = torch.zeros(rows, length)
    token_rewards[:, -1] = torch.as_tensor(scores, dtype=torch.float32)
    uids = np.array([f"u{row // 4}" for row in range(rows)], dtype=object)

    def batch():
        return DataProto.from_dict(
            tensors={"token_level_rewards": token_rewards.clone(), "response_mask": mask.clone()},
            non_tensors={"uid": uids.copy(),
                         integration.TURN_REWARDS_KEY: np.array([[s] for s in scores] + [None], dtype=object)[:-1],
                         integration.TURN_ANCHORS_KEY: np.array([[f"a{r}"] for r in range(rows)] + [None], dtype=object)[:-1]})

    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True})
    verl_grpo = integration._VERL_COMPUTE_ADVANTAGE(batch(), AdvantageEstimator.GRPO, config=config)
    ours_grpo_path = integration.compute_advantage(batch(), AdvantageEstimator.GRPO, config=config)
    ours_gigpo = integration.compute_advantage(batch(), "gigpo", config=config)
    assert torch.equal(ours_grpo_path.batch["advantages"], verl_grpo.batch["advantages"])
    np.testing.assert_allclose(ours_gigpo.batch["advantages"].numpy(),
                               verl_grpo.batch["advantages"].numpy(), atol=1e-5)


def test_bad_config_and_missing_columns_are_clear_errors():
    data, *_ = _batch(2)
    with pytest.raises(ValueError, match="unknown algorithm.gigpo keys"):
        integration.compute_advantage(data, "gigpo", config=OmegaConf.create({"gigpo": {"gama": 1}}))
    data.non_tensor_batch.pop(integration.TURN_ANCHORS_KEY)
    with pytest.raises(KeyError, match="agentgym_turn_anchors"):
        integration.compute_advantage(data, "gigpo", config=OmegaConf.create({}))


# ----------------------------------------------------------------------------- agent loop
@pytest.fixture(scope="module")
def smollm():
    from algorithms.config import ModelConfig
    from algorithms.training.policy import PolicyLoadError, load_causal_lm

    try:
        model, tokenizer, *_ = load_causal_lm(ModelConfig(), torch.device("cpu"))
    except PolicyLoadError as error:
        pytest.skip(f"default model unavailable: {error}")
    model.eval()
    return model, tokenizer


def _play(smollm, row: dict, *, max_turns: int, response_length: int, seed: int):
    """Build the loop inside the event loop that runs it (verl's AgentLoopBase binds to it)."""

    async def play():
        loop = _agent_loop(smollm, max_turns=max_turns, response_length=response_length, seed=seed)
        return await loop.run({"temperature": 1.0}, **row)

    return asyncio.run(play())


def _agent_loop(smollm, *, max_turns: int, response_length: int, seed: int):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    model, tokenizer = smollm
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "prompt_length": 2048, "response_length": response_length,
        "multi_turn": {"max_assistant_turns": max_turns}}}, "data": {}})
    return integration.AgentGymAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=integration.HFTokenServer(model, tokenizer, max_new_tokens=16, seed=seed),
        tokenizer=tokenizer, processor=None, dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
    )


def test_agent_loop_plays_whole_episodes_and_feeds_the_estimator(smollm):
    env_kwargs = {"num_rooms": 2, "max_steps": 6}
    prompt = {"think": False}
    outputs, uids = [], []
    for seed in (0, 1):
        row = integration.episode_row("AgentGym/Scripted-v0", seed=seed, env_kwargs=env_kwargs,
                                      prompt=prompt)
        for rollout in range(2):
            outputs.append(_play(smollm, row, max_turns=2, response_length=4096,
                                 seed=10 * seed + rollout))
            uids.append(f"uid-{seed}")
    tokenizer = smollm[1]
    for output, uid in zip(outputs, uids, strict=True):
        extra = output.extra_fields
        turns = len(extra[integration.TURN_REWARDS_KEY])
        assert 1 <= turns <= 2
        assert len(turn_spans(np.array(output.response_mask))) == turns  # one span per turn
        assert len(output.response_ids) == len(output.response_mask) == len(output.response_logprobs)
        # the rewards and anchors are the env's: replay the actions in gym.make
        env = gym.make("AgentGym/Scripted-v0", **env_kwargs)
        _, info = env.reset(seed=int(uid[-1]))
        replayed_rewards, replayed_anchors = [], []
        for action, reward in zip(extra["agentgym_actions"], extra[integration.TURN_REWARDS_KEY],
                                  strict=True):
            replayed_anchors.append(anchor_key(info["anchor"]))
            _, env_reward, _, _, info = env.step(action)
            replayed_rewards.append(env_reward - (0.0 if reward == env_reward else 0.1))
        assert replayed_rewards == pytest.approx(extra[integration.TURN_REWARDS_KEY])
        assert replayed_anchors == extra[integration.TURN_ANCHORS_KEY]
        assert output.reward_score == pytest.approx(sum(extra[integration.TURN_REWARDS_KEY]))
        text = tokenizer.decode(output.prompt_ids)
        assert "Cross all 2 rooms" in text
    # pad into a verl batch and run the estimator on what the loop produced
    length = max(len(o.response_mask) for o in outputs)
    mask = torch.zeros(len(outputs), length, dtype=torch.int64)
    for row, output in enumerate(outputs):
        mask[row, :len(output.response_mask)] = torch.as_tensor(output.response_mask)
    rewards = [o.extra_fields[integration.TURN_REWARDS_KEY] for o in outputs]
    anchors = [o.extra_fields[integration.TURN_ANCHORS_KEY] for o in outputs]
    data = DataProto.from_dict(
        tensors={"token_level_rewards": torch.zeros(len(outputs), length), "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object),
                     integration.TURN_REWARDS_KEY: np.array(rewards + [None], dtype=object)[:-1],
                     integration.TURN_ANCHORS_KEY: np.array(anchors + [None], dtype=object)[:-1]})
    out = integration.compute_advantage(data, "gigpo", config=OmegaConf.create({}))
    np.testing.assert_allclose(out.batch["advantages"].numpy(),
                               _expected(mask.numpy(), uids, rewards, anchors), atol=1e-6)


def test_agent_loop_stops_at_response_length(smollm):
    row = integration.episode_row("AgentGym/Scripted-v0", seed=0, env_kwargs={"max_steps": 20},
                                  prompt={"think": False})
    output = _play(smollm, row, max_turns=20, response_length=64, seed=0)
    assert len(output.response_mask) <= 64
    assert len(turn_spans(np.array(output.response_mask))) <= len(
        output.extra_fields[integration.TURN_REWARDS_KEY])


def test_agent_loop_needs_the_episode_spec(smollm):
    with pytest.raises(KeyError, match="extra_info"):
        _play(smollm, {"raw_prompt": [], "extra_info": {}}, max_turns=2, response_length=128, seed=0)


def test_episode_rows_survive_a_parquet_round_trip(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    rows = [integration.episode_row("AgentGym/ALFWorld-v0", seed=s, env_kwargs={"split": "train"})
            for s in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    back = pq.read_table(tmp_path / "train.parquet").to_pylist()
    specs = [integration.EpisodeSpec.from_row(row) for row in back]
    assert [(s.env_id, s.seed, s.env_kwargs) for s in specs] == [
        ("AgentGym/ALFWorld-v0", seed, {"split": "train"}) for seed in range(3)]
    assert back[0]["prompt"][0]["role"] == "user" and back[0]["agent_name"] == "agentgym"
