"""The simulator's ground truth: exact rules, its own arithmetic, and agreement with the verdict."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.ledger_metadata import build_ledger_metadata
from scrutiny.core.placement import PlacementConfig, PlacementPolicy
from scrutiny.core.sequence_groups import SequenceGroup, expand
from scrutiny.core.verdict import BookieAnswer, ClusterView, VerdictConfig, compute_verdict
from scrutiny.core.vocabulary import CLUSTER_LEDGER_ID, Category, Severity
from scrutiny.core.zk_records import UnderReplicationMark
from scrutiny.paths import PROJECT_ROOT
from scrutiny.simulator.generator import generate, parse_fault_mix
from scrutiny.simulator.model import BookieMode, Scenario
from scrutiny.simulator.scenario import load_scenario, parse_scenario
from scrutiny.simulator.state import ClusterState, ScheduledChange
from scrutiny.simulator.truth import (
    GRACE_STEP_S,
    TruthState,
    TruthViolation,
    cluster_truth,
    iter_runs,
    ledger_truth,
    load_truth,
    residue_groups,
    same_entries,
    truth_document,
    truth_timeline,
    write_truth,
)

REPO = PROJECT_ROOT
HEAD = """
[scenario]
seed = 11
[cluster]
bookies = 6
racks = ["/r1", "/r2", "/r3"]
[checker]
placement = "rackaware"
[defaults]
ensemble_size = 3
write_quorum = 2
ack_quorum = 2
last_entry = 59
"""
E123 = 'ensemble = ["bookie-1", "bookie-2", "bookie-3"]'


def state_of(body: str) -> ClusterState:
    return ClusterState.from_scenario(parse_scenario(HEAD + body))


def found(state: ClusterState, ledger_id: int, now_s: float = 0.0) -> dict[tuple[str, str | None], TruthViolation]:
    return {(v.category.value, v.bookie): v for v in ledger_truth(state, ledger_id, now_s)}


def entries(violation: TruthViolation) -> list[int]:
    assert violation.entries is not None
    return list(expand(violation.entries))


# --------------------------------------------------------------------------- arithmetic


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 60),
    st.integers(0, 60),
    st.integers(1, 7),
    st.data(),
)
def test_residue_groups_are_exactly_the_residues(lo: int, length: int, modulus: int, data: st.DataObject) -> None:
    residues = frozenset(data.draw(st.sets(st.integers(0, modulus - 1))))
    hi = lo + length
    groups = residue_groups(lo, hi, residues, modulus)
    assert sorted(expand(groups)) == [e for e in range(lo, hi + 1) if e % modulus in residues]
    for group in groups:
        SequenceGroup.of(group.first_start, group.last_start, group.size, group.period)


def test_same_entries_compares_sets_not_spellings() -> None:
    periodic = [SequenceGroup(0, 6, 2, 3)]  # 0-1, 3-4, 6-7
    runs = [SequenceGroup.run(0, 1), SequenceGroup.run(3, 4), SequenceGroup.run(6, 6), SequenceGroup.run(7, 7)]
    assert same_entries(periodic, runs)
    assert not same_entries(periodic, runs[:3])
    assert not same_entries(periodic, [SequenceGroup(1, 7, 2, 3)])
    assert list(iter_runs(runs)) == [(0, 1), (3, 4), (6, 7)]


# --------------------------------------------------------------------------- the rules, exactly


def test_replica_levels_and_missing_rows() -> None:
    state = state_of(
        f"""
[[ledgers]]
id = 1
{E123}
holdings = [{{ bookie = "bookie-2", missing = [[10, 19]] }}]
[[ledgers]]
id = 2
{E123}
ack_quorum = 1
holdings = [{{ bookie = "bookie-2", missing = [[10, 19]] }}]
[[ledgers]]
id = 3
{E123}
holdings = [{{ bookie = "bookie-1", missing = [30] }}, {{ bookie = "bookie-2", missing = [[30, 31]] }}]
"""
    )
    one = found(state, 1)
    assert set(one) == {("BELOW_ACK_QUORUM", None), ("MISSING_REPLICA", "bookie-2")}
    # bookie-2 (index 1) holds residues 0 and 1 mod 3 (entries e with (1 - e) mod 3 < 2)
    lost = [e for e in range(10, 20) if e % 3 in (0, 1)]
    assert entries(one["BELOW_ACK_QUORUM", None]) == lost == entries(one["MISSING_REPLICA", "bookie-2"])
    assert one["MISSING_REPLICA", "bookie-2"].severity is Severity.CRITICAL
    assert one["MISSING_REPLICA", "bookie-2"].segment_first_entry == 0
    two = found(state, 2)
    assert set(two) == {("BELOW_WRITE_QUORUM", None), ("MISSING_REPLICA", "bookie-2"), ("ACK_QUORUM_ONE", None)}
    assert two["MISSING_REPLICA", "bookie-2"].severity is Severity.WARNING
    three = found(state, 3)  # entry 30 (residue 0) is written to indexes 0 and 1: both lost it
    assert entries(three["NO_REPLICA", None]) == [30]
    assert ("BELOW_ACK_QUORUM", None) not in three  # classified once, by the worst level
    assert entries(three["MISSING_REPLICA", "bookie-2"]) == [30, 31]


def test_unknown_is_never_missing_and_registered_unknown_bookies_are_unresponsive() -> None:
    state = state_of(
        f"""
