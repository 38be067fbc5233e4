"""The end-of-run summary ``train.py`` prints: what moved, how noisy it is, what GiGPO's step
groups did, and how many prompts were cut to fit the token budget.

Read from the run's ``metrics.jsonl`` records (:func:`run_summary`). Free of torch.
"""

from __future__ import annotations

import math
from pathlib import Path

SUMMARY_METRICS: tuple[tuple[str, str], ...] = (
    ("success", "rollout/success"),
    ("return", "rollout/return"),
    ("format-error rate", "rollout/format_error_rate"),
    ("invalid-action rate", "rollout/invalid_action_rate"),
    ("episode length", "rollout/episode_length"),
)
"""(label, metric) pairs :func:`run_summary` reports."""

WITHIN_NOISE = 2.0
"""A change smaller than this many standard errors is called within noise (a two-sided
test at about the 5% level)."""


def run_summary(records: list[dict[str, float]], plot_path: Path | None = None, *,
                prompt_budget: int | None = None) -> str:
    """What moved in a run, as a few lines of text (empty when there is no training
    record).

    The first iteration's rollout is sampled before any update, so it measures the
    starting policy (the baseline: the base model, or an SFT warm start or
    ``--model.init-checkpoint``'s); the later ones measure the policy in training. Each
    :data:`SUMMARY_METRICS` is shown at iteration 1, as the mean over the later
    iterations (one iteration of a small preset holds few episodes, so the mean says more
    than the last alone), the change between the two, and at the last iteration. Then a
    noise line (:func:`noise_lines`), the tool-call format's attempts by status and chat
    bridge turns (:func:`tool_call_lines`), GiGPO's step groups (:func:`step_group_lines`), and
    the share of prompts cut to fit the budget (:func:`prompt_cut_line`). Evaluation
    records (no ``rollout/`` keys) are skipped.

    Args:
        records: the run's ``metrics.jsonl`` records, in order.
        plot_path: where the curves were written, named in the last line.
        prompt_budget: the run's ``--prompt.max-prompt-tokens`` (named in the cut line).
    """
    rows = [r for r in records if "rollout/success" in r]
    if not rows:
        return ""
    first, later = rows[0], rows[1:]
    start = int(first["iteration"])
    baseline = f"iteration {start}" + (" (sampled before any update)" if start == 1 else "")
    if not later:
        lines = [f"what moved: only {baseline}; nothing was trained before its rollout"]
        lines += [f"  {label:<20} {first[key]:7.3f}" for label, key in SUMMARY_METRICS
                  if first.get(key) is not None]
    else:
        lines = _table(first, later, baseline)
    lines += noise_lines(rows)
    lines += tool_call_lines(rows)
    lines += step_group_lines(rows)
    cut = prompt_cut_line(rows, prompt_budget)
    if cut:
        lines.append(cut)
    if plot_path is not None:
        lines.append(f"curves: {plot_path}")
    return "\n".join(lines)


def _span(later: list[dict[str, float]]) -> str:
    """``"2-6"`` (or ``"2"``): the iterations of ``later``."""
    low, high = int(later[0]["iteration"]), int(later[-1]["iteration"])
    return f"{low}" if low == high else f"{low}-{high}"


def _table(first: dict[str, float], later: list[dict[str, float]], baseline: str
           ) -> list[str]:
    """The header and one row per :data:`SUMMARY_METRICS`: iteration 1, the mean of the
    later iterations, the change, and the last iteration (when it is not the mean)."""
    span = _span(later)
    last = later[-1]
    mean_label = f"mean of {span}" if len(later) > 1 else f"iteration {span}"
    header = (f"what moved: {baseline} against "
              + (f"the mean of iterations {span} (the policy in training)" if len(later) > 1
                 else f"iteration {span} (after one update)"))
    columns = [f"iteration {int(first['iteration'])}", mean_label, "change"]
    if len(later) > 1:
        header += f"; iteration {int(last['iteration'])} is the last"
        columns.append(f"iteration {int(last['iteration'])}")
    lines = [header + ":", f"  {'':<20}" + "".join(f"{c:>14}" for c in columns)]
    for label, key in SUMMARY_METRICS:
        values = [r[key] for r in later if r.get(key) is not None]
        if first.get(key) is None or not values:
            continue
        mean = sum(values) / len(values)
        cells = [f"{first[key]:.3f}", f"{mean:.3f}", f"{mean - first[key]:+.3f}"]
        if len(later) > 1:
            cells.append("–" if last.get(key) is None else f"{last[key]:.3f}")
        lines.append(f"  {label:<20}" + "".join(f"{c:>14}" for c in cells))
    return lines


