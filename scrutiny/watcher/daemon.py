"""The ZooKeeper watcher: BookKeeper's metadata changes, published to Kafka as ledger events.

Runs until stopped. Several watchers may run: they elect one active member through a lock
under ``election_path`` (Scrutiny's own znodes), and only the active one publishes. The active
watcher:

1. adds one persistent recursive watch on the ledgers root (ledgers, under-replication marks,
   bookie registrations) and one persistent watch on Pulsar's rack node;
2. walks the whole tree and publishes what changed since its last known state, between
   SNAPSHOT_BEGIN and SNAPSHOT_END markers (origin SNAPSHOT the first time: everything; origin
   RESYNC afterwards: the differences);
3. then, for every notification, reads the node's current state and publishes it if it is new
   (origin LIVE), and sends a TICK to every partition every ``tick_interval_s``.

It stops publishing as soon as its ZooKeeper connection is suspended (it may be losing its
leadership), adds the watches again and resyncs on every reconnect, and goes back to the
election when the session is lost. Errors from ZooKeeper or Kafka are logged, counted and
retried with backoff; they never end the process. If Kafka gives up on an event after the
delivery timeout, the whole state is published again as a snapshot.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.exceptions import KazooException, LockTimeout
from kazoo.protocol.states import KazooState, KeeperState, WatchedEvent

from scrutiny.connectors.kafka.events import Publisher, event_for_change, marker_event
from scrutiny.connectors.kafka.publisher import EventPublisher, PublishError
from scrutiny.connectors.zookeeper.client import start_quietly
from scrutiny.connectors.zookeeper.tree import (
    TreeLayout,
    read_cluster,
    read_nodes,
    read_optional,
    read_registrations,
)
from scrutiny.connectors.zookeeper.watch import PersistentWatchClient
from scrutiny.core.backoff import Backoff
from scrutiny.core.errors import FormatError, PathError, ScrutinyError
from scrutiny.core.metadata_view import KnownState, MetadataChange, Node, node_stat_lag
from scrutiny.core.zk_paths import (
    available_path,
    layout_path,
    ledger_id_from_path,
    ledger_id_from_underreplication_path,
    underreplication_ledgers_path,
)
from scrutiny.core.zk_records import parse_layout
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.watcher.metrics import WatcherMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WatcherConfig:
    """What to watch, how to elect, how often to tick."""

    layout: TreeLayout = field(default_factory=TreeLayout)
    election_path: str = "/scrutiny/watcher"
    watcher_id: str = "watcher"
    tick_interval_s: float = 5.0
    backoff: Backoff = Backoff(initial_s=0.2, maximum_s=30.0, multiplier=2.0, jitter=0.5)
    batch: int = 2000


class LeadershipLost(ScrutinyError):  # noqa: N818 - a state, not a failure
    """The ZooKeeper session ended: the watcher is no longer the active one."""


_EXPECTED_ERRORS = (KazooException, PublishError, LeadershipLost, OSError, ScrutinyError)


class Watcher:
    """One watcher process's loop: elect, lead, publish; see the module docstring."""

    def __init__(
        self,
        zk: PersistentWatchClient,
        publisher_factory: Callable[[], EventPublisher],
        config: WatcherConfig,
        *,
        metrics: WatcherMetrics | None = None,
        clock: Callable[[], float] = time.time,
        progress: Callable[[str, int], None] | None = None,
    ) -> None:
        self.zk = zk
        self._publisher_factory = publisher_factory
        self._publisher: EventPublisher | None = None
        self.config = config
        self.metrics = metrics or WatcherMetrics()
        self._clock = clock
        self._progress = progress
        self.known: KnownState | None = None
        self.epoch = 0
        self.leading = threading.Event()
        self._stop = threading.Event()
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()

    # ------------------------------------------------------------------ the outer loop

    def run(self, stop: threading.Event) -> None:
        """Elect, lead and publish until ``stop`` is set; every error is retried with backoff."""
        self._stop = stop
        self._publisher_ready()  # bad Kafka settings fail here, before anything else
        self.zk.add_listener(self._on_state)
        attempt = 0
        try:
            while not stop.is_set():
                try:
                    self._elect_and_lead(stop)
                    attempt = 0
                except Exception as error:  # every failure is retried; unforeseen ones are logged in full
                    self.metrics.errors.labels(type(error).__name__).inc()
                    if isinstance(error, _EXPECTED_ERRORS):
                        log.warning("watcher: %s; retrying", str(error) or type(error).__name__)
                    else:
                        log.exception("watcher: unexpected error; retrying")
                    stop.wait(self.config.backoff.delay(attempt, random.random()))
                    attempt += 1
        finally:
            self.zk.remove_listener(self._on_state)
            if self._publisher is not None:
                self._publisher.close()

    def _elect_and_lead(self, stop: threading.Event) -> None:
        self._connected(stop)
        lock = self.zk.Lock(self.config.election_path, self.config.watcher_id)
        while not stop.is_set():
            try:  # a standby waits here; kazoo raises (not returns False) when the wait times out
                if lock.acquire(timeout=1.0):
                    break
            except LockTimeout:
                continue
        if stop.is_set():
            return
        try:
            self.epoch = _lock_sequence(lock.node)
            log.info("watcher %s is the active watcher (epoch %d)", self.config.watcher_id, self.epoch)
            self.metrics.leader.set(1)
            self.leading.set()
            self._lead(stop)
        finally:
            self.leading.clear()
            self.metrics.leader.set(0)
            self.zk.remove_persistent_watches()
            if self.zk.connected:
                with contextlib.suppress(KazooException):
                    lock.release()

    def _connected(self, stop: threading.Event) -> None:
        """Start the client if it never was; otherwise wait for kazoo's own reconnection (new session)."""
        if self.zk.client_state == KeeperState.CLOSED:
            start_quietly(self.zk, self.zk._session_timeout_seconds())
            return
        deadline = time.monotonic() + 2 * self.zk._session_timeout_seconds()
        while not self.zk.connected and not stop.is_set():
            if time.monotonic() > deadline:
                raise LeadershipLost("ZooKeeper is unreachable")
            stop.wait(0.1)

    # ------------------------------------------------------------------ leading

    def _lead(self, stop: threading.Event) -> None:
        publisher = self._publisher_ready()
        self._drain_queue()
        layout = self._checked_layout()
        self._add_watches(layout)
        self._resync(layout, publisher)
        next_tick = time.monotonic() + self.config.tick_interval_s
        while not stop.is_set():
            timeout = max(0.0, next_tick - time.monotonic())
            try:
                kind, item = self._queue.get(timeout=min(timeout, 0.5))
            except queue.Empty:
                kind, item = "", None
            if kind == "state":
                self._on_state_item(item, layout, publisher, stop)
            elif kind == "node":
                self._live(layout, publisher, [item, *self._more_nodes()])
            if publisher.broken:
                publisher = self._rebuild_publisher(layout)
            if time.monotonic() >= next_tick:
                self._publish(publisher, marker_event(pb.EventKind.TICK, pb.Origin.LIVE, self._me(), **self._now()))
                next_tick = time.monotonic() + self.config.tick_interval_s

    def _on_state_item(self, state: str, layout: TreeLayout, publisher: EventPublisher, stop: threading.Event) -> None:
        if state == KazooState.LOST:
            raise LeadershipLost("ZooKeeper session lost")
        if state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended: publishing paused")
            self._wait_reconnected(stop)
        # Reconnected (CONNECTED, or back from SUSPENDED): changes may have been missed.
        self._add_watches(layout)
        self._resync(layout, publisher)

    def _wait_reconnected(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                kind, item = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if kind != "state":
                continue  # notifications from before the suspension: the resync covers them
            if item == KazooState.LOST:
                raise LeadershipLost("ZooKeeper session lost while suspended")
            if item == KazooState.CONNECTED:
                log.info("ZooKeeper connection back: resyncing")
                return

    def _on_state(self, state: str) -> None:
        """kazoo's listener (its own thread): record and hand over, never block."""
        self.metrics.session_state(str(state))
        self._queue.put(("state", state))

    def _on_node(self, event: WatchedEvent) -> None:
        self._queue.put(("node", event.path))

    def _add_watches(self, layout: TreeLayout) -> None:
        self.zk.ensure_path(layout.root)
        self.zk.add_persistent_watch(layout.root, self._on_node, recursive=True)
        self.zk.add_persistent_watch(layout.racks_path, self._on_node, recursive=False)

    def _checked_layout(self) -> TreeLayout:
        """The configured layout, with the ledger manager BookKeeper's LAYOUT node names."""
        layout = self.config.layout
        data = read_optional(self.zk, layout_path(root=layout.root))
        if data is None:
            log.warning("no LAYOUT node under %s: assuming the %s ledger manager", layout.root, layout.manager)
            return layout
        manager = parse_layout(data).manager
        if manager is not layout.manager:
            log.info("LAYOUT names the %s ledger manager", manager)
        return replace(layout, manager=manager)

    # ------------------------------------------------------------------ resync and live changes

    def _resync(self, layout: TreeLayout, publisher: EventPublisher) -> None:
        started = time.monotonic()
        origin = pb.Origin.SNAPSHOT if self.known is None else pb.Origin.RESYNC
        view = read_cluster(self.zk, layout, progress=self._progress)
        known = self.known or KnownState()
        changes = known.resync(view)
        me = self._me()
        self._publish(publisher, marker_event(pb.EventKind.SNAPSHOT_BEGIN, origin, me, **self._now()))
        for change in changes:
            self._publish(publisher, event_for_change(change, origin, me, **self._now()))
        end = marker_event(pb.EventKind.SNAPSHOT_END, origin, me, **self._now())
        end.snapshot.ledgers = len(view.ledgers)
        end.snapshot.under_replicated = len(view.marks)
        end.snapshot.bookies = len(view.writable) + len(view.readonly)
        end.snapshot.duration_ms = int((time.monotonic() - started) * 1000)
        self._publish(publisher, end)
        publisher.flush()
        self.known = known
        self.metrics.resyncs.labels(pb.Origin.Name(origin)).inc()
        self.metrics.resync_duration.observe(time.monotonic() - started)
        log.info(
            "%s: %d ledgers, %d marks, %d changes published in %.1f s",
            pb.Origin.Name(origin).lower(),
            len(view.ledgers),
            len(view.marks),
            len(changes),
            time.monotonic() - started,
        )

    def _more_nodes(self) -> list[str]:
        """Further queued notifications, up to a batch (state changes go back to the queue's front)."""
        paths: list[str] = []
        while len(paths) < self.config.batch:
            try:
                kind, item = self._queue.get_nowait()
            except queue.Empty:
                break
            if kind != "node":
                self._requeue_first(kind, item)
                break
            paths.append(item)
        return paths

    def _requeue_first(self, kind: str, item: Any) -> None:
        with self._queue.mutex:
            self._queue.queue.appendleft((kind, item))
            self._queue.not_empty.notify()

    def _drain_queue(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def _live(self, layout: TreeLayout, publisher: EventPublisher, paths: list[str]) -> None:
        """Read the current state of the notified nodes and publish what is new, in notification order.

        A node notified several times is read once, at the place of its last notification, so its
        event follows those of the other nodes notified before (a ledger's mark cleared, then the
        ledger deleted, stays in that order).
        """
        assert self.known is not None
        targets = _classify(layout, paths)
        found = read_nodes(self.zk, [path for (kind, _), path in targets.items() if kind in ("ledger", "mark")])
        now = self._now()
        for (kind, ident), path in targets.items():
            for change in self._changes(kind, ident, found.get(path), layout):
                if change.node is not None and change.kind.value.startswith("LEDGER_"):
                    self.metrics.change_lag.observe(node_stat_lag(change.node, now["observed_ms"]))
                self._publish(publisher, event_for_change(change, pb.Origin.LIVE, self._me(), **now))

    def _changes(self, kind: str, ident: int, node: Node | None, layout: TreeLayout) -> list[MetadataChange]:
        assert self.known is not None
        if kind == "ledger":
            change = self.known.ledger(ident, node)
        elif kind == "mark":
            change = self.known.mark(ident, node)
        elif kind == "racks":
            change = self.known.racks(read_optional(self.zk, layout.racks_path))
        else:
            return self.known.bookies(*read_registrations(self.zk, layout.root))
        return [change] if change is not None else []

    # ------------------------------------------------------------------ publishing

    def _publish(self, publisher: EventPublisher, event: pb.LedgerEvent) -> None:
        """Hand one event to Kafka, retrying with backoff while Kafka does not take it (nothing is dropped)."""
        attempt = 0
        while True:
            try:
                publisher.publish(event)
                break
            except PublishError as error:
                self.metrics.errors.labels("kafka").inc()
                if self.zk.state == KazooState.LOST or self._stop.is_set():
                    raise LeadershipLost("stopped or lost the session while Kafka was unavailable") from error
                log.warning("Kafka does not take events (%s); retrying", error)
                self._stop.wait(self.config.backoff.delay(attempt, random.random()))
                attempt += 1
        self.metrics.published(event.kind)
        self.metrics.last_event.set(self._clock())

    def _publisher_ready(self) -> EventPublisher:
        if self._publisher is None:
            self._publisher = self._publisher_factory()
        return self._publisher

    def _rebuild_publisher(self, layout: TreeLayout) -> EventPublisher:
        """After Kafka gave up on an event: a new producer, and the whole state as a snapshot again."""
        assert self._publisher is not None
        log.error("events were lost in Kafka (%s): republishing the whole state", self._publisher.broken)
        self._publisher.close()
        self._publisher = None
        self.known = None
        publisher = self._publisher_ready()
        self._resync(layout, publisher)
        return publisher

    def _me(self) -> Publisher:
        return Publisher(self.config.watcher_id, self.epoch, self.config.layout.root)

    def _now(self) -> dict[str, int]:
        return {"observed_ms": int(self._clock() * 1000)}


def _lock_sequence(node: str | None) -> int:
    """The sequence number ZooKeeper gave the election node: the leadership epoch."""
    match = re.search(r"(\d+)$", node or "")
    return int(match.group(1)) if match else 0


def _classify(layout: TreeLayout, paths: list[str]) -> dict[tuple[str, int], str]:
    """What each notified path concerns, keyed (kind, ledger id), in order of last notification.

    Kinds: "ledger", "mark", "bookies" (any registration change) and "racks"; other nodes
    (directories, locks, cookies) are left out.
    """
    out: dict[tuple[str, int], str] = {}
    marks_root = underreplication_ledgers_path(root=layout.root) + "/"
    available = available_path(root=layout.root)
    for path in paths:
        key: tuple[str, int] | None
        if path == layout.racks_path:
            key = ("racks", 0)
        elif path == available or path.startswith(available + "/"):
            key = ("bookies", 0)
        elif path.startswith(marks_root):
            key = _keyed("mark", path, lambda p: ledger_id_from_underreplication_path(p, root=layout.root))
        else:
            key = _keyed("ledger", path, lambda p: ledger_id_from_path(p, manager=layout.manager, root=layout.root))
        if key is not None:
            out.pop(key, None)
            out[key] = path
    return out


def _keyed(kind: str, path: str, parse: Callable[[str], int]) -> tuple[str, int] | None:
    try:
        return kind, parse(path)
    except (PathError, FormatError):
        return None  # a directory or another node: nothing to publish
