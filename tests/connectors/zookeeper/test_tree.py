"""The tree walk's reads against a real ZooKeeper: multiRead batches, chroots, missing nodes."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from scrutiny.connectors.zookeeper.tree import MULTI_READ_BATCH, TreeLayout, read_cluster, read_nodes
from scrutiny.core.zk_paths import ledger_path

pytestmark = pytest.mark.integration


def test_read_nodes_batches_skip_missing_and_respect_the_chroot(zk_client: KazooClient) -> None:
    count = 2 * MULTI_READ_BATCH + 7
    paths = [ledger_path(i) for i in range(count)]
    for path in paths:
        zk_client.create(path, path.encode(), makepath=True)
    asked = [*paths, "/ledgers/99/9999/L9999", "/nowhere"]
    nodes = read_nodes(zk_client, asked)
    assert set(nodes) == set(paths)
    assert all(nodes[p].data == p.encode() for p in paths)
    stat = zk_client.get(paths[3])[1]
    assert (nodes[paths[3]].stat.version, nodes[paths[3]].stat.mzxid) == (stat.version, stat.mzxid)
    view = read_cluster(zk_client, TreeLayout())
    assert sorted(view.ledgers) == list(range(count))
    assert read_nodes(zk_client, []) == {}
