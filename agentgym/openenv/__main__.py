"""``python -m agentgym.openenv serve ENV_ID [--host H] [--port P] [--kwarg KEY=VALUE ...]``.

Serves ``gym.make(ENV_ID, **kwargs)`` through OpenEnv (see :mod:`agentgym.openenv.server`).
Each ``--kwarg`` value is read as JSON when it parses (``max_steps=20``, ``hint=true``,
``task_types='["pick_and_place_simple"]'``) and as a string otherwise
(``anchor=state``); ``--env-kwargs '{"split": "valid_seen"}'`` gives them all at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agentgym.command_line import OneLineParser

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def _parse_kwarg(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def _parse_env_kwargs(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"--env-kwargs is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--env-kwargs must be a JSON object")
    return value


def build_parser() -> argparse.ArgumentParser:
    from agentgym.openenv.server import DEFAULT_MAX_SESSIONS

    parser = OneLineParser(prog="python -m agentgym.openenv",
                           description=__doc__.split("\n\n")[1])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve one registered env id over OpenEnv")
    serve.add_argument("env_id", help="a registered id, e.g. AgentGym/ALFWorld-v0")
    serve.add_argument("--host", default=DEFAULT_HOST,
                       help=f"interface to bind (default {DEFAULT_HOST}: this machine only)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port")
    serve.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                       help="concurrent sessions (env instances); one more is refused")
    serve.add_argument("--session-timeout", type=float, default=None,
                       help="seconds after which an idle HTTP session is reaped")
    serve.add_argument("--kwarg", type=_parse_kwarg, action="append", default=[],
                       metavar="KEY=VALUE", help="a gym.make keyword argument (repeatable)")
    serve.add_argument("--env-kwargs", type=_parse_env_kwargs, default={},
                       metavar="JSON", help="gym.make keyword arguments as a JSON object")
    return parser


def main(argv: list[str] | None = None) -> int:
    from agentgym.openenv import require_openenv

    require_openenv()
    args = build_parser().parse_args(argv)
    import uvicorn

    import agentgym  # noqa: F401  (registers the ids)
    from agentgym.openenv.server import create_app

    env_kwargs = {**args.env_kwargs, **dict(args.kwarg)}
    app = create_app(args.env_id, max_sessions=args.max_sessions,
                     session_timeout=args.session_timeout, **env_kwargs)
    print(f"serving {args.env_id} (gym.make kwargs {env_kwargs}) on "
          f"ws://{args.host}:{args.port}/ws, at most {args.max_sessions} sessions", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
