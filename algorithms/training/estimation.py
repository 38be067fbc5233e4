"""Phase 2 of an update: the per-step learning signals of a scored batch.

:func:`estimate_advantages` dispatches on the config's estimator to the pure functions of
:mod:`algorithms.objectives.advantages` -- GAE (PPO, with the critic's values), GRPO, RLOO,
REINFORCE++, GiGPO, HGPO or GraphGPO -- after :func:`rewards_and_penalties` decided where the invalid-action
penalty (and DAPO's overlong cost) lands: on its own row after the returns (verl-agent's
placement, the default) or in the step rewards (``learner.penalty_in_returns``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from algorithms.agent.step_batch import StepBatch
from algorithms.config import TrainConfig
from algorithms.objectives import advantages as adv


@dataclass(frozen=True)
class Advantages:
    """Per-step learning signals.

    Attributes:
        advantages: (N,) float64 advantage per step.
        returns: (N,) float64 critic targets (PPO), else ``None``.
        step_group_ids: (N,) int64 step-group ids (same group, same anchor) of GiGPO, HGPO
            (its k = 1 history groups) and GraphGPO, else ``None``.
        episode: (N,) float64 episode term (GiGPO, GRPO, HGPO's base item whether or not
            it is used, GraphGPO), else ``None``.
        step: (N,) float64 step term (GiGPO's and GraphGPO's before their weight, HGPO's
            weighted mean of its history groups without the base item), else ``None``.
    """

    advantages: np.ndarray
    returns: np.ndarray | None = None
    step_group_ids: np.ndarray | None = None
    episode: np.ndarray | None = None
    step: np.ndarray | None = None


def bootstrap_last_values(batch: StepBatch) -> np.ndarray:
    """``last_values`` for :func:`~algorithms.objectives.advantages.gae_advantages` from a scored batch.

    Returns:
        (N,) float64: V(s_T) (``batch.bootstrap_values``) at the last row of each
        trajectory cut by a step limit or an env error, NaN (terminated: no bootstrap) on
        every other row, including the last rows of terminated trajectories.
    """
    if batch.bootstrap_rows is None or batch.bootstrap_values is None:
        raise ValueError("the batch has no bootstrap values: collect the rollout with "
                         "keep_bootstrap_prompts=True and score it with a critic")
    last_values = np.full(len(batch), np.nan)
    last_values[batch.bootstrap_rows] = batch.bootstrap_values
    return last_values


def estimate_advantages(batch: StepBatch, config: TrainConfig) -> Advantages:
    """Per-step advantages from the configured estimator (see module docstring).

    Raises:
        ValueError: GAE without critic values; GiGPO or GRPO on a batch that still
            holds env-error trajectories (take ``Learner.training_batch`` first).
    """
    learner = config.learner
    estimator = config.estimator
    if estimator == "gae":
        if batch.values is None:
            raise ValueError("GAE needs critic values: call score() first")
        # A trajectory cut by a step limit or an env error bootstraps from V(s_T);
        # terminated ones do not. With bootstrap_truncated off, every cut counts as a
        # termination (the GiGPO reference).
        last_values = (bootstrap_last_values(batch) if config.bootstrap_truncated
                       else None)
        overlong = overlong_costs(batch, config)
        rewards = batch.rewards if overlong is None else batch.rewards - overlong
        advantages, returns = adv.gae_advantages(
            rewards, batch.values.astype(np.float64), batch.traj_ids,
            gamma=learner.gamma, lam=learner.gae_lambda, last_values=last_values)
        if learner.whiten_gae and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return Advantages(advantages=advantages, returns=returns)
    if batch.env_error.any():
        raise ValueError(f"{estimator} cannot use trajectories that ended on an env "
                         "error (their outcome is unknown): pass "
                         "Learner.training_batch(batch)")
    rewards, penalties = rewards_and_penalties(batch, config)
    if estimator == "grpo":
        values = adv.grpo_advantages(rewards, batch.traj_ids, batch.group_ids,
                                     normalize=learner.normalize,
                                     episode_stats=learner.episode_stats,
                                     penalties=penalties)
        return Advantages(advantages=values, episode=values)
    if estimator == "rloo":
        values = adv.rloo_advantages(rewards, batch.traj_ids, batch.group_ids,
                                     episode_stats=learner.episode_stats,
                                     penalties=penalties)
        return Advantages(advantages=values, episode=values)
    if estimator == "reinforce_pp":
        # whitened over the batch's response tokens, as verl whitens its token matrix
        values = adv.reinforce_pp_advantages(
            rewards, batch.traj_ids, batch.group_ids, episode_stats=learner.episode_stats,
            penalties=penalties, token_counts=batch.response_mask.sum(axis=1))
        return Advantages(advantages=values)
    # the rollout's dense anchor ids take GiGPO's integer path (same groups)
    anchors = batch.anchor_ids if batch.anchor_ids is not None else batch.anchors
    if estimator == "hgpo":
        hgpo = adv.hgpo_terms(
            rewards, batch.traj_ids, batch.group_ids, anchors,
            history_length=hgpo_history_length(batch, config),
            gamma=learner.gamma, normalize=learner.normalize,
            length_weight_alpha=learner.hgpo_length_weight_alpha,
            base_group=learner.hgpo_base_group, episode_stats=learner.episode_stats,
            penalties=penalties)
        return Advantages(advantages=hgpo.advantages, step_group_ids=hgpo.step_group_ids,
                          episode=hgpo.episode, step=hgpo.history)
    if estimator == "graphgpo":
        if batch.next_anchors is None:
            raise ValueError("graphgpo needs each step's next state (batch.next_anchors), "
                             "which the rollout records; this batch has none")
        graph = adv.graphgpo_terms(
            rewards, batch.traj_ids, batch.group_ids, batch.anchors, batch.next_anchors,
            batch.success, gamma=learner.graphgpo_decay, normalize=learner.normalize,
            normalize_distance=learner.graphgpo_normalize_distance,
            similarity_threshold=learner.similarity_threshold,
            episode_stats=learner.episode_stats, penalties=penalties)
        return Advantages(
            advantages=graph.combined(learner.step_weight, learner.graphgpo_episode_weight),
            step_group_ids=graph.step_group_ids, episode=graph.episode, step=graph.step)
    if learner.similarity_threshold is not None:
        anchors = batch.anchors  # fuzzy grouping compares the anchor texts
    terms = adv.gigpo_terms(rewards, batch.traj_ids, batch.group_ids, anchors,
                            gamma=learner.gamma, normalize=learner.normalize,
                            episode_stats=learner.episode_stats,
                            similarity_threshold=learner.similarity_threshold,
                            penalties=penalties)
    return Advantages(advantages=terms.combined(learner.step_weight),
                      step_group_ids=terms.step_group_ids, episode=terms.episode,
                      step=terms.step)


def hgpo_history_length(batch: StepBatch, config: TrainConfig) -> int:
    """The ``history_length`` HGPO's groups take: ``learner.hgpo_history_length`` when set,
    else the history the batch's prompts held.

    HGPO groups a step with the steps whose last ``k`` anchors match its own, up to the
    history its policy saw: verl-agent ties the two (``env.history_length`` sets both the
    prompt's window and the groups). In the window layout that is
    ``prompt.history_window``. In the transcript layout a step's prompt is its whole
    trajectory so far (a transcript that would outgrow ``prompt.max_prompt_tokens`` ends the
    trajectory instead of losing its start), and ``history_window`` is not read, so the
    groups reach back to the trajectory's first step: one less than the batch's longest
    trajectory (a step ``t`` then joins its groups ``k = 1 .. t + 1``). This keeps HGPO's
    rule -- the groups of the context the action was chosen in -- rather than refusing
    the layout; the longest of these groups are the steps with the same anchors from the
    start, which no reference code runs (verl-agent's HGPO has window prompts only).

    Returns:
        An int >= 0.
    """
    if config.learner.hgpo_history_length is not None:
        return config.learner.hgpo_history_length
    if batch.layout == "transcript":
        if len(batch) == 0:
            return 0
        return int(np.unique(batch.traj_ids, return_counts=True)[1].max()) - 1
    return config.prompt.history_window


def rewards_and_penalties(batch: StepBatch, config: TrainConfig) -> tuple[np.ndarray, np.ndarray | None]:
    """The step rewards the group estimators see, and the row penalties charged after
    the returns (``learner.penalty_in_returns``).

    The penalties are the invalid-action penalty plus, with ``learner.overlong_buffer``,
    DAPO's overlong cost of the step's response (:func:`overlong_costs`).

    Returns:
        ``(rewards, penalties)``: with verl-agent's placement (the default), the env's
        (N,) rewards and the (N,) penalties each row pays on its own; with the penalty
        in the returns, the penalized (N,) rewards and ``None``.
    """
    overlong = overlong_costs(batch, config)
    if config.learner.penalty_in_returns:
        return (batch.rewards if overlong is None else batch.rewards - overlong), None
    if overlong is None:
        return batch.env_rewards, batch.penalties
    return batch.env_rewards, batch.penalties + overlong


def overlong_costs(batch: StepBatch, config: TrainConfig) -> np.ndarray | None:
    """(N,) DAPO's soft overlong cost of each step's response
    (:func:`~algorithms.objectives.advantages.overlong_penalties` with ``learner.overlong_buffer``
    tokens before ``generation.max_new_tokens``), or ``None`` when it is off."""
    if config.learner.overlong_buffer <= 0:
        return None
    return adv.overlong_penalties(
        batch.response_mask.sum(axis=1),
        max_response_length=config.generation.max_new_tokens,
        buffer_length=config.learner.overlong_buffer,
        penalty_factor=config.learner.overlong_penalty_factor)
