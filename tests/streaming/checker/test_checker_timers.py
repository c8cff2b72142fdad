"""Timers survive a restart of the checker: a stuck mark is reported on time with nothing coming in from the watcher
(its ticks an hour apart), the checker waking itself for its timers from the calendar kept in its checkpoint."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.simulator.scenario import parse_scenario
from scrutiny.streaming.checker.job import start_checker
from tests.support.checker_harness import SettingsFor, running_checker

pytestmark = pytest.mark.integration

GRACE_S = 80
#: The mark's grace ends this long after the cluster starts: far beyond the first checker's start and first checks
#: even on a loaded machine, so the timer is always set before the restart (the test waits this long anyway).
DUE_S = 60
SCENARIO = f"""
[scenario]
name = "timers"
seed = 9

[cluster]
bookies = 3

[checker]
under_replication_grace_s = {GRACE_S}

[defaults]
ensemble_size = 3
write_quorum = 2
ack_quorum = 2
last_entry = 19
ensemble = ["bookie-1", "bookie-2", "bookie-3"]

[[ledgers]]
ids = [[1, 3]]

[[ledgers]]
id = 4
under_replicated = {{ replicas = ["bookie-3"], age_s = {GRACE_S - DUE_S} }}
"""


def test_a_mark_timer_set_before_a_restart_fires_after_it(
    spark: SparkSession,
    zk_client: KazooClient,
    settings_for: SettingsFor,
) -> None:
    scenario = parse_scenario(SCENARIO)
    settings = settings_for(scenario)
    settings = replace(
        settings,
        watcher=replace(settings.watcher, tick_interval_seconds=3600),
        checker=replace(settings.checker, idle_batch_seconds=3600),
    )
    started = time.monotonic()  # the mark's grace ends about DUE_S from here
    stuck = (4, "UNDER_REPLICATION_STUCK", None)
    with running_checker(spark, zk_client, settings, scenario) as harness:
        harness.wait(lambda: len({c["ledger_id"] for c in harness.table("ledger_checks")}) == 4, 60, "all checked")
        assert stuck not in harness.open_ids() and time.monotonic() - started < DUE_S, (
            "too slow to test before the due time"
        )
        harness.checker.stop()  # the timer is in the state store; nothing about ledger 4 will come again
        runs_before = len(harness.table("checker_runs"))
        second = start_checker(spark, replace(settings))
        harness.checker = second
        harness.wait(lambda: stuck in harness.open_ids(), DUE_S + 60, "the stuck mark after the restart")
        assert time.monotonic() - started >= DUE_S - 5  # not before its time (a few seconds of clock slack)
        # On time: woken for the timer (no tick, no heartbeat comes before an hour).
        assert time.monotonic() - started < DUE_S + 25
        harness.wait(lambda: len(harness.table("checker_runs")) > runs_before, 30, "the batch's checker_runs row")
