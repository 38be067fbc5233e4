"""The smoke model: a tiny random Llama over a word-level tokenizer of the env's own text.

``--model.name-or-path tiny`` (:data:`~algorithms.config.TINY_MODEL`) trains this model
instead of loading one: an env author's wiring (registration, contract, prompts, rewards,
run folder, viewer) then runs end to end in seconds on a CPU, nothing downloaded. It
learns nothing useful; it is random, and its vocabulary holds only the words it was
built from.

The vocabulary (:func:`run_texts`): the text of a few episodes of the run's env (its
training kwargs, and its evaluation kwargs when they differ) -- tasks, observations,
admissible actions, the env's expert actions when it declares an expert -- played from the
first seeds with the admissible actions in turn, plus the prompts the run builds from them
(the run's prompt settings, template and answer format). Words are whitespace-separated;
``<tag>`` and ``</tag>`` are cut off the words they touch (answers are written without
spaces around their tags); a word outside the vocabulary becomes ``[UNK]``. The env text
and the weights are deterministic (weights from seed :data:`TINY_SEED`), so a resumed or
evaluated run rebuilds the same base model. The same recipe serves the tests' and the
benchmarks' tiny models (:func:`word_tokenizer`, :func:`tiny_llama`, :func:`tiny_policy`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import torch

from algorithms.config import ModelConfig, TrainConfig
from algorithms.training.policy import Policy, resolve_dtype, wrap_model

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[EOS]")
"""Ids 0, 1, 2 of every word tokenizer here."""

TAG_PATTERN = r"</?[a-z_]+>"
"""An answer tag, ``<action>``, ``</think>`` or ``<tool_call>``."""

TURN_START = "<|im_start|>"
"""The tool-call template's turn opener: a special token of the smoke model's tokenizer in
the ``tool-call`` format (its turns end with ``[EOS]``, the template's ``eos_token``)."""

TINY_SEED = 0
"""The seed of the smoke model's weights (the same base model in every run)."""

TINY_HIDDEN = 64
TINY_LAYERS = 2
"""The smoke model's width and depth: 2 layers of width 64, MLP 128 (about 0.1 M weights
beside the embeddings)."""

TEXT_EPISODES = 8
"""Episodes per env whose text builds the smoke model's vocabulary."""

TEXT_STEPS = 16
"""Steps per such episode, at most."""


def text_words(texts: Iterable[str], *, split_tags: bool = True) -> set[str]:
    """The distinct whitespace-separated words of ``texts`` (with ``split_tags``, tags cut
    off the words they touch first; :data:`TURN_START` and ``[EOS]`` always)."""
    words: set[str] = set()
    for text in texts:
        text = text.replace(TURN_START, f" {TURN_START} ").replace("[EOS]", " [EOS] ")
        if split_tags:
            text = re.sub(TAG_PATTERN, lambda m: f" {m.group(0)} ", text)
        words.update(text.split())
    return words


def word_tokenizer(words: Iterable[str], *, split_tags: bool = True,
                   chat_template: str | None = None) -> Any:
    """A word-level tokenizer over ``words``.

    Ids: :data:`SPECIAL_TOKENS` first (``[PAD]`` 0, ``[UNK]`` 1, ``[EOS]`` 2), then the
    sorted distinct words. Text is split on whitespace (and, with ``split_tags``, around
    ``<tag>`` / ``</tag>``, so ``go north</action>`` is three tokens); decoding joins
    tokens with spaces. With ``chat_template`` (the ``tool-call`` format's), that is its
    chat template and :data:`TURN_START` a special token of its own (split out wherever
    it stands).
    """
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for word in sorted(set(words)):
        vocab.setdefault(word, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if split_tags:
        core.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(TAG_PATTERN), behavior="isolated")])
    if chat_template is None:
        return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]",
                                       unk_token="[UNK]", eos_token="[EOS]")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]",
                                        unk_token="[UNK]", eos_token="[EOS]",
                                        additional_special_tokens=[TURN_START])
    tokenizer.chat_template = chat_template
    return tokenizer


