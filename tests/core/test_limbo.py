"""A bookie that answers "ledger in limbo" is answering: LEDGER_IN_LIMBO, not BOOKIE_UNRESPONSIVE; a bookie that
answers EIO is not silent either: its finding says what it answered."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scrutiny.core.ledger_metadata import LedgerState, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.ledger_tracker import (
    RecheckPolicy,
    Step,
    TrackedLedger,
    TrackerConfig,
    on_answers,
    on_metadata,
    on_timer,
    waits_for,
)
from scrutiny.core.sequence_groups import from_entries
from scrutiny.core.verdict import BookieAnswer, ClusterView
from scrutiny.core.vocabulary import Category, Severity

pytestmark = pytest.mark.unit

BOOKIES = ("b1:3181", "b2:3181", "b3:3181")
NO_RETRIES = TrackerConfig(retry=RecheckPolicy(max_retries=0))
CLUSTER = ClusterView(writable=frozenset(BOOKIES))


#: Each bookie's whole stripe of ledger 0..9 (E=3, WQ=2).
ANSWERS = {
    bookie: BookieAnswer.listing(from_entries([e for e in range(10) if i in (e % 3, (e + 1) % 3)]))
    for i, bookie in enumerate(BOOKIES)
}


def checked_with(b2: BookieAnswer, config: TrackerConfig = NO_RETRIES) -> Step:
    """Ledger 0..9 (E=3, WQ=2) checked at t = 1 s (without retries by default), b2 answering ``b2``."""
    metadata = build_ledger_metadata(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        segments=[(0, BOOKIES)],
        state=LedgerState.CLOSED,
        last_entry_id=9,
    )
    answers = dict(ANSWERS, **{BOOKIES[1]: b2})
    return on_metadata(
        None,
        version=1,
        data=encode_ledger_metadata_v3(metadata),
        changed_ms=None,
        answers=answers,
        now_ms=1_000,
        cluster=CLUSTER,
        config=config,
    )


def test_limbo_after_the_retries_is_ledger_in_limbo_and_a_restart_checks_it_again() -> None:
    step = checked_with(BookieAnswer.in_limbo("EUNKNOWNLEDGERSTATE: the ledger is in limbo on the bookie"))
    [found] = [v for v in step.outcome.found if v.bookie == BOOKIES[1]]
    assert (found.category, found.severity) == (Category.LEDGER_IN_LIMBO, Severity.WARNING)
    assert found.details is not None and "EUNKNOWNLEDGERSTATE" in found.details and "BP-46" in found.details
    assert not any(v.category is Category.BOOKIE_UNRESPONSIVE for v in step.outcome.found)
    assert not any(v.category in (Category.MISSING_REPLICA, Category.NO_REPLICA) for v in step.outcome.found)
    assert step.state is not None and waits_for(step.state, BOOKIES[1]) and not waits_for(step.state, BOOKIES[0])


def test_an_eio_answer_is_unresponsive_with_what_it_answered() -> None:
    step = checked_with(BookieAnswer.unknown("EIO"))
    [found] = [v for v in step.outcome.found if v.bookie == BOOKIES[1]]
    assert found.category is Category.BOOKIE_UNRESPONSIVE
    assert found.details is not None and found.details.endswith("(last answer: EIO)")


def test_limbo_says_how_long_the_bookie_has_answered_it_and_forgets_once_it_answers_otherwise() -> None:
    limbo = BookieAnswer.in_limbo("EUNKNOWNLEDGERSTATE")
    one_retry = TrackerConfig(retry=RecheckPolicy(max_retries=1))
    first = checked_with(limbo, config=one_retry)  # t = 1 s: in limbo, a retry is due
    assert first.state is not None and first.state.limbo == ((BOOKIES[1], 1_000),)
    assert TrackedLedger.from_bytes(first.state.to_bytes()).limbo == first.state.limbo  # kept in the state store
    due = on_timer(first.state, now_ms=181_000, config=one_retry, cluster=CLUSTER)  # the retry, 3 min later
    assert due.state is not None and due.outcome.fetch
    answers = dict(ANSWERS, **{BOOKIES[1]: limbo})
    last = on_answers(due.state, version=1, answers=answers, now_ms=181_000, cluster=CLUSTER, config=one_retry)
    [found] = [v for v in last.outcome.found if v.bookie == BOOKIES[1]]
    assert found.category is Category.LEDGER_IN_LIMBO
    assert found.details is not None and "for 3 min (since 1970-01-01T00:00:01Z)" in found.details
    healthy = on_answers(
        replace(first.state, checked=False), version=1, answers=ANSWERS, now_ms=200_000, cluster=CLUSTER,
        config=one_retry,
    )  # fmt: skip
    assert healthy.state is not None and healthy.state.limbo == ()


def test_a_bookie_no_longer_in_any_ensemble_is_forgotten_by_the_limbo_record() -> None:
    one_retry = TrackerConfig(retry=RecheckPolicy(max_retries=1))
    first = checked_with(BookieAnswer.in_limbo("EUNKNOWNLEDGERSTATE"), config=one_retry)
    assert first.state is not None
    stale = replace(first.state, limbo=(*first.state.limbo, ("replaced:3181", 500)))
    due = on_timer(stale, now_ms=61_000, config=one_retry, cluster=CLUSTER)
    assert due.state is not None
    answers = dict(ANSWERS, **{BOOKIES[1]: BookieAnswer.in_limbo("EUNKNOWNLEDGERSTATE")})
    last = on_answers(due.state, version=1, answers=answers, now_ms=61_000, cluster=CLUSTER, config=one_retry)
    assert last.state is not None and last.state.limbo == ((BOOKIES[1], 1_000),)
