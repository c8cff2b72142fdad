"""The settings object: defaults, the TOML file, the environment, secrets and the errors that name the key."""

from __future__ import annotations

import re
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from scrutiny.core.errors import ConfigError
from scrutiny.core.placement import PlacementPolicy
from scrutiny.paths import PROJECT_ROOT
from scrutiny.settings.loader import load_settings, schema_keys

REPO = PROJECT_ROOT


def test_shipped_conf_documents_every_key_at_its_default() -> None:
    shipped = tomllib.loads((REPO / "conf" / "scrutiny.toml").read_text())
    assert {section: list(keys) for section, keys in shipped.items()} == schema_keys()
    assert load_settings(REPO / "conf" / "scrutiny.toml", env={}).verdict == load_settings(env={}).verdict


def test_file_then_environment(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[placement]\npolicy = "zoneaware"\nmin_zones_per_write_quorum = 3\n')
    settings = load_settings(path, env={})
    assert settings.verdict_config.placement.policy is PlacementPolicy.ZONEAWARE
    assert settings.verdict_config.placement.min_zones_per_write_quorum == 3
    env = {"SCRUTINY_PLACEMENT_POLICY": "rackaware", "SCRUTINY_VERDICT_UNDER_REPLICATION_GRACE_SECONDS": "5"}
    settings = load_settings(path, env=env)
    assert settings.verdict_config.placement.policy is PlacementPolicy.RACKAWARE
    assert settings.verdict_config.under_replication_grace_ms == 5000
    assert settings.verdict_config.index_lag_ms == 65_000  # Pulsar's 60 s flush and a 5 s margin by default
    env = {"SCRUTINY_VERDICT_WRITE_CACHE_FLUSH_SECONDS": "10", "SCRUTINY_VERDICT_WRITE_CACHE_MARGIN_SECONDS": "0.5"}
    assert load_settings(path, env=env).verdict_config.index_lag_ms == 10_500
    assert load_settings(env={"SCRUTINY_CONFIG": str(path)}).source == str(path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[nope]\n", "unknown configuration section [nope]"),
        ("[placement]\ncolour = 1\n", "unknown configuration key placement.colour"),
        ('[placement]\nmin_racks_per_write_quorum = "2"\n', "must be a int"),
        ("[kafka]\npartitions = 0\n", "kafka.partitions must be a positive integer"),
        ("[kafka]\nsasl_password = 5\n", "kafka.sasl_password must be a str"),
        ('[placement]\npolicy = "random"\n', "placement.policy must be one of"),
        ("[placement]\nmin_racks_per_write_quorum = 0\n", "must be a positive integer"),
        ("[verdict]\nunder_replication_grace_seconds = -1\n", "must not be negative"),
        ("[verdict]\nwrite_cache_flush_seconds = -1.0\n", "verdict.write_cache_flush_seconds must be a number"),
        ("[verdict\n", "not valid TOML"),
        ("[checker]\nidle_batch_seconds = 0.0\n", "checker.idle_batch_seconds must be positive"),
        ("[checker]\nkafka_fetch_wait_ms = -1\n", "checker.kafka_fetch_wait_ms must not be negative"),
    ],
)
def test_bad_configuration_is_named(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        load_settings(path, env={})


def test_connection_aliases_and_secrets() -> None:
    env = {
        "SCRUTINY_ZOOKEEPER": "127.0.0.9:2999",
        "SCRUTINY_KAFKA": "127.0.0.9:9999",
        "SCRUTINY_KAFKA_SASL_PASSWORD": "pa55-word",
    }
    settings = load_settings(env=env)
    assert settings.zookeeper.connect == "127.0.0.9:2999"
    assert settings.kafka.bootstrap_servers == "127.0.0.9:9999"
    assert settings.kafka.sasl_password.reveal() == "pa55-word"
    assert "pa55-word" not in repr(settings) and "pa55-word" not in str(settings.kafka)


def test_secrets_from_a_file_are_hidden(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[zookeeper]\nauth_scheme = "digest"\nauth_credentials = "user:hunter2"\n')
    settings = load_settings(path, env={})
    assert settings.zookeeper.auth_credentials.reveal() == "user:hunter2"
    assert "hunter2" not in repr(settings)


def test_bad_environment_values() -> None:
    with pytest.raises(ConfigError, match="SCRUTINY_PLACEMENT_ENFORCE_MIN_RACKS_PER_WRITE_QUORUM"):
        load_settings(env={"SCRUTINY_PLACEMENT_ENFORCE_MIN_RACKS_PER_WRITE_QUORUM": "maybe"})
    with pytest.raises(ConfigError, match="must be an integer"):
        load_settings(env={"SCRUTINY_PLACEMENT_MIN_RACKS_PER_WRITE_QUORUM": "two"})


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"SCRUTINY_KAFKA_PARTITIONS": str(2**63)}, "kafka.partitions must fit in 64 bits"),
        ({"SCRUTINY_WATCHER_TICK_INTERVAL_SECONDS": "315360001"}, "at most 315360000 seconds (ten years)"),
        ({"SCRUTINY_CHECKER_REVERIFY_INTERVAL": "1e300"}, "checker.reverify_interval must be at most"),
        ({"SCRUTINY_CHECKER_METRICS_HOST": "no such host"}, "checker.metrics_host 'no such host' is not an IP"),
        ({"SCRUTINY_WATCHER_METRICS_HOST": "300.0.0.1"}, "watcher.metrics_host '300.0.0.1' is not an IP address"),
        ({"SCRUTINY_ZOOKEEPER": "zk::1"}, "an IPv6 address goes in brackets"),
        ({"SCRUTINY_ZOOKEEPER": "zk1:2181,,zk2:2181/chroot"}, "an empty server"),
        ({"SCRUTINY_ZOOKEEPER": "zk1:0"}, "port '0' of 'zk1:0' is not a number from 1 to 65535"),
        ({"SCRUTINY_ZOOKEEPER": "/chroot"}, "names no ZooKeeper server before its chroot"),
        ({"SCRUTINY_KAFKA": "kafka::9092"}, "kafka.bootstrap_servers 'kafka::9092' is not host:port"),
        ({"SCRUTINY_KAFKA": "kafka1"}, "'kafka1' has no port"),
    ],
)
def test_numbers_hosts_and_server_lists_out_of_shape_are_named(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_settings(env=env)


def test_well_formed_addresses_are_accepted() -> None:
    env = {
        "SCRUTINY_ZOOKEEPER": " zk1:2181, [::1]:2182,zk-3.example.com/scrutiny/chroot ",
        "SCRUTINY_KAFKA": "k1:9092,[fe80::1]:9093",
        "SCRUTINY_CHECKER_METRICS_HOST": "0.0.0.0",
        "SCRUTINY_WATCHER_METRICS_HOST": "::",
        "SCRUTINY_CHECKER_REVERIFY_INTERVAL": "315360000",
    }
    settings = load_settings(env=env)
    assert settings.zookeeper.connect.startswith(" zk1") and settings.checker.metrics_host == "0.0.0.0"


def test_the_checker_looks_stalled_after_five_of_its_longest_gaps_between_batches() -> None:
    settings = load_settings(env={})
    assert settings.stall_after_ms() == 300_000  # 5 min: its heartbeat is 60 s
    slow = replace(settings, checker=replace(settings.checker, idle_batch_seconds=120.0))
    assert slow.stall_after_ms() == 600_000
    # Without its own wake-up, the watcher's ticks are what make a batch run.
    ticks = replace(settings, checker=replace(settings.checker, wake_on_timers=False, idle_batch_seconds=600.0))
    assert ticks.stall_after_ms() == 300_000
    assert replace(ticks, watcher=replace(ticks.watcher, tick_interval_seconds=90)).stall_after_ms() == 450_000
