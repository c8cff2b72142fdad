"""Ground truth of a simulated cluster: the violations a perfect checker reports, and nothing else.

Pure. Computed from the scenario's own description (:class:`~scrutiny.simulator.state.ClusterState`:
segments, the last entry written, each bookie's ``missing`` / ``add`` ranges, bookie modes and
faults, marks) with arithmetic of its own — deliberately *not* with :mod:`scrutiny.core.verdict`,
:mod:`scrutiny.core.periodic_sets`, :mod:`scrutiny.core.striping` or :mod:`scrutiny.core.placement`,
so that it can catch their mistakes. The rules are those of ``docs/verdict.md``:

* replica levels per entry over its write set, a bookie with an unknown answer (stopped,
  unresponsive, too slow, wrong status, garbage, ledger in limbo) counting as holding everything;
  the ledger classified once by its worst level; one ``MISSING_REPLICA`` row per (segment,
  bookie) with a known answer, at the level's severity; a marked ledger reports only
  ``NO_REPLICA``, without rows;
* open and in-recovery ledgers only in the segments an ensemble change sealed;
* ``ENTRIES_BEYOND_LAST_ENTRY`` per bookie of the last ensemble holding entries after ``lastEntryId``
  (critical when any of them has AQ copies in its write set, or when the highest entry one bookie holds
  after it carries a last-add-confirmed above it (:func:`~scrutiny.simulator.model.entry_lac`; that
  bookie's read must come before the deadline too, so a delay counts twice); while it is not, every
  bookie of that ensemble with an unknown answer is needed too: one copy's header could make it critical),
  placement per checked segment, ``ACK_QUORUM_ONE``, ``BOOKIE_NOT_REGISTERED`` (closed ledgers, once
  per bookie), ``UNDER_REPLICATION_STUCK`` (strictly older than the grace period; a mark without ctime
  counts from when it appeared);
* and what the jobs around the verdict decide: ``BOOKIE_UNRESPONSIVE`` per (ledger, bookie) for a
  registered bookie whose answer stays unknown while the checker needs it (``LEDGER_IN_LIMBO`` when it
  answers that the ledger is in limbo and no other fault decides its answer; ``BOOKIE_NOT_REGISTERED``
  for such a bookie that is gone, unless already reported), ``METADATA_UNREADABLE``
  (alone) for a corrupt znode. ``CHECK_OVERDUE`` never (a perfect checker is never late);
* bookies' lives: ``BOOKIE_LOST`` (cluster-level, ledger id -1) for a bookie stopped strictly longer than
  ``bookie_lost_after_s``, and ``UNDER_REPLICATION_NOT_MARKED`` for each closed ledger (or sealed segment) it is in,
  not marked, strictly ``under_replication_mark_grace_s`` after the loss (a mark cleared while the bookie is still
  lost and in the ensemble makes it so again, at once when the grace is over);
* ``RECOVERY_STALLED`` for a ledger ``IN_RECOVERY`` (in recovery since the start) strictly longer than
  ``recovery_stalled_grace_s``; ``OPEN_LEDGER_STALLED`` for an open ledger whose current ensemble has fewer than AQ
  registered bookies, one of the others lost;
* BookKeeper's auto-recovery (cluster-level, ledger id -1, no bookie): ``AUTORECOVERY_DISABLED`` while the
  ``disable`` node exists, a warning, critical once it was made strictly more than
  ``autorecovery_disabled_critical_s`` ago; ``NO_AUDITOR`` (a warning) when an auditor is expected
  (``auditor_expected``) and no vote has existed for strictly longer than ``no_auditor_grace_s``, until one exists;
* orphans (a ledger without metadata whose entries bookies still hold): nothing but ``ORPHAN_LEDGER`` (a warning, no
  segment) per bookie whose agent lists it (it holds an entry of it, or has it in limbo) and answers its listing
  (registered; no fault that holds a listing up applies to a ledger it lists: ``unresponsive``, or a delay not shorter
  than the request timeout; ``status`` and ``garbage`` faults leave listings alone), strictly ``orphan_grace_s`` after
  the checker first saw it there (:attr:`~scrutiny.simulator.state.ClusterState.sightings`: when the ledger became an
  orphan, or later, when the bookie's listing was first answered).

The file format written by :func:`truth_document` is documented in ``docs/simulator.md``.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from scrutiny.core.errors import ScrutinyError
from scrutiny.core.ledger_metadata import LedgerState
from scrutiny.core.placement import PlacementResult
from scrutiny.core.sequence_groups import SequenceGroup
from scrutiny.core.vocabulary import CLUSTER_LEDGER_ID, Category, Severity
from scrutiny.simulator.model import (
    MAX_ENTRY,
    BookieMode,
    FaultKind,
    LedgerSpec,
    Range,
    Scenario,
    entry_lac,
    intersect_ranges,
    normalize_ranges,
    subtract_ranges,
)
from scrutiny.simulator.state import ClusterState, ScheduledChange

TRUTH_FORMAT: Final = "scrutiny-simulator-truth"
TRUTH_VERSION: Final = 1
#: A grace period is judged strictly: the state after it applies from this long after it ends.
GRACE_STEP_S: Final = 0.001
_LEVELS: Final = (Category.NO_REPLICA, Category.BELOW_ACK_QUORUM, Category.BELOW_WRITE_QUORUM)
_LEVEL_SEVERITY: Final = {
    Category.NO_REPLICA: Severity.CRITICAL,
    Category.BELOW_ACK_QUORUM: Severity.CRITICAL,
    Category.BELOW_WRITE_QUORUM: Severity.WARNING,
}
_CATEGORY_ORDER: Final = {category: index for index, category in enumerate(Category)}

#: The identity of a violation: (ledger id, category, bookie, segment first entry).
TruthKey = tuple[int, Category, str | None, int | None]


class TruthFileError(ScrutinyError):
    """A ground-truth file that cannot be read or is not in the documented format."""


@dataclass(frozen=True, slots=True)
class TruthViolation:
    """One violation a perfect checker reports. ``entries`` is None for categories without entries."""

    ledger_id: int
    category: Category
    severity: Severity
    bookie: str | None = None
    segment_first_entry: int | None = None
    entries: tuple[SequenceGroup, ...] | None = None

    @property
    def key(self) -> TruthKey:
        """(ledger id, category, bookie, segment first entry): unique within one state."""
        return (self.ledger_id, self.category, self.bookie, self.segment_first_entry)

    @property
    def count(self) -> int | None:
        """How many entries, when the category has entries."""
        return None if self.entries is None else sum(_group_count(g) for g in self.entries)

    def sort_key(self) -> tuple[int, int, int, str]:
        """Ledger, category (vocabulary order), segment, bookie."""
        return (self.ledger_id, _CATEGORY_ORDER[self.category], self.segment_first_entry or 0, self.bookie or "")

    def as_json_dict(self) -> dict[str, object]:
        """The truth file's form of the violation."""
        entries = None
        if self.entries is not None:
            entries = {"groups": [g.as_list() for g in self.entries], "count": self.count}
        return {
            "ledger_id": self.ledger_id,
            "category": self.category.value,
            "severity": self.severity.value,
            "bookie": self.bookie,
            "segment_first_entry": self.segment_first_entry,
            "entries": entries,
        }

    @classmethod
    def from_json_dict(cls, item: Mapping[str, object]) -> TruthViolation:
        """Read one violation of a truth file (ValueError / KeyError / TypeError when malformed)."""
        raw = item["entries"]
        entries = None
        if raw is not None:
            if not isinstance(raw, dict) or not isinstance(raw.get("groups"), list):
                raise ValueError("entries must be {groups, count}")
            entries = tuple(SequenceGroup.of(*(int(v) for v in g)) for g in raw["groups"])
        bookie, segment = item.get("bookie"), item.get("segment_first_entry")
        return cls(
            ledger_id=int(str(item["ledger_id"])),
            category=Category(str(item["category"])),
            severity=Severity(str(item["severity"])),
            bookie=None if bookie is None else str(bookie),
            segment_first_entry=None if segment is None else int(str(segment)),
            entries=entries,
        )


