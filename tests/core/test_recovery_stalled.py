"""A ledger that stays IN_RECOVERY: RECOVERY_STALLED once the grace after its first version in recovery is over."""

from __future__ import annotations

import pytest

from scrutiny.core.ledger_metadata import LedgerState, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.ledger_tracker import Step, TrackedLedger, TrackerConfig, on_deleted, on_metadata, on_timer
from scrutiny.core.sequence_groups import from_entries
from scrutiny.core.verdict import BookieAnswer, ClusterView
from scrutiny.core.vocabulary import Category, Severity

pytestmark = pytest.mark.unit

BOOKIES = ("b1:3181", "b2:3181", "b3:3181", "b4:3181")
GRACE = 600_000
CONFIG = TrackerConfig(recovery_stalled_ms=GRACE)
CLUSTER = ClusterView(writable=frozenset(BOOKIES))
STALLED = (Category.RECOVERY_STALLED.value, "", -1)
WRITTEN = 1_000_000


def blob(state: LedgerState, *, sealed: bool = False) -> bytes:
    segments = [(0, BOOKIES[:3]), (5, BOOKIES[1:])] if sealed else [(0, BOOKIES[:3])]
    last = 9 if state is LedgerState.CLOSED else -1
    metadata = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=segments, state=state, last_entry_id=last
    )
    return encode_ledger_metadata_v3(metadata)


def answers(upto: int) -> dict[str, BookieAnswer]:
    """Every bookie holds its stripe of entries 0..``upto`` of the first segment's ensemble (b4 holds them too)."""
    out = {}
    for index, bookie in enumerate(BOOKIES):
        entries = [e for e in range(upto + 1) if index in (e % 3, (e + 1) % 3) or bookie == BOOKIES[3]]
        out[bookie] = BookieAnswer.listing(from_entries(entries))
    return out


def change(
    state: TrackedLedger | None, version: int, data: bytes, *, written_ms: int, now_ms: int, upto: int = 9
) -> Step:
    return on_metadata(
        state,
        version=version,
        data=data,
        changed_ms=None,
        written_ms=written_ms,
        answers=answers(upto),
        now_ms=now_ms,
        cluster=CLUSTER,
        config=CONFIG,
    )


def in_recovery(*, sealed: bool = False) -> TrackedLedger:
    state = change(None, 1, blob(LedgerState.IN_RECOVERY, sealed=sealed), written_ms=WRITTEN, now_ms=WRITTEN).state
    assert state is not None
    return state


@pytest.mark.parametrize("sealed", [False, True])
def test_in_recovery_past_the_grace_is_critical_and_reported_once(sealed: bool) -> None:
    state = in_recovery(sealed=sealed)
    assert WRITTEN + GRACE in state.timers()
    assert not on_timer(state, now_ms=WRITTEN + GRACE - 1, config=CONFIG).outcome.found
    due = on_timer(state, now_ms=WRITTEN + GRACE, config=CONFIG)
    [found] = due.outcome.found
    assert (found.category, found.severity) == (Category.RECOVERY_STALLED, Severity.CRITICAL)
    assert found.details is not None and "in recovery since 1970-01-01T00:16:40" in found.details
    assert due.state is not None and STALLED in due.state.open
    assert WRITTEN + GRACE not in due.state.timers()
    assert not on_timer(due.state, now_ms=WRITTEN + 2 * GRACE, config=CONFIG).outcome.found


def test_the_deadline_counts_from_the_first_version_in_recovery() -> None:
    later = change(in_recovery(), 2, blob(LedgerState.IN_RECOVERY), written_ms=WRITTEN + 5_000, now_ms=WRITTEN + 5_000)
    assert later.state is not None and later.state.recovery_due_ms == WRITTEN + GRACE


@pytest.mark.parametrize("sealed", [False, True])
def test_a_closed_version_resolves_it(sealed: bool) -> None:
    reported = on_timer(in_recovery(sealed=sealed), now_ms=WRITTEN + GRACE, config=CONFIG).state
    closed = change(reported, 2, blob(LedgerState.CLOSED), written_ms=WRITTEN + GRACE + 1, now_ms=WRITTEN + GRACE + 1)
    assert STALLED in closed.outcome.resolved
    assert closed.state is not None and STALLED not in closed.state.open and closed.state.recovery_due_ms is None
    before = change(in_recovery(), 2, blob(LedgerState.CLOSED), written_ms=WRITTEN + 1, now_ms=WRITTEN + 1)
    assert before.state is not None and before.state.recovery_due_ms is None  # closed in time: nothing to report
    assert not on_timer(before.state, now_ms=WRITTEN + GRACE, config=CONFIG).outcome.found


def test_a_check_of_a_sealed_segment_keeps_it_open_while_in_recovery() -> None:
    reported = on_timer(in_recovery(sealed=True), now_ms=WRITTEN + GRACE, config=CONFIG).state
    again = change(reported, 2, blob(LedgerState.IN_RECOVERY, sealed=True), written_ms=WRITTEN + GRACE, now_ms=WRITTEN)
    assert again.outcome.check is not None and STALLED not in again.outcome.resolved
    assert again.state is not None and STALLED in again.state.open


def test_deletion_resolves_it_and_a_grace_of_zero_never_reports() -> None:
    reported = on_timer(in_recovery(), now_ms=WRITTEN + GRACE, config=CONFIG).state
    assert STALLED in on_deleted(reported).outcome.resolved
    off = TrackerConfig(recovery_stalled_ms=0)
    quiet = on_metadata(
        None,
        version=1,
        data=blob(LedgerState.IN_RECOVERY),
        changed_ms=None,
        written_ms=WRITTEN,
        answers=None,
        now_ms=WRITTEN,
        cluster=CLUSTER,
        config=off,
    )
    assert quiet.state is not None and quiet.state.timers() == ()


def test_the_deadline_survives_the_state_store() -> None:
    state = in_recovery()
    assert TrackedLedger.from_bytes(state.to_bytes()) == state
