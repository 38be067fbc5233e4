"""An env's actions as tools: OpenAI function schemas and the map from a call to the
env's action text (and back).

An agent that acts through its chat template's tools (``--prompt.action-format
tool-call``, ``docs/tool-calls.md``) sees the env's tools in its prompt, answers with a
call ``{"name": ..., "arguments": {...}}``, and the call becomes the action text the env
reads. Here a tool is data (:class:`ToolSpec`): a name, a description, the JSON schema of
its arguments (an enum where the choice is finite), and an *action template*, the action
text with ``{argument}`` placeholders (``"go {direction}"``, ``"search[{query}]"``;
``{{`` and ``}}`` stand for literal braces). The template gives both directions:

* :meth:`EnvTools.to_action`: a call to its action text (``go(direction="north")`` ->
  ``"go north"``), after the arguments are checked against the schema;
* :meth:`EnvTools.to_call`: an action text to the call that writes it (the first tool
  whose template matches the whole text), which writes an env's expert actions as tool
  calls for the SFT warm start and lets ``python -m agentgym.check`` show that every
  admissible action is expressible and round-trips.

Where the tools come from (:func:`env_tools`): the env's own declaration, a ``tools``
attribute of its class that is either an :class:`EnvTools` or a classmethod
``tools(kwargs) -> EnvTools | None`` reading the constructor's keyword arguments
(:meth:`agentgym.core.TextEnv.tools`; every bundled env declares one); an env that
declares none gets :func:`generic_tools`, one tool whose one string argument is the
action text.

Schemas are a small subset of JSON Schema, the one function calling uses: ``parameters``
is ``{"type": "object", "properties": {...}, "required": [...]}``, each property a
``string`` (optionally with an ``enum`` of strings) or an ``integer``, with a
``description``; every property is required and appears once in the template (a call
must say everything its action text needs). :func:`tool_problems` says what breaks these
rules. Nothing here imports torch.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a tool's name may be (OpenAI's rule for function names)."""

PARAMETER_TYPES: tuple[str, ...] = ("string", "integer")
"""The argument types a tool may take."""

GENERIC_TOOL_NAME = "act"
"""The name of the one tool of an env that declares none (:func:`generic_tools`)."""


class ToolCallError(ValueError):
    """A call that names no tool of the env or whose arguments break its schema (the
    message is one line that the model can read)."""


def _fields(template: str) -> list[tuple[str, str | None]]:
    """``(literal, field)`` pieces of a template (``field`` ``None`` after the last)."""
    return [(literal, name) for literal, name, _, _ in string.Formatter().parse(template)]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: what the model sees, and the action text a call becomes.

    Attributes:
        name: the function's name (``[A-Za-z0-9_-]``, at most 64 characters).
        description: what calling it does, for the model.
        parameters: the JSON schema of its arguments (module docstring); ``{}`` or a
            schema without properties for a tool that takes none.
        action: the action template: the env's action text with ``{argument}``
            placeholders (``"go {direction}"``).
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    action: str

    @property
    def properties(self) -> dict[str, dict[str, Any]]:
        """The argument schemas by name (``{}`` for a tool without arguments)."""
        return dict((self.parameters or {}).get("properties", {}) or {})

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI's form: ``{"type": "function", "function": {"name",
        "description", "parameters"}}``."""
        parameters = dict(self.parameters) if self.parameters else {}
        if not parameters:
            parameters = {"type": "object", "properties": {}, "required": []}
        return {"type": "function", "function": {"name": self.name,
                                                 "description": self.description,
                                                 "parameters": parameters}}

    def action_text(self, arguments: Mapping[str, Any]) -> str:
        """The template filled in with ``arguments`` (already checked)."""
        return self.action.format(**{key: str(value) for key, value in arguments.items()})

    def pattern(self) -> re.Pattern[str]:
        """The regular expression of the template's action texts: the literals as they
        are, each placeholder its enum's values (longest first) or, for a string, any
        text, for an integer an optional minus and digits."""
        parts = []
        for literal, name in _fields(self.action):
            parts.append(re.escape(literal))
            if name is None:
                continue
            spec = self.properties.get(name, {})
            if spec.get("enum"):
                values = sorted((str(v) for v in spec["enum"]), key=len, reverse=True)
                parts.append(f"(?P<{name}>{'|'.join(re.escape(v) for v in values)})")
            elif spec.get("type") == "integer":
                parts.append(f"(?P<{name}>-?[0-9]+)")
            else:
                parts.append(f"(?P<{name}>.*?)")
        return re.compile("".join(parts), re.DOTALL)


def argument_problem(tool: ToolSpec, arguments: Any) -> str | None:
    """What is wrong with ``arguments`` for ``tool`` under its schema (one line), or
    ``None``: they must be an object with every required key, no unknown key, each value
    of its type (``integer``: an ``int``, not a ``bool``) and in its enum."""
    if not isinstance(arguments, Mapping):
        return f"the arguments of {tool.name} must be a JSON object, not {_json_kind(arguments)}"
    properties = tool.properties
    required = list((tool.parameters or {}).get("required", list(properties)) or [])
    missing = [key for key in required if key not in arguments]
    if missing:
        return f"{tool.name} needs the argument {missing[0]!r}" + _takes(tool)
    unknown = [key for key in arguments if key not in properties]
    if unknown:
        return f"{tool.name} has no argument {str(unknown[0])!r}" + _takes(tool)
    for key, value in arguments.items():
        spec = properties[key]
        kind = spec.get("type", "string")
        if kind == "string" and not isinstance(value, str):
            return f"the argument {key!r} of {tool.name} must be a string, not {_json_kind(value)}"
        if kind == "integer" and (not isinstance(value, int) or isinstance(value, bool)):
            return (f"the argument {key!r} of {tool.name} must be an integer, not "
                    f"{_json_kind(value)}")
        allowed = spec.get("enum")
        if allowed and value not in allowed:
            return (f"the argument {key!r} of {tool.name} must be one of "
                    f"{', '.join(map(str, allowed))}; got {str(value)[:60]!r}")
    return None


def _takes(tool: ToolSpec) -> str:
    names = list(tool.properties)
    return f" (it takes {', '.join(names)})" if names else " (it takes no arguments)"


def _json_kind(value: Any) -> str:
    """The JSON name of ``value``'s type, with its article."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


