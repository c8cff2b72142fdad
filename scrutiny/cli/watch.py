"""``scrutiny watch``: publish BookKeeper's metadata changes from ZooKeeper to the Kafka event topic.

Runs until Ctrl-C / SIGTERM (or ``--duration``). Connection settings come from the settings
(``SCRUTINY_ZOOKEEPER`` / ``SCRUTINY_KAFKA``, as printed by ``scrutiny services up``, or the
configuration file). Several watchers may run: one publishes, the others wait as standbys.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import (
    InputError,
    add_config_argument,
    add_metrics_arguments,
    configure_logging,
    seconds_argument,
    stop_on_signals,
)
from scrutiny.settings.loader import load_settings
from scrutiny.watcher.metrics import WatcherMetrics
from scrutiny.watcher.wiring import watcher_from_settings

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
    add_metrics_arguments(watch, "watcher")
    watch.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    configure_logging()
    settings = load_settings(args.config)
    watcher_id = args.watcher_id or f"{socket.gethostname()}:{os.getpid()}"
    metrics = WatcherMetrics()
    port = args.metrics_port if args.metrics_port is not None else settings.watcher.metrics_port
    host = args.metrics_host or settings.watcher.metrics_host
    if port:
        try:
            metrics.serve(port, host)
        except OSError as error:
            raise InputError(f"cannot serve metrics on {host}:{port}: {error.strerror or error}") from None
        log.info("metrics on http://%s:%d/metrics", host, port)
    watcher = watcher_from_settings(settings, watcher_id, metrics)
    with stop_on_signals(lambda signum: log.info("stopping (signal %d)", signum)) as stop:
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
