"""The ALFWorld engine: TextWorld's PDDL game logic, made fast by caching pure work.

ALFWorld plays a ``game.tw-pddl`` through ``textworld.envs.pddl.PddlEnv`` (fast-downward
for the PDDL state, TextWorld's context-sensitive grammar for the text) wrapped in
alfworld's ``AlfredDemangler`` (object ids -> "cabinet 1"). :class:`AlfredEngine` plays
the same games with the same library objects -- ``PddlState``'s fact store and
``all_assignments`` queries, fast-downward's operators and effects, the game's own
grammar rules, alfworld's ``Demangler`` -- and gives byte-identical text and admissible
commands (``tests/agentgym/alfworld/test_engine_differential.py`` checks it against
:class:`ReferenceEngine`, the unmodified stack). What it changes is only *when* pure work
is done:

* **grammar parses** -- TextWorld re-parses every template string with TatSu on every
  derivation (``ContextSensitiveGrammar.derive``) and every rule condition on every
  match, and deep-copies the derivation context for each symbol; this was ~95% of a
  step. Here each string is parsed once per process into immutable nodes, and contexts
  are copied shallowly (their values are never mutated).
* **the game logic** -- a game's grammar is alfworld's ``alfred.twl2`` with the task
  sentence filled in. It is parsed once per distinct grammar-with-the-task-masked, and
  only the task rule is parsed per game.
* **the PDDL->SAS translation** -- TextWorld runs ``fast_downward.pddl2sas`` twice on
  ``load()`` and twice again on every ``reset()`` (once more with planner optimizations,
  used only for re-planning, which the env never asks for, so it is skipped). Here it
  runs once per game and process (LRU cache of :data:`TRANSLATION_CACHE_SIZE` games,
  shared by the engines of a process: a group of envs playing one game translates it
  once); a reset reloads the cached SAS text into fast-downward and restores copies of
  the cached initial fact store and intro text (a game's initial state never varies).
* **admissible commands** -- a command's text is derived from its operator's arguments
  and, in ALFWorld's grammar, from static facts only (e.g. ``receptacleatlocation``).
  When a command template's derivation reads only predicates that no action changes, its
  text is memoized per operator and game; otherwise it is derived every step.

Processes, not threads: ``fast_downward.pddl2sas`` rewrites ``sys.argv`` (we restore it)
and swaps ``sys.stdout`` while it runs, and each fast-downward library copy holds one
global task; nothing here is safe to call from several threads at once.
Parallelize with processes (the vector env's subprocess backend). Each
:class:`AlfredEngine` takes a library copy from a per-process pool (:func:`acquire_lib`);
``fast_downward.load_lib`` copies and ``dlopen``\\ s a 34 MB ``libdownward.so`` (a few
MB resident, more once a task is loaded) that is never unloaded, so engines return their
copy on :meth:`close` (or when garbage-collected) and new engines reuse it -- a process
holds at most as many copies as engines alive at once.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import weakref
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

TRANSLATION_CACHE_SIZE = 16
"""Games whose PDDL->SAS translation a process keeps besides those loaded (~5 MB each)."""
LOGIC_CACHE_SIZE = 8
"""Distinct game grammars (with the task masked) a process keeps parsed."""
NOTHING_HAPPENS = "Nothing happens."
"""TextWorld's answer to a command that matches no applicable action."""

_TASK_RULE = re.compile(r'("task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*)"((?:[^"\\]|\\.)*)"')
_MASKED_TASK = '"Your task is to: UNKNOWN GOAL."'
_TRANSLATE_LOCK = threading.Lock()


def import_alfworld() -> None:
    """Import alfworld without its side effect on ``$ALFWORLD_DATA``.

    ``alfworld/info.py`` sets ``os.environ["ALFWORLD_DATA"]`` to ``~/.cache/alfworld``
    when it is unset; we restore the variable so that our data lookup stays the user's.
    """
    before = os.environ.get("ALFWORLD_DATA")
    import alfworld.agents.utils.misc  # noqa: F401

    if before is None:
        os.environ.pop("ALFWORLD_DATA", None)
    else:
        os.environ["ALFWORLD_DATA"] = before


# ---------------------------------------------------------------- library pool
_FREE_LIBS: list[Any] = []
_POOL_LOCK = threading.Lock()


def acquire_lib() -> Any:
    """A fast-downward library copy from this process's pool (loads one if none is free)."""
    with _POOL_LOCK:
        if _FREE_LIBS:
            return _FREE_LIBS.pop()
    import fast_downward

    return fast_downward.load_lib()


