"""Ledger metadata: the three stored formats, exact v3 re-encoding, validation, password secrecy.

The v3 examples are built byte by byte here, in field-number order as BookKeeper's Java protobuf
runtime writes them, so they check the field numbers as well as the codec.
"""

from __future__ import annotations

import dataclasses
import marshal
import re
import string
from collections import Counter
from typing import Any

import pytest
from google.protobuf import text_format
from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.errors import MetadataFormatError
from scrutiny.core.ledger_metadata import (
    V1_IN_RECOVERY_LAST_ENTRY,
    DigestType,
    LedgerMetadata,
    LedgerState,
    Segment,
    build_ledger_metadata,
    decode_ledger_metadata,
    encode_ledger_metadata_v3,
    metadata_from_plain,
    metadata_to_plain,
)
from scrutiny.proto import bookkeeper_formats_pb2 as pb
from tests.support.strategies import assert_fair_shares, one_byte_change, one_text_change

HEADER = b"BookieMetadataFormatVersion\t"
TOPIC = "public/default/persistent/orders"
SECRET = b"s3cr3t-pw"
B0 = "bookie-0.bookie.pulsar.svc.cluster.local:3181"
B1 = "bookie-1.bookie.pulsar.svc.cluster.local:3181"
B2 = "bookie-2.bookie.pulsar.svc.cluster.local:3181"
B3 = "bookie-3.bookie.pulsar.svc.cluster.local:3181"
FAST = settings(max_examples=200, deadline=None, database=None)


# --------------------------------------------------------------------------- wire helpers (independent of the codec)


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def int_field(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def bytes_field(number: int, value: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(value)) + value


def segment(first: int, *bookies: str) -> bytes:
    return bytes_field(6, b"".join(bytes_field(1, b.encode()) for b in bookies) + int_field(2, first))


def custom(key: str, value: bytes) -> bytes:
    return bytes_field(11, bytes_field(1, key.encode()) + bytes_field(2, value))


def v3(body: bytes) -> bytes:
    return HEADER + b"3\n" + varint(len(body)) + body


PULSAR_CUSTOM = (
    custom("application", b"pulsar")
    + custom("component", b"managed-ledger")
    + custom("pulsar/managed-ledger", TOPIC.encode())
)


def pulsar_body(*, state: int = 3, password: bytes = b"", tail: bytes = b"") -> bytes:
    """A closed Pulsar ledger, E=3 WQ=2 AQ=2, one ensemble change, as BookKeeper 4.9+ writes it."""
    return (
        int_field(1, 2)  # quorumSize
        + int_field(2, 3)  # ensembleSize
        + int_field(3, 1_048_576)  # length
        + int_field(4, 4999)  # lastEntryId
        + int_field(5, state)
        + segment(0, B0, B1, B2)
        + segment(2500, B0, B3, B2)
        + int_field(7, 3)  # digestType CRC32C
        + bytes_field(8, password)
        + int_field(9, 2)  # ackQuorumSize
        + int_field(10, 1_700_000_000_000)  # ctime
        + PULSAR_CUSTOM
        + tail
    )


def minimal_body(
    *,
    quorum: int = 2,
    ensemble: int = 3,
    ack: int | None = None,
    state: int = 3,
    last: int | None = 9,
    length: int = 100,
    segments: tuple[tuple[int, tuple[str, ...]], ...] = ((0, ("a:1", "b:1", "c:1")),),
) -> bytes:
    body = int_field(1, quorum) + int_field(2, ensemble) + int_field(3, length)
    body += b"" if last is None else int_field(4, last)
    body += int_field(5, state) + b"".join(segment(first, *bookies) for first, bookies in segments)
    return body + (b"" if ack is None else int_field(9, ack))


def reason(blob: bytes) -> MetadataFormatError:
    with pytest.raises(MetadataFormatError) as info:
        decode_ledger_metadata(blob)
    return info.value


# --------------------------------------------------------------------------- v3


def test_decodes_a_pulsar_v3_ledger_as_bookkeeper_writes_it() -> None:
    md = decode_ledger_metadata(v3(pulsar_body()))
    assert md.format_version == 3
    assert md.state is LedgerState.CLOSED and md.is_closed()
    assert (md.ensemble_size, md.write_quorum, md.ack_quorum) == (3, 2, 2)
    assert (md.last_entry_id, md.length) == (4999, 1_048_576)
    assert md.segments == (Segment(0, (B0, B1, B2)), Segment(2500, (B0, B3, B2)))
    assert md.digest_type is DigestType.CRC32C
    assert md.password == b"" and md.password_set
    assert md.ctime == 1_700_000_000_000 and md.c_token is None
    assert md.custom_metadata == (
        ("application", b"pulsar"),
        ("component", b"managed-ledger"),
        ("pulsar/managed-ledger", TOPIC.encode()),
    )
    assert md.pulsar_topic == TOPIC


V3_VARIANTS = {
    "pulsar": pulsar_body(),
    "pulsar with cToken": pulsar_body(tail=int_field(12, 42)),
    "open": minimal_body(state=1, last=-1, length=0, ack=2),
    "in recovery": minimal_body(state=2, last=17, length=5),
    "closed without lastEntryId": minimal_body(last=None, length=0),
    "no ackQuorumSize": minimal_body(ack=None),
    "negative stored values while open": minimal_body(state=1, last=-(2**63), length=-7),
    "largest ids": minimal_body(last=2**63 - 1, length=2**63 - 1, segments=((2**63 - 1, ("a:1", "b:1", "c:1")),)),
    "unknown top-level field from a newer version": pulsar_body(tail=int_field(12, 1) + bytes_field(20, b"x")),
    "unknown digest type": minimal_body() + int_field(7, 9),
    "unknown fields in a segment and a custom entry": (
        minimal_body(ensemble=2, segments=())
        + bytes_field(6, bytes_field(1, b"a:1") + bytes_field(1, b"b:1") + int_field(2, 0) + int_field(3, 7))
        + bytes_field(11, bytes_field(1, b"k") + bytes_field(2, b"v") + int_field(5, 1))
    ),
    "non-UTF-8 custom value, empty password, HMAC": (
        minimal_body(ensemble=2, segments=((0, ("a:1", "b:1")),)) + int_field(7, 2) + bytes_field(8, b"")
    )
    + custom("bin", b"\xff\x00"),
}


@pytest.mark.parametrize("body", V3_VARIANTS.values(), ids=V3_VARIANTS.keys())
def test_v3_reencoding_is_byte_exact(body: bytes) -> None:
    blob = v3(body)
    md = decode_ledger_metadata(blob)
    assert encode_ledger_metadata_v3(md) == blob
    assert decode_ledger_metadata(encode_ledger_metadata_v3(md)) == md


def through_plain(md: LedgerMetadata) -> LedgerMetadata:
    """``md`` handed from one process to another as the checker's two stages do (plain values, marshal)."""
    return metadata_from_plain(marshal.loads(marshal.dumps(metadata_to_plain(md))))


@pytest.mark.parametrize("body", V3_VARIANTS.values(), ids=V3_VARIANTS.keys())
def test_plain_values_keep_what_reencoding_needs(body: bytes) -> None:
    blob = v3(body)
    back = through_plain(decode_ledger_metadata(blob))
    assert back == decode_ledger_metadata(blob)
    assert encode_ledger_metadata_v3(back) == blob  # unknown fields, absent options: the stored form's details too


@FAST
@given(st.data())
def test_plain_values_give_back_the_decoded_metadata(data: st.DataObject) -> None:
    body, version = data.draw(valid_blobs())
    md = decode_ledger_metadata(write_body(body, version))
    back = through_plain(md)
    assert back == md and back._wire == md._wire
    assert back.state is md.state and back.digest_type is md.digest_type  # the enums themselves, not their text
    assert back.as_json_dict() == md.as_json_dict() and back.password == md.password


def test_open_and_in_recovery_ledgers_ignore_stored_last_entry_and_length() -> None:
    for state in (1, 2):
        md = decode_ledger_metadata(v3(minimal_body(state=state, last=17, length=5)))
        assert (md.last_entry_id, md.length) == (None, None)
        assert not md.is_closed()


def test_closed_ledger_without_last_entry_id_is_empty() -> None:
    md = decode_ledger_metadata(v3(minimal_body(last=None, length=0)))
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, -1, 0)


