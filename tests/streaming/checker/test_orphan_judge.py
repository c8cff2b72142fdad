"""The orphan judge writes what it judged at a flush, or at once when ``max_pending`` records wait."""

from __future__ import annotations

from typing import cast

import pytest
from pyspark.sql import SparkSession

from scrutiny.core.held_ledgers import HeldLedger
from scrutiny.core.orphans import IdRange
from scrutiny.streaming.checker import orphan_judge
from scrutiny.streaming.checker.orphan_judge import OrphanJudge
from scrutiny.streaming.checker.records import Record

pytestmark = pytest.mark.unit


def judge(max_pending: int | None, writes: list[list[Record]]) -> OrphanJudge:
    judged = OrphanJudge(
        cast(SparkSession, None),
        "unused",
        read=lambda: ({}, {}),
        grace_ms=0,  # every ledger held without metadata is an orphan at once: one finding a range here
        conflict_attempts=1,
        source="scan",
        write=writes.append,
        max_pending=max_pending,
        clock=lambda: 1_000.0,
    )
    judged.load()
    return judged


@pytest.mark.parametrize("max_pending", [None, 2])
def test_a_range_writes_at_once_only_when_max_pending_records_wait(
    monkeypatch: pytest.MonkeyPatch, max_pending: int | None
) -> None:
    merges: list[dict[str, object]] = []
    monkeypatch.setattr(orphan_judge, "merge_sightings", lambda _spark, _dir, changed, **_: merges.append(changed))
    writes: list[list[Record]] = []
    judged = judge(max_pending, writes)
    for bookie, ledger in (("bookie-1", 10), ("bookie-2", 20), ("bookie-1", 30)):
        assert judged(bookie, IdRange(ledger - 1, ledger), [HeldLedger(ledger, first_entry_id=0, last_entry_id=0)])
    if max_pending is None:
        assert writes == [] and merges == []  # nothing written before the flush
    else:
        # The second range left two records: both bookies' sightings merged once, the two findings written once.
        assert [sorted({int(str(r["ledger_id"])) for r in w}) for w in writes] == [[10, 20]]
        assert [sorted(m) for m in merges] == [["bookie-1", "bookie-2"]]
    judged.flush()
    assert sorted(int(str(r["ledger_id"])) for w in writes for r in w if r["record"] == "violation") == [10, 20, 30]
    assert len(merges) == (1 if max_pending is None else 2)
