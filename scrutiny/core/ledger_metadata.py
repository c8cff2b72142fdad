"""BookKeeper ledger metadata: decode the three stored formats, encode the current one (v3).

Every ledger node in ZooKeeper starts with ``BookieMetadataFormatVersion\\t<n>\\n``; the body is
v3 (4.9+) a varint-length-prefixed binary ``LedgerMetadataFormat``, v2 (4.2 - 4.8) the same
message as protobuf text, v1 (4.0 - 4.1) a tab-and-newline text format (facts, section 2).

:func:`decode_ledger_metadata` turns any byte string into a validated :class:`LedgerMetadata` or
raises :class:`~scrutiny.core.errors.MetadataFormatError`, never another exception.
:func:`encode_ledger_metadata_v3` writes what BookKeeper writes: re-encoding a decoded v3 blob
gives back the same bytes, including which optional fields were present and unknown fields
from newer BookKeeper versions. The password never appears in a repr, the JSON form or an
error message.
"""

from __future__ import annotations

import base64
import functools
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, TypeGuard

from google.protobuf import message as pb_message
from google.protobuf import text_format, unknown_fields

from scrutiny.core.errors import MetadataFormatError
from scrutiny.core.protobuf_text import escape_problem
from scrutiny.proto import bookkeeper_formats_pb2 as pb

_Format = pb.LedgerMetadataFormat

HEADER_MAGIC: Final = b"BookieMetadataFormatVersion\t"
SUPPORTED_FORMAT_VERSIONS: Final = (1, 2, 3)
PULSAR_TOPIC_KEY: Final = "pulsar/managed-ledger"
#: The largest ensemble this tool accepts. BookKeeper sets no bound of its own, but its ensembles are a few to a
#: few dozen bookies (each must be a distinct live bookie of the cluster); the verdict's work grows with the square
#: of the ensemble, so metadata naming more bookies (only broken or hostile metadata does) is refused as corrupt
#: rather than tying up a worker: 1,024 bookies take milliseconds, a 1 MB znode's ~50,000 would take seconds.
MAX_ENSEMBLE_SIZE: Final = 1024
#: v1 writes this lastEntryId on the closing line of a ledger in recovery.
V1_IN_RECOVERY_LAST_ENTRY: Final = -102

_MAX_VERSION_DIGITS: Final = 10
_MAX_VARINT32_BYTES: Final = 5
_INT32_MAX: Final = 2**31 - 1
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_BOOKIE_ID: Final = re.compile(r"[a-zA-Z0-9:_.-]+")
_REQUIRED: Final = ("quorumSize", "ensembleSize", "length", "state")
_V1_INT: Final = re.compile(r"[+-]?[0-9]{1,20}")
_DIGITS: Final = frozenset(b"0123456789")
_NEWLINE: Final = ord("\n")
_V1_CLOSED: Final = "CLOSED"
#: The fields of v2 text other than the password: a line starting with one ends the password's text.
_OTHER_FIELDS: Final = frozenset(_Format.DESCRIPTOR.fields_by_name) - {"password"}


class LedgerState(StrEnum):
    """A ledger's state as stored in its metadata."""

    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


class DigestType(StrEnum):
    """The entry digest a ledger's writer chose."""

    CRC32 = "CRC32"
    HMAC = "HMAC"
    CRC32C = "CRC32C"
    DUMMY = "DUMMY"


_STATE_BY_NUMBER: Final[dict[pb.LedgerMetadataFormat.State, LedgerState]] = {
    _Format.OPEN: LedgerState.OPEN,
    _Format.IN_RECOVERY: LedgerState.IN_RECOVERY,
    _Format.CLOSED: LedgerState.CLOSED,
}
_STATE_NUMBER: Final = {state: number for number, state in _STATE_BY_NUMBER.items()}
_DIGEST_BY_NUMBER: Final[dict[pb.LedgerMetadataFormat.DigestType, DigestType]] = {
    _Format.CRC32: DigestType.CRC32,
    _Format.HMAC: DigestType.HMAC,
    _Format.CRC32C: DigestType.CRC32C,
    _Format.DUMMY: DigestType.DUMMY,
}
_DIGEST_NUMBER: Final = {digest: number for number, digest in _DIGEST_BY_NUMBER.items()}


@dataclass(frozen=True, slots=True)
class Segment:
    """One ensemble: the bookies that store entries from ``first_entry_id`` until the next segment."""

    first_entry_id: int
    ensemble: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _WireDetails:
    """What the stored bytes said beyond the effective metadata; used only to re-encode exactly.

    ``last_entry_id`` and ``length`` are the stored fields 4 and 3 (``None``: field 4 absent),
    whatever the state; ``unknown`` holds the top-level unknown fields as raw bytes and the two
    tuples the unknown fields of each segment and custom-metadata entry, in stored order.
    """

    last_entry_id: int | None = None
    length: int = 0
    ack_quorum_stored: bool = True
    unknown: bytes = b""
    segment_unknown: tuple[bytes, ...] = ()
    custom_unknown: tuple[bytes, ...] = ()


