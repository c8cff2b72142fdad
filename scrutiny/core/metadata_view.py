"""What the watcher knows of the cluster, and what changed: pure state and diffs, no I/O.

A :class:`MetadataView` is one observation of BookKeeper's metadata: every ledger node (data and
stat), every under-replication mark, the writable and read-only bookie registrations and
Pulsar's rack node. :func:`diff` turns two observations into the :class:`MetadataChange` list that
takes a consumer from the first to the second; :class:`KnownState` applies single live
changes, dropping those older than what was already published (ZooKeeper's ``mzxid`` orders
the versions of one node), so a late or duplicate notification never moves a ledger backwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class NodeStat:
    """The parts of a znode's stat the watcher publishes."""

    version: int
    czxid: int
    mzxid: int
    ctime_ms: int
    mtime_ms: int


@dataclass(frozen=True, slots=True)
class Node:
    """A znode's data and stat."""

    data: bytes
    stat: NodeStat


def node_stat_lag(node: Node, now_ms: int) -> float:
    """Seconds from the node's last modification (ZooKeeper's mtime) to ``now_ms``, never negative."""
    return max(0, now_ms - node.stat.mtime_ms) / 1000.0


@dataclass
class MetadataView:
    """One observation of the metadata the checker needs."""

    ledgers: dict[int, Node] = field(default_factory=dict)
    marks: dict[int, Node] = field(default_factory=dict)
    writable: dict[str, bytes] = field(default_factory=dict)
    readonly: dict[str, bytes] = field(default_factory=dict)
    racks: bytes | None = None


class ChangeKind(StrEnum):
    """What happened to one thing (names match the event kinds of proto/ledger_events.proto)."""

    LEDGER_CREATED = "LEDGER_CREATED"
    LEDGER_CHANGED = "LEDGER_CHANGED"
    LEDGER_DELETED = "LEDGER_DELETED"
    UNDER_REPLICATION_MARKED = "UNDER_REPLICATION_MARKED"
    UNDER_REPLICATION_CLEARED = "UNDER_REPLICATION_CLEARED"
    BOOKIE_REGISTERED = "BOOKIE_REGISTERED"
    BOOKIE_UNREGISTERED = "BOOKIE_UNREGISTERED"
    BOOKIE_READONLY = "BOOKIE_READONLY"
    BOOKIE_WRITABLE = "BOOKIE_WRITABLE"
    RACKS_CHANGED = "RACKS_CHANGED"


@dataclass(frozen=True, slots=True)
class MetadataChange:
    """One change: ``node`` for ledgers and marks (the last known one for deletions), ``data`` otherwise."""

    kind: ChangeKind
    ledger_id: int | None = None
    node: Node | None = None
    bookie_id: str | None = None
    data: bytes = b""

    @property
    def is_cluster_wide(self) -> bool:
        """Bookie and rack changes concern every ledger; they go to every partition."""
        return self.ledger_id is None


def diff(old: MetadataView, new: MetadataView) -> list[MetadataChange]:
    """The changes from ``old`` to ``new``: cluster-wide ones first, then marks, then ledgers, each by id.

    Marks come before ledgers so that a checker reading a snapshot in order knows a ledger is
    marked under-replicated before it judges the ledger (it would report missing replicas that
    replication is already repairing, then withdraw them).
    """
    changes = list(_bookie_changes(old, new))
    if old.racks != new.racks:
        changes.append(MetadataChange(ChangeKind.RACKS_CHANGED, data=new.racks or b""))
    changes.extend(_node_changes(old.marks, new.marks, ledgers=False))
    changes.extend(_node_changes(old.ledgers, new.ledgers, ledgers=True))
    return changes


def _node_changes(old: dict[int, Node], new: dict[int, Node], *, ledgers: bool) -> Iterator[MetadataChange]:
    created = ChangeKind.LEDGER_CREATED if ledgers else ChangeKind.UNDER_REPLICATION_MARKED
    changed = ChangeKind.LEDGER_CHANGED if ledgers else ChangeKind.UNDER_REPLICATION_MARKED
    deleted = ChangeKind.LEDGER_DELETED if ledgers else ChangeKind.UNDER_REPLICATION_CLEARED
    for ledger_id in sorted(old.keys() | new.keys()):
        before, after = old.get(ledger_id), new.get(ledger_id)
        if after is None and before is not None:
            yield MetadataChange(deleted, ledger_id, before)
        elif before is None and after is not None:
            yield MetadataChange(created, ledger_id, after)
        elif before is not None and after is not None and _newer(after, before):
            yield MetadataChange(changed, ledger_id, after)


def _newer(after: Node, before: Node) -> bool:
    return (after.stat.czxid, after.stat.mzxid) != (before.stat.czxid, before.stat.mzxid)


def _bookie_changes(old: MetadataView, new: MetadataView) -> Iterator[MetadataChange]:
    for bookie in sorted(old.writable.keys() | old.readonly.keys() | new.writable.keys() | new.readonly.keys()):
        was = _registration(old, bookie)
        now = _registration(new, bookie)
        kind = _bookie_transition(was, now)
        if kind is None and now is not None and _info(new, bookie) != _info(old, bookie):
            kind = ChangeKind.BOOKIE_REGISTERED if now == "writable" else ChangeKind.BOOKIE_READONLY
        if kind is not None:
            yield MetadataChange(kind, bookie_id=bookie, data=_info(new, bookie) or b"")


