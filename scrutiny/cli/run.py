"""``scrutiny run``: the streaming checker (the product's main job).

With a configuration (``--config FILE`` or ``SCRUTINY_CONFIG``) it runs against the cluster the
configuration names: ZooKeeper for registrations, the watcher's Kafka topic for events, the
bookies for listings; tables go to ``checker.data_dir``. Without one it is the embedded default:
local ZooKeeper and Kafka broker, a simulated cluster with faults (``--scenario``,
default conf/scenarios/demo.toml), the watcher and the checker, all stopped again on exit.

It prints what it is doing, then a line per micro-batch that checked, found or resolved something (idle batches,
which only carry the watcher's ticks, are not shown) and a summary of the open violations every
``--summary-every`` seconds. The log lines of Spark's JVM and of the libraries (Kafka, ZooKeeper clients) go to a
log file under the data directory, named at start; the terminal gets the command's progress and the warnings.
``--duration S`` stops after S seconds; ``--until-idle S`` once
S seconds pass with no event, no check and no retry pending. Ctrl-C (or SIGTERM) stops cleanly.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import start_http_server

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import (
    LOG_FORMAT,
    InputError,
    add_config_argument,
    add_metrics_arguments,
    positive_seconds_argument,
    quiet_libraries,
    seconds_argument,
    stop_on_signals,
)
from scrutiny.connectors.tables.health import read_open_violations
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.health_summary import category_table, summarize
from scrutiny.services.embedded import DEMO_SCENARIO, EmbeddedStack
from scrutiny.settings.loader import CONFIG_ENV, Settings, load_settings
from scrutiny.simulator.scenario import load_scenario
from scrutiny.streaming.checker.job import RunningChecker, start_checker
from scrutiny.streaming.checker.metrics import JobMetrics
from scrutiny.streaming.checker.sink import BatchSummary
from scrutiny.streaming.session import build_spark_session

log = logging.getLogger("scrutiny.run")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``run``."""
    run = commands.add_parser(
        "run",
        help=COMMAND_HELP["run"],
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_argument(run, "configuration file (TOML; default: $SCRUTINY_CONFIG); none: the embedded default")
    run.add_argument("--scenario", help="embedded default: the simulated cluster's scenario (default: the demo)")
    run.add_argument("--duration", type=seconds_argument, metavar="SECONDS", help="stop after this long")
    run.add_argument(
        "--until-idle", type=seconds_argument, metavar="SECONDS", help="stop after this long with nothing to do"
    )
    run.add_argument(
        "--summary-every",
        type=positive_seconds_argument,
        default=30.0,
        metavar="SECONDS",
        help="open-violation summary",
    )
    add_metrics_arguments(run, "checker")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    configured = args.config or os.environ.get(CONFIG_ENV)
    settings = load_settings(args.config)
    # The embedded default's scenario is read first: a bad one ends the command before it writes or starts anything.
    scenario = None if configured else load_scenario(args.scenario or DEMO_SCENARIO)
    log_file = _route_logs(settings.checker.data_dir)
    metrics = JobMetrics()
    port = args.metrics_port if args.metrics_port is not None else settings.checker.metrics_port
    host = args.metrics_host or settings.checker.metrics_host
    if port:
        try:
            start_http_server(port, addr=host, registry=metrics.registry)
        except OSError as error:
            raise InputError(f"cannot serve metrics on {host}:{port}: {error.strerror or error}") from None
        log.info("metrics on http://%s:%d/metrics", host, port)
    if configured:
        spark = build_spark_session(
            "scrutiny-checker",
            master=settings.checker.spark_master or None,
            ui=settings.checker.spark_ui,
            conf={"spark.sql.shuffle.partitions": str(settings.checker.shuffle_partitions)},
            log_file=log_file,
        )
        checker = start_checker(spark, settings, metrics=metrics)
        try:
            with stop_on_signals() as stop:
                _follow(checker, settings, args, stop)
        finally:
            checker.stop()
        return 0
    assert scenario is not None
    stack = EmbeddedStack(settings, scenario, metrics=metrics, log_file=log_file)
    try:
        embedded = stack.start()
        assert stack.checker is not None
        print(
            f"embedded default: ZooKeeper {embedded.zookeeper.connect}, Kafka {embedded.kafka.bootstrap_servers}, "
            f"scenario {scenario.name!r}; tables under {Path(embedded.checker.data_dir).resolve()}",
            flush=True,
        )
        with stop_on_signals() as stop:
            _follow(stack.checker, embedded, args, stop)
    finally:
        print("stopping: checker, watcher, simulated cluster, services", flush=True)
        stack.close()
    return 0


#: The loggers whose information lines the terminal shows: what the command itself is doing.
_PROGRESS = ("scrutiny.run", "scrutiny.services.embedded", "scrutiny.streaming.checker.job")
#: Loggers of connection churn and library internals: to the log file only, unless it is an error.
_CHATTER = ("kafka", "kazoo", "scrutiny.zookeeper", "grpc", "urllib3")
#: Spark's Python bridge: a stop that cancels a running batch makes it log that batch's traceback as an error.
#: What matters of it reaches the terminal as the query's own error (``the checker query failed: ...``).
_FILE_ONLY = ("py4j",)


def _for_the_terminal(record: logging.LogRecord) -> bool:
    if record.name.startswith(_FILE_ONLY):
        return False
    if record.name.startswith(_CHATTER):
        return record.levelno >= logging.ERROR
    return record.levelno >= logging.WARNING or record.name.startswith(_PROGRESS)


def _route_logs(data_dir: str) -> Path:
    """Send every log line to ``<data_dir>/logs/run-<time>.log``; the terminal gets progress and warnings.

    Returns the file, whose name is printed at once. Spark's JVM writes to the same file (``build_spark_session``).
    A data directory in an object store (``s3://...``) keeps its logs in ``./logs`` instead.
    """
    logs = Path("logs") if "://" in data_dir else Path(data_dir) / "logs"
    log_file = logs / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(log_file, encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot write the log file {log_file}: {error.strerror or error}") from None
    to_file.setFormatter(logging.Formatter(LOG_FORMAT))
    to_terminal = logging.StreamHandler()
    to_terminal.setFormatter(logging.Formatter(LOG_FORMAT))
    to_terminal.addFilter(_for_the_terminal)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.handlers[:] = [to_file, to_terminal]
    quiet_libraries()
    print(f"logs: {log_file.resolve()}", flush=True)
    return log_file


def _follow(checker: RunningChecker, settings: Settings, args: argparse.Namespace, stop: threading.Event) -> None:
    """Print progress until stopped, the duration is over, the job is idle or the query fails."""
    checker.sink.on_batch = _chain(checker.sink.on_batch, _print_batch)
    started = time.monotonic()
    next_summary = started + args.summary_every
    while not stop.wait(0.5):
        if checker.query.exception() is not None:
            raise SystemExit(f"scrutiny: the checker query failed: {checker.query.exception()}")
        now = time.monotonic()
        if args.duration is not None and now - started >= args.duration:
            break
        if args.until_idle is not None and checker.batches and now - checker.idle_since >= args.until_idle:
            print(f"idle for {args.until_idle:g} s: stopping", flush=True)
            break
        if now >= next_summary:
            _print_summary(settings)
            next_summary = now + args.summary_every
    _print_summary(settings)


def _chain(
    first: Callable[[BatchSummary], None] | None, second: Callable[[BatchSummary], None]
) -> Callable[[BatchSummary], None]:
    def both(summary: BatchSummary) -> None:
        if first is not None:
            first(summary)
        second(summary)

    return both


def _print_batch(s: BatchSummary) -> None:
    if not (s.checks or s.violations or s.resolved):
        return  # idle: only the watcher's ticks, or events that needed no check
    found = ", ".join(f"{c} {n}" for c, n in sorted(s.violations.items())) or "none"
    print(
        f"batch {s.batch_id}: {s.events} events, {s.checks} checks, {s.rpcs} RPCs, violations: {found}, "
        f"resolved {s.resolved}, retries pending {s.retries_pending} "
        f"({s.compute_seconds:.2f} s to compute, {s.seconds:.2f} s to write)",
        flush=True,
    )


def _print_summary(settings: Settings) -> None:
    """The open violations per category and severity, as ``scrutiny report`` counts them."""
    try:
        rows = read_open_violations(settings.checker.data_dir)
    except ScrutinyError as error:  # no table yet: nothing written so far
        log.debug("no summary: %s", error)
        return
    summary = summarize(rows, worst=0)
    lines = [f"open violations: {summary.open_violations} on {summary.ledgers_affected} ledgers"]
    print("\n".join(lines + category_table(summary)), flush=True)
