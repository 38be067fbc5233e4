"""Sokoban rooms: the level type, its text form, and generation by reverse play.

Rooms are generated the way gym-sokoban (Schrader 2018) generates them, which is also
what verl-agent's Sokoban env runs (``room_utils.generate_room``):

1. **Topology.** A random walk of ``num_gen_steps`` steps (default
   ``int(1.7 * (height + width))``) over the inner cells carves floor: at each step the
   walk turns to a random direction with probability 0.35, moves one cell (clamped to the
   inner area) and stamps one of five small floor shapes (a horizontal or vertical bar of
   three, two L shapes, a 2 x 2 square) on its position. The outer ring is wall.
2. **Placement.** The player and then ``num_boxes`` targets go on distinct floor cells,
   uniformly; the room needs more than ``num_boxes + 1`` floor cells.
3. **Reverse play.** Every box starts on its target; a depth-first search plays Sokoban
   backwards (the player moves up, down, left, right, in that order, and pulls the box
   behind it whenever there is one) for at most ``search_depth - 2`` moves and at most
   300,000 distinct states. Each state is scored ``box_swaps * displacement``:
   ``box_swaps`` counts how often the pulled box changed along the path, ``displacement``
   is the sum of the boxes' Manhattan distances to their own targets; a state with a box
   or the player on a target scores 0. The first state (in search order) of the highest
   score is kept. A state already seen is never searched again, whatever its path.
4. If the kept room has displacement 0 (no box left its target), start again at 1.
5. **Player shuffle.** With probability 0.8 when the displacement is 1, else 0.5, the
   player then walks 1 to 3 random steps (each further step with probability 0.5) to
   free cells it has not visited in this walk, so it does not always stand next to a box.

Every kept room is solvable: replaying the reverse moves forwards solves it.

What differs from gym-sokoban / verl-agent, by design: randomness comes from one
:class:`numpy.random.Generator` (theirs: Python's global ``random`` and NumPy's global
legacy RNG), so the same seed gives the same room here but not the same room as theirs;
and a failed attempt (step 2 or 4) draws again from the same generator, where
verl-agent re-seeds with ``hash(str(seed))``, which Python randomizes per process. The
distribution of rooms is the same: each attempt is an independent draw either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WALL, FLOOR, TARGET = "#", "_", "O"
BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "X", "√", "P", "S"
"""The symbols of verl-agent's text rendering (``tiny_rgb_array`` mode)."""

MOVES: tuple[tuple[str, int, int], ...] = (
    ("up", -1, 0), ("down", 1, 0), ("left", 0, -1), ("right", 0, 1),
)
"""(name, row change, column change), in gym-sokoban's action order."""

Cell = tuple[int, int]

_WALK_DIRECTIONS = ((1, 0), (0, 1), (-1, 0), (0, -1))
_FLOOR_STAMPS: tuple[tuple[Cell, ...], ...] = (
    ((0, -1), (0, 0), (0, 1)),           # horizontal bar
    ((-1, 0), (0, 0), (1, 0)),           # vertical bar
    ((0, -1), (0, 0), (1, 0)),           # L opening down-left
    ((0, -1), (0, 0), (1, -1), (1, 0)),  # 2 x 2 square
    ((0, 0), (0, 1), (1, 0)),            # L opening down-right
)
"""Offsets from the walk's position that each stamp turns into floor."""

REVERSE_PLAY_MAX_STATES = 300_000
"""gym-sokoban's bound on the states one reverse-play search explores."""


