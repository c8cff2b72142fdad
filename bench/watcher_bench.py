"""The watcher against a real ZooKeeper and Apache Kafka: snapshot walk speed and live change latency.

Run from the repository root::

    .venv/bin/python -m bench.watcher_bench                    # 100k ledgers (~45 s here)
    .venv/bin/python -m bench.watcher_bench --quick            # 20k ledgers, short live phase (~15 s)
    .venv/bin/python -m bench.watcher_bench --ledgers 1000000  # the 1M-ledger walk (see bench/README.md)
    .venv/bin/python -m bench.watcher_bench --snapshot-workers 0  # the snapshot's redaction in the watcher's thread

It starts its own ZooKeeper and Kafka broker (:mod:`scrutiny.services.servers`) in a temporary
directory and always stops them at the end, on error, on Ctrl-C and on SIGTERM. Then, in one run:

1. **tree**: N ledgers of BookKeeper's real v3 metadata bytes (OPEN, E=3/WQ=2/AQ=2, a Pulsar
   managed-ledger property) at their real hierarchical paths under ``/ledgers``, written pipelined
   (one multi request per 500 creates: one ``create_async`` per ledger is ~15x slower, and is
   timed on the subset below), the 2-level directories first;
2. **walk**: :func:`scrutiny.connectors.zookeeper.tree.read_cluster` on that tree (ledgers/s), with the
   CPU seconds this process and ZooKeeper spent;
3. **window**: ``read_nodes`` on a smaller tree (10k ledgers; ``--quick``: 2k) with 1, 2 and 8
   multiRead requests in flight, against one get_async per node, in the same run;
4. **snapshot**: a :class:`~scrutiny.watcher.daemon.Watcher` with an
   :class:`~scrutiny.connectors.kafka.publisher.EventPublisher` on the broker, from its start
   until SNAPSHOT_END is published and flushed (ledgers/s end to end, and its phases);
5. **live**: with that watcher running, ledger closes at a sustained rate (200/s for 10 s;
   ``--quick``: 100/s for 3 s), each a ``set`` of the ledger's CLOSED metadata; for each, the time
   from the ``set`` returning to the LEDGER_CHANGED event with the same mzxid being returned by a
   consumer's fetch (a KafkaConsumer in a process of its own, assigned to every partition,
   placed at each partition's end offset). The total is split at the moment the watcher hands the event to its producer
   (and the producer's acks are shown). Before it, the broker's own floor: records produced to a
   small topic of their own, then fetched, by the same broker and consumer.

Prints a table (progress notes go to stderr). Figures are printed, never asserted: exit 0.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import math
import multiprocessing
import os
import platform
import queue
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.context import SpawnProcess
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path
from types import FrameType
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kazoo.client import KazooClient

from scrutiny.connectors.kafka.publisher import EventPublisher, TopicConfig
from scrutiny.connectors.zookeeper.tree import (
    DEFAULT_WINDOW,
    MULTI_READ_BATCH,
    MULTI_READ_WINDOW,
    TreeLayout,
    pipelined,
    read_cluster,
    read_nodes,
)
from scrutiny.connectors.zookeeper.watch import PersistentWatchClient
from scrutiny.core.ledger_metadata import LedgerState, Segment, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.zk_paths import layout_path, ledger_path
from scrutiny.core.zk_records import format_layout, parse_layout
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.services.servers import RunningServer, start_kafka, start_zookeeper
from scrutiny.watcher.daemon import Watcher, WatcherConfig
from scrutiny.watcher.redaction_pool import RedactionPool

ROOT = "/ledgers"
SUBSET_ROOT = "/window-subset"
TOPIC = "scrutiny.ledger-events"
PROBE_TOPIC = "scrutiny.bench-probe"
PARTITIONS = 8
WINDOWS = (1, 2, MULTI_READ_WINDOW)
#: How long the consumer's fetch may wait at the broker before it answers with nothing.
FETCH_WAIT_MS = 5
PROBES = 200
PROBE_RATE = 100.0
TEMPLATES = 64
BOOKIES = tuple(f"bookie-{index}.bk.svc:3181" for index in range(12))
HIERARCHICAL_LAYOUT = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
LIVE_GRACE_S = 15.0
#: Bulk writing: creates per multi request, and multi requests in flight.
WRITE_BATCH = 500
WRITE_WINDOW = 8


@dataclass(frozen=True, slots=True)
class Plan:
    """What one run does."""

    ledgers: int
    subset: int
    rate: float
    seconds: float
    #: Worker processes redacting the snapshot's metadata (watcher.snapshot_workers; 0: the watcher's thread).
    snapshot_workers: int = 1


FULL = Plan(ledgers=100_000, subset=10_000, rate=200.0, seconds=10.0)
QUICK = Plan(ledgers=20_000, subset=2_000, rate=100.0, seconds=3.0)


@dataclass
class Results:
    """Every figure of the run, filled phase by phase."""

    plan: Plan
    write_s: float = 0.0
    subset_write_s: float = 0.0
    walk: Walk | None = None
    windows: dict[int, float] = field(default_factory=dict)
    ceiling_s: float = 0.0
    snapshot: SnapshotTimes | None = None
    floor_ms: list[float] = field(default_factory=list)
    live: LiveFigures | None = None
    total_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Walk:
    """One timed read_cluster: wall time, ledgers found, CPU seconds of this process and of ZooKeeper."""

    seconds: float
    ledgers: int
    client_cpu_s: float
    server_cpu_s: float


@dataclass(frozen=True, slots=True)
class SnapshotTimes:
    """The watcher's first snapshot, in seconds from the watcher's start (thread started)."""

    ledgers: int
    resync_s: float
    read_s: float
    begin_s: float
    flushed_s: float
    events: int


@dataclass(frozen=True, slots=True)
class LiveFigures:
    """The live phase: latencies (ms) of the closes whose event was read back, and the achieved rate."""

    requested: int
    latencies_ms: list[float]
    set_ms: list[float]
    achieved_rate: float
    missing: int
    grace_s: float
    diagnosis: str
    #: set returned -> the watcher handed the event to the producer (may be < 0: the notification can beat the reply).
    handed_ms: list[float]
    #: handed to the producer -> fetched by the consumer.
    onwards_ms: list[float]
    #: handed to the producer -> the broker's acknowledgement (the live LEDGER_CHANGED events).
    ack_ms: list[float]


# --------------------------------------------------------------------------- metadata and the tree


def metadata_templates(state: LedgerState) -> list[bytes]:
    """Real v3 metadata blobs, E=3/WQ=2/AQ=2, ensembles varying over 12 bookies."""
    out: list[bytes] = []
    for index in range(TEMPLATES):
        ensemble = tuple(BOOKIES[(index + k * 5) % len(BOOKIES)] for k in range(3))
        closed = state is LedgerState.CLOSED
        metadata = build_ledger_metadata(
            ensemble_size=3,
            write_quorum=2,
            ack_quorum=2,
            segments=[Segment(0, ensemble)],
            state=state,
            last_entry_id=999 if closed else -1,
            length=1_024_000 if closed else 0,
            ctime=1_790_000_000_000 + index,
            custom_metadata={
                "application": b"pulsar",
                "component": b"managed-ledger",
                "pulsar/managed-ledger": f"public/default/persistent/topic-{index}".encode(),
            },
        )
        out.append(encode_ledger_metadata_v3(metadata))
    return out


def _leaves(client: KazooClient, root: str, ledger_ids: range) -> list[tuple[int, str]]:
    """(id, path) of every ledger node to create, after creating their directories (two levels)."""
    paths = [(ledger_id, ledger_path(ledger_id, root=root)) for ledger_id in ledger_ids]
    for directory in sorted({path.rsplit("/", 1)[0] for _, path in paths}):
        client.ensure_path(directory)
    return paths


def _write_one_by_one(client: KazooClient, root: str, ledger_ids: range, blobs: Sequence[bytes]) -> float:
    """One pipelined ``create_async`` per ledger (window DEFAULT_WINDOW); seconds taken by the leaves."""
    paths = _leaves(client, root, ledger_ids)
    started = time.perf_counter()
    calls = ((i, partial(client.create_async, path, blobs[i % len(blobs)])) for i, path in paths)
    created = pipelined(client, calls)
    return _checked(time.perf_counter() - started, len(created), len(paths), root)


def write_tree(client: KazooClient, root: str, ledger_ids: range, blobs: Sequence[bytes]) -> float:
    """Pipelined multi requests of WRITE_BATCH creates each (window WRITE_WINDOW); seconds taken by the leaves."""
    paths = _leaves(client, root, ledger_ids)
    batches = [paths[start : start + WRITE_BATCH] for start in range(0, len(paths), WRITE_BATCH)]

    def commit(batch: list[tuple[int, str]]) -> Any:
        transaction = client.transaction()
        for ledger_id, path in batch:
            transaction.create(path, blobs[ledger_id % len(blobs)])
        return transaction.commit_async()

    started = time.perf_counter()
    done = pipelined(client, ((i, partial(commit, batch)) for i, batch in enumerate(batches)), window=WRITE_WINDOW)
    created = sum(1 for _, results in done for result in results if isinstance(result, str))
    return _checked(time.perf_counter() - started, created, len(paths), root)


def _checked(seconds: float, created: int, wanted: int, root: str) -> float:
    if created != wanted:
        raise SystemExit(f"only {created} of {wanted} ledger nodes were created under {root}")
    return seconds


def _time_walk(client: KazooClient, root: str, server_pid: int) -> Walk:
    """read_cluster on the tree under ``root``, timed, with the CPU both sides spent."""
    client_cpu, server_cpu = time.process_time(), _cpu_seconds(server_pid)
    started = time.perf_counter()
    view = read_cluster(client, TreeLayout(root=root))
    seconds = time.perf_counter() - started
    return Walk(seconds, len(view.ledgers), time.process_time() - client_cpu, _cpu_seconds(server_pid) - server_cpu)


def _all_in_flight(client: KazooClient, root: str, count: int) -> float:
    """Seconds for ``count`` get_async calls started at once, then waited for: kazoo's own ceiling."""
    paths = [ledger_path(ledger_id, root=root) for ledger_id in range(1, count + 1)]
    started = time.perf_counter()
    pending = [client.get_async(path) for path in paths]
    for result in pending:
        result.get(timeout=120)
    return time.perf_counter() - started


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- the watcher's snapshot