def release_lib(lib: Any) -> None:
    """Give a library copy back to the pool, freeing the task it holds."""
    lib.cleanup()
    with _POOL_LOCK:
        _FREE_LIBS.append(lib)


def pool_size() -> int:
    """Free library copies in this process's pool."""
    with _POOL_LOCK:
        return len(_FREE_LIBS)


# ---------------------------------------------------------------- grammar nodes
# Immutable stand-ins for textworld.envs.pddl.textgen symbols:
#   ("t", text) terminal, ("n", name) nonterminal, ("e", code, source) eval,
#   ("c", node, query_or_None) conditional, ("l", node) list.
Node = tuple


@lru_cache(maxsize=4096)
def _query(expression: str) -> Any:
    from textworld.logic import Rule

    return Rule.parse_conjunctive_query(expression)


@lru_cache(maxsize=4096)
def _compile(expression: str) -> Any:
    return compile(expression, "<grammar>", "eval")


def _to_node(symbol: Any) -> Node:
    from textworld.envs.pddl import textgen

    if isinstance(symbol, textgen.TerminalSymbol):
        return ("t", str(symbol.symbol))
    if isinstance(symbol, textgen.NonterminalSymbol):
        return ("n", str(symbol.symbol))
    if isinstance(symbol, textgen.EvalSymbol):
        return ("e", _compile(symbol.expression), symbol.expression)
    if isinstance(symbol, textgen.ConditionalSymbol):
        return ("c", _to_node(symbol.expression), _query(symbol.given) if symbol.given else None)
    if isinstance(symbol, textgen.ListSymbol):
        return ("l", _to_node(symbol.symbol))
    raise NotImplementedError(f"unknown grammar symbol {symbol!r}")


@lru_cache(maxsize=8192)
def parse_symbols(text: str) -> tuple[Node, ...]:
    """TextWorld's parse of a grammar string (rule ``symbols``), as immutable nodes."""
    from textworld.envs.pddl import textgen

    return tuple(_to_node(s) for s in textgen._parse_and_convert(text, rule_name="symbols"))


@dataclass(frozen=True)
class GrammarRule:
    """One production: applicable when ``condition`` (a query) has a match."""

    condition: Any
    rhs: tuple[Node, ...]


def _convert_rules(grammar: Any) -> dict[str, tuple[GrammarRule, ...]]:
    return {
        name: tuple(
            GrammarRule(_query(r.condition) if r.condition else None,
                        tuple(_to_node(s) for s in r.rhs))
            for r in rules
        )
        for name, rules in grammar._rules.items()
    }


@dataclass
class Logic:
    """A game's parsed logic: TextWorld's ``GameLogic`` plus the grammar as nodes."""

    game_logic: Any
    rules: dict[str, tuple[GrammarRule, ...]]


@lru_cache(maxsize=LOGIC_CACHE_SIZE)
def _parse_logic(domain: str, grammar: str) -> Logic:
    from textworld.envs.pddl.logic import GameLogic

    game_logic = GameLogic(domain=domain, grammar=grammar)
    return Logic(game_logic, _convert_rules(game_logic.grammar))


def load_logic(domain: str, grammar: str) -> Logic:
    """Parse a game's logic, reusing the parse of its grammar with the task masked.

    Equal to ``GameLogic(domain, grammar)``: grammar rules are parsed one by one, so the
    task rule parsed alone gives the same symbols as inside the document.
    """
    matches = list(_TASK_RULE.finditer(grammar))
    if len(matches) != 1:
        return _parse_logic(domain, grammar)
    match = matches[0]
    masked = grammar[: match.start(2) - 1] + _MASKED_TASK + grammar[match.end(2) + 1 :]
    base = _parse_logic(domain, masked)
    task_rhs = json.loads('"' + match.group(2) + '"')
    rules = dict(base.rules)
    rules["task"] = (GrammarRule(None, parse_symbols(task_rhs)),)
    return Logic(base.game_logic, rules)


# ---------------------------------------------------------------- derivation
@dataclass
class _Context:
    state: Any
    entity_infos: Mapping[str, Any]
    variables: dict[str, Any]
    mapping: dict[Any, Any]

    def child(self, variables: Mapping[str, Any], mapping: Mapping[Any, Any]) -> _Context:
        return _Context(self.state, self.entity_infos, {**self.variables, **variables},
                        {**self.mapping, **mapping})

    def as_textworld(self) -> dict[str, Any]:
        return {"state": self.state, "facts": list(self.state.facts), "variables": self.variables,
                "mapping": self.mapping, "entity_infos": self.entity_infos}


