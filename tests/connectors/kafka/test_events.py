from __future__ import annotations

from dataclasses import replace

import pytest
from google.protobuf import text_encoding, text_format

from scrutiny.connectors.kafka.events import (
    CLUSTER_KEY,
    Publisher,
    accept_event,
    autorecovery_event,
    autorecovery_health,
    bookie_lost_event,
    event_for_change,
    ledger_key,
    marker_event,
    parse_event,
    recheck_event,
)
from scrutiny.core.autorecovery_health import AutoRecoveryHealth
from scrutiny.core.errors import FormatError, MetadataFormatError
from scrutiny.core.ledger_metadata import (
    Segment,
    build_ledger_metadata,
    decode_ledger_metadata,
    encode_ledger_metadata_v3,
)
from scrutiny.core.metadata_view import ChangeKind, MetadataChange, Node, NodeStat
from scrutiny.core.zk_records import UnderReplicationMark, format_underreplication_mark
from scrutiny.proto import bookkeeper_formats_pb2 as pbf
from scrutiny.proto import ledger_events_pb2 as pb

ME = Publisher("w1", 7, "/ledgers")
STAT = NodeStat(3, 100, 120, 1_700_000_000_000, 1_700_000_000_500)


def test_ledger_key_is_decimal_ascii() -> None:
    assert ledger_key(2**63 - 1) == b"9223372036854775807"


def test_ledger_event_carries_bytes_stat_and_publisher() -> None:
    metadata = build_ledger_metadata(ensemble_size=1, write_quorum=1, ack_quorum=1, segments=[Segment(0, ("a:1",))])
    data = encode_ledger_metadata_v3(metadata)
    event = event_for_change(
        MetadataChange(ChangeKind.LEDGER_CREATED, 42, Node(data, STAT)), pb.Origin.LIVE, ME, observed_ms=9
    )
    back = parse_event(event.SerializeToString())
    assert back.kind == pb.EventKind.LEDGER_CREATED and back.origin == pb.Origin.LIVE
    assert (back.ledger_id, back.metadata, back.decode_error) == (42, data, "")
    assert (back.stat.version, back.stat.mzxid, back.stat.mtime_ms) == (3, 120, 1_700_000_000_500)
    assert (back.watcher_id, back.epoch, back.ledgers_root, back.observed_ms) == ("w1", 7, "/ledgers", 9)


def test_undecodable_metadata_travels_with_its_error() -> None:
    event = event_for_change(
        MetadataChange(ChangeKind.LEDGER_CHANGED, 5, Node(b"\x00junk", STAT)), pb.Origin.LIVE, ME, observed_ms=0
    )
    # Bytes in which nothing parses cannot be searched for a password: none of them is published, only the error.
    assert event.metadata == b"" and "missing header" in event.decode_error


def test_under_replication_mark_is_parsed() -> None:
    raw = format_underreplication_mark(UnderReplicationMark(("b1:3181",), 1234))
    event = event_for_change(
        MetadataChange(ChangeKind.UNDER_REPLICATION_MARKED, 5, Node(raw, STAT)), pb.Origin.RESYNC, ME, observed_ms=0
    )
    mark = event.under_replication
    assert list(mark.replicas) == ["b1:3181"] and mark.has_ctime and mark.ctime_ms == 1234 and mark.raw == raw
    bad = event_for_change(
        MetadataChange(ChangeKind.UNDER_REPLICATION_MARKED, 5, Node(b"replica: ", STAT)),
        pb.Origin.RESYNC,
        ME,
        observed_ms=0,
    )
    assert bad.under_replication.decode_error and not bad.under_replication.replicas


def test_bookie_and_marker_events() -> None:
    event = event_for_change(
        MetadataChange(ChangeKind.BOOKIE_READONLY, bookie_id="b:1", data=b"i"), pb.Origin.LIVE, ME, observed_ms=0
    )
    assert (event.kind, event.bookie_id, event.bookie_info) == (pb.EventKind.BOOKIE_READONLY, "b:1", b"i")
    tick = marker_event(pb.EventKind.TICK, pb.Origin.LIVE, ME, observed_ms=5)
    assert parse_event(tick.SerializeToString()).kind == pb.EventKind.TICK


def test_garbage_is_not_an_event() -> None:
    with pytest.raises(FormatError):
        parse_event(b"\xff\xff\xff")
    with pytest.raises(FormatError, match="no event kind"):
        parse_event(b"")


@pytest.mark.parametrize(
    "health",
    [
        AutoRecoveryHealth(auditor="bk1:3181"),
        AutoRecoveryHealth(disabled_since_ms=5, disabled_critical=True, auditor=""),
        AutoRecoveryHealth(disabled_since_ms=0, no_auditor_since_ms=9, no_auditor=True),
        AutoRecoveryHealth(no_auditor_since_ms=0, auditor_unsettled=True),
    ],
)
def test_the_autorecovery_judgement_is_a_cluster_event_carried_exactly(health: AutoRecoveryHealth) -> None:
    event = autorecovery_event(health, pb.Origin.LIVE, ME, observed_ms=11)
    got = accept_event(CLUSTER_KEY, event.SerializeToString(), "/ledgers")
    assert got.kind == pb.EventKind.AUTORECOVERY_HEALTH and got.observed_ms == 11
    assert autorecovery_health(got) == health