@dataclass
class Stages:
    """What the watcher's publisher saw: snapshot marks (perf_counter), live events handed over, acks."""

    marks: dict[str, float] = field(default_factory=dict)
    #: (ledger id, mzxid) -> time.monotonic() when the live LEDGER_CHANGED was handed to the producer.
    published: dict[tuple[int, int], float] = field(default_factory=dict)
    #: ms from handing a LEDGER_CHANGED to the producer to the broker's acknowledgement.
    acks_ms: list[float] = field(default_factory=list)

    def acked(self, kind: int, seconds: float) -> None:
        """The publisher's acknowledgement observer (runs on the producer's thread)."""
        if kind == pb.EventKind.LEDGER_CHANGED:
            self.acks_ms.append(seconds * 1000)


class _TimedPublisher(EventPublisher):
    """An EventPublisher noting the snapshot's first marker, each flush's end and each live change handed over."""

    def __init__(self, *args: Any, stages: Stages, **kwargs: Any) -> None:
        super().__init__(*args, on_ack=stages.acked, **kwargs)
        self._stages = stages

    def publish(self, event: pb.LedgerEvent) -> None:
        if event.kind == pb.EventKind.SNAPSHOT_BEGIN:
            self._stages.marks.setdefault("begin", time.perf_counter())
        elif event.kind == pb.EventKind.LEDGER_CHANGED and event.origin == pb.Origin.LIVE:
            self._stages.published.setdefault((event.ledger_id, event.stat.mzxid), time.monotonic())
        super().publish(event)

    def flush(self, timeout_s: float | None = None) -> None:
        super().flush(timeout_s)
        self._stages.marks["flushed"] = time.perf_counter()


