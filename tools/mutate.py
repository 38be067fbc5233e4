"""One-line mutation testing of the training code: does some test fail when the code is wrong?

Each mutant changes one thing in one module -- an arithmetic or comparison operator, a
boolean operator, a ``not`` or unary minus dropped, a number or ``True``/``False``
changed, a call statement deleted, or one keyword argument left out of a call (the
callee's default is used instead: "the learner ignores the configured gamma"). The module
is rewritten with :func:`ast.unparse` in a scratch copy of the repository, the tests mapped
to that module run with ``-x``, and the mutant counts as killed when they fail (or run past
the time limit). Docstrings, type annotations, ``raise`` and ``assert`` are never mutated.

Mutants are drawn at random (``--per-module``, ``--seed``) from every mutation point, so
the killed share is an estimate; the list of survivors is printed to read.

Usage (from the repository root)::

    nice -n 5 python tools/mutate.py --per-module 30 --seed 0

Modules and their tests are :data:`TARGETS`; ``--module`` restricts the run to some, and
``--match TEXT`` to the mutants whose description contains ``TEXT`` (e.g. ``--match
penalties`` for every mutation of a line that names the penalties; repeatable), all of
them rather than a random draw. ``--function NAME`` draws ``--per-module`` mutants from the
lines of each function (or method) of that name instead of from the whole module, so every
named function is mutated (repeatable). ``--killers`` runs every test on each mutant (no
``-x``) and names the tests that fail: which test pins which behaviour.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TARGETS = {
    "algorithms/objectives/advantages.py": ["tests/algorithms/test_advantages.py",
                                 "tests/algorithms/test_frontier_estimators.py",
                                 "tests/algorithms/test_recipe.py"],
    "algorithms/objectives/advantage_kernels.py": ["tests/algorithms/test_advantages.py",
                                        "tests/algorithms/test_frontier_estimators.py",
                                        "tests/algorithms/test_estimators.py"],
    "algorithms/objectives/losses.py": ["tests/algorithms/test_losses.py",
                             "tests/algorithms/test_recipe.py"],
    "algorithms/training/learner.py": ["tests/algorithms/test_learner.py",
                              "tests/algorithms/test_recipe.py"],
    "algorithms/training/micro_batches.py": ["tests/algorithms/test_learner.py",
                                    "tests/algorithms/test_recipe.py"],
    "algorithms/training/batch_scoring.py": ["tests/algorithms/test_learner.py",
                                    "tests/algorithms/test_recipe.py"],
    "algorithms/training/learner_setup.py": ["tests/algorithms/test_learner.py",
                                    "tests/algorithms/test_recipe.py"],
    "algorithms/training/estimation.py": ["tests/algorithms/test_estimators.py",
                                 "tests/algorithms/test_frontier_estimators.py",
                                 "tests/algorithms/test_recipe.py"],
    "algorithms/config.py": ["tests/algorithms/test_config.py",
                             "tests/algorithms/test_recipe.py"],
    "algorithms/agent/rollout.py": ["tests/algorithms/test_rollout.py",
                              "tests/algorithms/test_transcript.py"],
    "algorithms/agent/env_slot.py": ["tests/algorithms/test_rollout.py",
                               "tests/algorithms/test_transcript.py"],
    "algorithms/agent/prompt_strategies.py": ["tests/algorithms/test_prompt_strategies.py",
                                        "tests/algorithms/test_transcript.py"],
    "algorithms/agent/step_batch.py": ["tests/algorithms/test_step_batch.py",
                                 "tests/algorithms/test_rollout.py"],
    "algorithms/training/transcript.py": ["tests/algorithms/test_transcript_view.py",
                                 "tests/algorithms/test_transcript.py"],
}
"""Module -> the test files run against its mutants (a fast subset of tests/algorithms)."""

_SWAPS: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult,
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.And: ast.Or, ast.Or: ast.And,
    ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
}


@dataclass(frozen=True)
class Mutant:
    """One mutation: the ``index``-th mutation point of ``module`` (in :func:`_points` order).

    Attributes:
        module: repository-relative path.
        index: position in the module's list of mutation points.
        line: source line of the mutated node.
        description: what changes.
    """

    module: str
    index: int
    line: int
    description: str


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """ids of nodes never mutated: docstrings, type annotations, ``raise`` and ``assert``."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            skipped.update(id(n) for n in ast.walk(body[0]))
        if isinstance(node, ast.Raise | ast.Assert):
            skipped.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skipped.update(id(n) for n in ast.walk(node))  # attribute docstrings
        annotations = [getattr(node, "annotation", None), getattr(node, "returns", None)]
        for annotation in annotations:  # type hints do nothing at run time here
            if annotation is not None:
                skipped.update(id(n) for n in ast.walk(annotation))
    return skipped


