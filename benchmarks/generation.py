"""Generation engines compared: tokens/s at batch sizes 1, 8 and 32 for the HF engine and
the vLLM engine, the time of one weight sync, and the log-prob agreement after it.

The default policy (SmolLM2-135M-Instruct) answers chat prompts, sampled at temperature
1.0 up to ``--max-new-tokens`` tokens (a response may stop earlier at EOS). Tokens/s =
tokens returned / wall seconds of the ``generate`` call, best of ``--repeats`` (after one
warm-up call per batch size). The HF engine runs the model in
``--hf-dtype``; vLLM (its CPU backend on a machine without a GPU, else CUDA) in
``--vllm-dtype``. Weight sync: one :meth:`~algorithms.engines.vllm.VLLMEngine.sync_weights`
of the full model, after an Adam step that changed every weight; agreement: the largest
and the mean |log p_vLLM - log p_HF| over vLLM's top-20 next tokens of 8 prompts, against
the float32 HF model.

Usage (vLLM needs its own environment on CPU, see docs/vllm-cpu.md)::

    OMP_NUM_THREADS=2 /work/venvs/vllm/bin/python -m benchmarks.generation
    python -m benchmarks.generation --engines hf      # without vLLM
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from algorithms.config import GenerationConfig, ModelConfig, VLLMConfig
from algorithms.engines import make_engine
from algorithms.engines.hf import HFEngine
from algorithms.training.policy import load_policy

QUESTIONS = ("Tell me a story about a dragon.", "List three colors.", "Name a fruit.",
             "What is the capital of France?", "Explain rain to a child.",
             "Write a haiku about the sea.", "How do I boil an egg?", "Count to ten.")


def _prompts(tokenizer, count: int) -> list[list[int]]:
    out = []
    for index in range(count):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": QUESTIONS[index % len(QUESTIONS)]}],
            add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        out.append([int(t) for t in ids])
    return out


def _tokens_per_s(engine, prompts, max_new_tokens: int, repeats: int) -> float:
    def generate(seed: int):
        return engine.generate(prompts, temperature=1.0, max_new_tokens=max_new_tokens,
                               seed=seed)

    generate(0)  # warm-up
    best = float("inf")
    tokens = 0
    for repeat in range(repeats):
        start = time.perf_counter()
        out = generate(repeat + 1)
        best = min(best, time.perf_counter() - start)
        tokens = sum(len(r) for r in out)
    return tokens / best


def _throughputs(name: str, engine, prompts, args) -> dict[int, float]:
    rates = {}
    for size in args.batch_sizes:
        rates[size] = _tokens_per_s(engine, prompts[:size], args.max_new_tokens, args.repeats)
        print(f"{name:<4} batch {size:>3}: {rates[size]:8.1f} tokens/s", flush=True)
    return rates


def _agreement(engine, model, prompts) -> tuple[float, float]:
    worst, total, count = 0.0, 0.0, 0
    for prompt in prompts:
        params = engine.sampling_params(temperature=1.0, max_new_tokens=1, seed=0,
                                        logprobs=20)
        output = engine.llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
        with torch.no_grad():
            ours = torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1]
                                     .float(), -1)
        for token, entry in output[0].outputs[0].logprobs[0].items():
            gap = abs(entry.logprob - ours[token].item())
            worst, total, count = max(worst, gap), total + gap, count + 1
    return worst, total / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", default=["hf", "vllm"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--hf-dtype", default="float32")
    parser.add_argument("--vllm-dtype", default="bfloat16")
    args = parser.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads()))
    torch.set_num_threads(threads)
    policy = load_policy(ModelConfig(dtype=args.hf_dtype), torch.device("cpu"))
    print(f"torch threads {threads}; {args.max_new_tokens} new tokens per response; "
          f"load average {os.getloadavg()[0]:.1f}")
    rows: dict[str, dict[int, float]] = {}
    prompts = _prompts(policy.tokenizer, max(args.batch_sizes))
    if "hf" in args.engines:
        engine = HFEngine(policy.model, policy.tokenizer, batch_size=max(args.batch_sizes))
        rows["hf"] = _throughputs("hf", engine, prompts, args)
    if "vllm" in args.engines:
        start = time.perf_counter()
        config = GenerationConfig(engine="vllm", vllm=VLLMConfig(
            dtype=args.vllm_dtype, enforce_eager=True, sleep_level=0))
        engine = make_engine(config, policy, torch.device("cpu"), seed=0, max_model_len=512)
        print(f"vllm engine start: {time.perf_counter() - start:.1f} s "
              f"(backend {engine.backend}, {args.vllm_dtype})", flush=True)
        rows["vllm"] = _throughputs("vllm", engine, prompts, args)
        worst, mean = _agreement(engine, policy.model, prompts[:8])
        print(f"agreement at start: max {worst:.3f}, mean {mean:.4f} nats")
        optimizer = torch.optim.Adam(policy.model.parameters(), lr=1e-4)
        ids = torch.tensor([prompts[0] + prompts[1]])
        policy.model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        policy.model.eval()
        start = time.perf_counter()
        engine.sync_weights(policy.model)
        print(f"weight sync: {time.perf_counter() - start:.2f} s")
        worst, mean = _agreement(engine, policy.model, prompts[:8])
        print(f"agreement after the step and sync: max {worst:.3f}, mean {mean:.4f} nats")
    if len(rows) == 2:
        for size in args.batch_sizes:
            print(f"batch {size:>3}: vllm / hf = {rows['vllm'][size] / rows['hf'][size]:.2f}x")


if __name__ == "__main__":
    main()
