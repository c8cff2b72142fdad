from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Sequence

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
from scrutiny.core.sequence_groups import MAX_ENTRY_ID, SequenceGroup, count_of, expand, from_entries
from tests.support.strategies import assert_fair_shares, expand_set, one_byte_change, sequence_groups


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


def test_touching_runs_encode_as_one_java_group() -> None:
    # a Java bookie lists maximal runs: entries 0-9 are one group (0, 0, 10, 0)
    assert encode_listing_per_run([SequenceGroup.run(0, 4), SequenceGroup.run(5, 9)]) == java_listing([(0, 9)])
    assert java_listing([(0, 9)]) == struct.pack(">ii", 0, 1) + bytes(56) + struct.pack(">qqii", 0, 0, 10, 0)
    assert encode_listing_per_run([SequenceGroup(0, 10, 5, 5)]) == java_listing([(0, 14)])  # runs 0-4, 5-9, 10-14
    groups = [SequenceGroup(0, 10, 2, 5), SequenceGroup.run(12, 13), SequenceGroup(20, 30, 1, 10)]
    assert encode_listing_per_run(groups) == java_listing([(0, 1), (5, 6), (10, 13), (20, 20), (30, 30)])


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 300), max_size=120), st.booleans())
def test_per_run_encoding_is_java_bytes_of_maximal_runs(entries: set[int], one_group_per_entry: bool) -> None:
    ordered = sorted(entries)
    runs: list[tuple[int, int]] = []
    for entry in ordered:  # the maximal runs, naively
        if runs and runs[-1][1] == entry - 1:
            runs[-1] = (runs[-1][0], entry)
        else:
            runs.append((entry, entry))
    groups = [SequenceGroup.run(e, e) for e in ordered] if one_group_per_entry else from_entries(ordered)
    assert encode_listing_per_run(groups) == java_listing(runs)


def test_per_run_encoding_still_splits_runs_longer_than_an_int32() -> None:
    limit = 2**31 - 1
    # two touching runs fuse into one of 2^31 + 6 entries, which needs two groups
    data = encode_listing_per_run([SequenceGroup.run(0, limit - 1), SequenceGroup.run(limit, 2**31 + 5)])
    assert data == java_listing([(0, limit - 1), (limit, 2**31 + 5)])
    assert decode_listing_compact(data) == [SequenceGroup.run(0, 2**31 + 5)]


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


def listing(*groups: Sequence[int]) -> bytes:
    """Listing bytes with these raw groups, unchecked."""
    return struct.pack(">ii", 0, len(groups)) + bytes(56) + b"".join(struct.pack(">qqii", *g) for g in groups)


@pytest.mark.parametrize(
    ("groups", "index", "previous_end"),
    [
        (((0, 0, 10, 0), (5, 5, 3, 0)), 1, 9),  # a run inside the previous run (fast path)
        (((0, 0, 10, 0), (9, 9, 1, 0)), 1, 9),  # sharing one entry
        (((0, 0, 1, 0), (2, 2, 3, 0), (4, 4, 1, 0)), 2, 4),
        (((0, 20, 2, 5), (3, 3, 1, 0)), 1, 21),  # between the runs of a periodic group: still overlapping
        (((0, 20, 2, 5), (2, 22, 1, 5)), 1, 21),  # interleaved periodic groups
        (((0, 0, 4, 0), (10, 30, 2, 10), (25, 25, 1, 0)), 2, 31),
        (((10, 10, 1, 0), (10, 10, 1, 0)), 1, 10),  # duplicate group
    ],
)
def test_overlapping_groups_are_rejected_with_their_offset(
    groups: tuple[tuple[int, int, int, int], ...], index: int, previous_end: int
) -> None:
    data = listing(*groups)
    for decode in (decode_listing, decode_listing_compact):
        with pytest.raises(
            ListingFormatError, match=f"group {index} starts at .* ends at entry {previous_end}"
        ) as info:
            decode(data)
        assert info.value.offset == 64 + 24 * index
        assert f"at byte {64 + 24 * index}" in str(info.value)


