"""Bookies' lives on the simulated cluster, with the re-verification off: only the watcher's word about a bookie can
make the checker look at ledgers whose metadata did not change.

A bookie wiped (formatted again: a new cookie) has its ledgers' losses found at once; a bookie restarted has the
ledgers that waited for its answers checked at once; a bookie killed and not recovered is BOOKIE_LOST, its ledgers
checked again, and those neither marked under-replicated nor re-replicated within the grace are
UNDER_REPLICATION_NOT_MARKED, until a mark comes (and again when a mark is cleared while the bookie is still lost
and in the ledger's ensemble), and an open ledger being written to it with too few bookies left is
OPEN_LEDGER_STALLED; its return resolves them and BOOKIE_LOST. A ledger left in recovery is RECOVERY_STALLED
after its grace, until it is closed.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.core.ledger_scan import ScanMode, parse_ledger_selection
from scrutiny.simulator.model import Action, Event
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.simulator.truth import cluster_truth
from scrutiny.streaming.checker.records import CLUSTER_LEDGER
from scrutiny.streaming.scan.job import ScanRun
from scrutiny.streaming.scan.snapshot import ScanOptions
from tests.support.checker_harness import SettingsFor, running_checker
from tests.support.scenarios import TWO_GROUPS, TWO_GROUPS_LEDGERS, small_scenario

pytestmark = pytest.mark.integration

LOST_AFTER_S = 20
MARK_GRACE_S = 6.0
RECOVERY_GRACE_S = 30
SCENARIO = small_scenario(
    "bookie-lifecycle",
    seed=17,
    bookies=4,
    body=f"""
[checker]
bookie_lost_after_s = {LOST_AFTER_S}
under_replication_mark_grace_s = {MARK_GRACE_S}
recovery_stalled_grace_s = {RECOVERY_GRACE_S}
"""
    + TWO_GROUPS
    + """
[[ledgers]]
id = 90
state = "IN_RECOVERY"
ensemble = ["bookie-1", "bookie-3", "bookie-4"]

