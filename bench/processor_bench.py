"""The streaming checker's stateful step, in Python alone: what checking one ledger costs the processor.

Run from the repository root::

    .venv/bin/python -m bench.processor_bench              # 20,000 ledgers, 5 runs (~1 min)
    .venv/bin/python -m bench.processor_bench --quick      # 2,000 ledgers, 3 runs
    .venv/bin/python -m bench.processor_bench --profile    # and where the time goes (cProfile, one more run)

The ledgers are those of ``checker_bench``'s backlog: closed, E=3/WQ=2/AQ=2, 100 entries, ensembles rotating over 9
registered bookies, each event as the watcher's snapshot publishes it, each with the answers the fetch stage hands on
(every bookie listing exactly its stripe, in compact form). They go through
:meth:`~scrutiny.streaming.checker.processor.LedgerProcessor.handleInputRows` bucket by bucket (64 consecutive ids,
as the job keys them), with the bucket's state store, its timers and the cluster view replaced by small in-memory
stand-ins: no Spark, no JVM, no network. Timed: CPU seconds of this process (``time.process_time``) per run, the
garbage collector running as in the job; printed: the median per ledger, the checks' verdicts and the output rows
per ledger, and the garbage collector's share of it (``--collector``: as the job's workers run it, the default, or
with Python's defaults). Then PySpark's part in handing those rows back to Spark, timed the same way: each bucket's
rows turned into an Arrow record batch as its row-based ``transformWithState`` serializer does (``Row.asDict`` per
row, ``RecordBatch.from_pylist`` per bucket), which costs per row, not per ledger.

With ``--profile``, one more run under cProfile and the share of the main steps in it (cumulative time; cProfile
slows Python calls unevenly, so read the shares, not the times). Nothing is asserted: exit 0.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import Row

from bench.gc_meter import CollectorMeter, add_collector_argument, set_collector
from scrutiny.connectors.bookies.fetch import FetchConfig
from scrutiny.connectors.kafka.events import Publisher
from scrutiny.connectors.zookeeper.cluster_cache import ClusterSnapshot
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.core.ledger_metadata import build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.ledger_tracker import TrackerConfig
from scrutiny.core.striping import expected_groups
from scrutiny.core.verdict import BookieAnswer, ClusterView
from scrutiny.streaming.checker.buckets import bucket_of
from scrutiny.streaming.checker.config import JobConfig
from scrutiny.streaming.checker.processor import LedgerProcessor
from tests.support.processor_fakes import Handle, Timers, snapshot_row

BOOKIES = tuple(f"127.0.0.1:{3181 + index}" for index in range(9))
ENSEMBLE, WRITE_QUORUM, ACK_QUORUM, LAST_ENTRY = 3, 2, 2, 99
MTIME_MS = 1_700_000_000_000
NOW_MS = MTIME_MS + 60_000  # the processor's clock: a minute after the ledgers were written
#: The steps whose share of a profiled run is printed: (label, function name as cProfile lists it).
STEPS = (
    ("the verdict (compute_verdict)", "compute_verdict"),
    ("the tracker's step without it (on_metadata; holds most of the next two)", "on_metadata"),
    ("  decoding the ledger metadata", "decode_ledger_metadata"),
    ("  state copies (dataclasses.replace)", "replace"),
    ("decoding the fetched answers", "decode_answers"),
    ("parsing the events (protobuf)", "FromString"),
    ("output records (JSON payloads, rows)", "_rows"),
    ("the bucket's state saved, timers, state records", "_save"),
)


class _Cluster:
    """Every bookie registered and writable, no racks."""

    def get(self, *, refresh: bool = False) -> ClusterSnapshot:
        return ClusterSnapshot(ClusterView(writable=frozenset(BOOKIES)), {}, MTIME_MS)


_CLUSTER = _Cluster()


@dataclass(frozen=True)
class _BenchConfig(JobConfig):
    def cluster_reader(self) -> Any:  # the in-memory cluster, not ZooKeeper
        return _CLUSTER


def fetched_row(ledger_id: int, offset: int, publisher: Publisher) -> Row:
    """The fetch stage's row for the snapshot event of a healthy closed ledger: the event, its answers and its
    metadata decoded."""
    ensemble = tuple(BOOKIES[(ledger_id + k) % len(BOOKIES)] for k in range(ENSEMBLE))
    metadata = build_ledger_metadata(
        ensemble_size=ENSEMBLE,
        write_quorum=WRITE_QUORUM,
        ack_quorum=ACK_QUORUM,
        segments=[(0, ensemble)],
        last_entry_id=LAST_ENTRY,
        length=100 * (LAST_ENTRY + 1),
    )
    answers = {
        bookie: BookieAnswer.listing(expected_groups(index, ENSEMBLE, WRITE_QUORUM, 0, LAST_ENTRY))
        for index, bookie in enumerate(ensemble)
    }
    return snapshot_row(
        ledger_id, offset, encode_ledger_metadata_v3(metadata), answers, mtime_ms=MTIME_MS, publisher=publisher
    )


def buckets_of(ledgers: int) -> dict[int, list[Row]]:
    publisher = Publisher("bench", 1, "/ledgers")
    buckets: dict[int, list[Row]] = {}
    for ledger_id in range(ledgers):
        buckets.setdefault(bucket_of(ledger_id), []).append(fetched_row(ledger_id, ledger_id, publisher))
    return buckets


def run_once(config: JobConfig, buckets: dict[int, list[Row]]) -> list[list[Row]]:
    """Every bucket through a new processor with an empty state (as a first check is); each bucket's output rows."""
    rows: list[list[Row]] = []
    for bucket, events in buckets.items():
        processor = LedgerProcessor(config)
        processor.init(Handle())  # type: ignore[arg-type]
        output: Iterator[Any] = processor.handleInputRows((bucket,), iter(events), Timers(NOW_MS))  # type: ignore[arg-type]
        rows.append(list(output))
    return rows


