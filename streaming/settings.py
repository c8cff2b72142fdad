"""The one frozen settings object: built-in defaults, then a TOML file, then the environment.

Loaded once when a command starts. The defaults are the values documented in
``conf/scrutiny.toml``; a file may set any subset of its keys; ``SCRUTINY_<SECTION>_<KEY>``
environment variables override both. Unknown sections or keys and values of the wrong type
are errors (:class:`ConfigError` naming the key), never silently ignored.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scrutiny.core.errors import ConfigError
from scrutiny.core.placement import PlacementConfig, PlacementPolicy
from scrutiny.core.verdict import DEFAULT_UNDER_REPLICATION_GRACE_MS, VerdictConfig

ENV_PREFIX = "SCRUTINY_"
CONFIG_ENV = "SCRUTINY_CONFIG"

# section -> key -> (python type, default)
_SCHEMA: dict[str, dict[str, tuple[type, object]]] = {
    "verdict": {"under_replication_grace_seconds": (int, DEFAULT_UNDER_REPLICATION_GRACE_MS // 1000)},
    "placement": {
        "policy": (str, PlacementPolicy.NONE.value),
        "min_racks_per_write_quorum": (int, 2),
        "enforce_min_racks_per_write_quorum": (bool, False),
        "min_zones_per_write_quorum": (int, 2),
        "desired_zones_per_write_quorum": (int, 3),
        "default_rack": (str, PlacementConfig().default_rack),
    },
}


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable, resolved. ``source`` names the file it came from, if any."""

    verdict: VerdictConfig = VerdictConfig()
    source: str | None = None

    def with_placement_policy(self, policy: PlacementPolicy) -> Settings:
        """A copy with another placement policy."""
        placement = replace(self.verdict.placement, policy=policy)
        return replace(self, verdict=replace(self.verdict, placement=placement))


def load_settings(path: str | Path | None = None, *, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``path`` (or ``$SCRUTINY_CONFIG``; none: built-in defaults) and the environment."""
    env = os.environ if env is None else env
    path = path if path is not None else env.get(CONFIG_ENV) or None
    values = _defaults()
    if path is not None:
        _merge(values, _read_toml(Path(path)))
    _merge_env(values, env)
    return _build(values, str(path) if path is not None else None)


def _defaults() -> dict[str, dict[str, object]]:
    return {section: {key: default for key, (_, default) in keys.items()} for section, keys in _SCHEMA.items()}


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"cannot read configuration file {path}: {error.strerror or error}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"configuration file {path} is not valid TOML: {error}") from error


def _merge(values: dict[str, dict[str, object]], document: Mapping[str, Any]) -> None:
    for section, content in document.items():
        if section not in _SCHEMA:
            raise ConfigError(f"unknown configuration section [{section}] (known: {', '.join(_SCHEMA)})")
        if not isinstance(content, dict):
            raise ConfigError(f"configuration key {section} must be a section")
        for key, value in content.items():
            values[section][key] = _checked(section, key, value)


def _checked(section: str, key: str, value: object) -> object:
    if key not in _SCHEMA[section]:
        raise ConfigError(f"unknown configuration key {section}.{key} (known: {', '.join(_SCHEMA[section])})")
    kind = _SCHEMA[section][key][0]
    if type(value) is not kind:
        raise ConfigError(f"configuration key {section}.{key} must be a {kind.__name__}, not {value!r}")
    return value


def _merge_env(values: dict[str, dict[str, object]], env: Mapping[str, str]) -> None:
    for section, keys in _SCHEMA.items():
        for key, (kind, _) in keys.items():
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
    return text


def _build(values: dict[str, dict[str, object]], source: str | None) -> Settings:
    placement_values = values["placement"]
    try:
        policy = PlacementPolicy(str(placement_values["policy"]))
    except ValueError:
        known = ", ".join(p.value for p in PlacementPolicy)
        raise ConfigError(f"placement.policy must be one of {known}, not {placement_values['policy']!r}") from None
    placement = PlacementConfig(
        policy=policy,
        min_racks_per_write_quorum=_positive(placement_values, "placement", "min_racks_per_write_quorum"),
        enforce_min_racks=bool(placement_values["enforce_min_racks_per_write_quorum"]),
        min_zones_per_write_quorum=_positive(placement_values, "placement", "min_zones_per_write_quorum"),
        desired_zones_per_write_quorum=_positive(placement_values, "placement", "desired_zones_per_write_quorum"),
        default_rack=str(placement_values["default_rack"]),
    )
    grace = values["verdict"]["under_replication_grace_seconds"]
    assert isinstance(grace, int)
    if grace < 0:
        raise ConfigError(f"verdict.under_replication_grace_seconds must not be negative, not {grace}")
    return Settings(VerdictConfig(placement=placement, under_replication_grace_ms=grace * 1000), source)


def _positive(values: Mapping[str, object], section: str, key: str) -> int:
    value = values[key]
    if not isinstance(value, int) or value < 1:
        raise ConfigError(f"{section}.{key} must be a positive integer, not {value!r}")
    return value


def schema_keys() -> dict[str, list[str]]:
    """Every section and key the settings accept (for documentation and tests)."""
    return {section: [key for key in keys] for section, keys in _SCHEMA.items()}
