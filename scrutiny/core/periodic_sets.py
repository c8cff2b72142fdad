"""Set algebra on entry sets that repeat with a period, without expanding entries.

Round-robin striping repeats every ``E`` entries, and so do the listings of healthy bookies.
Here a set of entries is a list of *pieces* ``(lo, hi, mask)``: the entries ``e`` in
``[lo, hi]`` whose residue ``e mod modulus`` has its bit set in ``mask`` (a Python int used as
a bit set). A sequence group whose period divides the modulus is one piece; combining the sets
of several bookies is a sweep over the pieces' end points, so the cost grows with the number of
groups, never with the number of entries.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from scrutiny.core.errors import ScrutinyError
from scrutiny.core.sequence_groups import SequenceGroup, normalize, runs_in_window

#: Largest modulus used to keep listings with unusual periods periodic; beyond it their
#: groups are handled run by run.
MAX_MODULUS = 4096
#: Most runs expanded for groups whose period does not fit the modulus.
MAX_EXPANDED_RUNS = 100_000

Piece = tuple[int, int, int]


class EntrySetTooComplexError(ScrutinyError):
    """A listing whose groups cannot be combined within the cost budget (a hostile or broken bookie)."""


def full_mask(modulus: int) -> int:
    """The mask with every residue set."""
    return (1 << modulus) - 1


def choose_modulus(base: int, groups: Iterable[SequenceGroup]) -> int:
    """The smallest multiple of ``base`` that every periodic group's period divides, within MAX_MODULUS.

    Periods that would push it past the limit are left out; their groups are expanded run by run.
    """
    modulus = base
    for period in sorted({g.period for g in groups if not g.contiguous}):
        candidate = math.lcm(modulus, period)
        if candidate <= MAX_MODULUS:
            modulus = candidate
    return modulus


def residue_mask(anchor: int, size: int, period: int, modulus: int) -> int:
    """Mask of residues mod ``modulus`` hit by runs ``[anchor + k*period, +size)``; ``period`` divides ``modulus``."""
    base = 0
    for offset in range(size):
        base |= 1 << ((anchor + offset) % period)
    # Repeat the period's pattern modulus/period times: multiply by the base-2^period repunit.
    return base * (full_mask(modulus) // full_mask(period))


@dataclass
class _Budget:
    runs_left: int = MAX_EXPANDED_RUNS

    def spend(self, runs: int) -> None:
        self.runs_left -= runs
        if self.runs_left < 0:
            raise EntrySetTooComplexError(
                f"listing has more than {MAX_EXPANDED_RUNS} runs whose period does not fit the ensemble's"
            )


def pieces_of(groups: Iterable[SequenceGroup], modulus: int, lo: int, hi: int, budget: _Budget) -> list[Piece]:
    """The pieces of ``groups`` clipped to ``[lo, hi]`` (unsorted; pieces may overlap)."""
    everything = full_mask(modulus)
    out: list[Piece] = []
    for group in groups:
        start, end = max(lo, group.first), min(hi, group.last)
        if start > end:
            continue
        if group.contiguous:
            out.append((start, end, everything))
        elif modulus % group.period == 0:
            out.append((start, end, residue_mask(group.first_start, group.size, group.period, modulus)))
        else:
            budget.spend(group.runs)
            out.extend(
                (max(a, start), min(b, end), everything) for a, b in group.run_bounds() if a <= end and b >= start
            )
    return out


def sweep(piece_lists: Sequence[Sequence[Piece]], lo: int, hi: int) -> Iterator[tuple[int, int, list[int]]]:
    """Elementary intervals of ``[lo, hi]`` with each input's mask (the union of its pieces) there.

    Yields ``(start, end, masks)`` in order, covering ``[lo, hi]`` exactly; ``masks[i]`` is
    input ``i``'s mask over the interval. Cost: O(total pieces × log(pieces) + intervals × inputs),
    overlapping pieces included (each input's active pieces are counted per residue).
    """
    events: list[tuple[int, int, int, int]] = []  # (position, +1 open / -1 close, input, mask)
    for index, pieces in enumerate(piece_lists):
        for start, end, mask in pieces:
            events.append((start, 1, index, mask))
            events.append((end + 1, -1, index, mask))
    heapq.heapify(events)
    counts = [_ResidueCounts() for _ in piece_lists]
    masks = [0] * len(piece_lists)
    position = lo
    while position <= hi:
        changed: set[int] = set()
        while events and events[0][0] <= position:
            _, delta, index, mask = heapq.heappop(events)
            if delta > 0:
                counts[index].add(mask)
            else:
                counts[index].remove(mask)
            changed.add(index)
        for index in changed:
            masks[index] = counts[index].union()
        end = min(hi, events[0][0] - 1) if events else hi
        yield position, end, list(masks)
        position = end + 1


class _ResidueCounts:
    """How many active pieces cover each residue, bit-sliced: bit r of ``layers[k]`` is bit k of residue r's count.

    Adding or removing a piece is a binary increment or decrement of every residue of its mask
    at once: O(log pieces) integer operations, whatever the mask.
    """

    __slots__ = ("layers",)

    def __init__(self) -> None:
        self.layers: list[int] = []

    def add(self, mask: int) -> None:
        """Count one more piece on the residues of ``mask``."""
        carry = mask
        for k, layer in enumerate(self.layers):
            if not carry:
                return
            self.layers[k] = layer ^ carry
            carry &= layer
        if carry:
            self.layers.append(carry)

    def remove(self, mask: int) -> None:
        """Count one piece less on the residues of ``mask`` (each counted at least once)."""
        borrow = mask
        for k, layer in enumerate(self.layers):
            if not borrow:
                break
            self.layers[k] = layer ^ borrow
            borrow &= ~layer
        while self.layers and not self.layers[-1]:
            self.layers.pop()

    def union(self) -> int:
        """The residues covered by at least one piece."""
        out = 0
        for layer in self.layers:
            out |= layer
        return out


def at_least(masks: Sequence[int], thresholds: Sequence[int]) -> list[int]:
    """For each threshold k, the residues set in at least k of ``masks`` (bit-sliced counting)."""
    top = max(thresholds, default=0)
    layers = [0] * (top + 1)  # layers[k]: residues set in at least k masks seen so far (k >= 1)
    for mask in masks:
        if not mask:
            continue
        for k in range(top, 0, -1):
            layers[k] |= (layers[k - 1] if k > 1 else -1) & mask
    return [layers[k] if k >= 1 else -1 for k in thresholds]


def window_mask(start: int, end: int, modulus: int) -> int:
    """Residues mod ``modulus`` that occur in ``[start, end]``."""
    length = end - start + 1
    if length >= modulus:
        return full_mask(modulus)
    bits = ((1 << length) - 1) << (start % modulus)
    return (bits | bits >> modulus) & full_mask(modulus)


def coalesce(pieces: Iterable[Piece], modulus: int) -> list[Piece]:
    """Sorted disjoint pieces joined wherever one mask describes both; empty pieces dropped.

    A short piece constrains only the residues inside it, so neighbours whose masks agree on
    the residues they share become one piece: an interruption that leaves the pattern intact
    (a run cut by a boundary) leaves no trace in the result.
    """
    out: list[Piece] = []
    windows: list[int] = []
    for start, end, raw_mask in sorted(pieces):
        window = window_mask(start, end, modulus)
        mask = raw_mask & window
        if not mask:
            continue
        if out and out[-1][1] + 1 == start:
            previous_start, _, previous_mask = out[-1]
            shared = windows[-1] & window
            if previous_mask & shared == mask & shared:
                out[-1] = (previous_start, end, previous_mask | mask)
                windows[-1] |= window
                continue
        out.append((start, end, mask))
        windows.append(window)
    return out


def to_groups(pieces: Iterable[Piece], modulus: int) -> list[SequenceGroup]:
    """Disjoint pieces as sequence groups sorted by first start, runs continued across pieces."""
    everything = full_mask(modulus)
    open_groups: dict[tuple[int, int], int] = {}  # (residue start, run length) -> index in out
    out: list[SequenceGroup] = []
    for start, end, mask in coalesce(pieces, modulus):
        if mask == everything:
            out.append(SequenceGroup.run(start, end))
            continue
        for residue, length in cyclic_runs(mask, modulus):
            for group in runs_in_window(residue, length, modulus, start, end):
                key = (residue, length)
                index = open_groups.get(key)
                if group.size == length and index is not None and group.first_start == out[index].last_start + modulus:
                    previous = out[index]
                    out[index] = SequenceGroup(previous.first_start, group.last_start, length, modulus)
                    continue
                if group.size == length:
                    open_groups[key] = len(out)
                out.append(group)
    return sorted(normalize(g) for g in out)


def cyclic_runs(mask: int, modulus: int) -> list[tuple[int, int]]:
    """Maximal runs of set bits of a non-full, non-empty mask on the cycle of ``modulus`` residues.

    Returns ``(first residue, length)`` pairs; a run may wrap past ``modulus - 1`` to 0.
    """
    zero = next(r for r in range(modulus) if not mask >> r & 1)
    runs: list[tuple[int, int]] = []
    length = 0
    for step in range(1, modulus + 1):
        residue = (zero + step) % modulus
        if mask >> residue & 1:
            length += 1
        elif length:
            runs.append(((residue - length) % modulus, length))
            length = 0
    return runs


def union_groups(groups: Sequence[SequenceGroup]) -> list[SequenceGroup]:
    """The union of arbitrary (possibly overlapping) consistent groups as disjoint groups."""
    if not groups:
        return []
    modulus = choose_modulus(1, groups)
    lo = min(g.first for g in groups)
    hi = max(g.last for g in groups)
    pieces = pieces_of(groups, modulus, lo, hi, _Budget())
    return to_groups(((s, e, m[0]) for s, e, m in sweep([pieces], lo, hi)), modulus)


def new_budget() -> _Budget:
    """A fresh cost budget for one verdict or one listing."""
    return _Budget()


class PieceIndex:
    """One set's pieces, coalesced and sorted, for cutting out windows in O(log n + pieces inside)."""

    def __init__(self, pieces: Iterable[Piece], modulus: int) -> None:
        self.pieces = coalesce(pieces, modulus)
        self.starts = [start for start, _, _ in self.pieces]
        self.reach: list[int] = []  # reach[i]: the largest end among pieces[0..i]
        for _, end, _ in self.pieces:
            self.reach.append(max(end, self.reach[-1]) if self.reach else end)

    def window(self, lo: int, hi: int) -> list[Piece]:
        """The pieces overlapping ``[lo, hi]``, clipped to it."""
        first = bisect.bisect_left(self.reach, lo)
        last = bisect.bisect_right(self.starts, hi)
        return [(max(s, lo), min(e, hi), m) for s, e, m in self.pieces[first:last] if e >= lo]
