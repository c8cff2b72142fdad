"""The watcher's events as protobuf records (proto/ledger_events.proto): building, keys, parsing.

Ledger and under-replication events are keyed by the ledger id in decimal ASCII; cluster-wide
events use :data:`CLUSTER_KEY` and are sent to every partition. The metadata of every ledger
event is checked here with the same decoder as the checker, so undecodable bytes travel with
their decode error. A ledger's password never leaves ZooKeeper: an event carries the metadata without it
(:mod:`scrutiny.core.metadata_redaction`), and of bytes that cannot be searched for one only their decode error.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from scrutiny.core.autorecovery_health import AutoRecoveryHealth
from scrutiny.core.errors import FormatError, ScrutinyError
from scrutiny.core.metadata_redaction import RedactedMetadata, redacted_metadata
from scrutiny.core.metadata_view import ChangeKind, MetadataChange, Node
from scrutiny.core.zk_records import parse_underreplication_mark
from scrutiny.proto import ledger_events_pb2 as pb

CLUSTER_KEY = b"cluster"
Origin = pb.Origin

#: Events about one ledger (keyed by its id); every other known kind is cluster-wide.
LEDGER_KINDS = frozenset(
    {
        pb.EventKind.LEDGER_CREATED,
        pb.EventKind.LEDGER_CHANGED,
        pb.EventKind.LEDGER_DELETED,
        pb.EventKind.UNDER_REPLICATION_MARKED,
        pb.EventKind.UNDER_REPLICATION_CLEARED,
        pb.EventKind.LEDGER_RECHECK,
    }
)
_LEDGER_DATA_KINDS = frozenset({ChangeKind.LEDGER_CREATED, ChangeKind.LEDGER_CHANGED})
_KNOWN_KINDS = frozenset(v for v in pb.EventKind.values() if v != pb.EventKind.EVENT_KIND_UNSPECIFIED)
_RECHECK, _RESTARTED = pb.EventKind.LEDGER_RECHECK, pb.RecheckReason.BOOKIE_RESTARTED  # read once: every event asks
#: Every other known kind: sent to every partition with :data:`CLUSTER_KEY`.
CLUSTER_KINDS = _KNOWN_KINDS - LEDGER_KINDS


class RejectReason(StrEnum):
    """Why a record of the topic cannot be used (the ``reason`` column of ``rejected_events``)."""

    UNDECODABLE = "undecodable"  # no value, or bytes that are not a ledger event
    UNKNOWN_KIND = "unknown_kind"  # no event kind, or one this version does not know
    FOREIGN_CLUSTER = "foreign_cluster"  # published for another ledgers root
    BAD_LEDGER_ID = "bad_ledger_id"  # a ledger event with a negative ledger id
    BAD_KEY = "bad_key"  # the Kafka key is not the one the watcher gives that event


class RejectedEventError(ScrutinyError):
    """A record the checker skips: ``reason`` (closed set) and ``details`` (words an operator can act on)."""

    def __init__(self, reason: RejectReason, details: str) -> None:
        self.reason = reason
        self.details = details
        super().__init__(f"{reason.value}: {details}")


@dataclass(frozen=True, slots=True)
class Publisher:
    """Who publishes: stamped on every event."""

    watcher_id: str
    epoch: int
    ledgers_root: str


def ledger_key(ledger_id: int) -> bytes:
    """The Kafka key of a ledger's events: the id in decimal ASCII."""
    return str(ledger_id).encode("ascii")


def ledger_data(change: MetadataChange) -> bytes | None:
    """The znode bytes whose redaction (:func:`redacted_metadata`) the event of ``change`` carries; None when the
    event carries no ledger metadata."""
    if change.kind in _LEDGER_DATA_KINDS and change.node is not None:
        return change.node.data
    return None


def event_for_change(
    change: MetadataChange,
    origin: int,
    publisher: Publisher,
    *,
    observed_ms: int,
    redacted: RedactedMetadata | None = None,
) -> pb.LedgerEvent:
    """The event describing ``change`` (sequence numbers are stamped when it is sent); ``redacted``: the ledger's
    metadata already passed through :func:`redacted_metadata` (computed here when None)."""
    event = _base(pb.EventKind.Value(change.kind.value), origin, publisher, observed_ms)
    if change.ledger_id is not None:
        event.ledger_id = change.ledger_id
    if change.node is not None:
        _fill_stat(event, change.node)
    if (data := ledger_data(change)) is not None:
        _fill_metadata(event, redacted if redacted is not None else redacted_metadata(data))
    elif change.kind is ChangeKind.UNDER_REPLICATION_MARKED and change.node is not None:
        _fill_mark(event, change.node.data)
    elif change.bookie_id is not None:
        event.bookie_id = change.bookie_id
        event.bookie_info = change.data
    elif change.kind is ChangeKind.RACKS_CHANGED:
        event.racks = change.data
    return event


def recheck_event(
    ledger_id: int, node: Node, reason: int, bookie: str, publisher: Publisher, *, observed_ms: int
) -> pb.LedgerEvent:
    """A LEDGER_RECHECK: check ``ledger_id`` again now (``node``: its znode as last published) because of ``bookie``."""
    event = _base(pb.EventKind.LEDGER_RECHECK, pb.Origin.LIVE, publisher, observed_ms)
    event.ledger_id = ledger_id
    _fill_stat(event, node)
    _fill_metadata(event, redacted_metadata(node.data))
    event.recheck = reason  # type: ignore[assignment]
    event.bookie_id = bookie
    return event