def test_absent_ack_quorum_is_the_write_quorum_and_absent_options_are_none() -> None:
    md = decode_ledger_metadata(v3(minimal_body(ack=None)))
    assert md.ack_quorum == md.write_quorum == 2
    assert (md.digest_type, md.password, md.ctime, md.c_token, md.pulsar_topic) == (None,) * 5
    assert not md.password_set


def test_build_writes_what_bookkeeper_writes() -> None:
    md = build_ledger_metadata(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        segments=[(0, (B0, B1, B2)), Segment(2500, (B0, B3, B2))],
        last_entry_id=4999,
        length=1_048_576,
        ctime=1_700_000_000_000,
        custom_metadata=[
            ("application", b"pulsar"),
            ("component", b"managed-ledger"),
            ("pulsar/managed-ledger", TOPIC.encode()),
        ],
    )
    assert encode_ledger_metadata_v3(md) == v3(pulsar_body())


def test_build_open_ledger_stores_but_hides_last_entry_and_length() -> None:
    md = build_ledger_metadata(
        ensemble_size=1, write_quorum=1, ack_quorum=1, segments=[(0, ["a:1"])], state=LedgerState.OPEN
    )
    assert (md.last_entry_id, md.length) == (None, None)
    expected = int_field(1, 1) + int_field(2, 1) + int_field(3, 0) + int_field(4, -1) + int_field(5, 1)
    expected += segment(0, "a:1") + int_field(7, 3) + bytes_field(8, b"") + int_field(9, 1)
    assert encode_ledger_metadata_v3(md) == v3(expected)


def test_directly_constructed_metadata_encodes_and_decodes_back() -> None:
    md = LedgerMetadata(
        format_version=3,
        state=LedgerState.CLOSED,
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=1,
        last_entry_id=-1,
        length=0,
        segments=(Segment(0, ("a:1", "b:1")),),
        digest_type=None,
        password=None,
        ctime=None,
        custom_metadata=(),
        c_token=None,
    )
    assert decode_ledger_metadata(encode_ledger_metadata_v3(md)) == md


def test_replaced_fields_are_encoded() -> None:
    md = decode_ledger_metadata(v3(minimal_body(ack=None)))
    changed = dataclasses.replace(md, ack_quorum=1, last_entry_id=20, length=200)
    back = decode_ledger_metadata(encode_ledger_metadata_v3(changed))
    assert (back.ack_quorum, back.last_entry_id, back.length) == (1, 20, 200)


# --------------------------------------------------------------------------- v1 and v2


V1_CLOSED = (
    HEADER + b"1\n2\n3\n1024\n0\t10.0.0.1:3181\t10.0.0.2:3181\t10.0.0.3:3181\n"
    b"100\t10.0.0.1:3181\t10.0.0.4:3181\t10.0.0.3:3181\n199\tCLOSED"
)


def test_v1_closed_ledger() -> None:
    md = decode_ledger_metadata(V1_CLOSED)
    assert (md.format_version, md.state, md.last_entry_id, md.length) == (1, LedgerState.CLOSED, 199, 1024)
    assert (md.ensemble_size, md.write_quorum, md.ack_quorum) == (3, 2, 2)
    assert md.segments[1] == Segment(100, ("10.0.0.1:3181", "10.0.0.4:3181", "10.0.0.3:3181"))
    assert (md.digest_type, md.password, md.ctime, md.custom_metadata) == (None, None, None, ())


def test_v1_closing_line_minus_102_means_in_recovery() -> None:
    md = decode_ledger_metadata(V1_CLOSED.replace(b"199\tCLOSED", b"-102\tCLOSED"))
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.IN_RECOVERY, None, None)


def test_v1_without_closing_line_is_open_and_one_trailing_newline_is_tolerated() -> None:
    blob = V1_CLOSED.removesuffix(b"\n199\tCLOSED")
    for variant in (blob, blob + b"\n"):
        md = decode_ledger_metadata(variant)
        assert (md.state, md.last_entry_id, len(md.segments)) == (LedgerState.OPEN, None, 2)
    assert decode_ledger_metadata(V1_CLOSED + b"\n").last_entry_id == 199


@pytest.mark.parametrize(
    ("blob", "expected"),
    [
        (HEADER + b"1\n2\n3\n", "line(s)"),
        (HEADER + b"1\nx\n3\n0\n0\ta\tb\tc", "write quorum is not"),
        (HEADER + b"1\n2\n3\n0\n0\ta\tb\tc\n5\tCLOSED\n9\ta\tb\tc", "closing line is not the last"),
        (HEADER + b"1\n2\n3\n0\n0\ta\tb\tc\nlast\tCLOSED", "last entry id is not"),
        (HEADER + b"1\n2\n99999999999999999999\n0\n0\ta", "out of range"),
        (HEADER + b"1\n4\n3\n0\n0\ta\tb\tc", "write quorum 4"),
        (HEADER + b"1\n2\n3\n0\n0\ta\tb", "ensemble has 2"),
    ],
)
def test_v1_bad_input(blob: bytes, expected: str) -> None:
    err = reason(blob)
    assert expected in str(err) and err.format_version == 1


