"""The one frozen settings object: built-in defaults, then a TOML file, then the environment.

Loaded once when a command starts. Each TOML section is a frozen dataclass below whose fields
are the keys (their defaults are the values documented in ``conf/scrutiny.toml``). A file may
set any subset; ``SCRUTINY_<SECTION>_<KEY>`` environment variables override it, and the short
``SCRUTINY_ZOOKEEPER`` / ``SCRUTINY_KAFKA`` (printed by ``scrutiny services up``) set the
connection strings. Unknown sections or keys and values of the wrong type are errors
(:class:`ConfigError` naming the key), never silently ignored. Secrets are :class:`Secret`
values: their repr never shows them.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scrutiny.core.errors import ConfigError
from scrutiny.core.placement import PlacementConfig, PlacementPolicy
from scrutiny.core.secret import Secret
from scrutiny.core.verdict import DEFAULT_UNDER_REPLICATION_GRACE_MS, VerdictConfig

ENV_PREFIX = "SCRUTINY_"
CONFIG_ENV = "SCRUTINY_CONFIG"
#: Short variables that ``scrutiny services up`` prints, and what they set.
ENV_ALIASES = {"SCRUTINY_ZOOKEEPER": ("zookeeper", "connect"), "SCRUTINY_KAFKA": ("kafka", "bootstrap_servers")}


@dataclass(frozen=True, slots=True)
class VerdictSection:
    """``[verdict]``."""

    under_replication_grace_seconds: int = DEFAULT_UNDER_REPLICATION_GRACE_MS // 1000


@dataclass(frozen=True, slots=True)
class PlacementSection:
    """``[placement]``: the cluster's placement policy (BookKeeper's defaults)."""

    policy: str = PlacementPolicy.NONE.value
    min_racks_per_write_quorum: int = 2
    enforce_min_racks_per_write_quorum: bool = False
    min_zones_per_write_quorum: int = 2
    desired_zones_per_write_quorum: int = 3
    default_rack: str = PlacementConfig().default_rack


@dataclass(frozen=True, slots=True)
class ZooKeeperSection:
    """``[zookeeper]``: where BookKeeper's metadata lives."""

    connect: str = "127.0.0.1:2181"
    metadata_uri: str = ""
    ledgers_root: str = "/ledgers"
    session_timeout_seconds: int = 30
    auth_scheme: str = ""
    auth_credentials: Secret = Secret()


@dataclass(frozen=True, slots=True)
class KafkaSection:
    """``[kafka]``: the event topic and how to reach the brokers."""

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "scrutiny.ledger-events"
    partitions: int = 8
    replication_factor: int = 1
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: Secret = Secret()
    ssl_cafile: str = ""


@dataclass(frozen=True, slots=True)
class WatcherSection:
    """``[watcher]``: the ZooKeeper watcher that publishes ledger events."""

    racks_path: str = "/bookies"
    election_path: str = "/scrutiny/watcher"
    tick_interval_seconds: int = 5
    metrics_port: int = 0
    delivery_timeout_seconds: int = 3600


@dataclass(frozen=True, slots=True)
class ServicesSection:
    """``[services]``: the embedded ZooKeeper and Kafka-protocol broker."""

    state_dir: str = ""


@dataclass(frozen=True, slots=True)
class BookiesSection:
    """``[bookies]``: how the checker reaches the bookies (docs/bookie_access.md)."""

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


@dataclass(frozen=True, slots=True)
class CheckerSection:
    """``[checker]``: the streaming job (``scrutiny run``)."""

    data_dir: str = "data"
    checkpoint_dir: str = "checkpoints/checker"
    trigger_seconds: float = 1.0
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 0
    fail_on_data_loss: bool = True
    retry_initial_seconds: float = 2.0
    retry_max_seconds: float = 60.0
    retry_attempts: int = 4
    fetch_timeout_seconds: float = 10.0
    cluster_cache_seconds: float = 2.0
    metrics_port: int = 0
    spark_master: str = ""
    spark_ui: bool = False
    shuffle_partitions: int = 4


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable, resolved.

    ``source`` names the file it came from, if any; ``given`` holds the keys (``section.key``) that
    the file or the environment set, so a command can tell an explicit value from a default.
    """

    verdict_section: VerdictSection = VerdictSection()
    placement: PlacementSection = PlacementSection()
    zookeeper: ZooKeeperSection = ZooKeeperSection()
    kafka: KafkaSection = KafkaSection()
    watcher: WatcherSection = WatcherSection()
    services: ServicesSection = ServicesSection()
    bookies: BookiesSection = BookiesSection()
    checker: CheckerSection = CheckerSection()
    source: str | None = None
    given: frozenset[str] = frozenset()

    @property
    def verdict(self) -> VerdictConfig:
        """The verdict core's configuration."""
        p = self.placement
        return VerdictConfig(
            placement=PlacementConfig(
                policy=PlacementPolicy(p.policy),
                min_racks_per_write_quorum=p.min_racks_per_write_quorum,
                enforce_min_racks=p.enforce_min_racks_per_write_quorum,
                min_zones_per_write_quorum=p.min_zones_per_write_quorum,
                desired_zones_per_write_quorum=p.desired_zones_per_write_quorum,
                default_rack=p.default_rack,
            ),
            under_replication_grace_ms=self.verdict_section.under_replication_grace_seconds * 1000,
        )

    def with_placement_policy(self, policy: PlacementPolicy) -> Settings:
        """A copy with another placement policy."""
        return replace(self, placement=replace(self.placement, policy=policy.value))


