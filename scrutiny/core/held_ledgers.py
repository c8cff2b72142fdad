"""What a bookie's index says it holds, ledger by ledger, in pages: the raw material of ``ORPHAN_LEDGER``. Pure.

The bookie agent answers ``BookieAgent.ListLedgers`` with one page at a time of the ledgers its bookie's index holds
(entries, or a ledger record), in ascending id order, each with the first and last entry id it holds. A reader asks
for the ledgers above the last id it has seen until the agent says the listing ended, so a bookie of 10 M ledgers is
read in bounded memory (one page at a time on both sides).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: ``after_ledger_id`` of a listing's first page: every ledger id is above it.
LISTING_START = -1
#: ``first_entry_id``/``last_entry_id`` of a ledger the bookie holds a record of but no entry.
NO_ENTRY = -1


@dataclass(frozen=True, slots=True)
class HeldLedger:
    """One ledger a bookie's index holds."""

    ledger_id: int
    #: The index holds the bookie's record of the ledger (False: entries only, e.g. deleted and not cleaned up yet).
    has_ledger_record: bool = True
    #: The record says the ledger is in limbo (BP-46): the bookie may have lost entries of it.
    limbo: bool = False
    #: The lowest and highest entry id held (:data:`NO_ENTRY` for both when it holds none).
    first_entry_id: int = NO_ENTRY
    last_entry_id: int = NO_ENTRY

    @property
    def holds_entries(self) -> bool:
        """Whether any entry of the ledger is held."""
        return self.first_entry_id >= 0


@dataclass(frozen=True, slots=True)
class LedgerPage:
    """One page of a bookie's held ledgers: every held ledger with an id above the request's ``after_ledger_id``, in
    ascending order, up to the page's size."""

    ledgers: tuple[HeldLedger, ...]
    #: No held ledger has an id above the last one in ``ledgers``: the listing is complete.
    end: bool
    #: Everything the bookie had written to its index on disk before this time (ms since the epoch) is in the page.
    as_of_ms: int = 0

    @property
    def next_after(self) -> int | None:
        """The ``after_ledger_id`` of the next page (None once the listing ended)."""
        if self.end:
            return None
        return self.ledgers[-1].ledger_id if self.ledgers else None


def page_problem(ledger_ids: Sequence[int], *, end: bool, after_ledger_id: int, limit: int) -> str:
    """Why a page breaks the listing's order (empty when it keeps it): more than ``limit`` ledgers (0: any number), no
    ledger in a page that does not end the listing, ids not strictly ascending above ``after_ledger_id``."""
    if limit and len(ledger_ids) > limit:
        return f"{len(ledger_ids)} ledgers in a page of at most {limit}"
    if not ledger_ids and not end:
        return "an empty page that does not end the listing"
    previous = after_ledger_id
    for ledger_id in ledger_ids:
        if ledger_id <= previous:
            return f"ledger {ledger_id} after {previous}: ids not strictly ascending above {after_ledger_id}"
        previous = ledger_id
    return ""
