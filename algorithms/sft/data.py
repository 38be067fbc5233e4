"""Expert trajectories for the SFT warm start: the JSONL format, the env expert, tokenization.

**Format** (``docs/sft.md``): one trajectory per line, a JSON object::

    {"task": "Open the door in the study.",
     "steps": [{"observation": "You are in the hall. Exits: ...",
                "admissible_actions": ["go east", "go south"],
                "action": "go east"},
               {"observation": "You are in the study. ... A door is here.",
                "admissible_actions": ["go west", "open door"],
                "action": "open door", "thought": "The door is here."}],
     "task_id": "keydoor-0003", "success": true}

``task`` and ``steps`` are required; each step needs ``observation`` (the text the agent
saw before acting: the env's raw text, as the RL prompt shows it) and ``action`` (the
text sent to the env). Optional per step: ``admissible_actions`` (list of strings, shown
as the RL prompt shows them), ``thought`` (the reasoning put inside ``<think>`` when
``prompt.think`` is on; default :func:`default_thought`), ``response`` (the whole answer
exactly as the model should write it, response prefix included; overrides ``action`` and
``thought`` for the trained text), ``info`` (an object: the env's own info keys at that
step, which a prompt template's ``{info[KEY]}`` placeholders read). Other keys
(``task_id``, ``success``, ``perturbed``,
``expert_action``, ...) are kept for reading but not used. A malformed line is refused
with its line number and what is wrong (:class:`SFTDataError`).

Visual envs: a step may have ``image``, the path of a PNG file (relative to the JSONL
file's folder) of the image the agent saw with ``observation``; the prompt shows it as the
RL rollout does (:mod:`algorithms.agent.prompts`), for a vision-language policy. Data
generated on a visual env (:func:`expert_trajectories`) are written that way, the images
in the folder ``<file stem>_images/`` beside the file (:func:`write_trajectories`).

**Tokenization** (:func:`build_examples`) reuses the RL stage's
:class:`~algorithms.agent.prompts.PromptBuilder`, so an SFT sample is exactly what the RL
rollout would have built: in the ``window`` layout one sample per step (the task, the
last ``history_window`` (observation, action) pairs, the observation, the admissible
actions; cut to ``max_prompt_tokens`` the same way), in the ``transcript`` layout one per
trajectory (the first prompt, then each response followed by the next observation and the
response prefix). The loss covers the response tokens only: the answer after the
prompt's ``response_prefix``, ending with the first stop string (``</action>``), or with
EOS when no stop strings are in effect -- where the RL engine's responses end.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.agent.env_slot import split_observation
from algorithms.agent.prompts import PromptBuilder, PromptTooLongError
from algorithms.agent.task_choice import choose_task_ids
from algorithms.config import PromptConfig, TaskOrder


class SFTDataError(ValueError):
    """A malformed line of an SFT JSONL file (the message names the line)."""


@dataclass(frozen=True)
class ExpertStep:
    """One step of a trajectory.

    Attributes:
        observation: what the agent saw before acting.
        action: the action taken (the text sent to the env).
        admissible_actions: the actions the env offered (empty: free-form).
        thought: reasoning for the ``<think>`` block (``None``: :func:`default_thought`).
        response: the whole answer to train on, or ``None`` to render it.
        image: the (H, W, 3) uint8 image the agent saw (a visual env), or ``None``.
        info: the env's own info keys when the agent saw ``observation`` (JSON values;
            the contract keys left out), for a template's ``{info[KEY]}``; ``None``: none.
    """

    observation: str
    action: str
    admissible_actions: tuple[str, ...] = ()
    thought: str | None = None
    response: str | None = None
    image: np.ndarray | None = field(default=None, compare=False, repr=False)
    info: dict[str, Any] | None = None


@dataclass(frozen=True)
class ExpertTrajectory:
    """One episode of demonstrations.

    Attributes:
        task: the instruction (``info["task"]``).
        steps: the steps in order.
        extra: the line's other keys (``task_id``, ``success``, ...), unused by training.
    """

    task: str
    steps: tuple[ExpertStep, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self, images: Sequence[str] = ()) -> dict[str, Any]:
        """The JSONL object of this trajectory (optional step keys only when set);
        ``images``: the file names of its steps' images, in step order (steps without
        one skipped), when it has any."""
        steps = []
        names = iter(images)
        for step in self.steps:
            item: dict[str, Any] = {"observation": step.observation}
            if step.image is not None:
                name = next(names, None)
                if name is None:
                    raise ValueError("a step's image needs a file name: write images with "
                                     "write_trajectories")
                item["image"] = name
            if step.admissible_actions:
                item["admissible_actions"] = list(step.admissible_actions)
            item["action"] = step.action
            for key in ("thought", "response", "info"):
                if getattr(step, key) is not None:
                    item[key] = getattr(step, key)
            steps.append(item)
        return {"task": self.task, "steps": steps, **self.extra}


_STEP_KEYS = {"observation", "action", "admissible_actions", "thought", "response", "image",
              "info"}


def read_png(path: Path) -> np.ndarray:
    """A PNG file as an (H, W, 3) uint8 array (its alpha, if any, dropped)."""
    from PIL import Image

    with Image.open(path) as picture:
        return np.asarray(picture.convert("RGB"))


def parse_trajectory(line: str, number: int, base: Path | None = None) -> ExpertTrajectory:
    """One JSONL line as a trajectory.

    Args:
        line: the line's text.
        number: its 1-based line number (for the message).
        base: the folder steps' ``image`` paths are relative to (default: the current one).

    Raises:
        SFTDataError: ``line N: <what is wrong>``.
    """
    def fail(message: str) -> SFTDataError:
        return SFTDataError(f"line {number}: {message}")

    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise fail(f"not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(record, dict):
        raise fail(f"expected a JSON object, got {type(record).__name__}")
    task = record.get("task")
    if not isinstance(task, str):
        raise fail("'task' must be a string (the instruction)")
    steps = record.get("steps")
    if not isinstance(steps, list) or not steps:
        raise fail("'steps' must be a non-empty list of step objects")
    parsed = []
    for index, step in enumerate(steps):
        where = f"steps[{index}]"
        if not isinstance(step, dict):
            raise fail(f"{where} must be an object, got {type(step).__name__}")
        for key in ("observation", "action"):
            if not isinstance(step.get(key), str):
                raise fail(f"{where}.{key} must be a string")
        actions = step.get("admissible_actions", [])
        if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
            raise fail(f"{where}.admissible_actions must be a list of strings")
        for key in ("thought", "response", "image"):
            if key in step and not isinstance(step[key], str):
                raise fail(f"{where}.{key} must be a string")
        if "info" in step and not isinstance(step["info"], dict):
            raise fail(f"{where}.info must be an object (the env's own info keys)")
        unknown = set(step) - _STEP_KEYS
        if unknown:
            raise fail(f"{where} has unknown keys {sorted(unknown)} (allowed: "
                       f"{sorted(_STEP_KEYS)})")
        image = None
        if "image" in step:
            path = (base or Path()) / step["image"]
            try:
                image = read_png(path)
            except (OSError, ValueError) as error:
                raise fail(f"{where}.image {path}: cannot read it as an image "
                           f"({error})") from None
        parsed.append(ExpertStep(observation=step["observation"], action=step["action"],
                                 admissible_actions=tuple(actions),
                                 thought=step.get("thought"), response=step.get("response"),
                                 image=image, info=step.get("info")))
    extra = {k: v for k, v in record.items() if k not in ("task", "steps")}
    return ExpertTrajectory(task=task, steps=tuple(parsed), extra=extra)


def read_trajectories(path: str | Path) -> list[ExpertTrajectory]:
    """Every trajectory of a JSONL file (blank lines skipped).

    Raises:
        FileNotFoundError: no such file.
        SFTDataError: ``<path> line N: ...`` for the first malformed line, or a file
            without any trajectory.
    """
    path = Path(path)
    trajectories = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                trajectories.append(parse_trajectory(line, number, path.parent))
            except SFTDataError as error:
                raise SFTDataError(f"{path} {error}") from None
    if not trajectories:
        raise SFTDataError(f"{path} holds no trajectory")
    return trajectories


def write_trajectories(path: str | Path, trajectories: Iterable[ExpertTrajectory]) -> int:
    """Write trajectories as JSONL (one per line); return how many. Steps' images go to
    PNG files ``<stem>_images/<trajectory>_<step>.png`` beside the file, which the lines
    name (relative to the file's folder)."""
    from agentgym.images import png_bytes

    path = Path(path)
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for trajectory in trajectories:
            names = []
            for index, step in enumerate(trajectory.steps):
                if step.image is None:
                    continue
                name = f"{path.stem}_images/{count:06d}_{index:03d}.png"
                (path.parent / name).parent.mkdir(parents=True, exist_ok=True)
                (path.parent / name).write_bytes(png_bytes(step.image))
                names.append(name)
            out.write(json.dumps(trajectory.to_json(names), ensure_ascii=False) + "\n")
            count += 1
    return count


# ---------------------------------------------------------------------- the env's expert
class NoExpertError(SFTDataError):
    """The env declares no expert (``TextEnv.expert_action``)."""


def expert_trajectories(env_id: str, env_kwargs: dict[str, Any], episodes: int, *,
                        perturb: float = 0.0, seed: int = 0, task_order: TaskOrder = "first",
                        progress: Any = None,
                        info_keys: Sequence[str] = ()) -> list[ExpertTrajectory]:
    """Play ``episodes`` episodes with the env's declared expert and record them.

    The env's tasks are played in order (cycled when ``episodes`` exceeds them), the
    first ``episodes`` of them or, with ``task_order="spread"``, ones spread evenly over
    the list (:func:`~algorithms.agent.task_choice.choose_task_ids`). At each
    step, with probability ``perturb`` (a generator seeded by ``seed``) a random
    admissible action other than the expert's is played and recorded instead
    (``"perturbed": true`` on the line; nothing happens when the env offers no other).
    An episode ends when it terminates or is truncated, or where the expert has no
    action (``None``: an open-loop plan that a perturbation left); its steps so far are
    kept.

    Args:
        env_id: a registered id (or ``"module:Env-v0"``) whose env overrides
            ``TextEnv.expert_action``.
        env_kwargs: its constructor arguments (``max_steps`` bounds each episode).
        episodes: episodes to record.
        perturb: share of perturbed steps, in [0, 1].
        seed: seed of the perturbations.
        task_order: ``"first"`` or ``"spread"``.
        progress: optional tqdm-like bar, advanced once per episode.
        info_keys: info keys to keep in each step's ``info`` (those a prompt template's
            ``{info[KEY]}`` placeholders read, :func:`algorithms.templates.info_keys`).

    Returns:
        The trajectories; ``extra`` holds ``task_id``, ``success``, ``perturbed`` (step
        indices) and ``source``.

    Raises:
        NoExpertError: the env declares no expert.
    """
    from agentgym.plain import make_text_env

    rng = np.random.default_rng(seed)
    env = make_text_env(env_id, **env_kwargs)
    try:
        task_ids = choose_task_ids(env.unwrapped.task_ids, episodes, task_order)
        trajectories = []
        for episode in range(episodes):
            task_id = task_ids[episode % len(task_ids)]
            trajectories.append(_expert_episode(env, env_id, task_id, perturb, rng,
                                                tuple(info_keys)))
            if progress is not None:
                progress.update(1)
        return trajectories
    finally:
        env.close()


def _expert_episode(env: Any, env_id: str, task_id: str, perturb: float,
                    rng: np.random.Generator, info_keys: tuple[str, ...]) -> ExpertTrajectory:
    observation, info = env.reset(options={"task_id": task_id})
    steps: list[ExpertStep] = []
    perturbed: list[int] = []
    success = False
    while True:
        try:
            expert = env.unwrapped.expert_action()
        except NotImplementedError:
            raise NoExpertError(f"{env_id} declares no expert (TextEnv.expert_action); "
                                "bring your own trajectories with --sft.data FILE.jsonl "
                                "(docs/sft.md)") from None
        if expert is None:
            break
        admissible = tuple(info.get("admissible_actions", ()) or ())
        action = expert
        others = [a for a in admissible if a != expert]
        if others and perturb > 0 and rng.random() < perturb:
            action = others[int(rng.integers(len(others)))]
            perturbed.append(len(steps))
        text, image = split_observation(observation)
        steps.append(ExpertStep(observation=text, action=action,
                                admissible_actions=admissible, image=image,
                                info=kept_info(info, info_keys)))
        observation, _, terminated, truncated, info = env.step(action)
        success = bool(info.get("success", False))
        if terminated or truncated:
            break
    if not steps:
        raise NoExpertError(f"{env_id}'s expert has no action at the start of task "
                            f"{task_id!r}")
    return ExpertTrajectory(task=str(info.get("task", "")), steps=tuple(steps),
                            extra={"task_id": task_id, "success": success,
                                   "perturbed": perturbed, "source": f"{env_id} expert"})


def kept_info(info: dict[str, Any], keys: Sequence[str]) -> dict[str, Any] | None:
    """``info``'s values at ``keys`` as JSON values (:func:`agentgym.openenv.codec.to_json`);
    ``None`` when ``keys`` is empty.

    Raises:
        SFTDataError: a key the info lacks, or a value with no JSON form.
    """
    if not keys:
        return None
    from agentgym.openenv.codec import to_json

    kept: dict[str, Any] = {}
    for key in keys:
        if key not in info:
            raise SFTDataError(f"the prompt template reads {{info[{key}]}}, but the env's info "
                               f"has no key {key!r} (its keys: {sorted(map(str, info))})")
        try:
            kept[key] = to_json(info[key])
        except TypeError as error:
            raise SFTDataError(f"info[{key!r}] cannot be kept with the SFT data: {error}") \
                from None
    return kept


# ---------------------------------------------------------------------- responses
def default_thought(task: str, action: str) -> str:
    """The templated reasoning of a step without its own ``thought``."""
    return f"My task: {task.strip()} The next step towards it is {action.strip()}."


def render_answer(task: str, step: ExpertStep, prompt: PromptConfig) -> str:
    """The whole answer the model should write for ``step`` (the response prefix
    included), in ``prompt``'s action format: ``<think>...</think><action>...</action>``,
    without the think block when ``prompt.think`` is off, the bare action when
    ``action_tag`` is empty, and for an env's tag-action format (``env_style="searchqa"``)
    the action as given (it is already a ``<search>`` / ``<answer>`` tag)."""
    if step.response is not None:
        return step.response
    thought = step.thought if step.thought is not None else default_thought(task, step.action)
    think = f"<think>{thought}</think>\n" if prompt.think else ""
    if prompt.env_style != "default":
        return think + step.action
    if not prompt.action_tag:
        return step.action
    tag = prompt.action_tag
    return f"{think}<{tag}>{step.action}</{tag}>"


@dataclass(frozen=True)
class SFTExample:
    """One training sequence: prompt and response tokens, the loss on the responses.

    Attributes:
        input_ids: (L,) the token ids.
        loss_mask: (L,) 1 on the response tokens that the loss covers, else 0.
        images: the (H, W, 3) uint8 images the prompt shows (a visual env's step).
    """

    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    images: tuple[np.ndarray, ...] = field(default=(), compare=False, repr=False)

    @property
    def response_tokens(self) -> int:
        return int(sum(self.loss_mask))


@dataclass
class ExampleStats:
    """What :func:`build_examples` had to cut or skip (never silently).

    Attributes:
        steps: steps tokenized.
        prompts_cut: prompts cut to fit ``max_prompt_tokens`` (history, observation).
        responses_cut: responses longer than ``max_new_tokens``, cut there.
        steps_dropped: steps left out because not even the task fitted in the prompt,
            or a transcript outgrew ``max_prompt_tokens``: the trajectory's later steps
            (the RL rollout ends such a trajectory there).
    """

    steps: int = 0
    prompts_cut: int = 0
    responses_cut: int = 0
    steps_dropped: int = 0


def response_ids(tokenizer: Any, answer: str, prompt: PromptConfig,
                 stop: Sequence[str], max_new_tokens: int) -> tuple[list[int], bool]:
    """The response token ids of a whole ``answer``: the text after the response prefix,
    ended by EOS when no stop strings are in effect, cut to ``max_new_tokens``.

    Returns:
        ``(ids, cut)``.

    Raises:
        ValueError: the answer does not start with ``prompt.response_prefix``.
    """
    prefix = prompt.response_prefix
    if not answer.startswith(prefix):
        raise ValueError(f"the answer {answer[:60]!r} does not start with the prompt's "
                         f"response_prefix {prefix!r}")
    ids = list(tokenizer(answer[len(prefix):], add_special_tokens=False)["input_ids"])
    if not stop and tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    cut = len(ids) > max_new_tokens
    return ids[:max_new_tokens], cut


def build_examples(trajectories: Sequence[ExpertTrajectory], tokenizer: Any,
                   prompt: PromptConfig, *, stop: Sequence[str], max_new_tokens: int,
                   vision: Any = None, tools: Any = None) -> tuple[list[SFTExample],
                                                                   ExampleStats]:
    """Tokenize trajectories in the RL stage's prompt layout (module docstring).

    Args:
        trajectories: the demonstrations.
        tokenizer: the policy's tokenizer.
        prompt: the RL stage's prompt settings (layout, template, chat template, prefix).
        stop: the stop strings in effect (``TrainConfig.stop_strings``).
        max_new_tokens: longest response.
        vision: a vision-language policy's
            :class:`~algorithms.engines.vision.VisionProcessor`: steps with an image show
            it in their prompts, as the RL rollout's do (``None``: a text policy).
        tools: the env's :class:`~agentgym.tools.EnvTools` in the ``tool-call`` action
            format (:func:`build_tool_examples`; ``None``: the generic tool).

    Returns:
        ``(examples, stats)``: one example per step (``window``) or per trajectory
        (``transcript``).

    Raises:
        SFTDataError: an answer that does not start with the response prefix (naming the
            trajectory and step), or steps with images in the transcript layout or for a
            text policy.
    """
    if prompt.action_format == "tool-call":
        from agentgym.tools import generic_tools

        return build_tool_examples(trajectories, tokenizer, prompt, tools or generic_tools(),
                                   stop=stop, max_new_tokens=max_new_tokens)
    builder = PromptBuilder(tokenizer, prompt, vision)
    stats = ExampleStats()
    examples: list[SFTExample] = []
    transcript = prompt.layout == "transcript"
    opener = list(builder.encode_text(prompt.response_prefix)) if prompt.response_prefix \
        else []
    for number, trajectory in enumerate(trajectories):
        ids: list[int] = []
        mask: list[int] = []
        history: list[tuple[str, str]] = []
        for index, step in enumerate(trajectory.steps):
            try:
                answer = response_ids(tokenizer, render_answer(trajectory.task, step, prompt),
                                      prompt, stop, max_new_tokens)
            except ValueError as error:
                raise SFTDataError(f"trajectory {number} step {index}: {error}") from None
            if step.image is not None and (transcript or vision is None):
                raise SFTDataError(
                    f"trajectory {number} step {index} has an image: " + (
                        "the transcript layout does not take images" if transcript else
                        "the policy is a text model (give a vision-language model)"))
            if transcript and index > 0:
                env_text = list(builder.encode_text(step.observation))
                if prompt.max_observation_tokens is not None and \
                        len(env_text) > prompt.max_observation_tokens:
                    env_text = env_text[:prompt.max_observation_tokens]
                    stats.prompts_cut += 1
                context = env_text + opener
                if len(ids) + len(context) > prompt.max_prompt_tokens:
                    stats.steps_dropped += len(trajectory.steps) - index
                    break
            else:
                try:
                    built = builder.build(trajectory.task, history, step.observation,
                                          step.admissible_actions,
                                          images=() if step.image is None else (step.image,),
                                          info=step.info)
                except PromptTooLongError:  # the RL rollout ends such a trajectory
                    stats.steps_dropped += len(trajectory.steps) - index
                    break
                stats.prompts_cut += int(built.was_cut)
                context = list(built.token_ids)
            stats.steps += 1
            stats.responses_cut += int(answer[1])
            if not transcript:
                ids, mask = [], []
            ids += context + answer[0]
            mask += [0] * len(context) + [1] * len(answer[0])
            history.append((step.observation, step.action))
            if not transcript:
                examples.append(SFTExample(tuple(ids), tuple(mask),
                                           images=() if step.image is None else (step.image,)))
        if transcript and any(mask):
            examples.append(SFTExample(tuple(ids), tuple(mask)))
    return examples, stats


def tool_answer(task: str, step: ExpertStep, prompt: PromptConfig, tools: Any,
                layout: str) -> str:
    """The whole answer the model should write for ``step`` in the ``tool-call`` format
    (the response prefix included): the ``<think>`` block when ``prompt.think`` is on, then
    the expert's action written as the call that writes it (:meth:`~agentgym.tools.EnvTools.to_call`,
    :func:`~algorithms.agent.tool_calls.format_call`); ``step.response`` when given.

    Raises:
        ValueError: no tool writes the action.
    """
    from algorithms.agent.tool_calls import format_call

    if step.response is not None:
        return step.response
    call = tools.to_call(step.action)
    if call is None:
        raise ValueError(f"no tool of the env ({', '.join(tools.names)}) writes the action "
                         f"{step.action[:60]!r}")
    thought = step.thought if step.thought is not None else default_thought(task, step.action)
    think = f"<think>{thought}</think>\n" if prompt.think else ""
    return think + format_call(*call, layout=layout)


def build_tool_examples(trajectories: Sequence[ExpertTrajectory], tokenizer: Any,
                        prompt: PromptConfig, tools: Any, *, stop: Sequence[str],
                        max_new_tokens: int) -> tuple[list[SFTExample], ExampleStats]:
    """:func:`build_examples` in the ``tool-call`` action format: the prompts the RL
    rollout's tool-call strategies build (:mod:`algorithms.agent.tool_prompts`), the
    expert's actions written as tool calls (:func:`tool_answer`). ``window``: one sample per
    step; ``transcript``: one per trajectory, its turns bridged by the chat bridge as the
    rollout bridges them (a turn the bridge ends drops the trajectory's later steps)."""
    from algorithms.agent.tool_prompts import (
        ToolChat,
        ToolWindowPrompts,
        end_token_ids,
        observation_view,
        tool_message,
    )

    chat = ToolChat(tokenizer, prompt, tools, end_token_ids(tokenizer))
    window = ToolWindowPrompts(chat, prompt)
    stats = ExampleStats()
    examples: list[SFTExample] = []
    transcript_layout = prompt.layout == "transcript"
    for number, trajectory in enumerate(trajectories):
        views: list[str] = []
        answers: list[str] = []
        ids: list[int] = []
        mask: list[int] = []
        last: list[int] = []
        transcript = None
        for index, step in enumerate(trajectory.steps):
            views.append(observation_view(step.observation, step.admissible_actions, prompt))
            try:
                answer = tool_answer(trajectory.task, step, prompt, tools, chat.layout)
                response, cut = response_ids(tokenizer, answer, prompt, stop, max_new_tokens)
            except ValueError as error:
                raise SFTDataError(f"trajectory {number} step {index}: {error}") from None
            if transcript_layout and transcript is not None:
                bridged = chat.bridge.extend(transcript, last, [{"role": "tool",
                                                                 "content": tool_message(
                                                                     "", views[-1])}])
                if bridged.transcript is None or \
                        len(bridged.transcript.token_ids) > prompt.max_prompt_tokens:
                    stats.steps_dropped += len(trajectory.steps) - index
                    break
                transcript = bridged.transcript
                ids += list(bridged.appended)
                mask += [0] * len(bridged.appended)
            else:
                try:
                    built, transcript = window.build(trajectory.task, views, answers,
                                                     [""] * len(answers))
                except PromptTooLongError:
                    stats.steps_dropped += len(trajectory.steps) - index
                    break
                stats.prompts_cut += int(built.was_cut)
                ids, mask = list(built.token_ids), [0] * len(built.token_ids)
            stats.steps += 1
            stats.responses_cut += int(cut)
            last = list(response)
            ids += last
            mask += [1] * len(last)
            answers.append(answer)
            if not transcript_layout:
                examples.append(SFTExample(tuple(ids), tuple(mask)))
        if transcript_layout and any(mask):
            examples.append(SFTExample(tuple(ids), tuple(mask)))
    return examples, stats
