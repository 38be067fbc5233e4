"""Sokoban: generated rooms are solvable (a BFS solver proves it), dynamics, rewards, text."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers the ids)
from agentgym.seeded_tasks import SeededTaskIds
from agentgym.sokoban import SokobanEnv, SokobanRoom, generate_room, parse_action, render_room
from agentgym.sokoban.rooms import reverse_play

STEPS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def solve(room: SokobanRoom) -> list[str] | None:
    """A shortest action sequence that puts every box on a target (breadth-first search).

    The rules are written here afresh: a move steps onto a free cell, or pushes the box
    ahead when the cell beyond it is neither wall nor box.
    """
    targets = frozenset(room.targets)
    start = (room.player, frozenset(room.boxes))
    parent: dict = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        player, boxes = state
        if boxes == targets:
            path = []
            while parent[state] is not None:
                state, word = parent[state]
                path.append(word)
            return path[::-1]
        for word, (dr, dc) in STEPS.items():
            ahead = (player[0] + dr, player[1] + dc)
            if room.fixed[ahead[0]][ahead[1]] == "#":
                continue
            moved = boxes
            if ahead in boxes:
                beyond = (ahead[0] + dr, ahead[1] + dc)
                if room.fixed[beyond[0]][beyond[1]] == "#" or beyond in boxes:
                    continue
                moved = (boxes - {ahead}) | {beyond}
            successor = (ahead, moved)
            if successor not in parent:
                parent[successor] = (state, word)
                queue.append(successor)
    return None


# ---------------------------------------------------------------------- generation
@pytest.mark.parametrize(
    ("height", "width", "num_boxes", "num_seeds"),
    [(6, 6, 1, 300), (5, 5, 1, 100), (7, 7, 2, 60), (8, 8, 2, 30), (8, 8, 3, 10), (6, 9, 1, 50)],
)
def test_every_generated_room_is_solvable_and_the_env_plays_the_solution(
        height, width, num_boxes, num_seeds):
    env = SokobanEnv(dim_room=(height, width), num_boxes=num_boxes, max_steps=None)
    lengths = []
    for seed in range(num_seeds):
        room = generate_room(np.random.default_rng(seed), height, width, num_boxes)
        assert (room.height, room.width) == (height, width) and len(room.boxes) == num_boxes
        assert not set(room.boxes) & set(room.targets)  # no box starts on a target
        solution = solve(room)
        assert solution is not None, f"seed {seed}: unsolvable\n" + "\n".join(room.rows())
        # reverse play goes at most search_depth - 2 = 28 moves deep, the shuffle 3 more
        assert 1 <= len(solution) <= 28 + 3
        lengths.append(len(solution))
        env.reset(options={"room": room})
        rewards = [env.step(word)[1] for word in solution[:-1]]
        _, reward, terminated, truncated, info = env.step(solution[-1])
        assert terminated and not truncated and info["success"]
        assert reward == pytest.approx(-0.1 + 1.0 + 10.0)
        assert all(r < 1.0 for r in rewards)  # only the last step solves
    assert max(lengths) > min(lengths)  # the rooms are not all alike


def test_reverse_play_keeps_the_highest_score():
    # A box pulled one way needs the cell beyond the player free, so in this 5 x 5 hall the
    # box on the centre target can reach rows and columns 2..4 only: at best 2 cells from
    # its target. With one box, box_swaps is 1 once it moved, so the best score is 2.
    fixed = ("#######",) + ("#_____#",) * 2 + ("#__O__#",) + ("#_____#",) * 2 + ("#######",)
    played = reverse_play(fixed, (1, 1), search_depth=30)
    assert played.targets == ((3, 3),)
    assert played.score == played.displacement == 2
    assert played.boxes[0] in {(2, 2), (2, 4), (4, 2), (4, 4)}
    assert played.player != (3, 3)
    shallow = reverse_play(fixed, (1, 1), search_depth=3)  # one move: no box reached
    assert shallow.score == 0 and shallow.boxes == ((3, 3),)


def test_same_seed_same_room_and_seeds_differ():
    rooms = [generate_room(np.random.default_rng(seed)) for seed in range(40)]
    again = [generate_room(np.random.default_rng(seed)) for seed in range(40)]
    assert rooms == again
    assert len({room.rows() for room in rooms}) > 30
    env = SokobanEnv()
    first = env.reset(seed=5)
    assert env.reset(seed=5) == first
    assert env.reset(options={"task_id": first[1]["task_id"]})[0] == first[0]
    assert env.room_for("sokoban-6x6-1box-17") == generate_room(np.random.default_rng(17))


def test_task_ids_are_seeds():
    env = SokobanEnv(dim_room=(7, 8), num_boxes=2, num_tasks=10, first_seed=100)
    assert len(env.task_ids) == 10
    assert env.task_ids[0] == "sokoban-7x8-2box-100" and env.task_ids[-1] == "sokoban-7x8-2box-109"
    assert env.task_ids[1:3] == ["sokoban-7x8-2box-101", "sokoban-7x8-2box-102"]
    assert "sokoban-7x8-2box-105" in env.task_ids and "sokoban-7x8-2box-110" not in env.task_ids
    assert env.task_ids.index("sokoban-7x8-2box-104") == 4
    for bad in ("sokoban-6x6-1box-100", "sokoban-7x8-2box-0100", "nonsense", "sokoban-7x8-2box-99"):
        with pytest.raises(ValueError, match="unknown task id"):
            env.reset(options={"task_id": bad})
    with pytest.raises(ValueError, match="num_tasks"):
        SeededTaskIds("x", 0, 0)


def test_bad_parameters_fail_with_one_line():
    with pytest.raises(ValueError, match="dim_room"):
        SokobanEnv(dim_room=(3, 6))
    with pytest.raises(ValueError, match="num_boxes"):
        SokobanEnv(num_boxes=0)
    with pytest.raises(RuntimeError, match="no 4 x 4 room with 5 boxes"):
        generate_room(np.random.default_rng(0), 4, 4, 5, max_attempts=20)
    with pytest.raises(ValueError, match="as many boxes as targets"):
        SokobanRoom.from_rows(["####", "#PX#", "####"])
    with pytest.raises(ValueError, match="outer ring"):
        SokobanRoom.from_rows(["#_##", "#PX#", "#O##"])


# ---------------------------------------------------------------------- dynamics
ROOM = SokobanRoom.from_rows([
    "#######",
    "#__O__#",
    "#_X_X_#",
    "#_P__O#",
    "#######",
])


def _env(room: SokobanRoom = ROOM, **kwargs) -> SokobanEnv:
    env = SokobanEnv(**kwargs)
    env.reset(options={"room": room})
    return env


def test_push_blocked_push_and_wall():
    env = _env()
    # up: pushes the box at (2, 2) to (1, 2)
    _, reward, _, _, info = env.step("up")
    assert env.room.rows()[1:4] == ("#_XO__#", "#_P_X_#", "#____O#")
    assert reward == pytest.approx(-0.1) and info["player_moved"] and info["valid_action"]
    # up again: the box would go into the wall, and the player stays
    _, reward, _, _, info = env.step("up")
    assert env.room.player == (2, 2) and (1, 2) in env.room.boxes
    assert reward == pytest.approx(-0.1) and not info["player_moved"] and info["valid_action"]
    # down, down: the second walks into the wall
    env.step("down")
    _, _, _, _, info = env.step("down")
    assert env.room.player == (3, 2) and not info["player_moved"]


def test_a_box_cannot_push_a_box():
    room = SokobanRoom.from_rows(["#######",
                                  "#PXX_O#",
                                  "#____O#",
                                  "#######"])
    env = _env(room)
    _, reward, _, _, info = env.step("right")
    assert env.room == room and not info["player_moved"] and reward == pytest.approx(-0.1)


def test_reward_terms_on_off_and_solved():
    env = _env()
    env.step("right")                              # player (3, 3)
    env.step("right")                              # (3, 4)
    _, reward, *_ = env.step("up")                 # pushes box (2, 4) -> (1, 4)
    assert reward == pytest.approx(-0.1)
    env.step("right")                              # (2, 5)
    env.step("up")                                 # (1, 5)
    _, reward, terminated, _, info = env.step("left")  # box (1, 4) -> (1, 3), a target
    assert reward == pytest.approx(-0.1 + 1.0) and not terminated
    assert info["boxes_on_target"] == 1
    _, reward, _, _, info = env.step("left")       # box (1, 3) -> (1, 2): off the target
    assert reward == pytest.approx(-0.1 - 1.0) and info["boxes_on_target"] == 0
    env.reset(options={"room": SokobanRoom.from_rows(["#####", "#PXO#", "#_XO#", "#####"])})
    _, reward, terminated, _, _ = env.step("right")
    assert reward == pytest.approx(0.9) and not terminated
    env.reset(options={"room": SokobanRoom.from_rows(["#####", "#√__#", "#PXO#", "#####"])})
    _, reward, terminated, truncated, info = env.step("right")
    assert reward == pytest.approx(-0.1 + 1.0 + 10.0) and terminated and not truncated
    assert info["success"] and info["boxes_on_target"] == 2


def test_action_words_are_read_as_verl_agent_reads_them():
    table = {
        "up": "up", "Up": "up", " UP ": "up", "push up": "up", "upward": "up",
        "update": "up",  # a substring match, as theirs
        "down": "down", "move Down please": "down", "down up": "up",  # "up" is looked for first
        "left": "left", "RIGHT": "right", "still": "still", "Stand still": "still",
        "pickup": "up", "jump": None,  # a substring match, as theirs
        "": None, "stay": None, "north": None, "1": None, "l e f t": None,
    }
    for text, word in table.items():
        assert parse_action(text) == word, text


def test_still_is_valid_and_other_text_is_not():
    env = _env()
    before = env.room
    observation, reward, _, _, info = env.step("still")
    assert info["valid_action"] and reward == pytest.approx(-0.1) and env.room == before
    for text in ("hop", "", "go north"):
        again, reward, terminated, truncated, info = env.step(text)
        assert not info["valid_action"] and reward == pytest.approx(-0.1)
        assert again == observation and not (terminated or truncated) and env.room == before
    env = _env(invalid_action_feedback=True)
    text, *_ = env.step("hop")
    first, _, grid = text.partition("\n")
    assert first.startswith("Invalid action: 'hop'") and grid == render_room(
        ROOM.fixed, ROOM.player, frozenset(ROOM.boxes))


def test_truncated_after_max_steps_counting_invalid_steps():
    env = _env(max_steps=3)
    assert env.step("left")[3] is False
    assert env.step("nonsense")[3] is False
    _, _, terminated, truncated, _ = env.step("right")
    assert truncated and not terminated


def test_rendering_is_verl_agents_text():
    room = SokobanRoom.from_rows(["#####",
                                  "#S_X#",
                                  "#_√_#",
                                  "#####"])
    env = SokobanEnv()
    observation, _ = env.reset(options={"room": room})
    # verl-agent: each cell " <symbol> \t", rows joined by "\n" (no trailing newline)
    assert observation == (
        " # \t # \t # \t # \t # \t\n"
        " # \t S \t _ \t X \t # \t\n"
        " # \t _ \t √ \t _ \t # \t\n"
        " # \t # \t # \t # \t # \t"
    )
    assert SokobanRoom.from_rows(room.rows()) == room
    env.step("right")
    assert env.room.rows()[1] == "#OPX#"


def test_anchors():
    env = _env(anchor="state")
    _, info = env.reset(options={"room": ROOM})
    assert info["anchor"] == ((3, 2), ((2, 2), (2, 4)))
    info = env.step("up")[4]
    assert info["anchor"] == ((2, 2), ((1, 2), (2, 4)))
    assert env.step("hop")[4]["anchor"] == info["anchor"]
    env = _env(anchor="observation")
    observation, info = env.reset(options={"room": ROOM})
    assert info["anchor"] == observation
    assert env.step("hop")[4]["anchor"] == observation  # invalid: the same grid, same group


@pytest.mark.parametrize("anchor", ["observation", "state"])
def test_check_env_in_both_anchor_modes(anchor):
    env = gym.make("AgentGym/Sokoban-v0", anchor=anchor, dim_room=(7, 7), num_boxes=2)
    check_env(env.unwrapped)
    env.close()


def test_a_group_of_a_vector_env_plays_one_room():
    from agentgym.vector import make_vector_env

    with make_vector_env("AgentGym/Sokoban-v0", 4, group_size=2) as venv:
        observations, infos = venv.reset(seed=0)
        assert observations[0] == observations[1] and observations[2] == observations[3]
        assert infos["task_id"][0] == infos["task_id"][1] != infos["task_id"][2]
        _, rewards, _, _, infos = venv.step(["up", "up", "hop", "left"])
        assert list(infos["valid_action"]) == [True, True, False, True]
        assert rewards[0] == rewards[1] == pytest.approx(-0.1)


# ---------------------------------------------------------------------- expert
@pytest.mark.parametrize(("dim_room", "num_boxes", "num_seeds"), [((6, 6), 1, 100),
                                                                  ((7, 7), 2, 20)])
def test_the_expert_solves_every_room_in_the_fewest_steps(dim_room, num_boxes, num_seeds):
    """The env's expert (its own breadth-first search) against the test's solver above."""
    env = SokobanEnv(dim_room=dim_room, num_boxes=num_boxes, max_steps=None)
    for seed in range(num_seeds):
        env.reset(options={"task_id": f"sokoban-{dim_room[0]}x{dim_room[1]}-"
                                      f"{num_boxes}box-{seed}"})
        shortest = solve(env.room)
        steps = 0
        while (action := env.expert_action()) is not None:
            *_, terminated, _, info = env.step(action)
            assert info["player_moved"]
            steps += 1
        assert terminated and env.success and steps == len(shortest), seed


def test_the_expert_is_none_when_solved_or_stuck():
    # a box in a corner that is no target: no solution
    stuck = SokobanRoom.from_rows(["######",
                                   "#X___#",
                                   "#__P_#",
                                   "#___O#",
                                   "######"])
    env = SokobanEnv(max_steps=None)
    env.reset(options={"room": stuck})
    assert env.expert_action() is None
    # one push away: the expert pushes, then has nothing left to do
    near = SokobanRoom.from_rows(["#####",
                                  "#PXO#",
                                  "#####"])
    env.reset(options={"room": near})
    assert env.expert_action() == "right"
    env.step("right")
    assert env.success and env.expert_action() is None
    # ties go to the earlier direction: box up-left onto O takes 5 moves either way,
    # left, up (push up), right, up, left (push left) or up, left (push left), down,
    # left, up (push up); up comes before left
    tie = SokobanRoom.from_rows(["######",
                                 "#O___#",
                                 "#_X__#",
                                 "#__P_#",
                                 "######"])
    env.reset(options={"room": tie})
    assert len(solve(tie)) == 5 and env.expert_action() == "up"
    env.step("left")  # the other way round: from here the box goes up first
    assert env.expert_action() == "up"  # push the box up (4 moves left)