@dataclass(frozen=True)
class EnvTools:
    """An env's tools (see the module docstring).

    Attributes:
        tools: the tools, in the order the model sees them (and :meth:`to_call` tries
            them).
        generic: this is the one generic tool of an env that declares none.
    """

    tools: tuple[ToolSpec, ...]
    generic: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools)

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """Every tool in OpenAI's ``{"type": "function", "function": {...}}`` form, what
        ``tokenizer.apply_chat_template(messages, tools=...)`` takes."""
        return [tool.schema() for tool in self.tools]

    def tool(self, name: str) -> ToolSpec | None:
        """The tool called ``name``, or ``None``."""
        return next((tool for tool in self.tools if tool.name == name), None)

    def to_action(self, name: str, arguments: Any) -> str:
        """The action text of a call.

        Raises:
            ToolCallError: no tool is called ``name``, or ``arguments`` break its schema
                (:func:`argument_problem`).
        """
        tool = self.tool(name) if isinstance(name, str) else None
        if tool is None:
            raise ToolCallError(f"there is no tool named {str(name)[:60]!r}; the tools are "
                                f"{', '.join(self.names)}")
        problem = argument_problem(tool, arguments)
        if problem is not None:
            raise ToolCallError(problem)
        return tool.action_text(arguments)

    def to_call(self, action: str) -> tuple[str, dict[str, Any]] | None:
        """``(name, arguments)`` of the first tool whose template matches all of
        ``action`` and whose arguments it accepts, or ``None`` when no tool writes it."""
        for tool in self.tools:
            match = tool.pattern().fullmatch(action)
            if match is None:
                continue
            arguments: dict[str, Any] = {}
            for key, value in match.groupdict().items():
                spec = tool.properties.get(key, {})
                arguments[key] = int(value) if spec.get("type") == "integer" else value
            if argument_problem(tool, arguments) is None:
                return tool.name, arguments
        return None


def tool_problems(tools: Any) -> list[str]:
    """Why ``tools`` is not a usable :class:`EnvTools` (one line each; ``[]``: none)."""
    if not isinstance(tools, EnvTools):
        return [f"the tools are {type(tools).__name__}, not agentgym.tools.EnvTools"]
    if not tools.tools:
        return ["the env declares no tool"]
    problems: list[str] = []
    seen: set[str] = set()
    for tool in tools.tools:
        problems += [f"tool {tool.name!r}: {p}" for p in _one_tool_problems(tool)]
        if tool.name in seen:
            problems.append(f"two tools are named {tool.name!r}")
        seen.add(tool.name)
    return problems


