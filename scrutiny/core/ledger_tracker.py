"""What the streaming checker remembers about one ledger, and how each event changes it.

Pure: every function takes the ledger's :class:`TrackedLedger` (or None), an event or a timer,
the time and what is known of the cluster, and returns the new state with an :class:`Outcome`
(violations found, violations resolved, a completed check, a fetch to do, timers to set). The
Spark processor stores the state, sets the timers and does the fetches; nothing here does I/O.

Rules (each pinned by a test):

* **versions**: a metadata event older than (or equal to, once checked) the latest version
  seen is ignored; a newer one replaces any pending retry of the older one;
* **unknown answers** are never counted as missing: the check is retried with exponential
  backoff (capped), and not before answers withheld for the bookie's write cache can be trusted
  (the verdict's ``settles_at_ms``); violations certain already are reported at once; after the last retry
  each bookie still without an answer is ``BOOKIE_UNRESPONSIVE`` when still registered and
  ``BOOKIE_NOT_REGISTERED`` when not;
* **resolution** is only decided by a *complete* check (every bookie answered, or the retries
  ran out): an open violation absent from it is resolved; a deletion resolves everything;
* **under-replication**: a mark sets a timer at mark time + grace (mark time unknown: first
  seen); the timer reports ``UNDER_REPLICATION_STUCK`` unless the mark was cleared first;
  clearing resolves it;
* **order**: a mark (or its clearing) re-checks a ledger with missing replicas open, so whether
  the metadata or the mark arrives first, the outcome is the same;
* **one row per finding per check**: what an incomplete check reported is not reported again
  when the retries complete it, unless a later answer changed its severity or its entries;
* **bounded state**: the metadata bytes are kept only while a retry is pending, a violation is
  open or a mark is set; what stays for a healthy ledger is its version and change time;
* **no password**: the metadata bytes a step is given, and so those the state keeps, are the znode's without the
  ledger's password (its readers redact them); bytes that cannot be searched for one come empty with the decode
  error of the znode's own bytes, which ``METADATA_UNREADABLE`` reports;
* **deleted unseen**: a ledger can be deleted while no watcher sees it (the watcher down, its snapshot
  then simply not naming the ledger). While a ledger has findings open it is confirmed to exist every
  ``confirm_interval_ms`` (:func:`with_confirmation` keeps that timer; the processor re-reads the znode),
  and a ledger found gone is :func:`on_deleted`: its findings resolve and it is forgotten;
* **re-verification**: a checked ledger is checked again at least once per ``reverify_interval_ms``
  (:func:`with_reverify` keeps that timer on the schedule of :mod:`scrutiny.core.reverify`); the processor reads
  its znode afresh and :func:`on_reread` checks what it holds. A ledger whose last *verified* check (every bookie
  answered) is older than the interval plus ``overdue_grace_ms`` when its re-verification comes due is
  ``CHECK_OVERDUE``, until a verified check resolves it;
* **bookie lifecycle**: the watcher asks for a ledger to be checked again (:func:`on_recheck`) when a bookie of its
  ensembles is lost, back after a loss, or has a new cookie. When the bookie is lost, the ledger must be marked
  under-replicated or re-replicated (the bookie gone from its ensembles) within ``mark_grace_ms``: a timer reports
  ``UNDER_REPLICATION_NOT_MARKED`` for that bookie otherwise (not when the bookie is registered again by then). A mark,
  an ensemble without the bookie, the bookie's return or the ledger's deletion resolves it. The deadline is kept
  while the ledger is marked (it sleeps): a mark cleared while the bookie is still lost and in an ensemble (nothing
  re-replicated it) wakes it, and past the deadline the finding opens at once. After a bookie's restart
  only a ledger that waits for it (:func:`waits_for`) is checked again. An open ledger rechecked because a bookie
  of its current ensemble is lost, with fewer than AQ of that ensemble registered, is ``OPEN_LEDGER_STALLED``
  until a new version or a reading with enough registered bookies;
* **stalled recovery**: a ledger ``IN_RECOVERY`` is ``RECOVERY_STALLED`` ``recovery_stalled_ms`` after the write of
  its first version in recovery (a timer), until a version not in recovery;
* **limbo**: after the retries, a bookie that answers that the ledger is in limbo is ``LEDGER_IN_LIMBO``, not
  ``BOOKIE_UNRESPONSIVE``; the ledger then waits for it (a restart checks it again).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scrutiny.core.backoff import Backoff
from scrutiny.core.bookie_lifecycle import LifecycleKind
from scrutiny.core.compact_json import compact_json
from scrutiny.core.errors import FormatError
from scrutiny.core.ledger_metadata import LedgerMetadata, LedgerState, decode_ledger_metadata
from scrutiny.core.reverify import next_reverify_ms
from scrutiny.core.slot_replace import replace  # dataclasses.replace, faster for the state's copies
from scrutiny.core.utc_text import format_duration_ms, format_utc_ms
from scrutiny.core.verdict import (
    BookieAnswer,
    ClusterView,
    Verdict,
    VerdictConfig,
    VerdictKind,
    Violation,
    compute_verdict,
)
from scrutiny.core.vocabulary import FIXED_SEVERITY, Category
from scrutiny.core.zk_records import UnderReplicationMark

#: (category, bookie or "", segment first entry or -1): one open violation of a ledger.
ViolationKey = tuple[str, str, int]
#: A violation's key with its severity and entry count (-1: none): one row as reported. A row found
#: again by a later attempt is reported again only when one of these changed (e.g. a warning that a
#: bookie's late answer made critical).
ReportKey = tuple[str, str, int, str, int]

#: What a mark changes: replication is at work on these.
_REPLICA_CATEGORIES = frozenset(
    c.value
    for c in (Category.NO_REPLICA, Category.BELOW_ACK_QUORUM, Category.BELOW_WRITE_QUORUM, Category.MISSING_REPLICA)
)


_NOT_MARKED = Category.UNDER_REPLICATION_NOT_MARKED.value
_CRITICAL_NOT_MARKED = FIXED_SEVERITY[Category.UNDER_REPLICATION_NOT_MARKED]


@dataclass(frozen=True, slots=True)
class RecheckPolicy:
    """Delayed re-checks of unknown answers: after :attr:`backoff`'s delays (no jitter), ``max_retries`` times."""

    backoff: Backoff = Backoff(initial_s=2.0, maximum_s=60.0, multiplier=2.0)
    max_retries: int = 4

    def delay_ms(self, attempt: int) -> int:
        """Milliseconds before retry number ``attempt`` (0-based)."""
        return round(self.backoff.delay(attempt) * 1000)


