"""The Kafka source's pure parts: offset JSON, starting offsets, maxOffsetsPerTrigger, data loss, options.

No broker and no Spark session: the reader's planning methods run here against fake offset look-ups.
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka import TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import OffsetOutOfRangeError
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from scrutiny.connectors.kafka.offsets import (
    KafkaBrokerTimeoutError,
    KafkaDataLossError,
    KafkaOffsetsError,
    StartingOffsets,
    decode_offsets,
    encode_offsets,
    limit_offsets,
    parse_starting_offsets,
    plan_range,
    resolve_starting_offsets,
)
from scrutiny.connectors.kafka.settings import KafkaSection
from scrutiny.core.errors import ConfigError
from scrutiny.core.secret import Secret
from scrutiny.streaming import kafka_source
from scrutiny.streaming.kafka_source import (
    KafkaInputPartition,
    KafkaStreamReader,
    ScrutinyKafkaSource,
    SourceOptions,
    parse_options,
    source_options,
)

TOPIC = "events"
BASE = {"topic": TOPIC, "bootstrap_servers": "127.0.0.1:9092"}


# --- offset JSON ---------------------------------------------------------------------------------------------------


def test_offsets_round_trip_through_json_with_sorted_string_keys() -> None:
    document = encode_offsets(TOPIC, {10: 7, 2: 0, 1: 123456789012})
    text = json.dumps(document)
    assert text == '{"topic": "events", "partitions": {"1": 123456789012, "2": 0, "10": 7}}'
    assert decode_offsets(TOPIC, json.loads(text)) == {1: 123456789012, 2: 0, 10: 7}


def test_offsets_of_another_topic_are_refused_naming_both() -> None:
    with pytest.raises(KafkaOffsetsError, match=r"'other'.*'events'.*new checkpoint"):
        decode_offsets(TOPIC, encode_offsets("other", {0: 1}))


@pytest.mark.parametrize(
    "document",
    [
        {"events": {"0": 1}},
        {"topic": TOPIC, "partitions": {"x": 1}},
        {"topic": TOPIC, "partitions": {"0": -1}},
        {"topic": TOPIC, "partitions": {"0": True}},
        {"topic": TOPIC, "partitions": [1]},
        [1, 2],
    ],
)
def test_malformed_offsets_are_refused(document: object) -> None:
    with pytest.raises(KafkaOffsetsError):
        decode_offsets(TOPIC, document)


# --- startingOffsets -----------------------------------------------------------------------------------------------


def test_starting_offsets_words_and_both_json_forms() -> None:
    assert parse_starting_offsets(" Earliest ", TOPIC) == StartingOffsets("earliest")
    assert parse_starting_offsets("LATEST", TOPIC) == StartingOffsets("latest")
    spark_form = parse_starting_offsets('{"events": {"0": 5, "1": -2, "2": -1}}', TOPIC)
    assert spark_form == StartingOffsets("specific", {0: 5, 1: -2, 2: -1})
    own_form = parse_starting_offsets(json.dumps(encode_offsets(TOPIC, {0: 5})), TOPIC)
    assert own_form == StartingOffsets("specific", {0: 5})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("newest", "must be earliest, latest or a JSON object"),
        ('{"other": {"0": 1}}', "names topics \\['other'\\]"),
        ('{"events": {"0": -3}}', "startingOffsets.*partition 0"),
        ('{"events": 5}', "startingOffsets"),
    ],
)
def test_bad_starting_offsets_name_the_option(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_starting_offsets(text, TOPIC)


def test_specific_starting_offsets_resolve_sentinels_and_need_every_partition() -> None:
    earliest, end = {0: 3, 1: 4, 2: 0}, {0: 10, 1: 20, 2: 30}
    specific = StartingOffsets("specific", {0: 5, 1: -2, 2: -1})
    assert resolve_starting_offsets(TOPIC, specific, earliest, end) == {0: 5, 1: 4, 2: 30}
    assert resolve_starting_offsets(TOPIC, StartingOffsets("earliest"), earliest, {}) == earliest
    assert resolve_starting_offsets(TOPIC, StartingOffsets("latest"), {}, end) == end
    with pytest.raises(KafkaOffsetsError, match=r"every partition.*\[0, 1, 2\].*\[0, 1\]"):
        resolve_starting_offsets(TOPIC, StartingOffsets("specific", {0: 1, 1: 1}), earliest, end)


# --- maxOffsetsPerTrigger ------------------------------------------------------------------------------------------


def test_cap_is_spread_in_proportion_to_backlog() -> None:
    start = {0: 0, 1: 100, 2: 50}
    end = {0: 600, 1: 400, 2: 50}  # backlogs 600, 300, 0
    limited = limit_offsets(start, end, 90)
    assert limited == {0: 60, 1: 130, 2: 50}
    assert sum(limited[p] - start[p] for p in start) == 90


def test_every_partition_with_backlog_progresses_even_when_tiny() -> None:
    start = {0: 0, 1: 0, 2: 0}
    end = {0: 10_000, 1: 1, 2: 2}
    limited = limit_offsets(start, end, 10)
    assert limited[1] == 1 and limited[2] >= 1
    assert sum(limited.values()) == 10


def test_cap_below_the_number_of_partitions_still_moves_each_by_one() -> None:
    assert limit_offsets({0: 0, 1: 5, 2: 9}, {0: 10, 1: 10, 2: 10}, 2) == {0: 1, 1: 6, 2: 10}


def test_everything_fits_or_nothing_to_read_returns_the_end() -> None:
    assert limit_offsets({0: 0, 1: 0}, {0: 3, 1: 4}, 7) == {0: 3, 1: 4}
    assert limit_offsets({0: 5}, {0: 5}, 1) == {0: 5}
    assert limit_offsets({0: 9, 1: 0}, {0: 2, 1: 100}, 10) == {0: 2, 1: 10}  # a reset keeps its end


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(-5, 1000)), min_size=1, max_size=8),
    st.integers(1, 3000),
)
def test_limit_properties(spans: list[tuple[int, int]], cap: int) -> None:
    start = {p: first for p, (first, _) in enumerate(spans)}
    end = {p: first + size for p, (first, size) in enumerate(spans)}
    limited = limit_offsets(start, end, cap)
    assert limited == limit_offsets(dict(reversed(start.items())), end, cap)
    backlog = {p: end[p] - start[p] for p in start if end[p] > start[p]}
    total = sum(backlog.values())
    taken = sum(limited[p] - start[p] for p in backlog)
    assert taken == (total if total <= cap else max(cap, len(backlog)))
    for p, first in start.items():
        if p in backlog:
            assert first + 1 <= limited[p] <= end[p]
        else:
            assert limited[p] == end[p]


# --- data loss -----------------------------------------------------------------------------------------------------


def test_ranges_are_planned_only_where_there_is_something_to_read() -> None:
    assert plan_range(TOPIC, 0, 5, 9, 0, fail_on_data_loss=True) == (5, 9)
    assert plan_range(TOPIC, 0, 9, 9, 0, fail_on_data_loss=True) is None


def test_deleted_offsets_fail_with_every_fact_and_how_to_skip() -> None:
    with pytest.raises(KafkaDataLossError) as raised:
        plan_range(TOPIC, 3, 5, 40, 12, fail_on_data_loss=True)
    error = raised.value
    assert (error.topic, error.partition, error.wanted, error.available, error.reset) == (TOPIC, 3, 5, 12, False)
    message = str(error)
    for fact in ("'events'", "partition 3", "offset 5", "earliest available offset is 12", "failOnDataLoss=false"):
        assert fact in message


def test_deleted_offsets_without_fail_warn_and_continue_from_earliest(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="scrutiny.connectors.kafka.offsets"):
        assert plan_range(TOPIC, 3, 5, 40, 12, fail_on_data_loss=False) == (12, 40)
        assert plan_range(TOPIC, 1, 5, 10, 12, fail_on_data_loss=False) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "partition 3" in warnings[0] and "offset 5" in warnings[0] and "continuing from offset 12" in warnings[0]


def test_an_end_below_the_start_is_a_reset() -> None:
    with pytest.raises(KafkaDataLossError, match="next offset to read is 50 but the partition now ends at 7"):
        plan_range(TOPIC, 0, 50, 7, 0, fail_on_data_loss=True)
    assert plan_range(TOPIC, 0, 50, 7, 0, fail_on_data_loss=False) is None


# --- options -------------------------------------------------------------------------------------------------------


def test_options_defaults_and_case_insensitive_names() -> None:
    parsed = parse_options({**BASE, "MAXOFFSETSPERTRIGGER": "100", "failondataloss": "FALSE", "pollTimeoutMs": "1500"})
    assert parsed.max_offsets_per_trigger == 100 and parsed.fail_on_data_loss is False
    assert parsed.poll_timeout_s == 1.5 and parsed.request_timeout_s == 30.0
    assert parsed.starting_offsets == StartingOffsets("earliest")
    assert parsed.client_kwargs() == {
        "bootstrap_servers": ["127.0.0.1:9092"],
        "security_protocol": "PLAINTEXT",
        "client_id": "scrutiny-kafka-source",
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bootstrap_servers": "h:1"}, "needs the option topic"),
        ({"topic": TOPIC}, "needs the option bootstrap_servers"),
        ({**BASE, "maxOffsetPerTrigger": "5"}, "unknown scrutiny_kafka source option 'maxOffsetPerTrigger'"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a positive integer"),
        ({**BASE, "pollTimeoutMs": "soon"}, "pollTimeoutMs must be a positive integer"),
        ({**BASE, "failOnDataLoss": "yes"}, "failOnDataLoss must be true or false"),
        ({**BASE, "bootstrap_servers": "nohost"}, "source options: .*not host:port"),
        ({**BASE, "security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}, "needs both .*sasl_password"),
        ({**BASE, "startingOffsets": "soonest"}, "startingOffsets"),
    ],
)
def test_bad_options_raise_config_errors_naming_them(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_options(options)


def test_source_options_come_from_the_kafka_settings_and_round_trip() -> None:
    kafka = KafkaSection(
        bootstrap_servers="b1:9093",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="checker",
        sasl_password=Secret("s3cret"),
    )
    options = source_options(kafka, TOPIC, maxOffsetsPerTrigger=500, failOnDataLoss=False, startingOffsets="latest")
    assert options == {
        "topic": TOPIC,
        "bootstrap_servers": "b1:9093",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_username": "checker",
        "sasl_password": "s3cret",
        "maxOffsetsPerTrigger": "500",
        "failOnDataLoss": "false",
        "startingOffsets": "latest",
    }
    parsed = parse_options(options)
    assert parsed.client_kwargs()["sasl_plain_password"] == "s3cret"
    assert "s3cret" not in repr(parsed) and "s3cret" not in str(parsed)
    specific = source_options(KafkaSection(bootstrap_servers="b:1"), TOPIC, startingOffsets={TOPIC: {"0": 4}})
    assert parse_options(specific).starting_offsets == StartingOffsets("specific", {0: 4})


def test_source_options_refuse_unknown_extras_and_bad_settings() -> None:
    with pytest.raises(ConfigError, match="unknown scrutiny_kafka source option 'startingOffset'"):
        source_options(KafkaSection(bootstrap_servers="b:1"), TOPIC, startingOffset="latest")
    with pytest.raises(ConfigError, match=r"kafka\.sasl_mechanism"):
        source_options(KafkaSection(bootstrap_servers="b:1", security_protocol="SASL_SSL"), TOPIC)


def test_reader_and_partitions_survive_pickling_for_the_executors() -> None:
    reader = KafkaStreamReader(parse_options({**BASE, "sasl_password": ""}))
    part = KafkaInputPartition(TOPIC, 2, 10, 20)
    copy = pickle.loads(pickle.dumps((reader, part)))
    assert copy[1] == part and isinstance(copy[0], KafkaStreamReader)
    assert copy[0]._options == reader._options
    assert pickle.loads(pickle.dumps(Secret("x"))) == Secret("x")


def test_the_data_source_has_its_short_name_and_fixed_schema() -> None:
    assert ScrutinyKafkaSource.name() == "scrutiny_kafka"
    assert ScrutinyKafkaSource(dict(BASE)).schema() == kafka_source.KAFKA_SOURCE_SCHEMA
    with pytest.raises(ConfigError, match="needs the option topic"):
        ScrutinyKafkaSource({"bootstrap_servers": "h:1"}).schema()


# --- the reader's planning against fake offset look-ups ---------------------------------------------------------------


class FakeBroker:
    """Earliest and end offsets per partition, served to the reader instead of a broker."""

    def __init__(self, earliest: dict[int, int], end: dict[int, int]) -> None:
        self.earliest = earliest
        self.end = end

    def earliest_offsets(
        self, _kwargs: Mapping[str, object], _topic: str, *, partitions: Sequence[int] | None = None, **_: Any
    ) -> dict[int, int]:
        return {p: self.earliest[p] for p in (partitions if partitions is not None else self.earliest)}

    def end_offsets(self, _kwargs: Mapping[str, object], _topic: str, **_: Any) -> dict[int, int]:
        return dict(self.end)


def fake_reader(monkeypatch: pytest.MonkeyPatch, broker: FakeBroker, **options: str) -> KafkaStreamReader:
    monkeypatch.setattr(kafka_source, "earliest_offsets", broker.earliest_offsets)
    monkeypatch.setattr(kafka_source, "end_offsets", broker.end_offsets)
    return KafkaStreamReader(parse_options({**BASE, **options}))


def offsets(values: dict[int, int]) -> dict[str, Any]:
    return encode_offsets(TOPIC, values)


def test_initial_offsets_follow_starting_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    broker = FakeBroker({0: 2, 1: 0}, {0: 9, 1: 4})
    assert fake_reader(monkeypatch, broker).initialOffset() == offsets({0: 2, 1: 0})
    assert fake_reader(monkeypatch, broker, startingOffsets="latest").initialOffset() == offsets({0: 9, 1: 4})
    specific = fake_reader(monkeypatch, broker, startingOffsets='{"events": {"0": -1, "1": 3}}')
    assert specific.initialOffset() == offsets({0: 9, 1: 3})


def test_latest_offset_caps_reads_and_starts_new_partitions_at_earliest(monkeypatch: pytest.MonkeyPatch) -> None:
    broker = FakeBroker({0: 0, 1: 0, 2: 40}, {0: 100, 1: 10, 2: 50})
    reader = fake_reader(monkeypatch, broker, maxOffsetsPerTrigger="20")
    assert reader.getDefaultReadLimit() == ReadMaxRows(20)
    start = offsets({0: 0, 1: 0})  # partition 2 is new: backlog 50 - 40
    assert reader.latestOffset(start, ReadAllAvailable()) == offsets({0: 100, 1: 10, 2: 50})
    assert reader.latestOffset(start, ReadMaxRows(20)) == offsets({0: 16, 1: 2, 2: 42})
    assert reader.reportLatestOffset() == offsets({0: 100, 1: 10, 2: 50})


def test_available_now_never_goes_past_the_ends_it_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    broker = FakeBroker({0: 0, 1: 0}, {0: 5, 1: 5})
    reader = fake_reader(monkeypatch, broker)
    assert reader.getDefaultReadLimit() == ReadAllAvailable()
    reader.prepareForTriggerAvailableNow()
    broker.end = {0: 9, 1: 7, 2: 3}  # more records, and a partition that came later
    broker.earliest[2] = 0
    assert reader.latestOffset(offsets({0: 1, 1: 5}), ReadAllAvailable()) == offsets({0: 5, 1: 5, 2: 0})


def test_a_partition_gone_from_the_topic_keeps_its_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    reader = fake_reader(monkeypatch, FakeBroker({0: 0}, {0: 4}))
    assert reader.latestOffset(offsets({0: 1, 1: 7}), ReadAllAvailable()) == offsets({0: 4, 1: 7})


def test_partitions_are_planned_per_kafka_partition_with_data(monkeypatch: pytest.MonkeyPatch) -> None:
    reader = fake_reader(monkeypatch, FakeBroker({0: 0, 1: 0, 2: 3}, {}))
    planned = reader.partitions(offsets({0: 4, 1: 6}), offsets({0: 9, 1: 6, 2: 5}))
    assert planned == [KafkaInputPartition(TOPIC, 0, 4, 9), KafkaInputPartition(TOPIC, 2, 3, 5)]
    assert reader.partitions(offsets({0: 4}), offsets({0: 4})) == []


def test_partitions_decide_data_loss_against_the_earliest_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    broker = FakeBroker({0: 10, 1: 0}, {})
    failing = fake_reader(monkeypatch, broker)
    with pytest.raises(KafkaDataLossError, match="partition 0: offset 4 is no longer available"):
        failing.partitions(offsets({0: 4, 1: 0}), offsets({0: 20, 1: 3}))
    lenient = fake_reader(monkeypatch, broker, failOnDataLoss="false")
    planned = lenient.partitions(offsets({0: 4, 1: 0}), offsets({0: 20, 1: 3}))
    assert planned == [KafkaInputPartition(TOPIC, 0, 10, 20), KafkaInputPartition(TOPIC, 1, 0, 3)]


def test_source_options_type_is_frozen() -> None:
    parsed = parse_options(dict(BASE))
    assert isinstance(parsed, SourceOptions)
    with pytest.raises(AttributeError):
        parsed.topic = "x"  # type: ignore[misc]


# --- read(): a fake consumer in place of the broker -----------------------------------------------------------------


class FakeConsumer:
    """One partition's log (offsets may have gaps) behind kafka-python's consumer calls that read() makes."""

    def __init__(self, offsets: Sequence[int], *, earliest: int = 0, per_poll: int = 3, delay_s: float = 0) -> None:
        self.log = sorted(offsets)
        self.delay_s = delay_s
        self.earliest = earliest
        self.end = self.log[-1] + 1 if self.log else earliest
        self.per_poll = per_poll
        self.position_ = 0
        self.polls = 0

    def assign(self, _tps: list[TopicPartition]) -> None:
        pass

    def seek(self, _tp: TopicPartition, offset: int) -> None:
        self.position_ = offset

    def position(self, _tp: TopicPartition) -> int:
        return self.position_

    def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, self.earliest)

    def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, self.end)

    def poll(self, timeout_ms: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        self.polls += 1
        time.sleep(self.delay_s)
        if self.position_ < self.earliest or self.position_ > self.end:
            raise OffsetOutOfRangeError({TopicPartition(TOPIC, 0): self.position_})
        ready = [o for o in self.log if o >= max(self.position_, self.earliest)][: self.per_poll]
        if not ready:
            time.sleep(min(timeout_ms, 20) / 1000)
            return {}
        self.position_ = ready[-1] + 1
        return {TopicPartition(TOPIC, 0): [record(o) for o in ready]}


def record(offset: int) -> ConsumerRecord:
    timestamp = -1 if offset == 2 else 1_700_000_000_000 + offset
    key, value = f"k{offset}".encode(), f"v{offset}".encode()
    return ConsumerRecord(TOPIC, 0, 0, offset, timestamp, 0, key, value, [], None, len(key), len(value), 0)


def read_with(
    monkeypatch: pytest.MonkeyPatch, consumer: FakeConsumer, start: int, end: int, **options: str
) -> list[tuple[Any, ...]]:
    @contextmanager
    def fake_open(*_args: object, **_kwargs: object) -> Iterator[FakeConsumer]:
        yield consumer

    monkeypatch.setattr(kafka_source, "open_consumer", fake_open)
    reader = KafkaStreamReader(parse_options({**BASE, **options}))
    return list(reader.read(KafkaInputPartition(TOPIC, 0, start, end)))


def test_read_yields_the_range_only_skipping_gaps(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = FakeConsumer([0, 1, 2, 5, 6, 9, 10, 11])  # gaps as left by compaction or transaction markers
    rows = read_with(monkeypatch, consumer, 1, 10)
    assert [row[2] for row in rows] == [1, 2, 5, 6, 9]
    assert rows[0] == (TOPIC, 0, 1, datetime(2023, 11, 14, 22, 13, 20, 1000, tzinfo=UTC), b"k1", b"v1")
    assert rows[1][3] is None  # a record without a timestamp


def test_read_of_deleted_offsets_is_data_loss_or_a_skip(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(KafkaDataLossError, match=r"offset 3 is no longer available.*earliest available offset is 6"):
        read_with(monkeypatch, FakeConsumer(range(6, 12), earliest=6), 3, 10)
    with caplog.at_level(logging.WARNING, logger="scrutiny.connectors.kafka.offsets"):
        rows = read_with(monkeypatch, FakeConsumer(range(6, 12), earliest=6), 3, 10, failOnDataLoss="false")
    assert [row[2] for row in rows] == [6, 7, 8, 9]
    assert any("offset 3" in r.getMessage() and "continuing from offset 6" in r.getMessage() for r in caplog.records)


def test_read_after_records_were_deleted_under_it_checks_the_earliest(monkeypatch: pytest.MonkeyPatch) -> None:
    class Retained(FakeConsumer):  # the broker answers from its earliest record instead of refusing the offset
        def poll(self, timeout_ms: int) -> dict[TopicPartition, list[ConsumerRecord]]:
            self.position_ = max(self.position_, self.earliest)
            return super().poll(timeout_ms)

    with pytest.raises(KafkaDataLossError, match="offset 1 is no longer available"):
        read_with(monkeypatch, Retained(range(4, 9), earliest=4), 1, 8)
    rows = read_with(monkeypatch, Retained(range(4, 9), earliest=4), 1, 8, failOnDataLoss="false")
    assert [row[2] for row in rows] == [4, 5, 6, 7]


def test_read_past_the_partition_end_is_a_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KafkaDataLossError, match="next offset to read is 20 but the partition now ends at 5"):
        read_with(monkeypatch, FakeConsumer(range(5)), 20, 25)
    assert read_with(monkeypatch, FakeConsumer(range(5)), 20, 25, failOnDataLoss="false") == []


def test_read_times_out_only_when_the_broker_stalls(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = FakeConsumer(range(40), per_poll=1, delay_s=0.01)  # 0.4 s in all, but never 0.15 s without a record
    started = time.monotonic()
    assert len(read_with(monkeypatch, slow, 0, 40, pollTimeoutMs="150")) == 40
    assert time.monotonic() - started > 0.3
    stalled = FakeConsumer(range(5))
    started = time.monotonic()
    with pytest.raises(
        KafkaBrokerTimeoutError, match=r"'events' partition 0: reading offsets 2\.\.9 stopped at offset 5"
    ):
        read_with(monkeypatch, stalled, 2, 10, pollTimeoutMs="150")
    assert 0.15 <= time.monotonic() - started < 2
