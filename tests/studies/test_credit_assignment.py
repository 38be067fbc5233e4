"""The credit-assignment study's quick mode end to end (slow: minutes on two cores).

Runs ``python -m studies.credit_assignment --quick`` into a temporary folder and checks
that its outputs exist and are well formed: the JSON of every run's figures (every task,
method and seed, a final success in [0, 1], a CI around the mean, a p-value per pair)
and the PNGs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from algorithms.precision import cpu_kernels  # noqa: E402
from studies.credit_assignment import (  # noqa: E402
    METHODS,
    MODES,
    PAIRS,
    TASKS,
    main,
    warm_start_task,
)


@pytest.mark.slow
def test_the_quick_study_writes_its_figures(tmp_path):
    results = tmp_path / "results"
    assert main(["--quick", "--workdir", str(tmp_path / "runs"),
                 "--results-dir", str(results)]) == 0
    data = json.loads((results / "credit_assignment_quick.json").read_text())
    seeds = list(MODES["quick"].seeds)
    assert data["seeds"] == seeds
    for task in TASKS:
        block = data["summary"][task]
        assert 0.0 <= block["start"]["success"] <= 1.0
        for method in METHODS:
            row = block["methods"][method]
            assert row["seeds"] == seeds and len(row["final_success"]) == len(seeds)
            assert all(0.0 <= v <= 1.0 for v in row["final_success"])
            low, high = row["ci95"]
            assert low - 1e-9 <= row["mean"] <= high + 1e-9
            assert row["iteration_seconds"] > 0
            figures = data["runs"][task][method][str(seeds[0])]
            assert figures["eval_success"][0][0] == 0  # the warm start's evaluation
            assert figures["eval_success"][-1][0] == MODES["quick"].iterations[task]
            if method.startswith("gigpo"):
                shares = figures["step_group_share"]
                for i in range(len(figures["iterations"])):
                    assert math.isclose(sum(v[i] for v in shares.values()), 1.0,
                                        abs_tol=1e-6)
                    assert (0.0 <= figures["step_only_share"][i]
                            <= figures["step_nonzero_share"][i]
                            <= figures["shared_state_share"][i] <= 1.0)
        for first, second in PAIRS:
            test = block["paired_tests"][f"{first} vs {second}"]
            assert 0.0 < test["p_value"] <= 1.0 and test["seeds"] == seeds
        for kind in ("curves", "step_groups"):
            png = results / f"credit_assignment_quick_{task}_{kind}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_warm_start_options_change_only_what_they_name():
    alfworld = TASKS["alfworld"]
    assert warm_start_task(alfworld) == alfworld
    changed = warm_start_task(alfworld, expert="handcoded", lr=1e-3, steps=600,
                              eval_every=100, episodes=240)
    assert changed.env_kwargs == {**alfworld.env_kwargs, "expert": "handcoded"}
    assert alfworld.env_kwargs.get("expert") is None  # the task itself is untouched
    assert (changed.sft_lr, changed.sft_max_steps, changed.sft_eval_every,
            changed.sft_episodes) == (1e-3, 600, 100, 240)
    kept = {f: getattr(alfworld, f) for f in ("env_id", "eval_env_kwargs", "max_steps",
                                               "num_groups", "group_size", "sft_perturb")}
    assert {f: getattr(changed, f) for f in kept} == kept
    clean = warm_start_task(alfworld, perturb=0.0)
    assert clean.sft_perturb == 0.0 and alfworld.sft_perturb == 0.2
    assert dataclasses.replace(clean, sft_perturb=0.2) == alfworld
    assert warm_start_task(alfworld, steps=50).sft_eval_every == alfworld.sft_eval_every


def test_warm_start_only_trains_the_chosen_policy_size_and_runs_no_rl(tmp_path, monkeypatch,
                                                                       capsys):
    import dataclasses

    import studies.credit_assignment as study

    small = dataclasses.replace(TASKS["keydoor"], sft_episodes=8, sft_max_steps=2,
                                sft_eval_every=2, eval_episodes=4,
                                env_kwargs={**TASKS["keydoor"].env_kwargs, "num_tasks": 8},
                                eval_env_kwargs={"first_task": 8, "num_tasks": 4})
    monkeypatch.setitem(study.TASKS, "keydoor", small)
    workdir = tmp_path / "runs"
    assert main(["--tasks", "keydoor", "--workdir", str(workdir), "--warm-start-only",
                 "--policy-hidden", "32", "--policy-layers", "1",
                 "--results-dir", str(tmp_path / "results")]) == 0
    start = json.loads((workdir / "keydoor" / "sft_start.json").read_text())
    from safetensors import safe_open

    with safe_open(f"{start['checkpoint']}/weights.safetensors", "pt") as weights:
        names = list(weights.keys())
        width = weights.get_slice(next(n for n in names if "embed_tokens" in n)).get_shape()[1]
    layers = {n.split("layers.")[1].split(".")[0] for n in names if "layers." in n}
    assert (width, layers) == (32, {"0"})
    assert not (workdir / "keydoor" / "grpo-std").exists()  # no RL run
    assert '"checkpoint"' in capsys.readouterr().out


def test_a_width_the_heads_cannot_split_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["--warm-start-only", "--policy-hidden", "30"])
    assert "multiple of 4" in capsys.readouterr().err


@pytest.fixture
def small_keydoor(monkeypatch):
    """The full mode on a KeyDoor task small enough for a test: 8 training tasks, 4 held
    out, 2 groups x 2, 6 steps, 2 SFT steps."""
    import dataclasses

    import studies.credit_assignment as study

    small = dataclasses.replace(TASKS["keydoor"], sft_episodes=8, sft_max_steps=2,
                                sft_eval_every=2, eval_episodes=4, group_size=2, max_steps=6,
                                env_kwargs={**TASKS["keydoor"].env_kwargs, "num_tasks": 8},
                                eval_env_kwargs={"first_task": 8, "num_tasks": 4})
    monkeypatch.setitem(study.TASKS, "keydoor", small)
    monkeypatch.setitem(study.MODES, "full", dataclasses.replace(
        MODES["full"], eval_every={"alfworld": 3, "keydoor": 2},
        eval_episodes={"alfworld": 60, "keydoor": 4}, num_groups={"alfworld": 2, "keydoor": 2}))
    return small


def _study(tmp_path, tag: str, *options: str) -> dict:
    """Run the study's full mode with ``options`` into ``tmp_path``; its results JSON."""
    results = tmp_path / "results"
    assert main(["--tasks", "keydoor", "--seeds", "0", "--jobs", "1", *options,
                 "--workdir", str(tmp_path / "runs"), "--results-dir", str(results),
                 "--tag", tag]) == 0
    return json.loads((results / f"credit_assignment_full_{tag}.json").read_text())


