"""The tree walk's reads against a real ZooKeeper: multiRead batches, chroots, missing nodes, the depth-first walk
in batches for every ledger manager's layout."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from scrutiny.connectors.zookeeper.tree import (
    LIST_GROUP_MIN,
    MULTI_READ_BATCH,
    TreeLayout,
    read_cluster,
    read_nodes,
    walk_ledgers,
)
from scrutiny.core.zk_paths import LedgerManager, ledger_path

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


def _create(client: KazooClient, ids: list[int], manager: LedgerManager, root: str) -> None:
    transaction = None
    for count, ledger_id in enumerate(ids):
        path = ledger_path(ledger_id, manager=manager, root=root)
        client.ensure_path(path.rsplit("/", 1)[0])
        transaction = transaction or client.transaction()
        transaction.create(path, str(ledger_id).encode())
        if count % 200 == 199:
            transaction.commit()
            transaction = None
    if transaction is not None:
        transaction.commit()


@pytest.mark.parametrize("manager", list(LedgerManager))
def test_the_walk_yields_every_ledger_once_in_ascending_batches_of_its_size(
    zk_client: KazooClient, manager: LedgerManager
) -> None:
    # Short ids over several leaf directories, and (hierarchical) long ids under their 3-digit directories.
    ids = [*range(0, 30), *range(9_990, 10_030), *range(20_000, 20_005), 2**31 + 5, 2**40 + 7]
    root = "/ledgers"
    _create(zk_client, ids, manager, root)
    for other in ("available/b1:3181", "LAYOUT", "idgen/ID-0000000001"):  # siblings that hold no ledgers
        zk_client.create(f"{root}/{other}", b"x", makepath=True)
    batches = list(walk_ledgers(zk_client, TreeLayout(root=root, manager=manager), batch=7))
    walked = [ledger_id for batch in batches for ledger_id, _ in batch]
    assert walked == sorted(ids)
    assert [len(b) for b in batches] == [7] * (len(ids) // 7) + ([len(ids) % 7] if len(ids) % 7 else [])
    assert all(node.data == str(ledger_id).encode() for batch in batches for ledger_id, node in batch)
    assert list(walk_ledgers(zk_client, TreeLayout(root="/nothing-here", manager=manager))) == []


def test_the_walk_lists_the_tree_as_it_goes_not_all_of_it_first(zk_client: KazooClient) -> None:
    # 40 leaf directories of 5 ledgers: the first batch needs the first directories only.
    ids = [directory * 10_000 + k for directory in range(40) for k in range(5)]
    _create(zk_client, ids, LedgerManager.HIERARCHICAL, "/ledgers")
    listed: list[str] = []
    real = zk_client.get_children_async

    def counted(path: str, *args: object, **kwargs: object) -> object:
        listed.append(path)
        return real(path, *args, **kwargs)

    zk_client.get_children_async = counted
    walk = walk_ledgers(zk_client, TreeLayout(), batch=10)
    first = next(walk)
    assert [ledger_id for ledger_id, _ in first] == ids[:10]
    # The root, its directory 00, then one group of leaf directories.
    assert len(listed) <= 2 + LIST_GROUP_MIN < 40, listed
    assert [lid for batch in walk for lid, _ in batch] == ids[10:]
    assert len(listed) == 2 + 40