@dataclass(frozen=True, slots=True)
class TrackerConfig:
    """What the tracker's decisions depend on."""

    verdict: VerdictConfig = VerdictConfig()
    retry: RecheckPolicy = RecheckPolicy()
    #: How often a ledger with open findings is confirmed to still exist (0: only when another timer is due).
    confirm_interval_ms: int = 600_000
    #: Every checked ledger is checked again at least this often (0: never).
    reverify_interval_ms: int = 0
    #: ``CHECK_OVERDUE`` when a ledger's last verified check is older than the interval plus this.
    overdue_grace_ms: int = 0
    #: ``UNDER_REPLICATION_NOT_MARKED`` when a lost bookie's ledger is neither marked nor re-replicated this long after.
    mark_grace_ms: int = 300_000
    #: ``RECOVERY_STALLED`` when a ledger stays ``IN_RECOVERY`` this long (0: never).
    recovery_stalled_ms: int = 600_000


@dataclass(frozen=True, slots=True)
class TrackedLedger:
    """One ledger's state between micro-batches (small: see the module rules)."""

    version: int = -1
    checked: bool = False
    metadata: bytes | None = None
    changed_ms: int | None = None
    attempts: int = 0
    retry_at_ms: int | None = None
    mark: UnderReplicationMark | None = None
    stuck_at_ms: int | None = None
    open: tuple[ViolationKey, ...] = ()
    reported: tuple[ReportKey, ...] = ()
    #: The metadata node's last modification, kept with the metadata: the write-cache rule's "last write".
    written_ms: int | None = None
    #: When to confirm again that the ledger exists (set while findings are open: :func:`with_confirmation`).
    confirm_at_ms: int | None = None
    #: The last check in which every bookie answered (None: none yet).
    verified_ms: int | None = None
    #: When the ledger is due to be verified again (:func:`with_reverify`).
    reverify_at_ms: int | None = None
    #: Lost bookies of its ensembles, each with the time by which the ledger must be marked or re-replicated.
    lost: tuple[tuple[str, int], ...] = ()
    #: While the ledger is ``IN_RECOVERY``: when that recovery is stalled (its first such version's write + grace).
    recovery_due_ms: int | None = None
    #: The bookies answering that the ledger is in limbo on them, each with the time of the first such answer
    #: since it last answered otherwise (``LEDGER_IN_LIMBO`` says how long).
    limbo: tuple[tuple[str, int], ...] = ()

    def timers(self) -> tuple[int, ...]:
        """The times at which this ledger needs :func:`on_timer` (or, for ``confirm_at_ms``, a look at its znode)."""
        later = () if self.reverify_at_ms is None else (self.reverify_at_ms,)
        return tuple(sorted({*self.pending_timers(), *later}))

    def pending_timers(self) -> tuple[int, ...]:
        """:meth:`timers` but the re-verification: those before which the processor confirms the ledger exists
        (a re-verification reads the znode anyway)."""
        recovery = None if _recovery_key() in self.open else self.recovery_due_ms
        timed = (self.retry_at_ms, self.stuck_at_ms, self.confirm_at_ms, recovery, *self._lost_deadlines())
        return tuple(t for t in timed if t is not None)

    def _lost_deadlines(self) -> tuple[int, ...]:
        """The deadlines of lost bookies that can still be reported: none while marked, none once reported."""
        if self.mark is not None:
            return ()
        return tuple(due for bookie, due in self.lost if _not_marked_key(bookie) not in self.open)

    def watched(self) -> bool:
        """Whether anything would be reported of this ledger before its next re-verification: findings open, a mark,
        a retry or a confirmation pending."""
        return bool(self.open or self.mark is not None or self.pending_timers())

    def to_bytes(self) -> bytes:
        """Compact JSON for the state store."""
        return compact_json(self.to_doc()).encode()

    def to_doc(self) -> dict[str, object]:
        """The compact JSON document of :meth:`to_bytes` (short keys, defaults left out)."""
        doc: dict[str, object] = {"v": self.version, "c": self.checked, "o": [list(k) for k in self.open]}
        if self.metadata is not None:
            doc["m"] = base64.b64encode(self.metadata).decode("ascii")
        optional = {
            "t": self.changed_ms,
            "w": self.written_ms,
            "r": self.retry_at_ms,
            "s": self.stuck_at_ms,
            "e": self.confirm_at_ms,
            "f": self.verified_ms,
            "z": self.reverify_at_ms,
            "y": self.recovery_due_ms,
        }
        doc.update({k: v for k, v in optional.items() if v is not None})
        if self.attempts:
            doc["a"] = self.attempts
        if self.mark is not None:
            doc["k"] = {"r": list(self.mark.replicas), "t": self.mark.ctime_ms}
        if self.reported:
            doc["p"] = [list(k) for k in self.reported]
        if self.lost:
            doc["l"] = [list(k) for k in self.lost]
        if self.limbo:
            doc["b"] = [list(k) for k in self.limbo]
        return doc

    @classmethod
    def from_bytes(cls, data: bytes) -> TrackedLedger:
        """The inverse of :meth:`to_bytes`."""
        return cls.from_doc(json.loads(data))

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> TrackedLedger:
        """The inverse of :meth:`to_doc`."""
        mark = doc.get("k")
        return cls(
            version=doc["v"],
            checked=doc["c"],
            metadata=base64.b64decode(doc["m"]) if "m" in doc else None,
            changed_ms=doc.get("t"),
            written_ms=doc.get("w"),
            attempts=doc.get("a", 0),
            retry_at_ms=doc.get("r"),
            mark=UnderReplicationMark(tuple(mark["r"]), mark["t"]) if mark is not None else None,
            stuck_at_ms=doc.get("s"),
            confirm_at_ms=doc.get("e"),
            verified_ms=doc.get("f"),
            reverify_at_ms=doc.get("z"),
            recovery_due_ms=doc.get("y"),
            open=tuple((k[0], k[1], k[2]) for k in doc["o"]),
            # Older states kept 3-field keys: dropped, so at worst a pending retry reports a row again.
            reported=tuple((k[0], k[1], k[2], k[3], k[4]) for k in doc.get("p", ()) if len(k) == 5),
            lost=tuple((k[0], k[1]) for k in doc.get("l", ())),
            limbo=tuple((k[0], k[1]) for k in doc.get("b", ())),
        )


