from __future__ import annotations

from dataclasses import replace

from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.ledger_metadata import LedgerMetadata, LedgerState, Segment, build_ledger_metadata
from scrutiny.core.placement import PlacementConfig, PlacementPolicy
from scrutiny.core.sequence_groups import SequenceGroup, from_entries
from scrutiny.core.striping import expected_groups
from scrutiny.core.verdict import (
    BookieAnswer,
    ClusterView,
    Verdict,
    VerdictConfig,
    VerdictKind,
    compute_verdict,
)
from scrutiny.core.vocabulary import Category, Severity
from scrutiny.core.zk_records import UnderReplicationMark
from tests.support.strategies import expand_set

BOOKIES = ("b0:3181", "b1:3181", "b2:3181", "b3:3181", "b4:3181")


def ledger(
    last: int,
    *,
    e: int = 5,
    wq: int = 2,
    aq: int = 2,
    segments: tuple[tuple[int, tuple[str, ...]], ...] | None = None,
    state: LedgerState = LedgerState.CLOSED,
) -> LedgerMetadata:
    return build_ledger_metadata(
        ensemble_size=e,
        write_quorum=wq,
        ack_quorum=aq,
        segments=[Segment(f, ens) for f, ens in (segments or ((0, BOOKIES[:e]),))],
        state=state,
        last_entry_id=last,
        length=min(100 * (last + 1), 2**62),
    )


def healthy_answers(md: LedgerMetadata, upto: int | None = None) -> dict[str, BookieAnswer]:
    """What every bookie holds when nothing is lost: exactly its stripe in each segment."""
    held: dict[str, set[int]] = {}
    firsts = [s.first_entry_id for s in md.segments]
    end = md.last_entry_id if upto is None else upto
    assert end is not None
    for i, segment in enumerate(md.segments):
        last = firsts[i + 1] - 1 if i + 1 < len(firsts) else end
        for index, bookie in enumerate(segment.ensemble):
            groups = expected_groups(index, md.ensemble_size, md.write_quorum, segment.first_entry_id, last)
            held.setdefault(bookie, set()).update(expand_set(groups))
    return {b: BookieAnswer.listing(from_entries(sorted(s))) for b, s in held.items()}


def verdict_of(md: LedgerMetadata, answers: dict[str, BookieAnswer], **kwargs: object) -> Verdict:
    return compute_verdict(md, answers, now_ms=kwargs.pop("now_ms", 10**13), **kwargs)  # type: ignore[arg-type]


def categories(verdict: Verdict) -> list[str]:
    return [v.category.value for v in verdict.violations]


def test_healthy_ledger() -> None:
    md = ledger(999)
    verdict = verdict_of(md, healthy_answers(md))
    assert verdict.verdict is VerdictKind.HEALTHY
    assert verdict.violations == () and verdict.retry_bookies == ()


def test_wiped_bookie_of_a_billion_entry_ledger_is_a_few_groups() -> None:
    md = ledger(10**9 - 1)
    answers = healthy_answers_compact(md)
    answers["b2:3181"] = BookieAnswer.no_ledger()
    verdict = verdict_of(md, answers)
    worst, detail = verdict.violations
    assert worst.category is Category.BELOW_WRITE_QUORUM or worst.category is Category.BELOW_ACK_QUORUM
    # AQ = WQ = 2: one lost copy is below the ack quorum
    assert worst.category is Category.BELOW_ACK_QUORUM and worst.severity is Severity.CRITICAL
    assert worst.entries is not None and worst.entries.count == 2 * 10**9 // 5
    assert len(worst.entries.groups) <= 2
    assert detail.category is Category.MISSING_REPLICA and detail.bookie == "b2:3181"
    assert detail.severity is Severity.CRITICAL
    assert detail.entries == worst.entries
    assert detail.entries is not None and detail.entries.groups[0] == SequenceGroup(1, 10**9 - 4, 2, 5)


