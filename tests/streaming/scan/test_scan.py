"""``scrutiny scan`` end to end: a simulated cluster in a real ZooKeeper, real bookie servers, Spark, Delta tables."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.cli.main import main
from scrutiny.connectors.tables.repair_log import read_repair_log
from scrutiny.connectors.tables.sql import SqlEngine
from scrutiny.connectors.zookeeper.marks import read_recovery_state
from scrutiny.core.ledger_scan import FAST_CATEGORIES, ScanMode, parse_ledger_selection
from scrutiny.core.zk_paths import ledger_path, underreplication_path
from scrutiny.core.zk_records import parse_underreplication_mark
from scrutiny.settings.loader import Settings
from scrutiny.simulator.generator import generate, parse_fault_mix
from scrutiny.simulator.model import Scenario
from scrutiny.simulator.scenario import load_scenario, parse_scenario
from scrutiny.simulator.state import ClusterState
from scrutiny.streaming.delta_writer import location
from scrutiny.streaming.scan.job import ScanResult, ScanRun
from scrutiny.streaming.scan.snapshot import ScanOptions
from tests.streaming.checker.test_checker import EXAMPLE, truth_ids
from tests.support.checker_harness import ViolationId, harness_settings, simulated_cluster
from tests.support.checker_process import (
    child_env,
    child_process,
    settings_replace,
    table_rows,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.integration

FAST_VALUES = {c.value for c in FAST_CATEGORIES}


def found_ids(result: ScanResult) -> set[ViolationId]:
    return {(int(str(r["ledger_id"])), str(r["category"]), _optional(r.get("bookie"))) for r in result.violations}


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


def open_ids(data_dir: str) -> set[ViolationId]:
    rows = table_rows(data_dir, "open_violations")
    return {(r["ledger_id"], r["category"], r["bookie"]) for r in rows if r["resolved_at"] is None}


def scan(spark: SparkSession, settings: Settings, **options: object) -> ScanResult:
    return ScanRun(spark, settings, ScanOptions(**options)).run()  # type: ignore[arg-type]


@dataclass(frozen=True)
class Example:
    """The example scenario's cluster, running; its settings (also as a configuration file) and ground truth."""

    settings: Settings
    scenario: Scenario
    expected: set[ViolationId]
    config: str


@pytest.fixture
def example(zk_client: KazooClient, service_settings: Settings, tmp_path: Path) -> Iterator[Example]:
    scenario = replace(load_scenario(EXAMPLE), schedule=())
    settings = harness_settings(service_settings, scenario, zk_client.chroot, "unused", tmp_path)
    config = str(write_config(settings, tmp_path / "scrutiny.toml"))
    expected = truth_ids(ClusterState.from_scenario(scenario), 0.0)
    with simulated_cluster(zk_client, settings, scenario, watch=False):
        yield Example(settings, scenario, expected, config)