@dataclass
class RunningWatcher:
    """The watcher under test, its thread and its stop switch."""

    watcher: Watcher
    thread: threading.Thread
    stop: threading.Event
    client: PersistentWatchClient

    def close(self) -> None:
        """Stop the watcher and close its client (called whatever happened)."""
        self.stop.set()
        self.thread.join(timeout=30)
        with contextlib.suppress(Exception):
            self.client.stop()
            self.client.close()


def _start_watcher(zookeeper: str, kafka: str, stages: Stages, workers: int) -> RunningWatcher:
    client = PersistentWatchClient(hosts=zookeeper, timeout=15.0)
    options = {"bootstrap_servers": [kafka], "client_id": "scrutiny-bench-watcher"}
    marks = stages.marks

    def progress(phase: str, count: int) -> None:
        marks[phase] = time.perf_counter()  # phases report more than once: the last report ends the phase

    watcher = Watcher(
        client,
        lambda: _TimedPublisher(options, TopicConfig(TOPIC, partitions=PARTITIONS), stages=stages),
        WatcherConfig(layout=TreeLayout(root=ROOT), watcher_id="bench", redaction=RedactionPool(workers)),
        progress=progress,
    )
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), name="watcher", daemon=True)
    marks["start"] = time.perf_counter()
    thread.start()
    return RunningWatcher(watcher, thread, stop, client)


