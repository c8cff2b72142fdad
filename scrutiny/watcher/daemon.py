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
   (origin LIVE), and sends a TICK to every partition every ``tick_interval_s``;
4. follows every bookie's registration and cookie: a bookie lost, back after a loss, formatted again or restarted
   has its ledgers searched for (in slices, between the other work) and published as LEDGER_RECHECK events, a
   bookie lost a BOOKIE_LOST event too;
5. judges BookKeeper's own auto-recovery (the ``disable`` node, the auditor's election:
   :mod:`scrutiny.core.autorecovery_health`) and publishes an AUTORECOVERY_HEALTH event whenever that judgement
   changes and after every walk.

It stops publishing as soon as its ZooKeeper connection is suspended (it may be losing its
leadership), also while it waits for Kafka, adds the watches again and resyncs on every reconnect,
and goes back to the election when the session is lost. Errors from ZooKeeper or Kafka are logged,
counted and retried with backoff; they never end the process. If Kafka gives up on an event after
the delivery timeout, the whole state is published again as a snapshot.

Nothing is lost on the way: the state the watcher remembers as published (what the next resync
compares with) advances only once Kafka has acknowledged the events of a walk or of a batch of
notifications; a walk or batch interrupted half-way (the session lost while Kafka is down) leaves it
where it was, so the next resync publishes those changes again. While Kafka is down, memory stays
bounded: the producer holds at most ``max_pending`` events, and notifications are kept once per node
(:mod:`scrutiny.watcher.inbox`); ``scrutiny_watcher_held_back`` says how much waits.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypedDict

from kazoo.exceptions import KazooException, LockTimeout
from kazoo.protocol.states import KazooState, KeeperState, WatchedEvent

from scrutiny.connectors.kafka.events import (
    Publisher,
    autorecovery_event,
    bookie_lost_event,
    event_for_change,
    ledger_data,
    marker_event,
    recheck_event,
)
from scrutiny.connectors.kafka.publisher import EventPublisher, PublishError
from scrutiny.connectors.zookeeper.client import start_quietly
from scrutiny.connectors.zookeeper.tree import (
    TreeLayout,
    read_autorecovery,
    read_cluster,
    read_cookies,
    read_nodes,
    read_optional,
    read_registrations,
)
from scrutiny.connectors.zookeeper.watch import PersistentWatchClient
from scrutiny.core.autorecovery_health import AutoRecoveryHealth, AutoRecoveryObservation, AutoRecoveryRules, judge
from scrutiny.core.backoff import Backoff
from scrutiny.core.bookie_lifecycle import LifecycleEvent, LifecycleKind, Statuses, observe
from scrutiny.core.errors import FormatError, PathError, ScrutinyError
from scrutiny.core.metadata_view import KnownState, MetadataChange, Node, node_stat_lag
from scrutiny.core.zk_paths import (
    auditor_election_path,
    available_path,
    cookies_path,
    layout_path,
    ledger_id_from_path,
    ledger_id_from_underreplication_path,
    underreplication_disable_path,
    underreplication_ledgers_path,
)
from scrutiny.core.zk_records import parse_layout
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.watcher.bookie_ledgers import BookieLedgers, LedgerSearch
from scrutiny.watcher.inbox import Inbox
from scrutiny.watcher.metrics import WatcherMetrics
from scrutiny.watcher.redaction_pool import RedactionPool

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
    #: A bookie unregistered this long is lost (BOOKIE_LOST and its ledgers checked again).
    bookie_lost_after_ms: int = 300_000
    #: The graces of AUTORECOVERY_DISABLED and NO_AUDITOR.
    autorecovery: AutoRecoveryRules = AutoRecoveryRules()
    #: Who decodes and redacts the ledgers' metadata of a large walk (worker processes beside the publishing).
    redaction: RedactionPool = RedactionPool()


class _Observed(TypedDict):
    """When the watcher saw what an event says (the events' ``observed_ms`` argument)."""

    observed_ms: int


class LeadershipLost(ScrutinyError):  # noqa: N818 - a state, not a failure
    """The ZooKeeper session ended: the watcher is no longer the active one."""


class ConnectionSuspended(ScrutinyError):  # noqa: N818 - a state, not a failure
    """The ZooKeeper connection is suspended: publish nothing until it is back, then resync."""


_EXPECTED_ERRORS = (KazooException, PublishError, LeadershipLost, OSError, ScrutinyError)


