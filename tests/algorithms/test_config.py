"""Config: presets, validation, the derived estimator/critic, round trips."""

from __future__ import annotations

import json

import pytest

from algorithms.config import ConfigError, TrainConfig, replace
from algorithms.presets import PRESET_HELP, PRESETS


def test_algo_selects_estimator_and_critic():
    assert (TrainConfig(algo="gigpo").estimator, TrainConfig(algo="gigpo").use_critic) == \
        ("gigpo", False)
    assert (TrainConfig(algo="grpo").estimator, TrainConfig(algo="grpo").use_critic) == \
        ("grpo", False)
    assert (TrainConfig(algo="ppo").estimator, TrainConfig(algo="ppo").use_critic) == \
        ("gae", True)


def test_only_ppo_bootstraps_truncated_episodes():
    assert TrainConfig(algo="ppo").bootstrap_truncated
    assert not TrainConfig(algo="gigpo").bootstrap_truncated
    assert not TrainConfig(algo="grpo").bootstrap_truncated
    off = replace(TrainConfig(algo="ppo"), learner={"bootstrap_truncated": False})
    assert not off.bootstrap_truncated


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_valid_and_round_trip(name):
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers the ids)

    assert PRESETS[name].env.env_id in gym.registry
    config = PRESETS[name].validate()
    assert config.preset == name and name in PRESET_HELP
    data = json.loads(json.dumps(config.to_dict()))
    assert TrainConfig.from_dict(data) == config


def test_gpu_presets_follow_the_paper():
    alf = PRESETS["alfworld-1.5b"]
    assert (alf.env.group_size, alf.env.num_groups, alf.env.max_steps) == (8, 16, 50)
    assert alf.learner.kl_coef == 0.01 and alf.learner.lr == 1e-6
    assert alf.prompt.history_window == 2 and alf.generation.eval_temperature == 0.4
    assert PRESETS["alfworld-7b-lora"].model.lora_rank > 0
    assert PRESETS["webshop-1.5b"].env.max_steps == 15
    assert PRESETS["webshop-1.5b"].learner.normalize == "mean"
    search = PRESETS["searchqa-3b"]
    assert (search.env.group_size, search.env.max_steps, search.env.penalty()) == (5, 4, 0.01)
    assert search.env.env_id == "AgentGym/SearchQA-v0"


def test_the_7b_presets_are_the_1_5b_scripts_with_the_7b_model():
    for small, large in (("alfworld-1.5b", "alfworld-7b"), ("webshop-1.5b", "webshop-7b")):
        seven = PRESETS[large]
        assert seven.model.name_or_path == "Qwen/Qwen2.5-7B-Instruct"
        assert seven.model.lora_rank == 0
        as_small = replace(seven, preset=small,
                           model={"name_or_path": PRESETS[small].model.name_or_path})
        assert as_small == PRESETS[small]


def test_the_gpu_presets_are_those_with_a_qwen_model_and_vllm():
    from algorithms.presets import GPU_PRESETS

    assert GPU_PRESETS <= set(PRESETS)
    for name, preset in PRESETS.items():
        on_gpu = (preset.generation.engine == "vllm"
                  and str(preset.model.name_or_path).startswith("Qwen/"))
        assert on_gpu == (name in GPU_PRESETS), name