def test_touching_groups_are_not_overlapping() -> None:
    data = listing((0, 0, 5, 0), (5, 5, 5, 0), (10, 20, 1, 5), (21, 21, 2, 0))
    assert decode_listing(data) == (
        SequenceGroup(0, 0, 5, 0),
        SequenceGroup(5, 5, 5, 0),
        SequenceGroup(10, 20, 1, 5),
        SequenceGroup(21, 21, 2, 0),
    )


@pytest.mark.parametrize(
    ("groups", "fragment"),
    [
        ([SequenceGroup.run(5, 9), SequenceGroup.run(0, 3)], "group 1 starts at 0, not after group 0"),
        ([SequenceGroup(0, 0, 10, 0), SequenceGroup(5, 5, 3, 0)], "group 1 starts at 5, not after group 0"),
        ([SequenceGroup(0, 20, 2, 5), SequenceGroup(2, 22, 1, 5)], "group 1 starts at 2, not after group 0"),
        ([SequenceGroup.run(0, 0), SequenceGroup.run(0, 0)], "group 1 starts at 0"),
        ([SequenceGroup(0, 0, 0, 0)], "group 0: sequence size 0"),
        ([SequenceGroup(3, 3, 1, 0), SequenceGroup(4, 9, 1, 4)], "group 1: last sequence start 9"),
        ([SequenceGroup(0, 0, 2**31, 0)], "group 0 .* int32"),
    ],
)
def test_encoder_refuses_what_its_decoder_rejects(groups: list[SequenceGroup], fragment: str) -> None:
    with pytest.raises(ListingFormatError, match=fragment):
        encode_groups(groups)


def test_encoders_refuse_unsorted_or_overlapping_input() -> None:
    for groups in (
        [SequenceGroup.run(5, 9), SequenceGroup.run(0, 3)],
        [SequenceGroup.run(0, 9), SequenceGroup.run(5, 12)],
        [SequenceGroup(0, 20, 2, 5), SequenceGroup.run(7, 7)],
    ):
        for encode in (encode_listing, encode_listing_per_run):
            with pytest.raises(ListingFormatError, match="not after group"):
                encode(groups)


@settings(max_examples=300, deadline=None)
@given(st.lists(sequence_groups(max_entry=60), max_size=5))
def test_encode_groups_writes_only_what_decodes(groups: list[SequenceGroup]) -> None:
    try:
        data = encode_groups(groups)
    except ListingFormatError:
        with pytest.raises(ListingFormatError):
            decode_listing(listing(*(g.as_list() for g in groups)))
        return
    assert decode_listing(data) == tuple(groups)


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 500), max_size=120))
def test_both_encodings_round_trip(entries: set[int]) -> None:
    groups = from_entries(sorted(entries))
    for data in (encode_listing(groups), encode_listing_per_run(groups)):
        assert expand_set(decode_listing(data)) == entries
        assert decode_listing_compact(data) == groups  # compact form is canonical
    assert len(encode_listing(groups)) <= len(encode_listing_per_run(groups))


# --------------------------------------------------------------------------- fuzz: decode or ListingFormatError
#
# The inputs are valid listings with ONE change, so that a good share still decodes (and has its groups checked
# against the format's rules, stated below without the codec's code) and a good share is refused. Each fuzz test
# counts both outcomes and fails when either falls below its share: a generator that drifts back to inputs that
# never decode would otherwise pass while checking nothing.

FUZZ = settings(max_examples=300, deadline=None, database=None)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN = -(2**63)
FIELD_RANGES = ((INT64_MIN, MAX_ENTRY_ID), (INT64_MIN, MAX_ENTRY_ID), (INT32_MIN, INT32_MAX), (INT32_MIN, INT32_MAX))
FIELD_NAMES = ("first start", "last start", "size", "period")
FIELD_EDGES = ((0, 1, -1, MAX_ENTRY_ID, INT64_MIN),) * 2 + ((0, 1, -1, INT32_MAX, INT32_MIN),) * 2

Fields = tuple[int, int, int, int]


