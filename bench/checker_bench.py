"""The streaming checker end to end: checks per second, detection latency, state per ledger.

Run from the repository root::

    .venv/bin/python -m bench.checker_bench            # 20k-ledger backlog, 100 closes/s for 30 s
    .venv/bin/python -m bench.checker_bench --quick    # 5k backlog, 100 closes/s for 10 s
    .venv/bin/python -m bench.checker_bench --seconds 480 --window 60  # 8 min of closes, p50 per minute (~11 min)
    .venv/bin/python -m bench.checker_bench --no-prefetch  # each write builds its table's Delta state itself
    .venv/bin/python -m bench.checker_bench --findings-by-spark  # ledger_checks and the other appends through Spark
    .venv/bin/python -m bench.checker_bench --rounds 3 --seconds 3  # the backlog again in the same, warm, JVM
    .venv/bin/python -m bench.checker_bench --burst --seconds 3 --stages  # and as rechecks to the running checker
    .venv/bin/python -m bench.checker_bench --burst 4 --seconds 3  # 4 such bursts, one after the other

It starts its own ZooKeeper and Kafka broker in a temporary directory, a simulated cluster of 9 bookies
(healthy ledgers, E=3/WQ=2/AQ=2, 100 entries, "auto" ensembles) in a process of its own
(``scrutiny simulate``: bookies are other machines in real life, so they do not share this
process's interpreter), the watcher and the checker on ``local[2]`` (tables and checkpoint in the
temporary directory), and stops everything at the end.

1. **backlog**: the cluster starts with ``--backlog`` closed ledgers; the watcher's snapshot puts
   them all in Kafka at once and the checker works through them. Checks per second = ledgers
   checked / time from the trigger of the first micro-batch with checks to the end of the last one (Spark's
   progress reports: query planning, the computation, the Delta writes, the offsets' commit), i.e. the sustained
   rate when work is always waiting. (Until 2026-12-07 the time ran from the first batch's output reaching the sink
   to the last one's ``checker_runs`` row being made, leaving out the planning and the Delta writes; both are
   logged.) With ``--rounds N`` the same
   backlog is then checked N - 1 times more in the same Spark session, each time by a checker of its own (a new
   checkpoint and tables, reading the topic from its start): the first round pays for a cold JVM (its JIT compiling
   Spark's, Delta's and Kafka's code, the first query plans), the later ones show the rate of a checker that has
   been running. With ``--burst``, a LEDGER_RECHECK for every backlog ledger is then put in Kafka at once (what the
   watcher publishes for a bookie whose cookie changed) and the checker already running checks them all again: its
   JVM, query plan and tables' state warm; ``--burst N`` does that N times, one after the other (the later rounds
   with the JVM's compilers done). ``--stages`` logs each pass's largest batch stage by stage. ``--partitions``
   sets the topic's partitions and the stateful step's (2, one per core, unless given).
2. **latency**: then ``--rate`` open ledgers per second are closed for ``--seconds`` seconds (each
   a ``set`` of its CLOSED metadata in ZooKeeper, as BookKeeper's close is); for each, the time from its close to
   its row being visible in the ``ledger_checks`` Delta table (polled every 0.1 s by a reader), as
   p50 / p99 / max, with the micro-batch durations of that phase, and the p50 of each ``--window`` seconds of closes
   in order (the Spark driver's JVM is still compiling its code in the first minutes: a long ``--seconds`` shows
   the latency it settles at).
3. **state**: the checkpoint's state store size per ledger tracked, and one healthy closed
   ledger's state value in bytes.

Prints the figures (progress notes on stderr); nothing is asserted: exit 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from deltalake import DeltaTable
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from bench.cpu_meter import tree_cpu_seconds
from scrutiny.connectors.kafka.config import kafka_client_config
from scrutiny.connectors.kafka.events import Publisher, recheck_event
from scrutiny.connectors.kafka.publisher import EventPublisher, TopicConfig
from scrutiny.connectors.tables.delta import read_table, table_uri
from scrutiny.connectors.zookeeper.client import start_zookeeper_client
from scrutiny.connectors.zookeeper.tree import node_of
from scrutiny.core.ledger_metadata import LedgerState, decode_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.ledger_tracker import TrackedLedger
from scrutiny.core.zk_paths import ledger_path
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.services.embedded import embedded_settings
from scrutiny.services.servers import start_kafka, start_zookeeper
from scrutiny.settings.loader import Settings, load_settings
from scrutiny.settings.sections import CheckerSection
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.streaming.checker.job import RunningChecker, start_checker
from scrutiny.streaming.session import BASE_CONF, build_spark_session
from scrutiny.watcher.metrics import WatcherMetrics
from scrutiny.watcher.wiring import watcher_from_settings

log = logging.getLogger("bench.checker")

#: (ledgers checked, seconds, batches) of a pass over the backlog, and its CPU seconds (all but the bookies, bookies).
BacklogRound = tuple[tuple[int, float, int], tuple[float, float]]


def scenario_text(backlog: int, open_ledgers: int) -> str:
    """Healthy closed ledgers 1..backlog, then open ones to close during the latency phase (none: no such block)."""
    opened = f"""
