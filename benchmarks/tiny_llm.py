"""A small causal LM for fast studies on a CPU: a random Llama and a word-level tokenizer.

The tokenizer's vocabulary is built in-process from texts (an env's observations, tasks and
actions, and the prompt's own words), so nothing is downloaded and one token is one word:
prompts of a few hundred words stay a few hundred tokens, and a model of hidden 64 and
2 layers (80-91 k weights with the study's vocabularies) runs a rollout step in
milliseconds. Words outside the vocabulary become ``[UNK]``.

Why here (``benchmarks/``) and not in ``algorithms/``: the library's users train real
models (``--model.name-or-path``); this model exists to measure estimators quickly
(``benchmarks/credit_assignment.py``) and is the same recipe as the tests' tiny model
(``tests/algorithms/tiny.py``). Tests may import benchmarks, never the reverse.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from algorithms.config import ModelConfig
from algorithms.training.policy import Policy, wrap_model

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[EOS]")
TAG_PATTERN = r"</?[a-z]+>"


def word_tokenizer(texts: Iterable[str], *, split_tags: bool = True):
    """A whitespace-split word-level tokenizer over the words of ``texts``.

    Ids: the special tokens first (``[PAD]`` 0, ``[UNK]`` 1, ``[EOS]`` 2), then the sorted
    distinct words. Decoding joins tokens with spaces. With ``split_tags`` ``<tag>`` and
    ``</tag>`` are cut off the words they touch (``go north</action>`` is three tokens), as
    answers are written without spaces around their tags; the tags join the vocabulary.
    """
    import re

    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words: set[str] = set()
    for text in texts:
        if split_tags:
            text = re.sub(TAG_PATTERN, lambda m: f" {m.group(0)} ", text)
        words.update(text.split())
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for word in sorted(words):
        vocab.setdefault(word, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if split_tags:
        core.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(TAG_PATTERN), behavior="isolated")])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]",
                                   unk_token="[UNK]", eos_token="[EOS]")


def tiny_llama(vocab_size: int, *, seed: int = 0, hidden: int = 64, layers: int = 2,
               max_positions: int = 2048):
    """A randomly initialised Llama (deterministic for ``seed``): ``layers`` layers of
    width ``hidden``, MLP ``2 * hidden``, 4 heads (2 key-value heads), tied embeddings."""
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


def tiny_policy(texts: Iterable[str], *, seed: int = 0, hidden: int = 64, layers: int = 2,
                model_config: ModelConfig | None = None) -> Policy:
    """:func:`tiny_llama` over :func:`word_tokenizer` of ``texts``, wrapped like a loaded
    policy (LoRA per ``model_config``; default: full weights)."""
    tokenizer = word_tokenizer(texts)
    model = tiny_llama(len(tokenizer), seed=seed, hidden=hidden, layers=layers)
    return wrap_model(model, tokenizer, model_config or ModelConfig(lora_rank=0),
                      source=f"tiny Llama (hidden {hidden}, {layers} layers, "
                             f"{len(tokenizer)} words)",
                      path="tiny", gguf_file=None)
