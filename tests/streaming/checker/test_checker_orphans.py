"""``ORPHAN_LEDGER`` from the streaming job's sweep end to end: simulated cluster → sweep → Delta, against the truth,
over time (an orphan made while the job runs, another collected at last)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.simulator.scenario import parse_scenario
from tests.streaming.checker.test_checker import truth_ids
from tests.support.checker_harness import Harness, SettingsFor, running_checker

pytestmark = pytest.mark.integration

#: Ledgers 1-30 healthy on three of four bookies, 41 an orphan from the start (held by bookie-1..3); later ledger 7
#: becomes an orphan (its metadata deleted, its entries kept) and 41 is collected at last.
SCENARIO = """
[scenario]
seed = 12
[cluster]
bookies = 4
[checker]
orphan_grace_s = 6
[defaults]
ensemble_size = 3
write_quorum = 2
last_entry = 9
[[ledgers]]
ids = [[1, 30]]
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
[[ledgers]]
id = 41
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
write_quorum = 3
orphan = true
[[schedule]]
at = 1000
action = "orphan"
ledger = 7
[[schedule]]
at = 1001
action = "delete"
ledger = 41
"""
HOLDERS_OF_41 = {"bookie-1", "bookie-2", "bookie-3"}


def orphan_rows(harness: Harness, table: str) -> list[dict[str, object]]:
    return [r for r in harness.table(table) if r["category"] == "ORPHAN_LEDGER"]


def sightings(harness: Harness) -> set[tuple[str, int]]:
    return {(str(r["bookie"]), int(str(r["ledger_id"]))) for r in harness.table("orphan_sightings")}


def test_the_sweep_finds_orphans_past_their_grace_and_resolves_them_once_collected(
    spark: SparkSession, zk_client: KazooClient, settings_for: SettingsFor
) -> None:
    scenario = parse_scenario(SCENARIO)
    orphan, collect = scenario.schedule
    settings = settings_for(scenario)
    settings = replace(
        settings,
        checker=replace(
            settings.checker, orphan_sweep_seconds=0.2, orphan_sweep_page_ledgers=8, orphan_sweep_write_seconds=2.0
        ),
    )
    assert settings.checker.orphan_grace_seconds == 6

    def truth() -> set[tuple[int, str, str | None]]:
        return truth_ids(harness.cluster.state, harness.cluster.elapsed_s())

    with running_checker(spark, zk_client, settings, scenario, schedule=False) as harness:
        # First seen without metadata: sighted at once, found 6 s later (the truth's sightings are the start).
        harness.wait(lambda: sightings(harness) == {(b, 41) for b in HOLDERS_OF_41}, 60, "ledger 41 sighted")
        assert not orphan_rows(harness, "open_violations")
        harness.wait(lambda: harness.open_ids() == truth() != set(), 60, "ledger 41's orphans, as the truth says")
        assert harness.open_ids() == {(41, "ORPHAN_LEDGER", b) for b in HOLDERS_OF_41}
        # An orphan made now: the job's rules forget the deleted ledger, the sweep sights it and finds it a grace later.
        harness.run(harness.cluster.apply(replace(orphan, at_s=harness.cluster.elapsed_s())))
        holders_of_7 = {b for b in HOLDERS_OF_41 if 7 in harness.cluster.state.ledgers_of(b)}
        assert holders_of_7
        harness.wait(lambda: {(b, 7) for b in holders_of_7} <= sightings(harness), 60, "ledger 7 sighted")
        assert not [v for v in harness.open_ids() if v[0] == 7]
        both = 3 + len(holders_of_7)
        harness.wait(lambda: harness.open_ids() == truth() and len(truth()) == both, 60, "ledger 7's orphans too")
        # Collected at last: its findings resolve and its sightings go; ledger 7's stay.
        harness.run(harness.cluster.apply(replace(collect, at_s=harness.cluster.elapsed_s())))
        harness.wait(lambda: not [v for v in harness.open_ids() if v[0] == 41], 60, "ledger 41 resolved")
        assert harness.open_ids() == truth() == {(7, "ORPHAN_LEDGER", b) for b in holders_of_7}
        harness.wait(lambda: sightings(harness) == {(b, 7) for b in holders_of_7}, 30, "ledger 41's sightings gone")
        # Many passes later, each finding was written once: the sweep reports what changed, not what it sees again.
        sweep = harness.checker.sweep
        assert sweep is not None
        pages = sweep.pages
        harness.wait(lambda: sweep.pages > pages + 12, 30, "more passes")
        found = orphan_rows(harness, "violations")
        assert sorted((r["ledger_id"], r["bookie"]) for r in found) == sorted(
            {(41, b) for b in HOLDERS_OF_41} | {(7, b) for b in holders_of_7}
        )
        assert all(r["source"] == "stream" for r in found)
        assert {r["run_id"] for r in harness.table("checker_runs") if r["violations"] or r["resolved"]} >= {
            f"{harness.checker.sink.run_id}-orphan-sweep"
        }