_NO_WIRE_DETAILS: Final = _WireDetails()


@dataclass(frozen=True)
class LedgerMetadata:
    """The metadata of one ledger, with the effective values a BookKeeper reader would use.

    ``ack_quorum`` is the write quorum when none is stored. ``last_entry_id`` and ``length`` are
    ``None`` unless the ledger is CLOSED (a closed ledger without a stored lastEntryId has -1).
    ``password`` is ``None`` when not stored and never shows in repr, str or JSON. Equality
    compares these public fields only; how they were stored (kept privately for exact
    re-encoding) does not take part.
    """

    format_version: int
    state: LedgerState
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    last_entry_id: int | None
    length: int | None
    segments: tuple[Segment, ...]
    digest_type: DigestType | None
    password: bytes | None = field(repr=False)
    ctime: int | None
    custom_metadata: tuple[tuple[str, bytes], ...]
    c_token: int | None
    _wire: _WireDetails = field(default=_NO_WIRE_DETAILS, repr=False, compare=False)

    @property
    def password_set(self) -> bool:
        """True when the metadata stores a password, even an empty one (BookKeeper's hasPassword)."""
        return self.password is not None

    @property
    def pulsar_topic(self) -> str | None:
        """The Pulsar managed ledger (topic) that owns this ledger, or None when not a Pulsar ledger."""
        topic: str | None = None
        for key, value in self.custom_metadata:
            if key == PULSAR_TOPIC_KEY:
                topic = value.decode("utf-8", errors="replace")
        return topic

    def is_closed(self) -> bool:
        """True when the ledger is CLOSED, i.e. its last entry id and length are final."""
        return self.state is LedgerState.CLOSED

    def as_json_dict(self) -> dict[str, object]:
        """A JSON-serializable summary; shows whether a password is set, never the password."""
        return {
            "format_version": self.format_version,
            "state": self.state.value,
            "ensemble_size": self.ensemble_size,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "digest_type": None if self.digest_type is None else self.digest_type.value,
            "ctime": self.ctime,
            "password_set": self.password_set,
            "segments": [{"first_entry_id": s.first_entry_id, "ensemble": list(s.ensemble)} for s in self.segments],
            "custom_metadata": {key: _json_value(value) for key, value in self.custom_metadata},
        }


def closed_last_entry(data: bytes | None) -> int | None:
    """The lastEntryId of the closed ledger whose znode bytes are ``data`` (where entries "beyond" it begin); None for
    a ledger open or in recovery, for bytes that do not decode and for none."""
    if not data:
        return None
    try:
        return decode_ledger_metadata(data).last_entry_id
    except MetadataFormatError:
        return None


