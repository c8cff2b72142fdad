"""A lost bookie's ledgers: checked again at once, then marked or re-replicated within the grace, or reported."""

from __future__ import annotations

import pytest

from scrutiny.core.bookie_findings import lost_key, on_bookie_lost, on_bookie_registered
from scrutiny.core.bookie_lifecycle import LifecycleKind
from scrutiny.core.ledger_metadata import LedgerState, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.ledger_tracker import (
    Step,
    TrackedLedger,
    TrackerConfig,
    on_answers,
    on_cleared,
    on_deleted,
    on_marked,
    on_metadata,
    on_recheck,
    on_timer,
)
from scrutiny.core.sequence_groups import from_entries
from scrutiny.core.verdict import BookieAnswer, ClusterView
from scrutiny.core.vocabulary import Category, Severity
from scrutiny.core.zk_records import UnderReplicationMark

pytestmark = pytest.mark.unit

BOOKIES = ("b1:3181", "b2:3181", "b3:3181")
LOST = "b2:3181"
GRACE = 60_000
CONFIG = TrackerConfig(mark_grace_ms=GRACE)
WITHOUT_LOST = ClusterView(writable=frozenset(BOOKIES) - {LOST})
EVERYONE = ClusterView(writable=frozenset(BOOKIES))
NOT_MARKED = (Category.UNDER_REPLICATION_NOT_MARKED.value, LOST, -1)


def blob(ensemble: tuple[str, ...] = BOOKIES, state: LedgerState = LedgerState.CLOSED) -> bytes:
    metadata = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=[(0, ensemble)], state=state, last_entry_id=9
    )
    return encode_ledger_metadata_v3(metadata)


def answers(ensemble: tuple[str, ...] = BOOKIES, *, empty: str = "") -> dict[str, BookieAnswer]:
    out = {}
    for index, bookie in enumerate(ensemble):
        entries = [e for e in range(10) if index in (e % 3, (e + 1) % 3)]
        out[bookie] = BookieAnswer.no_ledger() if bookie == empty else BookieAnswer.listing(from_entries(entries))
    return out


def checked(version: int = 1) -> TrackedLedger:
    step = on_metadata(
        None,
        version=version,
        data=blob(),
        changed_ms=None,
        answers=answers(),
        now_ms=1_000,
        cluster=EVERYONE,
        config=CONFIG,
    )
    assert step.state is not None and step.state.checked
    return step.state


def recheck(state: TrackedLedger | None, *, lost: bool, now_ms: int = 10_000, **kw: object) -> Step:
    """A recheck because the bookie is lost (``lost``) or back after it was."""
    got = kw.pop("answers", answers(empty=LOST))
    assert isinstance(got, dict) or got is None
    return on_recheck(
        state,
        why=LifecycleKind.LOST if lost else LifecycleKind.RETURNED,
        bookie=LOST,
        version=1,
        data=blob(),
        written_ms=None,
        answers=got,
        now_ms=now_ms,
        cluster=WITHOUT_LOST,
        config=CONFIG,
    )


def test_a_lost_bookies_ledger_is_checked_again_at_once_and_given_a_deadline() -> None:
    step = recheck(checked(), lost=True)
    assert step.outcome.check is not None  # checked now, with the answers the fetch stage brought
    found = {v.category for v in step.outcome.found}
    assert Category.MISSING_REPLICA in found  # the lost bookie's entries are missing
    assert step.state is not None and step.state.lost == ((LOST, 10_000 + GRACE),)
    assert 10_000 + GRACE in step.state.timers()


def test_without_answers_the_recheck_asks_for_them_and_still_sets_the_deadline() -> None:
    step = recheck(checked(), lost=True, answers=None)
    assert step.outcome.fetch == BOOKIES and step.outcome.check is None
    assert step.state is not None and step.state.lost == ((LOST, 10_000 + GRACE),)


def re_replicated(state: TrackedLedger | None) -> Step:
    """Version 2: the lost bookie replaced by b4, which holds its copies (what auto-recovery does)."""
    replaced = ("b1:3181", "b4:3181", "b3:3181")
    return on_metadata(
        state,
        version=2,
        data=blob(replaced),
        changed_ms=None,
        answers=answers(replaced),
        now_ms=90_000,
        cluster=ClusterView(writable=frozenset(replaced)),
        config=CONFIG,
    )