def test_deep_scan_finds_the_truth_writes_it_and_a_rescan_resolves_a_deleted_ledger(
    spark: SparkSession, zk_client: KazooClient, example: Example
) -> None:
    settings, expected, scenario = example.settings, example.expected, example.scenario
    data = settings.checker.data_dir
    result = scan(spark, settings, chunk_size=7)
    assert not result.interrupted and result.examined == result.selected == len(scenario.ledgers)
    assert found_ids(result) == expected
    assert open_ids(data) == expected
    runs = table_rows(data, "checker_runs")
    assert {r["source"] for r in runs} == {"scan"} and {r["run_id"] for r in runs} == {result.scan_id}
    assert sorted(r["batch_id"] for r in runs) == list(range(result.batches))
    checks = table_rows(data, "ledger_checks")
    closed = {s.ledger_id for s in scenario.ledgers if s.closed}
    assert closed <= {c["ledger_id"] for c in checks} and {c["source"] for c in checks} == {"scan"}
    assert result.rpcs > 0
    [stuck] = [v for v in table_rows(data, "violations") if v["category"] == "UNDER_REPLICATION_STUCK"]
    assert "; locked by the replication worker on bookie-5 since " in stuck["details"]  # the lock, read with the walk

    lost = next(lid for lid, category, _ in sorted(expected) if category == "NO_REPLICA")
    znode = ledger_path(lost, root=settings.zookeeper.ledgers_root)
    metadata, _ = zk_client.get(znode)
    zk_client.delete(znode)
    again = scan(spark, settings)
    assert found_ids(again) == {v for v in expected if v[0] != lost}
    assert open_ids(data) == {v for v in expected if v[0] != lost}
    resolved = [r for r in table_rows(data, "open_violations") if r["resolved_at"] is not None]
    assert {r["ledger_id"] for r in resolved} == {lost}

    # Every ledger the agents listed had metadata in the first scan; the deleted one is held without it now, on each
    # bookie of the scenario that holds entries of it (the simulated bookies never collect garbage).
    state = ClusterState.from_scenario(scenario)
    assert result.held is not None and again.held is not None
    assert result.held.total == 0 and result.held.bookies and all(b.listed for b in result.held.bookies)
    holders = {b for b in state.bookies if state.held_groups(b, lost)}
    listed = {b.bookie for b in again.held.bookies}
    assert holders & listed, (holders, again.held)
    assert {b.bookie: [h.ledger_id for h in b.ledgers] for b in again.held.bookies if b.count} == {
        b: [lost] for b in holders & listed
    }
    assert set(again.held.not_listed) <= set(state.bookies) - listed

    # Seen once without metadata: a sighting per holder, no finding before the grace (an hour by default).
    assert again.held.orphans == 0 and not [v for v in open_ids(data) if v[1] == "ORPHAN_LEDGER"]
    sightings = {(r["bookie"], r["ledger_id"]): r["first_seen"] for r in table_rows(data, "orphan_sightings")}
    assert set(sightings) == {(b, lost) for b in holders & listed}
    # Past the grace (none now): ORPHAN_LEDGER on each holder, counted from the first sighting, which stays.
    orphaned = scan(spark, settings_replace(settings, orphan_grace_seconds=0.0))
    orphans = {(lost, "ORPHAN_LEDGER", b) for b in holders & listed}
    assert found_ids(orphaned) == {v for v in expected if v[0] != lost} | orphans
    assert open_ids(data) == {v for v in expected if v[0] != lost} | orphans
    assert orphaned.held is not None and orphaned.held.orphans == len(orphans)
    assert {(r["bookie"], r["ledger_id"]): r["first_seen"] for r in table_rows(data, "orphan_sightings")} == sightings
    for row in (r for r in orphaned.violations if r["category"] == "ORPHAN_LEDGER"):
        details = json.loads(str(row["details"]))
        assert row["severity"] == "warning" and details["first_entry_id"] >= 0, details
        assert details["first_seen_without_metadata"] == sightings[(row["bookie"], lost)].strftime("%Y-%m-%dT%H:%M:%SZ")
    # The metadata back (held with it, no orphan): the findings resolve, the sightings go.
    zk_client.create(znode, metadata)
    back = scan(spark, settings_replace(settings, orphan_grace_seconds=0.0))
    assert found_ids(back) == expected and open_ids(data) == expected
    assert table_rows(data, "orphan_sightings") == []


def test_orphans_of_the_simulator_are_found_by_a_deep_scan_exactly_as_its_truth_says(
    spark: SparkSession, zk_client: KazooClient, service_settings: Settings, tmp_path: Path
) -> None:
    """Ledgers the simulated bookies hold with no metadata (its ``orphan`` fault), past a grace of nothing: the
    first deep scan's findings are the truth, orphans on every bookie that holds some of their entries included."""
    text, plan = generate(300, parse_fault_mix("orphan=0.02,missing=0.01"), seed=5)
    scenario = parse_scenario(text.replace("[checker]", "[checker]\norphan_grace_s = 0", 1))
    assert scenario.checker.orphan_grace_s == 0 and plan.ledgers.get("orphan")
    expected = truth_ids(ClusterState.from_scenario(scenario), 0.01)
    assert {v for v in expected if v[1] == "ORPHAN_LEDGER"}
    settings = harness_settings(service_settings, scenario, zk_client.chroot, "unused", tmp_path)
    with simulated_cluster(zk_client, settings, scenario, watch=False):
        result = scan(spark, settings)
    assert found_ids(result) == expected
    assert open_ids(settings.checker.data_dir) == expected
    # What the survey judged on every bookie is written once: one batch of findings, one MERGE of the sightings.
    assert result.held is not None and len([b for b in result.held.bookies if b.count]) > 1
    runs = table_rows(settings.checker.data_dir, "checker_runs")
    assert [r["ledgers_checked"] for r in runs].count(0) == 1 and len(runs) == result.batches
    commits = sorted((Path(location(settings.checker.data_dir, "orphan_sightings")) / "_delta_log").glob("*.json"))
    assert len(commits) == 2, commits  # created, then merged


