"""The watcher's events as protobuf records (proto/ledger_events.proto): building, keys, parsing.

Ledger and under-replication events are keyed by the ledger id in decimal ASCII; cluster-wide
events use :data:`CLUSTER_KEY` and are sent to every partition. The metadata of every ledger
event is checked here with the same decoder as the checker, so undecodable bytes travel with
their decode error.
"""

from __future__ import annotations

from dataclasses import dataclass

from scrutiny.core.errors import FormatError
from scrutiny.core.ledger_metadata import decode_ledger_metadata
from scrutiny.core.metadata_view import ChangeKind, MetadataChange, Node
from scrutiny.core.zk_records import parse_underreplication_mark
from scrutiny.proto import ledger_events_pb2 as pb

CLUSTER_KEY = b"cluster"
Origin = pb.Origin


@dataclass(frozen=True, slots=True)
class Publisher:
    """Who publishes: stamped on every event."""

    watcher_id: str
    epoch: int
    ledgers_root: str


def ledger_key(ledger_id: int) -> bytes:
    """The Kafka key of a ledger's events: the id in decimal ASCII."""
    return str(ledger_id).encode("ascii")


def event_for_change(change: MetadataChange, origin: int, publisher: Publisher, *, observed_ms: int) -> pb.LedgerEvent:
    """The event describing ``change`` (sequence numbers are stamped when it is sent)."""
    event = _base(pb.EventKind.Value(change.kind.value), origin, publisher, observed_ms)
    if change.ledger_id is not None:
        event.ledger_id = change.ledger_id
    if change.node is not None:
        _fill_stat(event, change.node)
    if change.kind in (ChangeKind.LEDGER_CREATED, ChangeKind.LEDGER_CHANGED) and change.node is not None:
        event.metadata = change.node.data
        event.decode_error = metadata_error(change.node.data)
    elif change.kind is ChangeKind.UNDER_REPLICATION_MARKED and change.node is not None:
        _fill_mark(event, change.node.data)
    elif change.bookie_id is not None:
        event.bookie_id = change.bookie_id
        event.bookie_info = change.data
    elif change.kind is ChangeKind.RACKS_CHANGED:
        event.racks = change.data
    return event


def marker_event(kind: int, origin: int, publisher: Publisher, *, observed_ms: int) -> pb.LedgerEvent:
    """A TICK, SNAPSHOT_BEGIN or SNAPSHOT_END event (cluster-wide)."""
    return _base(kind, origin, publisher, observed_ms)


def metadata_error(data: bytes) -> str:
    """Why the ledger metadata bytes do not decode, or an empty string when they do."""
    try:
        decode_ledger_metadata(data)
    except FormatError as error:
        return str(error)
    return ""


def parse_event(data: bytes) -> pb.LedgerEvent:
    """An event from its Kafka value; raises FormatError on bytes that are not one."""
    event = pb.LedgerEvent()
    try:
        event.ParseFromString(data)
    except Exception as error:  # protobuf raises DecodeError and, on some inputs, others
        raise FormatError("ledger event", str(error) or type(error).__name__) from error
    if event.kind == pb.EventKind.EVENT_KIND_UNSPECIFIED:
        raise FormatError("ledger event", "no event kind")
    return event


def _base(kind: int, origin: int, publisher: Publisher, observed_ms: int) -> pb.LedgerEvent:
    return pb.LedgerEvent(
        kind=kind,  # type: ignore[arg-type]
        origin=origin,  # type: ignore[arg-type]
        observed_ms=observed_ms,
        watcher_id=publisher.watcher_id,
        epoch=publisher.epoch,
        ledgers_root=publisher.ledgers_root,
    )


def _fill_stat(event: pb.LedgerEvent, node: Node) -> None:
    stat = node.stat
    event.stat.version = stat.version
    event.stat.czxid = stat.czxid
    event.stat.mzxid = stat.mzxid
    event.stat.ctime_ms = stat.ctime_ms
    event.stat.mtime_ms = stat.mtime_ms


def _fill_mark(event: pb.LedgerEvent, data: bytes) -> None:
    mark = event.under_replication
    mark.raw = data
    try:
        parsed = parse_underreplication_mark(data)
    except FormatError as error:
        mark.decode_error = str(error)
        return
    mark.replicas.extend(parsed.replicas)
    if parsed.ctime_ms is not None:
        mark.ctime_ms = parsed.ctime_ms
        mark.has_ctime = True
