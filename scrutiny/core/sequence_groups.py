"""Sequence groups: the compact, exact description of a set of entry ids.

A :class:`SequenceGroup` has the meaning of one group of BookKeeper's
``AvailabilityOfEntriesOfLedger`` listing (BP-34): runs of ``size`` consecutive entries that
start at ``first_start``, ``first_start + period``, ... up to ``last_start`` (``period`` 0 means
a single run). Round-robin striping makes the entries a bookie must hold such runs, so a
healthy stripe of any length is one group, and a wiped bookie of a billion-entry ledger is one
or two.

This module holds the group itself and the linear operations on sorted groups (merging
consecutive runs into periodic groups, expanding, clipping). Set algebra over several groups
lives in :mod:`scrutiny.core.periodic_sets`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from scrutiny.core.errors import FormatError

MAX_ENTRY_ID = 2**63 - 1


@dataclass(frozen=True, slots=True, order=True, init=False)
class SequenceGroup:
    """Runs of ``size`` entries starting every ``period`` entries from ``first_start`` to ``last_start``.

    Construct with :meth:`of` (validating) when the values come from outside; the plain
    constructor trusts its caller.
    """

    first_start: int
    last_start: int
    size: int
    period: int

    def __init__(self, first_start: int, last_start: int, size: int, period: int) -> None:
        # The slots' own setters: the __init__ a frozen dataclass gets sets each field through object.__setattr__,
        # at about 1.6 times the cost, and a check makes some fifteen groups a ledger.
        _set_first_start(self, first_start)
        _set_last_start(self, last_start)
        _set_size(self, size)
        _set_period(self, period)

    @classmethod
    def of(cls, first_start: int, last_start: int, size: int, period: int) -> SequenceGroup:
        """A validated group; raises :class:`FormatError` (a ``ValueError``) naming the inconsistency."""
        problem = group_problem(first_start, last_start, size, period)
        if problem is not None:
            raise FormatError("sequence group", problem)
        return cls(first_start, last_start, size, period)

    @classmethod
    def run(cls, first: int, last: int) -> SequenceGroup:
        """The single run ``[first, last]``."""
        return cls(first, first, last - first + 1, 0)

    @property
    def runs(self) -> int:
        """How many runs the group has."""
        return 1 if self.period == 0 else (self.last_start - self.first_start) // self.period + 1

    @property
    def first(self) -> int:
        """The smallest entry of the group."""
        return self.first_start

    @property
    def last(self) -> int:
        """The largest entry of the group."""
        return self.last_start + self.size - 1

    @property
    def count(self) -> int:
        """How many entries the group holds (runs never overlap in a consistent group)."""
        return self.runs * self.size

    @property
    def contiguous(self) -> bool:
        """True when the runs touch, so the group is the single interval ``[first, last]``."""
        return self.period == 0 or self.size >= self.period

    def contains(self, entry: int) -> bool:
        """Whether ``entry`` belongs to the group (O(1))."""
        if entry < self.first or entry > self.last:
            return False
        if self.contiguous:
            return True
        return (entry - self.first_start) % self.period < self.size

    def run_bounds(self) -> Iterator[tuple[int, int]]:
        """Each run as ``(first, last)``, in order. Costs one step per run."""
        step = self.period if self.period else 1
        for start in range(self.first_start, self.last_start + 1, step):
            yield start, start + self.size - 1

    def as_list(self) -> list[int]:
        """``[first_start, last_start, size, period]``, the JSON form."""
        return [self.first_start, self.last_start, self.size, self.period]


_slots: Any = SequenceGroup
_set_first_start = _slots.first_start.__set__
_set_last_start = _slots.last_start.__set__
_set_size = _slots.size.__set__
_set_period = _slots.period.__set__


def group_problem(first_start: int, last_start: int, size: int, period: int) -> str | None:
    """Why these four numbers are not a consistent group, or None when they are."""
    if first_start < 0:
        return f"negative first sequence start {first_start}"
    if size < 1:
        return f"sequence size {size} is not positive"
    if period < 0:
        return f"negative sequence period {period}"
    if last_start < first_start:
        return f"last sequence start {last_start} is before first sequence start {first_start}"
    if period == 0 and last_start != first_start:
        return f"period 0 but last sequence start {last_start} differs from first {first_start}"
    if period > 0 and (last_start - first_start) % period:
        return f"last sequence start {last_start} is not first {first_start} plus a multiple of period {period}"
    if period > 0 and size > period:
        return f"sequence size {size} exceeds period {period}: runs would overlap"
    if last_start + size - 1 > MAX_ENTRY_ID:
        return f"runs end beyond the largest entry id {MAX_ENTRY_ID}"
    return None


def count_of(groups: Iterable[SequenceGroup]) -> int:
    """Total entries of disjoint groups."""
    return sum(group.count for group in groups)


def normalize(group: SequenceGroup) -> SequenceGroup:
    """The same entries with touching runs fused into one run, single runs with period 0."""
    if group.runs == 1:
        return SequenceGroup(group.first_start, group.first_start, group.size, 0)
    if group.contiguous:
        return SequenceGroup.run(group.first, group.last)
    return group


def merge_consecutive(groups: Iterable[SequenceGroup]) -> list[SequenceGroup]:
    """Fuse groups sorted by first start whose runs continue each other.

    Consecutive runs of equal size and equal spacing become one periodic group, and touching
    single runs become one run: BookKeeper's one-group-per-run listing of a healthy stripe
    becomes a single group. Exact for any input sorted by first start (groups fuse only when
    the second starts after the first's last run); linear in the number of groups, which is
    why it works on plain integers (a million-run listing is common).
    """
    return merge_fields((g.first_start, g.last_start, g.size, g.period) for g in groups)


def merge_fields(groups: Iterable[tuple[int, int, int, int]]) -> list[SequenceGroup]:
    """:func:`merge_consecutive` on ``(first_start, last_start, size, period)`` tuples of consistent groups."""
    out: list[SequenceGroup] = []
    current: tuple[int, int, int, int] | None = None  # first_start, last_start, size, period
    for fields in groups:
        first, last, size, period = fields
        if first == last or size >= period:  # one run, or touching runs: a single run
            last, size, period = first, last + size - first, 0
        if current is not None:
            c_first, c_last, c_size, c_period = current
            if c_period == 0 and period == 0 and first == c_first + c_size:
                current = (c_first, c_first, c_size + size, 0)
                continue
            gap = first - c_last
            if size == c_size and gap > size and c_period in (0, gap) and period in (0, gap):
                current = (c_first, last, size, gap)
                continue
            out.append(SequenceGroup(*current))
        current = (first, last, size, period)
    if current is not None:
        out.append(SequenceGroup(*current))
    return out


def clip(group: SequenceGroup, lo: int, hi: int) -> list[SequenceGroup]:
    """The part of ``group`` inside ``[lo, hi]``: at most three groups (partial run, whole runs, partial)."""
    lo = max(lo, group.first)
    hi = min(hi, group.last)
    if lo > hi:
        return []
    if group.contiguous:
        return [SequenceGroup.run(lo, hi)]
    return runs_in_window(group.first_start, group.size, group.period, lo, hi)


def runs_in_window(anchor: int, size: int, period: int, lo: int, hi: int) -> list[SequenceGroup]:
    """Entries of the endless progression of runs ``[anchor + k*period, +size)`` (any integer k) inside ``[lo, hi]``.

    Returns at most three groups: a partial run cut by ``lo``, the whole runs, a partial run
    cut by ``hi``. Requires ``0 < size < period``.
    """
    out: list[SequenceGroup] = []
    start = lo - (lo - anchor) % period  # the last run starting at or before lo
    if start + size - 1 >= lo and start < lo:
        out.append(SequenceGroup.run(lo, min(start + size - 1, hi)))
        start += period
    elif start < lo:
        start += period
    if start > hi:
        return out
    last_whole = start + (hi - size + 1 - start) // period * period if hi - size + 1 >= start else None
    if last_whole is not None:
        out.append(normalize(SequenceGroup(start, last_whole, size, period)))
        start = last_whole + period
    if start <= hi:
        out.append(SequenceGroup.run(start, hi))
    return out


def expand(groups: Iterable[SequenceGroup]) -> Iterator[int]:
    """Every entry of the groups, in group order. For tests and small sets only."""
    for group in groups:
        for first, last in group.run_bounds():
            yield from range(first, last + 1)


def from_entries(entries: Iterable[int]) -> list[SequenceGroup]:
    """Compact groups for a sorted iterable of distinct entry ids (tests, simulators)."""
    runs: list[SequenceGroup] = []
    for entry in entries:
        if runs and entry == runs[-1].last + 1:
            runs[-1] = SequenceGroup.run(runs[-1].first, entry)
        else:
            runs.append(SequenceGroup.run(entry, entry))
    return merge_consecutive(runs)


def per_run(groups: Iterable[SequenceGroup]) -> list[SequenceGroup]:
    """The same entries as one period-0 group per maximal run: the form BookKeeper's bookies emit.

    Runs that touch (one ends right before the next starts), within a group or across
    consecutive groups, are fused into one run, as a Java bookie lists them. ``groups`` must be
    disjoint and sorted by first start; the cost is one step per run of the input.
    """
    out: list[SequenceGroup] = []
    first = last = -2  # the run being extended; -2 so that no entry continues it
    for group in groups:
        bounds = ((group.first, group.last),) if group.contiguous else group.run_bounds()
        for start, end in bounds:
            if start == last + 1:
                last = end
                continue
            if last >= 0:
                out.append(SequenceGroup.run(first, last))
            first, last = start, end
    if last >= 0:
        out.append(SequenceGroup.run(first, last))
    return out


@dataclass(frozen=True, slots=True)
class EntrySet:
    """A set of entries as disjoint sequence groups sorted by first start, with its exact size."""

    groups: tuple[SequenceGroup, ...]
    count: int

    @classmethod
    def of(cls, groups: Iterable[SequenceGroup]) -> EntrySet:
        """The set of these disjoint groups."""
        ordered = tuple(sorted(groups))
        return cls(ordered, count_of(ordered))

    def __bool__(self) -> bool:
        return self.count > 0

    @property
    def first(self) -> int | None:
        """The smallest entry, or None when empty."""
        return min((g.first for g in self.groups), default=None)

    @property
    def last(self) -> int | None:
        """The largest entry, or None when empty."""
        return max((g.last for g in self.groups), default=None)

    def contains(self, entry: int) -> bool:
        """Whether ``entry`` is in the set (linear in the number of groups)."""
        return any(g.contains(entry) for g in self.groups)

    def as_json_dict(self) -> dict[str, object]:
        """``{"groups": [[first_start, last_start, size, period], ...], "count": N}``."""
        return {"groups": [g.as_list() for g in self.groups], "count": self.count}