def _json_value(value: bytes) -> str:
    """``value`` as text when it is valid UTF-8, else ``base64:`` followed by its base64."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode("ascii")


# --------------------------------------------------------------------------- decoding


def decode_ledger_metadata(data: bytes) -> LedgerMetadata:
    """Decode and validate ledger metadata of format version 1, 2 or 3.

    Returns metadata that passed every consistency check (quorums, ensembles, bookie ids,
    segment order, closed-ledger fields); on any bad input raises
    :class:`MetadataFormatError` (with ``format_version`` set once the header was read) and
    nothing else.
    """
    version: int | None = None
    try:
        version, body = _read_header(data)
        metadata = _DECODERS[version](data, body)
        _validate(metadata)
        return metadata
    except MetadataFormatError as err:
        if err.format_version is None:
            err.format_version = version
        raise
    except Exception as err:  # the decoder's contract: MetadataFormatError only, whatever the input
        raise MetadataFormatError(f"undecodable ({type(err).__name__})", format_version=version) from None


def _read_header(data: bytes) -> tuple[int, int]:
    """The format version and the offset of the body; raises on anything but a v1-v3 header."""
    if not data.startswith(HEADER_MAGIC):
        found = _preview(data[: len(HEADER_MAGIC)].split(b"\n", 1)[0]) if data else "no data"
        raise MetadataFormatError(f"missing header 'BookieMetadataFormatVersion\\t<n>\\n' (found {found})", offset=0)
    start = end = len(HEADER_MAGIC)
    while end < len(data) and end - start <= _MAX_VERSION_DIGITS and data[end] in _DIGITS:
        end += 1
    digits = data[start:end]
    if len(digits) > _MAX_VERSION_DIGITS:
        raise MetadataFormatError(f"format version has more than {_MAX_VERSION_DIGITS} digits", offset=start)
    if end == len(data):
        reason = f"header line ends after version {digits.decode()} without a newline"
        reason = reason if digits else "header ends without a format version"
        raise MetadataFormatError(reason, offset=end)
    if data[end] != _NEWLINE:
        found = _preview(data[start : start + _MAX_VERSION_DIGITS + 1].split(b"\n", 1)[0])
        raise MetadataFormatError(f"format version is not a decimal number: {found}", offset=start)
    if not digits:
        raise MetadataFormatError("empty format version in the header", offset=start)
    version = int(digits)
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise MetadataFormatError(
            f"unknown format version {version} (supported: 1, 2, 3)", offset=start, format_version=version
        )
    return version, end + 1


def _preview(raw: bytes | str, limit: int = 40) -> str:
    """A short printable rendering of untrusted input for an error message."""
    shown = repr(raw[:limit])
    return shown + ("..." if len(raw) > limit else "")


def _decode_v3(data: bytes, start: int) -> LedgerMetadata:
    """v3 body: a varint32 length, then exactly that many bytes of binary LedgerMetadataFormat."""
    size, begin = _read_varint32(data, start)
    end = begin + size
    if end > len(data):
        raise MetadataFormatError(
            f"declared message length {size} exceeds the {len(data) - begin} byte(s) that follow it",
            offset=start,
        )
    if end < len(data):
        raise MetadataFormatError(
            f"{len(data) - end} trailing byte(s) after the declared {size}-byte message", offset=end
        )
    msg = _Format()
    try:
        msg.MergeFromString(data[begin:end])
    except pb_message.DecodeError as err:
        raise MetadataFormatError(f"not a LedgerMetadataFormat message: {err}", offset=begin) from None
    except Exception as err:
        raise MetadataFormatError(f"not a LedgerMetadataFormat message ({type(err).__name__})") from None
    return _from_message(msg, 3)


def _read_varint32(data: bytes, start: int) -> tuple[int, int]:
    """The varint at ``start`` (at most 5 bytes) and the offset after it."""
    if start >= len(data):
        raise MetadataFormatError("no message after the header (expected a varint length)", offset=start)
    value = 0
    for i in range(_MAX_VARINT32_BYTES):
        if start + i >= len(data):
            raise MetadataFormatError("truncated varint length", offset=start)
        byte = data[start + i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value, start + i + 1
    raise MetadataFormatError(f"varint length longer than {_MAX_VARINT32_BYTES} bytes", offset=start)


def _decode_v2(data: bytes, start: int) -> LedgerMetadata:
    """v2 body: LedgerMetadataFormat as protobuf text, merged like BookKeeper's TextFormat.merge."""
    try:
        text = data[start:].decode("utf-8")
    except UnicodeDecodeError as err:
        raise MetadataFormatError("v2 text is not valid UTF-8", offset=start + err.start) from None
    problem = escape_problem(text)
    if problem is not None:
        raise MetadataFormatError(f"v2 text this tool does not read: {problem}")
    msg = _Format()
    try:
        text_format.Merge(text, msg)
    except text_format.ParseError as err:
        raise MetadataFormatError(_describe_text_error(err, text)) from None
    except Exception as err:
        raise MetadataFormatError(f"v2 text does not parse ({type(err).__name__})") from None
    return _from_message(msg, 2)


def _describe_text_error(err: text_format.ParseError, text: str) -> str:
    """The parser's message with its position, unless the position is in the password field's text.

    That text runs from each line that mentions ``password`` (in any case) to the next line that
    starts with another field's name. Protobuf text tokens never span lines and a field's value
    lies between its name and the next field's name, so a message about a position outside it
    (which quotes that position's line and token) cannot quote the password; inside it, or
    without a position, only the position is given.
    """
    lines = text.split("\n")
    line, column = err.GetLine(), err.GetColumn()
    where = "" if line is None else f" at line {line}" + (f" column {column}" if column is not None else "")
    secret = _password_lines(lines)
    if secret and (line is None or line in secret):
        return f"v2 text does not parse{where} (the parser's message is withheld: it may quote the password)"
    detail = str(err)
    if line is not None:
        detail = detail.removeprefix(f"{line}:{column} : " if column is not None else f"{line} : ")
        if 1 <= line <= len(lines):
            detail = detail.removeprefix(f"'{lines[line - 1]}': ")
    return f"v2 text does not parse{where}: {detail}"


def _password_lines(lines: list[str]) -> set[int]:
    """The 1-based numbers of the lines that hold the password field's text (see above)."""
    out: set[int] = set()
    inside = False
    for number, content in enumerate(lines, start=1):
        if "password" in content.lower():
            inside = True
        elif re.split(r"[\s:{<\[]", content.strip(), maxsplit=1)[0] in _OTHER_FIELDS:
            inside = False
        if inside:
            out.add(number)
    return out


