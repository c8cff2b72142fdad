"""The watcher's Prometheus metrics, in a registry of its own (so several watchers can live in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from scrutiny.component_metrics import register_component_metrics
from scrutiny.proto import ledger_events_pb2 as pb

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: A walk of the whole tree: under a second for a small cluster, minutes for millions of ledgers
#: (bench/README.md, "Watcher").
_RESYNC_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0)
#: The values of ``scrutiny_watcher_errors_total{where}``: a fixed set, whatever the error.
ERROR_PLACES = ("zookeeper", "kafka", "leadership", "other")


class WatcherMetrics:
    """Events by kind, publish latency, resyncs, leadership, ZooKeeper session state and lag."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events = Counter("scrutiny_watcher_events", "Events published, by kind", ["kind"], registry=r)
        self._by_kind: dict[int, Counter] = {}
        self.publish_latency = Histogram(
            "scrutiny_watcher_publish_latency_seconds",
            "From handing an event to the producer to its acknowledgement",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.change_lag = Histogram(
            "scrutiny_watcher_change_lag_seconds",
            "From a live change's ZooKeeper mtime to its event being handed to the producer",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.resyncs = Counter("scrutiny_watcher_resyncs", "Walks of the whole tree", ["origin"], registry=r)
        self.resync_duration = Histogram(
            "scrutiny_watcher_resync_duration_seconds",
            "Duration of a walk and its publication",
            buckets=_RESYNC_BUCKETS,
            registry=r,
        )
        self.leader = Gauge("scrutiny_watcher_leader", "1 while this watcher is the active one", registry=r)
        self.session = Gauge(
            "scrutiny_watcher_zookeeper_session", "1 for the current ZooKeeper session state", ["state"], registry=r
        )
        self.held_back = Gauge(
            "scrutiny_watcher_held_back",
            "What waits while Kafka does not take or acknowledge events: events unacknowledged, nodes to read again",
            ["what"],
            registry=r,
        )
        self.bookie_events = Counter(
            "scrutiny_watcher_bookie_events",
            "Bookies lost, back after a loss or with a new cookie (their ledgers checked again), by kind",
            ["kind"],
            registry=r,
        )
        self.errors = Counter(
            "scrutiny_watcher_errors",
            "Errors retried, by where: " + ", ".join(ERROR_PLACES),
            ["where"],
            registry=r,
        )
        for place in ERROR_PLACES:
            self.errors.labels(place)
        self.last_event = Gauge(
            "scrutiny_watcher_last_event_timestamp_seconds", "When the last event was published", registry=r
        )
        register_component_metrics(r)

    def published(self, kind: int) -> None:
        """Count one published event."""
        counter = self._by_kind.get(kind)
        if counter is None:  # one child per kind, looked up once (a snapshot counts one event per ledger)
            counter = self._by_kind[kind] = self.events.labels(pb.EventKind.Name(kind))
        counter.inc()

    def session_state(self, state: str) -> None:
        """Record the ZooKeeper session's state (CONNECTED, SUSPENDED, LOST)."""
        for name in ("CONNECTED", "SUSPENDED", "LOST"):
            self.session.labels(name).set(1 if name == state else 0)

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        """Expose the metrics over HTTP on ``address:port``."""
        start_http_server(port, addr=address, registry=self.registry)
