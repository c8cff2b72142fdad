"""BookKeeper's own auto-recovery checked end to end on the simulated cluster: switched off (``disable``), it is
``AUTORECOVERY_DISABLED``, a warning that turns critical past its grace; with no auditor vote past its grace, it is
``NO_AUDITOR``; switching it on and a new vote resolve them. At each step the cluster-level findings of the tables are
the simulator's ground truth.
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.simulator.model import Action, Event
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.simulator.truth import cluster_truth
from scrutiny.streaming.checker.records import CLUSTER_LEDGER
from tests.support.checker_harness import SettingsFor, running_checker
from tests.support.scenarios import TWO_GROUPS, TWO_GROUPS_LEDGERS, small_scenario

pytestmark = pytest.mark.integration

CRITICAL_AFTER_S = 20
NO_AUDITOR_AFTER_S = 4
SCENARIO = small_scenario(
    "autorecovery",
    seed=23,
    bookies=4,
    body=f"""
[checker]
autorecovery_disabled_critical_s = {CRITICAL_AFTER_S}
no_auditor_grace_s = {NO_AUDITOR_AFTER_S}
"""
    + TWO_GROUPS,
)
DISABLED = (CLUSTER_LEDGER, "AUTORECOVERY_DISABLED", None)
NO_AUDITOR = (CLUSTER_LEDGER, "NO_AUDITOR", None)


def test_autorecovery_switched_off_and_left_without_auditor_is_reported_as_the_truth_says(
    spark: SparkSession, zk_client: KazooClient, settings_for: SettingsFor
) -> None:
    scenario = parse_scenario(SCENARIO)
    settings = settings_for(scenario)
    assert settings.watcher.no_auditor_grace_seconds == NO_AUDITOR_AFTER_S
    with running_checker(spark, zk_client, settings, scenario, schedule=False) as harness:

        def now(action: Action) -> None:
            harness.run(harness.cluster.apply(Event(harness.cluster.elapsed_s(), action, 0)))

        def cluster_level() -> dict[tuple[int, str, str | None], str]:
            rows = harness.table("open_violations")
            return {
                (r["ledger_id"], r["category"], r["bookie"]): r["severity"]
                for r in rows
                if r["resolved_at"] is None and r["ledger_id"] == CLUSTER_LEDGER
            }

        def truth() -> dict[tuple[int, str, str | None], str]:
            found = cluster_truth(harness.cluster.state, harness.cluster.elapsed_s())
            return {(v.ledger_id, v.category.value, v.bookie): v.severity.value for v in found}

        harness.wait(lambda: {r["ledger_id"] for r in harness.table("ledger_checks")} == TWO_GROUPS_LEDGERS, 120, "")
        assert cluster_level() == truth() == {}  # an auditor elected, auto-recovery on

        now(Action.DISABLE_AUTORECOVERY)
        # Seen well within the critical grace, so the truth is still a warning when compared.
        harness.wait(lambda: cluster_level() == {DISABLED: "warning"}, CRITICAL_AFTER_S - 5, "AUTORECOVERY_DISABLED")
        assert truth() == {DISABLED: "warning"}
        now(Action.STOP_AUDITOR)
        harness.wait(lambda: cluster_level() == {DISABLED: "critical", NO_AUDITOR: "warning"}, 60, "both past graces")
        assert truth() == cluster_level()

        now(Action.ENABLE_AUTORECOVERY)
        now(Action.START_AUDITOR)
        harness.wait(lambda: cluster_level() == {}, 30, "both resolved")
        assert truth() == {}
        assert {DISABLED, NO_AUDITOR} <= harness.resolved_ids()
        reported = [
            (v["category"], v["severity"]) for v in harness.table("violations") if v["ledger_id"] == CLUSTER_LEDGER
        ]
        # Each finding once, and AUTORECOVERY_DISABLED once more when it turned critical.
        assert sorted(reported) == [
            ("AUTORECOVERY_DISABLED", "critical"),
            ("AUTORECOVERY_DISABLED", "warning"),
            ("NO_AUDITOR", "warning"),
        ]
        details = {v["category"]: v["details"] for v in harness.table("violations") if v["ledger_id"] == CLUSTER_LEDGER}
        assert "disabled since" in details["AUTORECOVERY_DISABLED"] and "no auditor" in details["NO_AUDITOR"]
