"""Pure parts of the DbLedgerStorage backend: directory choice, key layout, LedgerData, runs, answers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.agent.dbstorage import (
    LedgerRecord,
    answer_for,
    decode_ledger_record,
    directory_index,
    entry_key,
    groups_of_runs,
    ledger_key,
    runs_of,
)
from scrutiny.agent.server import ListingStatus
from scrutiny.core.listing_codec import decode_listing
from scrutiny.core.sequence_groups import SequenceGroup, expand, from_entries

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def java_sign_safe_mod(dividend: int, divisor: int) -> int:
    """BookKeeper's MathUtils.signSafeMod: Java's truncating remainder, plus the divisor when negative."""
    quotient = abs(dividend) // divisor * (1 if dividend >= 0 else -1)
    mod = dividend - quotient * divisor
    return mod + divisor if mod < 0 else mod


@given(INT64, st.integers(min_value=1, max_value=64))
def test_directory_index_is_bookkeepers_sign_safe_mod(ledger_id: int, directories: int) -> None:
    assert directory_index(ledger_id, directories) == java_sign_safe_mod(ledger_id, directories)


def test_directory_index_of_negative_ids_is_not_the_unsigned_residue() -> None:
    assert directory_index(-1, 3) == 2  # Java: -1 % 3 == -1, + 3
    assert (2**64 - 1) % 3 == 0  # the same 64 bits read as unsigned would pick directory 0
    assert directory_index(-7, 4) == 1 and directory_index(7, 4) == 3
    assert directory_index(12345, 1) == 0
    with pytest.raises(ValueError):
        directory_index(1, 0)


def test_keys_are_big_endian_signed_64_bit() -> None:
    assert ledger_key(1) == bytes(7) + b"\x01"
    assert entry_key(0x0102, 0x0A0B) == bytes(6) + b"\x01\x02" + bytes(6) + b"\x0a\x0b"
    flags_key = bytes.fromhex("ffffffffffff1103")  # the storage-flags key of the ledgers database
    assert ledger_key(int.from_bytes(flags_key, "big", signed=True)) == flags_key
    assert int.from_bytes(flags_key, "big", signed=True) < 0


def test_ledger_record_decodes_bookkeepers_field_numbers() -> None:
    # LedgerData as BookKeeper encodes it: 1 exists, 2 fenced, 3 masterKey, 4 explicitLac, 5 limbo.
    raw = bytes([0x08, 1, 0x10, 1, 0x1A, 3, 1, 2, 3, 0x22, 2, 9, 9, 0x28, 1])
    assert decode_ledger_record(raw) == LedgerRecord(exists=True, fenced=True, limbo=True)
    assert decode_ledger_record(bytes([0x08, 1, 0x1A, 0])) == LedgerRecord(exists=True, fenced=False, limbo=False)
    with pytest.raises(ValueError, match="undecodable ledger record"):
        decode_ledger_record(b"\x1a\x05ab")  # a length running past the end


@given(st.sets(st.integers(min_value=0, max_value=300), max_size=80))
def test_runs_and_groups_describe_exactly_the_entries(entries: set[int]) -> None:
    ordered = sorted(entries)
    runs = runs_of(ordered)
    assert [e for first, last in runs for e in range(first, last + 1)] == ordered
    assert all(b[0] > a[1] + 1 for a, b in itertools.pairwise(runs))  # maximal runs
    groups = groups_of_runs(runs)
    assert list(expand(groups)) == ordered
    assert groups == from_entries(ordered)


def test_a_striped_ledger_is_one_group() -> None:
    entries = [e for e in range(100_000) if e % 5 < 2]  # bookie 0 of E=5, WQ=2
    assert groups_of_runs(runs_of(entries)) == [SequenceGroup(0, 99_995, 2, 5)]


def test_answers_from_record_and_runs() -> None:
    limbo = answer_for(4, LedgerRecord(True, False, True), [(0, 9)], 1000)
    assert limbo.status is ListingStatus.UNKNOWN and "limbo" in limbo.reason
    absent = answer_for(4, None, [], 1000)
    assert absent.status is ListingStatus.NO_LEDGER and absent.as_of_ms == 1000
    orphan = answer_for(4, None, [(3, 5)], 1000)
    assert orphan.status is ListingStatus.POSITIVE and not orphan.has_ledger_record
    assert decode_listing(orphan.listing) == (SequenceGroup.run(3, 5),)
    empty = answer_for(4, LedgerRecord(True, True, False), [], 1000)
    assert empty.status is ListingStatus.POSITIVE and empty.fenced and empty.has_ledger_record
    assert decode_listing(empty.listing) == ()
