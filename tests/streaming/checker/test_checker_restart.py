"""``scrutiny run --config`` killed with SIGKILL in the middle of a batch, then started again: exactly once.

The kill aims between two table commits of a batch, but the guarantee is checked wherever it lands (a loaded
machine moves it): what the crash interrupted is read from the checkpoint and the Delta logs after the process
tree is dead. If Spark had not recorded the batch, it runs it again (its offsets are in the checkpoint, its commit
is not) and the writer skips the tables that already hold it; if it had, nothing runs again. Either way no row is
missing and none is there twice afterwards, and the open violations are the scenario's ground truth.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from scrutiny.settings.loader import Settings
from scrutiny.simulator.generator import generate, parse_fault_mix
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.simulator.state import ClusterState
from scrutiny.streaming.checker.job import APP_ID
from tests.streaming.checker.test_checker import truth_ids
from tests.support.checker_harness import ViolationId, harness_settings, simulated_cluster
from tests.support.checker_process import (
    TABLES_IN_ORDER,
    CheckpointProbe,
    child_env,
    kill_mid_batch,
    run_checker,
    settings_replace,
    table_rows,
    wait_for,
    write_config,
)
from tests.support.servers import KafkaTopicFactory

pytestmark = pytest.mark.integration

LEDGERS = 3000
BATCH = 300
#: Ledger faults of every kind whose ledger has no unknown answer besides (limbo's only finding is
#: BOOKIE_UNRESPONSIVE): each violation is then reported by exactly one check. Without "marked": the
#: watcher publishes marks after all ledgers, so a capped batch checks a marked ledger before its mark.
FAULTS = (
    "missing=0.002,nothing=0.001,no_replica=0.001,truncated=0.001,beyond=0.001,placement=0.003,stuck=0.001,"
    "corrupt=0.001,aq1=0.01,open=0.02,limbo=0.002,slow=1,readonly=1"
)
APPEND_ONLY = ("violations", "ledger_checks")
_QUERY_ID = re.compile(r"checker started: query (\S+),")


def test_sigkill_mid_batch_and_restart_writes_every_row_exactly_once(
    zk_client: KazooClient, service_settings: Settings, kafka_topic_factory: KafkaTopicFactory, tmp_path: Path
) -> None:
    text, plan = generate(LEDGERS, parse_fault_mix(FAULTS), seed=11)
    scenario = parse_scenario(text)
    assert not scenario.schedule and plan.ledgers.get("limbo")
    expected = truth_ids(ClusterState.from_scenario(scenario), 0.0)
    closed = {s.ledger_id for s in scenario.ledgers if s.closed}
    topic = kafka_topic_factory(partitions=2)
    settings = harness_settings(service_settings, scenario, zk_client.chroot, topic, tmp_path)
    settings = settings_replace(settings, max_offsets_per_trigger=BATCH)
    config = write_config(settings, tmp_path / "scrutiny.toml")
    data, checkpoint = Path(settings.checker.data_dir), Path(settings.checker.checkpoint_dir)
    probe = CheckpointProbe(checkpoint, data)
    env = child_env(settings, tmp_path / "spark-local")

    def open_ids() -> set[ViolationId]:
        rows = table_rows(data, "open_violations")
        return {(r["ledger_id"], r["category"], r["bookie"]) for r in rows if r["resolved_at"] is None}

    def settled() -> bool:
        checked = {c["ledger_id"] for c in table_rows(data, "ledger_checks")}
        runs = table_rows(data, "checker_runs")
        last = max(runs, key=lambda r: int(r["batch_id"])) if runs else None
        return closed <= checked and open_ids() >= expected and last is not None and last["retries_pending"] == 0

    with simulated_cluster(zk_client, settings, scenario):
        with run_checker(config, env, tmp_path / "first.log") as first:
            wait_for(lambda: probe.stream_id() is not None, 90, "the checker to start", child=first)
            stream_id = probe.stream_id()
            app_id = f"{APP_ID}-{stream_id}"
            kill = kill_mid_batch(first, probe, app_id, after=2)
            print(f"killed: {kill}")
        # What the crash interrupted is read from the files once the process tree is dead, whatever the moment it
        # landed: the tables that hold the batch already, and whether Spark had recorded the batch as done.
        before = {t: _batch_rows(data, t, kill.batch) for t in kill.tables if t in APPEND_ONLY}
        with run_checker(config, env, tmp_path / "second.log") as second:
            wait_for(settled, 110, "every closed ledger checked, the truth open, no retry pending", child=second)
            assert second.stop() == 0, second.tail()

    assert probe.stream_id() == stream_id
    # The offsets in the checkpoint are Spark's Kafka source's: one line {"<topic>": {"<partition>": next offset}}.
    source_line = json.loads((checkpoint / "offsets" / "0").read_text(encoding="utf-8").splitlines()[2])
    assert set(source_line) == {topic} and set(source_line[topic]) == {"0", "1"}
    query_ids = [_QUERY_ID.findall(log.text()) for log in (first, second)]
    assert query_ids[0] and query_ids[0] == query_ids[1]  # the same query, restarted from its checkpoint
    runs = table_rows(data, "checker_runs")
    assert {r["run_id"] for r in runs} == {stream_id}
    batch_ids = sorted(r["batch_id"] for r in runs)
    assert batch_ids == list(range(len(runs))) and kill.batch in batch_ids  # each batch once, none lost
    for table, rows in before.items():  # a table that held the interrupted batch was not written again
        assert _batch_rows(data, table, kill.batch) == rows, table
    if not kill.spark_committed:  # Spark ran the batch again: every table holds it now, each exactly once
        assert all(probe.table_batch(t, app_id) is not None for t in TABLES_IN_ORDER)
    violations = table_rows(data, "violations")
    keys = Counter((v["ledger_id"], v["category"], v["bookie"], v["segment_first_entry"]) for v in violations)
    assert [k for k, n in keys.items() if n > 1] == []
    assert {(v["ledger_id"], v["category"], v["bookie"]) for v in violations} == expected
    checks = table_rows(data, "ledger_checks")
    versions = Counter((c["ledger_id"], c["metadata_version"]) for c in checks)
    assert [k for k, n in versions.items() if n > 1] == []
    assert closed <= {c["ledger_id"] for c in checks}
    assert open_ids() == expected
    assert sum(r["events"] for r in runs) >= len(scenario.ledgers)


def _batch_rows(data: Path, table: str, batch: int) -> int:
    return sum(1 for r in table_rows(data, table) if r["batch_id"] == batch)
