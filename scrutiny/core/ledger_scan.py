"""One ledger in a one-shot scan: the same rules as the streaming checker, applied to one snapshot.

Pure. A scan reads ZooKeeper once and checks every ledger of the snapshot; this module decides, for one ledger, what
the check found and which violations the tables still hold open for it are now resolved.

* **deep** scans run the streaming checker's own state machine (:mod:`scrutiny.core.ledger_tracker`): the bookies'
  answers are judged by the verdict core, unknown answers are retried with the same backoff, and after the last retry
  a silent bookie is ``BOOKIE_UNRESPONSIVE`` (registered) or ``BOOKIE_NOT_REGISTERED`` (gone);
* **fast** scans ask no bookie: the verdict core is given no answers, so only what the metadata and the cluster's
  registrations decide for certain is reported (placement, registration, ``ACK_QUORUM_ONE``, unreadable metadata,
  stuck under-replication marks); replica findings are neither reported nor resolved;
* a stuck mark is judged from the mark's own ctime (a mark without one is never judged stuck by a scan, which sees it
  once); an open stuck report is resolved when the mark is gone or no longer older than the grace period;
* open violations are resolved only within the categories the mode decides (:func:`decided_categories`), and only
  by a ledger that was checked (open ledgers without sealed segments are skipped, as by the streaming checker); a
  ledger that is no longer in ZooKeeper has all its open violations resolved (:func:`gone`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

from scrutiny.core.errors import FormatError, ScrutinyError
from scrutiny.core.ledger_metadata import LedgerMetadata, decode_ledger_metadata
from scrutiny.core.ledger_tracker import (
    Check,
    Outcome,
    TrackedLedger,
    TrackerConfig,
    ViolationKey,
    needs_check,
    on_answers,
    on_marked,
    on_metadata,
    on_timer,
    open_stall_ended,
    stalled_open_ledger,
    stalled_recovery,
    violation_key,
)
from scrutiny.core.replication_locks import ReplicationLock, with_lock
from scrutiny.core.verdict import BookieAnswer, ClusterView, VerdictKind, Violation, compute_verdict
from scrutiny.core.vocabulary import Category
from scrutiny.core.zk_paths import MAX_LEDGER_ID
from scrutiny.core.zk_records import UnderReplicationMark


class ScanMode(StrEnum):
    """``fast``: metadata only; ``deep``: also the bookies' entry listings."""

    FAST = "fast"
    DEEP = "deep"


#: What a fast scan decides from the metadata and the cluster's registrations alone.
FAST_CATEGORIES: Final = frozenset(
    {
        Category.PLACEMENT_FAIL,
        Category.PLACEMENT_SOFT,
        Category.BOOKIE_NOT_REGISTERED,
        Category.UNDER_REPLICATION_STUCK,
        Category.ACK_QUORUM_ONE,
        Category.METADATA_UNREADABLE,
        Category.RECOVERY_STALLED,
        Category.OPEN_LEDGER_STALLED,
    }
)
#: What a deep scan decides: every category a check reports (CHECK_OVERDUE is the streaming checker's own).
DEEP_CATEGORIES: Final = frozenset(Category) - {Category.CHECK_OVERDUE}
_STUCK: Final = Category.UNDER_REPLICATION_STUCK.value
_RECOVERY: Final = Category.RECOVERY_STALLED.value
_OPEN_STALLED: Final = Category.OPEN_LEDGER_STALLED.value


class SelectionError(ScrutinyError, ValueError):
    """A ``--ledgers`` range that does not parse; says which part and why."""


@dataclass(frozen=True, slots=True)
class LedgerSelection:
    """Inclusive ledger id ranges (empty: every ledger)."""

    ranges: tuple[tuple[int, int], ...] = ()

    def __contains__(self, ledger_id: object) -> bool:
        if not isinstance(ledger_id, int):
            return False
        return not self.ranges or any(lo <= ledger_id <= hi for lo, hi in self.ranges)

    @property
    def everything(self) -> bool:
        """True when no range restricts the scan."""
        return not self.ranges

    def describe(self) -> str:
        """``all`` or the ranges as given back (``5,10-20,100-``)."""
        if not self.ranges:
            return "all"
        return ",".join(_describe_range(lo, hi) for lo, hi in self.ranges)