def test_staleness_and_rl_lr_reach_the_rl_runs(tmp_path, small_keydoor):
    data = _study(tmp_path, "k1", "--methods", "grpo-std", "--iterations", "2",
                  "--staleness", "1", "--rl-lr", "3e-3")
    assert data["ablation"]["staleness"] == 1 and data["rl_lr"] == 3e-3
    figures = data["runs"]["keydoor"]["grpo-std"]["0"]
    # the first batch comes from the start's weights, the second from one update before
    assert figures["overlap/staleness_mean"] == [0.0, 1.0]
    assert figures["cpu"] == cpu_kernels()
    config = json.loads((tmp_path / "runs" / "keydoor" / "grpo-std" / "seed0"
                         / "config.json").read_text())
    assert config["learner"]["lr"] == 3e-3 and config["run"]["max_staleness"] == 1
    assert not config["run"]["eval_before_train"]  # the task's own horizon
    assert config["learner"]["episode_stats"] == "steps"  # the recipe's
    assert not config["learner"]["penalty_in_returns"]


def test_the_papers_episode_statistics_reach_the_rl_runs(tmp_path, small_keydoor):
    data = _study(tmp_path, "eq3", "--methods", "grpo-std", "--iterations", "1",
                  "--episode-stats", "trajectories")
    assert data["ablation"]["episode_stats"] == "trajectories"
    config = json.loads((tmp_path / "runs" / "keydoor" / "grpo-std" / "seed0"
                         / "config.json").read_text())
    assert config["learner"]["episode_stats"] == "trajectories"
    assert config["learner"]["penalty_in_returns"]


def test_another_horizon_evaluates_the_start_at_that_horizon(tmp_path, small_keydoor):
    data = _study(tmp_path, "h9", "--methods", "grpo-std", "--iterations", "2",
                  "--horizon", "9")
    run_dir = tmp_path / "runs" / "keydoor" / "grpo-std" / "seed0"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    own_start = [r for r in rows if r["iteration"] == 0 and "eval/success" in r]
    assert len(own_start) == 1
    config = json.loads((run_dir / "config.json").read_text())
    assert config["env"]["max_steps"] == 9 and config["run"]["eval_before_train"]
    figures = data["runs"]["keydoor"]["grpo-std"]["0"]
    assert figures["eval_success"][0] == [0, own_start[0]["eval/success"]]
    assert figures["iterations"] == [1, 2]  # the evaluation row is not a training one
    assert len(figures["rollout/success"]) == 2


def test_gigpo_runs_report_which_steps_their_step_groups_moved(tmp_path, small_keydoor):
    data = _study(tmp_path, "shares", "--methods", "gigpo-state-std", "grpo-std",
                  "--iterations", "2")
    figures = data["runs"]["keydoor"]["gigpo-state-std"]["0"]
    for shared, nonzero, only in zip(figures["shared_state_share"],
                                     figures["step_nonzero_share"],
                                     figures["step_only_share"], strict=True):
        # a step term is nonzero only in a step group of two or more
        assert 0.0 <= only <= nonzero <= shared <= 1.0
    # logged where both terms vary (this tiny setting's step terms are all zero: NaN)
    assert all(math.isnan(c) or -1.0 <= c <= 1.0 for c in figures["step_episode_corr"])
    row = data["summary"]["keydoor"]["methods"]["gigpo-state-std"]
    assert row["step_nonzero_share"] == pytest.approx(sum(figures["step_nonzero_share"]) / 2)
    assert "step_nonzero_share" not in data["summary"]["keydoor"]["methods"]["grpo-std"]


def _tiny_model_folder(folder):
    """A random word-level Llama over KeyDoor's texts, saved like a HF model (the
    pretrained-LM study's ``--model`` in a test's place)."""
    from agentgym.keydoor import KeyDoorEnv
    from algorithms.training.tiny_model import text_words, tiny_llama, word_tokenizer

    env = KeyDoorEnv(width=2, height=2, key=False)
    texts = ["<action> </action> User Assistant"]
    for seed in range(8):
        observation, info = env.reset(seed=seed)
        texts += [observation, info["task"], *info["admissible_actions"]]
    tokenizer = word_tokenizer(text_words(texts))
    tiny_llama(len(tokenizer), hidden=32, layers=1).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.mark.slow
