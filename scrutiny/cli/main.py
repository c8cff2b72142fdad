"""The ``scrutiny`` command: one entry point, one subcommand per job.

Only the module of the command that runs is imported (:mod:`scrutiny.cli.commands` lists them all
for ``--help``), so ``scrutiny --help``, ``inspect`` and ``verdict`` never load Spark, Dash, DuckDB
or gRPC. Errors on bad input (undecodable bytes, unreadable files, bad configuration, arguments the
parser rejects) end the command with exit code 2 and a one-line message on standard error, never a
traceback or a usage block; ``--help`` prints the full help.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Collection, Sequence
from typing import NoReturn

from scrutiny import __version__
from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.core.errors import ScrutinyError

EXIT_BAD_INPUT = 2


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on standard error (no usage block), exit code 2.

    Subparsers are created with the parent's class, so every subcommand inherits it.
    """

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE`` on one line and exit with code 2."""
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {_one_line(message)}\n")

    def format_help(self) -> str:
        """The help, with the docstrings' literal markup (````name````) shown as plain text."""
        return super().format_help().replace("``", "")


def build_parser(loaded: Collection[str] = tuple(COMMAND_HELP)) -> argparse.ArgumentParser:
    """The argument parser: every command listed, with the options of the commands in ``loaded`` (default: all)."""
    parser = OneLineErrorParser(
        prog="scrutiny", description="Continuous durability checking for Apache BookKeeper and Pulsar clusters."
    )
    parser.add_argument("--version", action="version", version=f"scrutiny {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMAND_HELP.items():
        if name in loaded:
            importlib.import_module(f"scrutiny.cli.{name}").add_parser(commands)
        else:
            commands.add_parser(name, help=help_text)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, when it is one: the first argument that is not an option."""
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    return first if first in COMMAND_HELP else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = chosen_command(argv)
    args = build_parser([command] if command is not None else []).parse_args(argv)
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
