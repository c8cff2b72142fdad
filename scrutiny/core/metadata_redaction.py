"""Ledger metadata without its password: the only form of a ledger znode's bytes that leaves ZooKeeper.

A ledger's password (the secret a client needs to open the ledger, and the key of its entries' MAC digest) is
stored in its metadata. Nothing Scrutiny publishes, keeps or ships needs it, so every ledger znode read is passed
through :func:`redacted_metadata` before its bytes go anywhere (the watcher's events, the checker's state, the
scan's tasks).

Rules (each pinned by a test):

* **same metadata, empty password.** Metadata that decodes comes back in its own format version, decoding to the
  same :class:`~scrutiny.core.ledger_metadata.LedgerMetadata` but for ``password``, which is empty: a password that
  was stored stays stored (``password_set`` is unchanged, and so is the digest type), its bytes and its length are
  gone. v3 keeps every other byte of the message as stored (field order, unknown fields, their encodings): only the
  password's fields are rewritten (every one of them: protobuf reads the last), and the length prefix with them.
  v2 is written again as protobuf text from its parsed message (its comments and layout go). v1 stores no password;
* **unchanged when there is nothing to remove.** Metadata without a password field (every v1 ledger), and v3
  metadata whose password fields are all empty, are returned as they are, byte for byte;
* **undecodable bytes.** When the metadata does not decode but its message still parses (a v3 message that its
  length prefix frames exactly, v2 text the parser reads), its password is emptied in the same way, and the result
  must still not decode (it never becomes metadata the original was not). Otherwise the bytes cannot be searched
  for a password and none of them is given: the result is empty, and the decode error of the original bytes, which
  :func:`redacted_metadata` returns beside them, is what a consumer reports.

Pure, and linear in the bytes: one decode, then, only when a password is stored or the bytes do not decode, a walk
over the message's top-level fields (v3) or a parse and a print of its text (v2). v3 metadata that decodes and is
stored as protobuf writes it (what BookKeeper writes: each field once, in field-number order, unknown fields last)
skips the walk: the runtime parses it and writes it again with an empty password, which gives the walk's bytes.
Metadata exactly as BookKeeper writes it (v3, stored as protobuf writes it, no unknown field, valid) is not even
decoded: its message is checked as the decoder would check it (:func:`~scrutiny.core.ledger_metadata.plain_v3_message`)
and written again, in about a third of the time (a watcher's first snapshot redacts every ledger of the cluster).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from google.protobuf import text_format, unknown_fields

from scrutiny.core.errors import MetadataFormatError
from scrutiny.core.ledger_metadata import (
    HEADER_MAGIC,
    canonical_v3_message,
    decode_ledger_metadata,
    encode_varint,
    plain_v3_message,
)
from scrutiny.core.protobuf_text import escape_problem
from scrutiny.proto import bookkeeper_formats_pb2 as pb

#: The field number of ``password`` in ``LedgerMetadataFormat``.
PASSWORD_FIELD: Final = pb.LedgerMetadataFormat.DESCRIPTOR.fields_by_name["password"].number
_EMPTY_PASSWORD: Final = bytes([PASSWORD_FIELD << 3 | 2, 0])
_MAX_VERSION_DIGITS: Final = 10
_MAX_VARINT_BYTES: Final = 10
_MAX_VARINT32_BYTES: Final = 5
_MAX_GROUP_DEPTH: Final = 100
#: The header of format version 3 as BookKeeper writes it.
_V3_HEADER: Final = HEADER_MAGIC + b"3\n"
_VARINT, _FIXED64, _LENGTH_DELIMITED, _START_GROUP, _END_GROUP, _FIXED32 = range(6)
#: One escaped backslash in the text protobuf prints (``\\``), written instead as its octal escape.
_ESCAPED_BACKSLASH: Final = re.compile(r"\\\\")


@dataclass(frozen=True, slots=True)
class RedactedMetadata:
    """A ledger znode's bytes without the password (``data``) and why the original bytes do not decode
    (``decode_error``, empty when they decode)."""

    data: bytes
    decode_error: str = ""


def redact_ledger_metadata(data: bytes) -> bytes:
    """The bytes of :func:`redacted_metadata`: ``data`` without the ledger's password (see the module)."""
    return redacted_metadata(data).data


