"""What the scan's snapshot takes from the walk besides the ledgers: the marks' replication locks, travelling to the
tasks with their items, the open findings it may resolve (never the streaming job's cluster-level ones) and the bookies
the job declared lost.

Unit tests: no ZooKeeper, no Spark session.
"""

from __future__ import annotations

import pytest

from scrutiny.core.ledger_metadata import build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.metadata_view import MetadataView, Node, NodeStat
from scrutiny.core.replication_locks import ReplicationLock
from scrutiny.core.vocabulary import CLUSTER_LEDGER_ID
from scrutiny.core.zk_records import UnderReplicationMark, format_underreplication_mark
from scrutiny.streaming.scan.job import ScanOptions, _select, input_table
from scrutiny.streaming.scan.tasks import input_items

pytestmark = pytest.mark.unit

BOOKIES = ("b1:3181", "b2:3181", "b3:3181")
STAT = NodeStat(1, 10, 11, 1_700_000_000_000, 1_700_000_000_500)


def view(*ledgers: int, marked: tuple[int, ...] = ()) -> MetadataView:
    built = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=[(0, BOOKIES)], last_entry_id=9
    )
    data = encode_ledger_metadata_v3(built)
    mark = format_underreplication_mark(UnderReplicationMark(("b2:3181",), 1_700_000_000_000))
    return MetadataView(
        ledgers={lid: Node(data, STAT) for lid in ledgers},
        marks={lid: Node(mark, STAT) for lid in marked},
        writable=dict.fromkeys(BOOKIES, b""),
    )


def test_a_marked_ledger_s_lock_travels_to_the_tasks_and_only_a_marked_one_gets_it() -> None:
    locks = {1: ReplicationLock("b3:3181", 5), 2: ReplicationLock(None, 6), 3: ReplicationLock("b1:3181", 7)}
    snapshot = _select(view(1, 2, 3, marked=(1, 2)), ScanOptions(), {}, locks)
    assert [(i.ledger_id, i.lock) for i in snapshot.items] == [(1, locks[1]), (2, locks[2]), (3, None)]
    back = [item for batch in input_table(snapshot.items).to_batches() for item in input_items(batch)]
    assert back == snapshot.items


def test_a_full_scan_resolves_deleted_ledgers_findings_but_never_the_cluster_level_ones() -> None:
    prior = {
        1: [("MISSING_REPLICA", "b2:3181", 0)],
        9: [("NO_REPLICA", "", -1)],  # ledger 9 is gone from ZooKeeper: its findings resolve
        CLUSTER_LEDGER_ID: [("BOOKIE_LOST", "b4:3181", -1), ("AUTORECOVERY_DISABLED", "", -1)],  # the job's own
    }
    snapshot = _select(view(1, 2), ScanOptions(), prior)
    assert snapshot.gone == {9: (("NO_REPLICA", "", -1),)}
    # ... but the bookies the job declared lost travel to the tasks, for OPEN_LEDGER_STALLED.
    assert snapshot.lost_bookies == {"b4:3181"}
