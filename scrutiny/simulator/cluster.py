"""A simulated BookKeeper cluster: a scenario's bookies, listening, registered and described in ZooKeeper.

:class:`SimCluster` runs one :class:`~scrutiny.simulator.model.Scenario` against a real
ZooKeeper (a started kazoo client, chrooted or not):

* every bookie not stopped is a :class:`~scrutiny.simulator.bookie.SimBookie` on free
  ``127.0.0.1`` ports, registered as real bookies register: an ephemeral
  ``<root>/available/<id>`` (or ``<root>/available/readonly/<id>``) node holding a binary
  BookieServiceInfo whose ``bookie-rpc`` endpoint is the v3 address (plus a ``scrutiny-agent``
  endpoint for the agent API), and a persistent text cookie under ``<root>/cookies``;
* ``<root>/LAYOUT`` (hierarchical ledger manager), ``<root>/INSTANCEID``, every ledger's metadata
  at its real hierarchical path in BookKeeper's v3 bytes (or corrupt bytes where the scenario says
  so), under-replication marks in BookKeeper's text format, Pulsar's rack map at ``racks_path``
  (``/bookies``, at the client's root, not under the ledgers root);
* BookKeeper's auto-recovery as its own processes leave it: ``<root>/underreplication/disable`` (empty) while it is
  disabled, and while an auditor is elected its vote, an ephemeral sequential
  ``<root>/underreplication/auditorelection/V_<sequence>`` holding ``AuditorVoteFormat`` as protobuf text
  (``bookieId: "<the first bookie>"``), on the cluster's session like the registrations;
* the replication workers' locks on marked ledgers: an ephemeral ``<root>/underreplication/locks/urL%010d`` holding
  ``LockDataFormat`` as protobuf text (``bookieId: "<the worker's bookie>"``) while a worker holds the ledger, on the
  cluster's session too;
* orphans (ledgers without metadata whose entries bookies still hold): no znode, no mark, no lock, ever (an
  ``orphan`` change deletes the ledger's, as ``delete`` does); their bookies list them (the agent's ``ListLedgers``)
  and serve their entries on both APIs like any other ledger's;
* the schedule's changes at their times (seconds after :attr:`SimCluster.started_at_ms`), each
  carried out in ZooKeeper and on the bookies.

The bulk writes are multi-op transactions (500 creates each) sent as pipelined asynchronous kazoo
calls (a bounded window in flight): one kazoo call per node would cost about as much Python time
as ZooKeeper's whole work, multi-ops make 100,000 ledgers a matter of seconds. All registrations
share the cluster's ZooKeeper session (with the auditor's vote and the locks); :meth:`SimCluster.stop` deletes them
(and, unless asked to keep it, everything else it wrote) and closes every port. Methods are coroutines of one event
loop; kazoo calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError

from scrutiny.connectors.zookeeper.tree import pipelined
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.ledger_metadata import build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.zk_paths import (
    AUDITOR_VOTE_PREFIX,
    auditor_election_path,
    available_bookie_path,
    available_path,
    cookie_path,
    cookies_path,
    instance_id_path,
    layout_path,
    ledger_path,
    readonly_bookie_path,
    readonly_path,
    underreplication_disable_path,
    underreplication_ledgers_path,
    underreplication_lock_path,
    underreplication_locks_path,
    underreplication_path,
)
from scrutiny.core.zk_records import (
    Cookie,
    Layout,
    UnderReplicationMark,
    format_auditor_vote,
    format_bookie_service_info,
    format_cookie,
    format_layout,
    format_lock_data,
    format_pulsar_racks,
    format_underreplication_mark,
)
from scrutiny.simulator.bookie import EntryStore, SimBookie
from scrutiny.simulator.model import BookieMode, CorruptKind, Event, LedgerSpec, LockSpec, Scenario
from scrutiny.simulator.state import ClusterState, ScheduledChange
from scrutiny.simulator.v3_server import ListingEncoding

log = logging.getLogger(__name__)

HIERARCHICAL_FACTORY: Final = "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"
#: Calls in flight at once (a multi-op transaction counts as one).
DEFAULT_WINDOW: Final = 64
#: Operations per multi-op transaction (well below ZooKeeper's 1 MB request limit for ledger nodes).
DEFAULT_BATCH: Final = 500
#: How long :meth:`SimCluster.stop` waits for each of its ZooKeeper steps (unregistering, removing the metadata).
STOP_ZOOKEEPER_TIMEOUT_S: Final = 5.0


class SimClusterError(ScrutinyError):
    """The simulated cluster cannot start (ZooKeeper already holds a cluster there, a write failed)."""


@dataclass
class AppliedChange:
    """A scheduled change as carried out: its planned and actual time (seconds after the start)."""

    event: Event
    planned_s: float
    applied_s: float


@dataclass
class WriteStats:
    """Figures of the initial write."""

    ledgers: int = 0
    marks: int = 0
    locks: int = 0
    seconds: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


def metadata_bytes(spec: LedgerSpec, *, ctime_ms: int | None = None, seed: int = 0) -> bytes:
    """The ledger znode's bytes: BookKeeper's v3 format, or the scenario's corrupt bytes."""
    metadata = build_ledger_metadata(
        ensemble_size=spec.ensemble_size,
        write_quorum=spec.write_quorum,
        ack_quorum=spec.ack_quorum,
        segments=[(s.first, s.ensemble) for s in spec.segments],
        state=spec.state,
        last_entry_id=spec.last_entry if spec.closed else -1,
        length=(spec.last_entry + 1) * spec.entry_size if spec.closed else 0,
        password=b"",
        ctime=ctime_ms,
        custom_metadata=spec.custom,
    )
    data = encode_ledger_metadata_v3(metadata)
    if spec.corrupt is None:
        return data
    if spec.corrupt is CorruptKind.TRUNCATED:
        return data[: max(len(data) // 2, len(b"BookieMetadataFormatVersion\t3\n") + 1)]
    if spec.corrupt is CorruptKind.BAD_VERSION:
        return data.replace(b"Version\t3\n", b"Version\t9\n", 1)
    rng = random.Random(f"corrupt:{seed}:{spec.ledger_id}")
    return b"\xff" + rng.randbytes(47)


def cookie_bytes(bookie_id: str, instance_id: str) -> bytes:
    """A bookie's cookie as BookKeeper writes it: version line, then CookieFormat as protobuf text."""
    journal, ledgers = f"/simulated/{bookie_id}/journal", (f"/simulated/{bookie_id}/ledgers",)
    return format_cookie(Cookie(bookie_id, journal, ledgers, instance_id=instance_id))


def mark_bytes(spec: LedgerSpec, started_at_ms: int) -> bytes | None:
    """The ledger's under-replication mark (ctime relative to ``started_at_ms``), or None."""
    if spec.mark is None:
        return None
    ctime = None if spec.mark.ctime_s is None else started_at_ms + round(spec.mark.ctime_s * 1000)
    return format_underreplication_mark(UnderReplicationMark(spec.mark.replicas, ctime))


class _Pipeline:
    """Asynchronous kazoo calls with at most ``window`` in flight (the one way bulk work reaches ZooKeeper)."""

    def __init__(self, client: KazooClient, window: int, batch: int = DEFAULT_BATCH) -> None:
        self.client = client
        self.window = window
        self.batch = batch

    def run(
        self, calls: Iterable[tuple[str, Callable[[], Any]]], tolerate: tuple[type[BaseException], ...] = ()
    ) -> list[tuple[str, Any]]:
        """Start every call, keep ``window`` in flight; (key, result) of each success, in completion order.

        Errors of a ``tolerate`` type are skipped; any other is raised once all started calls ended.
        """
        return pipelined(self.client, calls, window=self.window, tolerate=tolerate)

    def create_tree(self, nodes: Sequence[tuple[str, bytes]], known: set[str]) -> None:
        """Create the nodes' missing ancestors, then the nodes."""
        self.ensure_parents((path for path, _ in nodes), known)
        self.transactions(nodes)

    def ensure_parents(self, paths: Iterable[str], known: set[str]) -> None:
        """Create the missing ancestors of ``paths``, shallowest first, and note them in ``known``."""
        parents: set[str] = set()
        for path in paths:
            parent = path.rsplit("/", 1)[0]
            while parent and parent not in known and parent not in parents:
                parents.add(parent)
                parent = parent.rsplit("/", 1)[0]
        create = self.client.create_async
        for depth in sorted({p.count("/") for p in parents}):
            level = [p for p in parents if p.count("/") == depth]
            self.run(((p, functools.partial(create, p, b"")) for p in level), tolerate=(NodeExistsError,))
        known |= parents

    def transactions(self, ops: Iterable[tuple[str, bytes | None]]) -> int:
        """Creates (data) or deletes (None) in multi-op transactions of ``batch`` ops, pipelined; returns the count.

        ``ops`` is consumed lazily, so producing them (encoding metadata) overlaps ZooKeeper's work on
        the transactions already sent. A transaction of deletes that fails (a node already gone) is
        retried op by op, tolerating missing nodes; any other failure raises.
        """
        batches: dict[str, list[tuple[str, bytes | None]]] = {}

        def calls() -> Iterator[tuple[str, Callable[[], Any]]]:
            source = iter(ops)
            while batch := list(itertools.islice(source, self.batch)):
                key = str(len(batches))
                batches[key] = batch
                yield key, functools.partial(self._commit, batch)

        for key, results in self.run(calls()):
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not failures:
                continue
            batch = batches[key]
            if all(data is None for _, data in batch):
                deletes = ((p, functools.partial(self.client.delete_async, p)) for p, _ in batch)
                self.run(deletes, tolerate=(NoNodeError,))
                continue
            raise failures[0]
        return sum(len(batch) for batch in batches.values())

    def _commit(self, batch: Sequence[tuple[str, bytes | None]]) -> Any:
        transaction = self.client.transaction()
        for path, data in batch:
            if data is None:
                transaction.delete(path)
            else:
                transaction.create(path, data)
        return transaction.commit_async()

    def delete_tree(self, path: str) -> int:
        """Delete ``path`` and everything below it, leaves first; returns the number of nodes deleted."""
        levels: list[list[str]] = [[path]] if self.client.exists(path) is not None else []
        while levels and levels[-1]:
            calls = ((p, functools.partial(self.client.get_children_async, p)) for p in levels[-1])
            found = self.run(calls, tolerate=(NoNodeError,))
            levels.append([f"{parent.rstrip('/')}/{child}" for parent, children in found for child in children])
        for level in reversed(levels):
            self.transactions([(p, None) for p in level])
        return sum(len(level) for level in levels)


class SimCluster:
    """Runs a scenario (see the module doc): ``await start()``, ``await run_schedule()``, ``await stop()``."""

    def __init__(
        self,
        scenario: Scenario,
        client: KazooClient,
        *,
        replace: bool = False,
        window: int = DEFAULT_WINDOW,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.scenario = scenario
        self.client = client
        self.replace = replace
        self.root = scenario.cluster.ledgers_root
        self.state = ClusterState.from_scenario(scenario)
        self.bookies: dict[str, SimBookie] = {}
        self.applied: list[AppliedChange] = []
        self.stats = WriteStats()
        self.started_at_ms: int | None = None
        self._pipeline = _Pipeline(client, window)
        self._clock = clock
        self._t0_mono = 0.0
        self._known_dirs: set[str] = set()
        self._registered: dict[str, str] = {}
        #: The path of the auditor's vote while it has one (ZooKeeper picks its sequence).
        self._vote_path: str | None = None
        #: Ledger id -> the replication lock written for it (the ephemeral lock nodes this session holds).
        self._locks: dict[int, LockSpec] = {}
        self._ctime_ms = 0
        #: When each ledger's metadata was last written (ms): its last write, for the write cache's flushes.
        self._written_ms: dict[int, int] = {}
        self._schedule_task: asyncio.Task[None] | None = None
        self._on_change: list[Callable[[AppliedChange], None]] = []

    # ------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Write the cluster to ZooKeeper and start and register its bookies (t = 0 when this returns)."""
        started = time.perf_counter()
        self._ctime_ms = int(self._clock() * 1000)
        await asyncio.to_thread(self._prepare_root)
        self._make_bookies()
        try:
            for bookie_id, bookie in self.bookies.items():
                if self.state.bookies[bookie_id].mode is not BookieMode.STOPPED:
                    await bookie.start()
            await asyncio.to_thread(self._write_initial)
            self.started_at_ms = int(self._clock() * 1000)
            self._t0_mono = time.monotonic()
            await asyncio.to_thread(self._write_marks, list(self.state.ledgers.values()))
            await asyncio.to_thread(self._write_locks, list(self.state.ledgers.values()))
            await asyncio.to_thread(self._write_autorecovery)
            for bookie_id in self.bookies:
                await asyncio.to_thread(self._register, bookie_id)
        except BaseException:
            await self.stop(keep_metadata=True)
            raise
        self.stats.seconds = time.perf_counter() - started
        log.info(
            "simulated cluster %s up: %d bookies, %d ledgers, %d marks in %.2f s",
            self.scenario.name,
            len(self.bookies),
            self.stats.ledgers,
            self.stats.marks,
            self.stats.seconds,
        )

    async def stop(self, *, keep_metadata: bool = False, zookeeper_timeout_s: float = STOP_ZOOKEEPER_TIMEOUT_S) -> None:
        """Stop the schedule, unregister and stop every bookie; remove what was written unless ``keep_metadata``.

        Bounded in time whatever ZooKeeper does: its part (unregistering, removing) is skipped when the client is not
        connected and given up after ``zookeeper_timeout_s`` otherwise (a warning says what was left); the bookies'
        ports are closed in every case.
        """
        task, self._schedule_task = self._schedule_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._in_zookeeper("unregister the bookies", self._unregister_all, zookeeper_timeout_s)
        await asyncio.gather(*(bookie.stop() for bookie in self.bookies.values()))
        if not keep_metadata:
            await self._in_zookeeper("remove the cluster's metadata", self._remove_everything, zookeeper_timeout_s)

    async def _in_zookeeper(self, what: str, work: Callable[[], None], timeout_s: float) -> None:
        """Run ``work`` (ZooKeeper calls) in a thread for at most ``timeout_s``; skipped when not connected."""
        if not self.client.connected:
            log.warning("ZooKeeper is not connected: did not %s (registrations end with the session)", what)
            return
        try:
            await asyncio.wait_for(asyncio.to_thread(work), timeout=timeout_s)
        except TimeoutError:
            log.warning("ZooKeeper did not answer within %g s: did not %s", timeout_s, what)

    def _unregister_all(self) -> None:
        """Every bookie's registration, the auditor's vote and the replication locks: the processes that made them
        stop."""
        for bookie_id in list(self._registered):
            self._unregister(bookie_id)
        self._withdraw_vote()
        self._release_locks()

    async def __aenter__(self) -> SimCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def elapsed_s(self) -> float:
        """Seconds since the start (0 before it)."""
        return time.monotonic() - self._t0_mono if self.started_at_ms is not None else 0.0

    def addresses(self) -> dict[str, dict[str, str]]:
        """Bookie id -> {"v3": host:port, "agent": host:port} (last bound addresses)."""
        return {
            b: {"v3": f"{s.v3_address[0]}:{s.v3_address[1]}", "agent": s.agent_address} for b, s in self.bookies.items()
        }

    def on_change(self, callback: Callable[[AppliedChange], None]) -> None:
        """Call ``callback`` after each scheduled change has been carried out."""
        self._on_change.append(callback)

    # ------------------------------------------------------------------- the schedule

    def start_schedule(self) -> asyncio.Task[None]:
        """Run the schedule in the background (stopped by :meth:`stop`)."""
        if self._schedule_task is None:
            self._schedule_task = asyncio.create_task(self.run_schedule())
        return self._schedule_task

    async def run_schedule(self, until_s: float | None = None) -> None:
        """Carry out every scheduled change at its time (up to ``until_s``); returns when done."""
        for event in self.scenario.schedule:
            if until_s is not None and event.at_s > until_s:
                return
            delay = event.at_s - self.elapsed_s()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.apply(event)

    async def apply(self, event: Event) -> None:
        """Carry out one change now, in the state, in ZooKeeper and on the bookies."""
        change = self.state.apply(event)
        await self._carry_out(change)
        applied = AppliedChange(event, event.at_s, self.elapsed_s())
        self.applied.append(applied)
        log.info("applied %s at %.2f s (planned %.2f s)", event.describe(), applied.applied_s, event.at_s)
        for callback in self._on_change:
            callback(applied)

    async def _carry_out(self, change: ScheduledChange) -> None:
        for bookie_id, ledgers in change.data.items():
            self.bookies[bookie_id].store.invalidate(ledgers)
        await asyncio.to_thread(self._write_changes, change)
        for bookie_id in sorted(change.stopped | change.wiped):
            await asyncio.to_thread(self._unregister, bookie_id)
            await self.bookies[bookie_id].stop()
        for bookie_id in sorted(change.wiped):
            self.bookies[bookie_id].store.clear()
            await asyncio.to_thread(self._new_cookie, bookie_id)
        for bookie_id in sorted(change.started | change.wiped):
            if self.state.bookies[bookie_id].mode is not BookieMode.STOPPED:
                await self.bookies[bookie_id].start()
                await asyncio.to_thread(self._register, bookie_id)
        for bookie_id in sorted(change.registration):
            await asyncio.to_thread(self._register, bookie_id)
        for bookie_id in sorted(change.faults):
            state = self.state.bookies[bookie_id]
            self.bookies[bookie_id].set_fault(state.fault)
            self.bookies[bookie_id].set_limbo(state.limbo)

    # ------------------------------------------------------------------- bookies

    def _make_bookies(self) -> None:
        encoding = ListingEncoding(self.scenario.cluster.v3_encoding)
        for index, (bookie_id, state) in enumerate(self.state.bookies.items()):
            held_ids = functools.partial(self.state.ledgers_of, bookie_id)
            store = EntryStore(self._loader(bookie_id), self.state.entry_header, ids=held_ids)
            self.bookies[bookie_id] = SimBookie(
                bookie_id,
                store,
                fault=state.fault,
                limbo=state.limbo,
                encoding=encoding,
                seed=self.scenario.seed * 1000 + index,
                indexed=self._indexed if self.scenario.cluster.write_cache_flush_s > 0 else None,
            )

    def _indexed(self, ledger_id: int, now_ms: int) -> bool:
        """Whether the ledger's last write was flushed into the bookies' indexes by ``now_ms``: a flush every
        ``write_cache_flush_s`` from the bookies' start has happened since."""
        written = self._written_ms.get(ledger_id)
        if written is None:
            return True
        every = max(1, round(self.scenario.cluster.write_cache_flush_s * 1000))
        return (now_ms - self._ctime_ms) // every > (written - self._ctime_ms) // every

    def _loader(self, bookie_id: str) -> Callable[[int], Any]:
        state = self.state

        def load(ledger_id: int) -> Any:
            return state.held_groups(bookie_id, ledger_id)

        return load

    def _register(self, bookie_id: str) -> None:
        """(Re-)create the bookie's ephemeral registration for its current mode."""
        self._unregister(bookie_id)
        mode = self.state.bookies[bookie_id].mode
        if mode is BookieMode.STOPPED:
            return
        path = (readonly_bookie_path if mode is BookieMode.READONLY else available_bookie_path)(
            bookie_id, root=self.root
        )
        data = format_bookie_service_info(self.bookies[bookie_id].service_info())
        self.client.create(path, data, ephemeral=True)
        self._registered[bookie_id] = path

    def _new_cookie(self, bookie_id: str) -> None:
        """A wiped bookie's cookie is deleted, and made again when it starts empty (a new znode, as BookKeeper's)."""
        path = cookie_path(bookie_id, root=self.root)
        with contextlib.suppress(NoNodeError):
            self.client.delete(path)
        self.client.create(path, cookie_bytes(bookie_id, self.scenario.cluster.instance_id))

    def _unregister(self, bookie_id: str) -> None:
        path = self._registered.pop(bookie_id, None)
        if path is not None:
            with contextlib.suppress(NoNodeError):
                self.client.delete(path)

    # ------------------------------------------------------------------- ZooKeeper writes

    def _prepare_root(self) -> None:
        client = self.client
        racks_path = self.scenario.cluster.racks_path
        if client.exists(self.root) is not None and client.get_children(self.root):
            if not self.replace:
                raise SimClusterError(
                    f"{self.root} already holds a cluster ({', '.join(sorted(client.get_children(self.root))[:5])}"
                    "...); remove it or ask to replace it"
                )
            self._pipeline.delete_tree(self.root)
            if racks_path:
                self._pipeline.delete_tree(racks_path)
        elif racks_path and client.exists(racks_path) is not None and not self.replace:
            raise SimClusterError(f"{racks_path} already exists; remove it or ask to replace it")

    def _write_initial(self) -> None:
        started = time.perf_counter()
        client, root, cluster = self.client, self.root, self.scenario.cluster
        client.ensure_path(root)
        client.create(layout_path(root=root), format_layout(Layout(2, HIERARCHICAL_FACTORY, 1)))
        client.create(instance_id_path(root=root), cluster.instance_id.encode())
        for path in (
            available_path(root=root),
            readonly_path(root=root),
            cookies_path(root=root),
            underreplication_ledgers_path(root=root),
            underreplication_locks_path(root=root),
        ):
            client.ensure_path(path)
        self._known_dirs |= {root, available_path(root=root), cookies_path(root=root)}
        self._known_dirs.add(underreplication_ledgers_path(root=root))
        for bookie_id in self.bookies:
            client.create(cookie_path(bookie_id, root=root), cookie_bytes(bookie_id, cluster.instance_id))
        racks = self.state.racks()
        if cluster.racks_path:
            hosts = {b: self.bookies[b].host for b in racks}
            client.create(
                cluster.racks_path, format_pulsar_racks({cluster.rack_group: racks}, hostnames=hosts), makepath=True
            )
        prepared = time.perf_counter()
        specs = list(self.state.ledgers.values())  # the ledgers with metadata: an orphan has no znode
        paths = [ledger_path(spec.ledger_id, root=root) for spec in specs]
        self._pipeline.ensure_parents(paths, self._known_dirs)
        nodes = ((path, self._metadata(spec)) for path, spec in zip(paths, specs, strict=True))
        self.stats.ledgers = self._pipeline.transactions(nodes)
        written = int(self._clock() * 1000)
        self._written_ms.update(dict.fromkeys((spec.ledger_id for spec in specs), written))
        self.stats.extra.update(prepare_s=prepared - started, write_s=time.perf_counter() - prepared)

    def _metadata(self, spec: LedgerSpec) -> bytes:
        return metadata_bytes(spec, ctime_ms=self._ctime_ms, seed=self.scenario.seed)

    def _write_marks(self, specs: Sequence[LedgerSpec]) -> None:
        assert self.started_at_ms is not None
        nodes = []
        for spec in specs:
            data = mark_bytes(spec, self.started_at_ms)
            if data is not None:
                nodes.append((underreplication_path(spec.ledger_id, root=self.root), data))
        self._pipeline.create_tree(nodes, self._known_dirs)
        self.stats.marks += len(nodes)

    def _write_changes(self, change: ScheduledChange) -> None:
        client, root = self.client, self.root
        for ledger_id in sorted(change.metadata):
            spec = self.state.ledgers[ledger_id]
            path = ledger_path(ledger_id, root=root)
            if client.exists(path) is None:
                self._pipeline.create_tree([(path, self._metadata(spec))], self._known_dirs)
            else:
                client.set(path, self._metadata(spec))
            self._written_ms[ledger_id] = int(self._clock() * 1000)
        for ledger_id in sorted(change.deleted):
            for path in (ledger_path(ledger_id, root=root), underreplication_path(ledger_id, root=root)):
                with contextlib.suppress(NoNodeError):
                    client.delete(path)
        for ledger_id in sorted(change.marks - change.deleted):
            self._write_mark(ledger_id)
        for ledger_id in sorted(change.locks):
            self._write_lock(ledger_id)
        if change.autorecovery:
            self._write_disable()
        if change.auditor:
            self._write_vote()

    def _write_mark(self, ledger_id: int) -> None:
        assert self.started_at_ms is not None
        path = underreplication_path(ledger_id, root=self.root)
        spec = self.state.ledgers.get(ledger_id)
        data = None if spec is None else mark_bytes(spec, self.started_at_ms)
        if data is None:
            with contextlib.suppress(NoNodeError):
                self.client.delete(path)
        elif self.client.exists(path) is None:
            self._pipeline.create_tree([(path, data)], self._known_dirs)
        else:
            self.client.set(path, data)

    def _write_locks(self, specs: Sequence[LedgerSpec]) -> None:
        """The initial marks' locks (at t = 0), ephemeral, pipelined."""
        create = self.client.create_async
        calls = []
        for spec in specs:
            if spec.lock is not None:
                path = underreplication_lock_path(spec.ledger_id, root=self.root)
                self._locks[spec.ledger_id] = spec.lock
                calls.append(
                    (path, functools.partial(create, path, format_lock_data(spec.lock.bookie_id), ephemeral=True))
                )
        self._pipeline.run(calls)
        self.stats.locks += len(calls)

    def _write_lock(self, ledger_id: int) -> None:
        """The ledger's lock per the state: taken (a new node, a new ctime) by its worker, or released."""
        spec = self.state.ledgers.get(ledger_id)
        lock = None if spec is None else spec.lock
        if lock is not None and self._locks.get(ledger_id) == lock:
            return
        self._release_lock(ledger_id)
        if lock is not None:
            self._locks[ledger_id] = lock
            path = underreplication_lock_path(ledger_id, root=self.root)
            self.client.create(path, format_lock_data(lock.bookie_id), ephemeral=True)

    def _release_lock(self, ledger_id: int) -> None:
        if self._locks.pop(ledger_id, None) is not None:
            with contextlib.suppress(NoNodeError):
                self.client.delete(underreplication_lock_path(ledger_id, root=self.root))

    def _release_locks(self) -> None:
        """Delete every lock node this session holds (a transaction per batch; one already gone is skipped)."""
        paths = [underreplication_lock_path(ledger_id, root=self.root) for ledger_id in sorted(self._locks)]
        self._locks.clear()
        self._pipeline.transactions((path, None) for path in paths)

    def _write_autorecovery(self) -> None:
        """Auto-recovery as the scenario starts it (at t = 0): the disable node and the auditor's vote."""
        self._write_disable()
        self._write_vote()

    def _write_disable(self) -> None:
        """Create ``<root>/underreplication/disable`` (empty, as BookKeeper's shell does) while auto-recovery is
        disabled, delete it otherwise."""
        path = underreplication_disable_path(root=self.root)
        if self.state.disabled_since_s is None:
            with contextlib.suppress(NoNodeError):
                self.client.delete(path)
        else:
            with contextlib.suppress(NodeExistsError):
                self.client.create(path, b"", makepath=True)

    def _write_vote(self) -> None:
        """The auditor's vote while one is elected (a new sequence each time it starts), none otherwise."""
        if self.state.no_auditor_since_s is not None:
            self._withdraw_vote()
        elif self._vote_path is None:
            prefix = f"{auditor_election_path(root=self.root)}/{AUDITOR_VOTE_PREFIX}"
            data = format_auditor_vote(self.state.auditor_voter)
            self._vote_path = self.client.create(prefix, data, ephemeral=True, sequence=True, makepath=True)

    def _withdraw_vote(self) -> None:
        path, self._vote_path = self._vote_path, None
        if path is not None:
            with contextlib.suppress(NoNodeError):
                self.client.delete(path)

    def _remove_everything(self) -> None:
        """Delete what was written: the ledger and mark nodes by their known paths, then the rest of the tree."""
        root = self.root
        leaves: list[tuple[str, bytes | None]] = []
        for ledger_id, spec in self.state.ledgers.items():
            leaves.append((ledger_path(ledger_id, root=root), None))
            if spec.mark is not None:
                leaves.append((underreplication_path(ledger_id, root=root), None))
        self._pipeline.transactions(leaves)
        racks_path = self.scenario.cluster.racks_path
        for path in (root, racks_path):
            if path:
                self._pipeline.delete_tree(path)
