"""The one-shot scan: a deep scan of a large simulated cluster against a fast scan of the same cluster.

Run from the repository root::

    .venv/bin/python -m bench.scan_bench            # 100,000 ledgers
    .venv/bin/python -m bench.scan_bench --quick    # 10,000 ledgers

It starts its own ZooKeeper in a temporary directory and a simulated cluster of 9 bookies in a process of its own
(``scrutiny simulate``: bookies are other machines in real life), with a realistic fault mix (E=3/WQ=2/AQ=2 ledgers,
"auto" ensembles; a few lost replicas, lost entries, placement faults, AQ=1 ledgers and open ledgers), then runs on
``local[2]``, writing the tables in the temporary directory:

1. a small warm-up scan (the JVM and the Python workers start once, as a long-lived session would have them);
2. a **fast** scan of every ledger (metadata only), then a **deep** scan (every bookie asked), then a fast scan again
   (the machine is noisy: the two fast scans bracket the deep one).

For each: the ZooKeeper walk's time, the checking time (Spark jobs and table writes), ledgers per second of the whole
scan, and bookie requests; then deep / fast as a ratio of rates against the mean of the two fast scans. Nothing is
asserted: exit 0.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.checker_bench import start_simulator
from scrutiny.core.ledger_scan import LedgerSelection, ScanMode
from scrutiny.services.embedded import embedded_settings
from scrutiny.services.servers import start_zookeeper
from scrutiny.settings.loader import Settings, load_settings
from scrutiny.simulator.generator import generate, parse_fault_mix
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.streaming.scan.job import ScanResult, ScanRun
from scrutiny.streaming.scan.snapshot import ScanOptions
from scrutiny.streaming.session import build_spark_session

log = logging.getLogger("bench.scan")
FAULTS = "missing=0.001,nothing=0.0005,no_replica=0.0005,placement=0.002,aq1=0.01,open=0.02,stuck=0.0005"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10,000 ledgers")
    parser.add_argument("--ledgers", type=int, default=100_000)
    parser.add_argument("--chunk-size", type=int, default=10_000)
    args = parser.parse_args()
    if args.quick:
        args.ledgers = 10_000
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="scan-bench-") as tmp:
        zookeeper = start_zookeeper(Path(tmp) / "zookeeper", die_with_parent=True)
        try:
            run(args, Path(tmp), zookeeper.address)
        finally:
            zookeeper.stop()
    return 0


def run(args: argparse.Namespace, tmp: Path, zk: str) -> None:
    text, _ = generate(args.ledgers, parse_fault_mix(FAULTS), seed=17)
    scenario = parse_scenario(text)
    (tmp / "scenario.toml").write_text(text, encoding="utf-8")
    base = embedded_settings(load_settings(env={}), scenario, zk, "127.0.0.1:9")
    settings = replace(base, checker=replace(base.checker, data_dir=str(tmp / "data"), shuffle_partitions=2))
    clock = time.monotonic()
    simulator = start_simulator(tmp / "scenario.toml", zk)
    log.info("cluster up: %d ledgers in %.0f s", args.ledgers, time.monotonic() - clock)
    spark = build_spark_session(
        "scan-bench",
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
    )
    try:
        scan(spark, settings, ScanMode.DEEP, args.chunk_size, LedgerSelection(((1, 2_000),)))  # warm-up
        results = [
            scan(spark, settings, mode, args.chunk_size) for mode in (ScanMode.FAST, ScanMode.DEEP, ScanMode.FAST)
        ]
    finally:
        spark.stop()
        simulator.terminate()
        simulator.wait(timeout=60)
    report(args, results)


def scan(
    spark: object, settings: Settings, mode: ScanMode, chunk_size: int, selection: LedgerSelection | None = None
) -> tuple[ScanResult, float]:
    options = ScanOptions(mode=mode, chunk_size=chunk_size, selection=selection or LedgerSelection())
    clock = time.monotonic()
    result = ScanRun(spark, settings, options).run()  # type: ignore[arg-type]
    seconds = time.monotonic() - clock
    log.info("%s scan: %d ledgers in %.1f s", mode.value, result.examined, seconds)
    return result, seconds


def report(args: argparse.Namespace, results: list[tuple[ScanResult, float]]) -> None:
    print(f"scan of {args.ledgers} ledgers on local[2], {args.chunk_size} ledgers per chunk")
    header = ("walk s", 9), ("check s", 9), ("total s", 9), ("ledgers/s", 11), ("checked", 9), ("requests", 10)
    print(f"{'scan':<8}" + "".join(f"{name:>{width}}" for name, width in header) + f"{'found':>7}")
    rates = []
    for result, seconds in results:
        rate = result.examined / seconds
        rates.append(rate)
        print(
            f"{result.mode.value:<8}{result.read_seconds:>9.1f}{result.check_seconds:>9.1f}{seconds:>9.1f}"
            f"{rate:>11.0f}{result.checked:>9}{result.rpcs:>10}{len(result.violations):>7}"
        )
    fast = (rates[0] + rates[2]) / 2
    print(f"deep / fast: {rates[1] / fast:.2f} of the fast scan's rate ({rates[1]:.0f} vs {fast:.0f} ledgers/s)")


if __name__ == "__main__":
    raise SystemExit(main())
