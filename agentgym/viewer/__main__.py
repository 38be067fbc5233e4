"""``python -m agentgym.viewer RUN_DIR [OTHER_RUN_DIR ...] [--port N] [--host ADDRESS]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentgym.viewer.data import RunReadError, check_run_dir
from agentgym.viewer.server import HOST, make_server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.viewer",
        description="Browse a run's rollouts, curves and evaluations in the browser "
                    "(served on 127.0.0.1: this machine only; from another machine, "
                    "forward the port: ssh -L 8765:127.0.0.1:8765 USER@HOST, then open "
                    "http://127.0.0.1:8765/ there). Several runs: compare their success "
                    "per task type.")
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                        help="run folder(s), e.g. runs/cpu-demo-gigpo-seed0")
    parser.add_argument("--port", type=int, default=8765,
                        help="port to serve on (0: any free port); default 8765")
    parser.add_argument("--host", default=HOST,
                        help=f"address to bind; default {HOST} (this machine only). "
                             "0.0.0.0 serves every network interface: anyone who can reach "
                             "the machine can read the run's records, with no password")
    args = parser.parse_args(argv)
    try:
        run_dirs = [check_run_dir(path) for path in args.run_dirs]
    except (RunReadError, OSError) as error:
        sys.exit(f"agentgym.viewer: error: {error}")
    try:
        server = make_server(run_dirs, args.port, args.host)
    except OSError as error:  # a port in use, an address not of this machine
        sys.exit(f"agentgym.viewer: error: cannot serve on {args.host}:{args.port}: "
                 f"{error.strerror or error}")
    host, port = server.server_address[:2]
    shown = "127.0.0.1" if host == "0.0.0.0" else host  # every interface: this one answers
    print(f"[agentgym] viewer on http://{shown}:{port}/ (Ctrl-C to stop)"
          + (f"; bound to {host}: every network interface, no password" if shown != host
             else ""), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("[agentgym] viewer stopped", flush=True)
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
