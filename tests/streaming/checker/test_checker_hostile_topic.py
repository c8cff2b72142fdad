"""No content of the topic stops the checker: every malformed record is skipped, counted and recorded."""

from __future__ import annotations

from collections import Counter

import pytest
from kafka import KafkaProducer
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.streaming.checker.job import ledgers_root
from tests.support.checker_harness import SettingsFor, running_checker
from tests.support.scenarios import small_scenario

pytestmark = pytest.mark.integration

SCENARIO = small_scenario(
    "hostile-topic",
    seed=5,
    bookies=3,
    body="""

[[ledgers]]
id = 1
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
holdings = [{ bookie = "bookie-3", nothing = true }]

[[ledgers]]
id = 2
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
state = "OPEN"
last_entry = 9

[[schedule]]
at = 100
action = "close"
ledger = 2
""",
)

MISSING = (1, "MISSING_REPLICA", "bookie-3")


def malformed(root: str) -> list[tuple[bytes | None, bytes | None, str]]:
    """(key, value, the reason the checker must give) for every shape of bad record tried."""

    def event(**fields: object) -> bytes:
        return pb.LedgerEvent(**fields).SerializeToString()  # type: ignore[arg-type]

    deleted = pb.EventKind.LEDGER_DELETED
    return [
        (b"1", None, "undecodable"),  # a tombstone
        (b"1", b"\xff\xfe garbage \x00\x01", "undecodable"),
        (b"1", b'{"ledger_id": 1, "kind": "LEDGER_DELETED"}', "undecodable"),  # another producer's JSON
        (b"1", event(ledger_id=1, ledgers_root=root), "unknown_kind"),
        (b"1", event(kind=77, ledger_id=1, ledgers_root=root), "unknown_kind"),
        (b"1", event(kind=deleted, ledger_id=1, ledgers_root="/another/cluster"), "foreign_cluster"),
        # a negative id once fell into the figures' bucket and failed every replay of its batch
        (b"-1", event(kind=pb.EventKind.LEDGER_CHANGED, ledger_id=-1, ledgers_root=root), "bad_ledger_id"),
        (b"-5", event(kind=deleted, ledger_id=-5, ledgers_root=root), "bad_ledger_id"),
        # keyed for another ledger or not at all: taken, it would delete ledger 1 and resolve its finding
        (b"3", event(kind=deleted, ledger_id=1, ledgers_root=root), "bad_key"),
        (None, event(kind=deleted, ledger_id=1, ledgers_root=root), "bad_key"),
        (b"cluster", event(kind=deleted, ledger_id=1, ledgers_root=root), "bad_key"),
        (b"1", event(kind=pb.EventKind.TICK, ledgers_root=root), "bad_key"),
    ]


def test_malformed_records_are_recorded_and_the_checker_keeps_checking(
    spark: SparkSession,
    zk_client: KazooClient,
    settings_for: SettingsFor,
) -> None:
    scenario = parse_scenario(SCENARIO)
    (close,) = scenario.schedule
    settings = settings_for(scenario)
    topic = settings.kafka.topic
    bad = malformed(ledgers_root(settings))
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers)
    with running_checker(spark, zk_client, settings, scenario, schedule=False) as harness:
        try:
            harness.wait(lambda: MISSING in harness.open_ids(), 60, "ledger 1's missing replica")
            sent = [producer.send(topic, key=key, value=value) for key, value, _ in bad]
            where = [future.get(timeout=30) for future in sent]
            harness.run(harness.cluster.apply(close))  # after the bad records: the checker must still see it
            harness.wait(lambda: 2 in {c["ledger_id"] for c in harness.table("ledger_checks")}, 60, "ledger 2 checked")
            harness.wait(lambda: len(harness.table("rejected_events")) >= len(bad), 30, "every bad record recorded")
        finally:
            producer.close(timeout=10)
        rejected = harness.table("rejected_events")
        got = {(r["kafka_partition"], r["kafka_offset"]): r["reason"] for r in rejected}
        assert got == {(m.partition, m.offset): reason for m, (_, _, reason) in zip(where, bad, strict=True)}
        assert all(r["details"] and r["run_id"] for r in rejected)
        assert MISSING in harness.open_ids()  # none of the misaddressed deletions was applied
        assert harness.checker.query.exception() is None
        metrics = harness.checker.sink.metrics.registry
        expected = Counter(reason for _, _, reason in bad)

        def counted() -> dict[str, float | None]:
            name = "scrutiny_checker_rejected_events_total"
            return {reason: metrics.get_sample_value(name, {"reason": reason}) for reason in expected}

        harness.wait(lambda: counted() == expected, 30, "the metrics to count every bad record")  # after the write
