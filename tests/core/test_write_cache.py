"""The write-cache rule: an index read older than the ledger's last write plus the lag proves only what it lists.

Measured on real bookies (BookKeeper 4.17.3, DbLedgerStorage, flushInterval 60 s): a ledger closed at t = 0 is
answered NO_LEDGER by the agent of every bookie of its ensemble until the flush at t ≈ 60 s. Without the rule each
such check is a critical NO_REPLICA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.ledger_metadata import encode_ledger_metadata_v3
from scrutiny.core.ledger_tracker import RecheckPolicy, TrackedLedger, TrackerConfig, on_answers, on_metadata, on_timer
from scrutiny.core.sequence_groups import from_entries
from scrutiny.core.verdict import (
    BookieAnswer,
    ClusterView,
    Verdict,
    VerdictConfig,
    VerdictKind,
    Violation,
    compute_verdict,
)
from scrutiny.core.vocabulary import Category
from tests.core.test_verdict import BOOKIES, categories, healthy_answers, ledger
from tests.support.strategies import expand_set

WRITTEN = 1_800_000_000_000
LAG = 65_000
CONFIG = VerdictConfig(index_lag_ms=LAG)


def as_of(answers: dict[str, BookieAnswer], at_ms: int) -> dict[str, BookieAnswer]:
    return {b: replace(a, as_of_ms=at_ms) for b, a in answers.items()}


def loss(verdict: Verdict) -> list[str]:
    """The replica level the verdict classified the ledger at (MISSING_REPLICA details aside)."""
    return [c for c in categories(verdict) if c != "MISSING_REPLICA"]


def not_flushed(e: int = 3) -> dict[str, BookieAnswer]:
    """What the agents answer right after the close: the ledger is not in any index yet."""
    return {b: replace(BookieAnswer.no_ledger(), as_of_ms=WRITTEN + 1_000) for b in BOOKIES[:e]}


def test_every_index_before_the_flush_is_withheld_not_a_lost_ledger() -> None:
    md = ledger(99, e=3)
    without_rule = compute_verdict(md, not_flushed(), now_ms=WRITTEN + 1_000, written_ms=WRITTEN)
    assert loss(without_rule) == ["NO_REPLICA"]  # the false alarm the rule prevents
    verdict = compute_verdict(md, not_flushed(), now_ms=WRITTEN + 1_000, config=CONFIG, written_ms=WRITTEN)
    assert verdict.violations == () and verdict.verdict is VerdictKind.UNKNOWN
    assert set(verdict.retry_bookies) == set(BOOKIES[:3])
    assert verdict.settles_at_ms == WRITTEN + LAG


def test_an_index_read_after_the_lag_is_trusted_and_real_loss_is_found() -> None:
    md = ledger(99, e=3)
    late = {b: replace(a, as_of_ms=WRITTEN + LAG) for b, a in not_flushed().items()}
    verdict = compute_verdict(md, late, now_ms=WRITTEN + LAG, config=CONFIG, written_ms=WRITTEN)
    assert loss(verdict) == ["NO_REPLICA"] and verdict.settles_at_ms is None


def test_an_early_index_that_lists_everything_is_healthy_at_once() -> None:
    md = ledger(99, e=3)
    verdict = compute_verdict(
        md, as_of(healthy_answers(md), WRITTEN + 10), now_ms=WRITTEN + 10, config=CONFIG, written_ms=WRITTEN
    )
    assert verdict.verdict is VerdictKind.HEALTHY and verdict.settles_at_ms is None


def test_a_loss_certain_from_a_trusted_answer_is_reported_beside_withheld_ones() -> None:
    md = ledger(99, e=3)
    answers = as_of(healthy_answers(md, upto=89), WRITTEN + 5)  # the tail still in the write caches
    answers[BOOKIES[0]] = replace(BookieAnswer.no_ledger(), as_of_ms=WRITTEN + LAG + 1)  # flushed: really empty
    verdict = compute_verdict(md, answers, now_ms=WRITTEN + LAG + 1, config=CONFIG, written_ms=WRITTEN)
    missing = [v for v in verdict.violations if v.category is Category.MISSING_REPLICA]
    assert [v.bookie for v in missing] == [BOOKIES[0]]
    assert missing[0].entries is not None and missing[0].entries.count == 67  # all of bookie 0's stripe
    assert set(verdict.retry_bookies) == {BOOKIES[1], BOOKIES[2]}


def test_answers_from_the_bookie_itself_and_a_disabled_rule_are_never_withheld() -> None:
    md = ledger(99, e=3)
    v3 = {b: BookieAnswer.no_ledger() for b in BOOKIES[:3]}  # as_of_ms None: the bookie answered
    assert loss(compute_verdict(md, v3, now_ms=WRITTEN, config=CONFIG, written_ms=WRITTEN)) == ["NO_REPLICA"]
    off = compute_verdict(md, not_flushed(), now_ms=WRITTEN, config=VerdictConfig(), written_ms=WRITTEN)
    assert loss(off) == ["NO_REPLICA"]
    unknown_time = compute_verdict(md, not_flushed(), now_ms=WRITTEN, config=CONFIG, written_ms=None)
    assert loss(unknown_time) == ["NO_REPLICA"]


@settings(max_examples=150, deadline=None)
@given(
    e=st.integers(1, 5),
    data=st.data(),
)
def test_withholding_never_invents_a_finding_and_changes_nothing_once_settled(e: int, data: st.DataObject) -> None:
    wq = data.draw(st.integers(1, e))
    md = ledger(data.draw(st.integers(-1, 40)), e=e, wq=wq, aq=data.draw(st.integers(1, wq)))
    healthy = {b: expand_set(a.groups) for b, a in healthy_answers(md).items()} if md.last_entry_id != -1 else {}
    answers: dict[str, BookieAnswer] = {}
    for bookie in BOOKIES[:e]:
        held = sorted(e_ for e_ in healthy.get(bookie, set()) if data.draw(st.booleans()))
        answer = BookieAnswer.listing(from_entries(held)) if held else BookieAnswer.no_ledger()
        answers[bookie] = replace(answer, as_of_ms=WRITTEN + data.draw(st.integers(0, 2 * LAG)))
    now = WRITTEN + 2 * LAG
    plain = compute_verdict(md, answers, now_ms=now, written_ms=WRITTEN)
    ruled = compute_verdict(md, answers, now_ms=now, config=CONFIG, written_ms=WRITTEN)
    if ruled.settles_at_ms is None:
        assert ruled == plain  # nothing withheld: the rule is invisible
        return
    withheld = {b for b, a in answers.items() if a.as_of_ms is not None and a.as_of_ms < WRITTEN + LAG}
    assert withheld and ruled.retry_bookies  # the ledger is asked again
    # Reference: a withheld bookie counts as holding its whole stripe; what is found holds whatever it holds.
    full = {b: BookieAnswer.listing(healthy_answers(md)[b].groups) if b in withheld else a for b, a in answers.items()}
    reference = compute_verdict(md, full, now_ms=now, written_ms=WRITTEN)
    assert _as_sets(ruled.violations) == _as_sets(reference.violations)


def _as_sets(violations: Sequence[Violation]) -> list[tuple[object, ...]]:
    """The violations with their entries as sets (one set of entries may be grouped in more than one way)."""
    return [
        (v.category, v.severity, v.bookie, v.segment_first_entry, v.details, v.entries and expand_set(v.entries.groups))
        for v in violations
    ]


def test_the_tracker_waits_for_the_flush_then_completes_healthy() -> None:
    md = ledger(99, e=3)
    data = encode_ledger_metadata_v3(md)
    config = TrackerConfig(verdict=CONFIG, retry=RecheckPolicy())
    now = WRITTEN + 1_000
    step = on_metadata(
        None, version=1, data=data, changed_ms=WRITTEN, answers=not_flushed(), now_ms=now,
        cluster=ClusterView(), config=config, written_ms=WRITTEN,
    )  # fmt: skip
    assert step.state is not None and step.outcome.found == () and step.outcome.check is None
    assert step.state.retry_at_ms == WRITTEN + LAG  # not the 2 s backoff: the answers would be the same
    assert TrackedLedger.from_bytes(step.state.to_bytes()) == step.state  # the last write survives a restart
    timed = on_timer(step.state, now_ms=WRITTEN + LAG)
    assert timed.state is not None and set(timed.outcome.fetch) == set(BOOKIES[:3])
    flushed = as_of(healthy_answers(md), WRITTEN + LAG)
    done = on_answers(
        timed.state, version=1, answers=flushed, now_ms=WRITTEN + LAG, cluster=ClusterView(), config=config
    )
    assert done.outcome.check is not None and done.outcome.check.verdict is VerdictKind.HEALTHY
    assert done.state is not None and done.state.written_ms is None and done.state.metadata is None  # small again
