"""The scan's view of ZooKeeper: the cluster read first, then the ledgers streamed from the walk in chunks.

:func:`open_snapshot` reads what the checks need besides the ledgers (registrations, racks, marks and their
replication locks, auto-recovery's state) and keeps the ZooKeeper connection for :meth:`SnapshotWalk.chunks`, which
walks the ledgers depth first (:func:`~scrutiny.connectors.zookeeper.tree.walk_ledgers`) and hands them on as
:class:`~scrutiny.core.ledger_scan.ScanItem` chunks, each read only when the previous one has been checked. The
driver therefore holds one batch of the walk (:data:`~scrutiny.connectors.zookeeper.tree.PROGRESS_EVERY` nodes) and
one chunk at a time, whatever the cluster's size; what grows with it is 8 bytes a ledger for the deep scan's survey of
what the bookies hold without metadata (:class:`~scrutiny.streaming.scan.held.KnownLedgers`), and what the tables
hold open (read before the walk). Once the walk has ended, the open findings of ledgers it did not meet are the ones
to resolve (:attr:`ScanSnapshot.gone`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from scrutiny.connectors.zookeeper.client import close_zookeeper_client, start_zookeeper_client, zookeeper_target
from scrutiny.connectors.zookeeper.tree import (
    PROGRESS_EVERY,
    TreeLayout,
    read_autorecovery,
    read_locks,
    read_marks_and_bookies,
    walk_ledgers,
)
from scrutiny.core.autorecovery_health import scan_warnings
from scrutiny.core.errors import FormatError, ScrutinyError
from scrutiny.core.ledger_scan import LedgerSelection, ScanItem, ScanMode, involves_bookie
from scrutiny.core.ledger_tracker import ViolationKey
from scrutiny.core.metadata_redaction import redacted_metadata
from scrutiny.core.metadata_view import MetadataView, Node
from scrutiny.core.replication_locks import ReplicationLock
from scrutiny.core.verdict import ClusterView
from scrutiny.core.vocabulary import CLUSTER_LEDGER_ID, Category
from scrutiny.core.zk_records import UnderReplicationMark, parse_pulsar_racks, parse_underreplication_mark
from scrutiny.settings.loader import Settings
from scrutiny.streaming.scan.held import KnownLedgers

#: (phase, done, total or None): progress of the walk and of the checks.
Progress = Callable[[str, int, int | None], None]
_ORPHAN = Category.ORPHAN_LEDGER.value
#: Ledgers per Spark job (and per table batch): the unit of progress and of a safe stop.
DEFAULT_CHUNK_SIZE = 10_000


class WalkError(ScrutinyError):
    """A read of the walk failed: refused (no read permission on a directory), or a connection lost for longer than
    the client's command retry."""


@dataclass(frozen=True)
class ScanOptions:
    """What to scan and how."""

    mode: ScanMode = ScanMode.DEEP
    selection: LedgerSelection = field(default_factory=LedgerSelection)
    bookie: str | None = None
    chunk_size: int = DEFAULT_CHUNK_SIZE
    data_dir: str | None = None
    connect_timeout_s: float = 15.0

    @property
    def surveys_held(self) -> bool:
        """Whether the scan surveys what the bookies hold without metadata: a deep scan of every ledger (it needs
        them all to tell)."""
        return self.mode is ScanMode.DEEP and self.selection.everything


