"""The streaming checker end to end: simulated cluster → watcher → Kafka → Spark → Delta, against the truth."""

from __future__ import annotations

import base64
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.schemas import WRITTEN_TABLES
from scrutiny.core.ledger_metadata import decode_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.ledger_tracker import TrackedLedger
from scrutiny.core.zk_paths import ledger_path
from scrutiny.paths import PROJECT_ROOT
from scrutiny.simulator.scenario import load_scenario, parse_scenario
from scrutiny.simulator.state import ClusterState
from scrutiny.simulator.truth import cluster_truth
from scrutiny.streaming.checker.buckets import decode_bucket
from tests.support.checker_harness import Harness, SettingsFor, ViolationId, running_checker

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
        # A ledger's password never leaves ZooKeeper: give one to a ledger whose finding stays open (its state keeps
        # its metadata), wait until that version is checked and its batch committed (a later batch ran).
        lost = min(ledger for ledger, category, _ in expected if category == "NO_REPLICA")
        path = ledger_path(lost, root=scenario.cluster.ledgers_root)
        data, _ = zk_client.get(path)
        zk_client.set(path, encode_ledger_metadata_v3(replace(decode_ledger_metadata(data), password=PASSWORD)))
        version = zk_client.exists(path).version
        harness.wait(lambda: bool(_checked(harness, lost, version)), 60, "the version with a password checked")
        batch = _checked(harness, lost, version)[0]["batch_id"]
        harness.wait(lambda: any(r["batch_id"] > batch for r in harness.table("checker_runs")), 60, "a later batch")
        assert any(ledger == lost and category == "NO_REPLICA" for ledger, category, _ in harness.open_ids())
        for name in WRITTEN_TABLES:
            for row in harness.table(name):
                assert not any(_holds_password(value) for value in row.values()), (name, row)
    # The state the checker keeps (RocksDB), read back with Spark's state data source once the query stopped.
    checkpoint = str(Path(settings.checker.checkpoint_dir).resolve())
    states: dict[int, TrackedLedger] = {}
    for stored in spark.read.format("statestore").option("stateVarName", "ledgers").load(checkpoint).collect():
        value = bytes(stored["value"][0])  # the value state's one column: a bucket's states
        assert not _holds_password(value)
        states.update(decode_bucket(value))
    kept = states[lost].metadata  # kept while NO_REPLICA is open: the metadata as published, without the password
    assert states[lost].version == version and kept is not None and not _holds_password(kept)
    assert decode_ledger_metadata(kept).password == b"" and decode_ledger_metadata(kept).password_set


#: A password no byte of the example scenario holds (16 bytes, text: the tables' rows are text and numbers).
PASSWORD = b"e2e-Pw-9fQz!k3Lx"


def _checked(harness: Harness, ledger: int, version: int) -> list[dict[str, Any]]:
    """The checks of that version of the ledger."""
    return [c for c in harness.table("ledger_checks") if c["ledger_id"] == ledger and c["metadata_version"] == version]


def _holds_password(value: object) -> bool:
    """Whether a value (a row's cell, a state's bytes) holds :data:`PASSWORD`, as it is or in base64 (any offset)."""
    if isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
    elif isinstance(value, str):
        raw = value.encode("utf-8", "surrogateescape")
    else:
        return False
    encoded = (base64.b64encode(bytes(pad) + PASSWORD)[4:-4] for pad in (0, 1, 2))
    return PASSWORD in raw or any(form in raw for form in encoded)


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
under_replicated = { replicas = ["bookie-3"], age_s = 60, locked_by = "bookie-2" }

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
        [stuck] = [v for v in harness.table("violations") if v["category"] == "UNDER_REPLICATION_STUCK"]
        assert "; locked by the replication worker on bookie-2 since " in stuck["details"]  # its worker, named
        found = {(v["ledger_id"], v["category"]) for v in harness.table("violations")}
        assert not any(ledger in (2, 5) for ledger, _ in found), found
        last_check_of_2 = [c for c in harness.table("ledger_checks") if c["ledger_id"] == 2][-1]
        assert last_check_of_2["verdict"] == "HEALTHY" and last_check_of_2["retries"] >= 1