@dataclass(frozen=True, slots=True)
class TruthState:
    """The exact set of violations from ``at_s`` seconds after the start on, and what changed then."""

    at_s: float
    causes: tuple[str, ...]
    violations: tuple[TruthViolation, ...]

    def counts(self) -> dict[str, int]:
        """Violations per category."""
        out: dict[str, int] = {}
        for violation in self.violations:
            out[violation.category.value] = out.get(violation.category.value, 0) + 1
        return out

    def by_key(self) -> dict[TruthKey, TruthViolation]:
        """The violations by identity."""
        return {v.key: v for v in self.violations}


# --------------------------------------------------------------------------- entry arithmetic


def _group_count(group: SequenceGroup) -> int:
    runs = 1 if group.period == 0 else (group.last_start - group.first_start) // group.period + 1
    return runs * group.size


def _stripe_residues(index: int, size: int, write_quorum: int) -> frozenset[int]:
    """Residues mod E of the entries the bookie at ``index`` must hold: (index - e) mod E < WQ."""
    return frozenset(r for r in range(size) if (index - r) % size < write_quorum)


def residue_groups(lo: int, hi: int, residues: frozenset[int], modulus: int) -> list[SequenceGroup]:
    """The entries of ``[lo, hi]`` whose residue mod ``modulus`` is in ``residues``, as disjoint groups."""
    if hi < lo or not residues:
        return []
    if len(residues) == modulus:
        return [SequenceGroup(lo, lo, hi - lo + 1, 0)]
    out: list[SequenceGroup] = []
    for start, length in _cyclic_runs(residues, modulus):
        out.extend(_progression_in(start, length, modulus, lo, hi))
    out.sort()
    return out


def _cyclic_runs(residues: frozenset[int], modulus: int) -> list[tuple[int, int]]:
    """Maximal runs of consecutive residues (wrapping): (first residue, length)."""
    runs = []
    for residue in sorted(residues):
        if (residue - 1) % modulus in residues:
            continue
        length = 1
        while (residue + length) % modulus in residues:
            length += 1
        runs.append((residue, length))
    return runs


