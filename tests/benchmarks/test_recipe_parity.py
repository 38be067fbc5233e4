"""The recipe-parity harness (``benchmarks/recipe_parity.py``, on the batches and pipelines
of ``benchmarks/parity_pipelines.py``) without verl-agent.

Its batch generator, this project's side of every term, the report and the exit status
run here against the harness's own transcription of verl-agent's rules
(``--self-check``); the verl side runs only when ``VERL_AGENT_PATH`` names a checkout
(``VERL_AGENT_DEPS``: the folder of its extra packages, see the module docstring).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from algorithms.agent.step_batch import StepLog, concat_batches  # noqa: E402
from benchmarks import frontier_parity as frontier  # noqa: E402
from benchmarks import parity_pipelines as pipelines  # noqa: E402
from benchmarks import recipe_parity as parity  # noqa: E402

WORST_LINE = re.compile(r"^worst difference with defaults: \d\.\de[-+]\d\d \((.+), (std|mean)\)$")


def test_batches_look_like_alfworld_rollouts():
    rollout = pipelines.make_rollout(seed=0)
    batch = rollout.batch
    groups = np.unique(batch.group_ids)
    assert len(groups) == 6
    assert all(len(np.unique(batch.traj_ids[batch.group_ids == g])) == 8 for g in groups)
    lengths = np.bincount(batch.traj_ids)
    assert lengths.max() == pipelines.MAX_STEPS and lengths.min() >= 1
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
    assert lengths.min() == 1 and lengths.max() == pipelines.RESPONSE_TOKENS
    # equal seeds, equal batches
    again = pipelines.make_rollout(seed=0)
    np.testing.assert_array_equal(again.log_probs, rollout.log_probs)


def _hand_rollout() -> pipelines.Rollout:
    """One group: A takes two steps (the first invalid, the second wins 10), B one (0).
    A's first step and B's share the anchor s0."""
    base = pipelines.make_rollout(seed=0, num_groups=1)
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
        truncated=np.zeros(3, dtype=bool),
        log=StepLog(task_ids=("t",) * 3, task_types=("",) * 3, actions=("a",) * 3,
                    response_texts=("",) * 3))
    return dataclasses.replace(base, batch=batch, log_probs=base.log_probs[rows],
                               old_log_probs=base.old_log_probs[rows],
                               ref_log_probs=base.ref_log_probs[rows],
                               entropies=base.entropies[rows], logits=base.logits[rows])


def _with_lengths(rollout: pipelines.Rollout, lengths: list[int]) -> pipelines.Rollout:
    """``rollout`` with responses of ``lengths`` tokens."""
    mask = (np.arange(pipelines.RESPONSE_TOKENS)[None, :]
            < np.array(lengths)[:, None]).astype(np.int64)
    batch = dataclasses.replace(rollout.batch, response_mask=mask,
                                response_ids=np.maximum(rollout.batch.response_ids, 1) * mask)
    return dataclasses.replace(rollout, batch=batch)


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
        ours = pipelines.our_advantages(rollout, pipelines.our_config(estimator, normalize))
        np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-12)
        rules = pipelines.RuleTranscription().advantages(rollout, estimator, normalize)
        np.testing.assert_allclose(rules["advantages"].numpy(), expected[:, None] * mask,
                                   rtol=0, atol=1e-12)
    returns = parity.our_step_returns(rollout, pipelines.our_config("gigpo", normalize))
    np.testing.assert_allclose(returns, [9.4, 10.0, 0.0], rtol=0, atol=1e-12)
    # GSPO's estimator is GRPO's, whatever the normalization
    gspo = pipelines.our_advantages(rollout, pipelines.our_config("gspo", normalize))
    np.testing.assert_allclose(gspo, episode, rtol=0, atol=1e-12)


def test_both_sides_give_the_hand_computed_new_estimators():
    # Scores per row 9.9, 10, 0 (three members, statistics over rows); responses of 2, 1
    # and 3 tokens.
    rollout = _with_lengths(_hand_rollout(), [2, 1, 3])
    mask = rollout.response_mask
    rules = pipelines.RuleTranscription()
    # RLOO: each score minus the mean of the two others
    rloo = np.array([9.9 - 10.0 / 2, 10.0 - 9.9 / 2, 0.0 - 19.9 / 2])
    # REINFORCE++: x = score - 19.9 / 3, then whitened over the 6 tokens (x0 twice, x1
    # once, x2 three times): mean -10 / 6, variance with 6 - 1 in the denominator
    x = np.array([9.9, 10.0, 0.0]) - 19.9 / 3
    mu = -10.0 / 6
    variance = (2 * (x[0] - mu) ** 2 + (x[1] - mu) ** 2 + 3 * (x[2] - mu) ** 2) / 5
    reinforce = (x - mu) / np.sqrt(variance + 1e-8)
    np.testing.assert_allclose(reinforce, [0.906724, 0.925103, -0.912850], atol=1e-6)
    # Dr.GRPO: GRPO without the std
    dr_grpo = x
    for algo, estimator, expected in (("rloo", "rloo", rloo),
                                      ("reinforce_pp", "reinforce_pp", reinforce),
                                      ("dr_grpo", "grpo", dr_grpo)):
        config = pipelines.our_config(algo)
        ours = pipelines.our_advantages(rollout, config)
        np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-12, err_msg=algo)
        theirs = rules.advantages(rollout, estimator, config.learner.normalize)
        np.testing.assert_allclose(theirs["advantages"].numpy(), expected[:, None] * mask,
                                   rtol=0, atol=1e-12, err_msg=algo)


def test_algo_configs_are_what_train_py_builds():
    gspo = pipelines.our_config("gspo").learner
    assert (gspo.policy_loss, gspo.clip_eps_low, gspo.clip_eps_high) == ("gspo", 3e-4, 4e-4)
    dr_grpo = pipelines.our_config("dr_grpo")
    assert dr_grpo.learner.normalize == "mean"
    assert pipelines.our_learner(dr_grpo).loss_recipe.norm_length == pipelines.RESPONSE_TOKENS
    with pytest.raises(ValueError, match="dr_grpo"):
        pipelines.our_config("dr_grpo", "std")  # the algorithm fixes its normalization


def test_gspo_term_by_hand():
    # Row 0: log-ratios 0.001 and -0.0002, mean 4e-4, s = exp(4e-4) > 1 + 4e-4 with A = 1:
    # clipped, -1.0004 per token, no gradient. Row 1: log-ratios 0, 1e-4, 1e-4, mean
    # 1e-4 / 1.5, s inside [1 - 3e-4, 1 + 4e-4] with A = -2: 2 s per token. Responses
    # average their tokens, then the two responses are averaged.
    old = torch.full((2, 3), -1.0, dtype=torch.float64)
    log_probs = (old + torch.tensor([[0.001, -0.0002, 0.0], [0.0, 1e-4, 1e-4]],
                                    dtype=torch.float64)).requires_grad_()
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    advantages = torch.tensor([[1.0, 1.0, 0.0], [-2.0, -2.0, -2.0]], dtype=torch.float64)
    s = math.exp(2e-4 / 3)
    expected = (-(1 + 4e-4) + 2 * s) / 2
    ours = parity.losses.gspo_policy_loss(log_probs, old, advantages, mask,
                                          clip_eps_low=3e-4, clip_eps_high=4e-4)[0]
    per_token = pipelines.RuleTranscription._gspo_per_token(log_probs, old, advantages, mask,
                                                         3e-4, 4e-4)
    rules = ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
    for loss in (ours, rules):
        assert float(loss.detach()) == pytest.approx(expected, abs=1e-12)
        (gradient,) = torch.autograd.grad(loss, log_probs)
        np.testing.assert_allclose(gradient.numpy(), [[0, 0, 0], [s / 3, s / 3, s / 3]],
                                   rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dr_grpo_divides_by_the_response_width_on_both_sides(dtype):
    # seq-mean-token-sum-norm: each micro-batch's terms are summed over its tokens and
    # divided by 24 (verl: the padded width; the learner trims, but divides by
    # max_new_tokens = 24), so a micro-batch's loss is the sum of its lone-token losses.
    rollout = _with_lengths(_hand_rollout(), [5, 1, 24])
    config = pipelines.our_config("dr_grpo")
    tokens = parity.our_token_advantages(rollout, pipelines.our_advantages(rollout, config))
    ours = parity.our_loss(rollout, tokens, config, dtype)
    theirs = pipelines.RuleTranscription().loss(rollout, tokens, (64, 8), dtype,
                                             parity.DR_GRPO_VERL)
    mask = rollout.response_mask
    ratio = np.exp(rollout.log_probs - rollout.old_log_probs)
    advantage = tokens.double().numpy()
    clip = np.maximum(-advantage * ratio, -advantage * np.clip(ratio, 0.8, 1.2))
    clip = np.where(advantage < 0, np.minimum(clip, -3 * advantage), clip)
    log_ratio = rollout.ref_log_probs - rollout.log_probs
    kl = np.clip(np.exp(log_ratio) - log_ratio - 1, -10, 10)
    lone = (clip - 0.001 * rollout.entropies + 0.01 * kl) / 24 * mask
    for side in (ours, theirs):
        np.testing.assert_allclose(side.per_token.double().numpy(), lone, rtol=1e-5,
                                   atol=1e-7 if dtype == torch.float32 else 1e-13)
        assert float(side.micro_losses[0]) == pytest.approx(lone.sum(), rel=1e-5)


def test_overlong_cost_by_hand():
    rollout = _with_lengths(_hand_rollout(), [16, 20, 24])
    rules = pipelines.RuleTranscription()
    # 24 tokens at most; buffer 8: no cost up to 16 tokens, then (len - 16) / 8 * factor
    for buffer, factor, expected in ((8, 1.0, [0.0, 0.5, 1.0]), (5, 0.3, [0.0, 0.06, 0.3])):
        np.testing.assert_allclose(parity.our_overlong(rollout, buffer, factor), expected,
                                   rtol=0, atol=1e-12)
        np.testing.assert_allclose(rules.overlong(rollout, buffer, factor, float64=True),
                                   expected, rtol=0, atol=1e-12)


def test_dynamic_sampling_by_hand():
    # group 0 of the hand rollout: A wins 10, B gets 0 -> varied, kept. A copy of it where
    # both trajectories fail (group 1) -> uniform, dropped, unless it is the last try.
    hand = _hand_rollout().batch
    uniform = dataclasses.replace(hand, env_rewards=np.zeros(3), rewards=-hand.penalties)
    batch = concat_batches([hand, uniform], [0, 1], group_size=2, pad_id=0)
    assert batch.traj_ids.tolist() == [0, 0, 1, 2, 2, 3]
    assert batch.group_ids.tolist() == [0, 0, 0, 1, 1, 1]
    expected = [True] * 3 + [False] * 3
    ours = parity.varied_group_rows(batch.env_rewards, batch.traj_ids, batch.group_ids)
    rules = pipelines.RuleTranscription()
    assert ours.tolist() == expected
    assert rules.kept_rows(batch, False).tolist() == expected
    assert rules.kept_rows(batch, True).all()


def test_dynamic_sampling_loops_agree_and_keep_the_last_try_whole():
    made = {}

    def rollouts(index):
        return made.setdefault(index, pipelines.make_rollout(10_000 + index, num_groups=6))

    rules = pipelines.RuleTranscription()
    for max_rollouts in (1, 2, 10):
        ours = parity.our_dynamic_sample(rollouts, 6, max_rollouts)
        theirs = parity.verl_dynamic_loop(rules.kept_rows, rollouts, 6, max_rollouts)
        assert [rows.tolist() for rows in ours] == [rows.tolist() for rows in theirs]
        if max_rollouts == 1:
            assert len(ours) == 1 and ours[0].all()  # nothing dropped
        else:  # group 3 (never succeeds) is dropped from every filtered rollout
            assert len(ours) >= 2 and not ours[0][rollouts(0).batch.group_ids == 3].any()
        if len(ours) == max_rollouts:
            assert ours[-1].all()  # the last try is kept whole


def test_in_float64_runs_the_function_code_in_float64():
    def make() -> tuple:
        return np.zeros(2, dtype=np.float32).dtype, torch.ones(2, dtype=torch.float32).dtype

    assert make() == (np.float32, torch.float32)
    assert pipelines.in_float64(make)() == (np.float64, torch.float64)
    assert make() == (np.float32, torch.float32)  # the original is untouched
    # a module that imports torch only (verl's DAPO reward manager)
    torch_only = types.FunctionType(
        (lambda: torch.zeros(1, dtype=torch.float32).dtype).__code__, {"torch": torch})
    assert pipelines.in_float64(torch_only)() == torch.float64
    with pytest.raises(RuntimeError, match="neither"):
        pipelines.in_float64(types.FunctionType(make.__code__, {}))


def test_self_check_passes_and_ends_with_the_worst_line(capsys):
    status = parity.main(["--self-check", "--seeds", "1", "--groups", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert status == 0
    match = WORST_LINE.match(lines[-1])
    assert match, lines[-1]
    assert float(lines[-1].split(": ")[1].split()[0]) <= pipelines.TOLERANCE
    text = "\n".join(lines)
    for section in parity.SECTIONS:
        assert f"  {section.title}" in text
    for term in parity.DEFAULT_TERMS:
        assert f"    {term} " in text
    # Dr.GRPO fixes normalize="mean": its std columns are empty
    dr_grpo = next(line for line in lines if line.startswith("    dr_grpo advantages"))
    assert dr_grpo.split()[2] == "-" and dr_grpo.split()[4] == "-"
    for option in parity.OPTIONS:
        assert f"  {option.name}" in text
    # each option differs from verl-agent's default, and matches verl set the same way
    report = [line for line in lines if line.startswith("      vs ")]
    assert len(report) == len(parity.OPTIONS) + sum(o.verl is not None for o in parity.OPTIONS)
    # HGPO and GraphGPO: every setting of both sweeps, and the accepted difference
    for setting in (*frontier.HGPO_SWEEP, *frontier.GRAPH_SWEEP):
        assert f"  {setting.label} " in text
    assert "worst difference over the hgpo and graphgpo settings: " in text
    assert "hgpo equal returns, float32: 0.0e+00" in text  # the rules have no rounding


def test_a_perturbed_frontier_estimator_fails_and_is_named(monkeypatch, capsys):
    honest = frontier.our_graphgpo

    def off(rollout, normalize, setting):
        values, returns = honest(rollout, normalize, setting)
        return values, returns + (2e-6 if setting.normalize_distance else 0.0)

    monkeypatch.setattr(frontier, "our_graphgpo", off)
    monkeypatch.setattr(frontier, "HGPO_SWEEP", frontier.HGPO_SWEEP[:1])
    monkeypatch.setattr(frontier, "GRAPH_SWEEP", frontier.GRAPH_SWEEP[3:5])
    status = parity.main(["--self-check", "--seeds", "1", "--groups", "1", "--no-options"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert status == 1
    assert lines[-1].startswith("worst difference with defaults: ")  # defaults are right
    assert float(lines[-1].split(": ")[1].split()[0]) <= pipelines.TOLERANCE
    sweep = next(line for line in lines if line.startswith("worst difference over"))
    assert sweep.startswith("worst difference over the hgpo and graphgpo settings: 2.0e-06 "
                            "(graphgpo, gamma 0.1, distance gained")


def test_hgpo_and_graphgpo_sides_give_the_hand_computed_returns():
    rollout = frontier.equal_returns_rollout()
    # 8 trajectories, one path of 3 states, all won: every group's returns are equal
    ours = frontier.our_hgpo(rollout, "std", frontier.HGPO_DEFAULT)
    rules = frontier.HGPORules().advantages(rollout, "std", frontier.HGPO_DEFAULT,
                                            float64=True)
    assert np.all(ours == 0.0) and np.all(rules.numpy() == 0.0)
    advantages, returns = frontier.our_graphgpo(rollout, "std", frontier.GRAPH_DEFAULT)
    # state 0 -> 1 -> 2 -> goal: 10 * 0.1^2, 10 * 0.1, 10 on each trajectory
    np.testing.assert_allclose(returns, np.tile([0.1, 1.0, 10.0], 8), rtol=1e-12)
    theirs = frontier.GraphRules().advantages(rollout, "std", frontier.GRAPH_DEFAULT,
                                              float64=True)
    np.testing.assert_allclose(theirs["step_rewards"].numpy(), returns, rtol=1e-12)
    assert np.all(advantages == 0.0)
    nexts = frontier.graph_next_obs(rollout)
    assert list(nexts[:3]) == ["state 1", "state 2", "success"]


def test_a_missing_graphgpo_core_is_skipped_with_its_reason(monkeypatch, tmp_path):
    monkeypatch.delenv(frontier.GRAPHGPO_CORE_ENV, raising=False)

    class Checkout:
        root = tmp_path

    found = frontier.references(Checkout(), None)
    assert found.hgpo is None and found.graphgpo is None
    assert "no recipe/hgpo" in found.missing["hgpo"]
    assert "GRAPHGPO_CORE" in found.missing["graphgpo"]
    with pytest.raises(SystemExit, match="no such file"):
        frontier.GraphReference(Checkout(), tmp_path / "core_graph.py")


def test_a_perturbed_term_fails_and_is_named(monkeypatch, capsys):
    honest = pipelines.our_advantages

    def off_by_a_little(rollout, config):
        values = honest(rollout, config)
        return values + 3e-6 if config.algo == "grpo" else values

    monkeypatch.setattr(parity, "our_advantages", off_by_a_little)
    status = parity.main(["--self-check", "--seeds", "1", "--groups", "1", "--no-options",
                          "--no-frontier"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert status == 1
    assert last == "worst difference with defaults: 3.0e-06 (grpo advantages, std)"


def test_a_perturbed_loss_fails(monkeypatch, capsys):
    honest = parity.losses.policy_loss

    def scaled(*args, **kwargs):
        loss, stats = honest(*args, **kwargs)
        return loss * (1 + 1e-5), stats

    monkeypatch.setattr(parity.losses, "policy_loss", scaled)
    status = parity.main(["--self-check", "--seeds", "1", "--groups", "1", "--no-options",
                          "--no-frontier"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert status == 1
    assert WORST_LINE.match(last).group(1).endswith(("per-token loss", "micro-batch loss"))


def test_a_bad_checkout_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="not a verl-agent checkout"):
        pipelines.VerlAgent(tmp_path)


@pytest.mark.skipif(not os.environ.get("VERL_AGENT_PATH"),
                    reason="set VERL_AGENT_PATH to a verl-agent checkout to compare with it")
def test_defaults_match_verl_agent():
    # a separate process: importing verl-agent changes sys.path and sys.modules
    # HGPO from the same checkout; GraphGPO when $GRAPHGPO_CORE names its core_graph.py
    command = [sys.executable, "-m", "benchmarks.recipe_parity", "--verl-agent",
               os.environ["VERL_AGENT_PATH"], "--seeds", "1", "--groups", "2", "--no-options"]
    if os.environ.get("VERL_AGENT_DEPS"):
        command += ["--deps", os.environ["VERL_AGENT_DEPS"]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).resolve().parents[2])
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert WORST_LINE.match(last), last
    assert done.returncode == 0, last
