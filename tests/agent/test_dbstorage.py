"""The DbLedgerStorage backend: its pure parts (directory choice, key layout, LedgerData, runs, answers) and its ledger
listing, read from RocksDB databases laid out like DbLedgerStorage's."""

from __future__ import annotations

import itertools
import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrutiny.agent import dbstorage
from scrutiny.agent.dbstorage import (
    CANCEL_CHECK_LEDGERS,
    DbLedgerStorageBackend,
    LedgerRecord,
    StorageUnavailableError,
    answer_for,
    decode_ledger_record,
    directory_index,
    entry_key,
    groups_of_runs,
    ledger_key,
    runs_of,
)
from scrutiny.agent.server import ListingCancelledError, ListingStatus
from scrutiny.core.held_ledgers import LISTING_START, NO_ENTRY, HeldLedger, LedgerPage
from scrutiny.core.listing_codec import decode_listing
from scrutiny.core.sequence_groups import SequenceGroup, expand, from_entries
from tests.agent.fake_bookie import FLAGS_KEY, FakeBookie

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


# ---------------------------------------------------------------- the ledger listing, on RocksDB


@dataclass(frozen=True)
class Held:
    """What the test writes of one ledger: entries (any ids, negative ones included) and a record."""

    entries: frozenset[int] = frozenset()
    record: str | None = None  # None, "plain", "limbo" or "key16" (a 16-byte record key, after an index rebuild)


def write(bookie: FakeBookie, ledgers: dict[int, Held]) -> None:
    for ledger_id, held in ledgers.items():
        if held.record is not None:
            bookie.put_record(ledger_id, limbo=held.record == "limbo", key16=held.record == "key16")
        if held.entries:
            bookie.put_entries(ledger_id, sorted(held.entries))
    bookie.flush()


def reference(ledgers: dict[int, Held]) -> list[HeldLedger]:
    """The listing, computed the simple way: every ledger with a record or a non-negative entry, sorted."""
    out = []
    for ledger_id in sorted(ledgers):
        held = ledgers[ledger_id]
        entries = [e for e in held.entries if e >= 0]
        if held.record is None and not entries:
            continue
        first, last = (min(entries), max(entries)) if entries else (NO_ENTRY, NO_ENTRY)
        out.append(HeldLedger(ledger_id, held.record is not None, held.record == "limbo", first, last))
    return out


def pages(backend: DbLedgerStorageBackend, size: int) -> list[LedgerPage]:
    """Every page of the listing, asking ``size`` ledgers a page (at most 10,000 pages)."""
    out: list[LedgerPage] = []
    after = LISTING_START
    for _ in range(10_000):
        page = backend.list_ledgers(after, size)
        out.append(page)
        if page.end:
            return out
        assert page.ledgers, "an empty page that does not end"
        after = page.ledgers[-1].ledger_id
    raise AssertionError("the listing never ended")


@pytest.fixture
def three_dirs(tmp_path: Path) -> Iterator[FakeBookie]:
    fake = FakeBookie(tmp_path / "bookie", 3)
    try:
        yield fake
    finally:
        fake.close()


KINDS = {
    3: Held(frozenset({0, 1, 2, 7}), "plain"),  # both
    4: Held(frozenset({5, 2**40, 2**40 + 1})),  # entries only, a huge gap between them
    5: Held(record="plain"),  # a record only
    6: Held(frozenset(range(10)), "limbo"),
    7: Held(record="limbo"),
    8: Held(frozenset({-1, -0x1000})),  # negative entry ids only: nothing held
    9: Held(frozenset({3, -1}), "key16"),
    12: Held(frozenset({2**62})),
    2**40: Held(frozenset({0})),
}


def test_every_kind_of_held_ledger_is_listed_with_its_first_and_last_entry(
    three_dirs: FakeBookie, tmp_path: Path
) -> None:
    write(three_dirs, KINDS)
    for directory in range(3):  # negative ids sort after every ledger: never listed
        three_dirs.db(directory, "ledgers")[FLAGS_KEY] = b"\x00\x00\x00\x01"
        three_dirs.db(directory, "ledgers")[ledger_key(-5)] = b"\x00"  # not even a LedgerData: never read
    three_dirs.put_entries(-7, [0, 1], home=0)
    three_dirs.put_entries(-(2**63), [4], home=1)
    three_dirs.flush()
    backend = DbLedgerStorageBackend(three_dirs.dirs, state_dir=tmp_path / "state")
    try:
        before = int(time.time() * 1000)
        page = backend.list_ledgers(LISTING_START, 100)
        after = int(time.time() * 1000)
    finally:
        backend.close()
    assert page.end and before <= page.as_of_ms <= after
    assert list(page.ledgers) == [
        HeldLedger(3, True, False, 0, 7),
        HeldLedger(4, False, False, 5, 2**40 + 1),
        HeldLedger(5, True, False, NO_ENTRY, NO_ENTRY),
        HeldLedger(6, True, True, 0, 9),
        HeldLedger(7, True, True, NO_ENTRY, NO_ENTRY),
        HeldLedger(9, True, False, 3, 3),
        HeldLedger(12, False, False, 2**62, 2**62),
        HeldLedger(2**40, False, False, 0, 0),
    ]
    assert list(page.ledgers) == reference(KINDS)


