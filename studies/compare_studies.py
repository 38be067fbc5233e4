"""Compare one method of a credit-assignment study with another, seed by seed, across runs.

``studies/credit_assignment.py`` tests its methods against each other within one run
(one ``--tag``). An ablation is a comparison across runs: the same method under two
settings (``--episode-stats trajectories`` against the recipe's), or one measure other than
the final held-out success (training-rollout success over some iterations). This script
reads two of the study's result JSONs, pairs the seeds both have, and prints each side's
mean with its 95% bootstrap interval, every seed, the mean paired difference with its 95%
paired-bootstrap interval (the seeds resampled with replacement, 10,000 resamples, seed 0)
and the two-sided paired permutation p-value (``studies/study_stats.py``)::

    python -m studies.compare_studies \\
        benchmarks/results/credit_assignment_full_h48-eq3.json:gigpo-state-std \\
        benchmarks/results/credit_assignment_full_h48-omega1.json:gigpo-state-std
    python -m studies.compare_studies --measure train --iterations 5 8 \\
        benchmarks/results/credit_assignment_full_h48-g16.json:gigpo-state-std \\
        benchmarks/results/credit_assignment_full_h48-g16.json:grpo-std

Measures, per seed: ``final`` (held-out success at the last evaluation, the study's own
measure) and ``train`` (the mean of ``rollout/success`` over the iterations
``--iterations FIRST LAST``, both included, numbered from 1 as the runs log them).

The pretrained-LM study's JSONs (``--policy smollm2``: one task, named in the JSON) are read
as well: ``final`` is their ``heldout_success``, ``train`` their ``train_success`` per
iteration; ``--task`` may be left out for them. An ablation of it (one method under another
setting, e.g. ``--lm-step-weight 2``) is compared with the study it varies::

    python -m studies.compare_studies --measure train --iterations 2 12 \\
        benchmarks/results/credit_assignment_smollm2_g8_mb16_kl0.01_sft2p0.5_w2_a1.json:gigpo \\
        benchmarks/results/credit_assignment_smollm2_g8_mb16_kl0.01_sft2p0.5_t4.json:gigpo
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from studies.study_stats import paired_comparison

MEASURES = ("final", "train")


def _lm_task(study: dict[str, Any]) -> str | None:
    """The one task of a pretrained-LM study (its JSON names it), ``None`` for another."""
    task = study.get("task")
    return task if isinstance(task, str) else None


def _method_runs(study: dict[str, Any], task: str | None, method: str
                 ) -> dict[str, dict[str, Any]]:
    """``method``'s runs on ``task`` (seed -> figures), in the small-policy study's names
    (``final_success``, ``iterations``, ``rollout/success``) whichever study wrote them."""
    runs = study.get("runs", {})
    lm_task = _lm_task(study)
    if lm_task is not None:  # the pretrained-LM study: one task, runs[method][seed]
        if task is not None and task != lm_task:
            raise KeyError(f"no task {task!r} in this study (it ran {lm_task!r})")
        if method not in runs:
            raise KeyError(f"no method {method!r} for {lm_task} in this study "
                           f"(it has {sorted(runs)})")
        return {seed: {"final_success": f["heldout_success"], "iterations": f["iterations"],
                       "rollout/success": f["train_success"]}
                for seed, f in runs[method].items()}
    task = "keydoor" if task is None else task
    if task not in runs:
        raise KeyError(f"no task {task!r} in this study (it has {sorted(runs)})")
    if method not in runs[task]:
        raise KeyError(f"no method {method!r} for {task} in this study "
                       f"(it has {sorted(runs[task])})")
    return runs[task][method]


def seed_values(study: dict[str, Any], task: str | None, method: str, measure: str,
                iterations: tuple[int, int] | None = None) -> dict[int, float]:
    """One figure per seed of ``method`` on ``task`` in a study's result JSON.

    Args:
        study: the JSON ``studies/credit_assignment.py`` writes (its ``runs`` block).
        task: the small-policy study's task (``None``: ``keydoor``); for a pretrained-LM
            study, ``None`` or the one task it ran.
        measure: ``final`` (the last held-out evaluation's success) or ``train`` (the mean
            ``rollout/success`` of the iterations ``first..last``, both included).
        iterations: ``(first, last)``, needed by ``train``.

    Raises:
        KeyError: the study has no such task or method (the message names what it has).
        ValueError: an unknown measure, or ``train`` without iterations or with iterations a
            seed did not run.
    """
    method_runs = _method_runs(study, task, method)
    if measure not in MEASURES:
        raise ValueError(f"unknown measure {measure!r}: one of {MEASURES}")
    if measure == "train" and iterations is None:
        raise ValueError("the train measure needs iterations=(first, last)")
    values: dict[int, float] = {}
    for seed, figures in method_runs.items():
        if measure == "final":
            values[int(seed)] = float(figures["final_success"])
            continue
        first, last = iterations
        logged = dict(zip(figures["iterations"], figures["rollout/success"], strict=True))
        wanted = range(first, last + 1)
        missing = [i for i in wanted if i not in logged]
        if missing or first > last:
            raise ValueError(f"seed {seed} of {method} logged iterations "
                             f"{min(logged)}..{max(logged)}, not {first}..{last}")
        values[int(seed)] = float(np.mean([logged[i] for i in wanted]))
    return values


def _side(spec: str) -> tuple[Path, str]:
    path, sep, method = spec.rpartition(":")
    if not sep or not path or not method:
        raise argparse.ArgumentTypeError(f"{spec!r}: expected RESULTS.json:METHOD")
    return Path(path), method


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=_side, help="RESULTS.json:METHOD, the first side")
    parser.add_argument("b", type=_side, help="RESULTS.json:METHOD, the second side")
    parser.add_argument("--task", default=None,
                        help="the small-policy study's task (default keydoor); a "
                             "pretrained-LM study's JSON names its one task")
    parser.add_argument("--measure", choices=MEASURES, default="final")
    parser.add_argument("--iterations", type=int, nargs=2, metavar=("FIRST", "LAST"),
                        help="the train measure's iterations, both included")
    args = parser.parse_args(argv)
    if args.measure == "train" and args.iterations is None:
        parser.error("--measure train needs --iterations FIRST LAST")
    sides, studies = [], []
    for path, method in (args.a, args.b):
        try:
            study = json.loads(path.read_text())
            studies.append(study)
            sides.append(seed_values(study, args.task, method, args.measure,
                                     tuple(args.iterations) if args.iterations else None))
        except (OSError, json.JSONDecodeError, KeyError, ValueError) as error:
            message = error.args[0] if isinstance(error, KeyError) else error
            print(f"error: {path}: {message}", file=sys.stderr)
            return 2
    try:
        result = paired_comparison(*sides)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    what = ("held-out success at the last evaluation" if args.measure == "final" else
            f"training-rollout success, mean of iterations {args.iterations[0]}"
            f"-{args.iterations[1]}")
    task = args.task or _lm_task(studies[0]) or _lm_task(studies[1]) or "keydoor"
    print(f"{task}, {what}, seeds {result['seeds']}:")
    for side, (path, method) in zip(("a", "b"), (args.a, args.b), strict=True):
        row = result[side]
        low, high = row["ci95"]
        print(f"  {side}: {method} ({path.name}) {row['mean']:.3f} [{low:.3f}, {high:.3f}]  "
              + " ".join(f"{v:.3f}" for v in row["values"]))
    low, high = result["difference_ci95"]
    print(f"a - b: {result['mean_difference']:+.3f} [{low:+.3f}, {high:+.3f}], paired "
          f"permutation p = {result['p_value']:.3f} ({len(result['seeds'])} seeds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