def episodes_with_outcome(record: dict[str, float]) -> int | None:
    """The episodes an iteration's success rate is over: its trajectories less those that
    ended on an env error (whose outcome is unknown, :mod:`algorithms.agent.metrics`), or
    ``None`` for records without the counts."""
    if "rollout/trajectories" not in record:
        return None
    return max(int(record["rollout/trajectories"] - record.get("rollout/env_errors", 0)), 0)


def success_standard_error(rate: float, episodes: int) -> float:
    """The standard error ``sqrt(p (1 - p) / n)`` of a success rate ``p`` over ``n``
    episodes (a binomial proportion; 0 for no episodes).

    >>> round(success_standard_error(0.5, 8), 3)
    0.177
    """
    return math.sqrt(rate * (1.0 - rate) / episodes) if episodes else 0.0


def noise_lines(rows: list[dict[str, float]]) -> list[str]:
    """How much of the success change noise explains, from the episode counts.

    A success rate ``p`` of ``n`` episodes has standard error ``sqrt(p (1 - p) / n)``:
    about 0.17 at ``n = 8`` (so 0.50 -> 0.38 over 8 episodes is within noise). With ``p``
    the run's pooled success rate (the rate if nothing changed), the change from iteration
    1 to the mean of the later iterations (``n_1`` and ``N`` episodes) has standard error
    ``sqrt(p (1 - p) (1 / n_1 + 1 / N))``; a change under :data:`WITHIN_NOISE` of them is
    called within noise. None for records without episode counts.
    """
    counts = [episodes_with_outcome(r) for r in rows]
    if any(n is None for n in counts) or not sum(counts):
        return []
    total = sum(counts)
    pooled = sum(r["rollout/success"] * n for r, n in zip(rows, counts, strict=True)
                 if n) / total
    low, high = min(counts), max(counts)
    per = f"{low}" if low == high else f"{low}-{high}"
    typical = sorted(counts)[len(counts) // 2]
    line = (f"noise: {per} episodes per iteration; a success rate p of n episodes has "
            "standard error sqrt(p(1-p)/n): ")
    if pooled in (0.0, 1.0):  # the rate gives no estimate: the largest error instead
        return [line + (f"{success_standard_error(0.5, typical):.2f} for one iteration at "
                        f"p = 0.5, the largest (this run's rate was {pooled:.0f} throughout)")]
    line += (f"{success_standard_error(pooled, typical):.2f} for one iteration at this "
             f"run's p = {pooled:.2f}")
    later = sum(counts[1:])
    if len(rows) < 2 or not counts[0] or not later:
        return [line]
    if len(rows) > 2:
        line += (f", {success_standard_error(pooled, later):.2f} for the mean of "
                 f"iterations {_span(rows[1:])} ({later} episodes)")
    lines = [line]
    values = [r["rollout/success"] for r in rows[1:]]
    change = sum(values) / len(values) - rows[0]["rollout/success"]
    error = math.sqrt(pooled * (1 - pooled) * (1 / counts[0] + 1 / later))
    ratio = abs(change) / error
    verdict = (f"within noise (under {WITHIN_NOISE:g})" if ratio < WITHIN_NOISE
               else f"beyond noise ({WITHIN_NOISE:g} or more)")
    lines.append(f"  the change in success, {change:+.3f}, is {ratio:.1f} standard errors "
                 f"({error:.2f}): {verdict}")
    return lines


def step_group_lines(rows: list[dict[str, float]]) -> list[str]:
    """The summary's account of GiGPO's step groups
    (:func:`~algorithms.agent.metrics.gigpo_term_metrics`), averaged over the iterations
    that logged them, with a line in plain words; none for other estimators."""
    keys = ("advantage/shared_state_share", "advantage/episode_abs_mean",
            "advantage/step_abs_mean")
    logged = [r for r in rows if all(r.get(k) is not None for k in keys)]
    if not logged:
        return []

    def mean(key: str, every: bool = True) -> float | None:
        """Over the iterations that logged ``key``; ``None`` when none did or, with
        ``every``, when some did not (records written before the key existed)."""
        values = [r[key] for r in logged if r.get(key) is not None]
        if not values or (every and len(values) < len(logged)):
            return None
        return sum(values) / len(values)

    share, episode, step = (mean(k) for k in keys)
    lines = [f"GiGPO's step groups (the mean of {len(logged)} iteration"
             f"{'s' if len(logged) > 1 else ''}):",
             f"  {share:.0%} of the steps shared their state with other steps of their group"]
    nonzero, only = mean("advantage/step_nonzero_share"), mean("advantage/step_only_share")
    if nonzero is not None and only is not None:
        lines.append(f"  {nonzero:.0%} got a nonzero step advantage; {only:.0%} got one where "
                     f"the episode advantage was zero (a gradient GRPO would not give)")
    lines.append(f"  mean |step advantage| {step:.3f} beside mean |episode advantage| "
                 f"{episode:.3f}")
    corr = mean("advantage/step_episode_corr", every=False)  # absent where a term is constant
    if corr is not None:
        lines.append(f"  correlation of the step and episode advantages {corr:+.2f}")
    lines.append("  " + step_group_gloss(share, nonzero, only, step, episode, corr))
    return lines


def step_group_gloss(share: float, nonzero: float | None, only: float | None, step: float,
                     episode: float, corr: float | None) -> str:
    """The step-group figures in plain words: what a step group is, how many steps it
    gave credit of their own, and whether that credit told anything the episode's did
    not."""
    text = ("in plain words: GiGPO compares the actions taken from one same state in a "
            "group's episodes by the returns that followed them")
    if nonzero is not None and only is not None:
        text += (f"; that gave {nonzero:.0%} of the steps credit of their own, "
                 f"{only:.0%} where GRPO would give none")
    else:
        text += f"; {share:.0%} of the steps had a state to be compared in"
    size = step / episode if episode > 0 else None
    if size is not None:
        text += f"; that credit was {size:.2f} times the episode's in size"
    if corr is not None:
        sense = ("mostly repeating the episode's verdict" if corr >= 0.8
                 else "partly agreeing with the episode's verdict" if corr >= 0.3
                 else "telling the steps apart where the episode's verdict did not")
        text += f", {sense} (correlation {corr:+.2f})"
    return text


def prompt_cut_line(rows: list[dict[str, float]], budget: int | None = None) -> str | None:
    """The share of the run's prompts cut to fit the token budget (history dropped, the
    observation's start or the admissible-action list's tail cut), over every iteration
    and at the first and last; ``None`` when none was cut (or records lack the rate)."""
    rated = [r for r in rows if r.get("rollout/prompt_cut_rate") is not None]
    if not rated or not any(r["rollout/prompt_cut_rate"] > 0 for r in rated):
        return None
    steps = [r.get("rollout/steps", 1.0) for r in rated]
    share = sum(r["rollout/prompt_cut_rate"] * n for r, n in zip(rated, steps, strict=True)
                ) / max(sum(steps), 1e-9)
    flag = "--prompt.max-prompt-tokens" + (f" {budget}" if budget is not None else "")
    ends = ", ".join(f"iteration {int(r['iteration'])} {r['rollout/prompt_cut_rate']:.0%}"
                     for r in (rated[:1] if len(rated) == 1 else (rated[0], rated[-1])))
    return (f"prompts cut to fit {flag}: {share:.0%} of the run's steps ({ends}); the "
            "model did not see all of their history or observation (raise the flag to keep "
            "them whole)")


def tool_call_lines(rows: list[dict[str, float]]) -> list[str]:
    """The summary's count of tool-call attempts by status and of the chat bridge's turns,
    over the whole run (none in the tag format)."""
    calls = {key.rpartition("/")[2]: sum(r.get(key, 0.0) for r in rows)
             for key in rows[0] if key.startswith("rollout/tool_calls/")}
    if not calls:
        return []
    total = sum(calls.values())
    lines = [f"tool calls ({int(total)} attempts over {len(rows)} iterations): "
             + ", ".join(f"{status} {int(count)}" for status, count in calls.items())]
    if "agent/episodes" in rows[0]:  # --agent: the gateway bridged the loop's calls
        return lines + agent_lines(rows)
    bridge = {name: int(sum(r.get(f"rollout/bridge_{name}", 0.0) for r in rows))
              for name in ("extended", "kept", "ended")}
    turns = sum(bridge.values())
    lines.append(f"chat bridge: {turns} turns bridged, {bridge['extended']} extended the "
                 f"earlier render, {bridge['kept']} kept the sampled tokens where the template "
                 f"rewrote, {bridge['ended']} ended a trajectory" if turns else
                 "chat bridge: no turn bridged (the window layout renders every prompt afresh)")
    return lines


def agent_lines(rows: list[dict[str, float]]) -> list[str]:
    """The summary of a loop of your own (``train.py --agent``) over the whole run: its
    episodes, those left out by kind, and its calls that joined and broke."""
    def total(key: str) -> int:
        return int(sum(r.get(key, 0.0) for r in rows))

    kinds = sorted({key.rpartition("/")[2] for r in rows for key in r
                    if key.startswith("agent/")} - {"episodes", "failed", "calls", "joins",
                                                     "breaks", "episode_seconds",
                                                     "transcript"})
    failed = ", ".join(f"{total(f'agent/{kind}')} {kind}" for kind in kinds
                       if total(f"agent/{kind}"))
    return [f"your loop: {total('agent/episodes')} episodes, {total('agent/failed')} left out"
            f"{f' ({failed})' if failed else ''}; {total('agent/calls')} model calls of the "
            f"episodes kept, {total('agent/joins')} joined the call before, "
            f"{total('agent/breaks')} broke (a new sample row)"]