@dataclass(frozen=True)
class SokobanRoom:
    """A Sokoban level: the fixed grid and where the player and the boxes stand.

    Attributes:
        fixed: the rows of the fixed grid, ``height`` strings of ``width`` characters,
            each ``"#"`` (wall), ``"_"`` (floor) or ``"O"`` (target). The outer ring is
            wall.
        player: (row, column) of the player, row 0 at the top.
        boxes: (row, column) of every box, sorted; as many boxes as targets.
    """

    fixed: tuple[str, ...]
    player: Cell
    boxes: tuple[Cell, ...]

    def __post_init__(self) -> None:
        height = len(self.fixed)
        width = len(self.fixed[0]) if height else 0
        if height < 3 or width < 3 or any(len(row) != width for row in self.fixed):
            raise ValueError(f"a room needs at least 3 x 3 equal-length rows, got {self.fixed}")
        if set("".join(self.fixed)) - {WALL, FLOOR, TARGET}:
            raise ValueError(f"fixed rows may hold only '#', '_' and 'O', got {self.fixed}")
        border = self.fixed[0] + self.fixed[-1] + "".join(r[0] + r[-1] for r in self.fixed)
        if set(border) != {WALL}:
            raise ValueError("the outer ring of a room must be wall")
        if list(self.boxes) != sorted(self.boxes):
            raise ValueError("boxes must be sorted")
        things = (self.player, *self.boxes)
        if len(set(things)) != len(things):
            raise ValueError("the player and the boxes must stand on distinct cells")
        if any(self.fixed[r][c] == WALL for r, c in things):
            raise ValueError("the player and the boxes must stand on floor or targets")
        if not self.boxes or len(self.boxes) != len(self.targets):
            raise ValueError(
                f"need as many boxes as targets (at least one), got {len(self.boxes)} boxes "
                f"and {len(self.targets)} targets"
            )

    @property
    def height(self) -> int:
        return len(self.fixed)

    @property
    def width(self) -> int:
        return len(self.fixed[0])

    @property
    def targets(self) -> tuple[Cell, ...]:
        """(row, column) of every target, row-major."""
        return tuple((r, c) for r, row in enumerate(self.fixed)
                     for c, symbol in enumerate(row) if symbol == TARGET)

    @classmethod
    def from_rows(cls, rows: list[str] | tuple[str, ...]) -> SokobanRoom:
        """Parse a room drawn with the rendering's symbols, one character per cell.

        ``#`` wall, ``_`` floor, ``O`` target, ``X`` box, ``√`` box on target, ``P``
        player, ``S`` player on target (the same symbols as :func:`render_room`).
        """
        fixed, player, boxes = [], [], []
        for r, row in enumerate(rows):
            line = []
            for c, symbol in enumerate(row):
                if symbol in (PLAYER, PLAYER_ON_TARGET):
                    player.append((r, c))
                if symbol in (BOX, BOX_ON_TARGET):
                    boxes.append((r, c))
                on_target = symbol in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET)
                if symbol not in (WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER,
                                  PLAYER_ON_TARGET):
                    raise ValueError(f"unknown room symbol {symbol!r} in row {r}")
                line.append(WALL if symbol == WALL else TARGET if on_target else FLOOR)
            fixed.append("".join(line))
        if len(player) != 1:
            raise ValueError(f"a room needs exactly one player, got {len(player)}")
        return cls(tuple(fixed), player[0], tuple(sorted(boxes)))

    def rows(self) -> tuple[str, ...]:
        """The room drawn with one symbol per cell (the inverse of :meth:`from_rows`)."""
        return render_rows(self.fixed, self.player, frozenset(self.boxes))


def render_rows(fixed: tuple[str, ...], player: Cell, boxes: frozenset[Cell]) -> tuple[str, ...]:
    """One symbol per cell: the fixed grid with the player and the boxes drawn on it."""
    rows = []
    for r, row in enumerate(fixed):
        line = []
        for c, symbol in enumerate(row):
            on_target = symbol == TARGET
            if (r, c) == player:
                line.append(PLAYER_ON_TARGET if on_target else PLAYER)
            elif (r, c) in boxes:
                line.append(BOX_ON_TARGET if on_target else BOX)
            else:
                line.append(symbol)
        rows.append("".join(line))
    return tuple(rows)


def render_room(fixed: tuple[str, ...], player: Cell, boxes: frozenset[Cell]) -> str:
    """verl-agent's text observation: each cell as ``" <symbol> \\t"``, rows joined by ``\\n``."""
    return "\n".join("".join(f" {symbol} \t" for symbol in row)
                     for row in render_rows(fixed, player, boxes))