def healthy_answers_compact(md: LedgerMetadata) -> dict[str, BookieAnswer]:
    assert md.last_entry_id is not None
    segment = md.segments[0]
    return {
        bookie: BookieAnswer.listing(expected_groups(i, md.ensemble_size, md.write_quorum, 0, md.last_entry_id))
        for i, bookie in enumerate(segment.ensemble)
    }


def test_two_lost_copies_are_data_loss_and_one_is_below_ack_quorum() -> None:
    md = ledger(99, wq=3, aq=2)
    answers = healthy_answers(md)
    # Entry 10's write set is bookies 0, 1, 2. Remove it from bookies 0 and 1: no... one copy left.
    held0 = expand_set(answers["b0:3181"].groups) - {10}
    held1 = expand_set(answers["b1:3181"].groups) - {10, 11}
    held2 = expand_set(answers["b2:3181"].groups) - {10}
    answers["b0:3181"] = BookieAnswer.listing(from_entries(sorted(held0)))
    answers["b1:3181"] = BookieAnswer.listing(from_entries(sorted(held1)))
    answers["b2:3181"] = BookieAnswer.listing(from_entries(sorted(held2)))
    verdict = verdict_of(md, answers)
    worst = verdict.violations[0]
    assert worst.category is Category.NO_REPLICA and worst.severity is Severity.CRITICAL
    assert worst.entries is not None and expand_set(worst.entries.groups) == {10}
    assert [v.category for v in verdict.violations].count(Category.NO_REPLICA) == 1
    assert Category.BELOW_ACK_QUORUM not in [v.category for v in verdict.violations]
    details = {v.bookie: expand_set(v.entries.groups) for v in verdict.violations[1:] if v.entries is not None}
    assert details == {"b0:3181": {10}, "b1:3181": {10, 11}, "b2:3181": {10}}


def test_unknown_answer_is_never_missing() -> None:
    md = ledger(99)
    answers = healthy_answers(md)
    answers["b3:3181"] = BookieAnswer.unknown("timeout")
    verdict = verdict_of(md, answers)
    assert verdict.verdict is VerdictKind.UNKNOWN
    assert verdict.violations == ()
    assert verdict.retry_bookies == ("b3:3181",)


def test_violation_that_holds_whatever_the_unknown_bookie_holds_is_reported() -> None:
    md = ledger(99, wq=2, aq=2)
    answers = healthy_answers(md)
    del answers["b3:3181"]  # not asked: unknown
    answers["b4:3181"] = BookieAnswer.no_ledger()
    verdict = verdict_of(md, answers)
    assert verdict.verdict is VerdictKind.VIOLATED
    assert verdict.retry_bookies == ("b3:3181",)
    worst = verdict.violations[0]
    # entries whose write set is {b3, b4} (residue 3): b3 might hold them, so only below AQ, never NO_REPLICA
    assert worst.category is Category.BELOW_ACK_QUORUM
    assert worst.entries is not None
    assert expand_set(worst.entries.groups) == {e for e in range(100) if e % 5 in (3, 4)}


def test_copies_outside_the_write_set_do_not_count() -> None:
    md = ledger(9)
    answers = healthy_answers(md)
    everything = from_entries(range(10))
    answers["b0:3181"] = BookieAnswer.listing(everything)
    answers["b1:3181"] = BookieAnswer.no_ledger()
    verdict = verdict_of(md, answers)
    missing = {
        v.bookie: expand_set(v.entries.groups)
        for v in verdict.violations
        if v.category is Category.MISSING_REPLICA and v.entries
    }
    assert missing == {"b1:3181": {0, 1, 5, 6}}


def test_entries_beyond_last_entry_with_ack_quorum_copies_is_critical() -> None:
    md = ledger(49)
    answers = healthy_answers(md, upto=59)  # bookies hold 10 entries after the recorded end
    verdict = verdict_of(md, answers)
    beyond = [v for v in verdict.violations if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY]
    assert {v.bookie for v in beyond} == set(BOOKIES)
    assert all(v.severity is Severity.CRITICAL for v in beyond)
    assert set().union(*(expand_set(v.entries.groups) for v in beyond if v.entries)) == set(range(50, 60))