def test_vision_language_presets_follow_run_sokoban_sh_and_run_ezpoints_sh():
    sokoban, cards = PRESETS["sokoban-vl-3b"], PRESETS["ezpoints-vl-3b"]
    for preset in (sokoban, cards):
        assert preset.algo == "gigpo" and preset.model.kind == "vision"
        assert preset.model.name_or_path == "Qwen/Qwen2.5-VL-3B-Instruct"
        assert preset.model.lora_rank == 0 and preset.model.train_vision_tower
        assert preset.model.gradient_checkpointing
        assert (preset.model.image_min_pixels, preset.model.image_max_pixels) == (
            256 * 256, 2048 * 2048)
        assert preset.learner.normalize == "mean" and preset.learner.lr == 1e-6
        assert (preset.learner.kl_coef, preset.learner.kl_estimator) == (0.01, "k3")
        assert preset.learner.gamma == 0.95 and preset.learner.step_weight == 1.0
        assert (preset.prompt.max_prompt_tokens, preset.generation.max_new_tokens) == (
            1024, 512)
        assert preset.prompt.history_window == 0 and preset.env.group_size == 8
        assert preset.generation.vllm.gpu_memory_utilization == 0.6
        assert (preset.generation.temperature, preset.generation.eval_temperature) == (
            1.0, 0.4)
        assert preset.run.eval_every == 5 and preset.env.eval_episodes == 128
        assert preset.run.eval_before_train and preset.learner.micro_batch_size == 8
    assert sokoban.env.env_id == "AgentGym/SokobanVisual-v0"
    assert (sokoban.env.num_groups, sokoban.env.max_steps) == (32, 15)
    assert (sokoban.learner.mini_batch_size, sokoban.run.iterations) == (64, 150)
    assert sokoban.prompt.image_position == "observation" and sokoban.prompt.think
    assert cards.env.env_id == "AgentGym/EZPoints-v0"
    assert (cards.env.num_groups, cards.env.max_steps) == (16, 8)
    assert (cards.learner.mini_batch_size, cards.run.iterations) == (128, 100)
    assert cards.prompt.image_position == "start" and cards.prompt.action_tag == ""
    assert not cards.prompt.think and cards.stop_strings == ()


@pytest.mark.parametrize("name", ["sokoban-vl-3b", "ezpoints-vl-3b"])
def test_vision_language_presets_build_their_envs_and_speak_their_action_protocol(name):
    """The presets' kwargs build the real envs (training seeds from 0, held-out ones from
    2^16, as verl-agent's validation draws), with the script's step limit and the frame as
    the anchor; an answer in the preset's format, parsed as the rollout parses it, is a valid
    action of the env, and one the env cannot read is invalid."""
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers the ids)
    from algorithms.agent.parsing import parse_action

    config = PRESETS[name].validate()
    train = gym.make(config.env.env_id, **config.env.kwargs()).unwrapped
    held_out = gym.make(config.env.env_id, **config.env.eval_kwargs()).unwrapped
    try:
        assert train.max_steps == held_out.max_steps == config.env.max_steps
        assert train.anchor_mode == held_out.anchor_mode == "observation"
        assert train.task_ids.seed_of(train.task_ids[0]) == 0
        assert held_out.task_ids.seed_of(held_out.task_ids[0]) == 2**16
        observation, info = train.reset(options={"task_id": train.task_ids[3]})
        assert info["anchor"][0] == "image" and observation["image"].dtype.name == "uint8"
        prompt = config.prompt
        if name == "sokoban-vl-3b":
            answer = "<think>The box is above me.</think><action>up</action>"
        else:  # the JSON answer verl-agent's EZPoints prompt asks for, the expert's word
            word = json.loads(train.expert_action())["action"]
            answer = f'{{\n  "thoughts": "I see two cards.",\n  "action": "{word}"\n}}'
        parsed = parse_action(answer, think=prompt.think, action_tag=prompt.action_tag,
                              style=prompt.env_style)
        assert parsed.format_ok
        info = train.step(parsed.action)[4]
        assert info["valid_action"]
        if name == "ezpoints-vl-3b":
            assert info["Formula"] == [int(word)]
        garbage = parse_action("I am not sure.", think=prompt.think,
                               action_tag=prompt.action_tag, style=prompt.env_style)
        assert not (garbage.format_ok and train.step(garbage.action)[4]["valid_action"])
    finally:
        train.close()
        held_out.close()


