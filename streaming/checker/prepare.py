"""The fetch stage: decode a partition's events and fetch the listings their checks need.

Runs on the executors (``mapInArrow``) once per Kafka partition range per micro-batch. For each
ledger it keeps its events in offset order; for the last metadata event (or LEDGER_RECHECK, but one after a bookie's
restart, which the processor weighs first) of a ledger that needs a check (closed, or with sealed segments) it asks
the ensemble's bookies, all ledgers of the batch at once, batched per bookie. Cluster-wide events refresh the cluster
view; the events that open or resolve a cluster-level finding (BOOKIE_LOST itself and a registration, which open and
resolve ``BOOKIE_LOST``; AUTORECOVERY_HEALTH) are passed on under :data:`CLUSTER_LEDGER`, the rest (racks, ticks,
markers) are not; a tick's part is to make the micro-batch
run so timers fire.

No record of the topic can stop the job: a record the checker cannot use (no value, bytes that
are not an event, an unknown kind, another cluster's events, a negative ledger id, a key that is
not the event's) is passed on under :data:`REJECTED_KEY` with its partition, offset and reason,
and the sink records it in ``rejected_events``.

One extra row per partition range (``ledger_id`` = :data:`STATS_KEY`) carries the stage's
figures (events read, RPCs) to the processor, which sums them for ``checker_runs``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa

from scrutiny.connectors.bookies.fetch import shared_fetcher
from scrutiny.connectors.kafka.events import LEDGER_KINDS, RejectedEventError, accept_event, waits_only
from scrutiny.core.compact_json import compact_json
from scrutiny.core.errors import FormatError, ScrutinyError
from scrutiny.core.ledger_metadata import LedgerMetadata, decode_ledger_metadata
from scrutiny.core.ledger_tracker import needs_check
from scrutiny.core.verdict import BookieAnswer
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.streaming.checker.answer_codec import encode_answers
from scrutiny.streaming.checker.config import JobConfig
from scrutiny.streaming.checker.records import CLUSTER_LEDGER, REJECTED_KEY, STATS_KEY
from scrutiny.streaming.checker.replay import ReplayHandle

log = logging.getLogger(__name__)

PREPARED_SCHEMA = pa.schema(
    [
        pa.field("ledger_id", pa.int64(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("event", pa.binary()),
        pa.field("answers", pa.binary()),
    ]
)
PREPARED_DDL = "ledger_id long, offset long, event binary, answers binary"
#: The events whose metadata is checked (a recheck carries the ledger's metadata as last published).
_CHECKED = (pb.EventKind.LEDGER_CREATED, pb.EventKind.LEDGER_CHANGED, pb.EventKind.LEDGER_RECHECK)
#: The cluster-wide events the processor needs: they open and resolve the cluster-level findings.
CLUSTER_FINDING_KINDS = frozenset(
    {
        pb.EventKind.AUTORECOVERY_HEALTH,
        pb.EventKind.BOOKIE_LOST,
        pb.EventKind.BOOKIE_REGISTERED,
        pb.EventKind.BOOKIE_READONLY,
        pb.EventKind.BOOKIE_WRITABLE,
    }
)
#: How much of a rejected record's value is kept (as hex) to show what it was.
VALUE_HEAD_BYTES = 64


@dataclass(frozen=True, slots=True)
class EventRow:
    """One ledger event of the partition range, with its offset and raw value."""

    ledger_id: int
    offset: int
    value: bytes
    event: pb.LedgerEvent


@dataclass(frozen=True, slots=True)
class RejectedRow:
    """A record of the topic the checker cannot use, where it is and why."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    rejected: RejectedEventError

    def to_json(self) -> bytes:
        """The row's ``event`` column: what ``rejected_events`` records of it."""
        value = self.value or b""
        doc = {
            "kafka_partition": self.partition,
            "kafka_offset": self.offset,
            "kafka_key": None if self.key is None else self.key.decode("utf-8", "replace"),
            "reason": self.rejected.reason.value,
            "details": self.rejected.details,
            "value_bytes": len(value),
            "value_head": value[:VALUE_HEAD_BYTES].hex(),
        }
        return compact_json(doc).encode()


@dataclass(slots=True)
class ReadEvents:
    """A partition range's records sorted out: ledger events in offset order, rejected records, counts."""

    rows: list[EventRow]
    rejected: list[RejectedRow]
    events: int = 0
    cluster_events: int = 0


