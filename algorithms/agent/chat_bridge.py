"""Exact tokens across the turns of a chat: each turn's prompt is the previous prompt,
plus the sampled completion, plus the new messages' tokens rendered as a suffix.

A chat agent's next prompt is usually made by rendering the whole conversation again
with the chat template and tokenizing the text. That re-tokenizes what the model sampled
(the ids it chose may not be the ones the text tokenizes to) and trusts the template to
write earlier turns as it wrote them before; neither holds in general (rLLM #352, SkyRL
#123/#244: "trajectory not accumulative"; Qwen3's template drops earlier ``<think>``
blocks: prime-rl #1334, SkyRL #410). :class:`ChatBridge` never re-tokenizes a sampled
token. For a completion ``C`` (ids as sampled) that answered a prompt ``P`` (ids, and the
text they stand for) and the new messages ``M`` (the env's tool message), it renders the
chat with the assistant's answer (its text as decoded) and ``M``, generation prompt on::

    B = render(chat + [assistant] + M)

and, when ``B`` starts with ``P``'s text followed by the completion's text (and its end
token, when it ended on one) -- the template *extends* the earlier render -- the next
prompt is ::

    P ids + C ids + tokens(the rest of B + response prefix)

where the rest of ``B`` is the assistant turn's end (``<|im_end|>\n``; only its newline
when the completion stopped on EOS and so holds ``<|im_end|>``; all of it when a stop
string or ``max_new_tokens`` cut the completion), the new messages and the generation
prompt. Then the bridged prompt's text equals a full re-render of the chat
(:meth:`ChatBridge.render`), and its ids differ from tokenizing that text only where the
sampled ids are not the text's own tokenization -- which is the point.

**Templates that rewrite earlier turns** (``B`` does not start with the earlier prompt
and the completion): Qwen3 with thinking off opens the answer with an empty
``<think></think>`` in the generation prompt but writes it before the *last* assistant
turn only, so the turn loses it once a tool message follows; Llama 3.x trims an
assistant turn's whitespace; any template may rewrite an answer whose text is not in its
canonical form (Qwen3's ``<think>`` newlines). The policy (``prompt.bridge_rewrite``):

``keep`` (default)  keep every token as sampled -- the model is trained on the context it
                    saw -- and render the new messages as a suffix: a stand-in chat (the
                    system message if any, a user turn, an assistant turn holding a
                    marker) rendered with and without them, the difference taken after
                    the marker's end of turn. The next prompt then differs from a full
                    re-render exactly where the template rewrote.
``end``             end the trajectory there, truncated (its earlier steps stay).

A turn whose suffix cannot be rendered at all (the template raises, or even the stand-in
does not extend) ends its trajectory under either policy. Every turn is counted in
:class:`BridgeCounts` (``extended``, ``kept``, ``ended``); the rollout's metrics and each
run's log print them (``rollout/bridge_*``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

RewritePolicy = Literal["keep", "end"]
REWRITE_POLICIES: tuple[str, ...] = ("keep", "end")

_MARK = "\ue001agentgym-mark\ue002"
"""The stand-in assistant turn's text (private-use characters: no template changes them)."""
_STAND_IN_USER = "\ue001agentgym-user\ue002"

Message = Mapping[str, Any]


class ChatRenderError(ValueError):
    """The chat template cannot render the first prompt (with the env's tools)."""


@dataclass(frozen=True)
class ChatTranscript:
    """A chat and the prompt it stands for.

    Attributes:
        messages: the chat, oldest first (ending where the model answers next).
        token_ids: the prompt's ids (sampled ones as sampled).
        text: the text those ids stand for (sampled ids as the tokenizer decodes them).
    """

    messages: tuple[Message, ...]
    token_ids: tuple[int, ...]
    text: str


@dataclass
class BridgeCounts:
    """How the turns of a rollout were bridged.

    Attributes:
        extended: turns whose render extended the earlier one (the prompt equals a full
            re-render).
        kept: turns the template rewrote, bridged under ``keep`` (tokens kept as sampled,
            the suffix from the stand-in).
        ended: turns that ended their trajectory (``end``, or no suffix could be
            rendered).
    """

    extended: int = 0
    kept: int = 0
    ended: int = 0

    def add(self, kind: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)

    @property
    def turns(self) -> int:
        return self.extended + self.kept + self.ended

    @property
    def fallbacks(self) -> int:
        """Turns whose render did not extend the earlier one."""
        return self.kept + self.ended

    def line(self) -> str:
        """``bridge: N turns, N extended, N kept (rewritten), N ended``."""
        return (f"chat bridge: {self.turns} turns, {self.extended} extended the earlier render, "
                f"{self.kept} rewritten and kept, {self.ended} ended a trajectory")


@dataclass(frozen=True)
class BridgeStep:
    """One bridged turn.

    Attributes:
        transcript: the chat and prompt after the turn (``None`` when ``kind`` is
            ``ended``).
        kind: ``extended``, ``kept`` or ``ended``.
        appended: the ids added after the sampled ones (end of turn, the new messages,
            the generation prompt, the response prefix).
    """

    transcript: ChatTranscript | None
    kind: str
    appended: tuple[int, ...] = ()


