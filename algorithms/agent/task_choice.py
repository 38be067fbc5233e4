"""Which of an env's tasks a held-out evaluation or an SFT stage's expert plays.

Both take a fixed number of tasks from the env's ``task_ids`` list. ``"first"`` (the
default) takes them from the front: right for lists in no particular order (WebShop's
goals) and what every earlier figure used. An env whose list is grouped -- the generated
Search-QA knowledge base lists its questions template by template, ALFWorld its games in
sorted order, so by task type -- would be evaluated on one kind of task that way;
``"spread"`` takes them evenly spaced over the whole list instead (deterministic, no
random draw, so every run and every rank picks the same tasks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

from algorithms.config import TaskOrder

TASK_ORDERS: tuple[str, ...] = get_args(TaskOrder)


def choose_task_ids(task_ids: Sequence[str], count: int, order: TaskOrder = "first") -> list[str]:
    """``count`` task ids of ``task_ids`` in ``order``; all of them, in order, when
    ``count`` is at least their number.

    ``"spread"``: the ids at positions ``floor(i * n / count)`` for ``i < count`` (``n``
    ids), so the first id always and then one every ``n / count``.

    Args:
        task_ids: the env's task ids, in its order.
        count: how many to take (``>= 0``).
        order: ``"first"`` or ``"spread"``.

    Returns:
        The chosen ids, in the env's order, without repeats.
    """
    if order not in TASK_ORDERS:
        raise ValueError(f"task order must be one of {TASK_ORDERS}, got {order!r}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    n = len(task_ids)
    if count >= n:
        return list(task_ids)
    if order == "first":
        return list(task_ids[:count])
    return [task_ids[i * n // count] for i in range(count)]