[[ledgers]]
ids = [[{backlog + 1}, {backlog + open_ledgers}]]
state = "OPEN"
"""
    return f"""
[scenario]
name = "checker-bench"
seed = 11

[cluster]
bookies = 9
racks = ["/rack-a", "/rack-b", "/rack-c"]

[defaults]
ensemble_size = 3
write_quorum = 2
ack_quorum = 2
last_entry = 99
ensemble = "auto"

[[ledgers]]
ids = [[1, {backlog}]]
""" + (opened if open_ledgers else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5k backlog, 10 s of closes")
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=100.0, help="closes per second in the latency phase")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the latency phase")
    parser.add_argument("--trigger", type=float, default=0.5, help="checker.trigger_seconds")
    parser.add_argument(
        "--window", type=float, default=30.0, help="the latency phase's p50 is also printed per window of closes (s)"
    )
    parser.add_argument(
        "--no-prefetch",
        action="store_true",
        help="checker.prefetch_table_state = false: each write builds its table's Delta state (for comparison)",
    )
    parser.add_argument(
        "--findings-by-spark",
        action="store_true",
        help="checker.findings_by_delta_rs = false: ledger_checks, violations, rejected_events through Spark",
    )
    parser.add_argument(
        "--compact-min-files",
        type=int,
        default=CheckerSection().compact_min_files,
        help="checker.compact_min_files (0: the tables are not compacted, for comparison)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=2,
        help="Kafka partitions of the topic (the fetch stage's tasks) and checker.shuffle_partitions (the stateful"
        " step's): 2, one per core, unless given",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="check the backlog this many times in the same JVM, each by a new checker (checkpoint and tables)",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="log the Spark stages of each round's largest batch: wall time, tasks, task time (Spark's event log)",
    )
    parser.add_argument(
        "--burst",
        type=int,
        nargs="?",
        const=1,
        default=0,
        metavar="N",
        help="then a LEDGER_RECHECK for every backlog ledger at once, to the checker already running (a last round);"
        " N: that many such rounds, one after another (the later ones with the JVM's compilers done)",
    )
    add_java_options_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.backlog, args.seconds = 5_000, 10.0
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    closes = int(args.rate * args.seconds)
    with tempfile.TemporaryDirectory(prefix="checker-bench-") as tmp, running_servers(Path(tmp)) as (zk, kafka):
        run(args, Path(tmp), zk, kafka, closes)
    return 0


def add_java_options_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--java-options",
        default="",
        help="more options for the Spark driver's JVM, after the product's own (e.g. the JIT's thresholds)",
    )


def bench_session(name: str, java_options: str = "", *, event_log: Path | None = None) -> SparkSession:
    """The benchmarks' Spark session: ``local[2]``, 2 shuffle partitions, ``java_options`` added to the driver's;
    Spark's event log (uncompressed JSON lines) written under ``event_log`` when given."""
    conf = {"spark.sql.shuffle.partitions": "2"}
    if event_log is not None:
        event_log.mkdir(parents=True, exist_ok=True)
        conf |= {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": event_log.resolve().as_uri(),
            "spark.eventLog.compress": "false",
        }
    if java_options:
        conf["spark.driver.extraJavaOptions"] = f"{BASE_CONF['spark.driver.extraJavaOptions']} {java_options}"
    return build_spark_session(name, master="local[2]", conf=conf)


