"""Which bookie must hold which entry: BookKeeper's round-robin striping, as arithmetic.

Entry ``e`` of a segment with ensemble ``B[0..E-1]`` is written to ``B[(e + w) mod E]`` for
``w = 0..WQ-1`` (its write set), with ``e`` the ledger's entry id (not relative to the
segment). So bookie index ``b`` must hold the entries with ``(b - e) mod E < WQ``: runs of
``WQ`` consecutive entries every ``E`` entries, one sequence group per segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scrutiny.core.periodic_sets import full_mask, residue_mask
from scrutiny.core.sequence_groups import SequenceGroup, runs_in_window


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """The entries ``[first, last]`` one segment covers (``last < first``: empty) and its ensemble."""

    index: int
    first: int
    last: int
    ensemble: tuple[str, ...]

    @property
    def empty(self) -> bool:
        """True when the segment covers no entry."""
        return self.last < self.first


def segment_spans(
    firsts: Sequence[int], ensembles: Sequence[tuple[str, ...]], last_entry_id: int | None
) -> list[SegmentSpan]:
    """The span of each segment: up to the next segment's first entry and never past ``last_entry_id``.

    With ``last_entry_id`` None (an open or in-recovery ledger) only the segments sealed by an
    ensemble change are returned: the last, still written one has no known end. A closed
    ledger's segments that start after ``last_entry_id`` are empty: entries past the end do not
    exist, whatever the next segment's first entry says.
    """
    spans: list[SegmentSpan] = []
    for index, first in enumerate(firsts):
        if index + 1 < len(firsts):
            last = firsts[index + 1] - 1
            if last_entry_id is not None:
                last = min(last, last_entry_id)
        elif last_entry_id is not None:
            last = last_entry_id
        else:
            break
        spans.append(SegmentSpan(index, first, last, ensembles[index]))
    return spans


def span_of_entry(spans: Sequence[SegmentSpan], entry: int) -> SegmentSpan | None:
    """The segment an entry would be written in: the last one starting at or before it (None: before all)."""
    found: SegmentSpan | None = None
    for span in spans:
        if span.first > entry:
            break
        found = span
    return found


def write_set(entry: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Indexes in the ensemble of the bookies entry ``entry`` is written to, in write order."""
    return [(entry + w) % ensemble_size for w in range(write_quorum)]


def expected_groups(
    bookie_index: int, ensemble_size: int, write_quorum: int, first: int, last: int
) -> list[SequenceGroup]:
    """The entries of ``[first, last]`` that the bookie at ``bookie_index`` must hold, as at most three groups."""
    if last < first:
        return []
    if write_quorum >= ensemble_size:
        return [SequenceGroup.run(first, last)]
    # Bookie b holds residues b-WQ+1 .. b (mod E): runs of WQ entries starting at b-WQ+1 + kE.
    anchor = (bookie_index - write_quorum + 1) % ensemble_size
    return runs_in_window(anchor, write_quorum, ensemble_size, first, last)


def expected_residues(bookie_index: int, ensemble_size: int, write_quorum: int, modulus: int) -> int:
    """Mask of residues mod ``modulus`` (a multiple of E) of the entries the bookie must hold."""
    if write_quorum >= ensemble_size:
        return full_mask(modulus)
    # Residues b-WQ+1 .. b (mod E), as in expected_groups.
    return residue_mask((bookie_index - write_quorum + 1) % ensemble_size, write_quorum, ensemble_size, modulus)