def _has_match(state: Any, query: Any, mapping: Mapping[Any, Any]) -> bool:
    return next(iter(state.all_assignments(query, mapping)), None) is not None


def derive(rules: Mapping[str, tuple[GrammarRule, ...]], start: str, context: _Context) -> str:
    """``ContextSensitiveGrammar.derive`` with cached parses and shallow context copies.

    Same derivation stack, same rule choice (the first applicable), same query order.
    """
    from textworld.envs.pddl import textgen

    stack: list[tuple[Node, _Context]] = [(n, context) for n in reversed(parse_symbols(start))]
    out: list[str] = []
    while stack:
        node, ctx = stack.pop()
        kind = node[0]
        if kind == "t":
            out.append(node[1])
        elif kind == "n":
            candidates = rules.get(node[1])
            if not candidates:
                raise textgen.CSGUnknownSymbolError(textgen.NonterminalSymbol(node[1]))
            rule = next(r for r in candidates
                        if r.condition is None or _has_match(ctx.state, r.condition, ctx.mapping))
            stack.extend((n, ctx) for n in reversed(rule.rhs))
        elif kind == "e":
            out.append(str(_evaluate(node, ctx)))
        elif kind == "c":
            stack.extend((node[1], c) for c in reversed(_conditional_contexts(node, ctx)))
        elif kind == "l":
            stack.extend(reversed(_list_items(node[1], ctx)))
        else:  # pragma: no cover - _to_node makes only the kinds above
            raise NotImplementedError(kind)
    return "".join(out)


def _evaluate(node: Node, ctx: _Context) -> Any:
    from textworld.envs.pddl import textgen

    code = node[1]
    names: dict[str, Any] = {}
    if "context" in code.co_names:
        names["context"] = ctx.as_textworld()
    names.update(ctx.variables)
    return eval(code, vars(textgen), names)  # the grammar's own {expressions}, as TextWorld does


def _conditional_contexts(node: Node, ctx: _Context) -> list[_Context]:
    query = node[2]
    if query is None:
        return [ctx]
    infos = ctx.entity_infos
    return [ctx.child({ph.name: infos[var.name] for ph, var in m.items()}, m)
            for m in ctx.state.all_assignments(query, ctx.mapping)]


def _list_items(inner: Node, ctx: _Context) -> list[tuple[Node, _Context]]:
    if inner[0] == "c":
        items = [(inner[1], c) for c in _conditional_contexts(inner, ctx)]
    elif inner[0] == "e":
        items = [(("t", str(_evaluate(inner, ctx))), ctx)]
    else:
        raise NotImplementedError(f"list of {inner[0]!r} symbols")
    if not items:
        return [(("n", "list_empty"), ctx)]
    if len(items) == 1:
        return items
    result = []
    for item in items[:-1]:
        result += [item, (("n", "list_separator"), ctx)]
    result[-1] = (("n", "list_last_separator"), ctx)
    return result + [items[-1]]


def _predicates_read(rules: Mapping[str, tuple[GrammarRule, ...]], nodes: tuple[Node, ...],
                     seen: set[str]) -> set[str] | None:
    """Predicate names a derivation of ``nodes`` may query; ``None`` if it may eval context."""
    found: set[str] = set()
    todo = list(nodes)
    while todo:
        node = todo.pop()
        kind = node[0]
        if kind == "e":
            if "context" in node[1].co_names:
                return None
        elif kind == "c":
            todo.append(node[1])
            if node[2] is not None:
                found.update(p.name for p in node[2].preconditions)
        elif kind == "l":
            todo.append(node[1])
            todo.append(("n", "list_empty"))
            todo.append(("n", "list_separator"))
            todo.append(("n", "list_last_separator"))
        elif kind == "n" and node[1] not in seen:
            seen.add(node[1])
            for rule in rules.get(node[1], ()):
                if rule.condition is not None:
                    found.update(p.name for p in rule.condition.preconditions)
                todo.extend(rule.rhs)
    return found


# ---------------------------------------------------------------- translation
@dataclass
class Translation:
    """A game's PDDL->SAS translation and what its initial state always gives."""

    task: Any
    """The normalized PDDL task; dropped once the initial facts are known (it is large)."""
    sas: bytes
    types: tuple[tuple[str, tuple[str, ...]], ...]
    name2type: dict[str, str]
    actions: dict[str, Any]
    fluents: frozenset[str]
    initial: dict[str, Any] = field(default_factory=dict)