def _wait_snapshot(running: RunningWatcher, stages: Stages, ledgers: int) -> SnapshotTimes:
    marks = stages.marks
    deadline = time.monotonic() + max(120.0, ledgers / 1000)
    registry = running.watcher.metrics.registry
    while running.watcher.known is None:
        if time.monotonic() > deadline or not running.thread.is_alive():
            raise SystemExit("the watcher did not publish its snapshot in time")
        time.sleep(0.01)
    start = marks["start"]
    events = registry.get_sample_value("scrutiny_watcher_events_total", {"kind": "LEDGER_CREATED"}) or 0.0
    return SnapshotTimes(
        ledgers=ledgers,
        resync_s=registry.get_sample_value("scrutiny_watcher_resync_duration_seconds_sum") or 0.0,
        read_s=marks["ledgers read"] - start,
        begin_s=marks["begin"] - start,
        flushed_s=marks["flushed"] - start,
        events=int(events),
    )


# --------------------------------------------------------------------------- the consumer (child process)


def _consume(kafka: str, topics: list[str], out: Any, ready: ProcessEvent, stop: ProcessEvent) -> None:
    """Child process: from each partition's high watermark on, report every probe and live LEDGER_CHANGED.

    Puts lists of ("probe", index, 0, seen) and ("live", ledger id, mzxid, seen) on ``out``, where
    ``seen`` is ``time.monotonic()`` when the fetch returned them (CLOCK_MONOTONIC: comparable
    across processes).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops this process
    consumer = KafkaConsumer(
        bootstrap_servers=[kafka],
        client_id="scrutiny-bench-consumer",
        enable_auto_commit=False,
        fetch_max_wait_ms=FETCH_WAIT_MS,
    )
    try:
        partitions = [TopicPartition(t, p) for t in topics for p in sorted(consumer.partitions_for_topic(t) or ())]
        consumer.assign(partitions)
        _start_at_end(consumer, partitions)
        ready.set()
        while not stop.is_set():
            batch = consumer.poll(timeout_ms=100)
            seen = time.monotonic()
            found = [_item(tp, r, seen) for tp, records in batch.items() for r in records]
            if found:
                out.put(found)
    finally:
        consumer.close()


def _start_at_end(consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
    """Continue from every partition's end offset: only what is produced from now on is read."""
    for tp, end in consumer.end_offsets(partitions).items():
        consumer.seek(tp, end)


def _item(tp: TopicPartition, record: Any, seen: float) -> tuple[str, int, int, float]:
    """A probe, a live LEDGER_CHANGED, or any other event (named "KIND/ORIGIN", counted only)."""
    if tp.topic == PROBE_TOPIC:
        return ("probe", int(record.value), 0, seen)
    event = pb.LedgerEvent.FromString(record.value)
    if event.kind == pb.EventKind.LEDGER_CHANGED and event.origin == pb.Origin.LIVE:
        return ("live", event.ledger_id, event.stat.mzxid, seen)
    return (f"{pb.EventKind.Name(event.kind)}/{pb.Origin.Name(event.origin)}", 0, 0, seen)