def _error_place(error: Exception) -> str:
    """Where a retried error came from: one of the metric's fixed values (``ERROR_PLACES``)."""
    if isinstance(error, LeadershipLost):
        return "leadership"
    if isinstance(error, KazooException):
        return "zookeeper"
    if isinstance(error, PublishError):
        return "kafka"
    return "other"


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
        self._inbox = Inbox()
        self._session: int | None = None  # the ZooKeeper session the leadership was won in
        self._held_back_logged = 0.0
        self._bookies: Statuses | None = None  # each bookie's life (scrutiny.core.bookie_lifecycle)
        self._cookies: dict[str, int] | None = None  # bookie -> its cookie's mzxid (None: to be read)
        self._searches: deque[tuple[LifecycleEvent, LedgerSearch]] = deque()  # ledgers of bookies to check again
        self._autorecovery: AutoRecoveryObservation | None = None  # None: to be read
        self._no_vote_since_ms: int | None = None  # when this watcher first saw no auditor vote
        self._health_published: AutoRecoveryHealth | None = None  # None: to be published

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
                    self.metrics.errors.labels(_error_place(error)).inc()
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
            client_id = self.zk.client_id
            self._session = client_id[0] if client_id else None
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
        self._inbox.clear()
        self._restart_searches()
        layout = self._checked_layout()
        self._add_watches(layout)
        walk = True
        next_tick = time.monotonic() + self.config.tick_interval_s
        while not stop.is_set():
            publisher = self._publisher_ready()  # a new one after Kafka lost events, even if its walk was cut off
            try:
                if walk:
                    self._resync(layout, publisher)
                    walk = False
                self._bookie_lifecycle(layout)
                self._autorecovery_health(layout, publisher)
                self._search_bookie_ledgers(publisher)
                wait_s = 0.0 if self._searches else max(0.0, min(next_tick - time.monotonic(), 0.5))
                item = self._inbox.take(wait_s, batch=self.config.batch)
                if isinstance(item, list):
                    self._live(layout, publisher, item)
                elif item is not None:
                    self._on_state_item(item)
                    walk = True  # reconnected: changes may have been missed
                    self._add_watches(layout)
                    continue
                if publisher.broken:
                    publisher = self._rebuild_publisher(layout)
                if time.monotonic() >= next_tick:
                    tick = marker_event(pb.EventKind.TICK, pb.Origin.LIVE, self._me(), **self._now())
                    self._publish(publisher, tick)
                    next_tick = time.monotonic() + self.config.tick_interval_s
                self._report_held_back(publisher)
            except ConnectionSuspended:
                log.warning("ZooKeeper connection suspended: publishing paused until it is back")
                self._wait_reconnected(stop)
                self._add_watches(layout)
                walk = True

    def _on_state_item(self, state: str) -> None:
        if state == KazooState.LOST:
            raise LeadershipLost("ZooKeeper session lost")
        if state == KazooState.SUSPENDED:
            raise ConnectionSuspended("ZooKeeper connection suspended")

    def _wait_reconnected(self, stop: threading.Event) -> None:
        """Until the session is back (its notifications stay in the inbox: the resync covers them)."""
        while not stop.is_set():
            state = self._inbox.take_state(0.5)
            if state == KazooState.LOST:
                raise LeadershipLost("ZooKeeper session lost while suspended")
            if state == KazooState.CONNECTED:
                log.info("ZooKeeper connection back: resyncing")
                return

    def _check_leadership(self) -> None:
        """Raise when this watcher must stop publishing now: stopped, session lost, or connection suspended.

        The session is compared with the one the leadership was won in: kazoo may already be connected with a new
        session (CONNECTED again) after a loss, in which the election node, and so the leadership, is gone.
        """
        if self._stop.is_set() or self.zk.state == KazooState.LOST or self._session_changed():
            raise LeadershipLost("stopped, or the ZooKeeper session was lost")
        if self.zk.state == KazooState.SUSPENDED:
            raise ConnectionSuspended("ZooKeeper connection suspended")

    def _session_changed(self) -> bool:
        current = self.zk.client_id
        return self._session is not None and (current is None or current[0] != self._session)

    def _on_state(self, state: str) -> None:
        """kazoo's listener (its own thread): record and hand over, never block."""
        self.metrics.session_state(str(state))
        self._inbox.put_state(state)

    def _on_node(self, event: WatchedEvent) -> None:
        self._inbox.put_path(event.path)

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
        """Walk the tree and publish what differs from the state published; that state becomes the walk's once Kafka
        acknowledged every event (an interruption leaves it as it was: the next walk publishes the changes again)."""
        started = time.monotonic()
        origin = pb.Origin.SNAPSHOT if self.known is None else pb.Origin.RESYNC
        view = read_cluster(self.zk, layout, progress=self._progress)
        self._cookies = None
        self._autorecovery = self._health_published = None  # read and published again after the walk
        known = self.known or KnownState()
        changes = known.changes_to(view)
        me = self._me()
        self._publish(publisher, marker_event(pb.EventKind.SNAPSHOT_BEGIN, origin, me, **self._now()))
        blobs = [data for data in map(ledger_data, changes) if data is not None]
        with contextlib.closing(self.config.redaction.redacted(blobs)) as redactions:
            for change in changes:
                redacted = next(redactions) if ledger_data(change) is not None else None
                self._publish(publisher, event_for_change(change, origin, me, redacted=redacted, **self._now()))
        end = marker_event(pb.EventKind.SNAPSHOT_END, origin, me, **self._now())
        end.snapshot.ledgers = len(view.ledgers)
        end.snapshot.under_replicated = len(view.marks)
        end.snapshot.bookies = len(view.writable) + len(view.readonly)
        end.snapshot.duration_ms = int((time.monotonic() - started) * 1000)
        self._publish(publisher, end)
        self._flush(publisher)
        known.adopt(view)
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

    def _live(self, layout: TreeLayout, publisher: EventPublisher, paths: list[str]) -> None:
        """Read the current state of the notified nodes and publish what is new, in notification order.

        A node notified several times is read once, at the place of its last notification, so its
        event follows those of the other nodes notified before (a ledger's mark cleared, then the
        ledger deleted, stays in that order). The state published keeps the batch's changes only once
        Kafka acknowledged them all: an interrupted batch is undone there, and the next walk sends it again.
        """
        known = self.known
        assert known is not None
        targets = _classify(layout, paths)
        found = read_nodes(self.zk, [path for (kind, _), path in targets.items() if kind in ("ledger", "mark")])
        now = self._now()
        undo = known.savepoint()
        try:
            for (kind, ident), path in targets.items():
                undo.keep(kind, ident)
                for change in self._changes(kind, ident, found.get(path), layout):
                    if change.node is not None and change.kind.value.startswith("LEDGER_"):
                        self.metrics.change_lag.observe(node_stat_lag(change.node, now["observed_ms"]))
                    self._publish(publisher, event_for_change(change, pb.Origin.LIVE, self._me(), **now))
            self._flush(publisher)
        except BaseException:
            undo.restore()
            raise

    def _changes(self, kind: str, ident: int, node: Node | None, layout: TreeLayout) -> list[MetadataChange]:
        assert self.known is not None
        if kind == "ledger":
            change = self.known.ledger(ident, node)
        elif kind == "mark":
            change = self.known.mark(ident, node)
        elif kind == "racks":
            change = self.known.racks(read_optional(self.zk, layout.racks_path))
        elif kind == "cookies":
            self._cookies = None  # read again before the bookies' next observation
            return []
        elif kind == "autorecovery":
            self._autorecovery = None  # read again before the next judgement
            return []
        else:
            return self.known.bookies(*read_registrations(self.zk, layout.root))
        return [change] if change is not None else []

    # ------------------------------------------------------------------ bookies' lives

    def _bookie_lifecycle(self, layout: TreeLayout) -> None:
        """Observe the registrations published and the cookies: each bookie lost, back after a loss or with a new
        cookie starts a search for its ledgers, which :meth:`_search_bookie_ledgers` carries out a slice at a
        time."""
        known = self.known
        if known is None:
            return
        if self._cookies is None:
            self._cookies = read_cookies(self.zk, layout.root)
        view = known.view
        statuses, happened = observe(
            self._bookies,
            view.writable.keys() | view.readonly.keys(),
            self._cookies,
            now_ms=self._now()["observed_ms"],
            lost_after_ms=self.config.bookie_lost_after_ms,
        )
        ids = sorted(view.ledgers) if happened else []  # one sorted list for the searches this observation starts
        self._searches.extend((event, LedgerSearch(ids, event.bookie)) for event in happened)
        self._bookies = statuses

    # ------------------------------------------------------------------ auto-recovery

    def _autorecovery_health(self, layout: TreeLayout, publisher: EventPublisher) -> None:
        """Judge auto-recovery (read again after a notification or a walk) and publish the judgement when it changed."""
        if self.known is None:
            return
        if self._autorecovery is None:
            self._autorecovery = read_autorecovery(self.zk, layout.root)
        now_ms = self._now()["observed_ms"]
        if self._autorecovery.auditor is not None:
            self._no_vote_since_ms = None
        elif self._no_vote_since_ms is None:
            self._no_vote_since_ms = now_ms
        rules = self.config.autorecovery
        health = judge(self._autorecovery, absent_since_ms=self._no_vote_since_ms, now_ms=now_ms, rules=rules)
        if health == self._health_published:
            return
        self._publish(publisher, autorecovery_event(health, pb.Origin.LIVE, self._me(), observed_ms=now_ms))
        self._flush(publisher)
        level = logging.WARNING if health.disabled_since_ms is not None or health.no_auditor else logging.INFO
        log.log(level, "auto-recovery: %s", _health_text(health))
        self._health_published = health

    def _search_bookie_ledgers(self, publisher: EventPublisher) -> None:
        """Search on for the ledgers of the bookies of lifecycle events (for at most ``SEARCH_SLICE_S``): each one
        found gets a LEDGER_RECHECK event; at the end of a search, a bookie lost gets BOOKIE_LOST and the events
        are flushed. A search cut off by a lost leadership or a rebuilt producer starts again from its first
        ledger (:meth:`_restart_searches`): what it found may not have reached Kafka."""
        deadline = time.monotonic() + SEARCH_SLICE_S
        while self._searches and self.known is not None:
            event, search = self._searches[0]
            why, me = _RECHECK_REASON[event.kind], self._me()
            found = search.step(self.known.view.ledgers, SEARCH_STEP)
            writing = found.writing if event.kind in _WRITERS_TOO else []  # may its open ledgers' writers be stuck?
            for ledger_id, node in (*found.ledgers, *writing):
                self._publish(publisher, recheck_event(ledger_id, node, why, event.bookie, me, **self._now()))
            if not search.remaining():
                self._finish_search(publisher, event, search.found)
                self._searches.popleft()
            if time.monotonic() >= deadline:
                return

    def _finish_search(self, publisher: EventPublisher, event: LifecycleEvent, held: BookieLedgers) -> None:
        if event.kind is LifecycleKind.LOST:
            if not held.ledgers and self._cookies is not None and event.bookie not in self._cookies:
                log.info("bookie %s is gone with its cookie and holds no ledger: decommissioned", event.bookie)
                return
            assert event.unregistered_ms is not None
            lost = bookie_lost_event(
                event.bookie,
                unregistered_ms=event.unregistered_ms,
                ledgers=len(held.ledgers),
                entries=held.entries,
                publisher=self._me(),
                **self._now(),
            )
            self._publish(publisher, lost)
        self._flush(publisher)
        level = logging.INFO if event.kind is LifecycleKind.RESTARTED else logging.WARNING
        log.log(level, "bookie %s %s: %d ledger(s) to check again", event.bookie, _SAID[event.kind], len(held.ledgers))
        self.metrics.bookie_events.labels(event.kind.value).inc()

    def _restart_searches(self) -> None:
        for _, search in self._searches:
            search.restart()

    # ------------------------------------------------------------------ publishing

    def _publish(self, publisher: EventPublisher, event: pb.LedgerEvent) -> None:
        """Hand one event to Kafka, retrying with backoff while Kafka does not take it (nothing is dropped).

        Never while the connection is suspended or the session lost, however long Kafka makes it wait.
        """
        attempt = 0
        while True:
            self._check_leadership()
            try:
                publisher.publish(event)
                break
            except PublishError as error:
                self.metrics.errors.labels("kafka").inc()
                if publisher.broken:  # no retry can succeed: the leadership ends and the next one has a new producer
                    raise
                self._report_held_back(publisher, f"Kafka does not take events ({error})")
                self._stop.wait(self.config.backoff.delay(attempt, random.random()))
                attempt += 1
        self.metrics.published(event.kind)
        self.metrics.last_event.set(self._clock())

    def _flush(self, publisher: EventPublisher) -> None:
        """Wait until Kafka acknowledged every event sent, checking the leadership between short waits."""
        while True:
            self._check_leadership()
            try:
                publisher.flush(timeout_s=FLUSH_WAIT_S)
                return
            except PublishError:
                if publisher.broken:
                    raise
                self._report_held_back(publisher, "Kafka has not acknowledged every event yet")

    def _report_held_back(self, publisher: EventPublisher, why: str = "") -> None:
        """Set the held-back gauges; with ``why``, log them (at most every few seconds)."""
        events, nodes = publisher.unacknowledged, self._inbox.waiting_paths()
        self.metrics.held_back.labels("events").set(events)
        self.metrics.held_back.labels("notifications").set(nodes)
        if why and time.monotonic() - self._held_back_logged >= HELD_BACK_LOG_S:
            self._held_back_logged = time.monotonic()
            log.warning("%s; held back: %d event(s) unacknowledged, %d node(s) to read again", why, events, nodes)

    def _publisher_ready(self) -> EventPublisher:
        """The publisher; a new one in place of a broken one, and then the whole state is to be published again."""
        if self._publisher is not None and self._publisher.broken:
            self._discard_publisher()
        if self._publisher is None:
            self._publisher = self._publisher_factory()
        return self._publisher

    def _discard_publisher(self) -> None:
        assert self._publisher is not None
        log.error("events were lost in Kafka (%s): republishing the whole state", self._publisher.broken)
        self._publisher.close()
        self._publisher = None
        self.known = None
        self._restart_searches()

    def _rebuild_publisher(self, layout: TreeLayout) -> EventPublisher:
        """After Kafka gave up on an event: a new producer, and the whole state as a snapshot again."""
        publisher = self._publisher_ready()
        self._resync(layout, publisher)
        return publisher

    def _me(self) -> Publisher:
        return Publisher(self.config.watcher_id, self.epoch, self.config.layout.root)

    def _now(self) -> _Observed:
        return {"observed_ms": int(self._clock() * 1000)}


