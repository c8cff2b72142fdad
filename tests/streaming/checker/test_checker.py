"""The streaming checker end to end: simulated cluster → watcher → Kafka → Spark → Delta, against the truth."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.paths import PROJECT_ROOT
from scrutiny.simulator.scenario import load_scenario, parse_scenario
from scrutiny.simulator.state import ClusterState
from scrutiny.simulator.truth import cluster_truth
from tests.support.checker_harness import SettingsFor, ViolationId, running_checker

pytestmark = pytest.mark.integration

REPO = PROJECT_ROOT
EXAMPLE = REPO / "conf" / "scenarios" / "example.toml"


def truth_ids(state: ClusterState, now_s: float) -> set[ViolationId]:
    return {(v.ledger_id, v.category.value, v.bookie) for v in cluster_truth(state, now_s)}


def test_every_injected_violation_is_found_and_nothing_else(
    spark: SparkSession,
    zk_client: KazooClient,
    settings_for: SettingsFor,
) -> None:
    scenario = replace(load_scenario(EXAMPLE), schedule=())
    expected = truth_ids(ClusterState.from_scenario(scenario), 0.0)
    assert {c for _, c, _ in expected} >= {"NO_REPLICA", "BOOKIE_UNRESPONSIVE", "UNDER_REPLICATION_STUCK"}
    settings = settings_for(scenario)
    with running_checker(spark, zk_client, settings, scenario) as harness:
        harness.wait(lambda: harness.open_ids() >= expected, 90, "every injected violation")
        harness.wait(lambda: harness.checker.sink.pending == set(), 30, "no retry pending")
        assert harness.open_ids() == expected
        checks = harness.table("ledger_checks")
        closed = {s.ledger_id for s in scenario.ledgers if s.state.value == "CLOSED"}
        assert closed <= {c["ledger_id"] for c in checks}
        runs = harness.table("checker_runs")
        assert runs and sum(r["events"] for r in runs) > 0
        violations = harness.table("violations")
        assert len(violations) == len({(v["ledger_id"], v["category"], v["bookie"]) for v in violations})
        topic_rows = [v for v in violations if v["pulsar_topic"]]
        assert all(v["ensemble"] and v["write_quorum"] for v in violations if v["category"] == "MISSING_REPLICA")
        assert all(v["pulsar_topic"].startswith("persistent://") for v in topic_rows)


SCHEDULED = """
[scenario]
name = "scheduled"
seed = 3

[cluster]
bookies = 4

[checker]
under_replication_grace_s = 8

[bookies.bookie-4]
fault = "unresponsive"

[defaults]
ensemble_size = 3
write_quorum = 2
ack_quorum = 2
last_entry = 49

[[ledgers]]
id = 1
ensemble = ["bookie-1", "bookie-2", "bookie-3"]

[[ledgers]]
id = 2
ensemble = ["bookie-1", "bookie-2", "bookie-4"]

[[ledgers]]
id = 3
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
holdings = [{ bookie = "bookie-3", nothing = true }]

[[ledgers]]
id = 4
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
under_replicated = { replicas = ["bookie-3"], age_s = 60 }

[[ledgers]]
id = 5
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
under_replicated = { replicas = ["bookie-3"], ctime = false }

[[ledgers]]
id = 6
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
state = "OPEN"
last_entry = 19

# Applied by the test when it has seen what comes before, in this order.
[[schedule]]
at = 100
action = "fault"
bookie = "bookie-4"
fault = "none"

[[schedule]]
at = 100
action = "unmark"
ledger = 5

[[schedule]]
at = 100
action = "delete"
ledger = 3

[[schedule]]
at = 100
action = "close"
ledger = 6
"""


def test_retries_marks_deletions_and_closes_over_time(
    spark: SparkSession,
    zk_client: KazooClient,
    settings_for: SettingsFor,
) -> None:
    scenario = parse_scenario(SCHEDULED)
    recover, unmark, delete, close = scenario.schedule
    settings = settings_for(scenario)
    settings = replace(
        settings,
        checker=replace(settings.checker, retry_initial_seconds=1.0, retry_max_seconds=2.0, retry_attempts=3),
    )
    with running_checker(spark, zk_client, settings, scenario, schedule=False) as harness:
        harness.wait(lambda: 2 in harness.checker.sink.pending, 60, "ledger 2 waiting for bookie-4")
        harness.run(harness.cluster.apply(recover))  # bookie-4 answers again before the retries run out
        harness.run(harness.cluster.apply(unmark))  # ledger 5's mark goes within its grace period
        # When ledger 5's grace would end, had it stayed marked (the scenario's grace is under 10 s).
        due = datetime.now(UTC) + timedelta(seconds=10)
        harness.wait(lambda: (3, "MISSING_REPLICA", "bookie-3") in harness.open_ids(), 30, "ledger 3's loss")
        harness.run(harness.cluster.apply(delete))
        harness.run(harness.cluster.apply(close))
        harness.wait(lambda: (3, "MISSING_REPLICA", "bookie-3") in harness.resolved_ids(), 30, "ledger 3 resolved")
        harness.wait(lambda: 6 in {c["ledger_id"] for c in harness.table("ledger_checks")}, 30, "ledger 6 checked")
        harness.wait(lambda: not harness.checker.sink.pending, 30, "no retry pending")
        # Timers fire in the batches that run after their time: two batches begun after it have seen it.
        harness.wait(
            lambda: sum(r["started_at"] >= due for r in harness.table("checker_runs")) >= 2,
            60,
            "two batches after ledger 5's grace would have ended",
        )
        assert harness.open_ids() == {(4, "UNDER_REPLICATION_STUCK", None)}
        found = {(v["ledger_id"], v["category"]) for v in harness.table("violations")}
        assert not any(ledger in (2, 5) for ledger, _ in found), found
        last_check_of_2 = [c for c in harness.table("ledger_checks") if c["ledger_id"] == 2][-1]
        assert last_check_of_2["verdict"] == "HEALTHY" and last_check_of_2["retries"] >= 1
