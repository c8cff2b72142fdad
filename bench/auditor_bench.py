"""Scrutiny beside BookKeeper's own Auditor, on real bookies: the same faults, who finds them, how soon, at what cost.

Run from the repository root::

    .venv/bin/python -m bench.auditor_bench                        # 3 faults x 3 contenders (~22 min here)
    .venv/bin/python -m bench.auditor_bench --faults wipe,kill --contenders scrutiny,auditor-short --window 60

Each run gets a fresh local cluster (``scrutiny services up --bookies 4 --storage sorted``: ZooKeeper, Kafka and
four real BookKeeper 4.17 bookies on SortedLedgerStorage, which answer every request themselves, so that the bookies'
own counters see all of both contenders' reads), ledgers written by BookKeeper's own client, one contender started
and given time to settle, then one fault:

* ``wipe``: the bookie in the most ensembles loses its disks and comes back empty (``services bookie wipe``);
* ``kill``: that bookie is killed (SIGKILL) and never comes back;
* ``too-low``: an E=3 WQ=3 AQ=2 ledger whose writer died is recovered by BookKeeper's client while one of its
  bookies is down and the other two are wiped: recovery closes it empty, over 30 acknowledged entries that the stopped
  bookie still holds; the fault is in place once that bookie is back.

Contenders: ``scrutiny`` (the watcher and the streaming checker with the shipped defaults, this process's Spark
session), ``auditor-short`` (BookKeeper's AutoRecovery with its periodic check, bookie check and replicas check every
``--short-interval`` seconds) and ``auditor-defaults`` (AutoRecovery as BookKeeper ships it: periodic check weekly,
bookie check daily, replicas check off; lostBookieRecoveryDelay 0 in both).

For each run it prints: whether the fault was found within the window (``--window``; for Scrutiny and a killed
bookie at least its shipped ``bookie_lost_grace_seconds`` plus a minute), the seconds from the fault being in place to
the first finding about it and to findings covering every ledger it touched (Scrutiny: a row's ``detected_at`` in
``violations``; the Auditor: the creation time of its under-replication mark, or the moment its replicas check's
counters first moved, whichever is first), the read requests the bookies served from then until the first finding
and over the whole window (the sum of ``bookkeeper_server_{READ_ENTRY,READ_LAC,GET_LIST_OF_ENTRIES_OF_LEDGER,
GET_BOOKIE_INFO}_REQUEST_count`` over the bookies: neither contender writes), and false alarms (findings or marks
about a ledger the fault did not touch, or naming another bookie). Nothing is asserted (exit 0).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.recipe.cache import TreeCache, TreeEvent
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import SparkSession

from scrutiny.core.errors import PathError
from scrutiny.core.zk_paths import ledger_id_from_underreplication_path, underreplication_ledgers_path
from scrutiny.core.zk_records import parse_underreplication_mark
from scrutiny.services.autorecovery import AutoRecoveryOptions
from scrutiny.services.bookkeeper import BookieOptions, BookieStorage, LocalBookies
from scrutiny.services.bookkeeper_tools import METADATA_ROOT, ledger_tool
from scrutiny.services.local_stack import EmbeddedServices
from scrutiny.services.servers import free_port
from scrutiny.settings.loader import Settings, load_settings
from scrutiny.streaming.session import build_spark_session
from tests.support.checker_harness import StreamingJob, streaming_job

log = logging.getLogger("bench.auditor")

FAULTS = ("wipe", "kill", "too-low")
CONTENDERS = ("scrutiny", "auditor-short", "auditor-defaults")
BOOKIES = 4
#: The read requests a bookie serves (writes are the ledger tool's, not a contender's).
READ_REQUESTS = ("READ_ENTRY", "READ_LAC", "GET_LIST_OF_ENTRIES_OF_LEDGER", "GET_BOOKIE_INFO")
#: The replicas check's counters of ledgers it found short (it reports them; it marks nothing).
REPLICAS_CHECK_COUNTERS = (
    "NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY",
    "NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY",
    "NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY",
)
TOO_LOW_ENTRIES = 30
POLL_S = 0.5


@dataclass
class Fault:
    """A fault in place: the ledgers it touched, the bookies a finding about it may name, and when it was in place."""

    affected: set[int]
    suspects: set[str]
    at: float
    categories: frozenset[str] | None = None  # the finding categories that count as finding it (None: any)


@dataclass
class Outcome:
    fault: str
    contender: str
    affected: int
    first_at: float | None = None
    first_s: float | None = None
    all_s: float | None = None
    requests_to_first: int | None = None
    requests: int = 0
    false_alarms: set[tuple[int, str]] = field(default_factory=set)
    how: set[str] = field(default_factory=set)


# --------------------------------------------------------------------------------------------- the bookies' counters


def read_requests(bookies: LocalBookies) -> dict[tuple[str, int], float]:
    """Per running bookie process (its metrics address and pid), the read requests it has served since it started."""
    counts: dict[tuple[str, int], float] = {}
    for status in bookies.status():
        if status.metrics is None or status.pid is None:
            continue
        with contextlib.suppress(OSError):
            counts[status.metrics, status.pid] = sum(_samples(status.metrics, REQUEST_SAMPLES.__contains__))
    return counts


REQUEST_SAMPLES = frozenset(f"bookkeeper_server_{name}_REQUEST_count" for name in READ_REQUESTS)


def _samples(address: str, wanted: Callable[[str], bool]) -> list[float]:
    """The values of the samples (all labels) served at ``address`` whose names are ``wanted``."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if wanted(sample.name)
    ]


