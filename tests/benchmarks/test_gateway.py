"""benchmarks/gateway.py on the tiny model: the same tokens through the gateway and
in-process, and concurrent sessions batched into one engine call."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from algorithms.engines.hf import HFEngine
from algorithms.gateway.server import Gateway
from benchmarks.gateway import TimedEngine, keydoor_chats, load, overhead, throughput


def test_the_gateway_benchmark_samples_the_same_tokens_and_batches_sessions():
    torch.set_num_threads(1)
    chats, tools = keydoor_chats(4)
    policy = load("tiny")
    engine = HFEngine(policy.model, policy.tokenizer)
    args = SimpleNamespace(calls=2, rounds=1, repeats=1, max_tokens=8)
    with Gateway(TimedEngine(engine), policy.tokenizer, max_prompt_tokens=4096) as gateway:
        cost = overhead(gateway, engine, chats, tools, args)
        rate = throughput(gateway, engine, chats, tools, 4, args)
        assert gateway.open_sessions == 0
    assert cost["same"] == 2 and cost["own_ms"] > 0
    assert rate["mean_batch"] == 4.0 and rate["gateway"] > 0 and rate["direct"] > 0
