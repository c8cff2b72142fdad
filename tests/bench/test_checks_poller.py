"""The checker benchmark's latency reader: each ledger's check reported once, from files added since the last poll."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from bench.checker_bench import ChecksPoller


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