def _progression_in(anchor: int, size: int, period: int, lo: int, hi: int) -> list[SequenceGroup]:
    """Runs ``[anchor + k*period, + size)`` for any integer k, cut to ``[lo, hi]`` (``size < period``)."""
    out: list[SequenceGroup] = []
    start = lo - (lo - anchor) % period  # the run starting at or before lo
    if start < lo:
        end = start + size - 1
        if end >= lo:
            out.append(SequenceGroup(lo, lo, min(end, hi) - lo + 1, 0))
        start += period
    if start > hi:
        return out
    whole = (hi - size + 1 - start) // period + 1 if hi - size + 1 >= start else 0
    if whole == 1:
        out.append(SequenceGroup(start, start, size, 0))
    elif whole > 1:
        out.append(SequenceGroup(start, start + (whole - 1) * period, size, period))
    start += whole * period
    if start <= hi:
        out.append(SequenceGroup(start, start, hi - start + 1, 0))
    return out


def _contains(groups: Iterable[SequenceGroup], entry: int) -> bool:
    for g in groups:
        if g.first_start <= entry <= g.last_start + g.size - 1:
            offset = entry - g.first_start
            if g.period == 0 or offset % g.period < g.size:
                return True
    return False


def iter_runs(groups: Iterable[SequenceGroup]) -> Iterator[tuple[int, int]]:
    """The maximal runs of consecutive entries of disjoint groups, in order (lazily; one step per run)."""
    streams = [_group_runs(g) for g in groups]
    current: list[int] | None = None
    for lo, hi in heapq.merge(*streams):
        if current is not None and lo <= current[1] + 1:
            current[1] = max(current[1], hi)
            continue
        if current is not None:
            yield current[0], current[1]
        current = [lo, hi]
    if current is not None:
        yield current[0], current[1]


def _group_runs(group: SequenceGroup) -> Iterator[tuple[int, int]]:
    step = group.period or 1
    for start in range(group.first_start, group.last_start + 1, step):
        yield start, start + group.size - 1


def same_entries(a: Iterable[SequenceGroup], b: Iterable[SequenceGroup]) -> bool:
    """Whether two collections of disjoint groups describe the same entries (counts first, then runs)."""
    left, right = list(a), list(b)
    if sum(_group_count(g) for g in left) != sum(_group_count(g) for g in right):
        return False
    return all(x == y for x, y in itertools.zip_longest(iter_runs(left), iter_runs(right)))


# --------------------------------------------------------------------------- one ledger


@dataclass(frozen=True, slots=True)
class _Span:
    """A segment's checked entries."""

    index: int
    first: int
    last: int
    ensemble: tuple[str, ...]


def _metadata_spans(spec: LedgerSpec) -> list[_Span]:
    """Segments as the checker sees them: all up to lastEntryId when closed, else the sealed ones."""
    spans = []
    for index, segment in enumerate(spec.segments):
        if index + 1 < len(spec.segments):
            last = spec.segments[index + 1].first - 1
        elif spec.closed:
            last = spec.last_entry
        else:
            break
        spans.append(_Span(index, segment.first, last, segment.ensemble))
    return spans


def ledger_truth(state: ClusterState, ledger_id: int, now_s: float) -> list[TruthViolation]:
    """What a perfect checker reports for one ledger (or orphan) at ``now_s`` seconds after the start."""
    spec = state.ledgers.get(ledger_id)
    if spec is None:
        orphan = state.orphans.get(ledger_id)
        return [] if orphan is None else orphan_truth(state, orphan, now_s)
    if spec.corrupt is not None:
        return [TruthViolation(ledger_id, Category.METADATA_UNREADABLE, Severity.CRITICAL)]
    spans = _metadata_spans(spec)
    checked = [span for span in spans if span.last >= span.first]
    out: list[TruthViolation] = []
    replicas = _ReplicaTruth(state, spec)
    for span in checked:
        replicas.add(span)
    out += replicas.violations(marked=spec.mark is not None)
    if spec.closed and spans:
        beyond, silent = _beyond(state, spec, spans[-1])
        out += beyond
        replicas.unknown += [b for b in silent if b not in replicas.unknown]
    if spec.closed or spans:
        out += _metadata_truth(state, spec, checked)
    if spec.mark is not None and now_s > spec.mark.stuck_after_s(state.checker.under_replication_grace_s):
        out.append(TruthViolation(ledger_id, Category.UNDER_REPLICATION_STUCK, Severity.CRITICAL))
    out += _not_marked(state, spec, spans, now_s)
    if spec.state is LedgerState.IN_RECOVERY and now_s > state.checker.recovery_stalled_grace_s:
        out.append(TruthViolation(ledger_id, Category.RECOVERY_STALLED, Severity.CRITICAL))
    if _writer_stalled(state, spec, now_s):
        out.append(TruthViolation(ledger_id, Category.OPEN_LEDGER_STALLED, Severity.WARNING))
    unregistered = {v.bookie for v in out if v.category is Category.BOOKIE_NOT_REGISTERED}
    for bookie in replicas.unknown:
        if state.bookies[bookie].answers_limbo(ledger_id, state.checker):
            out.append(TruthViolation(ledger_id, Category.LEDGER_IN_LIMBO, Severity.WARNING, bookie=bookie))
        elif state.bookies[bookie].registered:
            out.append(TruthViolation(ledger_id, Category.BOOKIE_UNRESPONSIVE, Severity.WARNING, bookie=bookie))
        elif bookie not in unregistered:  # silent and gone, in no checked segment: found by the retries
            out.append(TruthViolation(ledger_id, Category.BOOKIE_NOT_REGISTERED, Severity.WARNING, bookie=bookie))
    out.sort(key=TruthViolation.sort_key)
    return out


