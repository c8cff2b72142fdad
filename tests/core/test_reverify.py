"""The rolling re-verification: its schedule, and how the tracker re-checks, reports and resolves CHECK_OVERDUE."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.ledger_tracker import (
    Step,
    TrackedLedger,
    on_answers,
    on_reread,
    on_timer,
    with_reverify,
)
from scrutiny.core.reverify import next_reverify_ms, phase_ms
from scrutiny.core.verdict import BookieAnswer, VerdictKind
from scrutiny.core.vocabulary import Category
from tests.core.test_ledger_tracker import BOOKIES, CLUSTER, CONFIG, blob, changed, healthy

pytestmark = pytest.mark.unit

DAY = 86_400_000
REVERIFY = replace(CONFIG, reverify_interval_ms=7 * DAY, overdue_grace_ms=DAY)


@given(st.integers(0, 2**62), st.integers(0, 2**50), st.integers(1, 2**40))
def test_the_next_reverification_is_strictly_after_and_within_one_interval(
    group: int, after: int, interval: int
) -> None:
    due = next_reverify_ms(group, after, interval)
    assert after < due <= after + interval
    assert (due - phase_ms(group, interval)) % interval == 0  # always at the group's phase


@given(st.integers(0, 2**40), st.integers(2, 64))
def test_consecutive_groups_spread_evenly_over_the_interval(first: int, slots: int) -> None:
    """Any run of consecutive groups (ledger ids come in sequence) fills equal slices of the interval evenly:
    no slice holds more than twice its share (plus one), where a random choice would often exceed that."""
    interval, count = 7 * DAY, 64 * slots
    per_slot = [0] * slots
    for group in range(first, first + count):
        per_slot[phase_ms(group, interval) * slots // interval] += 1
    assert max(per_slot) <= 2 * (count // slots) + 1
    assert min(per_slot) >= (count // slots) // 2 - 1


def checked_at(now_ms: int) -> TrackedLedger:
    """A healthy closed ledger verified at ``now_ms`` and scheduled for its re-verification."""
    step = changed(None, 3, healthy())
    assert step.state is not None
    state = replace(step.state, verified_ms=now_ms)
    scheduled = with_reverify(state, group=5, now_ms=now_ms, config=REVERIFY)
    assert scheduled is not None
    return scheduled


def test_a_checked_ledger_is_scheduled_within_the_interval_and_an_unchecked_one_is_not() -> None:
    state = checked_at(DAY)
    assert state.reverify_at_ms is not None and DAY < state.reverify_at_ms <= 8 * DAY
    assert state.reverify_at_ms in state.timers() and not state.watched()
    assert with_reverify(state, group=5, now_ms=2 * DAY, config=REVERIFY) == state  # a scheduled time is kept
    pending = changed(None, 3, None).state
    assert with_reverify(pending, group=5, now_ms=DAY, config=REVERIFY) == pending  # a check pending: none
    assert with_reverify(state, group=5, now_ms=DAY, config=CONFIG).reverify_at_ms is None  # type: ignore[union-attr]


def reverified(state: TrackedLedger, now_ms: int, answers: dict[str, BookieAnswer], version: int = 3) -> Step:
    """The due timer, the fresh read of the znode (``version``) and the bookies' answers."""
    timed = on_timer(state, now_ms=now_ms, config=REVERIFY)
    assert timed.outcome.reread and timed.state is not None and timed.state.reverify_at_ms is None
    reread = on_reread(
        timed.state, version=version, data=blob(), written_ms=0, now_ms=now_ms, cluster=CLUSTER, config=REVERIFY
    )
    assert reread.outcome.fetch == BOOKIES and reread.state is not None
    done = on_answers(reread.state, version=version, answers=answers, now_ms=now_ms, cluster=CLUSTER, config=REVERIFY)
    return Step(done.state, replace(done.outcome, found=timed.outcome.found + done.outcome.found))


def test_a_reverification_on_time_rechecks_the_ledger_and_finds_what_was_lost_since() -> None:
    state = checked_at(DAY)
    assert state.reverify_at_ms is not None
    wiped = healthy()
    wiped["b2:3181"] = BookieAnswer.no_ledger()
    step = reverified(state, state.reverify_at_ms, wiped)
    assert Category.MISSING_REPLICA in {v.category for v in step.outcome.found}
    assert Category.CHECK_OVERDUE not in {v.category for v in step.outcome.found}
    assert step.outcome.check is not None and step.outcome.check.latency_ms is None  # no detection latency
    assert step.state is not None and step.state.verified_ms == state.reverify_at_ms


def test_a_late_reverification_is_overdue_until_a_verified_check_resolves_it() -> None:
    state = checked_at(DAY)
    late = DAY + 7 * DAY + DAY + 1  # the job stopped longer than the interval plus the grace
    silent = dict.fromkeys(BOOKIES, BookieAnswer.unknown("timeout"))
    retried = reverified(state, late, silent)
    assert [v.category for v in retried.outcome.found] == [Category.CHECK_OVERDUE]
    # The retries run out unanswered: the check completes unverified and the overdue report stays open.
    assert retried.state is not None
    unanswered = replace(retried.state, attempts=CONFIG.retry.max_retries)
    done = on_answers(unanswered, version=3, answers=silent, now_ms=late + 1, cluster=CLUSTER, config=REVERIFY)
    assert done.state is not None and (Category.CHECK_OVERDUE.value, "", -1) in done.state.open
    assert done.state.verified_ms == DAY and done.outcome.resolved == ()
    # The next on-time timer does not report it again; a verified check resolves it.
    again = with_reverify(done.state, group=5, now_ms=late + 1, config=REVERIFY)
    assert again is not None and again.reverify_at_ms is not None
    healed = reverified(again, again.reverify_at_ms, healthy())
    assert Category.CHECK_OVERDUE not in {v.category for v in healed.outcome.found}
    assert {key[0] for key in healed.outcome.resolved} == {"CHECK_OVERDUE", "BOOKIE_UNRESPONSIVE"}
    assert healed.outcome.check is not None and healed.outcome.check.verdict is VerdictKind.HEALTHY


def test_a_reverification_that_finds_a_newer_version_checks_that_version() -> None:
    state = checked_at(DAY)
    assert state.reverify_at_ms is not None
    step = reverified(state, state.reverify_at_ms, healthy(), version=4)
    assert step.state is not None and step.state.version == 4 and step.state.checked
    assert step.outcome.check is not None and step.outcome.version == 4


def test_a_retry_due_at_the_same_time_goes_first() -> None:
    state = changed(None, 3, dict.fromkeys(BOOKIES, BookieAnswer.unknown("timeout"))).state
    assert state is not None and state.retry_at_ms is not None
    both = replace(state, reverify_at_ms=state.retry_at_ms)
    step = on_timer(both, now_ms=state.retry_at_ms, config=REVERIFY)
    assert step.outcome.fetch == BOOKIES and not step.outcome.reread
    assert step.state is not None and step.state.reverify_at_ms == state.retry_at_ms  # kept for later
