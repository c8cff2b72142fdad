"""The short timeline of the soak: crashes, failovers, an outage and bad records, and the tables still tell the truth.

Runs ``bench.soak`` in this process with its own ZooKeeper and broker (the run stops and restarts its broker, so it
cannot share the session's), the watchers and the checker as processes of their own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import Timeline, print_report, run_soak

pytestmark = pytest.mark.integration


def test_the_short_soak_leaves_no_finding_missed_false_stale_or_duplicated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timeline = Timeline(seconds=110, ledgers=40, settle_seconds=120)
    report = run_soak(timeline, tmp_path)
    with capsys.disabled():
        print_report(timeline, report)
    assert report.truth_size > 0  # the timeline has findings to find
    assert report.after_close > 0  # some of them only the re-verification can find (a bookie emptied after closes)
    assert report.counts() == {"missed": 0, "false": 0, "stale": 0, "duplicated": 0}, report
    assert report.malformed_sent and report.rejected_recorded == report.malformed_sent
    assert report.exits.get("watcher-a", 0) == report.exits.get("watcher-b", 0) == 0
