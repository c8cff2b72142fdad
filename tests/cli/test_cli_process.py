"""The installed ``scrutiny`` console script, run as a separate process (stdin, stdout, exit codes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scrutiny.core.ledger_metadata import Segment, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.listing_codec import encode_listing_per_run
from scrutiny.core.striping import expected_groups
from scrutiny.paths import PROJECT_ROOT

pytestmark = pytest.mark.integration

SCRUTINY = Path(sys.executable).parent / "scrutiny"
#: The README's way to run a command (sets up the checkout first).
SCRIPT = PROJECT_ROOT / "scripts" / "scrutiny"


def scrutiny(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(SCRUTINY), *args], input=stdin, capture_output=True, timeout=60, check=False)


def test_console_script_reads_metadata_from_stdin() -> None:
    metadata = build_ledger_metadata(
        ensemble_size=2, write_quorum=2, ack_quorum=1, segments=[Segment(0, ("a:1", "b:2"))], last_entry_id=4
    )
    done = scrutiny("inspect", "metadata", "-", stdin=encode_ledger_metadata_v3(metadata))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ack_quorum"] == 1


def test_console_script_verdict_and_errors(tmp_path: Path) -> None:
    metadata = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=[Segment(0, ("a:1", "b:2", "c:3"))], last_entry_id=9
    )
    (tmp_path / "md").write_bytes(encode_ledger_metadata_v3(metadata))
    (tmp_path / "a").write_bytes(encode_listing_per_run(expected_groups(0, 3, 2, 0, 9)))
    done = scrutiny(
        "verdict", "--metadata", str(tmp_path / "md"), "--listing", f"a:1={tmp_path / 'a'}", "--no-ledger", "b:2"
    )
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["verdict"] == "VIOLATED" and verdict["retry_bookies"] == ["c:3"]
    bad = scrutiny("inspect", "listing", "-", stdin=b"short")
    assert bad.returncode == 2
    assert bad.stderr.decode().startswith("scrutiny: error: invalid entry listing") and bad.stdout == b""
    usage = scrutiny("verdict")
    assert usage.returncode == 2 and b"--metadata" in usage.stderr


def test_the_script_reads_relative_paths_from_the_callers_directory(tmp_path: Path) -> None:
    """``scripts/scrutiny`` runs where it is called from: a relative file argument is the caller's file."""
    metadata = build_ledger_metadata(
        ensemble_size=2, write_quorum=2, ack_quorum=2, segments=[Segment(0, ("a:1", "b:2"))], last_entry_id=7
    )
    (tmp_path / "L0042").write_bytes(encode_ledger_metadata_v3(metadata))
    done = subprocess.run(
        [str(SCRIPT), "inspect", "metadata", "L0042"], cwd=tmp_path, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["last_entry_id"] == 7
    generated = subprocess.run(
        [str(SCRIPT), "simulate", "--generate", "3", "--out", "scenario.toml"],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert generated.returncode == 0, generated.stderr
    assert (tmp_path / "scenario.toml").is_file() and not (PROJECT_ROOT / "scenario.toml").exists()