#: How each bookie event reads in the log, and the reason its ledgers' LEDGER_RECHECK events carry.
_SAID = {
    LifecycleKind.LOST: "is lost",
    LifecycleKind.RETURNED: "registered again after it was lost",
    LifecycleKind.COOKIE_CHANGED: "has a new cookie (formatted again)",
    LifecycleKind.RESTARTED: "registered again after an absence",
}
_RECHECK_REASON = {
    LifecycleKind.LOST: pb.RecheckReason.BOOKIE_LOST_RECHECK,
    LifecycleKind.RETURNED: pb.RecheckReason.BOOKIE_RETURNED,
    LifecycleKind.COOKIE_CHANGED: pb.RecheckReason.COOKIE_CHANGED,
    LifecycleKind.RESTARTED: pb.RecheckReason.BOOKIE_RESTARTED,
}

#: The events whose bookie's open ledgers being written to it are checked again too (OPEN_LEDGER_STALLED).
_WRITERS_TOO = frozenset({LifecycleKind.LOST, LifecycleKind.RETURNED})

#: How long one wait for Kafka's acknowledgements lasts before the leadership is checked again.
FLUSH_WAIT_S = 0.5
#: The longest one pass of the loop searches a bookie's ledgers before it serves notifications and ticks again.
SEARCH_SLICE_S = 0.2
#: Ledgers searched between two looks at the clock (a few milliseconds' work).
SEARCH_STEP = 2000
#: How often, at most, the watcher logs what it holds back while Kafka does not take or acknowledge events.
HELD_BACK_LOG_S = 10.0


