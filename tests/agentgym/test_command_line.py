"""One error style for every command: ``PROG: error: MESSAGE`` on one line, exit status 2
for a command line that cannot run as given (``agentgym.command_line``)."""

from __future__ import annotations

import pytest

from agentgym.command_line import USAGE_ERROR, OneLineParser


def test_a_refused_command_line_is_one_line_and_exit_status_2(capsys):
    parser = OneLineParser(prog="python -m tool")
    parser.add_argument("--count", type=int, required=True)
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["--count", "many"])
    assert stop.value.code == USAGE_ERROR == 2
    assert capsys.readouterr().err == ("python -m tool: error: argument --count: invalid int "
                                       "value: 'many' (python -m tool --help lists the "
                                       "options)\n")


def test_a_subcommands_parser_answers_in_the_same_style(capsys):
    parser = OneLineParser(prog="python -m tool")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run").add_argument("--fast", action="store_true")
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["run", "--slow"])
    (line,) = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2 and line.startswith("python -m tool: error: unrecognized "
                                                    "arguments: --slow")


def test_the_env_checker_refuses_bad_kwargs_in_one_line(capsys):
    from agentgym.check.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main(["AgentGym/Scripted-v0", "--env-kwargs", "[1]"])
    (line,) = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2
    assert line.startswith("python -m agentgym.check: error: --env-kwargs must be a JSON "
                           "object, got '[1]'")