def test_a_single_stray_copy_beyond_the_end_is_a_warning() -> None:
    md = ledger(49)
    answers = healthy_answers(md)
    # entry 50's write set is b0, b1; only b0 holds it
    answers["b0:3181"] = BookieAnswer.listing(from_entries(sorted(expand_set(answers["b0:3181"].groups) | {50})))
    verdict = verdict_of(md, answers)
    (beyond,) = verdict.violations
    assert beyond.category is Category.ENTRIES_BEYOND_LAST_ENTRY and beyond.severity is Severity.WARNING
    assert beyond.bookie == "b0:3181"


def test_a_recovery_that_closed_too_low_is_critical_though_the_next_entry_has_one_copy() -> None:
    # "Closing Ledgers Safely": WQ=3, AQ=2; entry 10 left on one bookie, 11..100 on all three, closed at 9.
    # Entries 10..100 were acknowledged and no reader sees them; entry 10 alone has fewer than AQ copies.
    md = ledger(9, e=3, wq=3, aq=2)
    everything = set(range(0, 101))
    answers = {
        "b0:3181": BookieAnswer.listing(from_entries(sorted(everything))),
        "b1:3181": BookieAnswer.listing(from_entries(sorted(everything - {10}))),
        "b2:3181": BookieAnswer.listing(from_entries(sorted(everything - {10}))),
    }
    verdict = verdict_of(md, answers)
    beyond = [v for v in verdict.violations if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY]
    assert [(v.bookie, v.severity) for v in beyond] == [(b, Severity.CRITICAL) for b in BOOKIES[:3]]
    assert "90 entries after 9 (from 11) have at least 2 (AQ) copies" in beyond[0].details
    assert verdict.verdict is VerdictKind.VIOLATED and verdict.retry_bookies == ()


def test_an_empty_close_over_acknowledged_entries_is_critical() -> None:
    # BP-46's case: closed empty (lastEntryId -1) while entry 0 and 1 have AQ copies in their write sets.
    md = ledger(-1, e=3, wq=2, aq=2)
    answers = healthy_answers(ledger(1, e=3, wq=2, aq=2))
    verdict = verdict_of(md, answers)
    beyond = [v for v in verdict.violations if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY]
    assert beyond and all(v.severity is Severity.CRITICAL for v in beyond)


def test_copies_beyond_the_end_below_ack_quorum_everywhere_are_a_warning() -> None:
    # WQ=3, AQ=2: each entry after the end is on one bookie of its write set only (never acknowledged).
    md = ledger(9, e=3, wq=3, aq=2)
    answers = healthy_answers(md)
    for index, bookie in enumerate(BOOKIES[:3]):
        stray = {e for e in range(10, 40) if e % 3 == index}
        held = expand_set(answers[bookie].groups) | stray
        answers[bookie] = BookieAnswer.listing(from_entries(sorted(held)))
    verdict = verdict_of(md, answers)
    beyond = [v for v in verdict.violations if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY]
    assert len(beyond) == 3 and all(v.severity is Severity.WARNING for v in beyond)


def test_one_copy_beyond_the_end_whose_header_proves_acknowledgement_is_critical() -> None:
    # E=3 WQ=3 AQ=2 closed empty; b0 alone kept entries 0..29, and entry 29 says the writer had 0..28 acknowledged.
    md = ledger(-1, e=3, wq=3, aq=2)
    held = BookieAnswer.listing([SequenceGroup.run(0, 29)])
    answers = {
        "b0:3181": replace(held, beyond=EntryHeader(7, 29, 28, 1920)),
        "b1:3181": BookieAnswer.no_ledger(),
        "b2:3181": BookieAnswer.no_ledger(),
    }
    verdict = verdict_of(md, answers)
    (beyond,) = verdict.violations
    assert (beyond.category, beyond.severity, beyond.bookie) == (
        Category.ENTRIES_BEYOND_LAST_ENTRY,
        Severity.CRITICAL,
        "b0:3181",
    )
    assert "entry 29 on b0:3181 carries last-add-confirmed 28: entries 0 to 28 (29) were acknowledged" in (
        beyond.details
    )
    assert verdict.retry_bookies == ()
    # Without the header, or with one that proves nothing (never acknowledged past the end), the copies decide.
    for header in (None, EntryHeader(7, 29, -1, 1920)):
        answers["b0:3181"] = replace(held, beyond=header)
        (beyond,) = verdict_of(md, answers).violations
        assert beyond.severity is Severity.WARNING and "last-add-confirmed" not in beyond.details


