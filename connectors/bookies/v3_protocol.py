"""BookKeeper's v3 wire protocol for GetListOfEntriesOfLedger as the client, the agent and the fake bookies share it.

A frame is a 4-byte big-endian length followed by one protobuf ``Request`` or ``Response``
(:mod:`scrutiny.proto.bookkeeper_protocol_pb2`). This module holds the framing, the requests the checker sends
(the listing request, START_TLS, a plain READ_ENTRY), and the one classification of a response into a
:class:`~scrutiny.core.verdict.BookieAnswer`: EOK with valid listing bytes is positive, ENOLEDGER the only negative,
everything else unknown with a short reason. A READ_ENTRY answer gives the entry's header
(:mod:`scrutiny.core.entry_header`) or why there is none. No sockets: :func:`read_frame` reads from a stream it is
given.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any, Final, Literal

from google.protobuf.message import DecodeError

from scrutiny.core.entry_header import EntryHeader, EntryHeaderError, parse_entry_header
from scrutiny.core.errors import ListingFormatError, ScrutinyError
from scrutiny.core.listing_codec import decode_listing_compact
from scrutiny.core.verdict import BookieAnswer
from scrutiny.proto import bookkeeper_protocol_pb2 as pb

#: BookKeeper's default maximum frame size (``nettyMaxFrameSizeBytes``): 5 MiB.
DEFAULT_MAX_FRAME_BYTES = 5 * 1024 * 1024
_LENGTH = struct.Struct(">i")
#: txnId is a uint64: request numbers wrap around at this modulus.
TXN_ID_MODULUS: Final = 2**64


class FrameSizeError(ScrutinyError):
    """A frame whose announced length is negative or above the limit: the stream cannot be trusted."""

    def __init__(self, length: int, limit: int) -> None:
        self.length = length
        self.limit = limit
        super().__init__(f"frame of {length} bytes is outside the {_size_text(limit)} limit")


def _size_text(size: int) -> str:
    return f"{size // 1024 // 1024} MiB" if size % (1024 * 1024) == 0 else f"{size} B"


def encode_frame(payload: bytes) -> bytes:
    """``payload`` with its 4-byte big-endian length in front."""
    return _LENGTH.pack(len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader, max_frame_bytes: int) -> bytes:
    """The next frame's payload. Raises ``asyncio.IncompleteReadError`` at EOF and
    :class:`FrameSizeError` (before reading the payload) when the length is out of range."""
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if length < 0 or length > max_frame_bytes:
        raise FrameSizeError(length, max_frame_bytes)
    return await reader.readexactly(length)


def _request(txn_id: int, operation: pb.OperationType) -> pb.Request:
    """A v3 request with its header: version 3, ``operation``, ``txn_id``."""
    request = pb.Request()
    header = request.header
    header.version = pb.VERSION_THREE
    header.operation = operation
    header.txnId = txn_id
    return request


def listing_request(txn_id: int, ledger_id: int) -> pb.Request:
    """A v3 GetListOfEntriesOfLedger request."""
    request = _request(txn_id, pb.GET_LIST_OF_ENTRIES_OF_LEDGER)
    request.getListOfEntriesOfLedgerRequest.ledgerId = ledger_id
    return request


def read_entry_request(txn_id: int, ledger_id: int, entry_id: int) -> pb.Request:
    """A plain v3 READ_ENTRY request: no fencing flag and no master key, so it never stops the ledger's writer."""
    request = _request(txn_id, pb.READ_ENTRY)
    request.readRequest.ledgerId = ledger_id
    request.readRequest.entryId = entry_id
    return request


def read_entry_header(ledger_id: int, entry_id: int, response: pb.Response) -> EntryHeader | str:
    """The header of the entry a matched READ_ENTRY response returns, or why there is none (a short reason).

    The effective status is the outer one unless it is EOK, then the inner one; only EOK with the ids echoed and a
    body whose header names the entry asked for gives a header.
    """
    effective = _effective_status(response, pb.READ_ENTRY, "readResponse")
    if isinstance(effective, str):
        return effective
    status, inner = effective
    if status != pb.EOK:
        return _status_reason(status)
    if inner is None or (inner.ledgerId, inner.entryId) != (ledger_id, entry_id):
        return f"EOK for another entry than {ledger_id}:{entry_id}"
    try:
        return parse_entry_header(inner.body, ledger_id=ledger_id, entry_id=entry_id)
    except EntryHeaderError as error:
        return str(error)


def start_tls_request(txn_id: int) -> pb.Request:
    """A v3 START_TLS request: header operation START_TLS and an empty StartTLSRequest (field 106)."""
    request = _request(txn_id, pb.START_TLS)
    request.startTLSRequest.SetInParent()
    return request


#: What a bookie's refusal of START_TLS most likely means (BookieRequestProcessor answers
#: EBADREQ when it has no TLS configured).
_START_TLS_HINTS: Final[dict[int, str]] = {pb.EBADREQ: "TLS is not enabled on the bookie"}