@dataclass
class ConsumerProcess:
    """The consumer child and what it reported so far."""

    process: SpawnProcess
    out: Any
    ready: ProcessEvent
    stop: ProcessEvent
    seen: dict[tuple[str, int, int], float] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)

    def drain(self, wait_s: float = 0.0) -> None:
        """Collect what the consumer reported (waiting up to ``wait_s`` for the first batch)."""
        timeout: float | None = wait_s
        while True:
            try:
                items = self.out.get(timeout=timeout) if timeout else self.out.get_nowait()
            except queue.Empty:
                return
            timeout = None
            for kind, ident, mzxid, seen in items:
                self.counts[kind] += 1
                if kind in ("probe", "live"):
                    self.seen.setdefault((kind, ident, mzxid), seen)

    def wait_for(self, keys: set[tuple[str, int, int]], timeout_s: float) -> None:
        """Collect until every key was seen or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        while not keys <= self.seen.keys() and time.monotonic() < deadline:
            self.drain(wait_s=0.1)

    def close(self) -> None:
        """Stop the child (asked first, then terminated by its pid if it does not end)."""
        self.stop.set()
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=5)


def _start_consumer(kafka: str) -> ConsumerProcess:
    context = multiprocessing.get_context("spawn")
    out: Any = context.Queue()
    ready, stop = context.Event(), context.Event()
    process = context.Process(
        target=_consume, args=(kafka, [TOPIC, PROBE_TOPIC], out, ready, stop), name="bench-consumer", daemon=True
    )
    process.start()
    consumer = ConsumerProcess(process, out, ready, stop)
    if not ready.wait(90):
        consumer.close()
        raise SystemExit("the consumer did not reach the topics' ends within 90 s")
    return consumer


# --------------------------------------------------------------------------- the live phase


def _paced(count: int, rate: float) -> Iterator[int]:
    """Yields 0..count-1, each at its slot of a fixed schedule (late slots are not skipped: it catches up)."""
    started = time.monotonic()
    for index in range(count):
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield index


def _probe_floor(kafka: str, consumer: ConsumerProcess) -> list[float]:
    """Produce PROBES records (acks=all) at PROBE_RATE; ms from each send to the fetch that returned it."""
    producer = KafkaProducer(bootstrap_servers=[kafka], client_id="scrutiny-bench-probe", acks="all", linger_ms=0)
    sent: dict[int, float] = {}
    try:
        for index in _paced(PROBES, PROBE_RATE):
            sent[index] = time.monotonic()
            producer.send(PROBE_TOPIC, str(index).encode(), partition=0)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    keys = {("probe", index, 0) for index in sent}
    consumer.wait_for(keys, LIVE_GRACE_S)
    return sorted((consumer.seen[key] - sent[key[1]]) * 1000 for key in keys if key in consumer.seen)


def _live_closes(
    client: KazooClient,
    plan: Plan,
    consumer: ConsumerProcess,
    closed: Sequence[bytes],
    *,
    watcher: Watcher,
    stages: Stages,
) -> LiveFigures:
    count = min(int(plan.rate * plan.seconds), plan.ledgers)
    stride = max(1, plan.ledgers // max(count, 1))
    targets = [1 + index * stride for index in range(count)]
    returned: dict[tuple[str, int, int], float] = {}
    set_ms: list[float] = []
    first = time.monotonic()
    for index in _paced(count, plan.rate):
        ledger_id = targets[index]
        before = time.monotonic()
        stat = client.set(ledger_path(ledger_id, root=ROOT), closed[ledger_id % len(closed)])
        after = time.monotonic()
        returned[("live", ledger_id, stat.mzxid)] = after
        set_ms.append((after - before) * 1000)
        if index % 100 == 0:
            consumer.drain()
    achieved = count / (time.monotonic() - first) if count else 0.0
    grace = LIVE_GRACE_S + plan.ledgers / 50_000
    consumer.wait_for(set(returned), grace)
    latencies = sorted((consumer.seen[key] - at) * 1000 for key, at in returned.items() if key in consumer.seen)
    handed: list[float] = []
    onwards: list[float] = []
    for key, at in returned.items():
        published = stages.published.get(key[1:])
        if published is not None:
            handed.append((published - at) * 1000)
            if key in consumer.seen:
                onwards.append((consumer.seen[key] - published) * 1000)
    acks = sorted(stages.acks_ms)  # only live events are LEDGER_CHANGED here
    return LiveFigures(
        requested=count,
        latencies_ms=latencies,
        set_ms=sorted(set_ms),
        achieved_rate=achieved,
        missing=count - len(latencies),
        grace_s=grace,
        diagnosis=_diagnosis(watcher, consumer),
        handed_ms=sorted(handed),
        onwards_ms=sorted(onwards),
        ack_ms=acks,
    )


def _diagnosis(watcher: Watcher, consumer: ConsumerProcess) -> str:
    """Where live events went: what the watcher counted, and what the consumer fetched since it started."""
    registry = watcher.metrics.registry

    def sample(name: str, labels: dict[str, str]) -> int:
        return int(registry.get_sample_value(name, labels) or 0)

    published = {kind: sample("scrutiny_watcher_events_total", {"kind": kind}) for kind in ("LEDGER_CHANGED", "TICK")}
    resyncs = {o: sample("scrutiny_watcher_resyncs_total", {"origin": o}) for o in ("SNAPSHOT", "RESYNC")}
    fetched = ", ".join(f"{kind} {n:,}" for kind, n in sorted(consumer.counts.items()) if kind != "probe")
    return (
        f"watcher published LEDGER_CHANGED {published['LEDGER_CHANGED']:,}, TICK {published['TICK']:,}; resyncs "
        f"{resyncs}; leading {watcher.leading.is_set()}; consumer fetched: {fetched or 'nothing'}"
    )


# --------------------------------------------------------------------------- the run


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _run(plan: Plan, zookeeper: RunningServer, kafka: RunningServer, results: Results) -> None:
    client = KazooClient(hosts=zookeeper.address, timeout=30.0)
    client.start(timeout=30)
    running: RunningWatcher | None = None
    consumer: ConsumerProcess | None = None
    try:
        client.create(layout_path(root=ROOT), format_layout(parse_layout(HIERARCHICAL_LAYOUT)), makepath=True)
        opened, closed = metadata_templates(LedgerState.OPEN), metadata_templates(LedgerState.CLOSED)
        _stderr(f"writing {plan.ledgers:,} ledgers under {ROOT} ...")
        results.write_s = write_tree(client, ROOT, range(1, plan.ledgers + 1), opened)
        _stderr(f"  {results.write_s:.1f} s; writing {plan.subset:,} ledgers under {SUBSET_ROOT} one by one ...")
        results.subset_write_s = _write_one_by_one(client, SUBSET_ROOT, range(1, plan.subset + 1), opened)
        _stderr(f"  {results.subset_write_s:.1f} s; walking {ROOT} with read_cluster ...")
        results.walk = _time_walk(client, ROOT, zookeeper.pid)
        _stderr(f"  {results.walk.ledgers:,} ledgers in {results.walk.seconds:.2f} s")
        subset_paths = [ledger_path(ledger_id, root=SUBSET_ROOT) for ledger_id in range(1, plan.subset + 1)]
        for window in WINDOWS:
            started = time.perf_counter()
            read = len(read_nodes(client, subset_paths, window=window))
            results.windows[window] = _checked(time.perf_counter() - started, read, plan.subset, SUBSET_ROOT)
            _stderr(f"  multiRead window {window}: {plan.subset:,} ledgers in {results.windows[window]:.2f} s")
        results.ceiling_s = _all_in_flight(client, SUBSET_ROOT, plan.subset)
        _stderr("starting the watcher: snapshot to Kafka ...")
        stages = Stages()
        running = _start_watcher(zookeeper.address, kafka.address, stages, plan.snapshot_workers)
        results.snapshot = _wait_snapshot(running, stages, plan.ledgers)
        _stderr(f"  published and flushed {results.snapshot.flushed_s:.1f} s after the watcher started")
        consumer = _start_consumer(kafka.address)
        _stderr(f"broker floor: {PROBES} records at {PROBE_RATE:.0f}/s ...")
        results.floor_ms = _probe_floor(kafka.address, consumer)
        _stderr(f"live: {plan.rate:.0f} closes/s for {plan.seconds:.0f} s ...")
        results.live = _live_closes(client, plan, consumer, closed, watcher=running.watcher, stages=stages)
    finally:
        if consumer is not None:
            consumer.close()
        if running is not None:
            running.close()
        client.stop()
        client.close()


def _make_probe_topic(kafka: RunningServer) -> None:
    admin = KafkaAdminClient(bootstrap_servers=[kafka.address], client_id="scrutiny-bench-admin")
    try:
        admin.create_topics([NewTopic(PROBE_TOPIC, 1, 1)])
    finally:
        admin.close()


# --------------------------------------------------------------------------- report


def _percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted ``values`` (NaN when empty)."""
    if not values:
        return math.nan
    return values[max(0, math.ceil(fraction * len(values)) - 1)]


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}" if seconds > 0 else "n/a"


