"""ALFWorld's hand-coded expert (``expert="handcoded"``): hand-checked decisions on a
made-up room, then on generated games through the real engine."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

pytest.importorskip("alfworld", reason="alfworld extra not installed")
pytest.importorskip("textworld", reason="alfworld extra not installed")

from agentgym.alfworld.data import TASK_TYPES  # noqa: E402
from agentgym.alfworld.env import ALFWorldEnv  # noqa: E402
from agentgym.alfworld.generate import generate_games  # noqa: E402
from agentgym.alfworld.handcoded_expert import (  # noqa: E402
    ExpertTask,
    HandcodedExpert,
    TrueState,
    closed_in,
    contents_in,
    name_class,
    parse_fact,
    receptacles_in_intro,
)

INTRO = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 2, "
         "a cabinet 1, a countertop 1, a drawer 1, a garbagecan 1, and a sinkbasin 1.\n\n"
         "Your task is to: put a clean mug in cabinet.")
ROOM = ("cabinet 2", "cabinet 1", "countertop 1", "drawer 1", "garbagecan 1", "sinkbasin 1")
CLEAN_MUG = ExpertTask("pick_clean_then_place_in_recep", "mug", "cabinet")
EMPTY = TrueState(held=None, held_facts=frozenset(), placed={})


def holding(obj: str, *facts: str) -> TrueState:
    return TrueState(held=obj, held_facts=frozenset(facts), placed={})


def at(here: str | None, *extra: str) -> list[str]:
    """Admissible commands standing at ``here``: go to every other receptacle, plus extra."""
    return [f"go to {r}" for r in ROOM if r != here] + ["inventory", "look", *extra]


# ---------------------------------------------------------------------- text and facts
def test_text_readers() -> None:
    assert receptacles_in_intro(INTRO) == ROOM
    assert contents_in("You arrive at countertop 1. On the countertop 1, you see a apple 1, "
                       "a mug 2, and a pen 10.") == {"countertop 1": ("apple 1", "mug 2", "pen 10")}
    assert contents_in("You open the drawer 1. The drawer 1 is open. In it, you see nothing.") \
        == {"drawer 1": ()}
    assert contents_in("You arrive at drawer 1. The drawer 1 is closed.") == {}
    assert closed_in("You arrive at drawer 1. The drawer 1 is closed.") == ("drawer 1",)
    assert name_class("sinkbasin 1") == "sinkbasin"
    assert parse_fact("holds(agent1: agent, mug_bar__plus_00_dot_1: object)") \
        == ("holds", ("agent1", "mug_bar__plus_00_dot_1"))
    with pytest.raises(ValueError, match="not an ALFWorld fact"):
        parse_fact("holds agent mug")


def test_true_state_reads_the_held_object_and_what_is_in_place() -> None:
    names = {"m1": "mug 1", "m2": "mug 2", "c1": "cabinet 1", "d1": "drawer 1", "a": "agent1"}
    facts = ["holds(a: agent, m1: object)", "isclean(m1: object)", "iscool(m2: object)",
             "inreceptacle(m2: object, c1: receptacle)", "opened(d1: receptacle)"]
    state = TrueState.from_facts(facts, names, CLEAN_MUG)
    assert state.held == "mug 1" and state.held_facts == {"isclean"}
    assert state.placed == {}  # mug 2 is in a cabinet but not clean: it does not count
    facts.append("isclean(m2: object)")
    assert TrueState.from_facts(facts, names, CLEAN_MUG).placed == {"cabinet 1": ("mug 2",)}
    with pytest.raises(ValueError, match="pddl_params"):
        ExpertTask.from_traj_data({"task_type": "pick_and_place_simple", "pddl_params": {}})


# ---------------------------------------------------------------------- hand-checked decisions
def test_search_opens_takes_recovers_and_puts_back_a_wrong_object() -> None:
    expert = HandcodedExpert(CLEAN_MUG, INTRO, seed=0)
    # Mugs are found in sink basins, countertops and cabinets (ALFRED's priors), not in
    # drawers or garbage cans: the likely ones first, the last listed first.
    assert expert.act(EMPTY, at(None)) == "go to sinkbasin 1"
    expert.observe("go to sinkbasin 1", "You arrive at sinkbasin 1. On the sinkbasin 1, you see "
                   "a apple 1.")
    assert expert.act(EMPTY, at("sinkbasin 1")) == "go to countertop 1"
    expert.observe("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed.")
    # a perturbed step left it at a closed, unseen receptacle: look inside
    assert expert.act(EMPTY, at("cabinet 1", "open cabinet 1")) == "open cabinet 1"
    expert.observe("open cabinet 1", "You open the cabinet 1. The cabinet 1 is open. In it, you "
                   "see nothing.")
    # nothing of use: close what it opened before moving on
    assert expert.act(EMPTY, at("cabinet 1", "close cabinet 1")) == "close cabinet 1"
    expert.observe("close cabinet 1", "You close the cabinet 1.")
    assert expert.act(EMPTY, at("cabinet 1", "open cabinet 1")) == "go to countertop 1"
    expert.observe("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you "
                   "see a mug 1, and a pen 1.")
    take = ["take mug 1 from countertop 1", "take pen 1 from countertop 1"]
    assert expert.act(EMPTY, at("countertop 1", *take)) == "take mug 1 from countertop 1"
    expert.observe("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed.")
    # it remembers where the mug is (and drawers are not worth opening for a mug now)
    assert expert.act(EMPTY, at("drawer 1", "open drawer 1")) == "go to countertop 1"
    expert.observe("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you "
                   "see a mug 1, and a pen 1.")
    expert.observe("take pen 1 from countertop 1", "You pick up the pen 1 from the countertop 1.")
    # holding the wrong object: put it down here
    assert expert.act(holding("pen 1"), at("countertop 1", "move pen 1 to countertop 1")) \
        == "move pen 1 to countertop 1"
    expert.observe("go to sinkbasin 1", "You arrive at sinkbasin 1. On the sinkbasin 1, you see "
                   "a apple 1.")
    # ... and where no receptacle here takes it, back where it came from
    assert expert.act(holding("pen 1"), at("sinkbasin 1")) == "go to countertop 1"
    assert expert.fallbacks == 0


def test_clean_then_place_and_the_fallback() -> None:
    expert = HandcodedExpert(CLEAN_MUG, INTRO, seed=0)
    expert.observe("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you "
                   "see a mug 1.")
    expert.observe("take mug 1 from countertop 1", "You pick up the mug 1 from the countertop 1.")
    assert expert.act(holding("mug 1"), at("countertop 1")) == "go to sinkbasin 1"
    expert.observe("go to sinkbasin 1", "You arrive at sinkbasin 1. On the sinkbasin 1, you see "
                   "nothing.")
    clean = "clean mug 1 with sinkbasin 1"
    assert expert.act(holding("mug 1"), at("sinkbasin 1", clean)) == clean
    expert.observe(clean, "You clean the mug 1 using the sinkbasin 1.")
    goal = expert.act(holding("mug 1", "isclean"), at("sinkbasin 1"))
    assert goal in ("go to cabinet 1", "go to cabinet 2")
    cabinet = goal.removeprefix("go to ")
    expert.observe(goal, f"You arrive at {cabinet}. The {cabinet} is closed.")
    assert expert.act(holding("mug 1", "isclean"), at(cabinet, f"open {cabinet}")) \
        == f"open {cabinet}"
    expert.observe(f"open {cabinet}", f"You open the {cabinet}. The {cabinet} is open. In it, "
                   "you see nothing.")
    put = f"move mug 1 to {cabinet}"
    assert expert.act(holding("mug 1", "isclean"), at(cabinet, put)) == put
    # its choice is not admissible (never seen in play): a random admissible one, counted
    assert expert.act(holding("mug 1", "isclean"), ["look"]) == "look"
    assert expert.fallbacks == 1
    with pytest.raises(ValueError, match="no admissible"):
        expert.act(EMPTY, [])


# ---------------------------------------------------------------------- on generated games
@pytest.fixture(scope="module")
def games_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One generated game of each task type (train split, seed 0)."""
    root = tmp_path_factory.mktemp("generated")
    generate_games(root, num_games=6, seed=0, verify=False, progress=False)
    return root


