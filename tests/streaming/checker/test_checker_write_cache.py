"""The streaming checker never races DbLedgerStorage's write cache: bookies whose agents see a ledger only after
their next flush (as real ones do) give no false finding, and real losses are still found once the flush is past.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.settings.loader import Settings
from scrutiny.simulator.scenario import load_scenario
from scrutiny.simulator.state import ClusterState
from scrutiny.simulator.truth import cluster_truth
from tests.streaming.checker.test_checker import EXAMPLE
from tests.support.checker_harness import harness_settings, running_checker
from tests.support.servers import KafkaTopicFactory

pytestmark = pytest.mark.integration

FLUSH_S = 4.0


def test_no_false_finding_while_the_ledgers_wait_in_the_write_cache(
    spark: SparkSession,
    zk_client: KazooClient,
    service_settings: Settings,
    kafka_topic_factory: KafkaTopicFactory,
    tmp_path: Path,
) -> None:
    example = load_scenario(EXAMPLE)
    scenario = replace(example, cluster=replace(example.cluster, write_cache_flush_s=FLUSH_S), schedule=())
    expected = {
        (v.ledger_id, v.category.value, v.bookie) for v in cluster_truth(ClusterState.from_scenario(scenario), 0)
    }
    assert {c for _, c, _ in expected} >= {"NO_REPLICA", "MISSING_REPLICA"}
    settings = harness_settings(
        service_settings, scenario, zk_client.chroot, kafka_topic_factory(partitions=2), tmp_path
    )
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
