"""One ledger in a one-shot scan: fast and deep checks, retries, marks, and what an earlier check left open."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.backoff import Backoff
from scrutiny.core.ledger_metadata import LedgerState, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.ledger_scan import (
    ScanItem,
    ScanStep,
    SelectionError,
    bookies_to_ask,
    gone,
    involves_bookie,
    parse_ledger_selection,
    retry_due,
    scan_deep,
    scan_fast,
    scan_retried,
)
from scrutiny.core.ledger_tracker import RecheckPolicy, TrackerConfig
from scrutiny.core.placement import PlacementConfig, PlacementPolicy
from scrutiny.core.replication_locks import ReplicationLock
from scrutiny.core.sequence_groups import from_entries
from scrutiny.core.verdict import BookieAnswer, ClusterView, VerdictConfig, VerdictKind
from scrutiny.core.zk_paths import MAX_LEDGER_ID
from scrutiny.core.zk_records import UnderReplicationMark

pytestmark = pytest.mark.unit

BOOKIES = ("b1:3181", "b2:3181", "b3:3181")
NOW = 10_000_000
CONFIG = TrackerConfig(
    verdict=VerdictConfig(under_replication_grace_ms=60_000),
    retry=RecheckPolicy(backoff=Backoff(1.0, 60.0), max_retries=2),
)
CLUSTER = ClusterView(writable=frozenset(BOOKIES))
MISSING_B2 = ("MISSING_REPLICA", "b2:3181", 0)


def blob(state: LedgerState = LedgerState.CLOSED, *, ack: int = 2, ensemble: tuple[str, ...] = BOOKIES) -> bytes:
    metadata = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=ack, segments=[(0, ensemble)], state=state, last_entry_id=9
    )
    return encode_ledger_metadata_v3(metadata)


def held(index: int, *, lost: frozenset[int] = frozenset()) -> BookieAnswer:
    entries = [e for e in range(10) if index in (e % 3, (e + 1) % 3) and e not in lost]
    return BookieAnswer.listing(from_entries(entries))


def healthy() -> dict[str, BookieAnswer]:
    return {b: held(i) for i, b in enumerate(BOOKIES)}


def item(data: bytes | None = None, **kw: object) -> ScanItem:
    return ScanItem(ledger_id=7, version=3, data=blob() if data is None else data, **kw)  # type: ignore[arg-type]


def found(step: ScanStep) -> list[tuple[str, str | None]]:
    return sorted((v.category.value, v.bookie) for o in step.outcomes for v in o.found)


def resolved(step: ScanStep) -> list[tuple[str, str, int]]:
    return sorted(k for o in step.outcomes for k in o.resolved)


def checks(step: ScanStep) -> list[VerdictKind]:
    return [o.check.verdict for o in step.outcomes if o.check is not None]


# ------------------------------------------------------------------------------------------------ selection


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        ("5", [5], [4, 6]),
        ("10-20", [10, 15, 20], [9, 21]),
        ("100-", [100, MAX_LEDGER_ID], [99]),
        ("-50", [0, 50], [51]),
        (" 1, 3-4 ,9- ", [1, 3, 4, 9, 10**12], [0, 2, 5, 8]),
    ],
)
def test_ledger_selection(text: str, inside: list[int], outside: list[int]) -> None:
    selection = parse_ledger_selection(text)
    assert all(i in selection for i in inside)
    assert not any(o in selection for o in outside)
    assert parse_ledger_selection(selection.describe()) == selection


@pytest.mark.parametrize("text", ["x", "5-3", "-", "1,,2", "1-2-3", "-5-", str(2**63), "1.5"])
def test_bad_ledger_selections_are_refused_with_the_part(text: str) -> None:
    with pytest.raises(SelectionError, match="ledger range"):
        parse_ledger_selection(text)


def test_no_selection_is_every_ledger() -> None:
    for text in (None, "", "  "):
        selection = parse_ledger_selection(text)
        assert selection.everything and 0 in selection and MAX_LEDGER_ID in selection


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)), min_size=1, max_size=5), st.integers(0, 220))
def test_selection_matches_a_reference(pairs: list[tuple[int, int]], probe: int) -> None:
    ranges = [(min(a, b), max(a, b)) for a, b in pairs]
    selection = parse_ledger_selection(",".join(f"{lo}-{hi}" for lo, hi in ranges))
    assert (probe in selection) == any(lo <= probe <= hi for lo, hi in ranges)


# ------------------------------------------------------------------------------------------------ fast


def test_fast_reports_what_the_metadata_decides_and_asks_nobody() -> None:
    racks = ClusterView(writable=frozenset(BOOKIES[:2]), racks={})
    step = scan_fast(item(blob(ack=1)), now_ms=NOW, cluster=racks, config=CONFIG)
    assert found(step) == [("ACK_QUORUM_ONE", None), ("BOOKIE_NOT_REGISTERED", "b3:3181")]
    assert checks(step) == [VerdictKind.VIOLATED]
    assert all(o.check is None or o.check.bookies_asked == 0 for o in step.outcomes)


def test_fast_on_a_clean_ledger_is_unknown_not_healthy_and_leaves_replica_findings_alone() -> None:
    step = scan_fast(
        item(open_keys=(MISSING_B2, ("ACK_QUORUM_ONE", "", -1))), now_ms=NOW, cluster=CLUSTER, config=CONFIG
    )
    assert found(step) == []
    assert checks(step) == [VerdictKind.UNKNOWN]
    assert resolved(step) == [("ACK_QUORUM_ONE", "", -1)]


def test_fast_placement_uses_the_racks() -> None:
    config = TrackerConfig(
        verdict=VerdictConfig(placement=PlacementConfig(policy=PlacementPolicy.RACKAWARE, min_racks_per_write_quorum=2))
    )
    racks = ClusterView(writable=frozenset(BOOKIES), racks=dict.fromkeys(BOOKIES, "/r1"))
    step = scan_fast(item(), now_ms=NOW, cluster=racks, config=config)
    assert [c for c, _ in found(step)] and all(c.startswith("PLACEMENT") for c, _ in found(step))


def test_unreadable_metadata_is_reported_and_resolves_nothing_else() -> None:
    step = scan_fast(item(b"garbage", open_keys=(MISSING_B2,)), now_ms=NOW, cluster=CLUSTER, config=CONFIG)
    assert found(step) == [("METADATA_UNREADABLE", None)]
    assert resolved(step) == []
    deep = scan_deep(item(b"garbage"), {}, now_ms=NOW, cluster=CLUSTER, config=CONFIG)
    assert found(deep) == [("METADATA_UNREADABLE", None)]


@pytest.mark.parametrize("scan", ["fast", "deep"])
def test_a_mark_older_than_the_grace_is_stuck_a_young_one_is_not(scan: str) -> None:
    def run(mark: UnderReplicationMark, open_keys: tuple[tuple[str, str, int], ...] = ()) -> ScanStep:
        it = item(mark=mark, open_keys=open_keys)
        if scan == "fast":
            return scan_fast(it, now_ms=NOW, cluster=CLUSTER, config=CONFIG)
        return scan_deep(it, healthy(), now_ms=NOW, cluster=CLUSTER, config=CONFIG)

    stuck = ("UNDER_REPLICATION_STUCK", "", -1)
    assert found(run(UnderReplicationMark(("b2:3181",), NOW - 120_000))) == [("UNDER_REPLICATION_STUCK", None)]
    young = run(UnderReplicationMark(("b2:3181",), NOW - 1_000), open_keys=(stuck,))
    assert found(young) == [] and resolved(young) == [stuck]
    unknown_age = run(UnderReplicationMark(("b2:3181",), None), open_keys=(stuck,))
    assert found(unknown_age) == [] and resolved(unknown_age) == [stuck]
    still = run(UnderReplicationMark(("b2:3181",), NOW - 120_000), open_keys=(stuck,))
    assert found(still) == [("UNDER_REPLICATION_STUCK", None)] and resolved(still) == []


@pytest.mark.parametrize("scan", ["fast", "deep"])
def test_a_stuck_mark_names_its_replication_lock(scan: str) -> None:
    def details(lock: ReplicationLock | None) -> str:
        it = item(mark=UnderReplicationMark(("b2:3181",), NOW - 120_000), lock=lock)
        if scan == "fast":
            step = scan_fast(it, now_ms=NOW, cluster=CLUSTER, config=CONFIG)
        else:
            step = scan_deep(it, healthy(), now_ms=NOW, cluster=CLUSTER, config=CONFIG)
        [stuck] = [v for outcome in step.outcomes for v in outcome.found]
        return stuck.details

    assert details(None).endswith("; not locked: no replication worker is working on it")
    held = details(ReplicationLock("b3:3181", NOW - 120_000))
    assert "; locked by the replication worker on b3:3181 since " in held and "held longer than the grace" in held
    assert "held longer" not in details(ReplicationLock(None, NOW - 1_000))


def test_open_ledgers_without_sealed_segments_are_skipped() -> None:
    data = blob(LedgerState.OPEN)
    assert bookies_to_ask(data) == ()
    for step in (
        scan_fast(item(data, open_keys=(MISSING_B2,)), now_ms=NOW, cluster=CLUSTER, config=CONFIG),
        scan_deep(item(data, open_keys=(MISSING_B2,)), {}, now_ms=NOW, cluster=CLUSTER, config=CONFIG),
    ):
        assert checks(step) == [] and found(step) == [] and resolved(step) == []


# ------------------------------------------------------------------------------------------------ deep


def test_deep_healthy_resolves_what_was_open() -> None:
    step = scan_deep(item(open_keys=(MISSING_B2,)), healthy(), now_ms=NOW, cluster=CLUSTER, config=CONFIG)
    assert checks(step) == [VerdictKind.HEALTHY] and found(step) == [] and resolved(step) == [MISSING_B2]
    assert step.retry_at_ms is None
    assert bookies_to_ask(blob()) == BOOKIES


def test_deep_finds_missing_replicas() -> None:
    answers = {**healthy(), "b2:3181": held(1, lost=frozenset({0, 1}))}
    step = scan_deep(item(), answers, now_ms=NOW, cluster=CLUSTER, config=CONFIG)
    assert ("MISSING_REPLICA", "b2:3181") in found(step)
    assert checks(step) == [VerdictKind.VIOLATED]


def test_deep_retries_silent_bookies_and_an_answer_completes_the_check() -> None:
    answers = {**healthy(), "b3:3181": BookieAnswer.unknown("timeout")}
    first = scan_deep(item(open_keys=(MISSING_B2,)), answers, now_ms=NOW, cluster=CLUSTER, config=CONFIG)
    assert checks(first) == [] and first.state is not None and first.retry_at_ms == NOW + 1_000
    state, ask = retry_due(first.state, now_ms=NOW + 1_000)
    assert ask == BOOKIES
    second = scan_retried(
        item(open_keys=(MISSING_B2,)), state, healthy(), now_ms=NOW + 1_000, cluster=CLUSTER, config=CONFIG
    )
    assert checks(second) == [VerdictKind.HEALTHY] and resolved(second) == [MISSING_B2]


def test_deep_after_the_last_retry_a_registered_silent_bookie_is_unresponsive() -> None:
    silent = {**healthy(), "b3:3181": BookieAnswer.unknown("timeout")}
    step = scan_deep(item(), silent, now_ms=NOW, cluster=CLUSTER, config=CONFIG)
    now = NOW
    rounds = 0
    while step.retry_at_ms is not None:
        assert step.state is not None
        now = step.retry_at_ms
        state, _ = retry_due(step.state, now_ms=now)
        step = scan_retried(item(), state, silent, now_ms=now, cluster=CLUSTER, config=CONFIG)
        rounds += 1
    assert rounds == CONFIG.retry.max_retries
    assert found(step) == [("BOOKIE_UNRESPONSIVE", "b3:3181")]
    assert checks(step) == [VerdictKind.VIOLATED]


def test_gone_resolves_everything_open() -> None:
    outcome = gone([MISSING_B2, ("NO_REPLICA", "", -1), MISSING_B2])
    assert sorted(outcome.resolved) == sorted([MISSING_B2, ("NO_REPLICA", "", -1)])


def test_bookie_filter() -> None:
    assert involves_bookie(blob(), "b2:3181")
    assert not involves_bookie(blob(), "b9:3181")
    assert not involves_bookie(b"garbage", "b2:3181")


def test_a_ledger_in_recovery_longer_than_the_grace_is_stalled_for_both_scans() -> None:
    stalled = [("RECOVERY_STALLED", None)]
    long_ago = item(blob(LedgerState.IN_RECOVERY), written_ms=NOW - CONFIG.recovery_stalled_ms)
    assert found(scan_fast(long_ago, now_ms=NOW, cluster=CLUSTER, config=CONFIG)) == stalled
    assert found(scan_deep(long_ago, {}, now_ms=NOW, cluster=CLUSTER, config=CONFIG)) == stalled
    recent = item(blob(LedgerState.IN_RECOVERY), written_ms=NOW - CONFIG.recovery_stalled_ms + 1)
    assert found(scan_fast(recent, now_ms=NOW, cluster=CLUSTER, config=CONFIG)) == []
    assert found(scan_fast(item(blob(LedgerState.IN_RECOVERY)), now_ms=NOW, cluster=CLUSTER, config=CONFIG)) == []
    key = ("RECOVERY_STALLED", "", -1)
    closed = item(open_keys=(key,), written_ms=NOW)  # its recovery ended with the close
    assert key in resolved(scan_fast(closed, now_ms=NOW, cluster=CLUSTER, config=CONFIG))
    assert key in resolved(scan_deep(closed, healthy(), now_ms=NOW, cluster=CLUSTER, config=CONFIG))
    still = item(blob(LedgerState.IN_RECOVERY), open_keys=(key,), written_ms=NOW - CONFIG.recovery_stalled_ms)
    assert key not in resolved(scan_fast(still, now_ms=NOW, cluster=CLUSTER, config=CONFIG))


def test_an_open_ledger_left_short_of_ack_quorum_by_a_lost_bookie_is_stalled_for_both_scans() -> None:
    stalled = [("OPEN_LEDGER_STALLED", None)]
    key = ("OPEN_LEDGER_STALLED", "", -1)
    only_b1 = ClusterView(writable=frozenset(BOOKIES[:1]))  # 1 of 3 registered, AQ = 2
    open_item = item(blob(LedgerState.OPEN))
    lost = frozenset({"b2:3181"})

    def fast(i: ScanItem, lb: frozenset[str]) -> ScanStep:
        return scan_fast(i, now_ms=NOW, cluster=only_b1, config=CONFIG, lost_bookies=lb)

    def deep(i: ScanItem, lb: frozenset[str]) -> ScanStep:
        return scan_deep(i, {}, now_ms=NOW, cluster=only_b1, config=CONFIG, lost_bookies=lb)

    for scan in (fast, deep):
        step = scan(open_item, lost)
        assert found(step) == stalled
        (violation,) = [v for o in step.outcomes for v in o.found]
        assert "1 of the 3 bookies" in violation.details and "declared lost (BOOKIE_LOST): b2:3181" in violation.details
        # Not declared lost (the job never saw it go, or it left a moment ago): one reading cannot tell how long.
        assert found(scan(open_item, frozenset())) == []
        # A registered bookie declared lost long ago is no reason either.
        assert found(scan(open_item, frozenset({"b1:3181"}))) == []
    # Enough registered bookies end it; still short but not declared lost keeps it open.
    with_key = item(blob(LedgerState.OPEN), open_keys=(key,))
    assert key in resolved(scan_fast(with_key, now_ms=NOW, cluster=CLUSTER, config=CONFIG))
    assert key not in resolved(scan_fast(with_key, now_ms=NOW, cluster=only_b1, config=CONFIG))
    assert key in resolved(scan_deep(item(open_keys=(key,)), healthy(), now_ms=NOW, cluster=CLUSTER, config=CONFIG))
    assert found(scan_fast(item(), now_ms=NOW, cluster=only_b1, config=CONFIG, lost_bookies=lost)) == [
        ("BOOKIE_NOT_REGISTERED", "b2:3181"),
        ("BOOKIE_NOT_REGISTERED", "b3:3181"),
    ]  # a closed ledger is never stalled
