"""The ``tool-call`` action format's prompts: the model's chat template rendered with the
env's tools, in both layouts (``prompt.action_format tool-call``; ``docs/tool-calls.md``).

The chat of a trajectory: one user message with the task and the first observation (our
wording, :func:`user_message`), then per step the assistant's answer as the model wrote
it (the response prefix and the sampled text) and a ``tool`` message with the env's
reply (:func:`tool_message`: the next observation, and the admissible actions when the
prompt shows them; after an answer whose call was not ``ok``, the parser's error line
first). The tools are the env's (:func:`agentgym.tools.env_tools`), the chat template the
tokenizer's own when it shows tools, else ``prompt.tool_template``'s or AgentGym's
ChatML tool template (:func:`tool_template`).

``window`` layout (:class:`ToolWindowPrompts`): each prompt is the chat of the last
``history_window`` steps, rendered afresh: the user message holds the task and the
observation at the window's start. A prompt over ``max_prompt_tokens`` loses its oldest
steps first, then the start of the observation in its user message (each cut counted);
only when not even the task fits is a step impossible (:class:`PromptTooLongError`).

``transcript`` layout (:class:`ToolTranscriptPrompts`): the first prompt as in the
window layout, then one growing chat bridged turn by turn by
:class:`~algorithms.agent.chat_bridge.ChatBridge` (the sampled ids never re-tokenized;
its counts in :attr:`ToolTranscriptPrompts.counts`); a transcript that outgrows the
budget ends its trajectory (``budget_cut``), and a turn the bridge cannot render
(``bridge_ended``) too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from agentgym.tools import EnvTools
from algorithms.agent.chat_bridge import BridgeCounts, ChatBridge, ChatTranscript
from algorithms.agent.env_slot import EnvSlot
from algorithms.agent.prompts import BuiltPrompt, PromptTooLongError
from algorithms.agent.tool_calls import ParsedTurn, call_layout, parse_tool_calls
from algorithms.config import PromptConfig

CHATML_TOOLS = "chatml_tools.jinja"
"""AgentGym's tool template (in ``algorithms/agent/chat_templates``)."""

_PROBE_TOOL = {"type": "function", "function": {
    "name": "agentgym_probe_tool", "description": "probe",
    "parameters": {"type": "object", "properties": {}, "required": []}}}
_CUT_MARK = "[...] "


def builtin_template(name: str = CHATML_TOOLS) -> str:
    """The text of one of AgentGym's chat templates."""
    return resources.files("algorithms.agent").joinpath("chat_templates", name).read_text(
        encoding="utf-8")


def shows_tools(tokenizer: Any, template: str | None = None) -> bool:
    """Whether ``template`` (``None``: the tokenizer's own) writes the tools it is given
    into the prompt (a probe tool's name appears in the render)."""
    if template is None and not getattr(tokenizer, "chat_template", None):
        return False
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}], tools=[_PROBE_TOOL], tokenize=False,
            add_generation_prompt=True, **({"chat_template": template} if template else {}))
    except Exception:  # noqa: BLE001 - a template that cannot take tools shows none
        return False
    return "agentgym_probe_tool" in text


def tool_template(tokenizer: Any, config: PromptConfig) -> tuple[str | None, str]:
    """``(template, where it comes from)``: ``prompt.tool_template``'s file, ``None`` for
    the tokenizer's own when it shows tools, else AgentGym's ChatML tool template."""
    if config.tool_template is not None:
        path = Path(config.tool_template).expanduser()
        return path.read_text(encoding="utf-8"), f"the chat template in {path}"
    if shows_tools(tokenizer):
        return None, "the tokenizer's own chat template"
    return builtin_template(), ("AgentGym's ChatML tool template (the tokenizer's own shows "
                                "no tools)")


def observation_view(observation: str, admissible_actions: Sequence[str],
                     config: PromptConfig) -> str:
    """An observation as the chat shows it: the text, then the admissible actions when
    the prompt shows them (``action_list``'s way)."""
    text = observation.strip()
    if config.show_admissible_actions and admissible_actions:
        if config.action_list == "lines":
            text += "\n\nActions you can take now:\n" + "\n".join(admissible_actions)
        else:
            text += "\n\nActions you can take now: " + ", ".join(admissible_actions) + "."
    return text


