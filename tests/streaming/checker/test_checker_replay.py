"""A batch that Spark runs again after a crash leaves the tables as one clean run of it would, whatever the bookies
answer the second time, and the stream's state knows every row left open.

For each commit point of the sink in turn (before any table, after each data table alone, after all data tables,
after ``checker_runs`` too), a ledger whose bookie-2 holds nothing is closed; the batch that checks it
(``MISSING_REPLICA``, ``BELOW_ACK_QUORUM``) crashes at that point; the bookie is then repaired, so a second asking
would find the ledger healthy; the checker starts again and Spark runs the batch again. Then, for that batch: one
check of the ledger, its violations those of the check, the open rows those violations — never a check from one run
beside a violation from the other. At the end every ledger is deleted, and every row must resolve: a row the state
did not know would stay open for good.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.schemas import CHECKER_RUNS, LEDGER_CHECKS, OPEN_VIOLATIONS, VIOLATIONS, RunRecord
from scrutiny.settings.loader import Settings
from scrutiny.simulator.model import Action
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.streaming.checker.job import start_checker
from scrutiny.streaming.delta_writer import CheckerTables, TableWrite
from tests.support.checker_harness import Harness, harness_settings, running_checker
from tests.support.scenarios import small_scenario
from tests.support.servers import KafkaTopicFactory

pytestmark = pytest.mark.integration

#: Where the first run of the batch stops: the tables it commits first ("all": every table, before Spark's commit).
POINTS: Mapping[int, tuple[str, ...] | str] = {
    1: (),
    2: (VIOLATIONS,),
    3: (LEDGER_CHECKS,),
    4: (OPEN_VIOLATIONS,),
    5: (VIOLATIONS, LEDGER_CHECKS, OPEN_VIOLATIONS),
    6: "all",
}

SCENARIO = small_scenario(
    "replay",
    seed=5,
    bookies=3,
    body="".join(
        f"""
[[ledgers]]
id = {ledger}
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
state = "OPEN"
holdings = [{{ bookie = "bookie-2", nothing = true }}]

[[schedule]]
at = {100 + ledger}
action = "close"
ledger = {ledger}

[[schedule]]
at = {200 + ledger}
action = "repair"
ledger = {ledger}

[[schedule]]
at = {300 + ledger}
action = "delete"
ledger = {ledger}
"""
        for ledger in POINTS
    ),
)


class CrashError(RuntimeError):
    """The checker's process dying at a commit point, as far as Spark can tell."""


class CrashOnce:
    """Makes the sink fail at a commit point in the batch that checks one ledger, once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ledger: int | None = None
        self.point: tuple[str, ...] | str = ()
        self.batch: int | None = None
        self.crashing = False
        write_batch, write_table = CheckerTables.write_batch, CheckerTables._write_table

        def crashing_batch(tables: CheckerTables, batch_id: int, output: pa.Table, run: RunRecord, **kw: Any) -> object:
            checks = {
                r["ledger_id"] for r in output.select(["record", "ledger_id"]).to_pylist() if r["record"] == "check"
            }
            if self.ledger not in checks or self.batch is not None:
                return write_batch(tables, batch_id, output, run, **kw)
            self.batch, self.crashing = batch_id, True
            try:
                write_batch(tables, batch_id, output, run, **kw)  # raises when a table must fail (below)
            finally:
                self.crashing = False
            raise CrashError(f"batch {batch_id} stopped after {self.point}")

        def crashing_table(tables: CheckerTables, name: str, rows: pa.Table, batch_id: int, **kw: Any) -> TableWrite:
            if self.crashing and self.point != "all" and name not in self.point:
                raise CrashError(f"{name} not written")
            return write_table(tables, name, rows, batch_id, **kw)

        monkeypatch.setattr(CheckerTables, "write_batch", crashing_batch)
        monkeypatch.setattr(CheckerTables, "_write_table", crashing_table)

    def arm(self, ledger: int, point: tuple[str, ...] | str) -> None:
        self.ledger, self.point, self.batch = ledger, point, None


@pytest.fixture
def settings(
    service_settings: Settings, zk_client: KazooClient, kafka_topic_factory: KafkaTopicFactory, tmp_path: Path
) -> Settings:
    topic = kafka_topic_factory(partitions=2)
    return harness_settings(service_settings, parse_scenario(SCENARIO), zk_client.chroot, topic, tmp_path)


@pytest.fixture
def crash(monkeypatch: pytest.MonkeyPatch) -> CrashOnce:
    return CrashOnce(monkeypatch)


def test_a_batch_run_again_after_a_crash_at_each_commit_point_leaves_exact_tables_and_a_state_that_knows_them(
    spark: SparkSession, zk_client: KazooClient, settings: Settings, crash: CrashOnce
) -> None:
    scenario = parse_scenario(SCENARIO)
    changes = {(change.action, change.ledger): change for change in scenario.schedule}
    with running_checker(spark, zk_client, settings, scenario, schedule=False) as harness:
        harness.wait_first_batch()
        for ledger, point in POINTS.items():
            crash.arm(ledger, point)
            harness.run(harness.cluster.apply(changes[Action.CLOSE, ledger]))
            _wait_for_crash(harness, ledger)
            harness.run(harness.cluster.apply(changes[Action.REPAIR, ledger]))  # a second asking finds it healthy
            harness.checker = start_checker(spark, settings)
            assert crash.batch is not None
            batch = crash.batch
            harness.wait(partial(_has_batch, harness, batch), 90, f"batch {batch} run again (ledger {ledger})")
            _assert_one_run(harness, ledger, batch, point)
        for ledger in POINTS:
            harness.run(harness.cluster.apply(changes[Action.DELETE, ledger]))
        harness.wait(lambda: not harness.open_ids(), 90, "every row resolved once the ledgers are deleted")


def _wait_for_crash(harness: Harness, ledger: int) -> None:
    try:
        finished = harness.checker.query.awaitTermination(90)
    except Exception as error:  # the query ends with the sink's error
        assert "not written" in str(error) or "stopped after" in str(error), error
        return
    raise AssertionError(f"the batch checking ledger {ledger} did not crash (query ended: {finished})")


def _has_batch(harness: Harness, batch: int) -> bool:
    return any(r["batch_id"] == batch for r in harness.table(CHECKER_RUNS))


def _assert_one_run(harness: Harness, ledger: int, batch: int, point: Sequence[str] | str) -> None:
    """The batch's rows of the ledger are those of one run: the first's (the bookie held nothing) once a table held
    it; before that, either run (the second finds the ledger healthy), whole."""
    checks = [r for r in harness.table(LEDGER_CHECKS) if r["ledger_id"] == ledger and r["batch_id"] == batch]
    found = [r for r in harness.table(VIOLATIONS) if r["ledger_id"] == ledger and r["batch_id"] == batch]
    (check,) = checks
    opened = {
        (r["category"], r["bookie"])
        for r in harness.table(OPEN_VIOLATIONS)
        if r["ledger_id"] == ledger and r["resolved_at"] is None
    }
    assert opened == {(r["category"], r["bookie"]) for r in found}, (point, opened, found)
    assert check["violation_count"] == len(found), (point, check, found)
    if point or check["verdict"] != "HEALTHY":
        assert check["verdict"] == "VIOLATED", (point, check, found)
        assert {r["category"] for r in found} == {"MISSING_REPLICA", "BELOW_ACK_QUORUM"}, (point, found)
        assert all(r["detected_at"] == check["checked_at"] for r in found), (point, check, found)
    runs = [r for r in harness.table(CHECKER_RUNS) if r["batch_id"] == batch]
    assert len(runs) == 1, (point, runs)