def test_hgpo_presets_follow_recipe_hgpos_1_5b_scripts():
    alf, shop = PRESETS["hgpo-alfworld-1.5b"], PRESETS["hgpo-webshop-1.5b"]
    for config in (alf, shop):
        learner = config.learner
        assert config.algo == "hgpo" and config.estimator == "hgpo"
        assert (config.env.num_groups, config.env.group_size) == (16, 8)
        assert learner.hgpo_history_length is None and config.prompt.history_window == 2
        assert (learner.hgpo_length_weight_alpha, learner.hgpo_base_group) == (1.0, False)
        assert (learner.lr, learner.kl_coef, learner.gamma, config.env.penalty()) == (
            1e-6, 0.01, 0.95, 0.1)
        assert (config.prompt.max_prompt_tokens, config.generation.max_new_tokens) == (
            4096, 512)
        assert (config.run.iterations, config.run.eval_every) == (160, 5)
        assert config.env.anchor == "observation"
    assert (alf.env.max_steps, alf.learner.normalize) == (50, "std")
    assert (alf.learner.mini_batch_size, alf.learner.micro_batch_size) == (256, 16)
    assert (shop.env.max_steps, shop.learner.normalize, shop.env.eval_episodes) == (
        30, "mean", 128)
    assert (shop.learner.mini_batch_size, shop.learner.micro_batch_size) == (64, 4)


def test_graphgpo_presets_follow_its_1_5b_scripts():
    alf, shop = PRESETS["graphgpo-alfworld-1.5b"], PRESETS["graphgpo-webshop-1.5b"]
    for config in (alf, shop):
        learner = config.learner
        assert config.algo == "graphgpo" and config.env.anchor == "state"
        assert (learner.step_weight, learner.graphgpo_episode_weight) == (1.0, 1.0)
        assert learner.normalize == "std" and not learner.graphgpo_normalize_distance
        assert learner.similarity_threshold is None and config.prompt.history_window == 2
        assert (config.env.num_groups, config.env.group_size, config.env.penalty()) == (
            16, 8, 0.1)
        assert config.run.eval_before_train and config.run.iterations == 150
        assert learner.gamma == 0.95  # not read: GraphGPO does not discount
    assert (alf.learner.graphgpo_decay, alf.env.max_steps, alf.prompt.max_prompt_tokens) == (
        0.1, 50, 2048)
    assert (alf.learner.mini_batch_size, alf.learner.micro_batch_size) == (256, 32)
    assert (shop.learner.graphgpo_decay, shop.env.max_steps, shop.prompt.max_prompt_tokens
            ) == (0.2, 15, 5120)
    assert (shop.learner.mini_batch_size, shop.learner.micro_batch_size) == (64, 8)


@pytest.mark.parametrize("algo", ["gigpo", "hgpo"])
def test_another_algo_on_a_graphgpo_preset_discounts_with_gamma_not_the_graph_decay(algo):
    """``learner.gamma`` is the discount only; GraphGPO's decay of its graph returns is
    ``learner.graphgpo_decay``, so ``--algo gigpo`` (or ``hgpo``) on a GraphGPO preset
    discounts with 0.95, and the GraphGPO presets still decay with their scripts' 0.1 and
    0.2."""
    pytest.importorskip("tyro")
    import train

    for preset, decay in (("graphgpo-alfworld-1.5b", 0.1), ("graphgpo-webshop-1.5b", 0.2)):
        switched = train.parse_config(["--preset", preset, "--algo", algo])
        assert (switched.algo, switched.learner.gamma) == (algo, 0.95)
        graph = train.parse_config(["--preset", preset])
        assert (graph.algo, graph.learner.graphgpo_decay, graph.learner.gamma) == (
            "graphgpo", decay, 0.95)
        assert train.parse_config(["--preset", preset, "--algo", algo, "--algo", "graphgpo"]
                                  ).learner.graphgpo_decay == decay