def play(env: ALFWorldEnv, task_id: str, perturb: float = 0.0, seed: int = 0,
         ) -> tuple[list[str], bool]:
    """Play the expert (a random admissible action instead with probability ``perturb``);
    checks that every expert action is admissible."""
    rng = np.random.default_rng(seed)
    _, info = env.reset(options={"task_id": task_id})
    actions: list[str] = []
    while True:
        action = env.expert_action()
        assert action in info["admissible_actions"]
        assert env.expert_action() == action  # the same until the next step
        if rng.random() < perturb:
            action = str(rng.choice(info["admissible_actions"]))
        actions.append(action)
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return actions, bool(info["success"])


def test_solves_a_game_of_each_type_with_admissible_actions(games_root: Path) -> None:
    env = ALFWorldEnv(data_path=games_root, expert="handcoded")
    assert sorted(env.game(t).task_type for t in env.task_ids) == sorted(TASK_TYPES)
    for task_id in env.task_ids:
        actions, success = play(env, task_id)
        assert success, (task_id, actions)
        assert env.handcoded_expert.fallbacks == 0
        assert env.expert_action() is None  # solved: nothing left to do
    env.close()


def test_heat_game_hand_checked_with_perturbations(games_root: Path) -> None:
    env = ALFWorldEnv(data_path=games_root, expert="handcoded")
    task_id = next(t for t in env.task_ids if "pick_heat" in t)
    # The potato lies in the closed microwave (and in the fridge, and on countertop 2).
    # Potato priors, last listed first: sinkbasin 1, microwave 1, ...
    actions, success = play(env, task_id)
    assert success and actions == [
        "go to sinkbasin 1", "go to microwave 1", "open microwave 1",
        "take potato 2 from microwave 1", "heat potato 2 with microwave 1",
        "go to garbagecan 1", "move potato 2 to garbagecan 1"]
    env.reset(options={"task_id": task_id})
    for action in ("go to sinkbasin 1", "go to microwave 1", "open microwave 1"):
        assert env.expert_action() == action
        env.step(action)
    env.step("go to cabinet 1")  # perturbed: it walked away from the potato it saw
    assert env.expert_action() == "go to microwave 1"
    env.step("go to microwave 1")
    assert env.expert_action() == "take potato 2 from microwave 1"
    env.step("take cup 2 from microwave 1")  # perturbed: the wrong object
    assert env.expert_action() == "move cup 2 to microwave 1"
    env.step("move cup 2 to microwave 1")
    assert env.expert_action() == "take potato 2 from microwave 1"
    env.close()


