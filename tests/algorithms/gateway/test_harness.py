"""The ``--agent`` rollout's parts without a model: loading the loop, its results, the
task sources, the episode processes (failures counted, never raised), the conversion of
calls into step rows, and the estimators on those rows."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import train
from algorithms.config import ConfigError, TrainConfig, replace
from algorithms.gateway.agent_loop import (
    AgentLoadError,
    EpisodeJob,
    LoopResult,
    load_agent,
    play_episodes,
    read_result,
)
from algorithms.gateway.episodes import PlayedEpisode, harness_batch, result_problem
from algorithms.gateway.records import CallRecord
from algorithms.gateway.tasks import TaskFileError, TaskSource, read_task_file

LOOPS = "tests.algorithms.gateway.agent_loops"


# ---------------------------------------------------------------------- loading the loop
def test_load_agent_names_what_failed(tmp_path, monkeypatch):
    assert load_agent(f"{LOOPS}:one_call").__name__ == "one_call"
    with pytest.raises(AgentLoadError, match=r"takes MODULE:FUNCTION .* got 'nocolon'"):
        load_agent("nocolon")
    with pytest.raises(AgentLoadError, match=r"no module named 'no_such_loop' \(looked in "
                                             r"the current folder"):
        load_agent("no_such_loop:agent")
    with pytest.raises(AgentLoadError, match=r"has no 'missing'"):
        load_agent(f"{LOOPS}:missing")
    with pytest.raises(AgentLoadError, match=r"MAX_TURNS is a int, not a function"):
        load_agent(f"{LOOPS}:MAX_TURNS")
    (tmp_path / "broken_loop.py").write_text("import not_installed_pkg_xyz\n")
    (tmp_path / "raising_loop.py").write_text("raise RuntimeError('at import')\n")
    monkeypatch.chdir(tmp_path)  # the current folder is importable
    with pytest.raises(AgentLoadError, match=r"needs the package 'not_installed_pkg_xyz'"):
        load_agent("broken_loop:agent")
    with pytest.raises(AgentLoadError, match=r"raised RuntimeError: at import"):
        load_agent("raising_loop:agent")


@pytest.mark.parametrize(("value", "expected"), [
    (1, LoopResult(reward=1.0)),
    (0.5, LoopResult(reward=0.5)),
    ({"reward": 2, "anchors": ["a", ["b", 1], {"k": 1}], "success": False},
     LoopResult(reward=2.0, anchors=("a", '["b",1]', '{"k":1}'), success=False)),
    ({"rewards": [0, 1.5]}, LoopResult(reward=None, rewards=(0.0, 1.5))),
])
def test_read_result_takes_a_reward_or_a_dict(value, expected):
    assert read_result(value) == expected


@pytest.mark.parametrize(("value", "message"), [
    ("1.0", "the returned reward must be a number, got str"),
    (True, "must be a number, got bool"),
    (float("nan"), "must be finite"),
    ({"reward": 1, "anchor": []}, "has keys ['anchor']; it takes"),
    ({"anchors": []}, "exactly one of 'reward'"),
    ({"reward": 1, "rewards": [1]}, "exactly one of 'reward'"),
    ({"rewards": 3}, "'rewards' must be a list"),
    ({"reward": 1, "success": 1}, "'success' must be true or false"),
])
def test_read_result_refuses_what_is_no_reward(value, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(")):
        read_result(value)


# ---------------------------------------------------------------------- tasks
def _config(**sections) -> TrainConfig:
    from algorithms.presets import PRESETS

    return replace(PRESETS["cpu-demo-tools"], **sections)


def test_env_tasks_are_the_in_process_rollouts_tasks_on_the_same_seed():
    """Group g of iteration i gets the vector env's task for the reset seed the in-process
    rollout uses; replaying the dict's seed and task id gives the same first state."""
    import gymnasium as gym

    from agentgym.vector import make_vector_env
    from algorithms.runs.seeds import iteration_seed

    config = _config(run={"seed": 3}, env={"num_groups": 3})
    source = TaskSource(config)
    for iteration in (0, 1):
        tasks = source.tasks(iteration)
        vec = make_vector_env(config.env.env_id, 6, group_size=2, **config.env.kwargs())
        _, infos = vec.reset(seed=iteration_seed(3, iteration, 0))
        assert [t["task_id"] for t in tasks] == list(infos["task_id"][::2])
        vec.close()
        for task in tasks:
            assert set(task) >= {"env_id", "task_id", "seed", "task", "env_kwargs"}
            env = gym.make(task["env_id"], **task["env_kwargs"])
            observation, info = env.reset(seed=task["seed"],
                                          options={"task_id": task["task_id"]})
            assert (observation, info["task"]) == (task["observation"], task["task"])
    source.close()