# ---------------------------------------------------------------------- generation
def room_topology(rng: np.random.Generator, height: int, width: int, num_steps: int,
                  p_change_direction: float = 0.35) -> np.ndarray:
    """Carve floor with a random walk (step 1 of the module docstring).

    Returns:
        (height, width) bool array, True on floor; the outer ring is False.
    """
    floor = np.zeros((height, width), dtype=bool)
    direction = _WALK_DIRECTIONS[int(rng.integers(4))]
    row, col = int(rng.integers(1, height)), int(rng.integers(1, width))
    turns = rng.random(num_steps) < p_change_direction
    new_directions = rng.integers(4, size=num_steps)
    stamps = rng.integers(len(_FLOOR_STAMPS), size=num_steps)
    for step in range(num_steps):
        if turns[step]:
            direction = _WALK_DIRECTIONS[int(new_directions[step])]
        row = min(max(row + direction[0], 1), height - 2)
        col = min(max(col + direction[1], 1), width - 2)
        for dr, dc in _FLOOR_STAMPS[int(stamps[step])]:
            floor[row + dr, col + dc] = True
    floor[[0, -1], :] = False
    floor[:, [0, -1]] = False
    return floor


@dataclass(frozen=True)
class ReversePlay:
    """The room reverse play kept (step 3 of the module docstring).

    Attributes:
        player: (row, column) of the player.
        boxes: (row, column) of each box, in the order of ``targets`` (box ``i`` started
            on ``targets[i]``).
        targets: the targets, row-major.
        score: ``box_swaps * displacement`` of the kept state.
        displacement: sum of each box's Manhattan distance to its own target.
        explored: distinct states the search scored.
    """

    player: Cell
    boxes: tuple[Cell, ...]
    targets: tuple[Cell, ...]
    score: int
    displacement: int
    explored: int


