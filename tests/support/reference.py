"""A naive per-entry reference for the verdict: obviously right, and slow on purpose.

It walks every entry of every checked segment and every bookie of its write set. The property
tests compare the real verdict with it on small random ledgers; the benchmarks time it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scrutiny.core.ledger_metadata import LedgerMetadata, LedgerState

#: A bookie's holdings: a set of entry ids (an explicit negative is the empty set), or None for unknown.
Holdings = set[int] | None


@dataclass
class ReferenceResult:
    worst: str | None = None
    worst_entries: set[int] = field(default_factory=set)
    missing: dict[tuple[int, str], set[int]] = field(default_factory=dict)
    beyond: dict[str, set[int]] = field(default_factory=dict)
    beyond_critical: bool = False
    retry: set[str] = field(default_factory=set)


def reference_replicas(metadata: LedgerMetadata, held: Mapping[str, Holdings]) -> ReferenceResult:
    """Replica levels, per-bookie missing entries, entries beyond the end and retry bookies, entry by entry."""
    result = ReferenceResult()
    size, wq, aq = metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum
    closed = metadata.state is LedgerState.CLOSED
    firsts = [s.first_entry_id for s in metadata.segments]
    levels: dict[str, set[int]] = {"NO_REPLICA": set(), "BELOW_ACK_QUORUM": set(), "BELOW_WRITE_QUORUM": set()}
    for index, segment in enumerate(metadata.segments):
        if index + 1 < len(firsts):
            last = firsts[index + 1] - 1
            if closed:
                assert metadata.last_entry_id is not None
                last = min(last, metadata.last_entry_id)
        elif closed:
            assert metadata.last_entry_id is not None
            last = metadata.last_entry_id
        else:
            break
        for entry in range(segment.first_entry_id, last + 1):
            replicas = 0
            for w in range(wq):
                bookie = segment.ensemble[(entry + w) % size]
                holding = held.get(bookie)
                if holding is None:
                    result.retry.add(bookie)
                    replicas += 1
                elif entry in holding:
                    replicas += 1
                else:
                    result.missing.setdefault((segment.first_entry_id, bookie), set()).add(entry)
            if replicas == 0:
                levels["NO_REPLICA"].add(entry)
            if replicas < aq:
                levels["BELOW_ACK_QUORUM"].add(entry)
            if replicas < wq:
                levels["BELOW_WRITE_QUORUM"].add(entry)
    for name, entries in levels.items():
        if entries:
            result.worst, result.worst_entries = name, entries
            break
    if closed:
        _beyond(metadata, held, result)
    return result


def _beyond(metadata: LedgerMetadata, held: Mapping[str, Holdings], result: ReferenceResult) -> None:
    assert metadata.last_entry_id is not None
    following = metadata.last_entry_id + 1
    # The segment entry lastEntryId + 1 would be written in, and every later one.
    start = max((i for i, s in enumerate(metadata.segments) if s.first_entry_id <= following), default=0)
    for segment in metadata.segments[start:]:
        for bookie in segment.ensemble:
            holding = held.get(bookie)
            extra = {e for e in holding or () if e > metadata.last_entry_id}
            if extra and bookie not in result.beyond:
                result.beyond[bookie] = extra
    # Critical when any entry after the end has AQ copies in its write set. While it is not, every unknown bookie of
    # those segments is needed: one copy it holds of an entry after the end may carry a header proving it acknowledged.
    firsts = [s.first_entry_id for s in metadata.segments]
    for entry in sorted({following, *(e for extra in result.beyond.values() for e in extra)}):
        segment = metadata.segments[max((i for i, first in enumerate(firsts) if first <= entry), default=0)]
        members = [segment.ensemble[(entry + w) % metadata.ensemble_size] for w in range(metadata.write_quorum)]
        holders = sum(1 for b in members if entry in (held.get(b) or ()))
        if holders >= metadata.ack_quorum:
            result.beyond_critical = True
    if not result.beyond_critical:
        result.retry |= {b for segment in metadata.segments[start:] for b in segment.ensemble if held.get(b) is None}