def reported_not_marked() -> TrackedLedger:
    """A checked ledger of the lost bookie, past its deadline: UNDER_REPLICATION_NOT_MARKED open."""
    state = recheck(checked(), lost=True).state
    assert state is not None
    reported = on_timer(state, now_ms=10_000 + GRACE, config=CONFIG, cluster=WITHOUT_LOST).state
    assert reported is not None and NOT_MARKED in reported.open
    return reported


def test_not_marked_by_the_deadline_is_critical_and_reported_once() -> None:
    state = recheck(checked(), lost=True).state
    assert state is not None
    early = on_timer(state, now_ms=10_000 + GRACE - 1, config=CONFIG, cluster=WITHOUT_LOST)
    assert not early.outcome.found
    due = on_timer(state, now_ms=10_000 + GRACE, config=CONFIG, cluster=WITHOUT_LOST)
    [found] = due.outcome.found
    assert (found.category, found.severity, found.bookie) == (
        Category.UNDER_REPLICATION_NOT_MARKED,
        Severity.CRITICAL,
        LOST,
    )
    assert due.state is not None and NOT_MARKED in due.state.open
    assert due.state.timers() == ()  # the deadline stays (the bookie is still lost) but has nothing left to do
    assert not on_timer(due.state, now_ms=10_000 + 2 * GRACE, config=CONFIG, cluster=WITHOUT_LOST).outcome.found


def test_a_mark_before_the_deadline_means_nothing_is_reported() -> None:
    state = recheck(checked(), lost=True).state
    assert state is not None
    marked = on_marked(state, UnderReplicationMark((LOST,), 20_000), now_ms=20_000, config=CONFIG).state
    assert marked is not None and 10_000 + GRACE not in marked.timers()  # the deadline sleeps under the mark
    assert not on_timer(marked, now_ms=10_000 + GRACE, config=CONFIG, cluster=WITHOUT_LOST).outcome.found


def test_a_ledger_marked_already_gets_a_deadline_that_sleeps_under_the_mark() -> None:
    marked = on_marked(checked(), UnderReplicationMark((LOST,), 5_000), now_ms=5_000, config=CONFIG).state
    step = recheck(marked, lost=True)
    assert step.state is not None and step.state.lost == ((LOST, 10_000 + GRACE),)
    assert 10_000 + GRACE not in step.state.timers()


@pytest.mark.parametrize("reported_first", [False, True])
def test_a_mark_cleared_while_the_bookie_is_lost_and_still_in_the_ensemble_reports_it_again(
    reported_first: bool,
) -> None:
    """Nothing re-replicated the ledger (its ensemble still has the lost bookie) and its mark is gone: past the
    deadline, UNDER_REPLICATION_NOT_MARKED opens at once (again, when it was reported before the mark)."""
    state = reported_not_marked() if reported_first else recheck(checked(), lost=True).state
    assert state is not None
    marked = on_marked(state, UnderReplicationMark((LOST,), 30_000), now_ms=30_000, config=CONFIG)
    assert marked.state is not None and NOT_MARKED not in marked.state.open
    assert (NOT_MARKED in marked.outcome.resolved) is reported_first
    cleared = on_cleared(marked.state)
    assert cleared.state is not None and 10_000 + GRACE in cleared.state.timers()  # past due: fires at once
    due = on_timer(cleared.state, now_ms=200_000, config=CONFIG, cluster=WITHOUT_LOST)
    assert [(v.category, v.bookie) for v in due.outcome.found] == [(Category.UNDER_REPLICATION_NOT_MARKED, LOST)]


def test_a_mark_cleared_after_re_replication_reports_nothing() -> None:
    state = recheck(checked(), lost=True).state
    marked = on_marked(state, UnderReplicationMark((LOST,), 30_000), now_ms=30_000, config=CONFIG).state
    moved = re_replicated(marked)
    assert moved.state is not None and moved.state.lost == ()
    cleared = on_cleared(moved.state)
    assert cleared.state is not None
    assert not on_timer(cleared.state, now_ms=200_000, config=CONFIG, cluster=WITHOUT_LOST).outcome.found


def test_a_mark_after_the_report_resolves_it() -> None:
    reported = reported_not_marked()
    assert reported is not None
    step = on_marked(reported, UnderReplicationMark((LOST,), None), now_ms=80_000, config=CONFIG)
    assert NOT_MARKED in step.outcome.resolved
    assert step.state is not None and NOT_MARKED not in step.state.open


