"""A watcher wired from the settings: its ZooKeeper client, its Kafka publisher, its layout and timing.

Used by ``scrutiny watch``, the embedded default and the benchmarks; nothing is connected until the watcher runs.
"""

from __future__ import annotations

import logging

from scrutiny.connectors.kafka.config import kafka_client_config
from scrutiny.connectors.kafka.publisher import EventPublisher, TopicConfig
from scrutiny.connectors.zookeeper.client import build_zookeeper_client, zookeeper_target
from scrutiny.connectors.zookeeper.tree import TreeLayout
from scrutiny.connectors.zookeeper.watch import PersistentWatchClient
from scrutiny.core.autorecovery_health import AutoRecoveryRules
from scrutiny.settings.loader import Settings
from scrutiny.watcher.daemon import Watcher, WatcherConfig
from scrutiny.watcher.metrics import WatcherMetrics
from scrutiny.watcher.redaction_pool import RedactionPool

log = logging.getLogger("scrutiny.watch")


def watcher_from_settings(settings: Settings, watcher_id: str, metrics: WatcherMetrics) -> Watcher:
    """A watcher wired from the settings (nothing connected yet)."""
    target = zookeeper_target(settings.zookeeper)
    zk = build_zookeeper_client(settings.zookeeper, client_class=PersistentWatchClient)
    kafka_options = kafka_client_config(settings.kafka).kwargs(f"scrutiny-watcher-{watcher_id}")
    topic = TopicConfig(
        settings.kafka.topic,
        partitions=settings.kafka.partitions,
        replication_factor=settings.kafka.replication_factor,
        delivery_timeout_ms=settings.watcher.delivery_timeout_seconds * 1000,
    )
    config = WatcherConfig(
        layout=TreeLayout(target.ledgers_root, target.manager, settings.watcher.racks_path),
        election_path=settings.watcher.election_path,
        watcher_id=watcher_id,
        tick_interval_s=float(settings.watcher.tick_interval_seconds),
        bookie_lost_after_ms=settings.watcher.bookie_lost_after_ms,
        autorecovery=AutoRecoveryRules(
            disabled_critical_ms=settings.watcher.autorecovery_disabled_critical_seconds * 1000,
            auditor_expected=settings.watcher.auditor_expected,
            no_auditor_grace_ms=settings.watcher.no_auditor_grace_seconds * 1000,
        ),
        redaction=RedactionPool(settings.watcher.snapshot_workers, settings.watcher.snapshot_workers_min_ledgers),
    )
    return Watcher(
        zk,  # built with client_class=PersistentWatchClient
        lambda: EventPublisher(kafka_options, topic, on_ack=lambda _, s: metrics.publish_latency.observe(s)),
        config,
        metrics=metrics,
        progress=lambda phase, count: log.info("%s: %d", phase, count),
    )
