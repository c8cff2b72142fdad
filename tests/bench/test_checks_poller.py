"""The checker benchmark's latency reader (each ledger's check reported once, from files added since the last poll),
and its latency by window of closes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from bench.checker_bench import ChecksPoller, windowed_p50


def append(table: Path, ledgers: list[int]) -> None:
    write_deltalake(str(table), pa.table({"ledger_id": pa.array(ledgers, pa.int64())}), mode="append")


def test_each_append_is_reported_once_and_nothing_before_the_table_exists(tmp_path: Path) -> None:
    poller = ChecksPoller(str(tmp_path))
    assert poller.poll() == []
    append(tmp_path / "ledger_checks", [1, 2])
    assert sorted(poller.poll()) == [1, 2]
    assert poller.poll() == []  # no new commit: nothing again
    append(tmp_path / "ledger_checks", [3])
    append(tmp_path / "ledger_checks", [4, 5])
    assert sorted(poller.poll()) == [3, 4, 5]
    assert poller.poll() == []


def test_the_latency_p50_is_given_per_window_of_closes_in_order() -> None:
    # (seconds into the phase, latency): a slow first window, a fast second one, none in the third, one in the fourth
    closed = [(0.5, 4.0), (10.0, 3.0), (29.9, 5.0), (30.0, 1.0), (45.0, 2.0), (59.0, 1.5), (95.0, 0.7)]
    assert windowed_p50(closed, 30.0) == [(0.0, 4.0), (30.0, 1.5), (90.0, 0.7)]
    assert windowed_p50(closed, 60.0) == [(0.0, 3.0), (60.0, 0.7)]
    assert windowed_p50([], 30.0) == []
