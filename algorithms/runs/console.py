"""What a run prints, and how: progress bars on a terminal, plain lines in a log file.

Free of torch (``train.py`` may use it before the training stack is imported).
"""

from __future__ import annotations

import functools
import sys
from typing import Any


def on_terminal() -> bool:
    """Whether stdout and stderr are both terminals (an interactive run). Under a batch
    scheduler, with ``> log 2>&1``, or piped, they are not: progress bars would write
    every redraw into the file, so plain lines stand in for them."""
    return all(stream is not None and hasattr(stream, "isatty") and stream.isatty()
               for stream in (sys.stdout, sys.stderr))


def progress_bar(show: bool, **kwargs: Any) -> Any:
    """A tqdm progress bar (``kwargs`` are tqdm's), disabled when not ``show``."""
    from tqdm.auto import tqdm

    return tqdm(disable=not show, dynamic_ncols=True, **kwargs)


def quiet_dependency_bars() -> None:
    """Turn off the progress bars of transformers ("Loading weights", writing shards, and
    the default model's GGUF conversion, a bare ``tqdm`` outside transformers' switch) and
    of huggingface_hub (downloads), where they are installed."""
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:
        pass
    else:
        transformers_logging.disable_progress_bar()
        import transformers.modeling_gguf_pytorch_utils as gguf_loading

        bar = getattr(gguf_loading, "tqdm", None)
        if bar is not None and not isinstance(bar, functools.partial):
            gguf_loading.tqdm = functools.partial(bar, disable=True)
    try:
        from huggingface_hub.utils import disable_progress_bars
    except ImportError:
        pass
    else:
        disable_progress_bars()


def duration(seconds: float) -> str:
    """``seconds`` as ``H:MM:SS`` (``M:SS`` under an hour), as tqdm writes times."""
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def iteration_figures(metrics: dict[str, float]) -> dict[str, str]:
    """The figures a progress bar shows after an iteration: success, return and, when
    prompts were cut to fit ``--prompt.max-prompt-tokens``, the share cut (``cut``); with
    ``--agent``, the failed episodes of all (``failed``) and the calls that joined the one
    before and that broke (``joins/breaks``)."""
    figures = {"success": f"{metrics['rollout/success']:.2f}",
               "ret": f"{metrics['rollout/return']:.2f}"}
    cut = metrics.get("rollout/prompt_cut_rate", 0.0)
    if cut > 0:
        figures["cut"] = f"{cut:.0%}"
    if "agent/episodes" in metrics:  # a loop of your own (--agent): its counts
        figures["failed"] = f"{metrics['agent/failed']:.0f}/{metrics['agent/episodes']:.0f}"
        figures["joins/breaks"] = f"{metrics['agent/joins']:.0f}/{metrics['agent/breaks']:.0f}"
    return figures


def iteration_line(done: int, total: int, start: int, elapsed: float,
                   metrics: dict[str, float]) -> str:
    """The progress bar's figures after iteration ``done`` of ``total`` as one line
    (:func:`iteration_figures`), seconds per iteration, time elapsed and left (the last
    two over the iterations this process ran, from ``start``).

    >>> iteration_line(3, 6, 0, 30.0, {"rollout/success": 0.25, "rollout/return": 0.5})
    'iteration 3/6: success=0.25 ret=0.50 | 10.0 s/it, elapsed 0:30, left 0:30'
    >>> iteration_line(3, 6, 0, 30.0, {"rollout/success": 0.25, "rollout/return": 0.5,
    ...                                "rollout/prompt_cut_rate": 0.625})
    'iteration 3/6: success=0.25 ret=0.50 cut=62% | 10.0 s/it, elapsed 0:30, left 0:30'
    """
    figures = " ".join(f"{k}={v}" for k, v in iteration_figures(metrics).items())
    return f"iteration {done}/{total}: {figures} | {_pace(done, total, start, elapsed, 'it')}"


def prompt_cut_note(metrics: dict[str, float], prompt: Any, iteration: int) -> str | None:
    """The one line a run says the first time its prompts lost text to fit the token
    budget (``metrics``: iteration ``iteration``'s, with its evaluation's if any;
    ``prompt``: the run's :class:`~algorithms.config.PromptConfig`), or ``None`` when
    none did. Window layout: history (oldest first), then the observation's start, then
    admissible actions, cut to ``--prompt.max-prompt-tokens``; transcript layout: the
    env's text cut to ``--prompt.max-observation-tokens``, and trajectories ended when
    their transcript outgrew ``--prompt.max-prompt-tokens``.
    """
    for prefix, what in (("rollout", f"iteration {iteration}"),
                         ("eval", f"the evaluation after iteration {iteration}")):
        share = metrics.get(f"{prefix}/prompt_cut_rate", 0.0)
        ended = metrics.get(f"{prefix}/transcript_cut_rate", 0.0)
        if share > 0 and prompt.layout == "window":
            return (f"prompts cut: {share:.0%} of the steps of {what} did not fit "
                    f"--prompt.max-prompt-tokens {prompt.max_prompt_tokens} and lost their "
                    "oldest history, then the start of the observation, then admissible "
                    "actions; raise the flag (or lower --prompt.history-window) to keep "
                    "them whole (each iteration's line gives the share: cut=)")
        if share > 0 or ended > 0:
            parts = []
            if share > 0:
                parts.append(f"the env's text of {share:.0%} of the steps was cut to "
                             f"--prompt.max-observation-tokens "
                             f"{prompt.max_observation_tokens}")
            if ended > 0:
                parts.append(f"{ended:.0%} of the trajectories ended when their transcript "
                             f"outgrew --prompt.max-prompt-tokens {prompt.max_prompt_tokens}")
            return f"prompts cut in {what}: {'; '.join(parts)}; raise the flag to keep them"
    return None


def sft_step_line(done: int, total: int, start: int, elapsed: float,
                  metrics: dict[str, float]) -> str:
    """The SFT progress bar's figures after optimizer step ``done`` of ``total`` as one
    line (a log file's stand-in for the bar): loss, seconds per step, time elapsed and
    left (over the steps this process ran, from ``start``).

    >>> sft_step_line(12, 36, 0, 30.0, {"sft/loss": 0.5034})
    'SFT step 12/36: loss=0.503 | 2.5 s/step, elapsed 0:30, left 1:00'
    """
    return (f"SFT step {done}/{total}: loss={metrics['sft/loss']:.3f} | "
            f"{_pace(done, total, start, elapsed, 'step')}")


def _pace(done: int, total: int, start: int, elapsed: float, unit: str) -> str:
    """``'<s> s/<unit>, elapsed <t>, left <t>'`` over the ``done - start`` units this
    process ran (a progress bar's right-hand figures)."""
    per_unit = elapsed / max(done - start, 1)
    return (f"{per_unit:.1f} s/{unit}, elapsed {duration(elapsed)}, "
            f"left {duration(per_unit * (total - done))}")


def torchrun_line(world_size: int, device_type: str, group_first: int, group_count: int,
                  num_groups: int) -> str:
    """What a torchrun job says at setup: its ranks, backend and rank 0's groups.

    >>> torchrun_line(2, "cpu", 0, 2, 4)
    'torchrun: 2 ranks (gloo); rank 0 rolls out groups 0..1 of 4; FSDP2 shards the policy'
    """
    return (f"torchrun: {world_size} ranks ({'NCCL' if device_type == 'cuda' else 'gloo'}); "
            f"rank 0 rolls out groups {group_first}..{group_first + group_count - 1} of "
            f"{num_groups}; FSDP2 shards the policy")
