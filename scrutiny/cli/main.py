"""The ``scrutiny`` command: one entry point, one subcommand per job.

Errors on bad input (undecodable bytes, unreadable files, bad configuration, arguments the parser
rejects) end the command with exit code 2 and a one-line message on standard error, never a
traceback or a usage block; ``--help`` prints the full help.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from scrutiny import __version__
from scrutiny.core.errors import ScrutinyError

EXIT_BAD_INPUT = 2
#: Modules of scrutiny.streaming that each register their subcommands with ``add_parser(commands)``.
COMMAND_MODULES = (
    "cli_inspect",
    "cli_verdict",
    "cli_services",
    "cli_agent",
    "cli_watch",
    "cli_simulate",
    "cli_run",
    "cli_report",
    "cli_sql",
    "cli_scan",
    "cli_dashboard",
)


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on standard error (no usage block), exit code 2.

    Subparsers are created with the parent's class, so every subcommand inherits it.
    """

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE`` on one line and exit with code 2."""
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {_one_line(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = OneLineErrorParser(
        prog="scrutiny", description="Continuous durability checking for Apache BookKeeper and Pulsar clusters."
    )
    parser.add_argument("--version", action="version", version=f"scrutiny {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"scrutiny.streaming.{name}").add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except ScrutinyError as error:
        print(f"scrutiny: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
    return code


def _one_line(error: Exception | str) -> str:
    return " ".join(str(error).split())


if __name__ == "__main__":
    sys.exit(main())
