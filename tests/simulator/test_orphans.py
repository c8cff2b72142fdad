"""Orphan ledgers in the simulator: ledgers without metadata whose entries bookies still hold (``orphan = true``, the
``orphan`` change), what the simulated cluster shows of them, and their ground truth (``ORPHAN_LEDGER``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Iterable
from typing import Any, cast

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from scrutiny.connectors.bookies.agent_client import AgentClient
from scrutiny.connectors.bookies.v3_client import BookieClientConfig, BookieV3Client
from scrutiny.core.backoff import Backoff
from scrutiny.core.entry_header import EntryHeader, parse_entry_header
from scrutiny.core.held_ledgers import LISTING_START
from scrutiny.core.ledger_metadata import LedgerState
from scrutiny.core.sequence_groups import expand
from scrutiny.core.striping import expected_groups
from scrutiny.core.verdict import AnswerKind, BookieAnswer
from scrutiny.core.vocabulary import Category, Severity
from scrutiny.core.zk_paths import ledger_path, underreplication_lock_path, underreplication_path
from scrutiny.simulator.bookie import MemoryListingBackend
from scrutiny.simulator.cluster import SimCluster
from scrutiny.simulator.generator import generate, parse_fault_mix
from scrutiny.simulator.model import (
    BookieSpec,
    CheckerSpec,
    ClusterSpec,
    Holding,
    LedgerSpec,
    Scenario,
    ScenarioError,
    SegmentSpec,
    Where,
    check_ledger,
    normalize_ranges,
)
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.simulator.state import ClusterState
from scrutiny.simulator.truth import (
    GRACE_STEP_S,
    TruthState,
    cluster_truth,
    holds_an_entry,
    ledger_truth,
    same_entries,
    truth_document,
    truth_timeline,
)

HEAD = """
[scenario]
seed = 4
[cluster]
bookies = 5
racks = ["/r1", "/r2", "/r3"]
[checker]
orphan_grace_s = 100
[defaults]
ensemble_size = 3
write_quorum = 2
last_entry = 29
"""
E123 = 'ensemble = ["bookie-1", "bookie-2", "bookie-3"]'
V3_CONFIG = BookieClientConfig(
    request_timeout_s=2.0, connect_timeout_s=1.0, retry=Backoff(initial_s=0.01, maximum_s=0.05)
)


def state_of(body: str, head: str = HEAD) -> ClusterState:
    return ClusterState.from_scenario(parse_scenario(head + body))


def orphans_found(state: ClusterState, now_s: float) -> set[tuple[int, str]]:
    """(ledger, bookie) of every ORPHAN_LEDGER of the truth at ``now_s`` (each a warning of a bookie, no segment)."""
    out: set[tuple[int, str]] = set()
    for violation in cluster_truth(state, now_s):
        if violation.category is Category.ORPHAN_LEDGER:
            assert violation.severity is Severity.WARNING and violation.bookie is not None
            assert violation.segment_first_entry is None and violation.entries is None
            out.add((violation.ledger_id, violation.bookie))
    return out


def keys(state: TruthState) -> set[tuple[int, str, str | None]]:
    return {(v.ledger_id, v.category.value, v.bookie) for v in state.violations}


# --------------------------------------------------------------------------- the scenario format


def test_an_orphan_from_the_start_has_no_metadata_while_its_bookies_hold_its_entries() -> None:
    scenario = parse_scenario(
        HEAD
        + f"""
