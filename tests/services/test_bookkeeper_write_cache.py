"""DbLedgerStorage's write cache on real bookies: the race is real, and the checker does not lose it.

Three real DbLedgerStorage bookies flushing their write cache every 20 s (Pulsar: every 60 s). A ledger
closed a moment ago is not in any bookie's index yet, so every agent answers NO_LEDGER: without the write-cache
rule a deep scan then reports a critical NO_REPLICA for a healthy ledger. With ``verdict.write_cache_flush_seconds``
set to the bookies' interval, the scan waits for the flush and finds the ledgers healthy. A bookie killed before its
flush loses nothing (its journal), and its index has the entries as soon as it is back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from scrutiny.connectors.bookies.agent_client import AgentClient
from scrutiny.connectors.tables.delta import read_table
from scrutiny.core.ledger_scan import ScanMode, parse_ledger_selection
from scrutiny.core.verdict import AnswerKind
from scrutiny.services.bookkeeper import BookieOptions
from scrutiny.services.bookkeeper_tools import ledger_tool
from scrutiny.services.local_stack import EmbeddedServices, UpResult
from scrutiny.settings.loader import load_settings
from scrutiny.streaming.scan.job import ScanRun
from scrutiny.streaming.scan.snapshot import ScanOptions
from tests.support.strategies import expand_set

pytestmark = pytest.mark.integration

FLUSH_S = 20


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[EmbeddedServices, UpResult]]:
    services = EmbeddedServices(tmp_path / "services", start_timeout=60.0)
    try:
        yield services, services.up(bookies=3, bookie_options=BookieOptions(flush_interval_ms=FLUSH_S * 1000))
    finally:
        services.down()


def test_ledgers_in_the_write_cache_are_not_reported_lost(
    stack: tuple[EmbeddedServices, UpResult], spark: SparkSession, tmp_path: Path
) -> None:
    services, result = stack
    uri = services.bookies().metadata_service_uri
    env = result.env() | {"SCRUTINY_VERDICT_WRITE_CACHE_FLUSH_SECONDS": str(FLUSH_S)}
    data_dir = str(tmp_path / "data")
    deep = ScanOptions(mode=ScanMode.DEEP, data_dir=data_dir)
    # The scan runs in this process on the tests' Spark session, warmed by a first scan of the empty cluster: the
    # second one reads the bookies a few seconds after the close, well inside the interval (a scan that starts its
    # own JVM and loads Delta could take longer than the interval to get there, and meet flushed indexes).
    assert ScanRun(spark, load_settings(env=env), deep).run().checked == 0
    probe = _wait_for_a_flush(uri, result)  # a whole interval to the next flush: the scan meets unflushed indexes
    ledgers = ledger_tool(uri, "create", "--entries", "40", "--count", "3")
    ids = [ledger["ledger_id"] for ledger in ledgers]
    # The race, on BookKeeper itself: right after the close no index holds the ledgers.
    asked = 0
    for bookie in result.bookies:
        assert bookie.agent is not None
        with AgentClient(bookie.agent) as client:
            answers = client.fetch(ids)
        asked += sum(1 for a in answers.values() if a.answer.kind is AnswerKind.NO_LEDGER)
    assert asked >= 1, "every ledger was in an index already: the flush came first, the race was not exercised"

    began = time.monotonic()
    scan = ScanRun(spark, load_settings(env=env), deep).run()
    assert scan.checked == 4 and scan.violations == []
    # The one warning: these bookies run without BookKeeper's AutoRecovery, so no auditor is elected.
    assert [w[:25] for w in scan.warnings] == ["no auditor is elected (no"], scan.warnings
    assert read_table(data_dir, "violations").num_rows == 0  # nothing was ever reported, not even for a moment
    checks = read_table(data_dir, "ledger_checks").to_pylist()
    assert {c["ledger_id"] for c in checks} == {probe, *ids} and all(c["verdict"] == "HEALTHY" for c in checks)
    waited = [c for c in checks if c["ledger_id"] in ids]
    assert all(c["retries"] >= 1 for c in waited)  # each waited for the flush rather than judging too early
    assert time.monotonic() - began < 5 * FLUSH_S

    # A bookie SIGKILLed before its next flush loses nothing of what it acknowledged: at start it replays its journal
    # and flushes, so its index lists the ledger at once (not at the next interval), and a deep scan finds it healthy.
    _wait_for_a_flush(uri, result)
    (late,) = ledger_tool(uri, "create", "--entries", "40")
    late_id = late["ledger_id"]
    victim = late["segments"][0]["bookies"][0]
    agent = next(b.agent for b in result.bookies if b.agent and b.id == victim)
    with AgentClient(agent) as client:
        assert client.get_listings([late_id])[late_id].kind is AnswerKind.NO_LEDGER  # only in its write cache
    services.bookies().stop(victim)
    services.bookies().start(victim)
    with AgentClient(agent) as client:
        listed = client.get_listings([late_id])[late_id]
    assert listed.kind is AnswerKind.LISTING and expand_set(listed.groups) == set(range(0, 40, 3)) | set(
        range(2, 40, 3)
    )
    late_scan = ScanOptions(mode=ScanMode.DEEP, data_dir=data_dir, selection=parse_ledger_selection(str(late_id)))
    again = ScanRun(spark, load_settings(env=env), late_scan).run()
    assert again.checked == 1 and again.violations == []


def _wait_for_a_flush(uri: str, result: UpResult) -> int:
    """Write a probe ledger and return (its id) once an agent lists it: the bookies have just flushed."""
    (probe,) = ledger_tool(uri, "create", "--entries", "1")
    holder = probe["segments"][0]["bookies"][0]  # entry 0's write set starts with the ensemble's first bookie
    agent = next(b.agent for b in result.bookies if b.agent and b.id == holder)
    deadline = time.monotonic() + 2 * FLUSH_S + 10
    with AgentClient(agent) as client:
        while client.get_listings([probe["ledger_id"]])[probe["ledger_id"]].kind is not AnswerKind.LISTING:
            assert time.monotonic() < deadline, "no flush within two intervals"
            time.sleep(0.2)
    return int(probe["ledger_id"])
