"""Sokoban speed: generated rooms per second and env steps per second.

Prints, for each room configuration (size, boxes):

* **rooms/s**: :func:`agentgym.sokoban.generate_room` on seeds ``0 .. N-1`` (topology,
  placement, reverse play with depth 30, player shuffle; rejected attempts included);
* **steps/s**: ``SokobanEnv.step`` on random action words (some invalid), over episodes
  of 15 steps; resets (which generate rooms) are timed apart, as **resets/s**.

Single process, one core. Usage: ``python -m benchmarks.sokoban [--rooms N] [--steps M]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from agentgym.sokoban import SokobanEnv, generate_room

CONFIGS = ((6, 6, 1), (7, 7, 2), (8, 8, 3), (10, 10, 4))
ACTION_TEXTS = ("up", "down", "left", "right", "Up", "push left", "still", "jump")


def rooms_per_second(height: int, width: int, num_boxes: int, count: int) -> float:
    """Rooms generated per second, seeds ``0 .. count - 1``."""
    start = time.perf_counter()
    for seed in range(count):
        generate_room(np.random.default_rng(seed), height, width, num_boxes)
    return count / (time.perf_counter() - start)


def steps_per_second(height: int, width: int, num_boxes: int,
                     num_steps: int) -> tuple[float, float]:
    """(env steps per second, resets per second) under random action words."""
    env = SokobanEnv(dim_room=(height, width), num_boxes=num_boxes)
    rng = np.random.default_rng(0)
    texts = [str(t) for t in rng.choice(ACTION_TEXTS, size=num_steps)]
    step_time = reset_time = 0.0
    resets = steps = 0
    done = True
    while steps < num_steps:
        if done:
            start = time.perf_counter()
            env.reset(seed=resets)
            reset_time += time.perf_counter() - start
            resets += 1
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(texts[steps])
        step_time += time.perf_counter() - start
        steps += 1
        done = terminated or truncated
    return steps / step_time, resets / reset_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rooms", type=int, default=500, help="rooms generated per config")
    parser.add_argument("--steps", type=int, default=50_000, help="env steps per config")
    args = parser.parse_args()
    print(f"{'room':>6} {'boxes':>5} {'rooms/s':>9} {'steps/s':>9} {'resets/s':>9}")
    for height, width, num_boxes in CONFIGS:
        rooms = rooms_per_second(height, width, num_boxes, args.rooms)
        steps, resets = steps_per_second(height, width, num_boxes, args.steps)
        print(f"{f'{height}x{width}':>6} {num_boxes:>5} {rooms:>9.0f} {steps:>9.0f} {resets:>9.0f}")


if __name__ == "__main__":
    main()