@dataclass(frozen=True, slots=True)
class Check:
    """A completed check of one metadata version."""

    verdict: VerdictKind
    state: LedgerState
    bookies_asked: int
    retries: int
    latency_ms: int | None
    violation_count: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one step produced. ``fetch`` names the bookies to ask before :func:`on_answers`."""

    found: tuple[Violation, ...] = ()
    resolved: tuple[ViolationKey, ...] = ()
    check: Check | None = None
    metadata: LedgerMetadata | None = None
    fetch: tuple[str, ...] = ()
    version: int = -1
    #: The ledger is due to be verified again: read its znode and hand it to :func:`on_reread`.
    reread: bool = False


@dataclass(frozen=True, slots=True)
class Step:
    """The new state (None: forget the ledger) and what the step produced."""

    state: TrackedLedger | None
    outcome: Outcome = field(default_factory=Outcome)


def violation_key(violation: Violation) -> ViolationKey:
    """The identity of a violation among a ledger's open ones."""
    segment = violation.segment_first_entry
    return (violation.category.value, violation.bookie or "", -1 if segment is None else segment)


def report_key(violation: Violation) -> ReportKey:
    """The key of a reported row: the violation's key, severity and entry count."""
    count = -1 if violation.entries is None else violation.entries.count
    return (*violation_key(violation), violation.severity.value, count)


def needs_check(metadata: LedgerMetadata) -> bool:
    """Closed ledgers, and open ones whose ensemble changes sealed segments; the rest wait."""
    return metadata.state is LedgerState.CLOSED or len(metadata.segments) > 1


# ---------------------------------------------------------------------------------------------- events


def on_metadata(
    state: TrackedLedger | None,
    *,
    version: int,
    data: bytes,
    changed_ms: int | None,
    answers: Mapping[str, BookieAnswer] | None,
    now_ms: int,
    cluster: ClusterView,
    config: TrackerConfig,
    written_ms: int | None = None,
    decode_error: str = "",
    decoded: LedgerMetadata | None = None,
) -> Step:
    """A ledger's metadata was created or changed (``answers`` = its bookies', fetched for this version).

    ``answers`` None means none were fetched: the check is requested through ``Outcome.fetch``.
    ``changed_ms``: the change's time when it was seen live (for the detection latency); ``written_ms``: the
    metadata node's last modification, whatever the origin (for the write-cache rule of the verdict).
    ``data`` is the znode's bytes without the password (:mod:`scrutiny.core.metadata_redaction`), and
    ``decode_error`` why the znode's own bytes do not decode, when the reader said: bytes that cannot be searched for
    a password come empty, and ``METADATA_UNREADABLE`` then gives that error, not the one of the empty bytes.
    ``decoded``: ``data`` decoded, when the caller has it (decoded by :func:`decode_ledger_metadata` from these very
    bytes: it is taken as is).
    """
    state = state or TrackedLedger()
    if version < state.version or (version == state.version and (state.checked or state.retry_at_ms is not None)):
        return Step(state)
    fresh = replace(
        state,
        version=version,
        checked=False,
        metadata=data,
        changed_ms=changed_ms,
        attempts=0,
        written_ms=written_ms,
        retry_at_ms=None,
        reported=(),
    )
    try:
        metadata = decoded if decoded is not None else decode_ledger_metadata(data)
    except FormatError as error:
        unreadable = Violation(
            Category.METADATA_UNREADABLE,
            FIXED_SEVERITY[Category.METADATA_UNREADABLE],
            details=decode_error or str(error),
        )
        return _complete(
            replace(fresh, recovery_due_ms=None), None, (unreadable,), VerdictKind.VIOLATED, now_ms, asked=0
        )
    fresh = _recovering(fresh, metadata, now_ms=now_ms, config=config)
    ended = _ended(fresh, metadata, cluster)
    if ended:
        fresh = replace(fresh, open=_without(fresh.open, ended))
    if not needs_check(metadata):
        step = Step(replace(fresh, metadata=None, written_ms=None), Outcome(metadata=metadata, version=version))
    elif answers is None:
        step = Step(fresh, Outcome(metadata=metadata, fetch=_bookies(metadata), version=version))
    else:
        step = _judge(fresh, metadata, answers, now_ms=now_ms, cluster=cluster, config=config)
    if not ended:
        return step
    return Step(step.state, replace(step.outcome, resolved=(*step.outcome.resolved, *ended)))