V2_TEXT = (
    b"quorumSize: 2\n"
    b"ensembleSize: 3\n"
    b"length: 2048\n"
    b"lastEntryId: 41\n"
    b"state: CLOSED\n"
    b"segment {\n"
    b'  ensembleMember: "10.0.0.1:3181"\n'
    b'  ensembleMember: "10.0.0.2:3181"\n'
    b'  ensembleMember: "10.0.0.3:3181"\n'
    b"  firstEntryId: 0\n"
    b"}\n"
    b"digestType: CRC32\n"
    b'password: "\\001pw"\n'
    b"ackQuorumSize: 2\n"
    b"ctime: 1545000000000\n"
    b"customMetadata {\n"
    b'  key: "application"\n'
    b'  value: "pulsar"\n'
    b"}\n"
)


def test_v2_text_format() -> None:
    md = decode_ledger_metadata(HEADER + b"2\n" + V2_TEXT)
    assert (md.format_version, md.state, md.last_entry_id, md.length) == (2, LedgerState.CLOSED, 41, 2048)
    assert md.segments == (Segment(0, ("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181")),)
    assert (md.digest_type, md.password, md.ctime) == (DigestType.CRC32, b"\x01pw", 1545000000000)
    assert md.custom_metadata == (("application", b"pulsar"),) and md.c_token is None
    assert decode_ledger_metadata(HEADER + b"2\n" + V2_TEXT + b"cToken: 7\n").c_token == 7


def test_v2_bad_text_reports_the_parsers_message() -> None:
    err = reason(HEADER + b"2\n" + V2_TEXT.replace(b"ctime", b"cTime"))
    assert "line 15" in str(err) and 'no field named "cTime"' in str(err) and err.format_version == 2
    assert "not valid UTF-8" in str(reason(HEADER + b"2\nquorumSize: \xff"))


@pytest.mark.parametrize(
    "blob",
    [V1_CLOSED, V1_CLOSED.replace(b"199\tCLOSED", b"-102\tCLOSED"), HEADER + b"2\n" + V2_TEXT],
    ids=["v1 closed", "v1 in recovery", "v2"],
)
def test_v1_and_v2_reencode_as_equivalent_v3(blob: bytes) -> None:
    md = decode_ledger_metadata(blob)
    encoded = encode_ledger_metadata_v3(md)
    assert encoded.startswith(HEADER + b"3\n")
    assert decode_ledger_metadata(encoded) == dataclasses.replace(md, format_version=3)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("blob", "expected", "version"),
    [
        (b"", "missing header", None),
        (b'{"quorumSize": 2}', "missing header", None),
        (b"BookieMetadataFormatVersion 3\n", "missing header", None),
        (HEADER, "without a format version", None),
        (HEADER + b"3", "ends after version 3 without a newline", None),
        (HEADER + b"\n", "empty format version", None),
        (HEADER + b"three\n", "not a decimal number: b'three'", None),
        (HEADER + b"-3\n", "not a decimal number", None),
        (HEADER + b"0\n", "unknown format version 0 (supported: 1, 2, 3)", 0),
        (HEADER + b"4\n", "unknown format version 4 (supported: 1, 2, 3)", 4),
        (HEADER + b"99999999999\n", "more than 10 digits", None),
    ],
)
def test_bad_header(blob: bytes, expected: str, version: int | None) -> None:
    err = reason(blob)
    assert expected in str(err)
    assert err.format_version == version


@pytest.mark.parametrize(
    ("blob", "expected"),
    [
        (HEADER + b"3\n", "no message after the header"),
        (HEADER + b"3\n\x80", "truncated varint"),
        (HEADER + b"3\n\xff\xff", "truncated varint"),
        (HEADER + b"3\n\x80\x80\x80\x80\x80\x01", "longer than 5 bytes"),
        (HEADER + b"3\n\x05\x08\x02", "declared message length 5 exceeds the 2 byte(s)"),
        (v3(minimal_body()) + b"\x00\x00\x00", "3 trailing byte(s)"),
        (v3(b"\x0a\xff\xff"), "not a LedgerMetadataFormat message"),
        (v3(b"\x07"), "not a LedgerMetadataFormat message"),
    ],
)
def test_bad_v3_framing(blob: bytes, expected: str) -> None:
    err = reason(blob)
    assert expected in str(err) and err.format_version == 3


def test_missing_required_fields_are_named() -> None:
    body = int_field(2, 3) + int_field(3, 0) + segment(0, "a:1", "b:1", "c:1")
    assert "missing required field(s): quorumSize, state" in str(reason(v3(body)))
    no_first = bytes_field(6, bytes_field(1, b"a:1"))
    err = reason(v3(minimal_body(ensemble=1, quorum=1, segments=()) + no_first))
    assert "segment 0: missing required field(s): firstEntryId" in str(err)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (minimal_body(state=7), "unknown state 7"),
        (minimal_body() + bytes_field(9, b"\x02"), "field ackQuorumSize (number 9) has the wrong wire type 2"),
        (minimal_body() + bytes_field(11, b"\x0a\x01\xff"), "custom metadata entry 0: key is not valid UTF-8"),
    ],
)
def test_malformed_fields(body: bytes, expected: str) -> None:
    assert expected in str(reason(v3(body)))


def test_non_utf8_bookie_id_is_rejected() -> None:
    body = minimal_body(ensemble=1, quorum=1, segments=()) + bytes_field(6, bytes_field(1, b"a\xff") + int_field(2, 0))
    assert "ensemble member 0 is not valid UTF-8" in str(reason(v3(body)))
    members = bytes_field(1, b"b:1") + bytes_field(1, b"c\xfe") + int_field(2, 0)  # the second one named
    body = minimal_body(ensemble=2, quorum=1, segments=()) + bytes_field(6, members)
    assert "segment 0: ensemble member 1 is not valid UTF-8" in str(reason(v3(body)))


ABC = ("a:1", "b:1", "c:1")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (minimal_body(quorum=4), "write quorum 4 must be between 1 and the ensemble size 3"),
        (minimal_body(quorum=0), "write quorum 0"),
        (minimal_body(ensemble=0, segments=((0, ()),)), "ensemble size 0 must be at least 1"),
        (minimal_body(ack=3), "ack quorum 3 must be between 1 and the write quorum 2"),
        (minimal_body(ack=0), "ack quorum 0"),
        (minimal_body(segments=()), "no segments"),
        (minimal_body(segments=((0, ("a:1", "b:1")),)), "ensemble has 2 bookie(s), the ensemble size is 3"),
        (minimal_body(segments=((0, ("a:1", "b:1", "a:1")),)), "bookie 'a:1' appears more than once"),
        (minimal_body(segments=((0, ("a:1", "b 1", "c:1")),)), "invalid bookie id 'b 1'"),
        (minimal_body(segments=((0, ("a:1", "", "c:1")),)), "invalid bookie id ''"),
        (minimal_body(segments=((0, ("a:1", "readonly", "c:1")),)), "invalid bookie id 'readonly'"),
        (minimal_body(segments=((5, ABC), (3, ABC))), "segment 1 (first entry 3): first entry id is below"),
        (minimal_body(segments=((-1, ABC),)), "first entry id must be between 0"),
        (minimal_body(last=-5), "closed ledger with last entry id -5 (must be >= -1)"),
        (minimal_body(length=-1), "closed ledger with length -1 (must be >= 0)"),
    ],
)
def test_inconsistent_metadata_is_rejected(body: bytes, expected: str) -> None:
    err = reason(v3(body))
    assert expected in str(err) and err.format_version == 3


