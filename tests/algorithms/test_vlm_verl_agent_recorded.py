"""Our image resizing and visual prompts against verl-agent's recorded rollout outputs
(``tests/data/originals/prompts.json.gz``, ``tools/record_originals.py``): no checkout
needed.

Recorded from verl-agent's rollout code as written (``test_vlm.py`` runs the same kinds of
comparison against a live checkout): ``process_image`` on 35 images of random sizes;
``TrajectoryCollector.preprocess_single_sample`` on its visual Sokoban and EZPoints
messages with random images and two image processors; its Sokoban and gym-cards env
managers' ``build_text_obs`` and the collector's preprocessing at every step of 4 episodes
of each of our visual envs (Qwen2.5-VL's image processor). Compared: the resized image
(shape and digest), the token ids, the pixel values (digest) and ``image_grid_thw``. The
tokenizer is this project's word-level one over the messages' words; its digest is
recorded and checked first (ids recorded with another tokenizer would mean nothing).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.differential import recorded
from tools import originals
from tools.originals import digest

pytestmark = pytest.mark.differential

CASES = recorded("prompts")
EZPOINTS = "GYM_CARDS_EZPOINTS_TEMPLATE"


def _vision():
    pytest.importorskip("transformers")
    pytest.importorskip("PIL")
    from algorithms.engines.vision import VisionProcessor
    from studies.tiny_vlm import tiny_image_processor, vlm_tokenizer

    return VisionProcessor, tiny_image_processor, vlm_tokenizer


def _qwen_processor():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    return Qwen2VLImageProcessorPil()


def _builder(tokenizer, vision, text: str, formatted: bool, tmp_path):
    from algorithms.agent.prompts import PromptBuilder
    from algorithms.config import PromptConfig
    from tests.algorithms.test_vlm import as_our_template

    template = tmp_path / "template.txt"
    template.write_text(as_our_template(text, formatted), encoding="utf-8")
    return PromptBuilder(tokenizer, PromptConfig(template=str(template), history_window=0,
                                                 max_prompt_tokens=4096), vision)


def _pixels(encoded) -> dict:
    return {"pixel_shape": list(encoded.pixel_values.shape),
            "pixel_digest": digest(encoded.pixel_values),
            "grid_thw": np.asarray(encoded.image_grid_thw).tolist()}


def test_resize_equals_their_recorded_process_image():
    _vision()
    from algorithms.engines.vision import resize_like_verl_agent

    for case in CASES["process_image"]:
        height, width = case["shape"]
        image = (np.zeros((height, width, 3), dtype=np.uint8) if case["seed"] is None
                 else originals.random_image(case["seed"], height, width))
        assert digest(image) == case["input"], case["shape"]
        ours = resize_like_verl_agent(image)
        assert list(ours.shape) == case["output_shape"], case["shape"]
        assert digest(ours) == case["output"], case["shape"]
    assert len(CASES["process_image"]) == 36


def test_prompt_ids_and_pixels_equal_their_recorded_preprocessing(tmp_path):
    """Their ``preprocess_single_sample`` of their visual Sokoban and EZPoints messages
    against our prompt builder given the same wording as a template (``<image>`` written
    ``{image}``), for random frames of 5 sizes and two image processors."""
    vision_processor, tiny_image_processor, vlm_tokenizer = _vision()
    templates = CASES["templates"]
    sokoban = templates["SOKOBAN_VISUAL_TEMPLATE"]
    cards = templates[EZPOINTS].format(text_formula="3+")
    tokenizer = vlm_tokenizer([sokoban, cards])
    assert originals.tokenizer_digest(tokenizer) == CASES["tokenizers"]["samples"], \
        "the tokenizer changed: record the prompts again (tools/record_originals.py)"
    processors = {"tiny (6 tokens)": tiny_image_processor(max_tokens=6),
                  "Qwen2.5-VL": _qwen_processor()}
    messages = {"sokoban": sokoban, "ezpoints '3+'": cards}
    builders = {}
    for case in CASES["samples"]:
        key = (case["processor"], case["message"])
        if key not in builders:
            vision = vision_processor(processors[case["processor"]], tokenizer)
            folder = tmp_path / str(len(builders))
            folder.mkdir()
            builders[key] = (vision, _builder(tokenizer, vision, messages[case["message"]],
                                              False, folder))
        vision, builder = builders[key]
        image = originals.random_image(case["seed"], *case["shape"])
        ours = builder.build("", [], "", (), images=[image])
        where = (key, case["shape"])
        assert list(ours.token_ids) == case["input_ids"], where
        assert _pixels(vision.encode([image])) == {k: case[k] for k in (
            "pixel_shape", "pixel_digest", "grid_thw")}, where
    assert len(CASES["samples"]) == 20


@pytest.mark.parametrize("case", CASES["managers"], ids=lambda case: case["env_id"])
def test_real_envs_prompts_equal_their_recorded_env_managers(tmp_path, case):
    """At every recorded step of our visual env (the same seeds and actions), our prompt
    builder given verl-agent's wording as a template gives the token ids and pixel values
    their env manager's message and rollout preprocessing gave for that step's info and
    frame (which are checked to be the ones they were given)."""
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers the ids)

    vision_processor, _, vlm_tokenizer = _vision()
    text = CASES["templates"][case["template"]]
    tokenizer = vlm_tokenizer([text])
    assert originals.tokenizer_digest(tokenizer) == CASES["tokenizers"][case["env_id"]], \
        "the tokenizer changed: record the prompts again (tools/record_originals.py)"
    vision = vision_processor(_qwen_processor(), tokenizer)
    builder = _builder(tokenizer, vision, text, case["template"] == EZPOINTS, tmp_path)
    env = gym.make(case["env_id"])
    checked = 0
    try:
        for episode in case["episodes"]:
            observation, info = env.reset(seed=episode["seed"])
            history: list[tuple[str, str]] = []
            for index, step in enumerate(episode["steps"]):
                where = (episode["seed"], index)
                # the inputs their manager and preprocessing were given
                assert digest(observation["image"]) == step["frame"], where
                assert originals.plain(info.get("Formula")) == step["formula"], where
                ours = builder.build(info["task"], history, observation["text"],
                                     info["admissible_actions"],
                                     images=[observation["image"]], info=info)
                assert list(ours.token_ids) == step["input_ids"], where
                assert ours.text.count("<|vision_start|>") == 1
                assert _pixels(vision.encode([observation["image"]])) == {
                    k: step[k] for k in ("pixel_shape", "pixel_digest", "grid_thw")}, where
                checked += 1
                history.append((observation["text"], step["action"]))
                observation, _, terminated, truncated, info = env.step(step["action"])
            assert len(episode["steps"]) == 6 or terminated or truncated
    finally:
        env.close()
    assert checked >= 4


def test_the_recorded_ezpoints_messages_carry_the_formula():
    """Their EZPoints manager fills the formula into its template (``str.format``); the
    others send their template as written (braces doubled)."""
    for case in CASES["managers"]:
        for episode in case["episodes"]:
            for step in episode["steps"]:
                if case["template"] == EZPOINTS:
                    formula = "".join(map(str, step["formula"]))
                    assert f"current formula is: '{formula}'" in step["message"]
                else:
                    assert step["message"] == CASES["templates"][case["template"]]
