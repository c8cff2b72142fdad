"""The ledgers of one bookie, from the metadata the watcher holds in memory (its known state).

The watcher keeps every ledger's znode (data and stat) to compute its resyncs, so it can answer "which checked
ledgers have bookie B in an ensemble" without an index of its own: the bytes of every ledger are searched for B's
id (a plain substring search, in C), and only the ledgers whose bytes name B are decoded. Rebuilt with the known
state at every start, it needs no storage and cannot drift from ZooKeeper. Cost: one pass over the metadata bytes
per bookie event (bench/bookie_bench.py measures it), done a slice at a time (:class:`LedgerSearch`) between the
watcher's other work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scrutiny.core.errors import FormatError
from scrutiny.core.ledger_metadata import LedgerMetadata, LedgerState, decode_ledger_metadata
from scrutiny.core.ledger_tracker import needs_check
from scrutiny.core.metadata_view import Node
from scrutiny.core.striping import expected_groups, segment_spans


@dataclass(slots=True)
class BookieLedgers:
    """The checked ledgers (closed, or with sealed segments) that have a bookie in an ensemble, in id order, and
    how many of their entries the bookie's write sets give it; apart, the open ledgers being written to it (the
    bookie in their current ensemble only)."""

    ledgers: list[tuple[int, Node]] = field(default_factory=list)
    entries: int = 0
    writing: list[tuple[int, Node]] = field(default_factory=list)


def ledgers_of(ledgers: Mapping[int, Node], bookie: str) -> BookieLedgers:
    """The ledgers of ``ledgers`` (id -> znode) that have ``bookie`` in a segment that needs a check."""
    search = LedgerSearch(sorted(ledgers), bookie)
    search.step(ledgers, len(ledgers))
    return search.found


class LedgerSearch:
    """:func:`ledgers_of` a slice at a time, so that a search through 10 M ledgers (about a minute) does not hold up
    the watcher's other work: the ids to search are those known when it began, each read at its current version
    when its turn comes (a ledger deleted meanwhile is skipped; one created meanwhile has its own events)."""

    def __init__(self, ids: Sequence[int], bookie: str) -> None:
        """Search the ledgers ``ids`` (ascending; several searches may share one list) for ``bookie``."""
        self.bookie = bookie
        self._needle = bookie.encode()
        self._ids = ids
        self._next = 0
        self.found = BookieLedgers()

    def remaining(self) -> int:
        """How many ledgers are still to search."""
        return len(self._ids) - self._next

    def restart(self) -> None:
        """From the first ledger again (what was found may not have reached Kafka)."""
        self._next = 0
        self.found = BookieLedgers()

    def step(self, ledgers: Mapping[int, Node], count: int) -> BookieLedgers:
        """Search the next ``count`` ledgers (read from ``ledgers``, the current state); return those found."""
        ids = self._ids[self._next : self._next + count]
        self._next += len(ids)
        found = BookieLedgers()
        for ledger_id in ids:
            node = ledgers.get(ledger_id)
            if node is None or self._needle not in node.data:
                continue
            try:
                metadata = decode_ledger_metadata(node.data)
            except FormatError:
                continue
            entries = _entries_held(metadata, self.bookie)
            if entries is not None:
                found.ledgers.append((ledger_id, node))
                found.entries += entries
            elif metadata.state is LedgerState.OPEN and self.bookie in metadata.segments[-1].ensemble:
                found.writing.append((ledger_id, node))
        self.found.ledgers.extend(found.ledgers)
        self.found.entries += found.entries
        self.found.writing.extend(found.writing)
        return found


def _entries_held(metadata: LedgerMetadata, bookie: str) -> int | None:
    """How many entries ``bookie``'s write sets give it in the segments of ``metadata`` that need a check (None: it
    is in none of them)."""
    if not needs_check(metadata):
        return None
    firsts = [s.first_entry_id for s in metadata.segments]
    ensembles = [s.ensemble for s in metadata.segments]
    spans = [s for s in segment_spans(firsts, ensembles, metadata.last_entry_id) if bookie in s.ensemble]
    if not spans:
        return None
    entries = 0
    for span in spans:
        index = span.ensemble.index(bookie)
        groups = expected_groups(index, metadata.ensemble_size, metadata.write_quorum, span.first, span.last)
        entries += sum(g.count for g in groups)
    return entries
