"""Publishing the watcher's events to Kafka, in order and without loss.

The producer is librdkafka's (confluent-kafka): a first snapshot publishes one record per ledger, and
kafka-python's producer costs 70–105 µs of Python per record on this project's machines against ~10 µs
(bench/README.md, "Watcher snapshot"). The rest of the project's Kafka clients are kafka-python's.

* ledger events go to the partition of their key (the ledger id), hashed with murmur2 as Apache Kafka's Java
  client and kafka-python do (``murmur2_random``), so a ledger keeps its partition whichever client published it;
  cluster-wide events go to every partition with the key ``cluster``;
* ``acks=all`` and idempotent: retries within the delivery timeout keep each partition's order;
* memory is bounded: at most ``max_pending`` records wait for Kafka's acknowledgement;
  :meth:`EventPublisher.publish` blocks while that many are pending (backpressure on the
  watcher) and raises :class:`PublishError` when none completes within ``max_block_ms``, so the
  caller keeps the event and tries again;
* a record that still fails after the delivery timeout sets :attr:`EventPublisher.broken`; the
  watcher then republishes the whole state as a snapshot, whose end marker tells consumers
  that everything not in it is gone.

Acknowledgements are taken (and the observer called) on the publishing thread, in :meth:`EventPublisher.publish`,
:meth:`~EventPublisher.flush` and when :attr:`~EventPublisher.broken` or :attr:`~EventPublisher.unacknowledged`
is read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from kafka import KafkaAdminClient

from scrutiny.connectors.kafka.config import librdkafka_config
from scrutiny.connectors.kafka.events import CLUSTER_KEY, CLUSTER_KINDS, ledger_key
from scrutiny.core.errors import ConfigError, ScrutinyError
from scrutiny.proto import ledger_events_pb2 as pb

log = logging.getLogger(__name__)

#: The largest record the producer sends (what kafka-python allowed; librdkafka's default is 1,000,000 bytes).
MAX_RECORD_BYTES = 1_048_576
#: How often a publish blocked on a full buffer looks for acknowledgements.
_BLOCKED_POLL_S = 0.05


class PublishError(ScrutinyError):
    """Kafka did not take the event (unreachable, buffer full for too long); nothing was lost: retry."""


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """The event topic and how to create it when it is missing."""

    topic: str
    partitions: int = 8
    replication_factor: int = 1
    delivery_timeout_ms: int = 3_600_000
    max_pending: int = 20_000
    max_block_ms: int = 10_000


Observer = Callable[[int, float], None]  # (event kind, seconds from send to acknowledgement)


class EventPublisher:
    """One producer for the event topic; stamps each event's sequence number when it is sent."""

    def __init__(self, client_options: Mapping[str, Any], config: TopicConfig, *, on_ack: Observer | None = None):
        """``client_options``: kafka-python connection arguments only (servers, security, client id)."""
        self.config = config
        self._connection = librdkafka_config(client_options)
        self._servers = self._connection["bootstrap.servers"]
        self._on_ack = on_ack
        self._sequence = 0
        self._lock = threading.Lock()
        self._broken: str | None = None
        try:
            self._producer = Producer(
                {
                    **self._connection,
                    "logger": log,
                    "acks": "all",
                    "enable.idempotence": True,
                    "partitioner": "murmur2_random",
                    # A topic deleted under the watcher is not silently made again with the broker's partitions.
                    "allow.auto.create.topics": False,
                    "message.max.bytes": MAX_RECORD_BYTES,
                    "linger.ms": 5,
                    "queue.buffering.max.messages": config.max_pending,
                    "delivery.timeout.ms": config.delivery_timeout_ms,
                    "request.timeout.ms": min(30_000, config.delivery_timeout_ms),
                }
            )
        except KafkaException as error:  # librdkafka refused the settings (a CA file that is no certificate, ...)
            raise ConfigError(f"the Kafka settings for {self._servers} are refused: {_reason(error)}") from None
        self.partitions = self.ensure_topic()

    def ensure_topic(self) -> list[int]:
        """The topic's partitions, creating the topic with the configured partition count if missing."""
        timeout_s = self.config.max_block_ms / 1000
        with AdminClient(dict(self._connection), logger=log) as admin:
            try:
                listed = admin.list_topics(timeout=timeout_s).topics
            except KafkaException as error:
                raise PublishError(f"cannot reach Kafka at {self._servers} ({_reason(error)})") from None
            if self.config.topic not in listed:
                self._create_topic(admin, timeout_s)
        return sorted(self._wait_for_partitions())

    def _create_topic(self, admin: AdminClient, timeout_s: float) -> None:
        topic = NewTopic(self.config.topic, self.config.partitions, self.config.replication_factor)
        try:
            # The request gives up after timeout_s; its future is then settled a moment later.
            admin.create_topics([topic], request_timeout=timeout_s)[self.config.topic].result(timeout_s + 5)
            log.info("created topic %s with %d partitions", self.config.topic, self.config.partitions)
        except KafkaException as error:
            if _code(error) != KafkaError.TOPIC_ALREADY_EXISTS:  # else another watcher created it meanwhile
                raise PublishError(
                    f"cannot create topic {self.config.topic} on Kafka at {self._servers} ({_reason(error)})"
                ) from None
        except TimeoutError:
            raise PublishError(f"Kafka at {self._servers} did not create topic {self.config.topic} in time") from None

    def _wait_for_partitions(self, timeout_s: float = 30.0) -> set[int]:
        deadline = time.monotonic() + timeout_s
        topic = self.config.topic
        while (left := deadline - time.monotonic()) > 0:
            try:
                listed = self._producer.list_topics(topic, timeout=left).topics.get(topic)
            except KafkaException:
                listed = None
            if listed is not None and listed.error is None and listed.partitions:
                return set(listed.partitions)
            time.sleep(0.1)
        raise PublishError(f"topic {topic} has no partitions after {timeout_s:.0f} s")

    def publish(self, event: pb.LedgerEvent) -> None:
        """Send one event (to every partition when it is cluster-wide); blocks while the buffer is full."""
        with self._lock:
            self._sequence += 1
            event.sequence = self._sequence
        value = event.SerializeToString()
        delivered = partial(self._delivered, event.kind)
        if event.kind in CLUSTER_KINDS:
            for partition in self.partitions:
                self._send(value, CLUSTER_KEY, partition, delivered)
        else:
            self._send(value, ledger_key(event.ledger_id), None, delivered)
        self._producer.poll(0)

    def _send(self, value: bytes, key: bytes, partition: int | None, delivered: Callable[..., None]) -> None:
        topic = self.config.topic
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while True:
            try:
                if partition is None:
                    self._producer.produce(topic, value, key, on_delivery=delivered)
                else:
                    self._producer.produce(topic, value, key, partition, on_delivery=delivered)
                return
            except BufferError:  # max_pending records wait for their acknowledgement
                if time.monotonic() >= deadline:
                    raise PublishError(f"{self.config.max_pending} events still unacknowledged by Kafka") from None
                self._producer.poll(_BLOCKED_POLL_S)
            except KafkaException as error:
                reason = error.args[0] if error.args else None
                if isinstance(reason, KafkaError) and reason.fatal():  # every later record would fail the same way
                    self._broken = reason.str()
                raise PublishError(f"cannot publish to {topic}: {_reason(error)}") from None

    def _delivered(self, kind: int, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            log.error("an event could not be delivered to %s: %s", self.config.topic, error.str())
            self._broken = error.str()
        elif self._on_ack is not None:
            self._on_ack(kind, message.latency() or 0.0)

    @property
    def broken(self) -> str | None:
        """Why a record was lost (it failed after the delivery timeout) or no record can be sent any more (the
        producer hit a fatal error); None while neither happened. A broken publisher is closed and replaced."""
        self._producer.poll(0)
        return self._broken

    @property
    def unacknowledged(self) -> int:
        """Events handed to the producer that Kafka has not acknowledged (nor failed) yet."""
        self._producer.poll(0)
        return len(self._producer)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every event sent so far is acknowledged (or failed)."""
        left = self._producer.flush(-1 if timeout_s is None else timeout_s)
        if left:
            raise PublishError(f"flush to {self.config.topic}: {left} events not acknowledged after {timeout_s:g} s")

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush what can be flushed within ``timeout_s``, drop what is still queued (so it does not reach Kafka after
        the events of this publisher's successor; a request already sent may still be written, which consumers
        tolerate: they keep the newest version of each node) and close the producer, its threads and connections."""
        left = self._producer.flush(timeout_s)
        if left:
            log.warning("%d events to %s were not acknowledged when the publisher closed", left, self.config.topic)
            self._producer.purge()
            self._producer.flush(0)  # their delivery reports: nothing refers to the producer any more
        self._producer.close()


def _code(error: KafkaException) -> int | None:
    reason = error.args[0] if error.args else None
    return reason.code() if isinstance(reason, KafkaError) else None


def _reason(error: KafkaException) -> str:
    reason = error.args[0] if error.args else None
    return reason.str() if isinstance(reason, KafkaError) else str(error) or type(error).__name__


def delete_topic(admin_options: Mapping[str, Any], topic: str, *, timeout_s: float = 30.0) -> bool:
    """Delete ``topic`` if it exists and wait until the broker no longer lists it; True if there was one to delete.

    For a development broker whose events belong to a cluster that no longer exists (the embedded default starts a
    new simulated cluster and a new checkpoint every run). PublishError when the topic is still listed after
    ``timeout_s``.
    """
    admin = KafkaAdminClient(**admin_options)
    try:
        if topic not in set(admin.list_topics()):
            return False
        admin.delete_topics([topic])
        deadline = time.monotonic() + timeout_s
        while topic in set(admin.list_topics()):
            if time.monotonic() >= deadline:
                raise PublishError(f"topic {topic} is still there {timeout_s:g} s after its deletion")
            time.sleep(0.1)
        return True
    finally:
        admin.close()
