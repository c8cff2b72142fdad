"""A real Apache Pulsar broker on the services' ZooKeeper and real bookies: every ledger it makes is checked, and the
findings on its ledgers name their topics.

Pulsar 4.2.4 (the release that ships the bookies' BookKeeper 4.17.3) runs broker-only against three DbLedgerStorage
bookies with their agents; the watcher and the streaming checker run all along. Two topics get twelve messages each
through the broker's REST producer, their ledgers rolling over every five entries; the topics are unloaded and the
broker stopped, which closes every ledger. Then one bookie loses its disks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.connectors.zookeeper.tree import TreeLayout, read_cluster
from scrutiny.core.ledger_metadata import LedgerMetadata, LedgerState, decode_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.striping import write_set
from scrutiny.services.bookkeeper import BookieOptions
from scrutiny.services.bookkeeper_tools import METADATA_ROOT
from scrutiny.services.local_stack import EmbeddedServices
from scrutiny.services.pulsar import LocalPulsar, PulsarOptions, managed_ledger_name
from scrutiny.settings.loader import load_settings
from tests.support.checker_harness import quick_checker, streaming_job

pytestmark = pytest.mark.integration

TOPICS = ("orders", "payments")
MESSAGES = 12
PER_LEDGER = 5
#: How long the broker may take to start (measured here: 25 s the first time, on two loaded cores).
START_BOUND_S = 120.0


def test_every_ledger_pulsar_writes_is_checked_and_findings_name_its_topic(tmp_path: Path, spark: SparkSession) -> None:
    services = EmbeddedServices(tmp_path / "services", start_timeout=60.0)
    try:
        result = services.up(bookies=3, bookie_options=BookieOptions(flush_interval_ms=1000))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCRUTINY_")} | result.env()
        env |= {"SCRUTINY_VERDICT_WRITE_CACHE_FLUSH_SECONDS": "1", "PYSPARK_PYTHON": sys.executable}
        settings = quick_checker(load_settings(env=env), "pulsar-ledger-events", tmp_path / "stream")
        with streaming_job(spark, settings) as job:
            pulsar = LocalPulsar(tmp_path / "pulsar", result.endpoints.zookeeper, start_timeout=START_BOUND_S)
            try:
                started_in = pulsar.start(PulsarOptions(ensemble=3, write_quorum=2, entries_per_ledger=PER_LEDGER))
                assert started_in < START_BOUND_S
                acknowledged: dict[str, list[tuple[int, int]]] = {}
                for topic in TOPICS:
                    pulsar.create_topic(topic)
                    acknowledged[topic] = pulsar.produce(topic, [f"{topic}-{n}".encode() for n in range(MESSAGES)])
                    pulsar.unload(topic)
            finally:
                pulsar.stop()  # a clean stop closes every ledger it had open

            ledgers = dict(_pulsar_ledgers(result.endpoints.zookeeper))
            assert all(m.state is LedgerState.CLOSED for m in ledgers.values()), ledgers
            for topic in TOPICS:  # every message Pulsar acknowledged lies in a ledger of its topic, below its end
                for ledger_id, entry in acknowledged[topic]:
                    assert ledgers[ledger_id].pulsar_topic == managed_ledger_name(topic)
                    assert entry <= _last_entry(ledgers[ledger_id])
                assert len({ledger for ledger, _ in acknowledged[topic]}) >= MESSAGES // PER_LEDGER

            def checked_closed() -> set[int]:
                rows = job.table("ledger_checks")
                return {r["ledger_id"] for r in rows if r["ledger_state"] == "CLOSED" and r["verdict"] == "HEALTHY"}

            job.wait(lambda: set(ledgers) <= checked_closed(), 180, "every Pulsar ledger checked healthy")
            assert job.open_ids() == set()

            victim = ledgers[min(ledgers)].segments[0].ensemble[0]
            services.bookies().wipe(victim)
            lost = {ledger_id for ledger_id, m in ledgers.items() if _holds_entries(m, victim)}
            assert {m.pulsar_topic for i, m in ledgers.items() if i in lost} >= {managed_ledger_name(t) for t in TOPICS}
            wanted = {(ledger_id, "MISSING_REPLICA", victim) for ledger_id in lost}
            job.wait(lambda: wanted <= job.open_ids(), 120, "the wiped bookie's losses on Pulsar's ledgers")
            rows = [r for r in job.table("violations") if r["ledger_id"] in lost]
            assert rows and all(r["pulsar_topic"] == ledgers[r["ledger_id"]].pulsar_topic for r in rows), rows
    finally:
        services.down()


def _pulsar_ledgers(zookeeper: str) -> Iterator[tuple[int, LedgerMetadata]]:
    """Every ledger of the cluster (read as the watcher reads it) whose custom metadata says Pulsar made it; each
    decodes and encodes again byte for byte."""
    client = KazooClient(hosts=zookeeper)
    client.start(timeout=10)
    try:
        ledgers = read_cluster(client, TreeLayout(root=METADATA_ROOT)).ledgers
    finally:
        client.stop()
        client.close()
    for ledger_id, node in ledgers.items():
        metadata = decode_ledger_metadata(node.data)
        assert encode_ledger_metadata_v3(metadata) == node.data, ledger_id
        if dict(metadata.custom_metadata).get("application") == b"pulsar":
            yield ledger_id, metadata


def _holds_entries(metadata: LedgerMetadata, bookie: str) -> bool:
    """Whether the striping puts any of the closed ledger's entries on ``bookie`` (one segment)."""
    (segment,) = metadata.segments
    if bookie not in segment.ensemble:
        return False
    position = segment.ensemble.index(bookie)
    entries = range(_last_entry(metadata) + 1)
    return any(position in write_set(e, metadata.ensemble_size, metadata.write_quorum) for e in entries)


def _last_entry(metadata: LedgerMetadata) -> int:
    return -1 if metadata.last_entry_id is None else metadata.last_entry_id