def test_the_pretrained_lm_study_writes_every_run_and_resumes(tmp_path):
    import studies.credit_assignment as study

    model = _tiny_model_folder(tmp_path / "model")
    results, workdir = tmp_path / "results", tmp_path / "runs"
    command = ["--policy", "smollm2", "--model", model, "--methods", "graphgpo", "grpo",
               "--seeds", "0", "--iterations", "1", "--eval-episodes", "2", "--jobs", "2",
               "--workdir", str(workdir), "--results-dir", str(results), "--tag", "t"]
    assert main(command) == 0
    data = json.loads((results / "credit_assignment_smollm2_t.json").read_text())
    assert data["model"] == model and data["preset"] == "cpu-demo"
    assert set(data["runs"]) == {"graphgpo", "grpo"} and data["seeds"] == [0]
    graph = data["runs"]["graphgpo"]["0"]
    assert graph["iterations"] == [1] and 0.0 <= graph["train_success"][0] <= 1.0
    assert 0.0 <= graph["heldout_success"] <= 1.0 and len(graph["format_error_rate"]) == 1
    assert 0.0 < graph["advantage_share"] < 1.0
    assert math.isclose(sum(v[0] for v in graph["step_group_share"].values()), 1.0,
                        abs_tol=1e-6)
    assert "step_only_share" in graph and "step_only_share" not in data["runs"]["grpo"]["0"]
    assert graph["cpu"] == cpu_kernels()  # bfloat16's rounding depends on the CPU's kernels
    config = json.loads((workdir / "graphgpo" / "seed0" / "config.json").read_text())
    assert config["algo"] == "graphgpo" and config["learner"]["graphgpo_decay"] == 0.1
    assert config["env"]["eval_env_kwargs"] == json.dumps(study.SMOLLM2_HELD_OUT)
    tests = data["summary"]["paired_tests"]["heldout_success"]["graphgpo vs grpo"]
    assert tests["p_holm"] >= tests["p_value"]
    assert not (workdir / "graphgpo" / "seed0" / "checkpoints").exists()  # deleted when done
    # an interrupted run (no done.json, a checkpoint left) resumes from its checkpoint
    run_dir = workdir / "grpo" / "seed0"
    assert main([*command[:command.index("--methods")], "--methods", "grpo", "--seeds", "0",
                 "--iterations", "1", "--eval-episodes", "2", "--workdir", str(workdir),
                 "--results-dir", str(results), "--tag", "t", "--rerun",
                 "--keep-checkpoints"]) == 0
    (run_dir / "done.json").unlink()
    command[command.index("--iterations") + 1] = "2"
    assert main(command) == 0
    done = json.loads((run_dir / "done.json").read_text())
    assert done["resumed"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if "rollout/success" in r] == [1, 2]
    data = json.loads((results / "credit_assignment_smollm2_t.json").read_text())
    assert data["runs"]["grpo"]["0"]["iterations"] == [1, 2]


@pytest.mark.slow
def test_the_pretrained_lm_studys_runs_start_from_their_warm_start(tmp_path):
    """--lm-sft-steps: each run trains its SFT stage in <run>/sft and starts RL from it
    (a Trainer alone would refuse the config: the stage must run first)."""
    model = _tiny_model_folder(tmp_path / "model")
    results, workdir = tmp_path / "results", tmp_path / "runs"
    assert main(["--policy", "smollm2", "--model", model, "--methods", "grpo", "--seeds", "0",
                 "--iterations", "1", "--eval-episodes", "2", "--lm-sft-steps", "1",
                 "--lm-sft-perturb", "0.5", "--workdir", str(workdir),
                 "--results-dir", str(results)]) == 0
    run_dir = workdir / "grpo" / "seed0"
    finished = json.loads((run_dir / "sft" / "finished.json").read_text())
    assert finished["checkpoint"].endswith("iter_000001")
    config = json.loads((run_dir / "config.json").read_text())
    assert config["model"]["init_checkpoint"] == str(run_dir / "sft")
    data = json.loads((results / "credit_assignment_smollm2_sft1p0.5.json").read_text())
    assert data["config"]["sft"]["max_steps"] == 1 and data["runs"]["grpo"]["0"]["iterations"] == [1]


def test_holm_adjusts_a_family_of_p_values():
    from studies.credit_assignment import holm_adjusted

    got = holm_adjusted({"a": 0.01, "b": 0.04, "c": 0.03})
    assert got == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})
    assert holm_adjusted({"a": 0.6, "b": 0.5}) == pytest.approx({"b": 1.0, "a": 1.0})


def test_the_pretrained_lm_studys_runs_differ_only_in_algo_and_seed():
    from algorithms.presets import PRESETS
    from studies.credit_assignment import SMOLLM2_METHODS, smollm2_config

    demo = PRESETS["cpu-demo"].to_dict()
    for method in SMOLLM2_METHODS:
        config = smollm2_config(method, 3, 6, 16).validate().to_dict()
        assert config["algo"] == method and config["run"]["seed"] == 3
        assert config["model"] == demo["model"] and config["prompt"] == demo["prompt"]
        assert config["generation"] == demo["generation"]
        assert config["learner"] == demo["learner"]  # GraphGPO's decay: its own field
        assert (config["learner"]["gamma"], config["learner"]["graphgpo_decay"]) == (0.95, 0.1)
        assert config["env"]["eval_episodes"] == 16 and config["run"]["eval_every"] == 6


def test_the_pretrained_lm_studys_tasks_change_only_the_env():
    import json

    from studies.credit_assignment import smollm2_config

    demo = smollm2_config("grpo", 3, 8, 16).to_dict()
    for task, kwargs, steps in (("keydoor-key", {"width": 2, "height": 2, "key": True}, 10),
                                ("keydoor-3x3", {"width": 3, "height": 3, "key": False}, 8)):
        config = smollm2_config("grpo", 3, 8, 16, task=task).validate()
        assert json.loads(config.env.env_kwargs) == kwargs and config.env.max_steps == steps
        held_out = config.env.eval_kwargs()
        assert {k: held_out[k] for k in (*kwargs, "first_task", "num_tasks")} == \
            {**kwargs, "first_task": 64, "num_tasks": 64}
        other = config.to_dict()
        assert {k: v for k, v in other.items() if k != "env"} == \
            {k: v for k, v in demo.items() if k != "env"}
        assert json.loads(other["env"]["eval_env_kwargs"]) == {"first_task": 64,
                                                               "num_tasks": 64}