[[ledgers]]
id = 1
{E123}
[[ledgers]]
ids = [2, 3]
{E123}
orphan = true
holdings = [{{ bookie = "bookie-2", missing = [[0, 9]] }}]
"""
    )
    assert [spec.ledger_id for spec in scenario.ledgers] == [1] and not scenario.ledgers[0].orphan
    assert scenario.ledgers[0].orphan_since_s is None
    assert [(spec.ledger_id, spec.orphan_since_s, spec.orphan) for spec in scenario.orphans] == [
        (2, 0.0, True),
        (3, 0.0, True),
    ]
    state = ClusterState.from_scenario(scenario)
    assert sorted(state.ledgers) == [1] and sorted(state.orphans) == [2, 3]
    assert state.ledgers_of("bookie-2") == {1, 2, 3} and state.ledgers_of("bookie-4") == set()
    stripe = list(expand(expected_groups(1, 3, 2, 0, 29)))  # bookie-2 is ensemble index 1
    assert list(expand(state.held_groups("bookie-2", 2) or ())) == [e for e in stripe if e > 9]
    assert state.held_groups("bookie-1", 3) == state.held_groups("bookie-1", 1) is not None
    assert state.held_groups("bookie-4", 2) is None
    assert state.entry_header(3, 5) == EntryHeader(3, 5, 4, 6 * 1024)
    assert state.sightings == {(lid, b): 0.0 for lid in (2, 3) for b in ("bookie-1", "bookie-2", "bookie-3")}
    document = truth_document(scenario, truth_timeline(scenario))
    head = document["scenario"]
    assert isinstance(head, dict) and (head["ledgers"], head["orphans"]) == (1, 2)
    checker = document["checker"]
    assert isinstance(checker, dict) and checker["orphan_grace_s"] == 100.0


def test_the_orphan_grace_defaults_to_an_hour() -> None:
    assert CheckerSpec().orphan_grace_s == 3600.0
    assert parse_scenario("[cluster]\nbookies = 3\n").checker.orphan_grace_s == 3600.0
    assert parse_scenario("[cluster]\nbookies = 3\n[checker]\norphan_grace_s = 0\n").checker.orphan_grace_s == 0.0


ONE = "[[ledgers]]\nid = 1\nensemble = 'auto'\n"
ORPHAN = "[[ledgers]]\nid = 1\nensemble = 'auto'\norphan = true\n"


def at(time_s: float, action: str, extra: str = "ledger = 1\n") -> str:
    return f"[[schedule]]\nat = {time_s}\naction = '{action}'\n{extra}"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (ONE + "orphan = 'yes'\n", "ledgers[0].orphan: expected true or false, got 'yes'"),
        (ORPHAN + "corrupt_metadata = true\n", "ledgers[0].orphan: an orphan has no metadata: it cannot be corrupt"),
        (ORPHAN + "under_replicated = true\n", "ledgers[0].orphan: an orphan has no metadata: it cannot be under_rep"),
        (ONE + ORPHAN, "ledgers[1]: ledger 1 is already defined by ledgers[0]"),
        (
            at(1, "create", "ledger = { id = 5, ensemble = 'auto', orphan = true }\n"),
            "schedule[0].ledger.orphan: create writes a ledger's metadata",
        ),
        (ORPHAN + at(1, "close"), "schedule[0]: ledger 1 is an orphan at 1.0 s: it has no metadata"),
        (ORPHAN + at(1, "mark", "ledger = 1\nreplicas = ['bookie-1']\n"), "schedule[0]: ledger 1 is an orphan"),
        (ORPHAN + at(1, "orphan"), "schedule[0]: ledger 1 is an orphan at 1.0 s"),
        (ONE + at(1, "orphan") + at(2, "orphan"), "schedule[1]: ledger 1 is an orphan at 2.0 s"),
        (ONE + at(1, "orphan") + at(2, "repair"), "schedule[1]: ledger 1 is an orphan at 2.0 s"),
        (
            ORPHAN + at(1, "create", "ledger = { id = 1, ensemble = 'auto' }\n"),
            "schedule[0]: ledger 1 is an orphan: its bookies still hold its entries",
        ),
        (ONE + at(1, "orphan", "ledger = 7\n"), "schedule[0]: ledger 7 does not exist at 1.0 s"),
        (ORPHAN + at(1, "delete") + at(2, "orphan"), "schedule[1]: ledger 1 does not exist at 2.0 s"),
        (ONE + at(1, "orphan", "ledger = 1\nbookie = 'bookie-1'\n"), "schedule[0]: unknown key(s) bookie"),
        (ONE + at(1, "orphan", ""), "schedule[0]: orphan needs ledger"),
        ("[checker]\norphan_grace_s = -1\n", "checker.orphan_grace_s: -1 is below 0.0"),
        ("[checker]\norphan_grace_s = 'long'\n", "checker.orphan_grace_s: expected a number"),
        ("[checker]\norphan_grace_s = nan\n", "checker.orphan_grace_s: nan is not a finite number"),
    ],
)
def test_bad_orphans_are_refused_with_the_place(extra: str, message: str) -> None:
    head = HEAD.replace("[checker]\norphan_grace_s = 100\n", "")
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_scenario(head + extra)


# --------------------------------------------------------------------------- the state over time


def test_the_orphan_change_deletes_the_metadata_and_keeps_the_entries() -> None:
    scenario = parse_scenario(
        HEAD
        + f"""
