"""ALFWorld engine speed and memory: the unmodified TextWorld/alfworld stack vs ours.

Prints, per room size (receptacles in the room: small <= 15, medium 16-35, large > 35),
the median and p90 of ``load`` (a game not seen before by the process), ``reset`` (of the
loaded game) and ``step`` (walkthrough, then random admissible commands), for
``ReferenceEngine`` (``AlfredDemangler(PddlEnv)``, as alfworld sets it up) and
``AlfredEngine``, with the speed-up; then the resident memory each additional env adds
to a process, and the env-steps/s of the vectorized env with 1 and 2 subprocess workers
(skipped if ``agentgym.vector`` is not available).

    PYTHONPATH=. python benchmarks/alfworld.py [--data DIR] [--games-per-size 2] [--steps 20]

Timings are wall-clock and noisy on a shared machine: compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path, and this file's name would
# shadow the ``alfworld`` package it benchmarks.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402

from agentgym.alfworld.engine import AlfredEngine, ReferenceEngine  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "alfworld"
SIZES = (("small", 0, 15), ("medium", 16, 35), ("large", 36, 10_000))


def receptacles(game_file: Path) -> int:
    problem = json.loads(game_file.read_text())["pddl_problem"]
    return len(re.findall(r"\(receptacleAtLocation ", problem, flags=re.IGNORECASE))


def pick_games(data: Path, per_size: int) -> dict[str, list[Path]]:
    """The largest ``per_size`` games of each room size (the worst case of each)."""
    counted = sorted((receptacles(p), str(p)) for p in data.glob("json_2.1.1/*/*/*/game.tw-pddl"))
    picks = {}
    for name, low, high in SIZES:
        bucket = [Path(p) for n, p in counted if low <= n <= high]
        picks[name] = bucket[-per_size:]
    return picks


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def time_engine(engine, games: list[Path], steps: int, resets: int, seed: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"load": [], "reset": [], "step": []}
    rng = np.random.default_rng(seed)
    for game in games:
        start = time.perf_counter()
        engine.load(game)
        times["load"].append(time.perf_counter() - start)
        for _ in range(resets):
            start = time.perf_counter()
            engine.reset()
            times["reset"].append(time.perf_counter() - start)
        walkthrough = json.loads(game.read_text())["walkthrough"]
        for i in range(steps):
            if i < len(walkthrough):
                command = walkthrough[i]
            else:
                options = [c for c in engine.admissible_commands if c != "help"]
                command = options[int(rng.integers(len(options)))]
            start = time.perf_counter()
            engine.step(command)
            times["step"].append(time.perf_counter() - start)
    return times


def speed(data: Path, per_size: int, steps: int, resets: int) -> None:
    picks = pick_games(data, per_size)
    reference, fast = ReferenceEngine(), AlfredEngine()
    print(f"{'size':7s} {'phase':6s} {'before med':>11s} {'p90':>8s} {'after med':>10s} "
          f"{'p90':>8s} {'speed-up':>9s}   (ms; {per_size} games/size, {steps} steps, {resets} resets)")
    for size, games in picks.items():
        sizes = ", ".join(str(receptacles(g)) for g in games)
        before = time_engine(reference, games, steps, resets, seed=0)
        after = time_engine(fast, games, steps, resets, seed=0)
        for phase in ("load", "reset", "step"):
            b, a = before[phase], after[phase]
            print(f"{size:7s} {phase:6s} {1e3 * statistics.median(b):11.1f} "
                  f"{1e3 * percentile(b, 90):8.1f} {1e3 * statistics.median(a):10.1f} "
                  f"{1e3 * percentile(a, 90):8.1f} {statistics.median(b) / statistics.median(a):8.1f}x")
        print(f"{'':7s} (receptacles: {sizes})")
    fast.close()


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def memory(data: Path, count: int, distinct: bool) -> None:
    """Run in a fresh process: RSS growth per additional env (same game or distinct games)."""
    import gymnasium as gym

    import agentgym  # noqa: F401

    games = sorted(data.glob("json_2.1.1/*/*/*/game.tw-pddl"), key=receptacles)[-count:]
    label, ids = ("distinct games", games) if distinct else ("same game", [games[-1]] * count)
    envs, rss = [], []
    for game in ids:
        split = game.relative_to(data).parts[1]
        env = gym.make("AgentGym/ALFWorld-v0", data_path=data, split=split)
        env.reset(options={"task_id": game.parent.relative_to(data).as_posix()})
        envs.append(env)
        gc.collect()
        rss.append(rss_mb())
    per_env = (rss[-1] - rss[0]) / (count - 1)
    print(f"memory, {label:14s}: 1 env {rss[0]:.0f} MB, {count} envs {rss[-1]:.0f} MB -> "
          f"{per_env:.1f} MB per additional env (largest kitchens)")
    for env in envs:
        env.close()


def vector(data: Path, num_envs: int, steps: int) -> None:
    try:
        from agentgym.vector import make_vector_env
    except ImportError as error:
        print(f"vector env: skipped (agentgym.vector not importable: {error})")
        return
    rng = np.random.default_rng(0)
    for workers in (1, 2):
        vec = make_vector_env("AgentGym/ALFWorld-v0", num_envs, backend="subprocess",
                              num_workers=workers, data_path=str(data), split="train")
        try:
            start = time.perf_counter()
            _, infos = vec.reset(seed=0)
            reset_s = time.perf_counter() - start
            env_steps = 0
            done = np.zeros(num_envs, dtype=bool)
            start = time.perf_counter()
            for _ in range(steps):
                if done.all():
                    _, infos = vec.reset()
                    done[:] = False
                actions = []
                for admissible in infos["admissible_actions"]:
                    options = list(admissible) or ["look"]
                    actions.append(options[int(rng.integers(len(options)))])
                env_steps += int(np.sum(~done))  # finished envs ignore their action
                _, _, terminated, truncated, infos = vec.step(tuple(actions))
                done |= np.asarray(terminated) | np.asarray(truncated)
            elapsed = time.perf_counter() - start
            print(f"vector env, subprocess, {workers} worker(s), {num_envs} envs: reset "
                  f"{reset_s:.2f} s, {env_steps / elapsed:.0f} env-steps/s over {steps} steps")
        finally:
            vec.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--games-per-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--resets", type=int, default=3)
    parser.add_argument("--memory-envs", type=int, default=5)
    parser.add_argument("--vector-envs", type=int, default=4)
    parser.add_argument("--vector-steps", type=int, default=30)
    parser.add_argument("--only", choices=("speed", "memory", "vector"))
    parser.add_argument("--distinct", action="store_true", help="memory: distinct games")
    args = parser.parse_args()
    if not (args.data / "json_2.1.1").is_dir():
        sys.exit(f"no ALFWorld data at {args.data} (pass --data)")
    if args.only in (None, "speed"):
        speed(args.data, args.games_per_size, args.steps, args.resets)
    if args.only == "memory":
        memory(args.data, args.memory_envs, args.distinct)
    elif args.only is None:  # fresh processes, so that earlier libraries and caches do not count
        for distinct in ([], ["--distinct"]):
            subprocess.run([sys.executable, __file__, "--only", "memory", "--data", str(args.data),
                            "--memory-envs", str(args.memory_envs), *distinct], check=True)
    if args.only in (None, "vector"):
        vector(args.data, args.vector_envs, args.vector_steps)


if __name__ == "__main__":
    main()
