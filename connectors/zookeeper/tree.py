"""A walk of BookKeeper's whole metadata tree with pipelined asynchronous reads and multiRead.

Used by the watcher on start and after every reconnect, and by the one-shot scan: many requests in flight on the one
ZooKeeper connection (a bounded window, so memory stays bounded). :func:`walk_ledgers` goes depth first, a few ledger
directories listed at a time, and reads the ledger nodes' data in batches, 500 nodes per multiRead request (ZooKeeper
3.6+; about 50 times the rate of one getData per node through kazoo), handing each batch on before it lists further:
what it holds does not grow with the cluster. Nodes that vanish during the walk are simply not in the result (the
persistent watch reports their deletion). Progress is reported through a callback.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS, NoNodeError

from scrutiny.connectors.zookeeper.requests import MultiRead
from scrutiny.core.autorecovery_health import AutoRecoveryObservation
from scrutiny.core.errors import FormatError, PathError
from scrutiny.core.metadata_view import MetadataView, Node, NodeStat
from scrutiny.core.replication_locks import ReplicationLock, replication_lock
from scrutiny.core.zk_paths import (
    LedgerManager,
    auditor_election_path,
    auditor_vote_sequence,
    available_path,
    cookies_path,
    is_ledger_tree_child,
    ledger_id_from_path,
    ledger_id_from_underreplication_lock_path,
    ledger_id_from_underreplication_path,
    readonly_path,
    underreplication_disable_path,
    underreplication_ledgers_path,
    underreplication_locks_path,
)
from scrutiny.core.zk_records import parse_auditor_vote

T = TypeVar("T")
Progress = Callable[[str, int], None]
DEFAULT_WINDOW = 2000
#: Nodes read per multiRead request, and multiRead requests in flight.
MULTI_READ_BATCH = 500
MULTI_READ_WINDOW = 8
#: Progress is reported after every this many ledgers read (and :func:`walk_ledgers` yields them so many at a time).
PROGRESS_EVERY = 50_000
#: Directories the depth-first walk lists at a time: at least, and at most (dense leaf directories: the least).
LIST_GROUP_MIN = 8
LIST_GROUP_MAX = 64


@dataclass(frozen=True, slots=True)
class TreeLayout:
    """Where to look: the ledgers root, its ledger manager, and Pulsar's rack node."""

    root: str = "/ledgers"
    manager: LedgerManager = LedgerManager.HIERARCHICAL
    racks_path: str = "/bookies"


def node_of(data: bytes, stat: Any) -> Node:
    """A Node from kazoo's (data, ZnodeStat)."""
    return Node(data, NodeStat(stat.version, stat.czxid, stat.mzxid, stat.ctime, stat.mtime))


def pipelined(
    client: KazooClient,
    calls: Iterable[tuple[T, Callable[[], Any]]],
    *,
    window: int = DEFAULT_WINDOW,
    tolerate: tuple[type[BaseException], ...] = (NoNodeError,),
) -> list[tuple[T, Any]]:
    """Run asynchronous kazoo calls with at most ``window`` in flight; (key, result) of those that succeeded.

    ``calls`` yields (key, start) where ``start()`` returns a kazoo IAsyncResult. Results in
    completion order. Errors of a ``tolerate`` type (by default: the node does not exist) are
    skipped; any other error is raised once all started calls have finished.
    """
    slots = threading.BoundedSemaphore(window)
    lock = threading.Lock()
    results: list[tuple[T, Any]] = []
    errors: list[BaseException] = []
    pending = [0]
    finished = threading.Event()
    finished.set()

    def done(key: T, async_result: Any) -> None:
        try:
            results_entry: list[tuple[T, Any]] = [(key, async_result.get_nowait())]
        except tolerate:
            results_entry = []
        except BaseException as error:  # recorded, raised by the caller's thread
            results_entry = []
            with lock:
                errors.append(error)
        with lock:
            results.extend(results_entry)
            pending[0] -= 1
            if pending[0] == 0:
                finished.set()
        slots.release()

    for key, start in calls:
        slots.acquire()
        with lock:
            pending[0] += 1
            finished.clear()
        start().rawlink(lambda result, key=key: done(key, result))
    finished.wait()
    if errors:
        raise errors[0]
    return results


