"""The rolling re-verification's steady cost: CPU, bookie requests and ZooKeeper reads per re-checked ledger.

Run from the repository root::

    .venv/bin/python -m bench.reverify_bench            # 20k ledgers, a 20 s interval, 60 s measured, twice
    .venv/bin/python -m bench.reverify_bench --quick    # 5k ledgers, a 10 s interval, 30 s measured, once

It starts its own ZooKeeper and Kafka broker, a simulated cluster of 9 bookies in a process of its own
(``scrutiny simulate``, as bench.checker_bench), the watcher, and the checker on ``local[2]`` in turns (baseline,
scrub, baseline, scrub: ``--rounds`` of each, the machine's drift shared), each on a fresh checkpoint and data
directory, measured once the first checks of every ledger are done:

1. **baseline**: ``checker.reverify_interval = 0`` (no re-verification): the CPU of this process tree (Spark driver
   and workers, the watcher, ZooKeeper, Kafka; the bookies apart) and of the bookies over the window, ticks only;
2. **scrub**: ``checker.reverify_interval = --interval`` seconds, no rate limit: every ledger comes due once per
   interval, so the window re-checks about ledgers × window / interval of them.

The scrub's cost per re-checked ledger is the CPU above the baseline divided by the re-checks counted in
``ledger_checks`` (rows without ``latency_ms`` in the window), with the bookie requests of ``checker_runs.rpcs``
per re-check. From those: what ``reverify_interval`` costs for 10 M ledgers (the rate, the cores). Prints the
figures; nothing is asserted: exit 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from bench.checker_bench import running_servers, scenario_text, start_simulator, wait_backlog
from bench.cpu_meter import tree_cpu_seconds
from scrutiny.connectors.tables.delta import read_table
from scrutiny.services.embedded import embedded_settings
from scrutiny.settings.loader import Settings, load_settings
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.streaming.checker.job import start_checker
from scrutiny.streaming.session import build_spark_session
from scrutiny.watcher.metrics import WatcherMetrics
from scrutiny.watcher.wiring import watcher_from_settings

log = logging.getLogger("bench.reverify")

#: The cluster a user sizes for.
TARGET_LEDGERS = 10_000_000
WEEK_S = 7 * 86_400


@dataclass(frozen=True)
class Window:
    """One measured window of a checker run."""

    seconds: float
    cpu_s: float
    bookies_cpu_s: float
    rechecks: int
    rpcs: int


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5k ledgers, a 10 s interval, a 30 s window, one round")
    parser.add_argument("--ledgers", type=int, default=20_000)
    parser.add_argument("--interval", type=float, default=20.0, help="checker.reverify_interval in the scrub runs")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured in each run")
    parser.add_argument("--rounds", type=int, default=2, help="baseline and scrub runs, each")
    args = parser.parse_args()
    if args.quick:
        args.ledgers, args.interval, args.window, args.rounds = 5_000, 10.0, 30.0, 1
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="reverify-bench-") as tmp, running_servers(Path(tmp)) as (zk, kafka):
        base = Path(tmp)
        text = scenario_text(args.ledgers, 1)  # one open ledger, never closed
        (base / "scenario.toml").write_text(text, encoding="utf-8")
        settings = embedded_settings(load_settings(env={}), parse_scenario(text), zk, kafka)
        simulator = start_simulator(base / "scenario.toml", zk)
        stop = threading.Event()
        watcher = watcher_from_settings(settings, "bench", WatcherMetrics())
        threading.Thread(target=watcher.run, args=(stop,), daemon=True).start()
        spark = build_spark_session("reverify-bench", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
        windows: dict[str, list[Window]] = {"baseline": [], "scrub": []}
        try:
            for round_ in range(args.rounds):
                for name, interval in (("baseline", 0.0), ("scrub", args.interval)):
                    where = base / f"{name}-{round_}"
                    windows[name].append(measure(spark, run_settings(settings, where, interval), args, simulator.pid))
        finally:
            stop.set()
            simulator.terminate()
            simulator.wait(timeout=60)
            watcher.zk.stop()
            spark.stop()
    report(args, summed(windows["baseline"]), summed(windows["scrub"]))
    return 0


def summed(windows: list[Window]) -> Window:
    """The runs of one kind as one window."""
    return Window(
        *(sum(getattr(w, name) for w in windows) for name in ("seconds", "cpu_s", "bookies_cpu_s", "rechecks", "rpcs"))
    )


def run_settings(settings: Settings, where: Path, interval: float) -> Settings:
    checker = replace(
        settings.checker,
        data_dir=str(where / "data"),
        checkpoint_dir=str(where / "checkpoint"),
        trigger_seconds=0.5,
        shuffle_partitions=2,
        reverify_interval=interval,
        reverify_max_per_second=0.0,
    )
    return replace(settings, kafka=replace(settings.kafka, partitions=2), checker=checker)


def measure(spark: object, settings: Settings, args: argparse.Namespace, simulator_pid: int) -> Window:
    """Start a checker on its own checkpoint, let it check every ledger once, then measure one window."""
    checker = start_checker(spark, settings)  # type: ignore[arg-type]
    data_dir = settings.checker.data_dir
    try:
        wait_backlog(data_dir, args.ledgers)
        log.info("interval %g s: first checks done; measuring %g s", settings.checker.reverify_interval, args.window)
        started = datetime.now(UTC)
        cpu, bookies = tree_cpu_seconds(os.getpid(), exclude=simulator_pid), tree_cpu_seconds(simulator_pid)
        clock = time.monotonic()
        time.sleep(args.window)
        seconds = time.monotonic() - clock
        cpu = tree_cpu_seconds(os.getpid(), exclude=simulator_pid) - cpu
        bookies = tree_cpu_seconds(simulator_pid) - bookies
        ended = datetime.now(UTC)
    finally:
        checker.stop()
    time.sleep(2)  # the last batch's commits
    checks = read_table(data_dir, "ledger_checks").to_pylist()
    rechecks = sum(1 for c in checks if c["latency_ms"] is None and started <= c["checked_at"] < ended)
    runs = read_table(data_dir, "checker_runs").to_pylist()
    rpcs = sum(r["rpcs"] for r in runs if started <= r["started_at"] < ended)
    return Window(seconds, cpu, bookies, rechecks, rpcs)


def report(args: argparse.Namespace, baseline: Window, scrub: Window) -> None:
    print(
        f"machine: {os.cpu_count()} cores; checker on local[2], trigger 0.5 s; {args.ledgers} ledgers, 9 bookies; "
        f"{args.rounds} round(s) of {args.window:g} s each, summed"
    )
    runs = (("baseline (no re-verification)", baseline), (f"scrub (interval {args.interval:g} s)", scrub))
    for name, w in runs:
        print(
            f"{name}: {w.seconds:.0f} s, {w.rechecks} re-checks ({w.rechecks / w.seconds:.0f}/s), {w.rpcs} bookie "
            f"requests, CPU {w.cpu_s:.1f} s here + {w.bookies_cpu_s:.1f} s in the bookies"
        )
    if not scrub.rechecks:
        print("no re-check in the window: nothing to divide by")
        return
    ratio = (scrub.cpu_s / scrub.seconds) / (baseline.cpu_s / baseline.seconds)
    extra_cpu = (scrub.cpu_s / scrub.seconds - baseline.cpu_s / baseline.seconds) * scrub.seconds
    extra_bookies = (scrub.bookies_cpu_s / scrub.seconds - baseline.bookies_cpu_s / baseline.seconds) * scrub.seconds
    per_check_ms = 1000 * extra_cpu / scrub.rechecks
    requests = scrub.rpcs / scrub.rechecks
    print(
        f"per re-checked ledger: {per_check_ms:.2f} ms CPU in the checker above the baseline (CPU rate {ratio:.2f}x "
        f"the baseline's), {1000 * extra_bookies / scrub.rechecks:.2f} ms in the bookies, {requests:.2f} bookie "
        "requests, 1 ZooKeeper read"
    )
    rate = TARGET_LEDGERS / WEEK_S
    print(
        f"sizing: {TARGET_LEDGERS:,} ledgers over 7 days = {rate:.1f} re-checks/s = "
        f"{rate * per_check_ms / 1000:.2f} cores of checker CPU here, {rate * requests:.0f} bookie requests/s; "
        f"over 1 day: {7 * rate:.0f}/s, {7 * rate * per_check_ms / 1000:.2f} cores"
    )


if __name__ == "__main__":
    sys.exit(main())
