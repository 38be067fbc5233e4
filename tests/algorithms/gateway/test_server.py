"""The gateway through the openai SDK with a scripted engine and SmolLM2's tokenizer:
tool calls, exact ids across turns, breaks, errors, fuzzed bodies."""

from __future__ import annotations

import json
from collections import deque

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from algorithms.gateway.joining import join_calls
from algorithms.gateway.server import Gateway, session_token
from tests.algorithms.gateway.helpers import ScriptedEngine

CALL = '<tool_call>\n{"name": "go", "arguments": {"direction": "north"}}\n</tool_call>'
TASK = [{"role": "system", "content": "You play a house."},
        {"role": "user", "content": "Open the door. You see a hall."}]


def ids(tokenizer, text, end=True):
    return [*tokenizer(text, add_special_tokens=False)["input_ids"], *([2] if end else [])]


@pytest.fixture
def script():
    return deque()


@pytest.fixture
def engine(script):
    return ScriptedEngine(lambda prompt: script.popleft() if script else [2])


@pytest.fixture
def gateway(engine, smollm2):
    with Gateway(engine, smollm2, max_prompt_tokens=600) as gw:
        yield gw


def client(url, key="sk-anything"):
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=60)


def test_a_tool_call_comes_back_parsed_with_its_log_probs(gateway, script, smollm2,
                                                          keydoor_tools):
    script.append(ids(smollm2, CALL))
    url = gateway.open_session({"task_id": 0})
    reply = client(url).chat.completions.create(model="any", messages=TASK,
                                                tools=keydoor_tools, logprobs=True)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "go"
    assert json.loads(call.function.arguments) == {"direction": "north"}
    assert [t.logprob for t in choice.logprobs.content] == [-0.5] * len(ids(smollm2, CALL))
    assert reply.usage.completion_tokens == len(ids(smollm2, CALL))
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    (record,) = gateway.close_session(url).calls
    assert record.tool_status == "ok" and record.completion_ids == tuple(ids(smollm2, CALL))
    assert record.logprobs == (-0.5,) * len(record.completion_ids)
    assert record.messages == TASK and record.tools == keydoor_tools
    assert "<tools>" in smollm2.decode(record.prompt_ids)  # AgentGym's tool template


@pytest.mark.parametrize("answer, status", [
    ('<tool_call>{"name": "go", "arguments": {"direction": "up"}}</tool_call>', "bad_arguments"),
    ('<tool_call>{"name": "go", "arguments": {"direction": </tool_call>', "invalid_json"),
    ('<tool_call>{"name": "fly", "arguments": {}}</tool_call>', "unknown_tool"),
    ('<tool_call>{"name": "go", "arguments": {"direction": "north"', "unclosed"),
    ("I will go north.", "no_call")])
def test_a_malformed_call_is_content_never_an_error(gateway, script, smollm2, keydoor_tools,
                                                    answer, status):
    script.append(ids(smollm2, answer))
    url = gateway.open_session({})
    choice = client(url).chat.completions.create(model="m", messages=TASK,
                                                 tools=keydoor_tools).choices[0]
    assert choice.message.tool_calls is None and choice.message.content == answer
    assert choice.finish_reason == "stop"
    assert gateway.close_session(url).calls[0].tool_status == status


def test_tool_choice_none_reads_no_call_and_content_ends_before_a_stop_string(
        gateway, script, smollm2, keydoor_tools):
    script.append(ids(smollm2, CALL))
    script.append(ids(smollm2, "go north</tool_call> and more", end=False))
    url = gateway.open_session({})
    sdk = client(url)
    choice = sdk.chat.completions.create(model="m", messages=TASK, tools=keydoor_tools,
                                         tool_choice="none").choices[0]
    assert choice.message.content == CALL and choice.message.tool_calls is None
    choice = sdk.chat.completions.create(model="m", messages=TASK, stop=["</tool_call>"],
                                         max_tokens=50).choices[0]
    assert choice.message.content == "go north" and choice.finish_reason == "stop"
    record = gateway.close_session(url)
    assert record.calls[0].tool_status is None and record.calls[1].tool_status is None
    # the ids keep what was sampled, the stop string and all
    assert record.calls[1].completion_ids == tuple(ids(smollm2, "go north</tool_call> and more",
                                                       end=False))


@pytest.mark.parametrize("cap, asked", [
    (None, {"max_completion_tokens": 3}),  # the request's own max_tokens
    # a trainer caps responses at its recipe's length: a loop asking more is cut there,
    # and the cut response must say so (not "stop", as an ended one would)
    (3, {"max_tokens": 64})])
