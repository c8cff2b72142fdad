"""Orphan ledgers: entries a bookie holds of a ledger that has no metadata, past a grace. Pure, no I/O.

A deleted ledger's entries stay on its bookies until their garbage collection runs (every ``gcWaitTime``: 10 min by
default in BookKeeper, 15 min in Pulsar) and their index drops them at its next flush, so a ledger held without
metadata is normal for a while. One that is still held a grace later is a storage leak (``ORPHAN_LEDGER``).
ZooKeeper keeps no time of a deletion, so the grace runs from Scrutiny's first *sighting*: the first listing of the
bookie's held ledgers (:mod:`scrutiny.core.held_ledgers`) that showed the ledger without metadata.

A bookie's listing is read page by page in ascending ledger id order, so a reader judges it one id range at a time:
:func:`judge_range` takes the range's held ledgers that have no metadata (read again in ZooKeeper after the listing,
so a ledger created meanwhile has it) and the sightings kept from before for that range, and gives back the range's
sightings from now on. A reader thus keeps only the sightings (the candidates), never the listing. A sighting whose
ledger the range no longer shows without metadata (collected at last, or a snapshot that lagged) is dropped, and an
``ORPHAN_LEDGER`` open for it is resolved.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scrutiny.core.held_ledgers import HeldLedger
from scrutiny.core.utc_text import format_utc_ms
from scrutiny.core.verdict import Violation
from scrutiny.core.vocabulary import FIXED_SEVERITY, Category


@dataclass(frozen=True, slots=True)
class Orphan:
    """A ledger held without metadata since ``since_ms`` (its first sighting), past the grace."""

    ledger: HeldLedger
    since_ms: int


@dataclass(frozen=True, slots=True)
class IdRange:
    """The ledger ids a part of a listing speaks for: above ``after`` up to ``last`` (None: without end)."""

    after: int
    last: int | None

    def __contains__(self, ledger_id: object) -> bool:
        return isinstance(ledger_id, int) and ledger_id > self.after and (self.last is None or ledger_id <= self.last)


@dataclass(frozen=True, slots=True)
class RangeJudgement:
    """What one id range of a bookie's listing shows."""

    #: Held without metadata for at least the grace, ascending ids.
    orphans: tuple[Orphan, ...]
    #: The sightings of the range from now on: ledger id → first sighting (ms), ascending ids.
    sightings: dict[int, int]
    #: The ids of the range's sightings dropped: the ledger is no longer held without metadata.
    cleared: tuple[int, ...]


def judge_range(
    without_metadata: Iterable[HeldLedger],
    ids: IdRange,
    sightings: Mapping[int, int],
    *,
    now_ms: int,
    grace_ms: int,
) -> RangeJudgement:
    """Judge one id range of a bookie's listing.

    ``without_metadata``: the range's held ledgers that have no metadata now, ascending; ``sightings``: first
    sightings (ms) kept from before, which may hold ids outside the range (left alone: not returned).
    """
    kept: dict[int, int] = {}
    orphans: list[Orphan] = []
    for ledger in without_metadata:
        since = sightings.get(ledger.ledger_id, now_ms)
        kept[ledger.ledger_id] = since
        if now_ms - since >= grace_ms:
            orphans.append(Orphan(ledger, since))
    cleared = tuple(lid for lid in sorted(sightings) if lid in ids and lid not in kept)
    return RangeJudgement(tuple(orphans), kept, cleared)


def orphan_violation(bookie: str, orphan: Orphan, *, now_ms: int) -> Violation:
    """The ``ORPHAN_LEDGER`` finding of one bookie's orphan: the entries it holds and how long it was seen without
    metadata (the bytes are not known: a bookie's index does not keep entry sizes)."""
    held = orphan.ledger
    details: dict[str, object] = {
        "first_seen_without_metadata": format_utc_ms(orphan.since_ms),
        "seconds_without_metadata": round((now_ms - orphan.since_ms) / 1000, 3),
        "first_entry_id": held.first_entry_id,
        "last_entry_id": held.last_entry_id,
        "has_ledger_record": held.has_ledger_record,
    }
    if held.limbo:
        details["limbo"] = True
    return Violation(
        Category.ORPHAN_LEDGER,
        FIXED_SEVERITY[Category.ORPHAN_LEDGER],
        bookie=bookie,
        details=json.dumps(details, sort_keys=True),
    )


def resolved_orphans(open_ids: Iterable[int], ids: IdRange, judged: RangeJudgement) -> list[int]:
    """Those of ``open_ids`` (ledgers with an ``ORPHAN_LEDGER`` open for the bookie) that the range speaks for and
    that it no longer shows without metadata: resolved. One still held without metadata stays open, whatever its
    sighting says (a sighting lost with its table starts the grace again, the finding stays)."""
    return [lid for lid in open_ids if lid in ids and lid not in judged.sightings]
