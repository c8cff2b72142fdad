"""A broker that cannot be reached at start is one line naming the servers, within the publisher's blocking time."""

from __future__ import annotations

import time
from pathlib import Path

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


def test_settings_librdkafka_refuses_are_a_config_error_naming_the_servers(tmp_path: Path) -> None:
    not_a_certificate = tmp_path / "ca.pem"
    not_a_certificate.write_text("-----BEGIN CERTIFICATE-----\nnonsense\n-----END CERTIFICATE-----\n")
    options = {"bootstrap_servers": ["127.0.0.1:1"], "security_protocol": "SSL", "ssl_cafile": str(not_a_certificate)}
    with pytest.raises(ConfigError, match=r"the Kafka settings for 127\.0\.0\.1:1 are refused: .*ssl"):
        EventPublisher(options, TopicConfig("events"))