def redacted_metadata(data: bytes) -> RedactedMetadata:
    """``data`` (a ledger znode's bytes) without the password, and the decode error of ``data`` (see the module)."""
    plain = _plain_v3(data)
    return _decoded_and_redacted(data) if plain is None else plain


def _plain_v3(data: bytes) -> RedactedMetadata | None:
    """What :func:`_decoded_and_redacted` gives for v3 metadata as BookKeeper writes it (stored as protobuf writes
    it, every field known, valid), with no metadata built; None for any other bytes.

    A watcher's first snapshot redacts every ledger of the cluster: about a third of the general path's time."""
    if not data.startswith(_V3_HEADER):
        return None
    body = _framed(data, len(_V3_HEADER))
    msg = None if body is None else plain_v3_message(body)
    return None if msg is None else RedactedMetadata(_password_emptied(data, len(_V3_HEADER), msg))


def _decoded_and_redacted(data: bytes) -> RedactedMetadata:
    """:func:`redacted_metadata` for any bytes: decode, then empty the password where the message holds one."""
    try:
        metadata = decode_ledger_metadata(data)
    except MetadataFormatError as error:
        return RedactedMetadata(_undecodable(data), str(error))
    if metadata.password is None:  # no password field at all (a field of another wire type does not decode)
        return RedactedMetadata(data)
    emptied = _emptied(data, parsed=True)
    if emptied is None:  # the decoder read it, so this does not happen; if it did, nothing is given
        return RedactedMetadata(b"", "the password could not be taken out of metadata that decodes")
    return RedactedMetadata(emptied)


def _undecodable(data: bytes) -> bytes:
    """Metadata that does not decode, with its password emptied if its message parses; else nothing."""
    emptied = _emptied(data, parsed=False)
    if emptied is None:
        return b""
    if emptied is data:
        return data
    try:
        decode_ledger_metadata(emptied)
    except MetadataFormatError:
        return emptied
    return b""  # emptying the password made it decode: the result would say more than the original


def _emptied(data: bytes, *, parsed: bool) -> bytes | None:
    """``data`` with an empty password (``data`` itself when it holds none); None when its message does not parse.
    ``parsed``: the decoder has read the message already."""
    header = _header(data)
    if header is None:
        return None
    version, start = header
    if version == 3:
        emptied = _v3_canonical_emptied(data, start) if parsed else None
        return _v3_emptied(data, start, parsed=parsed) if emptied is None else emptied
    if version == 2:
        return _v2_emptied(data, start)
    return None


def _header(data: bytes) -> tuple[int, int] | None:
    """The format version and the offset of the body, or None without a ``BookieMetadataFormatVersion`` header."""
    if not data.startswith(HEADER_MAGIC):
        return None
    start = len(HEADER_MAGIC)
    end = data.find(b"\n", start, start + _MAX_VERSION_DIGITS + 1)
    digits = data[start:end]
    if end < 0 or not digits.isdigit():
        return None
    return int(digits), end + 1


# --------------------------------------------------------------------------- v3: binary


def _v3_canonical_emptied(data: bytes, start: int) -> bytes | None:
    """v3 stored as the protobuf runtime writes it: what :func:`_v3_emptied` returns, without the walk. None (the
    walk decides) when the length prefix does not frame the rest of the bytes exactly, the message does not parse,
    the runtime would not write it back byte for byte, or an unknown field has the password's number (the walk
    drops it too).

    The runtime writes each field on its own, the known ones in field-number order and the unknown ones after
    them as they were stored: bytes it writes back unchanged hold at most one password field, and writing the
    message again with an empty password changes that field only, in its place, which is what the walk does."""
    body = _framed(data, start)
    msg = None if body is None else canonical_v3_message(body)
    if msg is None:
        return None
    unknown = unknown_fields.UnknownFieldSet(msg)
    if any(unknown[index].field_number == PASSWORD_FIELD for index in range(len(unknown))):
        return None
    return _password_emptied(data, start, msg)


def _framed(data: bytes, start: int) -> bytes | None:
    """The message after the varint length at ``start``, when that length frames the rest of ``data`` exactly."""
    framed = _read_varint(data, start, _MAX_VARINT32_BYTES)
    if framed is None or framed[0] + framed[1] != len(data):
        return None
    return data[framed[1] :]


