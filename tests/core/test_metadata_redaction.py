"""Ledger metadata without its password: the same metadata but for the password, and nothing of what cannot be read.

The blobs are written by the metadata tests' own writer (byte by byte for v3, as text for v2 and v1), independently
of the codec and of the redaction.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core import ledger_metadata, metadata_redaction
from scrutiny.core.errors import MetadataFormatError
from scrutiny.core.ledger_metadata import decode_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.metadata_redaction import RedactedMetadata, redact_ledger_metadata, redacted_metadata
from scrutiny.proto import bookkeeper_formats_pb2 as pb
from tests.core.test_ledger_metadata import (
    HEADER,
    SECRET,
    Body,
    bytes_field,
    custom,
    int_field,
    minimal_body,
    octal,
    pulsar_body,
    v3,
    valid_blobs,
    varint,
    varint_at,
    write_body,
)
from tests.support.strategies import one_byte_change

pytestmark = pytest.mark.unit

PROPERTIES = settings(max_examples=300, deadline=None, database=None)
#: A password no blob of these tests holds by chance: 16 bytes, some of them not text.
PASSWORD = b"\xa7zq-PASSWORD-\x01\xfe9"


def error_of(blob: bytes) -> str:
    with pytest.raises(MetadataFormatError) as info:
        decode_ledger_metadata(blob)
    return str(info.value)


def forms(password: bytes) -> tuple[bytes, ...]:
    """How a password can appear in a blob: its bytes, and the octal escapes of v2 text."""
    return (password, octal(password).encode())


def assert_absent(password: bytes, data: bytes) -> None:
    for form in forms(password):
        assert form not in data, f"{form!r} in {data!r}"


# --------------------------------------------------------------------------- metadata that decodes


@PROPERTIES
@given(valid_blobs(), st.binary(min_size=1, max_size=24))
def test_redacted_metadata_decodes_the_same_but_for_the_password(valid: tuple[Body, int], password: bytes) -> None:
    body, version = valid
    body = dataclasses.replace(body, password=password)
    blob = write_body(body, version)
    original = decode_ledger_metadata(blob)
    redacted = redacted_metadata(blob)
    assert redacted.decode_error == ""
    assert redacted.data.startswith(HEADER + f"{version}\n".encode())
    back = decode_ledger_metadata(redacted.data)
    if version == 1:  # v1 stores no password: nothing to take out
        assert original.password is None and redacted.data == blob
        return
    assert back == dataclasses.replace(original, password=b"")
    assert back.password_set and back.digest_type == original.digest_type and back.format_version == version
    assert back.as_json_dict() == original.as_json_dict()
    if version == 3:  # every byte but the password's kept, in place
        assert redacted.data == write_body(dataclasses.replace(body, password=b""), 3)
    rest = write_body(dataclasses.replace(body, password=None), version)
    if len(password) >= 4 and not any(form in rest for form in forms(password)):
        assert_absent(password, redacted.data)


@PROPERTIES
@given(valid_blobs(), st.sampled_from([None, b""]))
def test_metadata_without_a_password_is_returned_byte_for_byte(valid: tuple[Body, int], password: bytes | None) -> None:
    body, version = valid
    blob = write_body(dataclasses.replace(body, password=password), version)
    redacted = redacted_metadata(blob)
    if version == 2 and password is not None:  # an empty password in text: written again, still empty
        assert decode_ledger_metadata(redacted.data) == decode_ledger_metadata(blob)
    else:
        assert redacted == RedactedMetadata(blob) and redact_ledger_metadata(blob) == blob


def test_a_pulsar_ledger_keeps_every_other_byte_and_its_unknown_fields() -> None:
    unknown = int_field(99, 5) + bytes_field(100, b"newer bookkeeper")
    blob = v3(pulsar_body(password=PASSWORD, tail=unknown))
    redacted = redact_ledger_metadata(blob)
    assert redacted == v3(pulsar_body(password=b"", tail=unknown))
    assert PASSWORD not in redacted
    empty = decode_ledger_metadata(redacted)
    assert empty == dataclasses.replace(decode_ledger_metadata(blob), password=b"") and empty.password_set
    assert encode_ledger_metadata_v3(empty) == redacted  # the re-encoding keeps the unknown fields too


def test_every_password_field_is_emptied_not_only_the_last() -> None:
    """Protobuf keeps the last of a field written twice: an earlier password is not read, but it is stored."""
    body = minimal_body()
    blob = v3(bytes_field(8, PASSWORD) + body + bytes_field(8, b""))
    assert decode_ledger_metadata(blob).password == b""
    redacted = redact_ledger_metadata(blob)
    assert PASSWORD not in redacted and redacted == v3(body + bytes_field(8, b""))
    text = HEADER + b'2\npassword: "' + octal(PASSWORD).encode() + b'"\n' + v2_fields() + b'password: ""\n'
    redacted = redact_ledger_metadata(text)
    assert_absent(PASSWORD, redacted)
    assert decode_ledger_metadata(redacted) == decode_ledger_metadata(text)


def v2_fields() -> bytes:
    return (
        b"quorumSize: 2\nensembleSize: 3\nlength: 100\nlastEntryId: 9\nstate: CLOSED\n"
        b'segment {\n  ensembleMember: "a:1"\n  ensembleMember: "b:1"\n  ensembleMember: "c:1"\n  firstEntryId: 0\n}\n'
    )


def test_v2_is_written_again_without_comments_and_with_backslashes_the_parser_takes() -> None:
    value = b"\\" * 40  # stored as octal escapes: printed as protobuf does, 80 backslashes in a row
    text = (
        HEADER
        + b"2\n"
        + v2_fields()
        + b'# the password: "'
        + PASSWORD.hex().encode()
        + b'"\npassword: "'
        + octal(PASSWORD).encode()
        + b'"\ncustomMetadata {\n  key: "k"\n  value: "'
        + octal(value).encode()
        + b'"\n}\n'
    )
    original = decode_ledger_metadata(text)
    redacted = redact_ledger_metadata(text)
    assert_absent(PASSWORD, redacted)
    assert PASSWORD.hex().encode() not in redacted
    assert decode_ledger_metadata(redacted) == dataclasses.replace(original, password=b"")
    assert original.custom_metadata == (("k", value),)


# --------------------------------------------------------------------------- bytes that do not decode


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\x00junk" + PASSWORD,
        PASSWORD,
        HEADER + b"9\n" + PASSWORD,  # a format this version does not know
        HEADER + b"3",  # no newline after the version
        v3(pulsar_body(password=PASSWORD))[:-5],  # truncated: the length prefix says more
        v3(pulsar_body(password=PASSWORD)) + b"\x00",  # a trailing byte after the message
        v3(b"\xff" + bytes_field(8, PASSWORD)),  # not a protobuf message
        HEADER + b"3\n" + b"\xff" * 6 + bytes_field(8, PASSWORD),  # a varint length of more than 5 bytes
        HEADER + b'2\npassword: "' + octal(PASSWORD).encode() + b'"\nquorumSize: 2 x\n',  # text that does not parse
        HEADER + b'2\npassword: "' + PASSWORD.hex().encode() + b"\\" * 65 + b'"\n',  # refused before the parser
        HEADER + b'2\npassword: "' + PASSWORD + b'"\n',  # not UTF-8
        HEADER + b"1\n2\n3\nx" + PASSWORD,  # v1 lines that do not read
    ],
    ids=[
        "empty",
        "no header",
        "only the password",
        "unknown version",
        "no newline",
        "truncated v3",
        "trailing byte",
        "not protobuf",
        "long varint length",
        "v2 parse error",
        "v2 backslashes",
        "v2 not utf-8",
        "bad v1",
    ],
)
def test_bytes_that_cannot_be_searched_give_nothing_but_their_decode_error(blob: bytes) -> None:
    redacted = redacted_metadata(blob)
    assert redacted == RedactedMetadata(b"", error_of(blob))
    assert redacted.decode_error  # what a consumer reports instead of the error of no bytes


@pytest.mark.parametrize(
    "blob",
    [
        v3(minimal_body(quorum=4) + bytes_field(8, PASSWORD)),  # WQ above E
        v3(minimal_body(segments=()) + bytes_field(8, PASSWORD) + custom("k", b"v")),  # no segment
        v3(int_field(1, 2) + bytes_field(8, PASSWORD)),  # required fields missing
        v3(minimal_body() + bytes_field(8, PASSWORD) + int_field(5, 9)),  # an unknown state
        HEADER
        + b"2\n"
        + v2_fields().replace(b"quorumSize: 2", b"quorumSize: 4")
        + b'password: "pw-'
        + PASSWORD.hex().encode()
        + b'"\n',
        HEADER + b'2\nquorumSize: 2\npassword: "' + octal(PASSWORD).encode() + b'"\n',
    ],
    ids=["v3 quorum", "v3 no segment", "v3 required", "v3 unknown state", "v2 quorum", "v2 required"],
)
def test_undecodable_metadata_whose_message_parses_keeps_it_without_the_password(blob: bytes) -> None:
    redacted = redacted_metadata(blob)
    assert redacted.data and redacted.decode_error == error_of(blob)
    assert_absent(PASSWORD, redacted.data)
    assert PASSWORD.hex().encode() not in redacted.data
    assert error_of(redacted.data) == redacted.decode_error  # still undecodable, for the same reason
    assert redacted.data.startswith(blob[: len(HEADER) + 2])


def test_undecodable_metadata_without_a_password_is_left_as_it_is() -> None:
    blob = v3(minimal_body(quorum=4))
    assert redacted_metadata(blob) == RedactedMetadata(blob, error_of(blob))


@pytest.mark.parametrize(
    "field",
    [
        int_field(8, 123456789),  # a varint where the password's bytes should be
        varint(8 << 3 | 3) + bytes_field(1, PASSWORD) + varint(8 << 3 | 4),  # a group holding them
        varint(8 << 3 | 1) + PASSWORD[:8],  # 8 of them as a fixed64
    ],
    ids=["varint", "group", "fixed64"],
)
def test_a_password_field_of_another_wire_type_is_not_given(field: bytes) -> None:
    """The decoder refuses such a field; emptied, the metadata would decode: nothing is given, only the error."""
    blob = v3(minimal_body() + field)
    redacted = redacted_metadata(blob)
    assert "wrong wire type" in redacted.decode_error
    assert redacted == RedactedMetadata(b"", error_of(blob))


def test_the_password_never_shows_in_the_decode_error() -> None:
    for blob in (v3(minimal_body(quorum=4) + bytes_field(8, SECRET)), HEADER + b'2\npassword: "s3cr3t-pw\n'):
        redacted = redacted_metadata(blob)
        assert SECRET.decode() not in redacted.decode_error and SECRET not in redacted.data


# --------------------------------------------------------------------------- v3 as protobuf writes it: no walk
#
# v3 metadata that decodes and whose message is stored as the protobuf runtime writes it (as BookKeeper does) is
# emptied by the runtime instead of the walk over its fields; the result must be the walk's, byte for byte.

#: Where a v3 blob's length prefix starts.
V3_START = len(HEADER) + 2


def walked(blob: bytes) -> RedactedMetadata:
    """What :func:`redacted_metadata` returns when every v3 message goes through the walk over its fields."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metadata_redaction, "_v3_canonical_emptied", lambda data, start: None)
        return metadata_redaction._decoded_and_redacted(blob)