def test_the_pretrained_lm_studys_sokoban_is_verl_agents_room_held_out_on_later_seeds():
    import json

    from agentgym.plain import make_text_env
    from studies.credit_assignment import smollm2_config

    demo = smollm2_config("grpo", 3, 8, 16).to_dict()
    config = smollm2_config("grpo", 3, 8, 16, task="sokoban").validate()
    assert config.env.env_id == "AgentGym/Sokoban-v0" and config.env.max_steps == 15
    assert json.loads(config.env.env_kwargs) == {}  # the env's defaults: 6 x 6, one box
    assert config.env.kwargs() == {"max_steps": 15, "anchor": "state"}
    other = config.to_dict()
    assert {k: v for k, v in other.items() if k != "env"} == \
        {k: v for k, v in demo.items() if k != "env"}
    assert json.loads(other["env"]["eval_env_kwargs"]) == {"first_seed": 65_536,
                                                           "num_tasks": 64}
    train = make_text_env(config.env.env_id, **config.env.kwargs()).unwrapped
    held = make_text_env(config.env.env_id, **config.env.eval_kwargs()).unwrapped
    assert train.dim_room == held.dim_room == (6, 6) and train.num_boxes == 1
    assert train.task_ids[0] == "sokoban-6x6-1box-0"
    assert held.task_ids[0] == "sokoban-6x6-1box-65536" and len(held.task_ids) == 64
    assert not set(held.task_ids) & set(train.task_ids[:1000])


def test_the_pretrained_lm_studys_figures_of_a_run():
    from studies.credit_assignment import smollm2_figures

    rows = [{"iteration": i, "rollout/success": s, "rollout/format_error_rate": 0.5 - s / 2,
             "advantage/step_only_share": 0.1 * i, "advantage/step_group_share/1": 0.25,
             "advantage/step_group_share/2-3": 0.75, "time/advantages": 0.5,
             "time/iteration": 100.0}
            for i, s in ((1, 0.0), (2, 0.5), (3, 1.0))]
    rows.append({"iteration": 3, "eval/success": 0.75})
    figures = smollm2_figures(rows)
    assert figures["iterations"] == [1, 2, 3] and figures["train_success"] == [0.0, 0.5, 1.0]
    assert figures["train_success_2_to_n"] == 0.75 and figures["heldout_success"] == 0.75
    assert figures["rise"] == 0.75  # mean of iterations 2-3 minus iteration 1
    assert figures["advantage_share"] == pytest.approx(0.005)
    assert figures["step_group_share"] == {"1": [0.25] * 3, "2-3": [0.75] * 3}
    assert "step_nonzero_share" not in figures  # not logged: not reported


def test_the_learning_condition_reads_the_baselines_mean_rise():
    """The preregistered gates on GRPO's rise (last two iterations' mean training success
    minus iteration 1's): T4's, its mean over seeds against 0.3, and C1's, the lower end
    of its bootstrap interval over seeds against 0 (hand-computed cases)."""
    from studies.credit_assignment import learning_rise, smollm2_summary

    assert learning_rise([0.125, 0.0, 0.5, 0.25, 0.125, 0.5]) == pytest.approx(0.1875)
    assert np.isnan(learning_rise([0.0, 1.0]))

    def run(curve):
        return {"train_success": curve, "train_success_2_to_n": float(np.mean(curve[1:])),
                "heldout_success": 0.5, "advantage_share": 0.0}

    learns = {0: run([0.0, 0.25, 0.5, 0.5]), 1: run([0.25, 0.5, 0.5, 0.75])}  # 0.5, 0.375
    flat = {0: run([0.0, 0.0, 0.25, 0.25]), 1: run([0.25, 0.25, 0.5, 0.25])}  # 0.25, 0.125
    summary = smollm2_summary({"gigpo": flat, "grpo": learns})
    # two seeds: every bootstrap mean lies between the two rises, 0.375 and 0.5
    assert summary["learning_condition"] == {
        "baseline_rise": pytest.approx(0.4375), "threshold": 0.3, "informative": True,
        "baseline_rise_ci95": [pytest.approx(0.375), pytest.approx(0.5)],
        "rise_interval_above_zero": True}
    assert summary["methods"]["gigpo"]["rise"] == pytest.approx(0.1875)
    assert summary["methods"]["gigpo"]["rise_per_seed"] == [pytest.approx(0.25),
                                                            pytest.approx(0.125)]
    summary = smollm2_summary({"gigpo": learns, "grpo": flat})
    assert summary["learning_condition"]["informative"] is False
    assert summary["learning_condition"]["baseline_rise"] == pytest.approx(0.1875)
    # T4's rule fails (0.1875 < 0.3) where C1's holds: the interval [0.125, 0.25] is above 0
    assert summary["learning_condition"]["rise_interval_above_zero"] is True
    falls = {0: run([0.5, 0.25, 0.25, 0.25]), 1: run([0.25, 0.25, 0.5, 0.25])}  # -0.25, 0.125
    condition = smollm2_summary({"gigpo": learns, "grpo": falls})["learning_condition"]
    assert condition["baseline_rise_ci95"][0] == pytest.approx(-0.25)
    assert condition["rise_interval_above_zero"] is False


