"""``--prompt.response-prefix``: the prompt ends with it, the parser reads prefix + answer,
and its tokens are prompt tokens (never trained)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from algorithms.agent.prompts import PromptBuilder, render_user_message  # noqa: E402
from algorithms.agent.rollout import RolloutSettings, collect_rollout  # noqa: E402
from algorithms.config import PromptConfig, replace  # noqa: E402
from algorithms.presets import PRESETS  # noqa: E402
from tests.algorithms.tiny import make_tokenizer  # noqa: E402


class _Echo:
    """An engine that answers every prompt with the same fixed token ids."""

    def __init__(self, answer_ids):
        self.answer_ids = list(answer_ids)
        self.prompts = []

    def generate(self, prompts, **_):
        self.prompts += [list(p) for p in prompts]
        return [list(self.answer_ids) for _ in prompts]

    def release(self):
        pass


def _rollout(tokenizer, answer_ids, prompt, *, max_steps=1, **env_kwargs):
    """A rollout of two Scripted envs (one group) whose engine always answers
    ``answer_ids``; returns the batch and the engine (its ``prompts``)."""
    from agentgym.vector import make_vector_env

    venv = make_vector_env("AgentGym/Scripted-v0", 2, group_size=2, **env_kwargs)
    settings = RolloutSettings(group_size=2, max_steps=max_steps, temperature=1.0,
                               max_new_tokens=4, invalid_action_penalty=0.1, prompt=prompt,
                               keep_bootstrap_prompts=False)
    engine = _Echo(answer_ids)
    try:
        batch = collect_rollout(venv, engine, tokenizer, settings, group_task_ids=None,
                                seed=0)
    finally:
        venv.close()
    return batch, engine


def test_the_prompt_ends_with_the_prefix_and_counts_it():
    tokenizer = make_tokenizer()
    plain = PromptBuilder(tokenizer, PromptConfig(think=False)).build("t", [], "o", ())
    # (the test tokenizer splits on whitespace, hence the space before the tag)
    opened = PromptBuilder(tokenizer, PromptConfig(think=False, response_prefix=" <action>")
                           ).build("t", [], "o", ())
    assert opened.text == plain.text + " <action>"
    assert opened.token_ids[: len(plain.token_ids)] == plain.token_ids
    assert tokenizer.decode(list(opened.token_ids[len(plain.token_ids):])) == "<action>"


def test_the_parser_sees_prefix_plus_response_and_the_prefix_is_not_trained():
    tokenizer = make_tokenizer(action_tokens=True)
    answer = tokenizer("open red door </action>", add_special_tokens=False)["input_ids"]
    prompt = PromptConfig(think=False, response_prefix=" <action>",
                          show_admissible_actions=False)
    batch, _ = _rollout(tokenizer, answer, prompt, num_rooms=1)
    assert batch.log.actions[0] == "open red door" and batch.format_ok.all()
    # the response (what is trained) is exactly the sampled tokens; the prefix is prompt
    assert batch.response_mask[0].sum() == len(answer)
    prompt_text = tokenizer.decode([t for t, m in zip(batch.prompt_ids[0],
                                                      batch.prompt_mask[0], strict=True) if m])
    assert prompt_text.rstrip().endswith("<action>")


def test_action_list_lines_lists_one_action_per_line():
    message = render_user_message("t", [], "o", ("go north", "take key"),
                                  PromptConfig(action_list="lines"))
    assert "Choose one action from this list:\ngo north\ntake key" in message
    inline = render_user_message("t", [], "o", ("go north", "take key"), PromptConfig())
    assert "Actions you can take now: go north, take key." in inline


def test_cpu_demo_opens_the_action_tag_on_keydoor():
    demo = PRESETS["cpu-demo"]
    assert demo.prompt.response_prefix == "<action>" and not demo.prompt.think
    assert demo.env.env_id == "AgentGym/KeyDoor-v0"
    kwargs = json.loads(demo.env.env_kwargs)
    # the longest shortest solution of the demo house fits the step budget with room
    from agentgym.keydoor import KeyDoorEnv

    env = KeyDoorEnv(**kwargs)
    longest = max(env.shortest_solution(t) for t in env.task_ids)
    assert longest + 2 <= demo.env.max_steps
    assert replace(demo, prompt={"response_prefix": ""}).prompt.response_prefix == ""



def test_the_transcript_layout_opens_every_answer_with_the_prefix():
    tokenizer = make_tokenizer(action_tokens=True)
    wrong = tokenizer("open red door </action>", add_special_tokens=False)["input_ids"]
    prompt = PromptConfig(think=False, response_prefix=" <action>", layout="transcript",
                          show_admissible_actions=False)
    batch, engine = _rollout(tokenizer, wrong, prompt, max_steps=2, num_rooms=3,
                             num_tasks=1, hint=False)
    opener = tokenizer(" <action>", add_special_tokens=False)["input_ids"]
    assert len(engine.prompts) == 4  # two envs, two turns
    for ids in engine.prompts:
        assert ids[-len(opener):] == opener
    assert batch.format_ok.all()
