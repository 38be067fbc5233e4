"""``python -m agentgym.check ENV_ID [--env-kwargs JSON] [--anchor MODE] [--fast]
[--max-prompt-tokens N] [--history-window K] [--tokenizer PATH]``."""

from __future__ import annotations

import json
import sys

from agentgym.check import PROBE_MAX_STEPS, report, timed_check
from agentgym.check.prompt_length import HISTORY_WINDOW, text_counter
from agentgym.command_line import OneLineParser


def main(argv: list[str] | None = None) -> int:
    """Check an env, print one line per check and a summary; return the exit status:
    0 when every check passed, 1 when one failed, 2 for a bad command line."""
    parser = OneLineParser(
        prog="python -m agentgym.check",
        description="Check an env against AgentGym's contract (Gymnasium's check_env, the "
                    "info keys, anchors, seeds, bad actions, finished episodes, group "
                    "resets), one line per check; exit status 1 on any failure. An env of "
                    "your own: name its module, as gym.make takes it (module:Env-v0).")
    parser.add_argument("env_id", metavar="ENV_ID",
                        help="a registered id, or module:Env-v0 (the module is imported)")
    parser.add_argument("--env-kwargs", default="{}",
                        help="the env's constructor arguments, a JSON object")
    parser.add_argument("--anchor", choices=("observation", "state"), default="observation",
                        help="the anchor mode of the first env (the full check tries both)")
    parser.add_argument("--max-steps", type=int, default=PROBE_MAX_STEPS,
                        help=f"max_steps of the envs built (default {PROBE_MAX_STEPS}, so "
                             "that the probe episode ends)")
    parser.add_argument("--fast", action="store_true",
                        help="only the checks train.py runs before the model loads")
    parser.add_argument("--max-prompt-tokens", type=int, default=None, metavar="N",
                        help="the token budget of your run's prompts (train.py's "
                             "--prompt.max-prompt-tokens; see python train.py --preset NAME "
                             "--help): the prompt length check warns when a probe step's "
                             "text is longer. train.py measures the whole prompt itself, "
                             "with its tokenizer, before the model loads")
    parser.add_argument("--history-window", type=int, default=HISTORY_WINDOW, metavar="K",
                        help=f"(observation, action) pairs a prompt shows (train.py's "
                             f"--prompt.history-window; default {HISTORY_WINDOW})")
    parser.add_argument("--tokenizer", default=None, metavar="PATH",
                        help="count tokens with this tokenizer.json (or a model folder "
                             "holding one; needs the tokenizers package) instead of "
                             "estimating")
    args = parser.parse_args(argv)
    try:
        kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as error:
        parser.error(f"--env-kwargs must be a JSON object: {error}")
    if not isinstance(kwargs, dict):
        parser.error(f"--env-kwargs must be a JSON object, got {args.env_kwargs!r}")
    try:
        prompts = text_counter(args.max_prompt_tokens, history_window=args.history_window,
                               tokenizer=args.tokenizer)
    except ValueError as error:
        parser.error(str(error))
    results, seconds = timed_check(args.env_id, kwargs, anchor=args.anchor,
                                   max_steps=args.max_steps, fast=args.fast, prompts=prompts)
    for result in results:
        print(result.line, flush=True)
    print(report(results, seconds), flush=True)
    return 1 if any(not r.passed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
