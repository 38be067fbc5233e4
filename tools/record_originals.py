"""Run the original code from checkouts and record its outputs as test data.

The differential tests compare this project with the code it reproduces. With a checkout
named (``AGENTGYM_VERL_AGENT_PATH``, ``AGENTGYM_RAGEN_PATH``, ``VERL_AGENT_PATH``) they
run the original beside ours; without one (CI) they read what this script recorded under
``tests/data/originals/``: the inputs (rooms, maps, seeds, action texts, batches), the
original's outputs on them, the original's commit and this command. Nothing of the
originals' code enters the repository: only their outputs, and digests of inputs this
project regenerates.

Usage (from the repository root; the checkouts outside it, see ``docs/testing.md``)::

    python tools/record_originals.py --verl-agent /tmp/verl-agent --verl-agent-commit SHA \\
        --ragen /tmp/RAGEN --ragen-commit SHA --graphgpo-core FILE --graphgpo-commit SHA \\
        --deps /tmp/verlagent-deps                      # every fixture
    python tools/record_originals.py ... --only sokoban gym_cards   # some
    python tools/record_originals.py ... --check        # record again, compare, write nothing

``--deps`` is a ``pip install --target`` folder of the originals' extra packages (old
``gym`` and ``gym_sokoban`` for verl-agent's Sokoban; ``omegaconf``, ``tensordict`` and the
others of ``benchmarks/recipe_parity.py`` for its trainer code); it is put first on
``sys.path``. The fixtures (:data:`RECORDERS`):

- ``sokoban``: verl-agent's ``reverse_playing`` on random room topologies, its
  ``sokoban_projection`` on fixed and random action texts, and its env (text mode) step
  by step on random rooms played with random texts and with a solution.
- ``sokoban_visual``: the same env in ``rgb_array`` mode; each frame stored as its tile
  grid (each 16 x 16 block matched to gym-sokoban's tile files) and a digest.
- ``gym_cards``: verl-agent's EZPoints, NumberLine and Blackjack on 150 deals each, played
  with random texts read by its ``gym_projection``; each frame as digests (the whole
  frame, and the frame outside the cards); 3,000 random texts read by the projection;
  the EZPoints expert's actions in its env.
- ``frozenlake``: RAGEN's FrozenLake on Gymnasium's maps and random maps, slippery and not.
- ``prompts``: verl-agent's ``process_image``, ``TrajectoryCollector.
  preprocess_single_sample`` and its Sokoban and gym-cards env managers' prompts (token
  ids with a tokenizer of this project's, pixel digests) on random images and on this
  project's visual envs.
- ``recipe``: the terms of ``benchmarks/recipe_parity.py`` and
  ``benchmarks/frontier_parity.py`` (verl-agent's GiGPO core functions, estimators,
  losses, DAPO's parts, HGPO; GraphGPO's ``core_graph.py``) on the harness's random
  batches of many seeds, computed counted (float64) as the harness counts them.
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: import this project from its root
    sys.path.insert(0, str(REPO))

import tests  # noqa: E402, F401  (this project's, before a checkout's tests/ can shadow it)
from tools import originals  # noqa: E402
from tools.originals import digest  # noqa: E402

# --------------------------------------------------------------------------- Sokoban

SOKOBAN_CODES = {"#": 0, "_": 1, "O": 2}
"""Our fixed-grid symbols as their ``room_structure`` codes."""
SOKOBAN_ACTION_TEXTS = ("up", "Down", "push left", "RIGHT", "still", "upward", "go north", "",
                        "hop", "Move Right.", "down up")
"""The texts random play draws from (those of ``tests/agentgym/test_sokoban_verl_agent.py``)."""
SOKOBAN_REVERSE_CONFIGS = ((6, 6, 1, 30, 60), (7, 7, 2, 30, 60), (8, 8, 3, 30, 60),
                           (6, 6, 1, 100, 60), (7, 7, 1, 60, 40), (8, 8, 2, 50, 40),
                           (10, 10, 2, 30, 30))
"""``(height, width, boxes, search depth, seeds)`` of the reverse-play topologies."""
SOKOBAN_PLAY_CONFIGS = (((6, 6), 1, 60), ((7, 7), 2, 40), ((8, 8), 2, 20), ((7, 7), 1, 20))
"""``(room size, boxes, seeds)`` of the rooms played step by step."""
SOKOBAN_FRAGMENTS = ("up", "down", "left", "right", "still", "Up", "DOWN", "Left", "RIGHT",
                     "push", "move", "go", "north", "stand", "pickup", "update", "upward",
                     " ", " ", "!", ".", "\n", "<", ">", "action", "the", "righT", "lef t")


def _their_room(fixed: tuple[str, ...], player: tuple[int, int], boxes) -> tuple:
    structure = np.array([[SOKOBAN_CODES[symbol] for symbol in row] for row in fixed])
    state = structure.copy()
    for box in boxes:
        state[box] = 3 if structure[box] == 2 else 4
    state[player] = 5
    return structure, state


def _inject(their, room) -> None:
    """Put our room into their env as their ``reset`` leaves a generated one."""
    structure, state = _their_room(room.fixed, room.player, room.boxes)
    their.room_fixed, their.room_state = structure, state
    their.player_position = np.array(room.player)
    their.num_env_steps = their.reward_last = their.boxes_on_target = 0


def _project(verl_agent, text: str) -> tuple[int, int]:
    actions, valids = verl_agent.projection.sokoban_projection(
        [f"<think>plan</think><action>{text}</action>"])
    return int(actions[0]), int(valids[0])


def _sokoban_texts() -> list[str]:
    rng = np.random.default_rng(2)
    texts = list(SOKOBAN_ACTION_TEXTS) + ["UP", "Left!", "stand still", "pickup", "update",
                                          "north"]
    for _ in range(1_500):
        picked = rng.choice(SOKOBAN_FRAGMENTS, size=int(rng.integers(1, 4)))
        texts.append("".join(str(p) for p in picked))
    return list(dict.fromkeys(texts))


def _play_rooms() -> list[tuple[tuple[int, int], int, int]]:
    return [(size, boxes, seed) for size, boxes, seeds in SOKOBAN_PLAY_CONFIGS
            for seed in range(seeds)]


def record_sokoban(args: argparse.Namespace) -> dict[str, Any]:
    from agentgym.sokoban import generate_room
    from agentgym.sokoban.rooms import place_player_and_targets, room_topology
    from tests.agentgym.test_sokoban import solve

    with originals.verl_agent_sokoban(args.verl_agent) as theirs:
        utils = theirs.room_utils
        reverse = []
        for height, width, boxes, depth, seeds in SOKOBAN_REVERSE_CONFIGS:
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                floor = room_topology(rng, height, width, int(1.7 * (height + width)))
                placed = place_player_and_targets(rng, floor, boxes)
                if placed is None:
                    continue
                fixed, player = placed
                structure, state = _their_room(fixed, player, ())
                state[state == 2] = 4  # every target holds its box
                room, mapping, _ = utils.reverse_playing(state, structure, depth)
                reverse.append({
                    "fixed": list(fixed), "player": list(player), "depth": depth,
                    "player_after": [int(x) for x in np.argwhere(room == 5)[0]],
                    "targets": [[int(x) for x in k] for k in mapping],
                    "boxes": [[int(x) for x in v] for v in mapping.values()],
                    "score": int(utils.best_room_score),
                    "displacement": int(utils.box_displacement_score(mapping)),
                    "explored": len(utils.explored_states)})
        projection = [[text, *_project(theirs, text)] for text in _sokoban_texts()]
        rng = np.random.default_rng(0)
        episodes = []
        for (height, width), boxes, seed in _play_rooms():
            env = theirs.env.SokobanEnv("tiny_rgb_array", dim_room=(height, width),
                                        num_boxes=boxes, max_steps=1000, search_depth=30)
            room = generate_room(np.random.default_rng(seed), height, width, boxes)
            random_play = [str(rng.choice(SOKOBAN_ACTION_TEXTS)) for _ in range(25)]
            for kind, texts in (("random", random_play), ("solution", solve(room))):
                _inject(env, room)
                steps = []
                for text in texts:
                    action, valid = _project(theirs, text)
                    observation, reward, _, info = env.step(action)
                    won = bool(info["won"])
                    if won != bool(env.success()):
                        raise SystemExit("their won and success() disagree")
                    steps.append([text, observation, float(reward), valid,
                                  bool(info["action_is_effective"]), won])
                    if won:
                        break
                _inject(env, room)
                episodes.append({"size": [height, width], "boxes": boxes, "seed": seed,
                                 "play": kind, "fixed": list(room.fixed),
                                 "player": list(room.player),
                                 "box_cells": [list(b) for b in room.boxes],
                                 "reset": env.render("tiny_rgb_array"), "steps": steps})
    return {
        "what": "verl-agent's Sokoban (agent_system/environments/env_package/sokoban): "
                "reverse_playing (room_utils) on random topologies of our room_topology "
                "(input: the fixed rows with every box on its target, the player, the "
                "depth; output: the player's cell, targets and boxes in their mapping's "
                "order, best_room_score, box_displacement_score, explored states); "
                "sokoban_projection on '<think>plan</think><action>TEXT</action>' "
                "(output: action index, validity); their env in tiny_rgb_array mode, our "
                "room injected as their reset leaves a room, stepped with each text's "
                "projected action (each step: text, observation, reward, validity, "
                "action_is_effective, won).",
        "cases": {"reverse_play": reverse, "projection": projection, "episodes": episodes},
        "versions": originals.versions("numpy", "gym", "gym-sokoban"),
    }


def _tile_codes(image: np.ndarray, tiles: np.ndarray) -> str:
    """The index of the tile in every 16 x 16 block, row-major, one digit each."""
    from agentgym.sokoban.tiles import TILE

    height, width = image.shape[0] // TILE, image.shape[1] // TILE
    blocks = image.reshape(height, TILE, width, TILE, 3).transpose(0, 2, 1, 3, 4)
    codes = np.full((height, width), -1)
    for code, tile in enumerate(tiles):
        codes[(blocks == tile).all(axis=(2, 3, 4))] = code
    if (codes < 0).any():
        raise SystemExit("a block of their frame matches none of gym-sokoban's tiles")
    return "".join(str(int(c)) for c in codes.reshape(-1))


VISUAL_ROOMS = [((6, 6), 1, seed) for seed in range(200)] + [((7, 7), 2, seed)
                                                             for seed in range(40)]
"""The rooms of ``tests/agentgym/test_sokoban_visual_verl_agent.py``."""


def record_sokoban_visual(args: argparse.Namespace) -> dict[str, Any]:
    from agentgym.sokoban import generate_room
    from agentgym.sokoban.tiles import load_tiles
    from tests.agentgym.test_sokoban import solve

    with originals.verl_agent_sokoban(args.verl_agent) as theirs:
        tiles = load_tiles(originals.sokoban_surface_dir())
        rng = np.random.default_rng(0)
        episodes = []
        for (height, width), boxes, seed in VISUAL_ROOMS:
            env = theirs.env.SokobanEnv("rgb_array", dim_room=(height, width), num_boxes=boxes,
                                        max_steps=1000, search_depth=30)
            room = generate_room(np.random.default_rng(seed), height, width, boxes)
            random_play = [str(rng.choice(SOKOBAN_ACTION_TEXTS)) for _ in range(20)]
            for kind, texts in (("random", random_play), ("solution", solve(room))):
                _inject(env, room)
                frame = env.render("rgb_array")
                frames = [[list(frame.shape), _tile_codes(frame, tiles),
                           originals.frame_digest(frame)]]
                steps = []
                for text in texts:
                    action, valid = _project(theirs, text)
                    frame, reward, _, info = env.step(action)
                    steps.append([text, float(reward), valid, bool(info["won"])])
                    frames.append([list(frame.shape), _tile_codes(frame, tiles),
                                   originals.frame_digest(frame)])
                    if info["won"]:
                        break
                episodes.append({"size": [height, width], "boxes": boxes, "seed": seed,
                                 "play": kind, "fixed": list(room.fixed),
                                 "player": list(room.player),
                                 "box_cells": [list(b) for b in room.boxes],
                                 "steps": steps, "frames": frames})
    return {
        "what": "verl-agent's Sokoban env in rgb_array mode (gym-sokoban's room_to_rgb), our "
                "room injected, stepped with each text's sokoban_projection action (each "
                "step: text, reward, validity, won); each frame (at reset and after every "
                "step): its shape, the gym-sokoban tile in every 16 x 16 block (0 wall, 1 "
                "floor, 2 target, 3 box on target, 4 box, 5 player, 6 player on target: "
                "the order of agentgym.sokoban.tiles.TILE_KINDS) and the first 16 hex "
                "digits of the SHA-256 of its bytes.",
        "cases": {"episodes": episodes},
        "versions": originals.versions("numpy", "gym", "gym-sokoban", "imageio"),
    }


# --------------------------------------------------------------------------- gym_cards

GYM_CARDS_SEEDS = [*range(120), *(65_536 + 7_919 * k for k in range(30))]
"""150 deals per game: training seeds and evaluation seeds from 65,536 (the live test plays
300; half keeps the fixture test at seconds, as our env draws every frame)."""
GYM_CARDS_NAMES = {"ezpoints": "gym_cards/EZPoints-v0", "numberline": "gym_cards/NumberLine-v0",
                   "blackjack": "gym_cards/Blackjack-v0"}
GYM_CARDS_MAX_STEPS = 12


def record_gym_cards(args: argparse.Namespace) -> dict[str, Any]:
    from agentgym.gym_cards.env import EZPointsEnv
    from tests.agentgym.test_gym_cards_verl_agent import TEXTS, outside_cards

    with originals.verl_agent_gym_cards(args.verl_agent) as theirs:
        games: dict[str, Any] = {}
        for game, name in GYM_CARDS_NAMES.items():
            env = theirs.envs[game]()
            rng = np.random.default_rng(0)
            deals = []
            for seed in GYM_CARDS_SEEDS:
                image, info = env.reset(seed=seed)
                frames = [[originals.frame_digest(image),
                           originals.frame_digest(outside_cards(image, game))]]
                infos = [originals.plain(info)]
                steps = []
                for _ in range(GYM_CARDS_MAX_STEPS):
                    text = str(rng.choice(TEXTS[game]))
                    indices, valids = theirs.projection([text], name)
                    image, reward, terminated, _, info = env.step(indices[0])
                    steps.append([text, int(indices[0]), int(valids[0]), float(reward),
                                  bool(terminated)])
                    frames.append([originals.frame_digest(image),
                                   originals.frame_digest(outside_cards(image, game))])
                    infos.append(originals.plain(info))
                    if terminated:
                        break
                deals.append({"seed": seed, "steps": steps, "infos": infos, "frames": frames})
            games[game] = deals
        rng = np.random.default_rng(1)
        alphabet = list('0123456789+-*= "actionhitsandz:{}') + ['"action":', "10", "hit",
                                                                 "stand"]
        texts = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 12))))
                 for _ in range(3_000)]
        projection = {}
        for game, name in GYM_CARDS_NAMES.items():
            indices, valids = theirs.projection(list(texts), name)
            projection[game] = [[int(i), int(v)] for i, v in zip(indices, valids, strict=True)]
        expert = []
        ours = EZPointsEnv(num_tasks=2**32 - 1)
        env = theirs.envs["ezpoints"]()
        for seed in GYM_CARDS_SEEDS:
            ours.reset(options={"task_id": f"ezpoints-{seed}"})
            env.reset(seed=seed)
            actions = []
            while (action := ours.expert_action()) is not None:
                index, valid = theirs.projection([action], GYM_CARDS_NAMES["ezpoints"])
                _, reward, terminated, _, _ = env.step(index[0])
                ours.step(action)
                actions.append([action, int(index[0]), int(valid[0]), float(reward),
                                bool(terminated)])
            expert.append({"seed": seed, "actions": actions})
    return {
        "what": "verl-agent's gym-cards envs (gym-cards/gym_cards/envs) and gym_projection: "
                "per game, 150 deals (their reset(seed)), each played with up to 12 random "
                "texts (each step: text, projected index, validity, reward, terminated); "
                "their info at reset and after every step; each frame as the first 16 hex "
                "digits of the SHA-256 of its bytes, whole and with every card's box "
                "blanked (tests/agentgym/test_gym_cards_verl_agent.py CARD_BOXES). Then "
                "3,000 random texts read by gym_projection in each game (index, validity), "
                "and our EZPoints expert's actions stepped in their env (action, index, "
                "validity, reward, terminated).",
        "cases": {"games": games, "texts": texts, "projection": projection, "expert": expert},
        "versions": originals.versions("numpy", "Pillow"),
    }


# --------------------------------------------------------------------------- FrozenLake

FROZENLAKE_CONFIGS = (("4x4", True, 0.8), ("8x8", True, 1 / 3), ("random", True, 0.8),
                      ("random", False, 1.0), ("random", True, 0.5), ("4x4", False, 1.0),
                      ("8x8", True, 0.8))
"""``(maps, slippery, success rate)``; the first four are the live test's."""
FROZENLAKE_SEEDS = 100
FROZENLAKE_WORDS = ("Left", "Down", "Right", "Up", " up ", "LEFT", "Left || Up", "go left", "")