def test_equal_first_entry_ids_are_allowed() -> None:
    md = decode_ledger_metadata(v3(minimal_body(segments=((0, ABC), (0, ABC), (4, ABC)))))
    assert [s.first_entry_id for s in md.segments] == [0, 0, 4]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"write_quorum": 4}, "write quorum 4"),
        ({"ack_quorum": 3}, "ack quorum 3"),
        ({"segments": [(0, ("a:1", "a:1", "b:1"))]}, "more than once"),
        ({"last_entry_id": -5}, "last entry id -5"),
        ({"ctime": 2**63}, "ctime"),
        ({"segments": []}, "no segments"),
    ],
)
def test_build_validates_like_the_decoder(overrides: dict[str, object], expected: str) -> None:
    arguments: dict[str, object] = {
        "ensemble_size": 3,
        "write_quorum": 2,
        "ack_quorum": 2,
        "segments": [(0, ABC)],
    }
    arguments |= overrides
    with pytest.raises(MetadataFormatError, match=expected.replace("(", r"\(")):
        build_ledger_metadata(**arguments)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- JSON and secrecy


def test_as_json_dict() -> None:
    md = decode_ledger_metadata(v3(pulsar_body() + custom("bin", b"\xff\x00")))
    doc = md.as_json_dict()
    assert list(doc) == [
        "format_version",
        "state",
        "ensemble_size",
        "write_quorum",
        "ack_quorum",
        "last_entry_id",
        "length",
        "digest_type",
        "ctime",
        "password_set",
        "segments",
        "custom_metadata",
    ]
    assert doc["state"] == "CLOSED" and doc["digest_type"] == "CRC32C" and doc["password_set"] is True
    assert doc["segments"] == [
        {"first_entry_id": 0, "ensemble": [B0, B1, B2]},
        {"first_entry_id": 2500, "ensemble": [B0, B3, B2]},
    ]
    assert doc["custom_metadata"] == {
        "application": "pulsar",
        "component": "managed-ledger",
        "pulsar/managed-ledger": TOPIC,
        "bin": "base64:/wA=",
    }
    assert decode_ledger_metadata(V1_CLOSED).as_json_dict()["password_set"] is False


def assert_secret_absent(text: str) -> None:
    assert "s3cr3t" not in text


def test_password_never_shows() -> None:
    md = decode_ledger_metadata(v3(pulsar_body(password=SECRET)))
    assert md.password == SECRET
    for text in (repr(md), str(md), str(md.as_json_dict())):
        assert_secret_absent(text)
    v2_text = V2_TEXT.replace(b'"\\001pw"', b'"' + SECRET + b'"')
    assert decode_ledger_metadata(HEADER + b"2\n" + v2_text).password == SECRET
    for blob in (v3(pulsar_body(password=SECRET)), HEADER + b"2\n" + v2_text):
        for mutated in mutations(blob):
            try:
                decode_ledger_metadata(mutated)
            except MetadataFormatError as err:
                assert_secret_absent(str(err))
                assert_secret_absent(repr(err.args))


def mutations(blob: bytes) -> list[bytes]:
    """Truncations, single-byte changes and appended bytes of ``blob``."""
    out = [blob[:cut] for cut in range(len(blob))]
    for i in range(len(blob)):
        for replacement in (0x00, 0x22, 0x0A, 0x20, 0x7B, 0xFF, blob[i] ^ 0x01):
            out.append(blob[:i] + bytes([replacement]) + blob[i + 1 :])
    out += [blob + b"\x00", blob + b"}\n", blob + b"password: x\n"]
    return out


def test_password_not_in_v2_parse_errors() -> None:
    for text in (
        b'password: "s3cr3t-pw\n',
        b"password: s3cr3t-pw\n",
        b"password:\n\n  s3cr3t-pw\n",
        b'password: "s3cr3t" "-pw" x\n',
        b'password: "a"\n"s3cr3t-pw" 5\n',
        b'passwrd: "s3cr3t-pw"\n',
        # the name, the colon and the value may each be on a line of their own
        b"password\n:\ns3cr3t-pw\n",
        b'password\n:\n"s3cr3t-pw\n',
        b"quorumSize: 1\npassword\n\n:\n\ns3cr3t-pw",
        b"password # the key\n : # the colon\n s3cr3t-pw\n",
        b"password\n# note\n:\n# note\ns3cr3t-pw\n",
        b'password:"s3cr3t-pw',
        b'password:"s3cr3t-pw" x',
        b'password : \n "s3cr3t-pw" x',
        b'password : \n "s3cr3t-pw\n',
        b'password\n:\n"a"\n\n"s3cr3t-pw" 5\n',
        b'password:\n"\\xzzs3cr3t-pw"\n',
        b"password:\n[\ns3cr3t-pw\n]\n",
        b"password:\n{\ns3cr3t-pw\n}\n",
        b"Password\n:\ns3cr3t-pw\n",
        b'password: "s3cr3t-pw" quorumSize: zz\n',
        b'password: "s3cr3t-pw"\npassword\n:\ns3cr3t-pw\n',
    ):
        err = reason(HEADER + b"2\n" + text)
        assert_secret_absent(str(err))


def test_v2_parse_errors_that_may_quote_the_password_give_only_their_position() -> None:
    err = reason(HEADER + b"2\npassword\n:\ns3cr3t-pw\n")
    assert str(err) == (
        "invalid ledger metadata: v2 text does not parse at line 3 column 1 "
        "(the parser's message is withheld: it may quote the password)"
    )


def test_v2_parse_errors_elsewhere_stay_readable() -> None:
    err = reason(HEADER + b'2\nquorumSize: zz\npassword: "s3cr3t-pw"\n')
    assert str(err).endswith("at line 1 column 13: Couldn't parse integer: zz")
    err = reason(HEADER + b'2\npassword: "s3cr3t-pw"\nquorumSize: zz\n')
    assert str(err).endswith("at line 2 column 13: Couldn't parse integer: zz")
    # on the password's lines (until a line starts with another field), only the position
    err = reason(HEADER + b'2\npassword: "zz" quorumSize: zz\n')
    assert str(err).endswith("at line 1 column 28 (the parser's message is withheld: it may quote the password)")
    err = reason(HEADER + b'2\npassword: "a"\n"zz" zz\nquorumSize: 1\n')
    assert str(err).endswith("(the parser's message is withheld: it may quote the password)")