def _describe_range(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    if hi == MAX_LEDGER_ID:
        return f"{lo}-"
    return f"{lo}-{hi}" if lo else f"-{hi}"


def parse_ledger_selection(text: str | None) -> LedgerSelection:
    """``N``, ``A-B``, ``A-`` (from A) and ``-B`` (up to B), comma-separated; None or empty: every ledger."""
    if text is None or not text.strip():
        return LedgerSelection()
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        piece = part.strip()
        if not piece:
            raise SelectionError(f"ledger range {text!r}: empty part")
        lo_text, dash, hi_text = piece.partition("-")
        lo = _ledger_id(lo_text, piece) if lo_text.strip() else 0
        hi = _ledger_id(hi_text, piece) if hi_text.strip() else (MAX_LEDGER_ID if dash else lo)
        if not lo_text.strip() and not hi_text.strip():
            raise SelectionError(f"ledger range {piece!r}: give a start, an end or both")
        if lo > hi:
            raise SelectionError(f"ledger range {piece!r}: start {lo} is after end {hi}")
        ranges.append((lo, hi))
    return LedgerSelection(tuple(ranges))


def _ledger_id(text: str, piece: str) -> int:
    digits = text.strip()
    if not digits.isdigit():
        raise SelectionError(f"ledger range {piece!r}: {digits!r} is not a ledger id (a whole number ≥ 0)")
    value = int(digits)
    if value > MAX_LEDGER_ID:
        raise SelectionError(f"ledger range {piece!r}: {value} is larger than the largest ledger id {MAX_LEDGER_ID}")
    return value


def decided_categories(mode: ScanMode) -> frozenset[Category]:
    """The categories a scan of ``mode`` reports and may resolve."""
    return FAST_CATEGORIES if mode is ScanMode.FAST else DEEP_CATEGORIES


@dataclass(frozen=True, slots=True)
class ScanItem:
    """One ledger of the snapshot: its node's version and bytes (without the ledger's password:
    :mod:`scrutiny.core.metadata_redaction`), its mark, and its violations open in the tables."""

    ledger_id: int
    version: int
    data: bytes
    mark: UnderReplicationMark | None = None
    open_keys: tuple[ViolationKey, ...] = ()
    #: The node's last modification (ZooKeeper's mtime): the ledger's last write, for the write-cache rule.
    written_ms: int | None = None
    #: Why the node's own bytes do not decode (empty when they do): ``METADATA_UNREADABLE`` reports it.
    decode_error: str = ""
    #: The replication worker's lock on the marked ledger (None: not locked), named in ``UNDER_REPLICATION_STUCK``.
    lock: ReplicationLock | None = None


@dataclass(frozen=True, slots=True)
class ScanStep:
    """What a step of one ledger's scan produced; ``state`` is kept for the deep scan's retries."""

    outcomes: tuple[Outcome, ...]
    state: TrackedLedger | None = None

    @property
    def retry_at_ms(self) -> int | None:
        """When the deep scan asks the silent bookies again (None: the check is complete)."""
        return None if self.state is None else self.state.retry_at_ms


def bookies_to_ask(data: bytes) -> tuple[str, ...]:
    """The bookies a deep scan asks about this ledger (none when it is not checked or does not decode)."""
    try:
        metadata = decode_ledger_metadata(data)
    except FormatError:
        return ()
    if not needs_check(metadata):
        return ()
    return _ensemble_bookies(metadata)


def involves_bookie(data: bytes, bookie: str) -> bool:
    """Whether ``bookie`` is in some ensemble of the ledger (undecodable metadata: no)."""
    try:
        metadata = decode_ledger_metadata(data)
    except FormatError:
        return False
    return bookie in _ensemble_bookies(metadata)


def _ensemble_bookies(metadata: LedgerMetadata) -> tuple[str, ...]:
    return tuple(dict.fromkeys(b for segment in metadata.segments for b in segment.ensemble))


def scan_fast(
    item: ScanItem,
    *,
    now_ms: int,
    cluster: ClusterView,
    config: TrackerConfig,
    lost_bookies: frozenset[str] = frozenset(),
) -> ScanStep:
    """The metadata-only check of one ledger; ``lost_bookies``: the bookies with an open ``BOOKIE_LOST``."""
    state, marked = _marked(item, FAST_CATEGORIES, now_ms=now_ms, config=config)
    outcomes = list(marked)
    stuck_found = _found_stuck(outcomes)
    try:
        metadata = decode_ledger_metadata(item.data)
    except FormatError:
        step = on_metadata(
            state, version=item.version, data=item.data, changed_ms=None, answers={}, now_ms=now_ms,
            cluster=cluster, config=config, decode_error=item.decode_error,
        )  # fmt: skip
        outcomes.append(step.outcome)
        return ScanStep(_with_stuck_resolution(item, outcomes, stuck_found))
    stalled = _stalled(item, metadata, now_ms=now_ms, config=config, cluster=cluster, lost_bookies=lost_bookies)
    if not needs_check(metadata):
        ended = _stalls_ended(state, metadata, cluster, stalled)
        outcomes.append(Outcome(found=stalled, resolved=ended, metadata=metadata, version=item.version))
        return ScanStep(_with_stuck_resolution(item, outcomes, stuck_found))
    mark = None if item.mark is None else replace(item.mark, ctime_ms=None)
    verdict = compute_verdict(
        metadata, {}, now_ms=now_ms, config=config.verdict, cluster=cluster, under_replication=mark
    )
    found = tuple(v for v in verdict.violations if v.category in FAST_CATEGORIES and v.category.value != _STUCK)
    found += stalled
    keys = {violation_key(v) for v in found}
    resolved = tuple(k for k in state.open if k not in keys and k[0] != _STUCK)
    kind = VerdictKind.VIOLATED if found or stuck_found else verdict.verdict
    check = Check(kind, metadata.state, bookies_asked=0, retries=0, latency_ms=None, violation_count=len(found))
    outcomes.append(Outcome(found=found, resolved=resolved, check=check, metadata=metadata, version=item.version))
    return ScanStep(_with_stuck_resolution(item, outcomes, stuck_found))


def scan_deep(
    item: ScanItem,
    answers: Mapping[str, BookieAnswer],
    *,
    now_ms: int,
    cluster: ClusterView,
    config: TrackerConfig,
    lost_bookies: frozenset[str] = frozenset(),
) -> ScanStep:
    """The first check of one ledger with its bookies' answers; retry with :func:`retry_due` while one is pending.
    ``lost_bookies``: the bookies with an open ``BOOKIE_LOST``."""
    state, marked = _marked(item, DEEP_CATEGORIES, now_ms=now_ms, config=config)
    step = on_metadata(
        state, version=item.version, data=item.data, changed_ms=None, answers=answers, now_ms=now_ms,
        cluster=cluster, config=config, written_ms=item.written_ms, decode_error=item.decode_error,
    )  # fmt: skip
    outcomes = [*marked, step.outcome]
    if step.outcome.metadata is not None:
        metadata = step.outcome.metadata
        stalled = _stalled(item, metadata, now_ms=now_ms, config=config, cluster=cluster, lost_bookies=lost_bookies)
        outcomes += [Outcome(found=stalled, version=item.version)] if stalled else []
    return _deep_step(item, outcomes, step.state)


def retry_due(state: TrackedLedger, *, now_ms: int) -> tuple[TrackedLedger, tuple[str, ...]]:
    """A pending deep check's retry at ``now_ms``: the new state and the bookies to ask again."""
    step = on_timer(state, now_ms=now_ms)
    assert step.state is not None
    return step.state, step.outcome.fetch


def scan_retried(
    item: ScanItem,
    state: TrackedLedger,
    answers: Mapping[str, BookieAnswer],
    *,
    now_ms: int,
    cluster: ClusterView,
    config: TrackerConfig,
) -> ScanStep:
    """A pending deep check judged again with the answers of a retry."""
    step = on_answers(state, version=item.version, answers=answers, now_ms=now_ms, cluster=cluster, config=config)
    return _deep_step(item, [step.outcome], step.state, stuck_seen=_STUCK in {k[0] for k in state.open})


def gone(open_keys: Iterable[ViolationKey]) -> Outcome:
    """A ledger no longer in ZooKeeper: every violation still open for it is resolved."""
    return Outcome(resolved=tuple(dict.fromkeys(open_keys)))


def _deep_step(
    item: ScanItem, outcomes: list[Outcome], state: TrackedLedger | None, *, stuck_seen: bool = False
) -> ScanStep:
    if state is not None and state.retry_at_ms is not None:
        return ScanStep(tuple(outcomes), state)  # stuck resolution waits for the complete check
    stuck_found = stuck_seen or _found_stuck(outcomes)
    return ScanStep(_with_stuck_resolution(item, outcomes, stuck_found), state)


def _marked(
    item: ScanItem, categories: frozenset[Category], *, now_ms: int, config: TrackerConfig
) -> tuple[TrackedLedger, list[Outcome]]:
    """The starting state (the tables' open keys in scope, the stuck one aside) and a stuck report if due."""
    scope = {c.value for c in categories}
    state = TrackedLedger(open=tuple(k for k in item.open_keys if k[0] in scope and k[0] != _STUCK))
    if item.mark is None:
        return state, []
    marked = on_marked(state, item.mark, now_ms=now_ms, config=config).state
    assert marked is not None
    if item.mark.ctime_ms is None or marked.stuck_at_ms is None or marked.stuck_at_ms > now_ms:
        return marked, []
    step = on_timer(marked, now_ms=now_ms)
    assert step.state is not None
    grace_ms = config.verdict.under_replication_grace_ms
    found = tuple(with_lock(v, item.lock, now_ms=now_ms, grace_ms=grace_ms) for v in step.outcome.found)
    return step.state, [replace(step.outcome, found=found)]


def _stalled(
    item: ScanItem,
    metadata: LedgerMetadata,
    *,
    now_ms: int,
    config: TrackerConfig,
    cluster: ClusterView,
    lost_bookies: frozenset[str],
) -> tuple[Violation, ...]:
    """What one reading proves stuck: a recovery past its grace, an open ledger's writer left by lost bookies."""
    found = (
        stalled_recovery(metadata, written_ms=item.written_ms, now_ms=now_ms, config=config),
        stalled_open_ledger(metadata, cluster, lost_bookies),
    )
    return tuple(v for v in found if v is not None)


def _stalls_ended(
    state: TrackedLedger, metadata: LedgerMetadata, cluster: ClusterView, stalled: tuple[Violation, ...]
) -> tuple[ViolationKey, ...]:
    """The open stall findings of a ledger not checked whole that this reading ends: a recovery no longer proven
    stalled; an open ledger whose writer has enough registered bookies again. An open ledger still short of AQ
    registered bookies, none of them declared lost, keeps its finding (this reading cannot tell)."""
    recovery_found = any(v.category.value == _RECOVERY for v in stalled)
    return tuple(
        k
        for k in state.open
        if (k[0] == _RECOVERY and not recovery_found) or (k[0] == _OPEN_STALLED and open_stall_ended(metadata, cluster))
    )


def _found_stuck(outcomes: Iterable[Outcome]) -> bool:
    return any(v.category.value == _STUCK for outcome in outcomes for v in outcome.found)


def _with_stuck_resolution(item: ScanItem, outcomes: list[Outcome], stuck_found: bool) -> tuple[Outcome, ...]:
    """An open stuck report that this scan did not find again is resolved (the mark is gone or young)."""
    stuck_key = next((k for k in item.open_keys if k[0] == _STUCK), None)
    if stuck_key is None or stuck_found:
        return tuple(outcomes)
    return (*outcomes, Outcome(resolved=(stuck_key,), version=item.version))
