"""The checker at rest: CPU of an idle checker, how late its due timers fire, and a close's latency after idling.

Run from the repository root::

    .venv/bin/python -m bench.idle_bench                  # 10 minutes idle now, 2 minutes the former way (~20 min)
    .venv/bin/python -m bench.idle_bench --seconds 120    # 2 minutes idle in each mode
    .venv/bin/python -m bench.idle_bench --windows 3      # three 10-minute windows in a row (the JIT settling)
    .venv/bin/python -m bench.idle_bench --no-prefetch    # each Delta write builds its table's state itself
    .venv/bin/python -m bench.idle_bench --spark-heartbeat  # an idle batch's checker_runs row through Spark too
    .venv/bin/python -m bench.idle_bench --java-options="-XX:Tier4InvocationThreshold=50000"  # the driver's JVM

Two modes, one after the other, each on its own ZooKeeper, Kafka broker and simulated cluster (six bookies,
``--ledgers`` healthy closed ledgers, E=3/WQ=2/AQ=2, in a process of its own), with the watcher in a thread and the
checker on ``local[2]`` in this process:

* **batch every trigger** (the former design): Spark's no-data micro-batches on (with processing-time timers it runs
  one every ``checker.trigger_seconds``), no wake-up of the checker's own, the watcher's TICK every 5 s;
* **wake when due** (the defaults): micro-batches only for new records; the checker publishes a TICK when a timer is
  due, and one after ``checker.idle_batch_seconds`` without a batch; the watcher's TICK every 60 s.

In each: once every ledger is checked and 20 s have passed, the CPU of this process tree (sampled every second by
``bench.cpu_meter``, so that Python workers Spark stops meanwhile are counted; the Spark driver's JVM,
the Python workers, the driver and the watcher's thread; not the ZooKeeper, Kafka or bookie processes) over
``--seconds`` of nothing to do (``--baseline-seconds`` for the former design, whose cost is one batch per trigger,
steady), the micro-batches run meanwhile and the median of each of their phases (Spark's ``durationMs``), the
processes started meanwhile (Python workers that Spark stopped after an idle minute and starts again), and the JDK's
``jstat``'s count and time of the driver JVM's JIT compilations; with ``--windows`` n, n such stretches one after
the other, each reported on its own (the JVM still compiles the code of the backlog just checked in the first
minutes). Then
under-replication marks are written whose grace ends 15 s, 25 s ... later (nothing else happens): how late each
``UNDER_REPLICATION_STUCK`` is detected after its time. Then ``--closes`` open ledgers are closed 3 s apart:
close → row in ``ledger_checks``, as ``checker_bench`` measures it.

Prints the figures (progress notes on stderr); nothing is asserted: exit 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from bench.checker_bench import (
    add_java_options_argument,
    bench_session,
    checks_seen,
    close_ledger,
    spark_phases,
    start_simulator,
    stop_stack,
)
from bench.cpu_meter import CpuMeter
from scrutiny.connectors.tables.delta import read_table
from scrutiny.connectors.zookeeper.client import start_zookeeper_client
from scrutiny.core.zk_paths import underreplication_path
from scrutiny.core.zk_records import UnderReplicationMark, format_underreplication_mark
from scrutiny.services.embedded import embedded_settings
from scrutiny.services.servers import start_kafka, start_zookeeper
from scrutiny.settings.loader import Settings, load_settings
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.streaming.checker.job import RunningChecker, start_checker
from scrutiny.watcher.metrics import WatcherMetrics
from scrutiny.watcher.wiring import watcher_from_settings

log = logging.getLogger("bench.idle")

#: The marks' grace (verdict.under_replication_grace_seconds of the scenario).
GRACE_S = 600
MARKS = 5
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
FORMER = "batch every trigger"


def scenario_text(ledgers: int, closes: int) -> str:
    """Six bookies on three racks, healthy closed ledgers, open ones to close, and the marks' grace."""
    return f"""
[scenario]
name = "idle-bench"
seed = 5

[cluster]
bookies = 6
racks = ["/rack-a", "/rack-b", "/rack-c"]

[checker]
under_replication_grace_s = {GRACE_S}

[defaults]
ensemble_size = 3
write_quorum = 2
ack_quorum = 2
last_entry = 99
ensemble = "auto"

[[ledgers]]
ids = [[1, {ledgers}]]

[[ledgers]]
ids = [[{ledgers + 1}, {ledgers + closes}]]
state = "OPEN"
"""