def _latency_row(name: str, values: Sequence[float], extra: str) -> str:
    p50, p99 = _percentile(values, 0.5), _percentile(values, 0.99)
    top = values[-1] if values else math.nan
    return f"| {name} | {len(values):,} | {p50:.1f} | {p99:.1f} | {top:.1f} | {extra} |"


def report(results: Results) -> str:
    """The run's figures as markdown tables."""
    return "\n".join([*_walk_table(results), "", *_window_table(results), "", *_live_table(results)])


def _walk_table(results: Results) -> list[str]:
    plan = results.plan
    lines = [
        "### Snapshot walk",
        "",
        "| what | ledgers | seconds | ledgers/s |",
        "|------|--------:|--------:|----------:|",
        f"| write the tree: multi requests of {WRITE_BATCH} creates, {WRITE_WINDOW} in flight | {plan.ledgers:,} "
        f"| {results.write_s:.2f} | {_rate(plan.ledgers, results.write_s)} |",
        f"| write the subset: one create_async per ledger (window {DEFAULT_WINDOW}) | {plan.subset:,} "
        f"| {results.subset_write_s:.2f} | {_rate(plan.subset, results.subset_write_s)} |",
    ]
    walk = results.walk
    if walk is not None:
        lines.append(
            f"| **read_cluster** (multiRead of {MULTI_READ_BATCH}, {MULTI_READ_WINDOW} in flight) "
            f"| {walk.ledgers:,} | {walk.seconds:.2f} "
            f"| **{_rate(walk.ledgers, walk.seconds)}** |"
        )
    snap = results.snapshot
    if snap is not None:
        lines += [
            f"| **watcher snapshot**: walk + publish + flush (its resync) | {snap.ledgers:,} | {snap.resync_s:.2f} "
            f"| **{_rate(snap.ledgers, snap.resync_s)}** |",
            f"| watcher snapshot from the watcher's start (connect, election, topic) to flushed | {snap.ledgers:,} "
            f"| {snap.flushed_s:.2f} | {_rate(snap.ledgers, snap.flushed_s)} |",
        ]
    if walk is not None and walk.ledgers:
        lines += [
            "",
            f"CPU during read_cluster: this process {walk.client_cpu_s:.2f} s "
            f"({walk.client_cpu_s / walk.ledgers * 1e6:.0f} µs a ledger), ZooKeeper {walk.server_cpu_s:.2f} s "
            f"({walk.server_cpu_s / walk.ledgers * 1e6:.0f} µs a ledger), over {walk.seconds:.2f} s on "
            f"{os.cpu_count()} cores.",
        ]
    if snap is not None:
        lines += [
            "",
            f"Watcher snapshot phases (s from its start): ledgers read "
            f"{snap.read_s:.2f}, SNAPSHOT_BEGIN handed to the producer {snap.begin_s:.2f}, last event flushed "
            f"{snap.flushed_s:.2f}; {snap.events:,} LEDGER_CREATED events "
            f"({_rate(snap.events, snap.flushed_s - snap.begin_s)} events/s from SNAPSHOT_BEGIN to flushed).",
        ]
    return lines


