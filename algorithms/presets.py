"""The named presets: each a :class:`~algorithms.config.TrainConfig` with some fields changed.

``train.py --preset NAME`` starts from :data:`PRESETS` ``[NAME]`` (its one-line summary in
:data:`PRESET_HELP`); every field a preset does not name keeps the default written in
:mod:`algorithms.config`, and nowhere else. ``cpu-demo`` runs in minutes on two CPU cores
(KeyDoor, SmolLM2-135M, LoRA, the earlier loss :data:`CPU_DEMO_LOSS`); ``cpu-alfworld``,
``cpu-webshop`` and ``cpu-searchqa`` are an SFT stage then GiGPO on CPU; each GPU preset
reproduces the training script its docstring cites (verl-agent's GiGPO, HGPO and GraphGPO
scripts, Search-R1's) and lists where it differs.

This module imports :mod:`algorithms.config`, never the reverse.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from algorithms.config import TrainConfig, replace

CPU_DEMO_LOSS: dict[str, Any] = {
    "penalty_in_returns": True, "dual_clip": None, "micro_batch_weighting": "tokens",
    "shuffle": True, "episode_stats": "trajectories", "entropy_coef": 0.0,
    "weight_decay": 0.0}
"""The cpu-demo's loss: the learner's settings before it followed verl-agent's recipe (the
penalty in the returns, statistics over trajectories, no dual clip, no entropy bonus, no
weight decay, token-weighted micro-batches, shuffled mini-batches)."""


def _cpu_demo() -> TrainConfig:
    """SmolLM2-135M on the 2 x 2 KeyDoor house, LoRA rank 16 on every linear layer.

    LoRA keeps a checkpoint at 59 MB (adapters and their AdamW moments) instead of the
    full fine-tune's 1.6 GB, and the KL term to the base model (adapters off, so no second
    copy) holds the policy's entropy up: measured over seeds 0-2 (docs/configuration.md),
    the full fine-tune (lr 2e-5, no KL) collapsed to 0.08 nats per token and ended at
    success 0 on two seeds. ``--model.lora-rank 0 --learner.lr 2e-5 --learner.kl-coef 0``
    is that full fine-tune.

    Gradient checkpointing keeps the update's activations to one layer's at a time: the
    same update (recomputation is exact), ~2 GB less memory per micro-batch of 8 rows, one
    more forward pass of compute.

    The loss is this project's earlier recipe (:data:`CPU_DEMO_LOSS`), not verl-agent's
    (the GPU presets' and :class:`~algorithms.config.LearnerConfig`'s default): measured on seed 0, verl-agent's
    recipe collapsed the policy's entropy to 0.01 nats and success to 0, 0, 0.125, 0, 0.25,
    0 over iterations 2-6 (mean 0.075), against 0.125, 0.625, 0.25, 1, 0.875 (mean 0.575)
    with this one (docs/configuration.md).
    """
    base = TrainConfig(preset="cpu-demo")
    return replace(
        base,
        model={"lora_rank": 16, "lora_alpha": 32, "gradient_checkpointing": True},
        generation={"max_new_tokens": 8, "batch_size": 16},
        prompt={"max_prompt_tokens": 320, "think": False, "history_window": 1,
                "response_prefix": "<action>", "action_list": "lines"},
        env={
            "env_id": "AgentGym/KeyDoor-v0",
            "num_groups": 2,
            "group_size": 4,
            "max_steps": 6,
            "anchor": "state",
            "env_kwargs": json.dumps({"width": 2, "height": 2, "key": False}),
            "eval_episodes": 8,
        },
        learner={"lr": 5e-4, "kl_coef": 0.2, "mini_batch_size": 64, "micro_batch_size": 8,
                 **CPU_DEMO_LOSS},
        run={"iterations": 6, "save_every": 3, "keep_checkpoints": 1, "device": "cpu",
             "torch_threads": 1},
    )


def _cpu_demo_tools() -> TrainConfig:
    """The cpu-demo's house through tool calls: SmolLM2-135M calls KeyDoor's tools
    (``go(direction)``, ``open_door()``; :mod:`agentgym.tools`) in AgentGym's ChatML tool
    template (SmolLM2's own template shows no tools), an SFT stage on the env's expert
    with its actions written as calls first (the raw model has never seen the format),
    then GiGPO, in one run (docs/tool-calls.md).

    As the cpu-demo: the 2 x 2 house without key, 2 groups x 4, 6 steps, LoRA rank 16,
    lr 5e-4, KL 0.2, its loss, 6 iterations. Differs: ``prompt.action_format tool-call``
    (the window layout: the last step's answer and tool message kept), no response
    prefix, prompts of at most 640 tokens (the tools' schemas are a system turn of 230 of
    SmolLM2's tokens; measured on 20 expert episodes, prompts of 358 tokens on average, 399
    at most) and answers of at most 32 (an expert call is at most 28, with
    ``</tool_call>``); micro-batches of 4 rows (SFT and update); an SFT stage of 32 expert
    episodes, 8 optimizer steps of 8 samples at lr 5e-4.
    """
    base = dataclasses.replace(_cpu_demo(), preset="cpu-demo-tools")
    return replace(
        base,
        generation={"max_new_tokens": 32, "batch_size": 16},
        prompt={"action_format": "tool-call", "response_prefix": "", "max_prompt_tokens": 640,
                "history_window": 1},
        sft={"warm_start": True, "episodes": 32, "max_steps": 8, "batch_size": 8,
             "micro_batch_size": 4, "lr": 5e-4},
        learner={"micro_batch_size": 4},
    )


CPU_ALFWORLD_TASK_TYPES: tuple[str, ...] = ("pick_and_place_simple", "look_at_obj_in_light")
"""The cpu-alfworld preset's ALFWorld task types: the two with the shortest expert
walkthroughs (3-6 steps on generated games, against 5-10 for the other four)."""


def _cpu_alfworld() -> TrainConfig:
    """SmolLM2-135M on ALFWorld on two CPU cores: an SFT warm start on the env's own
    expert, then GiGPO, in one run (``--sft.warm-start``, :mod:`algorithms.sft.stage`).

    Games: generated ones (no download) unless ``$ALFWORLD_DATA`` points at official data;
    training on the ``train`` split, evaluation on ``valid_seen`` (other games in the
    training scenes, as ``alfworld-1.5b``). The prompt length sets the time: the update of
    docs/memory.md's ALFWorld iteration took ~15 ms per token on a quiet machine.

    - Task types :data:`CPU_ALFWORLD_TASK_TYPES` and 8 steps: the shortest tasks, with
      room for a few wrong steps; the raw 135M model answered ALFWorld with 100% format
      errors, and longer tasks leave nothing to learn from in a few iterations.
    - Prompt: the cpu-demo's (``<action>`` opened for the model, no thinking, the
      admissible actions one per line), one step of history (what was just done: the
      model otherwise cannot tell whether it holds the object), at most 448 tokens
      (generated expert steps: mean 343, 90th percentile 436; longer ones lose the
      history first). 16 response tokens (the longest expert action is 15 with
      ``</action>``).
    - SFT stage: 60 expert episodes (the 60 generated training games of these types,
      265 steps), 12 optimizer steps of 8 samples at lr 5e-4 (LoRA), a third of an
      epoch; the cpu-demo's KeyDoor SFT took format errors from 0.59 to 0 in 8 such
      steps, and 6 of these took ALFWorld's to 0 (docs/cpu-presets.md).
    - RL: 2 groups x 4 (the fewest trajectories that give GiGPO groups to compare), the
      state anchor, the cpu-demo's loss, lr 5e-4 and KL 0.2; 2 iterations
      (docs/memory.md's ALFWorld iteration, 2 x 4 with 6 steps and 320-token prompts,
      took ~7 min on a quiet machine, most of it the update).
    - Micro-batches of 4 rows (SFT and update): the same updates as 8 (both weight by
      tokens), but 8 rows of up to 448 tokens took the SFT stage to 4.95 GB peak RSS.
    - Held-out evaluation of the warm start (``eval_before_train``) and after the last
      iteration, on the whole 12-game generated ``valid_seen`` split (evaluation takes
      the first ids in sorted order, so a split larger than ``eval_episodes`` would be
      evaluated on one task type only).
    """
    base = dataclasses.replace(_cpu_demo(), preset="cpu-alfworld")
    task_types = list(CPU_ALFWORLD_TASK_TYPES)
    return replace(
        base,
        generation={"max_new_tokens": 16, "batch_size": 16},
        prompt={"max_prompt_tokens": 448, "history_window": 1},
        env={"env_id": "AgentGym/ALFWorld-v0", "num_groups": 2, "group_size": 4,
             "max_steps": 8, "anchor": "state",
             "env_kwargs": json.dumps({"task_types": task_types}),
             "eval_env_kwargs": json.dumps({"split": "valid_seen",
                                            "num_generated_games": 12}),
             "eval_episodes": 12},
        sft={"warm_start": True, "episodes": 60, "max_steps": 12, "batch_size": 8,
             "micro_batch_size": 4, "lr": 5e-4},
        learner={"micro_batch_size": 4},
        run={"iterations": 2, "save_every": 2, "keep_checkpoints": 1, "eval_every": 2,
             "eval_before_train": True},
    )


def _cpu_webshop() -> TrainConfig:
    """SmolLM2-135M on WebShop on two CPU cores: an SFT warm start on the env's oracle
    expert (:mod:`agentgym.webshop.oracle`), then GiGPO, in one run, as ``cpu-alfworld``.

    The shop is the env's default (the shipped catalogue, synthetic goals: no download);
    training on the ``train`` goals, evaluation on 12 ``test`` goals. Measured on 30
    oracle episodes of the ``train`` goals with SmolLM2's tokenizer: 5.0 steps on average
    (at most 8, every one successful), prompts of 681 tokens on average (90th percentile
    954), actions of at most 48 tokens with ``</action>`` (a search query is the longest).

    - 10 steps (the oracle's longest, 8, and two to spare), 48 response tokens, prompts
      of at most 1,024 tokens (history first to go), one step of history, the cpu-demo's
      prompt (``<action>`` opened for the model, no thinking).
    - SFT stage: 48 expert episodes (~240 steps), 8 optimizer steps of 8 samples at lr
      5e-4 (LoRA), a quarter of an epoch,
      micro-batches of 2 rows: WebShop's prompts are about twice ALFWorld's, where 4 rows
      of up to 448 tokens took the SFT stage to about 4 GB peak RSS.
    - RL as ``cpu-alfworld``: 2 groups x 4, the state anchor, the cpu-demo's loss, lr 5e-4,
      KL 0.2, 2 iterations; held-out evaluation before and after.
    """
    base = dataclasses.replace(_cpu_demo(), preset="cpu-webshop")
    return replace(
        base,
        generation={"max_new_tokens": 48, "batch_size": 16},
        prompt={"max_prompt_tokens": 1024, "history_window": 1},
        env={"env_id": "AgentGym/WebShop-v0", "num_groups": 2, "group_size": 4,
             "max_steps": 10, "anchor": "state", "env_kwargs": "{}",
             "eval_env_kwargs": json.dumps({"split": "test"}), "eval_episodes": 12},
        sft={"warm_start": True, "episodes": 48, "max_steps": 8, "batch_size": 8,
             "micro_batch_size": 2, "lr": 5e-4},
        learner={"micro_batch_size": 2},
        run={"iterations": 2, "save_every": 2, "keep_checkpoints": 1, "eval_every": 2,
             "eval_before_train": True},
    )


def _cpu_searchqa() -> TrainConfig:
    """SmolLM2-135M on Search-QA on two CPU cores: an SFT warm start on the env's
    privileged expert (:meth:`agentgym.searchqa.env.SearchQAEnv.expert_action`: search the
    question, then the bridge entity, then answer), then GiGPO, in one run, as
    ``cpu-alfworld``.

    The questions are the generated knowledge base's (invented names, so nothing can be
    answered from memory; BM25 over its 5,100 passages; no download), ``train`` for the
    expert and RL, 12 ``test`` questions spread over the templates for evaluation
    (``task_order="spread"``: the list is grouped by template). Search-R1's turn budget
    (3: two turns that may search, then a final one) and answer format (``<search>`` /
    ``<answer>`` tags, no action list), the cpu-demo's model and loss, no thinking.

    - Prompt: one step of history (the passages that named the bridge entity stay in view
      when the second search returns), at most 640 tokens, answers of at most 32: on 64
      expert episodes (2.3 turns on average, every one successful) with SmolLM2's
      tokenizer, prompts of 259 tokens on average (90th percentile 450, longest 593),
      answers of at most 24 tokens.
    - SFT stage: 64 expert episodes, 8 optimizer steps of 8 samples at lr 5e-4 (LoRA),
      micro-batches of 4 rows.
    - RL: 2 groups x 4, the state anchor, lr 5e-4, KL 0.2, 2 iterations; held-out
      evaluation before and after.
    """
    base = dataclasses.replace(_cpu_demo(), preset="cpu-searchqa")
    return replace(
        base,
        generation={"max_new_tokens": 32, "batch_size": 16},
        prompt={"max_prompt_tokens": 640, "history_window": 1, "env_style": "searchqa",
                "show_admissible_actions": False, "response_prefix": ""},
        env={"env_id": "AgentGym/SearchQA-v0", "num_groups": 2, "group_size": 4,
             "max_steps": 3, "anchor": "state", "env_kwargs": json.dumps({"split": "train"}),
             "eval_env_kwargs": json.dumps({"split": "test"}), "eval_episodes": 12,
             "task_order": "spread"},
        sft={"warm_start": True, "episodes": 64, "max_steps": 8, "batch_size": 8,
             "micro_batch_size": 4, "lr": 5e-4},
        learner={"micro_batch_size": 4},
        run={"iterations": 2, "save_every": 2, "keep_checkpoints": 1, "eval_every": 2,
             "eval_before_train": True},
    )


def _alfworld_1_5b() -> TrainConfig:
    """verl-agent's ``examples/gigpo_trainer/run_alfworld.sh`` (GiGPO, Qwen2.5-1.5B-Instruct).

    As the script: 16 groups x 8, 50 steps, history 2, prompts 2048 / responses 512
    tokens, lr 1e-6, mini-batches of 256 steps in micro-batches of 32 (per rank, as
    ``ppo_micro_batch_size_per_gpu``), KL loss 0.01 (low-variance), penalty 0.1, gamma
    0.95, omega 1, ``mean_std_norm``, training temperature 1.0 and evaluation at 0.4 on
    128 in-distribution games (``valid_seen``) every 5 iterations, 150 iterations; the
    rest is the recipe's defaults (:class:`~algorithms.config.LearnerConfig`). Differs: a prompt over 2048
    tokens loses history first (the script's ``truncation='error'`` stops the run); no
    evaluation before training (``val_before_train``); the env workers are subprocesses,
    not Ray actors (``--env.backend ray`` for those).
    """
    base = TrainConfig(preset="alfworld-1.5b")
    return replace(
        base,
        model={"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct", "gradient_checkpointing": True},
        generation={"engine": "vllm", "max_new_tokens": 512},
        prompt={"max_prompt_tokens": 2048, "history_window": 2},
        env={"env_id": "AgentGym/ALFWorld-v0", "num_groups": 16, "group_size": 8,
             "max_steps": 50, "backend": "subprocess",
             "eval_env_kwargs": json.dumps({"split": "valid_seen"}), "eval_episodes": 128},
        learner={"lr": 1e-6, "kl_coef": 0.01, "mini_batch_size": 256, "micro_batch_size": 32},
        run={"iterations": 150, "eval_every": 5},
    )


def _alfworld_7b_lora() -> TrainConfig:
    """verl-agent's ``examples/gigpo_trainer/run_alfworld_lora.sh`` (Qwen2.5-7B-Instruct).

    As :func:`_alfworld_1_5b`, with the script's changes: LoRA rank 64, alpha 64, lr 3e-6,
    no KL loss, vLLM at 0.6 of the GPU memory. Differs as :func:`_alfworld_1_5b` does.
    """
    base = _alfworld_1_5b()
    return replace(
        dataclasses.replace(base, preset="alfworld-7b-lora"),
        model={"name_or_path": "Qwen/Qwen2.5-7B-Instruct", "gradient_checkpointing": True,
               "lora_rank": 64, "lora_alpha": 64},
        learner={"lr": 3e-6, "kl_coef": 0.0},
        generation={"vllm": {"gpu_memory_utilization": 0.6}},
    )


def _alfworld_7b() -> TrainConfig:
    """The GiGPO paper's ALFWorld row at 7B: :func:`_alfworld_1_5b` with
    Qwen2.5-7B-Instruct, every weight trained.

    verl-agent's ``run_alfworld.sh`` names the 1.5B model; the paper reports the same
    recipe at 7B (90.8% against 86.7% at 1.5B). This preset is that script with the model
    changed and nothing else: GPU count, micro-batch size and vLLM's memory share are the
    1.5B script's (``--learner.micro-batch-size`` and
    ``--generation.vllm.gpu-memory-utilization`` change them). Differs as
    :func:`_alfworld_1_5b` does. ``alfworld-7b-lora`` is verl-agent's LoRA script.
    """
    return replace(dataclasses.replace(_alfworld_1_5b(), preset="alfworld-7b"),
                   model={"name_or_path": "Qwen/Qwen2.5-7B-Instruct"})


def _webshop_1_5b() -> TrainConfig:
    """verl-agent's ``examples/gigpo_trainer/run_webshop.sh`` (GiGPO, Qwen2.5-1.5B-Instruct).

    As the script: 6 groups x 8, 15 steps, history 2, prompts 2048 / responses 256
    tokens, lr 1e-6, mini-batches of 8 steps in micro-batches of 4, KL loss 0.01, penalty
    0.1, ``mean_norm``, evaluation every 5 iterations, 150 iterations. Differs: evaluation
    on 500 goals of the test split (the script evaluates 2 x 6 tasks of its own sampling,
    which can repeat training goals: REFERENCE.md); a prompt over 2048 tokens loses
    history first; no evaluation before training; subprocess env workers.
    """
    base = TrainConfig(preset="webshop-1.5b")
    return replace(
        base,
        model={"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct", "gradient_checkpointing": True},
        generation={"engine": "vllm", "max_new_tokens": 256},
        prompt={"max_prompt_tokens": 2048, "history_window": 2},
        env={"env_id": "AgentGym/WebShop-v0", "num_groups": 6, "group_size": 8,
             "max_steps": 15, "backend": "subprocess",
             "eval_env_kwargs": json.dumps({"split": "test"}), "eval_episodes": 500},
        learner={"lr": 1e-6, "normalize": "mean", "kl_coef": 0.01, "mini_batch_size": 8,
                 "micro_batch_size": 4},
        run={"iterations": 150, "eval_every": 5},
    )


def _webshop_7b() -> TrainConfig:
    """The GiGPO paper's WebShop row at 7B: :func:`_webshop_1_5b` with
    Qwen2.5-7B-Instruct, every weight trained (75.2% success against 67.4% at 1.5B).

    verl-agent's ``run_webshop.sh`` names the 1.5B model; this is that script with the
    model changed and nothing else. Differs as :func:`_webshop_1_5b` does.
    """
    return replace(dataclasses.replace(_webshop_1_5b(), preset="webshop-7b"),
                   model={"name_or_path": "Qwen/Qwen2.5-7B-Instruct"})


def _alfworld_1_5b_tools() -> TrainConfig:
    """``alfworld-1.5b`` through tool calls: Qwen2.5-1.5B-Instruct calls ALFWorld's tools
    (one per command of its grammar, :meth:`agentgym.alfworld.env.ALFWorldEnv.tools`) in
    its own chat template (Hermes/Qwen ``<tool_call>`` layout), each observation a tool
    message, the last 2 steps as messages (the window layout), reasoning in ``<think>``
    before the call. As ``alfworld-1.5b`` otherwise, except prompts of at most 4096 tokens
    (Qwen2.5's template with the 15 tools' schemas writes a system turn of 1,773 tokens,
    against 23 without tools, measured with SmolLM2's tokenizer: 2048 would leave little
    for the task and history)."""
    base = dataclasses.replace(_alfworld_1_5b(), preset="alfworld-1.5b-tools")
    return replace(base, prompt={"action_format": "tool-call", "max_prompt_tokens": 4096})


def _webshop_1_5b_tools() -> TrainConfig:
    """``webshop-1.5b`` through tool calls: Qwen2.5-1.5B-Instruct calls WebShop's
    ``search(query)`` and ``click(target)`` in its own chat template, each page a tool
    message, the last 2 steps as messages, reasoning in ``<think>`` before the call. As
    ``webshop-1.5b`` otherwise, except prompts of at most 2560 tokens (Qwen2.5's template
    with the two tools' schemas writes a system turn of 321 tokens, against 23 without,
    measured with SmolLM2's tokenizer)."""
    base = dataclasses.replace(_webshop_1_5b(), preset="webshop-1.5b-tools")
    return replace(base, prompt={"action_format": "tool-call", "max_prompt_tokens": 2560})


def _hgpo_alfworld_1_5b() -> TrainConfig:
    """verl-agent's ``recipe/hgpo/run_qwen2.5_1.5b_alfworld_train.sh`` (HGPO,
    Qwen2.5-1.5B-Instruct; ``recipe/hgpo/config/hgpo_trainer.yaml``).

    As the script: 16 groups x 8, 50 steps, history 2 (the prompt's window and HGPO's
    history length, both ``env.history_length``), prompts 4096 / responses 512 tokens, lr
    1e-6, mini-batches of 256 steps in micro-batches of 16 (per rank), KL loss 0.01
    (low-variance), penalty 0.1, gamma 0.95, ``mean_std_norm``, length weight alpha 1, no
    base group, the raw observation as the anchor (its env manager's), training
    temperature 1.0 and evaluation at 0.4 on 128 in-distribution games (``valid_seen``:
    the trainer's ``val_out=False``) every 5 iterations, 160 iterations
    (``total_epochs=160``); the rest is the recipe's defaults (:class:`~algorithms.config.LearnerConfig`).
    Differs: a prompt over 4096 tokens loses history first (the script's
    ``truncation='left'`` cuts its beginning, the task); the env workers are subprocesses,
    not Ray actors; a history group whose returns are all equal scores exactly 0 (the
    reference's float32 mean can leave it a nonzero item: :func:`~algorithms.objectives.
    advantages.hgpo_advantages`).
    """
    base = dataclasses.replace(_alfworld_1_5b(), preset="hgpo-alfworld-1.5b", algo="hgpo")
    return replace(
        base,
        prompt={"max_prompt_tokens": 4096, "history_window": 2},
        learner={"micro_batch_size": 16, "normalize": "std", "hgpo_history_length": None,
                 "hgpo_length_weight_alpha": 1.0, "hgpo_base_group": False},
        run={"iterations": 160, "eval_every": 5},
    )


def _hgpo_webshop_1_5b() -> TrainConfig:
    """verl-agent's ``recipe/hgpo/run_qwen2.5_1.5b_webshop_train.sh`` (HGPO on WebShop,
    Qwen2.5-1.5B-Instruct).

    As the script: 16 groups x 8, 30 steps, history 2, prompts 4096 / responses 512
    tokens, lr 1e-6, mini-batches of 64 steps in micro-batches of 4, KL loss 0.01,
    penalty 0.1, gamma 0.95, ``mean_norm``, alpha 1, no base group, evaluation at 0.4
    every 5 iterations on 128 tasks (``val_batch_size``), 160 iterations. Differs: the
    script starts ``verl.trainer.main_ppo``, whose trainer in verl-agent's checkout has
    no ``hgpo`` estimator and whose config no ``algorithm.hgpo`` section (it stops
    there); this preset is the script as ``recipe.hgpo.main_hgpo`` (its ALFWorld script's
    entry point) would run it. Evaluation on the first 128 goals of the test split (the
    script's are of its own sampling, which can repeat training goals: REFERENCE.md); a
    prompt over 4096 tokens loses history first; subprocess env workers; all-equal groups
    score 0 as in :func:`_hgpo_alfworld_1_5b`.
    """
    base = dataclasses.replace(_webshop_1_5b(), preset="hgpo-webshop-1.5b", algo="hgpo")
    return replace(
        base,
        generation={"max_new_tokens": 512},
        prompt={"max_prompt_tokens": 4096, "history_window": 2},
        env={"num_groups": 16, "group_size": 8, "max_steps": 30, "eval_episodes": 128},
        learner={"normalize": "mean", "mini_batch_size": 64, "micro_batch_size": 4,
                 "hgpo_history_length": None, "hgpo_length_weight_alpha": 1.0,
                 "hgpo_base_group": False},
        run={"iterations": 160, "eval_every": 5},
    )


def _graphgpo_alfworld_1_5b() -> TrainConfig:
    """The GraphGPO recipe's ``recipe/GraphGPO/run_qwen2.5_1.5b_alfworld_train.sh``
    (floatingstarZ/verl-agent; ``config/graphgpo_trainer.yaml``; Qwen2.5-1.5B-Instruct).

    As the script: 16 groups x 8, 50 steps, history 2 (verl-agent's default
    ``env.history_length``), prompts 2048 / responses 512 tokens, lr 1e-6, mini-batches of
    256 steps in micro-batches of 32, KL loss 0.01 (low-variance), penalty 0.1, graph
    decay 0.10 (its ``algorithm.gamma``: ``learner.graphgpo_decay``), step and episode
    weights 1, ``mean_std_norm``,
    absolute distances (``normalize_distance=False``), exact states (no similarity),
    evaluation at 0.4 on 128 ``valid_seen`` games before training and every 5
    iterations, 150 iterations. Differs: the anchor is this env's true-state key
    (``anchor="state"``): GraphGPO's ALFWorld env manager keys a state by its observation
    with the location, the held object and its status, the objects moved so far and the
    sorted admissible commands appended, a stand-in for the state that this env gives
    directly (no env changes here); the goal node is reached on the last step of a
    successful episode (the script: an episode whose env reward sum is above 0, the
    same in ALFWorld); a prompt over 2048 tokens loses history first (the script's
    ``truncation='error'`` stops the run); subprocess env workers.
    """
    base = dataclasses.replace(_alfworld_1_5b(), preset="graphgpo-alfworld-1.5b",
                               algo="graphgpo")
    return replace(
        base,
        env={"anchor": "state"},
        learner={"graphgpo_decay": 0.1, "step_weight": 1.0, "graphgpo_episode_weight": 1.0,
                 "normalize": "std", "graphgpo_normalize_distance": False,
                 "similarity_threshold": None},
        run={"iterations": 150, "eval_every": 5, "eval_before_train": True},
    )


def _graphgpo_webshop_1_5b() -> TrainConfig:
    """The GraphGPO recipe's ``recipe/GraphGPO/run_qwen2.5_1.5b_webshop_train.sh``
    (Qwen2.5-1.5B-Instruct).

    As the script: 16 groups x 8, 15 steps, history 2, prompts 5120 / responses 512
    tokens, lr 1e-6, mini-batches of 64 steps in micro-batches of 8, KL loss 0.01,
    penalty 0.1, graph decay 0.20 (its ``algorithm.gamma``), step and episode weights 1,
    ``mean_std_norm``, absolute
    distances, exact states, evaluation at 0.4 before training and every 5 iterations on
    128 tasks, 150 iterations. Differs: the script's WebShop pages are
    ``observation_mode=text_rich``; this env has WebShop's text mode only; the state
    anchor as :func:`_graphgpo_alfworld_1_5b`; evaluation on the first 128 goals of the
    test split; a prompt over 5120 tokens loses history first; subprocess env workers.
    """
    base = dataclasses.replace(_webshop_1_5b(), preset="graphgpo-webshop-1.5b",
                               algo="graphgpo")
    return replace(
        base,
        generation={"max_new_tokens": 512},
        prompt={"max_prompt_tokens": 5120, "history_window": 2},
        env={"num_groups": 16, "group_size": 8, "max_steps": 15, "anchor": "state",
             "eval_episodes": 128},
        learner={"graphgpo_decay": 0.2, "step_weight": 1.0, "graphgpo_episode_weight": 1.0,
                 "normalize": "std", "graphgpo_normalize_distance": False,
                 "similarity_threshold": None, "mini_batch_size": 64, "micro_batch_size": 8},
        run={"iterations": 150, "eval_every": 5, "eval_before_train": True},
    )


def _sokoban() -> TrainConfig:
    """verl-agent's ``examples/gigpo_trainer/run_sokoban.sh`` (GiGPO on 6 x 6 Sokoban, one box).

    As the script: 32 groups x 8, 15 steps, prompts 1024 / responses 512 tokens, lr 1e-6,
    mini-batches of 64 steps in micro-batches of 8, KL loss 0.01 (low-variance), penalty
    0.1, gamma 0.95, omega 1, ``mean_norm``, training temperature 1.0 and evaluation at 0.4
    on 128 rooms every 5 iterations, 150 iterations, vLLM at 0.6 of the GPU memory; the
    rest is the recipe's defaults (:class:`~algorithms.config.LearnerConfig`). Differs: the evaluation rooms
    are the same 128 each time, seeds 65,536 to 65,663 (the script's validation envs draw
    128 new seeds in [2^16, 2^32) at each evaluation): a fixed held-out set, so
    evaluations compare across iterations. Text, not images: the script
    trains Qwen2.5-VL-3B-Instruct on rendered frames (``env.sokoban.mode='rgb_array'``);
    this env is verl-agent's text mode (``tiny_rgb_array``), so the model is the text
    Qwen2.5-3B-Instruct and the prompt keeps the last 2 steps (verl-agent's default
    ``history_length`` for its text template; its visual template has none), in this
    library's prompt template, not verl-agent's wording. A prompt over
    1024 tokens loses history first (the script's ``truncation='error'`` stops the run);
    no evaluation before training; the env steps in-process, not in Ray actors (rooms
    take about 1 ms each).
    """
    base = TrainConfig(preset="sokoban")
    return replace(
        base,
        model={"name_or_path": "Qwen/Qwen2.5-3B-Instruct", "gradient_checkpointing": True},
        generation={"engine": "vllm", "max_new_tokens": 512,
                    "vllm": {"gpu_memory_utilization": 0.6}},
        prompt={"max_prompt_tokens": 1024, "history_window": 2},
        env={"env_id": "AgentGym/Sokoban-v0", "num_groups": 32, "group_size": 8,
             "max_steps": 15,
             "eval_env_kwargs": json.dumps({"first_seed": 2**16}),
             "eval_episodes": 128},
        learner={"lr": 1e-6, "normalize": "mean", "kl_coef": 0.01, "mini_batch_size": 64,
                 "micro_batch_size": 8},
        run={"iterations": 150, "eval_every": 5},
    )


def _sokoban_vl_3b() -> TrainConfig:
    """verl-agent's ``examples/gigpo_trainer/run_sokoban.sh`` as written: Qwen2.5-VL-3B-Instruct
    on rendered 6 x 6 Sokoban rooms with one box (``env.sokoban.mode='rgb_array'``,
    ``data.image_key=images``; ``AgentGym/SokobanVisual-v0``, whose defaults are the
    script's ``dim_room`` [6, 6], ``num_boxes`` 1, ``search_depth`` 30).

    As the script: GiGPO, 32 groups x 8, 15 steps, prompts 1024 / responses 512 tokens,
    lr 1e-6, mini-batches of 64 steps in micro-batches of 8, KL loss 0.01 (low-variance),
    penalty 0.1, gamma 0.95, omega 1, ``mean_norm``, gradient checkpointing, training
    temperature 1.0 and evaluation at 0.4 on 128 rooms every 5 iterations and before
    training (``val_before_train``), 150 iterations, vLLM at 0.6 of the GPU memory, every
    weight trained (verl's FSDP actor trains the vision tower too: ``train_vision_tower``);
    the step groups keyed by the frame (``anchor="observation"``: verl-agent's anchor is the
    image array). The prompt has verl-agent's visual layout (its env manager and rollout,
    checked by running them: ``tests/algorithms/test_vlm.py``): one user message per step
    with no history (the visual template has none; ``history_window`` 0), the image in the
    middle of it, where the current observation is shown (``image_position``
    ``observation``; theirs: "Your current observation is shown in the image: <image>"),
    the answer as ``<think>...</think><action>...</action>``, a frame of fewer than
    256 x 256 pixels scaled up to that many before the image processor (its
    ``process_image``: 96 x 96 -> 256 x 256).

    Differs: the wording is this library's (the task, the env's legend of the tiles, the
    actions, the answer format), not verl-agent's text, which is not shipped: a template
    file gives it exactly (``docs/vlm.md``, "verl-agent's prompts"); the evaluation rooms
    are the same 128 each time, seeds 65,536 to 65,663 (the script draws 128 new seeds in
    [2^16, 2^32) at each evaluation), as in the ``sokoban`` preset; a prompt over 1024
    tokens loses its text from the start (the image is never cut; the script's
    ``truncation='error'`` stops the run); one process samples with tensor parallel size 1
    (the script: 2); the env steps in-process, not in Ray actors.
    """
    base = TrainConfig(preset="sokoban-vl-3b")
    return replace(
        base,
        model={"name_or_path": "Qwen/Qwen2.5-VL-3B-Instruct", "kind": "vision",
               "gradient_checkpointing": True, "train_vision_tower": True},
        generation={"engine": "vllm", "max_new_tokens": 512,
                    "vllm": {"gpu_memory_utilization": 0.6}},
        prompt={"max_prompt_tokens": 1024, "history_window": 0,
                "image_position": "observation"},
        env={"env_id": "AgentGym/SokobanVisual-v0", "num_groups": 32, "group_size": 8,
             "max_steps": 15, "anchor": "observation",
             "eval_env_kwargs": json.dumps({"first_seed": 2**16}), "eval_episodes": 128},
        learner={"lr": 1e-6, "normalize": "mean", "kl_coef": 0.01, "mini_batch_size": 64,
                 "micro_batch_size": 8},
        run={"iterations": 150, "eval_every": 5, "eval_before_train": True},
    )


def _ezpoints_vl_3b() -> TrainConfig:
    """verl-agent's ``examples/gigpo_trainer/run_ezpoints.sh`` as written: Qwen2.5-VL-3B-Instruct
    on Gym Cards' EZPoints (``env.env_name=gym_cards/EZPoints-v0``; ``AgentGym/EZPoints-v0``:
    two cards in the image, build a formula worth 12 one character per step).

    As the script: ``run_sokoban.sh``'s settings (the ``sokoban-vl-3b`` preset) except 16
    groups x 8, 8 steps, mini-batches of 128 steps, 100 iterations. The prompt has
    verl-agent's Gym Cards layout (checked by running its env manager and rollout:
    ``tests/algorithms/test_vlm.py``): one user message per step with no history, the image
    first (``image_position`` ``start``; its templates begin with ``<image>``), the formula
    so far in the text (the env's text says it; theirs fills ``info["Formula"]`` in). The
    whole answer goes to the env (``action_tag`` empty, no ``<think>``, no stop string),
    whose reading is verl-agent's ``gym_projection``: the word after ``"action":`` of the
    JSON answer its prompt asks for (else the answer's last character), valid when exactly
    one of the game's words is there; an unreadable answer is an invalid action, charged
    0.1. The held-out rooms are verl-agent's evaluation seeds, from 2^16.

    Differs: the wording is this library's, not verl-agent's (a template file gives it
    exactly: ``docs/vlm.md``, "verl-agent's prompts"); since our wording does not describe
    the JSON answer, it lists the admissible answers, which are that JSON
    (``{"action": "7"}``); the answer's whitespace is collapsed before the env reads it (it
    changes the reading only of an answer without ``"action":`` that ends in whitespace,
    which theirs reads as invalid); the evaluation deals are the same 128 each time, seeds
    65,536 to 65,663 (the script draws new ones at each evaluation); tensor parallel size
    1; the env steps in-process.
    """
    base = dataclasses.replace(_sokoban_vl_3b(), preset="ezpoints-vl-3b")
    return replace(
        base,
        prompt={"max_prompt_tokens": 1024, "history_window": 0, "image_position": "start",
                "think": False, "action_tag": "", "show_admissible_actions": True},
        env={"env_id": "AgentGym/EZPoints-v0", "num_groups": 16, "group_size": 8,
             "max_steps": 8, "anchor": "observation",
             "eval_env_kwargs": json.dumps({"first_seed": 2**16}), "eval_episodes": 128},
        learner={"mini_batch_size": 128, "micro_batch_size": 8},
        run={"iterations": 100, "eval_every": 5, "eval_before_train": True},
    )


def _searchqa_3b() -> TrainConfig:
    """verl-agent's ``examples/gigpo_trainer/run_search.sh`` (GiGPO with similarity groups)
    at the paper's 3B size.

    As the script: 256 questions x 5, 4 turns, history 4, prompts 4096 / responses 512
    tokens, lr 1e-6 with a 10% warmup, mini-batches of 512 steps in micro-batches of 16,
    KL loss 0.001, no entropy bonus, penalty 0.01, ``mean_std_norm``, step groups of
    observations at least 0.9 similar, evaluation every 50 iterations on 512 questions.
    Differs: Qwen2.5-3B-Instruct (the script trains 7B); 200 iterations, where the script
    makes one pass over its training parquet (``total_epochs=1``: set ``--run.iterations``
    to its rows / 256); a prompt over 4096 tokens loses history first (the script cuts it
    on the left); no evaluation before training; env steps in-process.
    """
    base = TrainConfig(preset="searchqa-3b")
    return replace(
        base,
        model={"name_or_path": "Qwen/Qwen2.5-3B-Instruct", "gradient_checkpointing": True},
        generation={"engine": "vllm", "max_new_tokens": 512},
        prompt={"max_prompt_tokens": 4096, "history_window": 4, "env_style": "searchqa",
                "show_admissible_actions": False},
        env={"env_id": "AgentGym/SearchQA-v0", "num_groups": 256, "group_size": 5,
             "max_steps": 4, "env_kwargs": json.dumps({"split": "train"}),
             "eval_env_kwargs": json.dumps({"split": "test"}),
             "eval_episodes": 512},
        learner={"lr": 1e-6, "lr_warmup_ratio": 0.1, "kl_coef": 0.001, "entropy_coef": 0.0,
                 "similarity_threshold": 0.9, "mini_batch_size": 512,
                 "micro_batch_size": 16},
        run={"iterations": 200, "eval_every": 50},
    )


def _searchqa_3b_transcript() -> TrainConfig:
    """Search-R1's GRPO recipe, its ``train_grpo.sh``, in Search-R1's turn layout.

    As the script: Qwen2.5-3B (base), 512 questions x 5, one growing transcript per
    question with 2 search turns and a final answer turn, 500-token turns and
    observations, prompts up to 4096 tokens, temperature 1, lr 1e-6 with a 28.5% warmup,
    mini-batches of 256 trajectories in micro-batches of 8 per rank (the script's 64 over
    8 GPUs), KL loss 0.001 (low-variance), Search-R1's verl defaults (entropy bonus 0.001,
    weight decay 0.01, no dual clip, token mean per micro-batch, clip 0.2, one epoch),
    group statistics over trajectories, no format penalty, 1005 iterations, evaluation
    every 50. Differs: no evaluation before training.
    """
    base = dataclasses.replace(_searchqa_3b(), preset="searchqa-3b-transcript", algo="grpo")
    return replace(
        base,
        model={"name_or_path": "Qwen/Qwen2.5-3B", "gradient_checkpointing": True},
        generation={"engine": "vllm", "max_new_tokens": 500, "temperature": 1.0},
        prompt={"layout": "transcript", "max_prompt_tokens": 4096, "history_window": 0,
                "max_observation_tokens": 500, "env_style": "searchqa",
                "show_admissible_actions": False},
        env={"num_groups": 512, "group_size": 5, "max_steps": 3,
             "invalid_action_penalty": 0.0},
        learner={"lr": 1e-6, "lr_warmup_ratio": 0.285, "kl_coef": 0.001, "kl_estimator": "k3",
                 "entropy_coef": 0.001, "dual_clip": None, "similarity_threshold": None,
                 "episode_stats": "trajectories", "mini_batch_size": 256,
                 "micro_batch_size": 8},
        run={"iterations": 1005, "eval_every": 50},
    )


PRESETS: dict[str, TrainConfig] = {
    "cpu-demo": _cpu_demo(),
    "cpu-demo-tools": _cpu_demo_tools(),
    "cpu-alfworld": _cpu_alfworld(),
    "cpu-webshop": _cpu_webshop(),
    "cpu-searchqa": _cpu_searchqa(),
    "alfworld-1.5b": _alfworld_1_5b(),
    "alfworld-7b": _alfworld_7b(),
    "alfworld-7b-lora": _alfworld_7b_lora(),
    "webshop-1.5b": _webshop_1_5b(),
    "webshop-7b": _webshop_7b(),
    "alfworld-1.5b-tools": _alfworld_1_5b_tools(),
    "webshop-1.5b-tools": _webshop_1_5b_tools(),
    "hgpo-alfworld-1.5b": _hgpo_alfworld_1_5b(),
    "hgpo-webshop-1.5b": _hgpo_webshop_1_5b(),
    "graphgpo-alfworld-1.5b": _graphgpo_alfworld_1_5b(),
    "graphgpo-webshop-1.5b": _graphgpo_webshop_1_5b(),
    "sokoban": _sokoban(),
    "sokoban-vl-3b": _sokoban_vl_3b(),
    "ezpoints-vl-3b": _ezpoints_vl_3b(),
    "searchqa-3b": _searchqa_3b(),
    "searchqa-3b-transcript": _searchqa_3b_transcript(),
}
"""Named presets. ``cpu-demo`` runs in minutes on two CPU cores; each other one reproduces
the GPU training script its docstring cites (verl-agent's, from which the GiGPO paper's
numbers came, or Search-R1's) and lists where it differs."""

GPU_PRESETS: frozenset[str] = frozenset({
    "alfworld-1.5b", "alfworld-7b", "alfworld-7b-lora", "webshop-1.5b", "webshop-7b",
    "alfworld-1.5b-tools", "webshop-1.5b-tools",
    "hgpo-alfworld-1.5b", "hgpo-webshop-1.5b", "graphgpo-alfworld-1.5b",
    "graphgpo-webshop-1.5b", "sokoban", "sokoban-vl-3b", "ezpoints-vl-3b", "searchqa-3b",
    "searchqa-3b-transcript"})
"""The presets written for CUDA GPUs (a Qwen model, vLLM rollouts): under ``run.device
auto``, ``train.py --dry-run`` requires a GPU for them (``--run.device cpu`` runs one on the
CPU anyway). The others run on two CPU cores."""

PRESET_HELP: dict[str, str] = {
    "cpu-demo": "SmolLM2-135M with LoRA (rank 16) on a 2x2 KeyDoor house (no key), "
                "2 groups x 4, 6 steps, answers opened with <action>, lr 5e-4, KL 0.2, "
                "6 iterations.",
    "cpu-demo-tools": "The cpu-demo's house through tool calls: SmolLM2-135M calls "
                      "KeyDoor's tools (AgentGym's ChatML tool template), an SFT stage on "
                      "the expert's calls, then GiGPO, 6 iterations.",
    "cpu-alfworld": "SmolLM2-135M with LoRA on ALFWorld (generated games, or "
                    "$ALFWORLD_DATA), 2 task types, 8 steps: an SFT stage on the env's "
                    "expert (12 steps), then GiGPO, 2 groups x 4, 2 iterations.",
    "cpu-webshop": "SmolLM2-135M with LoRA on WebShop (the shipped catalogue, synthetic "
                   "goals), 10 steps: an SFT stage on the oracle expert (8 steps), then "
                   "GiGPO, 2 groups x 4, 2 iterations.",
    "cpu-searchqa": "SmolLM2-135M with LoRA on Search-QA (the generated knowledge base, "
                    "BM25), 3 turns: an SFT stage on the privileged expert (8 steps), then "
                    "GiGPO, 2 groups x 4, 2 iterations.",
    "alfworld-1.5b": "verl-agent's run_alfworld.sh: Qwen2.5-1.5B-Instruct on ALFWorld, "
                     "16 groups x 8, 50 steps, lr 1e-6, KL 0.01, vLLM rollouts, "
                     "150 iterations.",
    "alfworld-7b": "alfworld-1.5b with Qwen2.5-7B-Instruct (the paper's 7B row), every "
                   "weight trained.",
    "alfworld-7b-lora": "verl-agent's run_alfworld_lora.sh: Qwen2.5-7B-Instruct with LoRA "
                        "(rank 64), lr 3e-6, no KL.",
    "webshop-1.5b": "verl-agent's run_webshop.sh: Qwen2.5-1.5B-Instruct on WebShop, 6 "
                    "groups x 8, 15 steps, mean-only normalization.",
    "webshop-7b": "webshop-1.5b with Qwen2.5-7B-Instruct (the paper's 7B row), every weight "
                  "trained.",
    "alfworld-1.5b-tools": "alfworld-1.5b through tool calls: Qwen2.5-1.5B-Instruct calls "
                           "ALFWorld's tools in its own chat template, prompts 4096.",
    "webshop-1.5b-tools": "webshop-1.5b through tool calls: Qwen2.5-1.5B-Instruct calls "
                          "search and click in its own chat template, prompts 2560.",
    "hgpo-alfworld-1.5b": "verl-agent's recipe/hgpo 1.5B ALFWorld script: HGPO (history 2, "
                          "alpha 1, no base group), 16 groups x 8, 50 steps, prompts 4096.",
    "hgpo-webshop-1.5b": "verl-agent's recipe/hgpo 1.5B WebShop script: HGPO, 16 groups x 8, "
                         "30 steps, mean-only normalization.",
    "graphgpo-alfworld-1.5b": "GraphGPO's 1.5B ALFWorld script: state-graph returns "
                              "10 * 0.1^d plus the episode advantage, 16 groups x 8, "
                              "50 steps, state anchors.",
    "graphgpo-webshop-1.5b": "GraphGPO's 1.5B WebShop script: graph returns 10 * 0.2^d, "
                             "16 groups x 8, 15 steps, prompts 5120, state anchors.",
    "sokoban": "verl-agent's run_sokoban.sh in text: Qwen2.5-3B-Instruct on 6x6 "
              "Sokoban (1 box), 32 groups x 8, 15 steps, mean-only normalization, "
              "lr 1e-6, KL 0.01.",
    "sokoban-vl-3b": "verl-agent's run_sokoban.sh: Qwen2.5-VL-3B-Instruct on rendered 6x6 "
                     "Sokoban rooms (AgentGym/SokobanVisual-v0), 32 groups x 8, 15 steps, "
                     "every weight trained, lr 1e-6, KL 0.01.",
    "ezpoints-vl-3b": "verl-agent's run_ezpoints.sh: Qwen2.5-VL-3B-Instruct on Gym Cards' "
                      "EZPoints (AgentGym/EZPoints-v0), 16 groups x 8, 8 steps, the image "
                      "first, the whole answer sent to the env.",
    "searchqa-3b": "verl-agent's run_search.sh at 3B: Qwen2.5-3B-Instruct on Search-QA, "
                   "256 x 5, 4 turns, penalty 0.01, history 4, similarity groups 0.9.",
    "searchqa-3b-transcript": "Search-R1's train_grpo.sh: Qwen2.5-3B, one growing transcript "
                              "per question, 2 search turns + a final answer turn, 512 "
                              "questions x 5, 500-token turns, KL 0.001, no format penalty.",
}
