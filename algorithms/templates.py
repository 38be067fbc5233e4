"""User prompt templates (``--prompt.template PATH``): the placeholders a template may
use, reading and checking a template file, and filling one in.

Apart from :mod:`algorithms.agent.prompts` because the config checks a template before anything
loads (:meth:`~algorithms.config.TrainConfig.validate`): this module sits below both.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only annotations: config validation imports this module
    from algorithms.config import PromptConfig


TEMPLATE_PLACEHOLDERS: dict[str, str] = {
    "task": "the env's instruction (its info['task'])",
    "observation": "the current observation (in the transcript layout: the first one)",
    "admissible_actions": "the actions the env accepts now, comma-separated (empty when the "
                          "env is free-form or prompt.show_admissible_actions is off)",
    "history": "the window's (observation, action) pairs, oldest first, one line each: "
               "[Observation j: 'text', Action j: 'text'] with j the step number "
               "(empty on the first step and in the transcript layout)",
    "step_count": "steps taken so far (0 on the first step)",
    "current_step": "the number of this step, step_count + 1",
    "history_length": "how many pairs {history} holds",
    "image": "where a visual env's image goes (replaced by the image's tokens; empty for "
             "text envs; without it the image goes where prompt.image_position says)",
    "info[KEY]": "the current info's value at KEY, an env's own key (e.g. EZPoints' "
                 "{info[Formula]}), as text: a list or tuple is its items' texts joined "
                 "with nothing between (as verl-agent's EZPoints prompt writes the formula)",
}
"""The placeholders a prompt template may use, with what each is replaced by."""

_INFO_FIELD = re.compile(r"info\[([^\[\]]+)\]")
"""An ``{info[KEY]}`` placeholder's field name."""


def load_template(path: str | Path) -> str:
    """Read a prompt template and check its placeholders.

    A template is plain text with ``{name}`` placeholders from
    :data:`TEMPLATE_PLACEHOLDERS` (``{{`` and ``}}`` stand for literal braces).

    Args:
        path: the template file (UTF-8).

    Returns:
        The template text.

    Raises:
        OSError: the file cannot be read.
        ValueError: a placeholder is unknown, positional, or has a format spec or a
            conversion, or a brace is unmatched; the message names the known placeholders.
    """
    text = Path(path).expanduser().read_text(encoding="utf-8")
    known = ", ".join(f"{{{name}}}" for name in TEMPLATE_PLACEHOLDERS)
    try:
        fields = [(name, spec, conversion)
                  for _, name, spec, conversion in string.Formatter().parse(text)
                  if name is not None]
    except ValueError as error:
        raise ValueError(f"template {path}: {error} (write {{{{ and }}}} for literal "
                         f"braces); known placeholders: {known}") from None
    for name, spec, conversion in fields:
        if name not in TEMPLATE_PLACEHOLDERS and not _INFO_FIELD.fullmatch(name):
            raise ValueError(f"template {path}: unknown placeholder {{{name}}}; known "
                             f"placeholders: {known}")
        if spec or conversion:
            raise ValueError(f"template {path}: placeholder {{{name}}} may not carry a "
                             "format spec or conversion")
    return text


def info_keys(template: str) -> tuple[str, ...]:
    """The info keys a template's ``{info[KEY]}`` placeholders read, in order of first use."""
    keys: list[str] = []
    for _, name, _, _ in string.Formatter().parse(template):
        match = _INFO_FIELD.fullmatch(name or "")
        if match and match.group(1) not in keys:
            keys.append(match.group(1))
    return tuple(keys)


def template_info_keys(config: PromptConfig) -> tuple[str, ...]:
    """The info keys ``config.template``'s ``{info[KEY]}`` placeholders read (none without
    a template)."""
    return info_keys(load_template(config.template)) if config.template else ()


def info_text(value: Any) -> str:
    """An info value as ``{info[KEY]}`` writes it: a list or tuple is its items' texts
    joined with nothing between (``[4, "+"]`` -> ``"4+"``), anything else ``str(value)``."""
    if isinstance(value, (list, tuple)):
        return "".join(str(item) for item in value)
    return str(value)


def render_template(template: str, *, task: str, history: Sequence[tuple[str, str]],
                    first_step: int, observation: str, admissible_actions: Sequence[str],
                    step_count: int, config: PromptConfig, image: str = "",
                    info: Mapping[str, Any] | None = None) -> str:
    """The user message from a template checked by :func:`load_template`.

    Args:
        template: the template text.
        task: the env's instruction.
        history: (observation, action) pairs, oldest first, already windowed.
        first_step: the step number (1-based) of ``history[0]``.
        observation: the current observation.
        admissible_actions: actions the env accepts now.
        step_count: steps taken so far.
        config: prompt settings (``show_admissible_actions``).
        image: what ``{image}`` becomes (the prompt builder's mark for the image, or ``""``).
        info: the env's current info, for ``{info[KEY]}`` placeholders.

    Raises:
        ValueError: an ``{info[KEY]}`` whose key the info lacks (one line naming it).
    """
    needed = info_keys(template)
    info = info or {}
    missing = [key for key in needed if key not in info]
    if missing:
        raise ValueError(f"the prompt template reads {{info[{missing[0]}]}}, but the env's info "
                         f"has no key {missing[0]!r} (its keys: {sorted(map(str, info))})")
    lines = [f"[Observation {first_step + i}: '{past.strip()}', Action {first_step + i}: "
             f"'{action.strip()}']" for i, (past, action) in enumerate(history)]
    actions = admissible_actions if config.show_admissible_actions else ()
    return template.format(
        task=task.strip(), observation=observation.strip(),
        admissible_actions=", ".join(actions), history="\n".join(lines),
        step_count=step_count, current_step=step_count + 1, history_length=len(history),
        image=image, info=_format_keys({key: info_text(info[key]) for key in needed}))


def _format_keys(values: dict[str, str]) -> dict[Any, str]:
    """``values`` as ``str.format`` looks them up: ``{info[7]}`` asks for the int 7."""
    return {**values, **{int(key): text for key, text in values.items() if key.isdigit()}}