def _health_text(health: AutoRecoveryHealth) -> str:
    """The judgement in the log's words."""
    disabled = "enabled" if health.disabled_since_ms is None else "DISABLED"
    if health.disabled_critical:
        disabled += " past its grace"
    auditor = f"auditor {health.auditor or '(unnamed)'}" if health.auditor is not None else "no auditor elected"
    return f"{disabled}, {auditor}{' past its grace' if health.no_auditor else ''}"


def _lock_sequence(node: str | None) -> int:
    """The sequence number ZooKeeper gave the election node: the leadership epoch."""
    match = re.search(r"(\d+)$", node or "")
    return int(match.group(1)) if match else 0


def _classify(layout: TreeLayout, paths: list[str]) -> dict[tuple[str, int], str]:
    """What each notified path concerns, keyed (kind, ledger id), in order of last notification.

    Kinds: "ledger", "mark", "bookies" (any registration change), "cookies" (any cookie change), "racks" and
    "autorecovery" (the ``disable`` node, the auditor's votes); other nodes (directories, locks) are left out.
    """
    out: dict[tuple[str, int], str] = {}
    marks_root = underreplication_ledgers_path(root=layout.root) + "/"
    available = available_path(root=layout.root)
    cookies = cookies_path(root=layout.root)
    disable, election = underreplication_disable_path(root=layout.root), auditor_election_path(root=layout.root)
    for path in paths:
        key: tuple[str, int] | None
        if path == layout.racks_path:
            key = ("racks", 0)
        elif path == available or path.startswith(available + "/"):
            key = ("bookies", 0)
        elif path == cookies or path.startswith(cookies + "/"):
            key = ("cookies", 0)
        elif path in (disable, election) or path.startswith(election + "/"):
            key = ("autorecovery", 0)
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