[[ledgers]]
ids = [1, 2]
{E123}
under_replicated = {{ replicas = ["bookie-3"], locked_by = "bookie-4" }}
[[schedule]]
at = 10
action = "orphan"
ledger = 1
[[schedule]]
at = 20
action = "delete"
ledger = 2
[[schedule]]
at = 30
action = "delete"
ledger = 1
"""
    )
    assert scenario.schedule[0].describe() == "orphan ledger 1"
    state = ClusterState.from_scenario(scenario)
    holders = ("bookie-1", "bookie-2", "bookie-3")
    before = {b: state.held_groups(b, 1) for b in state.bookies}
    assert not state.sightings and sorted(state.locks) == [1, 2]
    orphaned, deleted, collected = scenario.schedule

    change = state.apply(orphaned)
    assert (change.deleted, change.locks, change.marks, change.metadata, change.data) == ({1}, {1}, set(), set(), {})
    assert 1 not in state.ledgers and sorted(state.locks) == [2]
    orphan = state.orphans[1]
    assert orphan.orphan_since_s == 10.0 and orphan.mark is None and orphan.segments == state.ledgers[2].segments
    assert {b: state.held_groups(b, 1) for b in state.bookies} == before  # its entries stay
    assert all(state.ledgers_of(b) == {1, 2} for b in holders)
    assert state.sightings == {(1, b): 10.0 for b in holders}

    change = state.apply(deleted)  # bookies drop a deleted ledger
    assert change.deleted == {2} and change.data == {b: {2} for b in holders}
    assert all(state.ledgers_of(b) == {1} for b in holders) and state.held_groups("bookie-1", 2) is None

    change = state.apply(collected)  # deleting an orphan: its bookies' garbage collection removed it at last
    assert not change.deleted and change.data == {b: {1} for b in holders}
    assert not state.orphans and not state.sightings and state.held_groups("bookie-1", 1) is None
    assert all(state.ledgers_of(b) == set() for b in holders)


def test_a_deleted_ledger_leaves_the_bookies_limbo_an_orphan_keeps_it() -> None:
    state = state_of(
        f"""
[bookies.bookie-4]
limbo = [1, 2, 3]
[[ledgers]]
ids = [1, 2, 3]
{E123}
[[schedule]]
at = 1
action = "delete"
ledger = 1
[[schedule]]
at = 2
action = "orphan"
ledger = 2
"""
    )
    change = state.apply(state.scenario.schedule[0])
    assert change.faults == {"bookie-4"} and state.bookies["bookie-4"].limbo == frozenset({2, 3})
    change = state.apply(state.scenario.schedule[1])
    assert not change.faults and state.bookies["bookie-4"].limbo == frozenset({2, 3})
    assert state.lists("bookie-4", 2) and not state.lists("bookie-4", 1)
    assert state.sightings[2, "bookie-4"] == 2.0


def test_a_wiped_bookie_loses_an_orphans_entries_and_its_sighting() -> None:
    state = state_of(
        f"""
[[ledgers]]
id = 1
{E123}
orphan = true
[[schedule]]
at = 5
action = "wipe"
bookie = "bookie-2"
"""
    )
    assert (1, "bookie-2") in state.sightings
    change = state.apply(state.scenario.schedule[0])
    assert change.data == {"bookie-2": {1}} and state.held_groups("bookie-2", 1) is None
    assert set(state.sightings) == {(1, "bookie-1"), (1, "bookie-3")}


# --------------------------------------------------------------------------- the ground truth

BOOKIES = tuple(f"bookie-{i}" for i in range(1, 6))
RANGES = st.lists(st.tuples(st.integers(0, 24), st.integers(0, 4)).map(lambda r: (r[0], r[0] + r[1])), max_size=2)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_truths_own_arithmetic_finds_the_bookies_holding_an_entry(data: st.DataObject) -> None:
    """Whether a bookie holds an entry of a ledger (so that its agent lists it): the truth's residues against the
    state's sequence groups, over ensembles, segments, ends, recoveries and holdings."""
    size = data.draw(st.integers(1, 4))
    write = data.draw(st.integers(1, size))
    closed = data.draw(st.booleans())
    last = data.draw(st.integers(-1, 20))
    beyond = data.draw(st.integers(0, 3)) if closed else 0
    too_low = data.draw(st.booleans()) and beyond > 0
    firsts = sorted(data.draw(st.lists(st.integers(0, 22), max_size=2)))
    segments = tuple(SegmentSpec(first, tuple(data.draw(st.permutations(BOOKIES))[:size])) for first in [0, *firsts])
    holdings = {
        bookie: Holding(normalize_ranges(data.draw(RANGES)), normalize_ranges(data.draw(RANGES)) if extra else ())
        for bookie, extra in data.draw(st.dictionaries(st.sampled_from(BOOKIES), st.booleans(), max_size=3)).items()
    }
    spec = LedgerSpec(
        ledger_id=1,
        ensemble_size=size,
        write_quorum=write,
        ack_quorum=1,
        state=LedgerState.CLOSED if closed else LedgerState.OPEN,
        last_entry=last,
        segments=segments,
        truncated=0 if too_low else beyond,
        too_low=beyond if too_low else 0,
        holdings={b: h for b, h in holdings.items() if not h.default},
        orphan_since_s=data.draw(st.sampled_from([None, 0.0])),
    )
    try:
        check_ledger(spec, BOOKIES, Where("ledger"))
    except ScenarioError:
        assume(False)
    scenario = Scenario(
        name="holdings",
        description="",
        seed=0,
        cluster=ClusterSpec(),
        checker=CheckerSpec(),
        bookies=tuple(BookieSpec(b) for b in BOOKIES),
        ledgers=() if spec.orphan else (spec,),
        orphans=(spec,) if spec.orphan else (),
    )
    state = ClusterState.from_scenario(scenario)
    for bookie in BOOKIES:
        assert holds_an_entry(spec, bookie) == (state.held_groups(bookie, 1) is not None), bookie


