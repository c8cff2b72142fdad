"""Ledger metadata without its password: the same metadata but for the password, and nothing of what cannot be read.

The blobs are written by the metadata tests' own writer (byte by byte for v3, as text for v2 and v1), independently
of the codec and of the redaction.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.errors import MetadataFormatError
from scrutiny.core.ledger_metadata import decode_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.metadata_redaction import RedactedMetadata, redact_ledger_metadata, redacted_metadata
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
    write_body,
)

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
