from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.errors import ListingFormatError
from scrutiny.core.listing_codec import (
    decode_listing,
    decode_listing_compact,
    empty_listing,
    encode_groups,
    encode_listing,
    encode_listing_per_run,
)
from scrutiny.core.sequence_groups import SequenceGroup, from_entries
from tests.strategies import expand_set


def java_listing(runs: list[tuple[int, int]]) -> bytes:
    """Bytes built field by field the way BookKeeper's bookie lays them out: one group per run."""
    header = struct.pack(">ii", 0, len(runs)) + bytes(56)
    return header + b"".join(struct.pack(">qqii", first, first, last - first + 1, 0) for first, last in runs)


def test_empty_listing_is_64_zero_bytes() -> None:
    assert empty_listing() == bytes(64)
    assert decode_listing(bytes(64)) == ()


def test_per_run_encoding_matches_java_bytes() -> None:
    entries = [e for e in range(100) if e % 5 in (0, 1)]
    groups = from_entries(entries)
    runs = [(e, e + 1) for e in range(0, 100, 5)]
    assert encode_listing_per_run(groups) == java_listing(runs)


def test_compact_encoding_of_a_healthy_stripe_is_one_group() -> None:
    # E=5, WQ=2: bookie 1 holds residues 0 and 1 of every stripe of a 1M-entry ledger
    runs = [(e, e + 1) for e in range(0, 1_000_000, 5)]
    java = java_listing(runs)
    assert len(java) == 64 + 24 * 200_000
    compact = encode_listing(decode_listing(java))
    assert len(compact) == 64 + 24
    assert decode_listing(compact) == (SequenceGroup(0, 999_995, 2, 5),)


def test_periodic_groups_decode() -> None:
    data = encode_groups([SequenceGroup(0, 20, 2, 5), SequenceGroup(30, 30, 4, 0)])
    groups = decode_listing(data)
    assert expand_set(groups) == {0, 1, 5, 6, 10, 11, 15, 16, 20, 21, 30, 31, 32, 33}


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "shorter than the 64-byte header"),
        (bytes(63), "shorter than the 64-byte header"),
        (struct.pack(">ii", 1, 0) + bytes(56), "unsupported version 1"),
        (struct.pack(">ii", 0, 2) + bytes(56) + struct.pack(">qqii", 0, 0, 1, 0), "announces 2 groups"),
        (struct.pack(">ii", 0, 0) + bytes(56) + b"\x00", "announces 0 groups"),
        (struct.pack(">ii", 0, -1) + bytes(56), "negative group count"),
        (struct.pack(">ii", 0, 0) + b"\x01" + bytes(55), "reserved header bytes"),
        (struct.pack(">ii", 0, 1) + bytes(56) + struct.pack(">qqii", 0, 0, 0, 0), "group 0: sequence size 0"),
        (struct.pack(">ii", 0, 1) + bytes(56) + struct.pack(">qqii", 5, 4, 1, 1), "group 0: last sequence start"),
        (struct.pack(">ii", 0, 1) + bytes(56) + struct.pack(">qqii", 0, 9, 1, 5), "multiple of period"),
        (struct.pack(">ii", 0, 1) + bytes(56) + struct.pack(">qqii", -3, -3, 1, 0), "negative first"),
        (
            struct.pack(">ii", 0, 2)
            + bytes(56)
            + struct.pack(">qqii", 10, 10, 1, 0)
            + struct.pack(">qqii", 3, 3, 1, 0),
            "not after group 0",
        ),
    ],
)
def test_malformed_listings_are_rejected_clearly(data: bytes, fragment: str) -> None:
    with pytest.raises(ListingFormatError, match=fragment):
        decode_listing(data)
    with pytest.raises(ListingFormatError, match=fragment):
        decode_listing_compact(data)


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 500), max_size=120))
def test_both_encodings_round_trip(entries: set[int]) -> None:
    groups = from_entries(sorted(entries))
    for data in (encode_listing(groups), encode_listing_per_run(groups)):
        assert expand_set(decode_listing(data)) == entries
        assert decode_listing_compact(data) == groups  # compact form is canonical
    assert len(encode_listing(groups)) <= len(encode_listing_per_run(groups))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_listing_format_error(data: bytes) -> None:
    with contextlib.suppress(ListingFormatError):
        decode_listing(data)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-5, 50), st.integers(-5, 50), st.integers(-2, 6), st.integers(-2, 12)), max_size=4)
)
def test_random_groups_behind_a_valid_header_never_crash(raw: list[tuple[int, int, int, int]]) -> None:
    data = struct.pack(">ii", 0, len(raw)) + bytes(56) + b"".join(struct.pack(">qqii", *g) for g in raw)
    with contextlib.suppress(ListingFormatError):
        decode_listing(data)