def test_an_orphan_is_reported_on_each_bookie_holding_some_of_it_strictly_after_the_grace() -> None:
    scenario = parse_scenario(
        HEAD
        + f"""
[[ledgers]]
id = 1
{E123}
last_entry = 0              # entry 0 is on bookie-1 and bookie-2 (WQ 2): bookie-3 holds nothing of it
orphan = true
[[ledgers]]
id = 2
{E123}
ack_quorum = 1
orphan = true
holdings = [{{ bookie = "bookie-1", nothing = true }}, {{ bookie = "bookie-2", missing = [[0, 29]] }},
            {{ bookie = "bookie-4", add = [40] }}]
[[ledgers]]
id = 3
{E123}
"""
    )
    state = ClusterState.from_scenario(scenario)
    expected = {(1, "bookie-1"), (1, "bookie-2"), (2, "bookie-3"), (2, "bookie-4")}
    assert expected == {(lid, b) for lid in (1, 2) for b in state.bookies if state.held_groups(b, lid) is not None}
    assert ledger_truth(state, 2, 0.0) == [] == ledger_truth(state, 2, 100.0)  # nothing else: no metadata to check
    assert orphans_found(state, 100.0) == set()
    assert orphans_found(state, 100.0 + GRACE_STEP_S) == expected
    assert {v.category for v in ledger_truth(state, 2, 1000.0)} == {Category.ORPHAN_LEDGER}
    assert ledger_truth(state, 3, 1000.0) == []  # a ledger with metadata: never an orphan
    timeline = truth_timeline(scenario)
    assert timeline[0].violations == () and {s.at_s for s in timeline[1:]} == {100.0}
    assert {(lid, b) for lid, _, b in keys(timeline[-1]) if b is not None} == expected
    assert timeline[1].causes == ("grace period of orphan ledger 1 on bookie-1, bookie-2",)


def test_a_scheduled_orphan_counts_from_its_change_until_its_entries_are_gone() -> None:
    scenario = parse_scenario(
        HEAD
        + f"""
[[ledgers]]
id = 1
{E123}
holdings = [{{ bookie = "bookie-3", missing = [[0, 9]] }}]
[[schedule]]
at = 10
action = "orphan"
ledger = 1
[[schedule]]
at = 300
action = "wipe"
bookie = "bookie-2"
[[schedule]]
at = 400
action = "delete"
ledger = 1
"""
    )
    timeline = truth_timeline(scenario)
    assert [(s.at_s, keys(s)) for s in timeline] == [
        (0.0, {(1, "BELOW_ACK_QUORUM", None), (1, "MISSING_REPLICA", "bookie-3")}),
        (10.0, set()),  # no metadata: nothing to check, and seen without metadata only from now on
        (110.0, {(1, "ORPHAN_LEDGER", b) for b in ("bookie-1", "bookie-2", "bookie-3")}),
        (300.0, {(1, "ORPHAN_LEDGER", b) for b in ("bookie-1", "bookie-3")}),
        (400.0, set()),
    ]
    assert timeline[1].causes == ("orphan ledger 1",)