_SECTION_TYPES: dict[str, type[Any]] = {
    "verdict": VerdictSection,
    "placement": PlacementSection,
    "zookeeper": ZooKeeperSection,
    "kafka": KafkaSection,
    "watcher": WatcherSection,
    "services": ServicesSection,
    "bookies": BookiesSection,
    "checker": CheckerSection,
}
_FIELD_OF_SECTION = {"verdict": "verdict_section"}


def schema_keys() -> dict[str, list[str]]:
    """Every section and key the settings accept (for documentation and tests)."""
    return {name: [f.name for f in dataclasses.fields(kind)] for name, kind in _SECTION_TYPES.items()}


def load_settings(path: str | Path | None = None, *, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``path`` (or ``$SCRUTINY_CONFIG``; none: built-in defaults) and the environment."""
    env = os.environ if env is None else env
    path = path if path is not None else env.get(CONFIG_ENV) or None
    values: dict[str, dict[str, object]] = {name: {} for name in _SECTION_TYPES}
    if path is not None:
        _merge_file(values, _read_toml(Path(path)))
    _merge_env(values, env)
    sections = {_FIELD_OF_SECTION.get(name, name): _SECTION_TYPES[name](**given) for name, given in values.items()}
    explicit = frozenset(f"{section}.{key}" for section, keys in values.items() for key in keys)
    settings = Settings(**sections, source=str(path) if path is not None else None, given=explicit)
    _validate(settings)
    return settings


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"cannot read configuration file {path}: {error.strerror or error}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"configuration file {path} is not valid TOML: {error}") from error


def _field_types(section: str) -> dict[str, type]:
    kind = _SECTION_TYPES[section]
    defaults = kind()
    return {f.name: type(getattr(defaults, f.name)) for f in dataclasses.fields(kind)}


def _merge_file(values: dict[str, dict[str, object]], document: Mapping[str, Any]) -> None:
    for section, content in document.items():
        if section not in _SECTION_TYPES:
            raise ConfigError(f"unknown configuration section [{section}] (known: {', '.join(_SECTION_TYPES)})")
        if not isinstance(content, dict):
            raise ConfigError(f"configuration key {section} must be a section")
        types = _field_types(section)
        for key, value in content.items():
            if key not in types:
                raise ConfigError(f"unknown configuration key {section}.{key} (known: {', '.join(types)})")
            values[section][key] = _typed(f"configuration key {section}.{key}", value, types[key])


def _typed(name: str, value: object, kind: type) -> object:
    if kind is Secret:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a str")
        return Secret(value)
    if kind is float and type(value) is int:
        return float(value)
    if type(value) is not kind:
        raise ConfigError(f"{name} must be a {kind.__name__}, not {value!r}")
    return value


def _merge_env(values: dict[str, dict[str, object]], env: Mapping[str, str]) -> None:
    for alias, (section, key) in ENV_ALIASES.items():
        if alias in env:
            values[section][key] = env[alias]
    for section in _SECTION_TYPES:
        for key, kind in _field_types(section).items():
            name = f"{ENV_PREFIX}{section}_{key}".upper()
            if name in env:
                values[section][key] = _from_text(name, env[name], kind)


def _from_text(name: str, text: str, kind: type) -> object:
    if kind is bool:
        lowered = text.strip().lower()
        if lowered not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(f"environment variable {name} must be true or false, not {text!r}")
        return lowered in ("true", "1", "yes")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"environment variable {name} must be an integer, not {text!r}") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"environment variable {name} must be a number, not {text!r}") from None
    if kind is Secret:
        return Secret(text)
    return text


def _validate(settings: Settings) -> None:
    known = ", ".join(p.value for p in PlacementPolicy)
    if settings.placement.policy not in {p.value for p in PlacementPolicy}:
        raise ConfigError(f"placement.policy must be one of {known}, not {settings.placement.policy!r}")
    positive = {
        "placement.min_racks_per_write_quorum": settings.placement.min_racks_per_write_quorum,
        "placement.min_zones_per_write_quorum": settings.placement.min_zones_per_write_quorum,
        "placement.desired_zones_per_write_quorum": settings.placement.desired_zones_per_write_quorum,
        "zookeeper.session_timeout_seconds": settings.zookeeper.session_timeout_seconds,
        "kafka.partitions": settings.kafka.partitions,
        "kafka.replication_factor": settings.kafka.replication_factor,
        "watcher.tick_interval_seconds": settings.watcher.tick_interval_seconds,
        "watcher.delivery_timeout_seconds": settings.watcher.delivery_timeout_seconds,
    }
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"{key} must be a positive integer, not {value!r}")
    checker = settings.checker
    for key in ("trigger_seconds", "retry_initial_seconds", "retry_max_seconds", "fetch_timeout_seconds"):
        if getattr(checker, key) <= 0:
            raise ConfigError(f"checker.{key} must be positive, not {getattr(checker, key)!r}")
    if checker.retry_attempts < 0 or checker.max_offsets_per_trigger < 0:
        raise ConfigError("checker.retry_attempts and checker.max_offsets_per_trigger must not be negative")
    grace = settings.verdict_section.under_replication_grace_seconds
    if grace < 0:
        raise ConfigError(f"verdict.under_replication_grace_seconds must not be negative, not {grace}")