[bookies.bookie-3]
fault = "unresponsive"
[bookies.bookie-1]
mode = "stopped"
[bookies.bookie-4]
limbo = [3]
[[ledgers]]
id = 1
{E123}
holdings = [{{ bookie = "bookie-1", nothing = true }}, {{ bookie = "bookie-3", nothing = true }}]
[[ledgers]]
id = 2
ensemble = ["bookie-4", "bookie-5", "bookie-6"]
[[ledgers]]
id = 3
ensemble = ["bookie-4", "bookie-5", "bookie-6"]
"""
    )
    one = found(state, 1)
    # bookie-1 (stopped) and bookie-3 (unresponsive) hold nothing, but what they say is unknown: not missing
    assert not {key for key in one if key[0] in ("NO_REPLICA", "BELOW_ACK_QUORUM", "MISSING_REPLICA")}
    assert ("BOOKIE_UNRESPONSIVE", "bookie-3") in one
    assert ("BOOKIE_UNRESPONSIVE", "bookie-1") not in one  # not registered ...
    assert one["BOOKIE_NOT_REGISTERED", "bookie-1"].severity is Severity.WARNING  # ... which is its finding
    assert not found(state, 2)
    assert set(found(state, 3)) == {("LEDGER_IN_LIMBO", "bookie-4")}  # it answers: the ledger is in limbo there


def test_marked_ledgers_open_ledgers_corrupt_metadata_and_stuck_marks() -> None:
    state = state_of(
        f"""
[[ledgers]]
id = 1
{E123}
under_replicated = {{ replicas = ["bookie-2"], age_s = 100 }}
holdings = [{{ bookie = "bookie-2", missing = [[0, 9]] }}]
[[ledgers]]
id = 2
{E123}
under_replicated = {{ replicas = [1, 2], ctime = false }}
holdings = [{{ bookie = "bookie-2", missing = [1] }}, {{ bookie = "bookie-3", missing = [1] }}]
[[ledgers]]
id = 3
state = "OPEN"
segments = [{{ first = 0, ensemble = ["bookie-1", "bookie-2", "bookie-3"] }},
            {{ first = 40, ensemble = ["bookie-1", "bookie-2", "bookie-4"] }}]
holdings = [{{ bookie = "bookie-2", missing = [[38, 45]] }}]
[[ledgers]]
id = 4
state = "OPEN"
{E123}
ack_quorum = 1
holdings = [{{ bookie = "bookie-2", nothing = true }}]
[[ledgers]]
id = 5
{E123}
corrupt_metadata = "bad_version"
under_replicated = {{ age_s = 99999 }}
"""
    )
    assert not found(state, 1)  # marked: missing replicas are not re-reported
    assert set(found(state, 1, now_s=3500.001)) == {("UNDER_REPLICATION_STUCK", None)}  # 3600 s after ctime -100
    assert not found(state, 1, now_s=3500.0)  # exactly at the end of the grace period: not yet (strict)
    two = found(state, 2)  # entry 1 (residue 1) is written to indexes 1 and 2: NO_REPLICA, without rows
    assert set(two) == {("NO_REPLICA", None)} and entries(two["NO_REPLICA", None]) == [1]
    assert ("UNDER_REPLICATION_STUCK", None) in found(state, 2, now_s=3600.01)  # no ctime: from when it appeared
    three = found(state, 3)  # only the sealed segment [0, 39] is checked
    assert entries(three["MISSING_REPLICA", "bookie-2"]) == [e for e in range(38, 40) if e % 3 in (0, 1)]
    assert three["MISSING_REPLICA", "bookie-2"].segment_first_entry == 0
    assert not found(state, 4)  # open with no sealed segment: skipped (not even ACK_QUORUM_ONE)
    assert set(found(state, 5, now_s=1e9)) == {("METADATA_UNREADABLE", None)}


def test_entries_beyond_the_last_entry_and_copies_outside_the_write_set() -> None:
    state = state_of(
        f"""
[[ledgers]]
id = 1
{E123}
truncated = 4
[[ledgers]]
id = 2
{E123}
holdings = [{{ bookie = "bookie-1", add = [[60, 61]] }}]
[[ledgers]]
id = 3
{E123}
last_entry = -1
holdings = [{{ bookie = "bookie-3", add = [[0, 2]] }}, {{ bookie = "bookie-4", add = [[0, 59]] }}]
[[ledgers]]
id = 4
{E123}
holdings = [{{ bookie = "bookie-1", missing = [[0, 59]], add = [[0, 59]] }}, {{ bookie = "bookie-5", add = [[0, 59]] }},
            {{ bookie = "bookie-2", missing = [[0, 59]] }}]
