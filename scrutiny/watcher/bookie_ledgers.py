"""The ledgers of one bookie, from the metadata the watcher holds in memory (its known state).

The watcher keeps every ledger's znode (data and stat) to compute its resyncs, so it can answer "which checked
ledgers have bookie B in an ensemble" without an index of its own: the bytes of every ledger are searched for B's
id (a plain substring search, in C), and only the ledgers whose bytes name B are decoded. Rebuilt with the known
state at every start, it needs no storage and cannot drift from ZooKeeper. Cost: one pass over the metadata bytes
per bookie event (bench/bookie_bench.py measures it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scrutiny.core.errors import FormatError
from scrutiny.core.ledger_metadata import decode_ledger_metadata
from scrutiny.core.ledger_tracker import needs_check
from scrutiny.core.metadata_view import Node
from scrutiny.core.striping import expected_groups, segment_spans


@dataclass(slots=True)
class BookieLedgers:
    """The checked ledgers (closed, or with sealed segments) that have a bookie in an ensemble, in id order, and
    how many of their entries the bookie's write sets give it."""

    ledgers: list[tuple[int, Node]] = field(default_factory=list)
    entries: int = 0


def ledgers_of(ledgers: Mapping[int, Node], bookie: str) -> BookieLedgers:
    """The ledgers of ``ledgers`` (id -> znode) that have ``bookie`` in a segment that needs a check."""
    needle = bookie.encode()
    found = BookieLedgers()
    for ledger_id in sorted(lid for lid, node in ledgers.items() if needle in node.data):
        node = ledgers[ledger_id]
        try:
            metadata = decode_ledger_metadata(node.data)
        except FormatError:
            continue
        if not needs_check(metadata):
            continue
        firsts = [s.first_entry_id for s in metadata.segments]
        ensembles = [s.ensemble for s in metadata.segments]
        spans = [s for s in segment_spans(firsts, ensembles, metadata.last_entry_id) if bookie in s.ensemble]
        if not spans:
            continue
        found.ledgers.append((ledger_id, node))
        for span in spans:
            index = span.ensemble.index(bookie)
            groups = expected_groups(index, metadata.ensemble_size, metadata.write_quorum, span.first, span.last)
            found.entries += sum(g.count for g in groups)
    return found
