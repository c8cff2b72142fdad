"""``[zookeeper]``: where BookKeeper's metadata lives and how to log in (owned by this connector)."""

from __future__ import annotations

from dataclasses import dataclass

from scrutiny.core.errors import ConfigError
from scrutiny.core.secret import Secret

#: ``auth_scheme`` values: none, ZooKeeper digest, SASL (DIGEST-MD5).
AUTH_SCHEMES = ("", "digest", "sasl")


@dataclass(frozen=True, slots=True)
class ZooKeeperSection:
    """``[zookeeper]``: the ensemble, the ledgers root (or a BookKeeper metadata URI) and the session's login."""

    connect: str = "127.0.0.1:2181"
    metadata_uri: str = ""
    ledgers_root: str = "/ledgers"
    session_timeout_seconds: int = 30
    auth_scheme: str = ""
    auth_credentials: Secret = Secret()
    enable_security: bool = False

    def __post_init__(self) -> None:
        if self.enable_security and not self.auth_scheme.strip():
            raise ConfigError("zookeeper.enable_security needs zookeeper.auth_scheme (the creator's identity)")
        if self.session_timeout_seconds < 1:
            raise ConfigError(
                f"zookeeper.session_timeout_seconds must be a positive integer, not {self.session_timeout_seconds!r}"
            )
