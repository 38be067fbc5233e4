"""A tiny randomly initialised Llama and a word-level tokenizer, built in-process (no files).

Used by the learner, rollout, resume and learning tests: a forward/backward pass takes
milliseconds, so the tests exercise the real code paths without the 135M default model.
"""

from __future__ import annotations

import torch

from agentgym.scripted import DEFAULT_DOORS
from algorithms.agent.prompts import answer_instruction, render_user_message
from algorithms.config import ModelConfig, PromptConfig
from algorithms.training.policy import Policy, wrap_model

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[EOS]")

# Tiny matrices gain nothing from intra-op threads, and on a shared, loaded CPU a second
# thread made a forward pass ~10x slower (measured: 0.11 s vs 0.01 s).
torch.set_num_threads(1)


def resolve_auto_as_float32() -> None:
    """Make ``model.dtype: auto`` resolve in this process as on a CPU without bfloat16
    instructions: what ``tests/conftest.py`` does for every in-process test, for the
    scripts the tests start as subprocesses (torchrun ranks), whose tolerances are
    float32's."""
    from algorithms import precision

    precision.cpu_has_bf16 = lambda: False


def _corpus() -> str:
    rooms = " ".join(f"{i} {i}." for i in range(10))
    doors = " ".join(f"open {d} door" for d in DEFAULT_DOORS)
    sample = render_user_message(
        "Cross all 3 rooms by opening the right doors.",
        [("You are in room 1 of 3. Doors: red, green, blue.", "look")],
        "You escaped! Nothing happens. A sign says: open red door.",
        ("open red door", "look"),
        PromptConfig(),
    )
    instructions = " ".join(
        answer_instruction(PromptConfig(think=t, action_tag=a))
        for t in (True, False) for a in ("action", "")
    )
    return " ".join([rooms, doors, sample, instructions, "<action> </action> <think> </think>",
                     "You open the last door and step outside. User Assistant"])


def make_tokenizer(*, action_tokens: bool = False, extra_text: str = "",
                   split_tags: bool = False):
    """A whitespace-split word-level tokenizer over the scripted env's and the prompt's
    words (decoding joins tokens with spaces, so tags survive a round trip).

    With ``action_tokens`` every door action (``"open red door"`` ...) is one added token,
    so a one-token answer can be a whole action (the learning test). ``extra_text``'s
    words join the vocabulary (another env's words; the default vocabulary is unchanged).
    ``split_tags`` also cuts ``<tag>`` / ``</tag>`` off the words they touch, so that
    ``go north</action>`` is three tokens (text written without spaces: SFT answers).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted(set(_corpus().split()) | set(extra_text.split()))
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for word in words:
        vocab.setdefault(word, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if split_tags:
        from tokenizers import Regex

        core.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(r"</?[a-z]+>"), behavior="isolated")])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]",
                                        unk_token="[UNK]", eos_token="[EOS]")
    if action_tokens:
        tokenizer.add_tokens([f"open {door} door" for door in DEFAULT_DOORS] + ["."])
    return tokenizer


def make_model(vocab_size: int, *, seed: int = 0, hidden: int = 32, layers: int = 2):
    """A randomly initialised 2-layer Llama (deterministic for ``seed``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden,
                         intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, tie_word_embeddings=True,
                         pad_token_id=0, bos_token_id=None, eos_token_id=2)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model


def make_policy(*, seed: int = 0, model_config: ModelConfig | None = None,
                hidden: int = 32, action_tokens: bool = False, extra_text: str = "",
                split_tags: bool = False) -> Policy:
    """The tiny model and tokenizer wrapped like a loaded policy (LoRA per config)."""
    tokenizer = make_tokenizer(action_tokens=action_tokens, extra_text=extra_text,
                               split_tags=split_tags)
    model = make_model(len(tokenizer), seed=seed, hidden=hidden)
    return wrap_model(model, tokenizer, model_config or ModelConfig(), source="tiny test model",
                      path="tiny", gguf_file=None)