def test_re_replication_drops_the_deadline_and_resolves_the_report() -> None:
    reported = reported_not_marked()
    assert reported is not None
    moved = re_replicated(reported)
    assert NOT_MARKED in moved.outcome.resolved
    assert moved.state is not None and moved.state.lost == () and NOT_MARKED not in moved.state.open


def test_a_check_of_the_same_ensemble_keeps_the_report_open() -> None:
    reported = reported_not_marked()
    step = on_metadata(
        reported,
        version=2,
        data=blob(),
        changed_ms=None,
        answers=answers(empty=LOST),
        now_ms=90_000,
        cluster=WITHOUT_LOST,
        config=CONFIG,
    )
    assert step.outcome.check is not None
    assert NOT_MARKED not in step.outcome.resolved
    assert step.state is not None and NOT_MARKED in step.state.open


def test_the_bookies_return_resolves_and_drops_the_deadline() -> None:
    reported = reported_not_marked()
    back = recheck(reported, lost=False, now_ms=100_000, answers=answers())
    assert NOT_MARKED in back.outcome.resolved
    assert back.state is not None and NOT_MARKED not in back.state.open
    pending = recheck(checked(), lost=True).state
    returned = recheck(pending, lost=False, now_ms=20_000, answers=answers())
    assert returned.state is not None and returned.state.lost == ()


def test_a_bookie_registered_again_by_the_deadline_is_not_reported() -> None:
    state = recheck(checked(), lost=True).state
    assert state is not None
    due = on_timer(state, now_ms=10_000 + GRACE, config=CONFIG, cluster=EVERYONE)
    assert not due.outcome.found and due.state is not None and due.state.lost == ()


def test_a_ledger_without_the_bookie_gets_no_deadline() -> None:
    others = ("b1:3181", "b3:3181", "b4:3181")
    step = on_recheck(
        None,
        why=LifecycleKind.LOST,
        bookie=LOST,
        version=1,
        data=blob(others),
        written_ms=None,
        answers=answers(others),
        now_ms=10_000,
        cluster=WITHOUT_LOST,
        config=CONFIG,
    )
    assert step.state is not None and step.state.lost == ()


def test_deletion_resolves_the_report() -> None:
    reported = reported_not_marked()
    assert NOT_MARKED in on_deleted(reported).outcome.resolved


def test_bookie_lost_is_reported_once_and_resolved_by_its_registration() -> None:
    first = on_bookie_lost(None, LOST, unregistered_ms=1_000, ledgers=3, entries=20)
    [found] = first.outcome.found
    assert (found.category, found.severity, found.bookie) == (Category.BOOKIE_LOST, Severity.WARNING, LOST)
    assert "3 closed ledger(s), 20 entries" in found.details
    again = on_bookie_lost(first.state, LOST, unregistered_ms=9_000, ledgers=3, entries=20)
    assert not again.outcome.found and again.state == first.state
    other = on_bookie_lost(first.state, "b9:3181", unregistered_ms=2_000, ledgers=0, entries=0)
    assert other.state is not None and len(other.state.open) == 2
    back = on_bookie_registered(other.state, LOST)
    assert back.outcome.resolved == (lost_key(LOST),)
    assert back.state is not None and back.state.open == (lost_key("b9:3181"),)
    assert on_bookie_registered(back.state, "b9:3181").state is None
    assert on_bookie_registered(None, LOST).outcome.resolved == ()


def restarted(state: TrackedLedger | None, answers_: dict[str, BookieAnswer] | None = None) -> Step:
    return on_recheck(
        state,
        why=LifecycleKind.RESTARTED,
        bookie=LOST,
        version=1,
        data=blob(),
        written_ms=None,
        answers=answers_,
        now_ms=30_000,
        cluster=EVERYONE,
        config=CONFIG,
    )


def test_a_restart_leaves_a_ledger_that_does_not_wait_for_the_bookie_alone() -> None:
    state = checked()
    step = restarted(state)
    assert step.state == state and step.outcome.fetch == () and step.outcome.check is None
    assert restarted(None).state is None


