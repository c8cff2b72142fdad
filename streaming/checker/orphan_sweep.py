"""The streaming job's sweep for ``ORPHAN_LEDGER``: one page of one bookie's held ledgers per interval, in turn.

The deep scan judges what every bookie holds without metadata after walking all of ZooKeeper; the streaming job
has no such walk, so its driver sweeps the bookies slowly instead, at a scrub's pace that costs next to nothing when
all is well. Every ``checker.orphan_sweep_seconds`` :meth:`OrphanSweep.step`:

* takes the bookies registered now that are reached through an agent (``[bookies]``), in id order, and the next page
  (``checker.orphan_sweep_page_ledgers`` ledgers) of the current one's listing (``ListLedgers``) above its cursor;
* asks ZooKeeper which of the page's ledgers have metadata now (after a ``sync``; one ``get_children`` per leaf of
  10,000 ids in the hierarchical layouts, see
  :meth:`~scrutiny.connectors.zookeeper.cluster_cache.CachedClusterReader.ledgers_present`): the others are held
  without metadata;
* hands the page's id range and those ledgers to the judge
  (:class:`~scrutiny.streaming.checker.orphan_judge.OrphanJudge`), which decides the first sightings, the findings
  past ``checker.orphan_grace_seconds`` and the resolutions;
* moves the cursor past the page, or to the next bookie once the listing ended;
* every ``checker.orphan_sweep_write_seconds``, writes what the judge decided since the last time (the changed
  sightings to ``orphan_sightings`` in one MERGE, the findings and resolutions as one batch of the tables, nothing
  when nothing changed) and reads the sightings and the open findings again (a scan may have changed them). A Delta
  MERGE and a batch cost seconds of Spark: written per page, a cluster that deletes ledgers all day would pay them
  every interval.

A failure (an agent that cannot list, ZooKeeper or the tables unreachable) is logged and the same page is asked
again at the next interval, or, for an agent that refuses, the next bookie: the sweep never stops the job. Its cursor
is in memory only (a restarted job starts its passes again; the sightings are in the table), and a stop writes what
was not written yet. The sweep reports a finding once, when it opens, and resolves it when a pass no longer shows the
ledger without metadata.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from scrutiny.connectors.bookies.agent_client import AgentCallError
from scrutiny.connectors.bookies.fetch import FetchConfig, agent_roots, open_agent_client, plan_route
from scrutiny.connectors.tables.orphan_rows import read_open_orphans, read_sightings
from scrutiny.connectors.tables.schemas import RunRecord, output_table
from scrutiny.connectors.zookeeper.cluster_cache import CachedClusterReader
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.held_ledgers import LISTING_START, HeldLedger
from scrutiny.core.orphans import IdRange
from scrutiny.settings.loader import Settings
from scrutiny.streaming.checker.orphan_judge import OrphanJudge
from scrutiny.streaming.checker.records import Record
from scrutiny.streaming.delta_writer import CheckerTables
from scrutiny.streaming.table_upkeep import TableUpkeep

#: The ``source`` of the sweep's records and batches: it is the streaming job's.
SOURCE = "stream"

log = logging.getLogger(__name__)


class SweepJudge(Protocol):
    """What the sweep needs of its judge (:class:`~scrutiny.streaming.checker.orphan_judge.OrphanJudge`)."""

    def __call__(self, bookie: str, ids: IdRange, without_metadata: list[HeldLedger]) -> int: ...

    def load(self) -> None: ...

    def flush(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SweptPage:
    """One step of the sweep: the page of ``bookie``'s listing above ``after``."""

    bookie: str
    after: int
    listed: int
    without_metadata: int
    orphans: int
    #: The page ended the bookie's listing.
    end: bool


@dataclass
class _Pass:
    """The figures of the current pass over one bookie, logged when its listing ends."""

    listed: int = 0
    without_metadata: int = 0
    orphans: int = 0


