"""The recipe-parity harness (``benchmarks/recipe_parity.py``) without verl-agent.

Its batch generator, this project's side of every term, the report and the exit status
run here against the harness's own transcription of verl-agent's rules
(``--self-check``); the verl side runs only when ``VERL_AGENT_PATH`` names a checkout
(``VERL_AGENT_DEPS``: the folder of its extra packages, see the module docstring).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from benchmarks import recipe_parity as parity  # noqa: E402

WORST_LINE = re.compile(r"^worst difference with defaults: \d\.\de[-+]\d\d \((.+), (std|mean)\)$")


def test_batches_look_like_alfworld_rollouts():
    rollout = parity.make_rollout(seed=0)
    batch = rollout.batch
    groups = np.unique(batch.group_ids)
    assert len(groups) == 6
    assert all(len(np.unique(batch.traj_ids[batch.group_ids == g])) == 8 for g in groups)
    lengths = np.bincount(batch.traj_ids)
    assert lengths.max() == parity.MAX_STEPS and lengths.min() >= 1
    assert batch.truncated.any() and (batch.success & ~batch.truncated).any()
    assert (~batch.success & ~batch.truncated).any()  # failures that terminated early
    assert set(np.unique(batch.env_rewards)) == {0.0, 10.0}
    assert 0 < batch.invalid.mean() < 0.3
    np.testing.assert_array_equal(batch.rewards, batch.env_rewards - batch.penalties)
    # step groups: singletons and groups of dozens of rows
    keys = list(zip(batch.group_ids.tolist(), batch.anchor_ids.tolist(), strict=True))
    sizes = np.unique(np.array([hash(k) for k in keys]), return_counts=True)[1]
    assert sizes.min() == 1 and sizes.max() >= 30
    lengths = rollout.response_mask.sum(1)
    assert lengths.min() == 1 and lengths.max() == parity.RESPONSE_TOKENS
    # equal seeds, equal batches
    again = parity.make_rollout(seed=0)
    np.testing.assert_array_equal(again.log_probs, rollout.log_probs)


def _hand_rollout() -> parity.Rollout:
    """One group: A takes two steps (the first invalid, the second wins 10), B one (0).
    A's first step and B's share the anchor s0."""
    base = parity.make_rollout(seed=0, num_groups=1)
    rows = np.array([0, 1, 2])
    tokens = {name: getattr(base.batch, name)[rows] for name in (
        "prompt_ids", "prompt_mask", "response_ids", "response_mask", "format_ok",
        "prompt_cut", "env_error")}
    batch = dataclasses.replace(
        base.batch, **tokens,
        env_rewards=np.array([0.0, 10.0, 0.0]), penalties=np.array([0.1, 0.0, 0.0]),
        rewards=np.array([-0.1, 10.0, 0.0]), invalid=np.array([True, False, False]),
        valid_action=np.array([False, True, True]), traj_ids=np.array([0, 0, 1]),
        group_ids=np.zeros(3, dtype=np.int64), anchors=("s0", "s1", "s0"),
        anchor_ids=np.array([0, 1, 0]), step_index=np.array([0, 1, 0]),
        last_step=np.array([False, True, True]), success=np.array([True, True, False]),
        truncated=np.zeros(3, dtype=bool), task_ids=("t",) * 3, task_types=("",) * 3,
        actions=("a",) * 3, response_texts=("",) * 3)
    return dataclasses.replace(base, batch=batch, log_probs=base.log_probs[rows],
                               old_log_probs=base.old_log_probs[rows],
                               ref_log_probs=base.ref_log_probs[rows],
                               entropies=base.entropies[rows], logits=base.logits[rows])


@pytest.mark.parametrize("normalize", ["mean", "std"])
def test_both_sides_give_the_hand_computed_advantages(normalize):
    # Episode scores per row (verl-agent's placement): A0 10 - 0.1 = 9.9, A1 10, B0 0,
    # statistics over the three rows. Step returns: A0 0.95 * 10 - 0.1 = 9.4, A1 10,
    # B0 0; step groups {A0, B0} (mean 4.7) and {A1} (a singleton: 0).
    episode = np.array([9.9, 10.0, 0.0]) - 19.9 / 3
    step = np.array([4.7, 0.0, -4.7])
    if normalize == "std":
        episode = episode / (np.sqrt(np.sum(episode**2) / 2) + 1e-6)
        step = step / (np.sqrt(2 * 4.7**2) + 1e-6)
    rollout = _hand_rollout()
    mask = rollout.response_mask
    for estimator, expected in (("gigpo", episode + step), ("grpo", episode)):
        ours = parity.our_advantages(rollout, parity.our_config(estimator, normalize))
        np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-12)
        rules = parity.RuleTranscription().advantages(rollout, estimator, normalize)
        np.testing.assert_allclose(rules["advantages"].numpy(), expected[:, None] * mask,
                                   rtol=0, atol=1e-12)
    returns = parity.our_step_returns(rollout, parity.our_config("gigpo", normalize))
    np.testing.assert_allclose(returns, [9.4, 10.0, 0.0], rtol=0, atol=1e-12)


def test_in_float64_runs_the_function_code_in_float64():
    def make() -> tuple:
        return np.zeros(2, dtype=np.float32).dtype, torch.ones(2, dtype=torch.float32).dtype

    assert make() == (np.float32, torch.float32)
    assert parity.in_float64(make)() == (np.float64, torch.float64)
    assert make() == (np.float32, torch.float32)  # the original is untouched


def test_self_check_passes_and_ends_with_the_worst_line(capsys):
    status = parity.main(["--self-check", "--seeds", "1", "--groups", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert status == 0
    match = WORST_LINE.match(lines[-1])
    assert match, lines[-1]
    assert float(lines[-1].split(": ")[1].split()[0]) <= parity.TOLERANCE
    text = "\n".join(lines)
    for term in parity.DEFAULT_TERMS:
        assert f"  {term}" in text
    for option in parity.OPTIONS:
        assert f"  {option.name}" in text
    # each option differs from verl-agent's default, and matches verl set the same way
    report = [line for line in lines if line.startswith("      vs ")]
    assert len(report) == len(parity.OPTIONS) + sum(o.verl is not None for o in parity.OPTIONS)


def test_a_perturbed_term_fails_and_is_named(monkeypatch, capsys):
    honest = parity.our_advantages

    def off_by_a_little(rollout, config):
        values = honest(rollout, config)
        return values + 3e-6 if config.algo == "grpo" else values

    monkeypatch.setattr(parity, "our_advantages", off_by_a_little)
    status = parity.main(["--self-check", "--seeds", "1", "--groups", "1", "--no-options"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert status == 1
    assert last == "worst difference with defaults: 3.0e-06 (grpo advantages, std)"


def test_a_perturbed_loss_fails(monkeypatch, capsys):
    honest = parity.losses.policy_loss

    def scaled(*args, **kwargs):
        loss, stats = honest(*args, **kwargs)
        return loss * (1 + 1e-5), stats

    monkeypatch.setattr(parity.losses, "policy_loss", scaled)
    status = parity.main(["--self-check", "--seeds", "1", "--groups", "1", "--no-options"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert status == 1
    assert WORST_LINE.match(last).group(1) in ("per-token loss", "micro-batch loss")


def test_a_bad_checkout_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="not a verl-agent checkout"):
        parity.VerlAgent(tmp_path)


@pytest.mark.skipif(not os.environ.get("VERL_AGENT_PATH"),
                    reason="set VERL_AGENT_PATH to a verl-agent checkout to compare with it")
def test_defaults_match_verl_agent():
    # a separate process: importing verl-agent changes sys.path and sys.modules
    command = [sys.executable, "-m", "benchmarks.recipe_parity", "--verl-agent",
               os.environ["VERL_AGENT_PATH"], "--seeds", "1", "--groups", "2", "--no-options"]
    if os.environ.get("VERL_AGENT_DEPS"):
        command += ["--deps", os.environ["VERL_AGENT_DEPS"]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).resolve().parents[2])
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert WORST_LINE.match(last), last
    assert done.returncode == 0, last
