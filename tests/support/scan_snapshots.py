"""A scan's snapshot of a walk already read, without ZooKeeper: what :mod:`scrutiny.streaming.scan.snapshot` makes
of a :class:`~scrutiny.core.metadata_view.MetadataView`, its ledgers walked in ``batch``-sized steps."""

from __future__ import annotations

from collections.abc import Mapping

from scrutiny.core.ledger_scan import ScanItem
from scrutiny.core.ledger_tracker import ViolationKey
from scrutiny.core.metadata_view import MetadataView
from scrutiny.core.replication_locks import ReplicationLock
from scrutiny.streaming.scan.snapshot import ScanOptions, ScanSnapshot, SnapshotWalk, cluster_snapshot


def walked(
    view: MetadataView,
    options: ScanOptions,
    prior: Mapping[int, list[ViolationKey]],
    locks: Mapping[int, ReplicationLock] | None = None,
    *,
    batch: int = 2,
) -> tuple[ScanSnapshot, list[ScanItem]]:
    """The snapshot after the whole walk, and the items it selected in order."""
    walk = SnapshotWalk(cluster_snapshot(view, prior, locks), options, prior)
    ledgers = sorted(view.ledgers.items())
    items = [item for start in range(0, len(ledgers), batch) for item in walk.select(ledgers[start : start + batch])]
    walk.finish()
    return walk.snapshot, items
