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
        "anchors (observation)", "state keys", "seeds and task ids", "bad actions",
        "finished episode", "prompt length", "tools", "anchors (state)", "gymnasium check_env",
        "vector env groups"]


def test_the_fast_part_stops_before_the_slow_checks_and_uses_the_anchor_asked():
    names = [r.name for r in check_env_contract("AgentGym/Scripted-v0", anchor="state",
                                                fast=True)]
    assert "anchors (state)" in names and "anchors (observation)" not in names
    assert "state keys" not in names  # the anchors are the state keys
    assert "gymnasium check_env" not in names and "vector env groups" not in names


def test_an_unhashable_state_key_fails_the_fast_check_in_either_anchor_mode():
    """Issue 60: a list state_key passed --fast with the default observation anchor, and
    broke the first anchor="state" run."""
    env_id = f"{M}:AgentGymTest/UnhashableAnchor-v0"
    failed = _failed(check_env_contract(env_id, fast=True))
    assert list(failed) == ["state keys"]
    assert failed["state keys"] == (
        "reset: the state key (state_key(), the anchor of every anchor='state' run): a list "
        "anchor is not hashable (unhashable type: 'list'); return a hashable value (a tuple, "
        "not a list; a str; an int)")
    failed = _failed(check_env_contract(env_id, anchor="state", fast=True))
    assert list(failed) == ["anchors (state)"]
    assert failed["anchors (state)"].startswith("reset: a list anchor is not hashable")


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


def test_seeds_that_give_one_task_but_two_episodes_blame_the_steps_not_the_draw():
    """Issue 60: the task ids matched, yet the line said equal seeds must give equal
    tasks."""
    failed = _failed(check_env_contract(f"{M}:AgentGymTest/UnseededStep-v0", fast=True))
    assert list(failed) == ["seeds and task ids"]
    detail = failed["seeds and task ids"]
    assert detail.startswith("two episodes from reset(seed=1) played the same task "
                             "'doors-0030' with the same actions but went differently (the "
                             "observation after step 1): the env's randomness after the task "
                             "draw is not seeded by reset(seed=)")
    assert "equal tasks" not in detail
    drawn = _failed(check_env_contract(f"{M}:AgentGymTest/UnseededTask-v0", fast=True))
    assert drawn["seeds and task ids"].startswith(
        "two episodes from reset(seed=1) started different tasks")
    assert "equal seeds must give equal tasks" in drawn["seeds and task ids"]


@pytest.mark.parametrize(("env", "hint"), [
    ("IntTask", "(TextEnv takes info['task'] from your env's task property: return a str)"),
    ("IntActionsPlain", "(agentgym.PlainTextEnv copies your env's info['admissible_actions']: "
                        "list str actions)"),
])
def test_an_info_problem_points_at_the_part_of_the_env_that_made_it(env, hint):
    """Issue 60: "build the env on agentgym.TextEnv" was said to an env that is one."""
    failed = _failed(check_env_contract(f"{M}:AgentGymTest/{env}-v0", fast=True))
    assert list(failed) == ["info keys"]
    assert failed["info keys"].endswith(hint)
    assert "build the env on agentgym.TextEnv" not in failed["info keys"]


def test_the_prompt_length_check_warns_over_the_budget_and_never_fails():
    from agentgym.check.prompt_length import text_counter

    env_id = "examples.own_env:OwnEnv/NumberGuess-v0"
    measured = {r.name: r for r in check_env_contract(env_id, fast=True)}["prompt length"]
    assert measured.passed and not measured.warning
    assert measured.detail.startswith("the 8 prompts of the probe episode are at most ")
    assert measured.detail.endswith("give --max-prompt-tokens N (your run's budget) to compare")
    results = check_env_contract(env_id, fast=True, prompts=text_counter(10))
    warned = {r.name: r for r in results}["prompt length"]
    assert warned.passed and warned.warning and warned.line.startswith("WARN  prompt length: ")
    assert warned.detail.startswith("8 of the 8 prompts of the probe episode are longer than "
                                    "--max-prompt-tokens 10 (up to ")
    assert _failed(results) == {}


def test_the_estimate_counts_words_digits_and_punctuation(tmp_path):
    from agentgym.check.prompt_length import estimate_tokens, text_counter

    # "You", "see", "a", "drawer", "1", ",", "a", "drawer", "2", ".": 10 pieces x 1.25
    assert estimate_tokens("You see a drawer 1, a drawer 2.") == 13
    assert estimate_tokens("12345") == 7  # each digit a piece: 5 x 1.25, rounded up
    counter = text_counter(100, history_window=1)
    history = [("first room", "go"), ("second room", "look")]
    # the window keeps the last pair only: task, "second room", "look", observation, actions
    assert counter.count("t", history, "now", ("a",)) == estimate_tokens(
        "t\nsecond room\nlook\nnow\na")
    tokenizers = pytest.importorskip("tokenizers")
    vocabulary = {"[UNK]": 0, "t": 1, "now": 2, "a": 3}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocabulary, unk_token="[UNK]"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    core.save(str(tmp_path / "tokenizer.json"))
    exact = text_counter(100, history_window=0, tokenizer=str(tmp_path))
    assert exact.count("t", history, "now", ("a", "b c")) == 5  # t now a b c: one id each
    with pytest.raises(ValueError, match="no readable tokenizer.json"):
        text_counter(tokenizer=str(tmp_path / "nothing"))


def test_the_command_lines_history_window_is_train_pys():
    pytest.importorskip("tyro")
    from agentgym.check.prompt_length import HISTORY_WINDOW
    from algorithms.config import PromptConfig

    assert HISTORY_WINDOW == PromptConfig().history_window


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
    assert len(lines) == 17 and lines[-1].startswith("all 16 checks passed (")
    assert all(line.startswith("PASS  ") for line in lines[:-1])
    assert main([f"{M}:AgentGymTest/UnhashableAnchor-v0", "--anchor", "state",
                 "--fast"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("1 of 12 checks failed")
    assert [line[:4] for line in lines[:-1]].count("FAIL") == 1
    assert main(["AgentGym/Scripted-v0", "--fast", "--max-prompt-tokens", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("all 13 checks passed, 1 with a warning (")
    assert [line[:4] for line in lines[:-1]].count("WARN") == 1
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

