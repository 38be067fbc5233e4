"""Vision-language policies: loading, what trains, images in prompts, pixel encoding.

The tiny random Qwen2.5-VL / Qwen3-VL of :mod:`studies.tiny_vlm` stands in for the
real models; the visual grid of :mod:`tests.algorithms.visual_env` for a visual env.
verl-agent's image resizing is compared with its own ``process_image`` when
``AGENTGYM_VERL_AGENT_PATH`` names a checkout.
"""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("PIL")

from agentgym.images import check_image, png_bytes  # noqa: E402
from algorithms.agent.prompts import IMAGE_MARK, PromptBuilder  # noqa: E402
from algorithms.config import ModelConfig, PromptConfig  # noqa: E402
from algorithms.engines.vision import (  # noqa: E402
    VisionProcessor,
    png_data_url,
    resize_like_verl_agent,
)
from algorithms.training.lora import adapters_only  # noqa: E402
from algorithms.training.policy import load_policy  # noqa: E402
from algorithms.training.vision_model import resolve_model_kind, vision_tower  # noqa: E402
from studies.tiny_vlm import save_tiny_vlm  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402
from tests.algorithms.visual_env import (  # noqa: E402
    MOVES,
    TASK,
    make_vision_policy,
    vocabulary_texts,
)
from tools import originals  # noqa: E402

IMAGE = np.random.default_rng(0).integers(0, 256, (24, 24, 3), dtype=np.uint8)


def _trainable(model) -> set[str]:
    return {name for name, parameter in model.named_parameters() if parameter.requires_grad}


# --- what trains -----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["qwen2_5_vl", "qwen3_vl"])
def test_lora_adapts_the_language_model_only_and_the_tower_is_frozen(kind):
    policy = make_vision_policy(kind=kind, model_config=ModelConfig(lora_rank=2))
    tower = vision_tower(policy.model)[0]
    trained = _trainable(policy.model)
    assert trained and all("lora_" in name and ".language_model." in name for name in trained)
    lora_modules = {name for name, _ in policy.model.named_modules() if "lora_A" in name}
    assert not any(name.startswith(tower) for name in lora_modules)
    # Qwen2.5-VL's tower has modules named like the language model's (gate/up/down_proj)
    assert any(name.startswith(tower) and name.endswith("gate_proj")
               for name, _ in policy.model.named_modules()) == (kind == "qwen2_5_vl")
    assert adapters_only(policy.model)


def test_train_vision_tower_trains_every_tower_weight_with_and_without_lora():
    full = make_vision_policy(model_config=ModelConfig())
    tower = vision_tower(full.model)[0]
    assert _trainable(full.model) and not any(n.startswith(tower) for n in _trainable(full.model))
    assert "lm_head.weight" in _trainable(full.model) or \
        "model.language_model.embed_tokens.weight" in _trainable(full.model)
    both = make_vision_policy(model_config=ModelConfig(train_vision_tower=True))
    assert all(p.requires_grad for p in both.model.parameters())
    lora = make_vision_policy(model_config=ModelConfig(lora_rank=2, train_vision_tower=True))
    tower = vision_tower(lora.model)[0]
    trained = _trainable(lora.model)
    tower_weights = {n for n, _ in lora.model.named_parameters() if n.startswith(tower)}
    assert tower_weights <= trained and tower_weights and not adapters_only(lora.model)
    assert trained - tower_weights and all("lora_" in n for n in trained - tower_weights)


# --- loading ---------------------------------------------------------------------------

def test_a_saved_vlm_loads_through_load_policy_as_a_vision_policy(tmp_path):
    folder = save_tiny_vlm(tmp_path / "vlm", vocabulary_texts())
    assert resolve_model_kind("auto", str(folder)) == "vision"
    assert resolve_model_kind("auto", None) == "text"
    assert resolve_model_kind("text", str(folder)) == "text"
    config = ModelConfig(name_or_path=str(folder), lora_rank=2, processor_min_pixels=28 * 28,
                         processor_max_pixels=2 * 28 * 28)
    policy = load_policy(config, torch.device("cpu"))
    assert policy.vision is not None and policy.lora and adapters_only(policy.model)
    assert type(policy.model.get_base_model()).__name__ == "Qwen2_5_VLForConditionalGeneration"
    # the processor's bounds were overridden: a 256 x 256 image is at most 2 tokens now
    counts = policy.vision.token_counts(policy.vision.encode([IMAGE]))
    assert counts == [1] or counts == [2]
    text = load_policy(ModelConfig(name_or_path=str(folder), kind="vision"),
                       torch.device("cpu"))
    assert text.vision.token_counts(text.vision.encode([IMAGE])) == [4]