@dataclass
class OrphanSweep:
    """The sweep (see the module); :meth:`start` runs :meth:`step` every ``interval_s`` in a thread of its own.

    ``registrations()``: the registered bookies and their nodes' bytes now; ``present_now(ids)``: those of ``ids``
    that have metadata now.
    """

    registrations: Callable[[], Mapping[str, bytes | None]]
    fetch: FetchConfig
    present_now: Callable[[list[int]], Collection[int]]
    judge: SweepJudge
    page_ledgers: int
    interval_s: float
    write_s: float
    close: Callable[[], None] = lambda: None
    clock: Callable[[], float] = time.monotonic
    pages: int = 0
    bookie: str | None = None
    after: int = LISTING_START
    _loaded_at: float | None = None
    _pass: _Pass = field(default_factory=_Pass)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def step(self) -> SweptPage | None:
        """Sweep the next page; None when no bookie is reached through an agent, or when the bookie's agent did not
        list (logged; the next step goes on with the next bookie). Raises what else it meets (the same page next)."""
        agents = self._agents()
        if not agents:
            return None
        if self.bookie not in agents:  # the first step, or the bookie left: the next one in id order
            self._next_bookie(agents)
        bookie = self.bookie
        assert bookie is not None
        if self._loaded_at is None:
            self.judge.load()
            self._loaded_at = self.clock()
        try:
            with open_agent_client(self.fetch, bookie, agents[bookie], agent_roots(self.fetch)) as client:
                page = client.ledgers_page(self.after, self.page_ledgers)
        except AgentCallError as error:
            log.warning(
                "orphan sweep: the agent of %s did not list its ledgers (%s): on to the next bookie", bookie, error
            )
            self._next_bookie(agents)
            return None
        ids = [h.ledger_id for h in page.ledgers]
        present = set(self.present_now(ids)) if ids else set()
        without = [h for h in page.ledgers if h.ledger_id not in present]
        last = None if page.end else ids[-1]
        orphans = self.judge(bookie, IdRange(self.after, last), without)
        swept = SweptPage(bookie, self.after, len(ids), len(without), orphans, page.end)
        self.pages += 1
        self._pass.listed += len(ids)
        self._pass.without_metadata += len(without)
        self._pass.orphans += orphans
        if last is None:
            done = self._pass
            log.log(
                logging.INFO if done.orphans else logging.DEBUG,  # a healthy cluster's passes say nothing
                "orphan sweep: %s listed to the end: %d ledgers held, %d without metadata, %d orphans",
                bookie,
                done.listed,
                done.without_metadata,
                done.orphans,
            )
            self._next_bookie(agents)
        else:
            self.after = last
        if self.clock() - self._loaded_at >= self.write_s:
            self.judge.flush()
            self.judge.load()
            self._loaded_at = self.clock()
        return swept

    def _agents(self) -> dict[str, str]:
        """Bookie id → its agent's address, for every registered bookie reached through an agent with an address."""
        out = {}
        for bookie, registration in self.registrations().items():
            route = plan_route(bookie, registration, self.fetch)
            if route.protocol == "agent" and route.target is not None:
                out[bookie] = route.target
        return out

    def _next_bookie(self, agents: Mapping[str, str]) -> None:
        ordered = sorted(agents)
        at = bisect.bisect_right(ordered, self.bookie) if self.bookie is not None else 0
        self.bookie, self.after = ordered[at % len(ordered)], LISTING_START
        self._pass = _Pass()

    # ----------------------------------------------------------------------- the thread

    def start(self) -> None:
        """Run a step every ``interval_s`` (the first one interval after the start) until :meth:`stop`."""
        self._thread = threading.Thread(target=self._run, name="orphan-sweep", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the thread (a step under way finishes first, up to ``timeout_s``), write what was judged since the
        last write, then ``close``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        try:
            if self._thread is None or not self._thread.is_alive():
                self.judge.flush()
        except Exception as error:  # stopping: what is lost is sighted again by the next pass
            log.warning("orphan sweep: what it judged since its last write was not written: %s", error)
        finally:
            self.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.step()
            except Exception as error:  # the sweep must outlive any failure, and never stop the job
                expected = isinstance(error, ScrutinyError | OSError | PySparkException)
                log.log(
                    logging.WARNING if expected else logging.ERROR,
                    "orphan sweep of %s after ledger %d: %s (asked again in %.0f s)",
                    self.bookie,
                    self.after,
                    error,
                    self.interval_s,
                    exc_info=not expected,
                )


def job_sweep(
    spark: SparkSession,
    settings: Settings,
    *,
    fetch: FetchConfig,
    ledgers_root: str,
    run_id: str,
    lag: Callable[[], int | None],
) -> OrphanSweep:
    """The streaming job's sweep: registrations and presence read by a ZooKeeper reader of its own, findings written
    as batches of the tables under an app id of their own (``checker_runs``: ``run_id`` + ``-orphan-sweep``, source
    ``stream``, the query's ``lag``)."""
    checker = settings.checker
    reader = CachedClusterReader(settings.zookeeper, ledgers_root, ttl_s=checker.cluster_cache_seconds, racks_path="")
    name = f"{run_id}-orphan-sweep"
    tables = CheckerTables(
        spark,
        checker.data_dir,
        app_id=f"scrutiny-{name}-{uuid.uuid4().hex[:8]}",
        conflict_attempts=checker.write_conflict_attempts,
        upkeep=TableUpkeep.of(checker),
    )
    batch = 0

    def write(rows: list[Record]) -> None:
        nonlocal batch
        now = datetime.now(UTC)
        run = RunRecord(
            run_id=name,
            started_at=now,
            finished_at=now,
            violations=sum(1 for r in rows if r["record"] == "violation"),
            resolved=sum(1 for r in rows if r["record"] == "resolved"),
            lag_records=lag(),
            source=SOURCE,
        )
        tables.write_batch(batch, output_table(rows), run)  # the same batch again until it is written
        batch += 1

    judge = OrphanJudge(
        spark,
        checker.data_dir,
        read=lambda: (read_sightings(checker.data_dir), read_open_orphans(checker.data_dir)),
        grace_ms=round(checker.orphan_grace_seconds * 1000),
        conflict_attempts=checker.write_conflict_attempts,
        source=SOURCE,
        write=write,
        report_open=False,
    )
    return OrphanSweep(
        registrations=lambda: reader.get().registrations,
        fetch=fetch,
        present_now=reader.ledgers_present,
        judge=judge,
        page_ledgers=checker.orphan_sweep_page_ledgers,
        interval_s=checker.orphan_sweep_seconds,
        write_s=checker.orphan_sweep_write_seconds,
        close=reader.close,
    )
