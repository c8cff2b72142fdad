"""BookKeeper's own AutoRecovery beside real bookies: its marks are read as such, and after its ReplicationWorker has
re-replicated a lost bookie's ledgers the checker finds them healthy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from pyspark.sql import SparkSession

from scrutiny.connectors.zookeeper.tree import read_autorecovery
from scrutiny.core.autorecovery_health import AutoRecoveryObservation
from scrutiny.core.ledger_metadata import decode_ledger_metadata
from scrutiny.core.ledger_scan import ScanMode, parse_ledger_selection
from scrutiny.core.zk_paths import (
    auditor_election_path,
    ledger_path,
    underreplication_locks_path,
    underreplication_path,
)
from scrutiny.core.zk_records import (
    UnderReplicationMark,
    format_auditor_vote,
    format_lock_data,
    format_underreplication_mark,
    parse_auditor_vote,
    parse_lock_data,
    parse_underreplication_mark,
)
from scrutiny.services.autorecovery import AutoRecoveryOptions
from scrutiny.services.bookkeeper import BookieOptions
from scrutiny.services.bookkeeper_tools import METADATA_ROOT, bookkeeper_shell, ledger_tool
from scrutiny.services.local_stack import EmbeddedServices
from scrutiny.services.servers import ServiceState
from scrutiny.settings.loader import load_settings
from scrutiny.streaming.scan.job import ScanRun
from scrutiny.streaming.scan.snapshot import ScanOptions

pytestmark = pytest.mark.integration


def test_a_lost_bookies_ledgers_are_marked_replicated_and_then_healthy(tmp_path: Path) -> None:
    services = EmbeddedServices(tmp_path / "services", start_timeout=60.0)
    try:
        result = services.up(bookies=4, bookie_options=BookieOptions(flush_interval_ms=1000))
        uri = services.bookies().metadata_service_uri
        ledgers = ledger_tool(uri, "create", "--entries", "20", "--count", "6")  # E=3 of 4 bookies
        held = Counter(b for ledger in ledgers for b in ledger["segments"][0]["bookies"])
        victim = held.most_common(1)[0][0]
        affected = {ledger["ledger_id"] for ledger in ledgers if victim in ledger["segments"][0]["bookies"]}
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCRUTINY_")} | result.env()
        env |= {"SCRUTINY_SERVICES_STATE_DIR": str(tmp_path / "services"), "SPARK_LOCAL_IP": "127.0.0.1"}
        env |= {"PYSPARK_PYTHON": sys.executable, "SCRUTINY_VERDICT_WRITE_CACHE_FLUSH_SECONDS": "1"}

        started = _cli(env, "services", "autorecovery", "start", "--bookie-check-interval", "2")
        assert started.returncode == 0 and started.stdout.startswith("autorecovery running pid="), started.stderr
        status = json.loads(_cli(env, "services", "status", "--format", "json").stdout)
        assert status["autorecovery"]["state"] == "running"

        services.bookies().stop(victim)  # a bookie lost for good: lostBookieRecoveryDelay 0
        client = KazooClient(hosts=result.endpoints.zookeeper)
        client.start(timeout=10)
        try:
            marks = _watch_until_replicated(client, affected, victim, deadline_s=120)
        finally:
            client.stop()
            client.close()
        assert marks, "no under-replication mark was seen"
        assert all(victim in mark.replicas for mark in marks.values()), marks  # the Auditor names the lost bookie

        scan = _cli(env, "scan", "--deep", "--data-dir", str(tmp_path / "data"), "--format", "json", timeout=600)
        summary = json.loads(scan.stdout)
        assert scan.returncode == 0 and summary["status"] == "HEALTHY", scan.stdout[-3000:] + scan.stderr[-2000:]
        assert summary["ledgers_checked"] == len(ledgers)
        assert summary["scan"]["warnings"] == []  # AutoRecovery runs: its auditor is elected, nothing disabled
        _autorecovery_switched_off_and_on_by_bookkeepers_shell(result.endpoints.zookeeper, uri, victim)

        stopped = _cli(env, "services", "autorecovery", "stop")
        assert stopped.returncode == 0 and services.autorecovery().status().state is ServiceState.STOPPED
        client = KazooClient(hosts=result.endpoints.zookeeper)
        client.start(timeout=10)
        try:  # its session closed with it: no vote left, no auditor
            assert read_autorecovery(client, METADATA_ROOT) == AutoRecoveryObservation()
        finally:
            client.stop()
            client.close()
    finally:
        services.down()


def test_a_wiped_bookie_is_found_by_the_auditors_periodic_check_and_the_ledgers_end_healthy(
    tmp_path: Path, spark: SparkSession
) -> None:
    """A bookie that comes back empty (a replaced disk) is registered: only the Auditor's periodic check can see what
    it lost. Scrutiny finds the loss first; the Auditor marks the same ledgers naming that bookie, its
    ReplicationWorker copies the entries back, and the deep scan then finds every ledger healthy."""
    services = EmbeddedServices(tmp_path / "services", start_timeout=60.0)
    try:
        result = services.up(bookies=4, bookie_options=BookieOptions(flush_interval_ms=1000))
        uri = services.bookies().metadata_service_uri
        ledgers = ledger_tool(uri, "create", "--entries", "20", "--count", "4")  # E=3 of 4 bookies
        held = Counter(b for ledger in ledgers for b in ledger["segments"][0]["bookies"])
        victim = held.most_common(1)[0][0]
        affected = {ledger["ledger_id"] for ledger in ledgers if victim in ledger["segments"][0]["bookies"]}
        settings = load_settings(env=result.env() | {"SCRUTINY_VERDICT_WRITE_CACHE_FLUSH_SECONDS": "1"})
        ids = parse_ledger_selection(",".join(str(ledger["ledger_id"]) for ledger in ledgers))

        def deep_scan(name: str) -> list[dict[str, Any]]:
            options = ScanOptions(mode=ScanMode.DEEP, selection=ids, data_dir=str(tmp_path / name))
            run = ScanRun(spark, settings, options).run()
            assert run.checked == len(ledgers)
            return list(run.violations)

        services.bookies().wipe(victim)
        time.sleep(2.5)  # two flushes: the agents answer from a settled index
        lost = {(r["ledger_id"], r.get("bookie")) for r in deep_scan("before") if r["category"] == "MISSING_REPLICA"}
        assert lost == {(ledger_id, victim) for ledger_id in affected}

        services.autorecovery().start(AutoRecoveryOptions(periodic_check_s=2))
        client = KazooClient(hosts=result.endpoints.zookeeper)
        client.start(timeout=10)
        try:
            marks = _watch_until_replicated(client, affected, victim, deadline_s=150)
        finally:
            client.stop()
            client.close()
        assert set(marks) == affected, marks  # the Auditor agrees on which ledgers lost copies ...
        assert all(victim in mark.replicas for mark in marks.values()), marks  # ... and on where
        assert deep_scan("after") == []
    finally:
        services.down()


def _autorecovery_switched_off_and_on_by_bookkeepers_shell(zookeeper: str, uri: str, lost: str) -> None:
    """What the watcher reads of the real AutoRecovery: its auditor's vote names a live bookie; BookKeeper's own shell
    (``autorecovery -disable`` / ``-enable``) makes and removes the ``disable`` node, dated by its creation."""
    client = KazooClient(hosts=zookeeper)
    client.start(timeout=10)
    try:
        elected = read_autorecovery(client, METADATA_ROOT)
        assert elected.disabled_since_ms is None and elected.auditor not in (None, "", lost), elected
        before_ms = int(time.time() * 1000)
        done = bookkeeper_shell(uri, "autorecovery", "-disable")
        assert done.returncode == 0, done.stderr[-2000:]
        disabled = read_autorecovery(client, METADATA_ROOT)
        assert disabled.auditor == elected.auditor and disabled.disabled_since_ms is not None
        assert before_ms - 2000 <= disabled.disabled_since_ms <= int(time.time() * 1000) + 2000, disabled
        done = bookkeeper_shell(uri, "autorecovery", "-enable")
        assert done.returncode == 0, done.stderr[-2000:]
        assert read_autorecovery(client, METADATA_ROOT) == elected
    finally:
        client.stop()
        client.close()


def _watch_until_replicated(
    client: KazooClient, affected: set[int], victim: str, *, deadline_s: float
) -> dict[int, UnderReplicationMark]:
    """Poll the marks and ledgers until no affected ledger has the victim in an ensemble or a mark; the marks seen.

    Every mark, replication lock and auditor vote the real AutoRecovery wrote meanwhile decodes and encodes again
    byte for byte.
    """
    marks: dict[int, UnderReplicationMark] = {}
    deadline = time.monotonic() + deadline_s
    while True:
        pending = set()
        assert _check_votes_and_locks(client) >= 1  # AutoRecovery runs: its auditor has voted
        for ledger_id in affected:
            try:
                data, _ = client.get(underreplication_path(ledger_id, root=METADATA_ROOT))
                marks[ledger_id] = parse_underreplication_mark(data)
                assert format_underreplication_mark(marks[ledger_id]) == data, data
                pending.add(ledger_id)
            except NoNodeError:
                pass
            metadata = decode_ledger_metadata(client.get(ledger_path(ledger_id, root=METADATA_ROOT))[0])
            if any(victim in segment.ensemble for segment in metadata.segments):
                pending.add(ledger_id)
        if not pending:
            return marks
        assert time.monotonic() < deadline, f"still under-replicated: {sorted(pending)}, marks seen: {marks}"
        time.sleep(0.05)


def _check_votes_and_locks(client: KazooClient) -> int:
    """The auditor votes and replication locks present now decode to a bookie id and encode back byte for byte; how
    many votes there were."""
    votes = 0
    for parent, parse, encode in (
        (auditor_election_path(root=METADATA_ROOT), parse_auditor_vote, format_auditor_vote),
        (underreplication_locks_path(root=METADATA_ROOT), parse_lock_data, format_lock_data),
    ):
        try:
            children = client.get_children(parent)
        except NoNodeError:
            continue
        for child in children:
            try:
                data, _ = client.get(f"{parent}/{child}")
            except NoNodeError:  # released meanwhile
                continue
            bookie = parse(data)
            assert bookie and encode(bookie) == data, (parent, child, data)
            votes += parse is parse_auditor_vote
    return votes


def _cli(env: dict[str, str], *args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "scrutiny.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)