def test_a_run_collapsed_after_three_zero_iterations_past_the_first():
    """T4's collapse rule (hand-computed): success 0 in >= 3 consecutive iterations after
    iteration 1; iteration 1 (before any update) does not count."""
    from studies.credit_assignment import collapsed, smollm2_summary

    p7_seed_100 = [0.125, 0.1875, 0.5, 0.5, 0.0625, 0, 0, 0, 0, 0.0625, 0.5, 1.0]  # its JSON
    assert collapsed(p7_seed_100)
    assert not collapsed([0, 0, 0, 0.125, 0.5])  # the first zero is iteration 1's
    assert collapsed([0.5, 0, 0, 0]) and not collapsed([0.5, 0, 0, 0.125, 0, 0])
    assert not collapsed([0.5, 0, 0, 0], run=4) and collapsed([0, 0, 0, 0, 0], run=4)

    def run(curve):
        return {"train_success": curve, "train_success_2_to_n": float(np.mean(curve[1:])),
                "heldout_success": 0.5, "advantage_share": 0.0}

    summary = smollm2_summary({"grpo": {0: run(p7_seed_100), 1: run([0.0] + [0.5] * 11),
                                        2: run([0.25, 0, 0, 0.5] * 3), 3: run([0.0] * 12)}})
    assert summary["methods"]["grpo"]["collapse_share"] == 0.5


def test_the_pretrained_lm_studys_group_size_changes_only_the_groups():
    from studies.credit_assignment import LMVariant, smollm2_config

    demo = smollm2_config("grpo", 3, 8, 16).to_dict()
    wide = smollm2_config("grpo", 3, 8, 16, variant=LMVariant(group_size=16)).validate().to_dict()
    assert wide["env"]["group_size"] == 16 != demo["env"]["group_size"]
    assert {k: v for k, v in wide["env"].items() if k != "group_size"} == \
        {k: v for k, v in demo["env"].items() if k != "group_size"}
    assert {k: v for k, v in wide.items() if k != "env"} == \
        {k: v for k, v in demo.items() if k != "env"}


def test_the_pretrained_lm_studys_lr_and_mini_batch_change_only_the_learner():
    from studies.credit_assignment import LMVariant, smollm2_config

    demo = smollm2_config("grpo", 3, 8, 16).to_dict()
    fast = smollm2_config("grpo", 3, 8, 16, variant=LMVariant(lr=2e-3)).validate().to_dict()
    assert fast["learner"]["lr"] == 2e-3 != demo["learner"]["lr"]
    assert {k: v for k, v in fast["learner"].items() if k != "lr"} == \
        {k: v for k, v in demo["learner"].items() if k != "lr"}
    assert {k: v for k, v in fast.items() if k != "learner"} == \
        {k: v for k, v in demo.items() if k != "learner"}
    small = smollm2_config("grpo", 3, 8, 16, variant=LMVariant(mini_batch=16)).validate()
    assert small.learner.mini_batch_size == 16 != demo["learner"]["mini_batch_size"]
    assert {k: v for k, v in small.to_dict()["learner"].items() if k != "mini_batch_size"} == \
        {k: v for k, v in demo["learner"].items() if k != "mini_batch_size"}
    low_kl = smollm2_config("grpo", 3, 8, 16, variant=LMVariant(kl=0.01)).validate()
    assert low_kl.learner.kl_coef == 0.01 != demo["learner"]["kl_coef"]
    assert LMVariant(group_size=16, lr=2e-3, mini_batch=16, kl=0.01, sft_steps=2,
                     sft_perturb=0.5).suffix() == "_g16_lr0.002_mb16_kl0.01_sft2p0.5"
    assert LMVariant(kl=0.0).suffix() == "_kl0"
    demo_gigpo = smollm2_config("gigpo", 3, 8, 16).to_dict()
    strong = smollm2_config("gigpo", 3, 8, 16, variant=LMVariant(step_weight=2.0)).validate()
    assert strong.learner.step_weight == 2.0 != demo_gigpo["learner"]["step_weight"]
    assert {k: v for k, v in strong.to_dict()["learner"].items() if k != "step_weight"} == \
        {k: v for k, v in demo_gigpo["learner"].items() if k != "step_weight"}
    assert {k: v for k, v in strong.to_dict().items() if k != "learner"} == \
        {k: v for k, v in demo_gigpo.items() if k != "learner"}
    assert LMVariant(mini_batch=16, kl=0.01, sft_steps=2, sft_perturb=0.5,
                     step_weight=2.0).suffix() == "_mb16_kl0.01_sft2p0.5_w2"
    assert LMVariant(step_weight=0.5).suffix() == "_w0.5"
    assert LMVariant().suffix() == "" and LMVariant(sft_steps=4).suffix() == "_sft4"


def test_the_pretrained_lm_studys_warm_start_changes_only_the_sft_section():
    from studies.credit_assignment import SMOLLM2_SFT, LMVariant, smollm2_config

    demo = smollm2_config("grpo", 3, 8, 16).to_dict()
    assert demo["sft"]["warm_start"] is False
    warm = smollm2_config("grpo", 3, 8, 16,
                          variant=LMVariant(sft_steps=2, sft_perturb=0.5)).validate()
    assert warm.sft.warm_start and warm.sft.max_steps == 2 and warm.sft.perturb == 0.5
    assert {k: getattr(warm.sft, k) for k in SMOLLM2_SFT} == SMOLLM2_SFT
    assert {k: v for k, v in warm.to_dict().items() if k != "sft"} == \
        {k: v for k, v in demo.items() if k != "sft"}