def _decode_v1(data: bytes, start: int) -> LedgerMetadata:
    """v1 body: write quorum, ensemble size, length, segment lines, optional closing line."""
    try:
        text = data[start:].decode("utf-8")
    except UnicodeDecodeError as err:
        raise MetadataFormatError("v1 text is not valid UTF-8", offset=start + err.start) from None
    lines = text.removesuffix("\n").split("\n")
    if len(lines) < 4:
        raise MetadataFormatError(
            f"v1 text has {len(lines)} line(s); expected write quorum, ensemble size, length "
            "and at least one segment line"
        )
    write_quorum = _v1_int(lines[0], 2, "write quorum", _INT32_MAX)
    ensemble_size = _v1_int(lines[1], 3, "ensemble size", _INT32_MAX)
    length = _v1_int(lines[2], 4, "length", _INT64_MAX)
    body = lines[3:]
    closing = _v1_closing(body[-1], len(lines) + 1)
    if closing is not None:
        body = body[:-1]
    segments = tuple(_v1_segment(line, number) for number, line in enumerate(body, start=5))
    return _v1_metadata(write_quorum, ensemble_size, length, segments, closing)


def _v1_int(text: str, line: int, what: str, maximum: int) -> int:
    """A decimal integer of a v1 line, within [-maximum-1, maximum]."""
    if not _V1_INT.fullmatch(text):
        raise MetadataFormatError(f"v1 line {line}: {what} is not a (64-bit) integer: {_preview(text)}")
    value = int(text)
    if not -maximum - 1 <= value <= maximum:
        raise MetadataFormatError(f"v1 line {line}: {what} {value} is out of range")
    return value


def _v1_closing(text: str, line: int) -> int | None:
    """The lastEntryId of a ``<lastEntryId>\\tCLOSED`` line, or None for any other line."""
    parts = text.split("\t")
    if len(parts) != 2 or parts[1] != _V1_CLOSED:
        return None
    return _v1_int(parts[0], line, "last entry id", _INT64_MAX)


def _v1_segment(text: str, line: int) -> Segment:
    """One ``firstEntryId<TAB>bookie...`` line."""
    parts = text.split("\t")
    if len(parts) == 2 and parts[1] == _V1_CLOSED:
        raise MetadataFormatError(f"v1 line {line}: closing line is not the last line")
    first = _v1_int(parts[0], line, "segment first entry id", _INT64_MAX)
    return Segment(first, tuple(parts[1:]))


def _v1_metadata(
    write_quorum: int, ensemble_size: int, length: int, segments: tuple[Segment, ...], closing: int | None
) -> LedgerMetadata:
    """The metadata a v1 body describes: AQ = WQ, no digest, no password, no ctime."""
    if closing is None:
        state = LedgerState.OPEN
    elif closing == V1_IN_RECOVERY_LAST_ENTRY:
        state = LedgerState.IN_RECOVERY
    else:
        state = LedgerState.CLOSED
    closed = state is LedgerState.CLOSED
    return LedgerMetadata(
        format_version=1,
        state=state,
        ensemble_size=ensemble_size,
        write_quorum=write_quorum,
        ack_quorum=write_quorum,
        last_entry_id=closing if closed else None,
        length=length if closed else None,
        segments=segments,
        digest_type=None,
        password=None,
        ctime=None,
        custom_metadata=(),
        c_token=None,
        _wire=_WireDetails(last_entry_id=closing, length=length, ack_quorum_stored=False),
    )


_DECODERS: Final = {1: _decode_v1, 2: _decode_v2, 3: _decode_v3}


# --------------------------------------------------------------------------- protobuf message -> metadata


def _from_message(msg: pb.LedgerMetadataFormat, version: int) -> LedgerMetadata:
    """The metadata a parsed LedgerMetadataFormat describes; raises on missing or mistyped fields."""
    unknown = _unknown_fields(msg, "")
    if not _required_fields(msg):
        missing = [name for name in _REQUIRED if not msg.HasField(name)]
        raise MetadataFormatError(f"missing required field(s): {', '.join(missing)}")
    state = _STATE_BY_NUMBER[msg.state]
    closed = state is LedgerState.CLOSED
    stored_last = msg.lastEntryId if msg.HasField("lastEntryId") else None
    segments, segment_unknown = _segments_of(msg)
    custom, custom_unknown = _custom_metadata_of(msg)
    return LedgerMetadata(
        format_version=version,
        state=state,
        ensemble_size=msg.ensembleSize,
        write_quorum=msg.quorumSize,
        ack_quorum=msg.ackQuorumSize if msg.HasField("ackQuorumSize") else msg.quorumSize,
        last_entry_id=(-1 if stored_last is None else stored_last) if closed else None,
        length=msg.length if closed else None,
        segments=segments,
        digest_type=_DIGEST_BY_NUMBER[msg.digestType] if msg.HasField("digestType") else None,
        password=msg.password if msg.HasField("password") else None,
        ctime=msg.ctime if msg.HasField("ctime") else None,
        custom_metadata=custom,
        c_token=msg.cToken if msg.HasField("cToken") else None,
        _wire=_WireDetails(
            last_entry_id=stored_last,
            length=msg.length,
            ack_quorum_stored=msg.HasField("ackQuorumSize"),
            unknown=unknown,
            segment_unknown=segment_unknown,
            custom_unknown=custom_unknown,
        ),
    )