# --------------------------------------------------------------------------- properties

BOOKIE_IDS = st.text(string.ascii_letters + string.digits + ":_.-", min_size=1, max_size=12).filter(
    lambda s: s != "readonly"
)
INT64 = st.integers(-(2**63), 2**63 - 1)
ENTRY_IDS = st.integers(0, 2**63 - 1)


@st.composite
def valid_metadata(draw: st.DrawFn) -> LedgerMetadata:
    size = draw(st.integers(1, 5))
    write = draw(st.integers(1, size))
    firsts = sorted(draw(st.lists(ENTRY_IDS, min_size=1, max_size=4)))
    state = draw(st.sampled_from(LedgerState))
    closed = state is LedgerState.CLOSED
    return build_ledger_metadata(
        ensemble_size=size,
        write_quorum=write,
        ack_quorum=draw(st.integers(1, write)),
        segments=[(first, draw(st.lists(BOOKIE_IDS, min_size=size, max_size=size, unique=True))) for first in firsts],
        state=state,
        last_entry_id=draw(st.integers(-1, 2**63 - 1) if closed else INT64),
        length=draw(st.integers(0, 2**63 - 1) if closed else INT64),
        digest_type=draw(st.none() | st.sampled_from(DigestType)),
        password=draw(st.none() | st.binary(max_size=12)),
        ctime=draw(st.none() | INT64),
        custom_metadata=draw(st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=8)), max_size=3)),
        c_token=draw(st.none() | INT64),
    )


@FAST
@given(valid_metadata())
def test_valid_metadata_round_trips_exactly(md: LedgerMetadata) -> None:
    blob = encode_ledger_metadata_v3(md)
    back = decode_ledger_metadata(blob)
    assert back == md
    assert back.as_json_dict() == md.as_json_dict()
    assert encode_ledger_metadata_v3(back) == blob


# --------------------------------------------------------------------------- fuzz: decode or MetadataFormatError
#
# The inputs are valid blobs (v1, v2 and v3, written here from a model of the stored fields) with ONE change, so
# that a good share still decodes and has its value checked, and a good share is refused. A decoded value must
# hold the format's invariants (stated below without the decoder's code), be what the stored fields say, and
# survive re-encoding. Each fuzz test counts both outcomes and fails when either falls below its share: inputs
# that never decode (or never fail) would otherwise pass while checking nothing.

FUZZ = settings(max_examples=300, deadline=None, database=None)
#: The protobuf runtime warns about fuzzed escapes in text ("\\777", "\\d"); the test is about what it then returns.
QUIET_PROTOBUF = pytest.mark.filterwarnings("ignore:invalid .*escape sequence:DeprecationWarning")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
STATE_NAMES = {1: "OPEN", 2: "IN_RECOVERY", 3: "CLOSED"}
DIGEST_NAMES = {1: "CRC32", 2: "HMAC", 3: "CRC32C", 4: "DUMMY"}
#: What BookKeeper accepts as a bookie id (BookieId): letters, digits and ``:_.-``, and not ``readonly``.
BOOKIE_ID_RULE = re.compile(r"[a-zA-Z0-9:_.-]+")
BOOKIE_POOL = ("bk1:3181", "10.0.0.2:3181", "bookie-3.ns.svc:3181", "b_4", "b.5", "B6")
BAD_BOOKIE_IDS = ("readonly", "a b", "", "bk/1")
V1_INT = re.compile(r"[+-]?[0-9]{1,20}")
V1_ALPHABET = "0123456789\t\n-+CLOSEDab:."
V2_ALPHABET = ' \n{}:"\\0123456789abcdefghijklmnopqrstuvwxyzCEDLNOSTU_#-'

Ensemble = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Body:
    """The fields of a stored metadata body, as this test writes them (None: the field is not stored)."""

    quorum: int | None
    ensemble: int | None
    length: int | None
    last: int | None
    state: int | None  # 1 OPEN, 2 IN_RECOVERY, 3 CLOSED
    segments: tuple[tuple[int, Ensemble], ...]
    ack: int | None = None
    digest: int | None = None
    password: bytes | None = None
    ctime: int | None = None
    custom: tuple[tuple[str, bytes], ...] = ()
    c_token: int | None = None

    def v1_ready(self) -> bool:
        """Whether v1 can store this body: v1 always has WQ, E, length and a state, a lastEntryId when closed."""
        stored = (self.quorum, self.ensemble, self.length, self.state)
        return None not in stored and (self.state != 3 or self.last is not None)


def octal(value: bytes) -> str:
    return "".join(f"\\{byte:03o}" for byte in value)


def write_body(body: Body, version: int) -> bytes:
    """The blob BookKeeper would store for ``body`` in format ``version`` (v1 ignores AQ and the optional fields)."""
    if version == 3:
        out = b"".join(
            int_field(number, value)
            for number, value in ((1, body.quorum), (2, body.ensemble), (3, body.length), (4, body.last))
            if value is not None
        )
        out += b"" if body.state is None else int_field(5, body.state)
        out += b"".join(segment(first, *bookies) for first, bookies in body.segments)
        out += b"" if body.digest is None else int_field(7, body.digest)
        out += b"" if body.password is None else bytes_field(8, body.password)
        out += b"".join(
            int_field(number, value) for number, value in ((9, body.ack), (10, body.ctime)) if value is not None
        )
        out += b"".join(custom(key, value) for key, value in body.custom)
        return v3(out + (b"" if body.c_token is None else int_field(12, body.c_token)))
    if version == 2:
        fields = (("quorumSize", body.quorum), ("ensembleSize", body.ensemble), ("length", body.length))
        lines = [f"{name}: {value}" for name, value in (*fields, ("lastEntryId", body.last)) if value is not None]
        lines += [] if body.state is None else [f"state: {STATE_NAMES[body.state]}"]
        for first, bookies in body.segments:
            lines += ["segment {", *(f'  ensembleMember: "{b}"' for b in bookies), f"  firstEntryId: {first}", "}"]
        lines += [] if body.digest is None else [f"digestType: {DIGEST_NAMES[body.digest]}"]
        lines += [] if body.password is None else [f'password: "{octal(body.password)}"']
        optional = (("ackQuorumSize", body.ack), ("ctime", body.ctime))
        lines += [f"{name}: {value}" for name, value in optional if value is not None]
        for key, value in body.custom:
            lines += ["customMetadata {", f'  key: "{octal(key.encode())}"', f'  value: "{octal(value)}"', "}"]
        lines += [] if body.c_token is None else [f"cToken: {body.c_token}"]
        return HEADER + b"2\n" + "\n".join(lines).encode() + b"\n"
    lines = [str(body.quorum), str(body.ensemble), str(body.length)]
    lines += ["\t".join([str(first), *bookies]) for first, bookies in body.segments]
    closing = {1: [], 2: ["-102\tCLOSED"], 3: [f"{body.last}\tCLOSED"]}[body.state or 1]
    return HEADER + b"1\n" + "\n".join(lines + closing).encode()


