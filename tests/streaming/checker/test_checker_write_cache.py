"""The streaming checker never races DbLedgerStorage's write cache: bookies whose agents see a ledger only after
their next flush (as real ones do) give no false finding, and real losses are still found once the flush is past.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.simulator.scenario import load_scenario
from scrutiny.simulator.state import ClusterState
from scrutiny.simulator.truth import cluster_truth
from tests.streaming.checker.test_checker import EXAMPLE
from tests.support.checker_harness import SettingsFor, running_checker

pytestmark = pytest.mark.integration

FLUSH_S = 4.0


def test_no_false_finding_while_the_ledgers_wait_in_the_write_cache(
    spark: SparkSession,
    zk_client: KazooClient,
    settings_for: SettingsFor,
) -> None:
    example = load_scenario(EXAMPLE)
    scenario = replace(example, cluster=replace(example.cluster, write_cache_flush_s=FLUSH_S), schedule=())
    expected = {
        (v.ledger_id, v.category.value, v.bookie) for v in cluster_truth(ClusterState.from_scenario(scenario), 0)
    }
    assert {c for _, c, _ in expected} >= {"NO_REPLICA", "MISSING_REPLICA"}
    settings = settings_for(scenario)
    assert settings.verdict_config.index_lag_ms == (FLUSH_S + settings.verdict.write_cache_margin_seconds) * 1000
    settings = replace(settings, bookies=replace(settings.bookies, protocol="agent"))  # every answer an index read
    with running_checker(spark, zk_client, settings, scenario) as harness:
        harness.wait(lambda: harness.open_ids() >= expected, 120, "every injected violation, after the flush")
        harness.wait(lambda: harness.checker.sink.pending == set(), 60, "no retry pending")
        assert harness.open_ids() == expected
        # The history too: no row was ever written for what only the write cache hid (violations is append-only).
        history = {(v["ledger_id"], v["category"], v["bookie"]) for v in harness.table("violations")}
        assert history <= expected, sorted(history - expected)
        checks = harness.table("ledger_checks")
        assert max(c["retries"] for c in checks) >= 1  # the checks did wait for the flush
