"""FrozenLake speed: env steps per second and resets per second.

Plays ``FrozenLakeEnv.step`` on random action words (one in five invalid) for
``--steps`` steps, on Gymnasium's 4x4 map and on random 8x8 maps (a new map, so a new
Gymnasium lake, at every reset); resets are timed apart from steps. One process.

Usage: ``python -m benchmarks.frozenlake [--steps M]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from agentgym.frozenlake import FrozenLakeEnv

CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (("4x4 map", {}), ("random 8x8", {"size": 8}))
ACTION_TEXTS = ("Left", "Down", "Right", "Up", "jump")


def steps_per_second(kwargs: dict[str, Any], num_steps: int) -> tuple[float, float]:
    """(env steps per second, resets per second) under random action words."""
    env = FrozenLakeEnv(**kwargs)
    texts = [str(t) for t in np.random.default_rng(0).choice(ACTION_TEXTS, size=num_steps)]
    step_time = reset_time = 0.0
    resets = 0
    done = True
    for text in texts:
        if done:
            start = time.perf_counter()
            env.reset(seed=resets)
            reset_time += time.perf_counter() - start
            resets += 1
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(text)
        step_time += time.perf_counter() - start
        done = terminated or truncated
    return num_steps / step_time, resets / reset_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000, help="env steps per config")
    args = parser.parse_args()
    print(f"{'maps':>12} {'steps/s':>9} {'resets/s':>9}")
    for name, kwargs in CONFIGS:
        steps, resets = steps_per_second(kwargs, args.steps)
        print(f"{name:>12} {steps:>9.0f} {resets:>9.0f}")


if __name__ == "__main__":
    main()
