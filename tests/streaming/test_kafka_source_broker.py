"""The ``scrutiny_kafka`` Spark source against the test broker (Tansu, or SCRUTINY_TEST_KAFKA) and a local Spark.

Records are produced with linger, so batches hold several records: Tansu's ListOffsets(LATEST)
is then too low, and every check below that reads to the end would miss records if the source
trusted it. The reader's methods are first driven directly (no Spark), then through streaming queries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable

from scrutiny.connectors.kafka.config import consumer_kwargs, producer_kwargs
from scrutiny.connectors.kafka.offsets import (
    KafkaBrokerTimeoutError,
    KafkaDataLossError,
    KafkaTopicNotFoundError,
    earliest_offsets,
    encode_offsets,
    end_offsets,
)
from scrutiny.services.servers import free_port
from scrutiny.settings.loader import Settings
from scrutiny.streaming.kafka_source import (
    KafkaInputPartition,
    KafkaStreamReader,
    ScrutinyKafkaSource,
    parse_options,
    source_options,
)

pytestmark = pytest.mark.integration

QUERY_TIMEOUT_S = 60


@dataclass(frozen=True)
class Produced:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes
    value: bytes


def produce(settings: Settings, topic: str, count: int, partitions: int, *, tag: str = "r") -> list[Produced]:
    """``count`` records spread over ``partitions``, sent with linger so that batches hold several records."""
    producer = KafkaProducer(**producer_kwargs(settings.kafka), linger_ms=30)
    try:
        pending = []
        for i in range(count):
            key, value = f"{tag}-key-{i}".encode(), f"{tag}-value-{i}".encode()
            pending.append((key, value, producer.send(topic, key=key, value=value, partition=i % partitions)))
        producer.flush(timeout=15)
        out = []
        for key, value, future in pending:
            meta = future.get(timeout=15)
            out.append(Produced(meta.partition, meta.offset, meta.timestamp, key, value))
        return out
    finally:
        producer.close(timeout=5)


def as_rows(produced: list[Produced], topic: str) -> set[tuple[Any, ...]]:
    return {(topic, p.partition, p.offset, p.timestamp_ms, p.key, p.value) for p in produced}


def make_reader(settings: Settings, topic: str, **extra: object) -> KafkaStreamReader:
    return KafkaStreamReader(parse_options(source_options(settings.kafka, topic, requestTimeoutMs=5000, **extra)))


def read_all(reader: KafkaStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[Any, ...]]:
    rows = []
    for part in reader.partitions(start, end):
        for topic, partition, offset, timestamp, key, value in reader.read(part):
            millis = None if timestamp is None else round(timestamp.timestamp() * 1000)
            rows.append((topic, partition, offset, millis, key, value))
    return rows


# --- the offset look-ups and the reader, without Spark ----------------------------------------------------------------


def test_end_offsets_are_the_high_watermarks_of_batched_partitions(
    service_settings: Settings, kafka_topic_factory: Callable[..., str]
) -> None:
    topic = kafka_topic_factory(partitions=3)
    produced = produce(service_settings, topic, 40, 3)
    counts = {p: sum(1 for r in produced if r.partition == p) for p in range(3)}
    kwargs = consumer_kwargs(service_settings.kafka)
    assert end_offsets(kwargs, topic, timeout_s=10) == counts
    assert end_offsets(kwargs, topic, partitions=[1], timeout_s=10) == {1: counts[1]}
    assert earliest_offsets(kwargs, topic, timeout_s=10) == {0: 0, 1: 0, 2: 0}
    with pytest.raises(KafkaTopicNotFoundError, match="'scrutiny-test-no-such-topic' does not exist"):
        end_offsets(kwargs, "scrutiny-test-no-such-topic", timeout_s=10)


def test_an_unreachable_broker_fails_in_bounded_time_naming_the_request() -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(
        KafkaBrokerTimeoutError, match=rf"end offsets of Kafka topic 'events': Kafka \(\['{address}'\]\)"
    ):
        end_offsets({"bootstrap_servers": [address]}, "events", timeout_s=1)
    assert time.monotonic() - started < 5


def test_reader_plans_and_reads_every_record_once(
    service_settings: Settings, kafka_topic_factory: Callable[..., str]
) -> None:
    topic = kafka_topic_factory(partitions=3)
    first = produce(service_settings, topic, 30, 3, tag="a")
    reader = make_reader(service_settings, topic)
    start = reader.initialOffset()
    assert start == encode_offsets(topic, {0: 0, 1: 0, 2: 0})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == encode_offsets(topic, {0: 10, 1: 10, 2: 10})
    rows = read_all(reader, start, end)
    assert len(rows) == 30 and set(rows) == as_rows(first, topic)
    more = produce(service_settings, topic, 7, 3, tag="b")
    later = reader.latestOffset(end, ReadAllAvailable())
    assert set(read_all(reader, end, later)) == as_rows(more, topic)
    assert reader.latestOffset(later, ReadAllAvailable()) == later
    assert make_reader(service_settings, topic, startingOffsets="latest").initialOffset() == later


def test_reader_with_a_cap_reads_in_steps(service_settings: Settings, kafka_topic_factory: Callable[..., str]) -> None:
    topic = kafka_topic_factory(partitions=2)
    produced = produce(service_settings, topic, 25, 2)
    reader = make_reader(service_settings, topic, maxOffsetsPerTrigger=6)
    start, rows, steps = reader.initialOffset(), [], 0
    while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
        batch = read_all(reader, start, end)
        assert 0 < len(batch) <= 6
        rows += batch
        start, steps = end, steps + 1
    assert steps == 5 and len(rows) == 25 and set(rows) == as_rows(produced, topic)


def test_a_range_the_broker_does_not_deliver_times_out_naming_it(
    service_settings: Settings, kafka_topic_factory: Callable[..., str]
) -> None:
    topic = kafka_topic_factory(partitions=1)
    produce(service_settings, topic, 3, 1)
    reader = make_reader(service_settings, topic, pollTimeoutMs=800)
    started = time.monotonic()
    expected = rf"'{topic}' partition 0: reading offsets 1\.\.9 stopped at offset 3: .* within 0\.8 s"
    with pytest.raises(KafkaBrokerTimeoutError, match=expected):
        list(reader.read(KafkaInputPartition(topic, 0, 1, 10)))
    assert time.monotonic() - started < 5


def test_a_start_past_the_end_is_data_loss_unless_told_to_skip(
    service_settings: Settings, kafka_topic_factory: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    topic = kafka_topic_factory(partitions=1)
    produce(service_settings, topic, 4, 1)
    starting = {topic: {"0": 50}}
    failing = make_reader(service_settings, topic, startingOffsets=starting)
    start = failing.initialOffset()
    end = failing.latestOffset(start, ReadAllAvailable())
    with pytest.raises(KafkaDataLossError, match="next offset to read is 50 but the partition now ends at 4"):
        failing.partitions(start, end)
    lenient = make_reader(service_settings, topic, startingOffsets=starting, failOnDataLoss=False)
    with caplog.at_level(logging.WARNING, logger="scrutiny.connectors.kafka.offsets"):
        assert lenient.partitions(start, end) == []
    assert any("partition 0" in r.getMessage() and "offset 4" in r.getMessage() for r in caplog.records)
    more = produce(service_settings, topic, 2, 1, tag="after")
    assert set(read_all(lenient, end, lenient.latestOffset(end, ReadAllAvailable()))) == as_rows(more, topic)


# --- through Spark -------------------------------------------------------------------------------------------------


@dataclass
class Collected:
    """Rows per micro-batch, collected on the driver by foreachBatch."""

    batches: dict[int, list[tuple[Any, ...]]] = field(default_factory=dict)

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = frame.selectExpr("topic", "partition", "offset", "unix_millis(timestamp)", "key", "value").collect()
        self.batches[batch_id] = [(r[0], r[1], r[2], r[3], bytes(r[4]), bytes(r[5])) for r in rows]

    def rows(self) -> list[tuple[Any, ...]]:
        return [row for batch in self.batches.values() for row in batch]


@pytest.fixture
def stream(spark: SparkSession, service_settings: Settings) -> Iterator[Callable[..., Collected]]:
    """``run(topic, checkpoint, **options)``: one availableNow query to the end; returns what it saw."""
    spark.dataSource.register(ScrutinyKafkaSource)
    queries = []

    def run(topic: str, checkpoint: Path, **options: object) -> Collected:
        collected = Collected()
        frame = (
            spark.readStream.format("scrutiny_kafka")
            .options(**source_options(service_settings.kafka, topic, **options))
            .load()
        )
        query = frame.writeStream.foreachBatch(collected).option("checkpointLocation", str(checkpoint))
        running = query.trigger(availableNow=True).start()
        queries.append(running)
        assert running.awaitTermination(QUERY_TIMEOUT_S), f"query on {topic} did not finish in {QUERY_TIMEOUT_S} s"
        return collected

    try:
        yield run
    finally:
        for query in queries:
            if query.isActive:
                query.stop()


def test_stream_reads_each_record_once_and_restarts_from_its_checkpoint(
    service_settings: Settings,
    kafka_topic_factory: Callable[..., str],
    stream: Callable[..., Collected],
    tmp_path: Path,
) -> None:
    topic = kafka_topic_factory(partitions=3)
    first = produce(service_settings, topic, 45, 3, tag="a")
    seen = stream(topic, tmp_path / "checkpoint").rows()
    assert sorted(seen) == sorted(as_rows(first, topic)) and len(seen) == 45
    second = produce(service_settings, topic, 12, 3, tag="b")
    again = stream(topic, tmp_path / "checkpoint").rows()
    assert sorted(again) == sorted(as_rows(second, topic)) and len(again) == 12


def test_stream_with_a_cap_runs_several_batches_and_surfaces_data_loss(
    service_settings: Settings,
    kafka_topic_factory: Callable[..., str],
    stream: Callable[..., Collected],
    tmp_path: Path,
) -> None:
    topic = kafka_topic_factory(partitions=2)
    produced = produce(service_settings, topic, 30, 2)
    collected = stream(topic, tmp_path / "capped", maxOffsetsPerTrigger=8)
    sizes = [len(batch) for _, batch in sorted(collected.batches.items())]
    assert sizes == [8, 8, 8, 6]
    assert sorted(collected.rows()) == sorted(as_rows(produced, topic))
    with pytest.raises(StreamingQueryException, match=r"data loss on Kafka topic .* failOnDataLoss=false"):
        stream(topic, tmp_path / "lost", startingOffsets={topic: {"0": 100, "1": 0}})