def test_max_tokens_cuts_and_says_length(engine, script, smollm2, cap, asked):
    script.append(ids(smollm2, "one two three four five", end=False))
    with Gateway(engine, smollm2, max_prompt_tokens=600, max_tokens_cap=cap) as gateway:
        url = gateway.open_session({})
        choice = client(url).chat.completions.create(model="m", messages=TASK,
                                                     **asked).choices[0]
        assert choice.finish_reason == "length"
        assert gateway.close_session(url).calls[0].completion_ids == tuple(
            ids(smollm2, "one two three four five", end=False)[:3])


def test_a_continued_chat_trains_on_the_sampled_ids_not_their_retokenization(
        gateway, script, smollm2, keydoor_tools):
    # "hello" sampled as two ids, "hel" "lo": its text tokenizes to one id
    odd = [*smollm2.convert_tokens_to_ids(["hel", "lo"]), *ids(smollm2, "\n" + CALL)]
    script.extend([odd, ids(smollm2, CALL), ids(smollm2, "done")])
    url = gateway.open_session({})
    sdk = client(url)
    messages = list(TASK)
    for turn in range(3):
        reply = sdk.chat.completions.create(model="m", messages=messages, tools=keydoor_tools)
        message = reply.choices[0].message
        assert message.tool_calls or turn == 2
        messages.append(message.model_dump(exclude_none=True))
        if message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id,
                             "content": f"You are in room {turn}."})
    record = gateway.close_session(url)
    first, second, third = record.calls
    assert first.completion_ids == tuple(odd) and first.response["content"] == "hello"
    assert second.prompt_ids[:len(first.prompt_ids) + len(odd)] == first.prompt_ids + tuple(odd)
    assert (second.bridge, third.bridge) == ("extended", "extended")
    assert second.joined and third.joined and record.joins == 2 and record.breaks == 0
    # rendered afresh, the same chat has other ids: "hello" is one token there
    fresh = smollm2.apply_chat_template(messages[:4], tools=keydoor_tools, tokenize=False,
                                        add_generation_prompt=True,
                                        chat_template=gateway.renderer.template)
    assert smollm2(fresh, add_special_tokens=False)["input_ids"] != list(second.prompt_ids)
    assert smollm2.decode(second.prompt_ids) == fresh  # the same text
    (row,) = join_calls(record.calls).rows
    assert row.ids == third.prompt_ids + third.completion_ids
    for call, (start, end) in zip(record.calls, row.completion_spans, strict=True):
        assert row.ids[start:end] == call.completion_ids
        assert set(row.loss_mask[start:end]) == {1}
    assert sum(row.loss_mask) == sum(len(c.completion_ids) for c in record.calls)
    # what the engine was given is what was recorded
    assert [(c.prompt_ids, c.completion_ids) for c in record.calls] == [
        (p, r) for p, r in gateway.engine.given]