def test_a_stopped_bookie_is_not_listed_and_counts_from_its_revival() -> None:
    scenario = parse_scenario(
        HEAD
        + f"""
[bookies.bookie-1]
mode = "stopped"
[[ledgers]]
id = 1
{E123}
orphan = true
[[schedule]]
at = 50
action = "revive"
bookie = "bookie-1"
[[schedule]]
at = 120
action = "kill"
bookie = "bookie-2"
[[schedule]]
at = 130
action = "revive"
bookie = "bookie-2"
"""
    )
    at_s = {s.at_s: {b for _, _, b in keys(s)} for s in truth_timeline(scenario)}
    assert at_s == {
        0.0: set(),
        50.0: set(),
        100.0: {"bookie-2", "bookie-3"},  # bookie-1 was first listed at 50
        120.0: {"bookie-3"},  # stopped: not listed
        130.0: {"bookie-2", "bookie-3"},  # seen since 0: at once again
        150.0: {"bookie-1", "bookie-2", "bookie-3"},
    }


def test_a_bookie_whose_listing_hangs_is_seen_once_it_answers() -> None:
    scenario = parse_scenario(
        HEAD
        + f"""
[bookies.bookie-4]
fault = {{ kind = "unresponsive", ledgers = [3] }}
limbo = [3]                  # it lists ledger 3 (its limbo record), whose requests hang: so does its listing
[[ledgers]]
id = 2
ensemble = ["bookie-4", "bookie-2", "bookie-3"]
orphan = true
[[ledgers]]
id = 3
{E123}
[[schedule]]
at = 50
action = "fault"
bookie = "bookie-4"
fault = "none"
"""
    )
    assert ClusterState.from_scenario(scenario).sightings == {(2, "bookie-2"): 0.0, (2, "bookie-3"): 0.0}
    at_s = {s.at_s: keys(s) for s in truth_timeline(scenario)}
    assert at_s == {
        0.0: set(),
        50.0: set(),
        100.0: {(2, "ORPHAN_LEDGER", "bookie-2"), (2, "ORPHAN_LEDGER", "bookie-3")},
        150.0: {(2, "ORPHAN_LEDGER", b) for b in ("bookie-2", "bookie-3", "bookie-4")},
    }


FAULTS = {
    "none": ("", True),
    "unresponsive": ('fault = "unresponsive"', False),
    "unresponsive for a ledger it does not list": ('fault = { kind = "unresponsive", ledgers = [3] }', True),
    "unresponsive for a ledger it lists": ('fault = { kind = "unresponsive", ledgers = [4] }', False),
    "unresponsive for the orphan": ('fault = { kind = "unresponsive", ledgers = [2] }', False),
    "unresponsive for a ledger in its limbo": ('fault = { kind = "unresponsive", ledgers = [3] }\nlimbo = [3]', False),
    "slow": ('fault = { kind = "slow", delay_s = 0.05 }', True),
    "too slow": ('fault = { kind = "slow", delay_s = 0.3 }', False),
    "status": ('fault = { kind = "status", status = "EIO" }', True),
    "garbage": ('fault = "garbage"', True),
    "in limbo": ("limbo = [2]", True),
    "read-only": ('mode = "readonly"', True),
    "stopped": ('mode = "stopped"', False),
}


class FakeZooKeeper:
    """The kazoo calls the simulated cluster's writes make, on a dict of nodes."""

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.connected = True

    def ensure_path(self, path: str) -> None:
        self.nodes.setdefault(path, b"")

    def create(
        self, path: str, value: bytes = b"", ephemeral: bool = False, sequence: bool = False, makepath: bool = False
    ) -> str:
        self.nodes[path] = value
        return path

    def create_async(self, path: str, value: bytes = b"", ephemeral: bool = False) -> str:
        return self.create(path, value, ephemeral)

    def exists(self, path: str) -> dict[str, int] | None:
        return {} if path in self.nodes else None

    def set(self, path: str, value: bytes) -> None:
        self.nodes[path] = value

    def delete(self, path: str) -> None:
        if path not in self.nodes:
            raise NoNodeError()
        del self.nodes[path]