"""
    )
    one = found(state, 1)
    assert {key for key in one if key[0] == "ENTRIES_BEYOND_LAST_ENTRY"} == {
        ("ENTRIES_BEYOND_LAST_ENTRY", b) for b in ("bookie-1", "bookie-2", "bookie-3")
    }
    assert all(v.severity is Severity.CRITICAL for v in one.values())  # both write-set bookies of 60 hold it
    assert entries(one["ENTRIES_BEYOND_LAST_ENTRY", "bookie-1"]) == [60, 62, 63]  # residues 0 and 2
    two = found(state, 2)  # 60's write set is indexes 0, 1; only bookie-1 holds it: below AQ, a warning
    assert two["ENTRIES_BEYOND_LAST_ENTRY", "bookie-1"].severity is Severity.WARNING
    assert entries(two["ENTRIES_BEYOND_LAST_ENTRY", "bookie-1"]) == [60, 61]
    three = found(state, 3)  # an empty closed ledger whose bookie holds entries; bookie-4 is not of the ensemble
    assert set(three) == {("ENTRIES_BEYOND_LAST_ENTRY", "bookie-3")}
    assert three["ENTRIES_BEYOND_LAST_ENTRY", "bookie-3"].segment_first_entry == 0
    four = found(state, 4)  # bookie-1 refilled itself; bookie-5's copies do not count
    assert set(four) == {("BELOW_ACK_QUORUM", None), ("MISSING_REPLICA", "bookie-2")}


def test_one_copy_after_the_end_is_critical_when_its_header_proves_acknowledged_entries() -> None:
    state = state_of(CLOSED_TOO_LOW)
    one = found(state, 1)  # bookie-1 alone holds 60..64; entry 64 carries last-add-confirmed 63 > 59
    assert set(one) == {("ENTRIES_BEYOND_LAST_ENTRY", "bookie-1")}
    assert one["ENTRIES_BEYOND_LAST_ENTRY", "bookie-1"].severity is Severity.CRITICAL
    assert entries(one["ENTRIES_BEYOND_LAST_ENTRY", "bookie-1"]) == [60, 61, 62, 63, 64]
    assert state.entry_header(1, 64) == EntryHeader(1, 64, 63, 65 * 1024)
    two = found(state, 2)  # entry 60 alone carries 59: it proves nothing after the end, and one copy is below AQ
    assert two["ENTRIES_BEYOND_LAST_ENTRY", "bookie-1"].severity is Severity.WARNING
    # A stray copy beyond what the writer sent was never acknowledged past it.
    strays = state_of(f'[[ledgers]]\nid = 3\n{E123}\nholdings = [{{ bookie = "bookie-1", add = [[60, 65]] }}]\n')
    assert strays.entry_header(3, 65).last_add_confirmed == 59
    assert found(strays, 3)["ENTRIES_BEYOND_LAST_ENTRY", "bookie-1"].severity is Severity.WARNING


def test_silent_bookies_of_a_closed_ledgers_last_ensemble_are_needed_until_the_finding_is_critical() -> None:
    state = state_of(HANDCRAFTED["silent writers of the next entry"])
    # Empty closed ledgers: entry 0's write set is the first two bookies (AQ 2).
    assert set(found(state, 1)) == {("BOOKIE_UNRESPONSIVE", "bookie-1"), ("BOOKIE_UNRESPONSIVE", "bookie-2")}
    # One silent bookie cannot make two copies of entry 0, but a copy it holds may carry a header proving it.
    assert set(found(state, 2)) == {("BOOKIE_UNRESPONSIVE", "bookie-1")}
    three = found(state, 3)  # bookie-6 is stopped (gone): found by the retries, in no checked segment
    assert set(three) == {("BOOKIE_NOT_REGISTERED", "bookie-6"), ("BOOKIE_UNRESPONSIVE", "bookie-1")}
    assert three["BOOKIE_NOT_REGISTERED", "bookie-6"].segment_first_entry is None
    # Entries 0 and 1 held; entry 2's write set is bookie-2 (silent) and bookie-3, which holds nothing past 1
    # (and bookie-2 is needed for entry 1 anyway).
    assert set(found(state, 4)) == {("BOOKIE_UNRESPONSIVE", "bookie-2")}


def test_placement_and_registration() -> None:
    state = state_of(
        """
[bookies.bookie-6]
mode = "stopped"
[[ledgers]]
id = 1
ensemble = ["bookie-1", "bookie-4", "bookie-2"]
[[ledgers]]
id = 2
segments = [{ first = 0, ensemble = ["bookie-1", "bookie-2", "bookie-6"] },
            { first = 30, ensemble = ["bookie-6", "bookie-2", "bookie-1"] },
            { first = 60, ensemble = ["bookie-1", "bookie-4", "bookie-2"] }]
"""
    )
    assert set(found(state, 1)) == {("PLACEMENT_FAIL", None)}  # bookie-1 and bookie-4 share /r1
    two = ledger_truth(state, 2, 0.0)
    assert [(v.category, v.bookie, v.segment_first_entry) for v in two] == [
        (Category.BOOKIE_NOT_REGISTERED, "bookie-6", 0)  # once, in the first segment naming it; the last is empty
    ]


def test_timeline_follows_the_schedule_and_grace_periods() -> None:
    scenario = parse_scenario(
        HEAD
        + f"""
