"""The header at the start of every entry, and what it proves about a closed ledger."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.entry_header import (
    HEADER_SIZE,
    EntryHeader,
    EntryHeaderError,
    encode_entry_header,
    parse_entry_header,
)

pytestmark = pytest.mark.unit

LONG = st.integers(0, 2**63 - 1)


def body(ledger: int, entry: int, lac: int, length: int, tail: bytes = b"\x00" * 4 + b"payload") -> bytes:
    """An entry as a writer sends it, built independently of the module: four big-endian int64, digest, payload."""
    return struct.pack(">qqqq", ledger, entry, lac, length) + tail


@given(LONG, st.integers(1, 2**63 - 1), st.data(), LONG, st.binary(max_size=40))
def test_a_writers_header_parses_to_its_four_fields(
    ledger: int, entry: int, data: st.DataObject, length: int, tail: bytes
) -> None:
    lac = data.draw(st.integers(-1, entry - 1))
    header = parse_entry_header(body(ledger, entry, lac, length, tail), ledger_id=ledger, entry_id=entry)
    assert header == EntryHeader(ledger, entry, lac, length)
    assert encode_entry_header(header) == body(ledger, entry, lac, length, b"")


@given(st.integers(-1, 200), st.integers(0, 200), st.integers(-1, 199))
def test_what_a_header_proves_is_the_entries_after_the_end_up_to_its_lac(last: int, entry: int, lac: int) -> None:
    lac = min(lac, entry - 1)
    proven = EntryHeader(5, entry, lac, 0).acknowledged_beyond(last)
    reference = [e for e in range(0, 201) if last < e <= lac]  # acknowledged (≤ LAC) and dropped (> lastEntryId)
    assert list(proven) == reference


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (body(7, 3, 2, 10)[: HEADER_SIZE - 1], "shorter than its header"),
        (b"", "0 bytes"),
        (body(8, 3, 2, 10), "came back with the header of 8:3"),
        (body(7, 4, 2, 10), "came back with the header of 7:4"),
        (body(7, 3, 3, 10), "impossible header"),  # a LAC at or past the entry itself
        (body(7, 3, -2, 10), "impossible header"),
        (body(7, 3, 2, -1), "impossible header"),
    ],
)
def test_bytes_that_are_not_the_asked_entrys_header_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(EntryHeaderError, match=message):
        parse_entry_header(data, ledger_id=7, entry_id=3)