[[ledgers]]
id = 91
state = "OPEN"
write_quorum = 3
ack_quorum = 3
ensemble = ["bookie-1", "bookie-2", "bookie-4"]
""",
)
LEDGERS = TWO_GROUPS_LEDGERS
LIFECYCLE = ("BOOKIE_LOST", "UNDER_REPLICATION_NOT_MARKED", "OPEN_LEDGER_STALLED")
STALLED = (90, "RECOVERY_STALLED", None)


def test_wiped_lost_and_returning_bookies_have_their_ledgers_checked_and_reported(
    spark: SparkSession,
    zk_client: KazooClient,
    settings_for: SettingsFor,
) -> None:
    scenario = parse_scenario(SCENARIO)
    settings = settings_for(scenario)
    # The lost delay and the marks' grace come from the scenario (the ground truth assumes them); no scrub.
    settings = replace(settings, checker=replace(settings.checker, reverify_interval=0))
    assert settings.watcher.bookie_lost_grace_seconds == LOST_AFTER_S
    with running_checker(spark, zk_client, settings, scenario, schedule=False) as harness:

        def now(action: Action, **fields: object) -> None:
            """Carry out one change now (stamped with the cluster's time: the truth counts the losses from it)."""
            harness.run(harness.cluster.apply(Event(harness.cluster.elapsed_s(), action, 0, **fields)))  # type: ignore[arg-type]

        def lifecycle_findings() -> set[tuple[int, str, str | None]]:
            """The open BOOKIE_LOST and UNDER_REPLICATION_NOT_MARKED of the tables, as the truth names them."""
            return {i for i in harness.open_ids() if i[1] in LIFECYCLE}

        def truth() -> set[tuple[int, str, str | None]]:
            state = harness.cluster.state
            found = cluster_truth(state, harness.cluster.elapsed_s())
            return {(v.ledger_id, v.category.value, v.bookie) for v in found if v.category.value in LIFECYCLE}

        harness.wait(lambda: {r["ledger_id"] for r in harness.table("ledger_checks")} == LEDGERS, 120, "all checked")
        assert not harness.open_ids() - {STALLED}

        # bookie-3 away (shorter than a loss) while bookie-4 is formatted again: nothing changes in the ledgers'
        # metadata, the new cookie is what tells; bookie-3 cannot answer for 70 and 71 meanwhile.
        now(Action.KILL, bookie="bookie-3")
        away = time.monotonic()
        now(Action.WIPE, bookie="bookie-4")
        wiped = {(ledger, "MISSING_REPLICA", "bookie-4") for ledger in (70, 71)}
        silent = {(ledger, "BOOKIE_NOT_REGISTERED", "bookie-3") for ledger in (70, 71)}
        harness.wait(lambda: wiped | silent <= harness.open_ids(), 60, "the wiped bookie's losses found")
        assert time.monotonic() - away < LOST_AFTER_S, "too slow to test a restart: bookie-3 is lost already"
        now(Action.REVIVE, bookie="bookie-3")
        harness.wait(lambda: silent <= harness.resolved_ids(), 30, "the restarted bookie's answers taken at once")
        assert wiped <= harness.open_ids()

        # Killed and not recovered: lost after the delay; ledgers 3 and 4 get marked in time, 1 and 2 do not.
        now(Action.KILL, bookie="bookie-2")
        for ledger in (3, 4):
            now(Action.MARK, ledger=ledger, replicas=("bookie-2",))
        lost = (CLUSTER_LEDGER, "BOOKIE_LOST", "bookie-2")
        unmarked = {(ledger, "UNDER_REPLICATION_NOT_MARKED", "bookie-2") for ledger in (1, 2)}
        harness.wait(lambda: lost in harness.open_ids(), 60, "BOOKIE_LOST")
        [row] = [v for v in harness.table("violations") if v["category"] == "BOOKIE_LOST"]
        assert "held 4 closed ledger(s)" in row["details"] and row["severity"] == "warning"
        harness.wait(lambda: unmarked <= harness.open_ids(), 60, "UNDER_REPLICATION_NOT_MARKED for 1 and 2")
        time.sleep(MARK_GRACE_S)
        not_marked = {i for i in harness.open_ids() if i[1] == "UNDER_REPLICATION_NOT_MARKED"}
        assert not_marked == unmarked  # the marked ledgers are never reported
        writer = (91, "OPEN_LEDGER_STALLED", None)  # open, being written to bookie-2 with AQ 3: its writer is stuck
        assert lifecycle_findings() == truth() == unmarked | {lost, writer}  # the simulator's ground truth agrees

        for ledger in (1, 2):
            now(Action.MARK, ledger=ledger, replicas=("bookie-2",))
        harness.wait(lambda: unmarked <= harness.resolved_ids(), 60, "marks resolve UNDER_REPLICATION_NOT_MARKED")

        # Ledger 3's mark cleared while bookie-2 is still lost and in its ensemble (nothing re-replicated it).
        now(Action.UNMARK, ledger=3)
        cleared = (3, "UNDER_REPLICATION_NOT_MARKED", "bookie-2")
        harness.wait(lambda: cleared in harness.open_ids(), 60, "a cleared mark reopens UNDER_REPLICATION_NOT_MARKED")
        assert lifecycle_findings() == truth() == {cleared, lost, writer}

        # A fast scan of ledger 91 finds the stuck writer from one reading: the job declared bookie-2 lost.
        one = ScanOptions(mode=ScanMode.FAST, selection=parse_ledger_selection("91"))
        scanned = ScanRun(spark, harness.settings, one).run()
        assert (91, "OPEN_LEDGER_STALLED") in {(r["ledger_id"], r["category"]) for r in scanned.violations}

        now(Action.REVIVE, bookie="bookie-2")
        harness.wait(lambda: {lost, cleared, writer} <= harness.resolved_ids(), 60, "the return resolves BOOKIE_LOST")
        assert lifecycle_findings() == truth() == set()
        reported = [
            v for v in harness.table("violations") if v["category"] in ("BOOKIE_LOST", "UNDER_REPLICATION_NOT_MARKED")
        ]
        assert len(reported) == 4  # each once (bookie-3 was never lost)

        # Ledger 90 stayed in recovery from the start: stalled after the grace (over by now), as the truth says.
        harness.wait(lambda: STALLED in harness.open_ids(), RECOVERY_GRACE_S + 60, "RECOVERY_STALLED")
        [stalled] = [v for v in harness.table("violations") if v["category"] == "RECOVERY_STALLED"]
        assert harness.cluster.elapsed_s() >= RECOVERY_GRACE_S and stalled["severity"] == "critical"
        assert STALLED in {(v.ledger_id, v.category.value, v.bookie) for v in cluster_truth(harness.cluster.state, 1e9)}
        now(Action.CLOSE, ledger=90)
        harness.wait(lambda: STALLED in harness.resolved_ids(), 60, "the close ends RECOVERY_STALLED")