def record_frozenlake(args: argparse.Namespace) -> dict[str, Any]:
    from gymnasium.envs.toy_text.frozen_lake import MAPS, generate_random_map
    from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymnasiumFrozenLake

    with originals.ragen_frozenlake(args.ragen) as ragen:
        words = {v.lower(): k for k, v in ragen.config.FrozenLakeEnvConfig().action_lookup.items()}
        cases = []
        for maps, slippery, success_rate in FROZENLAKE_CONFIGS:
            rng = np.random.default_rng(0)
            for seed in range(FROZENLAKE_SEEDS):
                desc = (generate_random_map(size=5, p=0.8, seed=seed) if maps == "random"
                        else MAPS[maps])
                config = ragen.config.FrozenLakeEnvConfig(is_slippery=slippery,
                                                          success_rate=success_rate)
                env = ragen.env.FrozenLakeEnv(config)
                GymnasiumFrozenLake.__init__(env, desc=list(desc), is_slippery=slippery,
                                             render_mode=config.render_mode,
                                             success_rate=success_rate)
                GymnasiumFrozenLake.reset(env, seed=seed)
                reset = env.render()
                steps = []
                for _ in range(30):
                    text = str(rng.choice(FROZENLAKE_WORDS))
                    action = words.get(text.strip().lower())
                    if action is None:  # RAGEN does not step its env on an invalid action
                        steps.append([text, None])
                        continue
                    observation, reward, done, info = env.step(action)
                    steps.append([text, observation, float(reward), bool(done),
                                  bool(info["success"]), bool(info["action_is_effective"])])
                    if done:
                        break
                cases.append({"maps": maps, "slippery": slippery, "success_rate": success_rate,
                              "seed": seed, "desc": list(desc), "reset": reset, "steps": steps})
    return {
        "what": "RAGEN's FrozenLakeEnv (ragen/env/frozen_lake) given our map through "
                "Gymnasium's FrozenLakeEnv.__init__ and seeded with Gymnasium's reset(seed), "
                "then stepped with each text's action from its action_lookup read as its "
                "env-state manager reads it (lower-cased, whole word; an unknown word is not "
                "stepped: null); each step: text, observation, reward, done, success, "
                "action_is_effective.",
        "cases": {"episodes": cases},
        "versions": originals.versions("numpy", "gymnasium"),
    }


