"""The health of BookKeeper's own auto-recovery: ``AUTORECOVERY_DISABLED`` and ``NO_AUDITOR``. Pure, no I/O.

BookKeeper's Auditor marks the ledgers of a lost bookie under-replicated and its ReplicationWorkers copy them back;
an operator switches both off by creating ``<root>/underreplication/disable``, and the Auditor is whichever
AutoRecovery process holds the lowest vote under ``<root>/underreplication/auditorelection``. Scrutiny checks that
checker:

* the watcher observes both nodes (:class:`AutoRecoveryObservation`) and judges them with the settings' graces
  (:func:`judge`): disabled, and for how long; an auditor elected, or none for how long;
* the streaming job opens, changes and resolves the two cluster-level findings from that judgement
  (:func:`on_autorecovery_health`), kept in the cluster-level :class:`~scrutiny.core.ledger_tracker.TrackedLedger`
  beside ``BOOKIE_LOST`` (open keys ``(category, "", -1)``).

``AUTORECOVERY_DISABLED`` is a warning while the node exists and critical once it is older than its grace (its
``ctime`` says since when, so a restarted watcher knows). ``NO_AUDITOR`` is a warning once no vote has existed for
longer than its grace; ZooKeeper keeps no time of a vote's disappearance, so the watcher's clock starts when it first
sees none (a restarted watcher starts it again). While that clock runs the absence is *unsettled*: an open
``NO_AUDITOR`` stays open, none is opened; only a vote seen resolves it (or a cluster said to run no AutoRecovery).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scrutiny.core.ledger_tracker import Outcome, Step, TrackedLedger, ViolationKey, report_key, violation_key
from scrutiny.core.utc_text import format_utc_ms
from scrutiny.core.verdict import Violation
from scrutiny.core.vocabulary import Category, Severity

_DISABLED = Category.AUTORECOVERY_DISABLED
_NO_AUDITOR = Category.NO_AUDITOR
_CATEGORIES = frozenset({_DISABLED.value, _NO_AUDITOR.value})


@dataclass(frozen=True, slots=True)
class AutoRecoveryRules:
    """The settings the judgement follows (``[watcher]``)."""

    #: ``AUTORECOVERY_DISABLED`` turns critical once the ``disable`` node is older than this.
    disabled_critical_ms: int = 3_600_000
    #: Whether the cluster runs AutoRecovery at all (False: ``NO_AUDITOR`` is never reported).
    auditor_expected: bool = True
    #: ``NO_AUDITOR`` once no vote has existed for longer than this.
    no_auditor_grace_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class AutoRecoveryObservation:
    """What ZooKeeper shows of auto-recovery at one moment."""

    #: The ``disable`` node's creation time (None: the node does not exist, auto-recovery is on).
    disabled_since_ms: int | None = None
    #: The elected auditor: the bookie id in the lowest vote (None: no vote; "" : a vote naming no bookie).
    auditor: str | None = None


@dataclass(frozen=True, slots=True)
class AutoRecoveryHealth:
    """The watcher's judgement, as its ``AUTORECOVERY_HEALTH`` event carries it."""

    disabled_since_ms: int | None = None
    #: Disabled for longer than the grace.
    disabled_critical: bool = False
    auditor: str | None = None
    #: Since when the watcher has seen no vote (None: a vote exists).
    no_auditor_since_ms: int | None = None
    #: No vote for longer than the grace, and an auditor expected: ``NO_AUDITOR``.
    no_auditor: bool = False
    #: No vote, the grace still running: an open ``NO_AUDITOR`` is kept, none is opened.
    auditor_unsettled: bool = False


