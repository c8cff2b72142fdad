"""The sections that no connector owns: the core's configuration, the streaming job's and the applications'.

They are declared here, beside the loader, because the loader sits below the job and the applications that
read them (a lower layer never imports a higher one). Each section checks its own values when it is built and
names the offending key (``section.key``) in the :class:`~scrutiny.core.errors.ConfigError`. Their defaults are
the values documented in ``conf/scrutiny.toml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scrutiny.core.errors import ConfigError
from scrutiny.core.placement import PlacementConfig, PlacementPolicy
from scrutiny.core.verdict import DEFAULT_UNDER_REPLICATION_GRACE_MS


@dataclass(frozen=True, slots=True)
class VerdictSection:
    """``[verdict]``: the grace of an under-replication mark before ``UNDER_REPLICATION_STUCK``, and how long an
    index-read answer may lag the bookie's write cache."""

    under_replication_grace_seconds: int = DEFAULT_UNDER_REPLICATION_GRACE_MS // 1000
    write_cache_flush_seconds: float = 60.0
    write_cache_margin_seconds: float = 5.0

    def __post_init__(self) -> None:
        grace = self.under_replication_grace_seconds
        if grace < 0:
            raise ConfigError(f"verdict.under_replication_grace_seconds must not be negative, not {grace}")
        for key in ("write_cache_flush_seconds", "write_cache_margin_seconds"):
            value = getattr(self, key)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"verdict.{key} must be a number of seconds ≥ 0, not {value!r}")

    @property
    def index_lag_ms(self) -> int:
        """The verdict's ``index_lag_ms``: the write cache's flush interval plus the margin."""
        return round((self.write_cache_flush_seconds + self.write_cache_margin_seconds) * 1000)


@dataclass(frozen=True, slots=True)
class PlacementSection:
    """``[placement]``: the cluster's placement policy (BookKeeper's defaults), for ``PLACEMENT_*``."""

    policy: str = PlacementPolicy.NONE.value
    min_racks_per_write_quorum: int = 2
    enforce_min_racks_per_write_quorum: bool = False
    min_zones_per_write_quorum: int = 2
    desired_zones_per_write_quorum: int = 3
    default_rack: str = PlacementConfig().default_rack

    def __post_init__(self) -> None:
        known = [p.value for p in PlacementPolicy]
        if self.policy not in known:
            raise ConfigError(f"placement.policy must be one of {', '.join(known)}, not {self.policy!r}")
        for key in ("min_racks_per_write_quorum", "min_zones_per_write_quorum", "desired_zones_per_write_quorum"):
            if getattr(self, key) < 1:
                raise ConfigError(f"placement.{key} must be a positive integer, not {getattr(self, key)!r}")

    def config(self) -> PlacementConfig:
        """The verdict core's placement configuration."""
        return PlacementConfig(
            policy=PlacementPolicy(self.policy),
            min_racks_per_write_quorum=self.min_racks_per_write_quorum,
            enforce_min_racks=self.enforce_min_racks_per_write_quorum,
            min_zones_per_write_quorum=self.min_zones_per_write_quorum,
            desired_zones_per_write_quorum=self.desired_zones_per_write_quorum,
            default_rack=self.default_rack,
        )


@dataclass(frozen=True, slots=True)
class WatcherSection:
    """``[watcher]``: the ZooKeeper watcher that publishes ledger events (``scrutiny watch``)."""

    racks_path: str = "/bookies"
    election_path: str = "/scrutiny/watcher"
    tick_interval_seconds: int = 60
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    delivery_timeout_seconds: int = 3600
    lost_bookie_recovery_delay_seconds: int = 0
    bookie_lost_grace_seconds: int = 300
    snapshot_workers: int = 1
    snapshot_workers_min_ledgers: int = 20_000
    autorecovery_disabled_critical_seconds: int = 3600
    auditor_expected: bool = True
    no_auditor_grace_seconds: int = 300

    def __post_init__(self) -> None:
        for key in ("tick_interval_seconds", "delivery_timeout_seconds"):
            if getattr(self, key) < 1:
                raise ConfigError(f"watcher.{key} must be a positive integer, not {getattr(self, key)!r}")
        if self.snapshot_workers > _MAX_SNAPSHOT_WORKERS:
            raise ConfigError(
                f"watcher.snapshot_workers must be at most {_MAX_SNAPSHOT_WORKERS}, not {self.snapshot_workers!r}"
            )
        for key in (
            "lost_bookie_recovery_delay_seconds",
            "bookie_lost_grace_seconds",
            "snapshot_workers",
            "snapshot_workers_min_ledgers",
            "autorecovery_disabled_critical_seconds",
            "no_auditor_grace_seconds",
        ):
            if getattr(self, key) < 0:
                raise ConfigError(f"watcher.{key} must be 0 or more, not {getattr(self, key)!r}")

    @property
    def bookie_lost_after_ms(self) -> int:
        """How long a bookie stays unregistered before it is lost: the recovery delay plus the grace."""
        return (self.lost_bookie_recovery_delay_seconds + self.bookie_lost_grace_seconds) * 1000