def _window_table(results: Results) -> list[str]:
    subset = results.plan.subset
    lines = [
        f"### Reading ledger nodes: multiRead requests of {MULTI_READ_BATCH} (read_nodes) by requests in flight, "
        "vs one getData per node (subset, same run)",
        "",
        "| multiRead requests in flight | ledgers | seconds | ledgers/s | vs 1 in flight |",
        "|-------:|--------:|--------:|----------:|------------:|",
    ]
    base = results.windows.get(1)
    for window, seconds in results.windows.items():
        ratio = f"{base / seconds:.2f}×" if base and seconds > 0 else "n/a"
        lines.append(f"| {window:,} | {subset:,} | {seconds:.2f} | {_rate(subset, seconds)} | {ratio} |")
    if results.ceiling_s > 0:
        ratio = f"{base / results.ceiling_s:.2f}×" if base else "n/a"
        lines.append(
            f"| one get_async per node ×{subset:,}, all in flight, then wait (no processing) | {subset:,} "
            f"| {results.ceiling_s:.2f} | {_rate(subset, results.ceiling_s)} | {ratio} |"
        )
    return lines


def _live_table(results: Results) -> list[str]:
    plan, live = results.plan, results.live
    lines = [
        "### Live change → readable from Kafka (ms)",
        "",
        "| what | samples | p50 | p99 | max | notes |",
        "|------|--------:|----:|----:|----:|-------|",
        _latency_row("broker floor: send → fetched", results.floor_ms, f"{PROBES} records at {PROBE_RATE:.0f}/s"),
    ]
    if live is not None:
        lines.append(_latency_row("ZooKeeper set (round trip)", live.set_ms, "the close itself"))
        notes = (
            f"{live.requested:,} closes, {plan.rate:.0f}/s asked, {live.achieved_rate:.1f}/s achieved, "
            f"{live.missing} not read back within {live.grace_s:.0f} s"
        )
        lines.append(_latency_row("**close: set returned → event fetched**", live.latencies_ms, notes))
        lines.append(_latency_row("↳ set returned → handed to the producer", live.handed_ms, "the watcher"))
        lines.append(_latency_row("↳ handed to the producer → fetched", live.onwards_ms, "producer, broker, fetch"))
        lines.append(_latency_row("handed to the producer → broker ack", live.ack_ms, "acks=all"))
        lines += ["", f"Live phase, where the events went: {live.diagnosis}."]
    lines += [
        "",
        f"Consumer: a process of its own, fetch_max_wait_ms={FETCH_WAIT_MS}. Total run time {results.total_s:.1f} s.",
    ]
    return lines


