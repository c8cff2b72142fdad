"""The one frozen settings object: built-in defaults, then a TOML file, then the environment.

Loaded once when a command starts. Each TOML section is a frozen dataclass owned by the part that reads
it — ``[zookeeper]``, ``[kafka]`` and ``[bookies]`` by their connectors, the rest in
:mod:`scrutiny.settings.sections` — whose fields are the keys (their defaults are the values documented
in ``conf/scrutiny.toml``) and which checks its own values when built. A file may
set any subset; ``SCRUTINY_<SECTION>_<KEY>`` environment variables override it, and the short
``SCRUTINY_ZOOKEEPER`` / ``SCRUTINY_KAFKA`` (printed by ``scrutiny services up``) set the
connection strings. Unknown sections or keys, values of the wrong type, numbers that are not finite (TOML's and
the environment's ``inf`` and ``nan``), integers beyond 64 bits, durations (``*_seconds``, ``reverify_interval``)
beyond :data:`MAX_SECONDS`, ports outside 0-65535, host names and server lists that are misspelt
(:mod:`scrutiny.settings.addresses`), a file that is not UTF-8 or larger than :data:`MAX_CONFIG_BYTES` are errors
(:class:`ConfigError` naming the key, one line), never silently ignored. Secrets are :class:`Secret` values: their
repr never shows them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scrutiny.connectors.bookies.settings import BookiesSection
from scrutiny.connectors.kafka.settings import KafkaSection
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.core.errors import ConfigError
from scrutiny.core.health_summary import DEFAULT_STALL_AFTER_MS
from scrutiny.core.placement import PlacementPolicy
from scrutiny.core.secret import Secret
from scrutiny.core.verdict import VerdictConfig
from scrutiny.settings.addresses import host_problem, kafka_servers_problem, zookeeper_connect_problem
from scrutiny.settings.sections import (
    CheckerSection,
    PlacementSection,
    ServicesSection,
    VerdictSection,
    WatcherSection,
)

ENV_PREFIX = "SCRUTINY_"
#: The report and the dashboard call the streaming checker stalled after this many of its longest gaps between
#: batches without one, when that is longer than the default (health_summary.DEFAULT_STALL_AFTER_MS).
STALL_INTERVALS = 5
CONFIG_ENV = "SCRUTINY_CONFIG"
#: The longest duration a key may give, in seconds (ten years): the job passes durations to Spark and Kafka as
#: 64-bit milliseconds and to the ZooKeeper client as socket timeouts.
MAX_SECONDS = 10 * 365 * 86_400
#: Keys that are durations in seconds besides those named ``*_seconds``.
_DURATION_KEYS = frozenset({"reverify_interval"})
_INT64 = range(-(2**63), 2**63)
#: A configuration file's size in bytes (the shipped one, every key documented, is under 20 kB).
MAX_CONFIG_BYTES = 2**20
#: Short variables that ``scrutiny services up`` prints, and what they set.
ENV_ALIASES = {"SCRUTINY_ZOOKEEPER": ("zookeeper", "connect"), "SCRUTINY_KAFKA": ("kafka", "bootstrap_servers")}


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable, resolved.

    ``source`` names the file it came from, if any; ``given`` holds the keys (``section.key``) that
    the file or the environment set, so a command can tell an explicit value from a default.
    """

    verdict: VerdictSection = VerdictSection()
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
    def verdict_config(self) -> VerdictConfig:
        """The verdict core's configuration."""
        return VerdictConfig(
            placement=self.placement.config(),
            under_replication_grace_ms=self.verdict.under_replication_grace_seconds * 1000,
            index_lag_ms=self.verdict.index_lag_ms,
        )

    def stall_after_ms(self) -> int:
        """How long without a batch makes the streaming checker look stalled: 5 min, or 5 of its longest gaps between
        batches if longer (its heartbeat, ``checker.idle_batch_seconds``, or without its own wake-up the watcher's
        ticks; at least a trigger)."""
        gap_s = self.checker.idle_batch_seconds if self.checker.wake_on_timers else self.watcher.tick_interval_seconds
        interval_s = max(gap_s, self.checker.trigger_seconds)
        return max(DEFAULT_STALL_AFTER_MS, int(STALL_INTERVALS * interval_s * 1000))

    def with_placement_policy(self, policy: PlacementPolicy) -> Settings:
        """A copy with another placement policy."""
        return replace(self, placement=replace(self.placement, policy=policy.value))