def _unknown_fields(msg: pb_message.Message, where: str) -> bytes:
    """The unknown fields of ``msg`` (not of its sub-messages) as raw bytes, b"" when none.

    Raises when an unknown field has the number of a declared field (a wrong wire type, or an
    unknown state); an unknown digestType value, from a newer BookKeeper, is kept as unknown.
    """
    fields = unknown_fields.UnknownFieldSet(msg)
    if not len(fields):
        return b""
    declared = msg.DESCRIPTOR.fields_by_number
    for index in range(len(fields)):
        number, wire_type = fields[index].field_number, fields[index].wire_type
        if number not in declared:
            continue
        name = declared[number].name
        if name == "digestType" and wire_type == 0:
            continue
        if name == "state" and wire_type == 0:
            raise MetadataFormatError(
                f"unknown state {fields[index].data} (supported: 1 = OPEN, 2 = IN_RECOVERY, 3 = CLOSED)"
            )
        raise MetadataFormatError(f"{where}field {name} (number {number}) has the wrong wire type {wire_type}")
    rest = type(msg)()
    rest.CopyFrom(msg)
    for declared_field in rest.DESCRIPTOR.fields:
        rest.ClearField(declared_field.name)
    return rest.SerializePartialToString()


def _segments_of(msg: pb.LedgerMetadataFormat) -> tuple[tuple[Segment, ...], tuple[bytes, ...]]:
    """The segments in stored order and each one's unknown fields."""
    segments: list[Segment] = []
    unknown: list[bytes] = []
    for index, stored in enumerate(msg.segment):
        where = f"segment {index}: "
        unknown.append(_unknown_fields(stored, where))
        if not stored.HasField("firstEntryId"):
            raise MetadataFormatError(f"{where}missing required field(s): firstEntryId")
        ensemble = tuple(stored.ensembleMember)
        if not all(_is_text(member) for member in ensemble):
            bad = next(i for i, member in enumerate(ensemble) if not _is_text(member))
            raise MetadataFormatError(f"{where}ensemble member {bad} is not valid UTF-8")
        segments.append(Segment(stored.firstEntryId, ensemble))
    return tuple(segments), tuple(unknown) if any(unknown) else ()


def _custom_metadata_of(msg: pb.LedgerMetadataFormat) -> tuple[tuple[tuple[str, bytes], ...], tuple[bytes, ...]]:
    """The custom metadata entries in stored order and each one's unknown fields."""
    entries: list[tuple[str, bytes]] = []
    unknown: list[bytes] = []
    for index, stored in enumerate(msg.customMetadata):
        where = f"custom metadata entry {index}: "
        unknown.append(_unknown_fields(stored, where))
        entries.append((_text(stored.key, f"{where}key"), stored.value))
    return tuple(entries), tuple(unknown) if any(unknown) else ()


def _text(value: object, what: str) -> str:
    """A protobuf string field's value; raises when it is not text (:func:`_is_text`)."""
    if _is_text(value):
        return value
    raise MetadataFormatError(f"{what} is not valid UTF-8")


# --------------------------------------------------------------------------- validation


def _validate(metadata: LedgerMetadata) -> None:
    """Raise MetadataFormatError unless ``metadata`` is consistent the way BookKeeper requires.

    Checks: E >= 1, 1 <= WQ <= E, 1 <= AQ <= WQ; at least one segment, each with exactly E
    distinct valid bookie ids and a first entry id >= 0, non-decreasing; when CLOSED,
    lastEntryId >= -1 and length >= 0; every number fits its protobuf field.
    """
    try:
        _check_quorums(metadata)
        _check_segments(metadata)
        _check_closed(metadata)
        _check_ranges(metadata)
    except MetadataFormatError as err:
        err.format_version = metadata.format_version
        raise


def _check_quorums(metadata: LedgerMetadata) -> None:
    size, write, ack = metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum
    if size < 1:
        raise MetadataFormatError(f"ensemble size {size} must be at least 1")
    if size > MAX_ENSEMBLE_SIZE:
        raise MetadataFormatError(
            f"ensemble size {size} is above {MAX_ENSEMBLE_SIZE}, the largest this tool checks (BookKeeper's ensembles"
            " are a few dozen bookies at most): treated as corrupt"
        )
    if not 1 <= write <= size:
        raise MetadataFormatError(f"write quorum {write} must be between 1 and the ensemble size {size}")
    if not 1 <= ack <= write:
        raise MetadataFormatError(f"ack quorum {ack} must be between 1 and the write quorum {write}")


