"""The deep scan's survey of what the bookies hold without metadata (a storage leak's first sign).

After the checks, the driver asks the agent of every registered bookie reached through one (``[bookies]``) for the
ledgers its index holds (``ListLedgers``, page by page, one page in memory) and keeps those that are not among the
snapshot's ledgers. The listing comes after the snapshot, so a ledger created meanwhile looks unknown: each page's
unknown ledgers are read again in ZooKeeper (after a ``sync``) and only the ones still without metadata are counted
(and the first few named), so memory stays one page whatever the bookie holds. A ledger deleted
shortly before is among them until its bookies' garbage collection removes its entries, so the survey reports what
it saw, per bookie, without judging it; a bookie whose agent cannot list (the v3 forward, an older agent, trouble)
is named with the reason.

With a judge (:data:`RangeJudge`), the survey also hands it each id range of a bookie's listing with the range's
ledgers without metadata (after the re-read), up to :data:`JUDGE_BATCH` of them at a time, so the judge decides
``ORPHAN_LEDGER`` (:mod:`scrutiny.core.orphans`) range by range in bounded memory.
"""

from __future__ import annotations

import bisect
import logging
from array import array
from collections.abc import Callable, Collection, Container, Iterable, Mapping
from dataclasses import dataclass, field

from scrutiny.connectors.bookies.agent_client import AgentCallError
from scrutiny.connectors.bookies.fetch import FetchConfig, agent_roots, open_agent_client, plan_route
from scrutiny.core.held_ledgers import LISTING_START, HeldLedger
from scrutiny.core.orphans import IdRange

log = logging.getLogger(__name__)

#: The ledgers named per bookie in the scan's summary and JSON (the count is always whole).
NAMED_LEDGERS = 20
#: Held ledgers per ListLedgers page.
PAGE_SIZE = 10_000
#: Ledgers without metadata handed to the judge at once (one id range): its memory, and its writes per bookie.
JUDGE_BATCH = 100_000
#: (bookie, id range, the range's held ledgers without metadata, ascending) → how many of them are orphans.
RangeJudge = Callable[[str, IdRange, list[HeldLedger]], int]


@dataclass
class HeldWithoutMetadata:
    """What one bookie's agent listed that ZooKeeper has no metadata for."""

    bookie: str
    #: The ledgers the agent listed.
    listed: int = 0
    #: How many of them have no metadata in ZooKeeper (after the re-read).
    count: int = 0
    #: The first :data:`NAMED_LEDGERS` of them, ascending.
    ledgers: list[HeldLedger] = field(default_factory=list)
    #: How many of them the judge called orphans (held without metadata past the grace).
    orphans: int = 0


@dataclass
class HeldSurvey:
    """The survey of every bookie reached through an agent."""

    bookies: list[HeldWithoutMetadata] = field(default_factory=list)
    #: Bookie id → why its agent gave no complete listing.
    not_listed: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Ledger copies held without metadata, over every bookie listed."""
        return sum(b.count for b in self.bookies)

    @property
    def orphans(self) -> int:
        """Ledger copies held without metadata past the grace, over every bookie listed."""
        return sum(b.orphans for b in self.bookies)


class KnownLedgers:
    """The walk's ledger ids in 8 bytes each, for membership tests (given in any order; ascending costs no sort)."""

    def __init__(self, ledger_ids: Iterable[int] = ()) -> None:
        self._ids = array("q")
        self._ordered = True
        self.extend(ledger_ids)

    def extend(self, ledger_ids: Iterable[int]) -> None:
        """Add ``ledger_ids`` to the set (a batch of the walk at a time: its order is checked by one sort of it)."""
        new = array("q", ledger_ids)
        if self._ordered and new:
            follows = not self._ids or self._ids[-1] <= new[0]
            self._ordered = follows and new.tolist() == sorted(new)
        self._ids.extend(new)

    def __contains__(self, ledger_id: object) -> bool:
        if not isinstance(ledger_id, int):
            return False
        if not self._ordered:
            self._ids, self._ordered = array("q", sorted(self._ids)), True
        at = bisect.bisect_left(self._ids, ledger_id)
        return at < len(self._ids) and self._ids[at] == ledger_id

    def __len__(self) -> int:
        return len(self._ids)


def survey_held_ledgers(
    registrations: Mapping[str, bytes | None],
    config: FetchConfig,
    known: Container[int],
    present_now: Callable[[list[int]], Collection[int]],
    *,
    only_bookie: str | None = None,
    progress: Callable[[int], None] | None = None,
    judge: RangeJudge | None = None,
) -> HeldSurvey:
    """List every agent bookie's held ledgers and keep those without metadata.

    ``registrations``: the snapshot's registered bookies; ``known``: the snapshot's ledger ids; ``present_now(ids)``:
    those of ``ids`` that have metadata now (a ZooKeeper re-read); ``progress(n)``: n more ledgers listed;
    ``judge``: see the module doc (a listing that fails leaves the ranges not yet judged unjudged).
    """
    survey = HeldSurvey()
    roots: bytes | None = None
    roots_read = False
    for bookie_id in sorted(registrations):
        if only_bookie is not None and bookie_id != only_bookie:
            continue
        route = plan_route(bookie_id, registrations[bookie_id], config)
        if route.protocol != "agent":
            continue
        if route.target is None:
            survey.not_listed[bookie_id] = route.problem
            continue
        if not roots_read:
            roots, roots_read = agent_roots(config), True
        found = HeldWithoutMetadata(bookie_id)
        after = LISTING_START
        pending: list[HeldLedger] = []
        try:
            with open_agent_client(config, bookie_id, route.target, roots) as client:
                for page in client.ledger_pages(PAGE_SIZE):
                    found.listed += len(page.ledgers)
                    unknown = [h for h in page.ledgers if h.ledger_id not in known]
                    still = _without_metadata(unknown, present_now)
                    found.count += len(still)
                    found.ledgers += still[: NAMED_LEDGERS - len(found.ledgers)]
                    if judge is not None:
                        pending += still
                        if page.end or len(pending) >= JUDGE_BATCH:
                            last = None if page.end else page.ledgers[-1].ledger_id
                            found.orphans += judge(bookie_id, IdRange(after, last), pending)
                            after, pending = last if last is not None else after, []
                    if progress is not None:
                        progress(len(page.ledgers))
        except AgentCallError as error:
            survey.not_listed[bookie_id] = f"{error.code or 'refused'}: {error}"
            continue
        survey.bookies.append(found)
    return survey


def _without_metadata(
    candidates: list[HeldLedger], present_now: Callable[[list[int]], Collection[int]]
) -> list[HeldLedger]:
    """Those of ``candidates`` (listed a moment ago) that have no metadata now: a ledger's metadata is written before
    any of its entries, so one created after the snapshot and listed has it by now, unless deleted since."""
    if not candidates:
        return []
    present = set(present_now([h.ledger_id for h in candidates]))
    return [h for h in candidates if h.ledger_id not in present]