def on_answers(
    state: TrackedLedger,
    *,
    version: int,
    answers: Mapping[str, BookieAnswer],
    now_ms: int,
    cluster: ClusterView,
    config: TrackerConfig,
) -> Step:
    """Answers fetched for ``version`` (after :attr:`Outcome.fetch`); stale ones are dropped."""
    if version != state.version or state.metadata is None or state.checked:
        return Step(state)
    metadata = decode_ledger_metadata(state.metadata)
    return _judge(state, metadata, answers, now_ms=now_ms, cluster=cluster, config=config)


def on_deleted(state: TrackedLedger | None) -> Step:
    """The ledger is gone: everything open is resolved and the ledger forgotten."""
    if state is None:
        return Step(None)
    return Step(None, Outcome(resolved=state.open, version=state.version))


def on_marked(state: TrackedLedger | None, mark: UnderReplicationMark, *, now_ms: int, config: TrackerConfig) -> Step:
    """Marked under-replicated: the stuck timer runs from the mark's ctime (or now, when it has none).

    Missing replicas already reported are checked again under the mark (replication is at work:
    only entries with no copy at all stay reported), so the order in which a ledger's metadata and
    its mark arrive does not matter.
    """
    state = state or TrackedLedger()
    started = mark.ctime_ms if mark.ctime_ms is not None else now_ms
    if state.mark is not None and state.mark.ctime_ms is None and mark.ctime_ms is None and state.stuck_at_ms:
        return Step(replace(state, mark=mark))  # unchanged mark without ctime: keep the first-seen clock
    stuck_key = _stuck_key()
    due = None if stuck_key in state.open else started + config.verdict.under_replication_grace_ms
    unmarked = tuple(k for k in state.open if k[0] == _NOT_MARKED)
    marked = replace(state, mark=mark, stuck_at_ms=due, open=tuple(k for k in state.open if k[0] != _NOT_MARKED))
    step = _recheck(marked) if any(key[0] in _REPLICA_CATEGORIES for key in state.open) else Step(marked)
    return Step(step.state, replace(step.outcome, resolved=unmarked)) if unmarked else step


def on_cleared(state: TrackedLedger | None) -> Step:
    """The under-replication mark is gone: a stuck report resolves, and the ledger is checked again."""
    if state is None:
        return Step(None)
    stuck = _stuck_key()
    resolved = (stuck,) if stuck in state.open else ()
    remaining = tuple(k for k in state.open if k != stuck)
    cleared = replace(state, mark=None, stuck_at_ms=None, open=remaining)
    step = _recheck(cleared)
    return Step(step.state, replace(step.outcome, resolved=resolved))


def with_confirmation(state: TrackedLedger | None, *, now_ms: int, config: TrackerConfig) -> TrackedLedger | None:
    """``state`` with its existence confirmation scheduled: while findings are open, one due every
    ``config.confirm_interval_ms`` (a future one is kept); none when nothing is open or the interval is 0."""
    if state is None:
        return None
    if not state.open or config.confirm_interval_ms <= 0:
        return state if state.confirm_at_ms is None else replace(state, confirm_at_ms=None)
    if state.confirm_at_ms is not None and state.confirm_at_ms > now_ms:
        return state
    return replace(state, confirm_at_ms=now_ms + config.confirm_interval_ms)


def with_reverify(
    state: TrackedLedger | None, *, group: int, now_ms: int, config: TrackerConfig
) -> TrackedLedger | None:
    """``state`` with its re-verification scheduled: a checked ledger without one gets the next due time of its
    ``group`` (:func:`scrutiny.core.reverify.next_reverify_ms`), a scheduled one keeps its time, a ledger not
    checked (a check pending, or nothing to check yet) has none; none at all when the interval is 0."""
    if state is None:
        return None
    if config.reverify_interval_ms <= 0 or not state.checked:
        return state if state.reverify_at_ms is None else replace(state, reverify_at_ms=None)
    if state.reverify_at_ms is not None:
        return state
    return replace(state, reverify_at_ms=next_reverify_ms(group, now_ms, config.reverify_interval_ms))