def _check_segments(metadata: LedgerMetadata) -> None:
    if not metadata.segments:
        raise MetadataFormatError("no segments (a ledger has at least one ensemble)")
    previous = 0
    for index, segment in enumerate(metadata.segments):
        where = f"segment {index} (first entry {segment.first_entry_id})"
        if not 0 <= segment.first_entry_id <= _INT64_MAX:
            raise MetadataFormatError(f"{where}: first entry id must be between 0 and 2^63-1")
        if segment.first_entry_id < previous:
            raise MetadataFormatError(f"{where}: first entry id is below the previous segment's {previous}")
        previous = segment.first_entry_id
        _check_ensemble(segment.ensemble, metadata.ensemble_size, where)


def _check_ensemble(ensemble: tuple[str, ...], size: int, where: str) -> None:
    if len(ensemble) != size:
        raise MetadataFormatError(f"{where}: ensemble has {len(ensemble)} bookie(s), the ensemble size is {size}")
    for bookie in ensemble:
        if not _valid_bookie_id(bookie):
            raise MetadataFormatError(
                f"{where}: invalid bookie id {_preview(bookie)} (expected [a-zA-Z0-9:_.-]+, not 'readonly')"
            )
    if len(set(ensemble)) != len(ensemble):
        counts = Counter(ensemble)
        duplicate = min(bookie for bookie, count in counts.items() if count > 1)
        raise MetadataFormatError(f"{where}: bookie {duplicate!r} appears more than once in the ensemble")


def _check_closed(metadata: LedgerMetadata) -> None:
    if metadata.state is not LedgerState.CLOSED:
        return
    if metadata.last_entry_id is None or metadata.last_entry_id < -1:
        raise MetadataFormatError(f"closed ledger with last entry id {metadata.last_entry_id} (must be >= -1)")
    if metadata.length is None or metadata.length < 0:
        raise MetadataFormatError(f"closed ledger with length {metadata.length} (must be >= 0)")


def _check_ranges(metadata: LedgerMetadata) -> None:
    wire = metadata._wire
    for what, value in (
        ("last entry id", metadata.last_entry_id),
        ("length", metadata.length),
        ("ctime", metadata.ctime),
        ("cToken", metadata.c_token),
        ("stored last entry id", wire.last_entry_id),
        ("stored length", wire.length),
    ):
        if value is not None and not _INT64_MIN <= value <= _INT64_MAX:
            raise MetadataFormatError(f"{what} {value} does not fit in 64 bits")


def canonical_v3_message(body: bytes) -> pb.LedgerMetadataFormat | None:
    """The message of a v3 body (the bytes after the length prefix) when the protobuf runtime parses it and writes it
    back byte for byte (each field once, the known ones in field-number order, unknown ones last); else None."""
    msg = _Format()
    try:
        msg.MergeFromString(body)
    except Exception:  # the runtime raises DecodeError and, on some inputs, others
        return None
    return msg if msg.SerializePartialToString() == body else None


def plain_v3_message(body: bytes) -> pb.LedgerMetadataFormat | None:
    """The message of a v3 body (the bytes after the length prefix) when it is metadata as BookKeeper writes it:
    stored as protobuf writes it (each field once, in field-number order), no unknown field in it or in its parts,
    and valid (:func:`decode_ledger_metadata` of a blob holding it returns). None says nothing about why: decode to
    find out.

    The checks of :func:`_from_message` and :func:`_validate`, asked of the message with no metadata built (about a
    third of a decode's time): a watcher's first snapshot asks it of every ledger."""
    msg = canonical_v3_message(body)
    if msg is None:
        return None
    msg.DiscardUnknownFields()  # written again the same: there were none
    if msg.SerializePartialToString() != body or not _required_fields(msg):
        return None
    size, write = msg.ensembleSize, msg.quorumSize
    ack = msg.ackQuorumSize if msg.HasField("ackQuorumSize") else write
    if not (1 <= size <= MAX_ENSEMBLE_SIZE and 1 <= write <= size and 1 <= ack <= write) or not msg.segment:
        return None
    previous = 0  # every 64-bit field is an int64: in range by its type
    for segment in msg.segment:
        if not segment.HasField("firstEntryId") or segment.firstEntryId < previous:
            return None
        previous = segment.firstEntryId
        members = segment.ensembleMember
        if len(members) != size or len(set(members)) != size:
            return None
        for member in members:
            if not _is_text(member) or not _valid_bookie_id(member):
                return None
    for entry in msg.customMetadata:
        if not _is_text(entry.key):
            return None
    if msg.state == _Format.CLOSED and (msg.lastEntryId < -1 or msg.length < 0):  # unset: 0, read as -1: valid
        return None
    return msg


