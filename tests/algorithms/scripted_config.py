"""A training config on the scripted door env, sized for the tiny test model."""

from __future__ import annotations

import json

from algorithms.config import TrainConfig, replace


def scripted_config(algo: str = "gigpo", *, iterations: int = 2, num_rooms: int = 2,
                    num_groups: int = 2, group_size: int = 2, lr: float = 1e-3,
                    **run: object) -> TrainConfig:
    """Scripted env with hints, answers of 3 words and no tags, a tiny budget."""
    base = TrainConfig(algo=algo, preset="scripted-test")
    return replace(
        base,
        generation={"max_new_tokens": 3, "batch_size": 64, "temperature": 1.0},
        prompt={"think": False, "action_tag": "", "max_prompt_tokens": 300,
                "history_window": 1, "show_admissible_actions": False},
        env={"env_id": "AgentGym/Scripted-v0", "num_groups": num_groups,
             "group_size": group_size, "max_steps": num_rooms + 1,
             "env_kwargs": json.dumps({"num_rooms": num_rooms, "hint": True,
                                       "num_tasks": 64}),
             "eval_episodes": 4},
        learner={"lr": lr, "critic_lr": 1e-2, "mini_batch_size": 16, "micro_batch_size": 16,
                 "kl_coef": 0.01},
        run={"iterations": iterations, "save_every": 1, "keep_checkpoints": 2,
             "tensorboard": False, "progress": False, "device": "cpu", **run},
    )