class _ReplicaTruth:
    """Replica levels and per-bookie lacks of one ledger, interval by interval."""

    def __init__(self, state: ClusterState, spec: LedgerSpec) -> None:
        self.state = state
        self.spec = spec
        self.size, self.wq, self.aq = spec.ensemble_size, spec.write_quorum, spec.ack_quorum
        self.levels: dict[Category, list[tuple[int, int, frozenset[int]]]] = {c: [] for c in _LEVELS}
        self.lacks: dict[tuple[int, str], list[tuple[int, int, frozenset[int]]]] = {}
        self.unknown: list[str] = []
        self._write_sets: list[frozenset[int]] = []

    @property
    def write_sets(self) -> list[frozenset[int]]:
        """Ensemble indexes of each residue's write set (made when first needed)."""
        if not self._write_sets:
            self._write_sets = [frozenset((r + w) % self.size for w in range(self.wq)) for r in range(self.size)]
        return self._write_sets

    def _expects(self, index: int, span: _Span) -> bool:
        if span.last - span.first + 1 >= self.size:
            return True
        return any((index - e) % self.size < self.wq for e in range(span.first, span.last + 1))

    def add(self, span: _Span) -> None:
        """Count one checked segment."""
        lack: dict[int, tuple[Range, ...]] = {}
        for index, bookie in enumerate(span.ensemble):
            if self.state.bookies[bookie].answers_unknown(self.spec.ledger_id, self.state.checker):
                if self._expects(index, span) and bookie not in self.unknown:
                    self.unknown.append(bookie)
                continue
            holding = self.spec.holding(bookie)
            if not holding.missing:
                continue
            gone = intersect_ranges(subtract_ranges(holding.missing, holding.add), span.first, span.last)
            if gone:
                lack[index] = gone
        if not lack:
            return
        cuts = sorted({span.first, span.last + 1} | {p for rs in lack.values() for a, b in rs for p in (a, b + 1)})
        for lo, nxt in itertools.pairwise(cuts):
            if lo < span.first or nxt - 1 > span.last:
                continue
            lacking = frozenset(i for i, rs in lack.items() if any(a <= lo <= b for a, b in rs))
            if lacking:
                self._interval(span, lo, nxt - 1, lacking)

    def _interval(self, span: _Span, lo: int, hi: int, lacking: frozenset[int]) -> None:
        present = range(self.size) if hi - lo + 1 >= self.size else sorted({e % self.size for e in range(lo, hi + 1)})
        below: dict[Category, set[int]] = {c: set() for c in _LEVELS}
        for residue in present:
            copies = self.wq - len(self.write_sets[residue] & lacking)
            if copies == 0:
                below[Category.NO_REPLICA].add(residue)
            if copies < self.aq:
                below[Category.BELOW_ACK_QUORUM].add(residue)
            if copies < self.wq:
                below[Category.BELOW_WRITE_QUORUM].add(residue)
        for category, residues in below.items():
            if residues:
                _append_piece(self.levels[category], lo, hi, frozenset(residues))
        for index in sorted(lacking):
            stripe = _stripe_residues(index, self.size, self.wq).intersection(present)
            if stripe:
                key = (span.first, span.ensemble[index])
                _append_piece(self.lacks.setdefault(key, []), lo, hi, stripe)

    def violations(self, *, marked: bool) -> list[TruthViolation]:
        """The worst level once and the per-(segment, bookie) rows (see the module doc)."""
        worst = next((c for c in _LEVELS if self.levels[c]), None)
        if worst is None or (marked and worst is not Category.NO_REPLICA):
            return []
        severity = _LEVEL_SEVERITY[worst]
        lid = self.spec.ledger_id
        out = [TruthViolation(lid, worst, severity, entries=self._groups(self.levels[worst]))]
        if marked:
            return out
        for (first, bookie), pieces in self.lacks.items():
            out.append(
                TruthViolation(lid, Category.MISSING_REPLICA, severity, bookie, first, entries=self._groups(pieces))
            )
        return out

    def _groups(self, pieces: list[tuple[int, int, frozenset[int]]]) -> tuple[SequenceGroup, ...]:
        out: list[SequenceGroup] = []
        for lo, hi, residues in pieces:
            out.extend(residue_groups(lo, hi, residues, self.size))
        return tuple(sorted(out))


def _append_piece(pieces: list[tuple[int, int, frozenset[int]]], lo: int, hi: int, residues: frozenset[int]) -> None:
    """Add ``[lo, hi]`` x residues, fused with the previous piece when it continues it."""
    if pieces and pieces[-1][1] + 1 == lo and pieces[-1][2] == residues:
        pieces[-1] = (pieces[-1][0], hi, residues)
    else:
        pieces.append((lo, hi, residues))


