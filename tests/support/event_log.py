"""Reading the event topic back and folding it into the state it describes (a reference consumer for tests)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka import KafkaConsumer, TopicPartition

from scrutiny.connectors.kafka.events import parse_event
from scrutiny.core.metadata_redaction import redact_ledger_metadata
from scrutiny.core.metadata_view import MetadataView
from scrutiny.proto import ledger_events_pb2 as pb

LEDGER_KINDS = (pb.EventKind.LEDGER_CREATED, pb.EventKind.LEDGER_CHANGED)


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes
    event: pb.LedgerEvent
    value: bytes = b""  # the record's value as the broker gave it


def read_topic(consumer_options: dict[str, object], topic: str, *, timeout_s: float = 20.0) -> list[Record]:
    """Every record of every partition up to its end offset when the read starts, in offset order."""
    consumer = KafkaConsumer(**consumer_options, enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        targets: dict[TopicPartition, int] = consumer.end_offsets(partitions)
        records: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while not all(consumer.position(tp) >= targets[tp] for tp in partitions):
            if time.monotonic() >= deadline:
                raise AssertionError(f"could not read {topic} to its end within {timeout_s} s")
            batch = consumer.poll(timeout_ms=200)
            for tp, items in batch.items():
                records.extend(Record(tp.partition, r.offset, r.key, parse_event(r.value), r.value) for r in items)
        return sorted((r for r in records if r.offset < targets[TopicPartition(topic, r.partition)]), key=_order)
    finally:
        consumer.close()


def _order(record: Record) -> tuple[int, int]:
    return record.partition, record.offset


@dataclass
class Folded:
    """The state the events describe, and how often a ledger's events went backwards."""

    ledgers: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # id -> (mzxid, metadata)
    marks: dict[int, bytes] = field(default_factory=dict)
    writable: dict[str, bytes] = field(default_factory=dict)
    readonly: dict[str, bytes] = field(default_factory=dict)
    racks: bytes | None = None
    backwards: int = 0


def fold(records: list[Record]) -> Folded:
    """Apply the events partition by partition; cluster-wide events from partition 0 (all partitions get them)."""
    out = Folded()
    for partition in sorted({r.partition for r in records}):
        _fold_partition(out, [r for r in records if r.partition == partition], cluster=partition == 0)
    return out


def _fold_partition(out: Folded, records: list[Record], *, cluster: bool) -> None:
    ledgers: dict[int, tuple[int, bytes]] = {}
    marks: dict[int, bytes] = {}
    seen_ledgers: set[int] | None = None
    seen_marks: set[int] = set()
    for record in records:
        event = record.event
        snapshot = event.origin == pb.Origin.SNAPSHOT
        if event.kind == pb.EventKind.SNAPSHOT_BEGIN and snapshot:
            seen_ledgers, seen_marks = set(), set()
        elif event.kind == pb.EventKind.SNAPSHOT_END and snapshot and seen_ledgers is not None:
            ledgers = {i: v for i, v in ledgers.items() if i in seen_ledgers}
            marks = {i: v for i, v in marks.items() if i in seen_marks}
            seen_ledgers = None
        elif event.kind in LEDGER_KINDS:
            before = ledgers.get(event.ledger_id)
            if before is not None and event.stat.mzxid < before[0] and not snapshot:
                out.backwards += 1
            ledgers[event.ledger_id] = (event.stat.mzxid, event.metadata)
            if seen_ledgers is not None and snapshot:
                seen_ledgers.add(event.ledger_id)
        elif event.kind == pb.EventKind.LEDGER_DELETED:
            ledgers.pop(event.ledger_id, None)
        elif event.kind == pb.EventKind.UNDER_REPLICATION_MARKED:
            marks[event.ledger_id] = event.under_replication.raw
            seen_marks.add(event.ledger_id)
        elif event.kind == pb.EventKind.UNDER_REPLICATION_CLEARED:
            marks.pop(event.ledger_id, None)
        elif cluster:
            _fold_cluster(out, event)
    out.ledgers.update(ledgers)
    out.marks.update(marks)


def _fold_cluster(out: Folded, event: pb.LedgerEvent) -> None:
    bookie = event.bookie_id
    if event.kind in (pb.EventKind.BOOKIE_REGISTERED, pb.EventKind.BOOKIE_WRITABLE):
        out.readonly.pop(bookie, None)
        out.writable[bookie] = event.bookie_info
    elif event.kind == pb.EventKind.BOOKIE_READONLY:
        out.writable.pop(bookie, None)
        out.readonly[bookie] = event.bookie_info
    elif event.kind == pb.EventKind.BOOKIE_UNREGISTERED:
        out.writable.pop(bookie, None)
        out.readonly.pop(bookie, None)
    elif event.kind == pb.EventKind.RACKS_CHANGED:
        out.racks = event.racks or None


def expected_from(view: MetadataView) -> Folded:
    """What the events should fold into for this ZooKeeper state (ledger metadata as published: without passwords)."""
    return Folded(
        ledgers={i: (n.stat.mzxid, redact_ledger_metadata(n.data)) for i, n in view.ledgers.items()},
        marks={i: n.data for i, n in view.marks.items()},
        writable=dict(view.writable),
        readonly=dict(view.readonly),
        racks=view.racks,
    )


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``check`` until it holds; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