@dataclass
class ScanSnapshot:
    """The scan's view of the cluster: read before the ledgers, and the walk's figures as it goes."""

    cluster: ClusterView
    registrations: dict[str, bytes | None]
    warnings: list[str]
    #: The bookies with an open ``BOOKIE_LOST`` in the tables (the streaming job declared them lost).
    lost_bookies: frozenset[str] = frozenset()
    #: Bookie → the ledgers with an ``ORPHAN_LEDGER`` open for it in the tables.
    open_orphans: dict[str, list[int]] = field(default_factory=dict)
    marks: dict[int, UnderReplicationMark] = field(default_factory=dict)
    locks: Mapping[int, ReplicationLock] = field(default_factory=dict)
    #: Ledgers the walk met so far, selected or not, and those selected.
    ledgers_in_zookeeper: int = 0
    selected: int = 0
    #: Whether the walk has ended (only then are :attr:`gone` and :attr:`known` complete).
    walked: bool = False
    #: Open findings of ledgers the walk did not meet (once it has ended): the ones a full scan resolves.
    gone: dict[int, tuple[ViolationKey, ...]] = field(default_factory=dict)
    #: Every ledger id of the walk, selected or not (what the bookies may hold with metadata), when the scan surveys
    #: what they hold without (empty otherwise).
    known: KnownLedgers = field(default_factory=KnownLedgers)
    #: Seconds spent reading ZooKeeper, the walk's batches included.
    read_seconds: float = 0.0


def cluster_snapshot(
    observed: MetadataView,
    prior: Mapping[int, list[ViolationKey]],
    locks: Mapping[int, ReplicationLock] | None = None,
) -> ScanSnapshot:
    """The snapshot of ``observed`` (marks, registrations and racks; its ledgers are not looked at) with the open
    findings ``prior`` and the replication ``locks``, before the walk."""
    warnings: list[str] = []
    marks = {}
    unreadable_marks = 0
    for ledger_id, node in observed.marks.items():
        try:
            marks[ledger_id] = parse_underreplication_mark(node.data)
        except FormatError:
            unreadable_marks += 1
    if unreadable_marks:
        warnings.append(
            f"{unreadable_marks} under-replication mark(s) do not parse; their ledgers are scanned unmarked"
        )
    racks: dict[str, str] = {}
    if observed.racks is not None:
        try:
            racks = dict(parse_pulsar_racks(observed.racks).racks)
        except FormatError as error:
            warnings.append(f"the rack node does not parse ({error}); placement is judged with the default rack")
    open_orphans: dict[str, list[int]] = {}
    for lid, held_keys in prior.items():
        for key in held_keys:
            if key[0] == _ORPHAN:
                open_orphans.setdefault(key[1], []).append(lid)
    return ScanSnapshot(
        cluster=ClusterView(racks=racks, writable=frozenset(observed.writable), readonly=frozenset(observed.readonly)),
        registrations={**observed.readonly, **observed.writable},
        warnings=warnings,
        lost_bookies=frozenset(k[1] for k in prior.get(CLUSTER_LEDGER_ID, ()) if k[0] == Category.BOOKIE_LOST.value),
        open_orphans=open_orphans,
        marks=marks,
        locks=locks or {},
    )


class SnapshotWalk:
    """The ledgers of one walk as scan items: :meth:`select` batch by batch, :meth:`finish` at the end (pure: the
    walk's batches are given, so it runs without ZooKeeper)."""

    def __init__(self, snapshot: ScanSnapshot, options: ScanOptions, prior: Mapping[int, list[ViolationKey]]) -> None:
        self.snapshot = snapshot
        self.options = options
        self.prior = prior
        self._unseen = {lid for lid in prior if lid != CLUSTER_LEDGER_ID}

    def select(self, batch: list[tuple[int, Node]]) -> list[ScanItem]:
        """The items of the selected ledgers of ``batch``, their passwords taken out; the walk's figures updated."""
        snapshot, options = self.snapshot, self.options
        snapshot.ledgers_in_zookeeper += len(batch)
        if options.surveys_held:
            snapshot.known.extend(lid for lid, _ in batch)
        items: list[ScanItem] = []
        for ledger_id, node in batch:
            self._unseen.discard(ledger_id)
            if ledger_id not in options.selection:
                continue
            if options.bookie is not None and not involves_bookie(node.data, options.bookie):
                continue
            redacted = redacted_metadata(node.data)  # the password stays here: the tasks get the bytes without it
            items.append(
                ScanItem(
                    ledger_id,
                    node.stat.version,
                    redacted.data,
                    snapshot.marks.get(ledger_id),
                    tuple(self.prior.get(ledger_id, ())),
                    node.stat.mtime_ms,
                    redacted.decode_error,
                    snapshot.locks.get(ledger_id) if ledger_id in snapshot.marks else None,
                )
            )
        snapshot.selected += len(items)
        return items

    def finish(self) -> None:
        """The walk has ended: the findings of the ledgers it did not meet are :attr:`ScanSnapshot.gone`.

        Cluster-level findings (ledger id -1) are the streaming job's: no ledger of the walk stands for them. An
        orphan has no metadata by definition: the survey of the bookies resolves its finding, not its absence here.
        """
        gone = {
            lid: kept
            for lid in sorted(self._unseen)
            if lid in self.options.selection and (kept := tuple(k for k in self.prior[lid] if k[0] != _ORPHAN))
        }
        self.snapshot.gone = gone
        self.snapshot.walked = True