@dataclass
class Figures:
    mode: str
    cpu_s: float
    watcher_cpu_s: float
    seconds: float
    batches: int
    processes_started: int  # in the tree during the window: Python workers Spark started again, mostly
    jit: tuple[int, float] | None = None  # the JVM's compilations and their seconds (None: no jstat)
    phases: dict[str, float] | None = None  # median ms of each phase of the window's micro-batches
    lateness_s: list[float] | None = None  # None: not measured after this window
    latencies_s: list[float] | None = None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600.0, help="idle time measured in the current mode")
    parser.add_argument(
        "--baseline-seconds", type=float, default=120.0, help="idle time measured in the former mode (steadier)"
    )
    parser.add_argument(
        "--windows", type=int, default=1, help="idle windows of --seconds, one after the other, in the current mode"
    )
    parser.add_argument("--ledgers", type=int, default=2_000, help="healthy closed ledgers of the cluster")
    parser.add_argument("--closes", type=int, default=20, help="ledgers closed after the idle time")
    parser.add_argument(
        "--idle-batch-seconds", type=float, default=None, help="checker.idle_batch_seconds (default: the settings')"
    )
    parser.add_argument(
        "--tick-seconds", type=int, default=None, help="watcher.tick_interval_seconds (default: the settings')"
    )
    parser.add_argument(
        "--no-prefetch", action="store_true", help="checker.prefetch_table_state = false in both modes (for comparison)"
    )
    parser.add_argument(
        "--spark-heartbeat",
        action="store_true",
        help="checker.runs_by_delta_rs = false in both modes: every checker_runs row through Spark",
    )
    add_java_options_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    spark = bench_session("idle-bench", args.java_options)
    try:
        results = [window for mode in (FORMER, "wake when due") for window in run_mode(spark, args, mode)]
    finally:
        spark.stop()
    print_figures(results)
    return 0


def run_mode(spark: SparkSession, args: argparse.Namespace, mode: str) -> list[Figures]:
    former = mode == FORMER
    spark.conf.set(NO_DATA_BATCHES, "true" if former else "false")
    # The Spark session outlives this mode's query: its state store maintenance may still be writing into the
    # checkpoint while the directory is removed, which must not end the benchmark.
    with tempfile.TemporaryDirectory(prefix="idle-bench-", ignore_cleanup_errors=True) as tmp_name:
        tmp = Path(tmp_name)
        zookeeper = start_zookeeper(tmp / "zookeeper", die_with_parent=True)
        kafka = start_kafka(tmp / "kafka", die_with_parent=True)
        try:
            text = scenario_text(args.ledgers, args.closes)
            (tmp / "scenario.toml").write_text(text, encoding="utf-8")
            settings = bench_settings(tmp, text, zookeeper.address, kafka.address, former=former)
            if args.no_prefetch:
                settings = replace(settings, checker=replace(settings.checker, prefetch_table_state=False))
            if args.spark_heartbeat:
                settings = replace(settings, checker=replace(settings.checker, runs_by_delta_rs=False))
            if not former:
                settings = with_intervals(settings, idle_batch_s=args.idle_batch_seconds, tick_s=args.tick_seconds)
            return measure(spark, settings, args, mode, tmp, servers=(zookeeper.pid, kafka.pid))
        finally:
            kafka.stop()
            zookeeper.stop()


def bench_settings(tmp: Path, text: str, zk: str, kafka: str, *, former: bool) -> Settings:
    settings = embedded_settings(load_settings(env={}), parse_scenario(text), zk, kafka)
    return replace(
        settings,
        kafka=replace(settings.kafka, partitions=2),
        watcher=replace(settings.watcher, tick_interval_seconds=5) if former else settings.watcher,
        checker=replace(
            settings.checker,
            data_dir=str(tmp / "data"),
            checkpoint_dir=str(tmp / "checkpoint"),
            shuffle_partitions=2,
            wake_on_timers=not former,
        ),
    )


def with_intervals(settings: Settings, *, idle_batch_s: float | None, tick_s: int | None) -> Settings:
    """``settings`` with the checker's heartbeat and the watcher's TICK at these intervals (None: unchanged)."""
    if idle_batch_s is not None:
        settings = replace(settings, checker=replace(settings.checker, idle_batch_seconds=idle_batch_s))
    if tick_s is not None:
        settings = replace(settings, watcher=replace(settings.watcher, tick_interval_seconds=tick_s))
    return settings