def _points(tree: ast.AST) -> list[tuple[ast.AST, str, object]]:
    """Every mutation point of ``tree`` as ``(node, kind, detail)``, in a fixed order."""
    skipped = _skipped_nodes(tree)
    points: list[tuple[ast.AST, str, object]] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _SWAPS:
            points.append((node, "op", None))
        elif isinstance(node, ast.BoolOp):
            points.append((node, "op", None))
        elif isinstance(node, ast.Compare):
            for position, op in enumerate(node.ops):
                if type(op) in _SWAPS:
                    points.append((node, "compare", position))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub):
            points.append((node, "unary", None))
        elif isinstance(node, ast.Constant) and type(node.value) in (bool, int, float):
            points.append((node, "constant", None))
        elif isinstance(node, ast.Call):
            for position, keyword in enumerate(node.keywords):
                if keyword.arg is not None:
                    points.append((node, "keyword", position))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            points.append((node, "delete", None))
    return points


def _changed_constant(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if value == 0:
        return type(value)(1)
    return value + 1 if isinstance(value, int) else value * 2


def _describe(node: ast.AST, kind: str, detail: object, lines: list[str]) -> str:
    if kind == "op":
        return f"{type(node.op).__name__} -> {_SWAPS[type(node.op)].__name__}: " \
               f"{ast.unparse(node)[:70]}"
    if kind == "compare":
        op = node.ops[detail]
        return f"{type(op).__name__} -> {_SWAPS[type(op)].__name__}: {ast.unparse(node)[:70]}"
    if kind == "unary":
        return f"drop {type(node.op).__name__}: {ast.unparse(node)[:70]}"
    if kind == "constant":  # the line names the site (a number alone repeats)
        line = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
        return f"{node.value!r} -> {_changed_constant(node.value)!r}: {line[:70]}"
    if kind == "keyword":
        keyword = node.keywords[detail]
        return f"leave out {keyword.arg}=: {ast.unparse(node)[:70]}"
    return f"delete: {ast.unparse(node)[:70]}"


class _Apply(ast.NodeTransformer):
    """Applies the mutation at one node (found by identity in a fresh parse)."""

    def __init__(self, target: ast.AST, kind: str, detail: object):
        self.target, self.kind, self.detail = target, kind, detail

    def visit(self, node: ast.AST) -> ast.AST | None:
        if node is not self.target:
            return self.generic_visit(node)
        kind, detail = self.kind, self.detail
        if kind == "op":
            node.op = _SWAPS[type(node.op)]()
        elif kind == "compare":
            node.ops[detail] = _SWAPS[type(node.ops[detail])]()
        elif kind == "unary":
            return node.operand
        elif kind == "constant":
            node.value = _changed_constant(node.value)
        elif kind == "keyword":
            del node.keywords[detail]
        elif kind == "delete":
            return ast.Pass()
        return node


def mutants(root: Path, module: str) -> list[Mutant]:
    """Every mutant of ``module`` (repository-relative) under ``root``."""
    source = (root / module).read_text()
    tree, lines = ast.parse(source), source.splitlines()
    return [Mutant(module, i, getattr(node, "lineno", 0), _describe(node, kind, detail, lines))
            for i, (node, kind, detail) in enumerate(_points(tree))]


def mutated_source(source: str, index: int) -> str:
    """``source`` with its ``index``-th mutation point applied."""
    tree = ast.parse(source)
    node, kind, detail = _points(tree)[index]
    tree = _Apply(node, kind, detail).visit(copy.copy(tree))
    return ast.unparse(ast.fix_missing_locations(tree))


def function_lines(root: Path, module: str, names: list[str]) -> dict[str, tuple[int, int]]:
    """First and last line of each function (or method) of ``module`` named in ``names``
    (a name defined twice: its first definition)."""
    tree = ast.parse((root / module).read_text())
    found: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in names:
            found.setdefault(node.name, (node.lineno, node.end_lineno or node.lineno))
    return found


def _replayed(path: Path, module: str, every: list[Mutant]) -> list[Mutant]:
    """The mutants of ``every`` that survived in the run saved at ``path``."""
    survivors = [r["mutation"] for r in json.loads(path.read_text())
                 if r["module"] == module and r["outcome"] == "passed"]
    by_description: dict[str, list[Mutant]] = {}
    for mutant in every:
        by_description.setdefault(mutant.description, []).append(mutant)
    chosen = []
    for description in survivors:
        matches = by_description.get(description, [])
        if not matches:
            print(f"  {module}: no longer a mutation point: {description}")
            continue
        chosen.append(matches.pop(0))
    return chosen


def _not_copied(root: Path):
    """``copytree``'s ignore function: caches everywhere, but ``runs/`` (training outputs)
    only at the top (``algorithms/runs/`` is code)."""
    caches = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "*.egg-info")

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = set(caches(folder, names))
        if Path(folder).resolve() == root:
            skipped |= {"runs"} & set(names)
        return skipped

    return ignore


