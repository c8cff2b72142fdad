"""The event publisher on a real broker: each ledger's events on the partition Kafka's own clients (Java's and
kafka-python's murmur2) choose for its key, in order, cluster-wide events on every partition, and acknowledgements
observed."""

from __future__ import annotations

import gc
import os
import signal
import time
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2

from scrutiny.connectors.kafka.config import consumer_kwargs, producer_kwargs
from scrutiny.connectors.kafka.events import CLUSTER_KEY, ledger_key
from scrutiny.connectors.kafka.publisher import EventPublisher, TopicConfig
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.services.servers import start_kafka
from scrutiny.settings.loader import Settings
from tests.support.event_log import read_topic
from tests.support.servers import KafkaTopicFactory

pytestmark = pytest.mark.integration

PARTITIONS = 5


def test_ledgers_keep_the_partition_of_kafkas_own_partitioner_in_order_and_ticks_reach_every_partition(
    service_settings: Settings, kafka_topic_factory: KafkaTopicFactory
) -> None:
    topic = kafka_topic_factory(partitions=PARTITIONS)
    acks: list[tuple[int, float]] = []
    options = {k: v for k, v in producer_kwargs(service_settings.kafka, "scrutiny-test").items() if k != "acks"}
    publisher = EventPublisher(options, TopicConfig(topic), on_ack=lambda kind, s: acks.append((kind, s)))
    try:
        assert publisher.partitions == list(range(PARTITIONS))
        ledgers = [*range(300), 2**63 - 1, 12_345_678_901]
        for round_ in range(2):
            for ledger_id in ledgers:
                kind = pb.EventKind.LEDGER_CREATED if round_ == 0 else pb.EventKind.LEDGER_CHANGED
                publisher.publish(pb.LedgerEvent(kind=kind, ledger_id=ledger_id))
        publisher.publish(pb.LedgerEvent(kind=pb.EventKind.TICK))
        publisher.flush(timeout_s=30)
        assert publisher.unacknowledged == 0 and publisher.broken is None
    finally:
        publisher.close()

    records = read_topic(consumer_kwargs(service_settings.kafka), topic)
    assert len(records) == 2 * len(ledgers) + PARTITIONS
    every = list(range(PARTITIONS))
    for record in records:
        if record.event.kind == pb.EventKind.TICK:
            continue
        assert record.key == ledger_key(record.event.ledger_id)
        assert record.partition == (murmur2(record.key) & 0x7FFFFFFF) % PARTITIONS, record.event.ledger_id
    ticks = [r for r in records if r.event.kind == pb.EventKind.TICK]
    assert sorted(r.partition for r in ticks) == every and {r.key for r in ticks} == {CLUSTER_KEY}
    for partition in every:  # in each partition, sequence numbers rise with the offsets and a ledger created first
        sequences = [r.event.sequence for r in records if r.partition == partition]
        assert sequences == sorted(sequences)
    first_kinds: dict[int, int] = {}
    for record in records:
        if record.event.kind != pb.EventKind.TICK:
            first_kinds.setdefault(record.event.ledger_id, record.event.kind)
    assert all(first_kinds[ledger_id] == pb.EventKind.LEDGER_CREATED for ledger_id in ledgers)
    assert len(acks) == len(records) and all(seconds >= 0 for _, seconds in acks)


def _librdkafka_threads() -> int:
    """Threads of this process that librdkafka started (it names them ``rdk:...``)."""
    names = (Path(f"/proc/self/task/{task}/comm").read_text() for task in os.listdir("/proc/self/task"))
    return sum(1 for name in names if name.startswith("rdk:"))


def test_a_close_while_kafka_does_not_answer_returns_in_time_and_leaves_no_producer_behind(tmp_path: Path) -> None:
    """A publisher replaced while Kafka does not answer stops: its records still queued are dropped and its threads
    end, though the delivery reports it was waiting for refer back to it."""
    broker = start_kafka(tmp_path / "kafka")
    try:
        before = _librdkafka_threads()
        publisher = EventPublisher({"bootstrap_servers": [broker.address]}, TopicConfig("events", partitions=1))
        publisher.publish(pb.LedgerEvent(kind=pb.EventKind.LEDGER_CREATED, ledger_id=1))
        publisher.flush(timeout_s=30)
        assert _librdkafka_threads() > before
        os.kill(broker.pid, signal.SIGSTOP)  # the broker keeps its connections and answers nothing
        try:
            for ledger_id in range(2, 7):
                publisher.publish(pb.LedgerEvent(kind=pb.EventKind.LEDGER_CREATED, ledger_id=ledger_id))
            assert publisher.unacknowledged == 5
            started = time.monotonic()
            publisher.close(timeout_s=0.5)
            assert time.monotonic() - started < 5
            del publisher
            gc.collect()
            deadline = time.monotonic() + 10
            while _librdkafka_threads() > before:
                assert time.monotonic() < deadline, "the closed producer's threads are still running"
                time.sleep(0.1)
        finally:
            os.kill(broker.pid, signal.SIGCONT)
    finally:
        broker.stop()