def _header(plan: Plan) -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"watcher bench {datetime.date.today().isoformat()}: {plan.ledgers:,} ledgers, window subset "
        f"{plan.subset:,}, live {plan.rate:.0f}/s for {plan.seconds:.0f} s, snapshot workers "
        f"{plan.snapshot_workers}; Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, load average {load}"
    )


def _terminate_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _plan(args: argparse.Namespace) -> Plan:
    base = QUICK if args.quick else FULL
    ledgers = args.ledgers if args.ledgers is not None else base.ledgers
    return Plan(
        ledgers=ledgers,
        subset=min(base.subset, ledgers),
        rate=args.rate if args.rate is not None else base.rate,
        seconds=args.seconds if args.seconds is not None else base.seconds,
        snapshot_workers=args.snapshot_workers,
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def main(argv: list[str] | None = None) -> int:
    """Start ZooKeeper and Kafka, run every phase, stop both (whatever happens), print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="20k ledgers, 2k window subset, 100 closes/s for 3 s")
    parser.add_argument("--ledgers", type=_positive_int, help="ledgers in the tree (default 100000)")
    parser.add_argument("--rate", type=_positive_float, help="live closes per second (default 200)")
    parser.add_argument("--seconds", type=_positive_float, help="live phase duration (default 10)")
    parser.add_argument(
        "--snapshot-workers",
        type=int,
        choices=range(9),
        default=RedactionPool().workers,
        metavar="N",
        help="processes redacting the snapshot's metadata, 0-8 (default: the watcher's default)",
    )
    args = parser.parse_args(argv)
    plan = _plan(args)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    _stderr(_header(plan))
    results = Results(plan)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scrutiny-watcher-bench-") as scratch:
        servers: list[RunningServer] = []
        try:
            servers.append(start_zookeeper(Path(scratch) / "zookeeper", die_with_parent=True))
            servers.append(start_kafka(Path(scratch) / "kafka", die_with_parent=True))
            _stderr(f"ZooKeeper on {servers[0].address}, Kafka on {servers[1].address}")
            _make_probe_topic(servers[1])
            _run(plan, servers[0], servers[1], results)
        finally:
            for server in reversed(servers):
                server.stop()
    results.total_s = time.perf_counter() - started
    print(_header(plan))
    print()
    print(report(results))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: main's finally blocks have stopped the servers
        print("interrupted; the servers this run started are stopped", file=sys.stderr)
        sys.exit(130)
