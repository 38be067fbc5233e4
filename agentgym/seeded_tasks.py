"""Task ids that stand for generator seeds: ``"<prefix>-<seed>"`` over a range of seeds.

Procedurally generated envs (Sokoban rooms, random FrozenLake maps) have one task per
seed. :class:`SeededTaskIds` is the ``task_ids`` sequence of such an env: it holds a
``range``, not a tuple of strings, so 65,535 tasks (verl-agent's training seeds) cost no
memory in each of a vector env's copies, and looking an id up is O(1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload


class SeededTaskIds(Sequence[str]):
    """The ids ``f"{prefix}-{seed}"`` for ``seed`` in ``range(first_seed, first_seed + count)``.

    Args:
        prefix: what comes before the ``-<seed>`` (e.g. ``"sokoban-6x6-1box"``).
        first_seed: the seed of the first task (``>= 0``).
        count: how many tasks (``>= 1``).
    """

    def __init__(self, prefix: str, first_seed: int, count: int):
        if first_seed < 0:
            raise ValueError(f"first_seed must be >= 0, got {first_seed}")
        if count < 1:
            raise ValueError(f"num_tasks must be >= 1, got {count}")
        self.prefix = prefix
        self.seeds = range(first_seed, first_seed + count)

    def __len__(self) -> int:
        return len(self.seeds)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [f"{self.prefix}-{seed}" for seed in self.seeds[index]]
        return f"{self.prefix}-{self.seeds[index]}"

    def seed_of(self, task_id: str) -> int:
        """The seed behind ``task_id``; ``ValueError`` if it is not one of these ids."""
        head, _, tail = str(task_id).rpartition("-")
        if (head != self.prefix or not tail.isdigit() or str(int(tail)) != tail
                or int(tail) not in self.seeds):
            raise ValueError(
                f"unknown task id {task_id!r}: expected '{self.prefix}-<seed>' with seed in "
                f"[{self.seeds.start}, {self.seeds.stop})"
            )
        return int(tail)

    def __contains__(self, task_id: object) -> bool:
        try:
            self.seed_of(task_id)  # type: ignore[arg-type]
        except ValueError:
            return False
        return True

    def index(self, task_id: str, start: int = 0, stop: int | None = None) -> int:
        position = self.seed_of(task_id) - self.seeds.start
        if not start <= position < (len(self) if stop is None else stop):
            raise ValueError(f"{task_id!r} is not in the given part of the sequence")
        return position

    def __repr__(self) -> str:
        return f"SeededTaskIds({self.prefix!r}, seeds={self.seeds.start}..{self.seeds.stop - 1})"