@contextmanager
def running_servers(tmp: Path) -> Iterator[tuple[str, str]]:
    zookeeper = start_zookeeper(tmp / "zookeeper", die_with_parent=True)
    try:
        kafka = start_kafka(tmp / "kafka", die_with_parent=True)
        try:
            yield zookeeper.address, kafka.address
        finally:
            kafka.stop()
    finally:
        zookeeper.stop()


def run(args: argparse.Namespace, tmp: Path, zk: str, kafka: str, closes: int) -> None:
    text = scenario_text(args.backlog, closes)
    scenario = parse_scenario(text)
    (tmp / "scenario.toml").write_text(text, encoding="utf-8")
    settings = embedded_settings(load_settings(env={}), scenario, zk, kafka)
    settings = replace(
        settings,
        kafka=replace(settings.kafka, partitions=args.partitions),
        checker=replace(
            settings.checker,
            data_dir=str(tmp / "data"),
            checkpoint_dir=str(tmp / "checkpoint"),
            trigger_seconds=args.trigger,
            shuffle_partitions=args.partitions,
            prefetch_table_state=not args.no_prefetch,
            compact_min_files=args.compact_min_files,
            findings_by_delta_rs=not args.findings_by_spark,
        ),
    )
    client = start_zookeeper_client(settings.zookeeper, timeout_s=30, hosts=zk)
    simulator = start_simulator(tmp / "scenario.toml", zk)
    log.info("cluster up: %d ledgers", args.backlog + closes)
    stop = threading.Event()
    watcher = watcher_from_settings(settings, "bench", WatcherMetrics())
    threading.Thread(target=watcher.run, args=(stop,), daemon=True).start()
    events = tmp / "events" if args.stages else None
    spark = bench_session("checker-bench", args.java_options, event_log=events)
    checker = start_checker(spark, settings)
    rounds: list[BacklogRound] = []
    bursts: list[BacklogRound] = []
    try:
        rounds.append(backlog_round(checker, settings.checker.data_dir, args.backlog, simulator.pid, events))
        for index in range(2, args.rounds + 1):
            checker.stop()
            settings = round_settings(settings, tmp / f"round-{index}")
            checker = start_checker(spark, settings)
            rounds.append(backlog_round(checker, settings.checker.data_dir, args.backlog, simulator.pid, events))
        for _ in range(args.burst):
            sent = publish_rechecks(settings, client, range(1, args.backlog + 1))
            bursts.append(
                backlog_round(checker, settings.checker.data_dir, args.backlog, simulator.pid, events, after=sent)
            )
        closed, batch_seconds = latency_phase(client, settings.checker.data_dir, args, closes)
        state = state_bytes(Path(settings.checker.checkpoint_dir))
        phases = spark_phases(checker.query.recentProgress)
        phases["of which computing the batch"] = 1000 * statistics.median(checker.compute_seconds or [0.0])
        phases["of which the Delta writes"] = 1000 * statistics.median(checker.write_seconds or [0.0])
    finally:
        stop_stack(checker, stop, simulator, watcher=watcher, client=client, spark=spark)
    backlog_rate, cpu = rounds[0]
    report(
        args,
        backlog=backlog_rate,
        closed=closed,
        batches=batch_seconds,
        state=state,
        ledgers=args.backlog + closes,
    )
    print(
        f"CPU during the backlog: {cpu[0]:.1f} s in this process tree (Spark driver and workers, the watcher, "
        f"the ZooKeeper and Kafka servers: all but the bookies) = {1000 * cpu[0] / backlog_rate[0]:.2f} ms per check, "
        f"{cpu[1]:.1f} s in the simulated bookies' process"
    )
    for index, ((checked, seconds, batches), (cpu_s, _)) in enumerate(rounds[1:] + bursts, start=2):
        what = "a new checker, checkpoint and tables"
        if index > len(rounds):
            what = "LEDGER_RECHECKs for the checker already running"
        print(
            f"round {index}, the backlog again in the same JVM ({what}): {checked} "
            f"ledgers in {seconds:.1f} s over {batches} batches = {checked / seconds:,.0f}/s, "
            f"{1000 * cpu_s / checked:.2f} ms of CPU per check"
        )
    print(
        "Spark's phases of the recent micro-batches (median ms): "
        + ", ".join(f"{k} {v:.0f}" for k, v in phases.items())
    )