def _beyond(state: ClusterState, spec: LedgerSpec, last_span: _Span) -> tuple[list[TruthViolation], list[str]]:
    """Entries after lastEntryId on the last ensemble's bookies with a known answer.

    Also, while it is not critical, the silent bookies whose answers could make it so (in the
    write set of an entry held there with fewer than AQ known copies, AQ or more with them): the
    checker needs them.
    """
    last = spec.last_entry
    if last >= MAX_ENTRY:
        return [], []
    extra: dict[str, tuple[SequenceGroup, ...]] = {}
    for index, bookie in enumerate(last_span.ensemble):
        if state.bookies[bookie].answers_unknown(spec.ledger_id, state.checker):
            continue
        holding = spec.holding(bookie)
        if spec.written <= last and not holding.add:
            continue
        cut = normalize_ranges((*holding.missing, *spec.dropped(bookie), *holding.add))
        groups: list[SequenceGroup] = []
        if spec.written > last:
            residues = _stripe_residues(index, spec.ensemble_size, spec.write_quorum)
            for lo, hi in subtract_ranges(((last + 1, spec.written),), cut):
                groups += residue_groups(lo, hi, residues, spec.ensemble_size)
        groups += [
            SequenceGroup(lo, lo, hi - lo + 1, 0) for lo, hi in intersect_ranges(holding.add, last + 1, MAX_ENTRY)
        ]
        if groups:
            extra[bookie] = tuple(sorted(groups))
    silent = {b for b in last_span.ensemble if state.bookies[b].answers_unknown(spec.ledger_id, state.checker)}
    acknowledged = _acknowledged_beyond(spec, last_span.ensemble, extra)
    # Or the header of the highest entry a bookie holds after the end proves it (the checker reads that entry, after
    # the listing and before the same deadline).
    acknowledged = acknowledged or any(
        entry_lac(spec, max(g.last for g in groups)) > last
        for bookie, groups in extra.items()
        if state.bookies[bookie].reads_in_time(spec.ledger_id, state.checker)
    )
    # Until it is critical, every silent bookie is needed: one copy it holds may carry a header that proves it.
    needed = [] if acknowledged else [b for b in last_span.ensemble if b in silent]
    severity = Severity.CRITICAL if acknowledged else Severity.WARNING
    found = [
        TruthViolation(spec.ledger_id, Category.ENTRIES_BEYOND_LAST_ENTRY, severity, bookie, last_span.first, groups)
        for bookie, groups in extra.items()
    ]
    return found, needed


def _acknowledged_beyond(
    spec: LedgerSpec, ensemble: Sequence[str], extra: Mapping[str, tuple[SequenceGroup, ...]]
) -> bool:
    """Whether an entry held after lastEntryId has AQ copies in its write set. Between the groups' bounds
    everything repeats every E entries, so E entries of each stretch say it all."""
    candidates = [g for gs in extra.values() for g in gs]
    bounds = sorted({b for g in candidates for b in (g.first_start, g.last_start + g.size)})
    for lo, hi in itertools.pairwise(bounds):
        for entry in range(lo, min(hi, lo + spec.ensemble_size)):
            if not _contains(candidates, entry):
                continue
            members = [ensemble[(entry + w) % spec.ensemble_size] for w in range(spec.write_quorum)]
            if sum(1 for b in members if _contains(extra.get(b, ()), entry)) >= spec.ack_quorum:
                return True
    return False


def _metadata_truth(state: ClusterState, spec: LedgerSpec, checked: Sequence[_Span]) -> list[TruthViolation]:
    """ACK_QUORUM_ONE, placement per checked segment, and unregistered bookies of closed ledgers."""
    lid = spec.ledger_id
    out: list[TruthViolation] = []
    if spec.ack_quorum == 1:
        out.append(TruthViolation(lid, Category.ACK_QUORUM_ONE, Severity.INFO))
    for span in checked:
        outcome = state.placement(span.ensemble, spec.write_quorum)
        if outcome is PlacementResult.FAIL:
            out.append(TruthViolation(lid, Category.PLACEMENT_FAIL, Severity.WARNING, segment_first_entry=span.first))
        elif outcome is PlacementResult.MEETS_SOFT:
            out.append(TruthViolation(lid, Category.PLACEMENT_SOFT, Severity.INFO, segment_first_entry=span.first))
    if spec.closed:
        reported: set[str] = set()
        for span in checked:
            for bookie in span.ensemble:
                if bookie not in reported and not state.bookies[bookie].registered:
                    reported.add(bookie)
                    out.append(
                        TruthViolation(lid, Category.BOOKIE_NOT_REGISTERED, Severity.WARNING, bookie, span.first)
                    )
    return out


# --------------------------------------------------------------------------- orphans


def orphan_truth(state: ClusterState, spec: LedgerSpec, now_s: float) -> list[TruthViolation]:
    """``ORPHAN_LEDGER`` per bookie that lists the orphan, answers its listing and was seen listing it strictly longer
    than ``orphan_grace_s`` ago; nothing else (without metadata a ledger cannot be checked)."""
    lid = spec.ledger_id
    grace = state.checker.orphan_grace_s
    out = []
    for bookie in _listers(state, spec):
        since = state.sightings.get((lid, bookie))
        if since is not None and now_s > since + grace and _listing_answered(state, bookie):
            out.append(TruthViolation(lid, Category.ORPHAN_LEDGER, Severity.WARNING, bookie=bookie))
    return out


def _listers(state: ClusterState, spec: LedgerSpec) -> list[str]:
    """The bookies whose agents list the ledger: those holding an entry of it, those with it in limbo; sorted."""
    holders = {b for b in spec.bookies() if holds_an_entry(spec, b)}
    holders.update(b for b, s in state.bookies.items() if spec.ledger_id in s.limbo)
    return sorted(holders)