def reverse_play(fixed: tuple[str, ...], player: Cell, *, search_depth: int = 30,
                 max_states: int = REVERSE_PLAY_MAX_STATES) -> ReversePlay:
    """Pull the boxes away from their targets; keep the highest-scoring state.

    The search is gym-sokoban's depth-first search, in its order, with its state
    identity (player cell, box cells, and whether each box has been pulled yet) and its
    bounds; see step 3 of the module docstring.

    Args:
        fixed: the fixed rows (walls, floor, targets); every target holds its box.
        player: the player's cell.
        search_depth: gym-sokoban's ``search_depth`` (the search goes
            ``search_depth - 2`` moves deep).
        max_states: stop after scoring this many distinct states.
    """
    width = len(fixed[0])
    flat = "".join(fixed)
    open_cells = [symbol != WALL for symbol in flat]
    target_cells = [i for i, symbol in enumerate(flat) if symbol == TARGET]
    target_set = frozenset(target_cells)
    deltas = tuple(dr * width + dc for _, dr, dc in MOVES)

    def displacement(boxes: tuple[int, ...]) -> int:
        return sum(abs(b // width - t // width) + abs(b % width - t % width)
                   for b, t in zip(boxes, target_cells, strict=True))

    # (player, boxes by id, pulled-ever bitmask, box swaps, last pulled box id, ttl)
    stack = [(player[0] * width + player[1], tuple(target_cells), 0, 0, -1, search_depth)]
    explored: set[tuple[int, frozenset[tuple[int, int]]]] = set()
    best_score, best = -1, stack[0]
    while stack:
        node = stack.pop()
        at, boxes, pulled, swaps, last, ttl = node
        ttl -= 1
        if ttl <= 0 or len(explored) >= max_states:
            continue
        key = (at, frozenset((b, (pulled >> i) & 1) for i, b in enumerate(boxes)))
        if key in explored:
            continue
        explored.add(key)
        covered = at in target_set or not target_set.isdisjoint(boxes)
        score = 0 if covered else swaps * displacement(boxes)
        if score > best_score:
            best_score, best = score, node
        children = []
        for delta in deltas:
            to = at + delta
            if not open_cells[to] or to in boxes:
                continue  # blocked: the same state, already explored
            behind = at - delta
            next_boxes, next_pulled, next_last = boxes, pulled, last
            if behind in boxes:
                box = boxes.index(behind)
                next_boxes = boxes[:box] + (at,) + boxes[box + 1:]
                next_pulled, next_last = pulled | (1 << box), box
            children.append((to, next_boxes, next_pulled, swaps + (next_last != last),
                             next_last, ttl))
        stack.extend(reversed(children))
    at, boxes = best[0], best[1]
    return ReversePlay(
        player=(at // width, at % width),
        boxes=tuple((b // width, b % width) for b in boxes),
        targets=tuple((t // width, t % width) for t in target_cells),
        score=best_score,
        displacement=displacement(boxes),
        explored=len(explored),
    )


def shuffle_player(rng: np.random.Generator, fixed: tuple[str, ...], player: Cell,
                   boxes: frozenset[Cell], move_probability: float,
                   continue_probability: float = 0.5, max_moves: int = 3) -> Cell:
    """Walk the player a few random steps to free, unvisited cells (step 5)."""
    if rng.random() > move_probability:
        return player
    visited = [player]
    for moved in range(1, max_moves + 1):
        r, c = player
        free = [(r + dr, c + dc) for _, dr, dc in MOVES
                if fixed[r + dr][c + dc] != WALL and (r + dr, c + dc) not in boxes
                and (r + dr, c + dc) not in visited]
        if not free:
            break
        player = free[int(rng.integers(len(free)))]
        visited.append(player)
        if moved >= max_moves or rng.random() > continue_probability:
            break
    return player


def place_player_and_targets(rng: np.random.Generator, floor: np.ndarray,
                             num_boxes: int) -> tuple[tuple[str, ...], Cell] | None:
    """Put the player, then ``num_boxes`` targets, on distinct floor cells (step 2).

    Args:
        floor: (height, width) bool array from :func:`room_topology`.

    Returns:
        (the fixed rows, the player's cell), or ``None`` when the room has no more than
        ``num_boxes + 1`` floor cells.
    """
    cells = [(int(r), int(c)) for r, c in np.argwhere(floor)]  # row-major
    if len(cells) <= num_boxes + 1:
        return None
    player = cells.pop(int(rng.integers(len(cells))))
    targets = {cells.pop(int(rng.integers(len(cells)))) for _ in range(num_boxes)}
    height, width = floor.shape
    fixed = tuple(
        "".join(TARGET if (r, c) in targets else FLOOR if floor[r, c] else WALL
                for c in range(width))
        for r in range(height)
    )
    return fixed, player


def generate_room(rng: np.random.Generator, height: int = 6, width: int = 6,
                  num_boxes: int = 1, *, search_depth: int = 30,
                  num_gen_steps: int | None = None, max_attempts: int = 10_000) -> SokobanRoom:
    """A random solvable room, gym-sokoban's way (see the module docstring).

    Args:
        rng: the only source of randomness.
        height, width: the room's size, outer wall included (at least 4 x 4).
        num_boxes: boxes (and targets), at least 1.
        search_depth: reverse-play depth bound (verl-agent's default config: 30).
        num_gen_steps: random-walk steps; ``None``: ``int(1.7 * (height + width))``.
        max_attempts: give up (``RuntimeError``) after this many rejected attempts.
    """
    if height < 4 or width < 4:
        raise ValueError(f"a room needs height and width >= 4, got {height} x {width}")
    if num_boxes < 1:
        raise ValueError(f"num_boxes must be >= 1, got {num_boxes}")
    if search_depth < 3:
        raise ValueError(f"search_depth must be >= 3 to move any box, got {search_depth}")
    steps = int(1.7 * (height + width)) if num_gen_steps is None else num_gen_steps
    for _ in range(max_attempts):
        placed = place_player_and_targets(rng, room_topology(rng, height, width, steps),
                                          num_boxes)
        if placed is None:
            continue
        fixed, player = placed
        played = reverse_play(fixed, player, search_depth=search_depth)
        if played.displacement == 0:
            continue
        boxes = frozenset(played.boxes)
        start = shuffle_player(rng, fixed, played.player, boxes,
                               move_probability=0.8 if played.displacement == 1 else 0.5)
        return SokobanRoom(fixed, start, tuple(sorted(boxes)))
    raise RuntimeError(
        f"no {height} x {width} room with {num_boxes} boxes after {max_attempts} attempts: "
        "make the room larger or use fewer boxes"
    )