# --------------------------------------------------------------------------- prompts

PROCESS_IMAGE_SHAPES = ((24, 24), (96, 96), (6, 300), (255, 257), (256, 256), (3000, 1500),
                        (2048, 2049), (1, 1), (480, 640))
"""The live test's shapes; random ones are added (:func:`_image_shapes`)."""


def _image_shapes() -> list[tuple[int, int]]:
    rng = np.random.default_rng(6)
    extra = [(int(h), int(w)) for h, w in rng.integers(1, 700, size=(24, 2))]
    return [*PROCESS_IMAGE_SHAPES, *extra, (1200, 90), (40, 40)]


def _pixels(inputs: Any) -> dict[str, Any]:
    values = inputs["pixel_values"].numpy()
    return {"pixel_shape": list(values.shape), "pixel_digest": digest(values),
            "grid_thw": inputs["image_grid_thw"].numpy().tolist()}


PROMPT_SHAPES = ((96, 96), (300, 200), (48, 60), (17, 250), (256, 256))


def record_prompts(args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym
    import torch  # noqa: F401  (their rollout imports it)
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    import agentgym  # noqa: F401  (registers the ids)
    from studies.tiny_vlm import tiny_image_processor, vlm_tokenizer
    from tests.algorithms.test_vlm import VERL_AGENT_PROMPTS, their_manager

    with originals.verl_agent_rollout(args.verl_agent, args.deps) as theirs:
        resized = []
        for index, (height, width) in enumerate(_image_shapes()):
            image = originals.random_image(index, height, width)
            out = np.asarray(theirs.utils.process_image(image))
            resized.append({"seed": index, "shape": [height, width], "input": digest(image),
                            "output_shape": list(out.shape), "output": digest(out)})
        blank = np.zeros((40, 40, 3), dtype=np.uint8)  # their float branch (max < 1)
        out = np.asarray(theirs.utils.process_image(blank))
        resized.append({"seed": None, "shape": [40, 40], "input": digest(blank),
                        "output_shape": list(out.shape), "output": digest(out)})
        templates = {name: getattr(theirs.prompts[module], name)
                     for _, module, name, _ in VERL_AGENT_PROMPTS.values()}
        sokoban = templates["SOKOBAN_VISUAL_TEMPLATE"]
        cards = templates["GYM_CARDS_EZPOINTS_TEMPLATE"].format(text_formula="3+")
        messages = {"sokoban": sokoban, "ezpoints '3+'": cards}
        batch = types.SimpleNamespace(non_tensor_batch={"raw_prompt": [None],
                                                        "data_source": ["x"]})
        config = theirs.omegaconf.create({"data": {"max_prompt_length": 4096,
                                                   "truncation": "error"}})
        samples = []
        tokenizer = vlm_tokenizer([sokoban, cards])
        tokenizers = {"samples": originals.tokenizer_digest(tokenizer)}
        processors = {"tiny (6 tokens)": tiny_image_processor(max_tokens=6),
                      "Qwen2.5-VL": Qwen2VLImageProcessorPil()}
        seed = 1_000
        for label, image_processor in processors.items():
            processor = types.SimpleNamespace(image_processor=image_processor,
                                              image_token="<|image_pad|>", tokenizer=tokenizer)
            collector = theirs.rollout.TrajectoryCollector(config, tokenizer, processor)
            for message_name, text in messages.items():
                for height, width in PROMPT_SHAPES:
                    seed += 1
                    image = originals.random_image(seed, height, width)
                    out = collector.preprocess_single_sample(
                        0, batch, {"text": [text], "image": [image], "anchor": [image]})
                    ids = out["input_ids"][out["attention_mask"].bool()].tolist()
                    samples.append({"processor": label, "message": message_name, "seed": seed,
                                    "shape": [height, width], "input_ids": ids,
                                    **_pixels(out["multi_modal_inputs"])})
        managers = []
        image_processor = Qwen2VLImageProcessorPil()
        for env_id, (env_name, _, name, _) in sorted(VERL_AGENT_PROMPTS.items()):
            text = templates[name]
            tokenizer = vlm_tokenizer([text])
            tokenizers[env_id] = originals.tokenizer_digest(tokenizer)
            processor = types.SimpleNamespace(image_processor=image_processor,
                                              image_token="<|image_pad|>", tokenizer=tokenizer)
            collector = theirs.rollout.TrajectoryCollector(config, tokenizer, processor)
            env = gym.make(env_id)
            rng = np.random.default_rng(0)
            episodes = []
            for episode in range(4):
                manager = their_manager(theirs.managers, theirs.omegaconf, env_name)
                observation, info = env.reset(seed=100 + episode)
                steps = []
                for step in range(6):
                    if env_name == "Sokoban" and step > 0:  # what its step() stores first
                        manager.memory.store({"text_obs": ["(text frame)"], "action": ["Up"]})
                    message = (manager.build_text_obs([info], init=step == 0)[0]
                               if env_name == "Sokoban" else manager.build_text_obs([info])[0])
                    out = collector.preprocess_single_sample(
                        0, batch, {"text": [message], "image": [observation["image"]],
                                   "anchor": [observation["image"]]})
                    ids = out["input_ids"][out["attention_mask"].bool()].tolist()
                    actions = info["admissible_actions"]
                    action = str(rng.choice(actions)) if rng.random() < 0.8 else "garbage"
                    steps.append({"frame": digest(observation["image"]),
                                  "formula": originals.plain(info.get("Formula")),
                                  "message": message, "input_ids": ids,
                                  **_pixels(out["multi_modal_inputs"]), "action": action})
                    observation, _, terminated, truncated, info = env.step(action)
                    if terminated or truncated:
                        break
                episodes.append({"seed": 100 + episode, "steps": steps})
            env.close()
            managers.append({"env_id": env_id, "template": name, "episodes": episodes})
    return {
        "what": "verl-agent's rollout (agent_system/multi_turn_rollout): process_image (utils) "
                "on random images (input: the seed, shape and digest of the image; output: "
                "shape and digest); TrajectoryCollector.preprocess_single_sample on its "
                "visual Sokoban and EZPoints messages with a random image, with this "
                "project's tokenizer (studies.tiny_vlm.vlm_tokenizer over the "
                "messages' words; its digest recorded: tokenizers) and two "
                "image processors (output: the token ids, the pixel values' shape and "
                "digest, image_grid_thw); its Sokoban and gym-cards env managers' "
                "build_text_obs on our visual envs' info at every step of 4 episodes each "
                "(input: the frame's digest, EZPoints' formula, the action then taken; "
                "output: the message, the token ids and pixels of preprocess_single_sample "
                "with Qwen2.5-VL's image processor). The prompt templates are their "
                "prompts modules' values.",
        "cases": {"templates": templates, "tokenizers": tokenizers,
                  "process_image": resized, "samples": samples, "managers": managers},
        "versions": originals.versions("numpy", "Pillow", "torch", "transformers"),
    }


# --------------------------------------------------------------------------- recipe


def record_recipe(args: argparse.Namespace) -> dict[str, Any]:
    from tools.record_recipe import record

    saved_path, saved_modules = list(sys.path), set(sys.modules)
    try:
        return record(args)
    finally:  # the harness put the checkout first on sys.path (it has a tests/ of its own)
        sys.path[:] = saved_path  # and imported its packages, which other loaders stand in for
        for name in set(sys.modules) - saved_modules:
            if name.split(".")[0] in ("agent_system", "verl", "gigpo", "recipe"):
                del sys.modules[name]


# --------------------------------------------------------------------------- command

RECORDERS: dict[str, tuple[str, Callable[[argparse.Namespace], dict[str, Any]]]] = {
    "sokoban": ("verl-agent", record_sokoban),
    "sokoban_visual": ("verl-agent", record_sokoban_visual),
    "gym_cards": ("verl-agent", record_gym_cards),
    "frozenlake": ("RAGEN", record_frozenlake),
    "prompts": ("verl-agent", record_prompts),
    "recipe": ("verl-agent", record_recipe),
}
"""Fixture name -> (the original, its recorder)."""
CHECKOUT_FLAG = {"verl-agent": "verl_agent", "RAGEN": "ragen"}


def fixture_of(name: str, args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Run the recorder ``name`` and wrap its output with the header."""
    original, recorder = RECORDERS[name]
    root = getattr(args, CHECKOUT_FLAG[original])
    if root is None:
        raise SystemExit(f"{name}: name a {original} checkout (--{original.lower()})")
    commit = originals.checkout_commit(root, getattr(args, f"{CHECKOUT_FLAG[original]}_commit"))
    recorded = recorder(args)
    commits = {original: f"{originals.ORIGINALS[original]}@{commit}"}
    if "graphgpo_commit" in recorded:
        commits["GraphGPO"] = f"{originals.ORIGINALS['GraphGPO']}@{recorded.pop('graphgpo_commit')}"
    return {"original": originals.ORIGINALS[original], "commit": commits,
            "command": command, "recorded_with": recorded.pop("versions"),
            "what": recorded["what"], "cases": recorded["cases"]}


def _same(a: Any, b: Any) -> bool:
    import json

    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/record_originals.py",
        description="Run the originals (verl-agent, RAGEN, GraphGPO's core_graph) from "
                    "checkouts and record their outputs under tests/data/originals/.")
    parser.add_argument("--verl-agent", metavar="PATH", help="a verl-agent checkout")
    parser.add_argument("--verl-agent-commit", metavar="SHA",
                        help="its commit (default: git rev-parse in PATH)")
    parser.add_argument("--ragen", metavar="PATH", help="a RAGEN checkout")
    parser.add_argument("--ragen-commit", metavar="SHA")
    parser.add_argument("--graphgpo-core", metavar="FILE",
                        help="GraphGPO's recipe/GraphGPO/core_graph.py (for recipe)")
    parser.add_argument("--graphgpo-commit", metavar="SHA",
                        help="the commit of the repository FILE was read from")
    parser.add_argument("--deps", metavar="DIR",
                        help="folder of the originals' extra packages (pip --target)")
    parser.add_argument("--only", nargs="+", choices=sorted(RECORDERS), metavar="NAME",
                        help=f"record these only ({', '.join(RECORDERS)})")
    parser.add_argument("--out", metavar="DIR", type=Path, default=originals.FIXTURES)
    parser.add_argument("--check", action="store_true",
                        help="record again and compare with the fixtures; write nothing")
    args = parser.parse_args(argv)
    if args.deps and args.deps not in sys.path:
        sys.path.insert(0, args.deps)
    command = "python tools/record_originals.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    different = []
    for name in [name for name in RECORDERS if name in (args.only or RECORDERS)]:
        start = time.perf_counter()
        try:
            fixture = fixture_of(name, args, command)
        except (FileNotFoundError, originals.OriginalUnavailable) as error:
            raise SystemExit(f"{name}: {error}") from error
        seconds = time.perf_counter() - start
        if args.check:
            recorded = originals.read_fixture(name, args.out)
            same = _same(recorded["cases"], fixture["cases"])
            print(f"{name}: {'the same as' if same else 'DIFFERENT from'} "
                  f"{originals.fixture_path(name).relative_to(REPO)} ({seconds:.0f} s)")
            if not same:
                different.append(name)
            continue
        path = originals.write_fixture(name, fixture, args.out)
        print(f"{name}: {path} ({path.stat().st_size / 1e3:.0f} kB, {seconds:.0f} s)")
    return 1 if different else 0


if __name__ == "__main__":
    raise SystemExit(main())