def _password_emptied(data: bytes, start: int, msg: pb.LedgerMetadataFormat) -> bytes:
    """v3 ``data`` (its message, stored as the runtime writes it, parsed into ``msg``, starts at ``start``) with an
    empty password; ``data`` itself when it has no password field or an empty one (the walk returns it as it is)."""
    if not msg.password:
        return data
    msg.password = b""
    emptied = msg.SerializePartialToString()
    return data[:start] + encode_varint(len(emptied)) + emptied


def _v3_emptied(data: bytes, start: int, *, parsed: bool) -> bytes | None:
    """v3: the message's password fields replaced by one empty password, every other byte kept, the length
    prefix written again; ``data`` itself when every password field is empty already. None when the length prefix
    does not frame the rest of the bytes exactly or the message does not parse."""
    body = _framed(data, start)
    if body is None:
        return None
    if not parsed:
        try:
            pb.LedgerMetadataFormat().MergeFromString(body)
        except Exception:  # the runtime raises DecodeError and, on some inputs, others
            return None
    fields = _top_level_fields(body)
    if fields is None:
        return None
    passwords = [(at, end) for number, at, end in fields if number == PASSWORD_FIELD]
    if all(body[at:end] == _EMPTY_PASSWORD for at, end in passwords):
        return data
    kept = bytearray()
    for number, at, end in fields:
        if number != PASSWORD_FIELD:
            kept += body[at:end]
        elif (at, end) == passwords[-1]:
            kept += _EMPTY_PASSWORD  # where the one that counts was (protobuf keeps the last one)
    return data[:start] + encode_varint(len(kept)) + bytes(kept)


def _top_level_fields(body: bytes) -> list[tuple[int, int, int]] | None:
    """(field number, start, end) of each top-level field of a protobuf message, in stored order; None when the
    bytes are not a sequence of well-formed fields."""
    fields: list[tuple[int, int, int]] = []
    at = 0
    while at < len(body):
        field = _field(body, at)
        if field is None:
            return None
        number, end = field
        fields.append((number, at, end))
        at = end
    return fields


def _field(body: bytes, start: int) -> tuple[int, int] | None:
    """The number of the field that starts at ``start`` and the offset after it (after the end of a group, with
    everything the group holds); None when it is malformed."""
    groups: list[int] = []
    first = 0
    at = start
    while True:
        tag = _read_varint(body, at, _MAX_VARINT32_BYTES)
        if tag is None or tag[0] >> 3 == 0:
            return None
        number, wire_type, at = tag[0] >> 3, tag[0] & 7, tag[1]
        first = first or number
        if wire_type in (_VARINT, _LENGTH_DELIMITED):
            value = _read_varint(body, at, _MAX_VARINT_BYTES)
            if value is None:
                return None
            at = value[1] + (value[0] if wire_type == _LENGTH_DELIMITED else 0)
        elif wire_type in (_FIXED64, _FIXED32):
            at += 8 if wire_type == _FIXED64 else 4
        elif wire_type == _START_GROUP and len(groups) < _MAX_GROUP_DEPTH:
            groups.append(number)
        elif wire_type == _END_GROUP and groups and groups[-1] == number:
            groups.pop()
        else:
            return None
        if at > len(body):
            return None
        if not groups:
            return first, at


def _read_varint(data: bytes, start: int, limit: int) -> tuple[int, int] | None:
    """The varint of at most ``limit`` bytes at ``start`` and the offset after it; None if there is none."""
    value = 0
    for i in range(limit):
        if start + i >= len(data):
            return None
        byte = data[start + i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value, start + i + 1
    return None


# --------------------------------------------------------------------------- v2: text


def _v2_emptied(data: bytes, start: int) -> bytes | None:
    """v2: the text written again from its parsed message with an empty password (a password field written twice
    leaves no trace either); ``data`` itself when the message has no password field. None when the text does not
    parse (or is refused before the parser)."""
    try:
        text = data[start:].decode("utf-8")
    except UnicodeDecodeError:
        return None
    if escape_problem(text) is not None:
        return None
    msg = pb.LedgerMetadataFormat()
    try:
        text_format.Merge(text, msg)
    except Exception:  # ParseError and, on some inputs, others
        return None
    if not msg.HasField("password"):
        return data
    msg.password = b""
    # Protobuf escapes a backslash as two: written as \134 instead, so no run of them reaches the parser's guard.
    written = _ESCAPED_BACKSLASH.sub(r"\\134", text_format.MessageToString(msg))
    return data[:start] + written.encode("utf-8")
