"""No ledger password reaches Kafka: the real watcher, a real ZooKeeper and a real broker, every record read back."""

from __future__ import annotations

import dataclasses

import pytest
from google.protobuf import text_encoding, text_format
from kazoo.client import KazooClient

from scrutiny.core.errors import MetadataFormatError
from scrutiny.core.ledger_metadata import (
    HEADER_MAGIC,
    LedgerState,
    Segment,
    build_ledger_metadata,
    decode_ledger_metadata,
    encode_ledger_metadata_v3,
)
from scrutiny.core.zk_paths import available_bookie_path, cookie_path, ledger_path
from scrutiny.proto import bookkeeper_formats_pb2 as pbf
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.settings.loader import Settings
from tests.support.event_log import Record, wait_until
from tests.support.servers import KafkaTopicFactory
from tests.watcher.test_daemon import ENSEMBLE, LAYOUT, converges, events, running_watcher

pytestmark = pytest.mark.integration

#: 16 bytes that nothing else in ZooKeeper or on the topic holds.
PASSWORD = b"\xa7Zq-watcher-pw\x00!"
LEDGER_KINDS = (pb.EventKind.LEDGER_CREATED, pb.EventKind.LEDGER_CHANGED, pb.EventKind.LEDGER_RECHECK)


def v3(last: int = 9) -> bytes:
    """A closed ledger on bk1..bk3 (E=3, WQ=2), its password stored, as BookKeeper 4.9+ writes it."""
    built = build_ledger_metadata(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        segments=[Segment(0, ENSEMBLE)],
        state=LedgerState.CLOSED,
        last_entry_id=last,
        length=(last + 1) * 10,
        password=PASSWORD,
    )
    return encode_ledger_metadata_v3(built)


def message(**fields: object) -> pbf.LedgerMetadataFormat:
    """The message of :func:`v3`, with ``fields`` set otherwise."""
    data = v3()
    msg = pbf.LedgerMetadataFormat()
    msg.MergeFromString(data[len(HEADER_MAGIC) + 3 :])  # header, then a one-byte length
    for name, value in fields.items():
        setattr(msg, name, value)
    return msg


def v2() -> bytes:
    """The same ledger as BookKeeper 4.2 - 4.8 wrote it: protobuf text (its password escaped)."""
    return HEADER_MAGIC + b"2\n" + text_format.MessageToString(message()).encode()


def write_quorum_above_ensemble() -> bytes:
    """Metadata that does not decode (WQ = 4 > E), but whose message parses."""
    body = message(quorumSize=4).SerializeToString()
    return HEADER_MAGIC + b"3\n" + bytes([len(body)]) + body


def forms(password: bytes) -> tuple[bytes, ...]:
    """The password as stored: its bytes, and escaped as in protobuf text (as protobuf writes it, or all in octal)."""
    octal = "".join(f"\\{byte:03o}" for byte in password)
    return password, text_encoding.CEscape(password, as_utf8=False).encode(), octal.encode()


def error_of(data: bytes) -> str:
    with pytest.raises(MetadataFormatError) as info:
        decode_ledger_metadata(data)
    return str(info.value)


def last_of(records: list[Record], ledger_id: int) -> pb.LedgerEvent:
    return [r.event for r in records if r.event.ledger_id == ledger_id and r.event.kind in LEDGER_KINDS][-1]


def rechecked(settings: Settings, topic: str) -> set[int]:
    return {r.event.ledger_id for r in events(settings, topic) if r.event.kind == pb.EventKind.LEDGER_RECHECK}


def test_no_record_of_the_topic_holds_a_ledger_password(
    service_settings: Settings, zk_client: KazooClient, kafka_topic_factory: KafkaTopicFactory
) -> None:
    assert len(PASSWORD) == 16
    unsearchable = v3() + b"\x00"  # a byte after the message its length prefix frames: nothing parses
    stored = {1: v3(), 2: v2(), 3: unsearchable}
    for data in (*stored.values(), write_quorum_above_ensemble()):
        assert any(form in data for form in forms(PASSWORD))
    topic = kafka_topic_factory(partitions=2)
    zk_client.create("/ledgers/LAYOUT", LAYOUT, makepath=True)
    for bookie in ENSEMBLE:
        zk_client.create(cookie_path(bookie), b"cookie", makepath=True)
        zk_client.create(available_bookie_path(bookie), b"", ephemeral=True, makepath=True)
    for ledger_id, data in stored.items():
        zk_client.create(ledger_path(ledger_id), data, makepath=True)
    with running_watcher(service_settings, zk_client.chroot, topic, "w1", lost_after_ms=1000) as watcher:
        assert watcher.leading.wait(20)
        converges(service_settings, topic, zk_client)  # the snapshot
        zk_client.create(ledger_path(4), v3(), makepath=True)
        zk_client.set(ledger_path(1), v3(last=19))
        zk_client.create(ledger_path(5), write_quorum_above_ensemble(), makepath=True)
        converges(service_settings, topic, zk_client)  # the live changes
        zk_client.delete(available_bookie_path(ENSEMBLE[0]))  # lost: its closed ledgers are asked for again
        wait_until(lambda: rechecked(service_settings, topic) >= {1, 2, 4}, 30, "the rechecks of bk1's ledgers")

    records = events(service_settings, topic)
    assert records and all(r.value for r in records)
    for record in records:
        for form in forms(PASSWORD):
            assert form not in record.value and form not in (record.key or b""), (record.partition, record.offset)

    # What the checker needs is all there: the metadata but for the password, or why it does not decode.
    for ledger_id, data in ((1, v3(last=19)), (2, v2()), (4, v3())):
        event = last_of(records, ledger_id)
        metadata = decode_ledger_metadata(event.metadata)
        assert metadata == dataclasses.replace(decode_ledger_metadata(data), password=b"") and metadata.password_set
        assert event.decode_error == ""
    unreadable = last_of(records, 3)
    assert (unreadable.metadata, unreadable.decode_error) == (b"", error_of(unsearchable))
    invalid = last_of(records, 5)
    assert invalid.metadata and invalid.decode_error == error_of(write_quorum_above_ensemble())
    assert error_of(invalid.metadata) == invalid.decode_error
