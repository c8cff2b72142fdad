"""The entry-listing bytes a bookie returns: BookKeeper's ``AvailabilityOfEntriesOfLedger`` (BP-34).

Big-endian: a 64-byte header (int32 version 0, int32 number of groups, 56 zero bytes), then
one 24-byte group each (int64 first sequence start, int64 last sequence start, int32 sequence
size, int32 sequence period), in order: each group starts after the last entry of the one
before it (BookKeeper's bookies send one group per maximal run, so their groups never overlap).

:func:`decode_listing` accepts any valid groups, periodic or one per run, and rejects
truncated, inconsistent or overlapping groups with :class:`ListingFormatError`. :func:`encode_listing`
writes the compact form (a healthy stripe is one group); :func:`encode_listing_per_run` writes
the one-group-per-run form that BookKeeper's Java bookies emit, byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from scrutiny.core.errors import ListingFormatError
from scrutiny.core.sequence_groups import (
    MAX_ENTRY_ID,
    SequenceGroup,
    group_problem,
    merge_consecutive,
    merge_fields,
    per_run,
)

HEADER_SIZE = 64
GROUP_SIZE = 24
LISTING_VERSION = 0
_HEADER = struct.Struct(">ii56x")
_GROUP = struct.Struct(">qqii")
_INT32_MAX = 2**31 - 1
_ENTRY_LIMIT = MAX_ENTRY_ID + 1  # one past the largest entry id


def decode_listing(data: bytes) -> tuple[SequenceGroup, ...]:
    """The groups of a listing, exactly as sent (after validation), in order.

    Raises :class:`ListingFormatError` for a short header, a version other than 0, a group
    count that does not match the length, non-zero reserved bytes, inconsistent groups, or a
    group that does not start after the previous group's last entry (out of order or
    overlapping). Never raises anything else.
    """
    return tuple(SequenceGroup(*fields) for fields in _validated_groups(data))


def decode_listing_compact(data: bytes) -> list[SequenceGroup]:
    """The same entries as :func:`decode_listing`, with consecutive runs merged into periodic groups.

    What the checker wants from a Java bookie's one-group-per-run listing: validated exactly
    like :func:`decode_listing`, without building an object per run.
    """
    return merge_fields(_validated_groups(data))


def _validated_groups(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    if len(data) < HEADER_SIZE:
        raise ListingFormatError(f"{len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
    version, count = _HEADER.unpack_from(data, 0)
    if version != LISTING_VERSION:
        raise ListingFormatError(f"unsupported version {version} (supported: {LISTING_VERSION})", offset=0)
    if any(data[8:HEADER_SIZE]):
        raise ListingFormatError("reserved header bytes are not zero", offset=8)
    if count < 0:
        raise ListingFormatError(f"negative group count {count}", offset=4)
    expected = HEADER_SIZE + count * GROUP_SIZE
    if len(data) != expected:
        raise ListingFormatError(
            f"header announces {count} groups ({expected} bytes) but the listing has {len(data)} bytes"
        )
    return _in_order(_GROUP.iter_unpack(memoryview(data)[HEADER_SIZE:]))


def _in_order(groups: Iterable[tuple[int, int, int, int]]) -> Iterator[tuple[int, int, int, int]]:
    """The groups' fields as given, each checked to be consistent and to start after the one before.

    Raises :class:`ListingFormatError` at the group's byte offset in the listing. The decoder and
    the encoder both go through here, so the encoder never writes what the decoder rejects.
    """
    after = 0  # the first entry after the previous group: the next group may not start before it
    limit = _ENTRY_LIMIT
    for index, fields in enumerate(groups):
        first, last, size, period = fields
        # Fast path for BookKeeper's one-run groups; everything else gets the full check.
        if period == 0 and first == last and after <= first and 0 < size <= limit - first:
            after = first + size
        else:
            _check_group(index, fields, after - 1)
            after = last + size
        yield fields


def _check_group(index: int, fields: tuple[int, int, int, int], previous_end: int) -> None:
    """Raise unless group ``index`` is consistent and starts after ``previous_end`` (-1: first group)."""
    offset = HEADER_SIZE + index * GROUP_SIZE
    problem = group_problem(*fields)
    if problem is not None:
        raise ListingFormatError(f"group {index}: {problem}", offset=offset)
    if fields[0] <= previous_end:
        raise ListingFormatError(
            f"group {index} starts at {fields[0]}, not after group {index - 1}, "
            f"which ends at entry {previous_end} (groups overlap or are out of order)",
            offset=offset,
        )


def encode_groups(groups: Sequence[SequenceGroup]) -> bytes:
    """The listing bytes for these groups as given.

    Each group must be consistent, have an int32 size and period, and start after the last
    entry of the group before it: the bytes :func:`decode_listing` accepts. Anything else
    raises :class:`ListingFormatError` naming the group (at the offset it would have had), and
    nothing is written.
    """
    out = bytearray(_HEADER.pack(LISTING_VERSION, len(groups)))
    fields = ((g.first_start, g.last_start, g.size, g.period) for g in groups)
    for index, (first, last, size, period) in enumerate(_in_order(fields)):
        if size > _INT32_MAX or period > _INT32_MAX:
            raise ListingFormatError(
                f"group {index} ({first}, {last}, {size}, {period}): size or period exceeds the int32 field",
                offset=HEADER_SIZE + index * GROUP_SIZE,
            )
        out += _GROUP.pack(first, last, size, period)
    return bytes(out)


def encode_listing(groups: Iterable[SequenceGroup]) -> bytes:
    """Compact listing bytes: consecutive equal runs become one periodic group (BP-34's intent).

    ``groups`` must be disjoint and sorted by first start, each starting after the previous ends;
    otherwise :class:`ListingFormatError`. Runs longer than an int32 are split.
    """
    return encode_groups(_split_long_runs(merge_consecutive(groups)))


def encode_listing_per_run(groups: Sequence[SequenceGroup]) -> bytes:
    """One period-0 group per maximal run, as BookKeeper's Java bookie encodes its listing.

    Touching runs are fused (:func:`per_run`); a run longer than an int32 becomes several
    groups. ``groups`` must be disjoint and sorted; otherwise :class:`ListingFormatError`.
    """
    return encode_groups(_split_long_runs(per_run(groups)))


def _split_long_runs(groups: list[SequenceGroup]) -> list[SequenceGroup]:
    out: list[SequenceGroup] = []
    for group in groups:
        if group.size <= _INT32_MAX and group.period <= _INT32_MAX:
            out.append(group)
            continue
        for first, last in group.run_bounds():
            start = first
            while start <= last:
                end = min(last, start + _INT32_MAX - 1)
                out.append(SequenceGroup.run(start, end))
                start = end + 1
    return out


def empty_listing() -> bytes:
    """The 64-byte listing with no groups."""
    return encode_groups(())