#: More worker processes than this for a walk's metadata is a typo, not a machine.
_MAX_SNAPSHOT_WORKERS = 256


@dataclass(frozen=True, slots=True)
class ServicesSection:
    """``[services]``: the embedded ZooKeeper and Kafka broker (``scrutiny services``)."""

    state_dir: str = ""


#: The keys of ``[checker]`` that may be 0 but not negative.
_NOT_NEGATIVE = (
    "exists_check_seconds",
    "reverify_interval",
    "reverify_max_per_second",
    "check_overdue_grace_seconds",
    "verification_ages_seconds",
    "under_replication_mark_grace_seconds",
    "recovery_stalled_grace_seconds",
    "orphan_grace_seconds",
    "orphan_sweep_seconds",
    "open_violation_gauges_seconds",
    "compact_min_files",
    "removed_file_retention_hours",
)


@dataclass(frozen=True, slots=True)
class CheckerSection:
    """``[checker]``: the streaming job (``scrutiny run``) and the scan that shares its rules."""

    data_dir: str = "data"
    checkpoint_dir: str = "checkpoints/checker"
    trigger_seconds: float = 1.0
    wake_on_timers: bool = True
    idle_batch_seconds: float = 60.0
    kafka_fetch_wait_ms: int = 20
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 0
    fail_on_data_loss: bool = True
    retry_initial_seconds: float = 2.0
    retry_max_seconds: float = 60.0
    retry_attempts: int = 4
    fetch_timeout_seconds: float = 10.0
    cluster_cache_seconds: float = 2.0
    exists_check_seconds: float = 600.0
    reverify_interval: float = 604_800.0
    reverify_max_per_second: float = 50.0
    check_overdue_grace_seconds: float = 86_400.0
    verification_ages_seconds: float = 60.0
    under_replication_mark_grace_seconds: float = 300.0
    recovery_stalled_grace_seconds: float = 600.0
    orphan_grace_seconds: float = 3600.0
    orphan_sweep_seconds: float = 60.0
    orphan_sweep_page_ledgers: int = 10_000
    orphan_sweep_write_seconds: float = 600.0
    write_conflict_attempts: int = 8
    prefetch_table_state: bool = True
    runs_by_delta_rs: bool = True
    findings_by_delta_rs: bool = True
    compact_min_files: int = 50
    compact_file_mb: int = 16
    removed_file_retention_hours: float = 6.0
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    open_violation_gauges_seconds: float = 60.0
    spark_master: str = ""
    spark_ui: bool = False
    shuffle_partitions: int = 4

    def __post_init__(self) -> None:
        for key in (
            "trigger_seconds",
            "idle_batch_seconds",
            "retry_initial_seconds",
            "retry_max_seconds",
            "fetch_timeout_seconds",
            "orphan_sweep_write_seconds",
        ):
            if getattr(self, key) <= 0:
                raise ConfigError(f"checker.{key} must be positive, not {getattr(self, key)!r}")
        for key in ("shuffle_partitions", "orphan_sweep_page_ledgers", "compact_file_mb"):
            if getattr(self, key) < 1:
                raise ConfigError(f"checker.{key} must be at least 1, not {getattr(self, key)!r}")
        if self.kafka_fetch_wait_ms < 0:
            raise ConfigError(f"checker.kafka_fetch_wait_ms must not be negative, not {self.kafka_fetch_wait_ms!r}")
        if self.retry_attempts < 0 or self.max_offsets_per_trigger < 0:
            raise ConfigError("checker.retry_attempts and checker.max_offsets_per_trigger must not be negative")
        if self.write_conflict_attempts < 1:
            raise ConfigError(
                f"checker.write_conflict_attempts must be at least 1, not {self.write_conflict_attempts!r}"
            )
        for key in _NOT_NEGATIVE:
            if getattr(self, key) < 0:
                raise ConfigError(f"checker.{key} must not be negative, not {getattr(self, key)!r}")
        if self.compact_min_files == 1:
            raise ConfigError("checker.compact_min_files must be 0 (off) or at least 2, not 1")