_TRANSLATIONS: OrderedDict[tuple[str, str], Translation] = OrderedDict()


def translate(domain: str, problem: str) -> Translation:
    """``fast_downward.pddl2sas(domain, problem)`` (the unoptimized translation), cached.

    Not thread-safe in spirit: ``pddl2sas`` rewrites ``sys.argv`` (restored here) and
    swaps ``sys.stdout`` while it runs; a lock serializes our own calls.
    """
    key = (domain, problem)
    with _TRANSLATE_LOCK:
        cached = _TRANSLATIONS.get(key)
        if cached is not None:
            _TRANSLATIONS.move_to_end(key)
            return cached
        import fast_downward
        from textworld.utils import check_flag

        argv = sys.argv
        try:
            task, sas = fast_downward.pddl2sas(domain, problem, verbose=check_flag("TW_PDDL_DEBUG"))
        finally:
            sys.argv = argv
        fluents = {eff.literal.predicate.lower() for a in task.actions for eff in a.effects}
        fluents |= {ax.name.lower() for ax in task.axioms}
        translation = Translation(
            task=task,
            sas=sas.encode("utf-8"),
            types=tuple((t.name, tuple(t.supertype_names)) for t in task.types),
            name2type={o.name: o.type_name for o in task.objects},
            actions={a.name: a for a in task.actions},
            fluents=frozenset(fluents),
        )
        _TRANSLATIONS[key] = translation
        while len(_TRANSLATIONS) > TRANSLATION_CACHE_SIZE:
            _TRANSLATIONS.popitem(last=False)
        return translation


def _initial_facts(translation: Translation, lib: Any) -> list[Any]:
    """The facts ``PddlState.__init__`` adds, in its order (after ``lib.load_sas``)."""
    import fast_downward
    from textworld.envs.pddl.logic import Atom
    from textworld.logic import Proposition, Variable

    name2type = translation.name2type
    facts = []
    for atom in translation.task.init:
        if isinstance(atom, fast_downward.translate.pddl.conditions.Atom):
            if atom.predicate == "=":
                continue
            facts.append(Proposition(atom.predicate, [Variable(a, name2type[a]) for a in atom.args]))
        elif isinstance(atom, fast_downward.translate.pddl.f_expression.Assign):
            if atom.fluent.symbol == "total-cost":
                continue
            name = f"{atom.expression.value}"
            if str.isdigit(name):
                continue
            facts.append(Proposition(name, [Variable(a, name2type[a]) for a in atom.fluent.args]))
    atoms = (Atom * lib.get_state_size())()
    lib.get_state(atoms)
    state_facts = (atom.get_fact(name2type) for atom in atoms)
    facts.extend(f for f in state_facts if not f.is_negation)
    return facts


