"""The header every BookKeeper entry carries, as its writer sent it, and what it proves about a closed ledger.

A bookie stores an entry exactly as the writer sent it, and a plain READ_ENTRY returns it so: a 32-byte header of
four big-endian signed 64-bit integers (the ledger id, the entry id, the writer's last-add-confirmed when it sent
this entry, the ledger's length including this entry), then the digest and the payload (neither is read here).

The last-add-confirmed in an entry is the writer's promise that every entry up to it had been acknowledged by an
ack quorum of bookies. An entry held beyond a closed ledger's ``lastEntryId`` whose last-add-confirmed is above
``lastEntryId`` therefore proves that the close dropped acknowledged entries (``lastEntryId + 1`` up to that
last-add-confirmed): a recovery closed the ledger too low, whatever the number of copies left.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from scrutiny.core.errors import ScrutinyError

__all__ = ["HEADER_SIZE", "EntryHeader", "EntryHeaderError", "encode_entry_header", "parse_entry_header"]

#: Bytes of the header at the start of every entry: four big-endian int64.
HEADER_SIZE: Final = 32
_HEADER: Final = struct.Struct(">qqqq")


class EntryHeaderError(ScrutinyError, ValueError):
    """An entry's bytes do not start with a header for the entry that was asked for."""


@dataclass(frozen=True)
class EntryHeader:
    """The header of one entry: whose entry it is, the writer's last-add-confirmed then, the ledger's length."""

    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int

    def acknowledged_beyond(self, last_entry_id: int) -> range:
        """The entries after ``last_entry_id`` that this entry proves were acknowledged (empty when none)."""
        return range(last_entry_id + 1, max(last_entry_id, self.last_add_confirmed) + 1)


def parse_entry_header(body: bytes, *, ledger_id: int, entry_id: int) -> EntryHeader:
    """The header of ``body``, an entry returned for ``(ledger_id, entry_id)``.

    EntryHeaderError when the body is shorter than a header, names another entry, or holds values no writer sends
    (a last-add-confirmed below -1 or not below the entry itself, a negative length).
    """
    if len(body) < HEADER_SIZE:
        raise EntryHeaderError(f"entry {ledger_id}:{entry_id} is {len(body)} bytes, shorter than its header")
    header = EntryHeader(*_HEADER.unpack_from(body))
    if (header.ledger_id, header.entry_id) != (ledger_id, entry_id):
        raise EntryHeaderError(
            f"entry {ledger_id}:{entry_id} came back with the header of {header.ledger_id}:{header.entry_id}"
        )
    if not -1 <= header.last_add_confirmed < header.entry_id or header.length < 0:
        raise EntryHeaderError(
            f"entry {ledger_id}:{entry_id} has an impossible header: last-add-confirmed"
            f" {header.last_add_confirmed}, length {header.length}"
        )
    return header


def encode_entry_header(header: EntryHeader) -> bytes:
    """The 32 header bytes of ``header`` (a simulated bookie's entries start with them)."""
    return _HEADER.pack(header.ledger_id, header.entry_id, header.last_add_confirmed, header.length)
