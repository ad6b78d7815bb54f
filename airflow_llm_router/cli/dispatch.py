"""``llm-router COMMAND ...``: one command line for the provider's commands.

    llm-router quotas load quotas.yaml      # the durable quotas (see cli/quotas.py)
    llm-router serve --port 8090            # the HTTP API on its own (uvicorn)

Each command parses the rest of the line itself, so ``llm-router quotas --help`` shows the
quota commands. A missing or unknown command: one ``error:`` line and exit status 2. A
command's code (and Airflow with it) is imported only when it runs: importing this package
must not import Airflow (the devkit's demo configures Airflow first, then imports it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from airflow_llm_router.cli_parser import CliParser, read_connections_as_airflow

__all__ = ["COMMANDS", "main"]


def _quotas(argv: Sequence[str] | None) -> int:
    from airflow_llm_router.cli.quotas import main as run

    return run(argv)


def _serve(argv: Sequence[str] | None) -> int:
    from airflow_llm_router.web.__main__ import main as run

    return run(argv, prog="llm-router serve")


#: command -> (what it does, its entry: the rest of the line in, the exit status out)
COMMANDS: dict[str, tuple[str, Callable[[Sequence[str] | None], int]]] = {
    "quotas": ("manage the durable quotas (load, migrate, list, budget)", _quotas),
    "serve": ("serve the HTTP API on its own, behind a bearer token", _serve),
}


def _parser() -> CliParser:
    parser = CliParser(
        prog="llm-router", description="The LLM router's command line. "
        "'llm-router COMMAND --help' shows the options of a command.",
        epilog="commands: " + "; ".join(f"{name}: {what}"
                                        for name, (what, _) in COMMANDS.items()))
    parser.add_argument("command", choices=sorted(COMMANDS), help="the command to run")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command that ``argv`` (default: the process's arguments) names."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = _parser().parse_args(args[:1]).command
    read_connections_as_airflow()  # after `airflow connections add`, as Airflow would
    return COMMANDS[command][1](args[1:])