def user_message(task: str, view: str, config: PromptConfig) -> str:
    """The first message: the task, the observation (its view) and how to answer."""
    reason = ("First reason briefly inside <think> </think>, then call exactly one tool."
              if config.think else "Call exactly one tool.")
    return (f"You are an agent acting in a text environment through tools.\n"
            f"Your task: {task.strip()}\n\nYou see: {view}\n\n{reason}")


def tool_message(feedback: str, view: str) -> str:
    """The env's reply to a step: the parser's error line (when the call was not ``ok``)
    and the view of the next observation."""
    return f"{feedback}\n\n{view}" if feedback else view


class ToolChat:
    """What both layouts share: the tools, the template, the bridge and the parser.

    Args:
        tokenizer: the policy's tokenizer.
        config: the prompt settings.
        tools: the env's tools.
        end_ids: the ids that end a turn when sampled last (the engine's EOS ids).
    """

    def __init__(self, tokenizer: Any, config: PromptConfig, tools: EnvTools,
                 end_ids: Sequence[int] = ()):
        self.config = config
        self.tools = tools
        self.template, self.template_source = tool_template(tokenizer, config)
        self.layout = call_layout(self.template if self.template is not None
                                  else getattr(tokenizer, "chat_template", None))
        self.bridge = ChatBridge(tokenizer, tools.schemas, self.template,
                                 {"enable_thinking": config.think}, config.response_prefix,
                                 end_ids, config.bridge_rewrite)

    def read(self, text: str) -> ParsedTurn:
        """The turn an answer (the response prefix and the decoded response) asks for."""
        return parse_tool_calls(text, self.tools, layout=self.layout,
                                max_calls=self.config.max_tool_calls)

    def view(self, observation: str, info: Mapping[str, Any]) -> str:
        return observation_view(observation, tuple(info.get("admissible_actions", ()) or ()),
                                self.config)

    def messages(self, task: str, views: Sequence[str], answers: Sequence[str],
                 feedbacks: Sequence[str], start: int, cut: int = 0) -> list[dict[str, str]]:
        """The chat from step ``start``: the user message with ``views[start]`` (its first
        ``cut`` characters replaced by a mark), then each later step's answer and tool
        message."""
        first = views[start] if not cut else _CUT_MARK + views[start][cut:]
        chat = [{"role": "user", "content": user_message(task, first, self.config)}]
        for step in range(start, len(answers)):
            chat.append({"role": "assistant", "content": answers[step]})
            chat.append({"role": "tool", "content": tool_message(feedbacks[step],
                                                                 views[step + 1])})
        return chat


def _views(chat: ToolChat, slot: EnvSlot) -> list[str]:
    """``slot.views`` with the current observation's view in place."""
    while len(slot.views) < len(slot.history) + 1:
        slot.views.append(chat.view(slot.observation, slot.info))
    return slot.views


class ToolWindowPrompts:
    """Each prompt: the chat of the last ``history_window`` steps, rendered afresh."""

    def __init__(self, chat: ToolChat, config: PromptConfig):
        self.chat = chat
        self.config = config

    def read(self, text: str) -> ParsedTurn:
        return self.chat.read(text)

    def prompt(self, slot: EnvSlot) -> BuiltPrompt:
        if slot.image is not None:
            raise ValueError("the tool-call format does not take images (a visual env)")
        built, _ = self.build(str(slot.info.get("task", "")), _views(self.chat, slot),
                              slot.answers, slot.feedbacks)
        return built

    def build(self, task: str, views: Sequence[str], answers: Sequence[str],
              feedbacks: Sequence[str]) -> tuple[BuiltPrompt, ChatTranscript]:
        """The prompt after ``len(answers)`` steps, cut to fit (module docstring)."""
        budget = self.config.max_prompt_tokens
        steps = len(answers)
        window = min(self.config.history_window, steps) if self.config.history_window > 0 \
            else 0
        for kept in range(window, -1, -1):
            transcript = self.chat.bridge.start(
                self.chat.messages(task, views, answers, feedbacks, steps - kept))
            if len(transcript.token_ids) <= budget:
                return BuiltPrompt(transcript.token_ids, transcript.text, kept,
                                   window - kept, 0), transcript
        current = views[steps]
        low, high, best = 0, len(current), None
        while low <= high:  # the fewest characters cut from the observation's start
            middle = (low + high) // 2
            transcript = self.chat.bridge.start(
                self.chat.messages(task, views, answers, feedbacks, steps, cut=middle))
            if len(transcript.token_ids) <= budget:
                best, high = (middle, transcript), middle - 1
            else:
                low = middle + 1
        if best is None:
            raise PromptTooLongError(
                f"the tool-call prompt does not fit in max_prompt_tokens={budget} even "
                f"without history and observation (the tools' schemas and the task of "
                f"{len(task)} characters); raise max_prompt_tokens")
        cut, transcript = best
        return BuiltPrompt(transcript.token_ids, transcript.text, 0, window, cut), transcript

    def advance(self, slot: EnvSlot, prompt: BuiltPrompt, response: Sequence[int],
                finished: bool) -> None:
        del prompt, response, finished
        _views(self.chat, slot)


