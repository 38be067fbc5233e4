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


def iteration_line(done: int, total: int, start: int, elapsed: float,
                   metrics: dict[str, float]) -> str:
    """The progress bar's figures after iteration ``done`` of ``total`` as one line:
    success, return, seconds per iteration, time elapsed and left (the last two over the
    iterations this process ran, from ``start``).

    >>> iteration_line(3, 6, 0, 30.0, {"rollout/success": 0.25, "rollout/return": 0.5})
    'iteration 3/6: success=0.25 ret=0.50 | 10.0 s/it, elapsed 0:30, left 0:30'
    """
    return (f"iteration {done}/{total}: success={metrics['rollout/success']:.2f} "
            f"ret={metrics['rollout/return']:.2f} | "
            f"{_pace(done, total, start, elapsed, 'it')}")


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
