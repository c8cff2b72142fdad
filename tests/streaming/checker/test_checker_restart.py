"""``scrutiny run --config`` killed with SIGKILL in the middle of a batch, then started again: exactly once.

The kill aims between two table commits of a batch, but a loaded machine moves it anywhere from there to some
batches later, so the test asserts nothing it saw before the kill. Once the process tree is dead, the checkpoint
(offsets/ and commits/) and every table's Delta log (the commits carrying the stream's app transaction, whose
version is the batch id) say what the crash interrupted:

* Spark had not recorded the last planned batch: the restart runs it again with the same offsets, and the writer
  skips every table that already recorded it (its commit and its rows for that batch stay as they are); the others
  get it once;
* Spark had recorded it: nothing runs again, and no table gets another commit for it.

Either way every table records each batch in at most one commit, the rows of a batch are those of its commit,
``checker_runs`` holds each batch once with none missing, and the open violations are the scenario's ground truth.
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
    DiskState,
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

LEDGERS = 1500
BATCH = 250
#: Ledger faults of every kind whose ledger has no unknown answer besides (limbo's only finding is
#: BOOKIE_UNRESPONSIVE): each violation is then reported by exactly one check. Without "marked": the
#: watcher publishes marks after all ledgers, so a capped batch checks a marked ledger before its mark.
FAULTS = (
    "missing=0.002,nothing=0.001,no_replica=0.001,truncated=0.001,beyond=0.001,too_low=0.001,placement=0.003,"
    "stuck=0.001,"
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
        events = sum(int(r["events"]) for r in runs)  # every event read: no batch of them still being written
        return (
            closed <= checked
            and open_ids() >= expected
            and last is not None
            and last["retries_pending"] == 0
            and events >= len(scenario.ledgers)
        )

    with simulated_cluster(zk_client, settings, scenario):
        with run_checker(config, env, tmp_path / "first.log") as first:
            wait_for(lambda: probe.stream_id() is not None, 90, "the checker to start", child=first)
            stream_id = probe.stream_id()
            app_id = f"{APP_ID}-{stream_id}"
            aim = kill_mid_batch(first, probe, app_id, after=2)
        # The whole process tree is dead: the files are what the crash left, wherever it landed.
        crash = probe.disk_state(app_id)
        batch, interrupted = crash.planned, crash.interrupted is not None
        assert batch is not None
        held = crash.holding(batch)
        print(f"aimed at {aim}; the crash left batch {batch} planned, committed by Spark: {not interrupted}, in {held}")
        _assert_each_batch_once(crash, data)
        # Spark plans a batch only once the one before is recorded, and records it only after the sink wrote it all
        # (checker_runs last); no table is ahead of the checkpoint.
        last_run = max(crash.batches("checker_runs"), default=None)
        if interrupted:
            assert crash.committed == (batch - 1 if batch else None), crash
            assert last_run in (batch - 1, batch), crash
        else:
            assert crash.committed == batch and last_run == batch, crash
        assert all(b <= batch for t in TABLES_IN_ORDER for b in crash.batches(t)), crash
        offsets = probe.offsets(batch)
        rows_before = {t: _batch_rows(data, t, batch) for t in APPEND_ONLY}
        with run_checker(config, env, tmp_path / "second.log") as second:
            wait_for(
                settled,
                300,  # six batches of 250 events; each writes its five tables in a new JVM: ~10 s a batch cold
                "every event counted, every closed ledger checked, the truth open, no retry pending",
                child=second,
            )
            assert second.stop() == 0, second.tail()

    final = probe.disk_state(app_id)
    _assert_each_batch_once(final, data)
    for table in TABLES_IN_ORDER:  # the logs only grew: nothing committed before the crash was undone
        assert final.tables[table][: len(crash.tables[table])] == crash.tables[table], table
    assert final.committed is not None and final.committed >= batch  # Spark ran the batch to its end, once
    assert max(final.batches("checker_runs")) >= final.committed  # every batch Spark recorded is written
    assert probe.offsets(batch) == offsets  # with the offsets planned before the crash
    for table in TABLES_IN_ORDER:
        if table in held or not interrupted:  # already written (or not re-run at all): not written again
            assert final.commits(table, batch) == crash.commits(table, batch), table
            if table in APPEND_ONLY:
                assert _batch_rows(data, table, batch) == rows_before[table], table
    assert len(final.commits("checker_runs", batch)) == 1  # written once, by the first run or by the re-run

    assert probe.stream_id() == stream_id
    # The offsets in the checkpoint are Spark's Kafka source's: one line {"<topic>": {"<partition>": next offset}}.
    assert offsets is not None
    source_line = json.loads(offsets.splitlines()[2])
    assert set(source_line) == {topic} and set(source_line[topic]) == {"0", "1"}
    query_ids = [_QUERY_ID.findall(log.text()) for log in (first, second)]
    assert query_ids[0] and query_ids[0] == query_ids[1]  # the same query, restarted from its checkpoint
    runs = table_rows(data, "checker_runs")
    assert {r["run_id"] for r in runs} == {stream_id}
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


def _assert_each_batch_once(state: DiskState, data: Path) -> None:
    """Every table records each batch in at most one commit, in batch order; an append-only table's rows of a batch
    are exactly those its commit added (none written twice, none written without the batch's transaction);
    ``checker_runs`` records the batches 0, 1, 2, ... (none twice, none missing)."""
    for table in TABLES_IN_ORDER:
        batches = state.batches(table)
        assert batches == sorted(set(batches)), (table, batches)
    for table in (*APPEND_ONLY, "checker_runs"):
        commits = state.tables[table]
        assert all(c.rows is not None for c in commits), (table, commits)
        rows = Counter(r["batch_id"] for r in table_rows(data, table))
        assert rows == Counter({c.batch: c.rows for c in commits if c.rows}), table
    runs = state.batches("checker_runs")
    assert runs == list(range(len(runs))), runs


def _batch_rows(data: Path, table: str, batch: int) -> int:
    return sum(1 for r in table_rows(data, table) if r["batch_id"] == batch)