def expected_metadata(body: Body, version: int) -> dict[str, object] | None:
    """The public fields a BookKeeper reader gets from ``body`` stored in format ``version``, or None when the
    metadata is not valid: WQ, E, length and state stored; 1 <= AQ <= WQ <= E (AQ is WQ when not stored, and in
    v1); at least one segment, first entry ids >= 0 and never decreasing, each ensemble E distinct valid bookie
    ids; a closed ledger's lastEntryId (-1 when not stored; v1 calls -102 in recovery) >= -1 and length >= 0."""
    if None in (body.quorum, body.ensemble, body.length, body.state):
        return None
    assert body.quorum is not None and body.ensemble is not None and body.length is not None
    write, size = body.quorum, body.ensemble
    ack = body.ack if version > 1 and body.ack is not None else write
    if not 1 <= ack <= write <= size or not body.segments:
        return None
    previous = 0
    for first, bookies in body.segments:
        if first < previous or len(bookies) != size or len(set(bookies)) != size:
            return None
        if any(not BOOKIE_ID_RULE.fullmatch(bookie) or bookie == "readonly" for bookie in bookies):
            return None
        previous = first
    last = -1 if body.last is None else body.last
    state = {1: LedgerState.OPEN, 2: LedgerState.IN_RECOVERY, 3: LedgerState.CLOSED}[body.state or 1]
    if version == 1 and last == V1_IN_RECOVERY_LAST_ENTRY:
        state = LedgerState.IN_RECOVERY
    closed = state is LedgerState.CLOSED
    if closed and (last < -1 or body.length < 0):
        return None
    plain = version == 1
    return {
        "format_version": version,
        "state": state,
        "ensemble_size": size,
        "write_quorum": write,
        "ack_quorum": ack,
        "last_entry_id": last if closed else None,
        "length": body.length if closed else None,
        "segments": tuple(Segment(first, bookies) for first, bookies in body.segments),
        "digest_type": None if plain or body.digest is None else DigestType(DIGEST_NAMES[body.digest]),
        "password": None if plain else body.password,
        "ctime": None if plain else body.ctime,
        "custom_metadata": () if plain else body.custom,
        "c_token": None if plain else body.c_token,
    }


def public_fields(md: LedgerMetadata) -> dict[str, object]:
    return {f.name: getattr(md, f.name) for f in dataclasses.fields(md) if f.compare}


def read_blob(blob: bytes) -> tuple[Body, int] | None:
    """The stored fields and format version of a blob, read with the protobuf runtime (v2, v3) or by splitting
    lines (v1), or None when it is not a blob of a supported format at all."""
    header = re.match(rb"([0-9]{1,10})\n", blob[len(HEADER) :]) if blob.startswith(HEADER) else None
    if header is None or int(header[1]) not in (1, 2, 3):
        return None
    version, start = int(header[1]), len(HEADER) + header.end()
    try:
        if version == 1:
            v1_body = read_v1(blob[start:].decode())
            return None if v1_body is None else (v1_body, 1)
        msg = pb.LedgerMetadataFormat()
        if version == 2:
            text_format.Merge(blob[start:].decode(), msg)
        else:
            size, begin = varint_at(blob, start, limit=5)  # a varint32
            if begin + size != len(blob):
                return None
            msg.MergeFromString(blob[begin:])
        message_body = body_of_message(msg)
    except Exception:  # anything the runtime refuses is not a blob
        return None
    return None if message_body is None else (message_body, version)


def varint_at(data: bytes, start: int, limit: int = 10) -> tuple[int, int]:
    """The varint of at most ``limit`` bytes at ``start`` and the offset after it."""
    value = shift = 0
    for at in range(start, min(start + limit, len(data))):
        value |= (data[at] & 0x7F) << shift
        shift += 7
        if data[at] < 0x80:
            return value, at + 1
    raise ValueError("no varint")


def body_of_message(msg: pb.LedgerMetadataFormat) -> Body | None:
    def get(name: str) -> int | None:
        value: int | None = getattr(msg, name) if msg.HasField(name) else None
        return value

    segments = tuple((s.firstEntryId, tuple(s.ensembleMember)) for s in msg.segment)
    entries = tuple((entry.key, entry.value) for entry in msg.customMetadata)
    texts = [bookie for _, bookies in segments for bookie in bookies] + [key for key, _ in entries]
    if not all(s.HasField("firstEntryId") for s in msg.segment) or not all(isinstance(t, str) for t in texts):
        return None
    return Body(
        quorum=get("quorumSize"),
        ensemble=get("ensembleSize"),
        length=get("length"),
        last=get("lastEntryId"),
        state=get("state"),
        segments=segments,
        ack=get("ackQuorumSize"),
        digest=get("digestType"),
        password=msg.password if msg.HasField("password") else None,
        ctime=get("ctime"),
        custom=entries,
        c_token=get("cToken"),
    )


def read_v1(text: str) -> Body | None:
    """v1 (facts, section 2): WQ, E and length lines, ``first<TAB>bookie...`` lines, optional ``last<TAB>CLOSED``."""
    lines = text.removesuffix("\n").split("\n")
    closing = lines[-1].split("\t")
    closed = len(closing) == 2 and closing[1] == "CLOSED"
    rows = [line.split("\t") for line in lines[3 : -1 if closed else None]]
    numbers = [*lines[:3], *(row[0] for row in rows), *(closing[:1] if closed else [])]
    if len(lines) < 4 or any(row[1:] == ["CLOSED"] for row in rows) or not all(map(V1_INT.fullmatch, numbers)):
        return None
    quorum, size, length = (int(line) for line in lines[:3])
    last = int(closing[0]) if closed else None
    if not (INT32_MIN <= quorum <= INT32_MAX and INT32_MIN <= size <= INT32_MAX):
        return None
    if not all(INT64_MIN <= int(number) <= INT64_MAX for number in numbers[2:]):
        return None
    state = 1 if last is None else 2 if last == V1_IN_RECOVERY_LAST_ENTRY else 3
    segments = tuple((int(row[0]), tuple(row[1:])) for row in rows)
    return Body(quorum=quorum, ensemble=size, length=length, last=last, state=state, segments=segments)


