"""Engines: HF batched sampling (left padding, seeding, EOS trim); vLLM weight-name mapping
and its clear errors on a machine without vLLM or a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from algorithms.config import GenerationConfig, ModelConfig  # noqa: E402
from algorithms.engines import EngineUnavailableError, make_engine, stop_length  # noqa: E402
from algorithms.engines.hf import HFEngine  # noqa: E402
from algorithms.engines.vllm import hf_weight_name, vllm_weight_items  # noqa: E402
from tests.algorithms.tiny import make_policy  # noqa: E402


def _prompts(tokenizer):
    texts = ["open red door", "You are in room 1 of 3 . look", "look"]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_hf_engine_is_seeded_and_batch_independent():
    policy = make_policy()
    prompts = _prompts(policy.tokenizer)
    engine = HFEngine(policy.model, policy.tokenizer, batch_size=8)
    state = torch.get_rng_state()
    first = engine.generate(prompts, temperature=1.0, max_new_tokens=6, seed=3)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is left alone
    assert first == engine.generate(prompts, temperature=1.0, max_new_tokens=6, seed=3)
    assert first != engine.generate(prompts, temperature=1.0, max_new_tokens=6, seed=4)
    assert all(1 <= len(r) <= 6 for r in first)


def test_hf_engine_left_padding_matches_single_prompts():
    policy = make_policy()
    prompts = _prompts(policy.tokenizer)
    engine = HFEngine(policy.model, policy.tokenizer, batch_size=8)
    batched = engine.generate(prompts, temperature=0.0, max_new_tokens=5, seed=0)
    single = [engine.generate([p], temperature=0.0, max_new_tokens=5, seed=0)[0]
              for p in prompts]
    assert batched == single


def test_hf_engine_trims_after_eos():
    policy = make_policy()
    engine = HFEngine(policy.model, policy.tokenizer)
    eos = policy.tokenizer.eos_token_id
    assert engine._trim([5, 6, eos, 0, 0]) == (5, 6, eos)
    assert engine._trim([5, 6]) == (5, 6)


PIECES = ("<act", "ion>go</", "action>\n", "more", "</action>", "x")


def _pieces(tokens):
    return "".join(PIECES[t] for t in tokens)


def test_stop_length_ends_after_the_token_that_completes_the_first_stop_string():
    # the stop string spans three tokens; the third carries a newline past it: kept whole
    assert stop_length([0, 1, 2, 3, 4], ["</action>"], _pieces) == 3
    assert stop_length([3, 4, 5], ["</action>"], _pieces) == 2
    # the earliest of several stop strings wins, wherever it is in the list
    assert stop_length([3, 4, 5], ["x", "more"], _pieces) == 1
    assert stop_length([0, 1, 3], ["</action>"], _pieces) is None
    assert stop_length([0, 1, 2], [], _pieces) is None
    assert stop_length([], ["</action>"], _pieces) is None


def _bigram_policy(chain: dict[str, str]):
    """The tiny policy with its logits replaced: each token is followed by ``chain``'s
    successor (greedy decoding then follows the chain exactly); counts forward calls."""
    policy = make_policy()
    tokenizer, model = policy.tokenizer, policy.model
    successor = torch.full((len(tokenizer),), tokenizer.convert_tokens_to_ids("look"))
    for word, following in chain.items():
        successor[tokenizer.convert_tokens_to_ids(word)] = \
            tokenizer.convert_tokens_to_ids(following)
    original = model.forward
    calls = []

    def forward(*args, **kwargs):
        output = original(*args, **kwargs)
        ids = kwargs["input_ids"][:, -output.logits.shape[1]:]
        logits = torch.full_like(output.logits, -1e4)
        logits.scatter_(-1, successor[ids].unsqueeze(-1), 0.0)
        output.logits = logits
        calls.append(ids.shape)
        return output

    model.forward = forward
    return policy, calls


def test_hf_engine_stops_each_row_at_its_stop_string_and_lets_the_others_go_on():
    chain = {"red": "<action>", "<action>": "open", "open": "</action>", "</action>": "door",
             "blue": "door", "door": "room"}
    policy, calls = _bigram_policy(chain)
    tokenizer = policy.tokenizer
    engine = HFEngine(policy.model, tokenizer, batch_size=8)
    prompts = [tokenizer("open red", add_special_tokens=False)["input_ids"],
               tokenizer("open blue", add_special_tokens=False)["input_ids"]]
    stopped = engine.generate(prompts, temperature=0.0, max_new_tokens=8, seed=0,
                              stop=("</action>",))
    free = engine.generate(prompts, temperature=0.0, max_new_tokens=8, seed=0)
    assert tokenizer.decode(list(stopped[0])) == "<action> open </action>"
    assert tokenizer.decode(list(free[0])).startswith("<action> open </action> door")
    assert stopped[1] == free[1] and len(free[1]) == 8  # the other row went on
    calls.clear()
    alone = engine.generate(prompts[:1], temperature=0.0, max_new_tokens=8, seed=0,
                            stop=("</action>",))
    assert alone == stopped[:1] and len(calls) == 3  # nothing generated past the stop


def test_weight_names_map_to_the_plain_hf_layout():
    assert hf_weight_name("model.layers.0.mlp.up_proj.weight") == \
        "model.layers.0.mlp.up_proj.weight"
    assert hf_weight_name("base_model.model.model.layers.1.self_attn.v_proj.base_layer.weight") \
        == "model.layers.1.self_attn.v_proj.weight"
    assert hf_weight_name("base_model.model.model.layers.1.self_attn.v_proj.lora_B.default."
                          "weight") is None


def test_vllm_weight_items_merge_lora_and_leave_the_model_unchanged():
    pytest.importorskip("peft")
    plain = make_policy(seed=0)
    expected_names = set(plain.model.state_dict())
    lora = make_policy(seed=0, model_config=ModelConfig(lora_rank=2, lora_alpha=4,
                                                        lora_target_modules=("q_proj",)))
    with torch.no_grad():  # make the adapter non-trivial
        for name, parameter in lora.model.named_parameters():
            if "lora_B" in name:
                parameter.fill_(0.1)
    before = {n: t.clone() for n, t in lora.model.state_dict().items()}
    items = dict(vllm_weight_items(lora.model))
    assert set(items) == expected_names
    layer = lora.model.get_base_model().model.layers[0].self_attn.q_proj
    merged = layer.base_layer.weight + layer.scaling["default"] * (
        layer.lora_B["default"].weight @ layer.lora_A["default"].weight)
    torch.testing.assert_close(items["model.layers.0.self_attn.q_proj.weight"], merged)
    after = lora.model.state_dict()
    assert all(torch.equal(before[n], after[n]) for n in before)  # unmerged again
    plain_items = dict(vllm_weight_items(plain.model))
    assert set(plain_items) == expected_names


def test_vllm_engine_without_the_package_is_a_clear_error():
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    policy = make_policy()
    with pytest.raises(EngineUnavailableError, match="needs the vllm package.*docs/vllm-cpu.md"):
        make_engine(GenerationConfig(engine="vllm"), policy, torch.device("cpu"), seed=0,
                    max_model_len=64)


def test_vllm_weight_items_cast_to_the_engine_dtype_and_names_match():
    from algorithms.engines.vllm import vllm_weight_names

    policy = make_policy(seed=0)
    items = dict(vllm_weight_items(policy.model, torch.bfloat16))
    assert set(items) == vllm_weight_names(policy.model)
    assert all(t.dtype == torch.bfloat16 for t in items.values())
    original = dict(policy.model.state_dict())
    name = "model.layers.0.mlp.up_proj.weight"
    assert original[name].dtype == torch.float32  # the model itself is left as it was
    torch.testing.assert_close(items[name], original[name].to(torch.bfloat16))


def test_auto_engine_is_hf_where_vllm_cannot_serve_the_policy(monkeypatch):
    import importlib.util

    from algorithms.engines import resolve_engine

    policy = make_policy()  # an in-memory model: no folder vLLM could load
    assert resolve_engine(GenerationConfig(), policy) == "hf"
    assert resolve_engine(GenerationConfig(engine="vllm"), policy) == "vllm"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert isinstance(make_engine(GenerationConfig(), policy, torch.device("cpu"), seed=0,
                                  max_model_len=64), HFEngine)


# --- the sampled distribution is the scored one -------------------------------------------

FALSE_ALARM_RATE = 1e-4
"""Chance that :func:`_matches_scorer` rejects a correct sampler (fixed seeds make each run
deterministic; this is the rate over seeds)."""


def _with_leaky_generation_config(policy):
    """The tiny policy whose checkpoint-style ``generation_config`` would bend sampling:
    a repetition penalty, top-k, top-p, suppressed tokens and a minimum length."""
    lm = policy.model.get_base_model() if hasattr(policy.model, "get_base_model") \
        else policy.model
    config = lm.generation_config
    config.repetition_penalty = 3.0
    config.top_k = 3
    config.top_p = 0.8
    config.suppress_tokens = list(range(3, len(policy.tokenizer) // 2))
    config.min_new_tokens = 2
    config.do_sample = True
    return policy


def _first_token_probs(policy, prompt: list[int], temperature: float) -> np.ndarray:
    """The scorer's distribution of the first response token: score every token as a
    one-token response."""
    from algorithms.training.scoring import score_responses

    vocab = len(policy.tokenizer)
    prompt_ids = torch.tensor([prompt] * vocab)
    response_ids = torch.arange(vocab).unsqueeze(1)
    with torch.no_grad():
        scored = score_responses(policy.model, prompt_ids, torch.ones_like(prompt_ids),
                                 response_ids, torch.ones_like(response_ids),
                                 temperature=temperature)
    return scored.log_probs[:, 0].double().exp().numpy()


def _matches_scorer(counts: np.ndarray, probs: np.ndarray) -> tuple[bool, float, float]:
    """Pearson chi-square goodness of fit of token ``counts`` to ``probs``.

    Tokens expected fewer than 5 times are pooled into one bin; a token with scored
    probability (about) 0 that was sampled at all rejects outright.

    Returns:
        (accepted, statistic, critical value at :data:`FALSE_ALARM_RATE`).
    """
    from scipy.stats import chi2

    n = counts.sum()
    expected = probs * n
    if np.any((counts > 0) & (expected < 1e-6)):
        return False, float("inf"), 0.0
    big = expected >= 5
    observed_bins = np.append(counts[big], counts[~big].sum())
    expected_bins = np.append(expected[big], expected[~big].sum())
    keep = expected_bins > 0
    statistic = float(((observed_bins[keep] - expected_bins[keep]) ** 2
                       / expected_bins[keep]).sum())
    critical = float(chi2.ppf(1 - FALSE_ALARM_RATE, keep.sum() - 1))
    return statistic <= critical, statistic, critical


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_hf_samples_follow_the_scored_distribution_whatever_the_model_config(temperature,
                                                                           lora):
    pytest.importorskip("scipy")
    model_config = ModelConfig(lora_rank=2, lora_alpha=4, lora_target_modules=("q_proj",)) \
        if lora else ModelConfig()
    policy = _with_leaky_generation_config(make_policy(seed=1, model_config=model_config))
    prompt = policy.tokenizer("open red door open red door look", add_special_tokens=False)[
        "input_ids"]
    probs = _first_token_probs(policy, prompt, temperature)
    engine = HFEngine(policy.model, policy.tokenizer, batch_size=4000)
    samples = engine.generate([prompt] * 4000, temperature=temperature, max_new_tokens=1,
                              seed=0)
    counts = np.bincount([s[0] for s in samples], minlength=len(probs))
    accepted, statistic, critical = _matches_scorer(counts, probs)
    assert accepted, f"chi2 {statistic:.1f} > {critical:.1f}: samples are not the scored law"
    # the model's config is back in place afterwards
    lm = policy.model.get_base_model() if lora else policy.model
    assert lm.generation_config.repetition_penalty == 3.0


def test_the_goodness_of_fit_test_rejects_the_model_config_leaking_in():
    """The control: sampling with the model's own generation_config (what transformers
    does with fields left unset) is caught by the same test."""
    pytest.importorskip("scipy")
    policy = _with_leaky_generation_config(make_policy(seed=1))
    prompt = policy.tokenizer("open red door open red door look", add_special_tokens=False)[
        "input_ids"]
    probs = _first_token_probs(policy, prompt, 1.0)
    ids = torch.tensor([prompt] * 4000)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        output = policy.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                       max_new_tokens=1, pad_token_id=0, eos_token_id=2)
    counts = np.bincount(output[:, -1].tolist(), minlength=len(probs))
    assert not _matches_scorer(counts, probs)[0]


def test_plain_sampling_config_turns_every_processor_off():
    from algorithms.engines.hf import plain_sampling_config

    policy = make_policy()
    config = plain_sampling_config(temperature=0.5, top_p=1.0, max_new_tokens=3,
                                   pad_token_id=0, eos_token_id=2)
    policy.model.generation_config = config
    processors = policy.model._get_logits_processor(config, input_ids_seq_length=4,
                                                    device="cpu")
    assert [type(p).__name__ for p in processors] == ["TemperatureLogitsWarper"]
    with pytest.raises(ValueError, match="top_p"):
        plain_sampling_config(temperature=1.0, top_p=0.0, max_new_tokens=3, pad_token_id=0,
                              eos_token_id=2)