def _saved_before_graphgpo_decay(config: TrainConfig) -> dict:
    """``config`` as a run saved it before GraphGPO's decay had a field of its own: no
    ``learner.graphgpo_decay``, and a GraphGPO run's decay in ``learner.gamma``."""
    data = json.loads(json.dumps(config.to_dict()))
    decay = data["learner"].pop("graphgpo_decay")
    if config.algo == "graphgpo":
        data["learner"]["gamma"] = decay
    return data


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_config_saved_before_graphgpo_decay_had_a_field_loads_as_the_same_config(name):
    assert TrainConfig.from_dict(_saved_before_graphgpo_decay(PRESETS[name])) == PRESETS[name]


def test_a_graphgpo_run_saved_before_the_decay_had_a_field_resumes(tmp_path):
    """A run folder of ``--algo graphgpo`` written when its config held the decay in
    ``learner.gamma`` (0.1) resumes under today's config (gamma 0.95, graphgpo_decay 0.1),
    and its learner decays its graph returns by the same 0.1; another decay is still
    refused as a change."""
    from algorithms.config import with_algo
    from algorithms.runs.checkpoint import LATEST, META_FILE, checkpoint_dir
    from algorithms.runs.run_folder import prepare_run_folder

    config = replace(with_algo(PRESETS["cpu-demo"], "graphgpo"), run={"resume": True})
    saved = _saved_before_graphgpo_decay(config)
    assert (saved["learner"]["gamma"], config.learner.gamma) == (0.1, 0.95)
    (tmp_path / "config.json").write_text(json.dumps(saved))
    checkpoints = checkpoint_dir(tmp_path)
    (checkpoints / "iter_1").mkdir(parents=True)
    (checkpoints / "iter_1" / META_FILE).write_text(json.dumps({"iteration": 1}))
    (checkpoints / LATEST).write_text("iter_1")
    assert prepare_run_folder(config, tmp_path) == checkpoints / "iter_1"
    assert TrainConfig.from_dict(saved).learner.graphgpo_decay == 0.1
    with pytest.raises(ConfigError, match=r"learner\.graphgpo_decay: saved 0\.1, now 0\.2"):
        prepare_run_folder(replace(config, learner={"graphgpo_decay": 0.2}), tmp_path)


def test_the_discount_and_the_graph_decay_are_checked_before_the_run():
    for name in ("gamma", "graphgpo_decay"):
        for bad in (-0.1, 1.5, float("nan")):
            with pytest.raises(ConfigError, match=f"learner.{name} must be in \\[0, 1\\]"):
                replace(TrainConfig(algo="graphgpo"), learner={name: bad}).validate()


def test_similarity_and_hgpo_settings_are_checked():
    with pytest.raises(ConfigError, match="gigpo or graphgpo"):
        replace(TrainConfig(algo="hgpo"), learner={"similarity_threshold": 0.9}).validate()
    replace(TrainConfig(algo="graphgpo"), learner={"similarity_threshold": 0.9}).validate()
    with pytest.raises(ConfigError, match="hgpo_history_length must be >= 0"):
        replace(TrainConfig(algo="hgpo"), learner={"hgpo_history_length": -1}).validate()


@pytest.mark.parametrize("omega", [-0.5, float("nan"), float("inf")])
def test_a_step_weight_below_0_or_not_finite_is_refused(omega):
    with pytest.raises(ConfigError, match="step_weight must be finite and >= 0"):
        replace(TrainConfig(algo="gigpo"), learner={"step_weight": omega}).validate()
    replace(TrainConfig(algo="gigpo"), learner={"step_weight": 0.0}).validate()