def waits_only(event: pb.LedgerEvent) -> bool:
    """A LEDGER_RECHECK after a bookie's restart: only a ledger that waits for the bookie's answers is checked."""
    return event.kind == _RECHECK and event.recheck == _RESTARTED


def bookie_lost_event(
    bookie: str, *, unregistered_ms: int, ledgers: int, entries: int, publisher: Publisher, observed_ms: int
) -> pb.LedgerEvent:
    """A BOOKIE_LOST (cluster-wide): ``bookie`` has been unregistered since ``unregistered_ms`` and held that much."""
    event = _base(pb.EventKind.BOOKIE_LOST, pb.Origin.LIVE, publisher, observed_ms)
    event.bookie_id = bookie
    event.lost.unregistered_ms = unregistered_ms
    event.lost.ledgers = ledgers
    event.lost.entries = entries
    return event


def autorecovery_event(
    health: AutoRecoveryHealth, origin: int, publisher: Publisher, *, observed_ms: int
) -> pb.LedgerEvent:
    """An AUTORECOVERY_HEALTH (cluster-wide): the watcher's judgement of BookKeeper's auto-recovery."""
    event = _base(pb.EventKind.AUTORECOVERY_HEALTH, origin, publisher, observed_ms)
    carried = event.autorecovery
    if health.disabled_since_ms is not None:
        carried.disabled = True
        carried.disabled_since_ms = health.disabled_since_ms
        carried.disabled_critical = health.disabled_critical
    if health.auditor is not None:
        carried.has_auditor = True
        carried.auditor = health.auditor
    if health.no_auditor_since_ms is not None:
        carried.no_auditor_since_ms = health.no_auditor_since_ms
    carried.no_auditor = health.no_auditor
    carried.auditor_unsettled = health.auditor_unsettled
    return event


def autorecovery_health(event: pb.LedgerEvent) -> AutoRecoveryHealth:
    """The judgement an AUTORECOVERY_HEALTH event carries (the inverse of :func:`autorecovery_event`)."""
    carried = event.autorecovery
    no_vote = not carried.has_auditor
    return AutoRecoveryHealth(
        disabled_since_ms=carried.disabled_since_ms if carried.disabled else None,
        disabled_critical=carried.disabled and carried.disabled_critical,
        auditor=None if no_vote else carried.auditor,
        no_auditor_since_ms=carried.no_auditor_since_ms if no_vote else None,
        no_auditor=no_vote and carried.no_auditor,
        auditor_unsettled=no_vote and carried.auditor_unsettled,
    )


def marker_event(kind: int, origin: int, publisher: Publisher, *, observed_ms: int) -> pb.LedgerEvent:
    """A TICK, SNAPSHOT_BEGIN or SNAPSHOT_END event (cluster-wide)."""
    return _base(kind, origin, publisher, observed_ms)


def parse_event(data: bytes) -> pb.LedgerEvent:
    """An event from its Kafka value; raises FormatError on bytes that are not one."""
    event = _decode(data)
    if event.kind == pb.EventKind.EVENT_KIND_UNSPECIFIED:
        raise FormatError("ledger event", "no event kind")
    return event


def _decode(data: bytes) -> pb.LedgerEvent:
    event = pb.LedgerEvent()
    try:
        event.ParseFromString(data)
    except Exception as error:  # protobuf raises DecodeError and, on some inputs, others
        raise FormatError("ledger event", str(error) or type(error).__name__) from error
    return event


def accept_event(key: bytes | None, value: bytes | None, ledgers_root: str) -> pb.LedgerEvent:
    """The event of one Kafka record, if the checker of ``ledgers_root`` can use it; RejectedEventError if not.

    Usable means: a ledger event (protobuf) of a known kind, published for ``ledgers_root`` (events that carry
    no root are taken), a ledger event's id not negative, and the key the watcher gives it (the ledger id in
    decimal ASCII, or :data:`CLUSTER_KEY` for cluster-wide events).
    """
    if not value:
        raise RejectedEventError(RejectReason.UNDECODABLE, "the record has no value")
    try:
        event = _decode(value)
    except FormatError as error:
        raise RejectedEventError(RejectReason.UNDECODABLE, f"not a ledger event ({error.reason})") from None
    if event.kind not in _KNOWN_KINDS:
        known = "has no kind" if event.kind == pb.EventKind.EVENT_KIND_UNSPECIFIED else f"has kind {event.kind}"
        raise RejectedEventError(RejectReason.UNKNOWN_KIND, f"the event {known}, not one this version knows")
    if event.ledgers_root and event.ledgers_root != ledgers_root:
        raise RejectedEventError(
            RejectReason.FOREIGN_CLUSTER,
            f"published for ledgers root {event.ledgers_root!r}, this checker watches {ledgers_root!r}",
        )
    ledger_event = event.kind in LEDGER_KINDS
    if ledger_event and event.ledger_id < 0:
        raise RejectedEventError(RejectReason.BAD_LEDGER_ID, f"ledger id {event.ledger_id} is negative")
    expected = ledger_key(event.ledger_id) if ledger_event else CLUSTER_KEY
    if key != expected:
        shown = "no key" if key is None else f"key {key.decode('utf-8', 'replace')!r}"
        raise RejectedEventError(
            RejectReason.BAD_KEY,
            f"{shown} on a {pb.EventKind.Name(event.kind)} event, expected {expected.decode('ascii')!r}",
        )
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


def _fill_metadata(event: pb.LedgerEvent, redacted: RedactedMetadata) -> None:
    """The ledger's metadata without its password (none of bytes that cannot be searched for one) and why the
    znode's own bytes do not decode."""
    event.metadata = redacted.data
    event.decode_error = redacted.decode_error


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