def start_tls_refusal(txn_id: int, frame: bytes) -> str | None:
    """None when ``frame`` is the EOK answer to the START_TLS request ``txn_id``; else why not."""
    response = pb.Response()
    try:
        response.ParseFromString(frame)
    except DecodeError:
        return f"undecodable answer to START_TLS ({len(frame)} bytes)"
    header = response.header
    if header.operation != pb.START_TLS or header.txnId != txn_id:
        return "the answer to START_TLS is for another request"
    if not response.HasField("status"):
        return "answer to START_TLS without a status code BookKeeper defines"
    if response.status != pb.EOK:
        hint = _START_TLS_HINTS.get(response.status)
        return f"START_TLS refused with status {status_name(response.status)}" + (f": {hint}" if hint else "")
    return None


def status_name(status: int) -> str:
    """``"EIO"`` for 501; ``"status 999"`` style text for a number the schema does not name."""
    try:
        return pb.StatusCode.Name(status)
    except ValueError:
        return f"code {status}"


# --------------------------------------------------------------------------- classification (pure)

_STATUS_HINTS: dict[int, str] = {
    pb.EUA: "bookie requires authentication",
    pb.EBADREQ: "the bookie rejected the request (it may not support GetListOfEntriesOfLedger)",
    pb.EBADVERSION: "the bookie rejected the protocol version",
    pb.ETOOMANYREQUESTS: "the bookie is overloaded",
}


def _status_reason(status: int) -> str:
    hint = _STATUS_HINTS.get(status)
    return f"status {status_name(status)}" + (f": {hint}" if hint else "")


_INNER_NAMES: Final[dict[str, str]] = {
    "getListOfEntriesOfLedgerResponse": "GetListOfEntriesOfLedger response",
    "readResponse": "read response",
}


def _effective_status(response: pb.Response, operation: int, inner_field: str) -> tuple[int, Any] | str:
    """(effective status, inner message or None) of a response to ``operation``, or why it has none: the outer
    status unless it is EOK, then the inner message's (which must be there, with a status)."""
    if response.header.operation != operation:
        return "response to another operation"
    if not response.HasField("status"):
        return "response without a status code BookKeeper defines"
    inner = getattr(response, inner_field) if response.HasField(inner_field) else None
    status = response.status
    if status == pb.EOK:
        if inner is None:
            return f"EOK without a {_INNER_NAMES[inner_field]}"
        if not inner.HasField("status"):
            return "inner response without a status code BookKeeper defines"
        status = inner.status
    return status, inner


def check_response(ledger_id: int, response: pb.Response) -> BookieAnswer | bytes:
    """The answer a matched response gives, or the listing bytes still to decode.

    The effective status is the outer one unless it is EOK, then the inner one. Only EOK
    (with the ledger id echoed and listing bytes present) and ENOLEDGER (with the ledger id
    echoed) are answers; every other case is :meth:`BookieAnswer.unknown`.
    """
    effective = _effective_status(response, pb.GET_LIST_OF_ENTRIES_OF_LEDGER, "getListOfEntriesOfLedgerResponse")
    if isinstance(effective, str):
        return BookieAnswer.unknown(effective)
    status, inner = effective
    if status == pb.EUNKNOWNLEDGERSTATE:
        return BookieAnswer.in_limbo(f"{_status_reason(status)}: the ledger is in limbo on the bookie")
    if status not in (pb.EOK, pb.ENOLEDGER):
        return BookieAnswer.unknown(_status_reason(status))
    if inner is None or not inner.HasField("ledgerId"):
        return BookieAnswer.unknown(f"{status_name(status)} without the ledger id echoed")
    if inner.ledgerId != ledger_id:
        return BookieAnswer.unknown(f"{status_name(status)} for ledger {inner.ledgerId}, asked for {ledger_id}")
    if status == pb.ENOLEDGER:
        return BookieAnswer.no_ledger()
    if not inner.HasField("availabilityOfEntriesOfLedger"):
        return BookieAnswer.unknown("EOK without listing bytes")
    listing: bytes = inner.availabilityOfEntriesOfLedger
    return listing


def decode_listing_answer(data: bytes) -> BookieAnswer:
    """A positive answer from listing bytes, or unknown when they are malformed."""
    try:
        return BookieAnswer.listing(decode_listing_compact(data))
    except ListingFormatError as err:
        return BookieAnswer.unknown(f"malformed listing: {err.reason}")


def classify_response(ledger_id: int, response: pb.Response) -> BookieAnswer:
    """:func:`check_response` followed by decoding the listing bytes."""
    checked = check_response(ledger_id, response)
    return checked if isinstance(checked, BookieAnswer) else decode_listing_answer(checked)


#: How TLS starts on a v3 connection (see the module doc).
TlsMode = Literal["starttls", "direct"]
TLS_MODES: Final[tuple[TlsMode, ...]] = ("starttls", "direct")