def test_the_proof_survives_a_listing_of_several_groups() -> None:
    # E=3 WQ=2 closed at 0: b0 kept entries 0 and 2 (two groups); entry 2 carries last-add-confirmed 1.
    md = ledger(0, e=3, wq=2, aq=2)
    answers = healthy_answers(md)
    answers["b0:3181"] = replace(BookieAnswer.listing(from_entries([0, 2])), beyond=EntryHeader(1, 2, 1, 300))
    (beyond,) = [v for v in verdict_of(md, answers).violations if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY]
    assert beyond.severity is Severity.CRITICAL and "last-add-confirmed 1" in beyond.details


def test_a_proof_adds_to_a_finding_the_copies_already_make_critical() -> None:
    md = ledger(49)
    answers = healthy_answers(md, upto=59)
    answers["b4:3181"] = replace(answers["b4:3181"], beyond=EntryHeader(1, 59, 58, 6000))
    beyond = [v for v in verdict_of(md, answers).violations if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY]
    assert all(v.severity is Severity.CRITICAL for v in beyond)
    assert all("AQ) copies" in v.details and "entries 50 to 58 (9)" in v.details for v in beyond)


def test_a_silent_bookie_that_could_give_a_later_entry_ack_quorum_copies_is_retried() -> None:
    # WQ=3, AQ=2: entry 20 (not lastEntryId + 1) is on b0 only; b1, in its write set, is silent.
    md = ledger(9, e=3, wq=3, aq=2)
    answers = healthy_answers(md)
    answers["b0:3181"] = BookieAnswer.listing(from_entries(sorted(expand_set(answers["b0:3181"].groups) | {20})))
    answers["b1:3181"] = BookieAnswer.unknown("timeout")
    verdict = verdict_of(md, answers)
    (beyond,) = [v for v in verdict.violations if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY]
    assert beyond.severity is Severity.WARNING and "b1:3181" in verdict.retry_bookies


def test_empty_closed_ledger_is_healthy_when_the_bookies_hold_nothing() -> None:
    md = ledger(-1)
    verdict = verdict_of(md, {b: BookieAnswer.no_ledger() for b in BOOKIES})
    assert verdict.verdict is VerdictKind.HEALTHY and verdict.retry_bookies == ()


def test_empty_closed_ledger_with_silent_bookies_is_unknown() -> None:
    # A recovery that reached too few bookies closes a ledger empty: entry 0's write set must be asked.
    md = ledger(-1)
    answers = {b: BookieAnswer.no_ledger() for b in BOOKIES[2:]}
    verdict = verdict_of(md, answers)
    assert verdict.verdict is VerdictKind.UNKNOWN
    assert verdict.retry_bookies == ("b0:3181", "b1:3181")


def test_unknown_write_set_bookie_of_the_next_entry_is_retried_beside_a_warning() -> None:
    md = ledger(10)
    answers = healthy_answers(md)
    # entry 11's write set is b1, b2: b1 holds 11, b2 is silent and could make it critical
    answers["b1:3181"] = BookieAnswer.listing(from_entries(sorted(expand_set(answers["b1:3181"].groups) | {11})))
    answers["b2:3181"] = BookieAnswer.unknown("timeout")
    verdict = verdict_of(md, answers)
    (beyond,) = [v for v in verdict.violations if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY]
    assert beyond.severity is Severity.WARNING and beyond.bookie == "b1:3181"
    assert "b2:3181" in verdict.retry_bookies


