"""A breadth-first Sokoban solver: the expert of ``AgentGym/Sokoban-v0``.

States are (player cell, box cells). A move steps onto a free cell, or pushes the box
ahead when the cell beyond it is neither a wall nor a box (gym-sokoban's rules, as
:meth:`agentgym.sokoban.env.SokobanEnv._move` plays them). The search labels every state
it reaches with the first move of the path that reached it, so the first goal state popped
gives the first move of a shortest solution; moves are tried in :data:`MOVES` order
(up, down, left, right), so ties go to the earlier direction.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from agentgym.sokoban.rooms import MOVES, WALL, Cell

MAX_STATES = 200_000
"""States the search visits at most before it gives up (a 6 x 6 room with one box has a
few hundred; 8 x 8 with three boxes up to tens of thousands)."""


def first_move(fixed: tuple[str, ...], player: Cell, boxes: Iterable[Cell],
               targets: Iterable[Cell], *, max_states: int = MAX_STATES) -> str | None:
    """The first move of a shortest solution from (``player``, ``boxes``).

    ``fixed`` is the room without player and boxes (rows of symbols, walls ``"#"``).
    Returns ``None`` when the boxes are already on the targets, when no solution exists
    (a box pushed into a dead corner) or when none is found within ``max_states`` states.
    """
    height, width = len(fixed), len(fixed[0])

    def blocked(cell: Cell) -> bool:
        inside = 0 <= cell[0] < height and 0 <= cell[1] < width
        return not inside or fixed[cell[0]][cell[1]] == WALL

    goal = frozenset(targets)
    start = (player, frozenset(boxes))
    if start[1] == goal:
        return None
    first: dict[tuple[Cell, frozenset[Cell]], str] = {start: ""}
    frontier = deque([start])
    while frontier and len(first) <= max_states:
        position, placed = frontier.popleft()
        for name, dr, dc in MOVES:
            ahead = (position[0] + dr, position[1] + dc)
            if blocked(ahead):
                continue
            after = placed
            if ahead in placed:
                beyond = (ahead[0] + dr, ahead[1] + dc)
                if blocked(beyond) or beyond in placed:
                    continue
                after = placed - {ahead} | {beyond}
            state = (ahead, after)
            if state in first:
                continue
            move = first[(position, placed)] or name
            if after == goal:
                return move
            first[state] = move
            frontier.append(state)
    return None