def _copy_fact_store(store: tuple[Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any]:
    """Copy ``(_facts, _vars_by_name, _vars_by_type, _var_counts)`` of a ``State``."""
    facts, by_name, by_type, counts = store
    return (defaultdict(set, {k: v.copy() for k, v in facts.items()}), dict(by_name),
            defaultdict(set, {k: v.copy() for k, v in by_type.items()}), Counter(counts))


# ---------------------------------------------------------------- the engine
class AlfredEngine:
    """One ALFWorld game at a time, through TextWorld's PDDL logic with caches.

    Usage: ``load(game_file)``, then ``reset()`` and ``step(command)`` as often as
    wanted; ``load`` another game into the same engine (and fast-downward copy) later.

    Attributes after ``reset``: :attr:`admissible_commands` (sorted, "help" included,
    like TextWorld), :attr:`won`, :attr:`moves` (commands that matched an action).
    """

    def __init__(self) -> None:
        import_alfworld()
        self._lib = acquire_lib()
        self._finalizer = weakref.finalize(self, release_lib, self._lib)
        self._game: dict[str, Any] | None = None
        self._logic: Logic | None = None
        self._translation: Translation | None = None
        self._state: Any = None
        self._entity_infos: dict[str, Any] = {}
        self._command_cache: dict[str, str] = {}
        self._cacheable_templates: dict[str, bool] = {}
        self._operators: dict[str, Any] = {}
        self._commands: list[str] = []
        self._command_ops: list[str] = []
        self.admissible_commands: tuple[str, ...] = ()
        self.won = False
        self.moves = 0

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Return the fast-downward copy to the pool; the engine is unusable after."""
        self._finalizer()
        self._game = None

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def load(self, game_file: str | os.PathLike[str] | Mapping[str, Any]) -> None:
        """Load a game (a ``game.tw-pddl`` path or its parsed JSON)."""
        if self.closed:
            raise RuntimeError("AlfredEngine is closed")
        if isinstance(game_file, Mapping):
            data = dict(game_file)
        else:
            with open(game_file, encoding="utf-8") as f:
                data = json.load(f)
        for key in ("pddl_domain", "grammar", "pddl_problem"):
            if not isinstance(data.get(key), str):
                raise ValueError(f"ALFWorld game {game_file} lacks the text field {key!r}")
        self._game = None  # unusable until the new game is fully loaded
        logic = load_logic(data["pddl_domain"], data["grammar"])
        translation = translate(data["pddl_domain"], data["pddl_problem"])
        self._game, self._logic, self._translation = data, logic, translation
        # Command texts depend on the grammar too: keep them per (translation, grammar).
        self._command_cache = translation.initial.setdefault(("commands", data["grammar"]), {})
        self._cacheable_templates = {}
        try:
            self._new_state()
            self._entity_infos = self._make_entity_infos()
        except BaseException:
            self._game = None
            raise

    @property
    def walkthrough(self) -> tuple[str, ...]:
        """The game file's stored walkthrough (``()`` when it has none)."""
        return tuple((self._game or {}).get("walkthrough") or ())

    @property
    def display_names(self) -> dict[str, str]:
        """PDDL object id -> the name the text uses (``"potato 2"``), for the loaded game."""
        return {key: info.name for key, info in self._entity_infos.items()}

    def _make_entity_infos(self) -> dict[str, Any]:
        from alfworld.agents.utils.misc import Demangler
        from textworld.generator.game import EntityInfo

        infos = {v.name: EntityInfo(v.name, v.type) for fact in self._state.facts
                 for v in fact.arguments}
        for info in infos.values():  # PddlEnv._get_entity_infos
            info.name = info.id
            info.definite = "the"
            info.indefinite = "a"
        demangler = Demangler(game_infos=infos, shuffle=False)  # AlfredDemangler.load
        for info in infos.values():
            info.name = demangler.demangle_alfred_name(info.id)
        return infos

    def _new_state(self) -> None:
        from textworld.envs.pddl.logic import PddlState
        from textworld.logic import Type

        assert self._translation is not None and self._logic is not None
        translation, game_logic = self._translation, self._logic.game_logic
        state = PddlState.__new__(PddlState)
        # The attributes PddlState.__init__ sets, from the cached translation.
        state._logic = game_logic
        state.downward_lib = self._lib
        state.pddl_problem = self._game["pddl_problem"] if self._game else ""
        state._actions = translation.actions
        state.name2type = translation.name2type
        for name, supertypes in translation.types:
            try:
                game_logic.types.add(Type(name, list(supertypes)))
            except ValueError:
                pass
        self._lib.load_sas(translation.sas)
        snapshot = translation.initial.get("state")
        if snapshot is None:
            state._facts = defaultdict(set)
            state._vars_by_name = {}
            state._vars_by_type = defaultdict(set)
            state._var_counts = Counter()
            state.add_facts(_initial_facts(translation, self._lib))
            snapshot = (state._facts, state._vars_by_name, state._vars_by_type, state._var_counts)
            translation.initial["state"] = _copy_fact_store(snapshot)
            translation.task = None  # everything needed from it is kept apart
        else:  # the same store add_facts() built, copied (a reset must not alter the cache)
            snapshot = _copy_fact_store(snapshot)
        state._facts, state._vars_by_name, state._vars_by_type, state._var_counts = snapshot
        self._state = state

    def reset(self) -> str:
        """Restart the loaded game; returns the intro text (banner included)."""
        if self._game is None:
            raise RuntimeError("load() a game before reset()")
        self._new_state()
        self.moves = 0
        initial = self._translation.initial
        key = ("intro", self._game["grammar"])
        feedback = initial.get(key)
        if feedback is None:
            feedback = derive(self._logic.rules, "#intro#", self._context({}, {}))
            initial[key] = feedback
        self._gather()
        return feedback

    def step(self, command: str) -> str:
        """Execute ``command`` (stripped, matched exactly); returns the feedback text."""
        if self._game is None:
            raise RuntimeError("load() a game before step()")
        command = command.strip()
        try:
            index = self._commands.index(command)
            name = self._command_ops[index]
            op = self._operators[name]
            action = self._actions_mapping(name)
            self._apply(op)
            variables = {ph.name: self._entity_infos[v.name] for ph, v in action.items()}
            rule = self._logic.game_logic.actions[name.split()[0]].feedback_rule
            feedback = derive(self._logic.rules, rule, self._context(variables, action))
            self.moves += 1
        except ValueError:
            feedback = NOTHING_HAPPENS
        self._gather()
        return feedback

    # -------------------------------------------------------------- internals
    def _context(self, variables: dict[str, Any], mapping: dict[Any, Any]) -> _Context:
        return _Context(self._state, self._entity_infos, dict(variables), dict(mapping))

    def _actions_mapping(self, operator_name: str) -> dict[Any, Any]:
        from textworld.logic import Placeholder, Variable

        name, *arguments = operator_name.split()
        parameters = self._translation.actions[name].parameters
        return {Placeholder(p.name.strip("?"), p.type_name): Variable(arg, p.type_name)
                for p, arg in zip(parameters, arguments, strict=False)}

    def _apply(self, op: Any) -> None:
        from textworld.envs.pddl.logic import Atom

        effects = (Atom * op.nb_effect_atoms)()
        self._lib.apply_operator(op.id, effects)
        for effect in effects:  # PddlState.apply
            prop = effect.get_fact(self._translation.name2type)
            self._state.remove_fact(prop.negate())
            self._state.add_fact(prop)

    def _gather(self) -> None:
        import fast_downward

        count = self._lib.get_applicable_operators_count()
        operators = (fast_downward.Operator * count)()
        self._lib.get_applicable_operators(operators)
        self._operators = {}
        commands, command_ops = [], []
        for op in operators:
            name = op.name
            if name in self._operators:
                continue
            self._operators[name] = op
            commands.append(self._command(name))
            command_ops.append(name)
        self._commands, self._command_ops = commands, command_ops
        self.admissible_commands = tuple(sorted(set(commands)))
        self.won = bool(self._lib.check_goal())

    def _command(self, operator_name: str) -> str:
        cached = self._command_cache.get(operator_name)
        if cached is not None:
            return cached
        action_name = operator_name.split()[0]
        template = self._logic.game_logic.actions[action_name].template
        mapping = self._actions_mapping(operator_name)
        variables = {ph.name: self._entity_infos[v.name] for ph, v in mapping.items()}
        derived = derive(self._logic.rules, template, self._context(variables, mapping))
        names = {k: info.name for k, info in self._entity_infos.items()}
        command = derived.format(**names)  # textworld.logic.Action.format_command
        if self._template_is_static(template):
            self._command_cache[operator_name] = command
        return command

    def _template_is_static(self, template: str) -> bool:
        known = self._cacheable_templates.get(template)
        if known is None:
            read = _predicates_read(self._logic.rules, parse_symbols(template), set())
            fluents = self._translation.fluents
            known = read is not None and not any(
                (p[4:] if p.startswith("not_") else p).lower() in fluents for p in read
            )
            self._cacheable_templates[template] = known
        return known

    # -------------------------------------------------------------- state
    def fluent_facts(self) -> tuple[str, ...]:
        """The true facts whose predicate some action can change, sorted (a state key)."""
        fluents = self._translation.fluents
        return tuple(sorted(
            str(prop) for signature, props in self._state._facts.items()
            if signature.name.lower() in fluents for prop in props
        ))


class ReferenceEngine:
    """The unmodified stack, as alfworld sets it up: ``AlfredDemangler(PddlEnv(infos))``.

    Same interface as :class:`AlfredEngine`; for differential tests and benchmarks.
    Each instance loads its own fast-downward copy (never unloaded): create few.
    """

    def __init__(self) -> None:
        import_alfworld()
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld.envs.pddl import PddlEnv

        infos = textworld.EnvInfos(won=True, admissible_commands=True)
        self._env = AlfredDemangler(PddlEnv(infos))
        self.admissible_commands: tuple[str, ...] = ()
        self.won = False

    def load(self, game_file: str | os.PathLike[str]) -> None:
        argv = sys.argv
        try:
            self._env.load(str(game_file))
        finally:
            sys.argv = argv

    def _read(self, state: Any) -> str:
        self.admissible_commands = tuple(state["admissible_commands"])
        self.won = bool(state["won"])
        return state.feedback

    def reset(self) -> str:
        argv = sys.argv
        try:
            return self._read(self._env.reset())
        finally:
            sys.argv = argv

    def step(self, command: str) -> str:
        state, _, _ = self._env.step(command)
        return self._read(state)

    def close(self) -> None:
        self._env.close()
