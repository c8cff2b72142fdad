"""The verdict core against the naive per-entry reference on random small ledgers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from scrutiny.core import verdict as verdict_module
from scrutiny.core.ledger_metadata import LedgerMetadata, LedgerState, Segment, build_ledger_metadata
from scrutiny.core.sequence_groups import SequenceGroup, from_entries, per_run
from scrutiny.core.striping import segment_spans
from scrutiny.core.verdict import BookieAnswer, VerdictKind, compute_verdict
from scrutiny.core.vocabulary import Category, Severity
from tests.support.reference import Holdings, reference_replicas
from tests.support.strategies import expand_set

POOL = [f"bookie-{i}.example:3181" for i in range(9)]


#: Where a ledger's entries start: small ids, and ids far out (up to the last entry id 2^63-1 allows).
BASES = [0, 0, 10**12 + 3, 2**63 - 1 - 90]
#: Periods for listings written with periods unrelated to the ensemble; several primes in one
#: ledger push the common modulus past MAX_MODULUS, so run-by-run expansion is compared too.
ODD_PERIODS = [2, 3, 4, 6, 7, 8, 9, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61]


def base_of(metadata: LedgerMetadata) -> int:
    """The first entry id of the ledger's first segment (where the scenario's ids start)."""
    return metadata.segments[0].first_entry_id


@st.composite
def ledgers(draw: st.DrawFn) -> LedgerMetadata:
    e = draw(st.integers(1, 6))
    wq = draw(st.integers(1, e))
    aq = draw(st.integers(1, wq))
    state = draw(st.sampled_from([LedgerState.CLOSED] * 4 + [LedgerState.OPEN, LedgerState.IN_RECOVERY]))
    base = draw(st.sampled_from(BASES))
    last = base + draw(st.integers(-1, 70))
    # Cuts may lie past the last entry: such segments are empty, never checked for entries.
    cuts = sorted(draw(st.lists(st.integers(0, 75), max_size=3)))
    firsts = [base, *(base + cut for cut in cuts)]
    segments = [Segment(first, tuple(draw(st.permutations(POOL))[:e])) for first in firsts]
    return build_ledger_metadata(
        ensemble_size=e, write_quorum=wq, ack_quorum=aq, segments=segments, state=state, last_entry_id=last
    )


def truth(metadata: LedgerMetadata) -> dict[str, set[int]]:
    """What each bookie would hold if nothing were lost (80 entries for open ledgers' last segment)."""
    held: dict[str, set[int]] = {}
    firsts = [s.first_entry_id for s in metadata.segments]
    end = metadata.last_entry_id if metadata.last_entry_id is not None else base_of(metadata) + 80
    for index, segment in enumerate(metadata.segments):
        last = firsts[index + 1] - 1 if index + 1 < len(firsts) else end
        for entry in range(segment.first_entry_id, last + 1):
            for w in range(metadata.write_quorum):
                held.setdefault(segment.ensemble[(entry + w) % metadata.ensemble_size], set()).add(entry)
    return held


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[LedgerMetadata, dict[str, Holdings], dict[str, BookieAnswer]]:
    metadata = draw(ledgers())
    ideal = truth(metadata)
    bookies = sorted({b for s in metadata.segments for b in s.ensemble})
    holdings: dict[str, Holdings] = {}
    answers: dict[str, BookieAnswer] = {}
    for bookie in bookies:
        fate = draw(st.sampled_from(["healthy", "healthy", "holes", "holes", "extra", "unknown", "missing", "none"]))
        base = set(ideal.get(bookie, set()))
        if fate == "unknown":
            holdings[bookie] = None
            answers[bookie] = BookieAnswer.unknown("timeout")
            continue
        if fate == "missing":  # not asked at all: also unknown
            holdings[bookie] = None
            continue
        if fate == "none":
            holdings[bookie] = set()
            answers[bookie] = BookieAnswer.no_ledger()
            continue
        if fate == "holes" and base:
            base -= set(draw(st.lists(st.sampled_from(sorted(base)), max_size=12)))
        if fate == "extra":
            start = base_of(metadata)
            base |= set(draw(st.lists(st.integers(start, start + 85), max_size=10)))
        holdings[bookie] = base
        form = draw(st.sampled_from(["compact", "per_run", "odd"]))
        groups = from_entries(sorted(base))
        if form == "per_run":
            groups = per_run(groups)
        elif form == "odd":
            groups = odd_groups(base, draw)
        answers[bookie] = BookieAnswer.listing(groups)
    return metadata, holdings, answers


def odd_groups(entries: set[int], draw: st.DrawFn) -> list[SequenceGroup]:
    """The same entries described with periods unrelated to the ensemble where possible."""
    period = draw(st.sampled_from(ODD_PERIODS))
    groups: list[SequenceGroup] = []
    remaining = set(entries)
    for residue in range(period):
        members = sorted(e for e in remaining if e % period == residue)
        if len(members) >= 2 and all(b - a == period for a, b in itertools.pairwise(members)):
            groups.append(SequenceGroup(members[0], members[-1], 1, period))
            remaining -= set(members)
    groups.extend(from_entries(sorted(remaining)))
    return sorted(groups)


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_verdict_matches_naive_reference(
    scenario: tuple[LedgerMetadata, dict[str, Holdings], dict[str, BookieAnswer]],
) -> None:
    metadata, holdings, answers = scenario
    expected = reference_replicas(metadata, holdings)
    verdict = compute_verdict(metadata, answers, now_ms=0)
    by_category = {c: [v for v in verdict.violations if v.category is c] for c in Category}

    levels = [
        v for c in (Category.NO_REPLICA, Category.BELOW_ACK_QUORUM, Category.BELOW_WRITE_QUORUM) for v in by_category[c]
    ]
    if expected.worst is None:
        assert levels == []
    else:
        (worst,) = levels
        assert worst.category.value == expected.worst
        assert worst.entries is not None
        assert expand_set(worst.entries.groups) == expected.worst_entries
        assert worst.entries.count == len(expected.worst_entries)

    missing = {(v.segment_first_entry or 0, v.bookie or ""): v for v in by_category[Category.MISSING_REPLICA]}
    assert set(missing) == set(expected.missing)
    for key, violation in missing.items():
        assert violation.entries is not None
        assert expand_set(violation.entries.groups) == expected.missing[key]
        assert violation.entries.count == len(expected.missing[key])
        assert violation.severity is levels[0].severity

    beyond = {v.bookie: v for v in by_category[Category.ENTRIES_BEYOND_LAST_ENTRY]}
    assert {b: expand_set(v.entries.groups) for b, v in beyond.items() if v.entries} == expected.beyond
    for bookie, violation in beyond.items():
        assert bookie is not None and violation.entries is not None
        assert violation.entries.count == len(expected.beyond[bookie])
        assert violation.severity is (Severity.CRITICAL if expected.beyond_critical else Severity.WARNING)

    assert set(verdict.retry_bookies) == expected.retry
    examined = metadata.state is LedgerState.CLOSED or len(metadata.segments) > 1
    aq_one = examined and metadata.ack_quorum == 1
    assert bool(verdict.violations) == bool(expected.worst or expected.beyond or aq_one)
    if verdict.violations:
        assert verdict.verdict is VerdictKind.VIOLATED
    elif expected.retry:
        assert verdict.verdict is VerdictKind.UNKNOWN
    elif examined:
        assert verdict.verdict is VerdictKind.HEALTHY
    else:
        assert verdict.verdict is VerdictKind.SKIPPED


@st.composite
def wild_groups(draw: st.DrawFn) -> SequenceGroup:
    """Consistent groups anywhere in the id space, with any period: what a broken bookie could send."""
    first = draw(st.one_of(st.integers(0, 100), st.integers(0, 2**63 - 2**40)))
    size = draw(st.integers(1, 2**31 - 1))
    period = draw(st.one_of(st.just(0), st.integers(size, 2**31 - 1)))
    runs = 1 if period == 0 else draw(st.integers(1, 2**20))
    return SequenceGroup(first, first + (runs - 1) * period, size, period)


@settings(max_examples=80, deadline=None)
@given(ledgers(), st.lists(st.lists(wild_groups(), max_size=4), min_size=1, max_size=3))
def test_verdict_never_raises_on_any_consistent_listing(
    metadata: LedgerMetadata, listings: list[list[SequenceGroup]]
) -> None:
    bookies = sorted({b for s in metadata.segments for b in s.ensemble})
    answers = {b: BookieAnswer.listing(sorted(listings[i % len(listings)])) for i, b in enumerate(bookies)}
    verdict = compute_verdict(metadata, answers, now_ms=0)
    assert verdict.verdict in VerdictKind


@st.composite
def near_striped(draw: st.DrawFn) -> tuple[LedgerMetadata, dict[str, BookieAnswer]]:
    """Every bookie answering what its stripes hold, in any listing form, or that with one thing changed."""
    metadata = draw(ledgers())
    ideal = truth(metadata)
    answers: dict[str, BookieAnswer] = {}
    for bookie in sorted({b for s in metadata.segments for b in s.ensemble}):
        entries = set(ideal.get(bookie, set()))
        form = draw(st.sampled_from(["compact", "per_run", "odd"]))
        groups = from_entries(sorted(entries))
        answers[bookie] = BookieAnswer.listing(per_run(groups) if form == "per_run" else groups)
        if form == "odd":
            answers[bookie] = BookieAnswer.listing(odd_groups(entries, draw))
    change = draw(st.sampled_from(["none", "none", "drop", "add", "unknown", "absent", "stranger", "negative"]))
    victim = draw(st.sampled_from(sorted(answers)))
    held = set(ideal.get(victim, set()))
    if change == "drop" and held:
        held.discard(draw(st.sampled_from(sorted(held))))
        answers[victim] = BookieAnswer.listing(from_entries(sorted(held)))
    elif change == "add":
        held.add(base_of(metadata) + draw(st.integers(0, 85)))
        answers[victim] = BookieAnswer.listing(from_entries(sorted(held)))
    elif change == "unknown":
        answers[victim] = BookieAnswer.unknown("timeout")
    elif change == "absent":
        del answers[victim]
    elif change == "stranger":
        answers["stranger.example:3181"] = BookieAnswer.listing(from_entries(sorted(held)))
    elif change == "negative":
        answers[victim] = BookieAnswer.no_ledger()
    return metadata, answers


@settings(max_examples=400, deadline=None)
@given(near_striped())
def test_the_striped_shortcut_gives_the_full_verdict(scenario: tuple[LedgerMetadata, dict[str, BookieAnswer]]) -> None:
    """Answers exactly as striped skip the sweep: the verdict is the one the sweep gives, whatever differs."""
    metadata, answers = scenario
    shortcut = compute_verdict(metadata, answers, now_ms=0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verdict_module, "_as_striped", lambda *_: False)
        full = compute_verdict(metadata, answers, now_ms=0)
    assert shortcut == full


@settings(max_examples=100, deadline=None)
@given(ledgers())
def test_a_closed_ledger_held_as_striped_takes_the_shortcut(metadata: LedgerMetadata) -> None:
    """One segment, every bookie listing its stripe (compact, or one group per run once merged as the bookie clients
    merge it): the comparison suffices."""
    last = metadata.last_entry_id
    assume(last is not None)
    assert last is not None
    metadata = build_ledger_metadata(
        ensemble_size=metadata.ensemble_size,
        write_quorum=metadata.write_quorum,
        ack_quorum=metadata.ack_quorum,
        segments=metadata.segments[:1],
        state=LedgerState.CLOSED,
        last_entry_id=last,
    )
    ideal = truth(metadata)
    for form in (from_entries, lambda entries: per_run(from_entries(entries))):
        answers = {
            b: verdict_module._compacted(BookieAnswer.listing(form(sorted(ideal.get(b, set())))))
            for b in metadata.segments[0].ensemble
        }
        spans = segment_spans([base_of(metadata)], [metadata.segments[0].ensemble], metadata.last_entry_id)
        assert verdict_module._as_striped(metadata, [s for s in spans if not s.empty], answers)