def test_a_text_tokenizer_is_refused_by_the_vision_processor():
    from studies.tiny_vlm import tiny_image_processor

    policy = make_policy()
    with pytest.raises(ValueError, match="no <|vision_start|> token"):
        VisionProcessor(tiny_image_processor(), policy.tokenizer)


# --- prompts ---------------------------------------------------------------------------

def _decoded(policy, built) -> str:
    return policy.tokenizer.decode(list(built.token_ids))


@pytest.mark.parametrize("position", ["observation", "start"])
def test_the_image_goes_where_image_position_says(position):
    policy = make_vision_policy()
    config = PromptConfig(image_position=position, think=False, history_window=2)
    builder = PromptBuilder(policy.tokenizer, config, policy.vision)
    built = builder.build(TASK, [("You moved.", "up")], "The grid is in the image.",
                          tuple(MOVES), images=[IMAGE])
    image_id = policy.vision.image_token_id
    assert built.images[0] is IMAGE and list(built.token_ids).count(image_id) == 4
    text = _decoded(policy, built)
    assert IMAGE_MARK not in built.text
    shown = "<|vision_start|> " + "<|image_pad|> " * 4 + "<|vision_end|>"
    if position == "observation":
        assert f"Now you see: {shown} The grid is in the image." in text
    else:  # the message opens with it, right after the chat template's user header
        assert text.startswith(f"<|im_start|> user {shown} You are an agent")
    # the history keeps its text: past images are never shown
    assert "You saw: You moved." in text and text.count("<|vision_start|>") == 1
    # without an image the same builder writes the text prompt
    plain = builder.build(TASK, [], "The grid is in the image.", tuple(MOVES))
    assert image_id not in plain.token_ids and plain.images == ()


def test_a_template_places_the_image_at_its_placeholder(tmp_path):
    policy = make_vision_policy()
    template = tmp_path / "t.txt"
    template.write_text("Your task: {task}\nNow you see: {image} then\n{observation}")
    builder = PromptBuilder(policy.tokenizer, PromptConfig(template=str(template)),
                            policy.vision)
    built = builder.build(TASK, [], "You moved.", tuple(MOVES), images=[IMAGE])
    assert "see: <|vision_start|>" in _decoded(policy, built)
    # a template without {image}: where image_position says
    template.write_text("Your task: {task}\nNow you see: {observation}")
    for position, expected in (("observation", "see: <|vision_start|>"),
                               ("start", "user <|vision_start|>")):
        builder = PromptBuilder(policy.tokenizer, PromptConfig(template=str(template),
                                                               image_position=position),
                                policy.vision)
        text = _decoded(policy, builder.build(TASK, [], "You moved.", (), images=[IMAGE]))
        assert expected in text and text.count("<|image_pad|>") == 4


def test_image_tokens_count_against_the_budget_and_the_image_is_never_cut():
    policy = make_vision_policy()
    builder = PromptBuilder(policy.tokenizer, PromptConfig(think=False), policy.vision)
    full = builder.build(TASK, [("You moved.", "up")] * 2, "You bump into the wall. " * 5,
                         tuple(MOVES), images=[IMAGE])
    tight = PromptBuilder(policy.tokenizer, PromptConfig(think=False,
                                                         max_prompt_tokens=len(
                                                             full.token_ids) - 20),
                          policy.vision)
    cut = tight.build(TASK, [("You moved.", "up")] * 2, "You bump into the wall. " * 5,
                      tuple(MOVES), images=[IMAGE])
    assert cut.was_cut and len(cut.token_ids) <= len(full.token_ids) - 20
    assert list(cut.token_ids).count(policy.vision.image_token_id) == 4


def test_images_need_a_vision_policy_and_one_image_per_step():
    text_policy = make_policy()
    with pytest.raises(ValueError, match="policy is a text model"):
        PromptBuilder(text_policy.tokenizer, PromptConfig()).build(TASK, [], "x",
                                                                  images=[IMAGE])
    policy = make_vision_policy()
    with pytest.raises(ValueError, match="one image"):
        PromptBuilder(policy.tokenizer, PromptConfig(), policy.vision).build(
            TASK, [], "x", images=[IMAGE, IMAGE])


# --- pixels ----------------------------------------------------------------------------

