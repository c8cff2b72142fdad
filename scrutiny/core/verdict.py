"""The verdict on one ledger: what its bookies hold against what its metadata promises.

:func:`compute_verdict` is pure: metadata, each ensemble bookie's answer, what is known of the
cluster (racks, registered bookies), the ledger's under-replication mark, the time and the
configuration go in; a :class:`Verdict` with violations in the closed vocabulary of
:mod:`scrutiny.core.vocabulary` comes out. Rules it keeps (each pinned by a test):

* an answer is a listing, an explicit negative (the bookie holds nothing of the ledger) or
  unknown; unknown is never counted as missing: a bookie with an unknown answer is counted as
  holding everything, so a violation is reported only when it holds whatever that bookie
  turns out to hold, and the bookie is listed in ``retry_bookies`` (so is every unknown bookie
  that could hold entries after the ``lastEntryId`` of a closed ledger, until
  ``ENTRIES_BEYOND_LAST_ENTRY`` is critical: one copy's header can prove the entries acknowledged);
* entries held beyond ``lastEntryId``: critical when any of them has AQ copies in its write set
  (acknowledged, very probably, and lost to readers: a recovery closed the ledger too low), or when
  the header of one of them (``BookieAnswer.beyond``) carries a last-add-confirmed above ``lastEntryId``
  (acknowledged, proven: see :mod:`scrutiny.core.entry_header`), a warning otherwise;
* copies outside an entry's write set never count;
* the ledger is classified once, by its worst entry, as ``NO_REPLICA``, ``BELOW_ACK_QUORUM`` or
  ``BELOW_WRITE_QUORUM`` with the entries at that level, plus one ``MISSING_REPLICA`` detail
  per (segment, bookie) with the entries that bookie lacks;
* a ledger marked under-replicated is not re-reported for missing replicas (replication is at
  work); only entries with no replica at all, which replication cannot repair, are reported;
* open and in-recovery ledgers are checked only in the segments an ensemble change sealed;
* **the write cache**: an answer read from an index (``as_of_ms``: the bookie agent over DbLedgerStorage) taken
  before the ledger's last write (``written_ms``) plus ``config.index_lag_ms`` proves only what it lists: the
  bookie may still hold the rest in its write cache, which reaches the index at its next flush. When such answers
  would make a replica finding, they count as unknown instead (retried, never missing), and ``settles_at_ms``
  says from when they can be trusted;
* cost grows with the segments, the bookies and the listings' pieces, never with their product nor with the
  entries (never expanded); a listing too irregular to evaluate within a fixed budget counts as unknown; answers
  that are exactly the stripes (the common case) cost a comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import partial

from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.ledger_metadata import LedgerMetadata, LedgerState
from scrutiny.core.periodic_sets import (
    Budget,
    EntrySetTooComplexError,
    Piece,
    PieceIndex,
    ResidueCounts,
    choose_modulus,
    full_mask,
    new_budget,
    pieces_of,
    sweep_changes,
    to_groups,
    union_groups,
    window_mask,
)
from scrutiny.core.placement import PlacementConfig, PlacementResult, check_placement
from scrutiny.core.sequence_groups import MAX_ENTRY_ID, EntrySet, SequenceGroup, clip, merge_consecutive
from scrutiny.core.striping import (
    SegmentSpan,
    expected_groups,
    expected_residues,
    segment_spans,
    span_of_entry,
)
from scrutiny.core.vocabulary import FIXED_SEVERITY, Category, Severity
from scrutiny.core.zk_records import UnderReplicationMark

#: Default grace period for an under-replication mark before it is reported stuck (1 hour).
DEFAULT_UNDER_REPLICATION_GRACE_MS = 3_600_000


class AnswerKind(StrEnum):
    """What a bookie said about a ledger."""

    LISTING = "LISTING"
    NO_LEDGER = "NO_LEDGER"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class BookieAnswer:
    """One bookie's answer: a listing's groups, an explicit negative, or unknown with a reason.

    ``as_of_ms``: for an answer read from the bookie's index rather than from the bookie (the agent), when that
    read began; everything the bookie had put in its index before then is in the answer. None: the bookie itself
    answered, from everything it holds.
    """

    kind: AnswerKind
    groups: tuple[SequenceGroup, ...] = ()
    reason: str = ""
    as_of_ms: int | None = field(default=None, compare=False)  # when, not what: answers equal by content
    #: UNKNOWN because the bookie has the ledger in limbo (BP-46): it answers, but may have lost entries.
    limbo: bool = False
    #: For a listing of a closed ledger with entries after its lastEntryId: the header of the highest of them, as
    #: the bookie returned it to a plain READ_ENTRY (None: not read, or the read failed).
    beyond: EntryHeader | None = None

    @classmethod
    def listing(
        cls, groups: tuple[SequenceGroup, ...] | list[SequenceGroup], as_of_ms: int | None = None
    ) -> BookieAnswer:
        """A positive answer: the bookie holds these entries of the ledger (read from its index at ``as_of_ms``)."""
        return cls(AnswerKind.LISTING, tuple(groups), "", as_of_ms)

    @classmethod
    def no_ledger(cls, as_of_ms: int | None = None) -> BookieAnswer:
        """An explicit negative (ENOLEDGER): the bookie holds no entry of the ledger (its index's, at ``as_of_ms``)."""
        return cls(AnswerKind.NO_LEDGER, (), "", as_of_ms)

    @classmethod
    def unknown(cls, reason: str) -> BookieAnswer:
        """No usable answer (timeout, error, unsupported storage...)."""
        return cls(AnswerKind.UNKNOWN, (), reason)

    @classmethod
    def in_limbo(cls, reason: str = "ledger in limbo") -> BookieAnswer:
        """No usable answer because the ledger is in limbo on the bookie (BP-46): unknown, never a negative."""
        return cls(AnswerKind.UNKNOWN, (), reason, limbo=True)


class VerdictKind(StrEnum):
    """The ledger's overall outcome."""

    HEALTHY = "HEALTHY"
    VIOLATED = "VIOLATED"
    UNKNOWN = "UNKNOWN"
    SKIPPED = "SKIPPED"


@dataclass(frozen=True, slots=True)
class Violation:
    """One finding. ``bookie``, ``segment_first_entry`` and ``entries`` are None where they do not apply."""

    category: Category
    severity: Severity
    bookie: str | None = None
    segment_first_entry: int | None = None
    entries: EntrySet | None = None
    details: str = ""

    def as_json_dict(self) -> dict[str, object]:
        """The stable JSON form of the CLI and the tables."""
        return {
            "category": self.category.value,
            "severity": self.severity.value,
            "bookie": self.bookie,
            "segment_first_entry": self.segment_first_entry,
            "entries": self.entries.as_json_dict() if self.entries is not None else None,
            "details": self.details,
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome for one ledger."""

    verdict: VerdictKind
    state: LedgerState
    violations: tuple[Violation, ...]
    retry_bookies: tuple[str, ...]
    #: When answers withheld for the write cache can be trusted (None: none were withheld).
    settles_at_ms: int | None = None

    def as_json_dict(self) -> dict[str, object]:
        """``{"verdict", "state", "violations": [...], "retry_bookies": [...]}``."""
        return {
            "verdict": self.verdict.value,
            "state": self.state.value,
            "violations": [v.as_json_dict() for v in self.violations],
            "retry_bookies": list(self.retry_bookies),
        }


@dataclass(frozen=True, slots=True)
class VerdictConfig:
    """What the verdict depends on besides the evidence: placement policy, grace period, index lag.

    ``index_lag_ms``: how long after a ledger's last write an index-read answer (``as_of_ms``) may still lack
    entries the bookie holds (DbLedgerStorage's write-cache flush interval plus a margin); 0: never.
    """

    placement: PlacementConfig = PlacementConfig()
    under_replication_grace_ms: int = DEFAULT_UNDER_REPLICATION_GRACE_MS
    index_lag_ms: int = 0


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What is known of the cluster. ``writable`` None means registration is not checked."""

    racks: Mapping[str, str] = field(default_factory=dict)
    writable: frozenset[str] | None = None
    readonly: frozenset[str] = frozenset()

    def registered(self, bookie: str) -> bool:
        """Whether the bookie is registered, writable or read-only (True when unchecked)."""
        return self.writable is None or bookie in self.writable or bookie in self.readonly


_REPLICA_LEVELS = (Category.NO_REPLICA, Category.BELOW_ACK_QUORUM, Category.BELOW_WRITE_QUORUM)
_ORDER = {category: index for index, category in enumerate(Category)}


def compute_verdict(
    metadata: LedgerMetadata,
    answers: Mapping[str, BookieAnswer],
    *,
    now_ms: int,
    config: VerdictConfig = VerdictConfig(),
    cluster: ClusterView = ClusterView(),
    under_replication: UnderReplicationMark | None = None,
    written_ms: int | None = None,
) -> Verdict:
    """The ledger's verdict. A bookie of an ensemble missing from ``answers`` counts as unknown.

    ``written_ms``: when the ledger was last written (its metadata's last change: the close, or the ensemble
    change that sealed a segment); None: unknown, and no answer is withheld for the write cache.
    """
    judge = partial(_verdict, now_ms=now_ms, config=config, cluster=cluster, under_replication=under_replication)
    verdict = judge(metadata, answers)
    if written_ms is None or not config.index_lag_ms or not _blames_replicas(verdict):
        return verdict
    settles_at = written_ms + config.index_lag_ms
    unflushed = {b for b, a in answers.items() if a.kind is not AnswerKind.UNKNOWN and _before(a.as_of_ms, settles_at)}
    if not unflushed:
        return verdict
    withheld = {b: _withheld(a, settles_at) if b in unflushed else a for b, a in answers.items()}
    again = judge(metadata, withheld)
    return Verdict(again.verdict, again.state, again.violations, again.retry_bookies, settles_at_ms=settles_at)


def _blames_replicas(verdict: Verdict) -> bool:
    return any(v.category in _REPLICA_LEVELS or v.category is Category.MISSING_REPLICA for v in verdict.violations)


def _before(as_of_ms: int | None, settles_at_ms: int) -> bool:
    return as_of_ms is not None and as_of_ms < settles_at_ms


def _withheld(answer: BookieAnswer, settles_at_ms: int) -> BookieAnswer:
    assert answer.as_of_ms is not None
    lag_s = (settles_at_ms - answer.as_of_ms) / 1000
    reason = (
        f"read from the bookie's index {lag_s:.1f} s before it can hold every entry of the ledger "
        "(the write cache is flushed into it later): what it lacks is not known yet"
    )
    return BookieAnswer(AnswerKind.UNKNOWN, (), reason, answer.as_of_ms)


def _verdict(
    metadata: LedgerMetadata,
    answers: Mapping[str, BookieAnswer],
    *,
    now_ms: int,
    config: VerdictConfig,
    cluster: ClusterView,
    under_replication: UnderReplicationMark | None,
) -> Verdict:
    closed = metadata.state is LedgerState.CLOSED
    last_entry = metadata.last_entry_id if closed else None
    spans = segment_spans(
        [s.first_entry_id for s in metadata.segments], [s.ensemble for s in metadata.segments], last_entry
    )
    checked = [span for span in spans if not span.empty]
    violations: list[Violation] = []
    retry: list[str] = []
    # Every bookie holding exactly the entries its stripes promise (the common case) leaves the sweep nothing to
    # find: no entry short of a replica, none after the end, nobody to ask again. Checked at the cost of a comparison
    # (of listings merged already, as the bookie clients decode them: others take the sweep).
    if not (closed and _as_striped(metadata, checked, answers)):
        # One group per run (BookKeeper's listing form) becomes periodic groups first: linear, exact.
        compacted = {b: _compacted(a) for b, a in answers.items()}
        violations, retry = _held_findings(metadata, spans, checked, compacted, marked=under_replication is not None)
    examined = closed or bool(spans)
    if examined:
        violations += _metadata_checks(metadata, checked, closed, config, cluster)
    if under_replication is not None:
        violations += _stuck(under_replication, now_ms, config.under_replication_grace_ms)
    violations.sort(key=lambda v: (_ORDER[v.category], v.segment_first_entry or 0, v.bookie or ""))
    if violations:
        kind = VerdictKind.VIOLATED
    elif not examined:
        kind = VerdictKind.SKIPPED
    elif retry:
        kind = VerdictKind.UNKNOWN
    else:
        kind = VerdictKind.HEALTHY
    return Verdict(kind, metadata.state, tuple(violations), tuple(retry))


def _held_findings(
    metadata: LedgerMetadata,
    spans: list[SegmentSpan],
    checked: list[SegmentSpan],
    answers: Mapping[str, BookieAnswer],
    *,
    marked: bool,
) -> tuple[list[Violation], list[str]]:
    """What the bookies' answers show against the stripes: replica levels, entries after the end, bookies to retry."""
    modulus = choose_modulus(metadata.ensemble_size, [g for a in answers.values() for g in a.groups])
    horizon = max((span.last for span in checked), default=-1)
    budget = new_budget(sum(len(a.groups) for a in answers.values()))  # one for the ledger, not one per bookie
    answers, pieces = _pieces_by_bookie(answers, modulus, horizon, budget)
    replicas = _ReplicaCheck(metadata, pieces, modulus)
    for span in checked:
        replicas.add_segment(span)
    retry = [*replicas.retry]
    try:
        violations = replicas.violations(marked=marked, budget=budget)
    except EntrySetTooComplexError:
        # The entries found would take more groups to write down than the listings paid for: the irregular
        # listings are asked again, like any answer that cannot be used, and nothing is reported from them.
        violations = []
        retry += [b for b in _irregular(answers, metadata.ensemble_size) if b not in retry]
    last_entry = metadata.last_entry_id
    if metadata.state is LedgerState.CLOSED and last_entry is not None and spans:
        beyond, unverified = _entries_beyond(metadata, spans, last_entry, answers, modulus)
        violations += beyond
        retry += [bookie for bookie in unverified if bookie not in retry]
    return violations, retry


def _as_striped(metadata: LedgerMetadata, checked: list[SegmentSpan], answers: Mapping[str, BookieAnswer]) -> bool:
    """True when the bookies answering are exactly the ensembles' and each listed exactly the groups the striping's
    entries for it merge into (equal group lists hold equal entries; a listing in another form gives False)."""
    expected: dict[str, list[SequenceGroup]] = {}
    for segment in metadata.segments:
        for bookie in segment.ensemble:
            expected.setdefault(bookie, [])
    if expected.keys() != answers.keys():
        return False
    size, quorum = metadata.ensemble_size, metadata.write_quorum
    for span in checked:
        for index, bookie in enumerate(span.ensemble):
            expected[bookie] += expected_groups(index, size, quorum, span.first, span.last)
    for bookie, answer in answers.items():
        if answer.kind is not AnswerKind.LISTING or tuple(merge_consecutive(expected[bookie])) != answer.groups:
            return False
    return True


def _compacted(answer: BookieAnswer) -> BookieAnswer:
    if answer.kind is not AnswerKind.LISTING or len(answer.groups) < 2:
        return answer
    merged = tuple(merge_consecutive(answer.groups))
    return answer if merged == answer.groups else replace(answer, groups=merged)  # its evidence (``beyond``) kept


def _irregular(answers: Mapping[str, BookieAnswer], ensemble_size: int) -> list[str]:
    """The bookies whose listings have groups of another period than the ensemble's (all listings if none)."""
    listed = [b for b, a in answers.items() if a.kind is AnswerKind.LISTING]
    odd = [b for b in listed if any(not g.contiguous and g.period != ensemble_size for g in answers[b].groups)]
    return odd or listed


def _pieces_by_bookie(
    answers: Mapping[str, BookieAnswer], modulus: int, horizon: int, budget: Budget
) -> tuple[dict[str, BookieAnswer], dict[str, PieceIndex]]:
    """Each listing as pieces up to the last checked entry; listings too irregular to evaluate become unknown."""
    usable: dict[str, BookieAnswer] = {}
    pieces: dict[str, PieceIndex] = {}
    for bookie, answer in answers.items():
        usable[bookie] = answer
        if answer.kind is AnswerKind.LISTING:
            try:
                raw = pieces_of(answer.groups, modulus, 0, horizon, budget)
            except EntrySetTooComplexError as error:
                usable[bookie] = BookieAnswer.unknown(f"listing cannot be evaluated: {error}")
                continue
            pieces[bookie] = PieceIndex(raw, modulus)
        elif answer.kind is AnswerKind.NO_LEDGER:
            pieces[bookie] = PieceIndex((), modulus)
    return usable, pieces


class _ReplicaCheck:
    """Accumulates, segment by segment, the entries below each replica level."""

    def __init__(self, metadata: LedgerMetadata, pieces: Mapping[str, PieceIndex], modulus: int) -> None:
        self.size = metadata.ensemble_size
        self.wq = metadata.write_quorum
        self.aq = metadata.ack_quorum
        self.pieces = pieces  # bookies with a known answer only
        self.modulus = modulus
        self.expected = [expected_residues(i, self.size, self.wq, modulus) for i in range(self.size)]
        self.levels: dict[Category, list[Piece]] = {category: [] for category in _REPLICA_LEVELS}
        self.missing: list[tuple[SegmentSpan, str, list[Piece]]] = []
        self.retry: list[str] = []

    def add_segment(self, span: SegmentSpan) -> None:
        """Count the replicas of every entry of one non-empty segment.

        Only the bookies whose holdings change where an interval starts are looked at there, and the levels come
        from bit-sliced counts of what each bookie lacks: the cost grows with the listings' pieces, not with
        pieces × bookies.
        """
        inputs: list[list[Piece]] = []
        everyone_holds_all = True  # the common case: every bookie answered and holds its whole stripe
        for index, bookie in enumerate(span.ensemble):
            known = self.pieces.get(bookie)
            if known is None:
                everyone_holds_all = False
                inputs.append([(span.first, span.last, full_mask(self.modulus))])
                if expected_groups(index, self.size, self.wq, span.first, span.last) and bookie not in self.retry:
                    self.retry.append(bookie)
            else:
                window = known.window(span.first, span.last)
                inputs.append(window)
                holds = _holds_throughout(window, span, self.expected[index], self.modulus)
                everyone_holds_all = everyone_holds_all and holds
        if everyone_holds_all:
            return  # what the sweep below finds then: nobody lacks anything, no level is ever below a quorum
        missing = list(self.expected)  # what each bookie lacks from since[index] on: all it should hold, at first
        since = [span.first] * len(missing)
        lacking: list[list[Piece]] = [[] for _ in missing]
        counts = ResidueCounts()
        for mask in missing:
            counts.add(mask)
        levels, levels_since = self._levels(counts), span.first
        for start, _, changed in sweep_changes(inputs, span.first, span.last):
            moved = False
            for index, held in changed.items():
                now = self.expected[index] & ~held
                if now != missing[index]:
                    if missing[index]:
                        _stretch(since[index], start - 1, missing[index], self.modulus, lacking[index])
                    counts.remove(missing[index])
                    counts.add(now)
                    missing[index], since[index], moved = now, start, True
            if moved and (now_levels := self._levels(counts)) != levels:
                self._close_levels(levels, levels_since, start - 1)
                levels, levels_since = now_levels, start
        self._close_levels(levels, levels_since, span.last)
        for index, mask in enumerate(missing):
            if mask:
                _stretch(since[index], span.last, mask, self.modulus, lacking[index])
            if lacking[index]:
                self.missing.append((span, span.ensemble[index], lacking[index]))

    def _levels(self, counts: ResidueCounts) -> tuple[int, int, int]:
        """The residues lacking from at least WQ, WQ - AQ + 1 and 1 bookies (in the order of _REPLICA_LEVELS)."""
        if not counts.layers:  # nobody lacks anything: the common case, at no cost
            return 0, 0, 0
        everything = full_mask(self.modulus)
        anyone = counts.union()
        below_ack = anyone if self.wq == self.aq else counts.at_least(self.wq - self.aq + 1, everything)
        return counts.at_least(self.wq, everything) if self.wq > 1 else anyone, below_ack, anyone

    def _close_levels(self, levels: tuple[int, int, int], since: int, end: int) -> None:
        for category, mask in zip(_REPLICA_LEVELS, levels, strict=True):
            if mask:
                _stretch(since, end, mask, self.modulus, self.levels[category])

    def violations(self, *, marked: bool, budget: Budget) -> list[Violation]:
        """The worst replica level (once) and, unless marked under-replicated, the per-bookie details."""
        for category in _REPLICA_LEVELS:
            if self.levels[category]:
                break
        else:
            return []
        severity = FIXED_SEVERITY[category]
        if marked and category is not Category.NO_REPLICA:
            return []
        entries = EntrySet.of(to_groups(self.levels[category], self.modulus, budget))
        worst = Violation(category, severity, entries=entries, details=self._level_details(category))
        if marked:
            return [worst]
        details = [
            Violation(
                Category.MISSING_REPLICA,
                severity,
                bookie=bookie,
                segment_first_entry=span.first,
                entries=EntrySet.of(to_groups(pieces, self.modulus, budget)),
                details=f"segment [{span.first}, {span.last}]",
            )
            for span, bookie, pieces in self.missing
        ]
        return [worst, *details]

    def _level_details(self, category: Category) -> str:
        if category is Category.NO_REPLICA:
            return "entries with no replica in their write set (data loss)"
        if category is Category.BELOW_ACK_QUORUM:
            return f"entries with fewer than {self.aq} (AQ) replicas in their write set"
        return f"entries with fewer than {self.wq} (WQ) replicas in their write set"


def _entries_beyond(
    metadata: LedgerMetadata,
    spans: list[SegmentSpan],
    last_entry: int,
    answers: Mapping[str, BookieAnswer],
    modulus: int,
) -> tuple[list[Violation], list[str]]:
    """Entries after lastEntryId held by the bookies they would have been written to.

    Those are the bookies of the segment ``lastEntryId + 1`` falls in and of any later one. The
    finding is critical when any entry after lastEntryId has at least AQ copies in its write set: it
    was very probably acknowledged to the writer, and no reader will ever see it (a recovery closed the
    ledger too low; it needs only WQ - AQ + 1 bookies without ``lastEntryId + 1`` to do so, so that
    entry itself may well have fewer), or when an entry's header proves it. While it is not critical, also
    returns the bookies of those segments with an unknown answer: any of them could hold a copy whose header
    proves it (real BookKeeper closed a ledger empty over 30 acknowledged entries that only the one bookie
    away during the recovery still held). They are retried.
    """
    if last_entry >= MAX_ENTRY_ID:
        return [], []
    following = last_entry + 1
    start = span_of_entry(spans, following) or spans[0]
    first_segment: dict[str, int] = {}  # each bookie of those segments -> the first of them it is in
    for span in spans[start.index :]:
        for bookie in span.ensemble:
            first_segment.setdefault(bookie, span.first)
    beyond: dict[str, list[SequenceGroup]] = {}
    for bookie in first_segment:
        answer = answers.get(bookie)
        if answer is not None and answer.kind is AnswerKind.LISTING:
            extra = [part for g in answer.groups for part in clip(g, following, MAX_ENTRY_ID)]
            if extra:
                beyond[bookie] = extra
    silent = {b for b in first_segment if b not in answers or answers[b].kind is AnswerKind.UNKNOWN}
    if not beyond and not silent:
        return [], []  # nothing after the end, and nobody who could hold it: the common case, at no cost
    try:
        quorum = _QuorumBeyond(metadata, following, beyond, modulus)
    except EntrySetTooComplexError:
        quorum = None
    proof = _acknowledgement_proof(last_entry, {b: answers[b].beyond for b in beyond})
    if quorum is None or quorum.acknowledged is None:
        severity, note = Severity.WARNING, f"no entry after {last_entry} has {metadata.ack_quorum} (AQ) copies"
        if quorum is None:
            note = "listings too irregular to count the copies of the entries after the end"
        if proof:
            severity, note = Severity.CRITICAL, f"{note}, but {proof}"
    else:
        severity = Severity.CRITICAL
        acknowledged = quorum.acknowledged
        note = (
            f"{acknowledged.count} entries after {last_entry} (from {acknowledged.first}) have at least"
            f" {metadata.ack_quorum} (AQ) copies in their write set: very probably acknowledged, and lost to every"
            " reader (a recovery closed the ledger too low)"
        )
        if proof:
            note = f"{note}; {proof}"
    violations = [
        Violation(
            Category.ENTRIES_BEYOND_LAST_ENTRY,
            severity,
            bookie=bookie,
            segment_first_entry=first_segment[bookie],
            entries=_union_or_as_is(groups),
            details=note,
        )
        for bookie, groups in beyond.items()
    ]
    if proof or (quorum is not None and quorum.acknowledged is not None):
        return violations, []  # critical already: no answer can change it
    # Until it is, every silent bookie of those segments is needed: a single copy it holds of an entry after the end
    # carries a header that can prove the entries before it acknowledged (a recovery that reached too few bookies
    # closes a ledger below the entries only the silent ones hold, with one copy each as often as not).
    return violations, [b for b in first_segment if b in silent]


def _acknowledgement_proof(last_entry: int, headers: Mapping[str, EntryHeader | None]) -> str:
    """What the entry headers read beyond the end prove: the highest last-add-confirmed above ``last_entry``, as
    text for the finding's details ("" when no header proves anything)."""
    proving = [(b, h) for b, h in headers.items() if h is not None and h.entry_id > last_entry]
    if not proving:
        return ""
    bookie, header = max(proving, key=lambda found: (found[1].last_add_confirmed, found[0]))
    acknowledged = header.acknowledged_beyond(last_entry)
    if not acknowledged:
        return ""
    return (
        f"entry {header.entry_id} on {bookie} carries last-add-confirmed {header.last_add_confirmed}: entries"
        f" {acknowledged.start} to {acknowledged.stop - 1} ({len(acknowledged)}) were acknowledged to the writer"
        " and no reader will see them (a recovery closed the ledger too low)"
    )


class _QuorumBeyond:
    """Which entries after the end have AQ copies in their write set.

    Counted segment by segment over ``[following, the last entry held]``, with the pieces and the bit-sliced counts
    of the replica check: never entry by entry.
    """

    def __init__(
        self,
        metadata: LedgerMetadata,
        following: int,
        beyond: Mapping[str, list[SequenceGroup]],
        modulus: int,
    ) -> None:
        self.acknowledged: EntrySet | None = None
        size, wq, aq = metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum
        expected = [expected_residues(i, size, wq, modulus) for i in range(size)]
        held_beyond = [g for groups in beyond.values() for g in groups]
        top = max((g.last for g in held_beyond), default=following)
        firsts = [s.first_entry_id for s in metadata.segments]
        budget = new_budget(len(held_beyond) + 1)
        everything = full_mask(modulus)
        found: list[Piece] = []
        for index, segment in enumerate(metadata.segments):
            lo = max(segment.first_entry_id, following)
            hi = min(firsts[index + 1] - 1, top) if index + 1 < len(firsts) else top
            if lo > hi:
                continue
            held = [pieces_of(beyond.get(b, ()), modulus, lo, hi, budget) for b in segment.ensemble]
            # Copies in the write set, of the bookies with a known answer.
            known = ResidueCounts()
            copies = [0] * size
            acked = 0
            since = lo
            for start, _, changed in sweep_changes(held, lo, hi):
                if not changed:
                    continue
                _stretch(since, start - 1, acked, modulus, found)
                for position, mask in changed.items():
                    now = mask & expected[position]
                    known.remove(copies[position])
                    known.add(now)
                    copies[position] = now
                acked = known.at_least(aq, everything)
                since = start
            _stretch(since, hi, acked, modulus, found)
        if found:
            self.acknowledged = EntrySet.of(to_groups(found, modulus, budget))


def _holds_throughout(window: list[Piece], span: SegmentSpan, expected: int, modulus: int) -> bool:
    """Whether the bookie holds, all over the span, every residue it should have among those that occur there: each
    piece what occurs in it, and the stretches between pieces nothing it should hold (what the sweep would find
    missing is then nothing)."""
    at = span.first
    for start, end, held in (*window, (span.last + 1, span.last, 0)):  # a last, empty piece: the stretch after all
        if start > at and expected & window_mask(at, start - 1, modulus):
            return False
        if expected & ~held & window_mask(start, end, modulus):
            return False
        at = end + 1
    return True


def _stretch(since: int, end: int, mask: int, modulus: int, out: list[Piece]) -> None:
    """Append ``mask`` over ``[since, end]`` as a piece, keeping only the residues that occur there (if any)."""
    if not mask:
        return
    if end - since + 1 >= modulus:  # every residue occurs
        out.append((since, end, mask))
    elif end >= since:
        occurring = mask & window_mask(since, end, modulus)
        if occurring:
            out.append((since, end, occurring))


def _union_or_as_is(groups: list[SequenceGroup]) -> EntrySet:
    """The union of a bookie's groups; groups too irregular to combine are reported as listed."""
    try:
        return EntrySet.of(union_groups(groups))
    except EntrySetTooComplexError:
        return EntrySet.of(groups)


def _metadata_checks(
    metadata: LedgerMetadata,
    checked: list[SegmentSpan],
    closed: bool,
    config: VerdictConfig,
    cluster: ClusterView,
) -> list[Violation]:
    """Placement of each checked segment, AQ = 1, and (closed ledgers) registration of their bookies."""
    out: list[Violation] = []
    if metadata.ack_quorum == 1:
        out.append(
            Violation(
                Category.ACK_QUORUM_ONE,
                FIXED_SEVERITY[Category.ACK_QUORUM_ONE],
                details="written with ack quorum 1: one lost bookie loses acknowledged entries",
            )
        )
    for span in checked:
        outcome = check_placement(span.ensemble, metadata.write_quorum, cluster.racks, config.placement)
        if outcome.result is PlacementResult.MEETS_STRICT:
            continue
        category = Category.PLACEMENT_FAIL if outcome.result is PlacementResult.FAIL else Category.PLACEMENT_SOFT
        out.append(
            Violation(category, FIXED_SEVERITY[category], segment_first_entry=span.first, details=outcome.reason)
        )
    if closed:
        reported: set[str] = set()
        for span in checked:
            for bookie in span.ensemble:
                if bookie in reported or cluster.registered(bookie):
                    continue
                reported.add(bookie)
                out.append(
                    Violation(
                        Category.BOOKIE_NOT_REGISTERED,
                        FIXED_SEVERITY[Category.BOOKIE_NOT_REGISTERED],
                        bookie=bookie,
                        segment_first_entry=span.first,
                        details="neither writable nor read-only in the cluster's registration",
                    )
                )
    return out


def _stuck(mark: UnderReplicationMark, now_ms: int, grace_ms: int) -> list[Violation]:
    """UNDER_REPLICATION_STUCK when the mark is older than the grace period (unknown age: not judged)."""
    if mark.ctime_ms is None or now_ms - mark.ctime_ms <= grace_ms:
        return []
    age_s = (now_ms - mark.ctime_ms) // 1000
    replicas = ", ".join(mark.replicas) or "none named"
    return [
        Violation(
            Category.UNDER_REPLICATION_STUCK,
            FIXED_SEVERITY[Category.UNDER_REPLICATION_STUCK],
            details=f"marked under-replicated {age_s} s ago (grace {grace_ms // 1000} s); missing: {replicas}",
        )
    ]
