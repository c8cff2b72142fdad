"""The shipped data-loss alert on a real Prometheus server, scraping a running checker of a simulated cluster.

A ledger with no copy of its entries left is found by the checker; Prometheus, scraping the checker's metrics every
second with the shipped rules (their ``for:`` at 0 s), fires ``ScrutinyLedgerDataLoss`` for ``NO_REPLICA``. The ledger
is then deleted: the violation resolves, the gauge drops to 0 and the alert clears.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from prometheus_client import start_http_server
from pyspark.sql import SparkSession

from scrutiny.simulator.model import Action, Event
from scrutiny.simulator.scenario import parse_scenario
from tests.monitoring.test_alerts import ALERTS
from tests.support.checker_harness import SettingsFor, running_checker
from tests.support.prometheus_server import PrometheusServer, quick_rules, running_prometheus
from tests.support.scenarios import small_scenario

pytestmark = pytest.mark.integration

SCENARIO = small_scenario(
    "alert-data-loss",
    seed=21,
    bookies=3,
    body='\n[[ledgers]]\nid = 1\nensemble = ["bookie-1", "bookie-2", "bookie-3"]\nholdings = [{ bookie = "bookie-1", '
    'nothing = true }, { bookie = "bookie-2", nothing = true }, { bookie = "bookie-3", nothing = true }]\n'
    '\n[[ledgers]]\nid = 2\nensemble = ["bookie-1", "bookie-2", "bookie-3"]\n',
)


def test_the_data_loss_alert_fires_for_a_lost_ledger_and_clears_when_it_resolves(
    spark: SparkSession, zk_client: KazooClient, settings_for: SettingsFor, tmp_path: Path
) -> None:
    scenario = parse_scenario(SCENARIO)
    settings = settings_for(scenario)
    with running_checker(spark, zk_client, settings, scenario, schedule=False) as harness:
        http, _thread = start_http_server(0, addr="127.0.0.1", registry=harness.checker.sink.metrics.registry)
        try:
            target = f"127.0.0.1:{http.server_port}"
            rules = quick_rules(ALERTS, tmp_path / "alerts.yml")
            with running_prometheus(
                tmp_path / "prometheus", jobs={"scrutiny-checker": [target]}, rule_files=[rules]
            ) as server:
                harness.wait(lambda: (1, "NO_REPLICA", None) in harness.open_ids(), 120, "ledger 1's loss")
                firing = _wait_for(server, _data_loss, 60, "the data-loss alert")
                assert firing["labels"] == {
                    "alertname": "ScrutinyLedgerDataLoss",
                    "category": "NO_REPLICA",
                    "severity": "critical",
                }
                assert firing["annotations"]["runbook_url"] == "docs/runbook.md#scrutinyledgerdataloss"
                assert firing["state"] == "firing" and float(firing["value"]) == 1

                delete = Event(harness.cluster.elapsed_s(), Action.DELETE, 0, ledger=1)
                asyncio.run_coroutine_threadsafe(harness.cluster.apply(delete), harness.loop).result(timeout=60)
                harness.wait(lambda: not harness.open_ids(), 120, "ledger 1's violations resolved")
                _wait_for(server, lambda alerts: not _data_loss(alerts), 60, "the data-loss alert to clear")
        finally:
            http.shutdown()
            http.server_close()


def _data_loss(alerts: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((a for a in alerts if a["labels"]["alertname"] == "ScrutinyLedgerDataLoss"), None)


def _wait_for(
    server: PrometheusServer, check: Callable[[list[dict[str, Any]]], Any], timeout_s: float, what: str
) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check(server.alerts())
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; alerts: {server.alerts()}")