#: Each section's name in the file (and the environment) is its field's name in :class:`Settings`.
_SECTION_TYPES: dict[str, type[Any]] = {
    f.name: type(f.default) for f in dataclasses.fields(Settings) if dataclasses.is_dataclass(f.default)
}


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
    sections = {name: _SECTION_TYPES[name](**given) for name, given in values.items()}
    for name, section in sections.items():
        _check_ports(name, section)
        _check_ranges(name, section)
        _check_hosts(name, section)
    explicit = frozenset(f"{section}.{key}" for section, keys in values.items() for key in keys)
    settings = Settings(**sections, source=str(path) if path is not None else None, given=explicit)
    return settings


def _check_ports(section_name: str, section: object) -> None:
    """Every ``*_port`` key is a TCP port or 0 (off, or any free port where the key says so)."""
    for field in dataclasses.fields(section):  # type: ignore[arg-type]
        value = getattr(section, field.name)
        if field.name.endswith("port") and isinstance(value, int) and not 0 <= value <= 65_535:
            raise ConfigError(f"{section_name}.{field.name} must be a port from 0 to 65535, not {value!r}")


def _check_ranges(section_name: str, section: object) -> None:
    """Integers fit in 64 bits; durations are at most :data:`MAX_SECONDS`."""
    for field in dataclasses.fields(section):  # type: ignore[arg-type]
        value = getattr(section, field.name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if isinstance(value, int) and value not in _INT64:
            raise ConfigError(f"{section_name}.{field.name} must fit in 64 bits, not {value!r}")
        if (field.name.endswith("_seconds") or field.name in _DURATION_KEYS) and value > MAX_SECONDS:
            raise ConfigError(
                f"{section_name}.{field.name} must be at most {MAX_SECONDS} seconds (ten years), not {value!r}"
            )


def _check_hosts(section_name: str, section: object) -> None:
    """Every ``*_host`` key is an IP address or a host name; ``zookeeper.connect`` and ``kafka.bootstrap_servers``
    name servers."""
    for field in dataclasses.fields(section):  # type: ignore[arg-type]
        value = getattr(section, field.name)
        if not isinstance(value, str):
            continue
        if field.name.endswith("_host"):
            problem = host_problem(value)
        elif (section_name, field.name) == ("zookeeper", "connect"):
            problem = zookeeper_connect_problem(value)
        elif (section_name, field.name) == ("kafka", "bootstrap_servers"):
            problem = kafka_servers_problem(value)
        else:
            continue
        if problem is not None:
            raise ConfigError(f"{section_name}.{field.name} {value!r} {problem}")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(f"configuration file {path} is larger than {MAX_CONFIG_BYTES:,} bytes")
        return tomllib.loads(data.decode("utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read configuration file {path}: {error.strerror or error}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"configuration file {path} is not valid TOML: {error}") from error
    except UnicodeDecodeError as error:
        raise ConfigError(f"configuration file {path} is not UTF-8 text (byte {error.start})") from None


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
    return _finite(name, value)


def _finite(name: str, value: object) -> object:
    """``value``, unless it is a float that is not a finite number (TOML and the environment allow inf and nan)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, not {value!r}")
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
            number = float(text)
        except ValueError:
            raise ConfigError(f"environment variable {name} must be a number, not {text!r}") from None
        return _finite(f"environment variable {name}", number)
    if kind is Secret:
        return Secret(text)
    return text