def test_an_orphan_sightings_table_that_does_not_read_is_a_warning_not_a_failed_scan(
    spark: SparkSession, example: Example
) -> None:
    data = example.settings.checker.data_dir
    spark.createDataFrame([(1,)], "other long").write.format("delta").save(location(data, "orphan_sightings"))
    result = scan(spark, example.settings)
    assert not result.interrupted and found_ids(result) == example.expected
    assert [w for w in result.warnings if w.startswith("the orphan sightings were not read or written: ")], result


def test_progress_counts_ledgers_as_they_finish_inside_one_chunk(spark: SparkSession, example: Example) -> None:
    """One chunk (one Spark job) whose re-checks wait: progress moves as ledgers finish, not only when it ends."""
    reports: list[tuple[str, int, int | None]] = []
    result = ScanRun(spark, example.settings, ScanOptions()).run(lambda *step: reports.append(step))
    assert result.batches == 1 and result.examined == result.selected
    checked = [done for phase, done, _ in reports if phase == "ledgers checked"]
    assert checked[0] == 0 and checked[-1] == result.selected and checked == sorted(checked)
    assert any(0 < done < result.selected for done in checked), checked


def test_fast_scan_reports_only_what_metadata_decides_and_asks_no_bookie(spark: SparkSession, example: Example) -> None:
    settings, expected = example.settings, example.expected
    result = scan(spark, settings, mode=ScanMode.FAST)
    # BOOKIE_NOT_REGISTERED from an unanswered bookie needs the bookies; from metadata, registration is certain.
    fast_truth = {v for v in expected if v[1] in FAST_VALUES}
    assert fast_truth and result.rpcs == 0
    assert found_ids(result) == fast_truth
    checks = table_rows(settings.checker.data_dir, "ledger_checks")
    assert {c["bookies_asked"] for c in checks} == {0}


def test_selection_by_ledger_range_and_by_bookie(spark: SparkSession, example: Example) -> None:
    settings, expected, scenario = example.settings, example.expected, example.scenario
    some = sorted({lid for lid, _, _ in expected})[:2]
    bookie = next(b for _, c, b in sorted(expected) if c == "MISSING_REPLICA" and b)
    unreadable = {lid for lid, category, _ in expected if category == "METADATA_UNREADABLE"}
    assert unreadable  # a ledger whose metadata does not decode names no bookie: not selected by --bookie
    with_bookie = {
        s.ledger_id for s in scenario.ledgers if any(bookie in seg.ensemble for seg in s.segments)
    } - unreadable
    ranged = scan(spark, settings, selection=parse_ledger_selection(",".join(map(str, some))))
    by_bookie = scan(spark, settings, bookie=bookie)
    assert ranged.selected == 2 and found_ids(ranged) == {v for v in expected if v[0] in some}
    assert by_bookie.selected == len(with_bookie)
    assert found_ids(by_bookie) == {v for v in expected if v[0] in with_bookie}


