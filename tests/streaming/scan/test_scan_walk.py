"""The scan's walk of ZooKeeper lasts as long as its checks: a ZooKeeper restarted meanwhile does not end it, and a
read it cannot make ends the scan with a clear error naming how far it got.

Integration tests: a ZooKeeper of their own (restarted and stopped by the tests), no Spark.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_acl

from scrutiny.connectors.zookeeper.client import RetryPolicy, build_zookeeper_client
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.connectors.zookeeper.tree import TreeLayout
from scrutiny.core.backoff import Backoff
from scrutiny.core.metadata_view import MetadataView
from scrutiny.core.zk_paths import ledger_path
from scrutiny.services.servers import RunningServer, start_zookeeper
from scrutiny.streaming.scan.snapshot import (
    ScanOptions,
    SnapshotWalk,
    WalkError,
    ZooKeeperSnapshot,
    cluster_snapshot,
)

pytestmark = pytest.mark.integration

#: 100 leaf directories of 100 ledgers each, walked 1,000 at a time (10 directories listed at a time).
LEDGERS = [directory * 10_000 + k for directory in range(100) for k in range(100)]
WALK_BATCH = 1_000


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[RunningServer]:
    server = start_zookeeper(tmp_path / "zookeeper", die_with_parent=True)
    try:
        yield server
    finally:
        server.stop()


def _client(address: str, deadline_s: float) -> KazooClient:
    retry = RetryPolicy(backoff=Backoff(initial_s=0.1, maximum_s=1.0, jitter=0.1), deadline_seconds=deadline_s)
    client = build_zookeeper_client(ZooKeeperSection(connect=address), command_retry=retry)
    client.start(timeout=15)
    return client


def _fill(client: KazooClient, ledgers: list[int] = LEDGERS) -> None:
    for start in range(0, len(ledgers), 100):
        client.ensure_path(ledger_path(ledgers[start]).rsplit("/", 1)[0])
        transaction = client.transaction()
        for ledger_id in ledgers[start : start + 100]:
            transaction.create(ledger_path(ledger_id), b"metadata")
        transaction.commit()


def _walk(client: KazooClient, *, batch: int = WALK_BATCH) -> ZooKeeperSnapshot:
    snapshot = cluster_snapshot(MetadataView(), {})
    return ZooKeeperSnapshot(client, TreeLayout(), SnapshotWalk(snapshot, ScanOptions(), {}), walk_batch=batch)


def test_a_zookeeper_restarted_between_two_batches_of_the_walk_does_not_end_it(
    zookeeper: RunningServer, tmp_path: Path
) -> None:
    client = _client(zookeeper.address, deadline_s=60.0)
    try:
        _fill(client)
        walk = _walk(client)
        chunks = walk.chunks(400)
        seen = [item.ledger_id for item in next(chunks)]  # of the first batch: the next one is not read yet
        port = int(zookeeper.address.rsplit(":", 1)[1])
        zookeeper.stop()
        restarted = start_zookeeper(tmp_path / "zookeeper", port=port, die_with_parent=True)
        try:
            assert restarted.address == zookeeper.address
            seen += [item.ledger_id for chunk in chunks for item in chunk]
        finally:
            restarted.stop()
    finally:
        client.stop()
        client.close()
    assert seen == LEDGERS
    counted = (walk.snapshot.walked, walk.snapshot.ledgers_in_zookeeper, walk.snapshot.selected)
    assert counted == (True, len(LEDGERS), len(LEDGERS))


def test_a_read_the_walk_cannot_make_ends_it_with_an_error_naming_how_far_it_got(zookeeper: RunningServer) -> None:
    client = _client(zookeeper.address, deadline_s=60.0)
    try:
        _fill(client)
        # A leaf directory after the first batch that nobody may list (ZooKeeper answers NoAuth).
        client.set_acls(ledger_path(150_000).rsplit("/", 1)[0], [make_acl("world", "anyone", write=True, admin=True)])
        walk = _walk(client)
        chunks = walk.chunks(WALK_BATCH)
        assert len(next(chunks)) == WALK_BATCH
        with pytest.raises(WalkError, match="the ZooKeeper walk failed after 1000 ledgers: NoAuthError"):
            next(chunks)
    finally:
        client.stop()
        client.close()
    assert not walk.snapshot.walked
