"""The scan command's own output: progress on standard error and the figures block."""

from __future__ import annotations

import io

import pytest

from scrutiny.cli.scan import ProgressLine, _interruption, scan_json, scan_lines
from scrutiny.core.held_ledgers import HeldLedger
from scrutiny.core.ledger_scan import ScanMode, parse_ledger_selection
from scrutiny.settings.loader import load_settings
from scrutiny.streaming.scan.held import NAMED_LEDGERS, HeldSurvey, HeldWithoutMetadata
from scrutiny.streaming.scan.job import ScanResult

pytestmark = pytest.mark.unit


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_lines_are_rate_limited_but_keep_the_first_and_last_step() -> None:
    out = io.StringIO()
    progress = ProgressLine(out, every_s=3600)
    progress.update("ledger nodes found", 5, None)
    progress.update("ledgers checked", 0, 100)
    progress.update("ledgers checked", 40, 100)  # within the interval: not shown
    progress.update("ledgers checked", 100, 100)
    lines = out.getvalue().splitlines()
    assert lines[0] == "scan: ledger nodes found 5"
    assert len(lines) == 3 and "0/100" in lines[1] and "40/100" not in out.getvalue()
    assert lines[2].startswith("scan: [" + "#" * 30 + "] 100/100 ledgers checked")


def test_a_slow_rate_is_not_shown_as_zero_and_time_left_reads_as_a_duration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([0.0, 0.0, 10.0, 360.0])  # the line made, then each update
    monkeypatch.setattr("scrutiny.cli.scan.time.monotonic", lambda: next(clock))
    out = io.StringIO()
    progress = ProgressLine(out, every_s=0)
    progress.update("ledgers checked", 0, 3)
    progress.update("ledgers checked", 1, 3)  # 10 s in: 0.1 ledgers/s, 20 s left
    progress.update("ledgers checked", 3, 3)
    lines = out.getvalue().splitlines()
    assert lines[1].endswith("1/3 ledgers checked (0.1/s, 20 s left)"), lines[1]
    assert lines[2].endswith("3/3 ledgers checked (0.5/min)"), lines[2]  # 3 in 360 s


def test_on_a_terminal_one_line_is_rewritten_and_ended() -> None:
    out = Terminal()
    progress = ProgressLine(out, every_s=0)
    progress.update("ledgers checked", 0, 10)
    progress.update("ledgers checked", 5, 10)
    progress.note("stopping safely")
    text = out.getvalue()
    assert text.count("\r\033[K") == 2 and "[" + "#" * 15 + "." * 15 + "] 5/10" in text
    assert text.endswith("\nscan: stopping safely\n")
    progress.done()
    assert out.getvalue() == text  # nothing left open


def test_the_figures_block_names_the_selection_and_the_rate() -> None:
    result = ScanResult("scan-1", ScanMode.FAST, 0, ledgers_in_zookeeper=10, selected=4, examined=4, checked=3)
    result.check_seconds = 2.0
    selection = parse_ledger_selection("1-3,9").describe()
    lines = scan_lines(result, "data", load_settings(env={}), selection=selection)
    assert " Ledgers selected:           4 (1-3,9)" in lines
    assert " Skipped (open, unsealed):   1" in lines
    assert any(line.endswith("(2.0 ledgers/s)") for line in lines)
    result.check_seconds = 20.0  # a small scan that waited on re-checks: 0.2/s, not "0 ledgers/s"
    assert any(line.endswith("(0.2 ledgers/s)") for line in scan_lines(result, "data", load_settings(env={})))
    document = scan_json(result, "data")
    assert document["ledgers_skipped"] == 1 and document["mode"] == "fast" and not document["interrupted"]


def test_what_the_bookies_hold_without_metadata_is_summed_named_and_in_the_json() -> None:
    result = ScanResult("scan-1", ScanMode.DEEP, 0)
    assert not any("Held without metadata" in line for line in scan_lines(result, "data", load_settings(env={})))
    assert scan_json(result, "data")["held_without_metadata"] is None  # no survey ran
    many = [HeldLedger(i, first_entry_id=0, last_entry_id=4) for i in range(NAMED_LEDGERS)]
    result.held = HeldSurvey(
        [
            HeldWithoutMetadata("bk1:3181", listed=900, count=25, ledgers=many),
            HeldWithoutMetadata("bk2:3181", listed=800),
        ],
        {"bk3:3181": "UNIMPLEMENTED: this agent cannot list its bookie's ledgers"},
    )
    lines = scan_lines(result, "data", load_settings(env={}))
    assert any(line.endswith("25 on 1 of 2 bookies listed through their agents") for line in lines)
    assert "  bk1:3181: 25 of 900 ledgers held (ledgers 0, 1, 2" in "\n".join(lines) and ", ...)" in "\n".join(lines)
    assert "  bk3:3181: not listed (UNIMPLEMENTED: this agent cannot list its bookie's ledgers)" in lines
    assert not any(line.startswith("  bk2:3181") for line in lines)  # listed, holds nothing without metadata
    held = scan_json(result, "data")["held_without_metadata"]
    assert isinstance(held, dict) and held["total"] == 25 and list(held["not_listed"]) == ["bk3:3181"]
    assert held["bookies"]["bk1:3181"]["ledgers"][0] == {
        "ledger_id": 0,
        "first_entry_id": 0,
        "last_entry_id": 4,
        "has_ledger_record": True,
        "limbo": False,
    }
    assert held["bookies"]["bk2:3181"] == {"listed": 800, "count": 0, "orphans": 0, "ledgers": []}
    assert held["orphans"] == 0 and not any("orphan" in line for line in lines)
    result.held.bookies[0].orphans = 3  # past the grace: counted in the summary, per bookie and in the JSON
    lines = scan_lines(result, "data", load_settings(env={}))
    assert any(line.endswith("through their agents, 3 past the orphan grace (ORPHAN_LEDGER)") for line in lines)
    assert "  bk1:3181: 25 of 900 ledgers held, 3 orphans (ledgers 0, 1, 2" in "\n".join(lines)
    held = scan_json(result, "data")["held_without_metadata"]
    assert isinstance(held, dict) and held["orphans"] == 3 and held["bookies"]["bk1:3181"]["orphans"] == 3


def test_a_count_without_a_total_shows_its_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 0.0, 10.0])  # the line made, then each update
    monkeypatch.setattr("scrutiny.cli.scan.time.monotonic", lambda: next(clock))
    out = io.StringIO()
    progress = ProgressLine(out, every_s=0)
    progress.update("ledgers checked", 0, None)  # the walk has not ended: no total yet
    progress.update("ledgers checked", 20_000, None)
    assert out.getvalue().splitlines() == ["scan: ledgers checked 0", "scan: ledgers checked 20000 (2000/s)"]


def test_a_scan_stopped_before_its_walk_ended_says_so() -> None:
    result = ScanResult("scan-1", ScanMode.FAST, 0, selected=40, examined=30, interrupted=True)
    assert _interruption(result) == (
        "the scan was stopped after 30 ledgers, before its ZooKeeper walk ended (40 selected by then); their findings"
        " are written"
    )
    result.walked = True
    assert _interruption(result) == "the scan was stopped after 30 of 40 ledgers; their findings are written"
