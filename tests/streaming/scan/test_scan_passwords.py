"""The scan's snapshot leaves the ledgers' passwords in the driver: its tasks get the metadata without them.

Unit tests (no ZooKeeper, no Spark session): the snapshot's selection from a walk's result, the tasks' input table
and what the tasks read back from it, and the finding an unsearchable znode gives.
"""

from __future__ import annotations

import dataclasses

import pytest

from scrutiny.core.errors import MetadataFormatError
from scrutiny.core.ledger_metadata import build_ledger_metadata, decode_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.ledger_scan import scan_deep, scan_fast
from scrutiny.core.ledger_tracker import TrackerConfig
from scrutiny.core.metadata_view import MetadataView, Node, NodeStat
from scrutiny.core.verdict import ClusterView
from scrutiny.streaming.scan.job import input_table
from scrutiny.streaming.scan.snapshot import ScanOptions
from scrutiny.streaming.scan.tasks import input_items
from tests.support.scan_snapshots import walked

pytestmark = pytest.mark.unit

PASSWORD = b"\xa7scan-password-\x01"
BOOKIES = ("b1:3181", "b2:3181", "b3:3181")


def blob() -> bytes:
    built = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=[(0, BOOKIES)], last_entry_id=9, password=PASSWORD
    )
    return encode_ledger_metadata_v3(built)


def error_of(data: bytes) -> str:
    with pytest.raises(MetadataFormatError) as info:
        decode_ledger_metadata(data)
    return str(info.value)


def test_the_tasks_get_the_metadata_without_the_password_and_the_error_of_unsearchable_bytes() -> None:
    garbage = b"\x00garbled " + PASSWORD
    stat = NodeStat(4, 10, 11, 1_700_000_000_000, 1_700_000_000_500)
    view = MetadataView(ledgers={1: Node(blob(), stat), 2: Node(garbage, stat)}, writable=dict.fromkeys(BOOKIES, b""))
    _, selected = walked(view, ScanOptions(), {})
    items = {item.ledger_id: item for item in selected}
    assert decode_ledger_metadata(items[1].data) == dataclasses.replace(decode_ledger_metadata(blob()), password=b"")
    assert (items[1].decode_error, items[2].data, items[2].decode_error) == ("", b"", error_of(garbage))

    table = input_table(selected)
    for column in table.columns:
        for value in column.to_pylist():
            assert PASSWORD not in (value if isinstance(value, bytes) else str(value).encode())
    back = [item for batch in table.to_batches() for item in input_items(batch)]
    assert back == selected  # the decode error travels to the tasks with the (empty) bytes

    cluster = ClusterView(writable=frozenset(BOOKIES))
    for step in (
        scan_fast(items[2], now_ms=1, cluster=cluster, config=TrackerConfig()),
        scan_deep(items[2], {}, now_ms=1, cluster=cluster, config=TrackerConfig()),
    ):
        details = [(v.category.value, v.details) for outcome in step.outcomes for v in outcome.found]
        assert details == [("METADATA_UNREADABLE", error_of(garbage))]
