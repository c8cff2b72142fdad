"""What the scan's snapshot takes from the walk besides the ledgers: the marks' replication locks, travelling to the
tasks with their items, the open findings it may resolve (never the streaming job's cluster-level ones, only those
of the ledgers selected, only once the walk has ended), the bookies the job declared lost, and the walk's figures as
it goes batch by batch.

Unit tests: no ZooKeeper, no Spark session.
"""

from __future__ import annotations

import pytest

from scrutiny.core.ledger_metadata import build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.ledger_scan import parse_ledger_selection
from scrutiny.core.metadata_view import MetadataView, Node, NodeStat
from scrutiny.core.replication_locks import ReplicationLock
from scrutiny.core.vocabulary import CLUSTER_LEDGER_ID
from scrutiny.core.zk_records import UnderReplicationMark, format_underreplication_mark
from scrutiny.streaming.scan.job import input_table
from scrutiny.streaming.scan.snapshot import ScanOptions, SnapshotWalk, cluster_snapshot
from scrutiny.streaming.scan.tasks import input_items
from tests.support.scan_snapshots import walked

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
    _, items = walked(view(1, 2, 3, marked=(1, 2)), ScanOptions(), {}, locks)
    assert [(i.ledger_id, i.lock) for i in items] == [(1, locks[1]), (2, locks[2]), (3, None)]
    back = [item for batch in input_table(items).to_batches() for item in input_items(batch)]
    assert back == items


def test_a_full_scan_resolves_deleted_ledgers_findings_but_never_the_cluster_level_ones() -> None:
    prior = {
        1: [("MISSING_REPLICA", "b2:3181", 0)],
        9: [("NO_REPLICA", "", -1)],  # ledger 9 is gone from ZooKeeper: its findings resolve
        CLUSTER_LEDGER_ID: [("BOOKIE_LOST", "b4:3181", -1), ("AUTORECOVERY_DISABLED", "", -1)],  # the job's own
    }
    snapshot, _ = walked(view(1, 2), ScanOptions(), prior)
    assert snapshot.gone == {9: (("NO_REPLICA", "", -1),)}
    # ... but the bookies the job declared lost travel to the tasks, for OPEN_LEDGER_STALLED.
    assert snapshot.lost_bookies == {"b4:3181"}


def test_the_walk_in_batches_selects_counts_and_knows_its_ledgers_and_resolves_only_the_selected_gone() -> None:
    prior = {2: [("MISSING_REPLICA", "b2:3181", 0)], 7: [("NO_REPLICA", "", -1)], 12: [("NO_REPLICA", "", -1)]}
    everything, items = walked(view(*range(1, 6)), ScanOptions(), prior, batch=2)
    assert [i.ledger_id for i in items] == [1, 2, 3, 4, 5] and items[1].open_keys == (
        ("MISSING_REPLICA", "b2:3181", 0),
    )
    assert (everything.ledgers_in_zookeeper, everything.selected, everything.walked) == (5, 5, True)
    assert set(everything.gone) == {7, 12} and 3 in everything.known and 7 not in everything.known
    ranged, items = walked(view(*range(1, 6)), ScanOptions(selection=parse_ledger_selection("2-8")), prior, batch=3)
    assert [i.ledger_id for i in items] == [2, 3, 4, 5] and (ranged.ledgers_in_zookeeper, ranged.selected) == (5, 4)
    assert set(ranged.gone) == {7}  # ledger 12 is outside the range: not this scan's to resolve
    assert len(ranged.known) == 0  # a scan of a range does not survey what the bookies hold


def test_a_walk_that_did_not_end_resolves_nothing() -> None:
    prior = {9: [("NO_REPLICA", "", -1)]}
    walk = SnapshotWalk(cluster_snapshot(view(), prior), ScanOptions(), prior)
    walk.select(sorted(view(1, 2).ledgers.items()))
    assert (walk.snapshot.walked, walk.snapshot.gone, walk.snapshot.ledgers_in_zookeeper) == (False, {}, 2)
