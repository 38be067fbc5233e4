"""An env's tools (``agentgym.tools``): schemas, the two directions of the action template,
every bundled env's declaration, the generic tool, and what the check catches."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import agentgym
from agentgym.check import check_env_contract
from agentgym.tools import (
    GENERIC_TOOL_NAME,
    EnvTools,
    ToolCallError,
    argument_problem,
    env_tools,
    generic_tools,
    string_argument,
    tool,
    tool_problems,
)

TAKE = tool("take", "Pick up an object.", "take {object} from {source}",
            object=string_argument("what"), source=string_argument("where"))
GO = tool("go", "Walk.", "go {direction}",
          direction=string_argument("where to", ["north", "south"]))
COUNT = tool("count", "Count.", "count {n}", n={"type": "integer", "description": "how many"})
TOOLS = EnvTools((GO, TAKE, COUNT))


def test_a_call_becomes_its_action_text_and_back():
    assert TOOLS.to_action("take", {"object": "apple 1", "source": "countertop 2"}) == \
        "take apple 1 from countertop 2"
    assert TOOLS.to_call("take apple 1 from countertop 2") == (
        "take", {"object": "apple 1", "source": "countertop 2"})
    assert TOOLS.to_call("go north") == ("go", {"direction": "north"})
    assert TOOLS.to_call("count -12") == ("count", {"n": -12})
    assert TOOLS.to_call("go west") is None  # outside the enum: no tool writes it
    assert TOOLS.to_call("fly away") is None


def test_the_schemas_are_openai_functions_that_json_writes():
    schema = TOOLS.schemas[0]
    assert schema == {"type": "function", "function": {
        "name": "go", "description": "Walk.", "parameters": {
            "type": "object", "required": ["direction"], "properties": {"direction": {
                "type": "string", "description": "where to", "enum": ["north", "south"]}}}}}
    json.dumps(TOOLS.schemas)
    no_arguments = tool("look", "Look.", "look").schema()["function"]["parameters"]
    assert no_arguments == {"type": "object", "properties": {}, "required": []}


@pytest.mark.parametrize(("name", "arguments", "problem"), [
    ("go", {}, "go needs the argument 'direction'"),
    ("go", {"direction": "north", "speed": 1}, "go has no argument 'speed'"),
    ("go", {"direction": "up"}, "must be one of north, south; got 'up'"),
    ("go", {"direction": 3}, "must be a string, not a number"),
    ("count", {"n": True}, "must be an integer, not a boolean"),
    ("count", {"n": "3"}, "must be an integer, not a string"),
    ("go", ["north"], "must be a JSON object, not an array"),
])
def test_arguments_are_checked_against_the_schema(name, arguments, problem):
    assert problem in argument_problem(TOOLS.tool(name), arguments)
    with pytest.raises(ToolCallError, match=problem.replace("(", r"\(")[:20]):
        TOOLS.to_action(name, arguments)


def test_an_unknown_tool_is_a_tool_call_error():
    with pytest.raises(ToolCallError, match="no tool named 'fly'; the tools are go, take"):
        TOOLS.to_action("fly", {})


@pytest.mark.parametrize(("spec", "problem"), [
    (tool("bad name!", "x", "a"), "the name must be 1-64"),
    (tool("a", " ", "a"), "the description is empty"),
    (tool("a", "x", "go {where}"), "must hold each argument"),
    (tool("a", "x", "go {x}{y}", x=string_argument("x"), y=string_argument("y")),
     "cannot be split"),
    (tool("a", "x", "go {x}", x={"type": "number", "description": "x"}),
     "must have a type among string, integer"),
    (tool("a", "x", "go {x}", x={"type": "string"}), "has no description"),
    (tool("a", "x", "go {x}", x={"type": "string", "description": "x", "enum": []}),
     "an enum is a non-empty list"),
])
def test_tool_problems_name_what_is_wrong(spec, problem):
    assert any(problem in line for line in tool_problems(EnvTools((spec,))))


def test_tool_problems_of_good_tools_and_of_duplicates():
    assert tool_problems(TOOLS) == []
    assert "two tools are named 'go'" in tool_problems(EnvTools((GO, GO)))
    assert tool_problems("tools") == ["the tools are str, not agentgym.tools.EnvTools"]


def test_an_env_without_tools_gets_the_one_generic_tool():
    tools = env_tools("examples.own_env:OwnEnv/NumberGuess-v0")
    assert tools.generic and tools.names == (GENERIC_TOOL_NAME,)
    assert tools.to_call("any text at all") == (GENERIC_TOOL_NAME, {"action": "any text at all"})
    assert tools.to_action(GENERIC_TOOL_NAME, {"action": "7"}) == "7"
    assert generic_tools() == tools


def test_tools_of_a_class_attribute_and_of_a_built_env():
    class Declared(agentgym.TextEnv):
        tools = TOOLS

    assert env_tools(Declared) is TOOLS
    no_key = env_tools(gym.make("AgentGym/KeyDoor-v0", key=False))  # its spec's kwargs
    assert no_key.names == ("go", "open_door")
    assert env_tools("AgentGym/KeyDoor-v0").names == ("go", "take_key", "open_door")


def test_a_tools_attribute_of_the_wrong_kind_is_refused():
    class Wrong(agentgym.TextEnv):
        tools = ["go"]

    with pytest.raises(TypeError, match="declare an agentgym.tools.EnvTools"):
        env_tools(Wrong)


@pytest.mark.parametrize("env_id", agentgym.ENV_IDS)
def test_every_bundled_env_declares_valid_tools_of_its_own(env_id):
    tools = env_tools(env_id, {})
    assert not tools.generic and tool_problems(tools) == []


@pytest.mark.parametrize(("env_id", "kwargs", "steps"), [
    ("AgentGym/KeyDoor-v0", {"width": 3, "height": 3}, 30),
    ("AgentGym/Sokoban-v0", {}, 30),
    ("AgentGym/FrozenLake-v0", {}, 30),
    ("AgentGym/Scripted-v0", {"doors": ["red", "violet", "blue"]}, 30),
    ("AgentGym/SearchQA-v0", {}, 6),
])
def test_every_admissible_and_expert_action_round_trips(env_id, kwargs, steps):
    env = agentgym.make_text_env(env_id, **kwargs)
    tools = env_tools(env_id, kwargs)
    seen = 0
    for seed in range(3):
        _, info = env.reset(seed=seed)
        for step in range(steps):
            actions = list(info["admissible_actions"])
            try:
                expert = env.unwrapped.expert_action()
            except NotImplementedError:
                expert = None
            for action in actions + ([expert] if expert else []):
                call = tools.to_call(action)
                assert call is not None, action
                assert tools.to_action(*call) == action
                seen += 1
            choice = expert or (actions[step % len(actions)] if actions else None)
            if choice is None:
                break
            _, _, terminated, truncated, info = env.step(choice)
            if terminated or truncated:
                break
    env.close()
    assert seen > 0


def test_webshop_tools_write_its_actions():
    tools = env_tools("AgentGym/WebShop-v0")
    assert tools.to_action("search", {"query": "red shoes"}) == "search[red shoes]"
    assert tools.to_call("click[< prev]") == ("click", {"target": "< prev"})
    assert tools.to_call("search[<your query>]") == ("search", {"query": "<your query>"})


def test_gym_cards_tools_write_the_canonical_json_answer():
    tools = env_tools("AgentGym/Blackjack-v0")
    assert tools.to_action("play", {"word": "hit"}) == '{"action": "hit"}'
    assert tools.to_call('{"action": "stand"}') == ("play", {"word": "stand"})


def test_the_check_fails_an_env_whose_actions_no_tool_writes():
    results = {r.name: r for r in check_env_contract(
        "tests.agentgym.faulty_envs:AgentGymTest/ToolsMissAnAction-v0", fast=True)}
    assert not results["tools"].passed
    assert "the admissible action 'jump' at step 0 is written by no tool" in \
        results["tools"].detail
    bad = {r.name: r for r in check_env_contract(
        "tests.agentgym.faulty_envs:AgentGymTest/BadToolSchema-v0", fast=True)}
    assert not bad["tools"].passed and "the description is empty" in bad["tools"].detail