def test_one_silent_bookie_of_a_ledger_closed_empty_is_retried() -> None:
    # Empty closed ledger, AQ=2, the others holding nothing: the silent one cannot make AQ copies of any entry, but
    # what it holds may carry headers that prove entries acknowledged. Real BookKeeper closed a ledger empty over 30
    # acknowledged entries that only the bookie away during the recovery still held.
    md = ledger(-1)
    answers = {b: BookieAnswer.no_ledger() for b in BOOKIES if b != "b0:3181"}
    verdict = verdict_of(md, answers)
    assert verdict.verdict is VerdictKind.UNKNOWN and verdict.retry_bookies == ("b0:3181",)
    # Once it answers with entries and the header of the last one, the ledger is closed too low, provably.
    answers["b0:3181"] = replace(BookieAnswer.listing([SequenceGroup.run(0, 29)]), beyond=EntryHeader(1, 29, 28, 1920))
    (beyond,) = verdict_of(md, answers).violations
    assert (beyond.category, beyond.severity, beyond.bookie) == (
        Category.ENTRIES_BEYOND_LAST_ENTRY,
        Severity.CRITICAL,
        "b0:3181",
    )


def test_silent_bookies_that_cannot_change_the_beyond_finding_are_not_retried() -> None:
    # Already critical (AQ=1 holder of entry 0): the silent one cannot change it either.
    md = ledger(-1, aq=1)
    answers = {b: BookieAnswer.no_ledger() for b in BOOKIES}
    answers["b0:3181"] = BookieAnswer.unknown("timeout")
    answers["b1:3181"] = BookieAnswer.listing([SequenceGroup.run(0, 0)])
    verdict = verdict_of(md, answers)
    assert verdict.retry_bookies == ()
    beyond = [v for v in verdict.violations if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY]
    assert [(v.bookie, v.severity) for v in beyond] == [("b1:3181", Severity.CRITICAL)]


def test_segments_past_the_last_entry_are_empty_not_missing() -> None:
    # Closed at entry 5 although an ensemble change announced entry 10: entries 6..9 do not exist.
    second = ("b0:3181", "b1:3181", "b9:3181")
    md = ledger(5, e=3, segments=((0, BOOKIES[:3]), (10, second)))
    answers = healthy_answers(ledger(5, e=3))
    answers["b9:3181"] = BookieAnswer.no_ledger()
    verdict = verdict_of(md, answers)
    assert verdict.verdict is VerdictKind.HEALTHY, verdict.violations


def test_entries_beyond_on_a_segment_after_the_last_entry_are_found() -> None:
    second = ("b0:3181", "b1:3181", "b9:3181")
    md = ledger(5, e=3, segments=((0, BOOKIES[:3]), (10, second)))
    answers = healthy_answers(ledger(5, e=3))
    answers["b9:3181"] = BookieAnswer.listing([SequenceGroup.run(10, 12)])
    verdict = verdict_of(md, answers)
    (beyond,) = verdict.violations
    assert beyond.category is Category.ENTRIES_BEYOND_LAST_ENTRY
    assert (beyond.bookie, beyond.segment_first_entry) == ("b9:3181", 10)
    assert beyond.entries is not None and expand_set(beyond.entries.groups) == {10, 11, 12}
    assert beyond.severity is Severity.WARNING  # entry 6's write set (b0, b1) holds nothing past 5


def test_open_ledger_checks_only_sealed_segments() -> None:
    second = ("b0:3181", "b1:3181", "b2:3181", "b3:3181", "b9:3181")
    md = ledger(-1, segments=((0, BOOKIES), (20, second)), state=LedgerState.OPEN)
    assert md.last_entry_id is None
    answers = healthy_answers(ledger(19), upto=19)
    verdict = verdict_of(md, answers)
    assert verdict.verdict is VerdictKind.HEALTHY
    answers["b4:3181"] = BookieAnswer.no_ledger()
    verdict = verdict_of(md, answers)
    assert verdict.verdict is VerdictKind.VIOLATED
    assert all(v.entries is None or (v.entries.last is not None and v.entries.last <= 19) for v in verdict.violations)
    single = ledger(-1, state=LedgerState.IN_RECOVERY)
    assert verdict_of(single, {}).verdict is VerdictKind.SKIPPED