def _is_text(value: object) -> TypeGuard[str]:
    """Whether a protobuf string field's value is text: the runtime hands over bytes when they are not UTF-8."""
    return isinstance(value, str)


@functools.lru_cache(maxsize=4096)
def _valid_bookie_id(bookie: str) -> bool:
    """A bookie id an ensemble may name: ``[a-zA-Z0-9:_.-]+``, not ``readonly``. Remembered for the last 4,096 ids
    asked: a cluster's ensembles name the same few bookies in ledger after ledger."""
    return bookie != "readonly" and _BOOKIE_ID.fullmatch(bookie) is not None


def _required_fields(msg: pb.LedgerMetadataFormat) -> bool:
    """Whether ``msg`` holds every field of :data:`_REQUIRED` (spelt out: a third of the time of a loop over them)."""
    return (
        msg.HasField("quorumSize") and msg.HasField("ensembleSize") and msg.HasField("length") and msg.HasField("state")
    )


# --------------------------------------------------------------------------- encoding


def encode_ledger_metadata_v3(metadata: LedgerMetadata) -> bytes:
    """The v3 bytes BookKeeper would store for ``metadata``: header, varint length, message.

    Fields are written in field-number order; optional fields (lastEntryId, ackQuorumSize,
    digestType, password, ctime, cToken) only when the decoded blob had them, and unknown
    fields are written back, so re-encoding a decoded v3 blob gives the same bytes. Raises
    MetadataFormatError when ``metadata`` does not validate; the result always decodes.
    """
    _validate(metadata)
    body = _to_message(metadata).SerializeToString()
    return HEADER_MAGIC + b"3\n" + encode_varint(len(body)) + body


