"""The CLI's JSON contracts and exit codes, run in-process through ``main``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.main import main
from scrutiny.core.ledger_metadata import (
    Segment,
    build_ledger_metadata,
    decode_ledger_metadata,
    encode_ledger_metadata_v3,
)
from scrutiny.core.listing_codec import encode_listing, encode_listing_per_run
from scrutiny.core.striping import expected_groups
from scrutiny.core.zk_records import format_pulsar_racks

ENSEMBLE = ("b0:3181", "b1:3181", "b2:3181")


@pytest.fixture
def files(tmp_path: Path) -> Path:
    metadata = build_ledger_metadata(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        segments=[Segment(0, ENSEMBLE)],
        last_entry_id=99,
        length=4_000,
        password=b"hunter2-secret",
        ctime=1_700_000_000_000,
        custom_metadata={"application": b"pulsar", "pulsar/managed-ledger": b"public/default/persistent/orders"},
    )
    (tmp_path / "md").write_bytes(encode_ledger_metadata_v3(metadata))
    for index, bookie in enumerate(ENSEMBLE):
        groups = expected_groups(index, 3, 2, 0, 99)
        (tmp_path / f"{bookie}.compact").write_bytes(encode_listing(groups))
        (tmp_path / f"{bookie}.java").write_bytes(encode_listing_per_run(groups))
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def test_inspect_metadata_keys(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = run(capsys, "inspect", "metadata", str(files / "md"))
    assert code == 0
    assert list(doc) == [
        "format_version",
        "state",
        "ensemble_size",
        "write_quorum",
        "ack_quorum",
        "last_entry_id",
        "length",
        "digest_type",
        "ctime",
        "password_set",
        "segments",
        "custom_metadata",
    ]
    assert doc["segments"] == [{"first_entry_id": 0, "ensemble": list(ENSEMBLE)}]
    assert doc["password_set"] is True and doc["last_entry_id"] == 99 and doc["state"] == "CLOSED"
    assert "hunter2" not in json.dumps(doc)


def test_inspect_metadata_saves_the_bytes_without_the_password(
    files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc, _ = run(capsys, "inspect", "metadata", str(files / "md"), "--save", str(tmp_path / "saved"))
    assert code == 0 and doc["password_set"] is True
    saved = (tmp_path / "saved").read_bytes()
    assert b"hunter2" not in saved
    assert decode_ledger_metadata(saved) == replace(decode_ledger_metadata((files / "md").read_bytes()), password=b"")


def test_inspect_metadata_bad_bytes_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad").write_bytes(b"BookieMetadataFormatVersion\t9\nxx")
    code, _, err = run(capsys, "inspect", "metadata", str(tmp_path / "bad"))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("scrutiny: error:") and "version 9" in err


def test_inspect_listing(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = run(capsys, "inspect", "listing", str(files / "b1:3181.java"))
    assert code == 0
    assert doc["entry_count"] == 67
    groups = doc["groups"]
    assert isinstance(groups, list) and len(groups) == 34
    assert groups[0] == {"first_sequence_start": 0, "last_sequence_start": 0, "sequence_size": 2, "sequence_period": 0}
    ranges = doc["ranges"]
    assert isinstance(ranges, list) and ranges[:2] == [[0, 1], [3, 4]] and len(ranges) == 34
    code, compact, _ = run(capsys, "inspect", "listing", str(files / "b1:3181.compact"), "--max-ranges", "2")
    assert compact["entry_count"] == 67 and compact["ranges"] == [[0, 1], [3, 4]] and compact["ranges_truncated"]


def test_inspect_path_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = run(capsys, "inspect", "path", "--ledger-id", "123456789")
    assert code == 0 and doc["path"] == "/ledgers/01/2345/L6789"
    code, doc, _ = run(capsys, "inspect", "path", "--path", "/ledgers/000/0000/0021/4748/L3647")
    assert doc["ledger_id"] == 2147483647
    code, doc, _ = run(capsys, "inspect", "path", "--ledger-id", "1", "--manager", "flat")
    assert doc["path"] == "/ledgers/L0000000001"
    code, _, err = run(capsys, "inspect", "path", "--path", "/ledgers/01/2345/X6789")
    assert code == 2 and "scrutiny: error:" in err


def test_verdict_healthy_from_java_listings(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listings = [f"--listing={b}={files / (b + '.java')}" for b in ENSEMBLE]
    code, doc, _ = run(capsys, "verdict", "--metadata", str(files / "md"), *listings, "--now", "1")
    assert code == 0
    assert doc == {"verdict": "HEALTHY", "state": "CLOSED", "violations": [], "retry_bookies": []}


def test_verdict_violation_contract(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = run(
        capsys,
        "verdict",
        "--metadata",
        str(files / "md"),
        "--listing",
        f"b0:3181={files / 'b0:3181.compact'}",
        "--no-ledger",
        "b1:3181",
        "--now",
        "1",
    )
    assert code == 0
    assert doc["verdict"] == "VIOLATED" and doc["retry_bookies"] == ["b2:3181"]
    violations = doc["violations"]
    assert isinstance(violations, list)
    first = violations[0]
    assert set(first) >= {"category", "severity", "bookie", "segment_first_entry", "entries"}
    assert first["category"] == "BELOW_ACK_QUORUM" and first["bookie"] is None
    assert first["entries"]["count"] == 67 and first["entries"]["groups"] == [[0, 96, 2, 3], [99, 99, 1, 0]]
    assert [(v["category"], v["bookie"]) for v in violations[1:]] == [("MISSING_REPLICA", "b1:3181")]


def test_verdict_unknown_when_a_bookie_is_not_named(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, doc, _ = run(
        capsys, "verdict", "--metadata", str(files / "md"), "--listing", f"b0:3181={files / 'b0:3181.java'}"
    )
    assert doc["verdict"] == "UNKNOWN" and doc["retry_bookies"] == ["b1:3181", "b2:3181"]


def test_verdict_racks_turn_on_rack_awareness(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "racks.json").write_bytes(
        format_pulsar_racks({"default": {"b0:3181": "/r1", "b1:3181": "/r1", "b2:3181": "r2"}})
    )
    listings = [f"--listing={b}={files / (b + '.compact')}" for b in ENSEMBLE]
    base = ["verdict", "--metadata", str(files / "md"), *listings, "--racks", str(files / "racks.json")]
    _, doc, _ = run(capsys, *base)
    assert [v["category"] for v in doc["violations"]] == ["PLACEMENT_FAIL"]
    _, doc, _ = run(capsys, *base, "--placement", "none")
    assert doc["violations"] == []


def test_verdict_registration_and_grace(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listings = [f"--listing={b}={files / (b + '.compact')}" for b in ENSEMBLE]
    base = ["verdict", "--metadata", str(files / "md"), *listings]
    _, doc, _ = run(capsys, *base, "--registered", "b0:3181", "--readonly", "b1:3181")
    assert [(v["category"], v["bookie"]) for v in doc["violations"]] == [("BOOKIE_NOT_REGISTERED", "b2:3181")]
    (files / "conf.toml").write_text("[verdict]\nunder_replication_grace_seconds = 60\n")
    _, doc, _ = run(
        capsys, *base, "--under-replicated-since", "0", "--now", "61000", "--config", str(files / "conf.toml")
    )
    assert [v["category"] for v in doc["violations"]] == ["UNDER_REPLICATION_STUCK"]
    _, doc, _ = run(
        capsys, *base, "--under-replicated-since", "0", "--now", "59000", "--config", str(files / "conf.toml")
    )
    assert doc["violations"] == []


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--listing", "b0:3181"], "expects BOOKIE=FILE"),
        (["--listing", "b0:3181=/nonexistent/file"], "cannot read /nonexistent/file"),
        (["--no-ledger", "b0:3181", "--unknown", "b0:3181"], "more than one answer"),
        (["--config", "/nonexistent.toml"], "cannot read configuration file"),
    ],
)
def test_verdict_bad_input_exit_2(
    files: Path, capsys: pytest.CaptureFixture[str], extra: list[str], fragment: str
) -> None:
    code, _, err = run(capsys, "verdict", "--metadata", str(files / "md"), *extra)
    assert code == 2 and fragment in err and err.count("\n") == 1


def test_verdict_garbage_listing_exit_2(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "garbage").write_bytes(b"\x00\x00\x00\x07" + bytes(60))
    code, _, err = run(capsys, "verdict", "--metadata", str(files / "md"), "--listing", f"b0:3181={files / 'garbage'}")
    assert code == 2 and "listing of b0:3181" in err and "unsupported version 7" in err


def parse_error(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[object, str]:
    """Run a command line the parser rejects: its exit code and standard error."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "prog", "fragment"),
    [
        (
            ["verdict", "--metadata", "md", "--now", "abc"],
            "scrutiny verdict",
            "argument --now: expected a whole number",
        ),
        (["verdict", "--now", "1"], "scrutiny verdict", "the following arguments are required: --metadata"),
        (
            ["verdict", "--metadata", "md", "--placement", "rack"],
            "scrutiny verdict",
            "--placement: invalid choice: 'rack'",
        ),
        (["verdict", "--metadata", "md", "--now", "-5"], "scrutiny verdict", "argument --now: must not be negative"),
        (["verdict", "--metadata", "md", "--under-replicated-since", "-1"], "scrutiny verdict", "must not be negative"),
        (["inspect", "listing", "f", "--max-ranges", "-1"], "scrutiny inspect listing", "argument --max-ranges: must"),
        (["inspect"], "scrutiny inspect", "the following arguments are required"),
        ([], "scrutiny", "the following arguments are required: COMMAND"),
        (["run", "--duration", "-1"], "scrutiny run", "argument --duration: must be a finite number of seconds"),
        (["run", "--summary-every", "nan"], "scrutiny run", "argument --summary-every: must be a finite number"),
        (["watch", "--duration", "soon"], "scrutiny watch", "argument --duration: expected a number of seconds"),
        (["services", "up", "--timeout", "-3"], "scrutiny services up", "argument --timeout: must be a finite"),
        (["simulate", "--duration", "inf"], "scrutiny simulate", "argument --duration: must be a finite"),
        (["agent", "--grace", "-1"], "scrutiny agent", "argument --grace: must be a finite"),
        (["scan", "--chunk-size", "0"], "scrutiny scan", "argument --chunk-size: must be at least 1, got 0"),
        (["scan", "--chunk-size", "-2"], "scrutiny scan", "argument --chunk-size: must not be negative"),
    ],
)
def test_parser_errors_are_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], prog: str, fragment: str
) -> None:
    code, err = parse_error(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: ") and fragment in err


@pytest.mark.parametrize("command", sorted(COMMAND_HELP))
def test_every_commands_help_is_plain_text(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and out.startswith(f"usage: scrutiny {command}")
    assert "``" not in out and ":class:" not in out and ":func:" not in out


def test_help_still_prints_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["verdict", "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert out.startswith("usage: scrutiny verdict") and "--metadata" in out and "SCRUTINY_CONFIG" in out


def test_verdict_racks_keep_an_explicit_policy_none(
    files: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (files / "racks.json").write_bytes(
        format_pulsar_racks({"default": {"b0:3181": "/r1", "b1:3181": "/r1", "b2:3181": "r2"}})
    )
    listings = [f"--listing={b}={files / (b + '.compact')}" for b in ENSEMBLE]
    base = ["verdict", "--metadata", str(files / "md"), *listings, "--racks", str(files / "racks.json"), "--now", "1"]
    (files / "none.toml").write_text('[placement]\npolicy = "none"\n')
    (files / "racks.toml").write_text("[placement]\nmin_racks_per_write_quorum = 2\n")
    _, doc, _ = run(capsys, *base, "--config", str(files / "none.toml"))
    assert doc["violations"] == []
    _, doc, _ = run(capsys, *base, "--config", str(files / "racks.toml"))
    assert [v["category"] for v in doc["violations"]] == ["PLACEMENT_FAIL"]
    monkeypatch.setenv("SCRUTINY_PLACEMENT_POLICY", "none")
    _, doc, _ = run(capsys, *base)
    assert doc["violations"] == []
    _, doc, _ = run(capsys, *base, "--placement", "rackaware")
    assert [v["category"] for v in doc["violations"]] == ["PLACEMENT_FAIL"]


def test_verdict_readonly_alone_does_not_check_registration(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listings = [f"--listing={b}={files / (b + '.compact')}" for b in ENSEMBLE]
    base = ["verdict", "--metadata", str(files / "md"), *listings, "--now", "1"]
    _, doc, _ = run(capsys, *base, "--readonly", "b1:3181")
    assert doc["verdict"] == "HEALTHY" and doc["violations"] == []
    _, doc, _ = run(capsys, *base, "--registered", "b0:3181", "--registered", "b2:3181", "--readonly", "b1:3181")
    assert doc["violations"] == []
