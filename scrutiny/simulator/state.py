"""The simulated cluster's scenario over time.

Pure (no I/O). :class:`ClusterState` is the scenario at one moment: the simulated cluster and the
ground truth both step it through the schedule with :meth:`ClusterState.apply`, so they agree on
what every change means. What a bookie holds of a ledger is *described* (segments, the last entry
written, per-bookie ``missing`` / ``add`` entry ranges), never listed entry by entry:
:meth:`ClusterState.held_groups` turns the description into sequence groups for the simulated
bookies, and :mod:`scrutiny.simulator.truth` reads the same description with arithmetic of
its own. BookKeeper's auto-recovery is cluster-wide: whether it is disabled and whether an auditor is elected, each
with the time it last changed (:attr:`ClusterState.disabled_since_s`, :attr:`ClusterState.no_auditor_since_s`).
A replication worker's lock belongs to the mark it took (:attr:`MarkSpec.lock`, all of them in
:attr:`ClusterState.locks`): it goes with the mark, and a worker releases it once done (``repair``) or on ``unlock``.

An *orphan* (:attr:`ClusterState.orphans`) is a ledger without metadata whose entries its bookies still hold: declared
so, or made so by an ``orphan`` change (its metadata deleted, its entries left). Its bookies list it and hold its
entries like any other ledger's (:meth:`ClusterState.ledgers_of`, :meth:`ClusterState.held_groups`); nothing in
ZooKeeper names it. :attr:`ClusterState.sightings` says since when a checker that lists every bookie's ledgers
continuously has seen each orphan on each bookie (:meth:`ClusterState.lists`, :meth:`ClusterState.listing_answered`).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Final

from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.ledger_metadata import LedgerState
from scrutiny.core.placement import PlacementResult
from scrutiny.core.sequence_groups import SequenceGroup, clip
from scrutiny.core.striping import expected_groups
from scrutiny.simulator.model import (
    EVERYTHING,
    NO_DEVIATION,
    Action,
    AutoPlacement,
    BookieMode,
    CheckerSpec,
    Event,
    FaultKind,
    FaultSpec,
    Holding,
    LedgerSpec,
    LockSpec,
    MarkSpec,
    Scenario,
    SegmentSpec,
    Where,
    auto_ensemble,
    check_ledger,
    entry_header,
    normalize_ranges,
    placement_outcome,
    subtract_ranges,
)


@dataclass
class BookieState:
    """One bookie now."""

    bookie_id: str
    rack: str | None
    mode: BookieMode
    fault: FaultSpec | None
    limbo: frozenset[int]
    #: The mode a killed bookie comes back in.
    revive_mode: BookieMode = BookieMode.WRITABLE
    #: Since when a stopped bookie has been stopped (seconds after the start; None while it runs).
    stopped_at_s: float | None = None

    @property
    def registered(self) -> bool:
        """Whether the bookie has a writable or read-only registration."""
        return self.mode is not BookieMode.STOPPED

    def answers_limbo(self, ledger_id: int, checker: CheckerSpec) -> bool:
        """Whether a registered bookie answers, in time, that the ledger is in limbo (a fault that applies decides
        the answer, but a short delay)."""
        if self.mode is BookieMode.STOPPED or ledger_id not in self.limbo:
            return False
        fault = self.fault
        if fault is None or not fault.applies_to(ledger_id):
            return True
        return fault.kind is FaultKind.SLOW and fault.delay_s < checker.request_timeout_s

    def reads_in_time(self, ledger_id: int, checker: CheckerSpec) -> bool:
        """Whether a checker gets both a listing and then one entry of the ledger within ``request_timeout_s``: the
        entry is read after the listing, before the same deadline (a delay counts twice)."""
        if self.answers_unknown(ledger_id, checker):
            return False
        fault = self.fault
        if fault is None or not fault.applies_to(ledger_id) or fault.kind is not FaultKind.SLOW:
            return True
        return 2 * fault.delay_s < checker.request_timeout_s

    def answers_unknown(self, ledger_id: int, checker: CheckerSpec) -> bool:
        """Whether a checker with ``checker.request_timeout_s`` gets no usable answer for the ledger."""
        if self.mode is BookieMode.STOPPED or ledger_id in self.limbo:
            return True
        fault = self.fault
        if fault is None or not fault.applies_to(ledger_id):
            return False
        return fault.kind is not FaultKind.SLOW or fault.delay_s >= checker.request_timeout_s


@dataclass
class ScheduledChange:
    """What one scheduled change touched, for the simulated cluster to carry out."""

    metadata: set[int] = field(default_factory=set)  # ledger znodes to (re)write
    deleted: set[int] = field(default_factory=set)  # ledger znodes (and marks) to delete
    marks: set[int] = field(default_factory=set)  # marks to (re)write or delete (per the state)
    locks: set[int] = field(default_factory=set)  # replication locks to take or release (per the state)
    data: dict[str, set[int]] = field(default_factory=dict)  # bookie -> ledgers whose holdings changed
    stopped: set[str] = field(default_factory=set)
    started: set[str] = field(default_factory=set)
    wiped: set[str] = field(default_factory=set)
    registration: set[str] = field(default_factory=set)  # re-register (mode changed)
    faults: set[str] = field(default_factory=set)
    autorecovery: bool = False  # the disable node to create or delete (per the state)
    auditor: bool = False  # the auditor's vote to create or delete (per the state)

    @property
    def bookie_level(self) -> bool:
        """Whether the change may alter what a bookie lists, or whether its listing is answered."""
        return bool(
            self.data or self.deleted or self.stopped or self.started or self.wiped or self.registration or self.faults
        )

    def touch(self, bookies: Iterable[str], ledger_id: int) -> None:
        """Record that these bookies' holdings of the ledger changed."""
        for bookie in bookies:
            self.data.setdefault(bookie, set()).add(ledger_id)