#: The Arrow schema PySpark gives the step's output (:data:`~scrutiny.streaming.checker.records.NARROW_DDL`).
OUTPUT_ARROW = pa.schema(
    [("record", pa.string()), ("ledger_id", pa.int64()), ("at", pa.timestamp("us", tz="UTC")), ("payload", pa.string())]
)


def to_arrow(output: list[list[Row]]) -> int:
    """Each bucket's rows as PySpark's row-based ``transformWithState`` serializer hands them to Spark; rows made."""
    made = 0
    for rows in output:
        made += pa.RecordBatch.from_pylist([row.asDict(True) for row in rows], schema=OUTPUT_ARROW).num_rows
    return made


def verdicts(rows: list[Row]) -> Counter[str]:
    """The verdicts of the check records among ``rows``."""
    return Counter(json.loads(row["payload"])["verdict"] for row in rows if row["record"] == "check")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2,000 ledgers, 3 runs")
    parser.add_argument("--ledgers", type=int, default=None, help="ledgers per run (default 20,000)")
    parser.add_argument("--runs", type=int, default=None, help="timed runs (default 5)")
    parser.add_argument("--profile", action="store_true", help="one more run under cProfile: the main steps' shares")
    add_collector_argument(parser)
    args = parser.parse_args()
    ledgers = args.ledgers or (2_000 if args.quick else 20_000)
    runs = args.runs or (3 if args.quick else 5)
    config = _BenchConfig(ZooKeeperSection(), "/ledgers", "/bookies", FetchConfig(), TrackerConfig())
    set_collector(args.collector)
    buckets = buckets_of(ledgers)
    to_arrow(run_once(config, buckets))  # imports, caches
    seconds: list[float] = []
    converting: list[float] = []
    output: list[list[Row]] = []
    collector = CollectorMeter()
    for _ in range(runs):
        started = time.process_time()
        with collector.measuring():
            output = run_once(config, buckets)
        seconds.append(time.process_time() - started)
        started = time.process_time()
        to_arrow(output)
        converting.append(time.process_time() - started)
    rows = [row for bucket in output for row in bucket]
    print(f"stateful step, {ledgers:,} healthy closed ledgers (E=3/WQ=2/AQ=2, 100 entries), {runs} runs:")
    each = ", ".join(f"{s:.2f} s" for s in seconds)
    print(f"  CPU per ledger: median {statistics.median(seconds) / ledgers * 1e6:.0f} µs (runs: {each})")
    print(f"  of which the garbage collector ({args.collector}'s): {collector.summary(sum(seconds))}")
    judged = ", ".join(f"{count:,} {verdict}" for verdict, count in sorted(verdicts(rows).items()))
    print(f"  checks: {judged}; output rows per ledger: {len(rows) / ledgers:.2f}")
    each = ", ".join(f"{s:.2f} s" for s in converting)
    median = statistics.median(converting) / ledgers * 1e6
    print(f"  PySpark's conversion of those rows to Arrow, per ledger: median {median:.0f} µs (runs: {each})")
    if args.profile:
        print_profile(config, buckets)
    return 0


def print_profile(config: JobConfig, buckets: dict[int, list[Row]]) -> None:
    profile = cProfile.Profile()
    profile.runcall(run_once, config, buckets)
    stats = pstats.Stats(profile)
    entries: dict[str, tuple[float, float]] = {}  # function name -> (own time, cumulative), summed over files
    for (_, _, name), (_, _, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        key = next((step for _, step in STEPS if name == f"<built-in method {step}>"), name)  # a builtin's name
        was = entries.get(key, (0.0, 0.0))
        entries[key] = (was[0] + own, was[1] + cumulative)
    total = stats.total_tt  # type: ignore[attr-defined]
    verdict = entries.get("compute_verdict", (0.0, 0.0))[1]
    print(f"where the time goes (one run under cProfile, {total:.2f} s): share of the run, cumulative")
    for label, name in STEPS:
        share = entries.get(name, (0.0, 0.0))[1]
        if name == "on_metadata":
            share -= verdict
        print(f"  {label:<66} {share / total:6.1%}")


if __name__ == "__main__":
    raise SystemExit(main())