def measure(
    spark: SparkSession, settings: Settings, args: argparse.Namespace, mode: str, tmp: Path, *, servers: tuple[int, int]
) -> list[Figures]:
    """The mode's idle windows, one after the other (the former mode: one), then its timers and closes (reported with
    the last window)."""
    client = start_zookeeper_client(settings.zookeeper, timeout_s=30, hosts=settings.zookeeper.connect)
    simulator = start_simulator(tmp / "scenario.toml", settings.zookeeper.connect)
    stop = threading.Event()
    watcher = watcher_from_settings(settings, "bench", WatcherMetrics())
    watcher_thread: list[int] = []

    def watch() -> None:
        watcher_thread.append(threading.get_native_id())
        watcher.run(stop)

    threading.Thread(target=watch, daemon=True).start()
    checker = start_checker(spark, settings)
    data_dir = settings.checker.data_dir
    left_out = (simulator.pid, *servers)
    former = mode == FORMER
    windows = []
    try:
        wait_checked(data_dir, args.ledgers)
        log.info("%s: every ledger checked; idle from now on", mode)
        time.sleep(20)
        for window in range(1 if former else args.windows):
            label = mode if former or args.windows == 1 else f"{mode}, minutes {_minutes(args.seconds, window)}"
            windows.append(
                idle_window(
                    data_dir,
                    label,
                    args.baseline_seconds if former else args.seconds,
                    left_out,
                    watcher_thread,
                    checker=checker,
                    jvm_pid=spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(),  # type: ignore[union-attr]
                )
            )
        windows[-1].lateness_s = timer_lateness(client, data_dir, args.ledgers)
        windows[-1].latencies_s = close_latencies(client, data_dir, args)
    finally:
        stop_stack(checker, stop, simulator, watcher=watcher, client=client, spark=None)  # Spark serves both modes
    return windows


def _minutes(seconds: float, window: int) -> str:
    return f"{window * seconds / 60:g}–{(window + 1) * seconds / 60:g}"


def idle_window(
    data_dir: str,
    label: str,
    seconds: float,
    left_out: tuple[int, ...],
    watcher_thread: list[int],
    *,
    checker: RunningChecker,
    jvm_pid: int,
) -> Figures:
    """The CPU of this process tree (the watcher's thread apart) and the micro-batches over ``seconds`` of idling."""
    runs_before = len(read_table(data_dir, "checker_runs"))
    seen = {report.batchId for report in checker.query.recentProgress}
    jit_before = jit_totals(jvm_pid)  # jstat is a JVM of its own in this tree: before the meter starts
    meter = CpuMeter(os.getpid(), exclude=left_out).start()  # counts the Python workers Spark stops meanwhile
    watcher_cpu, clock = thread_cpu(watcher_thread), time.time()
    time.sleep(seconds)
    cpu = meter.stop()
    started = meter.processes_started()
    jit_after = jit_totals(jvm_pid)
    watcher_cpu = thread_cpu(watcher_thread) - watcher_cpu
    elapsed = time.time() - clock
    batches = len(read_table(data_dir, "checker_runs")) - runs_before
    log.info("%s: %.1f s of CPU in %.0f s, %d micro-batches", label, cpu, elapsed, batches)
    jit = None
    if jit_before is not None and jit_after is not None:
        jit = (jit_after[0] - jit_before[0], jit_after[1] - jit_before[1])
    ran = [r for r in checker.query.recentProgress if r.batchId not in seen and "addBatch" in (r.durationMs or {})]
    phases = spark_phases(ran)
    if ran:  # the sink's own split of addBatch, over the window's batches (the last ones the checker kept)
        phases["of which computing the batch"] = 1000 * statistics.median(checker.compute_seconds[-len(ran) :])
        phases["of which the Delta writes"] = 1000 * statistics.median(checker.write_seconds[-len(ran) :])
    return Figures(label, cpu - watcher_cpu, watcher_cpu, elapsed, batches, started, jit, phases)