class FakePipeline:
    """The cluster's bulk writes, done one by one on a :class:`FakeZooKeeper`."""

    def __init__(self, zookeeper: FakeZooKeeper) -> None:
        self.zookeeper = zookeeper

    def ensure_parents(self, paths: Iterable[str], known: set[str]) -> None:
        pass

    def transactions(self, ops: Iterable[tuple[str, bytes | None]]) -> int:
        count = 0
        for path, data in ops:
            if data is None:
                self.zookeeper.delete(path)
            else:
                self.zookeeper.create(path, data)
            count += 1
        return count

    def create_tree(self, nodes: Iterable[tuple[str, bytes]], known: set[str]) -> None:
        self.transactions(nodes)

    def run(self, calls: Iterable[tuple[str, Any]], tolerate: tuple[type[BaseException], ...] = ()) -> list[Any]:
        return [(key, call()) for key, call in calls]


def written_cluster(scenario: Scenario) -> tuple[SimCluster, FakeZooKeeper]:
    """A cluster whose bookies are made (not started) and whose initial nodes are written to a fake ZooKeeper."""
    zookeeper = FakeZooKeeper()
    cluster = SimCluster(scenario, cast(KazooClient, zookeeper))
    cluster._pipeline = cast(Any, FakePipeline(zookeeper))
    cluster._make_bookies()
    cluster._write_initial()
    cluster.started_at_ms = 0
    cluster._write_marks(list(cluster.state.ledgers.values()))
    cluster._write_locks(list(cluster.state.ledgers.values()))
    return cluster, zookeeper


def agent_listing(cluster: SimCluster, bookie_id: str, timeout_s: float = 10.0) -> list[int] | None:
    """The ledger ids the bookie's agent lists (one page, as large as ListLedgers makes them), or None when the
    listing does not come within ``timeout_s``."""
    bookie = cluster.bookies[bookie_id]
    backend = MemoryListingBackend(bookie.store, bookie.faults, hang_s=0.05)
    started = time.monotonic()
    try:
        page = backend.list_ledgers(LISTING_START, 10_000)
    except TimeoutError:
        return None
    return [h.ledger_id for h in page.ledgers] if time.monotonic() - started < timeout_s else None


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_the_truth_reports_what_the_bookies_agent_lists(name: str) -> None:
    """Whether bookie-4 is reported for orphan 2 is whether its agent lists the orphan to a checker with a request
    timeout of 0.2 s (orphan 2 is on bookie-4, ledger 3 is not, ledger 4 is)."""
    setting, reported = FAULTS[name]
    ensemble = ["bookie-1" if name == "in limbo" else "bookie-4", "bookie-2", "bookie-3"]
    head = HEAD.replace("[checker]\n", "[checker]\nrequest_timeout_s = 0.2\n")
    scenario = parse_scenario(
        head
        + f"""
[bookies.bookie-4]
{setting}
[[ledgers]]
id = 2
ensemble = {json.dumps(ensemble)}
orphan = true
[[ledgers]]
id = 3
{E123}
[[ledgers]]
id = 4
ensemble = ["bookie-4", "bookie-5", "bookie-1"]
"""
    )
    state = ClusterState.from_scenario(scenario)
    found = {b for lid, b in orphans_found(state, 100.0 + GRACE_STEP_S) if lid == 2}
    assert ("bookie-4" in found) is reported
    assert found - {"bookie-4"} == set(ensemble[1:] if name != "in limbo" else ensemble)
    cluster, _ = written_cluster(scenario)
    listed = None if setting == 'mode = "stopped"' else agent_listing(cluster, "bookie-4", timeout_s=0.2)
    assert (listed is not None and 2 in listed) is reported
    if listed is not None:
        assert set(listed) == {lid for lid in (2, 3, 4) if state.lists("bookie-4", lid)}


