"""The processor checks a ledger with the metadata the fetch stage decoded, and gets what decoding again gives."""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from typing import Any

import pytest
from pyspark.sql import Row

from scrutiny.connectors.bookies.fetch import FetchConfig
from scrutiny.connectors.zookeeper.cluster_cache import ClusterSnapshot
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.core import ledger_tracker
from scrutiny.core.ledger_metadata import LedgerMetadata, build_ledger_metadata, decode_ledger_metadata
from scrutiny.core.ledger_metadata import encode_ledger_metadata_v3 as encode
from scrutiny.core.ledger_tracker import TrackerConfig
from scrutiny.core.verdict import BookieAnswer, ClusterView
from scrutiny.streaming.checker.buckets import bucket_of
from scrutiny.streaming.checker.config import JobConfig
from scrutiny.streaming.checker.processor import LedgerProcessor
from tests.support.processor_fakes import Handle, Timers, held_stripe, snapshot_row

pytestmark = pytest.mark.unit

BOOKIES = ("b1:3181", "b2:3181", "b3:3181")
MTIME_MS = 1_700_000_000_000
HEALTHY, LOST = 64, 65  # one bucket


ANSWERS = {
    HEALTHY: {bookie: held_stripe(index) for index, bookie in enumerate(BOOKIES)},
    LOST: {BOOKIES[0]: BookieAnswer.no_ledger(), BOOKIES[1]: BookieAnswer.no_ledger(), BOOKIES[2]: held_stripe(2)},
}


class Cluster:
    """The cluster as ZooKeeper would show it: the three bookies, both ledgers' znodes at version 1."""

    def get(self, *, refresh: bool = False) -> ClusterSnapshot:
        return ClusterSnapshot(ClusterView(writable=frozenset(BOOKIES)), {}, MTIME_MS)

    def ledger_versions(self, ledger_ids: Collection[int]) -> dict[int, int]:
        return dict.fromkeys(ledger_ids, 1)


def rows(*, hand_on: bool) -> list[Row]:
    """The fetch stage's rows for a snapshot of both ledgers, with or without the decoded metadata."""
    data = encode(
        build_ledger_metadata(
            ensemble_size=3, write_quorum=2, ack_quorum=2, segments=[(0, BOOKIES)], last_entry_id=9, password=b"pw"
        )
    )
    return [
        snapshot_row(ledger_id, offset, data, answers, mtime_ms=MTIME_MS, hand_on=hand_on)
        for offset, (ledger_id, answers) in enumerate(ANSWERS.items())
    ]


def check(given: list[Row]) -> list[dict[str, Any]]:
    processor = LedgerProcessor(JobConfig(ZooKeeperSection(), "/ledgers", "/bookies", FetchConfig(), TrackerConfig()))
    processor.init(Handle())  # type: ignore[arg-type]
    out = processor.handleInputRows((bucket_of(HEALTHY),), iter(given), Timers(MTIME_MS))  # type: ignore[arg-type]
    return [{"record": r["record"], "ledger_id": r["ledger_id"], **json.loads(r["payload"])} for r in out]


def test_the_fetch_stage_metadata_is_taken_and_judges_as_decoding_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(JobConfig, "cluster_reader", lambda self: Cluster())
    monkeypatch.setattr(time, "time_ns", lambda: MTIME_MS * 1_000_000)  # both runs at the same time
    decodes: list[bytes] = []

    def counted(data: bytes) -> LedgerMetadata:
        decodes.append(data)
        return decode_ledger_metadata(data)

    monkeypatch.setattr(ledger_tracker, "decode_ledger_metadata", counted)
    handed_on = check(rows(hand_on=True))
    assert decodes == []  # neither ledger's event decoded again
    again = check(rows(hand_on=False))
    assert len(decodes) == 2  # without it, each one's is
    assert handed_on == again
    verdicts = {(r["ledger_id"], r.get("verdict")) for r in handed_on if r["record"] == "check"}
    assert verdicts == {(HEALTHY, "HEALTHY"), (LOST, "VIOLATED")}
