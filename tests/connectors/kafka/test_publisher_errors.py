"""A broker that cannot be reached at start is one line naming the servers, within the publisher's blocking time."""

from __future__ import annotations

import time

import pytest

from scrutiny.connectors.kafka.publisher import EventPublisher, PublishError, TopicConfig
from scrutiny.core.errors import ConfigError
from scrutiny.services.servers import free_port


def test_an_unreachable_broker_is_a_publish_error_naming_the_servers() -> None:
    servers = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]  # nothing listens there
    started = time.monotonic()
    with pytest.raises(PublishError, match=rf"cannot reach Kafka at {servers[0]},{servers[1]} \(.+\)"):
        EventPublisher({"bootstrap_servers": servers}, TopicConfig("events", max_block_ms=1500))
    assert time.monotonic() - started < 10


def test_an_argument_that_is_not_a_connections_is_refused_before_any_connection() -> None:
    with pytest.raises(ConfigError, match="not a Kafka connection argument: linger_ms"):
        EventPublisher({"bootstrap_servers": ["127.0.0.1:1"], "linger_ms": 5}, TopicConfig("events"))