def test_sokoban_preset_follows_run_sokoban_sh():
    sokoban = PRESETS["sokoban"]
    assert sokoban.algo == "gigpo" and sokoban.env.env_id == "AgentGym/Sokoban-v0"
    assert (sokoban.env.num_groups, sokoban.env.group_size, sokoban.env.max_steps) == (32, 8, 15)
    assert sokoban.learner.normalize == "mean" and sokoban.learner.lr == 1e-6
    assert sokoban.learner.kl_coef == 0.01 and sokoban.learner.kl_estimator == "k3"
    assert (sokoban.learner.mini_batch_size, sokoban.learner.micro_batch_size) == (64, 8)
    assert sokoban.learner.gamma == 0.95 and sokoban.env.penalty() == 0.1
    assert (sokoban.prompt.max_prompt_tokens, sokoban.generation.max_new_tokens) == (1024, 512)
    assert (sokoban.run.iterations, sokoban.run.eval_every, sokoban.env.eval_episodes) == (
        150, 5, 128)
    # held-out rooms: the seeds verl-agent's validation draws from (2^16 and up)
    assert json.loads(sokoban.env.eval_env_kwargs) == {"first_seed": 65_536}


def _sft_then_gigpo_preset(name: str, env_id: str):
    """The preset ``name`` as the CLI parses it, checked to be one command that trains
    ``env_id`` from the offline model: the SFT stage on the env's expert first, evaluated
    before RL starts and after its last iteration, no env argument the env refuses."""
    from algorithms.config import env_kwargs_problems
    from train import parse_config

    config = parse_config(["--preset", name])
    assert config == PRESETS[name]
    assert config.algo == "gigpo" and config.model.name_or_path is None
    assert config.env.env_id == env_id and config.env.group_size >= 2
    assert config.sft.warm_start and config.sft.data is None
    assert config.model.init_checkpoint is None
    assert config.run.eval_before_train and config.run.eval_every == config.run.iterations
    assert env_kwargs_problems(config) == []  # e.g. none of the cpu-demo's KeyDoor kwargs
    return config


def test_a_presets_env_kwargs_left_on_another_env_are_refused_with_where_they_came_from():
    """The presets live in :mod:`algorithms.presets`, which imports the config module (not
    the reverse); the refusal still names the preset that set the kwargs."""
    from algorithms.config import env_kwargs_problems

    guess = "examples.own_env:OwnEnv/NumberGuess-v0"
    config = replace(PRESETS["cpu-demo"], env={"env_id": guess})
    assert env_kwargs_problems(config) == [
        f"env.env_kwargs has arguments {guess} does not take: height, key, width (the "
        "cpu-demo preset sets them for AgentGym/KeyDoor-v0); clear them with "
        "--env.env-kwargs '{}' or pass only its own (high, anchor, max_steps, render_mode)"]
    with pytest.raises(ConfigError, match="the cpu-demo preset sets them for"):
        config.validate()


def test_cpu_webshop_is_sft_then_gigpo_on_the_offline_model():
    from algorithms.sft.data import expert_trajectories

    config = _sft_then_gigpo_preset("cpu-webshop", "AgentGym/WebShop-v0")
    assert json.loads(config.env.eval_env_kwargs) == {"split": "test"}
    # the SFT stage's oracle episodes succeed within the preset's step limit
    trajectories = expert_trajectories(config.env.env_id, config.env.kwargs(), 6)
    assert all(t.extra["success"] for t in trajectories)
    assert max(len(t.steps) for t in trajectories) <= config.env.max_steps