def test_cli_exit_codes_summary_and_json(
    spark: SparkSession,
    example: Example,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, expected, scenario, config = example.settings, example.expected, example.scenario, example.config
    violated = {lid for lid, _, _ in expected}
    healthy = next(s.ledger_id for s in scenario.ledgers if s.closed and s.ledger_id not in violated)
    critical = next(lid for lid, category, _ in sorted(expected) if category == "NO_REPLICA")
    assert main(["scan", "--config", config, "--ledgers", str(healthy)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[-1] == "Status: HEALTHY"
    assert f" Ledgers selected:           1 ({healthy})" in text.splitlines() and "(deep)" in text

    assert main(["scan", "--config", config, "--ledgers", str(critical), "--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["status"] == "UNHEALTHY" and document["by_severity"]["critical"] >= 1
    assert document["worst_ledgers"][0]["ledger_id"] == critical
    assert document["scan"]["ledgers_selected"] == 1 and document["scan"]["mode"] == "deep"

    assert main(["scan", "--config", config, "--fast", "--fail-on", "info"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "Status: UNHEALTHY"

    absent = replace(settings, zookeeper=replace(settings.zookeeper, ledgers_root="/absent"))
    assert main(["scan", "--config", str(write_config(absent, tmp_path / "absent.toml"))]) == 2
    assert "no ledgers root /absent in ZooKeeper" in capsys.readouterr().err
    assert main(["scan", "--config", config, "--ledgers", "9-3"]) == 2
    assert "ledger range" in capsys.readouterr().err
    assert main(["scan", "--config", config, "--fast", "--fix"]) == 2
    assert "--fix needs a deep scan" in capsys.readouterr().err


#: Slow bookies and unknown answers (retried after 0.5 s and 1 s): each chunk takes seconds.
INTERRUPT_FAULTS = "missing=0.01,no_replica=0.005,limbo=0.05,slow=1"


@pytest.mark.parametrize(
    "how",
    ["SIGINT to the scan", "SIGTERM to its process group"],  # Ctrl-C; timeout(1) and systemd
)
def test_an_interrupted_scan_stops_safely_keeping_whole_batches(
    zk_client: KazooClient, service_settings: Settings, tmp_path: Path, how: str
) -> None:
    text, _ = generate(2000, parse_fault_mix(INTERRUPT_FAULTS), seed=5)
    scenario = parse_scenario(text)
    settings = harness_settings(service_settings, scenario, zk_client.chroot, "unused", tmp_path)
    config = write_config(settings, tmp_path / "scrutiny.toml")
    data = settings.checker.data_dir
    command = [sys.executable, "-m", "scrutiny.cli", "scan", "--config", str(config), "--chunk-size", "100"]
    env = child_env(settings, tmp_path / "spark-local")
    with (
        simulated_cluster(zk_client, settings, scenario, watch=False),
        child_process("scan", command, env, tmp_path / "scan.log") as child,
    ):
        wait_for(lambda: len(_rows(data, "checker_runs")) >= 2, 120, "two batches written", child=child)
        if how.startswith("SIGINT"):
            child.popen.send_signal(signal.SIGINT)
        else:  # the JVM and Spark's Python workers get it too
            os.killpg(child.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while child.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        code = child.stop()
        output = child.text()
    assert code == 2, output[-3000:]
    assert output.rstrip().splitlines()[-1] == "Status: INTERRUPTED"
    assert "stopping safely" in output and "incomplete: the scan was stopped after" in output
    assert "Traceback" not in output and "Py4J" not in output
    runs = _rows(data, "checker_runs")
    batches = sorted(r["batch_id"] for r in runs)
    assert batches == list(range(len(batches))) and 2 <= len(batches) < 20
    checks = Counter(c["batch_id"] for c in _rows(data, "ledger_checks"))
    for run in runs:  # every written batch is whole: its run row and its checks agree
        assert checks[run["batch_id"]] == run["ledgers_checked"]
    assert sum(r["events"] for r in runs) == 100 * len(runs)


def _rows(data: str, table: str) -> list[dict[str, Any]]:
    try:
        return table_rows(data, table)
    except Exception:  # not created yet
        return []


def test_fix_dry_run_plans_and_fix_marks_exactly_the_ledgers_with_missing_replicas(
    spark: SparkSession,
    zk_client: KazooClient,
    example: Example,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, expected, config = example.settings, example.expected, example.config
    root = settings.zookeeper.ledgers_root
    missing: dict[int, set[str]] = {}
    for lid, category, bookie in expected:
        if category == "MISSING_REPLICA" and bookie:
            missing.setdefault(lid, set()).add(bookie)
    _, marked_before = read_recovery_state(zk_client, root)
    to_mark = set(missing) - marked_before
    assert to_mark == set(missing)  # a marked ledger's missing replicas are being repaired: not reported

    assert main(["scan", "--config", config, "--fix", "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "Fix plan (dry run: nothing changed):" in out
    for lid in missing:
        assert any(line.startswith("MARK ") and f"ledger={lid} " in line for line in out.splitlines()), lid
    assert read_recovery_state(zk_client, root)[1] == marked_before
    assert not (Path(settings.checker.data_dir) / "repair_actions").exists()

    assert main(["scan", "--config", config, "--fix", "--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert {a["ledger_id"] for a in document["fix"]["actions"] if a["action"] == "MARKED"} == to_mark
    assert read_recovery_state(zk_client, root)[1] == marked_before | to_mark
    for lid in to_mark:
        data, _ = zk_client.get(underreplication_path(lid, root=root))
        mark = parse_underreplication_mark(data)
        assert mark.replicas == tuple(sorted(missing[lid])) and mark.ctime_ms is not None
    log = read_repair_log(settings.checker.data_dir).to_pylist()
    assert {r["ledger_id"] for r in log if r["action"] == "MARKED"} == to_mark
    assert {r["run_id"] for r in log} == {document["scan"]["scan_id"]}
    with SqlEngine(settings.checker.data_dir) as engine:  # `scrutiny sql` sees the record too
        marked = engine.query("SELECT ledger_id FROM repair_actions WHERE action = 'MARKED'").rows
    assert {row[0] for row in marked} == to_mark
