"""The subcommands of ``scrutiny``, in the order ``--help`` lists them, with their one-line help.

Each name is also the module of :mod:`scrutiny.cli` that registers the command (``add_parser``) and runs it.
This table lets the entry point list every command while importing only the one that runs, so a light command
never pays for the imports of a heavy one (Spark, Dash, DuckDB, gRPC).
"""

from __future__ import annotations

from typing import Final

COMMAND_HELP: Final[dict[str, str]] = {
    "inspect": "decode ledger metadata, entry listings and ZooKeeper paths",
    "verdict": "compute one ledger's verdict from its metadata and its bookies' listings",
    "services": "start, inspect or stop the embedded ZooKeeper and Kafka broker",
    "agent": "serve this bookie's entry listings (DbLedgerStorage) to the checker over gRPC",
    "watch": "publish ledger metadata changes from ZooKeeper to Kafka",
    "simulate": "run a simulated BookKeeper cluster from a scenario (or generate a scenario)",
    "run": "the streaming checker (no configuration: the embedded default on a simulated cluster)",
    "report": "print the health summary (fsck style) from the checker's Delta tables",
    "sql": "run SQL over the Delta tables (violations, open_violations, ledger_checks, checker_runs) and views",
    "scan": "check every ledger once (fsck style) and write the findings to the tables",
    "dashboard": "serve a live web dashboard over the checker's Delta tables",
}