def test_truth_over_time_equals_judging_every_state_again() -> None:
    scenario = parse_scenario(
        HEAD
        + f"""
[bookies.bookie-1]
limbo = [3]
[bookies.bookie-5]
limbo = [4]
[[ledgers]]
ids = [1, 2]
{E123}
[[ledgers]]
id = 3
ensemble = ["bookie-2", "bookie-4", "bookie-5"]
orphan = true
[[ledgers]]
id = 4
ensemble = ["bookie-1", "bookie-4", "bookie-3"]
orphan = true
[[schedule]]
at = 5
action = "kill"
bookie = "bookie-4"
[[schedule]]
at = 20
action = "orphan"
ledger = 1
[[schedule]]
at = 40
action = "fault"
bookie = "bookie-2"
fault = {{ kind = "unresponsive", ledgers = [2] }}
[[schedule]]
at = 60
action = "revive"
bookie = "bookie-4"
[[schedule]]
at = 80
action = "limbo"
bookie = "bookie-5"
ledgers = []
[[schedule]]
at = 90
action = "fault"
bookie = "bookie-2"
fault = "none"
[[schedule]]
at = 130
action = "lose"
bookie = "bookie-3"
[[schedule]]
at = 150
action = "limbo"
bookie = "bookie-1"
ledgers = []
[[schedule]]
at = 200
action = "delete"
ledger = 4
[[schedule]]
at = 250
action = "fault"
bookie = "bookie-1"
fault = {{ kind = "slow", delay_s = 9 }}
"""
    )
    timeline = truth_timeline(scenario)
    replay = ClusterState.from_scenario(scenario)
    assert timeline[0].violations == tuple(cluster_truth(replay, 0.0))
    pending = list(scenario.schedule)
    last = {s.at_s: s for s in timeline}  # graces ending at one time make a state each: the last holds them all
    for state in timeline[1:]:
        is_change = bool(pending) and pending[0].at_s == state.at_s
        while pending and pending[0].at_s <= state.at_s:
            replay.apply(pending.pop(0))
        if state is last[state.at_s]:
            now = state.at_s if is_change else state.at_s + GRACE_STEP_S
            assert state.violations == tuple(cluster_truth(replay, now)), state.at_s
    found = {
        s.at_s: {(v.ledger_id, v.bookie) for v in s.violations if v.category is Category.ORPHAN_LEDGER}
        for s in timeline
    }
    # Seen since 0; bookie-2 answers again since 90, bookie-4 runs again since 60, bookie-5 dropped 4 from its limbo.
    assert found[100.0] == {(3, "bookie-1"), (3, "bookie-2"), (3, "bookie-4"), (3, "bookie-5")} | {
        (4, "bookie-1"),
        (4, "bookie-3"),
        (4, "bookie-4"),
    }
    assert found[120.0] == found[100.0] | {(1, "bookie-1"), (1, "bookie-2"), (1, "bookie-3")}  # orphaned at 20
    assert found[130.0] == found[120.0] - {(1, "bookie-3"), (4, "bookie-3")}  # bookie-3 lost everything
    assert found[150.0] == found[130.0] - {(3, "bookie-1")}  # its limbo record of 3 was all bookie-1 had of it
    assert found[250.0] == {(1, "bookie-2"), (3, "bookie-2"), (3, "bookie-4"), (3, "bookie-5")}  # too slow to list


# --------------------------------------------------------------------------- the simulated cluster


def test_the_cluster_never_writes_an_orphan_while_its_bookies_list_and_serve_it() -> None:
    scenario = parse_scenario(
        HEAD
        + f"""
[[ledgers]]
id = 1
{E123}
under_replicated = {{ replicas = ["bookie-3"], locked_by = "bookie-4" }}
[[ledgers]]
id = 2
{E123}
[[ledgers]]
id = 3
{E123}
orphan = true
[[schedule]]
at = 1
action = "orphan"
ledger = 1
[[schedule]]
at = 2
action = "delete"
ledger = 2
[[schedule]]
at = 3
action = "delete"
ledger = 3
"""
    )
    cluster, zookeeper = written_cluster(scenario)
    root = scenario.cluster.ledgers_root
    nodes = zookeeper.nodes
    assert ledger_path(1, root=root) in nodes and ledger_path(2, root=root) in nodes
    assert underreplication_path(1, root=root) in nodes and underreplication_lock_path(1, root=root) in nodes
    assert not {ledger_path(3, root=root), underreplication_path(3, root=root)} & set(nodes)  # never written
    holders = ("bookie-1", "bookie-2", "bookie-3")
    assert [agent_listing(cluster, b) for b in holders] == [[1, 2, 3]] * 3 and agent_listing(cluster, "bookie-4") == []
    entry = cluster.bookies["bookie-1"].store.entry(3, 0)
    assert entry is not None and parse_entry_header(entry, ledger_id=3, entry_id=0) == EntryHeader(3, 0, -1, 1024)
    orphaned, deleted, collected = scenario.schedule

    asyncio.run(cluster.apply(orphaned))  # its node, mark and lock go; its bookies keep listing and serving it
    assert not {ledger_path(1, root=root), underreplication_path(1, root=root)} & set(nodes)
    assert underreplication_lock_path(1, root=root) not in nodes and ledger_path(2, root=root) in nodes
    assert [agent_listing(cluster, b) for b in holders] == [[1, 2, 3]] * 3
    assert cluster.bookies["bookie-2"].store.get(1) == cluster.state.held_groups("bookie-2", 1) is not None

    asyncio.run(cluster.apply(deleted))  # a deleted ledger leaves the listings
    assert ledger_path(2, root=root) not in nodes
    assert [agent_listing(cluster, b) for b in holders] == [[1, 3]] * 3

    asyncio.run(cluster.apply(collected))  # an orphan collected at last
    assert [agent_listing(cluster, b) for b in holders] == [[1]] * 3
    assert not {ledger_path(lid, root=root) for lid in (1, 2, 3)} & set(nodes)