def read_nodes(client: KazooClient, paths: Sequence[str], *, window: int = MULTI_READ_WINDOW) -> dict[str, Node]:
    """Data and stat of each of ``paths`` that exists, :data:`MULTI_READ_BATCH` nodes per request.

    Uses ZooKeeper 3.6+'s multiRead (the watcher needs 3.6+ for its persistent watch anyway):
    one round trip and one kazoo request per batch instead of per node. A node that does not
    exist is left out; any other per-node error (e.g. no read permission) is raised.
    """
    prefix = client.chroot or ""
    batches = [tuple(paths[i : i + MULTI_READ_BATCH]) for i in range(0, len(paths), MULTI_READ_BATCH)]

    def starter(batch: tuple[str, ...]) -> Callable[[], Any]:
        def start() -> Any:
            result = client.handler.async_result()
            client._call(MultiRead(tuple(prefix + path for path in batch)), result)
            return result

        return start

    found: dict[str, Node] = {}
    for batch, results in pipelined(client, ((batch, starter(batch)) for batch in batches), window=window):
        for path, result in zip(batch, results, strict=True):
            if isinstance(result, int):
                if result != NoNodeError.code:
                    raise EXCEPTIONS[result]()
                continue
            found[path] = node_of(*result)
    return found


def read_cluster(client: KazooClient, layout: TreeLayout, *, progress: Progress | None = None) -> MetadataView:
    """Everything the watcher publishes, read now: ledgers, marks, registrations and racks."""
    report = progress or (lambda phase, count: None)
    ledgers: dict[int, Node] = {}
    for batch in walk_ledgers(client, layout):
        ledgers.update(batch)
        report("ledgers read", len(ledgers))
    view = read_marks_and_bookies(client, layout, progress=report)
    view.ledgers = ledgers
    return view


def read_marks_and_bookies(
    client: KazooClient, layout: TreeLayout, *, progress: Progress | None = None
) -> MetadataView:
    """Everything :func:`read_cluster` reads but the ledgers (left empty): marks, registrations and racks."""
    view = MetadataView()
    marks = dict(mark_leaves(client, layout.root))
    nodes = read_nodes(client, list(marks.values()))
    view.marks.update((ledger_id, nodes[path]) for ledger_id, path in marks.items() if path in nodes)
    if progress is not None:
        progress("under-replication marks read", len(view.marks))
    view.writable, view.readonly = read_registrations(client, layout.root)
    view.racks = read_optional(client, layout.racks_path)
    return view


def walk_ledgers(
    client: KazooClient, layout: TreeLayout, *, batch: int = PROGRESS_EVERY
) -> Iterator[list[tuple[int, Node]]]:
    """Every ledger node with its data, ``batch`` at a time (the last batch may be smaller), in ascending id order
    in BookKeeper's layouts.

    Depth first, a few directories listed at a time (:data:`LIST_GROUP_MAX`), so what it holds does not grow with the
    number of ledgers: the names of the directories still to list (in the hierarchical layouts at most one
    directory's children per level: 10,000 names), the leaf names of the directories listed last (at most
    :data:`LIST_GROUP_MAX` × 10,000) and one batch of nodes. The flat layout keeps its one directory's names, which
    ZooKeeper sends in a single response.

    Each listing and each batch of reads is tried again under the client's command retry (a connection lost for a
    moment costs the batch, not the walk: a scan's walk lasts as long as its checks).
    """
    if batch < 1:
        raise ValueError(f"a batch holds at least one ledger, got {batch}")
    for leaves in _leaf_batches(client, layout, batch):
        nodes = client.retry(read_nodes, client, [path for _, path in leaves])
        yield [(ledger_id, nodes[path]) for ledger_id, path in leaves if path in nodes]


def read_registrations(client: KazooClient, root: str) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """Writable and read-only bookie registrations: bookie id -> raw BookieServiceInfo bytes."""
    out: list[dict[str, bytes]] = []
    for parent in (available_path(root=root), readonly_path(root=root)):
        try:
            names = [n for n in client.get_children(parent) if n != "readonly"]
        except NoNodeError:
            names = []
        nodes = read_nodes(client, [f"{parent}/{name}" for name in names])
        out.append({name: nodes[f"{parent}/{name}"].data for name in names if f"{parent}/{name}" in nodes})
    return out[0], out[1]


def read_cookies(client: KazooClient, root: str) -> dict[str, int]:
    """Bookie id -> the ``mzxid`` of its cookie node: a new cookie (after a format) or a rewritten one (another
    instance id) has a new one."""
    found = _read_children(client, cookies_path(root=root))
    return {path.rsplit("/", 1)[1]: node.stat.mzxid for path, node in found.items()}


def _read_children(client: KazooClient, parent: str) -> dict[str, Node]:
    """The nodes under ``parent`` by path (none when it does not exist)."""
    try:
        names = client.get_children(parent)
    except NoNodeError:
        return {}
    return read_nodes(client, [f"{parent}/{name}" for name in names])


