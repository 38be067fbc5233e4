"""How well an ALFWorld expert (``expert_action``) solves the games: success and length.

Plays ``expert=`` (``handcoded`` or ``walkthrough``) on every game of a split, without
perturbation unless ``--perturb`` (then a random admissible action is played instead with
that probability, from a generator seeded by ``--seed``), and prints per task type: games,
success rate, mean length of the solved episodes, mean length of the games' stored
walkthroughs, and the steps where the hand-coded expert's own choice was not admissible.

    PYTHONPATH=. python studies/alfworld_expert.py --split train --games 60
    PYTHONPATH=. python studies/alfworld_expert.py --data ../shared/data/alfworld \\
        --split valid_seen

Without ``--data`` (and ``$ALFWORLD_DATA``) it plays the generated games (seed 0).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path; keep ``alfworld.py`` here
# from shadowing the ``alfworld`` package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402

from agentgym.alfworld.env import ALFWorldEnv  # noqa: E402


def play(env: ALFWorldEnv, task_id: str, perturb: float,
         rng: np.random.Generator) -> tuple[bool, int]:
    """One episode of the env's expert; its success and number of steps."""
    _, info = env.reset(options={"task_id": task_id})
    steps = 0
    while True:
        action = env.expert_action()
        if action is None:
            return bool(info["success"]), steps
        admissible = info["admissible_actions"]
        if perturb > 0 and rng.random() < perturb:
            action = str(admissible[int(rng.integers(len(admissible)))])
        _, _, terminated, truncated, info = env.step(action)
        steps += 1
        if terminated or truncated:
            return bool(info["success"]), steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expert", default="handcoded", choices=("handcoded", "walkthrough"))
    parser.add_argument("--split", default="train")
    parser.add_argument("--data", default=None, help="official data root (default: generated)")
    parser.add_argument("--games", type=int, default=60, help="generated games per split")
    parser.add_argument("--max-steps", type=int, default=50)
    parser.add_argument("--perturb", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    env = ALFWorldEnv(data_path=args.data, split=args.split, expert=args.expert,
                      num_generated_games=args.games, max_steps=args.max_steps)
    rng = np.random.default_rng(args.seed)
    rows: dict[str, list[tuple[bool, int, int]]] = defaultdict(list)
    fallbacks = 0
    start = time.perf_counter()
    for task_id in env.task_ids:
        success, steps = play(env, task_id, args.perturb, rng)
        rows[env.task_type].append((success, steps, len(env.walkthrough(task_id))))
        fallbacks += getattr(env.handcoded_expert, "fallbacks", 0)
    env.close()
    print(f"expert={args.expert} split={args.split} perturb={args.perturb} "
          f"max_steps={args.max_steps} ({env.task_source({'data_path': args.data})})")
    print(f"{'task type':34s} {'games':>5s} {'success':>7s} {'length':>6s} {'walkthrough':>11s}")
    everything = [row for task_rows in rows.values() for row in task_rows]
    for name, task_rows in [*sorted(rows.items()), ("all", everything)]:
        solved = [steps for success, steps, _ in task_rows if success]
        print(f"{name:34s} {len(task_rows):5d} {np.mean([r[0] for r in task_rows]):7.3f} "
              f"{np.mean(solved) if solved else float('nan'):6.1f} "
              f"{np.mean([r[2] for r in task_rows]):11.1f}")
    print(f"fallbacks (hand-coded choice not admissible): {fallbacks}; "
          f"{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
