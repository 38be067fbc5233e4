"""Per-step prompts: content, history window, cutting from the history side."""

from __future__ import annotations

import pytest

from algorithms.agent.prompts import PromptBuilder, PromptTooLongError, render_user_message
from algorithms.config import PromptConfig
from algorithms.templates import load_template

HISTORY = [("obs one", "act one"), ("obs two", "act two"), ("obs three", "act three")]


def test_message_has_task_history_observation_actions_and_format():
    text = render_user_message("Find the key.", HISTORY[-2:], "You see a box.",
                               ("open box", "look"), PromptConfig())
    assert "Your task: Find the key." in text
    assert text.index("obs two") < text.index("act two") < text.index("obs three")
    assert "Now you see: You see a box." in text
    assert "Actions you can take now: open box, look." in text
    assert "<think>" in text and "<action>" in text


def test_message_without_admissible_actions_or_think():
    config = PromptConfig(think=False, show_admissible_actions=False)
    text = render_user_message("t", [], "o", ("a", "b"), config)
    assert "Actions you can take" not in text and "<think>" not in text
    assert "<action>" in text


def test_searchqa_instruction():
    text = render_user_message("Who?", [], "Question: who?", (),
                               PromptConfig(env_style="searchqa"))
    assert "<search>" in text and "<answer>" in text and "<action>" not in text


class _CharTokenizer:
    """One token per character; a chat template-free tokenizer."""

    chat_template = None

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


def test_builder_windows_history():
    builder = PromptBuilder(_CharTokenizer(), PromptConfig(history_window=2))
    built = builder.build("t", HISTORY, "now", ())
    assert built.history_used == 2 and built.history_dropped == 0 and not built.was_cut
    assert "obs one" not in built.text and "obs two" in built.text
    assert built.text.startswith("User: ") and built.text.endswith("Assistant:")
    assert list(built.token_ids) == [ord(c) for c in built.text]


def test_builder_cuts_history_first_then_the_observation_start():
    full = PromptBuilder(_CharTokenizer(), PromptConfig(history_window=2)).build(
        "t", HISTORY, "now", ())
    budget = len(full.token_ids) - 5
    built = PromptBuilder(_CharTokenizer(), PromptConfig(history_window=2,
                                                         max_prompt_tokens=budget)).build(
        "t", HISTORY, "now", ())
    assert built.history_used == 1 and built.history_dropped == 1 and built.was_cut
    assert "obs three" in built.text and "obs two" not in built.text
    assert len(built.token_ids) <= budget

    long_observation = "x" * 200 + "THE END"
    no_history = PromptBuilder(_CharTokenizer(), PromptConfig(history_window=0)).build(
        "t", [], long_observation, ())
    budget = len(no_history.token_ids) - 50
    cut = PromptBuilder(_CharTokenizer(), PromptConfig(history_window=2,
                                                       max_prompt_tokens=budget)).build(
        "t", HISTORY, long_observation, ())
    assert cut.history_used == 0 and cut.history_dropped == 2
    assert cut.observation_chars_cut > 0 and "THE END" in cut.text and "[...]" in cut.text
    assert len(cut.token_ids) <= budget
    assert len(cut.token_ids) > budget - 2  # the largest observation tail that fits


def test_builder_raises_when_nothing_fits():
    builder = PromptBuilder(_CharTokenizer(), PromptConfig(max_prompt_tokens=20))
    with pytest.raises(PromptTooLongError, match="max_prompt_tokens=20"):
        builder.build("a long task " * 10, [], "obs", ("look",))


def test_builder_cuts_the_tail_of_a_long_action_list_last():
    """An action list too long for the budget loses its tail (counted, and said in the
    prompt) instead of failing; the observation gets the room left."""
    actions = tuple(f"take item {i}" for i in range(40))
    config = PromptConfig(history_window=2)
    bare = PromptBuilder(_CharTokenizer(), config).build("t", [], "", actions[:10])
    budget = len(bare.token_ids) + 30
    built = PromptBuilder(_CharTokenizer(), PromptConfig(history_window=2,
                                                         max_prompt_tokens=budget)).build(
        "t", HISTORY, "room description " * 20, actions)
    assert len(built.token_ids) <= budget and built.was_cut
    assert built.history_dropped == 2 and 0 < built.actions_dropped < 40
    shown = 40 - built.actions_dropped
    assert f"take item {shown - 1}," in built.text and f"take item {shown}," not in built.text
    assert f"and {built.actions_dropped} more not shown." in built.text
    # one more action would not have fitted
    longer = render_user_message("t", [], "[...] ", actions[:shown + 1], config,
                                 actions_omitted=built.actions_dropped - 1)
    assert len(_CharTokenizer()(f"User: {longer}\nAssistant:")["input_ids"]) > budget


def test_builder_uses_the_chat_template():
    pytest.importorskip("transformers")
    from tests.algorithms.tiny import make_tokenizer

    tokenizer = make_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}")
    built = PromptBuilder(tokenizer, PromptConfig()).build("t", [], "o", ())
    assert built.text.startswith("<user> ") and built.text.endswith("<assistant>")