def test_cpu_searchqa_is_sft_then_gigpo_on_the_offline_model():
    import gymnasium as gym

    from algorithms.agent.task_choice import choose_task_ids
    from algorithms.sft.data import expert_trajectories

    config = _sft_then_gigpo_preset("cpu-searchqa", "AgentGym/SearchQA-v0")
    assert json.loads(config.env.eval_env_kwargs) == {"split": "test"}
    # answers are the env's own tags, not an <action> opened for the model
    assert config.prompt.env_style == "searchqa" and config.prompt.response_prefix == ""
    assert not config.prompt.show_admissible_actions and not config.prompt.think
    # the expert's episodes cover the templates and succeed in the turn budget
    trajectories = expert_trajectories(config.env.env_id, config.env.kwargs(), 20,
                                       task_order=config.env.task_order)
    assert all(t.extra["success"] for t in trajectories)
    assert max(len(t.steps) for t in trajectories) <= config.env.max_steps
    assert len({t.task.split()[:3] == ["In", "which", "city"] for t in trajectories}) == 2
    # the evaluation's 12 test questions are not the first 12 (one template)
    env = gym.make(config.env.env_id, **config.env.eval_kwargs())
    ids = list(env.unwrapped.task_ids)
    questions = {item.id: item.metadata["template"] for item in env.unwrapped.items}
    env.close()
    chosen = choose_task_ids(ids, config.env.eval_episodes, config.env.task_order)
    assert len({questions[i] for i in chosen}) >= 10
    assert len({questions[i] for i in ids[:config.env.eval_episodes]}) == 1


def test_cpu_alfworld_is_sft_then_gigpo_on_the_offline_model():
    config = _sft_then_gigpo_preset("cpu-alfworld", "AgentGym/ALFWorld-v0")
    # every game of the held-out split is evaluated, not the first ids of one task type
    assert json.loads(config.env.eval_env_kwargs)["num_generated_games"] == \
        config.env.eval_episodes
    # the prompt fits the expert's steps: the response its longest action
    assert config.prompt.response_prefix == "<action>" and not config.prompt.think
    assert config.generation.max_new_tokens >= 16


def test_cpu_demo_is_small_and_simple():
    demo = PRESETS["cpu-demo"]
    assert demo.model.name_or_path is None  # the offline default model
    assert demo.env.env_id == "AgentGym/KeyDoor-v0"
    assert json.loads(demo.env.env_kwargs) == {"width": 2, "height": 2, "key": False}
    assert demo.prompt.response_prefix == "<action>"
    assert demo.run.iterations >= 2 and demo.generation.max_new_tokens <= 32
    # LoRA keeps checkpoints small; the KL to the base model (adapters off) keeps the
    # policy from collapsing (docs/configuration.md)
    assert demo.model.lora_rank == 16 and demo.model.lora_alpha == 32
    assert demo.learner.lr == 5e-4 and demo.learner.kl_coef == 0.2


def test_penalty_defaults_per_env():
    assert TrainConfig().env.penalty() == 0.1
    config = replace(TrainConfig(), env={"env_id": "AgentGym/SearchQA-v0"})
    assert config.env.penalty() == 0.01
    config = replace(config, env={"invalid_action_penalty": 0.5})
    assert config.env.penalty() == 0.5


def test_env_kwargs_merge():
    config = replace(TrainConfig(), env={"env_kwargs": '{"split": "train", "x": 1}',
                                         "eval_env_kwargs": '{"split": "valid_unseen"}',
                                         "max_steps": 7})
    assert config.env.kwargs() == {"split": "train", "x": 1, "anchor": "observation",
                                   "max_steps": 7}
    assert config.env.eval_kwargs()["split"] == "valid_unseen"


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"env": {"group_size": 1}}, "needs env.group_size >= 2"),
        ({"env": {"env_kwargs": "[1, 2]"}}, "must be a JSON object"),
        ({"env": {"env_kwargs": "{not json"}}, "must be a JSON object"),
        ({"learner": {"micro_batch_size": 8, "mini_batch_size": 4}}, "micro_batch_size must"),
        ({"learner": {"epochs": 0}}, "epochs must be >= 1"),
        ({"generation": {"temperature": 0.0}}, "temperature must be > 0"),
        ({"env": {"step_timeout": 5.0}}, "step_timeout"),  # sync cannot interrupt an env
        ({"run": {"rollout_retries": -1}}, "rollout_retries must be >= 0"),
        ({"env": {"backend": "subprocess", "step_timeout": 0.0}}, "positive finite"),
        ({"env": {"backend": "subprocess", "step_timeout": float("nan")}}, "positive finite"),
    ],
)
def test_validation_rejects(changes, match):
    with pytest.raises(ValueError, match=match):
        replace(TrainConfig(), **changes).validate()