def jit_totals(pid: int) -> tuple[int, float] | None:
    """The JVM ``pid``'s compilations so far and the time its JIT compilers spent on them (the JDK's ``jstat``)."""
    try:
        out = subprocess.run(
            ["jstat", "-compiler", str(pid)], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    values = out.splitlines()[1].split()  # Compiled Failed Invalid Time FailedType FailedMethod
    return int(values[0]), float(values[3])


def wait_checked(data_dir: str, ledgers: int) -> None:
    deadline = time.monotonic() + 900
    while len(checks_seen(data_dir)) < ledgers:
        if time.monotonic() > deadline:
            raise SystemExit("the ledgers were not all checked within 15 minutes")
        time.sleep(2)


def thread_cpu(native_id: list[int]) -> float:
    """CPU seconds of this process's thread ``native_id[0]`` (Linux /proc)."""
    fields = Path(f"/proc/self/task/{native_id[0]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timer_lateness(client: KazooClient, data_dir: str, ledgers: int) -> list[float]:
    """Mark ``MARKS`` ledgers under-replicated, their grace ending 15 s, 25 s ... from now; how late each
    ``UNDER_REPLICATION_STUCK`` is detected after that time."""
    now_ms = time.time_ns() // 1_000_000
    due = {ledger: now_ms + (15 + 10 * index) * 1000 for index, ledger in enumerate(range(1, MARKS + 1))}
    for ledger, due_ms in due.items():
        mark = UnderReplicationMark(replicas=("bookie-1",), ctime_ms=due_ms - GRACE_S * 1000)
        client.create(underreplication_path(ledger), format_underreplication_mark(mark), makepath=True)
    deadline = time.monotonic() + 15 + 10 * MARKS + 120
    found: dict[int, float] = {}
    while len(found) < MARKS and time.monotonic() < deadline:
        time.sleep(1)
        try:
            rows = read_table(data_dir, "violations").to_pylist()
        except Exception:
            continue
        for row in rows:
            if row["category"] == "UNDER_REPLICATION_STUCK" and row["ledger_id"] in due:
                found[row["ledger_id"]] = row["detected_at"].timestamp() - due[row["ledger_id"]] / 1000
    if len(found) < MARKS:
        log.warning("only %d of %d stuck marks were reported", len(found), MARKS)
    assert ledgers >= MARKS
    return sorted(found.values())


def close_latencies(client: KazooClient, data_dir: str, args: argparse.Namespace) -> list[float]:
    """Close ``args.closes`` open ledgers 3 s apart; close → row visible in ``ledger_checks`` for each."""
    seen: dict[int, float] = {}
    closed: dict[int, float] = {}
    for index in range(args.closes):
        ledger = args.ledgers + 1 + index
        close_ledger(client, ledger)
        closed[ledger] = time.time()
        until = time.monotonic() + 3
        while time.monotonic() < until:
            for ledger_id, when in checks_seen(data_dir).items():
                seen.setdefault(ledger_id, when)
            time.sleep(0.1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(ledger in seen for ledger in closed):
        for ledger_id, when in checks_seen(data_dir).items():
            seen.setdefault(ledger_id, when)
        time.sleep(0.1)
    return [seen[ledger] - at for ledger, at in closed.items() if ledger in seen]


def _spread(values: list[float] | None, form: str) -> str:
    """Median / max of ``values`` ("—": not measured, "none": nothing seen)."""
    if values is None:
        return "—"
    if not values:
        return "none"
    return f"{form.format(statistics.median(values))} / {form.format(max(values))}"


def _jit(r: Figures) -> str:
    if r.jit is None:
        return "–"
    return f"{100 * r.jit[1] / r.seconds:.1f} % ({r.jit[0]} methods, {r.jit[1]:.1f} s)"


def print_figures(results: list[Figures]) -> None:
    print(
        "| mode | CPU of the idle checker (% of one core) | micro-batches per minute | processes started "
        "| watcher (% of a core) "
        "| of which JIT compiling | due timer detected after its time: median / max | close → row: p50 / max |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        late = _spread(r.lateness_s, "{:.1f} s")
        close = _spread(r.latencies_s, "{:.2f} s")
        print(
            f"| {r.mode} | {100 * r.cpu_s / r.seconds:.1f} % ({r.cpu_s:.1f} s in {r.seconds:.0f} s) "
            f"| {60 * r.batches / r.seconds:.1f} | {r.processes_started} "
            f"| {100 * r.watcher_cpu_s / r.seconds:.2f} % | {_jit(r)} | {late} | {close} |"
        )
    for r in results:
        if r.phases:
            phases = ", ".join(f"{name} {ms:.0f}" for name, ms in r.phases.items())
            print(f"{r.mode}, a micro-batch's phases (median ms): {phases}")
    before, after = results[0], results[-1]
    if after.cpu_s > 0:
        ratio = (before.cpu_s / before.seconds) / (after.cpu_s / after.seconds)
        print(f"idle CPU per second, {FORMER} / wake when due: {ratio:.1f}×")


if __name__ == "__main__":
    raise SystemExit(main())