def test_a_restart_checks_at_once_a_ledger_the_bookie_did_not_answer() -> None:
    silent = {**answers(), LOST: BookieAnswer.unknown("timed out")}
    waiting = recheck(checked(), lost=False, answers=silent).state
    assert waiting is not None and waiting.retry_at_ms is not None
    assert restarted(waiting).outcome.fetch == BOOKIES  # a retry pending: asked again now
    due: int | None = waiting.retry_at_ms
    for _ in range(CONFIG.retry.max_retries + 1):  # the retries run out: BOOKIE_NOT_REGISTERED stays open
        if due is None:
            break
        timed = on_timer(waiting, now_ms=due, config=CONFIG)
        assert timed.state is not None and timed.outcome.fetch
        after = on_answers(timed.state, version=1, answers=silent, now_ms=due, cluster=WITHOUT_LOST, config=CONFIG)
        assert after.state is not None
        waiting, due = after.state, after.state.retry_at_ms
    assert due is None
    unanswered = [k for k in waiting.open if k[:2] == (Category.BOOKIE_NOT_REGISTERED.value, LOST)]
    assert unanswered
    step = restarted(waiting, answers())
    assert step.outcome.check is not None  # checked again now, with the answers
    assert set(unanswered) <= set(step.outcome.resolved)
    assert restarted(waiting).outcome.fetch == BOOKIES  # without answers in hand: asked for


def test_an_unreadable_version_keeps_the_report_open() -> None:
    reported = reported_not_marked()
    garbled = on_metadata(
        reported,
        version=2,
        data=b"not metadata",
        changed_ms=None,
        answers=None,
        now_ms=90_000,
        cluster=WITHOUT_LOST,
        config=CONFIG,
    )
    assert {v.category for v in garbled.outcome.found} == {Category.METADATA_UNREADABLE}
    assert NOT_MARKED not in garbled.outcome.resolved
    assert garbled.state is not None and NOT_MARKED in garbled.state.open


# --- an open ledger being written to a lost bookie

STALLED = (Category.OPEN_LEDGER_STALLED.value, "", -1)
ONLY_B1 = ClusterView(writable=frozenset({"b1:3181"}))


def open_recheck(
    state: TrackedLedger | None, *, why: LifecycleKind, cluster: ClusterView, data: bytes | None = None
) -> Step:
    return on_recheck(
        state,
        why=why,
        bookie=LOST,
        version=1,
        data=data or blob(state=LedgerState.OPEN),
        written_ms=None,
        answers=None,
        now_ms=10_000,
        cluster=cluster,
        config=CONFIG,
    )


def test_an_open_ledger_left_with_fewer_than_aq_registered_bookies_is_stalled() -> None:
    step = open_recheck(None, why=LifecycleKind.LOST, cluster=ONLY_B1)
    [found] = step.outcome.found
    assert (found.category, found.severity) == (Category.OPEN_LEDGER_STALLED, Severity.WARNING)
    assert found.details is not None and "1 of the 3 bookies" in found.details and "AQ = 2" in found.details
    assert step.state is not None and STALLED in step.state.open
    assert step.state.lost == ()  # no sealed segment: nothing for auto-recovery to mark yet
    again = open_recheck(step.state, why=LifecycleKind.LOST, cluster=ONLY_B1)
    assert not again.outcome.found  # once


def test_an_open_ledger_with_aq_registered_bookies_is_not_stalled() -> None:
    step = open_recheck(None, why=LifecycleKind.LOST, cluster=WITHOUT_LOST)
    assert not step.outcome.found and step.state is not None and STALLED not in step.state.open


def test_the_bookies_return_or_a_new_version_ends_the_stall() -> None:
    stalled = open_recheck(None, why=LifecycleKind.LOST, cluster=ONLY_B1).state
    back = open_recheck(stalled, why=LifecycleKind.RETURNED, cluster=ClusterView(writable=frozenset(BOOKIES[:2])))
    assert STALLED in back.outcome.resolved and back.state is not None and STALLED not in back.state.open
    replaced = ("b1:3181", "b4:3181", "b5:3181")
    changed = on_metadata(
        stalled,
        version=2,
        data=blob(replaced, state=LedgerState.OPEN),
        changed_ms=None,
        answers=None,
        now_ms=20_000,
        cluster=ClusterView(writable=frozenset({"b1:3181", *replaced})),
        config=CONFIG,
    )
    assert STALLED in changed.outcome.resolved
    closed = on_metadata(
        stalled,
        version=2,
        data=blob(),
        changed_ms=None,
        answers=answers(),
        now_ms=20_000,
        cluster=ONLY_B1,
        config=CONFIG,
    )
    assert STALLED in closed.outcome.resolved
    still = on_metadata(
        stalled,
        version=2,
        data=blob(state=LedgerState.OPEN),
        changed_ms=None,
        answers=None,
        now_ms=20_000,
        cluster=ONLY_B1,
        config=CONFIG,
    )
    assert STALLED not in still.outcome.resolved and still.state is not None and STALLED in still.state.open
