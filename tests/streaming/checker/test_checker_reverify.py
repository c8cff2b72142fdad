"""The rolling re-verification on the simulated cluster: losses after a ledger closed are found by the scrub, and a
job stopped longer than the interval reports CHECK_OVERDUE until its ledgers are verified again.

Nothing in ZooKeeper changes when a bookie loses its data after its ledgers closed while it runs on (the scenario's
``lose``: no restart, no new cookie), so no event ever reaches the checker: only the re-verification can find what
was lost.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.simulator.model import Action, Event
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.streaming.checker.job import start_checker
from tests.support.checker_harness import SettingsFor, running_checker, wait_for_idle_spark
from tests.support.scenarios import TWO_GROUPS, TWO_GROUPS_LEDGERS, small_scenario

pytestmark = pytest.mark.integration

INTERVAL_S = 8.0
GRACE_S = 2.0
SCENARIO = small_scenario(
    "reverify",
    seed=13,
    bookies=4,
    body=TWO_GROUPS,
)
LEDGERS = TWO_GROUPS_LEDGERS


def test_a_bookie_emptied_after_the_close_is_found_by_the_scrub_and_a_stopped_job_reports_check_overdue(
    spark: SparkSession,
    zk_client: KazooClient,
    settings_for: SettingsFor,
) -> None:
    scenario = parse_scenario(SCENARIO)
    settings = settings_for(scenario)
    checker = replace(
        settings.checker,
        reverify_interval=INTERVAL_S,
        check_overdue_grace_seconds=GRACE_S,
        reverify_max_per_second=0,
        verification_ages_seconds=0,
    )
    settings = replace(settings, checker=checker)
    with running_checker(spark, zk_client, settings, scenario, schedule=False) as harness:

        def checks() -> dict[int, list[str]]:
            found: dict[int, list[str]] = {}
            for row in harness.table("ledger_checks"):
                found.setdefault(row["ledger_id"], []).append(row["verdict"])
            return found

        harness.wait(lambda: set(checks()) == LEDGERS, 120, "every ledger checked once")
        assert not harness.open_ids()
        emptied_at = time.monotonic()
        harness.run(harness.cluster.apply(Event(0.0, Action.LOSE, 0, bookie="bookie-2")))
        lost = {(ledger, "MISSING_REPLICA", "bookie-2") for ledger in (1, 2, 3, 4)}
        harness.wait(lambda: lost <= harness.open_ids(), INTERVAL_S + 30, "the emptied bookie's replicas missing")
        assert time.monotonic() - emptied_at <= INTERVAL_S + 30
        # Every ledger was verified again within the interval, the untouched ones still healthy.
        harness.wait(lambda: all(len(v) >= 2 for v in checks().values()), INTERVAL_S + 30, "every ledger rechecked")
        assert {ledger for ledger, *_ in harness.open_ids()} == {1, 2, 3, 4}
        assert all(verdicts[-1] == "HEALTHY" for ledger, verdicts in checks().items() if ledger in (70, 71))
        assert verified_by_age(harness.table("verification_ages")) == len(LEDGERS)

        harness.checker.stop()  # longer than the interval plus the grace: every ledger's verification is late
        wait_for_idle_spark(spark)
        time.sleep(INTERVAL_S + GRACE_S + 2)
        harness.checker = start_checker(spark, settings)
        overdue = {(ledger, "CHECK_OVERDUE", None) for ledger in LEDGERS}

        def overdue_resolved() -> bool:
            return overdue <= harness.resolved_ids()

        harness.wait(overdue_resolved, 90, "CHECK_OVERDUE reported, then resolved by the re-verification")
        reported = {v["ledger_id"] for v in harness.table("violations") if v["category"] == "CHECK_OVERDUE"}
        assert reported == LEDGERS
        assert {i for i in harness.open_ids() if i[1] == "CHECK_OVERDUE"} == set()
        assert lost <= harness.open_ids()  # still missing: the re-verification found them again
        assert verified_by_age(harness.table("verification_ages")) == len(LEDGERS)  # continued, none twice


def verified_by_age(rows: list[dict[str, Any]]) -> int:
    """The ledgers counted in the latest rows of ``verification_ages`` (every class but "overdue" is within the
    interval and its grace)."""
    latest = max(r["batch_id"] for r in rows)
    return sum(r["ledgers"] for r in rows if r["batch_id"] == latest)