def holds_an_entry(spec: LedgerSpec, bookie: str) -> bool:
    """Whether the bookie holds at least one entry of the ledger: its ``add`` ranges, or an entry of its stripe
    (residues mod E) among those written in one of its segments, less what it lost or a too-low close dropped."""
    holding = spec.holding(bookie)
    if holding.add:
        return True
    cut = normalize_ranges((*holding.missing, *spec.dropped(bookie)))
    size = spec.ensemble_size
    for index, segment in enumerate(spec.segments):
        if bookie not in segment.ensemble:
            continue
        hi = spec.segments[index + 1].first - 1 if index + 1 < len(spec.segments) else spec.written
        if hi < segment.first:
            continue
        residues = _stripe_residues(segment.ensemble.index(bookie), size, spec.write_quorum)
        for lo, top in subtract_ranges(((segment.first, hi),), cut):
            if top - lo + 1 >= size or any(e % size in residues for e in range(lo, top + 1)):
                return True
    return False


def _listing_answered(state: ClusterState, bookie: str) -> bool:
    """Whether the checker gets the bookie's listing in time: registered, and no fault that holds a listing up
    (unresponsive, or a delay not shorter than the request timeout) for every ledger or for one it lists."""
    status = state.bookies[bookie]
    if status.mode is BookieMode.STOPPED:
        return False
    fault = status.fault
    if fault is None or fault.kind in (FaultKind.STATUS, FaultKind.GARBAGE):
        return True
    if fault.kind is FaultKind.SLOW and fault.delay_s < state.checker.request_timeout_s:
        return True
    if fault.ledgers is None:
        return False
    for lid in fault.ledgers:
        if lid in status.limbo:
            return False
        held = state.spec(lid)
        if held is not None and bookie in held.bookies() and holds_an_entry(held, bookie):
            return False
    return True


# --------------------------------------------------------------------------- the whole cluster over time


def _lost_at(state: ClusterState, bookie: str) -> float | None:
    """When a stopped bookie is lost (None: it runs)."""
    stopped = state.bookies[bookie].stopped_at_s
    return None if stopped is None else stopped + state.checker.bookie_lost_after_s


def _not_marked(state: ClusterState, spec: LedgerSpec, spans: Sequence[_Span], now_s: float) -> list[TruthViolation]:
    """``UNDER_REPLICATION_NOT_MARKED`` for each lost bookie of the segments the checker sees, past the grace."""
    if spec.mark is not None:
        return []
    grace = state.checker.under_replication_mark_grace_s
    out = []
    for bookie in sorted({b for span in spans for b in span.ensemble}):
        lost = _lost_at(state, bookie)
        if lost is not None and now_s > lost + grace:
            category = Category.UNDER_REPLICATION_NOT_MARKED
            out.append(TruthViolation(spec.ledger_id, category, Severity.CRITICAL, bookie=bookie))
    return out


def _writer_stalled(state: ClusterState, spec: LedgerSpec, now_s: float) -> bool:
    """An open ledger whose current ensemble has fewer than AQ registered bookies, one of the others lost."""
    if spec.state is not LedgerState.OPEN or not spec.segments:
        return False
    ensemble = spec.segments[-1].ensemble
    up = sum(1 for b in ensemble if state.bookies[b].registered)
    lost = any((at := _lost_at(state, b)) is not None and now_s > at for b in ensemble)
    return up < spec.ack_quorum and lost


def bookie_truth(state: ClusterState, now_s: float) -> list[TruthViolation]:
    """The cluster-level violations at ``now_s``: each lost bookie."""
    out = []
    for bookie in sorted(state.bookies):
        lost = _lost_at(state, bookie)
        if lost is not None and now_s > lost:
            out.append(TruthViolation(CLUSTER_LEDGER_ID, Category.BOOKIE_LOST, Severity.WARNING, bookie=bookie))
    return out


def _critical_after(state: ClusterState) -> float | None:
    """From when on (strictly after) disabled auto-recovery is critical (None: it is enabled)."""
    since = state.disabled_since_s
    return None if since is None else since + state.checker.autorecovery_disabled_critical_s


def _no_auditor_after(state: ClusterState) -> float | None:
    """From when on (strictly after) the lack of an auditor is ``NO_AUDITOR`` (None: one is elected, or none is
    expected)."""
    since = state.no_auditor_since_s
    if since is None or not state.checker.auditor_expected:
        return None
    return since + state.checker.no_auditor_grace_s


def autorecovery_truth(state: ClusterState, now_s: float) -> list[TruthViolation]:
    """The violations of BookKeeper's auto-recovery at ``now_s``: ``AUTORECOVERY_DISABLED``, ``NO_AUDITOR``."""
    out = []
    critical = _critical_after(state)
    if critical is not None:
        severity = Severity.CRITICAL if now_s > critical else Severity.WARNING
        out.append(TruthViolation(CLUSTER_LEDGER_ID, Category.AUTORECOVERY_DISABLED, severity))
    no_auditor = _no_auditor_after(state)
    if no_auditor is not None and now_s > no_auditor:
        out.append(TruthViolation(CLUSTER_LEDGER_ID, Category.NO_AUDITOR, Severity.WARNING))
    return out


def cluster_level_truth(state: ClusterState, now_s: float) -> list[TruthViolation]:
    """The cluster-level violations at ``now_s`` (lost bookies, auto-recovery), sorted."""
    return sorted(bookie_truth(state, now_s) + autorecovery_truth(state, now_s), key=TruthViolation.sort_key)


