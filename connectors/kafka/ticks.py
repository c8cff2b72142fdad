"""The streaming checker's own ``TICK`` events: what wakes its query when a timer is due
(:mod:`scrutiny.streaming.checker.timer_wake`)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from kafka import KafkaProducer
from kafka.errors import KafkaError

from scrutiny.connectors.kafka.events import CLUSTER_KEY, Publisher, marker_event
from scrutiny.connectors.kafka.publisher import PublishError
from scrutiny.proto import ledger_events_pb2 as pb


class TickSender:
    """Sends a ``TICK`` of the checker to partition 0 of the topic (one partition is enough: every task of the
    stateful step runs in every batch); the producer is made at the first tick."""

    def __init__(self, producer_options: Mapping[str, object], topic: str, publisher: Publisher) -> None:
        self.options = dict(producer_options)
        self.topic = topic
        self.publisher = publisher
        self._producer: KafkaProducer | None = None

    def __call__(self) -> None:
        """Send one tick and wait for Kafka's acknowledgement; PublishError when it cannot be sent."""
        tick = marker_event(pb.EventKind.TICK, pb.Origin.LIVE, self.publisher, observed_ms=time.time_ns() // 10**6)
        try:
            if self._producer is None:
                self._producer = KafkaProducer(**{**self.options, "max_block_ms": 10_000})
            future = self._producer.send(self.topic, value=tick.SerializeToString(), key=CLUSTER_KEY, partition=0)
            future.get(timeout=10)
        except KafkaError as error:
            raise PublishError(f"cannot send a tick to {self.topic}: {error or type(error).__name__}") from None

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=5)
