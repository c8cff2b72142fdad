"""The stateful processor of the checker: one instance per state partition, keyed by bucket of ledgers.

The key is a bucket of consecutive ledger ids (:mod:`scrutiny.streaming.checker.buckets`): Spark calls
:meth:`LedgerProcessor.handleInputRows` with a bucket's events of a micro-batch (from
:mod:`scrutiny.streaming.checker.prepare`, with the fetched answers) and :meth:`LedgerProcessor.handleExpiredTimer`
when one of its timers is due (processing time). Both run the pure steps of :mod:`scrutiny.core.ledger_tracker` for
each ledger concerned, store the bucket's small states as one value in the RocksDB state store, keep the registered
timers equal to what the states need, do the fetch a due retry asks for, and return the records of
:mod:`scrutiny.streaming.checker.records`.

A ledger deleted while no watcher saw it (a full snapshot then just leaves it out) is found by reading ZooKeeper:
before a due timer does anything, and for a bucket that receives snapshot or resync events, for its ledgers that
still have findings open or a timer set (:meth:`LedgerProcessor._forget_deleted`); a ledger whose znode is gone is
deleted like on a deletion event. Ledgers with findings open also have a timer of their own for this
(``TrackerConfig.confirm_interval_ms``), so a bucket whose every ledger was deleted unseen is cleaned too.

Cluster-level findings (``BOOKIE_LOST``, ``AUTORECOVERY_DISABLED``, ``NO_AUDITOR``) live under their own key,
:data:`~scrutiny.streaming.checker.records.CLUSTER_LEDGER` (-1), whose rows are the cluster events the fetch stage
passes on (:meth:`LedgerProcessor._cluster_events`).

Times: every record carries the real time of its step (the wall clock when the verdict was reached, after its
bookies answered), never the micro-batch's start.

A batch run again after a crash (:mod:`scrutiny.streaming.checker.replay`): when its first run's output was kept, each
bucket gets the states of that run and returns its records, without asking anybody; every call's state changes are
returned as a "state" record for that purpose, one a bucket (:func:`~scrutiny.streaming.checker.records.state_records`).

Guarantees: events of one ledger are applied in offset order (the order of a mark and the
metadata does not change the outcome: see :mod:`scrutiny.core.ledger_tracker`); only the newest
metadata event of a batch is checked (earlier ones are superseded); nothing a ledger sends can raise out of here
(an unexpected error is logged and that ledger's state left as it was, so a later event or timer
tries again; the other ledgers of its bucket go on).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
    ValueState,
)

from scrutiny.connectors.kafka.events import autorecovery_health, waits_only
from scrutiny.connectors.zookeeper.cluster_cache import LedgerZnode
from scrutiny.core.autorecovery_health import on_autorecovery_health
from scrutiny.core.bookie_findings import on_bookie_lost, on_bookie_registered
from scrutiny.core.bookie_lifecycle import LifecycleKind
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.ledger_metadata import closed_last_entry
from scrutiny.core.ledger_tracker import (
    Step,
    TrackedLedger,
    on_answers,
    on_cleared,
    on_deleted,
    on_marked,
    on_metadata,
    on_recheck,
    on_reread,
    on_timer,
    with_confirmation,
    with_reverify,
)
from scrutiny.core.replication_locks import stuck_details
from scrutiny.core.verdict import BookieAnswer, ClusterView
from scrutiny.core.vocabulary import Category
from scrutiny.core.zk_records import UnderReplicationMark
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.streaming.checker.answer_codec import decode_answers
from scrutiny.streaming.checker.buckets import decode_bucket, encode_bucket
from scrutiny.streaming.checker.config import JobConfig
from scrutiny.streaming.checker.prepare import fetch_answers
from scrutiny.streaming.checker.records import (
    CLUSTER_LEDGER,
    REJECTED_KEY,
    STATS_KEY,
    Record,
    narrow,
    outcome_records,
    rejected_records,
    retry_records,
    state_records,
    stats_records,
    utc,
    verified_records,
)
from scrutiny.streaming.checker.replay import ReplayHandle, replayed_states
from scrutiny.streaming.checker.reverify_budget import ReverifyBudget
from scrutiny.streaming.checker.timer_wake import timers_record

log = logging.getLogger(__name__)

STATE_SCHEMA = "state binary"
_METADATA = (pb.EventKind.LEDGER_CREATED, pb.EventKind.LEDGER_CHANGED)
_CHECKED = (*_METADATA, pb.EventKind.LEDGER_RECHECK)
#: What each recheck reason says happened to the bookie (an unknown reason: a plain check).
_RECHECK_WHY = {
    pb.RecheckReason.BOOKIE_LOST_RECHECK: LifecycleKind.LOST,
    pb.RecheckReason.BOOKIE_RETURNED: LifecycleKind.RETURNED,
    pb.RecheckReason.COOKIE_CHANGED: LifecycleKind.COOKIE_CHANGED,
    pb.RecheckReason.BOOKIE_RESTARTED: LifecycleKind.RESTARTED,
}
_DELETED = pb.EventKind.LEDGER_DELETED
_WALKS = (pb.Origin.SNAPSHOT, pb.Origin.RESYNC)
_LIVE, _RECHECK = pb.Origin.LIVE, pb.EventKind.LEDGER_RECHECK


class LedgerProcessor(StatefulProcessor):
    """See the module docstring. Picklable: holds the :class:`JobConfig` until :meth:`init`."""

    def __init__(self, config: JobConfig, replay: ReplayHandle | None = None) -> None:
        self.config = config
        self.replay = replay
        self._handle: StatefulProcessorHandle | None = None
        self._state: ValueState | None = None
        self._replayed: set[int] = set()
        self._budget = ReverifyBudget(config.reverify_per_task, config.reverify_spacing_ms)
        self._rpcs = 0
        self._rpcs_ledger = 0
        self._view: ClusterView | None = None  # the cluster as this call sees it (one look per bucket)

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Once per state partition: the value state holding each bucket's ledgers."""
        self._handle = handle
        self._state = handle.getValueState("ledgers", STATE_SCHEMA)
        self._replayed = set()
        self._budget = ReverifyBudget(self.config.reverify_per_task, self.config.reverify_spacing_ms)

    def handleInputRows(  # noqa: N802 - PySpark's names
        self,
        key: Any,
        rows: Iterator[Any],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Any]:
        """A bucket's events of this batch (or the fetch stage's own rows: :data:`STATS_KEY`, :data:`REJECTED_KEY`)."""
        if self.replay is not None and self.replay.running():
            for _ in rows:
                pass
            yield from self._replayed_rows(int(key[0]), timerValues)
            return
        now_ms = _now_ms(timerValues.getCurrentProcessingTimeInMs())  # the fetch stage's answers are in already
        self._view = None
        ordered = sorted(rows, key=lambda r: r["offset"])
        if int(key[0]) in (STATS_KEY, REJECTED_KEY):
            made = stats_records if int(key[0]) == STATS_KEY else rejected_records
            yield from self._rows(made([row["event"] for row in ordered], now_ms=now_ms, source=self.config.source))
            return
        if int(key[0]) == CLUSTER_LEDGER:
            yield from self._rows(self._cluster_events(ordered, now_ms))
            return
        by_ledger: dict[int, list[tuple[Any, pb.LedgerEvent]]] = {}
        walked = False  # a snapshot or resync names every ledger that exists
        for row in ordered:
            event = pb.LedgerEvent.FromString(row["event"])
            walked = walked or event.origin in _WALKS
            by_ledger.setdefault(int(row["ledger_id"]), []).append((row, event))
        before = self._load()
        states = dict(before)
        records: list[Record] = []
        for ledger_id, events in by_ledger.items():
            try:
                state, found = self._apply_events(ledger_id, states.get(ledger_id), events, now_ms)
            except Exception:
                log.exception("ledger %d: events not applied; the state is kept for a later try", ledger_id)
                continue
            self._put(states, ledger_id, state, now_ms)
            records += found
        records = self._confirm_critical(before, states, self._name_locks(records, now_ms), now_ms)
        if walked:
            unnamed = [lid for lid, state in states.items() if lid not in by_ledger and state.watched()]
            records += self._forget_deleted(states, unnamed, now_ms)
        records += self._save(int(key[0]), before, states, now_ms)
        yield from self._rows(records)

    def handleExpiredTimer(  # noqa: N802 - PySpark's names
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Any]:
        """Timers of some ledgers of this bucket are due: every due one is handled, the retries' fetches at once."""
        if self.replay is not None and self.replay.running():
            yield from self._replayed_rows(int(key[0]), timerValues)
            return
        now_ms = _now_ms(timerValues.getCurrentProcessingTimeInMs())
        bucket = int(key[0])
        self._view = None
        before = self._load()
        states = dict(before)
        due = [lid for lid, state in before.items() if any(t <= now_ms for t in state.timers())]
        # No timer acts on a ledger deleted unseen; a re-verification reads the znode itself (_reread).
        confirm = [lid for lid in due if any(t <= now_ms for t in before[lid].pending_timers())]
        gone = self._forget_deleted(states, confirm, now_ms)
        stepped: dict[int, tuple[Step, list[Record]]] = {}
        for ledger_id in due:
            state = states.get(ledger_id)
            if state is not None:
                try:
                    cluster = self._cluster() if state.lost else None
                    step = on_timer(state, now_ms=now_ms, config=self.config.tracker, cluster=cluster)
                except Exception:
                    log.exception("ledger %d: timer not handled; the state is kept", ledger_id)
                    continue
                found = outcome_records(ledger_id, step.outcome, now_ms=now_ms, source=self.config.source)
                stepped[ledger_id] = (step, found)
        gone += self._reread(states, stepped, now_ms)
        wanted = {lid: step.outcome.fetch for lid, (step, _) in stepped.items() if step.outcome.fetch and step.state}
        answers = self._fetch(wanted, {lid: step.state for lid, (step, _) in stepped.items() if lid in wanted})
        judged_ms = _now_ms(now_ms)  # the retries' verdicts are reached once their bookies have answered
        records = gone
        for ledger_id, (timed, found) in stepped.items():
            step, more = timed, list[Record]()
            if ledger_id in wanted:
                try:
                    step, more = self._answered(ledger_id, timed, answers[ledger_id], judged_ms)
                except Exception:
                    log.exception("ledger %d: retry not judged; the state is kept", ledger_id)
                    continue
            records += found + more
            records += retry_records(
                ledger_id, before[ledger_id], step.state, now_ms=judged_ms, source=self.config.source
            )
            self._put(states, ledger_id, step.state, judged_ms)
        records = self._confirm_critical(before, states, self._name_locks(records, judged_ms), judged_ms)
        records += self._save(bucket, before, states, now_ms)
        yield from self._rows(records)

    def close(self) -> None:
        """Nothing to release: clients are shared per worker process."""

    def _replayed_rows(self, bucket: int, timer_values: TimerValues) -> Iterator[Any]:
        """In a batch run again: the bucket's states and records as its first run left them, once per batch.

        Spark may call a bucket twice in a batch (its events, then its due timers); the kept rows hold both calls'
        records and state changes, applied at the first call.
        """
        assert self.replay is not None
        if bucket in self._replayed:
            return
        self._replayed.add(bucket)
        kept = self.replay.rows(bucket)
        if bucket not in (STATS_KEY, REJECTED_KEY):
            before = self._load()
            self._save(bucket, before, replayed_states(before, kept), timer_values.getCurrentProcessingTimeInMs())
        for kind, ledger_id, at, payload in kept:
            yield Row(record=kind, ledger_id=ledger_id, at=at, payload=payload)

    # ------------------------------------------------------------------ applying events

    def _cluster_events(self, rows: list[Any], now_ms: int) -> list[Record]:
        """The cluster events of the batch: ``BOOKIE_LOST`` (:mod:`scrutiny.core.bookie_findings`) and the
        auto-recovery findings (:mod:`scrutiny.core.autorecovery_health`) opened and resolved in the cluster-level
        state. Every partition has a copy of each: taken once, in the order the watcher published them (epoch, then
        sequence), since offsets of different partitions do not compare."""
        events = {}
        for row in rows:
            event = pb.LedgerEvent.FromString(row["event"])
            events[(event.epoch, event.sequence, event.watcher_id)] = event
        before = self._load()
        state = before.get(CLUSTER_LEDGER)
        records: list[Record] = []
        for _, event in sorted(events.items(), key=lambda item: item[0]):
            try:
                step = _cluster_step(state, event)
            except Exception:
                log.exception("%s: event not applied; the cluster-level state is kept", pb.EventKind.Name(event.kind))
                continue
            records += outcome_records(CLUSTER_LEDGER, step.outcome, now_ms=now_ms, source=self.config.source)
            state = step.state
        after = dict(before)
        if state is None:
            after.pop(CLUSTER_LEDGER, None)
        else:
            after[CLUSTER_LEDGER] = state
        return records + self._save(CLUSTER_LEDGER, before, after, now_ms)

    def _apply_events(
        self, ledger_id: int, state: TrackedLedger | None, parsed: list[tuple[Any, pb.LedgerEvent]], now_ms: int
    ) -> tuple[TrackedLedger | None, list[Record]]:
        """One ledger's events of the batch (rows and their events), in offset order: its new state and records."""
        records: list[Record] = []
        newest = max((i for i, (_, e) in enumerate(parsed) if _supersedes(e)), default=-1)
        for index, (row, event) in enumerate(parsed):
            if _supersedes(event) and index != newest:
                continue  # superseded within the batch by a newer version, a recheck or a deletion
            step = self._step(state, event, row["answers"], now_ms)
            records += outcome_records(ledger_id, step.outcome, now_ms=now_ms, source=self.config.source)
            if step.outcome.fetch and step.state is not None:
                step, more = self._fetched(ledger_id, step, now_ms)
                records += more
            records += retry_records(ledger_id, state, step.state, now_ms=now_ms, source=self.config.source)
            state = step.state
        return state, records

    def _step(self, state: TrackedLedger | None, event: pb.LedgerEvent, answers: bytes | None, now_ms: int) -> Step:
        tracker = self.config.tracker
        answered, decoded = decode_answers(answers) if answers else (None, None)  # decoded: event.metadata's
        if event.kind in _METADATA:
            return on_metadata(
                state,
                version=event.stat.version,
                data=event.metadata,
                changed_ms=event.stat.mtime_ms if event.origin == _LIVE else None,
                written_ms=event.stat.mtime_ms or None,
                answers=answered,
                now_ms=now_ms,
                cluster=self._cluster(),
                config=tracker,
                decode_error=event.decode_error,
                decoded=decoded,
            )
        if event.kind == _RECHECK:
            return on_recheck(
                state,
                why=_RECHECK_WHY.get(event.recheck),
                bookie=event.bookie_id,
                version=event.stat.version,
                data=event.metadata,
                written_ms=event.stat.mtime_ms or None,
                answers=answered,
                now_ms=now_ms,
                cluster=self._cluster(),
                config=tracker,
                decode_error=event.decode_error,
                decoded=decoded,
            )
        if event.kind == _DELETED:
            return on_deleted(state)
        if event.kind == pb.EventKind.UNDER_REPLICATION_MARKED:
            mark = event.under_replication
            parsed = UnderReplicationMark(tuple(mark.replicas), mark.ctime_ms if mark.has_ctime else None)
            return on_marked(state, parsed, now_ms=now_ms, config=tracker)
        return on_cleared(state)

    def _fetched(self, ledger_id: int, step: Step, now_ms: int) -> tuple[Step, list[Record]]:
        """Do the fetch a step asked for and apply its answers."""
        answers = self._fetch({ledger_id: step.outcome.fetch}, {ledger_id: step.state})
        return self._answered(ledger_id, step, answers[ledger_id], _now_ms(now_ms))

    def _fetch(
        self, wanted: dict[int, tuple[str, ...]], states: Mapping[int, TrackedLedger | None]
    ) -> dict[int, dict[str, BookieAnswer]]:
        """Every wanted ledger's answers, all in one fetch (batched per bookie); unknown when the fetch fails.
        ``states``: the wanted ledgers' states, whose metadata says which are closed and where."""
        if not wanted:
            return {}
        ends = {lid: end for lid, s in states.items() if s and (end := closed_last_entry(s.metadata)) is not None}
        try:
            rpcs, fetched = fetch_answers(self.config, wanted, ends=ends)
            self._rpcs += rpcs
            self._rpcs_ledger = next(iter(wanted))
        except ScrutinyError as error:
            unknown = BookieAnswer.unknown(f"fetch failed: {error}")
            return {ledger: dict.fromkeys(bookies, unknown) for ledger, bookies in wanted.items()}
        return {ledger: fetched.get(ledger, {}) for ledger in wanted}

    def _answered(
        self, ledger_id: int, step: Step, answers: dict[str, BookieAnswer], now_ms: int
    ) -> tuple[Step, list[Record]]:
        """A step's requested answers applied."""
        assert step.state is not None
        done = on_answers(
            step.state,
            version=step.state.version,
            answers=answers,
            now_ms=now_ms,
            cluster=self._cluster(),
            config=self.config.tracker,
        )
        return done, outcome_records(ledger_id, done.outcome, now_ms=now_ms, source=self.config.source)

    def _name_locks(self, records: list[Record], now_ms: int) -> list[Record]:
        """``UNDER_REPLICATION_STUCK`` findings among ``records`` with their ledgers' replication locks named in the
        details (one sync, all at once: :mod:`scrutiny.core.replication_locks`); as found when ZooKeeper cannot say."""
        stuck = {int(str(r["ledger_id"])) for r in records if _is_stuck(r)}
        if not stuck:
            return records
        try:
            locks = self.config.cluster_reader().replication_locks(sorted(stuck))
        except ScrutinyError as error:
            log.warning("cannot read the replication locks of %d stuck mark(s) (%s)", len(stuck), error)
            return records
        grace_ms = self.config.tracker.verdict.under_replication_grace_ms

        def named(record: Record) -> Record:
            lock = locks.get(int(str(record["ledger_id"])))
            return {
                **record,
                "details": stuck_details(str(record.get("details") or ""), lock, now_ms=now_ms, grace_ms=grace_ms),
            }

        return [named(r) if _is_stuck(r) else r for r in records]

    def _confirm_critical(
        self, before: dict[int, TrackedLedger], states: dict[int, TrackedLedger], records: list[Record], now_ms: int
    ) -> list[Record]:
        """Read again, before they are written, the znodes of the ledgers with a critical finding among ``records``
        (one sync, all at once). A ledger deleted meanwhile, or whose metadata moved on from the version judged
        (re-replicated, recovered), gets none of this step's findings, resolutions or check: its open findings stay
        those written before (the step's other effects, a mark, a deadline, a retry, are kept), a deleted one is then
        dropped (its findings resolved), and its new version is checked when its event comes. A state that has no
        version yet (a mark came first) is only checked to exist. When ZooKeeper cannot answer, the findings are
        written as found."""
        critical = {
            int(str(r["ledger_id"]))
            for r in records
            if r.get("record") == "violation" and r.get("severity") == "critical"
        }
        judged = {lid: states[lid].version for lid in critical if lid in states}
        if not judged:
            return records
        try:
            current = self.config.cluster_reader().ledger_versions(list(judged))
        except ScrutinyError as error:
            log.warning("cannot read %d ledger(s) again before their critical findings (%s)", len(judged), error)
            return records
        stale = {
            lid for lid, version in judged.items() if lid not in current or (version >= 0 and current[lid] != version)
        }
        kept = [r for r in records if int(str(r["ledger_id"])) not in stale or r.get("record") not in _JUDGED]
        for ledger_id in sorted(stale):
            previous = before.get(ledger_id) or TrackedLedger()
            states[ledger_id] = replace(states[ledger_id], open=previous.open, reported=previous.reported)
            moved = current.get(ledger_id)
            log.info(
                "ledger %d: %s since version %d was judged; its critical finding(s) are not written",
                ledger_id,
                "deleted" if moved is None else f"at version {moved}",
                judged[ledger_id],
            )
            if moved is None:
                kept += self._deleted_unseen(states, ledger_id, now_ms)
        return kept

    def _forget_deleted(self, states: dict[int, TrackedLedger], ledgers: list[int], now_ms: int) -> list[Record]:
        """Drop from ``states`` those of ``ledgers`` whose znode is gone (their findings resolve); their records.

        When ZooKeeper cannot say, every ledger is kept (and asked again at its next timer or snapshot).
        """
        if not ledgers:
            return []
        try:
            present = self.config.cluster_reader().ledgers_present(ledgers)
        except ScrutinyError as error:
            log.warning("cannot confirm that %d ledger(s) still exist (%s); kept", len(ledgers), error)
            return []
        records: list[Record] = []
        for ledger_id in ledgers:
            if ledger_id not in present:
                records += self._deleted_unseen(states, ledger_id, now_ms)
        return records

    def _deleted_unseen(self, states: dict[int, TrackedLedger], ledger_id: int, now_ms: int) -> list[Record]:
        """A ledger whose znode is gone: dropped from ``states``, its findings resolved; its records."""
        state = states.pop(ledger_id)
        step = on_deleted(state)
        log.info("ledger %d was deleted unseen (no deletion event): its findings resolve", ledger_id)
        records = outcome_records(ledger_id, step.outcome, now_ms=now_ms, source=self.config.source)
        return records + retry_records(ledger_id, state, None, now_ms=now_ms, source=self.config.source)

    def _reread(
        self, states: dict[int, TrackedLedger], stepped: dict[int, tuple[Step, list[Record]]], now_ms: int
    ) -> list[Record]:
        """The due re-verifications of ``stepped``, within this task's budget: each ledger's znode read afresh
        (one sync, all at once) and checked again (``stepped`` gets the step asking for its bookies' answers);
        a ledger found gone is dropped (its records returned). The ones beyond the budget, or all when ZooKeeper
        cannot answer, are put off."""
        due = [lid for lid, (step, _) in stepped.items() if step.outcome.reread and step.state is not None]
        if not due:
            return []
        now, put_off = self._budget.split(due, now_ms=now_ms)
        read: dict[int, LedgerZnode] = {}
        try:
            read = self.config.cluster_reader().ledgers_metadata(now)
        except ScrutinyError as error:
            log.warning("cannot read %d ledger(s) to verify them again (%s); put off", len(now), error)
            put_off.update(dict.fromkeys(now, now_ms + self.config.reverify_spacing_ms))
            now = []
        if put_off:
            log.debug("%d re-verification(s) put off beyond this batch's budget", len(put_off))
        records: list[Record] = []
        for ledger_id in due:
            step, found = stepped[ledger_id]
            assert step.state is not None
            if ledger_id in put_off:
                later = replace(step.state, reverify_at_ms=put_off[ledger_id])
                stepped[ledger_id] = (Step(later, step.outcome), found)
            elif ledger_id not in read:
                del stepped[ledger_id]
                records += found + self._deleted_unseen(states, ledger_id, now_ms)
            else:
                znode = read[ledger_id]
                again = on_reread(
                    step.state,
                    version=znode.version,
                    data=znode.data,
                    written_ms=znode.mtime_ms or None,
                    now_ms=now_ms,
                    cluster=self._cluster(),
                    config=self.config.tracker,
                    decode_error=znode.decode_error,
                )
                more = outcome_records(ledger_id, again.outcome, now_ms=now_ms, source=self.config.source)
                stepped[ledger_id] = (again, found + more)
        return records

    def _put(self, states: dict[int, TrackedLedger], ledger_id: int, state: TrackedLedger | None, now_ms: int) -> None:
        """A stepped ledger's new state (None: forgotten), with its existence confirmation scheduled."""
        kept = with_confirmation(state, now_ms=now_ms, config=self.config.tracker)
        if kept is None:
            states.pop(ledger_id, None)
        else:
            states[ledger_id] = kept

    # ------------------------------------------------------------------ state, timers, cluster

    def _load(self) -> dict[int, TrackedLedger]:
        """The bucket's ledgers (one call to the state store: ``get`` answers None for a new key)."""
        assert self._state is not None
        value = self._state.get()
        return decode_bucket(bytes(value[0])) if value is not None else {}

    def _save(
        self, bucket: int, before: dict[int, TrackedLedger], after: dict[int, TrackedLedger], now_ms: int
    ) -> list[Record]:
        """Store the bucket and make the registered timers those its ledgers need; the state changes' records.

        Every checked ledger of the bucket gets its re-verification scheduled here (those a step touched, and those
        an earlier version left without one). The timers registered are always those of ``before`` (this method is
        the only one that registers any), so no listing call is needed; due ones are Spark's to remove. The last
        record is the bucket's earliest timer, for the driver's calendar (:mod:`~.timer_wake`).
        """
        assert self._state is not None and self._handle is not None
        tracker = self.config.tracker
        after = {lid: with_reverify(s, group=bucket, now_ms=now_ms, config=tracker) or s for lid, s in after.items()}
        registered = {t for state in before.values() for t in state.timers()}
        wanted = {t for state in after.values() for t in state.timers()}
        for expired in registered - wanted:
            if expired > now_ms:
                self._handle.deleteTimer(expired)
        for due in wanted - registered:
            self._handle.registerTimer(due)
        if not after:
            if before:
                self._state.clear()
        elif after != before:
            self._state.update((encode_bucket(after),))
        changes = state_records(before, after, now_ms=now_ms) + verified_records(before, after, now_ms=now_ms)
        return [*changes, timers_record(bucket, wanted, utc(now_ms))]

    def _cluster(self) -> ClusterView:
        """The registered bookies and racks, read once per call of Spark's (a bucket's events, or its timers)."""
        if self._view is None:
            try:
                self._view = self.config.cluster_reader().get().view
            except ScrutinyError as error:
                log.warning("cluster view unavailable (%s): registration and placement not judged", error)
                self._view = ClusterView()
        return self._view

    def _rows(self, records: list[Record]) -> Iterator[Any]:
        """The records as output rows, with a figures record for the requests this step sent (retries,
        re-verifications: the fetch stage counts its own). That record names a ledger of the bucket, so that a batch
        run again returns it with the bucket's other records."""
        if self._rpcs:
            figures = {"record": "stats", "ledger_id": self._rpcs_ledger, "at": utc(_now_ms(0))}
            records = [*records, {**figures, "details": json.dumps({"rpcs": self._rpcs}), "source": self.config.source}]
            self._rpcs = 0
        for record in records:
            kind, ledger_id, at, payload = narrow(record)
            yield Row(record=kind, ledger_id=ledger_id, at=at, payload=payload)