def test_top_p_is_refused_for_training_and_allowed_for_eval_only():
    with pytest.raises(ValueError, match="off-policy"):
        replace(TrainConfig(), generation={"top_p": 0.9}).validate()
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        replace(TrainConfig(), generation={"top_p": 0.0}).validate()
    replace(TrainConfig(), generation={"top_p": 0.9}, run={"eval_only": True}).validate()


def test_ppo_allows_group_size_one():
    replace(TrainConfig(algo="ppo"), env={"group_size": 1}).validate()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_survives_its_saved_form(name):
    saved = json.loads(json.dumps(PRESETS[name].to_dict()))
    assert TrainConfig.from_dict(saved) == PRESETS[name]


def test_a_config_saved_by_another_version_is_refused_naming_its_fields():
    data = TrainConfig(algo="ppo").to_dict()
    del data["learner"]["bootstrap_truncated"]
    del data["generation"]["stop"]
    data["generation"]["vllm"]["kv_cache_dtype"] = "fp8"
    data["generation"]["vllm_dtype"] = "auto"
    with pytest.raises(ConfigError, match=(
            r"saved by another version of AgentGym \(unknown: generation\.vllm_dtype, "
            r"generation\.vllm\.kv_cache_dtype; missing: generation\.stop, "
            r"learner\.bootstrap_truncated\)")):
        TrainConfig.from_dict(data)


def test_stop_strings_default_to_the_env_styles_closing_tags():
    assert TrainConfig().stop_strings == ("</action>",)
    assert replace(TrainConfig(), prompt={"action_tag": "act"}).stop_strings == ("</act>",)
    assert replace(TrainConfig(), prompt={"action_tag": ""}).stop_strings == ()
    assert replace(TrainConfig(), prompt={"env_style": "searchqa"}).stop_strings == \
        ("</search>", "</answer>")
    with pytest.raises(ConfigError, match="prompt.env_style must be 'default' or an env's "
                                          "tag-action format \\(searchqa\\), got 'nope'"):
        replace(TrainConfig(), prompt={"env_style": "nope"}).validate()
    assert replace(TrainConfig(), generation={"stop": ("END",)}).stop_strings == ("END",)
    assert replace(TrainConfig(), generation={"stop": ()}).stop_strings == ()


def test_searchqa_transcript_preset_is_search_r1s_recipe():
    config = PRESETS["searchqa-3b-transcript"]
    assert config.algo == "grpo" and config.model.name_or_path == "Qwen/Qwen2.5-3B"
    assert config.prompt.layout == "transcript" and config.prompt.env_style == "searchqa"
    assert config.stop_strings == ("</search>", "</answer>")
    assert (config.env.group_size, config.env.num_groups, config.env.max_steps) == (5, 512, 3)
    assert config.env.penalty() == 0.0
    assert (config.prompt.max_prompt_tokens, config.generation.max_new_tokens,
            config.prompt.max_observation_tokens) == (4096, 500, 500)
    assert (config.learner.lr, config.learner.kl_coef, config.learner.kl_estimator) == \
        (1e-6, 0.001, "k3")
    assert PRESETS["searchqa-3b"].prompt.layout == "window"
    assert PRESETS["alfworld-1.5b"].prompt.layout == "window"


def test_cli_reaches_the_layout_template_chat_template_and_stop_flags(tmp_path):
    from train import parse_config

    template = tmp_path / "t.txt"
    template.write_text("Q: {task}", encoding="utf-8")
    config = parse_config(["--preset", "cpu-demo", "--prompt.layout", "transcript",
                           "--prompt.no-chat-template", "--prompt.template", str(template),
                           "--generation.stop", "</a>", "STOP"])
    assert config.prompt.layout == "transcript" and not config.prompt.chat_template
    assert config.prompt.template == str(template)
    assert config.stop_strings == ("</a>", "STOP")
    bad = tmp_path / "bad.txt"
    bad.write_text("Q: {question}", encoding="utf-8")
    with pytest.raises(ValueError, match=r"unknown placeholder \{question\}"):
        parse_config(["--preset", "cpu-demo", "--prompt.template", str(bad)])


