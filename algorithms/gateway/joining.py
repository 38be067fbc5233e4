"""A session's calls joined into sample rows by exact token prefix.

The calls are taken in order. A row starts as a call's prompt ids (loss mask 0) and its
completion ids (mask 1). The next call *continues* the row when its prompt ids start with
the row's ids so far (the previous call's prompt and completion, exactly): the row grows
by the tokens in between (the loop's new messages, the template's turn markers: mask 0)
and the call's completion (mask 1). Any other call -- the loop rewrote its history,
changed its tools, or the text it sent back renders to other ids -- starts a new row: a
*break*. Agent Lightning and rLLM join the same way, and count the breaks.

Nothing is re-tokenized: every id of a row is an id the engine was given or sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from algorithms.gateway.records import CallRecord


@dataclass(frozen=True)
class JoinedRow:
    """One sample row: consecutive calls whose prompts extend each other.

    Attributes:
        ids: the row's token ids (the first call's prompt, then each call's completion
            and the tokens between them).
        loss_mask: 1 on the sampled ids (the completions), 0 elsewhere; as long as
            ``ids``.
        logprobs: the engine's log-prob of each sampled id, 0.0 where the mask is 0; as
            long as ``ids``; ``None`` when a call of the row has no log-probs.
        call_indices: the indices of the row's calls (into the calls joined), in order.
        completion_spans: per call, ``(start, end)`` of its completion in ``ids``.
    """

    ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...] | None
    call_indices: tuple[int, ...]
    completion_spans: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class JoinedSession:
    """A session's rows and how its calls joined.

    Attributes:
        rows: the sample rows, in the order their first calls came.
        joins: calls that continued the row before them.
        breaks: calls after the first that started a new row.
    """

    rows: list[JoinedRow]
    joins: int
    breaks: int


class _Row:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] | None = []
        self.calls: list[int] = []
        self.spans: list[tuple[int, int]] = []

    def add(self, index: int, call: CallRecord) -> None:
        between = tuple(call.prompt_ids[len(self.ids):])
        completion = tuple(call.completion_ids)
        self.ids += between
        self.mask += [0] * len(between)
        start = len(self.ids)
        self.ids += completion
        self.mask += [1] * len(completion)
        self.spans.append((start, len(self.ids)))
        self.calls.append(index)
        if self.logprobs is not None:
            if len(call.logprobs) == len(completion):
                self.logprobs += [0.0] * len(between) + [float(v) for v in call.logprobs]
            else:
                self.logprobs = None

    def extended_by(self, call: CallRecord) -> bool:
        n = len(self.ids)
        return len(call.prompt_ids) >= n and tuple(call.prompt_ids[:n]) == tuple(self.ids)

    def frozen(self) -> JoinedRow:
        return JoinedRow(tuple(self.ids), tuple(self.mask),
                         None if self.logprobs is None else tuple(self.logprobs),
                         tuple(self.calls), tuple(self.spans))


def join_calls(calls: Sequence[CallRecord]) -> JoinedSession:
    """Join a session's calls into sample rows (module docstring).

    Args:
        calls: the session's calls, in order.

    Returns:
        The :class:`JoinedSession` (no rows for no calls).
    """
    rows: list[_Row] = []
    joins = breaks = 0
    for index, call in enumerate(calls):
        if rows and rows[-1].extended_by(call):
            joins += 1
        else:
            if rows:
                breaks += 1
            rows.append(_Row())
        rows[-1].add(index, call)
    return JoinedSession([row.frozen() for row in rows], joins, breaks)


def prompt_extends(previous: CallRecord | None, prompt_ids: Sequence[int]) -> bool:
    """Whether ``prompt_ids`` start with ``previous``'s prompt and completion ids (``False``
    without a previous call)."""
    if previous is None:
        return False
    head = tuple(previous.prompt_ids) + tuple(previous.completion_ids)
    return len(prompt_ids) >= len(head) and tuple(prompt_ids[:len(head)]) == head
