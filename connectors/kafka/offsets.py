"""Kafka offsets for the Spark source: their JSON form, read limits, data-loss decisions, and the broker look-ups.

Pure parts (no broker): :func:`encode_offsets` / :func:`decode_offsets` (the offset document Spark
checkpoints, ``{"topic": "<topic>", "partitions": {"<partition>": next_offset}}``), :func:`parse_starting_offsets` and
:func:`resolve_starting_offsets` (the ``startingOffsets`` option), :func:`limit_offsets`
(``maxOffsetsPerTrigger``) and :func:`plan_range` (what one partition reads in a micro-batch, and
what happens when the offsets it wants are gone).

Broker look-ups, each with its own short-lived consumer (no group, never creating topics) and a
bound on its total time: :func:`topic_partitions`, :func:`earliest_offsets` (ListOffsets EARLIEST)
and :func:`end_offsets`, which takes each partition's end as the **high watermark of a fetch
response**. ListOffsets(LATEST) is exact on Kafka but too low on Tansu when a record batch holds
several records; the fetch starts at that listed offset (so it moves little or no data) and the
high watermark it reports is right on both.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaTimeoutError, OffsetOutOfRangeError

from scrutiny.core.errors import ConfigError, ScrutinyError

log = logging.getLogger(__name__)

#: ``startingOffsets`` JSON values meaning "the partition's earliest" and "its end" (Spark's Kafka source's).
EARLIEST_OFFSET = -2
LATEST_OFFSET = -1
DEFAULT_TIMEOUT_S = 30.0
#: fetch_max_wait_ms of the high-watermark probe: 0 makes Tansu answer nothing; 10 ms is answered at once.
_PROBE_WAIT_MS = 10
_PROBE_FETCH_BYTES = 64 * 1024
_POLL_SLICE_S = 0.5


class KafkaSourceError(ScrutinyError):
    """Root of the Kafka source's errors."""


class KafkaOffsetsError(KafkaSourceError, ValueError):
    """An offsets document (checkpointed, or the ``startingOffsets`` option) that does not fit the topic."""