def test_marked_ledger_is_not_reported_for_missing_replicas() -> None:
    md = ledger(99)
    answers = healthy_answers(md)
    answers["b1:3181"] = BookieAnswer.no_ledger()
    mark = UnderReplicationMark(("b1:3181",), 10**13 - 1000)
    verdict = verdict_of(md, answers, under_replication=mark)
    assert verdict.verdict is VerdictKind.HEALTHY


def test_marked_ledger_with_data_loss_still_reports_no_replica() -> None:
    md = ledger(99)
    answers = healthy_answers(md)
    answers["b1:3181"] = BookieAnswer.no_ledger()
    answers["b2:3181"] = BookieAnswer.no_ledger()
    verdict = verdict_of(md, answers, under_replication=UnderReplicationMark(("b1:3181",), 10**13 - 1000))
    assert categories(verdict) == ["NO_REPLICA"]


def test_under_replication_stuck_after_the_grace_period() -> None:
    md = ledger(99)
    config = VerdictConfig(under_replication_grace_ms=60_000)
    mark = UnderReplicationMark(("b1:3181",), 1_000_000)
    fresh = verdict_of(md, healthy_answers(md), under_replication=mark, now_ms=1_050_000, config=config)
    assert fresh.verdict is VerdictKind.HEALTHY
    stuck = verdict_of(md, healthy_answers(md), under_replication=mark, now_ms=1_070_000, config=config)
    assert categories(stuck) == ["UNDER_REPLICATION_STUCK"]
    assert stuck.violations[0].severity is Severity.CRITICAL and stuck.violations[0].entries is None
    no_ctime = UnderReplicationMark(("b1:3181",), None)
    assert verdict_of(md, healthy_answers(md), under_replication=no_ctime, config=config).violations == ()


def test_ack_quorum_one_is_info() -> None:
    md = ledger(9, wq=2, aq=1)
    verdict = verdict_of(md, healthy_answers(md))
    assert categories(verdict) == ["ACK_QUORUM_ONE"]
    assert verdict.violations[0].severity is Severity.INFO


def test_unregistered_bookie_of_a_closed_ledger() -> None:
    md = ledger(9)
    cluster = ClusterView(writable=frozenset(BOOKIES[:3]), readonly=frozenset({"b3:3181"}))
    verdict = verdict_of(md, healthy_answers(md), cluster=cluster)
    assert [(v.category.value, v.bookie) for v in verdict.violations] == [("BOOKIE_NOT_REGISTERED", "b4:3181")]
    open_md = ledger(-1, state=LedgerState.OPEN)
    assert verdict_of(open_md, {}, cluster=cluster).violations == ()


def test_placement_failure_uses_known_racks_of_stopped_bookies() -> None:
    md = ledger(9, e=3, wq=2, aq=2)
    racks = {"b0:3181": "/r1", "b1:3181": "/r1", "b2:3181": "/r2"}
    config = VerdictConfig(placement=PlacementConfig(policy=PlacementPolicy.RACKAWARE))
    cluster = ClusterView(racks=racks, writable=frozenset({"b0:3181", "b2:3181"}), readonly=frozenset({"b1:3181"}))
    verdict = verdict_of(md, healthy_answers(md), config=config, cluster=cluster)
    assert categories(verdict) == ["PLACEMENT_FAIL"]  # write set (b0, b1) is on one rack
    good = {"b0:3181": "/r1", "b1:3181": "/r2", "b2:3181": "/r3"}
    assert verdict_of(md, healthy_answers(md), config=config, cluster=ClusterView(racks=good)).violations == ()