def test_recheck_is_a_ledger_event_and_bookie_lost_a_cluster_one() -> None:
    data = encode_ledger_metadata_v3(
        build_ledger_metadata(ensemble_size=1, write_quorum=1, ack_quorum=1, segments=[Segment(0, ("b:1",))])
    )
    recheck = recheck_event(9, Node(data, STAT), pb.RecheckReason.COOKIE_CHANGED, "b:1", ME, observed_ms=4)
    back = accept_event(ledger_key(9), recheck.SerializeToString(), "/ledgers")
    assert (back.kind, back.ledger_id, back.metadata, back.stat.version) == (pb.EventKind.LEDGER_RECHECK, 9, data, 3)
    assert (back.recheck, back.bookie_id) == (pb.RecheckReason.COOKIE_CHANGED, "b:1")
    lost = bookie_lost_event("b:1", unregistered_ms=7, ledgers=2, entries=30, publisher=ME, observed_ms=8)
    got = accept_event(CLUSTER_KEY, lost.SerializeToString(), "/ledgers")
    assert (got.kind, got.bookie_id, got.lost.unregistered_ms, got.lost.ledgers, got.lost.entries) == (
        pb.EventKind.BOOKIE_LOST,
        "b:1",
        7,
        2,
        30,
    )


# --------------------------------------------------------------------------- no password on the topic

#: 16 bytes no other byte of an event holds.
PASSWORD = b"\xa7event-password\x01"


def with_password(**overrides: object) -> pbf.LedgerMetadataFormat:
    """A closed ledger's message, E=3 WQ=2, stored with :data:`PASSWORD` (``overrides``: fields set otherwise)."""
    msg = pbf.LedgerMetadataFormat(
        quorumSize=2,
        ensembleSize=3,
        length=0,
        lastEntryId=-1,
        state=pbf.LedgerMetadataFormat.CLOSED,
        digestType=pbf.LedgerMetadataFormat.HMAC,
        password=PASSWORD,
        ackQuorumSize=2,
    )
    msg.segment.add(ensembleMember=["a:1", "b:1", "c:1"], firstEntryId=0)
    for name, value in overrides.items():
        setattr(msg, name, value)
    return msg


def v3_bytes(msg: pbf.LedgerMetadataFormat) -> bytes:
    body = msg.SerializePartialToString()
    assert len(body) < 128  # a one-byte length
    return b"BookieMetadataFormatVersion\t3\n" + bytes([len(body)]) + body


BLOBS = {
    "v3": v3_bytes(with_password()),
    "v2": b"BookieMetadataFormatVersion\t2\n" + text_format.MessageToString(with_password()).encode(),
    "v3 that does not decode": v3_bytes(with_password(quorumSize=4)),  # WQ above E: the message still parses
    "v3 truncated": v3_bytes(with_password())[:-2],  # the length prefix says more: cannot be searched
    "no header": b"\x00junk " + PASSWORD,
}


def error_of(data: bytes) -> str:
    try:
        decode_ledger_metadata(data)
    except MetadataFormatError as error:
        return str(error)
    return ""


@pytest.mark.parametrize("name", sorted(BLOBS))
@pytest.mark.parametrize("kind", ["LEDGER_CREATED", "LEDGER_CHANGED", "LEDGER_RECHECK"])
def test_a_published_event_never_holds_the_ledger_s_password(name: str, kind: str) -> None:
    data = BLOBS[name]
    assert PASSWORD in data or text_encoding.CEscape(PASSWORD, as_utf8=False).encode() in data
    node = Node(data, STAT)
    if kind == "LEDGER_RECHECK":
        event = recheck_event(7, node, pb.RecheckReason.BOOKIE_LOST_RECHECK, "a:1", ME, observed_ms=1)
    else:
        event = event_for_change(MetadataChange(ChangeKind[kind], 7, node), pb.Origin.LIVE, ME, observed_ms=1)
    published = event.SerializeToString()
    assert PASSWORD not in published
    for escaped in (text_encoding.CEscape(PASSWORD, as_utf8=False), "".join(f"\\{b:03o}" for b in PASSWORD)):
        assert escaped.encode() not in published
    back = parse_event(published)
    assert back.decode_error == error_of(data)  # the error of the znode's own bytes, whatever is published
    if not back.decode_error:  # the same metadata, but for the password
        assert decode_ledger_metadata(back.metadata) == replace(decode_ledger_metadata(data), password=b"")
    elif name in ("v3 truncated", "no header"):
        assert back.metadata == b""  # nothing of bytes that cannot be searched for a password
    else:
        assert back.metadata and error_of(back.metadata) == back.decode_error