[[ledgers]]
id = 1
{E123}
[[ledgers]]
id = 2
{E123}
holdings = [{{ bookie = "bookie-3", nothing = true }}]
[[schedule]]
at = 5
action = "kill"
bookie = "bookie-1"
[[schedule]]
at = 5
action = "mark"
ledger = 2
replicas = ["bookie-3"]
[[schedule]]
at = 9
action = "delete"
ledger = 2
[[schedule]]
at = 12
action = "mark"
ledger = 1
age_s = 3590
"""
    )
    timeline = truth_timeline(scenario)
    assert [(s.at_s, len(s.causes)) for s in timeline] == [
        (0.0, 1),
        (5.0, 2),
        (9.0, 1),
        (12.0, 1),
        (22.0, 1),
        (305.0, 1),  # bookie-1 stopped for the default 300 s: lost (ledger 1 is marked: no deadline passes)
    ]
    start, killed, deleted, marked, stuck, lost = (s.by_key() for s in timeline)
    assert (2, Category.MISSING_REPLICA, "bookie-3", 0) in start
    assert (2, Category.MISSING_REPLICA, "bookie-3", 0) not in killed  # marked at 5
    assert (1, Category.BOOKIE_NOT_REGISTERED, "bookie-1", 0) in killed
    assert not any(key[0] == 2 for key in deleted)
    assert (1, Category.UNDER_REPLICATION_STUCK, None, None) not in marked
    assert (1, Category.UNDER_REPLICATION_STUCK, None, None) in stuck  # ctime 12 - 3590, grace 3600: from 22 s
    assert (-1, Category.BOOKIE_LOST, "bookie-1", None) in lost and (
        -1,
        Category.BOOKIE_LOST,
        "bookie-1",
        None,
    ) not in stuck
    assert not any(key[1] is Category.UNDER_REPLICATION_NOT_MARKED for key in lost)
    assert [s.at_s for s in truth_timeline(scenario, horizon_s=15)][-1] == 12.0


@pytest.mark.parametrize("name", ["example", "demo"])
def test_incremental_timeline_equals_judging_everything_again(name: str) -> None:
    scenario = load_scenario(REPO / "conf" / "scenarios" / f"{name}.toml")
    timeline = truth_timeline(scenario, horizon_s=400)
    replay = ClusterState.from_scenario(scenario)
    assert timeline[0].violations == tuple(cluster_truth(replay, 0.0))
    states = iter(timeline[1:])
    for at_s in sorted({e.at_s for e in scenario.schedule}):
        for event in (e for e in scenario.schedule if e.at_s == at_s):
            replay.apply(event)
        assert next(states).violations == tuple(cluster_truth(replay, at_s))


def test_truth_file_round_trip(tmp_path: Path) -> None:
    scenario = load_scenario(REPO / "conf" / "scenarios" / "example.toml")
    timeline = truth_timeline(scenario)
    path = tmp_path / "truth.json"
    bookies = {"bookie-1": {"v3": "127.0.0.1:1", "agent": "127.0.0.1:2"}}
    write_truth(path, truth_document(scenario, timeline, started_at_ms=1_000, bookies=bookies))
    header, states = load_truth(path)
    assert header["started_at_ms"] == 1_000 and header["bookies"] == bookies
    assert [s.violations for s in states] == [s.violations for s in timeline]
    assert [s.at_s for s in states] == [s.at_s for s in timeline]


# --------------------------------------------------------------------------- against the verdict


def verdict_violations(state: ClusterState, ledger_id: int, now_s: float) -> tuple[list[TruthViolation], set[str]]:
    """compute_verdict on what the simulated bookies would answer, as truth rows, and its retry bookies."""
    spec = state.ledgers[ledger_id]
    metadata = build_ledger_metadata(
        ensemble_size=spec.ensemble_size,
        write_quorum=spec.write_quorum,
        ack_quorum=spec.ack_quorum,
        segments=[(s.first, s.ensemble) for s in spec.segments],
        state=spec.state,
        last_entry_id=spec.last_entry,
    )
    answers: dict[str, BookieAnswer] = {}
    for bookie in spec.bookies():
        if state.bookies[bookie].answers_unknown(ledger_id, state.checker):
            answers[bookie] = BookieAnswer.unknown("simulated fault")
            continue
        groups = state.held_groups(bookie, ledger_id)
        answers[bookie] = BookieAnswer.no_ledger() if groups is None else BookieAnswer.listing(list(groups))
        top = max((g.last for g in groups or ()), default=-1)
        reads = state.bookies[bookie].reads_in_time(ledger_id, state.checker)  # after the listing, same deadline
        if spec.closed and top > spec.last_entry and reads:  # the fetch reads the highest entry held after the end
            answers[bookie] = replace(answers[bookie], beyond=state.entry_header(ledger_id, top))
    c = state.checker
    config = VerdictConfig(
        PlacementConfig(
            PlacementPolicy(c.placement.value),
            c.min_racks_per_write_quorum,
            c.enforce_min_racks,
            c.min_zones_per_write_quorum,
            c.desired_zones_per_write_quorum,
            c.default_rack,
        ),
        round(c.under_replication_grace_s * 1000),
    )
    modes = {b: s.mode for b, s in state.bookies.items()}
    cluster = ClusterView(
        racks=state.racks(),
        writable=frozenset(b for b, m in modes.items() if m is BookieMode.WRITABLE),
        readonly=frozenset(b for b, m in modes.items() if m is BookieMode.READONLY),
    )
    mark = None
    if spec.mark is not None:
        ctime = None if spec.mark.ctime_s is None else round(spec.mark.ctime_s * 1000)
        mark = UnderReplicationMark(spec.mark.replicas, ctime)
    verdict = compute_verdict(
        metadata, answers, now_ms=round(now_s * 1000), config=config, cluster=cluster, under_replication=mark
    )
    rows = [
        TruthViolation(
            ledger_id,
            v.category,
            v.severity,
            v.bookie,
            v.segment_first_entry,
            None if v.entries is None else v.entries.groups,
        )
        for v in verdict.violations
    ]
    return rows, set(verdict.retry_bookies)


def after_retries(row: TruthViolation) -> bool:
    """A row the tracker decides after the retries: a silent bookie (or one whose ledger is in limbo), registered or
    gone."""
    return row.category in (Category.BOOKIE_UNRESPONSIVE, Category.LEDGER_IN_LIMBO) or (
        row.category is Category.BOOKIE_NOT_REGISTERED and row.segment_first_entry is None
    )


def assert_agree(state: ClusterState, now_s: float, only: set[int] | None = None) -> int:
    """Truth and verdict agree on every ledger (of ``only``): keys, severities, entries, and the bookies
    the checker needs but cannot hear (truth's rows after the retries, the verdict's retry bookies).
    Returns how many rows were compared."""
    compared = 0
    for ledger_id, spec in sorted(state.ledgers.items()):
        if only is not None and ledger_id not in only:
            continue
        if spec.corrupt is not None or (spec.mark is not None and spec.mark.ctime_s is None):
            continue  # decided outside the verdict
        judged = ledger_truth(state, ledger_id, now_s)
        truth = {v.key: v for v in judged if not after_retries(v)}
        rows, retry = verdict_violations(state, ledger_id, now_s)
        verdict = {v.key: v for v in rows}
        assert set(truth) == set(verdict), ledger_id
        unregistered = {v.bookie for v in rows if v.category is Category.BOOKIE_NOT_REGISTERED}
        silent = {v.bookie for v in judged if after_retries(v)}
        assert silent == retry - unregistered, ledger_id
        compared += len(silent)
        for key, expected in truth.items():
            got = verdict[key]
            assert got.severity is expected.severity, key
            assert (got.entries is None) == (expected.entries is None), key
            if expected.entries is not None and got.entries is not None:
                assert same_entries(expected.entries, got.entries), key
        compared += len(truth)
    return compared


def touched(state: ClusterState, change: ScheduledChange) -> set[int]:
    """The ledgers a change may affect."""
    out = change.metadata | change.marks | {lid for lids in change.data.values() for lid in lids}
    for bookie in change.stopped | change.started | change.wiped | change.registration | change.faults:
        out |= state.ledgers_of(bookie)
    return out


#: WQ = 3 and one copy left after the end: ledger 1 is proven acknowledged (entry 64 carries 63), ledger 2 is not.
CLOSED_TOO_LOW = """
[[ledgers]]
id = 1
write_quorum = 3
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
truncated = 5
holdings = [{ position = 1, missing = [[60, 64]] }, { position = 2, missing = [[60, 64]] }]
[[ledgers]]
id = 2
write_quorum = 3
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
truncated = 1
holdings = [{ position = 1, missing = [[60, 60]] }, { position = 2, missing = [[60, 60]] }]
"""


HANDCRAFTED = {
    "healthy": f"[[ledgers]]\nids = [[1, 5]]\n{E123}\n",
    "one range lost (AQ = WQ)": f"""[[ledgers]]\nid = 1\n{E123}