def encode_varint(value: int) -> bytes:
    """``value`` (non-negative) as a protobuf varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _stored_last_entry_id(metadata: LedgerMetadata) -> int | None:
    """Field 4 to write: the effective value when CLOSED (omitted if it was absent and is -1)."""
    stored = metadata._wire.last_entry_id
    if metadata.state is not LedgerState.CLOSED or metadata.last_entry_id is None:
        return stored
    if metadata.last_entry_id == -1 and stored is None:
        return None
    return metadata.last_entry_id


def _to_message(metadata: LedgerMetadata) -> pb.LedgerMetadataFormat:
    """The LedgerMetadataFormat message for ``metadata``, unknown fields included."""
    wire = metadata._wire
    msg = _Format()
    msg.quorumSize = metadata.write_quorum
    msg.ensembleSize = metadata.ensemble_size
    closed_length = metadata.length if metadata.state is LedgerState.CLOSED else None
    msg.length = wire.length if closed_length is None else closed_length
    last_entry_id = _stored_last_entry_id(metadata)
    if last_entry_id is not None:
        msg.lastEntryId = last_entry_id
    msg.state = _STATE_NUMBER[metadata.state]
    _add_segments(msg, metadata.segments, wire.segment_unknown)
    if metadata.digest_type is not None:
        msg.digestType = _DIGEST_NUMBER[metadata.digest_type]
    if metadata.password is not None:
        msg.password = metadata.password
    if wire.ack_quorum_stored or metadata.ack_quorum != metadata.write_quorum:
        msg.ackQuorumSize = metadata.ack_quorum
    if metadata.ctime is not None:
        msg.ctime = metadata.ctime
    _add_custom_metadata(msg, metadata.custom_metadata, wire.custom_unknown)
    if metadata.c_token is not None:
        msg.cToken = metadata.c_token
    if wire.unknown:
        msg.MergeFromString(wire.unknown)
    return msg


def _add_segments(msg: pb.LedgerMetadataFormat, segments: tuple[Segment, ...], unknown: tuple[bytes, ...]) -> None:
    """Append ``segments``; ``unknown`` (per segment) is used only when it matches them one to one."""
    extras = unknown if len(unknown) == len(segments) else (b"",) * len(segments)
    for segment, extra in zip(segments, extras, strict=True):
        stored = msg.segment.add()
        stored.ensembleMember.extend(segment.ensemble)
        stored.firstEntryId = segment.first_entry_id
        if extra:
            stored.MergeFromString(extra)


def _add_custom_metadata(
    msg: pb.LedgerMetadataFormat, entries: tuple[tuple[str, bytes], ...], unknown: tuple[bytes, ...]
) -> None:
    """Append the custom metadata ``entries`` (key and value always written, as BookKeeper does)."""
    extras = unknown if len(unknown) == len(entries) else (b"",) * len(entries)
    for (key, value), extra in zip(entries, extras, strict=True):
        stored = msg.customMetadata.add()
        stored.key = key
        stored.value = value
        if extra:
            stored.MergeFromString(extra)


# --------------------------------------------------------------------------- plain values

#: :func:`metadata_to_plain`'s tuple: the fields in their order, enums as their values, segments as (first entry,
#: ensemble) pairs, and last the stored form's details (:class:`_WireDetails`' fields).
PlainMetadata = tuple[
    int,
    str,
    int,
    int,
    int,
    int | None,
    int | None,
    tuple[tuple[int, tuple[str, ...]], ...],
    str | None,
    bytes | None,
    int | None,
    tuple[tuple[str, bytes], ...],
    int | None,
    tuple[int | None, int, bool, bytes, tuple[bytes, ...], tuple[bytes, ...]],
]
_STATE_BY_VALUE: Final = {state.value: state for state in LedgerState}
_DIGEST_BY_VALUE: Final = {digest.value: digest for digest in DigestType}


def metadata_to_plain(metadata: LedgerMetadata) -> PlainMetadata:
    """``metadata`` as a tuple of plain values (for :mod:`marshal`), with what re-encoding needs: handing metadata
    decoded in one process of a job to another of the same job costs a fraction of decoding it again
    (``bench/answer_codec_bench.py``). Never for bytes kept or received: :func:`metadata_from_plain` trusts its input
    as the decoder does not."""
    wire = metadata._wire
    return (
        metadata.format_version,
        metadata.state.value,
        metadata.ensemble_size,
        metadata.write_quorum,
        metadata.ack_quorum,
        metadata.last_entry_id,
        metadata.length,
        tuple((s.first_entry_id, s.ensemble) for s in metadata.segments),
        None if metadata.digest_type is None else metadata.digest_type.value,
        metadata.password,
        metadata.ctime,
        metadata.custom_metadata,
        metadata.c_token,
        (
            wire.last_entry_id,
            wire.length,
            wire.ack_quorum_stored,
            wire.unknown,
            wire.segment_unknown,
            wire.custom_unknown,
        ),
    )


def metadata_from_plain(plain: PlainMetadata) -> LedgerMetadata:
    """The inverse of :func:`metadata_to_plain` (equal metadata, re-encoding to the same bytes); not validated."""
    version, state, size, write, ack, last, length, segments, digest, password, ctime, custom, c_token, wire = plain
    return LedgerMetadata(
        format_version=version,
        state=_STATE_BY_VALUE[state],
        ensemble_size=size,
        write_quorum=write,
        ack_quorum=ack,
        last_entry_id=last,
        length=length,
        segments=tuple(Segment(first, ensemble) for first, ensemble in segments),
        digest_type=None if digest is None else _DIGEST_BY_VALUE[digest],
        password=password,
        ctime=ctime,
        custom_metadata=custom,
        c_token=c_token,
        _wire=_WireDetails(*wire),
    )


# --------------------------------------------------------------------------- building


def build_ledger_metadata(
    *,
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    segments: Iterable[Segment | tuple[int, Iterable[str]]],
    state: LedgerState = LedgerState.CLOSED,
    last_entry_id: int = -1,
    length: int = 0,
    digest_type: DigestType | None = DigestType.CRC32C,
    password: bytes | None = b"",
    ctime: int | None = None,
    custom_metadata: Mapping[str, bytes] | Iterable[tuple[str, bytes]] = (),
    c_token: int | None = None,
) -> LedgerMetadata:
    """Validated v3 metadata as BookKeeper 4.9+ writes it.

    lastEntryId, length and ackQuorumSize are always stored (for OPEN and IN_RECOVERY ledgers the
    stored lastEntryId and length are kept but not effective); digestType, password, ctime and
    cToken are stored when not None. Raises MetadataFormatError on what the decoder would reject.
    """
    state = LedgerState(state)
    closed = state is LedgerState.CLOSED
    pairs = custom_metadata.items() if isinstance(custom_metadata, Mapping) else custom_metadata
    metadata = LedgerMetadata(
        format_version=3,
        state=state,
        ensemble_size=ensemble_size,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        last_entry_id=last_entry_id if closed else None,
        length=length if closed else None,
        segments=tuple(_as_segment(segment) for segment in segments),
        digest_type=None if digest_type is None else DigestType(digest_type),
        password=None if password is None else bytes(password),
        ctime=ctime,
        custom_metadata=tuple((str(key), bytes(value)) for key, value in pairs),
        c_token=c_token,
        _wire=_WireDetails(last_entry_id=last_entry_id, length=length, ack_quorum_stored=True),
    )
    _validate(metadata)
    return metadata


def _as_segment(segment: Segment | tuple[int, Iterable[str]]) -> Segment:
    """``segment`` as a Segment with a tuple ensemble."""
    if isinstance(segment, Segment):
        return Segment(segment.first_entry_id, tuple(segment.ensemble))
    first, ensemble = segment
    return Segment(first, tuple(ensemble))