def test_a_simulated_bookie_lists_an_orphan_and_serves_its_entries_over_both_apis() -> None:
    scenario = parse_scenario(HEAD + f"[[ledgers]]\nid = 1\n{E123}\n[[ledgers]]\nid = 7\n{E123}\norphan = true\n")
    cluster, zookeeper = written_cluster(scenario)
    assert ledger_path(7, root=scenario.cluster.ledgers_root) not in zookeeper.nodes
    bookie = cluster.bookies["bookie-2"]

    async def body() -> tuple[list[int], dict[int, BookieAnswer], dict[tuple[int, int], EntryHeader | str]]:
        async with bookie:

            def held() -> list[int]:
                with AgentClient(bookie.agent_address, expected_bookie_id="bookie-2") as client:
                    return [h.ledger_id for h in client.held_ledgers(page_size=1)]

            listed = await asyncio.to_thread(held)
            client = BookieV3Client(*bookie.v3_address, config=V3_CONFIG)
            try:
                answers = await client.get_listings([7], timeout=5.0)
                headers = await client.read_entry_headers([(7, 1), (7, 2)], timeout=5.0)
            finally:
                await client.close()
            return listed, answers, headers

    listed, answers, headers = asyncio.run(body())
    assert listed == [1, 7]
    expected = cluster.state.held_groups("bookie-2", 7)
    assert expected is not None and answers[7].kind is AnswerKind.LISTING
    assert same_entries(answers[7].groups, expected)
    assert headers[7, 1] == EntryHeader(7, 1, 0, 2 * 1024)  # bookie-2 (index 1) holds entries 0, 1, 3, 4, ...
    assert headers[7, 2] == "status ENOENTRY"


# --------------------------------------------------------------------------- generated scenarios


def test_the_generator_makes_orphans() -> None:
    text, plan = generate(2000, parse_fault_mix("missing=0.01,orphan=0.01"), 5)
    assert {kind: len(ids) for kind, ids in plan.ledgers.items()} == {"missing": 20, "orphan": 20}
    scenario = parse_scenario(text)
    assert [spec.ledger_id for spec in scenario.orphans] == plan.ledgers["orphan"]
    assert len(scenario.ledgers) == 1980 and not set(plan.ledgers["orphan"]) & {s.ledger_id for s in scenario.ledgers}
    state = ClusterState.from_scenario(scenario)
    grace = scenario.checker.orphan_grace_s
    held = {(lid, b) for lid in plan.ledgers["orphan"] for b in state.bookies if state.held_groups(b, lid) is not None}
    assert held and orphans_found(state, grace) == set()
    assert orphans_found(state, grace + GRACE_STEP_S) == held
    assert not any(v.ledger_id in plan.ledgers["orphan"] for v in cluster_truth(state, 0.0))


@pytest.mark.parametrize(
    ("mix", "digest"),
    [
        ("none", "9eaff9298e188476c07fe9078d465334efce3e4674be23150b56f0121ab55e5b"),
        ("ledgers", "cc531bccf6fcdcdc03caccb93e5f336bcad635f13dd93d74e90c3797235f3470"),
        ("realistic", "5c700a1ed0a633e92f02a60f92f265c5fe942b2334bce5e73cdebdccde651d5c"),
        ("realistic,eio=1,missing=0.01", "0b4cc4d5775fc3a16e0c4e308cc6132841c7aece247420b88248257519ae58d0"),
    ],
)
def test_mixes_without_orphans_generate_what_they_did_before(mix: str, digest: str) -> None:
    """The digests are those of the files these mixes gave before the ``orphan`` kind existed (3,000 ledgers,
    seed 7)."""
    text, _ = generate(3000, parse_fault_mix(mix), 7)
    assert hashlib.sha256(text.encode()).hexdigest() == digest
    assert generate(3000, parse_fault_mix(f"{mix},orphan=0"), 7)[0] == text