def test_entry_ids_up_to_the_largest_long() -> None:
    top = 2**63 - 1
    start = top - 1_000_003
    first, second = BOOKIES[:3], BOOKIES[2:5]
    md = ledger(top, e=3, segments=((0, first), (start, second)))
    held: dict[str, list[SequenceGroup]] = {b: [] for b in BOOKIES}
    for index, bookie in enumerate(first):
        held[bookie] += expected_groups(index, 3, 2, 0, start - 1)
    for index, bookie in enumerate(second):
        held[bookie] += expected_groups(index, 3, 2, start, top)
    answers = {b: BookieAnswer.listing(g) for b, g in held.items()}
    assert verdict_of(md, answers).verdict is VerdictKind.HEALTHY
    answers["b4:3181"] = BookieAnswer.no_ledger()
    verdict = verdict_of(md, answers)
    lost = expected_groups(2, 3, 2, start, top)
    worst, detail = verdict.violations
    assert worst.category is Category.BELOW_ACK_QUORUM and detail.bookie == "b4:3181"
    assert worst.entries is not None and detail.entries == worst.entries
    assert worst.entries.count == sum(g.count for g in lost)
    assert (worst.entries.first, worst.entries.last) == (lost[0].first, lost[-1].last)


def test_hundred_bookie_ensemble_and_many_segments() -> None:
    pool = tuple(f"bk{i:03d}:3181" for i in range(120))
    segments = tuple((k * 1000, pool[k % 20 : k % 20 + 100]) for k in range(40))
    md = ledger(40 * 1000 - 1, e=100, wq=3, aq=2, segments=segments)
    assert verdict_of(md, healthy_answers(md)).verdict is VerdictKind.HEALTHY
    answers = healthy_answers(md)
    answers[pool[50]] = BookieAnswer.no_ledger()
    verdict = verdict_of(md, answers)
    assert verdict.violations[0].category is Category.BELOW_WRITE_QUORUM  # WQ 3, AQ 2: two copies left
    details = [v for v in verdict.violations if v.category is Category.MISSING_REPLICA]
    assert len(details) == 40 and {v.bookie for v in details} == {pool[50]}
    assert sum(v.entries.count for v in details if v.entries) == 40 * 30


def test_zone_aware_soft_placement_is_info() -> None:
    md = ledger(9, e=3, wq=3, aq=2)
    zones = {"b0:3181": "/z1/a", "b1:3181": "/z2/a", "b2:3181": "/z2/b"}
    config = VerdictConfig(placement=PlacementConfig(policy=PlacementPolicy.ZONEAWARE))
    verdict = verdict_of(md, healthy_answers(md), config=config, cluster=ClusterView(racks=zones))
    assert [(v.category, v.severity, v.segment_first_entry) for v in verdict.violations] == [
        (Category.PLACEMENT_SOFT, Severity.INFO, 0)
    ]


def test_irregular_listing_beyond_budget_is_unknown_not_missing() -> None:
    md = ledger(10**9 - 1)
    answers = healthy_answers_compact(md)
    answers["b1:3181"] = BookieAnswer.listing([SequenceGroup(0, 4099 * 2_000_000, 1, 4099)])
    verdict = verdict_of(md, answers)
    assert verdict.verdict is VerdictKind.UNKNOWN and verdict.retry_bookies == ("b1:3181",)


def test_a_listing_that_spans_the_segment_but_lacks_part_of_its_stripe_is_missing_replicas() -> None:
    # E=3 WQ=2: b0 should hold entries 0, 2, 3, 5, 6, ... (residues 0 and 2 of 3); it lists every third entry from 0
    # to the last one, one group over the whole segment: what it lacks (residue 2) must still be found.
    md = ledger(99, e=3)
    answers = healthy_answers_compact(md)
    answers["b0:3181"] = BookieAnswer.listing([SequenceGroup(0, 99, 1, 3)])
    verdict = verdict_of(md, answers)
    assert verdict.verdict is VerdictKind.VIOLATED
    lacking = [v for v in verdict.violations if v.category is Category.MISSING_REPLICA]
    assert [v.bookie for v in lacking] == ["b0:3181"]
    assert lacking[0].entries is not None and lacking[0].entries.count == 33  # 2, 5, ..., 98