class KafkaTopicNotFoundError(KafkaSourceError):
    """The topic does not exist (or the client may not see it); the source never creates topics."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(
            f"Kafka topic {topic!r} does not exist or is not visible to this client "
            "(the source never creates topics: create it, or start the watcher, which does)"
        )


class KafkaBrokerTimeoutError(KafkaSourceError):
    """The broker did not answer or deliver within the configured time; says what was asked."""


class KafkaDataLossError(KafkaSourceError):
    """Offsets the query needs are gone from the partition.

    ``wanted`` is the offset the query would read next; ``available`` the earliest offset still
    there (records deleted, e.g. by retention) or, when ``reset`` is true, the partition's new end
    (the topic was recreated or truncated below what was read).
    """

    def __init__(self, topic: str, partition: int, wanted: int, available: int, *, reset: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        self.wanted = wanted
        self.available = available
        self.reset = reset
        if reset:
            what = (
                f"the next offset to read is {wanted} but the partition now ends at {available} "
                "(the topic was recreated or truncated)"
            )
        else:
            what = (
                f"offset {wanted} is no longer available, the earliest available offset is {available} "
                f"(records {wanted}..{available - 1} were deleted, e.g. by retention)"
            )
        super().__init__(
            f"data loss on Kafka topic {topic!r} partition {partition}: {what}; "
            f"set the source option failOnDataLoss=false to skip to offset {available} and continue"
        )


# --- the offset document -------------------------------------------------------------------------------------------


def encode_offsets(topic: str, offsets: Mapping[int, int]) -> dict[str, Any]:
    """The JSON-serialisable offset Spark checkpoints: ``{"topic": t, "partitions": {"<partition>": next_offset}}``.

    Partitions are sorted, so equal offsets always serialise to the same text.
    """
    return {"topic": topic, "partitions": {str(p): int(offsets[p]) for p in sorted(offsets)}}


def decode_offsets(topic: str, document: object) -> dict[int, int]:
    """The partition -> next offset map of an offset document of ``topic``; KafkaOffsetsError if it is not one."""
    if not isinstance(document, Mapping) or set(document) != {"topic", "partitions"}:
        raise KafkaOffsetsError(
            f'offsets {json.dumps(document, default=str)[:200]} are not {{"topic": ..., "partitions": {{...}}}}'
        )
    if document["topic"] != topic:
        raise KafkaOffsetsError(
            f"the checkpointed offsets are for Kafka topic {document['topic']!r}, this source reads {topic!r}; "
            "a checkpoint belongs to one topic: use a new checkpoint location for another topic"
        )
    return _partition_offsets(topic, document["partitions"], minimum=0)


def _partition_offsets(topic: str, per_partition: object, *, minimum: int) -> dict[int, int]:
    if not isinstance(per_partition, Mapping):
        raise KafkaOffsetsError(f"offsets of Kafka topic {topic!r} must be an object of partition: offset")
    result: dict[int, int] = {}
    for key, value in per_partition.items():
        if not isinstance(key, str) or not (key.isascii() and key.isdigit()):
            raise KafkaOffsetsError(f"Kafka topic {topic!r}: partition {key!r} is not a partition number")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise KafkaOffsetsError(f"Kafka topic {topic!r} partition {key}: offset {value!r} is not an offset")
        result[int(key)] = value
    return result


@dataclass(frozen=True, slots=True)
class StartingOffsets:
    """The ``startingOffsets`` option: ``earliest``, ``latest``, or per-partition offsets (-2 earliest, -1 end)."""

    kind: str
    offsets: Mapping[int, int] | None = None


def parse_starting_offsets(text: str, topic: str) -> StartingOffsets:
    """Parse ``startingOffsets``: ``earliest``, ``latest``, or per-partition offsets as JSON.

    The JSON is Spark's Kafka source's ``{"<topic>": {"<partition>": offset}}`` or this source's own
    offset document (as in the query's progress). Runs when the options are read; ConfigError
    naming the option on anything else.
    """
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return StartingOffsets(word)
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise ConfigError(
            f"option startingOffsets must be earliest, latest or a JSON object "
            f'{{"{topic}": {{"0": offset, ...}}}}, not {text!r}'
        )
    if set(document) == {"topic", "partitions"}:
        document = {document["topic"]: document["partitions"]}
    if set(document) != {topic}:
        raise ConfigError(f"option startingOffsets names topics {sorted(document)}, but the source reads {topic!r}")
    try:
        offsets = _partition_offsets(topic, document[topic], minimum=EARLIEST_OFFSET)
    except KafkaOffsetsError as error:
        raise ConfigError(f"option startingOffsets: {error}") from None
    return StartingOffsets("specific", offsets)


def resolve_starting_offsets(
    topic: str, starting: StartingOffsets, earliest: Mapping[int, int], end: Mapping[int, int]
) -> dict[int, int]:
    """The first offsets of a new query, given the partitions' earliest and end offsets (runs on the driver).

    Per-partition offsets must name exactly the topic's partitions; -2 and -1 become the earliest and end.
    """
    if starting.kind == "earliest":
        return dict(earliest)
    if starting.kind == "latest":
        return dict(end)
    given = dict(starting.offsets or {})
    if set(given) != set(end):
        raise KafkaOffsetsError(
            f"option startingOffsets must give every partition of Kafka topic {topic!r} "
            f"(partitions {sorted(end)}), it gives {sorted(given)}"
        )
    special = {EARLIEST_OFFSET: earliest, LATEST_OFFSET: end}
    return {p: special[offset][p] if offset in special else offset for p, offset in sorted(given.items())}


# --- planning ------------------------------------------------------------------------------------------------------


def limit_offsets(start: Mapping[int, int], end: Mapping[int, int], max_records: int) -> dict[int, int]:
    """End offsets that read at most ``max_records`` in all from ``start`` (``maxOffsetsPerTrigger``).

    The cap is shared in proportion to each partition's backlog (``end - start``); every partition
    with a backlog gets at least one record, so the total exceeds the cap only when the cap is
    smaller than the number of such partitions. Exact integer arithmetic (largest remainders, ties
    to the lower partition): the same inputs always give the same offsets. A partition whose end is
    below its start (a reset, see :func:`plan_range`) keeps its end.
    """
    if max_records < 1:
        raise ValueError(f"max_records must be positive, not {max_records}")
    backlog = {p: end[p] - start[p] for p in end if p in start and end[p] > start[p]}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(end)
    quota = dict.fromkeys(backlog, 1)
    spare = max(0, max_records - len(backlog))
    weights = {p: size - 1 for p, size in backlog.items()}
    weight_total = sum(weights.values())
    if spare and weight_total:
        shares = {p: divmod(spare * weight, weight_total) for p, weight in weights.items()}
        for p, (whole, _) in shares.items():
            quota[p] += whole
        leftover = spare - sum(whole for whole, _ in shares.values())
        by_remainder = sorted(shares, key=lambda p: (-shares[p][1], p))
        for p in by_remainder[:leftover]:
            quota[p] += 1
    return {p: start[p] + quota[p] if p in quota else offset for p, offset in end.items()}


def plan_range(
    topic: str, partition: int, start: int, end: int, earliest: int, *, fail_on_data_loss: bool
) -> tuple[int, int] | None:
    """The offsets ``[first, end)`` one partition reads in a micro-batch, or None when there is nothing to read.

    Runs on the driver when Spark plans a batch. When ``start`` is below the earliest available
    offset (records deleted) or ``end`` is below ``start`` (the partition was reset), this is data
    loss: KafkaDataLossError with ``fail_on_data_loss``, otherwise a warning with the same facts and
    the batch goes on from what is there.
    """
    if end < start:
        report_data_loss(KafkaDataLossError(topic, partition, start, end, reset=True), fail_on_data_loss)
        return None
    if start < earliest:
        report_data_loss(KafkaDataLossError(topic, partition, start, earliest), fail_on_data_loss)
        start = earliest
    return (start, end) if start < end else None


def report_data_loss(error: KafkaDataLossError, fail_on_data_loss: bool) -> None:
    """Raise ``error`` when data loss must fail the query; otherwise log it as a warning."""
    if fail_on_data_loss:
        raise error
    log.warning("%s (failOnDataLoss=false: continuing from offset %d)", error, error.available)


# --- broker look-ups -----------------------------------------------------------------------------------------------


@contextmanager
def open_consumer(
    client_kwargs: Mapping[str, object], timeout_s: float, purpose: str, **overrides: Any
) -> Iterator[KafkaConsumer]:
    """A KafkaConsumer with no group, no auto-commit and no topic creation, closed on exit.

    ``client_kwargs`` are the connection arguments (``kafka_config.consumer_kwargs``); requests
    and the bootstrap give up after ``timeout_s``, raising KafkaBrokerTimeoutError that names
    ``purpose`` and the servers. Out-of-range positions raise (``auto_offset_reset='none'``): the
    caller decides what data loss means.
    """
    timeout_ms = max(int(timeout_s * 1000), 1000)
    options: dict[str, Any] = {
        **client_kwargs,
        "group_id": None,
        "enable_auto_commit": False,
        "allow_auto_create_topics": False,
        "auto_offset_reset": "none",
        "request_timeout_ms": timeout_ms,
        "bootstrap_timeout_ms": timeout_ms,
        "metrics_enabled": False,
        **overrides,
    }
    try:
        consumer = KafkaConsumer(**options)
        try:
            yield consumer
        finally:
            consumer.close(timeout_ms=min(timeout_ms, 5000))
    except KafkaTimeoutError as error:
        servers = options.get("bootstrap_servers")
        raise KafkaBrokerTimeoutError(
            f"{purpose}: Kafka ({servers}) did not answer within {timeout_s:g} s: {error}"
        ) from error


def topic_partitions(consumer: KafkaConsumer, topic: str) -> list[int]:
    """The topic's partition numbers, sorted; KafkaTopicNotFoundError when it does not exist."""
    partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        raise KafkaTopicNotFoundError(topic)
    return sorted(partitions)


def _assign(consumer: KafkaConsumer, topic: str, partitions: Sequence[int] | None) -> list[TopicPartition]:
    known = topic_partitions(consumer, topic)
    wanted = known if partitions is None else sorted(partitions)
    missing = sorted(set(wanted) - set(known))
    if missing:
        raise KafkaOffsetsError(f"Kafka topic {topic!r} has no partitions {missing} (it has {known})")
    tps = [TopicPartition(topic, p) for p in wanted]
    consumer.assign(tps)
    return tps


def earliest_offsets(
    client_kwargs: Mapping[str, object],
    topic: str,
    *,
    partitions: Sequence[int] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[int, int]:
    """Each partition's earliest available offset (all partitions by default), within ``timeout_s``."""
    with open_consumer(client_kwargs, timeout_s, f"earliest offsets of Kafka topic {topic!r}") as consumer:
        tps = _assign(consumer, topic, partitions)
        listed = consumer.beginning_offsets(tps, timeout_ms=int(timeout_s * 1000))
        return {tp.partition: int(listed[tp]) for tp in tps}


def end_offsets(
    client_kwargs: Mapping[str, object],
    topic: str,
    *,
    partitions: Sequence[int] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[int, int]:
    """Each partition's end (the offset the next record will get) as the high watermark of a fetch.

    Correct on Tansu and Kafka alike (see the module docstring). KafkaBrokerTimeoutError when some
    partition's fetch does not answer within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    with open_consumer(
        client_kwargs,
        timeout_s,
        f"end offsets of Kafka topic {topic!r}",
        fetch_max_wait_ms=_PROBE_WAIT_MS,
        max_partition_fetch_bytes=_PROBE_FETCH_BYTES,
    ) as consumer:
        tps = _assign(consumer, topic, partitions)
        listed = consumer.end_offsets(tps, timeout_ms=int(timeout_s * 1000))
        for tp in tps:
            consumer.seek(tp, listed[tp])
        while True:
            highwater = {tp: consumer.highwater(tp) for tp in tps}
            if all(value is not None for value in highwater.values()):
                return {tp.partition: int(highwater[tp]) for tp in tps}
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                waiting = sorted(tp.partition for tp, value in highwater.items() if value is None)
                raise KafkaBrokerTimeoutError(
                    f"no fetch response with the end offset of Kafka topic {topic!r} partitions {waiting} "
                    f"within {timeout_s:g} s"
                )
            try:
                consumer.poll(timeout_ms=int(min(remaining, _POLL_SLICE_S) * 1000))
            except OffsetOutOfRangeError:  # a listed end past the log (not seen on Kafka or Tansu): probe from start
                consumer.seek_to_beginning()