@dataclass
class ChatBridge:
    """Renders a chat with the tokenizer's template (and tools) and bridges its turns.

    Args:
        tokenizer: a Hugging Face tokenizer.
        tools: the tool schemas passed to the template (``apply_chat_template(tools=)``).
        chat_template: a template to use instead of the tokenizer's own (``None``: its
            own).
        template_kwargs: extra template variables (``enable_thinking``).
        response_prefix: text that opens every answer (part of the prompt).
        end_ids: ids that end a turn when sampled last (EOS and the like): the template's
            end-of-turn text starts with them.
        rewrite: the policy for templates that rewrite earlier turns (module docstring).
    """

    tokenizer: Any
    tools: Sequence[Mapping[str, Any]] | None = None
    chat_template: str | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    response_prefix: str = ""
    end_ids: Iterable[int] = ()
    rewrite: RewritePolicy = "keep"

    def __post_init__(self) -> None:
        if self.rewrite not in REWRITE_POLICIES:
            raise ValueError(f"unknown rewrite policy {self.rewrite!r} "
                             f"({', '.join(REWRITE_POLICIES)})")
        ends = set(int(i) for i in self.end_ids)
        if not ends and getattr(self.tokenizer, "eos_token_id", None) is not None:
            ends = {int(self.tokenizer.eos_token_id)}
        self.end_ids = frozenset(ends)

    # ------------------------------------------------------------------ rendering
    def render(self, messages: Sequence[Message], *, generation_prompt: bool) -> str:
        """The template's text of ``messages`` (with the tools)."""
        kwargs: dict[str, Any] = dict(self.template_kwargs)
        if self.tools:
            kwargs["tools"] = list(self.tools)
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False,
            add_generation_prompt=generation_prompt, **kwargs)

    def encode(self, text: str) -> tuple[int, ...]:
        """Ids of ``text`` as it is (no special tokens added)."""
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def start(self, messages: Sequence[Message]) -> ChatTranscript:
        """The first prompt: ``messages`` rendered with the generation prompt, then the
        response prefix, tokenized.

        Raises:
            ChatRenderError: the template raised.
        """
        try:
            text = self.render(messages, generation_prompt=True) + self.response_prefix
        except Exception as error:  # noqa: BLE001 - the template's own error, said in one line
            raise ChatRenderError(f"the chat template cannot render the prompt: "
                                  f"{type(error).__name__}: {error}") from None
        return ChatTranscript(tuple(messages), self.encode(text), text)

    def answer_text(self, completion_ids: Sequence[int]) -> tuple[str, str]:
        """``(content, end)`` of a completion: the assistant message's text (the response
        prefix and the decoded ids before a final end token) and that end token's text
        (``""`` when the completion did not end on one)."""
        ids = list(completion_ids)
        end = ""
        if ids and ids[-1] in self.end_ids:
            end = self.tokenizer.decode(ids[-1:], skip_special_tokens=False)
            ids = ids[:-1]
        body = self.tokenizer.decode(ids, skip_special_tokens=False) if ids else ""
        return self.response_prefix + body, end

    def extend(self, transcript: ChatTranscript, completion_ids: Sequence[int],
               new_messages: Sequence[Message]) -> BridgeStep:
        """The prompt after the model answered ``transcript`` with ``completion_ids`` and
        the env replied with ``new_messages`` (module docstring). Never raises on what
        the template does with them: a render that fails ends the trajectory."""
        content, end = self.answer_text(completion_ids)
        sampled = content[len(self.response_prefix):]
        assistant = {"role": "assistant", "content": content}
        after = (*transcript.messages, assistant, *map(dict, new_messages))
        kind, tail = "extended", None
        try:
            after_text = self.render(after, generation_prompt=True)
        except Exception:  # noqa: BLE001 - counted; the trajectory ends
            return BridgeStep(None, "ended")
        head = transcript.text + sampled + end
        if after_text.startswith(head):
            tail = after_text[len(head):]
        if tail is None:
            kind = "kept"
            if self.rewrite == "end":
                return BridgeStep(None, "ended")
            tail = self._stand_in_tail(transcript.messages, new_messages, end)
            if tail is None:
                return BridgeStep(None, "ended")
        tail += self.response_prefix
        appended = self.encode(tail)
        text = transcript.text + sampled + end + tail
        ids = tuple(transcript.token_ids) + tuple(int(i) for i in completion_ids) + appended
        return BridgeStep(ChatTranscript(after, ids, text), kind, appended)

    def _stand_in_tail(self, messages: Sequence[Message], new_messages: Sequence[Message],
                       end: str) -> str | None:
        """The end of an assistant turn and the new messages, as the template writes them
        after a stand-in chat, or ``None`` when even that does not extend."""
        system = [dict(m) for m in messages[:1] if m.get("role") == "system"]
        stand_in = [*system, {"role": "user", "content": _STAND_IN_USER},
                    {"role": "assistant", "content": _MARK}]
        try:
            before = self.render(stand_in, generation_prompt=False)
            after = self.render([*stand_in, *map(dict, new_messages)], generation_prompt=True)
        except Exception:  # noqa: BLE001
            return None
        if before.count(_MARK) != 1 or after.count(_MARK) != 1:
            return None
        turn_end = before[before.index(_MARK) + len(_MARK):]
        rest = after[after.index(_MARK) + len(_MARK):]
        if not rest.startswith(turn_end):
            return None
        return _after_end(turn_end, end) + rest[len(turn_end):]


def _after_end(turn_end: str, end: str) -> str:
    """The template's end-of-turn text less the end token the completion already holds
    (all of it when the completion holds none, or another one)."""
    return turn_end[len(end):] if end and turn_end.startswith(end) else turn_end