def test_a_loop_that_rewrites_its_history_starts_a_new_row(gateway, script, smollm2,
                                                           keydoor_tools):
    script.extend([ids(smollm2, CALL), ids(smollm2, CALL), ids(smollm2, CALL)])
    url = gateway.open_session({})
    sdk = client(url)
    messages = list(TASK)
    message = sdk.chat.completions.create(model="m", messages=messages,
                                          tools=keydoor_tools).choices[0].message
    messages += [message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": "a", "content": "You see a key."}]
    sdk.chat.completions.create(model="m", messages=messages, tools=keydoor_tools)
    # the loop summarizes its history: the earlier turns are gone
    summary = [TASK[0], {"role": "user", "content": "So far: went north. You see a key."}]
    sdk.chat.completions.create(model="m", messages=summary, tools=keydoor_tools)
    record = gateway.close_session(url)
    assert [c.bridge for c in record.calls] == ["fresh", "extended", "fresh"]
    assert [c.joined for c in record.calls] == [False, True, False]
    assert record.joins == 1 and record.breaks == 1
    joined = join_calls(record.calls)
    assert (joined.joins, joined.breaks, len(joined.rows)) == (1, 1, 2)
    assert joined.rows[1].call_indices == (2,)


def test_an_answer_the_loop_edits_is_rendered_afresh(gateway, script, smollm2):
    script.extend([ids(smollm2, "go north"), ids(smollm2, "ok")])
    url = gateway.open_session({})
    sdk = client(url)
    sdk.chat.completions.create(model="m", messages=TASK)
    edited = [*TASK, {"role": "assistant", "content": "go south"},
              {"role": "user", "content": "and?"}]
    sdk.chat.completions.create(model="m", messages=edited)
    record = gateway.close_session(url)
    assert record.calls[1].bridge == "fresh" and record.breaks == 1


def test_unknown_and_closed_sessions_and_other_paths_are_404(gateway):
    url = gateway.open_session({})
    with pytest.raises(openai.NotFoundError):
        client(url.replace(session_token(url), "not-a-session")).models.list()
    assert client(url).models.list().data[0].id == "agentgym-policy"
    gateway.close_session(url)
    with pytest.raises(openai.NotFoundError) as raised:
        client(url).chat.completions.create(model="m", messages=TASK)
    assert raised.value.body["code"] == "session_not_found"
    with pytest.raises(KeyError):
        gateway.close_session(url)
    response = httpx.post(f"{gateway.base_url}/v1/chat/completions", json={"messages": TASK})
    assert response.status_code == 404 and "error" in response.json()


def test_any_key_is_accepted_and_tokens_are_unguessable(gateway):
    urls = [gateway.open_session({"i": i}) for i in range(50)]
    tokens = {session_token(url) for url in urls}
    assert len(tokens) == 50 and all(len(t) >= 32 for t in tokens)
    assert httpx.get(f"{urls[0]}/models").status_code == 200  # no key at all
    assert client(urls[1], key="sk-" + "x" * 200).models.list().data
    assert urls[0].startswith("http://127.0.0.1:") and urls[0].endswith("/v1")


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": "hi"}, "messages"),
    ({"messages": TASK, "n": 2}, "n"),
    ({"messages": TASK, "stream": True}, "stream"),
    ({"messages": TASK, "temperature": -1}, "temperature"),
    ({"messages": TASK, "temperature": "hot"}, "temperature"),
    ({"messages": TASK, "max_tokens": 0}, "max_tokens"),
    ({"messages": TASK, "max_tokens": 10**9}, "max_tokens"),
    ({"messages": TASK, "stop": [1]}, "stop"),
    ({"messages": TASK, "tools": [{"type": "function", "function": {"name": "a b"}}]},
     "tools[0].function.name"),
    ({"messages": TASK, "tools": "go"}, "tools"),
    ({"messages": TASK, "tool_choice": {"type": "function", "function": {"name": "x"}}},
     "tool_choice")])
def test_a_malformed_body_is_400_in_openai_format(gateway, body, param):
    url = gateway.open_session({})
    response = httpx.post(f"{url}/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"] and "code" in error
    assert gateway.close_session(url).calls == []


def test_a_body_that_is_not_json_is_400(gateway):
    url = gateway.open_session({})
    for raw in (b"{", b"[1, 2]", b"\xff\xfe", b"", b"null"):
        response = httpx.post(f"{url}/chat/completions", content=raw)
        assert response.status_code == 400 and response.json()["error"]["param"] is None


def test_a_prompt_over_the_limit_is_400_naming_it(gateway):
    url = gateway.open_session({})
    with pytest.raises(openai.BadRequestError) as raised:
        client(url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "word " * 2000}])
    assert "max_prompt_tokens of 600" in raised.value.body["message"]
    assert raised.value.body["code"] == "context_length_exceeded"


def test_completions_take_text_or_ids(gateway, script, smollm2):
    script.extend([ids(smollm2, " north"), ids(smollm2, " south", end=False)])
    url = gateway.open_session({})
    sdk = client(url)
    reply = sdk.completions.create(model="m", prompt="go", max_tokens=5, logprobs=1)
    assert reply.choices[0].text == " north" and reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].logprobs.token_logprobs == [-0.5] * len(ids(smollm2, " north"))
    first = gateway.record(url).calls[0]
    prompt = [*first.prompt_ids, *first.completion_ids, 17]
    reply = sdk.completions.create(model="m", prompt=prompt, max_tokens=5)
    assert reply.choices[0].text == " south"
    record = gateway.close_session(url)
    assert [c.bridge for c in record.calls] == ["text", "ids"]
    assert record.calls[1].prompt_ids == tuple(prompt) and record.calls[1].joined
    with pytest.raises(openai.NotFoundError):
        sdk.completions.create(model="m", prompt="go")


