"""``scrutiny run --config`` on a Spark standalone cluster (a Master and one Worker from the pyspark wheel).

The Kafka source's reads, the fetch stage and the stateful processor run in the Worker's executor,
not in the driver; the tables must still match the scenario's ground truth exactly, as in
test_checker.py's first test.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from scrutiny.settings.loader import Settings
from scrutiny.simulator.scenario import load_scenario
from scrutiny.simulator.state import ClusterState
from tests.streaming.checker.test_checker import EXAMPLE, truth_ids
from tests.support.checker_harness import ViolationId, harness_settings, simulated_cluster
from tests.support.checker_process import (
    CheckpointProbe,
    child_env,
    run_checker,
    settings_replace,
    spark_standalone,
    table_rows,
    wait_for,
    write_config,
)
from tests.support.servers import KafkaTopicFactory

pytestmark = pytest.mark.integration


def test_checker_on_a_standalone_cluster_finds_exactly_the_truth(
    zk_client: KazooClient, service_settings: Settings, kafka_topic_factory: KafkaTopicFactory, tmp_path: Path
) -> None:
    scenario = replace(load_scenario(EXAMPLE), schedule=())
    expected = truth_ids(ClusterState.from_scenario(scenario), 0.0)
    assert {c for _, c, _ in expected} >= {"NO_REPLICA", "BOOKIE_UNRESPONSIVE", "UNDER_REPLICATION_STUCK"}
    closed = {s.ledger_id for s in scenario.ledgers if s.closed}
    topic = kafka_topic_factory(partitions=2)
    base = harness_settings(service_settings, scenario, zk_client.chroot, topic, tmp_path)
    data = Path(base.checker.data_dir)

    def open_ids() -> set[ViolationId]:
        rows = table_rows(data, "open_violations")
        return {(r["ledger_id"], r["category"], r["bookie"]) for r in rows if r["resolved_at"] is None}

    def settled() -> bool:
        runs = table_rows(data, "checker_runs")
        checked = {c["ledger_id"] for c in table_rows(data, "ledger_checks")}
        return closed <= checked and open_ids() >= expected and bool(runs) and _last(runs)["retries_pending"] == 0

    with spark_standalone(tmp_path / "spark") as standalone:
        settings = settings_replace(base, spark_master=standalone.url)
        config = write_config(settings, tmp_path / "scrutiny.toml")
        env = child_env(settings, tmp_path / "spark-local")
        del env["PYSPARK_PYTHON"]  # build_spark_session picks its own interpreter for a master named in the config
        with (
            simulated_cluster(zk_client, settings, scenario),
            run_checker(config, env, tmp_path / "checker.log") as checker,
        ):
            standalone.wait_registered()  # the driver starts meanwhile; its executor follows the worker
            wait_for(settled, 150, "every closed ledger checked, every injected violation, no retry", child=checker)
            assert checker.stop() == 0, checker.tail()
        master_log, worker_log = standalone.master.text(), standalone.worker.text()

    assert open_ids() == expected
    violations = table_rows(data, "violations")
    assert len(violations) == len({(v["ledger_id"], v["category"], v["bookie"]) for v in violations})
    assert all(v["ensemble"] and v["write_quorum"] for v in violations if v["category"] == "MISSING_REPLICA")
    runs = table_rows(data, "checker_runs")
    assert sum(r["events"] for r in runs) > 0
    assert {r["run_id"] for r in runs} == {CheckpointProbe(Path(settings.checker.checkpoint_dir), data).stream_id()}
    # the work ran on the standalone cluster: the application registered there and got the worker's executor
    assert "Registering app scrutiny-checker" in master_log, master_log[-3000:]
    assert "Asked to launch executor" in worker_log, worker_log[-3000:]


def _last(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return max(runs, key=lambda r: int(r["batch_id"]))