def test_encoding_is_a_pure_function_of_the_image():
    policy = make_vision_policy()
    first = policy.vision.encode([IMAGE, IMAGE[:10]])
    second = policy.vision.encode([IMAGE.copy(), IMAGE[:10].copy()])
    assert first.pixel_values.dtype == np.float32
    assert np.array_equal(first.pixel_values, second.pixel_values)
    assert np.array_equal(first.image_grid_thw, second.image_grid_thw)
    tensors = policy.vision.tensors([(IMAGE,), (), (IMAGE[:10],)], "cpu")
    assert torch.equal(tensors["pixel_values"], torch.as_tensor(first.pixel_values))
    assert policy.vision.tensors([(), ()], "cpu") == {}


def test_resize_like_verl_agent_by_hand():
    small = resize_like_verl_agent(IMAGE)  # 576 pixels -> 256 * 256: factor sqrt(65536/576)
    side = int(24 * (65536 / 576) ** 0.5)
    assert small.shape == (side, side, 3) == (256, 256, 3)
    wide = np.zeros((10, 4000, 3), dtype=np.uint8)
    assert resize_like_verl_agent(wide, min_pixels=0, max_pixels=10_000).shape == (
        int(10 * 0.5), int(4000 * 0.5), 3)
    same = np.zeros((300, 300, 3), dtype=np.uint8)
    assert resize_like_verl_agent(same) is not same
    assert np.array_equal(resize_like_verl_agent(same), same)
    with pytest.raises(ValueError, match="uint8"):
        check_image(np.zeros((4, 4, 3), dtype=np.float32))


def test_png_bytes_decode_to_the_image():
    from PIL import Image

    picture = np.asarray(Image.open(io.BytesIO(png_bytes(IMAGE))))
    assert picture.dtype == np.uint8 and np.array_equal(picture, IMAGE)
    assert png_data_url(IMAGE).startswith("data:image/png;base64,iVBOR")


VERL_AGENT = os.environ.get("AGENTGYM_VERL_AGENT_PATH")


@pytest.mark.skipif(not VERL_AGENT, reason="set AGENTGYM_VERL_AGENT_PATH to a verl-agent "
                                           "checkout to compare with its process_image")
