"""The import arrows point down (``benchmarks`` -> ``studies`` -> ``train.py`` ->
``algorithms`` -> ``agentgym`` -> ``retrieval``), no modules import each other in a
circle, and no class outgrows :data:`MAX_CLASS_LINES`.

Every import counts, those inside functions too (a lazy import still ties the two modules
together), except those under ``if TYPE_CHECKING:`` (annotations only, never run). A
module importing its own parent package is not an edge: Python runs the parent's
``__init__`` first anyway.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
LAYERS = ("benchmarks", "studies", "train", "algorithms", "agentgym", "retrieval")
"""Top to bottom: each may import the ones after it, never one before it. A benchmark
(speed, memory, parity with the original code) may reuse a study's tasks, statistics and
models; a study never imports a benchmark."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {"train": REPO / "train.py"}
    for package in (layer for layer in LAYERS if layer != "train"):
        found.update({_module_name(path): path for path in (REPO / package).rglob("*.py")})
    return found


def imported_modules(source: str, name: str, *, is_package: bool,
                     known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` (module ``name``) imports at run time."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for statement in child.orelse:
                    visit(statement)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                module = child.module or ""
                if child.level:
                    base = name.split(".")[: None if is_package else -1]
                    base = base[: len(base) - child.level + 1]
                    module = ".".join([*base, module] if module else base)
                submodules = {f"{module}.{alias.name}" for alias in child.names} & known
                found.update(submodules)
                if len(submodules) < len(child.names):
                    found.add(module)
            visit(child)

    visit(ast.parse(source))
    return {module for module in found
            if module in known and module != name and not name.startswith(module + ".")}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: imported_modules(path.read_text(), name, is_package=path.name == "__init__.py",
                                   known=known)
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_checker_sees_a_circle_and_ignores_type_checking_imports():
    known = {"pkg", "pkg.a", "pkg.b"}
    lazy = "def f():\n    from pkg import b\n"
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n"
    assert imported_modules(lazy, "pkg.a", is_package=False, known=known) == {"pkg.b"}
    assert imported_modules(typed, "pkg.b", is_package=False, known=known) == set()
    assert imported_modules("from . import b\n", "pkg.a", is_package=False,
                            known=known) == {"pkg.b"}
    assert imported_modules("from pkg import X\n", "pkg.a", is_package=False,
                            known=known) == set()  # its own package
    assert cycles({"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg": set()}) == [["pkg.a", "pkg.b"]]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_no_module_imports_a_layer_above_its_own(graph):
    upward = [f"{name} -> {target}" for name, targets in graph.items() for target in targets
              if LAYERS.index(target.split(".")[0]) < LAYERS.index(name.split(".")[0])]
    assert upward == []


def test_no_modules_import_each_other_in_a_circle(graph):
    assert len(graph) > 100  # every package was read
    assert cycles(graph) == []


ENV_PACKAGES = ("alfworld", "webshop", "searchqa", "keydoor", "scripted", "sokoban",
                "frozenlake")
"""agentgym's env modules: ``algorithms`` reads what an env declares (``agentgym.core``,
through ``agentgym.registration``) and never imports one."""


def test_algorithms_imports_no_env_module(graph):
    named = [f"{name} -> {target}" for name, targets in graph.items()
             if name.split(".")[0] in ("train", "algorithms") for target in targets
             if target.startswith("agentgym.") and target.split(".")[1] in ENV_PACKAGES]
    assert named == []


ALGORITHMS_LAYERS = ("algorithms.sft", "algorithms.integrations", "algorithms.training",
                     "algorithms.gateway", "algorithms.agent", "algorithms.engines", "algorithms.runs",
                     "algorithms.presets", "algorithms.config", "algorithms.templates",
                     "algorithms.precision", "algorithms.objectives")
"""``algorithms``' own rooms, top to bottom: each may import those after it, never one
before it (the pure maths at the bottom imports nothing of ``algorithms``)."""


def _room(module: str) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "algorithms" and len(parts) > 1 else None


def test_algorithms_rooms_import_only_rooms_below_them(graph):
    rooms = {_room(name) for name in graph} - {None}
    assert rooms == set(ALGORITHMS_LAYERS)  # a new room must be placed in the order
    upward = [f"{name} -> {target}" for name, targets in graph.items() for target in targets
              if _room(name) and _room(target) and _room(name) != _room(target)
              and ALGORITHMS_LAYERS.index(_room(target)) < ALGORITHMS_LAYERS.index(_room(name))]
    assert upward == []
    assert not any(_room(target) for name, targets in graph.items()
                   if _room(name) == "algorithms.objectives" for target in targets
                   if _room(target) != "algorithms.objectives")


MAX_CLASS_LINES = 300
"""The longest a class may be, from its ``class`` line (or first decorator) to its last
line, docstring and comments included: past it, a class holds more than one job."""


def long_classes(source: str, limit: int) -> list[tuple[str, int]]:
    """``(name, lines)`` of each class in ``source``, nested ones included, longer than
    ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if node.end_lineno - start + 1 > limit:
                found.append((node.name, node.end_lineno - start + 1))
    return found


def test_the_class_length_check_counts_from_the_decorator_to_the_last_line():
    source = "@dataclass\nclass A:\n    x: int\n    y: int\n\n\nclass B:\n    pass\n"
    assert long_classes(source, 3) == [("A", 4)]
    assert long_classes(source, 4) == []
    nested = "class Outer:\n    class Inner:\n        a = 1\n        b = 2\n"
    assert long_classes(nested, 2) == [("Outer", 4), ("Inner", 3)]


def test_no_class_is_over_300_lines():
    paths = [path for path in REPO.rglob("*.py")
             if not any(part.startswith(".") or part in ("runs", "node_modules")
                        for part in path.relative_to(REPO).parts)]
    assert len(paths) > 300  # the whole tree was read
    long = [f"{path.relative_to(REPO)}: {name} ({lines} lines)" for path in paths
            for name, lines in long_classes(path.read_text(encoding="utf-8"), MAX_CLASS_LINES)]
    assert long == []
