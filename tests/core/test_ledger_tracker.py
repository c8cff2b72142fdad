"""The per-ledger state machine of the streaming checker: versions, retries, marks, resolution."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.backoff import Backoff
from scrutiny.core.ledger_metadata import LedgerState, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.ledger_tracker import (
    RecheckPolicy,
    Step,
    TrackedLedger,
    TrackerConfig,
    on_answers,
    on_cleared,
    on_deleted,
    on_marked,
    on_metadata,
    on_recheck,
    on_reread,
    on_timer,
    with_confirmation,
)
from scrutiny.core.sequence_groups import from_entries
from scrutiny.core.verdict import BookieAnswer, ClusterView, VerdictConfig, VerdictKind
from scrutiny.core.vocabulary import Category
from scrutiny.core.zk_records import UnderReplicationMark

pytestmark = pytest.mark.unit

BOOKIES = ("b1:3181", "b2:3181", "b3:3181")
CONFIG = TrackerConfig(
    verdict=VerdictConfig(under_replication_grace_ms=60_000),
    retry=RecheckPolicy(backoff=Backoff(1.0, 60.0), max_retries=2),
)
CLUSTER = ClusterView(writable=frozenset(BOOKIES))


def blob(state: LedgerState = LedgerState.CLOSED, last: int = 9, ensemble: tuple[str, ...] = BOOKIES) -> bytes:
    metadata = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=[(0, ensemble)], state=state, last_entry_id=last
    )
    return encode_ledger_metadata_v3(metadata)


def held(bookie_index: int, last: int = 9) -> BookieAnswer:
    """What bookie ``bookie_index`` of a 3/2 stripe holds of entries 0..last."""
    entries = [e for e in range(last + 1) if bookie_index in (e % 3, (e + 1) % 3)]
    return BookieAnswer.listing(from_entries(entries))


def healthy() -> dict[str, BookieAnswer]:
    return {b: held(i) for i, b in enumerate(BOOKIES)}


def changed(state: TrackedLedger | None, version: int, answers: dict[str, BookieAnswer] | None, **kw: object) -> Step:
    data = kw.pop("data", blob())
    assert isinstance(data, bytes)
    cluster = kw.pop("cluster", CLUSTER)
    assert isinstance(cluster, ClusterView)
    return on_metadata(
        state,
        version=version,
        data=data,
        changed_ms=1_000,
        answers=answers,
        now_ms=5_000,
        cluster=cluster,
        config=CONFIG,
    )


def categories(step: Step) -> list[str]:
    return sorted(v.category.value for v in step.outcome.found)


def test_healthy_closed_ledger_completes_with_a_check_and_keeps_almost_nothing() -> None:
    step = changed(None, 3, healthy())
    assert step.outcome.check is not None and step.outcome.check.verdict is VerdictKind.HEALTHY
    assert step.outcome.check.latency_ms == 4_000
    assert step.state is not None and step.state.checked and step.state.metadata is None and step.state.open == ()
    assert len(step.state.to_bytes()) < 48


def test_open_ledger_without_sealed_segments_is_not_checked() -> None:
    step = changed(None, 1, None, data=blob(LedgerState.OPEN, last=-1))
    assert step.outcome.check is None and step.outcome.fetch == ()


def test_without_answers_a_fetch_is_requested_and_answers_complete_it() -> None:
    step = changed(None, 1, None)
    assert step.outcome.fetch == BOOKIES and step.state is not None
    done = on_answers(step.state, version=1, answers=healthy(), now_ms=6_000, cluster=CLUSTER, config=CONFIG)
    assert done.outcome.check is not None and done.outcome.check.verdict is VerdictKind.HEALTHY


def test_older_or_already_checked_versions_are_ignored() -> None:
    first = changed(None, 5, healthy())
    assert changed(first.state, 4, healthy()).outcome == Step(None).outcome
    assert changed(first.state, 5, healthy()).outcome.check is None  # a snapshot repeating a checked version
    assert changed(first.state, 6, healthy()).outcome.check is not None


def test_answers_for_a_superseded_version_are_dropped() -> None:
    pending = changed(None, 1, None).state
    assert pending is not None
    newer = changed(pending, 2, None).state
    assert newer is not None
    stale = on_answers(newer, version=1, answers=healthy(), now_ms=6_000, cluster=CLUSTER, config=CONFIG)
    assert stale.outcome.check is None and stale.state == newer


def test_missing_replica_found_then_resolved_by_a_healthy_recheck() -> None:
    answers = healthy()
    answers["b2:3181"] = BookieAnswer.no_ledger()
    bad = changed(None, 1, answers)
    assert "BELOW_ACK_QUORUM" in categories(bad) and "MISSING_REPLICA" in categories(bad)
    assert bad.state is not None and len(bad.state.open) == 2
    good = changed(bad.state, 2, healthy())
    assert sorted(k[0] for k in good.outcome.resolved) == ["BELOW_ACK_QUORUM", "MISSING_REPLICA"]
    assert good.state is not None and good.state.open == ()


def test_unknown_is_retried_with_backoff_and_recovery_yields_no_violation() -> None:
    answers = healthy()
    answers["b3:3181"] = BookieAnswer.unknown("timeout")
    first = changed(None, 1, answers)
    assert first.outcome.found == () and first.outcome.check is None
    assert first.state is not None and first.state.retry_at_ms == 6_000 and first.state.timers() == (6_000,)
    timer = on_timer(first.state, now_ms=6_000)
    assert timer.outcome.fetch == BOOKIES and timer.state is not None and timer.state.attempts == 1
    done = on_answers(timer.state, version=1, answers=healthy(), now_ms=6_100, cluster=CLUSTER, config=CONFIG)
    assert done.outcome.check is not None and done.outcome.found == () and done.outcome.check.retries == 1


def test_still_unknown_after_the_last_retry_is_unresponsive_or_not_registered() -> None:
    answers = healthy()
    answers["b3:3181"] = BookieAnswer.unknown("timeout")
    state = changed(None, 1, answers).state
    delays = []
    for _ in range(CONFIG.retry.max_retries):
        assert state is not None and state.retry_at_ms is not None
        delays.append(state.retry_at_ms)
        state = on_timer(state, now_ms=state.retry_at_ms).state
        assert state is not None
        step = on_answers(state, version=1, answers=answers, now_ms=state.version, cluster=CLUSTER, config=CONFIG)
        state = step.state
    assert step.outcome.check is not None and categories(step) == ["BOOKIE_UNRESPONSIVE"]
    assert delays[0] == 6_000
    gone = ClusterView(writable=frozenset(BOOKIES[:2]))
    assert state is not None
    final = on_answers(
        TrackedLedger(version=1, metadata=blob(), attempts=2),
        version=1,
        answers=answers,
        now_ms=1,
        cluster=gone,
        config=CONFIG,
    )
    assert categories(final) == ["BOOKIE_NOT_REGISTERED"]


def test_certain_violations_are_reported_before_the_retries_end_but_nothing_resolves() -> None:
    answers = healthy()
    answers["b1:3181"] = BookieAnswer.no_ledger()
    answers["b2:3181"] = BookieAnswer.unknown("timeout")
    open_before = TrackedLedger(version=0, checked=True, open=(("ACK_QUORUM_ONE", "", -1),))
    step = changed(open_before, 1, answers)
    assert "MISSING_REPLICA" in categories(step) and step.outcome.check is None
    assert step.outcome.resolved == ()


def test_unreadable_metadata_is_a_complete_check_with_one_violation() -> None:
    step = changed(None, 1, None, data=b"garbage")
    assert categories(step) == ["METADATA_UNREADABLE"]
    assert step.outcome.check is not None and step.outcome.check.verdict is VerdictKind.VIOLATED


def test_deletion_resolves_everything_and_forgets_the_ledger() -> None:
    answers = healthy()
    answers["b2:3181"] = BookieAnswer.no_ledger()
    state = changed(None, 1, answers).state
    step = on_deleted(state)
    assert step.state is None and len(step.outcome.resolved) == 2
    assert on_deleted(None).outcome.resolved == ()


def test_a_ledger_with_findings_open_is_confirmed_to_exist_every_interval_and_a_healthy_one_never() -> None:
    answers = healthy()
    answers["b2:3181"] = BookieAnswer.no_ledger()
    found = changed(None, 1, answers).state
    assert found is not None and found.open and found.confirm_at_ms is None  # scheduled by the caller
    config = TrackerConfig(confirm_interval_ms=30_000)
    armed = with_confirmation(found, now_ms=5_000, config=config)
    assert armed is not None and armed.confirm_at_ms == 35_000 and 35_000 in armed.timers() and armed.watched()
    assert with_confirmation(armed, now_ms=20_000, config=config) is armed  # a future one is kept
    again = with_confirmation(on_timer(armed, now_ms=35_000).state, now_ms=35_000, config=config)
    assert again is not None and again.confirm_at_ms == 65_000 and again.open == armed.open
    healed = changed(again, 2, healthy()).state
    assert healed is not None and not healed.open
    settled = with_confirmation(healed, now_ms=40_000, config=config)
    assert settled is not None and settled.confirm_at_ms is None and not settled.timers() and not settled.watched()
    never = with_confirmation(found, now_ms=5_000, config=TrackerConfig(confirm_interval_ms=0))
    assert never is found and with_confirmation(None, now_ms=0, config=config) is None


def test_stuck_mark_reported_after_grace_and_resolved_when_cleared() -> None:
    marked = on_marked(None, UnderReplicationMark(("b1:3181",), 10_000), now_ms=20_000, config=CONFIG)
    assert marked.state is not None and marked.state.stuck_at_ms == 70_000
    early = on_timer(marked.state, now_ms=69_999)
    assert early.outcome.found == ()
    due = on_timer(marked.state, now_ms=70_000)
    assert categories(due) == ["UNDER_REPLICATION_STUCK"]
    assert "since 1970-01-01T00:00:10Z," in str(due.outcome.found[0].details)  # the mark's ctime, for a person
    assert due.state is not None and due.state.timers() == ()
    cleared = on_cleared(due.state)
    assert cleared.outcome.resolved == (("UNDER_REPLICATION_STUCK", "", -1),)
    assert cleared.state is not None and cleared.state.open == ()


def test_cleared_before_grace_never_reports() -> None:
    marked = on_marked(None, UnderReplicationMark(("b1:3181",), None), now_ms=20_000, config=CONFIG)
    assert marked.state is not None and marked.state.stuck_at_ms == 80_000
    again = on_marked(marked.state, UnderReplicationMark(("b1:3181",), None), now_ms=50_000, config=CONFIG)
    assert again.state is not None and again.state.stuck_at_ms == 80_000  # first sighting kept
    cleared = on_cleared(again.state)
    assert cleared.state is not None and cleared.state.timers() == () and cleared.outcome.resolved == ()


def test_a_marked_ledger_does_not_report_missing_replicas_and_a_check_keeps_the_stuck_report() -> None:
    marked = on_marked(None, UnderReplicationMark(("b2:3181",), 0), now_ms=0, config=CONFIG).state
    assert marked is not None
    stuck = on_timer(marked, now_ms=60_000).state
    answers = healthy()
    answers["b2:3181"] = BookieAnswer.no_ledger()
    step = changed(stuck, 1, answers)
    assert "MISSING_REPLICA" not in categories(step) and step.outcome.resolved == ()
    assert step.state is not None and ("UNDER_REPLICATION_STUCK", "", -1) in step.state.open


@given(
    version=st.integers(-1, 2**31),
    checked=st.booleans(),
    metadata=st.none() | st.binary(max_size=50),
    times=st.lists(st.none() | st.integers(0, 2**50), min_size=3, max_size=3),
    attempts=st.integers(0, 10),
    mark=st.none() | st.builds(UnderReplicationMark, st.tuples(st.text(max_size=5)), st.none() | st.integers(0, 2**50)),
    keys=st.lists(st.tuples(st.sampled_from([c.value for c in Category]), st.text(max_size=8), st.integers(-1, 99))),
    reported=st.lists(
        st.tuples(
            st.sampled_from([c.value for c in Category]),
            st.text(max_size=8),
            st.integers(-1, 9),
            st.sampled_from(["critical", "warning", "info"]),
            st.integers(-1, 2**40),
        )
    ),
)
def test_state_round_trips_through_bytes(  # noqa: PLR0917 - one argument per strategy
    version: int,
    checked: bool,
    metadata: bytes | None,
    times: list[int | None],
    attempts: int,
    mark: UnderReplicationMark | None,
    keys: list[tuple[str, str, int]],
    reported: list[tuple[str, str, int, str, int]],
) -> None:
    state = TrackedLedger(
        version, checked, metadata, times[0], attempts, times[1], mark, times[2], tuple(keys), tuple(reported)
    )
    state = replace(state, written_ms=times[1], confirm_at_ms=times[2], verified_ms=times[0], reverify_at_ms=times[1])
    lost = tuple((k[1] or "b", t) for k, t in zip(keys, (x for x in times if x is not None), strict=False))
    state = replace(state, lost=lost)
    assert TrackedLedger.from_bytes(state.to_bytes()) == state


def test_a_mark_after_the_metadata_rechecks_and_withdraws_what_replication_repairs() -> None:
    answers = healthy()
    answers["b2:3181"] = BookieAnswer.no_ledger()
    first = changed(None, 1, answers)
    assert {"BELOW_ACK_QUORUM", "MISSING_REPLICA"} <= set(categories(first)) and first.state is not None
    marked = on_marked(first.state, UnderReplicationMark(("b2:3181",), 4_000), now_ms=5_000, config=CONFIG)
    assert marked.outcome.fetch == BOOKIES and marked.state is not None
    again = on_answers(marked.state, version=1, answers=answers, now_ms=5_100, cluster=CLUSTER, config=CONFIG)
    assert sorted(k[0] for k in again.outcome.resolved) == ["BELOW_ACK_QUORUM", "MISSING_REPLICA"]
    assert again.state is not None and again.state.open == ()
    # the same end state as when the mark came first
    mark_first = on_marked(None, UnderReplicationMark(("b2:3181",), 4_000), now_ms=5_000, config=CONFIG).state
    assert categories(changed(mark_first, 1, answers)) == []
    # clearing the mark checks again: the loss is reported once more (replication did not repair it)
    cleared = on_cleared(again.state)
    assert cleared.outcome.fetch == BOOKIES and cleared.state is not None
    after = on_answers(cleared.state, version=1, answers=answers, now_ms=6_000, cluster=CLUSTER, config=CONFIG)
    assert {"BELOW_ACK_QUORUM", "MISSING_REPLICA"} <= set(categories(after))


def test_what_an_incomplete_check_reported_is_not_reported_again_when_it_completes() -> None:
    answers = healthy()
    answers["b1:3181"] = BookieAnswer.no_ledger()
    answers["b2:3181"] = BookieAnswer.unknown("timeout")
    partial = changed(None, 1, answers)
    assert "MISSING_REPLICA" in categories(partial) and partial.outcome.check is None
    state = partial.state
    assert state is not None and state.retry_at_ms is not None
    fired = on_timer(state, now_ms=state.retry_at_ms).state
    assert fired is not None
    answers["b2:3181"] = held(1)
    done = on_answers(fired, version=1, answers=answers, now_ms=state.retry_at_ms, cluster=CLUSTER, config=CONFIG)
    assert done.outcome.check is not None and done.outcome.check.violation_count >= 2
    assert not set(categories(done)) & set(categories(partial))
    assert done.state is not None and done.state.reported == ()


def test_a_finding_a_later_answer_makes_worse_is_reported_again() -> None:
    # Entry 10 is past the end (last 9); its write set is b2, b3 (AQ 2). b2 holds it, b3 is silent: a warning.
    answers = healthy()
    answers["b2:3181"] = BookieAnswer.listing(from_entries([e for e in range(11) if 1 in (e % 3, (e + 1) % 3)]))
    answers["b3:3181"] = BookieAnswer.unknown("timeout")
    partial = changed(None, 1, answers)
    (warning,) = [v for v in partial.outcome.found if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY]
    assert warning.bookie == "b2:3181" and warning.severity.value == "warning"
    state = partial.state
    assert state is not None and state.retry_at_ms is not None
    fired = on_timer(state, now_ms=state.retry_at_ms).state
    assert fired is not None
    # b3 answers and holds entry 10 too: two write-set copies, the finding is critical for both bookies
    answers["b3:3181"] = BookieAnswer.listing(from_entries([e for e in range(11) if 2 in (e % 3, (e + 1) % 3)]))
    done = on_answers(fired, version=1, answers=answers, now_ms=state.retry_at_ms, cluster=CLUSTER, config=CONFIG)
    beyond = {
        v.bookie: v.severity.value for v in done.outcome.found if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY
    }
    assert beyond == {"b2:3181": "critical", "b3:3181": "critical"}


def test_unreadable_metadata_reports_the_decode_error_of_the_znode_s_own_bytes() -> None:
    """Bytes that cannot be searched for a password come empty, with the error their reader found in the znode's
    bytes: that error is the finding's details, from an event, a re-verification or a recheck alike."""
    error = "invalid ledger metadata at byte 28: unknown format version 9 (supported: 1, 2, 3)"
    common: dict[str, Any] = {"version": 2, "data": b"", "decode_error": error, "now_ms": 5_000, "cluster": CLUSTER}
    checked = changed(None, 1, healthy()).state
    assert checked is not None
    steps = [
        on_metadata(None, changed_ms=None, answers=None, config=CONFIG, **common),
        on_reread(checked, written_ms=None, config=CONFIG, **common),
        on_recheck(checked, why=None, bookie=BOOKIES[0], written_ms=None, answers=None, config=CONFIG, **common),
    ]
    for step in steps:
        assert [(v.category, v.details) for v in step.outcome.found] == [(Category.METADATA_UNREADABLE, error)]
        assert step.state is not None and step.state.metadata is None
    # Without a reader's error, the error of the bytes themselves.
    own = changed(None, 1, None, data=b"garbage")
    assert [v.details for v in own.outcome.found] == [
        "invalid ledger metadata at byte 0: missing header 'BookieMetadataFormatVersion\\t<n>\\n' (found b'garbage')"
    ]