def on_timer(
    state: TrackedLedger, *, now_ms: int, config: TrackerConfig = TrackerConfig(), cluster: ClusterView | None = None
) -> Step:
    """Timers due at ``now_ms``: a stuck mark is reported; so is a lost bookie's ledger still neither marked nor
    re-replicated (unless ``cluster`` has the bookie registered again); a due retry asks for a fetch; a due
    re-verification asks for the znode (``Outcome.reread``), after reporting ``CHECK_OVERDUE`` when the last verified
    check is older than the interval plus the grace."""
    view = cluster or ClusterView()
    found = _not_marked(state, now_ms=now_ms, config=config, cluster=view)
    back = tuple(x for x in state.lost if x[1] <= now_ms and view.registered(x[0]))
    if found or back:
        state = replace(state, lost=tuple(x for x in state.lost if x not in back), open=_with_keys(state.open, found))
    if state.stuck_at_ms is not None and state.stuck_at_ms <= now_ms and state.mark is not None:
        stuck = Violation(
            Category.UNDER_REPLICATION_STUCK,
            FIXED_SEVERITY[Category.UNDER_REPLICATION_STUCK],
            details=_stuck_details(state.mark),
        )
        found += (stuck,)
        state = replace(state, stuck_at_ms=None, open=_with_keys(state.open, (stuck,)))
    due = state.recovery_due_ms
    if due is not None and due <= now_ms and _recovery_key() not in state.open:
        stalled = _recovery_stalled(due - config.recovery_stalled_ms, now_ms)
        found += (stalled,)
        state = replace(state, open=_with_keys(state.open, (stalled,)))
    fetch: tuple[str, ...] = ()
    metadata = None
    if state.retry_at_ms is not None and state.retry_at_ms <= now_ms and state.metadata is not None:
        metadata = decode_ledger_metadata(state.metadata)
        fetch = _bookies(metadata)
        state = replace(state, retry_at_ms=None, attempts=state.attempts + 1)
    reread = state.reverify_at_ms is not None and state.reverify_at_ms <= now_ms and not fetch
    if reread:
        overdue = _overdue(state, now_ms=now_ms, config=config)
        found += overdue
        state = replace(state, reverify_at_ms=None, open=_with_keys(state.open, overdue))
    return Step(state, Outcome(found=found, fetch=fetch, metadata=metadata, version=state.version, reread=reread))


def on_reread(
    state: TrackedLedger,
    *,
    version: int,
    data: bytes,
    written_ms: int | None,
    now_ms: int,
    cluster: ClusterView,
    config: TrackerConfig,
    answers: Mapping[str, BookieAnswer] | None = None,
    decode_error: str = "",
    decoded: LedgerMetadata | None = None,
) -> Step:
    """A re-verification's fresh read of the znode: a newer version is checked like a change, the same one is
    checked again (with ``answers`` when they were fetched for it, else they are asked for first); either way the
    check measures no detection latency. ``data``, ``decode_error`` and ``decoded`` as in :func:`on_metadata`."""
    if version == state.version:
        again = replace(state, checked=False, retry_at_ms=None, changed_ms=None)
    else:
        again = state if state.changed_ms is None else replace(state, changed_ms=None)
    return on_metadata(
        again,
        version=version,
        data=data,
        changed_ms=None,
        written_ms=written_ms,
        answers=answers,
        now_ms=now_ms,
        cluster=cluster,
        config=config,
        decode_error=decode_error,
        decoded=decoded,
    )


def on_recheck(
    state: TrackedLedger | None,
    *,
    why: LifecycleKind | None,
    bookie: str,
    version: int,
    data: bytes,
    written_ms: int | None,
    answers: Mapping[str, BookieAnswer] | None,
    now_ms: int,
    cluster: ClusterView,
    config: TrackerConfig,
    decode_error: str = "",
    decoded: LedgerMetadata | None = None,
) -> Step:
    """The watcher asks for the ledger to be checked again because of what happened to ``bookie`` (``why``; None: a
    plain check): checked like a re-verification (``data``, ``decode_error`` and ``decoded`` as in
    :func:`on_metadata`). Lost: the ledger must be marked or re-replicated within the grace (unless it is marked
    already). Back after a loss, or with a new cookie: the bookie's pending deadline and report go. Restarted: checked
    only if it waits for the bookie (see :func:`waits_for`), else left as it is."""
    if why is LifecycleKind.RESTARTED and (state is None or not waits_for(state, bookie)):
        return Step(state)
    step = on_reread(
        state or TrackedLedger(),
        version=version,
        data=data,
        written_ms=written_ms,
        now_ms=now_ms,
        cluster=cluster,
        config=config,
        answers=answers,
        decode_error=decode_error,
        decoded=decoded,
    )
    after = step.state
    if after is None or why not in (LifecycleKind.LOST, LifecycleKind.RETURNED, LifecycleKind.COOKIE_CHANGED):
        return step
    if why is LifecycleKind.LOST:
        metadata = step.outcome.metadata
        holds = metadata is not None and bookie in _checked_bookies(metadata)
        if holds and all(b != bookie for b, _ in after.lost):
            after = replace(after, lost=(*after.lost, (bookie, now_ms + config.mark_grace_ms)))
        stalled = None if metadata is None else _open_stalled(metadata, cluster)
        if stalled is None or _open_stalled_key() in after.open:
            return Step(after, step.outcome)
        after = replace(after, open=_with_keys(after.open, (stalled,)))
        return Step(after, replace(step.outcome, found=(*step.outcome.found, stalled)))
    key = _not_marked_key(bookie)
    resolved = (key,) if key in after.open else ()
    after = replace(after, lost=tuple(x for x in after.lost if x[0] != bookie), open=_without(after.open, resolved))
    return Step(after, replace(step.outcome, resolved=(*step.outcome.resolved, *resolved)))