def backlog_round(
    checker: RunningChecker,
    data_dir: str,
    backlog: int,
    simulator: int,
    events: Path | None = None,
    *,
    after: float = 0.0,
) -> BacklogRound:
    """One checker's pass over the backlog, in its batches that started after ``after`` (epoch seconds): (ledgers
    checked, seconds of those batches from the first one's trigger to the last one's end, batches), and the CPU seconds
    it took (this process tree without the simulator, the simulator); the phases of its largest batch are logged, and
    its Spark stages when Spark writes its event log under ``events``."""
    cpu_before = tree_cpu_seconds(os.getpid(), exclude=simulator)
    sim_before = tree_cpu_seconds(simulator)
    runs = wait_checked(data_dir, backlog, after)
    cpu = tree_cpu_seconds(os.getpid(), exclude=simulator) - cpu_before, tree_cpu_seconds(simulator) - sim_before
    checked, computed, _ = sink_figures(runs)
    working = [r["started_at"].timestamp() for r in runs]
    progress, spans = batch_spans(checker, working)
    seconds = max(end for _, end in spans) - min(start for start, _ in spans)
    largest = max((p for p in progress if trigger_span(p)[0] >= after), key=lambda p: p.numInputRows)
    phases = spark_phases([largest])
    if checker.batches <= len(checker.compute_seconds):  # a new checkpoint: the sink's n-th batch is batch n
        phases["of which computing the batch"] = 1000 * checker.compute_seconds[largest.batchId]
        phases["of which the Delta writes"] = 1000 * checker.write_seconds[largest.batchId]
    log.info(
        "the backlog: %.1f s of whole batches, %.1f s from the first's output to the last's rows made (the measure"
        " before 2026-12-07); its largest batch (%d events), ms: %s",
        seconds,
        computed,
        largest.numInputRows,
        ", ".join(f"{k} {v:.0f}" for k, v in phases.items()),
    )
    if events is not None:
        start, end = trigger_span(largest)
        for stage in stages_between(events, start, end):
            log.info("  stage %s", stage)
    return (checked, seconds, len(runs)), cpu


def batch_spans(checker: RunningChecker, working: list[float]) -> tuple[list[Any], list[tuple[float, float]]]:
    """The query's recent progress and the trigger spans of its batches that hold the ``working`` times (each a
    ``checker_runs`` row's start, epoch seconds). A batch's progress is posted after its sink made its rows: waits
    (up to 30 s) until every one of them is in."""
    deadline = time.monotonic() + 30
    while True:
        progress = checker.query.recentProgress
        spans = [span for span in map(trigger_span, progress) if any(span[0] <= at <= span[1] for at in working)]
        covered = all(any(start <= at <= end for start, end in spans) for at in working)
        if covered or time.monotonic() > deadline:
            return progress, spans
        time.sleep(0.1)


def wait_checked(data_dir: str, checks: int, after: float) -> list[dict[str, Any]]:
    """The ``checker_runs`` rows with checks of the batches started after ``after`` (epoch seconds), once they have
    checked ``checks`` ledgers in all."""
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        try:
            rows = read_table(data_dir, "checker_runs").to_pylist()
        except Exception:  # not created yet
            rows = []
        runs = [r for r in rows if r["ledgers_checked"] and r["started_at"].timestamp() >= after]
        done = sum(r["ledgers_checked"] for r in runs)
        log.info("backlog: %d / %d checked", done, checks)
        if done >= checks:
            return runs
        time.sleep(2)
    raise SystemExit(f"the checker did not check {checks} ledgers within 30 minutes")


