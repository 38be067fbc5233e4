"""``python -m agentgym.check``: every env of issue 43 caught by the right check, in one
line; contract envs pass; exit statuses; no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentgym.check import (
    Breach,
    anchor_problem,
    check_env_contract,
    info_problem,
    play_probe,
    same,
)
from agentgym.check.__main__ import main
from tests.agentgym import faulty_envs
from tests.conftest import REPO_ROOT

M = faulty_envs.MODULE


def _failed(results) -> dict[str, str]:
    return {r.name: r.detail for r in results if not r.passed}


@pytest.mark.parametrize("env_id", ["AgentGym/Scripted-v0", "AgentGym/KeyDoor-v0",
                                    "AgentGym/Sokoban-v0", "AgentGym/FrozenLake-v0"])
def test_our_envs_pass_every_check(env_id):
    results = check_env_contract(env_id)
    assert _failed(results) == {}
    assert [r.name for r in results] == [
        "env id", "kind", "build", "observations", "episode", "info keys",
        "anchors (observation)", "seeds and task ids", "bad actions", "finished episode",
        "tools", "anchors (state)", "gymnasium check_env", "vector env groups"]


def test_the_fast_part_stops_before_the_slow_checks_and_uses_the_anchor_asked():
    names = [r.name for r in check_env_contract("AgentGym/Scripted-v0", anchor="state",
                                                fast=True)]
    assert "anchors (state)" in names and "anchors (observation)" not in names
    assert "gymnasium check_env" not in names and "vector env groups" not in names


def test_an_unhashable_state_anchor_fails_in_state_mode_only():
    env_id = f"{M}:AgentGymTest/UnhashableAnchor-v0"
    assert _failed(check_env_contract(env_id, fast=True)) == {}
    failed = _failed(check_env_contract(env_id))  # the full check tries both modes
    assert list(failed) == ["anchors (state)"]
    assert failed["anchors (state)"].startswith("reset: a list anchor is not hashable")
    assert "a tuple, not a list" in failed["anchors (state)"]


def test_a_non_string_observation_fails_the_observation_check_and_nothing_after():
    failed = _failed(check_env_contract(f"{M}:AgentGymTest/IntObservation-v0"))
    assert list(failed) == ["observations"]
    assert "returned an int observation from reset()" in failed["observations"]


def test_a_raising_step_fails_the_episode_and_the_bad_actions():
    results = check_env_contract(f"{M}:AgentGymTest/RaisingStep-v0")
    failed = _failed(results)
    assert list(failed) == ["episode", "bad actions"]
    assert failed["episode"].startswith("step 1 (action 'open red door') raised "
                                        "InjectedFault: injected fault in step")
    assert "gymnasium check_env" not in [r.name for r in results]  # the fast part failed


def test_a_kwargs_constructor_is_checked_by_building_it():
    env_id = f"{M}:AgentGymTest/Kwargs-v0"
    assert _failed(check_env_contract(env_id)) == {}
    failed = _failed(check_env_contract(env_id, {"width": 2, "height": 2}))
    assert list(failed) == ["build"]
    assert "unexpected keyword argument 'width'" in failed["build"]
    assert "env kwargs given: height, width" in failed["build"]
    assert "was raised from the environment creator" not in failed["build"]


def test_a_plain_gymnasium_env_passes_through_the_adapter():
    results = check_env_contract(f"{M}:AgentGymTest/PlainGuess-v0")
    assert _failed(results) == {}
    kind = next(r for r in results if r.name == "kind")
    assert "agentgym.PlainTextEnv" in kind.detail


@pytest.mark.parametrize(("env_id", "message"), [
    ("AgentGym/Nope-v0", "unknown env id 'AgentGym/Nope-v0'; registered AgentGym ids: "
                         "AgentGym/ALFWorld-v0"),
    ("no_such_module_xyz:Any-v0", "the module 'no_such_module_xyz' cannot be imported"),
    ("tests.agentgym.faulty_envs:AgentGymTest/Nothing-v0",
     "importing 'tests.agentgym.faulty_envs' registered no env 'AgentGymTest/Nothing-v0'"),
])
def test_an_id_that_names_no_env_is_one_failed_check(env_id, message):
    results = check_env_contract(env_id)
    assert len(results) == 1 and not results[0].passed and message in results[0].detail
    assert "\n" not in results[0].line


def test_info_and_anchor_problems_are_named():
    good = {"task": "t", "task_id": "0", "admissible_actions": ("a",), "anchor": "x",
            "success": False, "valid_action": True}
    assert info_problem(good, "reset") is None
    assert info_problem({**good, "admissible_actions": ["a"]}, "step 2") == (
        "step 2: info['admissible_actions'] is a list, not a tuple")
    assert info_problem({"task": "t"}, "reset") == (
        "reset: info lacks task_id, admissible_actions, anchor, success, valid_action")
    assert info_problem({**good, "success": 1}, "reset") == (
        "reset: info['success'] is an int, not a bool")
    assert anchor_problem(("room", 1)) is None
    assert "not hashable" in anchor_problem({"room": 1})
    assert "does not pickle" in anchor_problem((lambda: 0,))
    assert same({"a": (1, [2])}, {"a": (1, [2])}) and not same((1,), [1])


def test_a_probe_records_what_it_saw_and_the_step_after_the_end():
    import gymnasium as gym

    env = gym.make("AgentGym/Scripted-v0", max_steps=2)
    episode = play_probe(env, 2)
    assert episode.ended and episode.error is None and len(episode.rewards) == 2
    assert episode.after[0] == episode.observations[-1] and episode.after[1] == 0.0
    env.close()
    with pytest.raises(Breach):
        raise Breach("a check's failure")


def test_the_command_line_prints_a_line_per_check_and_exits_1_on_a_breach(capsys):
    assert main(["AgentGym/Scripted-v0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 15 and lines[-1].startswith("all 14 checks passed")
    assert all(line.startswith("PASS  ") for line in lines[:-1])
    assert main([f"{M}:AgentGymTest/UnhashableAnchor-v0", "--anchor", "state",
                 "--fast"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("1 of 11 checks failed")
    assert [line[:4] for line in lines[:-1]].count("FAIL") == 1
    with pytest.raises(SystemExit) as exit_info:
        main(["AgentGym/Scripted-v0", "--env-kwargs", "[1]"])
    assert exit_info.value.code == 2


def test_the_command_runs_in_seconds_without_torch():
    code = ("import sys; from agentgym.check.__main__ import main; "
            "status = main(['examples.own_env:OwnEnv/NumberGuess-v0']); "
            "print('torch' in sys.modules, status)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120, check=True)
    assert result.stdout.splitlines()[-1] == "False 0"