def cluster_truth(state: ClusterState, now_s: float) -> list[TruthViolation]:
    """Every violation of every ledger and orphan at ``now_s`` (the cluster-level ones first), sorted."""
    out: list[TruthViolation] = cluster_level_truth(state, now_s)
    for ledger_id in sorted(state.ledgers.keys() | state.orphans.keys()):
        out += ledger_truth(state, ledger_id, now_s)
    return out


def truth_timeline(scenario: Scenario, *, horizon_s: float | None = None) -> list[TruthState]:
    """The truth at the start and after every scheduled change and every grace period's end (a mark's, a stopped
    bookie's loss, a lost bookie's ledgers' deadline, disabled auto-recovery turning critical, the lack of an auditor
    becoming ``NO_AUDITOR``, an orphan seen on a bookie).

    Several changes at the same time make one state. Grace points beyond ``horizon_s`` are left out; scheduled
    changes always count. Only ledgers a change touches are judged again (and the orphans, few, after a change of what
    bookies hold or of how they answer), so long schedules on large clusters stay cheap.
    """
    state = ClusterState.from_scenario(scenario)
    per_ledger = {lid: ledger_truth(state, lid, 0.0) for lid in state.ledgers.keys() | state.orphans.keys()}
    per_ledger[CLUSTER_LEDGER_ID] = cluster_level_truth(state, 0.0)
    timeline = [TruthState(0.0, ("start",), _flatten(per_ledger))]
    waiting: list[tuple[float, int, str]] = []
    for lid, spec in state.ledgers.items():
        _wait_for_grace(waiting, state, lid, spec, 0.0)
    _wait_for_orphans(waiting, state, {}, 0.0)
    for bookie in state.bookies:
        _wait_for_loss(waiting, state, bookie, 0.0)
    _wait_for_autorecovery(waiting, state, 0.0)
    events = list(scenario.schedule)
    position = 0
    while position < len(events) or waiting:
        next_event = events[position].at_s if position < len(events) else None
        next_grace = waiting[0][0] if waiting else None
        if next_grace is not None and (next_event is None or next_grace < next_event):
            if horizon_s is not None and next_grace > horizon_s:
                waiting.clear()
                continue
            _, lid, why = heapq.heappop(waiting)
            before = per_ledger.get(lid)
            if lid == CLUSTER_LEDGER_ID:
                per_ledger[lid] = cluster_level_truth(state, next_grace + GRACE_STEP_S)
            elif lid in state.ledgers or lid in state.orphans:
                per_ledger[lid] = ledger_truth(state, lid, next_grace + GRACE_STEP_S)
            if per_ledger.get(lid) != before:
                timeline.append(TruthState(next_grace, (why,), _flatten(per_ledger)))
            continue
        assert next_event is not None
        causes: list[str] = []
        touched: set[int] = set()
        autorecovery = False
        sightings = dict(state.sightings)
        while position < len(events) and events[position].at_s == next_event:
            event = events[position]
            change = state.apply(event)
            touched |= _touched(state, change)
            for bookie in change.stopped:
                _wait_for_loss(waiting, state, bookie, next_event)
            autorecovery |= change.autorecovery or change.auditor
            causes.append(event.describe())
            position += 1
        if autorecovery:
            _wait_for_autorecovery(waiting, state, next_event)
        _wait_for_orphans(waiting, state, sightings, next_event)
        for lid in touched:
            if lid in state.ledgers:
                per_ledger[lid] = ledger_truth(state, lid, next_event)
                _wait_for_grace(waiting, state, lid, state.ledgers[lid], next_event)
            elif lid in state.orphans:
                per_ledger[lid] = ledger_truth(state, lid, next_event)
            else:
                per_ledger.pop(lid, None)
        per_ledger[CLUSTER_LEDGER_ID] = cluster_level_truth(state, next_event)
        timeline.append(TruthState(next_event, tuple(causes), _flatten(per_ledger)))
    return timeline


def _wait_for_grace(
    waiting: list[tuple[float, int, str]], state: ClusterState, lid: int, spec: LedgerSpec, now: float
) -> None:
    """The end of the grace of the ledger's mark, and of its recovery (in recovery since the start)."""
    if spec.mark is not None and spec.corrupt is None:
        due = spec.mark.stuck_after_s(state.checker.under_replication_grace_s)
        if due >= now:
            heapq.heappush(waiting, (due, lid, f"grace period of ledger {lid}'s mark"))
    if spec.state is LedgerState.IN_RECOVERY and state.checker.recovery_stalled_grace_s >= now:
        heapq.heappush(waiting, (state.checker.recovery_stalled_grace_s, lid, f"ledger {lid}'s recovery stalled"))


def _wait_for_loss(waiting: list[tuple[float, int, str]], state: ClusterState, bookie: str, now: float) -> None:
    """A stopped bookie's loss, and its ledgers' deadline after it (a revival before either changes nothing)."""
    lost = _lost_at(state, bookie)
    if lost is None:
        return
    ledgers = sorted(lid for lid in state.ledgers_of(bookie) if lid in state.ledgers)  # orphans are never lost
    if lost >= now:
        heapq.heappush(waiting, (lost, CLUSTER_LEDGER_ID, f"bookie {bookie} lost"))
        for lid in ledgers:  # an open ledger's writer may be stalled by the loss
            if state.ledgers[lid].state is LedgerState.OPEN:
                heapq.heappush(waiting, (lost, lid, f"ledger {lid}'s writer after bookie {bookie}'s loss"))
    deadline = lost + state.checker.under_replication_mark_grace_s
    if deadline >= now:
        for lid in ledgers:
            heapq.heappush(waiting, (deadline, lid, f"ledger {lid}'s deadline after bookie {bookie}'s loss"))