def test_resize_equals_verl_agents_process_image():
    path = Path(VERL_AGENT) / "agent_system" / "multi_turn_rollout" / "utils.py"
    if not path.exists():
        pytest.fail(f"AGENTGYM_VERL_AGENT_PATH={VERL_AGENT} has no {path}")
    saved = sys.modules.get("verl")
    stub = types.ModuleType("verl")
    stub.DataProto = object  # all utils.py imports from verl; process_image never uses it
    sys.modules["verl"] = stub
    try:
        spec = importlib.util.spec_from_file_location("verl_agent_rollout_utils", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del sys.modules["verl"]
        else:
            sys.modules["verl"] = saved
    rng = np.random.default_rng(5)
    shapes = [(24, 24), (96, 96), (6, 300), (255, 257), (256, 256), (3000, 1500),
              (2048, 2049), (1, 1), (480, 640)]
    for height, width in shapes:
        image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        theirs = np.asarray(module.process_image(image))
        assert np.array_equal(resize_like_verl_agent(image), theirs), (height, width)
    blank = np.zeros((40, 40, 3), dtype=np.uint8)  # their float branch (max < 1)
    assert np.array_equal(resize_like_verl_agent(blank), np.asarray(module.process_image(blank)))


# --- against verl-agent's rollout -------------------------------------------------------

def _verl_agent_collector(root: Path):
    """verl-agent's ``TrajectoryCollector``, its prompts modules, ``OmegaConf`` and its env
    managers, imported from the checkout (:func:`tools.originals.verl_agent_rollout`, its
    extra packages from ``$VERL_AGENT_DEPS``); skips when they do not import here. A
    generator: the first ``next`` loads them, the second forgets them."""
    try:
        with originals.verl_agent_rollout(root, os.environ.get("VERL_AGENT_DEPS")) as theirs:
            yield theirs.rollout, theirs.prompts, theirs.omegaconf, theirs.managers
    except originals.OriginalUnavailable as error:
        pytest.skip(str(error))


@pytest.mark.skipif(not VERL_AGENT, reason="set AGENTGYM_VERL_AGENT_PATH to a verl-agent "
                                           "checkout to compare with its rollout")
def test_prompt_ids_and_pixels_equal_verl_agents_rollout(tmp_path):
    """verl-agent's ``preprocess_single_sample`` on its visual Sokoban and EZPoints prompts
    against our prompt builder given the same wording as a template (``<image>`` written
    ``{image}``): the same token ids (the image's tokens where theirs are) and the same
    pixel values, bit for bit, for frames of several sizes."""
    from studies.tiny_vlm import tiny_image_processor, vlm_tokenizer

    collector_source = _verl_agent_collector(Path(VERL_AGENT))
    rollout, prompts, omegaconf, _ = next(collector_source)
    try:
        sokoban = prompts["sokoban"].SOKOBAN_VISUAL_TEMPLATE
        cards = prompts["gym_cards"].GYM_CARDS_EZPOINTS_TEMPLATE.format(text_formula="3+")
        tokenizer = vlm_tokenizer([*vocabulary_texts(), sokoban, cards])
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil,
        )

        for image_processor in (tiny_image_processor(max_tokens=6),
                                Qwen2VLImageProcessorPil()):  # Qwen2.5-VL's own bounds
            vision = VisionProcessor(image_processor, tokenizer)
            processor = types.SimpleNamespace(image_processor=image_processor,
                                              image_token="<|image_pad|>", tokenizer=tokenizer)
            config = omegaconf.create({"data": {"max_prompt_length": 4096,
                                                "truncation": "error"}})
            collector = rollout.TrajectoryCollector(config, tokenizer, processor)
            batch = types.SimpleNamespace(non_tensor_batch={"raw_prompt": [None],
                                                            "data_source": ["x"]})
            rng = np.random.default_rng(1)
            for text in (sokoban, cards):
                template = tmp_path / "template.txt"
                template.write_text(text.replace("{", "{{").replace("}", "}}")
                                    .replace("<image>", "{image}"))
                builder = PromptBuilder(tokenizer, PromptConfig(
                    template=str(template), history_window=0, max_prompt_tokens=4096),
                    vision)
                for shape in ((96, 96), (300, 200), (48, 60)):
                    image = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
                    theirs = collector.preprocess_single_sample(
                        0, batch, {"text": [text], "image": [image], "anchor": [image]})
                    ids = theirs["input_ids"][theirs["attention_mask"].bool()].tolist()
                    ours = builder.build("", [], "", (), images=[image])
                    assert list(ours.token_ids) == ids, (shape, text[:30])
                    encoded = vision.encode([image])
                    inputs = theirs["multi_modal_inputs"]
                    assert np.array_equal(encoded.pixel_values,
                                          inputs["pixel_values"].numpy())
                    assert np.array_equal(encoded.image_grid_thw,
                                          inputs["image_grid_thw"].numpy())
    finally:
        next(collector_source, None)


VERL_AGENT_PROMPTS = {
    "AgentGym/SokobanVisual-v0": ("Sokoban", "sokoban", "SOKOBAN_VISUAL_TEMPLATE", False),
    "AgentGym/EZPoints-v0": ("gym_cards/EZPoints-v0", "gym_cards",
                             "GYM_CARDS_EZPOINTS_TEMPLATE", True),
    "AgentGym/NumberLine-v0": ("gym_cards/NumberLine-v0", "gym_cards",
                               "GYM_CARDS_NUMBERLINE_TEMPLATE", False),
    "AgentGym/Blackjack-v0": ("gym_cards/Blackjack-v0", "gym_cards",
                              "GYM_CARDS_BLACKJACK_TEMPLATE", False),
}
"""Each visual env's verl-agent prompt: its ``env.env_name``, prompts module, template, and
whether its env manager fills the template with ``str.format`` (EZPoints: the formula) or
sends it as written (the others: their ``{{``/``}}`` reach the model doubled)."""


def as_our_template(text: str, formatted: bool) -> str:
    """A template file of ours that writes verl-agent's message ``text``: ``<image>`` becomes
    ``{image}``; a template their manager fills with ``str.format`` keeps its braces and
    reads the formula from the info (``{text_formula}`` -> ``{info[Formula]}``), one it sends
    as written has every brace doubled."""
    if formatted:
        return text.replace("{text_formula}", "{info[Formula]}").replace("<image>", "{image}")
    return text.replace("{", "{{").replace("}", "}}").replace("<image>", "{image}")


def their_manager(managers, omegaconf, env_name: str):
    """verl-agent's env manager of ``env_name`` without its envs: only its prompt building
    (``build_text_obs``) is called, with our env's info."""
    if env_name == "Sokoban":
        manager = object.__new__(managers.SokobanEnvironmentManager)
        manager.is_multi_modal = True  # env.sokoban.mode='rgb_array' (run_sokoban.sh)
        manager.memory = managers.SimpleMemory()
        manager.memory.reset(batch_size=1)
    else:
        manager = object.__new__(managers.GymCardEnvironmentManager)
    manager.config = omegaconf.create({"env": {"env_name": env_name, "history_length": 2}})
    return manager


