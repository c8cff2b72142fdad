"""The tables' times are the checks': a verdict is stamped when it is reached, after its bookies answered."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.core.zk_paths import ledger_path
from scrutiny.simulator.scenario import parse_scenario
from tests.support.checker_harness import SettingsFor, running_checker
from tests.support.scenarios import small_scenario

pytestmark = pytest.mark.integration

DELAY_S = 2.5

SCENARIO = small_scenario(
    "slow-bookie",
    seed=2,
    bookies=3,
    body=f"""
[bookies.bookie-3]
fault = {{ kind = "slow", delay_s = {DELAY_S} }}

[[ledgers]]
id = 1
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
state = "OPEN"
holdings = [{{ bookie = "bookie-2", nothing = true }}]

[[schedule]]
at = 100
action = "close"
ledger = 1
""",
)


def test_a_check_is_stamped_when_its_slow_bookie_has_answered_not_when_its_batch_began(
    spark: SparkSession,
    zk_client: KazooClient,
    settings_for: SettingsFor,
) -> None:
    scenario = parse_scenario(SCENARIO)
    (close,) = scenario.schedule
    settings = settings_for(scenario)
    settings = replace(
        settings,
        checker=replace(settings.checker, fetch_timeout_seconds=DELAY_S * 3),
        bookies=replace(settings.bookies, request_timeout_seconds=DELAY_S * 2),
    )
    with running_checker(spark, zk_client, settings, scenario, schedule=False) as harness:
        harness.wait_first_batch()
        harness.run(harness.cluster.apply(close))
        harness.wait(lambda: any(c["ledger_id"] == 1 for c in harness.table("ledger_checks")), 60, "ledger 1 checked")
        # The batch's tables are written at the same time: its violations may commit a moment after its check.
        harness.wait(lambda: any(v["ledger_id"] == 1 for v in harness.table("violations")), 30, "its violations")
        stat = zk_client.exists(ledger_path(1, root=settings.zookeeper.ledgers_root))
        assert stat is not None
        closed_at = datetime.fromtimestamp(stat.mtime / 1000, tz=UTC)
        (check,) = [c for c in harness.table("ledger_checks") if c["ledger_id"] == 1]
        asked_for = timedelta(seconds=DELAY_S)
        assert check["verdict"] == "VIOLATED" and check["checked_at"] >= closed_at + asked_for, (check, closed_at)
        assert check["latency_ms"] >= DELAY_S * 1000
        assert abs(check["checked_at"] - timedelta(milliseconds=check["latency_ms"]) - closed_at) < timedelta(
            milliseconds=2
        )
        found = [v for v in harness.table("violations") if v["ledger_id"] == 1]
        assert {v["category"] for v in found} >= {"MISSING_REPLICA"}
        assert all(v["detected_at"] >= closed_at + asked_for for v in found), found
