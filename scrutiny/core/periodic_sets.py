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
import functools
import heapq
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from scrutiny.core.errors import ScrutinyError
from scrutiny.core.sequence_groups import SequenceGroup, normalize, runs_in_window

#: Largest modulus used to keep listings with unusual periods periodic; beyond it their
#: groups are handled run by run.
MAX_MODULUS = 4096
#: What one evaluation (one ledger's verdict, one union) may spend beyond a fixed share per input group: the runs
#: expanded for groups whose period does not fit the modulus, and the groups of its results (a group whose period
#: is below a stretched modulus can make thousands). Work linear in the input is always paid for; this bounds
#: what a stretched modulus can add to it (under a second on one core at worst).
MAX_EXPANDED_RUNS = 30_000
#: What each input group adds to an evaluation's budget: a damaged bookie's long listing is judged, not refused.
RUNS_PER_INPUT_GROUP = 8

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
    """Mask of residues mod ``modulus`` hit by runs ``[anchor + k*period, +size)``; ``period`` divides ``modulus``.

    A handful of integer operations whatever the sizes (``0 < size <= period``).
    """
    run = full_mask(size) << (anchor % period)
    base = (run | run >> period) & full_mask(period)
    # Repeat the period's pattern modulus/period times: multiply by the base-2^period repunit.
    return base * (full_mask(modulus) // full_mask(period))


@dataclass
class Budget:
    """What one evaluation may still spend, in runs and result groups."""

    runs_left: int = MAX_EXPANDED_RUNS

    def spend(self, runs: int) -> None:
        self.runs_left -= runs
        if self.runs_left < 0:
            raise EntrySetTooComplexError(
                f"groups whose period is not the ensemble's cost more than {MAX_EXPANDED_RUNS} runs beyond the listing"
            )


def pieces_of(groups: Iterable[SequenceGroup], modulus: int, lo: int, hi: int, budget: Budget) -> list[Piece]:
    """The pieces of ``groups`` clipped to ``[lo, hi]`` (unsorted; pieces may overlap).

    Groups whose period does not fit the modulus are expanded run by run, each run charged to ``budget``; groups
    that would overspend it raise EntrySetTooComplexError and leave the budget as it was, for the next listing.
    """
    left = budget.runs_left
    try:
        return _pieces(groups, modulus, lo, hi, budget)
    except EntrySetTooComplexError:
        budget.runs_left = left
        raise


def _pieces(groups: Iterable[SequenceGroup], modulus: int, lo: int, hi: int, budget: Budget) -> list[Piece]:
    everything = full_mask(modulus)
    out: list[Piece] = []
    for group in groups:
        start, end = max(lo, group.first), min(hi, group.last)
        if start > end:
            continue
        if group.contiguous:
            out.append((start, end, everything))
        elif modulus % group.period == 0:  # one piece whatever its runs: what it adds is paid for by the results
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
    input ``i``'s mask over the interval. For many inputs prefer :func:`sweep_changes`: this
    copies every mask at every interval.
    """
    masks = [0] * len(piece_lists)
    for start, end, changed in sweep_changes(piece_lists, lo, hi):
        for index, mask in changed.items():
            masks[index] = mask
        yield start, end, list(masks)


def sweep_changes(
    piece_lists: Sequence[Sequence[Piece]], lo: int, hi: int
) -> Iterator[tuple[int, int, dict[int, int]]]:
    """Elementary intervals of ``[lo, hi]`` with the inputs whose mask changed where the interval starts.

    Yields ``(start, end, changed)`` in order, covering ``[lo, hi]`` exactly; ``changed`` maps an
    input to its new mask (the union of its pieces); every mask is 0 before ``lo``. Cost:
    O(total pieces × log(pieces)), overlapping pieces included (each input's active pieces are
    counted per residue), whatever the number of inputs.
    """
    events: list[tuple[int, int, int, int]] = []  # (position, +1 open / -1 close, input, mask)
    for index, pieces in enumerate(piece_lists):
        for start, end, mask in pieces:
            events.append((start, 1, index, mask))
            events.append((end + 1, -1, index, mask))
    heapq.heapify(events)
    counts = [ResidueCounts() for _ in piece_lists]
    masks = [0] * len(piece_lists)
    position = lo
    while position <= hi:
        touched: set[int] = set()
        while events and events[0][0] <= position:
            _, delta, index, mask = heapq.heappop(events)
            if delta > 0:
                counts[index].add(mask)
            else:
                counts[index].remove(mask)
            touched.add(index)
        changed: dict[int, int] = {}
        for index in touched:
            union = counts[index].union()
            if union != masks[index]:
                masks[index] = changed[index] = union
        end = min(hi, events[0][0] - 1) if events else hi
        yield position, end, changed
        position = end + 1


class ResidueCounts:
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

    def at_least(self, times: int, everything: int) -> int:
        """The residues of ``everything`` counted at least ``times`` times: O(log count) integer operations."""
        if times <= 0:
            return everything
        greater, equal = 0, everything  # residues whose count's bits so far are above / equal to those of times
        for bit in range(max(len(self.layers), times.bit_length()) - 1, -1, -1):
            layer = self.layers[bit] if bit < len(self.layers) else 0
            if times >> bit & 1:
                equal &= layer
            else:
                greater |= equal & layer
                equal &= ~layer
        return greater | equal


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


def to_groups(pieces: Iterable[Piece], modulus: int, budget: Budget | None = None) -> list[SequenceGroup]:
    """Disjoint pieces as sequence groups sorted by first start, runs continued across pieces.

    Each piece's mask is read at its smallest period, so a pattern that repeats every few
    residues becomes a few groups, however large the modulus. Every group made is charged to
    ``budget`` (EntrySetTooComplexError when it runs out).
    """
    everything = full_mask(modulus)
    open_groups: dict[tuple[int, int, int], int] = {}  # (period, residue start, run length) -> index in out
    out: list[SequenceGroup] = []
    for start, end, mask in coalesce(pieces, modulus):
        if mask == everything:
            out.append(SequenceGroup.run(start, end))
            continue
        period = smallest_period(mask, modulus)
        for residue, length in cyclic_runs(mask & full_mask(period), period):
            made = runs_in_window(residue, length, period, start, end)
            if budget is not None:
                budget.spend(len(made))
            for group in made:
                key = (period, residue, length)
                index = open_groups.get(key)
                if group.size == length and index is not None and group.first_start == out[index].last_start + period:
                    previous = out[index]
                    out[index] = SequenceGroup(previous.first_start, group.last_start, length, period)
                    continue
                if group.size == length:
                    open_groups[key] = len(out)
                out.append(group)
    return sorted(normalize(g) for g in out)


def smallest_period(mask: int, modulus: int) -> int:
    """The smallest divisor ``p`` of ``modulus`` with ``mask`` a repetition of its first ``p`` residues.

    The periods of a mask among the divisors of the modulus are closed under gcd, so the smallest one is
    reached from the modulus by dividing out one prime factor at a time: a dozen checks at most.
    """
    period = modulus
    for prime in _prime_factors(modulus):
        while period % prime == 0 and _repeats(mask, modulus, period // prime):
            period //= prime
    return period


def _repeats(mask: int, modulus: int, period: int) -> bool:
    """Whether ``mask`` is unchanged by a rotation of ``period`` residues."""
    rotated = (mask >> period | mask << (modulus - period)) & full_mask(modulus)
    return rotated == mask


@functools.cache
def _prime_factors(number: int) -> tuple[int, ...]:
    factors: list[int] = []
    candidate = 2
    while candidate * candidate <= number:
        if number % candidate == 0:
            factors.append(candidate)
            while number % candidate == 0:
                number //= candidate
        candidate += 1
    if number > 1:
        factors.append(number)
    return tuple(factors)


def cyclic_runs(mask: int, modulus: int) -> list[tuple[int, int]]:
    """Maximal runs of set bits of a non-full, non-empty mask on the cycle of ``modulus`` residues.

    Returns ``(first residue, length)`` pairs in cycle order from the first clear residue; a run
    may wrap past ``modulus - 1`` to 0. A few integer operations per run, never one per residue.
    """
    everything = full_mask(modulus)
    clear = ~mask & everything
    zero = (clear & -clear).bit_length() - 1
    # Rotate so that the clear residue is bit 0: no run wraps any more.
    rest = (mask >> zero | mask << (modulus - zero)) & everything
    runs: list[tuple[int, int]] = []
    while rest:
        first = (rest & -rest).bit_length() - 1
        above = rest >> first
        length = (~above & (above + 1)).bit_length() - 1
        runs.append(((first + zero) % modulus, length))
        rest &= ~(full_mask(length) << first)
    return runs


def union_groups(groups: Sequence[SequenceGroup]) -> list[SequenceGroup]:
    """The union of arbitrary (possibly overlapping) consistent groups as disjoint groups."""
    if not groups:
        return []
    modulus = choose_modulus(1, groups)
    lo = min(g.first for g in groups)
    hi = max(g.last for g in groups)
    budget = new_budget(len(groups))
    pieces = pieces_of(groups, modulus, lo, hi, budget)
    return to_groups(((s, e, m[0]) for s, e, m in sweep([pieces], lo, hi)), modulus, budget)


def new_budget(input_groups: int) -> Budget:
    """A fresh cost budget for one evaluation of ``input_groups`` groups in all."""
    return Budget(runs_left=MAX_EXPANDED_RUNS + RUNS_PER_INPUT_GROUP * input_groups)


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
