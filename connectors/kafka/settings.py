"""``[kafka]``: the event topic and how to reach the brokers (owned by this connector)."""

from __future__ import annotations

from dataclasses import dataclass

from scrutiny.core.errors import ConfigError
from scrutiny.core.secret import Secret


@dataclass(frozen=True, slots=True)
class KafkaSection:
    """``[kafka]``: brokers, topic (``scrutiny.ledger-events``), its size when created, and the client's security."""

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "scrutiny.ledger-events"
    partitions: int = 8
    replication_factor: int = 1
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: Secret = Secret()
    ssl_cafile: str = ""

    def __post_init__(self) -> None:
        for key in ("partitions", "replication_factor"):
            if getattr(self, key) < 1:
                raise ConfigError(f"kafka.{key} must be a positive integer, not {getattr(self, key)!r}")