def test_builder_sends_raw_text_without_the_chat_template():
    pytest.importorskip("transformers")
    from tests.algorithms.tiny import make_tokenizer

    tokenizer = make_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}>{% endfor %}"
    config = PromptConfig(chat_template=False)
    built = PromptBuilder(tokenizer, config).build("t", [], "o", ())
    assert built.text == render_user_message("t", [], "o", (), config)


TEMPLATE = ("Task: {task}\nDone {step_count} step(s); last {history_length}:\n{history}\n"
            "Step {current_step}, you see: {observation}\nChoose from [{admissible_actions}] "
            "{{literal}}")


def test_template_fills_every_placeholder(tmp_path):
    path = tmp_path / "template.txt"
    path.write_text(TEMPLATE, encoding="utf-8")
    builder = PromptBuilder(_CharTokenizer(), PromptConfig(template=str(path),
                                                           history_window=2))
    built = builder.build(" Find the key. ", HISTORY, " a box ", ("open box", "look"))
    expected = ("Task: Find the key.\nDone 3 step(s); last 2:\n"
                "[Observation 2: 'obs two', Action 2: 'act two']\n"
                "[Observation 3: 'obs three', Action 3: 'act three']\n"
                "Step 4, you see: a box\nChoose from [open box, look] {literal}")
    assert built.text == f"User: {expected}\nAssistant:"
    first = builder.build("t", [], "o", ())
    assert "Done 0 step(s); last 0:\n\nStep 1, you see: o" in first.text
    hidden = PromptBuilder(_CharTokenizer(), PromptConfig(template=str(path),
                                                          show_admissible_actions=False))
    assert "Choose from [] " in hidden.build("t", [], "o", ("a",)).text


def test_template_cuts_history_then_observation_like_our_wording(tmp_path):
    path = tmp_path / "template.txt"
    path.write_text(TEMPLATE, encoding="utf-8")
    config = PromptConfig(template=str(path), history_window=2)
    full = PromptBuilder(_CharTokenizer(), config).build("t", HISTORY, "now", ())
    budget = len(full.token_ids) - 5
    built = PromptBuilder(_CharTokenizer(), PromptConfig(
        template=str(path), history_window=2, max_prompt_tokens=budget)).build(
        "t", HISTORY, "now", ())
    assert built.history_used == 1 and "[Observation 3:" in built.text
    assert "Observation 2" not in built.text and len(built.token_ids) <= budget


@pytest.mark.parametrize(("text", "message"), [
    ("{task} {goal}", r"unknown placeholder \{goal\}; known placeholders: \{task\}, "),
    ("{}", r"unknown placeholder \{\}"),
    ("{task.upper}", r"unknown placeholder \{task.upper\}"),
    ("{task!r}", "format spec or conversion"),
    ("{step_count:03d}", "format spec or conversion"),
    ("{task", "literal braces"),
])
def test_template_errors_name_the_known_placeholders(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_template(path)


def test_template_is_checked_by_config_validation_before_any_model_loads(tmp_path):
    from algorithms.config import TrainConfig, replace

    path = tmp_path / "bad.txt"
    path.write_text("{task} {obs}", encoding="utf-8")
    with pytest.raises(ValueError, match=r"prompt.template: .*unknown placeholder \{obs\}"):
        replace(TrainConfig(), prompt={"template": str(path)}).validate()
    with pytest.raises(ValueError, match="prompt.template: .*No such file"):
        replace(TrainConfig(), prompt={"template": str(tmp_path / "none.txt")}).validate()


def test_template_info_placeholders_read_the_envs_info(tmp_path):
    """``{info[KEY]}`` writes the current info's value; a list is its items joined
    (verl-agent's EZPoints prompt writes the formula so); ``{{``/``}}`` stay literal."""
    from algorithms.templates import info_keys, info_text

    path = tmp_path / "template.txt"
    path.write_text("Formula: '{info[Formula]}' of {info[Cards]}, {info[7]} {{x}}",
                    encoding="utf-8")
    builder = PromptBuilder(_CharTokenizer(), PromptConfig(template=str(path)))
    info = {"Formula": [4, "+"], "Cards": ("H4", "C8"), "7": 0.5, "task": "t"}
    built = builder.build("t", [], "o", (), info=info)
    assert "Formula: '4+' of H4C8, 0.5 {x}" in built.text
    assert "Formula: '' of" in builder.build("t", [], "o", (),
                                             info={**info, "Formula": []}).text
    assert info_keys(load_template(path)) == ("Formula", "Cards", "7")
    assert (info_text([]), info_text(12), info_text("ab")) == ("", "12", "ab")
    with pytest.raises(ValueError, match=r"reads \{info\[Formula\]\}, but the env's info has "
                                         r"no key 'Formula' \(its keys: \['task'\]\)"):
        builder.build("t", [], "o", (), info={"task": "t"})
    for bad in ("{info[]}", "{info[a][b]}", "{infos[a]}"):
        path.write_text(bad, encoding="utf-8")
        with pytest.raises(ValueError, match="unknown placeholder"):
            load_template(path)