def read_autorecovery(client: KazooClient, root: str) -> AutoRecoveryObservation:
    """Auto-recovery as ZooKeeper shows it: the ``disable`` node's creation time, and the elected auditor (the bookie
    id of the lowest vote; "" for a vote whose text names none or does not parse: a vote exists all the same)."""
    stat = client.exists(underreplication_disable_path(root=root))
    parent = auditor_election_path(root=root)
    try:
        names = client.get_children(parent)
    except NoNodeError:
        names = []
    votes = sorted((sequence, name) for name in names if (sequence := _vote_sequence(name)) is not None)
    auditor = None
    for _, name in votes:
        data = read_optional(client, f"{parent}/{name}")
        if data is None:
            continue  # its voter went away meanwhile: the next vote is the auditor's
        try:
            auditor = parse_auditor_vote(data) or ""
        except FormatError:
            auditor = ""
        break
    return AutoRecoveryObservation(None if stat is None else int(stat.ctime), auditor)


def read_locks(client: KazooClient, root: str) -> dict[int, ReplicationLock]:
    """The replication workers' locks held now (``underreplication/locks/urL%010d``): ledger id -> who holds it and
    since when (nodes of other names are left out)."""
    locks = {}
    for path, node in _read_children(client, underreplication_locks_path(root=root)).items():
        try:
            ledger_id = ledger_id_from_underreplication_lock_path(path, root=root)
        except (PathError, FormatError):
            continue
        locks[ledger_id] = replication_lock(node.data, node.stat.ctime_ms)
    return locks


def _vote_sequence(name: str) -> int | None:
    """The sequence of auditor vote ``name`` (None: a node of another name)."""
    try:
        return auditor_vote_sequence(name)
    except PathError:
        return None


def read_optional(client: KazooClient, path: str) -> bytes | None:
    """A node's data, or None when it does not exist."""
    try:
        data, _ = client.get(path)
    except NoNodeError:
        return None
    return bytes(data)


def _children(client: KazooClient, paths: list[str], window: int) -> list[tuple[str, list[str]]]:
    calls = ((path, (lambda path=path: client.get_children_async(path))) for path in paths)
    return pipelined(client, calls, window=window)


def _leaf_batches(client: KazooClient, layout: TreeLayout, batch: int) -> Iterator[list[tuple[int, str]]]:
    """(ledger id, path) of every ledger node below the root, ``batch`` at a time, depth first (see
    :func:`walk_ledgers`)."""
    root = layout.root.rstrip("/") or ""
    try:
        top = client.retry(client.get_children, layout.root)
    except NoNodeError:
        return
    names = sorted((name for name in top if is_ledger_tree_child(name, manager=layout.manager)), key=_id_order)
    level = [f"{root}/{name}" for name in names]
    if layout.manager is LedgerManager.FLAT:
        for start in range(0, len(level), batch):
            yield _as_ledgers(level[start : start + batch], layout)
        return
    todo = deque(level)
    leaves: list[str] = []
    listed = found = 0
    while todo:
        # As many directories as should fill the batch at the density seen so far, within bounds: a dense cluster's
        # leaf directories hold 10,000 ledgers each, a sparse one's a few.
        wanted = math.ceil(max(1, batch - len(leaves)) * listed / max(1, found)) if found else LIST_GROUP_MIN
        group = [todo.popleft() for _ in range(min(len(todo), max(LIST_GROUP_MIN, min(LIST_GROUP_MAX, wanted))))]
        children = dict(client.retry(_children, client, group, DEFAULT_WINDOW))
        below: list[str] = []
        for parent in group:
            names = sorted(children.get(parent, ()), key=_id_order)
            listed, found = listed + 1, found + len(names)
            for name in names:
                (leaves if name.startswith("L") else below).append(f"{parent}/{name}")
        todo.extendleft(reversed(below))
        while len(leaves) >= batch:
            yield _as_ledgers(leaves[:batch], layout)
            del leaves[:batch]
    if leaves:
        yield _as_ledgers(leaves, layout)


def _id_order(name: str) -> tuple[int, str]:
    """Sibling names in the order of the ids below them: BookKeeper pads each level to a fixed width, but the
    hierarchical layout's long ids sit under 3-digit names beside the 2-digit ones of the short ids."""
    return len(name), name


def _as_ledgers(paths: list[str], layout: TreeLayout) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for path in paths:
        try:
            out.append((ledger_id_from_path(path, manager=layout.manager, root=layout.root), path))
        except PathError:
            continue  # not a ledger node of this manager: ignored, as BookKeeper does
    return out


def mark_leaves(client: KazooClient, root: str, window: int = DEFAULT_WINDOW) -> list[tuple[int, str]]:
    """(ledger id, path) of every under-replication mark under ledgers root ``root`` (other nodes ignored)."""
    level = [underreplication_ledgers_path(root=root)]
    leaves: list[tuple[int, str]] = []
    while level:
        next_level: list[str] = []
        for parent, names in _children(client, level, window):
            for name in names:
                path = f"{parent}/{name}"
                if name.startswith("urL"):
                    try:
                        leaves.append((ledger_id_from_underreplication_path(path, root=root), path))
                    except PathError:
                        continue
                else:
                    next_level.append(path)
        level = next_level
    return leaves