def waits_for(state: TrackedLedger, bookie: str) -> bool:
    """Whether the ledger waits for ``bookie``'s answers: a finding that it did not answer (unresponsive, not
    registered), a retry pending, or ``CHECK_OVERDUE`` (its last verified check is old)."""
    unanswered = (
        Category.BOOKIE_UNRESPONSIVE.value,
        Category.BOOKIE_NOT_REGISTERED.value,
        Category.LEDGER_IN_LIMBO.value,
    )
    named = any(k[0] in unanswered and k[1] == bookie for k in state.open)
    return named or state.retry_at_ms is not None or _overdue_key() in state.open


def _not_marked(
    state: TrackedLedger, *, now_ms: int, config: TrackerConfig, cluster: ClusterView
) -> tuple[Violation, ...]:
    """``UNDER_REPLICATION_NOT_MARKED`` for each lost bookie whose deadline passed with no mark (and no return)."""
    found: list[Violation] = []
    for bookie, due in state.lost:
        if due > now_ms or state.mark is not None or cluster.registered(bookie):
            continue
        if _not_marked_key(bookie) in state.open:
            continue
        details = (
            f"bookie {bookie} is lost and this ledger, with it in an ensemble, is neither marked under-replicated nor "
            f"re-replicated {config.mark_grace_ms // 1000} s later: auto-recovery is not repairing it"
        )
        found.append(
            Violation(Category.UNDER_REPLICATION_NOT_MARKED, _CRITICAL_NOT_MARKED, bookie=bookie, details=details)
        )
    return tuple(found)


def _overdue(state: TrackedLedger, *, now_ms: int, config: TrackerConfig) -> tuple[Violation, ...]:
    """``CHECK_OVERDUE`` when the last verified check is older than the interval plus the grace (not yet open)."""
    if state.verified_ms is None or config.reverify_interval_ms <= 0 or _overdue_key() in state.open:
        return ()
    late_ms = now_ms - state.verified_ms - config.reverify_interval_ms - config.overdue_grace_ms
    if late_ms <= 0:
        return ()
    details = (
        f"last verified {format_utc_ms(state.verified_ms)}: older than the re-verification interval "
        f"({config.reverify_interval_ms // 1000} s) plus the grace ({config.overdue_grace_ms // 1000} s)"
    )
    return (Violation(Category.CHECK_OVERDUE, FIXED_SEVERITY[Category.CHECK_OVERDUE], details=details),)


# ---------------------------------------------------------------------------------------------- judging


def _judge(
    state: TrackedLedger,
    metadata: LedgerMetadata,
    answers: Mapping[str, BookieAnswer],
    *,
    now_ms: int,
    cluster: ClusterView,
    config: TrackerConfig,
) -> Step:
    verdict = compute_verdict(
        metadata,
        answers,
        now_ms=now_ms,
        config=config.verdict,
        cluster=cluster,
        under_replication=None if state.mark is None else replace(state.mark, ctime_ms=None),
        written_ms=state.written_ms,
    )
    limbo = _in_limbo_since(state.limbo, answers, _bookies(metadata), now_ms)
    if limbo != state.limbo:
        state = replace(state, limbo=limbo)
    found = _not_stuck(verdict)
    asked = len(_bookies(metadata))
    if verdict.retry_bookies and state.attempts < config.retry.max_retries:
        retry_at = max(now_ms + config.retry.delay_ms(state.attempts), verdict.settles_at_ms or 0)
        new = _unreported(state, found)
        pending = replace(
            state,
            retry_at_ms=retry_at,
            open=_with_keys(state.open, found),
            reported=tuple(dict.fromkeys((*state.reported, *(report_key(v) for v in new)))),
        )
        return Step(pending, Outcome(found=new, metadata=metadata, version=state.version))
    found += _unanswered(verdict, cluster, found, answers, limbo_since=dict(state.limbo), now_ms=now_ms)
    kind = VerdictKind.VIOLATED if found else verdict.verdict
    return _complete(state, metadata, found, kind, now_ms, asked=asked, verified=not verdict.retry_bookies)