def test_deterministic_and_recovers_from_random_actions(games_root: Path) -> None:
    env = ALFWorldEnv(data_path=games_root, expert="handcoded")
    wins = 0
    for task_id in env.task_ids:
        first = play(env, task_id, perturb=0.3, seed=1)
        assert play(env, task_id, perturb=0.3, seed=1) == first
        wins += first[1]
    assert wins >= 5  # measured: 6 of 6
    env.close()


def test_default_is_the_walkthrough_and_bad_values_are_refused(games_root: Path) -> None:
    env = ALFWorldEnv(data_path=games_root)
    assert env.expert == "walkthrough"
    for task_id in env.task_ids:
        actions, success = play(env, task_id)
        assert success and tuple(actions) == env.walkthrough(task_id)
    env.close()
    with pytest.raises(ValueError, match="expert must be one of"):
        ALFWorldEnv(data_path=games_root, expert="oracle")


def test_the_expert_changes_nothing_else(games_root: Path) -> None:
    """Same observations, rewards, flags, infos and anchors whichever expert is chosen."""
    envs = [ALFWorldEnv(data_path=games_root, expert=e, anchor="state")
            for e in ("walkthrough", "handcoded")]
    task_id = next(t for t in envs[0].task_ids if "pick_heat" in t)
    results = [[env.reset(options={"task_id": task_id})] for env in envs]
    for action in ("look", "go to cabinet 1", "jump", "go to microwave 1", "open microwave 1",
                   *envs[0].walkthrough(task_id)[2:]):
        for env, result in zip(envs, results, strict=True):
            result.append(env.step(action))
    assert results[0] == results[1] and results[0][-1][2]  # terminated: solved
    check_env(envs[1], skip_render_check=True)
    for env in envs:
        env.close()


def test_sft_data_keeps_acting_after_perturbed_steps(games_root: Path) -> None:
    from algorithms.sft.data import expert_trajectories

    kwargs = {"data_path": str(games_root), "expert": "handcoded", "max_steps": 30}
    trajectories = expert_trajectories("AgentGym/ALFWorld-v0", kwargs, 6, perturb=0.3, seed=0)
    assert sum(len(t.extra["perturbed"]) for t in trajectories) > 0
    for trajectory in trajectories:
        assert 1 <= len(trajectory.steps) <= 30
        if trajectory.extra["perturbed"]:  # the expert went on after its last perturbed step
            assert trajectory.extra["perturbed"][-1] < len(trajectory.steps) - 1 or \
                len(trajectory.steps) == 30
    assert sum(t.extra["success"] for t in trajectories) >= 5


# ---------------------------------------------------------------------- the measured rate
@pytest.mark.slow
@pytest.mark.parametrize("split", ["train", "valid_seen"])
def test_success_rate_on_sixty_generated_games(tmp_path: Path, split: str) -> None:
    """Measured (docs/envs/alfworld.md): 59/60 on each split, mean length 10-12 steps."""
    generate_games(tmp_path, num_games=60, seed=0, split=split, verify=False, progress=False)
    env = ALFWorldEnv(data_path=tmp_path, split=split, expert="handcoded", max_steps=50)
    by_type: dict[str, list[bool]] = defaultdict(list)
    lengths = []
    for task_id in env.task_ids:
        actions, success = play(env, task_id)
        by_type[env.task_type].append(success)
        lengths.append(len(actions))
    env.close()
    assert sorted(by_type) == sorted(TASK_TYPES)
    assert np.mean([s for v in by_type.values() for s in v]) >= 0.9
    assert all(np.mean(v) >= 0.8 for v in by_type.values())
    assert np.mean(lengths) <= 15