def _wait_for_autorecovery(waiting: list[tuple[float, int, str]], state: ClusterState, now: float) -> None:
    """When disabled auto-recovery turns critical, and when the lack of an auditor becomes ``NO_AUDITOR`` (a change
    before either makes it a moment when nothing changes)."""
    critical = _critical_after(state)
    if critical is not None and critical >= now:
        heapq.heappush(waiting, (critical, CLUSTER_LEDGER_ID, "auto-recovery disabled past its grace"))
    no_auditor = _no_auditor_after(state)
    if no_auditor is not None and no_auditor >= now:
        heapq.heappush(waiting, (no_auditor, CLUSTER_LEDGER_ID, "no auditor past its grace"))


def _wait_for_orphans(
    waiting: list[tuple[float, int, str]], state: ClusterState, before: Mapping[tuple[int, str], float], now: float
) -> None:
    """The end of the grace of each orphan's sightings new since ``before``, one moment per orphan and time (a change
    that ends a sighting before makes it a moment when nothing changes)."""
    grace = state.checker.orphan_grace_s
    due: dict[tuple[float, int], list[str]] = {}
    for (lid, bookie), since in sorted(state.sightings.items()):
        if before.get((lid, bookie)) != since and since + grace >= now:
            due.setdefault((since + grace, lid), []).append(bookie)
    for (at, lid), bookies in due.items():
        heapq.heappush(waiting, (at, lid, f"grace period of orphan ledger {lid} on {', '.join(bookies)}"))


def _touched(state: ClusterState, change: ScheduledChange) -> set[int]:
    """The ledgers (and orphans) whose truth a change may alter."""
    out = change.metadata | change.deleted | change.marks
    for ledgers in change.data.values():
        out |= ledgers
    for bookie in change.stopped | change.started | change.wiped | change.registration | change.faults:
        out |= state.ledgers_of(bookie)
    if change.bookie_level:  # an orphan's listers, or whether they answer (a fault's ledgers), may have changed
        out.update(state.orphans)
    return out


def _flatten(per_ledger: Mapping[int, list[TruthViolation]]) -> tuple[TruthViolation, ...]:
    return tuple(v for lid in sorted(per_ledger) for v in per_ledger[lid])


# --------------------------------------------------------------------------- the truth file


def truth_document(
    scenario: Scenario,
    timeline: Sequence[TruthState],
    *,
    started_at_ms: int | None = None,
    bookies: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, object]:
    """The truth file's JSON document (format in docs/simulator.md)."""
    return {
        "format": TRUTH_FORMAT,
        "version": TRUTH_VERSION,
        "scenario": {
            "name": scenario.name,
            "description": scenario.description,
            "seed": scenario.seed,
            "ledgers_root": scenario.cluster.ledgers_root,
            "racks_path": scenario.cluster.racks_path,
            "ledgers": len(scenario.ledgers),
            "orphans": len(scenario.orphans),
            "bookies": len(scenario.bookies),
        },
        "checker": scenario.checker.as_json_dict(),
        "started_at_ms": started_at_ms,
        "bookies": {k: dict(v) for k, v in (bookies or {}).items()},
        "states": [
            {
                "at_s": state.at_s,
                "at_ms": None if started_at_ms is None else started_at_ms + round(state.at_s * 1000),
                "causes": list(state.causes),
                "counts": state.counts(),
                "violations": [v.as_json_dict() for v in state.violations],
            }
            for state in timeline
        ],
    }


def write_truth(path: str | Path, document: Mapping[str, object]) -> None:
    """Write the document as JSON (one violation per line, so files diff well)."""
    states = document.get("states", [])
    head = {k: v for k, v in document.items() if k != "states"}
    lines = [json.dumps(head, sort_keys=False)[:-1] + ', "states": [']
    assert isinstance(states, list)
    for index, state in enumerate(states):
        body = {k: v for k, v in state.items() if k != "violations"}
        lines.append("  " + json.dumps(body)[:-1] + ', "violations": [')
        violations = state["violations"]
        lines += [f"    {json.dumps(v)}{',' if i + 1 < len(violations) else ''}" for i, v in enumerate(violations)]
        lines.append("  ]}" + ("," if index + 1 < len(states) else ""))
    lines.append("]}")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def load_truth(path: str | Path) -> tuple[dict[str, object], list[TruthState]]:
    """The document's header fields and its states; TruthFileError when it is not a truth file."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise TruthFileError(f"cannot read truth file {path}: {error}") from None
    if not isinstance(document, dict) or document.get("format") != TRUTH_FORMAT:
        raise TruthFileError(f"{path} is not a {TRUTH_FORMAT} document")
    try:
        states = [
            TruthState(
                float(state["at_s"]),
                tuple(str(c) for c in state["causes"]),
                tuple(TruthViolation.from_json_dict(v) for v in state["violations"]),
            )
            for state in document["states"]
        ]
    except (KeyError, TypeError, ValueError) as error:
        raise TruthFileError(f"{path}: malformed state or violation ({error})") from None
    return {k: v for k, v in document.items() if k != "states"}, states