def not_walked(data: bytes, start: int, *, parsed: bool) -> bytes | None:
    raise AssertionError("the message was walked")


def fields_of(message: bytes) -> list[bytes]:
    """The top-level fields of a message this test wrote (varint and length-delimited only), in stored order."""
    fields: list[bytes] = []
    at = 0
    while at < len(message):
        tag, end = varint_at(message, at)
        value, end = varint_at(message, end)
        end += value if tag & 7 == 2 else 0
        fields.append(message[at:end])
        at = end
    return fields


def overlong(field: bytes) -> bytes:
    """``field`` (a tag and a varint, or a length-delimited field) with its varint one byte longer than needed."""
    _, at = varint_at(field, 0)
    _, end = varint_at(field, at)
    return field[: end - 1] + bytes([field[end - 1] | 0x80, 0]) + field[end:]


#: Hypothesis draws the ends of a list more often than its middle: the change that keeps the bytes as written, and
#: the one that makes them non-canonical with every field still in place, are there.
STORED_CHANGES = (
    "none",
    "password twice",
    "password first",
    "unknown field",
    "shuffled",
    "byte",
    "long length prefix",
    "none",
    "overlong varint",
)


@st.composite
def stored_v3(draw: st.DrawFn) -> tuple[bytes, str]:
    """A valid v3 blob with or without a password, as BookKeeper writes it or with one change that keeps its
    message parsing more often than not: a second password field, the password moved first, an unknown field
    anywhere, the fields shuffled, one varint written longer than needed, the length prefix written longer than
    needed, or one byte changed."""
    body, _ = draw(valid_blobs())
    password = draw(st.none() | st.just(PASSWORD) | st.binary(max_size=24))
    message = write_body(dataclasses.replace(body, password=password), 3)
    message = message[varint_at(message, V3_START)[1] :]
    fields = fields_of(message)
    kind = draw(st.sampled_from(STORED_CHANGES))
    at = draw(st.integers(0, len(fields)))
    if kind == "password twice":
        fields.insert(at, bytes_field(8, draw(st.binary(max_size=8))))
    elif kind == "password first":
        fields.sort(key=lambda field: field[0] != 8 << 3 | 2)
    elif kind == "unknown field":
        fields.insert(at, draw(st.sampled_from([int_field(99, 5), bytes_field(100, b"newer"), int_field(8, 1)])))
    elif kind == "shuffled":
        fields = draw(st.permutations(fields))
    elif kind == "overlong varint":
        fields[at % len(fields)] = overlong(fields[at % len(fields)])
    message = b"".join(fields)
    if kind == "byte":
        message = draw(one_byte_change(message)).data
    prefix = varint(len(message))
    if kind == "long length prefix":
        prefix = prefix[:-1] + bytes([prefix[-1] | 0x80, 0])
    return HEADER + b"3\n" + prefix + message, kind