class ZooKeeperSnapshot:
    """:class:`SnapshotWalk` over a live walk of ZooKeeper (see :func:`open_snapshot`)."""

    def __init__(
        self, client: KazooClient, layout: TreeLayout, walk: SnapshotWalk, *, walk_batch: int = PROGRESS_EVERY
    ) -> None:
        self.client = client
        self.layout = layout
        self.walk = walk
        self.snapshot = walk.snapshot
        self.walk_batch = walk_batch

    def chunks(self, size: int) -> Iterator[list[ScanItem]]:
        """The selected ledgers, ``size`` at a time in the walk's order; the next batch of the walk is read only when
        the chunks before it have been taken. The walk ends (:meth:`SnapshotWalk.finish`) after the last chunk.

        Raises :class:`WalkError` when a read fails (one that lost its connection is tried again under the client's
        command retry first; one made while the client reconnects waits for the connection)."""
        snapshot = self.snapshot
        pending: list[ScanItem] = []
        batches = walk_ledgers(self.client, self.layout, batch=self.walk_batch)
        while True:
            clock = time.monotonic()
            try:
                batch = next(batches, None)
            except KazooException as error:
                raise WalkError(
                    f"the ZooKeeper walk failed after {snapshot.ledgers_in_zookeeper} ledgers: "
                    f"{type(error).__name__} {error}".strip()
                ) from error
            if batch is not None:
                pending += self.walk.select(batch)
            else:
                self.walk.finish()
            snapshot.read_seconds += time.monotonic() - clock
            while len(pending) >= size or (pending and batch is None):
                yield pending[:size]
                del pending[:size]
            if batch is None:
                return


@contextlib.contextmanager
def open_snapshot(
    settings: Settings, options: ScanOptions, prior: Mapping[int, list[ViolationKey]], progress: Progress
) -> Iterator[ZooKeeperSnapshot]:
    """ZooKeeper read for a scan: the cluster now, the ledgers as :meth:`ZooKeeperSnapshot.chunks` are taken; the
    connection is closed on leaving."""
    clock = time.monotonic()
    target = zookeeper_target(settings.zookeeper)
    layout = TreeLayout(root=target.ledgers_root, manager=target.manager, racks_path=settings.watcher.racks_path)
    client = start_zookeeper_client(settings.zookeeper, timeout_s=options.connect_timeout_s)
    try:
        observed = read_marks_and_bookies(client, layout, progress=lambda phase, count: progress(phase, count, None))
        locks = read_locks(client, layout.root) if observed.marks else {}
        autorecovery = read_autorecovery(client, layout.root)
        snapshot = cluster_snapshot(observed, prior, locks)
        snapshot.warnings += scan_warnings(autorecovery, auditor_expected=settings.watcher.auditor_expected)
        snapshot.read_seconds = time.monotonic() - clock
        yield ZooKeeperSnapshot(client, layout, SnapshotWalk(snapshot, options, prior))
    finally:
        close_zookeeper_client(client)
