"""What the local bookies and AutoRecovery are told: their BookKeeper configuration from the options."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrutiny.services.autorecovery import AutoRecoveryOptions
from scrutiny.services.bookkeeper import BookieIdentity, BookieOptions, BookieStorage, bookie_config
from scrutiny.services.servers import ServicesError

pytestmark = pytest.mark.unit

NULL_STATS = "org.apache.bookkeeper.stats.NullStatsProvider"
PROMETHEUS = "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider"


def settings_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_a_bookie_gets_its_storage_cache_and_flush_interval() -> None:
    options = BookieOptions(storage=BookieStorage.DB, write_cache_mb=8, flush_interval_ms=30_000)
    conf = settings_of(bookie_config(BookieIdentity("bookie-2", 4181, 4185, options), Path("/s/b2"), "127.0.0.1:2181"))
    assert conf["ledgerStorageClass"] == "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"
    assert (conf["dbStorage_writeCacheMaxSizeMb"], conf["flushInterval"]) == ("8", "30000")
    assert (conf["bookiePort"], conf["advertisedAddress"], conf["allowLoopback"]) == ("4181", "127.0.0.1", "true")
    assert conf["metadataServiceUri"] == "zk+hierarchical://127.0.0.1:2181/ledgers"
    assert (conf["journalDirectories"], conf["ledgerDirectories"]) == ("/s/b2/journal", "/s/b2/ledgers")
    sorted_conf = settings_of(
        bookie_config(BookieIdentity("bookie-1", 1, 0, BookieOptions(storage=BookieStorage.SORTED)), Path("/s"), "h:1")
    )
    assert sorted_conf["ledgerStorageClass"] == "org.apache.bookkeeper.bookie.SortedLedgerStorage"
    assert conf["statsProviderClass"] == sorted_conf["statsProviderClass"] == NULL_STATS  # no metrics port


def test_a_bookie_with_a_metrics_port_serves_prometheus_on_loopback() -> None:
    identity = BookieIdentity("bookie-1", 4181, 4185, BookieOptions(), metrics_port=4190)
    conf = settings_of(bookie_config(identity, Path("/s/b1"), "127.0.0.1:2181"))
    assert conf["statsProviderClass"] == PROMETHEUS
    assert (conf["prometheusStatsHttpAddress"], conf["prometheusStatsHttpPort"]) == ("127.0.0.1", "4190")


@pytest.mark.parametrize("bad", [{"write_cache_mb": 0}, {"flush_interval_ms": 0}, {"heap_mb": -1}])
def test_nonsense_bookie_options_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ServicesError, match=next(iter(bad))):
        BookieOptions(**bad)  # type: ignore[arg-type]


def test_autorecovery_flags_are_bookkeepers_settings() -> None:
    options = AutoRecoveryOptions(
        periodic_check_s=60, bookie_check_s=2, replicas_check_s=0, lost_bookie_recovery_delay_s=5
    )
    conf = settings_of(options.config("127.0.0.1:2181"))
    assert conf["auditorPeriodicCheckInterval"] == "60" and conf["auditorPeriodicBookieCheckInterval"] == "2"
    assert conf["auditorReplicasCheckInterval"] == "0" and conf["lostBookieRecoveryDelay"] == "5"
    assert conf["statsProviderClass"] == NULL_STATS
    watched = settings_of(AutoRecoveryOptions(metrics_port=4191).config("127.0.0.1:2181"))
    assert (watched["statsProviderClass"], watched["prometheusStatsHttpPort"]) == (PROMETHEUS, "4191")
    with pytest.raises(ServicesError, match="must not be negative"):
        AutoRecoveryOptions(bookie_check_s=-1)