def test_v3_as_protobuf_writes_it_is_emptied_as_the_walk_empties_it() -> None:
    """Whatever the bytes, :func:`redacted_metadata` gives what the walk gives; the shortcut, when it takes the
    bytes at all, gives the walk's bytes. Both the shortcut and the walk must have been taken often enough."""
    outcomes: Counter[str] = Counter()

    @PROPERTIES
    @given(stored_v3())
    def run(stored: tuple[bytes, str]) -> None:
        blob, _ = stored
        assert redacted_metadata(blob) == walked(blob)
        fast = metadata_redaction._v3_canonical_emptied(blob, V3_START)
        walk = metadata_redaction._v3_emptied(blob, V3_START, parsed=False)
        if fast is None:
            outcomes["walked"] += 1
        else:
            assert fast == walk
            assert fast is not blob or walk is blob
            outcomes["password" if fast is not blob else "no password"] += 1

    run()
    total = outcomes.total()
    assert all(outcomes[name] >= 0.05 * total for name in ("walked", "password", "no password")), outcomes


@pytest.mark.parametrize(
    ("body", "stored"),
    [
        (pulsar_body(password=PASSWORD), True),
        (pulsar_body(password=PASSWORD, tail=int_field(12, 7) + int_field(99, 5) + bytes_field(100, b"newer")), True),
        (minimal_body() + bytes_field(8, PASSWORD) + int_field(7, 9), True),  # an unknown digest type, last
        (minimal_body() + bytes_field(8, b"") + custom("k", PASSWORD), False),  # the password's bytes elsewhere
    ],
    ids=["pulsar", "unknown fields last", "unknown digest type last", "empty password"],
)
def test_v3_as_protobuf_writes_it_is_not_walked(body: bytes, stored: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``stored``: the password is stored (not empty), so the bytes change."""
    blob = v3(body)
    expected = walked(blob)
    monkeypatch.setattr(metadata_redaction, "_v3_emptied", not_walked)
    redacted = redacted_metadata(blob)
    assert redacted == expected and redacted.decode_error == ""
    assert decode_ledger_metadata(redacted.data) == dataclasses.replace(decode_ledger_metadata(blob), password=b"")
    if stored:
        assert PASSWORD not in redacted.data
    else:
        assert redacted.data is blob


@pytest.mark.parametrize(
    "body",
    [
        bytes_field(8, PASSWORD) + minimal_body(),  # the password first
        minimal_body() + bytes_field(8, PASSWORD) + bytes_field(8, b"other"),  # twice
        minimal_body() + int_field(99, 5) + bytes_field(8, PASSWORD),  # an unknown field before a known one
        minimal_body() + int_field(7, 9) + bytes_field(8, PASSWORD) + int_field(9, 2),  # an unknown digest type
        minimal_body() + bytes_field(8, PASSWORD) + overlong(int_field(9, 2)),  # a varint longer than needed
        minimal_body() + bytes_field(8, PASSWORD) + int_field(8, 1),  # a password field of another wire type
    ],
    ids=["password first", "password twice", "unknown field", "unknown digest type", "overlong varint", "wire type"],
)
def test_v3_not_as_protobuf_writes_it_is_walked(body: bytes) -> None:
    blob = v3(body)
    assert metadata_redaction._v3_canonical_emptied(blob, V3_START) is None
    redacted = redacted_metadata(blob)
    assert redacted == walked(blob) and PASSWORD not in redacted.data


# --------------------------------------------------------------------------- metadata as BookKeeper writes it


def test_metadata_as_bookkeeper_writes_it_is_redacted_as_a_decode_would_redact_it() -> None:
    """Whatever the bytes, :func:`redacted_metadata` gives what decoding and then redacting give; the short path for
    valid v3 as BookKeeper writes it, when it takes the bytes, gives exactly that. It must have taken them, and
    declined them, often enough."""
    outcomes: Counter[str] = Counter()

    @PROPERTIES
    @given(st.one_of(stored_v3().map(lambda stored: stored[0]), valid_blobs().map(lambda valid: write_body(*valid))))
    def run(blob: bytes) -> None:
        general = metadata_redaction._decoded_and_redacted(blob)
        assert redacted_metadata(blob) == general
        plain = metadata_redaction._plain_v3(blob)
        if plain is None:
            outcomes["declined"] += 1
        else:
            assert plain == general and plain.decode_error == ""
            assert (plain.data is blob) == (general.data is blob)  # unchanged bytes are handed back, not copied
            outcomes["taken"] += 1

    run()
    assert outcomes["taken"] >= 0.2 * outcomes.total() and outcomes["declined"] >= 0.2 * outcomes.total(), outcomes


def test_a_pulsar_ledger_is_redacted_with_no_metadata_built(monkeypatch: pytest.MonkeyPatch) -> None:
    blob = v3(pulsar_body(password=PASSWORD))
    expected = metadata_redaction._decoded_and_redacted(blob)

    def no_decode(data: bytes) -> None:
        raise AssertionError("decoded")

    monkeypatch.setattr(metadata_redaction, "decode_ledger_metadata", no_decode)
    assert redacted_metadata(blob) == expected and PASSWORD not in expected.data


NOT_PLAIN = {
    "write quorum above E": minimal_body(quorum=4),
    "write quorum 0": minimal_body(quorum=0),
    "ensemble size 0": minimal_body(ensemble=0, segments=((0, ()),)),
    "ack quorum above WQ": minimal_body(ack=3),
    "ack quorum 0": minimal_body(ack=0),
    "no segments": minimal_body(segments=()),
    "short ensemble": minimal_body(segments=((0, ("a:1", "b:1")),)),
    "bookie twice": minimal_body(segments=((0, ("a:1", "b:1", "a:1")),)),
    "bad bookie id": minimal_body(segments=((0, ("a:1", "b 1", "c:1")),)),
    "empty bookie id": minimal_body(segments=((0, ("a:1", "", "c:1")),)),
    "readonly": minimal_body(segments=((0, ("a:1", "readonly", "c:1")),)),
    "segments out of order": minimal_body(segments=((5, ("a:1", "b:1", "c:1")), (3, ("a:1", "b:1", "c:1")))),
    "negative first entry": minimal_body(segments=((-1, ("a:1", "b:1", "c:1")),)),
    "closed below -1": minimal_body(last=-5),
    "closed with negative length": minimal_body(length=-1),
    "non-UTF-8 bookie id": minimal_body(ensemble=1, quorum=1, segments=())
    + bytes_field(6, bytes_field(1, b"a\xff") + int_field(2, 0)),
    "non-UTF-8 custom key": minimal_body() + bytes_field(11, bytes_field(1, b"k\xff") + bytes_field(2, b"v")),
    "missing state": int_field(1, 2) + int_field(2, 3) + int_field(3, 100),
    "unknown field last": minimal_body() + int_field(99, 5),
    "unknown field in a segment": minimal_body(ensemble=1, quorum=1, segments=())
    + bytes_field(6, bytes_field(1, b"a:1") + int_field(2, 0) + int_field(15, 1)),
}


#: Of those, the ones the decoder reads: valid, only not as BookKeeper writes them.
DECODES = {"unknown field last", "unknown field in a segment"}


@pytest.mark.parametrize(("case", "body"), NOT_PLAIN.items(), ids=NOT_PLAIN.keys())
def test_metadata_not_as_bookkeeper_writes_it_takes_the_general_path(case: str, body: bytes) -> None:
    blob = v3(body)
    assert metadata_redaction._plain_v3(blob) is None
    assert redacted_metadata(blob) == metadata_redaction._decoded_and_redacted(blob)
    assert (redacted_metadata(blob).decode_error == "") == (case in DECODES)  # each case is what its name says


@pytest.mark.parametrize("name", ledger_metadata._REQUIRED)
def test_metadata_without_a_required_field_takes_the_general_path(name: str) -> None:
    msg = pb.LedgerMetadataFormat.FromString(minimal_body())
    msg.ClearField(name)
    blob = v3(msg.SerializePartialToString())
    assert metadata_redaction._plain_v3(blob) is None
    assert redacted_metadata(blob) == metadata_redaction._decoded_and_redacted(blob)
    assert "missing required field(s): " + name in redacted_metadata(blob).decode_error