class PrepareEvents:
    """The ``mapInArrow`` function (picklable: holds the :class:`JobConfig` and, after a crash, the replay's handle).

    In a batch run again from its kept output (:mod:`scrutiny.streaming.checker.replay`) nothing is fetched: the
    processor returns the first run's records.
    """

    def __init__(self, config: JobConfig, replay: ReplayHandle | None = None) -> None:
        self.config = config
        self.replay = replay

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Every ledger event of the partition range, with answers on the ones to check."""
        started = time.monotonic()
        read = ledger_rows(batches, self.config.ledgers_root)
        rows, cluster_events = read.rows, read.cluster_events
        wanted = ledgers_to_check(rows)
        answers: dict[int, bytes] = {}
        rpcs = 0
        if (wanted or cluster_events) and not (self.replay is not None and self.replay.running()):
            ends = {k: v.end for k, v in wanted.items() if v.end is not None}
            try:
                rpcs, fetched = fetch_answers(
                    self.config, {k: v.bookies for k, v in wanted.items()}, refresh=cluster_events > 0, ends=ends
                )
            except ScrutinyError as error:  # ZooKeeper unreachable with no cached view: every answer unknown
                log.warning("cannot fetch listings this batch: %s", error)
                unknown = BookieAnswer.unknown(f"cluster view unavailable: {error}")
                fetched = {k: dict.fromkeys(v.bookies, unknown) for k, v in wanted.items()}
            checked = ((wanted[lid], got) for lid, got in fetched.items() if lid in wanted)
            answers = {to_check.offset: encode_answers(got, to_check.metadata) for to_check, got in checked}
        figures = {"events": read.events, "rpcs": rpcs, "fetched": len(wanted), "fetch_ms": _ms(started)}
        if read.rejected:
            figures["rejected"] = len(read.rejected)
        yield _batch(rows, read.rejected, answers, figures)


def fetch_answers(
    config: JobConfig,
    wanted: dict[int, tuple[str, ...]],
    *,
    refresh: bool = False,
    ends: Mapping[int, int] | None = None,
) -> tuple[int, dict[int, dict[str, BookieAnswer]]]:
    """(RPCs sent, ledger -> bookie -> answer) for ``wanted``, with this process's shared clients; ``ends``: the
    closed ones' lastEntryId (the header of an entry held after it is read, see ``ListingFetcher.fetch``)."""
    reader = config.cluster_reader()
    if refresh:
        reader.invalidate()
    if not wanted:
        return 0, {}
    snapshot = reader.get()
    fetcher = shared_fetcher(config.fetch)
    result = fetcher.fetch(wanted, snapshot.registrations, timeout_s=config.fetch_timeout_s, ends=ends)
    return result.rpcs, result.answers


def ledger_rows(batches: Iterator[pa.RecordBatch], ledgers_root: str) -> ReadEvents:
    """The ledger events (offset order) and the rejected records of Kafka rows (partition, offset, key, value)."""
    read = ReadEvents([], [])
    for batch in batches:
        columns = (batch.column(name).to_pylist() for name in ("partition", "offset", "key", "value"))
        for partition, offset, key, value in zip(*columns, strict=True):
            read.events += 1
            try:
                event = accept_event(key, value, ledgers_root)
            except RejectedEventError as rejected:
                read.rejected.append(RejectedRow(partition, offset, key, value, rejected))
                continue
            if event.kind in LEDGER_KINDS:
                read.rows.append(EventRow(event.ledger_id, offset, value, event))
            elif event.kind != pb.EventKind.TICK:
                read.cluster_events += 1
                if event.kind in CLUSTER_FINDING_KINDS:
                    read.rows.append(EventRow(CLUSTER_LEDGER, offset, value, event))
    read.rows.sort(key=lambda r: r.offset)
    return read


class ToCheck(NamedTuple):
    """A ledger to check: the offset of its last metadata event, the bookies to ask, its lastEntryId when closed, and
    that event's metadata decoded (handed on to the stateful step with the answers)."""

    offset: int
    bookies: tuple[str, ...]
    end: int | None
    metadata: LedgerMetadata


def ledgers_to_check(rows: list[EventRow]) -> dict[int, ToCheck]:
    """Ledger id -> what to check of it, for the ledgers to check."""
    last: dict[int, EventRow | None] = {}
    for row in rows:
        if row.ledger_id == CLUSTER_LEDGER:
            continue
        if row.event.kind in _CHECKED and not waits_only(row.event):
            last[row.ledger_id] = row
        elif row.event.kind == pb.EventKind.LEDGER_DELETED:
            last[row.ledger_id] = None
    wanted: dict[int, ToCheck] = {}
    for ledger, newest in last.items():
        if newest is None:
            continue
        try:
            metadata = decode_ledger_metadata(newest.event.metadata)
        except FormatError:
            continue
        if needs_check(metadata):
            bookies = tuple(dict.fromkeys(b for s in metadata.segments for b in s.ensemble))
            wanted[ledger] = ToCheck(newest.offset, bookies, metadata.last_entry_id, metadata)
    return wanted


def _batch(
    rows: list[EventRow], rejected: list[RejectedRow], answers: dict[int, bytes], figures: dict[str, int]
) -> pa.RecordBatch:
    ledger_ids = [r.ledger_id for r in rows] + [REJECTED_KEY] * len(rejected) + [STATS_KEY]
    offsets = [r.offset for r in rows] + [r.offset for r in rejected] + [0]
    events: list[bytes | None] = [*(r.value for r in rows), *(r.to_json() for r in rejected)]
    events.append(json.dumps(figures).encode())
    fetched: list[bytes | None] = [answers.get(r.offset) for r in rows] + [None] * (len(rejected) + 1)
    return pa.RecordBatch.from_arrays(
        [pa.array(ledger_ids, pa.int64()), pa.array(offsets, pa.int64()), pa.array(events), pa.array(fetched)],
        schema=PREPARED_SCHEMA,
    )


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
