"""``[bookies]``: how the checker reaches the bookies (owned by this connector; docs/bookie_access.md).

The keys are those of :class:`~scrutiny.connectors.bookies.fetch.FetchConfig`, which checks the rest when
:func:`~scrutiny.connectors.bookies.fetch.fetch_config_from_settings` builds it; the per-bookie maps are
written flat as ``id=value, id=value``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scrutiny.core.errors import ConfigError
from scrutiny.core.secret import Secret


@dataclass(frozen=True, slots=True)
class BookiesSection:
    """``[bookies]``: protocol choice, timeouts, per-bookie overrides, the agent's token and TLS, limits."""

    protocol: str = "auto"
    request_timeout_seconds: float = 5.0
    connect_timeout_seconds: float = 2.0
    protocols: str = ""
    v3_overrides: str = ""
    agent_overrides: str = ""
    agent_token: Secret = Secret()
    agent_tls: bool = False
    agent_ca_file: str = ""
    v3_tls: bool = False
    v3_tls_mode: str = "starttls"
    v3_ca_file: str = ""
    v3_cert_file: str = ""
    v3_key_file: str = ""
    max_ledgers_per_call: int = 500
    max_in_flight_per_bookie: int = 1000

    def __post_init__(self) -> None:
        for key in ("request_timeout_seconds", "connect_timeout_seconds"):
            value = getattr(self, key)
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"bookies.{key} must be a positive number of seconds, not {value!r}")