def test_task_file_lines_are_cycled_and_bad_lines_named(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"task": "a"}\n\n{"task": "b"}\n{"task": "c"}\n')
    source = TaskSource(_config(agent={"tasks": str(path)}, env={"num_groups": 2}))
    assert [t["task"] for t in source.tasks(0)] == ["a", "b"]
    assert [t["task"] for t in source.tasks(1)] == ["c", "a"]
    assert source.describe() == f"3 tasks from {path}"
    path.write_text('{"task": "a"}\n{"task": \n')
    with pytest.raises(TaskFileError, match=rf"--agent.tasks {path} line 2: not JSON"):
        read_task_file(path)
    path.write_text('{"task": "a"}\n[1, 2]\n')
    with pytest.raises(TaskFileError, match=r"line 2: a task is a JSON object, got list"):
        read_task_file(path)
    path.write_text("\n")
    with pytest.raises(TaskFileError, match="no tasks"):
        read_task_file(path)
    with pytest.raises(TaskFileError, match="cannot be read"):
        read_task_file(tmp_path / "missing.jsonl")


# ---------------------------------------------------------------------- episode processes
def test_failed_loops_are_outcomes_never_errors(tmp_path, monkeypatch):
    """A raise, a hang, a result that is no reward and a dead process each end as an
    outcome of their kind; on_end sees every job; the hang is stopped at the timeout."""
    (tmp_path / "bad_loops.py").write_text(
        "import os, time\n"
        "def agent(base_url, task):\n"
        "    kind = task['kind']\n"
        "    if kind == 'raise': raise KeyError('oops')\n"
        "    if kind == 'hang':\n"
        "        while True: pass\n"
        "    if kind == 'exit': os._exit(7)\n"
        "    if kind == 'object': return lambda: 1\n"
        "    if kind == 'bad': return {'reward': 'x'}\n"
        "    return float(os.environ['OPENAI_BASE_URL'] == base_url)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    kinds = ["raise", "hang", "exit", "object", "bad", "ok"]
    jobs = [EpisodeJob(i, {"kind": k}, f"http://127.0.0.1:1/{i}/v1") for i, k in enumerate(kinds)]
    ended = []
    began = time.monotonic()
    outcomes = play_episodes("bad_loops:agent", jobs, concurrency=3, timeout=4,
                             on_end=lambda job: ended.append(job.index))
    assert time.monotonic() - began < 30
    assert sorted(ended) == list(range(6))
    assert [o.failure for o in outcomes] == ["exception", "timeout", "crashed", "bad_result",
                                             "bad_result", None]
    assert outcomes[0].error.startswith("KeyError: 'oops' (at ")
    assert outcomes[1].error == "still running after --agent.timeout 4 s (stopped)"
    assert outcomes[2].error == "the loop's process exited (code 7) without returning"
    assert "cannot be sent back" in outcomes[3].error
    assert outcomes[4].error == "'reward' must be a number, got str 'x'"
    assert outcomes[5].result == LoopResult(reward=1.0)


# ---------------------------------------------------------------------- calls -> rows
def _call(prompt, completion, *, anchor="a", joined=False, status=None, logprobs=None):
    return CallRecord(prompt_ids=tuple(prompt), completion_ids=tuple(completion),
                      logprobs=tuple(logprobs if logprobs is not None
                                     else [-0.1] * len(completion)),
                      messages=[{"role": "user", "content": "hi"}], tools=None,
                      response={"role": "assistant", "content": "x", "tool_calls": None},
                      finish_reason="stop", anchor=anchor, tool_status=status, joined=joined)


def test_each_call_is_one_row_with_its_recorded_ids():
    calls = [_call([5, 6, 7], [8, 9], anchor="s0"),
             _call([5, 6, 7, 8, 9, 10], [11], anchor="s1", joined=True, status="unclosed")]
    other = [_call([5, 6, 7], [12], anchor="s0")]
    batch = harness_batch([PlayedEpisode(3, 1, {"task_id": "t"}, other, LoopResult(0.0)),
                           PlayedEpisode(2, 1, {"task_id": "t", "task": "do"}, calls,
                                         LoopResult(reward=1.0))], pad_id=0)
    assert batch.traj_ids.tolist() == [2, 2, 3] and batch.group_ids.tolist() == [1, 1, 1]
    for row, call in enumerate([*calls, *other]):
        prompt = batch.prompt_ids[row][batch.prompt_mask[row] == 1].tolist()
        response = batch.response_ids[row][batch.response_mask[row] == 1].tolist()
        assert (prompt, response) == (list(call.prompt_ids), list(call.completion_ids))
        assert batch.behaviour_log_probs[row][: len(call.completion_ids)].tolist() == \
            pytest.approx(list(call.logprobs))
    assert batch.env_rewards.tolist() == [0.0, 1.0, 0.0]  # the reward on the last call
    assert batch.success.tolist() == [True, True, False]
    assert batch.last_step.tolist() == [False, True, True]
    assert batch.step_index.tolist() == [0, 1, 0]
    assert batch.anchors == ("s0", "s1", "s0") and batch.anchor_ids.tolist() == [0, 1, 0]
    assert batch.next_anchors == ("s1", ("<end>", True), ("<end>", False))
    assert batch.format_ok.tolist() == [True, False, True]
    assert batch.log.calls[1]["joined"] is True and batch.log.calls[1]["anchor"] == "s1"
    assert batch.log.calls[0]["anchor_from"] == "default"
    assert batch.layout == "transcript"  # every call extends the one before it
    from algorithms.training.transcript import transcript_view

    view = transcript_view(batch)  # the learner's view: one sequence per episode
    assert view.sequence_ids[0][view.sequence_mask[0] == 1].tolist() == [5, 6, 7, 8, 9, 10, 11]
    assert view.response_starts.tolist() == [3, 6, 3]
    rewritten = [_call([5, 6, 7], [8, 9]), _call([5, 6, 99, 8, 9, 10], [11])]  # a break
    assert harness_batch([PlayedEpisode(0, 0, {}, rewritten, LoopResult(1.0))],
                         pad_id=0).layout == "window"


def test_the_loops_anchors_and_rewards_replace_the_defaults():
    calls = [_call([1], [2], anchor="d0"), _call([1, 2, 3], [4], anchor="d1")]
    result = LoopResult(reward=None, rewards=(0.5, -0.25), anchors=("room", "room"),
                        success=True)
    batch = harness_batch([PlayedEpisode(0, 0, {}, calls, result)], pad_id=0)
    assert batch.env_rewards.tolist() == [0.5, -0.25] and batch.rewards.tolist() == [0.5, -0.25]
    assert batch.anchors == ("room", "room") and batch.success.all()
    assert batch.log.calls[0]["anchor_from"] == "loop"
    assert result_problem(LoopResult(1.0, anchors=("a",)), calls) == (
        "returned 1 anchors for 2 model calls (one per call, in the order the calls finished)")
    with pytest.raises(ValueError, match="episode 0: returned 1 anchors for 2"):
        harness_batch([PlayedEpisode(0, 0, {}, calls, LoopResult(1.0, anchors=("a",)))], 0)


@pytest.mark.parametrize("layout", ["window", "transcript"])
@pytest.mark.parametrize("algo", ["gigpo", "hgpo", "graphgpo", "grpo", "rloo",
                                  "reinforce_pp", "dr_grpo", "gspo"])
def test_every_group_algorithm_takes_harness_rows(algo, layout):
    """Two groups of two episodes; in group 0 both first calls answer the same state "s"
    and the rewards differ, so GiGPO gives their first calls step advantages of opposite
    signs (calls that rewrite their prompt: the window layout; calls that extend it: the
    transcript layout)."""
    from algorithms.config import with_algo
    from algorithms.training.estimation import estimate_advantages

    def episode(traj, group, reward, anchors):
        if layout == "window":
            calls = [_call([1, 2, k], [3], anchor=a) for k, a in enumerate(anchors)]
        else:
            calls = [_call([1, 2] + [3, 4] * k, [3], anchor=a) for k, a in enumerate(anchors)]
        return PlayedEpisode(traj, group, {"task_id": f"t{group}"}, calls, LoopResult(reward))

    batch = harness_batch([episode(0, 0, 1.0, ["s", "u"]), episode(1, 0, 0.0, ["s", "v"]),
                           episode(2, 1, 1.0, ["w"]), episode(3, 1, 1.0, ["w"])], pad_id=0)
    assert batch.layout == layout
    config = with_algo(_config(), algo)
    signals = estimate_advantages(batch, config)
    assert signals.advantages.shape == (len(batch),)
    assert np.isfinite(signals.advantages).all()
    assert signals.advantages[0] > 0 > signals.advantages[2]  # the episode that won
    if algo == "gigpo":
        assert signals.step_group_ids[0] == signals.step_group_ids[2]
        assert signals.step[0] > 0 > signals.step[2]


# ---------------------------------------------------------------------- refusals
@pytest.mark.parametrize(("flags", "message"), [
    (["--algo", "ppo"], "--algo ppo is refused with --agent: its critic bootstraps GAE"),
    (["--algo", "sft"], "--algo sft is refused with --agent: it trains on expert "
                        "trajectories, not on your loop's episodes"),
    (["--learner.dynamic-sampling"], "learner.dynamic_sampling is refused with --agent"),
    (["--run.max-staleness", "1"], "run.max_staleness > 0 is refused with --agent"),
    (["--run.eval-every", "2"], "held-out evaluation (--eval-only, --run.eval-every, "
                                "--run.eval-before-train) plays the in-process loop"),
    (["--agent.timeout", "0"], "agent.concurrency must be >= 1, agent.timeout > 0"),
])
def test_what_cannot_train_a_loop_is_refused_in_one_line(flags, message):
    with pytest.raises(ConfigError) as error:
        train.parse_config(["--agent", f"{LOOPS}:keydoor", *flags])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_agent_flags_read_into_the_config(tmp_path):
    config = train.parse_config(["--agent", f"{LOOPS}:keydoor", "--agent.concurrency", "3",
                                 "--agent.timeout", "9.5", "--agent.tasks", "t.jsonl"])
    assert (config.agent.function, config.agent.concurrency, config.agent.timeout,
            config.agent.tasks) == (f"{LOOPS}:keydoor", 3, 9.5, "t.jsonl")
    assert train.parse_config([]).agent.function is None
    saved = TrainConfig().to_dict()
    del saved["agent"]  # a run saved before --agent existed reads as one without it
    assert TrainConfig.from_dict(json.loads(json.dumps(saved))).agent.function is None


def test_the_run_summary_counts_the_loops_episodes_and_joins():
    from algorithms.agent.summary import tool_call_lines

    rows = [{"rollout/tool_calls/ok": 3.0, "rollout/tool_calls/no_call": 1.0,
             "agent/episodes": 4.0, "agent/failed": 1.0, "agent/timeout": 1.0,
             "agent/exception": 0.0, "agent/calls": 4.0, "agent/joins": 1.0,
             "agent/breaks": 0.0, "agent/episode_seconds": 2.0}] * 2
    assert tool_call_lines(rows) == [
        "tool calls (8 attempts over 2 iterations): ok 6, no_call 2",
        "your loop: 8 episodes, 2 left out (2 timeout); 8 model calls of the episodes kept, "
        "2 joined the call before, 0 broke (a new sample row)"]


def test_the_engine_samples_only_during_a_rollout_and_at_most_the_runs_tokens():
    import threading

    from algorithms.gateway.harness import CappedEngine

    class Slow:
        top_p = 1.0

        def __init__(self):
            self.asked, self.started = [], threading.Event()

        def generate(self, prompts, *, max_new_tokens, **kwargs):
            self.asked.append(max_new_tokens)
            self.started.set()
            time.sleep(0.5)
            return [(1,)] * len(prompts)

    slow = Slow()
    engine = CappedEngine(slow, 32)
    with pytest.raises(RuntimeError, match="rollout is over"):
        engine.generate([[1]], max_new_tokens=8)
    engine.open()
    assert engine.generate([[1]], max_new_tokens=64, temperature=1.0) == [(1,)]
    thread = threading.Thread(target=engine.generate, args=([[1]],),
                              kwargs={"max_new_tokens": 8})
    slow.started.clear()
    thread.start()
    slow.started.wait(5)
    began = time.monotonic()
    engine.close()  # waits for the generation in flight
    assert time.monotonic() - began > 0.2 and not thread.is_alive()
    assert slow.asked == [32, 8]
    engine.top_p = 0.5
    assert slow.top_p == 0.5