@pytest.mark.skipif(not VERL_AGENT, reason="set AGENTGYM_VERL_AGENT_PATH to a verl-agent "
                                           "checkout to compare with its env managers")
@pytest.mark.parametrize("env_id", sorted(VERL_AGENT_PROMPTS))
def test_real_envs_prompts_equal_verl_agents_env_managers(tmp_path, env_id):
    """At every step of episodes on our visual env, verl-agent's own env manager
    (``build_text_obs`` with our env's info, history length 2 as its config's default) and
    rollout preprocessing (``preprocess_single_sample``, with our env's frame) give the same
    token ids and pixel values as our prompt builder given verl-agent's wording as a template
    (:func:`as_our_template`), with Qwen2.5-VL's image processor (frames below 256 x 256
    scaled up as verl-agent's ``process_image`` does): one user message, the template's text
    only (no history), the image where theirs is, EZPoints' formula filled in, NumberLine's
    and Blackjack's braces doubled as they send them."""
    import gymnasium as gym
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    import agentgym  # noqa: F401  (registers the ids)
    from studies.tiny_vlm import vlm_tokenizer

    env_name, module, name, formatted = VERL_AGENT_PROMPTS[env_id]
    source = _verl_agent_collector(Path(VERL_AGENT))
    rollout, prompts, omegaconf, managers = next(source)
    env = gym.make(env_id)
    try:
        text = getattr(prompts[module], name)
        template = tmp_path / "template.txt"
        template.write_text(as_our_template(text, formatted), encoding="utf-8")
        tokenizer = vlm_tokenizer([*vocabulary_texts(), text])
        image_processor = Qwen2VLImageProcessorPil()
        vision = VisionProcessor(image_processor, tokenizer)
        processor = types.SimpleNamespace(image_processor=image_processor,
                                          image_token="<|image_pad|>", tokenizer=tokenizer)
        collector = rollout.TrajectoryCollector(
            omegaconf.create({"data": {"max_prompt_length": 4096, "truncation": "error"}}),
            tokenizer, processor)
        batch = types.SimpleNamespace(non_tensor_batch={"raw_prompt": [None],
                                                        "data_source": ["x"]})
        builder = PromptBuilder(tokenizer, PromptConfig(
            template=str(template), history_window=0, max_prompt_tokens=4096), vision)
        rng = np.random.default_rng(0)
        checked = 0
        for episode in range(3):
            manager = their_manager(managers, omegaconf, env_name)
            observation, info = env.reset(seed=100 + episode)
            history: list[tuple[str, str]] = []
            for step in range(5):
                if env_name == "Sokoban" and step > 0:  # what its step() stores first
                    manager.memory.store({"text_obs": ["(text frame)"], "action": ["Up"]})
                message = manager.build_text_obs([info], init=step == 0)[0] \
                    if env_name == "Sokoban" else manager.build_text_obs([info])[0]
                theirs = collector.preprocess_single_sample(
                    0, batch, {"text": [message], "image": [observation["image"]],
                               "anchor": [observation["image"]]})
                ours = builder.build(info["task"], history, observation["text"],
                                     info["admissible_actions"],
                                     images=[observation["image"]], info=info)
                ids = theirs["input_ids"][theirs["attention_mask"].bool()].tolist()
                assert list(ours.token_ids) == ids, (env_id, episode, step)
                assert ours.text.count("<|vision_start|>") == 1
                encoded = vision.encode([observation["image"]])
                inputs = theirs["multi_modal_inputs"]
                assert np.array_equal(encoded.pixel_values, inputs["pixel_values"].numpy())
                assert np.array_equal(encoded.image_grid_thw, inputs["image_grid_thw"].numpy())
                checked += 1
                actions = info["admissible_actions"]
                action = str(rng.choice(actions)) if rng.random() < 0.8 else "garbage"
                history.append((observation["text"], action))
                observation, _, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    break
        assert checked >= 3
        if formatted:  # the formula of the last step checked is in both
            assert f"current formula is: '{''.join(map(str, info['Formula']))}'" in \
                manager.build_text_obs([info])[0]
        elif "{{" in text:
            assert "{{" in ours.text  # sent as written: doubled
    finally:
        env.close()
        next(source, None)
