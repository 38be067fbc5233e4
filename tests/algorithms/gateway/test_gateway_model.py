"""The gateway in front of a real engine (the tiny smoke policy, HF engine): the ids
recorded are the ids the engine sampled, and concurrent sessions share engine calls."""

from __future__ import annotations

import threading

import openai
import pytest

from algorithms.engines.hf import HFEngine
from algorithms.gateway.joining import join_calls
from algorithms.gateway.server import Gateway
from tests.algorithms.gateway.helpers import RecordingEngine


@pytest.fixture(scope="module")
def engine(tiny):
    return RecordingEngine(HFEngine(tiny.model, tiny.tokenizer, batch_size=16))


def play(url, tools, turns, results, index):
    sdk = openai.OpenAI(base_url=url, api_key="k", max_retries=0, timeout=120)
    messages = [{"role": "user", "content": f"Your task: open the door. You see room {index}."}]
    for turn in range(turns):
        reply = sdk.chat.completions.create(model="policy", messages=messages, tools=tools,
                                            max_tokens=12, temperature=1.0, logprobs=True)
        messages.append(reply.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": f"c{turn}",
                         "content": "You are in the kitchen."})
    results[index] = messages


def test_a_multi_turn_session_records_the_ids_the_engine_sampled(engine, tiny, keydoor_tools):
    with Gateway(engine, tiny.tokenizer, max_prompt_tokens=2048) as gw:
        url = gw.open_session({"task_id": 1})
        before = len(engine.given)
        results: dict[int, list] = {}
        play(url, keydoor_tools, 4, results, 0)
        record = gw.close_session(url)
    given = engine.given[before:]
    assert len(record.calls) == len(given) == 4
    for call, (prompt, sampled, logprobs) in zip(record.calls, given, strict=True):
        assert call.prompt_ids == prompt and call.completion_ids == sampled
        assert call.logprobs == logprobs and len(logprobs) == len(sampled)
    assert [c.bridge for c in record.calls] == ["fresh", "extended", "extended", "extended"]
    assert record.joins == 3 and record.breaks == 0
    (row,) = join_calls(record.calls).rows
    for (start, end), (_, sampled, logprobs) in zip(row.completion_spans, given, strict=True):
        assert row.ids[start:end] == sampled and row.logprobs[start:end] == logprobs
    assert len({c.anchor for c in record.calls}) >= 2  # the first answers the task


def test_sixteen_concurrent_sessions_share_engine_calls(engine, tiny, keydoor_tools):
    with Gateway(engine, tiny.tokenizer, max_prompt_tokens=20485) as gw:
        urls = [gw.open_session({"task_id": i}) for i in range(16)]
        calls_before = gw.queue.engine_calls
        results: dict[int, list] = {}
        threads = [threading.Thread(target=play, args=(url, keydoor_tools, 3, results, i))
                   for i, url in enumerate(urls)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        engine_calls = gw.queue.engine_calls - calls_before
        records = [gw.close_session(url) for url in urls]
        bridge = gw.renderer.bridge(keydoor_tools)
    assert len(results) == 16
    assert all(len(r.calls) == 3 and r.joins == 2 for r in records)
    assert engine_calls < 48 / 2, engine_calls  # batched: far fewer calls than requests
    sampled = {(p, r) for p, r, _ in engine.given}
    assert all((c.prompt_ids, c.completion_ids) in sampled for r in records for c in r.calls)
    # each session holds its own loop's calls: its first prompt is its own task's
    for index, record in enumerate(records):
        first = record.calls[0]
        assert first.messages[0]["content"].endswith(f"room {index}.")
        assert first.prompt_ids == bridge.start(first.messages).token_ids
        assert [m["content"] for m in first.messages] == [results[index][0]["content"]]