def test_pinned_sampling_overrides_the_request(engine, smollm2):
    with Gateway(engine, smollm2, max_prompt_tokens=600, temperature=0.7, top_p=0.9) as gw:
        url = gw.open_session({})
        client(url).chat.completions.create(model="m", messages=TASK, temperature=0.0,
                                            top_p=0.5, seed=3, max_tokens=7)
        (call,) = gw.close_session(url).calls
    assert engine.settings[-1] == {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 7,
                                   "seed": 3, "stop": ()}
    assert call.sampling["temperature"] == 0.7 and engine.top_p == 1.0  # put back


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
FIELDS = st.sampled_from(["messages", "tools", "tool_choice", "temperature", "top_p", "n",
                          "max_tokens", "max_completion_tokens", "stop", "seed", "logprobs",
                          "top_logprobs", "prompt", "stream", "parallel_tool_calls", "echo"])
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool", "x"])},
                                optional={"content": JSON, "tool_calls": JSON,
                                          "tool_call_id": JSON})
BODY = st.dictionaries(FIELDS, JSON, max_size=6) | st.fixed_dictionaries(
    {"messages": st.lists(MESSAGE, max_size=4)},
    optional={"tools": JSON, "max_tokens": st.integers(-3, 40), "stop": JSON,
              "tool_choice": JSON, "temperature": JSON})


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODY, path=st.sampled_from(["chat/completions", "completions"]))
def test_fuzzed_bodies_get_an_answer_or_a_400(gateway, body, path):
    url = gateway.open_session({})
    response = httpx.post(f"{url}/{path}", content=json.dumps(body).encode(), timeout=60)
    assert response.status_code in (200, 400), response.text
    assert ("choices" if response.status_code == 200 else "error") in response.json()
    gateway.close_session(url)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_fuzzed_bytes_get_a_400(gateway, raw):
    url = gateway.open_session({})
    response = httpx.post(f"{url}/chat/completions", content=raw, timeout=60)
    assert response.status_code == 400
    gateway.close_session(url)


def test_the_agent_and_engine_packages_do_not_import_the_gateway():
    import ast
    from pathlib import Path

    root = Path(__file__).parents[3] / "algorithms"
    for folder in ("agent", "engines"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                assert not any(n.startswith("algorithms.gateway") for n in names), path


TRIMMING = ("{%- for message in messages -%}{{- '<|im_start|>' + message.role + '\\n' + "
            "(((message.content or '') | trim) if message.role == 'assistant' else "
            "message.content) + '<|im_end|>\\n' -}}{%- endfor -%}"
            "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")


@pytest.mark.parametrize("rewrite, how, joined", [("keep", "kept", True),
                                                  ("end", "fresh", False)])
def test_a_template_that_rewrites_an_answer_keeps_the_ids_or_renders_afresh(
        smollm2, rewrite, how, joined):
    answer = ids(smollm2, "  go north  ")
    engine = ScriptedEngine(lambda prompt: answer)
    with Gateway(engine, smollm2, max_prompt_tokens=600, chat_template=TRIMMING,
                 rewrite=rewrite) as gw:
        url = gw.open_session({})
        sdk = client(url)
        message = sdk.chat.completions.create(model="m", messages=TASK).choices[0].message
        assert message.content == "  go north  "
        sdk.chat.completions.create(model="m", messages=[
            *TASK, message.model_dump(exclude_none=True), {"role": "user", "content": "ok"}])
        record = gw.close_session(url)
    first, second = record.calls
    assert second.bridge == how and second.joined is joined
    if joined:  # the answer's ids as sampled, though the template trims its text
        assert second.prompt_ids[:len(first.prompt_ids) + len(answer)] == \
            first.prompt_ids + tuple(answer)


def test_a_body_over_the_limit_is_413_and_the_server_goes_on(gateway):
    url = gateway.open_session({})
    response = httpx.post(f"{url}/chat/completions", content=b" " * (33 * 1024 * 1024),
                          timeout=120)
    assert response.status_code == 413 and "error" in response.json()
    assert httpx.get(f"{url}/models").status_code == 200


def test_a_stopped_gateway_has_no_url_and_refuses_sessions(engine, smollm2):
    gateway = Gateway(engine, smollm2, max_prompt_tokens=100).start()
    url = gateway.open_session({})
    gateway.stop()
    with pytest.raises(RuntimeError):
        print(gateway.base_url)
    with pytest.raises(RuntimeError):
        gateway.open_session({})
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", timeout=5)
    with pytest.raises(ValueError):
        Gateway(engine, smollm2, max_prompt_tokens=0)
