"""BookKeeper's auto-recovery judged (``AUTORECOVERY_DISABLED``, ``NO_AUDITOR``) and its findings kept at the cluster
level, beside ``BOOKIE_LOST``; a property test follows a simple reference through any sequence of judgements."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.autorecovery_health import (
    AutoRecoveryHealth,
    AutoRecoveryObservation,
    AutoRecoveryRules,
    autorecovery_key,
    judge,
    on_autorecovery_health,
    scan_warnings,
)
from scrutiny.core.bookie_findings import lost_key, on_bookie_lost, on_bookie_registered
from scrutiny.core.ledger_tracker import Outcome, TrackedLedger
from scrutiny.core.vocabulary import Category, Severity

pytestmark = pytest.mark.unit

RULES = AutoRecoveryRules(disabled_critical_ms=3_600_000, auditor_expected=True, no_auditor_grace_ms=300_000)
DISABLED = autorecovery_key(Category.AUTORECOVERY_DISABLED)
NO_AUDITOR = autorecovery_key(Category.NO_AUDITOR)
AUDITOR = "bk1:3181"


def at(
    now_ms: int, *, disabled: int | None = None, auditor: str | None = AUDITOR, absent: int | None = None
) -> AutoRecoveryHealth:
    """The judgement at ``now_ms`` of an observation."""
    observed = AutoRecoveryObservation(disabled_since_ms=disabled, auditor=auditor)
    return judge(observed, absent_since_ms=absent, now_ms=now_ms, rules=RULES)


def test_disabled_is_a_warning_then_critical_strictly_past_the_grace() -> None:
    assert at(1_000, disabled=1_000) == AutoRecoveryHealth(disabled_since_ms=1_000, auditor=AUDITOR)
    assert not at(3_601_000, disabled=1_000).disabled_critical
    assert at(3_601_001, disabled=1_000).disabled_critical
    assert at(5_000) == AutoRecoveryHealth(auditor=AUDITOR)


def test_no_auditor_is_unsettled_within_the_grace_and_found_past_it() -> None:
    first = at(10_000, auditor=None)  # the watcher's first look without a vote starts its clock
    assert first.no_auditor_since_ms == 10_000 and first.auditor_unsettled and not first.no_auditor
    assert at(310_000, auditor=None, absent=10_000).auditor_unsettled
    past = at(310_001, auditor=None, absent=10_000)
    assert past.no_auditor and not past.auditor_unsettled and past.no_auditor_since_ms == 10_000
    assert at(310_001, auditor="", absent=10_000) == AutoRecoveryHealth(auditor="")  # a vote naming nobody is a vote


def test_a_cluster_without_autorecovery_is_never_short_of_an_auditor() -> None:
    rules = AutoRecoveryRules(auditor_expected=False, no_auditor_grace_ms=0)
    health = judge(AutoRecoveryObservation(), absent_since_ms=0, now_ms=10**9, rules=rules)
    assert not health.no_auditor and not health.auditor_unsettled


def test_disabled_opens_a_warning_turns_critical_once_and_resolves() -> None:
    step = on_autorecovery_health(None, at(1_000, disabled=1_000))
    (warning,) = step.outcome.found
    assert (warning.category, warning.severity, warning.bookie) == (
        Category.AUTORECOVERY_DISABLED,
        Severity.WARNING,
        None,
    )
    assert "disabled since 1970-01-01" in warning.details and step.state is not None and step.state.open == (DISABLED,)
    again = on_autorecovery_health(step.state, at(2_000, disabled=1_000))
    assert again.outcome.found == () and again.state == step.state  # the same judgement: nothing written
    critical = on_autorecovery_health(again.state, at(3_601_001, disabled=1_000))
    assert [v.severity for v in critical.outcome.found] == [Severity.CRITICAL]
    assert critical.outcome.resolved == ()
    enabled = on_autorecovery_health(critical.state, at(3_700_000))
    assert enabled.outcome.resolved == (DISABLED,) and enabled.state is None


def test_an_open_no_auditor_stays_while_a_restarted_watcher_counts_again_and_resolves_on_a_vote() -> None:
    found = on_autorecovery_health(None, at(310_001, auditor=None, absent=10_000))
    assert [v.category for v in found.outcome.found] == [Category.NO_AUDITOR]
    restarted = on_autorecovery_health(found.state, at(400_000, auditor=None))  # a new watcher's clock: unsettled
    assert restarted.outcome == Outcome() and restarted.state == found.state
    voted = on_autorecovery_health(restarted.state, at(401_000))
    assert voted.outcome.resolved == (NO_AUDITOR,) and voted.state is None
    unsettled = on_autorecovery_health(None, at(401_000, auditor=None))  # nothing open: nothing opened
    assert unsettled.outcome.found == () and unsettled.state is None


def test_the_auditor_expected_no_more_resolves_an_open_no_auditor() -> None:
    found = on_autorecovery_health(None, at(310_001, auditor=None, absent=10_000))
    rules = AutoRecoveryRules(auditor_expected=False)
    health = judge(AutoRecoveryObservation(), absent_since_ms=10_000, now_ms=400_000, rules=rules)
    assert on_autorecovery_health(found.state, health).outcome.resolved == (NO_AUDITOR,)


def test_bookie_lost_and_autorecovery_findings_share_the_cluster_state_without_touching_each_other() -> None:
    lost = on_bookie_lost(None, "bk2:3181", unregistered_ms=0, ledgers=1, entries=5)
    disabled = on_autorecovery_health(lost.state, at(1_000, disabled=1_000))
    assert disabled.state is not None and set(disabled.state.open) == {lost_key("bk2:3181"), DISABLED}
    back = on_bookie_registered(disabled.state, "bk2:3181")
    assert back.outcome.resolved == (lost_key("bk2:3181"),) and back.state is not None
    assert back.state.open == (DISABLED,)
    enabled = on_autorecovery_health(back.state, at(2_000))
    assert enabled.outcome.resolved == (DISABLED,) and enabled.state is None
    kept = on_autorecovery_health(lost.state, at(2_000))
    assert kept.outcome == Outcome() and kept.state == lost.state  # BOOKIE_LOST left alone


def test_a_scan_tells_of_what_it_saw_once() -> None:
    disabled = scan_warnings(AutoRecoveryObservation(disabled_since_ms=0, auditor=AUDITOR), auditor_expected=True)
    assert [w.split(" since ")[0] for w in disabled] == ["BookKeeper's auto-recovery is disabled"]
    no_vote = scan_warnings(AutoRecoveryObservation(), auditor_expected=True)
    assert [w[:21] for w in no_vote] == ["no auditor is elected"]
    assert scan_warnings(AutoRecoveryObservation(), auditor_expected=False) == []
    assert scan_warnings(AutoRecoveryObservation(auditor=""), auditor_expected=True) == []


@st.composite
def judgements(draw: st.DrawFn) -> AutoRecoveryHealth:
    disabled = draw(st.none() | st.just(1_000))
    voted = draw(st.booleans())
    no_auditor, unsettled = (
        (False, False) if voted else draw(st.sampled_from([(True, False), (False, True), (False, False)]))
    )
    return AutoRecoveryHealth(
        disabled_since_ms=disabled,
        disabled_critical=disabled is not None and draw(st.booleans()),
        auditor=AUDITOR if voted else None,
        no_auditor_since_ms=None if voted else 5,
        no_auditor=no_auditor,
        auditor_unsettled=unsettled,
    )


@given(st.lists(judgements(), max_size=12))
def test_any_sequence_of_judgements_keeps_what_a_simple_reference_keeps(sequence: list[AutoRecoveryHealth]) -> None:
    state: TrackedLedger | None = None
    open_now: dict[tuple[str, str, int], Severity] = {}  # the reference: what the tables hold open
    for health in sequence:
        step = on_autorecovery_health(state, health)
        for key in step.outcome.resolved:
            del open_now[key]
        for violation in step.outcome.found:
            key = autorecovery_key(violation.category)
            assert open_now.get(key) != violation.severity  # a row only for something new
            open_now[key] = violation.severity
        expected: dict[tuple[str, str, int], Severity] = {}
        if health.disabled_since_ms is not None:
            expected[DISABLED] = Severity.CRITICAL if health.disabled_critical else Severity.WARNING
        if health.no_auditor or (health.auditor_unsettled and NO_AUDITOR in open_now):
            expected[NO_AUDITOR] = Severity.WARNING
        assert open_now == expected
        state = step.state
        assert set(state.open if state else ()) == set(expected)
        if state is not None:
            assert TrackedLedger.from_bytes(state.to_bytes()) == state  # it survives the state store