def assert_metadata_invariants(md: LedgerMetadata) -> None:
    """What any ledger's metadata must satisfy, checked without the decoder's own code."""
    assert md.format_version in (1, 2, 3)
    assert 1 <= md.ack_quorum <= md.write_quorum <= md.ensemble_size, "quorums out of order: need 1 <= AQ <= WQ <= E"
    assert md.segments and md.segments[0].first_entry_id >= 0
    firsts = [segment.first_entry_id for segment in md.segments]
    assert firsts == sorted(firsts), f"segments out of order: {firsts}"
    for segment in md.segments:
        assert len(segment.ensemble) == md.ensemble_size, f"ensemble {segment.ensemble} is not of size E"
        assert len(set(segment.ensemble)) == md.ensemble_size
        assert all(BOOKIE_ID_RULE.fullmatch(b) and b != "readonly" for b in segment.ensemble), segment.ensemble
    if md.state is LedgerState.CLOSED:
        assert md.last_entry_id is not None and md.last_entry_id >= -1, f"closed with last entry {md.last_entry_id}"
        assert md.length is not None and md.length >= 0, f"closed with length {md.length}"
    else:
        assert md.last_entry_id is None and md.length is None


def decodes_or_rejects(blob: bytes, model: tuple[Body, int] | None = None) -> str:
    """``"rejected"`` when the blob raises MetadataFormatError (and the ``model`` it was written from, when given,
    is not valid metadata); ``"decoded"`` when it decodes to metadata that holds the format's invariants, is
    exactly what its stored fields say (and what the ``model`` says), and survives re-encoding (as v3) unchanged
    but for its format version."""
    expected = None if model is None else expected_metadata(*model)
    try:
        md = decode_ledger_metadata(blob)
    except MetadataFormatError:
        assert expected is None, f"valid metadata was refused: {expected}"
        return "rejected"
    assert model is None or expected is not None, f"decoded {md}, but the stored fields are not valid metadata"
    assert_metadata_invariants(md)
    stored = read_blob(blob)
    assert stored is not None, f"decoded {md} from a blob that is no ledger metadata"
    assert public_fields(md) == expected_metadata(*stored)
    assert expected is None or public_fields(md) == expected
    again = decode_ledger_metadata(encode_ledger_metadata_v3(md))
    assert dataclasses.replace(again, format_version=md.format_version) == md
    return "decoded"


@st.composite
def bodies(draw: st.DrawFn) -> Body:
    """Valid metadata near its boundaries: WQ often E, AQ often WQ (or not stored), closed ledgers often empty,
    often several segments, some starting at the same entry or the next, ensembles from a small pool of bookies."""
    size = draw(st.integers(1, 4))
    write = size if draw(st.booleans()) else draw(st.integers(1, size))
    state = draw(st.sampled_from([3, 1, 2, 3]))
    if state == 3:
        last: int | None = draw(st.sampled_from([-1, -1, 0, 99, INT64_MAX]))
        length = draw(st.sampled_from([0, 0, 1, 4096, INT64_MAX]))
    else:
        last = draw(st.sampled_from([None, -1, 17, INT64_MIN]))
        length = draw(st.sampled_from([0, -7, 4096]))
    firsts = [draw(st.sampled_from([0, 0, 3]))]
    for _ in range(draw(st.sampled_from([0, 1, 1, 2]))):
        firsts.append(firsts[-1] + draw(st.sampled_from([0, 1, 1, 1000, 2**40])))
    return Body(
        quorum=write,
        ensemble=size,
        length=length,
        last=last,
        state=state,
        segments=tuple((first, tuple(draw(st.permutations(BOOKIE_POOL))[:size])) for first in firsts),
        ack=draw(st.sampled_from([None, write, write, 1])),
        digest=draw(st.sampled_from([None, 3, 1])),
        password=draw(st.sampled_from([None, b"", b"pw\x00"])),
        ctime=draw(st.sampled_from([None, 1_700_000_000_000])),
        custom=draw(st.sampled_from([(), (("pulsar/managed-ledger", TOPIC.encode()), ("bin", b"\xff"))])),
        c_token=draw(st.sampled_from([None, 7])),
    )


def body_of(md: LedgerMetadata) -> Body:
    """The stored fields of valid metadata (from the strategy above the fuzz tests), as BookKeeper writes them."""
    stored = read_blob(encode_ledger_metadata_v3(md))
    assert stored is not None
    return stored[0]


#: Valid metadata: near its boundaries, or anywhere (random 63-bit entry ids, any text in custom keys).
VALID_BODIES = st.one_of(bodies(), valid_metadata().map(body_of))


@st.composite
def valid_blobs(draw: st.DrawFn) -> tuple[Body, int]:
    """A valid body and a format that can store it (v1 only for what v1 can say)."""
    body = draw(VALID_BODIES)
    return body, draw(st.sampled_from([3, 2, 1, 3, 2] if body.v1_ready() else [3, 2]))


def number_spots(blob: bytes) -> list[int]:
    """Where the blob's numbers are: the digits of v1 and v2 text, the first value byte of each varint field of a
    v3 message (top level and segments)."""
    if not blob.startswith(HEADER + b"3\n"):
        return [m.start() for m in re.finditer(rb"[0-9-]", blob) if m.start() > len(HEADER) + 1]
    spots: list[int] = []
    _, begin = varint_at(blob, len(HEADER) + 2)
    fields = [(begin, len(blob))]
    while fields:
        at, end = fields.pop()
        while at < end:
            tag, at = varint_at(blob, at)
            if tag & 7 == 0:
                spots.append(at)
                _, at = varint_at(blob, at)
            else:
                size, at = varint_at(blob, at)
                if tag >> 3 == 6:
                    fields.append((at, at + size))
                at += size
    return spots


INT32_FIELDS = ("quorum", "ensemble", "ack")
INT64_FIELDS = ("length", "last", "ctime", "c_token")
EDGES = {32: (0, 1, -1, INT32_MAX, INT32_MIN), 64: (0, -1, -2, INT64_MAX, INT64_MIN)}
#: Hypothesis draws the ends of a list more often than its middle: a relation (the most telling change) is first.
BODY_CHANGES = (
    "relation",
    "nudge",
    "edge",
    "segments",
    "ensemble",
    "relation",
    "nudge",
    "segments",
    "state",
    "drop",
    "none",
)


