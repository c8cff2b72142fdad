"""The Spark Structured Streaming source ``scrutiny_kafka``: a Kafka topic read with kafka-python.

Spark's own Kafka connector needs a jar that cannot be had here, so this is a PySpark Python data
source. Planning runs on the driver: :meth:`KafkaStreamReader.latestOffset` takes every partition's
end from a fetch's high watermark (right on Tansu and on Kafka, see ``kafka_offsets``), applies
``maxOffsetsPerTrigger``, and :meth:`KafkaStreamReader.partitions` makes one input partition per
Kafka partition with records in the batch, deciding there what missing offsets mean
(``failOnDataLoss``). :meth:`KafkaStreamReader.read` is stateless: a fresh consumer (no group)
seeks to the range's start and yields its records, never one past its end, or fails with an error
naming topic, partition and offsets when the broker does not deliver them in time.

Usage (``source_options`` builds the options from the ``[kafka]`` settings)::

    spark.dataSource.register(ScrutinyKafkaSource)
    events = spark.readStream.format("scrutiny_kafka").options(**source_options(settings.kafka, topic)).load()
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import OffsetOutOfRangeError
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from scrutiny.connectors.kafka.config import kafka_client_config
from scrutiny.connectors.kafka.offsets import (
    KafkaBrokerTimeoutError,
    KafkaDataLossError,
    StartingOffsets,
    decode_offsets,
    earliest_offsets,
    encode_offsets,
    end_offsets,
    limit_offsets,
    open_consumer,
    parse_starting_offsets,
    plan_range,
    report_data_loss,
    resolve_starting_offsets,
)
from scrutiny.connectors.kafka.settings import KafkaSection
from scrutiny.core.errors import ConfigError
from scrutiny.core.secret import Secret

SOURCE_NAME = "scrutiny_kafka"
KAFKA_SOURCE_SCHEMA = "topic string, partition int, offset long, timestamp timestamp, key binary, value binary"
_SCHEMA_STRING = "struct<topic:string,partition:int,offset:bigint,timestamp:timestamp,key:binary,value:binary>"
CONNECTION_OPTIONS = (
    "topic",
    "bootstrap_servers",
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_cafile",
)
OPTIONS = (
    *CONNECTION_OPTIONS,
    "startingOffsets",
    "maxOffsetsPerTrigger",
    "failOnDataLoss",
    "pollTimeoutMs",
    "requestTimeoutMs",
    "clientId",
)
_CANONICAL = {name.lower(): name for name in OPTIONS}
DEFAULT_POLL_TIMEOUT_MS = 60_000
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_CLIENT_ID = "scrutiny-kafka-source"
#: How long a read's fetch may wait at the partition's end for more records (only when records are missing).
_READ_WAIT_MS = 100
_POLL_SLICE_S = 0.5
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Row = tuple[str, int, int, datetime | None, bytes | None, bytes | None]


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The source's parsed options; the connection keys mean what the ``[kafka]`` settings' keys mean."""

    topic: str
    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: Secret = field(default_factory=Secret)
    ssl_cafile: str = ""
    starting_offsets: StartingOffsets = StartingOffsets("earliest")
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_s: float = DEFAULT_POLL_TIMEOUT_MS / 1000
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_MS / 1000
    client_id: str = DEFAULT_CLIENT_ID

    def client_kwargs(self) -> dict[str, object]:
        """kafka-python connection arguments (reveals the SASL password into them); ConfigError when invalid."""
        try:
            connection = KafkaSection(
                bootstrap_servers=self.bootstrap_servers,
                security_protocol=self.security_protocol,
                sasl_mechanism=self.sasl_mechanism,
                sasl_username=self.sasl_username,
                sasl_password=self.sasl_password,
                ssl_cafile=self.ssl_cafile,
            )
            return kafka_client_config(connection).kwargs(self.client_id)
        except ConfigError as error:
            raise ConfigError(f"{SOURCE_NAME} source options: {error} (option names drop the 'kafka.')") from None


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate the source's options (names case-insensitive); ConfigError naming the option on any problem."""
    given = {_canonical(name): str(value) for name, value in options.items()}
    for required in ("topic", "bootstrap_servers"):
        if not given.get(required, "").strip():
            raise ConfigError(f"the {SOURCE_NAME} source needs the option {required}")
    topic = given["topic"].strip()
    parsed = SourceOptions(
        topic=topic,
        bootstrap_servers=given["bootstrap_servers"],
        security_protocol=given.get("security_protocol", "PLAINTEXT"),
        sasl_mechanism=given.get("sasl_mechanism", ""),
        sasl_username=given.get("sasl_username", ""),
        sasl_password=Secret(given.get("sasl_password", "")),
        ssl_cafile=given.get("ssl_cafile", ""),
        starting_offsets=parse_starting_offsets(given.get("startingOffsets", "earliest"), topic),
        max_offsets_per_trigger=_positive(given, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_boolean(given, "failOnDataLoss", default=True),
        poll_timeout_s=(_positive(given, "pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS) / 1000,
        request_timeout_s=(_positive(given, "requestTimeoutMs") or DEFAULT_REQUEST_TIMEOUT_MS) / 1000,
        client_id=given.get("clientId", DEFAULT_CLIENT_ID).strip() or DEFAULT_CLIENT_ID,
    )
    parsed.client_kwargs()
    return parsed


def _canonical(name: str) -> str:
    """The option's own spelling of ``name`` (matched case-insensitively); ConfigError for an unknown option."""
    canonical = _CANONICAL.get(name.lower())
    if canonical is None:
        raise ConfigError(f"unknown {SOURCE_NAME} source option {name!r}; known: {', '.join(OPTIONS)}")
    return canonical


def _positive(given: Mapping[str, str], name: str) -> int | None:
    text = given.get(name)
    if text is None:
        return None
    if not (text.strip().isascii() and text.strip().isdigit()) or int(text) < 1:
        raise ConfigError(f"option {name} must be a positive integer, not {text!r}")
    return int(text)


def _boolean(given: Mapping[str, str], name: str, *, default: bool) -> bool:
    text = given.get(name, "true" if default else "false").strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"option {name} must be true or false, not {given[name]!r}")
    return text == "true"


def source_options(kafka_settings: KafkaSection, topic: str, **extra: object) -> dict[str, str]:
    """The source's options from the ``[kafka]`` settings, ``topic`` and ``extra`` (``maxOffsetsPerTrigger=100``).

    Runs on the driver when the job builds its query. Validates the connection settings first
    (ConfigError); reveals the SASL password into the returned options, which Spark redacts in
    plans and the UI. ``extra`` values may be str, int, bool (``true``/``false``) or a dict (JSON).
    """
    kafka_client_config(kafka_settings)
    options = {
        "topic": topic,
        "bootstrap_servers": kafka_settings.bootstrap_servers,
        "security_protocol": kafka_settings.security_protocol,
        "sasl_mechanism": kafka_settings.sasl_mechanism,
        "sasl_username": kafka_settings.sasl_username,
        "sasl_password": kafka_settings.sasl_password.reveal(),
        "ssl_cafile": kafka_settings.ssl_cafile,
    }
    options = {name: value for name, value in options.items() if value}
    options |= {_canonical(name): _option_text(value) for name, value in extra.items()}
    parse_options(options)
    return options


def _option_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return json.dumps(value)
    return str(value)


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Kafka partition's records ``[start, end)`` in one micro-batch."""

    topic: str
    partition: int
    start: int
    end: int


class ScrutinyKafkaSource(DataSource):
    """``spark.readStream.format("scrutiny_kafka")``: rows of :data:`KAFKA_SOURCE_SCHEMA`."""

    @classmethod
    def name(cls) -> str:
        """The short name: ``scrutiny_kafka``."""
        return SOURCE_NAME

    def schema(self) -> str:
        """The fixed schema; runs at ``load()``, so bad options fail there."""
        parse_options(self.options)
        return KAFKA_SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        """The reader; the schema must be :data:`KAFKA_SOURCE_SCHEMA`."""
        if schema.simpleString() != _SCHEMA_STRING:
            raise ConfigError(f"the {SOURCE_NAME} source has the fixed schema {KAFKA_SOURCE_SCHEMA!r}")
        return KafkaStreamReader(parse_options(self.options))


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"topic": t, "partitions": {"<partition>": next_offset}}``; all but :meth:`read` run on the driver."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._target: dict[int, int] | None = None
        self._latest: dict[int, int] | None = None

    def _kwargs(self) -> dict[str, object]:
        return self._options.client_kwargs()

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Where a new query starts (``startingOffsets``); a restarted one starts from its checkpoint instead."""
        o = self._options
        kind = o.starting_offsets.kind
        timeout = o.request_timeout_s
        earliest = earliest_offsets(self._kwargs(), o.topic, timeout_s=timeout) if kind != "latest" else {}
        end = end_offsets(self._kwargs(), o.topic, timeout_s=timeout) if kind != "earliest" else {}
        return encode_offsets(o.topic, resolve_starting_offsets(o.topic, o.starting_offsets, earliest, end))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        """``maxOffsetsPerTrigger`` as Spark's ReadMaxRows, or read all available."""
        cap = self._options.max_offsets_per_trigger
        return ReadMaxRows(cap) if cap is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Trigger.AvailableNow: fix the partitions' current ends; later batches never go past them."""
        self._target = end_offsets(self._kwargs(), self._options.topic, timeout_s=self._options.request_timeout_s)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """The end of the next micro-batch: every partition's end, capped by ``limit`` and an AvailableNow target.

        Partitions new since ``start`` begin at their earliest offset. A partition gone from the
        topic keeps its offset (nothing is planned for it). An end below the start is returned as
        it is: :meth:`partitions` reports it as data loss.
        """
        o = self._options
        begin = decode_offsets(o.topic, start)
        latest = end_offsets(self._kwargs(), o.topic, timeout_s=o.request_timeout_s)
        self._latest = latest
        new = [p for p in latest if p not in begin]
        if new:
            begin |= earliest_offsets(self._kwargs(), o.topic, partitions=new, timeout_s=o.request_timeout_s)
        target = self._target
        end = {p: latest[p] if target is None else min(latest[p], target.get(p, begin[p])) for p in latest}
        end = {p: end.get(p, offset) for p, offset in begin.items()}
        if isinstance(limit, ReadMaxRows):
            end = limit_offsets(begin, end, limit.max_rows)
        return encode_offsets(o.topic, end)

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802 - Spark's name
        """The partitions' ends seen by the last :meth:`latestOffset` (for the query's progress)."""
        return None if self._latest is None else encode_offsets(self._options.topic, self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """One input partition per Kafka partition with records in ``[start, end)``; data loss decided here."""
        o = self._options
        begin = decode_offsets(o.topic, start)
        stop = decode_offsets(o.topic, end)
        moved = [p for p in sorted(stop) if begin.get(p) != stop[p]]
        if not moved:
            return []
        earliest = earliest_offsets(self._kwargs(), o.topic, partitions=moved, timeout_s=o.request_timeout_s)
        planned: list[InputPartition] = []
        for p in moved:
            first = begin.get(p, earliest[p])
            span = plan_range(o.topic, p, first, stop[p], earliest[p], fail_on_data_loss=o.fail_on_data_loss)
            if span is not None:
                planned.append(KafkaInputPartition(o.topic, p, span[0], span[1]))
        return planned

    def read(self, partition: InputPartition) -> Iterator[Row]:
        """The partition's records in offset order (runs in a Spark task; stateless)."""
        if not isinstance(partition, KafkaInputPartition):
            raise TypeError(f"not a Kafka input partition: {partition!r}")
        return read_range(self._options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the query's progress lives in Spark's checkpoint, never in consumer groups."""


def read_range(options: SourceOptions, part: KafkaInputPartition) -> Iterator[Row]:
    """Yield the rows of offsets ``[part.start, part.end)``, never one past the end.

    A fresh consumer (no group) is assigned the partition and seeks to the start. Offsets missing
    in the middle (compaction, transaction markers) are skipped; a first record after the start
    when the start is below the earliest available offset, or an out-of-range start, is data loss
    (see :func:`~scrutiny.connectors.kafka.offsets.plan_range`). KafkaBrokerTimeoutError when the
    broker delivers nothing for ``pollTimeoutMs`` before the end is reached (a large range that
    keeps moving never times out).
    """
    tp = TopicPartition(part.topic, part.partition)
    purpose = f"reading Kafka topic {part.topic!r} partition {part.partition} offsets {part.start}..{part.end - 1}"
    timeout = options.request_timeout_s
    with open_consumer(options.client_kwargs(), timeout, purpose, fetch_max_wait_ms=_READ_WAIT_MS) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, part.start)
        state = _RangeState(options, part, consumer, tp)
        while state.next_offset < part.end:
            records = state.poll()
            if records is None:
                return
            for record in records:
                if record.offset >= part.end:
                    return
                if record.offset >= state.next_offset:
                    state.check_first(record.offset)
                    yield _row(record)
                    state.next_offset = record.offset + 1
            state.advance(consumer.position(tp))


class _RangeState:
    """One :func:`read_range` call's consumer, next offset and stall deadline, and its data-loss checks."""

    def __init__(self, options: SourceOptions, part: KafkaInputPartition, consumer: KafkaConsumer, tp: TopicPartition):
        self.options = options
        self.part = part
        self.consumer = consumer
        self.tp = tp
        self.next_offset = part.start
        self.reached = part.start
        self.deadline = time.monotonic() + options.poll_timeout_s
        self.first_checked = False

    def advance(self, position: int) -> None:
        """Move past offsets the consumer skipped; any progress restarts the stall deadline."""
        self.next_offset = max(self.next_offset, position)
        if self.next_offset > self.reached:
            self.reached = self.next_offset
            self.deadline = time.monotonic() + self.options.poll_timeout_s

    def poll(self) -> list[ConsumerRecord] | None:
        """The next records (maybe none); None when the rest of the range is lost and skipped."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            part = self.part
            raise KafkaBrokerTimeoutError(
                f"Kafka topic {part.topic!r} partition {part.partition}: reading offsets {part.start}..{part.end - 1} "
                f"stopped at offset {self.next_offset}: the broker delivered nothing more within "
                f"{self.options.poll_timeout_s:g} s (option pollTimeoutMs)"
            )
        try:
            batch = self.consumer.poll(timeout_ms=max(1, int(min(remaining, _POLL_SLICE_S) * 1000)))
        except OffsetOutOfRangeError:
            return self._out_of_range()
        records: list[ConsumerRecord] = batch.get(self.tp, [])
        return records

    def _out_of_range(self) -> list[ConsumerRecord] | None:
        tp, fail = self.tp, self.options.fail_on_data_loss
        earliest = int(self.consumer.beginning_offsets([tp])[tp])
        if self.next_offset < earliest:
            report_data_loss(KafkaDataLossError(tp.topic, tp.partition, self.next_offset, earliest), fail)
            self.consumer.seek(tp, earliest)
            self.first_checked = True
            self.advance(earliest)
            return []
        end = int(self.consumer.end_offsets([tp])[tp])
        report_data_loss(KafkaDataLossError(tp.topic, tp.partition, self.next_offset, end, reset=True), fail)
        return None

    def check_first(self, offset: int) -> None:
        """A first record after the start: data loss if the start is gone, else a gap (compaction, markers)."""
        if self.first_checked:
            return
        self.first_checked = True
        if offset <= self.part.start:
            return
        tp = self.tp
        earliest = int(self.consumer.beginning_offsets([tp])[tp])
        if self.part.start < earliest:
            error = KafkaDataLossError(tp.topic, tp.partition, self.part.start, earliest)
            report_data_loss(error, self.options.fail_on_data_loss)


def _row(record: ConsumerRecord) -> Row:
    timestamp = _EPOCH + timedelta(milliseconds=record.timestamp) if record.timestamp >= 0 else None
    return (record.topic, record.partition, record.offset, timestamp, record.key, record.value)