def test_the_env_id_help_names_every_registered_env():
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers the ids)
    from algorithms.config import EnvConfig, field_docs

    text = field_docs(EnvConfig)["env_id"]
    missing = [k for k in gym.registry if k.startswith("AgentGym/") and f"``{k}``" not in text]
    assert missing == []


# ---------------------------------------------------------------------- envs of one's own
def test_an_env_of_ones_own_is_named_in_gymnasiums_import_form():
    config = replace(TrainConfig(), env={"env_id": "examples.own_env:OwnEnv/NumberGuess-v0"})
    assert config.validate() is config
    with pytest.raises(ConfigError, match="env.env_id: unknown env id 'OwnEnv/Nope-v0'.*"
                                          "'your_module:OwnEnv/Nope-v0'"):
        replace(config, env={"env_id": "OwnEnv/Nope-v0"}).validate()
    with pytest.raises(ConfigError, match="the module 'nowhere_xyz' cannot be imported"):
        replace(config, env={"env_id": "nowhere_xyz:OwnEnv/Nope-v0"}).validate()


def test_a_plain_envs_kwargs_may_name_the_adapters_arguments():
    plain = "tests.agentgym.faulty_envs:AgentGymTest/PlainGuess-v0"
    config = replace(TrainConfig(), env={"env_id": plain,
                                         "env_kwargs": json.dumps({"high": 4}),
                                         "eval_env_kwargs": json.dumps({"first_seed": 10**6})})
    assert config.validate() is config
    with pytest.raises(ConfigError, match="does not take: width; clear them"):
        replace(config, env={"env_kwargs": json.dumps({"width": 2})}).validate()


def test_another_env_id_drops_the_presets_env_kwargs_unless_given():
    from algorithms.config import for_env_id

    demo = PRESETS["cpu-demo"]
    own = replace(demo, env={"env_id": "examples.own_env:OwnEnv/NumberGuess-v0"})
    dropped, note = for_env_id(own, demo)
    assert dropped.env.env_kwargs == "{}" and dropped.env.eval_env_kwargs == "{}"
    assert note == (
        "--env.env-id examples.own_env:OwnEnv/NumberGuess-v0: the cpu-demo preset's "
        'env_kwargs {"width": 2, "height": 2, "key": false} are arguments of '
        "AgentGym/KeyDoor-v0, not passed on (give --env.env-kwargs to set them)")
    kept, note = for_env_id(own, demo, frozenset({"env_kwargs"}))
    assert kept is own and note is None  # given on the command line, even if equal
    assert for_env_id(demo, demo) == (demo, None)
    alfworld = PRESETS["cpu-alfworld"]
    mine = replace(alfworld, env={"env_id": "AgentGym/Scripted-v0",
                                  "env_kwargs": json.dumps({"num_rooms": 2})})
    changed, note = for_env_id(mine, alfworld, frozenset({"env_kwargs"}))
    assert changed.env.env_kwargs == json.dumps({"num_rooms": 2})
    assert changed.env.eval_env_kwargs == "{}" and "eval_env_kwargs" in note


def test_the_tiny_model_and_the_untrained_limit_are_checked():
    tiny = replace(TrainConfig(), model={"name_or_path": "tiny"},
                   generation={"engine": "vllm"})
    with pytest.raises(ConfigError, match="'tiny' is built in this process; "
                                          "generation.engine vllm cannot load it"):
        tiny.validate()
    with pytest.raises(ConfigError, match="max_untrained_iterations must be >= 0"):
        replace(TrainConfig(), run={"max_untrained_iterations": -1}).validate()
