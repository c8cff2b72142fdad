"""Ledgers deleted while no watcher was running: the next snapshot leaves them out, and the checker forgets them.

The deletions happen while the watcher is stopped, so no deletion event is ever published; the restarted watcher's
full snapshot simply does not name the ledgers. Their findings must resolve, their state go, and a retry that was
pending must not ask the bookies about a ledger that no longer exists (they would all say "no such ledger": a
critical NO_REPLICA).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.simulator.scenario import parse_scenario
from tests.support.checker_harness import SettingsFor, running_checker, running_watcher
from tests.support.scenarios import small_scenario

pytestmark = pytest.mark.integration

SCENARIO = small_scenario(
    "deleted-unseen",
    seed=11,
    bookies=4,
    body="""
[bookies.bookie-4]
fault = "unresponsive"

[[ledgers]]
id = 1
ensemble = ["bookie-1", "bookie-2", "bookie-3"]

# In ledger 1's bucket: the restarted watcher's snapshot reaches that bucket.
[[ledgers]]
id = 3
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
holdings = [{ bookie = "bookie-3", nothing = true }]

# A retry pending on the silent bookie-4 when it is deleted.
[[ledgers]]
id = 5
ensemble = ["bookie-1", "bookie-2", "bookie-4"]

# Alone in its bucket: nothing of the snapshot reaches it.
[[ledgers]]
id = 200
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
holdings = [{ bookie = "bookie-3", nothing = true }]

[[schedule]]
at = 100
action = "delete"
ledger = 3

[[schedule]]
at = 100
action = "delete"
ledger = 5

[[schedule]]
at = 100
action = "delete"
ledger = 200
""",
)


@pytest.mark.parametrize("exists_check_seconds", [6.0, 0.0], ids=["with-timer", "snapshot-only"])
def test_ledgers_deleted_while_no_watcher_ran_are_forgotten_and_never_reported_missing(
    exists_check_seconds: float,
    spark: SparkSession,
    zk_client: KazooClient,
    settings_for: SettingsFor,
) -> None:
    scenario = parse_scenario(SCENARIO)
    settings = settings_for(scenario)
    settings = replace(
        settings,
        checker=replace(
            settings.checker,
            retry_initial_seconds=8.0,  # ledger 5's first retry comes after the watcher is back
            retry_max_seconds=8.0,
            retry_attempts=3,
            exists_check_seconds=exists_check_seconds,
        ),
    )
    open_before = {(3, "MISSING_REPLICA", "bookie-3"), (200, "MISSING_REPLICA", "bookie-3")}
    with running_checker(spark, zk_client, settings, scenario, schedule=False, watch=False) as harness:
        with running_watcher(settings, "watcher-before"):
            harness.wait(
                lambda: open_before <= harness.open_ids() and 5 in harness.checker.sink.pending,
                150,  # the first batches can wait for task slots a stopped query still holds on a loaded machine
                "findings",
            )
        for deletion in scenario.schedule:  # no watcher runs: no deletion event
            harness.run(harness.cluster.apply(deletion))
        with running_watcher(settings, "watcher-after"):  # a full snapshot without ledgers 3, 5 and 200
            # Without the timer of ledgers with findings open, nothing reaches ledger 200's bucket: only the
            # snapshot (ledger 3, in ledger 1's bucket) and ledger 5's own retry timer find theirs gone.
            left = {200} if exists_check_seconds == 0 else set()
            harness.wait(
                lambda: {i[0] for i in harness.open_ids()} == left, 60, "the deleted ledgers' findings resolved"
            )
            harness.wait(lambda: not harness.checker.sink.pending, 30, "ledger 5's retry dropped")
            assert {i for i in harness.resolved_ids() if i[0] not in left} >= {
                i for i in open_before if i[0] not in left
            }
            closing = [c for c in harness.table("ledger_checks") if c["ledger_id"] == 1]
            assert closing and closing[-1]["verdict"] == "HEALTHY"
        reported = {(v["ledger_id"], v["category"]) for v in harness.table("violations")}
        assert {ledger for ledger, _ in reported} == {3, 200}, reported  # ledger 5: never NO_REPLICA or unresponsive
