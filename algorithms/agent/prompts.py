"""Per-step prompts: task, a short history, the current observation, the admissible actions.

Each agent step is a fresh single-turn prompt (not a growing chat), as in GiGPO
(Feng et al. 2025, App. C): one user message holding the task, the last ``k``
(observation, action) pairs, the current observation, the admissible actions when the env
provides them, and the answer format. The wording is ours.

A prompt longer than :attr:`~algorithms.config.PromptConfig.max_prompt_tokens` loses its
oldest history pairs first; if the prompt is still too long with no history, the start of
the current observation is cut (the end, usually the newest text, stays); if even the
empty observation leaves it too long, the admissible-action list loses its tail (the
prompt says how many were left out) and the observation gets what room is left. Every cut
is reported in :class:`BuiltPrompt` so the rollout can count it. Only a task and answer
format that alone exceed the budget raise :class:`PromptTooLongError`.

Users who need a paper's exact prompt give their own wording as a template file
(``--prompt.template PATH``) with the named placeholders of
:data:`~algorithms.templates.TEMPLATE_PLACEHOLDERS` (:mod:`algorithms.templates`).
The message is wrapped in the tokenizer's chat template unless
``--prompt.no-chat-template`` asks for the raw text (base models).

Images (visual envs, vision-language policies). The current observation's image goes
where ``prompt.image_position`` says -- right before the observation's text (verl-agent's
Sokoban prompt) or at the very start of the message (its Gym Cards prompts) -- or where a
template's ``{image}`` placeholder stands. As in verl-agent's rollout
(``agent_system/multi_turn_rollout/rollout_loop.py``), the message with a mark at the
image's place is wrapped in the chat template as plain text, then the mark is replaced
by ``<|vision_start|>``, the image's tokens and ``<|vision_end|>``
(:meth:`~algorithms.engines.vision.VisionProcessor.placeholder`), and the whole is
tokenized. Earlier steps' images are never shown: the history holds their text
observations and actions, as for text envs. The image tokens count against
``max_prompt_tokens``; an image is never cut.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from algorithms.templates import load_template, render_template

if TYPE_CHECKING:  # only annotations
    from algorithms.config import PromptConfig

_CUT_MARK = "[...] "
IMAGE_MARK = "\ue000image\ue000"
"""Where an image stands in a message until it is replaced by the image's tokens (two
private-use characters no tokenizer is asked to read)."""


class PromptTooLongError(ValueError):
    """Not even the task and the answer format fit in ``max_prompt_tokens``."""


@dataclass(frozen=True)
class BuiltPrompt:
    """A tokenized prompt and what was cut to make it fit.

    Attributes:
        token_ids: the prompt's token ids (chat template applied, generation prompt added).
        text: the prompt text the ids encode.
        history_used: (observation, action) pairs kept.
        history_dropped: pairs dropped for length.
        observation_chars_cut: characters cut from the start of the current observation.
        actions_dropped: admissible actions left out of the list (its tail).
        images: the (H, W, 3) uint8 images the prompt shows, in order (``()``: none).
    """

    token_ids: tuple[int, ...]
    text: str
    history_used: int
    history_dropped: int
    observation_chars_cut: int
    actions_dropped: int = 0
    images: tuple[np.ndarray, ...] = ()

    @property
    def was_cut(self) -> bool:
        """Whether anything was cut to fit the token budget."""
        return (self.history_dropped > 0 or self.observation_chars_cut > 0
                or self.actions_dropped > 0)


def answer_instruction(config: PromptConfig) -> str:
    """The sentence telling the model how to answer."""
    if config.env_style != "default":  # the env's own action tags, as it declares them
        from agentgym.registration import tag_actions

        reason = "First reason step by step inside <think> </think>. " if config.think else ""
        return f"{reason}Then {tag_actions(config.env_style).usage}."
    if not config.action_tag:
        return "Reply with the next action only."
    tag = config.action_tag
    if config.think:
        return (
            "First reason briefly about what to do inside <think> </think>, then give "
            f"exactly one action inside <{tag}> </{tag}>."
        )
    return f"Give exactly one action inside <{tag}> </{tag}>."


def render_user_message(
    task: str,
    history: Sequence[tuple[str, str]],
    observation: str,
    admissible_actions: Sequence[str],
    config: PromptConfig,
    *,
    actions_omitted: int = 0,
    image: str = "",
) -> str:
    """The user message of one step.

    Args:
        task: the env's instruction.
        history: (observation, action) pairs, oldest first, already windowed.
        observation: the current observation.
        admissible_actions: actions the env accepts now (``()`` when free-form).
        config: prompt settings.
        actions_omitted: admissible actions cut from the list for length (said in the
            message).
        image: the current observation's image as it is written in the message (a mark
            the prompt builder replaces with the image's tokens; ``""``: no image), put
            where ``config.image_position`` says.

    Returns:
        The message text.
    """
    if image and config.image_position == "start":
        return image + render_user_message(task, history, observation, admissible_actions,
                                           config, actions_omitted=actions_omitted)
    parts = [f"You are an agent solving a task in a text world.\nYour task: {task.strip()}"]
    if history:
        lines = [f"Your last {len(history)} step(s), oldest first:"]
        for number, (past_observation, past_action) in enumerate(history, start=1):
            lines.append(f"[{number}] You saw: {past_observation.strip()}")
            lines.append(f"[{number}] You did: {past_action.strip()}")
        parts.append("\n".join(lines))
    shown = observation.strip()
    if image:
        shown = image + (f"\n{shown}" if shown else "")
    parts.append(f"Now you see: {shown}")
    if config.show_admissible_actions and (admissible_actions or actions_omitted):
        more = f"{actions_omitted} more not shown" if actions_omitted else ""
        if config.action_list == "lines":
            parts.append("Choose one action from this list:\n"
                         + "\n".join([*admissible_actions, *([f"({more})"] if more else [])]))
        else:
            listed = ", ".join(admissible_actions)
            if more:
                listed += f"{', ' if listed else ''}and {more}"
            parts.append("Actions you can take now: " + listed + ".")
    parts.append(answer_instruction(config))
    return "\n\n".join(parts)


class PromptBuilder:
    """Tokenizes per-step prompts within a token budget.

    The message is our wording or ``config.template``'s. It is wrapped in the tokenizer's
    chat template when it has one (else a plain ``"User: ...\\nAssistant:"`` layout),
    or sent as raw text with ``config.chat_template`` off.
    The prompt ends with :attr:`~algorithms.config.PromptConfig.response_prefix`
    (prompt tokens: never trained). Images are written as the module docstring says.

    Args:
        tokenizer: a Hugging Face tokenizer.
        config: prompt settings.
        vision: a vision-language policy's :class:`~algorithms.engines.vision.VisionProcessor`
            (the image tokens' count and text); ``None`` for a text policy, which cannot
            be shown images.
    """

    def __init__(self, tokenizer: Any, config: PromptConfig, vision: Any = None):
        self.tokenizer = tokenizer
        self.config = config
        self.vision = vision
        self.template = load_template(config.template) if config.template else None
        self._placeholders: tuple[str, ...] = ()
        self._info: Mapping[str, Any] = {}

    def _message(self, task: str, pairs: Sequence[tuple[str, str]], first_step: int,
                 observation: str, admissible_actions: Sequence[str], step_count: int,
                 actions_omitted: int = 0) -> str:
        image = IMAGE_MARK if self._placeholders else ""
        if self.template is None:
            return render_user_message(task, pairs, observation, admissible_actions,
                                       self.config, actions_omitted=actions_omitted,
                                       image=image)
        placed = "{image}" in self.template
        if image and not placed and self.config.image_position == "observation":
            observation = image + (f"\n{observation.strip()}" if observation.strip() else "")
        message = render_template(self.template, task=task, history=pairs,
                                  first_step=first_step, observation=observation,
                                  admissible_actions=admissible_actions,
                                  step_count=step_count, config=self.config,
                                  image=image if placed else "", info=self._info)
        if image and not placed and self.config.image_position == "start":
            message = image + message
        return message

    def encode_text(self, text: str) -> tuple[int, ...]:
        """Token ids of ``text`` as it is, no special tokens (env text appended to a
        transcript)."""
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _encode(self, message: str) -> tuple[str, list[int]]:
        if not self.config.chat_template:
            text = message
        elif getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": message}],
                tokenize=False,
                add_generation_prompt=True,
            )
        else:
            text = f"User: {message}\nAssistant:"
        text += self.config.response_prefix
        if self._placeholders:
            pieces = text.split(IMAGE_MARK)
            if len(pieces) != len(self._placeholders) + 1:
                raise ValueError(f"the prompt shows {len(pieces) - 1} image places for "
                                 f"{len(self._placeholders)} images")
            text = pieces[0] + "".join(placeholder + piece for placeholder, piece
                                       in zip(self._placeholders, pieces[1:], strict=True))
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return text, list(ids)

    def _show(self, images: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """Prepare the image tokens of ``images`` for the prompts built next."""
        images = tuple(images)
        if len(images) > 1:
            raise ValueError(f"a step's prompt shows one image (the current observation's), "
                             f"got {len(images)}")
        if not images:
            self._placeholders = ()
            return images
        if self.vision is None:
            raise ValueError("the env shows images but the policy is a text model: give a "
                             "vision-language model (--model.name-or-path, e.g. "
                             "Qwen/Qwen2.5-VL-3B-Instruct; docs/vlm.md)")
        counts = self.vision.token_counts(self.vision.encode(images))
        self._placeholders = tuple(self.vision.placeholder(count) for count in counts)
        return images

    def build(
        self,
        task: str,
        history: Sequence[tuple[str, str]],
        observation: str,
        admissible_actions: Sequence[str] = (),
        images: Sequence[np.ndarray] = (),
        info: Mapping[str, Any] | None = None,
    ) -> BuiltPrompt:
        """The prompt of one step, cut to fit ``max_prompt_tokens``.

        Args:
            task: the env's instruction.
            history: every earlier (observation, action) pair of the episode, oldest first
                (only the last ``history_window`` are considered).
            observation: the current observation (its text).
            admissible_actions: actions the env accepts now.
            images: the current observation's image, if the env shows one (at most one
                (H, W, 3) uint8 array).
            info: the env's current info, which a template's ``{info[KEY]}`` placeholders
                read (:mod:`algorithms.templates`).

        Returns:
            The :class:`BuiltPrompt`.

        Raises:
            PromptTooLongError: when even the task and the answer format, without history,
                observation or actions, do not fit.
            ValueError: images for a text policy, or more than one image; a template's
                ``{info[KEY]}`` with a key ``info`` lacks.
        """
        images = self._show(images)
        self._info = info or {}
        budget = self.config.max_prompt_tokens
        window = self.config.history_window
        pairs = list(history[-window:]) if window > 0 else []
        offered = len(pairs)
        steps = len(history)
        while True:
            message = self._message(task, pairs, steps - len(pairs) + 1, observation,
                                    admissible_actions, steps)
            text, ids = self._encode(message)
            if len(ids) <= budget:
                return BuiltPrompt(tuple(ids), text, len(pairs), offered - len(pairs), 0,
                                   images=images)
            if not pairs:
                break
            pairs = pairs[1:]
        built = self._cut_observation(task, observation, admissible_actions, offered, steps)
        return replace(built, images=images)

    def _cut_observation(
        self, task: str, observation: str, admissible_actions: Sequence[str], offered: int,
        steps: int,
    ) -> BuiltPrompt:
        budget = self.config.max_prompt_tokens
        shown = self._actions_that_fit(task, admissible_actions, steps)
        omitted = len(admissible_actions) - shown

        def attempt(keep: int) -> tuple[str, list[int]]:
            kept = _CUT_MARK + observation[len(observation) - keep:]
            return self._encode(self._message(task, [], steps + 1, kept,
                                              admissible_actions[:shown], steps,
                                              actions_omitted=omitted))

        keep = _largest_fitting(len(observation), lambda k: len(attempt(k)[1]) <= budget)
        if keep is None:
            raise PromptTooLongError(
                f"prompt does not fit in max_prompt_tokens={budget} even without history, "
                f"observation and admissible actions (task of {len(task)} characters); "
                "raise max_prompt_tokens"
            )
        text, ids = attempt(keep)
        return BuiltPrompt(tuple(ids), text, 0, offered, len(observation) - keep, omitted)

    def _actions_that_fit(self, task: str, admissible_actions: Sequence[str],
                          steps: int) -> int:
        """How many admissible actions (from the first) fit beside an empty observation."""
        budget = self.config.max_prompt_tokens
        total = len(admissible_actions)

        def fits(shown: int) -> bool:
            message = self._message(task, [], steps + 1, _CUT_MARK, admissible_actions[:shown],
                                    steps, actions_omitted=total - shown)
            return len(self._encode(message)[1]) <= budget

        if not self.config.show_admissible_actions or fits(total):
            return total
        return _largest_fitting(total - 1, fits) or 0


def _largest_fitting(high: int, fits: Any) -> int | None:
    """The largest ``k`` in ``[0, high]`` with ``fits(k)``, by bisection (``fits`` is
    monotone: true up to some ``k``, false after); ``None`` when ``fits(0)`` is false."""
    low, best = 0, None
    while low <= high:
        middle = (low + high) // 2
        if fits(middle):
            best, low = middle, middle + 1
        else:
            high = middle - 1
    return best
