"""GiGPO through verl's own interfaces, on a CPU: agent loop -> DataProto -> compute_advantage.

Needs verl (``pip install verl==0.9.1 cachetools``; verl 0.9.1 imports cachetools
without declaring it). Plays ``--tasks`` x ``--group-size`` episodes with
:class:`algorithms.integrations.verl.AgentGymAgentLoop` (constructed by verl's
``AgentLoopBase``, generating with :class:`~algorithms.integrations.verl.HFTokenServer`,
SmolLM2-135M on CPU, in place of verl's vLLM/SGLang server), pads them into a verl
``DataProto``, and computes GiGPO advantages with verl's ``compute_advantage`` after
:func:`~algorithms.integrations.verl.install`. On a GPU, verl's ``RayPPOTrainer`` runs the
same loop and estimator: ``algorithm.adv_estimator=gigpo`` and
``actor_rollout_ref.rollout.agent.default_agent_loop=agentgym`` with a dataset of
:func:`~algorithms.integrations.verl.episode_row` rows, after importing this module's
integration and calling ``install()`` in the driver.

    python examples/verl_gigpo_cpu.py --env-id AgentGym/Scripted-v0 --tasks 2 --group-size 2
"""

from __future__ import annotations

import argparse
import asyncio
import json

import numpy as np
import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.protocol import DataProto
from verl.trainer.ppo import ray_trainer
from verl.utils.dataset.rl_dataset import RLHFDataset

from algorithms.integrations import verl as integration
from algorithms.integrations.multiturn import turn_spans
from algorithms.presets import PRESETS
from algorithms.training.policy import load_causal_lm

DEMO = PRESETS["cpu-demo"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default=DEMO.env.env_id)
    parser.add_argument("--env-kwargs", type=json.loads, default=None,
                        help="gym.make kwargs, JSON (default: the cpu-demo preset's for its env)")
    parser.add_argument("--tasks", type=int, default=DEMO.env.num_groups)
    parser.add_argument("--group-size", type=int, default=DEMO.env.group_size)
    parser.add_argument("--max-turns", type=int, default=DEMO.env.max_steps)
    parser.add_argument("--max-new-tokens", type=int, default=DEMO.generation.max_new_tokens)
    parser.add_argument("--seed", type=int, default=DEMO.run.seed)
    args = parser.parse_args(argv)
    if args.env_kwargs is None:
        args.env_kwargs = DEMO.env.kwargs() if args.env_id == DEMO.env.env_id else {}
    return args


async def play(args: argparse.Namespace, model, tokenizer, row: dict, seed: int):
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "prompt_length": DEMO.prompt.max_prompt_tokens, "response_length": 4096,
        "multi_turn": {"max_assistant_turns": args.max_turns}}}, "data": {}})
    loop = integration.AgentGymAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=integration.HFTokenServer(model, tokenizer,
                                                 max_new_tokens=args.max_new_tokens, seed=seed),
        tokenizer=tokenizer, processor=None, dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data))
    return await loop.run({"temperature": DEMO.generation.temperature}, **row)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(DEMO.run.torch_threads or torch.get_num_threads())
    model, tokenizer, *_ = load_causal_lm(DEMO.model, torch.device("cpu"))
    model.eval()
    outputs, uids = [], []
    for task in range(args.tasks):
        row = integration.episode_row(args.env_id, seed=args.seed + task, env_kwargs=args.env_kwargs,
                                      prompt={"think": DEMO.prompt.think})
        for member in range(args.group_size):
            outputs.append(asyncio.run(play(args, model, tokenizer, row, seed=1000 * task + member)))
            uids.append(f"task-{task}")
    length = max(len(o.response_mask) for o in outputs)
    mask = torch.zeros(len(outputs), length, dtype=torch.int64)
    for i, output in enumerate(outputs):
        mask[i, : len(output.response_mask)] = torch.as_tensor(output.response_mask)

    def column(key: str) -> np.ndarray:
        values = np.empty(len(outputs), dtype=object)
        values[:] = [o.extra_fields[key] for o in outputs]
        return values

    data = DataProto.from_dict(
        tensors={"token_level_rewards": torch.zeros(len(outputs), length), "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object),
                     integration.TURN_REWARDS_KEY: column(integration.TURN_REWARDS_KEY),
                     integration.TURN_ANCHORS_KEY: column(integration.TURN_ANCHORS_KEY)})
    integration.install()
    data = ray_trainer.compute_advantage(data, adv_estimator="gigpo",
                                         config=OmegaConf.create({"norm_adv_by_std_in_grpo": True}))
    for i, output in enumerate(outputs):
        spans = turn_spans(mask[i].numpy())
        per_turn = [round(float(data.batch["advantages"][i, start]), 3) for start, _ in spans]
        print(json.dumps({"group": uids[i], "task_id": output.extra_fields["agentgym_task_id"],
                          "actions": output.extra_fields["agentgym_actions"],
                          "turn_rewards": output.extra_fields[integration.TURN_REWARDS_KEY],
                          "turn_advantages": per_turn}))


if __name__ == "__main__":
    main()
