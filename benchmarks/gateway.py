"""The gateway's cost: each call through it against the engine called in-process on the
same prompt, and samples/s of 1, 4 and 16 concurrent sessions against the engine's own
batches of that size; the tiny smoke model and SmolLM2-135M (the default policy).

Prompts: the first turn of a KeyDoor task in the tool-call format (a system message, the
task and the first observation, the env's tools), tasks from reset seeds 0, 1, ...;
sampled at temperature 1 up to ``--max-tokens`` tokens with the HF engine, in float32.

* **Overhead per call**: ``--calls`` calls one after another, each through the gateway
  (the openai SDK, HTTP on loopback, the template, the parser, the recording) and, on
  the same prompt ids and seed, ``engine.generate`` called in-process at batch 1. The
  same seed gives the same tokens both ways (checked), so the difference is the
  gateway's own time: printed as the difference of the medians and the median of the
  paired differences. On a loaded machine two runs of one generation differ by more
  than that, so the gateway's own time is also measured within each call: its round
  trip less the engine call it made (timed in the gateway's process).
* **Throughput**: ``c`` sessions, each a thread making ``--rounds`` calls in a row
  (each the first turn of its own task), against the in-process engine given batches of
  ``c`` of the same prompts ``--rounds`` times; ``--repeats`` measurements of each,
  alternated (the load drifts), their medians and the median ratio of the pairs. Both
  sides sample with the same seeds, so that they sample alike (a response's length
  sets its cost: with random seeds one session's figure was mostly its lengths' luck).
  samples/s = responses / wall seconds. The loops' threads share the trainer's process
  (and its GIL) here, as threads would.
  The gateway batches the sessions' calls (it waits up to ``batch_max_wait_s`` for
  every open session to call; its default unless ``--max-wait`` says); its mean engine
  batch is printed.

Usage::

    nice -n 10 python -m benchmarks.gateway
    python -m benchmarks.gateway --models tiny --calls 4   # quicker
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Any

import torch

SYSTEM = "You are an agent in a text environment. Act only by calling one of the tools."


def keydoor_chats(count: int) -> tuple[list[list[dict[str, str]]], list[dict[str, Any]]]:
    """``count`` first-turn chats of KeyDoor tasks (reset seeds 0..count-1) and the tools."""
    import gymnasium as gym

    import agentgym  # noqa: F401
    from agentgym.tools import env_tools

    kwargs = {"width": 2, "height": 2, "key": False}
    env = gym.make("AgentGym/KeyDoor-v0", **kwargs)
    chats = []
    for seed in range(count):
        observation, info = env.reset(seed=seed)
        chats.append([{"role": "system", "content": SYSTEM},
                      {"role": "user", "content": f"Your task: {info['task']}\n\n"
                                                  f"You see: {observation}"}])
    env.close()
    return chats, env_tools("AgentGym/KeyDoor-v0", kwargs).schemas


def load(model: str) -> Any:
    from algorithms.config import ModelConfig, replace
    from algorithms.presets import PRESETS
    from algorithms.training.policy import load_policy
    from algorithms.training.tiny_model import load_tiny_policy

    if model == "tiny":
        return load_tiny_policy(replace(PRESETS["cpu-demo-tools"],
                                        model={"name_or_path": "tiny"}), torch.device("cpu"))
    return load_policy(ModelConfig(dtype="float32"), torch.device("cpu"))


class TimedEngine:
    """An engine whose calls are timed (``last_s``: the latest call's seconds)."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.last_s = 0.0

    @property
    def top_p(self) -> float:
        return self.engine.top_p

    @top_p.setter
    def top_p(self, value: float) -> None:
        self.engine.top_p = value

    def generate(self, prompts: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.engine.generate(prompts, **kwargs)
        finally:
            self.last_s = time.perf_counter() - start


def overhead(gateway: Any, engine: Any, chats: list, tools: list, args: Any) -> dict[str, float]:
    import openai

    bridge = gateway.renderer.bridge(tools)
    url = gateway.open_session({})
    client = openai.OpenAI(base_url=url, api_key="k", max_retries=0, timeout=600)
    through, direct, own, same = [], [], [], 0
    for index in range(args.calls):
        chat = chats[index % len(chats)]
        ids = list(bridge.start(chat).token_ids)
        start = time.perf_counter()
        (row,) = engine.generate([ids], temperature=1.0, max_new_tokens=args.max_tokens,
                                 seed=1000 + index)
        direct.append(time.perf_counter() - start)
        start = time.perf_counter()
        client.chat.completions.create(model="policy", messages=chat, tools=tools,
                                       max_tokens=args.max_tokens, seed=1000 + index)
        through.append(time.perf_counter() - start)
        own.append(through[-1] - gateway.engine.last_s)
        same += gateway.record(url).calls[-1].completion_ids == tuple(row)
    gateway.close_session(url)
    return {"direct_ms": 1000 * statistics.median(direct),
            "gateway_ms": 1000 * statistics.median(through),
            "paired_ms": 1000 * statistics.median(t - d for t, d in zip(through, direct,
                                                                        strict=True)),
            "own_ms": 1000 * statistics.median(own), "same": same}


def throughput(gateway: Any, engine: Any, chats: list, tools: list, sessions: int,
               args: Any) -> dict[str, float]:
    import openai

    bridge = gateway.renderer.bridge(tools)
    prompts = [list(bridge.start(chats[i % len(chats)]).token_ids) for i in range(sessions)]

    def direct_rate(repeat: int) -> float:
        start = time.perf_counter()
        for round_ in range(args.rounds):
            engine.generate(prompts, temperature=1.0, max_new_tokens=args.max_tokens,
                            seed=100 * repeat + round_)
        return sessions * args.rounds / (time.perf_counter() - start)

    def gateway_rate(repeat: int) -> float:
        urls = [gateway.open_session({"i": i}) for i in range(sessions)]
        clients = [openai.OpenAI(base_url=url, api_key="k", max_retries=0, timeout=600)
                   for url in urls]

        def play(index: int) -> None:
            for round_ in range(args.rounds):
                clients[index].chat.completions.create(
                    model="policy", messages=chats[index % len(chats)], tools=tools,
                    max_tokens=args.max_tokens, seed=100 * repeat + round_)

        threads = [threading.Thread(target=play, args=(i,)) for i in range(sessions)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        rate = sessions * args.rounds / (time.perf_counter() - start)
        for url in urls:
            gateway.close_session(url)
        return rate

    calls, requests = gateway.queue.engine_calls, gateway.queue.requests
    directs, throughs = [], []
    for repeat in range(args.repeats):  # alternated: the machine's load drifts
        directs.append(direct_rate(repeat))
        throughs.append(gateway_rate(repeat))
    batch = (gateway.queue.requests - requests) / max(1, gateway.queue.engine_calls - calls)
    return {"direct": statistics.median(directs), "gateway": statistics.median(throughs),
            "ratio": statistics.median(t / d for t, d in zip(throughs, directs, strict=True)),
            "mean_batch": batch}


def main() -> None:
    from algorithms.engines.hf import HFEngine
    from algorithms.gateway.server import Gateway

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2"],
                        choices=["tiny", "smollm2"])
    parser.add_argument("--calls", type=int, default=8, help="calls for the overhead")
    parser.add_argument("--rounds", type=int, default=1, help="calls per session")
    parser.add_argument("--repeats", type=int, default=3,
                        help="throughput measurements per side, alternated")
    parser.add_argument("--sessions", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-wait", type=float, default=None,
                        help="the gateway's batch_max_wait_s (default: its own)")
    args = parser.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads()))
    torch.set_num_threads(threads)
    chats, tools = keydoor_chats(max(16, args.calls))
    print(f"torch threads {threads}; up to {args.max_tokens} tokens per call; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for model in args.models:
        policy = load(model)
        engine = HFEngine(policy.model, policy.tokenizer, batch_size=max(args.sessions))
        window = {} if args.max_wait is None else {"batch_max_wait_s": args.max_wait}
        with Gateway(TimedEngine(engine), policy.tokenizer, max_prompt_tokens=4096,
                     **window) as gateway:
            engine.generate([list(gateway.renderer.bridge(tools).start(chats[0]).token_ids)],
                            temperature=1.0, max_new_tokens=4, seed=0)  # warm-up
            cost = overhead(gateway, engine, chats, tools, args)
            print(f"{model}: per call (median of {args.calls}) in-process "
                  f"{cost['direct_ms']:.1f} ms, through the gateway {cost['gateway_ms']:.1f} ms"
                  f" ({cost['gateway_ms'] - cost['direct_ms']:+.1f} ms; median paired "
                  f"difference {cost['paired_ms']:+.1f} ms); the gateway's own time "
                  f"{cost['own_ms']:.1f} ms per call; same tokens {cost['same']}/{args.calls}",
                  flush=True)
            for sessions in args.sessions:
                rate = throughput(gateway, engine, chats, tools, sessions, args)
                print(f"{model}: {sessions:>2} sessions: in-process {rate['direct']:.2f} "
                      f"samples/s, gateway {rate['gateway']:.2f} samples/s (median ratio of "
                      f"{args.repeats} alternated pairs {rate['ratio']:.2f}x; mean engine "
                      f"batch {rate['mean_batch']:.1f})", flush=True)


if __name__ == "__main__":
    main()