def _complete(
    state: TrackedLedger,
    metadata: LedgerMetadata | None,
    found: tuple[Violation, ...],
    kind: VerdictKind,
    now_ms: int,
    *,
    asked: int,
    verified: bool = True,
) -> Step:
    """A finished check: the open set becomes what it found (plus a stuck report, which marks govern, and an
    overdue one, which only a verified check resolves)."""
    keys = {violation_key(v) for v in found}
    kept = {_stuck_key()} if verified else {_stuck_key(), _overdue_key()}
    if state.recovery_due_ms is not None:
        kept.add(_recovery_key())  # a timer, not a check, decides it; the recovery's end resolves it
    kept.add(_open_stalled_key())  # a bookie's loss decides it; a new version or a return may resolve it (_ended)
    named = {k[1] for k in state.open if k[0] == _NOT_MARKED} | {b for b, _ in state.lost}
    holding = set(_bookies(metadata)) if metadata is not None else named
    kept |= {k for k in state.open if k[0] == _NOT_MARKED and k[1] in holding}
    if any(x[0] not in holding for x in state.lost):
        state = replace(state, lost=tuple(x for x in state.lost if x[0] in holding))
    resolved = tuple(k for k in state.open if k not in keys and k not in kept)
    still = tuple(k for k in state.open if k in kept and k not in keys)
    latency = None if state.changed_ms is None else max(0, now_ms - state.changed_ms)
    check = Check(
        verdict=kind,
        state=metadata.state if metadata is not None else LedgerState.OPEN,
        bookies_asked=asked,
        retries=state.attempts,
        latency_ms=latency,
        violation_count=len(found),
    )
    now_open = _with_keys(still, found)
    keep = state.metadata if metadata is not None and (now_open or state.mark is not None) else None
    done = replace(
        state,
        checked=True,
        metadata=keep,
        retry_at_ms=None,
        open=now_open,
        reported=(),
        written_ms=state.written_ms if keep is not None else None,
        verified_ms=now_ms if verified else state.verified_ms,
    )
    outcome = Outcome(
        found=_unreported(state, found), resolved=resolved, check=check, metadata=metadata, version=state.version
    )
    return Step(done, outcome)


def _unreported(state: TrackedLedger, found: tuple[Violation, ...]) -> tuple[Violation, ...]:
    """``found`` without what an incomplete check of the same version reported already, as it was."""
    return tuple(v for v in found if report_key(v) not in state.reported)


def _recheck(state: TrackedLedger) -> Step:
    """Check the current version again (its answers are fetched first), e.g. when a mark comes or goes."""
    if not state.checked or state.metadata is None:
        return Step(state)
    metadata = decode_ledger_metadata(state.metadata)
    rechecking = replace(state, checked=False, attempts=0, retry_at_ms=None, reported=())
    return Step(rechecking, Outcome(metadata=metadata, fetch=_bookies(metadata), version=state.version))


def _not_stuck(verdict: Verdict) -> tuple[Violation, ...]:
    """The verdict's findings without a stuck report: the tracker's own timer decides that one."""
    return tuple(v for v in verdict.violations if v.category is not Category.UNDER_REPLICATION_STUCK)


def _in_limbo_since(
    previous: tuple[tuple[str, int], ...],
    answers: Mapping[str, BookieAnswer],
    ensemble: tuple[str, ...],
    now_ms: int,
) -> tuple[tuple[str, int], ...]:
    """Each bookie in limbo with its first limbo answer: kept while it answers limbo (or is not asked), dropped once
    it answers anything else or is in no ensemble of the ledger any more."""
    since = dict(previous)
    kept = {b: t for b, t in since.items() if b not in answers and b in ensemble}
    kept |= {b: since.get(b, now_ms) for b, a in answers.items() if a.limbo}
    return tuple(sorted(kept.items()))


def _unanswered(
    verdict: Verdict,
    cluster: ClusterView,
    found: tuple[Violation, ...],
    answers: Mapping[str, BookieAnswer],
    *,
    limbo_since: Mapping[str, int],
    now_ms: int,
) -> tuple[Violation, ...]:
    """After the last retry: each bookie without a usable answer, by what it said (the ledger in limbo: it answers,
    and for how long) and whether it is still registered; the last answer's reason is in the details."""
    reported = {v.bookie for v in found if v.category is Category.BOOKIE_NOT_REGISTERED}
    out: list[Violation] = []
    for bookie in verdict.retry_bookies:
        answer = answers.get(bookie)
        said = f" (last answer: {answer.reason})" if answer is not None and answer.reason else ""
        if answer is not None and answer.limbo:
            category = Category.LEDGER_IN_LIMBO
            since = limbo_since.get(bookie, now_ms)
            details = (
                f"the bookie answers that the ledger is in limbo on it, for {format_duration_ms(now_ms - since)} (since"
                f" {format_utc_ms(since)}) and still after the retries{said}: it may have lost entries in an unclean"
                " shutdown (BP-46), and its copies count for nothing until the limbo clears"
            )
        elif cluster.registered(bookie):
            category = Category.BOOKIE_UNRESPONSIVE
            details = f"no usable answer after the retries; the bookie is still registered{said}"
        elif bookie in reported:
            continue
        else:
            category = Category.BOOKIE_NOT_REGISTERED
            details = f"no answer after the retries, and the bookie is no longer registered{said}"
        out.append(Violation(category, FIXED_SEVERITY[category], bookie=bookie, details=details))
    return tuple(out)


def _bookies(metadata: LedgerMetadata) -> tuple[str, ...]:
    """Every bookie of every segment, in first-seen order."""
    return tuple(dict.fromkeys(b for segment in metadata.segments for b in segment.ensemble))


def _with_keys(open_keys: tuple[ViolationKey, ...], found: tuple[Violation, ...]) -> tuple[ViolationKey, ...]:
    return tuple(dict.fromkeys((*open_keys, *(violation_key(v) for v in found))))


def _stuck_key() -> ViolationKey:
    return (Category.UNDER_REPLICATION_STUCK.value, "", -1)


def stalled_recovery(
    metadata: LedgerMetadata, *, written_ms: int | None, now_ms: int, config: TrackerConfig
) -> Violation | None:
    """``RECOVERY_STALLED`` from one reading of the metadata (a scan's): in recovery, its node last written at
    least the grace ago (the first version in recovery was written earlier still)."""
    if metadata.state is not LedgerState.IN_RECOVERY or written_ms is None or config.recovery_stalled_ms <= 0:
        return None
    if now_ms < written_ms + config.recovery_stalled_ms:
        return None
    return _recovery_stalled(written_ms, now_ms)