def judge(
    observed: AutoRecoveryObservation, *, absent_since_ms: int | None, now_ms: int, rules: AutoRecoveryRules
) -> AutoRecoveryHealth:
    """The health of ``observed`` at ``now_ms``; ``absent_since_ms``: when the watcher first saw no vote (ignored when
    a vote exists)."""
    disabled = observed.disabled_since_ms
    critical = disabled is not None and now_ms - disabled > rules.disabled_critical_ms
    if observed.auditor is not None:
        return AutoRecoveryHealth(disabled, critical, observed.auditor)
    since = now_ms if absent_since_ms is None else absent_since_ms
    past_grace = now_ms - since > rules.no_auditor_grace_ms
    return AutoRecoveryHealth(
        disabled,
        critical,
        None,
        no_auditor_since_ms=since,
        no_auditor=rules.auditor_expected and past_grace,
        auditor_unsettled=rules.auditor_expected and not past_grace,
    )


def findings_of(health: AutoRecoveryHealth) -> tuple[Violation, ...]:
    """The findings ``health`` opens (a disabled auto-recovery, no auditor past the grace)."""
    found: list[Violation] = []
    if health.disabled_since_ms is not None:
        severity = Severity.CRITICAL if health.disabled_critical else Severity.WARNING
        since = format_utc_ms(health.disabled_since_ms)
        details = (
            f"auto-recovery disabled since {since} (underreplication/disable exists): the Auditor marks nothing and "
            "no ledger is re-replicated until it is enabled again"
        )
        found.append(Violation(_DISABLED, severity, details=details))
    if health.no_auditor and health.no_auditor_since_ms is not None:
        details = (
            f"no auditor elected since {format_utc_ms(health.no_auditor_since_ms)} (no vote under "
            "underreplication/auditorelection): no AutoRecovery process runs, so lost bookies' ledgers are not marked"
        )
        found.append(Violation(_NO_AUDITOR, Severity.WARNING, details=details))
    return tuple(found)


def scan_warnings(observed: AutoRecoveryObservation, *, auditor_expected: bool) -> list[str]:
    """What a scan says of auto-recovery as it saw it once: it reports no cluster-level finding (those are the
    streaming job's, which watches them over time), but an operator reading its summary is told."""
    said = []
    if observed.disabled_since_ms is not None:
        said.append(
            f"BookKeeper's auto-recovery is disabled since {format_utc_ms(observed.disabled_since_ms)} "
            "(underreplication/disable exists): no ledger is marked or re-replicated (AUTORECOVERY_DISABLED)"
        )
    if observed.auditor is None and auditor_expected:
        said.append("no auditor is elected (no vote under underreplication/auditorelection): see NO_AUDITOR")
    return said


def autorecovery_key(category: Category) -> ViolationKey:
    """The open key of one of the two cluster-level auto-recovery findings."""
    return (category.value, "", -1)


def on_autorecovery_health(state: TrackedLedger | None, health: AutoRecoveryHealth) -> Step:
    """The watcher's judgement applied to the cluster-level findings: what it finds is opened, or reported again when
    its severity changed; what it no longer finds resolves, but for an unsettled absence of the auditor."""
    state = state or TrackedLedger()
    found = findings_of(health)
    wanted = {violation_key(v) for v in found}
    if health.auditor_unsettled and autorecovery_key(_NO_AUDITOR) in state.open:
        wanted.add(autorecovery_key(_NO_AUDITOR))
    resolved = tuple(k for k in state.open if k[0] in _CATEGORIES and k not in wanted)
    previous = {r[:3]: r for r in state.reported if r[0] in _CATEGORIES}
    new = tuple(v for v in found if previous.get(violation_key(v)) != report_key(v))
    reports = {k: r for k, r in previous.items() if k in wanted} | {violation_key(v): report_key(v) for v in found}
    after = replace(
        state,
        open=tuple(dict.fromkeys((*(k for k in state.open if k not in resolved), *wanted))),
        reported=(*(r for r in state.reported if r[0] not in _CATEGORIES), *reports.values()),
    )
    return Step(None if after == TrackedLedger() else after, Outcome(found=new, resolved=resolved))