holdings = [{{ bookie = "bookie-2", missing = [[10, 30]] }}]\n""",
    "below write quorum": """[[ledgers]]\nid = 1\nensemble_size = 4\nwrite_quorum = 3\nack_quorum = 2
ensemble = ["bookie-1", "bookie-2", "bookie-3", "bookie-4"]\nholdings = [{ position = 3, missing = [[5, 40]] }]\n""",
    "a bookie holds nothing (E5 WQ3)": """[[ledgers]]\nid = 1\nensemble_size = 5\nwrite_quorum = 3
ensemble = ["bookie-1", "bookie-2", "bookie-3", "bookie-4", "bookie-5"]
holdings = [{ position = 2, nothing = true }]\n""",
    "data loss": f"""[[ledgers]]\nid = 1\n{E123}
holdings = [{{ position = 0, missing = [[0, 20]] }}, {{ position = 1, missing = [[15, 59]] }}]\n""",
    "marked with loss": f"""[[ledgers]]\nid = 1\n{E123}\nunder_replicated = {{ replicas = ["bookie-1"], age_s = 10 }}
holdings = [{{ position = 0, nothing = true }}, {{ position = 1, missing = [[0, 5]] }}]\n""",
    "truncated and strays": f"""[[ledgers]]\nid = 1\n{E123}\ntruncated = 7\n[[ledgers]]\nid = 2\n{E123}
holdings = [{{ position = 2, add = [[60, 70]] }}, {{ position = 0, add = [[3, 4]] }}]\n""",
    "segments sharing a bookie": """[[ledgers]]\nid = 1
segments = [{ first = 0, ensemble = ["bookie-1", "bookie-2", "bookie-3"] },
            { first = 25, ensemble = ["bookie-2", "bookie-1", "bookie-4"] },
            { first = 25, ensemble = ["bookie-5", "bookie-1", "bookie-4"] }]
holdings = [{ bookie = "bookie-1", missing = [[20, 40]] }, { bookie = "bookie-5", missing = [[50, 59]] }]\n""",
    "open with sealed segments": """[[ledgers]]\nid = 1\nstate = "IN_RECOVERY"
segments = [{ first = 0, ensemble = ["bookie-1", "bookie-2", "bookie-3"] },
            { first = 30, ensemble = ["bookie-1", "bookie-2", "bookie-4"] }]
holdings = [{ bookie = "bookie-2", missing = [[20, 50]] }, { bookie = "bookie-1", missing = [[29, 29]] }]\n""",
    "placement and AQ = 1": """[[ledgers]]\nid = 1\nensemble = ["bookie-1", "bookie-4", "bookie-2"]\nack_quorum = 1
[[ledgers]]\nid = 2\nensemble = "auto"\nplacement = "violate"\n""",
    "stopped, read-only and unknown bookies": f"""[bookies.bookie-1]\nmode = "stopped"\n[bookies.bookie-5]
mode = "readonly"\n[bookies.bookie-6]\nfault = {{ kind = "status", status = "EIO" }}
[[ledgers]]\nid = 1\n{E123}\nholdings = [{{ bookie = "bookie-2", missing = [[0, 59]] }}]
[[ledgers]]\nid = 2\nensemble = ["bookie-5", "bookie-6", "bookie-3"]
holdings = [{{ bookie = "bookie-3", nothing = true }}]\n""",
    "empty closed ledger": f"[[ledgers]]\nid = 1\n{E123}\nlast_entry = -1\ntruncated = 2\n",
    "closed too low, one copy left": CLOSED_TOO_LOW,
    "silent writers of the next entry": """[bookies.bookie-1]\nfault = "unresponsive"\n[bookies.bookie-2]
