"""Light commands stay light: ``--help``, ``inspect`` and ``verdict`` never import a heavy library.

Each command line runs through the entry point's ``main()`` in a fresh interpreter (this test process may have
imported everything already), which then reports its exit code and every module it loaded. ``--help`` must build
the parser without importing any command's module, and each command imports its own module only. The start-up
time and memory themselves are measured, not asserted, by ``bench/startup_bench.py``.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.core.ledger_metadata import Segment, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.listing_codec import encode_listing
from scrutiny.core.sequence_groups import SequenceGroup

#: Top-level names of the libraries a light command must not load: Spark, Dash and Flask, DuckDB, gRPC, Delta,
#: Arrow, pandas, plotly, and the ZooKeeper, Kafka, RocksDB and Prometheus clients.
HEAVY = frozenset(
    {"pyspark", "py4j", "dash", "flask", "plotly", "duckdb", "grpc", "deltalake", "pyarrow", "pandas"}
    | {"kazoo", "kafka", "rocksdict", "prometheus_client"}
)
#: The modules the entry point itself consists of: all that ``--help`` may import of ``scrutiny.cli``.
ENTRY_MODULES = frozenset({"scrutiny.cli.main", "scrutiny.cli.commands"})
COMMAND_MODULES = frozenset(f"scrutiny.cli.{name}" for name in COMMAND_HELP)

#: Runs ``main(argv)`` and reports, as the last line on standard error, its exit code and the loaded modules.
_RUN_MAIN = """
import json, sys
from scrutiny.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""
#: Imports every command's module and reports, as the last line on standard error, those with ``add_parser``.
_IMPORT_COMMANDS = """
import importlib, json, sys
names = sys.argv[1:]
registering = [name for name in names if callable(getattr(importlib.import_module(name), "add_parser", None))]
print(json.dumps({"code": 0, "registering": registering, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _report(script: str, *argv: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    report: dict[str, object] = json.loads(lines[-1])
    return report


@functools.cache
def loaded_modules(*argv: str) -> frozenset[str]:
    """Every module a fresh interpreter has loaded after ``scrutiny ARGV`` ran to a successful end."""
    report = _report(_RUN_MAIN, *argv)
    assert report["code"] in (0, None), f"scrutiny {' '.join(argv)} ended with {report['code']}"
    modules = report["modules"]
    assert isinstance(modules, list)
    return frozenset(str(name) for name in modules)


def heavy_among(modules: frozenset[str]) -> set[str]:
    """The heavy libraries (top-level names) among these modules."""
    return {name.split(".")[0] for name in modules} & HEAVY


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("inspect", "path", "--ledger-id", "5"),
        ("inspect", "--help"),
        ("verdict", "--help"),
    ],
    ids=["help", "inspect-path", "inspect-help", "verdict-help"],
)
def test_a_light_command_imports_no_heavy_library(argv: tuple[str, ...]) -> None:
    assert heavy_among(loaded_modules(*argv)) == set()


def test_inspect_and_verdict_on_files_import_no_heavy_library(tmp_path: Path) -> None:
    listing, metadata = tmp_path / "listing", tmp_path / "metadata"
    listing.write_bytes(encode_listing([SequenceGroup(0, 9, 10, 0)]))
    closed = build_ledger_metadata(
        ensemble_size=1, write_quorum=1, ack_quorum=1, segments=[Segment(0, ("bk1:3181",))], last_entry_id=9
    )
    metadata.write_bytes(encode_ledger_metadata_v3(closed))
    assert heavy_among(loaded_modules("inspect", "listing", str(listing))) == set()
    assert heavy_among(loaded_modules("inspect", "metadata", str(metadata))) == set()
    verdict = ("verdict", "--metadata", str(metadata), "--listing", f"bk1:3181={listing}")
    assert heavy_among(loaded_modules(*verdict)) == set()


def test_help_builds_the_parser_without_any_command_module() -> None:
    modules = loaded_modules("--help")
    assert modules >= ENTRY_MODULES
    assert modules & COMMAND_MODULES == set()


@pytest.mark.parametrize(
    "argv", [("inspect", "path", "--ledger-id", "5"), ("verdict", "--help")], ids=["inspect-path", "verdict-help"]
)
def test_a_command_imports_only_its_own_module(argv: tuple[str, ...]) -> None:
    assert loaded_modules(*argv) & COMMAND_MODULES == {f"scrutiny.cli.{argv[0]}"}


def test_every_command_module_imports_and_registers_its_command() -> None:
    """Each module ``--help`` lists exists and has ``add_parser``; together they do load the heavy libraries."""
    report = _report(_IMPORT_COMMANDS, *sorted(COMMAND_MODULES))
    assert report["registering"] == sorted(COMMAND_MODULES)
    modules = report["modules"]
    assert isinstance(modules, list)
    # The check above can fail: the heavy commands' modules load what the light ones must not.
    assert {"pyspark", "dash", "duckdb", "grpc"} <= heavy_among(frozenset(str(name) for name in modules))