def reference_groups(data: bytes) -> list[Fields] | None:
    """The groups a listing holds, read straight from the format (module docstring of the codec, BP-34), or None
    when the bytes break one of its rules: a 64-byte header (version 0, a group count, 56 zero bytes), exactly
    that many 24-byte groups, each with first start >= 0, size >= 1, period >= 0, last start >= first start, a
    single run when the period is 0, else runs ``period`` apart and no longer than it, ending at or below the
    largest entry id, and starting after the last entry of the group before it."""
    if len(data) < 64:
        return None
    version, count = struct.unpack_from(">ii", data)
    if version != 0 or any(data[8:64]) or count < 0 or len(data) != 64 + 24 * count:
        return None
    groups: list[Fields] = [struct.unpack_from(">qqii", data, 64 + 24 * index) for index in range(count)]
    previous_last = -1
    for first, last, size, period in groups:
        if first <= previous_last or size < 1 or period < 0 or last < first or last + size - 1 > MAX_ENTRY_ID:
            return None
        if period == 0 and last != first:
            return None
        if period > 0 and ((last - first) % period or size > period):
            return None
        previous_last = last + size - 1
    return groups


@st.composite
def ordered_groups(draw: st.DrawFn, min_size: int = 0, gaps: Sequence[int] = (0, 0, 1, 2, 5)) -> list[Fields]:
    """``min_size`` to five consistent groups in order, each ``gaps`` entries after the one before (0: touching, the
    next starts right after the last entry), often with runs exactly as long as their period, near zero, the int32
    limit or the largest entry id."""
    cursor = draw(st.sampled_from([0, 0, 1, 5, 2**31 - 4, MAX_ENTRY_ID - 120]))
    groups: list[Fields] = []
    for _ in range(draw(st.integers(min_size, 5))):
        cursor += draw(st.sampled_from(gaps))
        size = draw(st.integers(1, 4))
        if draw(st.booleans()):
            group = (cursor, cursor, size, 0)
        else:
            period = size + draw(st.sampled_from([0, 0, 1, 3]))
            group = (cursor, cursor + draw(st.integers(0, 3)) * period, size, period)
        if group[1] + size - 1 > MAX_ENTRY_ID:
            break
        groups.append(group)
        cursor = group[1] + size
    return groups


#: Hypothesis draws the ends of a list more often than its middle: the changes that tell most are there.
GROUP_CHANGES = ("resize", "nudge", "shift", "edge", "swap", "none", "duplicate", "delete", "nudge", "resize", "shift")


@st.composite
def one_group_change(draw: st.DrawFn, groups: list[Fields]) -> tuple[list[Fields], str]:
    """``groups`` with ONE change: a field moved by one or set to a boundary of its type, a periodic group's size
    set to its period give or take one (or its period to its size), a group shifted by one entry (both starts), two
    neighbours swapped, a group duplicated or deleted."""
    kind = draw(st.sampled_from(GROUP_CHANGES))
    if kind == "none" or not groups or (kind == "swap" and len(groups) < 2):
        return groups, "none"
    out = list(groups)
    periodic = [index for index, group in enumerate(groups) if group[3] > 0]
    if kind == "resize" and periodic:
        at = draw(st.sampled_from(periodic))
    else:
        at = draw(st.integers(0, len(out) - (2 if kind == "swap" else 1)))
    first, last, size, period = out[at]
    if kind == "swap":
        out[at], out[at + 1] = out[at + 1], out[at]
        return out, f"swap groups {at} and {at + 1}"
    if kind == "duplicate":
        return [*out[: at + 1], *out[at:]], f"duplicate group {at}"
    if kind == "delete":
        return out[:at] + out[at + 1 :], f"delete group {at}"
    if kind == "resize" and period > 0:
        overlap = draw(st.sampled_from([1, 1, 0, -1]))  # 1: runs overlap by one entry, 0: runs touch
        changed = (
            (first, last, period + overlap, period) if draw(st.booleans()) else (first, last, size, size - overlap)
        )
        out[at] = changed
        return out, f"resize group {at}: {groups[at]} -> {changed}"
    delta = draw(st.sampled_from([1, -1]))
    if kind == "shift":
        if not INT64_MIN <= first + delta <= last + delta <= MAX_ENTRY_ID:
            delta = -delta
        out[at] = (first + delta, last + delta, size, period)
        return out, f"shift group {at} by {delta}"
    field = 2 if kind == "resize" else draw(st.integers(0, 3))  # a single run resizes by one entry
    fields = list(out[at])
    low, high = FIELD_RANGES[field]
    if kind == "edge":
        fields[field] = draw(st.sampled_from(FIELD_EDGES[field]))
    else:
        fields[field] += delta if low <= fields[field] + delta <= high else -delta
    out[at] = (fields[0], fields[1], fields[2], fields[3])
    return out, f"{kind} the {FIELD_NAMES[field]} of group {at}: {groups[at]} -> {out[at]}"