def tiny_llama(vocab_size: int, *, seed: int = TINY_SEED, hidden: int = TINY_HIDDEN,
               layers: int = TINY_LAYERS, max_positions: int = 2048) -> Any:
    """A randomly initialised Llama (deterministic for ``seed``; the caller's torch RNG
    is left as it was): ``layers`` layers of width ``hidden``, MLP ``2 * hidden``, 4 heads
    (2 key-value heads), tied embeddings, ``[PAD]`` 0 and ``[EOS]`` 2."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden,
                         intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=max_positions, tie_word_embeddings=True,
                         pad_token_id=0, bos_token_id=None, eos_token_id=2)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model


def tiny_policy(texts: Iterable[str], *, seed: int = TINY_SEED, hidden: int = TINY_HIDDEN,
                layers: int = TINY_LAYERS, model_config: ModelConfig | None = None,
                lora_seed: int = 0) -> Policy:
    """:func:`tiny_llama` over :func:`word_tokenizer` of ``texts``' words, wrapped like a
    loaded policy (LoRA per ``model_config``, initialised from ``lora_seed``; default:
    full weights)."""
    tokenizer = word_tokenizer(text_words(texts))
    model = tiny_llama(len(tokenizer), seed=seed, hidden=hidden, layers=layers)
    return wrap_model(model, tokenizer, model_config or ModelConfig(lora_rank=0),
                      source=f"tiny random Llama (hidden {hidden}, {layers} layers, "
                             f"{len(tokenizer)} words)",
                      path="tiny", gguf_file=None, seed=lora_seed)


def env_texts(env_id: str, kwargs: dict[str, Any], *, episodes: int = TEXT_EPISODES,
              steps: int = TEXT_STEPS) -> list[tuple[str, list[tuple[str, str]], str,
                                                      tuple[str, ...]]]:
    """What ``episodes`` episodes of ``gym.make(env_id, **kwargs)`` show, as
    ``(task, earlier (observation, action) pairs, observation, admissible actions)`` per
    step (the pieces of a prompt), and each step's action in the pairs of the next. The
    episodes start from seeds ``0 .. episodes - 1`` and play the admissible actions in
    turn (the env's expert action first when it declares one; free-form envs: the
    expert's, else nothing after the reset)."""
    from agentgym.plain import make_text_env

    env = make_text_env(env_id, **kwargs)
    seen: list[tuple[str, list[tuple[str, str]], str, tuple[str, ...]]] = []
    try:
        for episode in range(episodes):
            observation, info = env.reset(seed=episode)
            history: list[tuple[str, str]] = []
            for step in range(steps + 1):
                actions = tuple(str(a) for a in info.get("admissible_actions", ()) or ())
                seen.append((str(info.get("task", "")), list(history), str(observation),
                             actions))
                if step == steps:
                    break
                turn = actions[step % len(actions)] if actions else None
                choices = [a for a in (_expert_action(env), turn) if a]
                if not choices:
                    break
                observation, _, terminated, truncated, info = env.step(choices[0])
                history.append((seen[-1][2], choices[0]))
                if terminated or truncated:
                    seen.append((str(info.get("task", "")), list(history), str(observation),
                                 ()))
                    break
    finally:
        env.close()
    return seen


def _expert_action(env: Any) -> str | None:
    """The env's expert action now, or ``None`` (no expert, or none here)."""
    try:
        return env.unwrapped.expert_action()
    except (NotImplementedError, AttributeError):
        return None


def run_texts(config: TrainConfig) -> list[str]:
    """The texts the smoke model's vocabulary is built from (module docstring): the run's
    env episodes (:func:`env_texts`, training kwargs and evaluation kwargs) and the prompts
    the run would build from them."""
    from algorithms.agent.prompts import answer_instruction, render_user_message
    from algorithms.templates import load_template, render_template

    prompt = config.prompt
    template = load_template(prompt.template) if prompt.template else None
    kinds = [config.env.kwargs()]
    if json.loads(config.env.eval_env_kwargs):
        kinds.append(config.env.eval_kwargs())
    texts = [answer_instruction(prompt), "User: Assistant:", prompt.response_prefix,
             "<think> </think>", f"<{prompt.action_tag}> </{prompt.action_tag}>",
             "Nothing happens. Invalid action [...] more not shown"]
    for kwargs in kinds:
        for task, history, observation, actions in env_texts(config.env.env_id, kwargs):
            texts += [task, observation, *actions, *(a for _, a in history)]
            window = history[-prompt.history_window:] if prompt.history_window > 0 else []
            if template is None:
                texts.append(render_user_message(task, window, observation, actions, prompt))
            else:
                texts.append(render_template(template, task=task, history=window,
                                             first_step=len(history) - len(window) + 1,
                                             observation=observation,
                                             admissible_actions=actions,
                                             step_count=len(history), config=prompt))
    return texts


def tool_texts(config: TrainConfig) -> list[str]:
    """The ``tool-call`` format's texts of ``config``'s run: its env's episodes
    (:func:`env_texts`) rendered as the run's chats (AgentGym's tool template, or
    ``prompt.tool_template``), each admissible and expert action written as a call, and
    the parser's feedback lines."""
    from agentgym.tools import env_tools
    from algorithms.agent.tool_calls import format_call, usage
    from algorithms.agent.tool_prompts import (
        builtin_template,
        observation_view,
        tool_message,
        user_message,
    )

    prompt = config.prompt
    tools = env_tools(config.env.env_id, config.env.kwargs())
    template = builtin_template() if prompt.tool_template is None else open(
        prompt.tool_template, encoding="utf-8").read()
    renderer = word_tokenizer((), chat_template=template)
    texts = [usage("hermes"), "Error: the answer calls no tool. the call is not valid JSON "
             "the call ends before </tool_call> there is no tool named the tools are "
             "needs the argument has no argument must be one of got", *tools.names]
    kinds = [config.env.kwargs()]
    if json.loads(config.env.eval_env_kwargs):
        kinds.append(config.env.eval_kwargs())
    for kwargs in kinds:
        for task, history, observation, actions in env_texts(config.env.env_id, kwargs):
            view = observation_view(observation, actions, prompt)
            calls = [tools.to_call(a) for a in (*actions, *(a for _, a in history))]
            answers = [format_call(*c) for c in calls if c is not None]
            chat = [{"role": "user", "content": user_message(task, view, prompt)}]
            for answer in answers[:2]:
                chat += [{"role": "assistant", "content": answer},
                         {"role": "tool", "content": tool_message("", view)}]
            texts += [*answers, renderer.apply_chat_template(
                chat, tools=tools.schemas, tokenize=False, add_generation_prompt=True)]
    return texts


def load_tiny_policy(config: TrainConfig, device: torch.device, *, seed: int = 0) -> Policy:
    """The smoke model of ``config``'s run (``model.name_or_path`` ``tiny``): vocabulary
    from :func:`run_texts` (and :func:`tool_texts`, with AgentGym's tool template as its
    chat template, in the ``tool-call`` format), weights from :data:`TINY_SEED`, in ``model.dtype`` on
    ``device``, LoRA and gradient checkpointing per ``config.model`` (LoRA initialised
    from ``seed``)."""
    if config.prompt.action_format == "tool-call":
        from algorithms.agent.tool_prompts import builtin_template

        template = builtin_template() if config.prompt.tool_template is None else open(
            config.prompt.tool_template, encoding="utf-8").read()
        words = text_words([*run_texts(config), *tool_texts(config)]) - {TURN_START}
        tokenizer = word_tokenizer(words, chat_template=template)
    else:
        tokenizer = word_tokenizer(text_words(run_texts(config)))
    model = tiny_llama(len(tokenizer))
    model.to(device=device, dtype=resolve_dtype(config.model.dtype, device))
    return wrap_model(model, tokenizer, config.model,
                      source=f"the tiny smoke model (a random Llama: {TINY_LAYERS} layers of "
                             f"width {TINY_HIDDEN}, {len(tokenizer)} words from "
                             f"{config.env.env_id}'s text, vocabulary "
                             f"{vocabulary_digest(tokenizer)})",
                      path="tiny", gguf_file=None, seed=seed)


def vocabulary_digest(tokenizer: Any) -> str:
    """The first 12 hex digits of the SHA-256 of a word tokenizer's vocabulary (its words
    in id order): equal exactly when two smoke models read text alike, which their
    checkpoints' identities then say (:func:`~algorithms.runs.checkpoint.check_model_identity`)."""
    import hashlib

    words = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    return hashlib.sha256("\n".join(word for word, _ in words).encode()).hexdigest()[:12]
