"""Light commands stay light: ``--help``, ``inspect`` and ``verdict`` never import a heavy library.

Each command runs in a fresh interpreter (the test's own process has imported everything already), which then
reports the top-level names of every module it loaded. The start-up time itself is measured, not asserted, in
``bench/startup_bench.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.core.ledger_metadata import Segment, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.listing_codec import encode_listing
from scrutiny.core.sequence_groups import SequenceGroup

#: Libraries a light command must not load: Spark, Dash/Flask, DuckDB, gRPC, Delta, Arrow, pandas, the clients.
HEAVY = frozenset(
    {"pyspark", "py4j", "dash", "flask", "plotly", "duckdb", "grpc", "deltalake", "pyarrow", "pandas"}
    | {"kazoo", "kafka", "rocksdict", "prometheus_client"}
)
_PROBE = """
import json, sys
from scrutiny.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def loaded_modules(*argv: str) -> set[str]:
    """Every module a fresh interpreter has loaded after running ``scrutiny ARGV``."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def heavy_among(modules: set[str]) -> set[str]:
    return {name for name in modules if name.split(".")[0] in HEAVY}


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("inspect", "path", "--ledger-id", "5"),
        ("inspect", "--help"),
        ("verdict", "--help"),
    ],
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


def test_help_imports_no_command_module() -> None:
    modules = loaded_modules("--help")
    commands = {f"scrutiny.cli.{name}" for name in COMMAND_HELP}
    assert {"scrutiny.cli.main", "scrutiny.cli.commands"} <= modules
    assert modules & commands == set()


def test_a_command_imports_only_its_own_module() -> None:
    modules = loaded_modules("inspect", "path", "--ledger-id", "5")
    commands = {f"scrutiny.cli.{name}" for name in COMMAND_HELP}
    assert modules & commands == {"scrutiny.cli.inspect"}


def test_the_probe_sees_a_heavy_command_load_spark() -> None:
    """The check can fail: ``run --help`` does import Spark's Python side."""
    assert "pyspark" in {name.split(".")[0] for name in heavy_among(loaded_modules("run", "--help"))}