def field_spots(count: int) -> list[int]:
    """The low-order byte of the group count and of the size and period of each of ``count`` groups: one more or one
    less there is a run that reaches into the next group, or runs that overlap or no longer touch."""
    return [7] + [64 + 24 * index + end for index in range(count) for end in (19, 23)]


def test_arbitrary_bytes_decode_or_raise_listing_format_error() -> None:
    """A valid listing with one byte changed (three in four in the low byte of the group count, a size or a period)
    decodes exactly as the format reads it, or raises ListingFormatError exactly when the format refuses it."""
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(st.data(), ordered_groups(min_size=1, gaps=(0, 0, 0, 1)))
    def run(data: st.DataObject, groups: list[Fields]) -> None:
        changed = data.draw(one_byte_change(listing(*groups), hot=field_spots(len(groups))))
        outcomes[decodes_or_rejects(changed.data)] += 1

    run()
    assert_fair_shares(outcomes, decoded=0.1, rejected=0.3)


def test_random_groups_behind_a_valid_header_never_crash() -> None:
    """Valid groups with one group or field changed, behind a valid header, decode to exactly those groups when the
    format allows them and raise ListingFormatError when it does not."""
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(st.data(), ordered_groups(min_size=1))
    def run(data: st.DataObject, groups: list[Fields]) -> None:
        raw, change = data.draw(one_group_change(groups))
        if change == "none":
            assert decode_listing(listing(*raw)) == tuple(SequenceGroup(*g) for g in groups)
        outcomes[decodes_or_rejects(listing(*raw))] += 1

    run()
    assert_fair_shares(outcomes, decoded=0.25, rejected=0.25)


def decodes_or_rejects(data: bytes) -> str:
    """``"rejected"`` when the bytes raise ListingFormatError, which they must exactly when the format refuses them
    (both decoders); ``"decoded"`` when they decode to the groups the format reads, which are ordered, disjoint and
    consistent and re-encode to exactly these bytes, and whose compact decoding holds the same entries."""
    expected = reference_groups(data)
    try:
        groups = decode_listing(data)
    except ListingFormatError:
        assert expected is None, f"a valid listing was refused: {expected}"
        with pytest.raises(ListingFormatError):
            decode_listing_compact(data)
        return "rejected"
    assert expected is not None, f"decoded {groups}, but the format refuses these bytes"
    assert [group.as_list() for group in groups] == [list(fields) for fields in expected]
    previous_end = -1
    for group in groups:
        assert group.first_start > previous_end, f"{group} starts at or before {previous_end}, the previous end"
        assert group.size >= 1 and group.last_start >= group.first_start, group
        if group.period == 0:
            assert group.last_start == group.first_start, group
        else:
            assert group.period >= group.size and (group.last_start - group.first_start) % group.period == 0, group
        previous_end = group.last_start + group.size - 1
    assert previous_end <= MAX_ENTRY_ID
    assert encode_groups(list(groups)) == data
    compact = decode_listing_compact(data)
    assert count_of(compact) == count_of(groups)
    if count_of(groups) <= 10_000:
        assert list(expand(compact)) == list(expand(groups))
    return "decoded"
