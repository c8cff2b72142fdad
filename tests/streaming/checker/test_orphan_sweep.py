"""The streaming job's orphan sweep, step by step, against a simulated cluster (real ZooKeeper, the simulated
bookies' agents over gRPC): its cursor, the id ranges it hands the judge, and the orphans it finds, as the truth
says."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from scrutiny.connectors.bookies.fetch import fetch_config_from_settings
from scrutiny.connectors.zookeeper.cluster_cache import CachedClusterReader
from scrutiny.core.held_ledgers import LISTING_START, HeldLedger
from scrutiny.core.orphans import IdRange, judge_range
from scrutiny.settings.loader import Settings
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.simulator.state import ClusterState
from scrutiny.streaming.checker.orphan_sweep import OrphanSweep
from tests.streaming.checker.test_checker import truth_ids
from tests.support.checker_harness import harness_settings, simulated_cluster

pytestmark = pytest.mark.integration

#: Three bookies hold ledgers 1-40 (two copies each), 41 and 42 are orphans held by all three; bookie-4 holds
#: nothing and is reached through its agent too; bookie-5 is stopped (not registered: not swept).
SCENARIO = """
[scenario]
seed = 11
[cluster]
bookies = 5
stopped = ["bookie-5"]
[checker]
orphan_grace_s = 0
[defaults]
ensemble_size = 3
write_quorum = 2
last_entry = 9
[[ledgers]]
ids = [[1, 40]]
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
[[ledgers]]
ids = [41, 42]
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
write_quorum = 3
orphan = true
"""
PAGE = 7


class RecordingJudge:
    """Judges with a grace of nothing (every ledger without metadata is an orphan) and records what it was handed."""

    def __init__(self) -> None:
        self.loads = 0
        self.flushes = 0
        self.ranges: list[tuple[str, IdRange, list[int]]] = []
        self.orphans: set[tuple[int, str]] = set()

    def load(self) -> None:
        self.loads += 1

    def flush(self) -> None:
        self.flushes += 1

    def __call__(self, bookie: str, ids: IdRange, without_metadata: list[HeldLedger]) -> int:
        self.ranges.append((bookie, ids, [h.ledger_id for h in without_metadata]))
        judged = judge_range(without_metadata, ids, {}, now_ms=0, grace_ms=0)
        self.orphans |= {(o.ledger.ledger_id, bookie) for o in judged.orphans}
        return len(judged.orphans)


def test_a_pass_lists_every_agent_bookie_page_by_page_and_hands_the_judge_contiguous_ranges(
    zk_client: KazooClient, service_settings: Settings, tmp_path: Path
) -> None:
    scenario = parse_scenario(SCENARIO)
    truth = {(lid, bookie) for lid, category, bookie in truth_ids(ClusterState.from_scenario(scenario), 0.01)}
    assert {lid for lid, _ in truth} == {41, 42} and {b for _, b in truth} == {"bookie-1", "bookie-2", "bookie-3"}
    settings = harness_settings(service_settings, scenario, zk_client.chroot, "unused", tmp_path)
    reader = CachedClusterReader(settings.zookeeper, scenario.cluster.ledgers_root, ttl_s=0.0)
    judge = RecordingJudge()
    now = [0.0]
    sweep = OrphanSweep(
        registrations=lambda: reader.get().registrations,
        fetch=fetch_config_from_settings(settings.bookies),
        present_now=reader.ledgers_present,
        judge=judge,
        page_ledgers=PAGE,
        interval_s=60.0,
        write_s=600.0,
        close=reader.close,
        clock=lambda: now[0],
    )
    try:
        with simulated_cluster(zk_client, settings, scenario, watch=False):
            steps = [sweep.step() for _ in range(20)]
            assert (judge.loads, judge.flushes) == (1, 0)  # read at the first step, nothing written before 600 s
            now[0] += 600
            steps += [sweep.step() for _ in range(20)]
            assert (judge.loads, judge.flushes) == (2, 1)  # written, and read again, once
    finally:
        sweep.stop()
    assert judge.flushes == 2  # what was judged since, written at the stop
    swept = [s for s in steps if s is not None]
    assert len(swept) == len(steps)
    # Each of bookie-1..3 lists its ledgers in pages of 7; bookie-4 holds nothing: one page that ends its listing.
    order = [s.bookie for s in swept]
    first_pass = order[: order.index("bookie-4") + 1]
    assert sorted(set(first_pass)) == ["bookie-1", "bookie-2", "bookie-3", "bookie-4"]
    assert first_pass == sorted(first_pass), "bookies in id order, each to the end of its listing"
    assert "bookie-5" not in order
    for bookie in ("bookie-1", "bookie-2", "bookie-3", "bookie-4"):
        ranges = [ids for b, ids, _ in judge.ranges if b == bookie]
        pass_ranges = ranges[: next(i for i, r in enumerate(ranges) if r.last is None) + 1]
        assert pass_ranges[0].after == LISTING_START
        assert all(a.last == b.after for a, b in itertools.pairwise(pass_ranges)), pass_ranges
        listed = sum(s.listed for s in swept[: len(first_pass)] if s.bookie == bookie)
        held = len(ClusterState.from_scenario(scenario).ledgers_of(bookie))
        assert listed == held, bookie
    # The judge was handed exactly the ledgers without metadata.
    assert judge.orphans == truth
    assert all(set(without) <= {41, 42} for _, _, without in judge.ranges)


def test_a_bookie_whose_agent_does_not_list_is_passed_by(
    zk_client: KazooClient, service_settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    scenario = parse_scenario(SCENARIO.replace("[defaults]", '[bookies.bookie-2]\nfault = "unresponsive"\n[defaults]'))
    settings = harness_settings(service_settings, scenario, zk_client.chroot, "unused", tmp_path)
    reader = CachedClusterReader(settings.zookeeper, scenario.cluster.ledgers_root, ttl_s=0.0)
    judge = RecordingJudge()
    fetch = fetch_config_from_settings(settings.bookies)
    sweep = OrphanSweep(
        registrations=lambda: reader.get().registrations,
        fetch=fetch,
        present_now=reader.ledgers_present,
        judge=judge,
        page_ledgers=100,
        interval_s=60.0,
        write_s=600.0,
        close=reader.close,
    )
    try:
        with simulated_cluster(zk_client, settings, scenario, watch=False):
            steps = [sweep.step() for _ in range(4)]
    finally:
        sweep.stop()
    assert steps[1] is None and "the agent of bookie-2 did not list its ledgers" in caplog.text
    assert [s.bookie for s in steps if s is not None] == ["bookie-1", "bookie-3", "bookie-4"]
    assert judge.orphans == {(41, "bookie-1"), (42, "bookie-1"), (41, "bookie-3"), (42, "bookie-3")}
