"""Orphan ledgers: entries a bookie holds of a ledger that has no metadata, past a grace. Pure, no I/O.

A deleted ledger's entries stay on its bookies until their garbage collection runs (every ``gcWaitTime``: 10 min by
default in BookKeeper, 15 min in Pulsar) and their index drops them at its next flush, so a ledger held without
metadata is normal for a while. One that is still held a grace later is a storage leak (``ORPHAN_LEDGER``).
ZooKeeper keeps no time of a deletion, so the grace runs from Scrutiny's first *sighting*: the first listing of the
bookie's held ledgers (:mod:`scrutiny.core.held_ledgers`) that showed the ledger without metadata.

A bookie's listing is read page by page, in ascending ledger id order; :func:`judge_page` judges one page against the
metadata and the sightings kept from before, and gives back the sightings of the page's id range, so a reader keeps
only the sightings (the candidates), never the listing. A sighting whose ledger a page no longer shows (collected at
last) or shows with metadata (a snapshot that lagged) is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from scrutiny.core.held_ledgers import HeldLedger, LedgerPage


@dataclass(frozen=True, slots=True)
class Orphan:
    """A ledger held without metadata since ``since_ms`` (its first sighting), past the grace."""

    ledger: HeldLedger
    since_ms: int


@dataclass(frozen=True, slots=True)
class PageJudgement:
    """What one page of a bookie's listing shows."""

    #: Held without metadata for at least the grace.
    orphans: tuple[Orphan, ...]
    #: The sightings of the page's id range from now on: ledger id → first sighting (ms), ascending ids.
    sightings: dict[int, int]
    #: The ids of the sightings dropped: the ledger is no longer held, or has metadata.
    cleared: tuple[int, ...]


def page_range(page: LedgerPage, after_ledger_id: int) -> tuple[int, int | None]:
    """The ids a page speaks for: above ``after_ledger_id`` up to its last ledger, or without end once it ended."""
    if page.end or not page.ledgers:
        return after_ledger_id, None
    return after_ledger_id, page.ledgers[-1].ledger_id


def judge_page(
    page: LedgerPage,
    after_ledger_id: int,
    has_metadata: Callable[[int], bool],
    sightings: Mapping[int, int],
    *,
    now_ms: int,
    grace_ms: int,
) -> PageJudgement:
    """Judge the page that answered "held ledgers above ``after_ledger_id``".

    ``has_metadata(id)`` says whether ZooKeeper has the ledger's znode (read after the page, so a ledger created
    meanwhile has it); ``sightings`` may hold ids outside the page's range, which are left alone (not returned).
    """
    low, high = page_range(page, after_ledger_id)
    kept: dict[int, int] = {}
    orphans: list[Orphan] = []
    for ledger in page.ledgers:
        if has_metadata(ledger.ledger_id):
            continue
        since = sightings.get(ledger.ledger_id, now_ms)
        kept[ledger.ledger_id] = since
        if now_ms - since >= grace_ms:
            orphans.append(Orphan(ledger, since))
    cleared = tuple(lid for lid in sorted(sightings) if _within(lid, low, high) and lid not in kept)
    return PageJudgement(tuple(orphans), kept, cleared)


def _within(ledger_id: int, low: int, high: int | None) -> bool:
    return ledger_id > low and (high is None or ledger_id <= high)


def held_without_metadata(held: Iterable[HeldLedger], metadata_ids: Iterable[int]) -> list[HeldLedger]:
    """The held ledgers whose id is not among ``metadata_ids`` (both ascending): a merge of the two sorted streams,
    for a reader that walks the metadata in order (a scan's snapshot) rather than asking for each id."""
    out: list[HeldLedger] = []
    known = iter(metadata_ids)
    current = next(known, None)
    for ledger in held:
        while current is not None and current < ledger.ledger_id:
            current = next(known, None)
        if current != ledger.ledger_id:
            out.append(ledger)
    return out