def publish_rechecks(settings: Settings, client: KazooClient, ledgers: range) -> float:
    """A LEDGER_RECHECK for each of ``ledgers`` (reason COOKIE_CHANGED, the first bookie of its ensemble: what the
    watcher publishes for every ledger of a bookie whose cookie changed), put in Kafka at once; returns when the
    first was sent (epoch seconds). The znodes are read first."""
    root = settings.zookeeper.ledgers_root
    nodes = {ledger: node_of(*client.get(ledger_path(ledger, root=root))) for ledger in ledgers}
    publisher = Publisher("bench-burst", 1, root)
    topic = TopicConfig(settings.kafka.topic, partitions=settings.kafka.partitions, max_pending=len(nodes) + 1)
    sender = EventPublisher(kafka_client_config(settings.kafka).kwargs("bench-burst"), topic)
    started = time.time()
    now_ms = int(started * 1000)
    try:
        for ledger, node in nodes.items():
            bookie = decode_ledger_metadata(node.data).segments[0].ensemble[0]
            reason = pb.RecheckReason.COOKIE_CHANGED
            sender.publish(recheck_event(ledger, node, reason, bookie, publisher, observed_ms=now_ms))
        sender.flush(60)
    finally:
        sender.close()
    return started


def stages_between(event_log: Path, start: float, end: float, *, shortest_ms: int = 100) -> list[str]:
    """The Spark stages submitted between ``start`` and ``end`` (epoch seconds) that ran ``shortest_ms`` or more, from
    the event log under ``event_log``: wall time, tasks, the tasks' summed run time, and the stage's name."""
    run_ms: dict[int, list[int]] = {}
    stages: list[str] = []
    for path in sorted(event_log.rglob("events_*")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerTaskEnd":
                metrics = event.get("Task Metrics") or {}
                run_ms.setdefault(event["Stage ID"], []).append(int(metrics.get("Executor Run Time", 0)))
            elif event["Event"] == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                submitted, completed = info.get("Submission Time", 0), info.get("Completion Time", 0)
                wall = completed - submitted
                if start * 1000 <= submitted <= end * 1000 and wall >= shortest_ms:
                    tasks = run_ms.get(info["Stage ID"], [])
                    stages.append(
                        f"+{submitted / 1000 - start:.2f} s: {wall} ms, {len(tasks)} tasks running {sum(tasks)} ms: "
                        f"{info['Stage Name'][:60]}"
                    )
    return stages


def trigger_span(progress: Any) -> tuple[float, float]:
    """(start, end) of a micro-batch in epoch seconds, from its progress report: its trigger to its end (the query
    planning, the computation, the sink's writes and the commit of its offsets)."""
    start = datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp()
    return start, start + progress.durationMs["triggerExecution"] / 1000


def round_settings(settings: Settings, directory: Path) -> Settings:
    """``settings`` with the checker's tables and checkpoint under ``directory``."""
    checker = replace(settings.checker, data_dir=str(directory / "data"), checkpoint_dir=str(directory / "checkpoint"))
    return replace(settings, checker=checker)


def start_simulator(scenario: Path, zk: str, ready: dict[str, Any] | None = None) -> subprocess.Popen[str]:
    """``scrutiny simulate`` in its own process; returns once it printed that the cluster is up (that document is
    put in ``ready`` when given: ``started_at_ms``, the bookies...)."""
    command = [sys.executable, "-m", "scrutiny.cli", "simulate", str(scenario), "--zookeeper", zk]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("{"):
        process.kill()
        raise SystemExit(f"the simulator did not start: {line!r}")
    if ready is not None:
        ready.update(json.loads(line))
    return process


def stop_stack(
    checker: Any,
    stop: threading.Event,
    simulator: subprocess.Popen[str],
    *,
    watcher: Any,
    client: KazooClient,
    spark: Any,
) -> None:
    """Stop what a benchmark started, the checker first: its watcher thread, the simulator, the clients, Spark
    (``spark`` None: left running)."""
    checker.stop()
    stop.set()
    simulator.terminate()
    simulator.wait(timeout=60)
    watcher.zk.stop()
    client.stop()
    if spark is not None:
        spark.stop()


def close_ledger(client: KazooClient, ledger_id: int) -> None:
    """What BookKeeper's close does to the znode: CLOSED, lastEntryId = the last entry written (99)."""
    path = ledger_path(ledger_id, root="/ledgers")
    data, stat = client.get(path)
    metadata = decode_ledger_metadata(data)
    closed = replace(metadata, state=LedgerState.CLOSED, last_entry_id=99, length=100 * 1024)
    client.set(path, encode_ledger_metadata_v3(closed), version=stat.version)


class ChecksPoller:
    """The ledgers whose check became visible in ``ledger_checks`` since the last poll, reading only the new files.

    Reading the whole table ten times a second (as :func:`checks_seen` does) costs this process a growing share of the
    machine's two cores while the checker is being measured; this reader follows the table's log (delta-rs, read
    incrementally) and opens each data file once.
    """

    def __init__(self, data_dir: str) -> None:
        self.uri = table_uri(data_dir, "ledger_checks")
        self.table: DeltaTable | None = None
        self.files: set[str] = set()

    def poll(self) -> list[int]:
        """Ledger ids in files added since the last call (empty while the table does not exist)."""
        if self.table is None:
            if not DeltaTable.is_deltatable(self.uri):
                return []
            self.table = DeltaTable(self.uri)
        else:
            self.table.update_incremental()
        paths = self.table.get_add_actions(flatten=True).column("path").to_pylist()
        added = [path for path in paths if path not in self.files]
        self.files.update(added)
        return [
            ledger
            for path in added
            for ledger in pq.read_table(f"{self.uri}/{path}", columns=["ledger_id"]).column(0).to_pylist()
        ]


def checks_seen(data_dir: str) -> dict[int, float]:
    """Ledger id -> now, for every check in ``ledger_checks`` (the whole table: for slow polls)."""
    try:
        rows = read_table(data_dir, "ledger_checks").column("ledger_id").to_pylist()
    except Exception:
        return {}
    now = time.time()
    return dict.fromkeys(rows, now)


def wait_backlog(data_dir: str, backlog: int) -> tuple[int, float, int]:
    """(ledgers checked, seconds from the first batch with checks reaching the sink to the last one's ``checker_runs``
    row being made, micro-batches with checks) for the snapshot backlog."""
    return sink_figures(wait_checked(data_dir, backlog, after=0.0))


def sink_figures(runs: list[dict[str, Any]]) -> tuple[int, float, int]:
    """(ledgers checked, seconds from the first run's output reaching the sink to the last one's row being made, runs)
    of ``checker_runs`` rows with checks."""
    start, end = min(r["started_at"] for r in runs), max(r["finished_at"] for r in runs)
    return sum(r["ledgers_checked"] for r in runs), (end - start).total_seconds(), len(runs)


def latency_phase(
    client: KazooClient, data_dir: str, args: argparse.Namespace, closes: int
) -> tuple[list[tuple[float, float]], list[float]]:
    """Close ``closes`` ledgers at ``args.rate``/s; (seconds into the phase, close-to-visible-in-Delta latency) of each
    close seen, and the phase's batch durations."""
    first = args.backlog + 1
    closed_at: dict[int, float] = {}
    seen: dict[int, float] = {}
    done = threading.Event()

    def poll() -> None:
        poller = ChecksPoller(data_dir)
        while not done.is_set():
            ledgers = poller.poll()
            now = time.time()
            for ledger in ledgers:
                seen.setdefault(ledger, now)
            time.sleep(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    phase_start = time.time()
    started = time.monotonic()
    for index in range(closes):
        due = started + index / args.rate
        time.sleep(max(0.0, due - time.monotonic()))
        ledger = first + index
        close_ledger(client, ledger)
        closed_at[ledger] = time.time()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(ledger in seen for ledger in closed_at):
        time.sleep(0.2)
    done.set()
    poller.join(timeout=5)
    closed = [(at - phase_start, seen[ledger] - at) for ledger, at in closed_at.items() if ledger in seen]
    runs = read_table(data_dir, "checker_runs").to_pylist()
    batches = [(r["finished_at"] - r["started_at"]).total_seconds() for r in runs]
    phase = [r for r in runs if r["started_at"].timestamp() >= phase_start]
    durations = [r["duration_ms"] / 1000 for r in phase] or batches
    missing = closes - len(closed)
    if missing:
        log.warning("%d closes never reached the table within the deadline", missing)
    return closed, durations


def windowed_p50(closed: list[tuple[float, float]], window_s: float) -> list[tuple[float, float]]:
    """(window start, p50 latency) of the closes made in each ``window_s`` of the phase that has any, in order (a
    JVM's warm-up shows here; a window whose closes were all missed is absent, not shifted onto the next)."""
    windows: dict[int, list[float]] = {}
    for at, latency in closed:
        windows.setdefault(int(at // window_s), []).append(latency)
    return [(index * window_s, percentile(windows[index], 0.5)) for index in sorted(windows)]


def spark_phases(progress: list[Any]) -> dict[str, float]:
    """Median of each ``durationMs`` phase, and of the state operator's times, over the recent progress reports."""
    phases: dict[str, list[float]] = {}
    for report_ in progress:
        for name, value in (report_.durationMs or {}).items():
            phases.setdefault(name, []).append(float(value))
        for operator in report_.stateOperators or []:
            for name in ("allUpdatesTimeMs", "commitTimeMs"):
                phases.setdefault(f"state {name}", []).append(float(getattr(operator, name, 0) or 0))
    return {name: statistics.median(values) for name, values in sorted(phases.items())}


def state_bytes(checkpoint: Path) -> int:
    total = 0
    for root, _, files in os.walk(checkpoint / "state"):
        total += sum((Path(root) / name).stat().st_size for name in files)
    return total


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def report(
    args: argparse.Namespace,
    *,
    backlog: tuple[int, float, int],
    closed: list[tuple[float, float]],
    batches: list[float],
    state: int,
    ledgers: int,
) -> None:
    checked, seconds, batch_count = backlog
    latencies = [latency for _, latency in closed]
    healthy = TrackedLedger(version=1, checked=True, changed_ms=1_795_000_000_000)
    print(
        f"machine: {os.cpu_count()} cores; checker on local[2], trigger {args.trigger} s,"
        f" {args.partitions} Kafka partitions"
    )
    print(
        f"backlog: {checked} ledgers checked in {seconds:.1f} s over {batch_count} batches = {checked / seconds:,.0f}/s"
    )
    print(
        f"latency, close in ZooKeeper -> row visible in ledger_checks, {len(latencies)} closes at {args.rate:g}/s: "
        f"p50 {percentile(latencies, 0.5):.2f} s, p99 {percentile(latencies, 0.99):.2f} s, "
        f"max {max(latencies, default=float('nan')):.2f} s"
    )
    print(
        f"p50 by {args.window:g} s of closes (from the window's start, s: p50, s): "
        + ", ".join(f"{start:g}: {p50:.2f}" for start, p50 in windowed_p50(closed, args.window))
    )
    print(
        f"micro-batches in that phase: {len(batches)}, median {statistics.median(batches):.2f} s, "
        f"max {max(batches):.2f} s"
        if batches
        else "micro-batches: none recorded"
    )
    print(
        f"state: {state / 1e6:.1f} MB in the checkpoint's state store for {ledgers} ledgers "
        f"= {state / ledgers:.0f} B per ledger (RocksDB files, all versions kept by Spark); "
        f"one healthy closed ledger's value: {len(healthy.to_bytes())} B"
    )


if __name__ == "__main__":
    sys.exit(main())