def _run_tests(scratch: Path, tests: list[str], timeout: float,
               killers: list[str] | None = None) -> str:
    """``"passed"``, ``"failed"`` or ``"timeout"``. With a ``killers`` list, every test
    runs (no ``-x``) and the ids of the failing ones are appended to it."""
    stop = [] if killers is not None else ["-x"]
    command = [sys.executable, "-m", "pytest", *stop, "-q", "-rf", "--tb=no", "-p",
               "no:cacheprovider", "-m", "not slow", *tests]
    try:
        result = subprocess.run(command, cwd=scratch, capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    if killers is not None:
        killers.extend(line.split()[1] for line in result.stdout.splitlines()
                       if line.startswith(("FAILED ", "ERROR ")))
    return "passed" if result.returncode == 0 else "failed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-module", type=int, default=30,
                        help="mutants drawn per module (0: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw")
    parser.add_argument("--module", action="append", choices=sorted(TARGETS),
                        help="only these modules (repeatable; default: all of TARGETS)")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository to mutate (its tests are the ones run)")
    parser.add_argument("--json", type=Path, help="also write every result here")
    parser.add_argument("--tests", nargs="+",
                        help="run these test files instead of the module's mapped ones")
    parser.add_argument("--match", action="append", default=[],
                        help="only the mutants whose description contains this text "
                             "(repeatable; all of them, no random draw)")
    parser.add_argument("--function", action="append", default=[],
                        help="draw --per-module mutants from each function of this name "
                             "(repeatable; a module without one gets no mutant)")
    parser.add_argument("--killers", action="store_true",
                        help="run every test on each mutant (no -x) and name the failing "
                             "ones (printed, and saved as killed_by in --json)")
    parser.add_argument("--replay", type=Path,
                        help="a --json file of an earlier run: run its survivors again "
                             "(matched by module and description; lines may have moved)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    rng = random.Random(args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="agentgym-mutants-") as tmp:
        scratch = Path(tmp) / "repo"
        shutil.copytree(root, scratch, ignore=_not_copied(root))
        for module in args.module or sorted(TARGETS):
            tests = args.tests or TARGETS[module]
            start = time.monotonic()
            if _run_tests(scratch, tests, timeout=600) != "passed":
                print(f"{module}: its tests fail without mutation; skipped", file=sys.stderr)
                continue
            timeout = max(30.0, 4 * (time.monotonic() - start))
            original = (scratch / module).read_text()
            every = mutants(scratch, module)
            if args.replay is not None:
                chosen = _replayed(args.replay, module, every)
            elif args.match:
                chosen = [m for m in every if any(text in m.description for text in args.match)]
            elif args.function:
                chosen = []
                for first, last in function_lines(scratch, module, args.function).values():
                    inside = [m for m in every if first <= m.line <= last]
                    count = len(inside) if args.per_module <= 0 else min(args.per_module,
                                                                         len(inside))
                    chosen += rng.sample(inside, count)
                chosen.sort(key=lambda m: m.index)
            else:
                chosen = every if args.per_module <= 0 else sorted(
                    rng.sample(every, min(args.per_module, len(every))), key=lambda m: m.index)
            killed = 0
            for mutant in chosen:
                (scratch / module).write_text(mutated_source(original, mutant.index))
                killers: list[str] | None = [] if args.killers else None
                outcome = _run_tests(scratch, tests, timeout, killers)
                (scratch / module).write_text(original)
                killed += outcome != "passed"
                result = {"module": module, "line": mutant.line,
                          "mutation": mutant.description, "outcome": outcome}
                if killers is not None:
                    result["killed_by"] = killers
                results.append(result)
                if outcome == "passed":
                    print(f"  survived {module}:{mutant.line}  {mutant.description}")
                elif killers is not None:
                    print(f"  {outcome} {module}:{mutant.line}  {mutant.description}  by "
                          f"{', '.join(killers) or '(time limit)'}", flush=True)
            print(f"{module}: {killed}/{len(chosen)} killed "
                  f"({len(every)} mutation points)", flush=True)
            if args.json is not None:  # after every module: a stopped run keeps its results
                args.json.write_text(json.dumps(results, indent=1))
    total = len(results)
    killed = sum(r["outcome"] != "passed" for r in results)
    if total:
        print(f"all: {killed}/{total} killed ({100 * killed / total:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