def _fake_runs(order, cut=(), seen=None):
    """A stand-in for the study's ``run_jobs``: each job's run folder gets a finished
    ``metrics.jsonl`` (training success ``seed / 10`` at iterations 2..N, invalid-action
    rate ``seed / 100``) and ``done.json``, then ``on_done`` is called; ``order`` records
    the (method, seed) order of the jobs. A (method, seed) in ``cut`` ends unfinished (no
    ``done.json``, as a run cut by a session's end); ``seen`` collects the JSON as each
    ``on_done`` left it."""

    def run_jobs(jobs, workers, worker=None, on_done=None):
        for job in jobs:
            order.append((job["method"], job["seed"]))
            run_dir = Path(job["run_dir"])
            run_dir.mkdir(parents=True)
            rows = [{"iteration": i, "rollout/success": 0.0 if i == 1 else job["seed"] / 10,
                     "rollout/invalid_action_rate": job["seed"] / 100,
                     "time/advantages": 0.01, "time/iteration": 10.0}
                    for i in range(1, job["iterations"] + 1)]
            rows.append({"iteration": job["iterations"], "eval/success": 0.5})
            (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            if (job["method"], job["seed"]) in cut:
                continue
            (run_dir / "done.json").write_text(json.dumps({"seconds": 1.0}))
            if on_done is not None:
                on_done({"run_dir": str(run_dir)})
                if seen is not None:
                    results = Path(run_dir).parents[3] / "results"
                    seen.extend(json.loads(p.read_text()) for p in results.glob("*.json"))

    return run_jobs


def test_a_study_stays_blind_until_every_planned_run_is_in(tmp_path, monkeypatch, capsys):
    """While a planned run is missing, neither the JSON nor the output compares methods
    (per-run figures only, written after every finished run); once all are in, the
    summary, the paired tests with their intervals and the plots appear. The plan is
    every (method, seed) any invocation asked for, kept in the JSON."""
    import studies.credit_assignment as study

    order, seen = [], []
    base = ["--policy", "smollm2", "--iterations", "3", "--tag", "c",
            "--results-dir", str(tmp_path / "x" / "y" / "results")]
    path = tmp_path / "x" / "y" / "results" / "credit_assignment_smollm2_c.json"
    monkeypatch.setattr(study, "run_jobs", _fake_runs(order, cut={("grpo", 2)}, seen=seen))
    assert main([*base, "--methods", "gigpo", "grpo", "--seeds", "1", "2",
                 "--workdir", str(tmp_path / "x" / "y" / "a" / "b")]) == 0
    out = capsys.readouterr().out
    assert "blind: 3 of the 4 planned runs are in" in out and "vs grpo" not in out
    assert len(seen) == 3  # the JSON was written after each finished run
    for data in [*seen, json.loads(path.read_text())]:
        assert data["summary"] is None and data["plots"] == [] and data["blinding"]["blind"]
        assert data["plan"] == [["gigpo", 1], ["gigpo", 2], ["grpo", 1], ["grpo", 2]]
    data = json.loads(path.read_text())
    assert data["blinding"]["missing"] == [["grpo", 2]]
    assert data["runs"]["gigpo"]["2"]["invalid_action_rate_2_to_n"] == pytest.approx(0.02)
    assert not list(path.parent.glob("*.png"))

    # another session, run folders gone, a part of the plan asked for: still blind
    order.clear()
    monkeypatch.setattr(study, "run_jobs", _fake_runs(order, cut={("grpo", 2)}))
    assert main([*base, "--methods", "grpo", "--seeds", "2",
                 "--workdir", str(tmp_path / "x" / "y" / "c" / "d")]) == 0
    assert order == [("grpo", 2)] and "blind: 3 of the 4" in capsys.readouterr().out
    assert json.loads(path.read_text())["summary"] is None

    # the last run comes in: the comparison, with its paired interval
    order.clear()
    monkeypatch.setattr(study, "run_jobs", _fake_runs(order))
    assert main([*base, "--methods", "grpo", "--seeds", "2",
                 "--workdir", str(tmp_path / "x" / "y" / "e" / "f")]) == 0
    out = capsys.readouterr().out
    assert "blind:" not in out and "invalid_action_rate_2_to_n: gigpo vs grpo: +0.000" in out
    data = json.loads(path.read_text())
    assert not data["blinding"]["blind"] and "unblinded" not in data
    test = data["summary"]["paired_tests"]["invalid_action_rate_2_to_n"]["gigpo vs grpo"]
    assert test["mean_difference"] == 0.0 and test["difference_ci95"] == [0.0, 0.0]
    assert data["plots"] and (path.parent / data["plots"][0]).exists()


def test_unblind_computes_the_comparison_early_and_the_json_records_it(
        tmp_path, monkeypatch, capsys):
    import studies.credit_assignment as study

    order: list = []
    monkeypatch.setattr(study, "run_jobs", _fake_runs(order, cut={("grpo", 2)}))
    base = ["--policy", "smollm2", "--iterations", "3", "--tag", "u", "--methods", "gigpo",
            "grpo", "--seeds", "1", "2", "--results-dir", str(tmp_path / "results")]
    assert main([*base, "--workdir", str(tmp_path / "a"), "--unblind"]) == 0
    out = capsys.readouterr().out
    assert "--unblind: the comparison is computed with 0 of the 4 planned runs" in out
    assert "unblinded by --unblind" in out and "gigpo vs grpo" in out
    data = json.loads((tmp_path / "results" / "credit_assignment_smollm2_u.json").read_text())
    assert data["unblinded"]["in"] == 0 and data["unblinded"]["planned"] == 4
    assert data["unblinded"]["command"].endswith("--unblind")
    assert data["summary"]["paired_tests"]["train_success_2_to_n"]["gigpo vs grpo"]["seeds"] == [1]
    # the record stays: a later invocation without the flag keeps it and stays unblinded
    order.clear()
    assert main([*base, "--workdir", str(tmp_path / "b")]) == 0
    data = json.loads((tmp_path / "results" / "credit_assignment_smollm2_u.json").read_text())
    assert data["unblinded"]["in"] == 0 and data["summary"] is not None


def test_a_json_from_before_a_config_field_existed_is_still_read():
    """A field added to the config later (its default in effect for the old runs) does
    not make an old study's JSON 'another configuration'; any other difference does."""
    from studies.credit_assignment import same_config

    default = {"prompt": {"window": 2, "new_field": "tags"}, "seed": 0}
    now = {"prompt": {"window": 1, "new_field": "tags"}, "seed": 3}
    assert same_config({"prompt": {"window": 1}, "seed": 3}, now, default)
    assert not same_config({"prompt": {"window": 1}, "seed": 3},
                           {"prompt": {"window": 1, "new_field": "tool-call"}, "seed": 3},
                           default)
    assert not same_config({"prompt": {"window": 2}, "seed": 3}, now, default)
    assert not same_config({"prompt": {"window": 1, "gone": 1}, "seed": 3}, now, default)


T4_JSON = (Path(__file__).resolve().parents[2] / "benchmarks" / "results"
           / "credit_assignment_smollm2_g8_mb16_kl0.01_sft2p0.5_t4.json")


def test_the_committed_t4_study_is_still_read_as_its_own_configuration(tmp_path):
    """The committed T4 JSON (all four methods, written before GraphGPO's decay had a
    field of its own) is read as the configuration its own arguments give today: its runs
    come back and the file stays where it is."""
    import shutil

    from studies.credit_assignment import LMVariant, recorded_runs

    path = tmp_path / T4_JSON.name
    shutil.copy(T4_JSON, path)
    data = json.loads(path.read_text())
    recorded = recorded_runs(path, data["iterations"], data["heldout"]["episodes"], None,
                             data["task"], LMVariant(**data["variant"]))
    assert path.exists() and sorted(p.name for p in tmp_path.iterdir()) == [T4_JSON.name]
    assert {m: sorted(map(str, seeds)) for m, seeds in recorded.runs.items()} == {
        m: sorted(seeds) for m, seeds in data["runs"].items()}
    assert {"gigpo", "grpo", "hgpo", "graphgpo"} <= set(recorded.runs)


def test_a_graphgpo_study_json_from_before_its_decay_had_a_field_is_the_same_configuration():
    """A study JSON whose config is a GraphGPO run's as it was saved before
    ``learner.graphgpo_decay`` existed (the decay in ``learner.gamma``) is today's GraphGPO
    config; another decay is not, and neither is a GiGPO run that trained with gamma 0.1."""
    import copy

    from studies.credit_assignment import same_config, smollm2_config

    def before(config):
        data = json.loads(json.dumps(config.to_dict()))
        decay = data["learner"].pop("graphgpo_decay")
        if data["algo"] == "graphgpo":
            data["learner"]["gamma"] = decay
        return data

    graph = smollm2_config("graphgpo", 1, 3, 4)
    now = json.loads(json.dumps(graph.to_dict()))
    assert (now["learner"]["gamma"], now["learner"]["graphgpo_decay"]) == (0.95, 0.1)
    old = before(graph)
    assert old["learner"]["gamma"] == 0.1 and same_config(old, now)
    other = copy.deepcopy(old)
    other["learner"]["gamma"] = 0.2
    assert not same_config(other, now)
    gigpo = smollm2_config("gigpo", 1, 3, 4)
    assert same_config(before(gigpo), json.loads(json.dumps(gigpo.to_dict())))
    discounted = before(gigpo)
    discounted["learner"]["gamma"] = 0.1
    assert not same_config(discounted, json.loads(json.dumps(gigpo.to_dict())))


def test_the_pretrained_lm_study_carries_on_from_its_json_where_run_folders_are_gone(
        tmp_path, monkeypatch, capsys):
    """The committed JSON is the study's record across machines: a later invocation reads
    the runs it holds (no rerun), adds its own, and summarises them all; a JSON of another
    configuration is not read but kept beside, never lost. Jobs go seed by seed."""
    import studies.credit_assignment as study

    order: list = []
    monkeypatch.setattr(study, "run_jobs", _fake_runs(order))
    results = tmp_path / "results"
    base = ["--policy", "smollm2", "--iterations", "3", "--results-dir", str(results),
            "--tag", "t"]
    assert main([*base, "--methods", "gigpo", "grpo", "--seeds", "1", "2",
                 "--workdir", str(tmp_path / "a")]) == 0
    assert order == [("gigpo", 1), ("grpo", 1), ("gigpo", 2), ("grpo", 2)]  # seed-major
    path = results / "credit_assignment_smollm2_t.json"
    first = json.loads(path.read_text())
    assert first["runs"]["grpo"]["2"]["train_success"] == [0.0, 0.2, 0.2]

    # another machine: no run folders, the JSON committed; seeds 1-2 read, seed 3 run
    order.clear()
    assert main([*base, "--methods", "grpo", "gigpo", "--seeds", "1", "2", "3",
                 "--workdir", str(tmp_path / "b")]) == 0
    assert order == [("grpo", 3), ("gigpo", 3)]
    assert "4 of the 6 runs are in: 4 read from" in capsys.readouterr().out
    data = json.loads(path.read_text())
    assert list(data["runs"]) == ["gigpo", "grpo"] and data["seeds"] == [1, 2, 3]
    assert data["runs"]["gigpo"]["1"] == first["runs"]["gigpo"]["1"]
    assert data["summary"]["methods"]["grpo"]["seeds"] == [1, 2, 3]
    # the same command again: every run is in, and the count says from where
    order.clear()
    assert main([*base, "--methods", "grpo", "gigpo", "--seeds", "1", "2", "3",
                 "--workdir", str(tmp_path / "b")]) == 0
    assert order == []
    assert ("6 of the 6 runs are in: 4 read from" in (out := capsys.readouterr().out)
            and "2 from their finished run folders" in out and "; 0 to run" in out)

    # a subset keeps the other runs the JSON holds
    order.clear()
    assert main([*base, "--methods", "hgpo", "--seeds", "1",
                 "--workdir", str(tmp_path / "c")]) == 0
    assert order == [("hgpo", 1)]
    data = json.loads(path.read_text())
    assert list(data["runs"]) == ["gigpo", "grpo", "hgpo"]
    assert sorted(data["runs"]["grpo"]) == ["1", "2", "3"]

    # another budget: the JSON of 3 iterations is not read, and is kept beside
    order.clear()
    assert main([*base, "--iterations", "4", "--methods", "grpo", "--seeds", "1",
                 "--workdir", str(tmp_path / "d")]) == 0
    assert order == [("grpo", 1)]
    assert "of another configuration: not read" in capsys.readouterr().out
    kept = json.loads((results / "credit_assignment_smollm2_t.replaced.json").read_text())
    assert kept["runs"] == data["runs"]
    assert list(json.loads(path.read_text())["runs"]) == ["grpo"]

    # another lr: its own JSON, whose config holds the lr the runs used
    order.clear()
    assert main([*base, "--lm-lr", "0.002", "--methods", "grpo", "--seeds", "1",
                 "--workdir", str(tmp_path / "f")]) == 0
    fast = json.loads((results / "credit_assignment_smollm2_lr0.002_t.json").read_text())
    assert fast["config"]["learner"]["lr"] == 0.002 and order == [("grpo", 1)]

    # a warm start: its own JSON
    order.clear()
    assert main([*base, "--lm-sft-steps", "2", "--lm-sft-perturb", "0.5", "--methods", "grpo",
                 "--seeds", "1", "--workdir", str(tmp_path / "g")]) == 0
    warm = json.loads((results / "credit_assignment_smollm2_sft2p0.5_t.json").read_text())
    assert warm["config"]["sft"]["warm_start"] and warm["config"]["sft"]["max_steps"] == 2

    # GiGPO alone with omega 2 (an ablation: no baseline in its JSON, so no tests)
    order.clear()
    assert main([*base, "--lm-step-weight", "2", "--methods", "gigpo", "--seeds", "1",
                 "--workdir", str(tmp_path / "h")]) == 0
    strong = json.loads((results / "credit_assignment_smollm2_w2_t.json").read_text())
    assert strong["config"]["learner"]["step_weight"] == 2.0 and order == [("gigpo", 1)]
    assert list(strong["runs"]) == ["gigpo"] and not strong["summary"]["paired_tests"]

    # an unreadable JSON: said, kept, not read
    path.write_text("{not json")
    order.clear()
    assert main([*base, "--iterations", "4", "--methods", "grpo", "--seeds", "1",
                 "--workdir", str(tmp_path / "e")]) == 0
    assert order == [("grpo", 1)] and "unreadable" in capsys.readouterr().out
    assert (results / "credit_assignment_smollm2_t.replaced-2.json").read_text() == "{not json"
    assert json.loads((results / "credit_assignment_smollm2_t.replaced.json").read_text()) == kept


def _plotted_panels(runs, tmp_path, monkeypatch):
    """The four axes of the curves figure :func:`smollm2_plot` draws for ``runs``."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from studies.credit_assignment import smollm2_plot

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    smollm2_plot(runs, "study", "caption", tmp_path)
    return figures[0].axes


def test_the_pretrained_lm_plot_keeps_each_methods_colour_in_every_panel(tmp_path, monkeypatch):
    """GRPO has no step term, so the step panel skips it; the methods after it keep the
    colours of the first panel's legend (they once took the next colour in the cycle).
    The invalid-action panel (C1's primary measure) shows every method."""

    def run(step: bool):
        f = {"iterations": [1, 2], "train_success": [0.0, 0.5], "format_error_rate": [0.1, 0.0],
             "invalid_action_rate": [0.2, 0.1]}
        return {**f, "step_only_share": [0.0, 0.1]} if step else f

    runs = {m: {0: run(m != "grpo"), 1: run(m != "grpo")}
            for m in ("gigpo", "grpo", "hgpo", "graphgpo")}
    success, invalid, _, step_only = _plotted_panels(runs, tmp_path, monkeypatch)

    def colours(ax):
        return {line.get_label(): line.get_color() for line in ax.lines}

    assert colours(invalid) == colours(success)
    assert list(invalid.lines[0].get_ydata()) == [0.2, 0.1]  # the mean over seeds
    assert list(colours(step_only)) == ["gigpo", "hgpo", "graphgpo"]
    assert colours(step_only) == {m: c for m, c in colours(success).items() if m != "grpo"}
    assert len(set(colours(success).values())) == 4


def test_the_pretrained_lm_plot_says_why_the_step_panel_of_a_grpo_study_is_empty(
        tmp_path, monkeypatch):
    """A pilot runs GRPO alone: its step panel has no curve, and says so instead of
    showing an empty frame (its JSON, older than the invalid-action figure, leaves that
    panel empty too)."""
    run = {"iterations": [1, 2], "train_success": [0.0, 0.5], "format_error_rate": [0.1, 0.0]}
    success, invalid, _, step_only = _plotted_panels({"grpo": {0: run, 1: run}}, tmp_path,
                                                     monkeypatch)
    assert not invalid.lines
    assert [line.get_label() for line in success.lines] == ["grpo"]
    assert not step_only.lines and step_only.get_legend() is None
    assert [t.get_text() for t in step_only.texts] == ["no method here has a step term"]
    assert len(success.texts) == 0
