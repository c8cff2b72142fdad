"""A broker that cannot be reached at start is one line naming the servers, not a kafka-python traceback."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError

from scrutiny.connectors.kafka import publisher
from scrutiny.connectors.kafka.publisher import EventPublisher, PublishError, TopicConfig


def test_an_unreachable_broker_is_a_publish_error_naming_the_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_broker(**_: Any) -> None:
        raise KafkaTimeoutError("Unable to bootstrap")

    monkeypatch.setattr(publisher, "KafkaProducer", no_broker)
    with pytest.raises(
        PublishError, match=r"cannot reach Kafka at b1:9092,b2:9092 \(KafkaTimeoutError: Unable to bootstrap\)"
    ):
        EventPublisher({"bootstrap_servers": ["b1:9092", "b2:9092"]}, TopicConfig("events"))