fault = "unresponsive"\n[bookies.bookie-6]\nmode = "stopped"
[[ledgers]]\nid = 1\nensemble = ["bookie-1", "bookie-2", "bookie-3"]\nlast_entry = -1
[[ledgers]]\nid = 2\nensemble = ["bookie-1", "bookie-4", "bookie-5"]\nlast_entry = -1
[[ledgers]]\nid = 3\nensemble = ["bookie-6", "bookie-1", "bookie-4"]\nlast_entry = -1
[[ledgers]]\nid = 4\nensemble = ["bookie-3", "bookie-4", "bookie-2"]\nlast_entry = 1\n""",
    "wiped bookie": f"[bookies.bookie-2]\nwiped = true\n[[ledgers]]\nids = [[1, 3]]\n{E123}\n",
    "short segment": """[[ledgers]]\nid = 1\nensemble_size = 5\nwrite_quorum = 2\nlast_entry = 1
ensemble = ["bookie-1", "bookie-2", "bookie-3", "bookie-4", "bookie-5"]
holdings = [{ position = 1, nothing = true }]\n""",
}


@pytest.mark.parametrize("name", sorted(HANDCRAFTED))
def test_truth_agrees_with_the_verdict_on_handcrafted_scenarios(name: str) -> None:
    state = state_of(HANDCRAFTED[name])
    compared = assert_agree(state, 0.0)
    assert compared == 0 if name == "healthy" else compared > 0


@pytest.mark.parametrize("name", ["example", "demo"])
def test_truth_agrees_with_the_verdict_on_the_shipped_scenarios_over_time(name: str) -> None:
    scenario = load_scenario(REPO / "conf" / "scenarios" / f"{name}.toml")
    state = ClusterState.from_scenario(scenario)
    compared = assert_agree(state, 0.0)
    for event in scenario.schedule:
        change = state.apply(event)
        compared += assert_agree(state, event.at_s, touched(state, change))
    assert compared > 20


def test_generated_truth_matches_the_fault_plan() -> None:
    mix = parse_fault_mix("ledgers")
    text, plan = generate(20_000, mix, 9)
    scenario: Scenario = parse_scenario(text)
    truth = cluster_truth(ClusterState.from_scenario(scenario), 0.0)
    by_ledger: dict[int, set[Category]] = {}
    for violation in truth:
        by_ledger.setdefault(violation.ledger_id, set()).add(violation.category)
    expected = {
        "missing": {"MISSING_REPLICA"},
        "nothing": {"MISSING_REPLICA"},
        "no_replica": {"NO_REPLICA", "MISSING_REPLICA"},
        "truncated": {"ENTRIES_BEYOND_LAST_ENTRY"},
        "beyond": {"ENTRIES_BEYOND_LAST_ENTRY"},
        "too_low": {"ENTRIES_BEYOND_LAST_ENTRY"},
        "placement": {"PLACEMENT_FAIL"},
        "stuck": {"UNDER_REPLICATION_STUCK"},
        "corrupt": {"METADATA_UNREADABLE"},
        "aq1": {"ACK_QUORUM_ONE"},
        "limbo": {"LEDGER_IN_LIMBO"},
    }
    fault_of = plan.fault_of()
    assert set(by_ledger) == {lid for lid, kind in fault_of.items() if kind in expected}
    for ledger_id, categories in by_ledger.items():
        kind = fault_of[ledger_id]
        names = {c.value for c in categories} - {"BELOW_ACK_QUORUM", "BELOW_WRITE_QUORUM"}
        assert names == expected[kind], (ledger_id, kind)
        if kind in ("missing", "nothing"):
            assert categories & {Category.BELOW_ACK_QUORUM, Category.BELOW_WRITE_QUORUM}
    for kind, severity in (
        ("truncated", Severity.CRITICAL),
        ("beyond", Severity.WARNING),
        ("too_low", Severity.CRITICAL),
    ):
        rows = [
            v for v in truth if v.ledger_id in plan.ledgers[kind] and v.category is Category.ENTRIES_BEYOND_LAST_ENTRY
        ]
        assert rows and {v.severity for v in rows} == {severity}, kind
    too_low = [v for v in truth if v.ledger_id in plan.ledgers["too_low"]]
    assert len(too_low) == len(plan.ledgers["too_low"])  # one bookie kept the entries: one row each
    counts = Counter(v.category for v in truth)
    assert counts[Category.METADATA_UNREADABLE] == len(plan.ledgers["corrupt"]) == 10
    assert counts[Category.NO_REPLICA] == len(plan.ledgers["no_replica"]) == 20
    assert counts[Category.UNDER_REPLICATION_STUCK] == len(plan.ledgers["stuck"])


def test_a_stopped_bookie_is_lost_and_its_unmarked_ledgers_reported_after_the_grace() -> None:
    head = HEAD.replace("[checker]\n", "[checker]\nbookie_lost_after_s = 10\nunder_replication_mark_grace_s = 5\n")
    scenario = parse_scenario(
        head
        + f"""