def test_paging_with_every_page_size_gives_exactly_the_listing(three_dirs: FakeBookie, tmp_path: Path) -> None:
    ledgers = dict(KINDS)
    ledgers |= {i: Held(frozenset(range(i % 4)), "plain" if i % 3 else None) for i in range(20, 40)}
    write(three_dirs, ledgers)
    expected = reference(ledgers)
    backend = DbLedgerStorageBackend(three_dirs.dirs, state_dir=tmp_path / "state")
    try:
        for size in range(1, len(expected) + 2):
            got = pages(backend, size)
            assert [h for page in got for h in page.ledgers] == expected, size
            assert all(len(page.ledgers) == size for page in got[:-1]), size  # only the last page is short
            assert len(got) == math.ceil(len(expected) / size), size  # ``end`` as soon as nothing is left
        last = backend.list_ledgers(expected[-1].ledger_id, 5)
        assert last.ledgers == () and last.end
        assert backend.list_ledgers(2**63 - 1, 5).ledgers == ()
        assert list(backend.list_ledgers(21, 3).ledgers) == [h for h in expected if h.ledger_id > 21][:3]
        assert 24 not in {h.ledger_id for h in expected}  # neither a record nor an entry
    finally:
        backend.close()


def test_a_ledger_costs_a_few_seeks_whatever_its_entries(
    three_dirs: FakeBookie, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing jumps over a ledger's entries: reading 20,000 entries one by one would take 20,000 steps."""
    big = {i: Held(frozenset(range(20_000)), "plain") for i in (3, 4, 5)}
    write(three_dirs, big | {6: Held(frozenset(range(0, 40_000, 2)))})
    steps: list[str] = []

    class Counting:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            if name in ("seek", "seek_for_prev", "next", "prev"):
                steps.append(name)
            return getattr(self._inner, name)

    iterator = dbstorage._Secondary.scan_iterator
    monkeypatch.setattr(dbstorage._Secondary, "scan_iterator", lambda self: Counting(iterator(self)))
    backend = DbLedgerStorageBackend(three_dirs.dirs, state_dir=tmp_path / "state")
    try:
        page = backend.list_ledgers(LISTING_START, 10)
    finally:
        backend.close()
    assert [(h.ledger_id, h.first_entry_id, h.last_entry_id) for h in page.ledgers] == [
        (3, 0, 19_999),
        (4, 0, 19_999),
        (5, 0, 19_999),
        (6, 0, 39_998),
    ]
    # per ledger: seek_for_prev and a seek or step in locations, a step in ledgers; per directory: a first seek each
    assert 4 <= len(steps) <= 4 * 3 + 3 * 2, steps


def test_an_undecodable_record_fails_the_listing(three_dirs: FakeBookie, tmp_path: Path) -> None:
    write(three_dirs, {i: Held(frozenset({1}), "plain") for i in (3, 4, 10, 13, 16)})
    three_dirs.db(three_dirs.home(40), "ledgers")[ledger_key(40)] = b"\x1a\x05ab"  # a length past the end
    three_dirs.flush()
    backend = DbLedgerStorageBackend(three_dirs.dirs, state_dir=tmp_path / "state")
    try:
        assert [h.ledger_id for h in backend.list_ledgers(LISTING_START, 2).ledgers] == [3, 4]  # 40 not read yet
        with pytest.raises(ValueError, match="ledger 40: undecodable ledger record"):
            backend.list_ledgers(LISTING_START, 10)
        with pytest.raises(ValueError, match="cannot list"):
            backend.list_ledgers(-2, 10)
    finally:
        backend.close()


def test_a_directory_that_cannot_be_read_fails_the_listing(tmp_path: Path) -> None:
    fake = FakeBookie(tmp_path / "bookie", 1)
    try:
        write(fake, {1: Held(record="plain")})
        backend = DbLedgerStorageBackend([fake.dirs[0], tmp_path / "missing"], state_dir=tmp_path / "state")
        try:
            with pytest.raises(StorageUnavailableError, match=r"ledger directory 1: .* does not exist"):
                backend.list_ledgers(LISTING_START, 10)
        finally:
            backend.close()
    finally:
        fake.close()


def test_a_cancelled_listing_stops_reading(three_dirs: FakeBookie, tmp_path: Path) -> None:
    write(three_dirs, {i: Held(frozenset({0}), "plain") for i in range(3 * CANCEL_CHECK_LEDGERS)})
    asked = [0]

    def cancelled() -> bool:
        asked[0] += 1
        return asked[0] > 2

    backend = DbLedgerStorageBackend(three_dirs.dirs, state_dir=tmp_path / "state")
    try:
        assert len(backend.list_ledgers(LISTING_START, 10_000).ledgers) == 3 * CANCEL_CHECK_LEDGERS
        with pytest.raises(ListingCancelledError):
            backend.list_ledgers(LISTING_START, 10_000, cancelled=cancelled)
    finally:
        backend.close()
    assert asked[0] == 3


HELD = st.builds(
    Held,
    st.frozensets(st.one_of(st.integers(-3, 40), st.integers(2**40, 2**40 + 3), st.just(2**63 - 1)), max_size=6),
    st.sampled_from([None, "plain", "limbo", "key16"]),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    directories=st.integers(1, 4),
    ledgers=st.dictionaries(st.one_of(st.integers(0, 60), st.just(2**63 - 1)), HELD, max_size=25),
    size=st.integers(1, 8),
)
def test_paging_equals_the_sorted_union_of_both_databases(
    directories: int, ledgers: dict[int, Held], size: int
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        fake = FakeBookie(Path(scratch) / "bookie", directories)
        try:
            write(fake, ledgers)
            backend = DbLedgerStorageBackend(fake.dirs, state_dir=Path(scratch) / "state")
            try:
                got = pages(backend, size)
            finally:
                backend.close()
        finally:
            fake.close()
    expected = reference(ledgers)
    assert [h for page in got for h in page.ledgers] == expected
    assert len(got) == max(1, math.ceil(len(expected) / size))
