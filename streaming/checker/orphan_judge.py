"""``ORPHAN_LEDGER`` on Spark's driver: one id range of one bookie's listing at a time, against the kept sightings.

The deep scan's survey (:mod:`~scrutiny.streaming.scan.held`) and the streaming job's sweep
(:mod:`~scrutiny.streaming.checker.orphan_sweep`) both hand each id range of a bookie's listing, with the range's held
ledgers that have no metadata, to an :class:`OrphanJudge`. It judges the range
(:func:`~scrutiny.core.orphans.judge_range`) against the first sightings it holds and keeps the range's new
sightings, findings and resolutions; :meth:`OrphanJudge.flush` writes them: the changed bookies' sightings to
``orphan_sightings`` (:func:`~scrutiny.streaming.orphan_sightings.merge_sightings`), the findings and resolutions
as a batch of the tables. The scan flushes when its survey ends (sooner when many records wait), the sweep every
``checker.orphan_sweep_write_seconds``.
The judge keeps what it judged (sightings, open findings), so the sweep, which judges the same ranges again and
again, need not read the tables each time; :meth:`OrphanJudge.load` reads them again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from pyspark.sql import SparkSession

from scrutiny.connectors.tables.orphan_rows import OpenOrphans, Sightings
from scrutiny.core.held_ledgers import HeldLedger
from scrutiny.core.ledger_tracker import Outcome
from scrutiny.core.orphans import IdRange, judge_range, orphan_violation, resolved_orphans
from scrutiny.core.vocabulary import Category
from scrutiny.streaming.checker.records import Record, outcome_records
from scrutiny.streaming.orphan_sightings import merge_sightings

_ORPHAN = Category.ORPHAN_LEDGER.value
#: What the judge starts from: the sightings, and bookie → the ledgers with an ``ORPHAN_LEDGER`` open for it.
JudgeState = tuple[Sightings, Mapping[str, Iterable[int]]]


class OrphanJudge:
    """Judges ``ORPHAN_LEDGER`` range by range (see the module); :meth:`flush` writes what changed.

    ``read()``: what the tables hold (:data:`JudgeState`); ``source``: the records' source (``stream`` or
    ``scan``); ``write(records)``: writes a batch of findings and resolutions; ``report_open``: whether an orphan
    whose finding is open already is reported again (the scan reports what it found; the sweep, which passes every
    few minutes, only what changed); ``max_pending``: a range that leaves at least that many findings and
    resolutions unwritten flushes at once (its memory; None: only :meth:`flush` writes). It knows no sightings and no
    open findings until :meth:`load`.
    """

    def __init__(
        self,
        spark: SparkSession,
        data_dir: str,
        *,
        read: Callable[[], JudgeState],
        grace_ms: int,
        conflict_attempts: int,
        source: str,
        write: Callable[[list[Record]], None],
        report_open: bool = True,
        max_pending: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spark = spark
        self.data_dir = data_dir
        self.read = read
        self.grace_ms = grace_ms
        self.conflict_attempts = conflict_attempts
        self.source = source
        self.write = write
        self.report_open = report_open
        self.max_pending = max_pending
        self.clock = clock
        self.sightings: Sightings = {}
        self.open_orphans: OpenOrphans = {}
        self._changed: set[str] = set()  # bookies whose sightings changed since the last flush
        self._records: list[Record] = []  # findings and resolutions not written yet

    def load(self) -> None:
        """Start again from what the tables hold (``read``): what was judged and not flushed yet is dropped."""
        sightings, found = self.read()
        self.sightings = {bookie: dict(held) for bookie, held in sightings.items()}
        self.open_orphans = {bookie: set(ids) for bookie, ids in found.items()}
        self._changed, self._records = set(), []

    def __call__(self, bookie: str, ids: IdRange, without_metadata: list[HeldLedger]) -> int:
        """Judge one range (nothing written before :meth:`flush`, or ``max_pending``); the number of orphans in it."""
        now_ms = int(self.clock() * 1000)
        mine = self.sightings.setdefault(bookie, {})
        before = {lid: ms for lid, ms in mine.items() if lid in ids}
        judged = judge_range(without_metadata, ids, before, now_ms=now_ms, grace_ms=self.grace_ms)
        if judged.sightings != before:
            for lid in before:
                del mine[lid]
            mine.update(judged.sightings)
            self._changed.add(bookie)
        open_ids = self.open_orphans.setdefault(bookie, set())
        found = [o for o in judged.orphans if self.report_open or o.ledger.ledger_id not in open_ids]
        resolved = resolved_orphans(sorted(open_ids), ids, judged)
        key = (_ORPHAN, bookie, -1)
        steps = [(o.ledger.ledger_id, Outcome(found=(orphan_violation(bookie, o, now_ms=now_ms),))) for o in found]
        steps += [(lid, Outcome(resolved=(key,))) for lid in resolved]
        self._records += [
            r for lid, outcome in steps for r in outcome_records(lid, outcome, now_ms=now_ms, source=self.source)
        ]
        open_ids.difference_update(resolved)
        open_ids.update(o.ledger.ledger_id for o in judged.orphans)
        if self.max_pending is not None and len(self._records) >= self.max_pending:
            self.flush()
        return len(judged.orphans)

    def flush(self) -> None:
        """Write what changed since the last flush: the changed bookies' sightings in one MERGE, then the findings
        and resolutions as one batch. On a failure it stays pending, and the next flush writes it."""
        if self._changed:
            changed = {bookie: self.sightings.get(bookie, {}) for bookie in self._changed}
            merge_sightings(self.spark, self.data_dir, changed, conflict_attempts=self.conflict_attempts)
            self._changed = set()
        if self._records:
            self.write(self._records)
            self._records = []