@st.composite
def one_body_change(draw: st.DrawFn, body: Body, version: int) -> tuple[Body, str]:
    """``body`` with ONE change that format ``version`` can store: a number moved by one, or set to a boundary of
    its type or of its relation to another field (WQ = E + 1, AQ = WQ + 1, a closed length of -1, a segment
    starting one entry before the previous one, ...); two segments swapped, one duplicated or deleted; a bookie
    dropped, duplicated, added or replaced by an invalid id; another state; a field no longer stored (v2, v3)."""
    kind = draw(st.sampled_from(BODY_CHANGES))
    plain = version == 1
    if kind == "drop" and plain:
        kind = "segments"
    if kind in ("nudge", "edge"):
        names = [n for n in INT32_FIELDS + INT64_FIELDS if getattr(body, n) is not None]
        in_v1 = ("quorum", "ensemble", "length", "last") if body.state == 3 else ("quorum", "ensemble", "length")
        name = draw(st.sampled_from([n for n in names if not plain or n in in_v1] + ["first"]))
        bits = 32 if name in INT32_FIELDS else 64
        low, high = EDGES[bits][4], EDGES[bits][3]
        at = draw(st.integers(0, len(body.segments) - 1)) if name == "first" else 0
        old: int = body.segments[at][0] if name == "first" else getattr(body, name)
        if kind == "edge":
            new = draw(st.sampled_from(EDGES[bits]))
        else:
            delta = draw(st.sampled_from([1, -1]))
            new = old + delta if low <= old + delta <= high else old - delta
        return set_number(body, name, at, new), f"{kind} {name}{at if name == 'first' else ''}: {old} -> {new}"
    if kind == "relation":  # one rule of the format, then one field just past (or at) its bound
        write, size = body.quorum or 0, body.ensemble or 0
        rules = [
            [("length", 0, -1), ("length", 0, 0), ("last", 0, -2), ("last", 0, -1)] if body.state == 3 else [],
            ([] if plain else [("ack", 0, write + 1), ("quorum", 0, (body.ack or write) - 1), ("ack", 0, write)])
            + [("quorum", 0, size + 1), ("quorum", 0, size)],
            [("ensemble", 0, write - 1), ("ensemble", 0, size + 1)],
            [("first", i, body.segments[i - 1][0] + step) for i in range(1, len(body.segments)) for step in (-1, 0)],
        ]
        name, at, new = draw(st.sampled_from(draw(st.sampled_from([rule for rule in rules if rule]))))
        return set_number(body, name, at, new), f"set {name}{at or ''} to {new}"
    segments = list(body.segments)
    if kind == "segments" and segments:
        at = draw(st.integers(0, len(segments) - 1))
        how = draw(
            st.sampled_from(["swap", "duplicate", "delete"] if at + 1 < len(segments) else ["duplicate", "delete"])
        )
        if how == "swap":
            segments[at], segments[at + 1] = segments[at + 1], segments[at]
        else:
            segments[at : at + 1] = [segments[at]] * (2 if how == "duplicate" else 0)
        return dataclasses.replace(body, segments=tuple(segments)), f"{how} segment {at}"
    if kind == "ensemble" and segments:
        at = draw(st.integers(0, len(segments) - 1))
        first, bookies = segments[at]
        members = list(bookies)
        how = draw(st.sampled_from(["drop", "duplicate", "add", "invalid"]))
        spot = draw(st.integers(0, max(len(members) - 1, 0)))
        if how == "add" or not members:
            members.append(draw(st.sampled_from([b for b in BOOKIE_POOL if b not in members] or ["b7"])))
        elif how == "drop":
            del members[spot]
        else:
            other = draw(st.sampled_from(BAD_BOOKIE_IDS)) if how == "invalid" else members[spot - 1]
            members[spot] = other
        segments[at] = (first, tuple(members))
        return dataclasses.replace(body, segments=tuple(segments)), f"{how} a bookie of segment {at}: {members}"
    if kind == "state":
        states = [s for s in (1, 2, 3) if s != body.state and (not plain or s != 3 or body.last is not None)]
        new_state = draw(st.sampled_from(states))
        return dataclasses.replace(body, state=new_state), f"state {body.state} -> {new_state}"
    if kind == "drop":
        stored = [f.name for f in dataclasses.fields(body) if f.name not in ("segments", "custom")]
        name = draw(st.sampled_from([n for n in stored if getattr(body, n) is not None]))
        absent: dict[str, Any] = {name: None}
        return dataclasses.replace(body, **absent), f"drop {name}"
    return body, "none"


def set_number(body: Body, name: str, at: int, value: int) -> Body:
    if name != "first":
        number: dict[str, Any] = {name: value}
        return dataclasses.replace(body, **number)
    segments = list(body.segments)
    segments[at] = (value, segments[at][1])
    return dataclasses.replace(body, segments=tuple(segments))


@QUIET_PROTOBUF
def test_arbitrary_bytes_decode_or_raise_metadata_format_error() -> None:
    """A valid v1, v2 or v3 blob with one byte changed anywhere (header included; three in four changes on a
    number) decodes to what its stored fields say, or raises MetadataFormatError."""
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(st.data(), valid_blobs())
    def run(data: st.DataObject, valid: tuple[Body, int]) -> None:
        blob = write_body(*valid)
        changed = data.draw(one_byte_change(blob, hot=number_spots(blob)))
        outcomes[decodes_or_rejects(changed.data, valid if changed.change == "none" else None)] += 1

    run()
    assert_fair_shares(outcomes, decoded=0.15, rejected=0.3)


@QUIET_PROTOBUF
def test_valid_header_then_random_bytes_decode_or_raise() -> None:
    """A valid header, then a valid body with one change: for v1 and v2 text a character, a number, a token or a
    line; for v3 a byte. The blob decodes to what its stored fields say, or raises MetadataFormatError."""
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(st.data(), valid_blobs())
    def run(data: st.DataObject, valid: tuple[Body, int]) -> None:
        body, version = valid
        blob = write_body(body, version)
        head = len(HEADER) + 2
        if version == 3:
            changed = data.draw(one_byte_change(blob[head:], hot=[at - head for at in number_spots(blob)]))
        else:
            changed = data.draw(one_text_change(blob[head:].decode(), V1_ALPHABET if version == 1 else V2_ALPHABET))
        outcomes[decodes_or_rejects(blob[:head] + changed.data, valid if changed.change == "none" else None)] += 1

    run()
    assert_fair_shares(outcomes, decoded=0.15, rejected=0.3)


@QUIET_PROTOBUF
def test_corrupted_valid_blobs_decode_or_raise() -> None:
    """Valid metadata with one stored field or segment changed, written as v1, v2 or v3: it decodes exactly when
    the changed fields are valid metadata (stated above), to exactly what they say, else MetadataFormatError."""
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(st.data(), valid_blobs())
    def run(data: st.DataObject, valid: tuple[Body, int]) -> None:
        body, version = valid
        changed, _ = data.draw(one_body_change(body, version))
        outcomes[decodes_or_rejects(write_body(changed, version), (changed, version))] += 1

    run()
    assert_fair_shares(outcomes, decoded=0.2, rejected=0.3)