[[ledgers]]
ids = [[1, 3]]
{E123}
[[ledgers]]
id = 5
state = "OPEN"
write_quorum = 3
ack_quorum = 3
{E123}
[[schedule]]
at = 2
action = "kill"
bookie = "bookie-2"
[[schedule]]
at = 14
action = "mark"
ledger = 3
replicas = ["bookie-2"]
[[schedule]]
at = 30
action = "change_ensemble"
ledger = 2
first = 0
ensemble = ["bookie-1", "bookie-4", "bookie-3"]
[[schedule]]
at = 35
action = "unmark"
ledger = 3
[[schedule]]
at = 40
action = "revive"
bookie = "bookie-2"
"""
    )
    timeline = truth_timeline(scenario)
    at = {s.at_s: s.by_key() for s in timeline}
    not_marked = Category.UNDER_REPLICATION_NOT_MARKED
    assert (-1, Category.BOOKIE_LOST, "bookie-2", None) in at[12.0]  # stopped at 2, lost strictly after 12
    writer = (5, Category.OPEN_LEDGER_STALLED, None, None)
    assert writer in at[12.0] and writer not in at[0.0]  # open, 2 of its 3 bookies up, AQ 3: stalled once lost
    assert not any(key[1] is not_marked for key in at[12.0])
    assert {k[0] for k in at[17.0] if k[1] is not_marked} == {1, 2}  # 3 was marked at 14
    assert {k[0] for k in at[30.0] if k[1] is not_marked} == {1}  # 2 re-replicated without bookie-2
    assert {k[0] for k in at[35.0] if k[1] is not_marked} == {1, 3}  # 3's mark gone, bookie-2 still in it
    assert not any(k[1] in (not_marked, Category.BOOKIE_LOST) for k in at[40.0])  # back
    assert writer not in at[40.0]


def test_a_ledger_left_in_recovery_is_stalled_after_the_grace_until_it_is_closed() -> None:
    head = HEAD.replace("[checker]\n", "[checker]\nrecovery_stalled_grace_s = 5\n")
    scenario = parse_scenario(
        head
        + f"""
[[ledgers]]
ids = [[1, 2]]
state = "IN_RECOVERY"
{E123}
[[schedule]]
at = 9
action = "close"
ledger = 1
last_entry = 59
"""
    )
    stalled = Category.RECOVERY_STALLED
    at = {s.at_s: s.by_key() for s in truth_timeline(scenario)}
    assert not any(k[1] is stalled for k in at[0.0])
    assert {k[0] for k in at[5.0] if k[1] is stalled} == {1, 2}  # strictly after 5 s (the point is 5 + a step)
    assert {k[0] for k in at[9.0] if k[1] is stalled} == {2}  # 1's recovery ended with its close
    assert scenario.checker.as_json_dict()["recovery_stalled_grace_s"] == 5


def test_a_fault_that_applies_decides_a_limbo_bookies_answer_but_a_short_delay() -> None:
    head = HEAD.replace("[checker]\n", "[checker]\nrequest_timeout_s = 5\n")
    for fault, expected in (
        ('fault = "unresponsive"', "BOOKIE_UNRESPONSIVE"),
        ('fault = { kind = "slow", delay_s = 1 }', "LEDGER_IN_LIMBO"),
        ('fault = { kind = "slow", delay_s = 9 }', "BOOKIE_UNRESPONSIVE"),
        ('fault = { kind = "status", status = "EIO" }', "BOOKIE_UNRESPONSIVE"),
    ):
        body = f"""
[bookies.bookie-4]
limbo = [3]
{fault}
[[ledgers]]
id = 3
ensemble = ["bookie-4", "bookie-5", "bookie-6"]
"""
        state = ClusterState.from_scenario(parse_scenario(head + body))
        assert set(found(state, 3)) == {(expected, "bookie-4")}, fault


# --------------------------------------------------------------------------- BookKeeper's auto-recovery


def autorecovery_rows(violations: tuple[TruthViolation, ...] | list[TruthViolation]) -> set[tuple[Category, Severity]]:
    """The cluster-level auto-recovery findings among ``violations`` (never of a bookie)."""
    rows = [v for v in violations if v.category in (Category.AUTORECOVERY_DISABLED, Category.NO_AUDITOR)]
    assert all(v.ledger_id == CLUSTER_LEDGER_ID and v.bookie is None for v in rows)
    return {(v.category, v.severity) for v in rows}


def assert_settles(scenario: Scenario) -> list[TruthState]:
    """The timeline's states hold from just after their start to just before the next: no change is missed."""
    timeline = truth_timeline(scenario)
    replay = ClusterState.from_scenario(scenario)
    events = iter(scenario.schedule)
    pending = next(events, None)
    for state, following in itertools.zip_longest(timeline, timeline[1:]):
        while pending is not None and pending.at_s <= state.at_s:
            replay.apply(pending)
            pending = next(events, None)
        end = following.at_s if following is not None else state.at_s + 10_000
        for now_s in (state.at_s + GRACE_STEP_S, (state.at_s + end) / 2, end - GRACE_STEP_S / 10):
            if state.at_s < now_s < end:
                assert tuple(cluster_truth(replay, now_s)) == state.violations, (state.at_s, now_s)
    return timeline


DISABLED = Category.AUTORECOVERY_DISABLED
NO_AUDITOR = Category.NO_AUDITOR


