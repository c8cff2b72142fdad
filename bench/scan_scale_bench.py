"""The one-shot scan's cost per ledger against the cluster's size: fast scans of 100,000 and 1,000,000 ledgers.

Run from the repository root::

    .venv/bin/python -m bench.scan_scale_bench                           # 100,000 and 1,000,000 ledgers
    .venv/bin/python -m bench.scan_scale_bench --sizes 10000,100000      # quicker

It starts its own ZooKeeper in a temporary directory and writes, for each size, a tree of that many closed ledgers
(BookKeeper's real v3 metadata, E=3/WQ=2/AQ=2 over 12 registered bookies, at their hierarchical paths) under a
ledgers root of its own. Then, for each size, smallest first, it runs the real command, ``scrutiny scan --fast
--format json`` on ``local[2]`` with its tables in the temporary directory, in a process of its own, and samples the
peak resident memory of that process (the driver's Python), of Spark's JVM and of each Python worker
(:class:`~bench.memory_meter.PeakMemory`). A fast scan asks no bookie, so its time is the walk, the verdict on the
metadata and the table writes.

Printed per size: the walk's and the checks' seconds (the scan's own ``read_seconds`` and ``check_seconds``: the
two alternate, chunk by chunk), ledgers/s and µs a ledger over both, the whole command's wall time (the JVM's start
included), and the peaks; then the largest size against the smallest as ratios (cost a ledger, and each peak).
Nothing is asserted: exit 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient

from bench.memory_meter import Peak, PeakMemory
from bench.watcher_bench import BOOKIES, metadata_templates, write_tree
from scrutiny.core.ledger_metadata import LedgerState
from scrutiny.core.zk_paths import available_path
from scrutiny.services.servers import start_zookeeper

log = logging.getLogger("bench.scan_scale")
MIB = 1024 * 1024


@dataclass(frozen=True)
class Measured:
    """One size's scan."""

    ledgers: int
    examined: int
    read_s: float
    check_s: float
    wall_s: float
    driver: int  # peak bytes of the scan's own (Python) process
    jvm: int  # of Spark's JVM
    worker: int  # of the largest Python worker
    workers: int  # Python workers seen

    @property
    def rate(self) -> float:
        return self.examined / (self.read_s + self.check_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000", help="ledgers per cluster, comma-separated")
    parser.add_argument("--chunk-size", type=int, default=10_000)
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="scan-scale-") as tmp:
        zookeeper = start_zookeeper(Path(tmp) / "zookeeper", die_with_parent=True)
        try:
            results = [measure(Path(tmp), zookeeper.address, size, args.chunk_size) for size in sizes]
        finally:
            zookeeper.stop()
    print(report(results, args.chunk_size))
    return 0


def measure(tmp: Path, zk: str, ledgers: int, chunk_size: int) -> Measured:
    root = f"/c{ledgers}/ledgers"
    write_cluster(zk, root, ledgers)
    config = tmp / f"scan-{ledgers}.toml"
    config.write_text(
        f'[zookeeper]\nconnect = "{zk}"\nledgers_root = "{root}"\n\n'
        f'[checker]\ndata_dir = "{tmp / f"data-{ledgers}"}"\nspark_master = "local[2]"\nshuffle_partitions = 2\n',
        encoding="utf-8",
    )
    command = [sys.executable, "-m", "scrutiny.cli", "scan", "--fast", "--format", "json", "--config", str(config)]
    command += ["--chunk-size", str(chunk_size)]
    log.info("scanning %d ledgers: %s", ledgers, " ".join(command[1:]))
    clock = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    with PeakMemory(process.pid) as meter:
        output, _ = process.communicate()
    wall = time.monotonic() - clock
    if process.returncode not in (0, 1):  # 1: a violation found; the figures are there all the same
        raise SystemExit(f"the scan of {ledgers} ledgers exited {process.returncode}")
    scan = json.loads(output)["scan"]
    return _measured(ledgers, scan, wall, process.pid, meter.peaks())


def _measured(ledgers: int, scan: dict[str, object], wall: float, pid: int, peaks: list[Peak]) -> Measured:
    driver = max((p.bytes for p in peaks if p.pid == pid), default=0)
    jvm = max((p.bytes for p in peaks if p.name == "java"), default=0)
    workers = [p.bytes for p in peaks if p.pid != pid and p.name.startswith("python")]
    return Measured(
        ledgers=ledgers,
        examined=int(str(scan["ledgers_examined"])),
        read_s=float(str(scan["read_seconds"])),
        check_s=float(str(scan["check_seconds"])),
        wall_s=wall,
        driver=driver,
        jvm=jvm,
        worker=max(workers, default=0),
        workers=len(workers),
    )


def write_cluster(zk: str, root: str, ledgers: int) -> None:
    """``ledgers`` closed ledgers under ``root``, the bookies of their ensembles registered as writable."""
    client = KazooClient(hosts=zk, timeout=30.0)
    client.start(timeout=30)
    try:
        for bookie in BOOKIES:
            client.create(f"{available_path(root=root)}/{bookie}", b"", makepath=True)
        seconds = write_tree(client, root, range(1, ledgers + 1), metadata_templates(LedgerState.CLOSED))
        log.info("wrote %d ledgers under %s in %.1f s", ledgers, root, seconds)
    finally:
        client.stop()
        client.close()


def report(results: list[Measured], chunk_size: int) -> str:
    lines = [
        f"fast scans on local[2], {chunk_size} ledgers per chunk ({os.cpu_count()} cores)",
        "",
        "| ledgers | walk s | check s | ledgers/s | µs a ledger | wall s | driver (Python) MiB | JVM MiB "
        "| largest worker MiB | workers |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for m in results:
        lines.append(
            f"| {m.ledgers:,} | {m.read_s:.1f} | {m.check_s:.1f} | {m.rate:,.0f} | {1e6 / m.rate:.0f} | {m.wall_s:.1f} "
            f"| {m.driver / MIB:.0f} | {m.jvm / MIB:.0f} | {m.worker / MIB:.0f} | {m.workers} |"
        )
    if len(results) > 1:
        small, large = results[0], results[-1]
        lines += [
            "",
            f"{large.ledgers:,} against {small.ledgers:,} ledgers: cost a ledger ×{small.rate / large.rate:.2f}, "
            f"driver peak ×{large.driver / small.driver:.2f}, JVM peak ×{large.jvm / small.jvm:.2f}, "
            f"largest worker ×{large.worker / max(1, small.worker):.2f}",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