class ClusterState:
    """The scenario at one moment; :meth:`apply` moves it through the schedule (see the module doc)."""

    def __init__(
        self,
        scenario: Scenario,
        bookies: dict[str, BookieState],
        ledgers: dict[int, LedgerSpec],
        now_s: float = 0.0,
        orphans: dict[int, LedgerSpec] | None = None,
    ) -> None:
        self.scenario = scenario
        self.checker = scenario.checker
        self.bookies = bookies
        #: The ledgers with metadata.
        self.ledgers = ledgers
        #: The orphans: ledgers without metadata whose entries bookies still hold (see the module doc).
        self.orphans: dict[int, LedgerSpec] = orphans if orphans is not None else {}
        #: (orphan, bookie) -> since when (seconds after the start) a checker listing the bookie continuously has seen
        #: the orphan there: the first moment the bookie listed it and its listing was answered. Kept while the bookie
        #: lists it (answered or not), dropped when it no longer does.
        self.sightings: dict[tuple[int, str], float] = {}
        self.now_s = now_s
        #: Since when auto-recovery has been disabled (its ``disable`` node exists; None: enabled).
        self.disabled_since_s: float | None = 0.0 if scenario.cluster.autorecovery_disabled else None
        #: Since when no auditor has been elected (no vote exists; None: one is).
        self.no_auditor_since_s: float | None = None if scenario.cluster.auditor else 0.0
        self._auto_rng = random.Random(f"schedule:{scenario.seed}")
        self._index: dict[str, set[int]] = {}
        self._placement: dict[tuple[tuple[str, ...], int], PlacementResult] = {}
        for spec in itertools.chain(ledgers.values(), self.orphans.values()):
            self._index_ledger(spec)

    @classmethod
    def from_scenario(cls, scenario: Scenario) -> ClusterState:
        """The state at the start (wiped bookies have lost every ledger they had)."""
        bookies = {
            b.bookie_id: BookieState(
                b.bookie_id,
                b.rack,
                b.mode,
                b.fault,
                b.limbo,
                BookieMode.WRITABLE if b.mode is BookieMode.STOPPED else b.mode,
                0.0 if b.mode is BookieMode.STOPPED else None,
            )
            for b in scenario.bookies
        }
        ledgers = {spec.ledger_id: spec for spec in scenario.ledgers}
        orphans = {spec.ledger_id: spec for spec in scenario.orphans}
        state = cls(scenario, bookies, ledgers, orphans=orphans)
        for bookie in scenario.bookies:
            if bookie.wiped:
                state._lose_everything(bookie.bookie_id)
        state._sight()
        return state

    @property
    def locks(self) -> dict[int, LockSpec]:
        """Ledger id -> the replication worker's lock, for each marked ledger a worker holds."""
        return {ledger_id: spec.lock for ledger_id, spec in self.ledgers.items() if spec.lock is not None}

    @property
    def auditor_voter(self) -> str:
        """The bookie id an elected auditor votes with: the scenario's first bookie."""
        return self.scenario.bookies[0].bookie_id

    def racks(self) -> dict[str, str]:
        """Bookie id -> rack for bookies with one."""
        return {b: s.rack for b, s in self.bookies.items() if s.rack is not None}

    def placement(self, ensemble: tuple[str, ...], write_quorum: int) -> PlacementResult:
        """:func:`placement_outcome` of a segment under the checker's policy (cached: racks never change)."""
        key = (ensemble, write_quorum)
        outcome = self._placement.get(key)
        if outcome is None:
            outcome, _ = placement_outcome(ensemble, write_quorum, self.racks(), self.checker)
            self._placement[key] = outcome
        return outcome

    def ledgers_of(self, bookie_id: str) -> set[int]:
        """The ledgers whose ensembles or holdings name the bookie, orphans included."""
        return set(self._index.get(bookie_id, ()))

    def spec(self, ledger_id: int) -> LedgerSpec | None:
        """The ledger, with metadata or an orphan (None: neither)."""
        spec = self.ledgers.get(ledger_id)
        return self.orphans.get(ledger_id) if spec is None else spec

    def _index_ledger(self, spec: LedgerSpec) -> None:
        for bookie in spec.bookies():
            self._index.setdefault(bookie, set()).add(spec.ledger_id)

    def _unindex_ledger(self, spec: LedgerSpec) -> None:
        for bookie in spec.bookies():
            self._index.get(bookie, set()).discard(spec.ledger_id)

    def _put(self, spec: LedgerSpec) -> None:
        old = self.spec(spec.ledger_id)
        if old is not None:
            self._unindex_ledger(old)
        (self.orphans if spec.orphan else self.ledgers)[spec.ledger_id] = spec
        self._index_ledger(spec)

    # ------------------------------------------------------------------- what a bookie holds

    def held_groups(self, bookie_id: str, ledger_id: int) -> tuple[SequenceGroup, ...] | None:
        """The entries the bookie holds of the ledger (an orphan's too), as disjoint sorted groups; None when none."""
        spec = self.spec(ledger_id)
        if spec is None:
            return None
        holding = spec.holding(bookie_id)
        cut = normalize_ranges((*holding.missing, *spec.dropped(bookie_id), *holding.add))
        out: list[SequenceGroup] = []
        for segment, lo, hi in spec.data_spans():
            if bookie_id not in segment.ensemble or hi < lo:
                continue
            index = segment.ensemble.index(bookie_id)
            for group in expected_groups(index, spec.ensemble_size, spec.write_quorum, lo, hi):
                if not cut:
                    out.append(group)
                    continue
                for a, b in subtract_ranges(((group.first, group.last),), cut):
                    out.extend(clip(group, a, b))
        out.extend(SequenceGroup.run(lo, hi) for lo, hi in holding.add)
        out.sort()
        return tuple(out) if out else None

    def entry_header(self, ledger_id: int, entry_id: int) -> EntryHeader:
        """The header the writer put on an entry: its last-add-confirmed per
        :func:`~scrutiny.simulator.model.entry_lac` (the entry before it for every entry the writer sent), the
        ledger's length ``(entry + 1) × entry_size`` (at most a signed 64-bit length)."""
        return entry_header(ledger_id, entry_id, self.spec(ledger_id))

    # ------------------------------------------------------------------- what a checker lists

    def lists(self, bookie_id: str, ledger_id: int) -> bool:
        """Whether the bookie's agent lists the ledger among those it holds (``ListLedgers``): it holds an entry of
        it, or has it in limbo (its record of the ledger says so, entries or not)."""
        return ledger_id in self.bookies[bookie_id].limbo or self.held_groups(bookie_id, ledger_id) is not None

    def listing_answered(self, bookie_id: str) -> bool:
        """Whether a checker gets the bookie's listing of the ledgers it holds within ``request_timeout_s``.

        Not when it is stopped (no agent, no registration), nor when a fault that holds a listing up (``unresponsive``,
        or a delay not shorter than the timeout) applies to every ledger or to a ledger it lists (the listing is taken
        as one page). A ``status`` or ``garbage`` fault concerns its answers about a ledger's entries, not its index:
        its listing is answered.
        """
        bookie = self.bookies[bookie_id]
        if bookie.mode is BookieMode.STOPPED:
            return False
        fault = bookie.fault
        if fault is None or fault.kind in (FaultKind.STATUS, FaultKind.GARBAGE):
            return True
        if fault.kind is FaultKind.SLOW and fault.delay_s < self.checker.request_timeout_s:
            return True
        if fault.ledgers is None:
            return False
        candidates = fault.ledgers & (self._index.get(bookie_id, set()) | bookie.limbo)
        return not any(self.lists(bookie_id, ledger_id) for ledger_id in candidates)

    def _sight(self) -> None:
        """Bring :attr:`sightings` up to now: a bookie listing an orphan is seen doing so from the first moment its
        listing is answered; a sighting goes when the bookie no longer lists the orphan (or it is no orphan any
        more)."""
        seen: dict[tuple[int, str], float] = {}
        answered: dict[str, bool] = {}
        for ledger_id, spec in self.orphans.items():
            listers = {b for b in spec.bookies() if self.held_groups(b, ledger_id) is not None}
            listers.update(b for b, s in self.bookies.items() if ledger_id in s.limbo)
            for bookie in listers:
                since = self.sightings.get((ledger_id, bookie))
                if since is None:
                    if bookie not in answered:
                        answered[bookie] = self.listing_answered(bookie)
                    if not answered[bookie]:
                        continue
                    since = self.now_s
                seen[ledger_id, bookie] = since
        self.sightings = seen

    # ------------------------------------------------------------------- changes

    def apply(self, event: Event) -> ScheduledChange:
        """Carry out one scheduled change; ScenarioError (naming the event) when it cannot apply."""
        where = Where("schedule").at(event.index)
        self.now_s = event.at_s
        change = ScheduledChange()
        handler = _HANDLERS[event.action]
        handler(self, event, change, where)
        if change.bookie_level and (self.orphans or self.sightings):
            self._sight()
        return change

    def _ledger(self, event: Event, where: Where) -> LedgerSpec:
        assert event.ledger is not None
        spec = self.ledgers.get(event.ledger)
        if spec is None:
            if event.ledger in self.orphans:
                raise where.fail(f"ledger {event.ledger} is an orphan at {event.at_s} s: it has no metadata")
            raise where.fail(f"ledger {event.ledger} does not exist at {event.at_s} s")
        return spec

    def _bookie(self, event: Event) -> BookieState:
        assert event.bookie is not None
        return self.bookies[event.bookie]

    def _close(self, event: Event, change: ScheduledChange, where: Where) -> None:
        spec = self._ledger(event, where)
        if spec.closed:
            raise where.fail(f"ledger {spec.ledger_id} is already closed")
        last = spec.written if event.last_entry is None else event.last_entry
        if last > spec.written:
            spec = self._written_to(spec, last, change)
        closed = replace(spec, state=LedgerState.CLOSED, last_entry=last, truncated=spec.written - last)
        check_ledger(closed, list(self.bookies), where)
        self._put(closed)
        change.metadata.add(spec.ledger_id)

    def _append(self, event: Event, change: ScheduledChange, where: Where) -> None:
        spec = self._ledger(event, where)
        assert event.last_entry is not None
        if spec.closed:
            raise where.fail(f"ledger {spec.ledger_id} is closed: nothing can be appended")
        if event.last_entry <= spec.written:
            raise where.fail(f"last_entry {event.last_entry} is not after the last written {spec.written}")
        self._put(self._written_to(spec, event.last_entry, change))

    def _written_to(self, spec: LedgerSpec, last: int, change: ScheduledChange) -> LedgerSpec:
        """The open ledger with entries up to ``last`` written: no bookie misses the new ones."""
        fresh = ((spec.written + 1, last),)
        holdings = {b: replace(h, missing=subtract_ranges(h.missing, fresh)) for b, h in spec.holdings.items()}
        grown = replace(spec, last_entry=last, holdings={b: h for b, h in holdings.items() if not h.default})
        change.touch(spec.segments[-1].ensemble, spec.ledger_id)
        change.touch(spec.holdings, spec.ledger_id)
        return grown

    def _change_ensemble(self, event: Event, change: ScheduledChange, where: Where) -> None:
        spec = self._ledger(event, where)
        assert event.first is not None
        ensemble = event.ensemble or self._auto(spec, where)
        existing = [i for i, s in enumerate(spec.segments) if s.first == event.first]
        segments = list(spec.segments)
        holdings = dict(spec.holdings)
        if existing:
            index = existing[-1]
            old = segments[index]
            segments[index] = SegmentSpec(old.first, ensemble)
            spans = dict((s.first, (lo, hi)) for s, lo, hi in spec.data_spans())
            lo, hi = spans[old.first]
            for bookie in set(ensemble) - set(old.ensemble):
                holding = holdings.get(bookie, NO_DEVIATION)
                span = ((lo, hi),) if hi >= lo else ()
                missing = (
                    subtract_ranges(holding.missing, span)
                    if event.copied
                    else normalize_ranges((*holding.missing, *span))
                )
                holdings[bookie] = replace(holding, missing=missing)
        else:
            if spec.closed:
                raise where.fail(f"ledger {spec.ledger_id} is closed: no new segment can start")
            if event.first <= segments[-1].first or event.first > spec.written + 1:
                raise where.fail(
                    f"a new segment must start after {segments[-1].first} and at most at {spec.written + 1}"
                )
            segments.append(SegmentSpec(event.first, ensemble))
        changed = replace(spec, segments=tuple(segments), holdings={b: h for b, h in holdings.items() if not h.default})
        check_ledger(changed, list(self.bookies), where)
        change.touch(spec.bookies() | changed.bookies(), spec.ledger_id)
        self._put(changed)
        change.metadata.add(spec.ledger_id)

    def _auto(self, spec: LedgerSpec, where: Where) -> tuple[str, ...]:
        chosen = auto_ensemble(
            spec.ensemble_size,
            spec.write_quorum,
            [b for b, s in self.bookies.items() if s.mode is BookieMode.WRITABLE],
            racks=self.racks(),
            checker=self.checker,
            want=AutoPlacement.SATISFY,
            rng=self._auto_rng,
        )
        if chosen is None:
            raise where.fail(f"no ensemble of {spec.ensemble_size} writable bookies for ledger {spec.ledger_id}")
        return chosen

    def _kill(self, event: Event, change: ScheduledChange, where: Where) -> None:
        bookie = self._bookie(event)
        if bookie.mode is BookieMode.STOPPED:
            raise where.fail(f"bookie {bookie.bookie_id} is already stopped")
        bookie.revive_mode, bookie.mode = bookie.mode, BookieMode.STOPPED
        bookie.stopped_at_s = event.at_s
        change.stopped.add(bookie.bookie_id)

    def _revive(self, event: Event, change: ScheduledChange, where: Where) -> None:
        bookie = self._bookie(event)
        if bookie.mode is not BookieMode.STOPPED:
            raise where.fail(f"bookie {bookie.bookie_id} is not stopped")
        bookie.mode = bookie.revive_mode
        bookie.stopped_at_s = None
        change.started.add(bookie.bookie_id)

    def _wipe(self, event: Event, change: ScheduledChange, where: Where) -> None:
        bookie = self._bookie(event)
        touched = self._lose_everything(bookie.bookie_id)
        change.wiped.add(bookie.bookie_id)
        change.data.setdefault(bookie.bookie_id, set()).update(touched)

    def _lose(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """Every entry gone while the bookie runs on, registered, with its cookie: nothing in ZooKeeper tells."""
        bookie = self._bookie(event)
        change.data.setdefault(bookie.bookie_id, set()).update(self._lose_everything(bookie.bookie_id))

    def _lose_everything(self, bookie_id: str) -> set[int]:
        touched = self.ledgers_of(bookie_id)
        for ledger_id in touched:
            spec = self.spec(ledger_id)
            assert spec is not None
            holdings = dict(spec.holdings)
            holdings[bookie_id] = Holding(EVERYTHING, ())
            self._put(replace(spec, holdings=holdings))
        return touched

    def _set_mode(self, event: Event, change: ScheduledChange, where: Where) -> None:
        bookie = self._bookie(event)
        mode = BookieMode.READONLY if event.action is Action.READONLY else BookieMode.WRITABLE
        if bookie.mode is BookieMode.STOPPED:
            bookie.revive_mode = mode
            return
        if bookie.mode is not mode:
            bookie.mode = mode
            change.registration.add(bookie.bookie_id)

    def _fault(self, event: Event, change: ScheduledChange, where: Where) -> None:
        bookie = self._bookie(event)
        bookie.fault = event.fault
        change.faults.add(bookie.bookie_id)

    def _limbo(self, event: Event, change: ScheduledChange, where: Where) -> None:
        bookie = self._bookie(event)
        bookie.limbo = event.ledgers
        change.faults.add(bookie.bookie_id)

    def _mark(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """Mark the ledger, or re-mark it (a lock already taken stays: re-marking touches only the mark)."""
        spec = self._ledger(event, where)
        ctime = event.at_s - event.age_s if event.with_ctime else None
        replicas = list(spec.mark.replicas) if spec.mark is not None else []
        replicas += [b for b in event.replicas if b not in replicas]
        lock = spec.lock
        if event.locked_by is not None:
            self._check_unlocked(spec, where)
            lock = LockSpec(event.locked_by, event.at_s)
            change.locks.add(spec.ledger_id)
        self._put(replace(spec, mark=MarkSpec(tuple(replicas), ctime, event.at_s, lock)))
        change.marks.add(spec.ledger_id)

    def _unmark(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """Delete the mark, and its lock with it (a worker that replicated the ledger releases both)."""
        spec = self._ledger(event, where)
        if spec.mark is None:
            raise where.fail(f"ledger {spec.ledger_id} is not marked under-replicated")
        self._put(replace(spec, mark=None))
        change.marks.add(spec.ledger_id)
        self._note_lock(spec, change)

    def _lock(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """A replication worker (``event.bookie``) takes the marked ledger: its lock from now on."""
        spec = self._ledger(event, where)
        assert event.bookie is not None
        if spec.mark is None:
            raise where.fail(f"ledger {spec.ledger_id} is not marked under-replicated: no worker can take it")
        self._check_unlocked(spec, where)
        self._put(replace(spec, mark=replace(spec.mark, lock=LockSpec(event.bookie, event.at_s))))
        change.locks.add(spec.ledger_id)

    def _unlock(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """The worker gives the ledger up: its lock is released, the mark stays."""
        spec = self._ledger(event, where)
        if spec.mark is None or spec.lock is None:
            raise where.fail(f"ledger {spec.ledger_id} is not locked by a replication worker")
        self._put(replace(spec, mark=replace(spec.mark, lock=None)))
        change.locks.add(spec.ledger_id)

    @staticmethod
    def _check_unlocked(spec: LedgerSpec, where: Where) -> None:
        """ScenarioError when a worker already holds the ledger's lock."""
        lock = spec.lock
        if lock is not None:
            raise where.fail(f"ledger {spec.ledger_id} is already locked by {lock.bookie_id} (since {lock.since_s} s)")

    @staticmethod
    def _note_lock(spec: LedgerSpec, change: ScheduledChange) -> None:
        """Record that the lock ``spec`` has, if any, is to be written again (taken or released, per the state)."""
        if spec.lock is not None:
            change.locks.add(spec.ledger_id)

    def _delete(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """Its metadata, mark and lock go, and its bookies drop it (entries and limbo record). An orphan's bookies drop
        it: their garbage collection removed it at last."""
        assert event.ledger is not None
        orphan = self.orphans.pop(event.ledger, None)
        if orphan is not None:
            self._unindex_ledger(orphan)
            change.touch(orphan.bookies(), orphan.ledger_id)
            self._drop_limbo(orphan.ledger_id, change)
            return
        spec = self._ledger(event, where)
        self._unindex_ledger(spec)
        del self.ledgers[spec.ledger_id]
        change.deleted.add(spec.ledger_id)
        change.touch(spec.bookies(), spec.ledger_id)
        self._note_lock(spec, change)
        self._drop_limbo(spec.ledger_id, change)

    def _drop_limbo(self, ledger_id: int, change: ScheduledChange) -> None:
        """A dropped ledger leaves every bookie's limbo set (its record goes with its entries)."""
        for bookie in self.bookies.values():
            if ledger_id in bookie.limbo:
                bookie.limbo = bookie.limbo - {ledger_id}
                change.faults.add(bookie.bookie_id)

    def _orphan(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """Its metadata, mark and lock go as with ``delete``, but its bookies keep its entries (and any limbo record):
        their garbage collection never removes them. It stays an orphan from now on."""
        spec = self._ledger(event, where)
        del self.ledgers[spec.ledger_id]
        self._put(replace(spec, mark=None, corrupt=None, orphan_since_s=event.at_s))
        change.deleted.add(spec.ledger_id)
        self._note_lock(spec, change)

    def _repair(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """Replication's work: the bookie(s) hold their stripes again, and the worker releases its lock. The mark
        stays (an ``unmark`` deletes it)."""
        spec = self._ledger(event, where)
        bookies = [event.bookie] if event.bookie is not None else list(spec.holdings)
        holdings = {b: h for b, h in spec.holdings.items() if b not in bookies}
        mark = spec.mark if spec.mark is None else replace(spec.mark, lock=None)
        self._put(replace(spec, holdings=holdings, mark=mark))
        change.touch(bookies, spec.ledger_id)
        self._note_lock(spec, change)

    def _create(self, event: Event, change: ScheduledChange, where: Where) -> None:
        assert event.spec is not None
        if event.spec.ledger_id in self.ledgers:
            raise where.fail(f"ledger {event.spec.ledger_id} already exists")
        if event.spec.ledger_id in self.orphans:
            raise where.fail(f"ledger {event.spec.ledger_id} is an orphan: its bookies still hold its entries")
        spec = replace(event.spec, mark=_shifted(event.spec.mark, event.at_s))
        self._put(spec)
        change.metadata.add(spec.ledger_id)
        if spec.mark is not None:
            change.marks.add(spec.ledger_id)
            self._note_lock(spec, change)
        change.touch(spec.bookies(), spec.ledger_id)

    def _disable_autorecovery(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """An operator disables auto-recovery (``bookkeeper shell autorecovery -disable``): the disable node."""
        if self.disabled_since_s is not None:
            raise where.fail(f"auto-recovery is already disabled (since {self.disabled_since_s} s)")
        self.disabled_since_s = event.at_s
        change.autorecovery = True

    def _enable_autorecovery(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """An operator enables it again: the disable node is deleted."""
        if self.disabled_since_s is None:
            raise where.fail("auto-recovery is not disabled")
        self.disabled_since_s = None
        change.autorecovery = True

    def _stop_auditor(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """The auditor's process ends: its vote goes with its session."""
        if self.no_auditor_since_s is not None:
            raise where.fail(f"no auditor is running (none since {self.no_auditor_since_s} s)")
        self.no_auditor_since_s = event.at_s
        change.auditor = True

    def _start_auditor(self, event: Event, change: ScheduledChange, where: Where) -> None:
        """An AutoRecovery process starts and is elected: a new vote."""
        if self.no_auditor_since_s is None:
            raise where.fail("an auditor is already running")
        self.no_auditor_since_s = None
        change.auditor = True


_HANDLERS: Final = {
    Action.CLOSE: ClusterState._close,
    Action.APPEND: ClusterState._append,
    Action.CHANGE_ENSEMBLE: ClusterState._change_ensemble,
    Action.KILL: ClusterState._kill,
    Action.LOSE: ClusterState._lose,
    Action.REVIVE: ClusterState._revive,
    Action.WIPE: ClusterState._wipe,
    Action.READONLY: ClusterState._set_mode,
    Action.WRITABLE: ClusterState._set_mode,
    Action.FAULT: ClusterState._fault,
    Action.LIMBO: ClusterState._limbo,
    Action.MARK: ClusterState._mark,
    Action.UNMARK: ClusterState._unmark,
    Action.LOCK: ClusterState._lock,
    Action.UNLOCK: ClusterState._unlock,
    Action.DELETE: ClusterState._delete,
    Action.ORPHAN: ClusterState._orphan,
    Action.CREATE: ClusterState._create,
    Action.REPAIR: ClusterState._repair,
    Action.DISABLE_AUTORECOVERY: ClusterState._disable_autorecovery,
    Action.ENABLE_AUTORECOVERY: ClusterState._enable_autorecovery,
    Action.STOP_AUDITOR: ClusterState._stop_auditor,
    Action.START_AUDITOR: ClusterState._start_auditor,
}


def _shifted(mark: MarkSpec | None, at_s: float) -> MarkSpec | None:
    """A created ledger's mark with its times counted from its creation at ``at_s`` (its lock taken then)."""
    if mark is None:
        return None
    ctime = None if mark.ctime_s is None else mark.ctime_s + at_s
    lock = None if mark.lock is None else replace(mark.lock, since_s=at_s)
    return replace(mark, ctime_s=ctime, seen_s=at_s, lock=lock)