class RequestCounter:
    """The bookies' read requests sampled every ``POLL_S`` in a thread, from the moment it starts: how many were
    served until a given time (a bookie process started meanwhile counts from zero)."""

    def __init__(self, bookies: LocalBookies) -> None:
        self.bookies = bookies
        self.baseline = read_requests(bookies)
        self.samples: list[tuple[float, int]] = [(time.time(), 0)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="request-counter", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            now = read_requests(self.bookies)
            served = sum(max(count - self.baseline.get(key, 0.0), 0.0) for key, count in now.items())
            self.samples.append((time.time(), int(served)))

    def until(self, at: float) -> int:
        """Served from the start until ``at``: the first sample taken then or after (so the requests that made a
        finding at ``at`` count, and at most ``POLL_S`` more)."""
        after = [served for when, served in self.samples if when >= at]
        return after[0] if after else self.samples[-1][1]

    def stop(self) -> int:
        """Stop sampling; all served since the start."""
        self._stop.set()
        self._thread.join(timeout=30)
        return self.samples[-1][1]


# --------------------------------------------------------------------------------------------------------- faults


def _most_held(ledgers: list[dict[str, Any]]) -> str:
    held = Counter(b for ledger in ledgers for b in ledger["segments"][0]["bookies"])
    victim: str = held.most_common(1)[0][0]
    return victim


def prepare_many(uri: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    return ledger_tool(uri, "create", "--entries", str(args.entries), "--count", str(args.ledgers))


def prepare_too_low(uri: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    command = ("create", "--write-quorum", "3", "--ack-quorum", "2", "--entries", str(TOO_LOW_ENTRIES), "--leave-open")
    return ledger_tool(uri, *command)


def wipe(services: EmbeddedServices, ledgers: list[dict[str, Any]]) -> Fault:
    """The disks are lost from the moment the bookie stops (its restart, empty, follows)."""
    victim, at = _most_held(ledgers), time.time()
    services.bookies().wipe(victim)
    return Fault(_holding(ledgers, victim), {victim}, at, LOSSES)


def kill(services: EmbeddedServices, ledgers: list[dict[str, Any]]) -> Fault:
    victim, at = _most_held(ledgers), time.time()
    services.bookies().stop(victim)
    return Fault(_holding(ledgers, victim), {victim}, at)


def too_low(services: EmbeddedServices, ledgers: list[dict[str, Any]]) -> Fault:
    ((ledger_id, ensemble),) = [(w["ledger_id"], w["segments"][0]["bookies"]) for w in ledgers]
    keeper, *wiped = ensemble
    bookies = services.bookies()
    bookies.stop(keeper)
    for bookie in wiped:
        bookies.wipe(bookie)
    (recovered,) = ledger_tool(bookies.metadata_service_uri, "recover", str(ledger_id))
    log.info("ledger %d recovered: last entry %d of %d written", ledger_id, recovered["last_entry"], TOO_LOW_ENTRIES)
    bookies.start(keeper)  # in place from here: every bookie is up, the entries beyond the close readable
    return Fault({ledger_id}, set(ensemble), time.time(), frozenset({"ENTRIES_BEYOND_LAST_ENTRY"}))


def _holding(ledgers: list[dict[str, Any]], bookie: str) -> set[int]:
    return {ledger["ledger_id"] for ledger in ledgers if bookie in ledger["segments"][0]["bookies"]}


LOSSES = frozenset({"MISSING_REPLICA", "BELOW_WRITE_QUORUM", "BELOW_ACK_QUORUM", "NO_REPLICA"})
PREPARE: dict[str, Callable[[str, argparse.Namespace], list[dict[str, Any]]]] = {
    "wipe": prepare_many,
    "kill": prepare_many,
    "too-low": prepare_too_low,
}
INJECT: dict[str, Callable[[EmbeddedServices, list[dict[str, Any]]], Fault]] = {
    "wipe": wipe,
    "kill": kill,
    "too-low": too_low,
}

# ------------------------------------------------------------------------------------------------------ contenders


class Observer(Protocol):
    """What one contender has found so far: ``(ledger, bookie or "")`` -> the earliest wall time, and how."""

    def findings(self) -> dict[tuple[int, str], tuple[float, str]]: ...


class ScrutinyFindings:
    def __init__(self, job: StreamingJob) -> None:
        self.job = job

    def findings(self) -> dict[tuple[int, str], tuple[float, str]]:
        found: dict[tuple[int, str], tuple[float, str]] = {}
        for row in self.job.table("violations"):
            key = (row["ledger_id"], row["bookie"] or "")
            at = row["detected_at"].timestamp()
            if key not in found or at < found[key][0]:
                found[key] = (at, row["category"])
        return found

    def ready(self, ledgers: set[int]) -> bool:
        return ledgers <= {row["ledger_id"] for row in self.job.table("ledger_checks")}


class AuditorFindings:
    """The Auditor's under-replication marks (ledger -> the znode's creation time, naming no bookie: a mark is about
    the ledger), each recorded as it appears (BookKeeper's ReplicationWorker deletes a mark as soon as it has copied
    the ledger, often within a poll's interval), and its replicas check's counters (ledger -1 with the moment they
    first moved)."""

    def __init__(self, client: KazooClient, metrics: str) -> None:
        self.metrics = metrics
        self.reported: float | None = None
        self.marks: dict[int, float] = {}
        self._lock = threading.Lock()
        self.cache = TreeCache(client, underreplication_ledgers_path(root=METADATA_ROOT))
        self.cache.listen(self._event)
        self.cache.start()

    def _event(self, event: TreeEvent) -> None:
        node = event.event_data
        if event.event_type != TreeEvent.NODE_ADDED or node is None:
            return
        try:
            ledger_id = ledger_id_from_underreplication_path(node.path, root=METADATA_ROOT)
        except PathError:
            return  # one of the levels above the marks
        parse_underreplication_mark(node.data)  # a mark the product reads as such
        with self._lock:
            self.marks.setdefault(ledger_id, node.stat.ctime / 1000.0)

    def findings(self) -> dict[tuple[int, str], tuple[float, str]]:
        with self._lock:
            found = {(ledger, ""): (at, "under-replication mark") for ledger, at in self.marks.items()}
        if self.reported is None:
            with contextlib.suppress(OSError):
                if sum(_samples(self.metrics, lambda name: name.endswith(REPLICAS_CHECK_COUNTERS))) > 0:
                    self.reported = time.time()
        if self.reported is not None:
            found[-1, ""] = (self.reported, "replicas check counters")
        return found


def bench_settings(env: dict[str, str], where: Path) -> Settings:
    """The shipped defaults pointed at the services, with their own directories and a two-partition topic; Scrutiny's
    runs have no AutoRecovery on purpose (it is measured alone), so no auditor is expected (NO_AUDITOR is no
    fault's)."""
    settings = load_settings(env=env)
    checker = replace(
        settings.checker,
        data_dir=str(where / "data"),
        checkpoint_dir=str(where / "checkpoint"),
        shuffle_partitions=2,
    )
    watcher = replace(settings.watcher, auditor_expected=False)
    return replace(settings, kafka=replace(settings.kafka, partitions=2), checker=checker, watcher=watcher)


def _wait(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(POLL_S)


# ------------------------------------------------------------------------------------------------------------ runs


@dataclass
class Run:
    """One fault against one contender, on a cluster of its own under ``where``."""

    fault_name: str
    contender: str
    spark: SparkSession
    args: argparse.Namespace
    where: Path

    def outcome(self) -> Outcome:
        services = EmbeddedServices(self.where / "services", start_timeout=90.0)
        try:
            result = services.up(bookies=BOOKIES, bookie_options=BookieOptions(storage=BookieStorage.SORTED))
            ledgers = PREPARE[self.fault_name](services.bookies().metadata_service_uri, self.args)
            with self._started(services, result.env()) as settle:
                observer = settle()
                if isinstance(observer, ScrutinyFindings) and self.fault_name != "too-low":  # open: not checked
                    _wait(lambda: observer.ready({w["ledger_id"] for w in ledgers}), 240, "every ledger checked")
                time.sleep(self.args.settle)
                requests = RequestCounter(services.bookies())
                try:
                    fault = INJECT[self.fault_name](services, ledgers)
                    log.info(
                        "%s / %s: fault in place, %d ledger(s)", self.fault_name, self.contender, len(fault.affected)
                    )
                    outcome = self._watch(fault, observer, requests.samples[0][0])
                finally:
                    served = requests.stop()
                outcome.requests = served
                if outcome.first_at is not None:
                    outcome.requests_to_first = requests.until(outcome.first_at)
                return outcome
        finally:
            services.down()

    @contextmanager
    def _started(self, services: EmbeddedServices, env: dict[str, str]) -> Iterator[Callable[[], Observer]]:
        """Start the contender; yield a function that waits until it has settled and returns its observer."""
        if self.contender == "scrutiny":
            with streaming_job(self.spark, bench_settings(env, self.where)) as job:

                def settled() -> Observer:
                    _wait(lambda: bool(job.table("checker_runs")), 240, "the checker's first batch")
                    return ScrutinyFindings(job)

                yield settled
            return
        interval = self.args.short_interval if self.contender == "auditor-short" else 0
        metrics_port = free_port()
        options = AutoRecoveryOptions(metrics_port=metrics_port)
        if interval:
            options = replace(options, periodic_check_s=interval, bookie_check_s=interval, replicas_check_s=interval)
        services.autorecovery().start(options)
        client = KazooClient(hosts=services.bookies().zookeeper)
        client.start(timeout=10)
        observers: list[AuditorFindings] = []

        def watching() -> Observer:
            observers.append(AuditorFindings(client, f"127.0.0.1:{metrics_port}"))
            return observers[-1]

        try:
            yield watching
        finally:
            for observer in observers:
                observer.cache.close()
            client.stop()
            client.close()
            services.autorecovery().stop()

    def _window(self) -> float:
        """``--window``, or longer for Scrutiny and a killed bookie: its shipped grace before a bookie that stays
        away is lost (``[watcher] bookie_lost_grace_seconds``), plus a minute."""
        if self.contender == "scrutiny" and self.fault_name == "kill":
            grace = float(load_settings(env={}).watcher.bookie_lost_grace_seconds)
            return max(float(self.args.window), grace + 60.0)
        return float(self.args.window)

    def _watch(self, fault: Fault, observer: Observer, started: float) -> Outcome:
        """Poll the findings made since ``started`` for the window (or until all is found and ``--tail`` more seconds
        passed)."""
        outcome = Outcome(self.fault_name, self.contender, len(fault.affected))
        deadline = time.monotonic() + self._window()
        hits: dict[int, float] = {}  # kept across polls: the Auditor's marks go once a ledger is re-replicated
        while time.monotonic() < deadline:
            for (ledger, bookie), (at, how) in observer.findings().items():
                if at < started:
                    continue
                if not _about(fault, ledger, bookie):
                    outcome.false_alarms.add((ledger, bookie))
                elif at < fault.at:  # about the fault's making (a bookie stopped on the way), not the fault
                    continue
                elif fault.categories is None or how in fault.categories or not how.isupper():  # the Auditor's: any
                    hits[ledger] = min(at, hits.get(ledger, at))
                    outcome.how.add(how)
            if hits and outcome.first_at is None:
                outcome.first_at = min(hits.values())
                outcome.first_s = outcome.first_at - fault.at
            everything = -1 in hits or fault.affected <= set(hits)  # every ledger, or the cluster-wide report
            if everything and outcome.all_s is None:
                outcome.all_s = max(hits.values()) - fault.at
                deadline = min(deadline, time.monotonic() + self.args.tail)
            time.sleep(POLL_S)
        return outcome


def _about(fault: Fault, ledger: int, bookie: str) -> bool:
    """Whether a finding is about the fault: a ledger it touched (or the cluster), naming no other bookie. One that is
    not is a false alarm; one that is counts as finding the fault when its category is one the fault calls for."""
    return (ledger in fault.affected or ledger == -1) and (not bookie or bookie in fault.suspects)


def report(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    print(f"\nScrutiny beside BookKeeper's Auditor: {BOOKIES} real bookies, window {args.window:.0f} s")
    header = f"{'fault':<8} {'contender':<17} {'found':>7} {'first s':>8} {'all s':>7} {'req→first':>10} {'req':>6}"
    header += f" {'false':>6}"
    print(header)
    print("-" * len(header))
    for o in outcomes:
        first = "-" if o.first_s is None else f"{o.first_s:.1f}"
        every = "-" if o.all_s is None else f"{o.all_s:.1f}"
        to_first = "-" if o.requests_to_first is None else str(o.requests_to_first)
        found = "yes" if o.first_s is not None else "no"
        print(
            f"{o.fault:<8} {o.contender:<17} {found:>7} {first:>8} {every:>7} {to_first:>10} {o.requests:>6}"
            f" {len(o.false_alarms):>6}"
        )
        if o.how:
            print(f"{'':<26} by: {', '.join(sorted(o.how))}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    parser.add_argument(
        "--contenders", default=",".join(CONTENDERS), help=f"comma-separated, of {', '.join(CONTENDERS)}"
    )
    parser.add_argument("--window", type=float, default=150.0, help="seconds watched after each fault, at most")
    parser.add_argument("--tail", type=float, default=15.0, help="seconds watched for false alarms once all is found")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between a settled contender and the fault")
    parser.add_argument("--short-interval", type=int, default=30, help="the auditor-short check intervals, seconds")
    parser.add_argument("--ledgers", type=int, default=8, help="ledgers written for wipe and kill (E=3 WQ=2 AQ=2)")
    parser.add_argument("--entries", type=int, default=100, help="entries per ledger")
    args = parser.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    names = [c for c in args.contenders.split(",") if c]
    unknown = sorted((set(faults) - set(FAULTS)) | (set(names) - set(CONTENDERS)))
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    spark = build_spark_session("auditor-bench", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    outcomes: list[Outcome] = []
    try:
        with tempfile.TemporaryDirectory(prefix="auditor-bench-") as tmp:
            for fault_name in faults:
                for name in names:
                    log.info("run: %s / %s", fault_name, name)
                    outcomes.append(Run(fault_name, name, spark, args, Path(tmp) / f"{fault_name}-{name}").outcome())
    finally:
        spark.stop()
    report(outcomes, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
