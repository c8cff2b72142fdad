"""The streaming checker's fetch stage, in Python alone: what one ledger costs it, and where that goes.

Run from the repository root::

    .venv/bin/python -m bench.fetch_bench              # 20,000 ledgers, 5 runs (~2 min)
    .venv/bin/python -m bench.fetch_bench --quick      # 2,000 ledgers, 3 runs

The fetch stage (:class:`~scrutiny.streaming.checker.prepare.PrepareEvents`) is given one partition range of
``checker_bench``'s backlog as Spark's Kafka source hands it over (an Arrow batch of partition, offset, key, value):
the watcher's snapshot event of each healthy closed ledger (E=3/WQ=2/AQ=2, 100 entries, ensembles over 9 bookies),
with each ledger's bytes as the simulated cluster wrote them to ZooKeeper. It decodes the events and the metadata,
asks the simulated bookies' agents for the listings (the real client, over gRPC on loopback, batched per bookie) and
encodes what it hands on. Its own ZooKeeper, and the simulated cluster in a process of its own (``scrutiny
simulate``, as ``checker_bench``); no Spark, no Kafka.

Timed, per run and per ledger (median of the runs, after one run that opens the channels and reads the cluster):
the CPU of this whole process (``time.process_time``: the stage's thread and the gRPC client's threads, which decode
the listings), of the stage's own thread (``time.thread_time``), and of the simulated bookies' process, which on
the benchmark's two cores takes its share of them; and the garbage collector's share of the process's CPU
(``--collector``: as the job's workers run it, the default, or with Python's defaults). Then the stage's steps one
by one, in this thread: reading the events, decoding the ledgers' metadata, the fetch (process CPU), encoding the
answers. Nothing is asserted: exit 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.checker_bench import scenario_text, start_simulator
from bench.cpu_meter import tree_cpu_seconds
from bench.gc_meter import CollectorMeter, add_collector_argument, set_collector
from scrutiny.connectors.kafka.events import Publisher, event_for_change, ledger_key
from scrutiny.connectors.zookeeper.client import start_zookeeper_client
from scrutiny.connectors.zookeeper.tree import read_nodes
from scrutiny.core.metadata_view import ChangeKind, MetadataChange
from scrutiny.core.zk_paths import ledger_path
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.services.embedded import embedded_settings
from scrutiny.services.servers import start_zookeeper
from scrutiny.settings.loader import load_settings
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.streaming.checker.answer_codec import encode_answers
from scrutiny.streaming.checker.config import JobConfig
from scrutiny.streaming.checker.job import job_config
from scrutiny.streaming.checker.prepare import PrepareEvents, fetch_answers, ledger_rows, ledgers_to_check

KAFKA_SCHEMA = pa.schema(
    [("partition", pa.int32()), ("offset", pa.int64()), ("key", pa.binary()), ("value", pa.binary())]
)


def kafka_batch(client: Any, ledgers: int, root: str) -> pa.RecordBatch:
    """The snapshot events of ledgers 1..``ledgers`` as the Kafka source hands a partition range to the stage."""
    publisher = Publisher("bench", 1, root)
    nodes = read_nodes(client, [ledger_path(ledger, root=root) for ledger in range(1, ledgers + 1)])
    keys: list[bytes] = []
    values: list[bytes] = []
    for ledger in range(1, ledgers + 1):
        node = nodes[ledger_path(ledger, root=root)]
        change = MetadataChange(ChangeKind.LEDGER_CREATED, ledger, node)
        event = event_for_change(change, pb.Origin.SNAPSHOT, publisher, observed_ms=node.stat.mtime_ms)
        keys.append(ledger_key(ledger))
        values.append(event.SerializeToString())
    return pa.RecordBatch.from_arrays(
        [pa.array([0] * ledgers, pa.int32()), pa.array(range(ledgers), pa.int64()), pa.array(keys), pa.array(values)],
        schema=KAFKA_SCHEMA,
    )


def timed(step: Callable[[], Any]) -> tuple[float, float, Any]:
    """(process CPU seconds, this thread's CPU seconds, result) of ``step()``."""
    process, thread = time.process_time(), time.thread_time()
    result = step()
    return time.process_time() - process, time.thread_time() - thread, result


def run_stage(config: JobConfig, batch: pa.RecordBatch) -> int:
    """The stage over ``batch``; the ledgers it hands answers on for."""
    out = list(PrepareEvents(config)(iter([batch])))
    return sum(1 for value in out[0].column("answers").to_pylist() if value is not None)


def steps(config: JobConfig, batch: pa.RecordBatch) -> dict[str, float]:
    """The stage's steps one by one, as :class:`PrepareEvents` takes them: each one's CPU seconds (the fetch's the
    process's, the client's threads included; the others this thread's)."""
    _, reading, read = timed(lambda: ledger_rows(iter([batch]), config.ledgers_root))
    _, decoding, wanted = timed(lambda: ledgers_to_check(read.rows))
    ends = {k: v.end for k, v in wanted.items() if v.end is not None}
    fetching, _, (_, fetched) = timed(
        lambda: fetch_answers(config, {k: v.bookies for k, v in wanted.items()}, ends=ends)
    )
    _, encoding, _ = timed(lambda: [encode_answers(got, wanted[lid].metadata) for lid, got in fetched.items()])
    return {
        "reading the events (Arrow, protobuf, checks)": reading,
        "decoding the ledgers' metadata": decoding,
        "fetching the listings (process CPU: the client's threads decode them)": fetching,
        "encoding the answers with the metadata": encoding,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2,000 ledgers, 3 runs")
    parser.add_argument("--ledgers", type=int, default=None, help="ledgers per run (default 20,000)")
    parser.add_argument("--runs", type=int, default=None, help="timed runs (default 5)")
    add_collector_argument(parser)
    args = parser.parse_args()
    ledgers = args.ledgers or (2_000 if args.quick else 20_000)
    runs = args.runs or (3 if args.quick else 5)
    with tempfile.TemporaryDirectory(prefix="fetch-bench-") as tmp:
        zookeeper = start_zookeeper(Path(tmp) / "zookeeper", die_with_parent=True)
        try:
            measure(Path(tmp), zookeeper.address, ledgers, runs, args.collector)
        finally:
            zookeeper.stop()
    return 0


def measure(tmp: Path, zk: str, ledgers: int, runs: int, collector_choice: str) -> None:
    text = scenario_text(ledgers, 0)
    (tmp / "scenario.toml").write_text(text, encoding="utf-8")
    settings = embedded_settings(load_settings(env={}), parse_scenario(text), zk, "127.0.0.1:9")
    config = job_config(settings)
    simulator = start_simulator(tmp / "scenario.toml", zk)
    client = start_zookeeper_client(settings.zookeeper, timeout_s=30, hosts=zk)
    try:
        set_collector(collector_choice)
        batch = kafka_batch(client, ledgers, config.ledgers_root)
        answered = run_stage(config, batch)  # channels opened, the cluster read
        process: list[float] = []
        thread: list[float] = []
        bookies: list[float] = []
        collector = CollectorMeter()
        for _ in range(runs):
            before = tree_cpu_seconds(simulator.pid)
            with collector.measuring():
                cpu, own, answered = timed(lambda: run_stage(config, batch))
            bookies.append(tree_cpu_seconds(simulator.pid) - before)
            process.append(cpu)
            thread.append(own)
        parts = [steps(config, batch) for _ in range(runs)]
    finally:
        client.stop()
        client.close()
        simulator.terminate()
        simulator.wait(timeout=60)

    def per_ledger(seconds: list[float]) -> str:
        each = ", ".join(f"{s:.2f} s" for s in seconds)
        return f"median {statistics.median(seconds) / ledgers * 1e6:.0f} µs (runs: {each})"

    print(
        f"fetch stage, one partition range of {ledgers:,} healthy closed ledgers (E=3/WQ=2/AQ=2, 100 entries),"
        f" {runs} runs:"
    )
    print(f"  ledgers handed on with answers: {answered:,}")
    print(f"  CPU a ledger, the whole process: {per_ledger(process)}")
    print(f"  of which the garbage collector ({collector_choice}'s), on any thread: {collector.summary(sum(process))}")
    print(f"  CPU a ledger, the stage's own thread: {per_ledger(thread)}")
    print(f"  CPU a ledger, the simulated bookies' process: {per_ledger(bookies)}")
    print("  the steps, one by one (median a ledger):")
    for name in parts[0]:
        print(f"    {name:<72} {statistics.median(p[name] for p in parts) / ledgers * 1e6:6.0f} µs")
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