def _cluster_step(state: TrackedLedger | None, event: pb.LedgerEvent) -> Step:
    """A BOOKIE_LOST, a registration or an AUTORECOVERY_HEALTH applied to the cluster-level findings."""
    if event.kind == pb.EventKind.AUTORECOVERY_HEALTH:
        return on_autorecovery_health(state, autorecovery_health(event))
    if event.kind == pb.EventKind.BOOKIE_LOST:
        lost = event.lost
        return on_bookie_lost(
            state, event.bookie_id, unregistered_ms=lost.unregistered_ms, ledgers=lost.ledgers, entries=lost.entries
        )
    return on_bookie_registered(state, event.bookie_id)


def _is_stuck(record: Record) -> bool:
    return record.get("record") == "violation" and record.get("category") == Category.UNDER_REPLICATION_STUCK.value


#: The records a step makes of its judgement of one version (what a version found stale must not write).
_JUDGED = frozenset({"violation", "resolved", "check"})


def _supersedes(event: pb.LedgerEvent) -> bool:
    """Whether a later event of this kind makes an earlier metadata event of the batch moot."""
    return (event.kind in _CHECKED and not waits_only(event)) or event.kind == _DELETED


def _now_ms(floor_ms: int) -> int:
    """The wall clock in milliseconds, never before ``floor_ms`` (Spark's time of the batch, or an earlier step's)."""
    return max(floor_ms, time.time_ns() // 1_000_000)