def _registration(view: MetadataView, bookie: str) -> str | None:
    if bookie in view.readonly:
        return "readonly"
    if bookie in view.writable:
        return "writable"
    return None


def _info(view: MetadataView, bookie: str) -> bytes | None:
    if bookie in view.readonly:
        return view.readonly[bookie]
    return view.writable.get(bookie)


def _bookie_transition(was: str | None, now: str | None) -> ChangeKind | None:
    if was == now:
        return None
    if now is None:
        return ChangeKind.BOOKIE_UNREGISTERED
    if now == "readonly":
        return ChangeKind.BOOKIE_READONLY
    return ChangeKind.BOOKIE_WRITABLE if was == "readonly" else ChangeKind.BOOKIE_REGISTERED


class Savepoint:
    """Entries of a known state as they were before a batch of changes (:meth:`KnownState.savepoint`).

    :meth:`keep` is called before an entry may change (``kind``: "ledger", "mark", "racks", "bookies"; ``ident``: the
    ledger id, or 0); :meth:`restore` puts every kept entry back as it was.
    """

    def __init__(self, view: MetadataView) -> None:
        self._view = view
        self._ledgers: dict[int, Node | None] = {}
        self._marks: dict[int, Node | None] = {}
        self._racks: list[bytes | None] = []
        self._bookies: list[tuple[dict[str, bytes], dict[str, bytes]]] = []

    def keep(self, kind: str, ident: int) -> None:
        """Remember one entry's value now (the first time it is kept counts)."""
        view = self._view
        if kind == "ledger":
            self._ledgers.setdefault(ident, view.ledgers.get(ident))
        elif kind == "mark":
            self._marks.setdefault(ident, view.marks.get(ident))
        elif kind == "racks" and not self._racks:
            self._racks.append(view.racks)
        elif kind == "bookies" and not self._bookies:
            self._bookies.append((view.writable, view.readonly))

    def restore(self) -> None:
        """Put every kept entry back."""
        view = self._view
        for nodes, kept in ((view.ledgers, self._ledgers), (view.marks, self._marks)):
            for ident, node in kept.items():
                if node is None:
                    nodes.pop(ident, None)
                else:
                    nodes[ident] = node
        if self._racks:
            view.racks = self._racks[0]
        if self._bookies:
            view.writable, view.readonly = self._bookies[0]


class KnownState:
    """The last state published, updated change by change; refuses changes that would go backwards."""

    def __init__(self, view: MetadataView | None = None) -> None:
        self.view = view if view is not None else MetadataView()

    def resync(self, observed: MetadataView) -> list[MetadataChange]:
        """The changes from what was published to ``observed``, which becomes the known state."""
        changes = self.changes_to(observed)
        self.adopt(observed)
        return changes

    def changes_to(self, observed: MetadataView) -> list[MetadataChange]:
        """The changes from what was published to ``observed`` (the known state stays as it is)."""
        return diff(self.view, observed)

    def adopt(self, observed: MetadataView) -> None:
        """``observed`` is published: it becomes the known state."""
        self.view = observed

    def savepoint(self) -> Savepoint:
        """A record of the entries about to change, to put them back if what changes them is not published."""
        return Savepoint(self.view)

    def ledger(self, ledger_id: int, node: Node | None) -> MetadataChange | None:
        """A ledger node read after a notification (None: it is gone); None when nothing new."""
        return self._node(self.view.ledgers, ledger_id, node, ledgers=True)

    def mark(self, ledger_id: int, node: Node | None) -> MetadataChange | None:
        """An under-replication node read after a notification (None: it is gone)."""
        return self._node(self.view.marks, ledger_id, node, ledgers=False)

    def _node(
        self, nodes: dict[int, Node], ledger_id: int, node: Node | None, *, ledgers: bool
    ) -> MetadataChange | None:
        before = nodes.get(ledger_id)
        stale = node is not None and before is not None and node.stat.czxid == before.stat.czxid
        if stale and node is not None and before is not None and node.stat.mzxid <= before.stat.mzxid:
            return None  # a late read of a version already published
        changes = list(
            _node_changes({ledger_id: before} if before else {}, {ledger_id: node} if node else {}, ledgers=ledgers)
        )
        if node is None:
            nodes.pop(ledger_id, None)
        else:
            nodes[ledger_id] = node
        return changes[0] if changes else None

    def bookies(self, writable: dict[str, bytes], readonly: dict[str, bytes]) -> list[MetadataChange]:
        """New registrations (after a change under ``available``): the bookie changes."""
        new = MetadataView(self.view.ledgers, self.view.marks, writable, readonly, self.view.racks)
        changes = list(_bookie_changes(self.view, new))
        self.view.writable, self.view.readonly = writable, readonly
        return changes

    def racks(self, data: bytes | None) -> MetadataChange | None:
        """Pulsar's rack node read after a notification (None: it is gone)."""
        if data == self.view.racks:
            return None
        self.view.racks = data
        return MetadataChange(ChangeKind.RACKS_CHANGED, data=data or b"")