class ToolTranscriptPrompts:
    """The first prompt as in the window layout, then one growing chat, bridged."""

    def __init__(self, chat: ToolChat, config: PromptConfig):
        self.chat = chat
        self.first = ToolWindowPrompts(chat, config)
        self.budget = config.max_prompt_tokens
        self.counts = BridgeCounts()

    def read(self, text: str) -> ParsedTurn:
        return self.chat.read(text)

    def prompt(self, slot: EnvSlot) -> BuiltPrompt:
        if slot.image is not None:
            raise ValueError("the tool-call format does not take images (a visual env)")
        pending, slot.pending = slot.pending, None
        if pending is not None:
            return pending
        built, slot.chat = self.first.build(str(slot.info.get("task", "")),
                                            _views(self.chat, slot), (), ())
        return built

    def advance(self, slot: EnvSlot, prompt: BuiltPrompt, response: Sequence[int],
                finished: bool) -> None:
        views = _views(self.chat, slot)
        if finished and not slot.truncated:
            return
        message = {"role": "tool", "content": tool_message(slot.feedbacks[-1], views[-1])}
        step = self.chat.bridge.extend(slot.chat, response, [message])
        self.counts.add(step.kind)
        if step.transcript is None:
            slot.bridge_ended = True
            return
        slot.chat = step.transcript
        slot.pending = BuiltPrompt(step.transcript.token_ids, step.transcript.text, 0, 0, 0)
        if not finished and len(step.transcript.token_ids) > self.budget:
            slot.budget_cut = True


def tool_call_note(config: Any, tokenizer: Any) -> str:
    """What a run says about its ``tool-call`` format after naming its engine: the env's
    tools, the chat template and where it comes from, the call layout, the prompts'
    layout (``""`` in the tag format)."""
    from agentgym.tools import env_tools

    if config.prompt.action_format != "tool-call":
        return ""
    tools = env_tools(config.env.env_id, config.env.kwargs())
    chat = ToolChat(tokenizer, config.prompt, tools)
    kind = "one generic tool" if tools.generic else f"{len(tools.tools)} tools"
    return (f"; tool calls: {kind} ({', '.join(tools.names)}) in {chat.template_source}, "
            f"{chat.layout} call layout, {config.prompt.layout} layout")


END_TOKENS: tuple[str, ...] = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>")
"""Tokens that end a turn in the chat templates here (ChatML/Qwen, Llama 3.x)."""


def end_token_ids(tokenizer: Any) -> tuple[int, ...]:
    """The ids that end an assistant turn: EOS and those of :data:`END_TOKENS` the
    tokenizer has as single tokens."""
    ids = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    vocab = tokenizer.get_vocab()
    ids += [int(vocab[token]) for token in END_TOKENS if token in vocab]
    return tuple(dict.fromkeys(ids))


def tool_prompt_strategy(tokenizer: Any, config: PromptConfig, tools: EnvTools,
                         end_ids: Sequence[int] = ()) -> ToolWindowPrompts | ToolTranscriptPrompts:
    """The tool-call strategy of ``config.layout``."""
    chat = ToolChat(tokenizer, config, tools, end_ids)
    if config.layout == "transcript":
        return ToolTranscriptPrompts(chat, config)
    return ToolWindowPrompts(chat, config)
