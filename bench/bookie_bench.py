"""A bookie formatted again: how long until every one of its ledgers' losses is open, and what finding them costs.

Run from the repository root::

    .venv/bin/python -m bench.bookie_bench            # 100k ledgers end to end; the index at 100k and 1M
    .venv/bin/python -m bench.bookie_bench --quick    # 10k ledgers end to end; the index at 10k and 100k

Two parts, each printing its figures (nothing is asserted: exit 0):

1. **The index** (in this process, no servers): "the ledgers of bookie B" is a search of the watcher's in-memory
   metadata (``scrutiny.watcher.bookie_ledgers.ledgers_of``) over ledgers of 3 of 9 bookies; it is timed against
   a baseline measured in the same run, decoding every ledger's metadata (what building any index from the
   metadata costs), and beside a plain pass over the same bytes (summing their lengths: the floor).
2. **End to end**: its own ZooKeeper and Kafka broker, a simulated cluster of 9 bookies in a process of its own
   (``scrutiny simulate``, as bench.checker_bench) whose schedule wipes ``bookie-5`` at ``--wipe-at`` seconds (it
   restarts empty with a new cookie), the watcher, and the checker on ``local[2]`` with the re-verification off (so
   only the watcher's word about the new cookie can lead the checker to those ledgers). Once the first check of every
   ledger is done, the wipe comes; measured from the new cookie's creation (its znode's ctime) to the first
   ``violations`` row naming ``bookie-5`` of each of its ledgers: the median and the last (all open).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient

from bench.checker_bench import running_servers, scenario_text, start_simulator, stop_stack, wait_backlog
from bench.reverify_bench import run_settings
from scrutiny.connectors.tables.delta import read_table
from scrutiny.connectors.zookeeper.tree import TreeLayout, read_cluster
from scrutiny.core.ledger_metadata import (
    LedgerState,
    Segment,
    build_ledger_metadata,
    decode_ledger_metadata,
    encode_ledger_metadata_v3,
)
from scrutiny.core.metadata_view import Node, NodeStat
from scrutiny.core.zk_paths import cookie_path
from scrutiny.services.embedded import embedded_settings
from scrutiny.settings.loader import load_settings
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.streaming.checker.job import start_checker
from scrutiny.streaming.session import build_spark_session
from scrutiny.watcher.bookie_ledgers import LedgerSearch, ledgers_of
from scrutiny.watcher.daemon import SEARCH_SLICE_S, SEARCH_STEP
from scrutiny.watcher.metrics import WatcherMetrics
from scrutiny.watcher.wiring import watcher_from_settings

log = logging.getLogger("bench.bookie")

WIPED = "bookie-5"
BOOKIES = tuple(f"bookie-{i}" for i in range(1, 10))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10k ledgers end to end; the index at 10k and 100k")
    parser.add_argument("--ledgers", type=int, default=100_000, help="closed ledgers of the end-to-end run")
    parser.add_argument("--wipe-at", type=float, default=300.0, help="when the schedule wipes the bookie (s)")
    parser.add_argument("--index-only", action="store_true", help="only the first part")
    args = parser.parse_args()
    if args.quick:
        args.ledgers, args.wipe_at = 10_000, 90.0
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    for size in (args.ledgers, 10 * args.ledgers):
        index_figures(size)
    if not args.index_only:
        with tempfile.TemporaryDirectory(prefix="bookie-bench-") as tmp, running_servers(Path(tmp)) as (zk, kafka):
            end_to_end(args, Path(tmp), zk, kafka)
    return 0


# ---------------------------------------------------------------------------------------------- 1. the index


def index_figures(size: int) -> None:
    """Time ``ledgers_of`` over ``size`` ledgers against decoding them all, and a plain pass over their bytes."""
    ledgers = synthetic_ledgers(size)
    total = sum(len(node.data) for node in ledgers.values())
    floor, decode_all, search = [], [], []
    found = None
    for _ in range(3):
        started = time.perf_counter()
        sum(len(node.data) for node in ledgers.values())
        floor.append(time.perf_counter() - started)
        started = time.perf_counter()
        for node in ledgers.values():
            decode_ledger_metadata(node.data)
        decode_all.append(time.perf_counter() - started)
        started = time.perf_counter()
        found = ledgers_of(ledgers, WIPED)
        search.append(time.perf_counter() - started)
    assert found is not None
    took, base = min(search), min(decode_all)
    print(
        f"index, {size:,} ledgers ({total / 2**20:.0f} MiB of metadata): the ledgers of {WIPED} "
        f"({len(found.ledgers):,}, {found.entries:,} entries) in {took * 1000:.0f} ms "
        f"= {took / size * 1e6:.2f} µs per ledger of the cluster; decoding every ledger {base * 1000:.0f} ms "
        f"(ratio {took / base:.2f}); a plain pass over the bytes {min(floor) * 1000:.0f} ms (best of 3 each)"
    )
    started = time.perf_counter()
    sliced = LedgerSearch(sorted(ledgers), WIPED)
    begun = time.perf_counter() - started
    steps = []
    while sliced.remaining():
        started = time.perf_counter()
        sliced.step(ledgers, SEARCH_STEP)
        steps.append(time.perf_counter() - started)
    assert sliced.found.entries == found.entries
    print(
        f"  in slices of {SEARCH_STEP:,} ledgers (as the watcher's loop runs it): {begun * 1000:.0f} ms to begin "
        f"(the ids, sorted), then {len(steps):,} steps, median {statistics.median(steps) * 1000:.1f} ms, longest "
        f"{max(steps) * 1000:.1f} ms: the longest the watcher's loop waits on a search is one step past its "
        f"{SEARCH_SLICE_S * 1000:.0f} ms slice"
    )


def synthetic_ledgers(size: int) -> dict[int, Node]:
    """Closed ledgers of 100 entries, E=3 WQ=2, ensembles rotating over 9 bookies (ids as the simulator's)."""
    stat = NodeStat(1, 1, 1, 0, 0)
    encoded: dict[tuple[str, ...], bytes] = {}
    out: dict[int, Node] = {}
    for ledger_id in range(1, size + 1):
        start = ledger_id % len(BOOKIES)
        ensemble = tuple(BOOKIES[(start + k) % len(BOOKIES)] for k in range(3))
        data = encoded.get(ensemble)
        if data is None:
            metadata = build_ledger_metadata(
                ensemble_size=3,
                write_quorum=2,
                ack_quorum=2,
                segments=[Segment(0, ensemble)],
                state=LedgerState.CLOSED,
                last_entry_id=99,
            )
            data = encoded[ensemble] = encode_ledger_metadata_v3(metadata)
        out[ledger_id] = Node(bytes(data), stat)  # a copy per ledger, as the watcher holds
    return out


# ---------------------------------------------------------------------------------------------- 2. end to end


def end_to_end(args: argparse.Namespace, tmp: Path, zk: str, kafka: str) -> None:
    text = (
        scenario_text(args.ledgers, 1) + f'\n[[schedule]]\nat = {args.wipe_at}\naction = "wipe"\nbookie = "{WIPED}"\n'
    )
    (tmp / "scenario.toml").write_text(text, encoding="utf-8")
    settings = run_settings(embedded_settings(load_settings(env={}), parse_scenario(text), zk, kafka), tmp, 0.0)
    started = time.monotonic()
    simulator = start_simulator(tmp / "scenario.toml", zk)
    client = KazooClient(hosts=zk)
    client.start(timeout=30)
    stop = threading.Event()
    watcher = watcher_from_settings(settings, "bench", WatcherMetrics())
    threading.Thread(target=watcher.run, args=(stop,), daemon=True).start()
    spark = build_spark_session("bookie-bench", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    checker = start_checker(spark, settings)
    try:
        cookie = client.exists(cookie_path(WIPED))
        assert cookie is not None, f"{WIPED} has no cookie"
        checked, seconds, _ = wait_backlog(settings.checker.data_dir, args.ledgers)
        log.info("first checks: %d in %.1f s", checked, seconds)
        if time.monotonic() - started > args.wipe_at:
            raise SystemExit(f"the first checks outlasted --wipe-at {args.wipe_at:g} s: give it more")
        expected = {lid for lid, _ in ledgers_of(read_cluster(client, TreeLayout()).ledgers, WIPED).ledgers}
        new_ctime_ms = wait_new_cookie(client, cookie.czxid, args.wipe_at + 120 - (time.monotonic() - started))
        firsts = wait_findings(settings.checker.data_dir, expected, new_ctime_ms)
    finally:
        stop_stack(checker, stop, simulator, watcher=watcher, client=client, spark=spark)
    delays = sorted(max(0.0, (at - new_ctime_ms) / 1000) for at in firsts.values())
    print(
        f"end to end, {args.ledgers:,} ledgers on 9 simulated bookies, checker on local[2] (trigger 0.5 s, "
        f"re-verification off): {WIPED} formatted again, {len(expected):,} of its ledgers lost their copies; from the "
        f"new cookie to the first finding: median {statistics.median(delays):.1f} s, all {delays[-1]:.1f} s "
        f"({len(expected) / max(delays[-1], 0.001):,.0f} ledgers/s)"
    )


def wait_new_cookie(client: KazooClient, old_czxid: int, timeout_s: float) -> int:
    """The ctime (ms) of the bookie's cookie once it is a new znode."""
    deadline = time.monotonic() + max(timeout_s, 10.0)
    while time.monotonic() < deadline:
        stat = client.exists(cookie_path(WIPED))
        if stat is not None and stat.czxid != old_czxid:
            log.info("%s has a new cookie", WIPED)
            return int(stat.ctime)
        time.sleep(0.2)
    raise SystemExit(f"{WIPED} was not formatted again in time")


def wait_findings(data_dir: str, expected: set[int], since_ms: int) -> dict[int, int]:
    """Ledger -> the time (ms) of its first violation naming the wiped bookie after ``since_ms``, for all."""
    deadline = time.monotonic() + 1200
    firsts: dict[int, int] = {}
    while time.monotonic() < deadline:
        rows = read_table(data_dir, "violations").to_pylist()
        firsts = {}
        for row in rows:
            at = int(row["detected_at"].timestamp() * 1000)
            if row["bookie"] == WIPED and row["ledger_id"] in expected and at >= since_ms:
                firsts[row["ledger_id"]] = min(at, firsts.get(row["ledger_id"], at))
        log.info("findings: %d / %d ledgers", len(firsts), len(expected))
        if len(firsts) == len(expected):
            return firsts
        time.sleep(2)
    raise SystemExit(f"only {len(firsts)} of {len(expected)} ledgers have a finding after 20 minutes")


if __name__ == "__main__":
    sys.exit(main())
