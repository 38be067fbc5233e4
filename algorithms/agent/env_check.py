"""The env check of a run, before its model loads: the fast part of ``agentgym.check``.

AgentGym's own envs (``AgentGym/*``) are tested by this project's suite; any other env
(``--env.env-id module:Env-v0``) is checked by :func:`check_run_env` with the run's own
settings (its ``env_kwargs``, anchor mode and ``max_steps``; the evaluation env's kwargs
too when they differ) before anything is loaded or written: a contract breach (an
unhashable anchor, a non-text observation, a step that raises, a constructor that refuses
an argument) is one line and ``train.py`` exits with status 2, instead of a traceback
after the model loaded and the first rollout ran. ``python -m agentgym.check`` runs the
same checks and more, one line each.

The ``prompt length`` check measures the run's own prompts of the probe episode's steps
(:mod:`algorithms.agent.prompt_budget`: the run's prompt builder and tokenizer, against
``--prompt.max-prompt-tokens``); a prompt over the budget is a warning, said in one line
(the run goes on and cuts it), not an error.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from algorithms.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from algorithms.runs.readiness import Check


class EnvContractError(ConfigError):
    """The run's env breaks the env contract (one line; ``train.py`` exits with 2)."""


def check_run_env(config: TrainConfig, say: Callable[[str], None] = lambda line: None,
                  load_tokenizer: Callable[[], tuple[Any, str]] | None = None) -> None:
    """Run the fast contract checks on ``config``'s env unless it is AgentGym's own; say
    one line when the env is trained through :class:`agentgym.PlainTextEnv`, and one
    for each warning (prompts longer than the budget, counted with ``load_tokenizer``'s
    tokenizer: :func:`~algorithms.agent.prompt_budget.run_prompt_counter`; by default
    estimated).

    Raises:
        EnvContractError: a check failed; the message names it, what it saw, how many
            others failed, and the ``python -m agentgym.check`` command that lists them.
    """
    from agentgym.check import ContractCheck
    from agentgym.registration import is_agentgym_env
    from algorithms.agent.prompt_budget import estimating_tokenizer, run_prompt_counter

    env = config.env
    if is_agentgym_env(env.env_id):
        return
    kinds: list[dict[str, Any]] = [json.loads(env.env_kwargs)]
    evaluated = config.run.eval_only or config.run.eval_every or config.run.eval_before_train
    if evaluated and json.loads(env.eval_env_kwargs):
        kinds.append({**kinds[0], **json.loads(env.eval_env_kwargs)})
    plain = False
    prompts = run_prompt_counter(config, load_tokenizer or estimating_tokenizer)
    warned: set[str] = set()
    for kwargs in kinds:
        check = ContractCheck(env.env_id, kwargs, anchor=env.anchor, max_steps=env.max_steps,
                              prompts=prompts)
        results = check.run(fast=True)
        plain = plain or check.plain
        failed = [result for result in results if not result.passed]
        if failed:
            first = failed[0]
            more = f"; {len(failed) - 1} more check(s) failed" if len(failed) > 1 else ""
            command = f"python -m agentgym.check {shlex.quote(env.env_id)}" + (
                f" --env-kwargs {shlex.quote(json.dumps(kwargs))}" if kwargs else "")
            raise EnvContractError(
                f"the env {env.env_id} (built with {kwargs or 'no env kwargs'}) breaks the "
                f"env contract: {first.name}: {first.detail}{more}; `{command}` lists "
                "every check (docs/own-env.md)")
        for result in results:
            if result.warning and result.detail not in warned:
                warned.add(result.detail)
                built = f" (env kwargs {kwargs})" if len(kinds) > 1 else ""
                say(f"warning: {result.name} of {env.env_id}{built}: {result.detail}")
    if plain:
        say(f"{env.env_id} is a plain Gymnasium env: trained through agentgym.PlainTextEnv "
            "(anchors from the observation text, free-form actions unless its info lists "
            "admissible_actions, task ids from seeds; docs/own-env.md#plain-gymnasium-envs)")


def contract_checks(config: TrainConfig) -> list[Check]:
    """:func:`check_run_env` as ``train.py --dry-run``'s ``env contract`` check: one
    :class:`~algorithms.runs.readiness.Check`, or none for AgentGym's own envs (this
    project's tests check those). What the run would say before its model loads comes
    after it, a warning as a ``WARN`` check of its own (the prompt length, counted with
    the estimating tokenizer: the dry run loads no model), a note as an ``ok`` one."""
    from agentgym.registration import is_agentgym_env
    from algorithms.runs.readiness import Check

    if is_agentgym_env(config.env.env_id):
        return []
    said: list[str] = []
    try:
        check_run_env(config, said.append)
    except EnvContractError as error:
        return [Check("env contract", False, str(error))]
    checks = [Check("env contract", True, f"{config.env.env_id} passes the fast checks")]
    for line in said:
        name, _, detail = line.removeprefix("warning: ").partition(f" of {config.env.env_id}")
        if line.startswith("warning: "):
            checks.append(Check(name, True, detail.removeprefix(": ").strip(), warning=True))
        else:
            checks.append(Check("env note", True, line))
    return checks