def _recovery_stalled(since_ms: int, now_ms: int) -> Violation:
    return Violation(
        Category.RECOVERY_STALLED,
        FIXED_SEVERITY[Category.RECOVERY_STALLED],
        details=(
            f"in recovery since {format_utc_ms(since_ms)} ({(now_ms - since_ms) // 1000} s): the recovery that "
            "should close it has not finished, and its readers and writer wait"
        ),
    )


def stalled_open_ledger(
    metadata: LedgerMetadata, cluster: ClusterView, lost_bookies: frozenset[str]
) -> Violation | None:
    """``OPEN_LEDGER_STALLED`` from one reading of the metadata (a scan's): open, fewer than AQ bookies of its current
    ensemble registered, and one of those not registered declared lost (an open ``BOOKIE_LOST``: gone past the
    watcher's grace, the same grace the streaming job's rule waits for). Without such a declaration nobody can tell
    from one reading how long the writer has been stuck, and nothing is reported."""
    stalled = _open_stalled(metadata, cluster)
    if stalled is None:
        return None
    lost = [b for b in metadata.segments[-1].ensemble if b in lost_bookies and not cluster.registered(b)]
    if not lost:
        return None
    return replace(stalled, details=f"{stalled.details}; declared lost (BOOKIE_LOST): {', '.join(lost)}")


def open_stall_ended(metadata: LedgerMetadata, cluster: ClusterView) -> bool:
    """Whether a reading of the metadata ends an open ``OPEN_LEDGER_STALLED``: no longer open, or enough of its current
    ensemble registered."""
    return _open_stalled(metadata, cluster) is None


def _open_stalled_key() -> ViolationKey:
    return (Category.OPEN_LEDGER_STALLED.value, "", -1)


def _open_stalled(metadata: LedgerMetadata, cluster: ClusterView) -> Violation | None:
    """``OPEN_LEDGER_STALLED`` when the ledger is open and fewer than AQ bookies of its current ensemble are
    registered: its writer cannot add an entry."""
    if metadata.state is not LedgerState.OPEN or not metadata.segments:
        return None
    current = metadata.segments[-1]
    up = [b for b in current.ensemble if cluster.registered(b)]
    if len(up) >= metadata.ack_quorum:
        return None
    return Violation(
        Category.OPEN_LEDGER_STALLED,
        FIXED_SEVERITY[Category.OPEN_LEDGER_STALLED],
        details=(
            f"open, and {len(up)} of the {len(current.ensemble)} bookies of its current ensemble (from entry "
            f"{current.first_entry_id}) are registered, fewer than AQ = {metadata.ack_quorum}: its writer cannot add "
            "an entry, and no recovery closed the ledger"
        ),
    )


def _ended(state: TrackedLedger, metadata: LedgerMetadata, cluster: ClusterView) -> tuple[ViolationKey, ...]:
    """The open findings a new reading of the metadata ends: a recovery over, a writer no longer stalled."""
    ended = []
    if state.recovery_due_ms is None and _recovery_key() in state.open:
        ended.append(_recovery_key())
    if _open_stalled_key() in state.open and _open_stalled(metadata, cluster) is None:
        ended.append(_open_stalled_key())
    return tuple(ended)


def _checked_bookies(metadata: LedgerMetadata) -> tuple[str, ...]:
    """The bookies of the segments a check judges: every segment of a closed ledger, the sealed ones of another."""
    segments = metadata.segments if metadata.state is LedgerState.CLOSED else metadata.segments[:-1]
    return tuple(dict.fromkeys(b for segment in segments for b in segment.ensemble))


def _recovery_key() -> ViolationKey:
    return (Category.RECOVERY_STALLED.value, "", -1)


def _recovering(state: TrackedLedger, metadata: LedgerMetadata, *, now_ms: int, config: TrackerConfig) -> TrackedLedger:
    """``state`` with its recovery deadline: kept while the ledger stays ``IN_RECOVERY`` (counted from the first such
    version's write), none otherwise."""
    if metadata.state is not LedgerState.IN_RECOVERY or config.recovery_stalled_ms <= 0:
        return replace(state, recovery_due_ms=None) if state.recovery_due_ms is not None else state
    if state.recovery_due_ms is not None:
        return state
    began = state.written_ms if state.written_ms is not None else now_ms
    return replace(state, recovery_due_ms=began + config.recovery_stalled_ms)


def _overdue_key() -> ViolationKey:
    return (Category.CHECK_OVERDUE.value, "", -1)


def _not_marked_key(bookie: str) -> ViolationKey:
    return (_NOT_MARKED, bookie, -1)


def _without(open_keys: tuple[ViolationKey, ...], gone: tuple[ViolationKey, ...]) -> tuple[ViolationKey, ...]:
    return tuple(k for k in open_keys if k not in gone)


def _stuck_details(mark: UnderReplicationMark) -> str:
    since = "its first sighting" if mark.ctime_ms is None else format_utc_ms(mark.ctime_ms)
    replicas = ", ".join(mark.replicas) or "none named"
    return f"marked under-replicated (missing replicas: {replicas}) since {since}, longer than the grace period"
