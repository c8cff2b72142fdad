"""``scrutiny watch``: publish BookKeeper's metadata changes from ZooKeeper to the Kafka event topic.

Runs until Ctrl-C / SIGTERM (or ``--duration``). Connection settings come from the settings
(``SCRUTINY_ZOOKEEPER`` / ``SCRUTINY_KAFKA``, as printed by ``scrutiny services up``, or the
configuration file). Several watchers may run: one publishes, the others wait as standbys.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from types import FrameType

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import add_config_argument, seconds_argument
from scrutiny.connectors.kafka.config import kafka_client_config
from scrutiny.connectors.kafka.publisher import EventPublisher, TopicConfig
from scrutiny.connectors.zookeeper.client import build_zookeeper_client, zookeeper_target
from scrutiny.connectors.zookeeper.tree import TreeLayout
from scrutiny.connectors.zookeeper.watch import PersistentWatchClient
from scrutiny.settings.loader import Settings, load_settings
from scrutiny.watcher.daemon import Watcher, WatcherConfig
from scrutiny.watcher.metrics import WatcherMetrics

log = logging.getLogger("scrutiny.watch")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``watch``."""
    watch = commands.add_parser(
        "watch",
        help=COMMAND_HELP["watch"],
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_argument(watch)
    watch.add_argument("--watcher-id", help="this watcher's name in the election (default: host:pid)")
    watch.add_argument(
        "--duration", type=seconds_argument, metavar="SECONDS", help="stop after this long (default: run on)"
    )
    watch.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on 127.0.0.1:PORT")
    watch.set_defaults(handler=_run)


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
    )
    return Watcher(
        zk,  # built with client_class=PersistentWatchClient
        lambda: EventPublisher(kafka_options, topic, on_ack=lambda _, s: metrics.publish_latency.observe(s)),
        config,
        metrics=metrics,
        progress=lambda phase, count: log.info("%s: %d", phase, count),
    )


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = load_settings(args.config)
    watcher_id = args.watcher_id or f"{socket.gethostname()}:{os.getpid()}"
    metrics = WatcherMetrics()
    port = args.metrics_port if args.metrics_port is not None else settings.watcher.metrics_port
    if port:
        metrics.serve(port)
        log.info("metrics on http://127.0.0.1:%d/metrics", port)
    watcher = watcher_from_settings(settings, watcher_id, metrics)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("stopping (signal %d)", signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if args.duration is not None:
        timer = threading.Timer(args.duration, stop.set)
        timer.daemon = True
        timer.start()
    log.info("watcher %s: ZooKeeper %s, topic %s", watcher_id, settings.zookeeper.connect, settings.kafka.topic)
    try:
        watcher.run(stop)
    finally:
        watcher.zk.stop()
        watcher.zk.close()
    print(f"watcher {watcher_id} stopped", file=sys.stderr)
    return 0
