"""Re-read before reporting (BP-34): a critical finding is written only while the ledger is still the version checked.

A watcher publishes every ledger (version 0) and stops; then, before the checker runs, ledger 1 is re-replicated
(a new ensemble: version 1) and ledger 2 deleted. The checker then checks the version-0 events: all three ledgers
have entries with no copy left (critical), but only ledger 3 is as it was checked. Ledgers 1 and 2 must leave no
row at all: their znodes are read again before the findings are written. The watcher, back, publishes ledger 1's
version 1, which is checked and healthy.
"""

from __future__ import annotations

import asyncio

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.connectors.kafka.config import consumer_kwargs
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.settings.loader import Settings
from scrutiny.simulator.model import Action, Event
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.streaming.checker.job import start_checker
from tests.support.checker_harness import (
    Harness,
    SettingsFor,
    running_watcher,
    simulated_cluster,
    wait_for_idle_spark,
)
from tests.support.event_log import read_topic, wait_until
from tests.support.scenarios import small_scenario

pytestmark = pytest.mark.integration

LOSING = 'ensemble = ["bookie-1", "bookie-2", "bookie-3"]\nholdings = [{ bookie = "bookie-2", nothing = true }, ' + (
    '{ bookie = "bookie-3", nothing = true }]'
)
SCENARIO = small_scenario(
    "reread-critical",
    seed=13,
    bookies=5,
    body="".join(f"\n[[ledgers]]\nid = {ledger}\n{LOSING}\n" for ledger in (1, 2, 3)),
)


def test_a_critical_finding_of_a_ledger_changed_or_deleted_since_its_event_is_not_written(
    spark: SparkSession,
    zk_client: KazooClient,
    settings_for: SettingsFor,
) -> None:
    scenario = parse_scenario(SCENARIO)
    settings = settings_for(scenario)
    topic = settings.kafka.topic
    with simulated_cluster(zk_client, settings, scenario, watch=False) as simulated:
        with running_watcher(settings, "watcher-before"):
            wait_until(lambda: _snapshot_ends(settings, topic) == 2, 60, "the snapshot on both partitions")
        cluster, loop = simulated.cluster, simulated.loop
        replaced = ("bookie-1", "bookie-4", "bookie-5")  # copies made: healthy
        move = Event(cluster.elapsed_s(), Action.CHANGE_ENSEMBLE, 0, ledger=1, first=0, ensemble=replaced)
        for change in (move, Event(cluster.elapsed_s(), Action.DELETE, 1, ledger=2)):
            asyncio.run_coroutine_threadsafe(cluster.apply(change), loop).result(timeout=60)
        harness = Harness(settings, start_checker(spark, settings), cluster, loop)
        try:
            harness.wait(lambda: (3, "NO_REPLICA", None) in harness.open_ids(), 120, "ledger 3's loss")
            published = sum(1 for _ in read_topic(consumer_kwargs(settings.kafka), topic))
            harness.wait(
                lambda: sum(int(r["events"]) for r in harness.table("checker_runs")) >= published,
                60,
                "every published event processed",
            )
            assert {v["ledger_id"] for v in harness.table("violations")} == {3}  # nothing of 1 or 2, ever
            assert {c["ledger_id"] for c in harness.table("ledger_checks")} == {3}
            with running_watcher(settings, "watcher-after"):  # version 1 of ledger 1, ledger 2's absence
                harness.wait(
                    lambda: any(c["ledger_id"] == 1 for c in harness.table("ledger_checks")), 60, "ledger 1 checked"
                )
            [check] = [c for c in harness.table("ledger_checks") if c["ledger_id"] == 1]
            assert (check["metadata_version"], check["verdict"]) == (1, "HEALTHY")
            assert {v["ledger_id"] for v in harness.table("violations")} == {3}
        finally:
            harness.checker.stop()
            wait_for_idle_spark(spark)


def _snapshot_ends(settings: Settings, topic: str) -> int:
    records = read_topic(consumer_kwargs(settings.kafka), topic)
    return sum(1 for r in records if r.event.kind == pb.EventKind.SNAPSHOT_END)
