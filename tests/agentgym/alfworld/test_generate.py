"""Generated ALFWorld games: solvable on the real engine, deterministic, official layout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")
pytest.importorskip("fast_downward")

from agentgym.alfworld.gen.assets import grammar_template, pddl_domain, tables  # noqa: E402
from agentgym.alfworld.gen.game import GenerationConfig, make_game  # noqa: E402
from agentgym.alfworld.gen.pddl import location_name, mangle  # noqa: E402
from agentgym.alfworld.gen.scenes import pose_to_location, receptacle_type  # noqa: E402
from agentgym.alfworld.gen.store import game_bytes  # noqa: E402
from agentgym.alfworld.gen.verify import VerificationError, replay  # noqa: E402
from agentgym.alfworld.generate import (  # noqa: E402
    TASK_TYPES,
    ensure_generated_games,
    generate_games,
    main,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
PLACE_TASKS = [t for t in TASK_TYPES if t != "look_at_obj_in_light"]


def play_official(game_file: Path) -> tuple[str, list[str], bool]:
    """Plays a game's stored walkthrough the way alfworld does (textworld.gym + wrappers).

    Returns:
        (initial observation, feedback per step, won after the last step); raises if a
        command is not admissible when issued or the game is won early.
    """
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    env_id = textworld.gym.register_game(
        str(game_file), infos, max_episode_steps=100, wrappers=[AlfredDemangler(), AlfredInfos]
    )
    env = textworld.gym.make(env_id)
    try:
        initial, info = env.reset()
        assert not info["won"], "goal already satisfied at the start"
        walkthrough = json.loads(game_file.read_text())["walkthrough"]
        feedback = []
        won = False
        for step, command in enumerate(walkthrough):
            assert command in info["admissible_commands"], (step, command)
            assert not won, f"won before step {step}"
            obs, _, _, info = env.step(command)
            feedback.append(obs)
            won = bool(info["won"])
        return initial, feedback, won
    finally:
        env.close()


def task_type_of(trial: Path) -> str:
    return json.loads((trial / "traj_data.json").read_text())["task_type"]


@pytest.fixture(scope="module")
def train_games(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """Two games of every task type (seed 0, train split; replayed by the tests below)."""
    root = tmp_path_factory.mktemp("generated")
    paths = generate_games(root, num_games=12, seed=0, verify=False, progress=False)
    return root, paths


# ---------------------------------------------------------------- hand-computed pieces


def test_mangle_matches_the_official_convention() -> None:
    assert (
        mangle("Cabinet|+00.68|+00.50|-02.20")
        == "Cabinet_bar__plus_00_dot_68_bar__plus_00_dot_50_bar__minus_02_dot_20"
    )
    assert mangle("Sink|-01.90|+00.97|-01.50|SinkBasin").endswith("_bar_SinkBasin")
    assert location_name((-3, 2, 1, 30)) == "loc_bar__minus_3_bar_2_bar_1_bar_30"


def test_pose_to_location_matches_an_official_game() -> None:
    # FloorPlan301's dresser stands at (-0.75, -0.75, 270 deg); the official game of
    # look_at_obj_in_light-AlarmClock-None-DeskLamp-301 puts it at loc|-3|-3|3|...
    assert pose_to_location((-0.75, -0.75, 270, 30))[:3] == (-3, -3, 3)
    assert pose_to_location((0.75, 1.25, 270, 30)) == (3, 5, 3, 30)
    assert receptacle_type("Sink|-01.90|+00.97|-01.50|SinkBasin") == "SinkBasin"
    assert receptacle_type("Cabinet|+00.68|+00.50|-02.20") == "Cabinet"


# ---------------------------------------------------------------- the generated games


def test_every_task_type_is_generated_evenly(train_games: tuple[Path, list[Path]]) -> None:
    _, paths = train_games
    assert len(paths) == 12
    assert Counter(task_type_of(p) for p in paths) == {t: 2 for t in TASK_TYPES}


def test_walkthroughs_win_on_the_real_engine(train_games: tuple[Path, list[Path]]) -> None:
    _, paths = train_games
    for trial in paths:
        game = json.loads((trial / "game.tw-pddl").read_text())
        result = replay(game)
        assert result.won and len(result.observations) == len(game["walkthrough"])
        assert "Nothing happens." not in result.observations


def test_replay_rejects_wrong_walkthroughs(train_games: tuple[Path, list[Path]]) -> None:
    _, paths = train_games
    game = json.loads((paths[0] / "game.tw-pddl").read_text())  # pick_and_place_simple
    walkthrough = game["walkthrough"]
    with pytest.raises(VerificationError, match="without winning"):
        replay(game, walkthrough[:-1])
    old_verb = walkthrough[-1].replace("move ", "put ").replace(" to ", " in ")
    with pytest.raises(VerificationError, match="not admissible"):
        replay(game, [*walkthrough[:-1], old_verb])
    with pytest.raises(VerificationError, match="not admissible"):
        replay(game, walkthrough[1:])  # takes before going there
    with pytest.raises(VerificationError, match="won early"):
        replay(game, [*walkthrough, "look"])


def test_walkthroughs_win_through_textworld_gym(train_games: tuple[Path, list[Path]]) -> None:
    """One game per task type, played exactly as alfworld plays games (slow engine path)."""
    _, paths = train_games
    for trial in paths[:6]:
        traj = json.loads((trial / "traj_data.json").read_text())
        initial, feedback, won = play_official(trial / "game.tw-pddl")
        assert won, trial
        assert "Nothing happens." not in feedback
        # The start location holds no receptacle, as in every official game.
        assert "You are in the middle of a room. Looking quickly around you, you see " in initial
        assert initial.endswith(f"Your task is to: {traj['agentgym']['task_desc']}.")


def test_files_have_the_official_schema(train_games: tuple[Path, list[Path]]) -> None:
    _, paths = train_games
    for trial in paths:
        game = json.loads((trial / "game.tw-pddl").read_text())
        traj = json.loads((trial / "traj_data.json").read_text())
        assert list(game) == ["pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"]
        assert game["solvable"] is True
        assert game["pddl_domain"] == pddl_domain()
        sentence = traj["agentgym"]["task_desc"]
        assert game["grammar"] == grammar_template().replace("UNKNOWN GOAL", sentence)
        assert traj["task_type"] == trial.parent.name.split("-")[0]
        assert traj["task_id"] == trial.name
        params = traj["pddl_params"]
        assert trial.parent.name == "-".join(
            [
                traj["task_type"],
                params["object_target"],
                "None",
                params["parent_target"] or params["toggle_target"],
                str(traj["scene"]["scene_num"]),
            ]
        )
        # alfworld's own templating (add_task_to_grammar) reads these pddl_params.
        from alfworld.agents.utils.misc import get_templated_task_desc

        templated = {get_templated_task_desc(traj) for _ in range(200)}
        descs = {a["task_desc"] for a in traj["turk_annotations"]["anns"]}
        assert sentence in templated
        assert {d[0].upper() + d[1:] + "." for d in templated} == descs
        # Current grammar verbs only: "move X to Y", never the old "put X in/on Y".
        assert not any(c.startswith("put ") for c in game["walkthrough"])


def test_official_loader_finds_every_game(train_games: tuple[Path, list[Path]]) -> None:
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    root, paths = train_games
    config = {
        "dataset": {"data_path": str(root / "json_2.1.1" / "train"), "num_train_games": -1},
        "env": {"task_types": [1, 2, 3, 4, 5, 6], "goal_desc_human_anns_prob": 0.0},
    }
    env = AlfredTWEnv(config, train_eval="train")
    assert sorted(env.game_files) == sorted(str(p / "game.tw-pddl") for p in paths)
    one_type = dict(config, env={"task_types": [2], "goal_desc_human_anns_prob": 0.0})
    looks = AlfredTWEnv(one_type, train_eval="train").game_files
    assert len(looks) == 2 and all("look_at_obj_in_light" in f for f in looks)


def test_task_constraints_hold() -> None:
    config = GenerationConfig(seed=5)
    for index in range(24):
        game = make_game(config, index)
        task, world = game.task, game.world
        receptacle_locations = {r.location for r in world.receptacles}
        assert world.agent_location not in receptacle_locations
        assert all(o.location not in receptacle_locations for o in world.objects)
        types = {r.thor_id: r.rtype for r in world.receptacles}
        targets = [o for o in world.objects if o.otype == task.object_type]
        assert len(targets) >= (2 if task.task_type == "pick_two_obj_and_place" else 1)
        if task.task_type in PLACE_TASKS:
            assert all(types[o.receptacle] != task.parent_type for o in targets)
        else:
            lamps = [o for o in world.objects if o.otype == task.toggle_type]
            assert lamps and all(o.receptacle in types for o in lamps)
        if task.task_type == "pick_clean_then_place_in_recep":
            assert "SinkBasin" in types.values()
            assert task.object_type in tables().cleanable
        ids = [r.thor_id for r in world.receptacles] + [o.thor_id for o in world.objects]
        assert len(set(ids)) == len(ids)


# ---------------------------------------------------------------- determinism and splits


def test_same_seed_same_bytes_and_other_seed_other_games() -> None:
    config = GenerationConfig(seed=11)
    again = GenerationConfig(seed=11)
    other = GenerationConfig(seed=12)
    for index in range(6):
        first = game_bytes(make_game(config, index))
        assert first == game_bytes(make_game(again, index))
        assert make_game(other, index).game["pddl_problem"] != json.loads(first[0])["pddl_problem"]


def test_progress_in_a_log_file_is_two_plain_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where stderr is not a terminal (pytest captures it), no bar is redrawn per game."""
    generate_games(tmp_path, num_games=3, seed=3, verify=False, progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "\r" not in "".join(lines)
    assert lines[0].endswith(": 3 games ...") and re.search(r": 3 games in \d+ s$", lines[1])
    generate_games(tmp_path / "quiet", num_games=1, seed=3, verify=False, progress=False)
    assert capsys.readouterr().err == ""


def test_game_does_not_depend_on_how_many_are_generated(tmp_path: Path) -> None:
    few = generate_games(tmp_path / "a", num_games=2, seed=3, verify=False, progress=False)
    many = generate_games(tmp_path / "b", num_games=4, seed=3, verify=False, progress=False)
    for a, b in zip(few, many[:2], strict=True):
        assert a.relative_to(tmp_path / "a") == b.relative_to(tmp_path / "b")
        assert (a / "game.tw-pddl").read_bytes() == (b / "game.tw-pddl").read_bytes()


def test_worker_processes_write_the_same_games(tmp_path: Path) -> None:
    serial = generate_games(tmp_path / "a", num_games=4, seed=6, verify=False, progress=False)
    parallel = generate_games(
        tmp_path / "b", num_games=4, seed=6, verify=False, progress=False, workers=2
    )
    for a, b in zip(serial, parallel, strict=True):
        assert (a / "game.tw-pddl").read_bytes() == (b / "game.tw-pddl").read_bytes()
        assert (a / "traj_data.json").read_bytes() == (b / "traj_data.json").read_bytes()


def test_splits_use_alfworlds_scene_lists() -> None:
    t = tables()
    for split, scenes in (("train", t.train_scenes), ("valid", t.valid_scenes)):
        config = GenerationConfig(seed=0, split=split)
        for index in range(12):
            assert make_game(config, index).world.scene.number in scenes
    assert GenerationConfig(split="valid").split_dir == "valid_unseen"
    assert GenerationConfig(split="valid_seen").split_dir == "valid_seen"


def test_knobs_restrict_tasks_scenes_and_objects() -> None:
    config = GenerationConfig(
        seed=2,
        task_types=("pick_heat_then_place_in_recep",),
        scene_types=("Kitchen",),
        max_objects=8,
    )
    for index in range(4):
        game = make_game(config, index)
        assert game.task.task_type == "pick_heat_then_place_in_recep"
        assert game.world.scene.scene_type == "Kitchen"
        assert len(game.world.objects) <= 8
    bathrooms = GenerationConfig(seed=2, scene_types=("Bathroom",), task_types=PLACE_TASKS[:2])
    assert {make_game(bathrooms, i).world.scene.scene_type for i in range(4)} == {"Bathroom"}


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "test"}, "unknown split"),
        ({"task_types": ["pick_and_fly"]}, "unknown task types"),
        ({"task_types": []}, "non-empty"),
        ({"seed": -1}, "seed must be >= 0"),
        ({"num_games": 0}, "num_games must be"),
        ({"scene_types": ["Garage"]}, "unknown scene types"),
        ({"max_objects": 0}, "max_objects must be"),
        (
            {"task_types": ["pick_heat_then_place_in_recep"], "scene_types": ["Bedroom"]},
            "no train scene supports pick_heat_then_place_in_recep",
        ),
    ],
)
def test_bad_arguments_raise_clear_errors(tmp_path: Path, kwargs: dict, message: str) -> None:
    arguments = {"num_games": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        generate_games(tmp_path, progress=False, **arguments)
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------- cache


def test_cache_generates_only_missing_games(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root3 = ensure_generated_games("train", num_games=3, seed=4, cache_dir=tmp_path, progress=False)
    trials = sorted(root3.glob("json_2.1.1/train/*/trial_*"))
    assert len(trials) == 3
    import agentgym.alfworld.generate as generate_module

    calls: list[int] = []
    real = generate_module.build_verified_game

    def counting(config, index, *, verify=True):
        calls.append(index)
        return real(config, index, verify=verify)

    monkeypatch.setattr(generate_module, "build_verified_game", counting)
    assert ensure_generated_games("train", num_games=3, seed=4, cache_dir=tmp_path) == root3
    assert calls == []
    root5 = ensure_generated_games("train", num_games=5, seed=4, cache_dir=tmp_path, progress=False)
    assert sorted(calls) == [3, 4]
    assert len(list(root5.glob("json_2.1.1/train/*/trial_*"))) == 5
    for trial in trials:
        twin = root5 / trial.relative_to(root3)
        assert (twin / "game.tw-pddl").read_bytes() == (trial / "game.tw-pddl").read_bytes()
    assert not (root5 / ".tmp").exists()


def test_cache_is_safe_when_two_processes_race(tmp_path: Path) -> None:
    code = (
        "import sys; from agentgym.alfworld.generate import ensure_generated_games as e; "
        f"print(e('valid', num_games=4, seed=9, cache_dir={str(tmp_path)!r}, verify=False, progress=False))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1].decode()[-2000:] for o in outs]
    roots = {o[0].decode().strip() for o in outs}
    assert len(roots) == 1
    root = Path(roots.pop())
    assert len(list(root.glob("json_2.1.1/valid_unseen/*/trial_*/game.tw-pddl"))) == 4
    assert len(list(root.glob("json_2.1.1/valid_unseen/*/trial_*/traj_data.json"))) == 4


def test_staging_survives_another_processs_cleanup(tmp_path: Path, monkeypatch) -> None:
    """The race the two-process test once hit: another process's cleanup removes the
    empty ``.tmp`` between its creation and ``mkdtemp``; staging makes it again."""
    import shutil
    import tempfile

    from agentgym.alfworld.gen import store

    real_mkdtemp, calls = tempfile.mkdtemp, []

    def mkdtemp_after_cleanup(**kwargs):
        calls.append(kwargs["dir"])
        if len(calls) == 1:
            shutil.rmtree(kwargs["dir"])  # the other process's cleanup_staging
        return real_mkdtemp(**kwargs)

    monkeypatch.setattr(store.tempfile, "mkdtemp", mkdtemp_after_cleanup)
    staged = store._staging_dir(tmp_path)
    assert staged.is_dir() and staged.parent == tmp_path / ".tmp" and len(calls) == 2


# ---------------------------------------------------------------- CLI


def test_cli_writes_the_same_games(tmp_path: Path, train_games: tuple[Path, list[Path]]) -> None:
    _, paths = train_games
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONHASHSEED": "123"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentgym.alfworld.generate",
            "--out",
            str(tmp_path),
            "--num",
            "3",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "3 games in" in result.stdout
    for trial in paths[:3]:
        twin = tmp_path / "json_2.1.1" / "train" / trial.parent.name / trial.name
        # A fresh process (other hash seed) writes byte-identical files.
        assert (twin / "game.tw-pddl").read_bytes() == (trial / "game.tw-pddl").read_bytes()
        assert (twin / "traj_data.json").read_bytes() == (trial / "traj_data.json").read_bytes()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--num", "0"], "--num must be >= 1"),
        (["--num", "2", "--seed", "-3"], "--seed must be >= 0"),
        (["--num", "2", "--split", "test"], "invalid choice"),
        (["--num", "2", "--task-types", "fly"], "invalid choice"),
        (
            [
                "--num",
                "2",
                "--task-types",
                "pick_cool_then_place_in_recep",
                "--scene-types",
                "Bathroom",
            ],
            "no train scene supports pick_cool_then_place_in_recep",
        ),
    ],
)
def test_cli_rejects_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# ---------------------------------------------------------------- the full sweep


@pytest.mark.slow
def test_ten_games_per_task_type_win(tmp_path: Path) -> None:
    for split in ("train", "valid"):
        paths = generate_games(tmp_path, num_games=60, seed=1, split=split, progress=False)
        assert Counter(task_type_of(p) for p in paths) == {t: 10 for t in TASK_TYPES}
        for trial in paths:
            _, _, won = play_official(trial / "game.tw-pddl")
            assert won, trial