def test_disabled_autorecovery_is_a_warning_then_critical_past_its_grace_until_enabled() -> None:
    head = HEAD.replace("[checker]\n", "[checker]\nautorecovery_disabled_critical_s = 100\n")
    scenario = parse_scenario(
        head
        + f"""
[[ledgers]]
id = 1
{E123}
[[schedule]]
at = 10
action = "disable_autorecovery"
[[schedule]]
at = 200
action = "enable_autorecovery"
[[schedule]]
at = 300
action = "disable_autorecovery"
[[schedule]]
at = 350
action = "enable_autorecovery"
"""
    )
    timeline = assert_settles(scenario)
    assert [(s.at_s, s.causes, autorecovery_rows(s.violations)) for s in timeline] == [
        (0.0, ("start",), set()),
        (10.0, ("disable_autorecovery",), {(DISABLED, Severity.WARNING)}),
        (110.0, ("auto-recovery disabled past its grace",), {(DISABLED, Severity.CRITICAL)}),  # strictly after 110
        (200.0, ("enable_autorecovery",), set()),
        (300.0, ("disable_autorecovery",), {(DISABLED, Severity.WARNING)}),
        (350.0, ("enable_autorecovery",), set()),  # enabled before its grace: never critical
    ]
    state = ClusterState.from_scenario(scenario)
    state.apply(scenario.schedule[0])
    assert autorecovery_rows(cluster_truth(state, 110.0)) == {(DISABLED, Severity.WARNING)}  # not strictly older
    assert autorecovery_rows(cluster_truth(state, 110.5)) == {(DISABLED, Severity.CRITICAL)}
    assert cluster_truth(state, 110.5)[0] == TruthViolation(CLUSTER_LEDGER_ID, DISABLED, Severity.CRITICAL)


def test_autorecovery_disabled_from_the_start_counts_from_zero() -> None:
    head = HEAD.replace("[cluster]\n", "[cluster]\nautorecovery_disabled = true\n")
    scenario = parse_scenario(head + f"[[ledgers]]\nid = 1\n{E123}\n")
    timeline = assert_settles(scenario)
    assert [(s.at_s, autorecovery_rows(s.violations)) for s in timeline] == [
        (0.0, {(DISABLED, Severity.WARNING)}),
        (3600.0, {(DISABLED, Severity.CRITICAL)}),  # the default critical grace
    ]


def test_no_auditor_after_its_grace_until_one_is_elected_again() -> None:
    head = HEAD.replace("[checker]\n", "[checker]\nno_auditor_grace_s = 30\n")
    scenario = parse_scenario(
        head
        + """
[[schedule]]
at = 5
action = "stop_auditor"
[[schedule]]
at = 50
action = "start_auditor"
[[schedule]]
at = 60
action = "stop_auditor"
[[schedule]]
at = 80
action = "start_auditor"
"""
    )
    timeline = assert_settles(scenario)
    assert [(s.at_s, s.causes, autorecovery_rows(s.violations)) for s in timeline] == [
        (0.0, ("start",), set()),
        (5.0, ("stop_auditor",), set()),  # an election takes a while: not yet
        (35.0, ("no auditor past its grace",), {(NO_AUDITOR, Severity.WARNING)}),  # strictly after 5 + 30
        (50.0, ("start_auditor",), set()),
        (60.0, ("stop_auditor",), set()),
        (80.0, ("start_auditor",), set()),  # missing for 20 s only: never reported
    ]
    state = ClusterState.from_scenario(scenario)
    state.apply(scenario.schedule[0])
    assert autorecovery_rows(cluster_truth(state, 35.0)) == set()
    assert cluster_truth(state, 35.01) == [TruthViolation(CLUSTER_LEDGER_ID, NO_AUDITOR, Severity.WARNING)]


def test_no_auditor_from_the_start_and_never_when_none_is_expected() -> None:
    head = HEAD.replace("[cluster]\n", "[cluster]\nauditor = false\n")
    schedule = '[[schedule]]\nat = 400\naction = "start_auditor"\n'
    timeline = assert_settles(parse_scenario(head + schedule))
    assert [(s.at_s, autorecovery_rows(s.violations)) for s in timeline] == [
        (0.0, set()),
        (300.0, {(NO_AUDITOR, Severity.WARNING)}),  # the default grace, from t = 0
        (400.0, set()),
    ]
    unexpected = parse_scenario(head.replace("[checker]\n", "[checker]\nauditor_expected = false\n") + schedule)
    timeline = assert_settles(unexpected)
    assert [s.at_s for s in timeline] == [0.0, 400.0]  # no grace point at all
    assert not any(autorecovery_rows(s.violations) for s in timeline)
    assert cluster_truth(ClusterState.from_scenario(unexpected), 1e6) == []


def test_both_at_once_and_beside_a_lost_bookie() -> None:
    head = HEAD.replace(
        "[checker]\n",
        "[checker]\nautorecovery_disabled_critical_s = 20\nno_auditor_grace_s = 20\nbookie_lost_after_s = 20\n",
    )
    scenario = parse_scenario(
        head
        + """
[[schedule]]
at = 1
action = "disable_autorecovery"
[[schedule]]
at = 1
action = "stop_auditor"
[[schedule]]
at = 1
action = "kill"
bookie = "bookie-6"
"""
    )
    timeline = assert_settles(scenario)
    assert [s.at_s for s in timeline] == [0.0, 1.0, 21.0]  # three grace points at one moment: one state
    assert [(v.category, v.severity, v.bookie) for v in timeline[-1].violations] == [
        (Category.BOOKIE_LOST, Severity.WARNING, "bookie-6"),
        (DISABLED, Severity.CRITICAL, None),
        (NO_AUDITOR, Severity.WARNING, None),
    ]


@pytest.mark.parametrize("name", ["example", "demo"])
def test_the_shipped_scenarios_model_a_healthy_autorecovery(name: str) -> None:
    scenario = load_scenario(REPO / "conf" / "scenarios" / f"{name}.toml")
    assert not any(autorecovery_rows(s.violations) for s in truth_timeline(scenario, horizon_s=10_000))
    assert autorecovery_rows(cluster_truth(ClusterState.from_scenario(scenario), 1e8)) == set()