def _one_tool_problems(tool: ToolSpec) -> list[str]:
    problems = []
    if not isinstance(tool.name, str) or not TOOL_NAME.fullmatch(tool.name):
        problems.append("the name must be 1-64 letters, digits, _ or -")
    if not isinstance(tool.description, str) or not tool.description.strip():
        problems.append("the description is empty")
    parameters = tool.parameters or {}
    if parameters and parameters.get("type") != "object":
        problems.append("parameters must be a JSON schema of type 'object'")
    properties = parameters.get("properties", {}) or {}
    if not isinstance(properties, Mapping):
        return [*problems, "parameters.properties must be an object"]
    for key, spec in properties.items():
        if not isinstance(spec, Mapping) or spec.get("type") not in PARAMETER_TYPES:
            problems.append(f"argument {key!r} must have a type among "
                            f"{', '.join(PARAMETER_TYPES)}")
            continue
        if not str(spec.get("description", "")).strip():
            problems.append(f"argument {key!r} has no description")
        enum = spec.get("enum")
        if enum is not None and (not isinstance(enum, (list, tuple)) or not enum or not all(
                isinstance(v, str) for v in enum) or spec.get("type") != "string"):
            problems.append(f"argument {key!r}: an enum is a non-empty list of strings "
                            "of a string argument")
    required = parameters.get("required", list(properties))
    if sorted(required or []) != sorted(properties):
        problems.append("every argument must be required (the action text needs each)")
    try:
        pieces = _fields(tool.action)
    except ValueError as error:
        return [*problems, f"the action template {tool.action!r}: {error}"]
    fields = [name for _, name in pieces if name is not None]
    if sorted(fields) != sorted(properties) or len(set(fields)) != len(fields):
        problems.append(f"the action template {tool.action!r} must hold each argument "
                        f"({', '.join(properties) or 'none'}) exactly once")
    for (_, first), (literal, _) in zip(pieces, pieces[1:], strict=False):
        if first is not None and not literal and \
                not properties.get(first, {}).get("enum"):
            problems.append(f"the action template {tool.action!r} puts a free argument "
                            "right before another placeholder: the text cannot be split")
    return problems


def string_argument(description: str, enum: Sequence[str] | None = None) -> dict[str, Any]:
    """The schema of one string argument (with its ``enum`` when given)."""
    schema: dict[str, Any] = {"type": "string", "description": description}
    if enum is not None:
        schema["enum"] = list(enum)
    return schema


def tool(name: str, description: str, action: str, /,
         **arguments: Mapping[str, Any]) -> ToolSpec:
    """A :class:`ToolSpec` whose ``arguments`` (name -> argument schema, in order) are all
    required: ``tool("go", "Walk to a neighbouring room.", "go {direction}",
    direction=string_argument("where", ["north", "south"]))``."""
    parameters = {"type": "object", "properties": dict(arguments),
                  "required": list(arguments)}
    return ToolSpec(name=name, description=description, parameters=parameters, action=action)


def generic_tools(description: str = "") -> EnvTools:
    """The one tool of an env that declares none: :data:`GENERIC_TOOL_NAME`, whose one
    string argument ``action`` is the action text as it is."""
    return EnvTools((tool(
        GENERIC_TOOL_NAME, description or "Take one action in the environment.", "{action}",
        action=string_argument("The action, written as the task and the observations "
                               "describe the actions (e.g. one of the actions listed as "
                               "possible now).")),), generic=True)


def declared_tools(creator: Any, kwargs: Mapping[str, Any] | None = None) -> EnvTools | None:
    """What an env class (or instance) declares as its ``tools``: an :class:`EnvTools`
    attribute, or the result of calling a ``tools(kwargs)`` classmethod; ``None`` when it
    declares none."""
    declared = getattr(creator, "tools", None)
    if declared is None or isinstance(declared, EnvTools):
        return declared
    if callable(declared):
        return declared(dict(kwargs or {}))
    raise TypeError(f"{getattr(creator, '__name__', type(creator).__name__)}.tools is "
                    f"{type(declared).__name__}: declare an agentgym.tools.EnvTools or a "
                    "classmethod tools(kwargs) that returns one")


def env_tools(env: Any, kwargs: Mapping[str, Any] | None = None) -> EnvTools:
    """The tools an agent acts through in ``env``: its own (:func:`declared_tools`), else
    :func:`generic_tools`.

    Args:
        env: an env id (also ``"module:Env-v0"``; read without building the env), an env
            class, or an env (a Gymnasium wrapper is unwrapped; a
            :class:`~agentgym.plain.PlainTextEnv` is asked for its plain env's tools).
        kwargs: the constructor's keyword arguments (for a built env: its spec's, when
            ``None``).

    Raises:
        TypeError: the env's ``tools`` is neither an :class:`EnvTools` nor a callable.
        gymnasium.error.Error: an env id that is not registered.
    """
    if isinstance(env, str):
        from agentgym.env_ids import env_creator

        creator: Any = env_creator(env)
    elif isinstance(env, type):
        creator = env
    else:
        creator = getattr(env, "unwrapped", env)
        if kwargs is None and getattr(env, "spec", None) is not None:
            kwargs = dict(env.spec.kwargs or {})
    declared = declared_tools(creator, kwargs)
    inner = getattr(creator, "env", None)
    if declared is None and inner is not None:  # a PlainTextEnv: its plain env's tools
        declared = declared_tools(getattr(inner, "unwrapped", inner), kwargs)
    return declared if declared is not None else generic_tools()


__all__ = ["GENERIC_TOOL_NAME", "EnvTools", "ToolCallError", "ToolSpec", "argument_problem",
           "declared_tools", "env_tools", "generic_tools", "string_argument", "tool",
           "tool_problems"]
