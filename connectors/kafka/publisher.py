"""Publishing the watcher's events to Kafka (kafka-python), in order and without loss.

* ledger events go to the partition of their key (the ledger id), cluster-wide events to every
  partition with the key ``cluster``;
* ``acks=all``, idempotent where the broker supports it (kafka-python's default), retries
  within a delivery timeout; per partition order is kept (idempotence, or one request in flight);
* memory is bounded: at most ``max_pending`` records wait for Kafka's acknowledgement;
  :meth:`EventPublisher.publish` blocks while that many are pending (backpressure on the
  watcher) and raises :class:`PublishError` when none completes within ``max_block_ms``, so the
  caller keeps the event and tries again;
* a record that still fails after the delivery timeout sets :attr:`EventPublisher.broken`; the
  watcher then republishes the whole state as a snapshot, whose end marker tells consumers
  that everything not in it is gone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from scrutiny.connectors.kafka.events import CLUSTER_KEY, CLUSTER_KINDS, ledger_key
from scrutiny.core.errors import ScrutinyError
from scrutiny.proto import ledger_events_pb2 as pb

log = logging.getLogger(__name__)


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
        self._options = dict(client_options)
        self._on_ack = on_ack
        self._sequence = 0
        self._lock = threading.Lock()
        self.broken: str | None = None
        self._pending = threading.BoundedSemaphore(config.max_pending)
        self._in_flight = 0
        listed = self._options.get("bootstrap_servers", "")
        servers = listed if isinstance(listed, str) else ",".join(listed)
        try:
            self._producer = KafkaProducer(
                **self._options,
                acks="all",
                linger_ms=5,
                allow_auto_create_topics=False,
                max_block_ms=config.max_block_ms,
                delivery_timeout_ms=config.delivery_timeout_ms,
                request_timeout_ms=min(30_000, config.delivery_timeout_ms),
            )
        except KafkaError as error:
            raise PublishError(f"cannot reach Kafka at {servers} ({error or type(error).__name__})") from None
        try:
            self.partitions = self.ensure_topic()
        except KafkaError as error:
            self._producer.close(timeout=1)
            raise PublishError(f"cannot use topic {config.topic} on Kafka at {servers} ({error})") from None

    def ensure_topic(self) -> list[int]:
        """The topic's partitions, creating the topic with the configured partition count if missing."""
        admin = KafkaAdminClient(**self._options)
        try:
            if self.config.topic not in set(admin.list_topics()):
                topic = NewTopic(self.config.topic, self.config.partitions, self.config.replication_factor)
                try:
                    admin.create_topics([topic])
                    log.info("created topic %s with %d partitions", self.config.topic, self.config.partitions)
                except TopicAlreadyExistsError:
                    pass  # another watcher created it meanwhile
        finally:
            admin.close()
        return sorted(self._wait_for_partitions())

    def _wait_for_partitions(self, timeout_s: float = 30.0) -> set[int]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                partitions = self._producer.partitions_for(self.config.topic)
            except KafkaError:
                partitions = None
            if partitions:
                return set(partitions)
            time.sleep(0.1)
        raise PublishError(f"topic {self.config.topic} has no partitions after {timeout_s:.0f} s")

    def publish(self, event: pb.LedgerEvent) -> None:
        """Send one event (to every partition when it is cluster-wide); blocks while the buffer is full."""
        with self._lock:
            self._sequence += 1
            event.sequence = self._sequence
        value = event.SerializeToString()
        started = time.monotonic()
        try:
            if event.kind in CLUSTER_KINDS:
                for partition in self.partitions:
                    self._send(value, CLUSTER_KEY, partition, event.kind, started)
            else:
                self._send(value, ledger_key(event.ledger_id), None, event.kind, started)
        except KafkaError as error:
            raise PublishError(f"cannot publish to {self.config.topic}: {error}") from error

    def _send(self, value: bytes, key: bytes, partition: int | None, kind: int, started: float) -> None:
        if not self._pending.acquire(timeout=self.config.max_block_ms / 1000):
            raise PublishError(f"{self.config.max_pending} events still unacknowledged by Kafka")
        try:
            future = self._producer.send(self.config.topic, value=value, key=key, partition=partition)
        except BaseException:
            self._pending.release()
            raise
        with self._lock:
            self._in_flight += 1
        future.add_callback(lambda _: self._acked(kind, started))
        future.add_errback(self._failed)

    @property
    def unacknowledged(self) -> int:
        """Events handed to the producer that Kafka has not acknowledged (nor failed) yet."""
        with self._lock:
            return self._in_flight

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1
        self._pending.release()

    def _acked(self, kind: int, started: float) -> None:
        self._done()
        if self._on_ack is not None:
            self._on_ack(kind, time.monotonic() - started)

    def _failed(self, error: Exception) -> None:
        self._done()
        log.error("an event could not be delivered to %s: %s", self.config.topic, error)
        self.broken = str(error)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every event sent so far is acknowledged (or failed)."""
        try:
            self._producer.flush(timeout=timeout_s)
        except KafkaError as error:
            raise PublishError(f"flush to {self.config.topic} failed: {error}") from error

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush what can be flushed within ``timeout_s`` and close the producer."""
        self._producer.close(timeout=timeout_s)


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
