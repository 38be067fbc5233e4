"""Cost of a verified generated ALFWorld game, against playing it the official way.

For each of ``--num`` games: build it (scene, task, PDDL problem, walkthrough), verify it
by one replay on the real engine (``agentgym.alfworld.gen.verify.replay``), then play the
same walkthrough through ``textworld.gym`` with alfworld's wrappers -- the path alfworld's
own loader takes, the baseline. Prints wall and CPU seconds per game and their ratio.

Run from the repository root: ``python -m benchmarks.alfworld_generate [--num 12]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from agentgym.alfworld.gen.game import GenerationConfig, make_game
from agentgym.alfworld.gen.verify import replay


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``(result, wall seconds, CPU seconds)`` of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def play_through_textworld_gym(game: dict[str, Any]) -> bool:
    """Play the game's walkthrough the way alfworld's ``AlfredTWEnv`` loads games."""
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    with tempfile.NamedTemporaryFile("w", suffix=".tw-pddl", delete=False) as handle:
        json.dump(game, handle)
    try:
        infos = textworld.EnvInfos(won=True, admissible_commands=True)
        env_id = textworld.gym.register_game(
            handle.name, infos, wrappers=[AlfredDemangler(), AlfredInfos]
        )
        env = textworld.gym.make(env_id)
        env.reset()
        info: dict[str, Any] = {}
        for command in game["walkthrough"]:
            _, _, _, info = env.step(command)
        env.close()
        return bool(info.get("won"))
    finally:
        os.unlink(handle.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num", type=int, default=12, help="games to time")
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()

    config = GenerationConfig(seed=args.seed)
    replay(make_game(config, 0).game)  # warm-up: imports and engine start
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'game':58s} {'recs':>4s} {'build+verify wall/cpu s':>24s} {'baseline wall/cpu s':>20s}")
    rows = []
    for index in range(args.num):
        generated, build_wall, build_cpu = timed(lambda i=index: make_game(config, i))
        _, verify_wall, verify_cpu = timed(lambda g=generated: replay(g.game))
        won, base_wall, base_cpu = timed(lambda g=generated: play_through_textworld_gym(g.game))
        if not won:
            raise SystemExit(f"{generated.task_dir}: the official path did not win")
        ours = (build_wall + verify_wall, build_cpu + verify_cpu)
        rows.append((*ours, base_wall, base_cpu))
        print(
            f"{generated.task_dir:58.58s} {len(generated.world.receptacles):4d} "
            f"{ours[0]:11.2f} / {ours[1]:5.2f}   {base_wall:9.2f} / {base_cpu:5.2f}"
        )
    for name, column in (("wall", 0), ("cpu", 1)):
        ours = statistics.median(r[column] for r in rows)
        base = statistics.median(r[column + 2] for r in rows)
        print(
            f"median {name}: verified game {ours:.2f} s, official-path play {base:.2f} s "
            f"(ratio {ours / base:.2f})"
        )
    print(f"max wall per verified game: {max(r[0] for r in rows):.2f} s (target <= 2 s)")


if __name__ == "__main__":
    main()
