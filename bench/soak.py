"""Soak: the watcher and the checker through crashes, failovers, outages and bad records, against the truth.

Run from the repository root::

    .venv/bin/python -m bench.soak                  # 25 minutes, 600 ledgers (~28 min with set-up and settling)
    .venv/bin/python -m bench.soak --minutes 2      # a short timeline (tests/bench/test_soak.py runs one)

It starts its own ZooKeeper and Kafka broker in a temporary directory, the simulated cluster (in this process, so
that its clock is the truth's) with a scenario whose schedule closes ledgers all along the run (some with a bookie
that lost its copy), re-replicates some of those (an ensemble change) and deletes others; two watchers
(``scrutiny watch``, one leader) and the checker (``scrutiny run``) as processes of their own. Then, at fixed
fractions of the run: malformed records produced into the topic (twice); the leading watcher SIGKILLed (the other
takes over); later that one SIGKILLed too, deletions happening while no watcher runs, then a watcher started again
(its snapshot leaves the deleted ledgers out); the broker stopped and started again (closes going on meanwhile);
the checker SIGKILLed three times and started again each time; a bookie that loses everything it holds while it
runs on (scenario action ``lose``: no restart, no new cookie) after many of its ledgers closed, and another killed
then revived, which change nothing in their ledgers' metadata: only the checker's re-verification
(``checker.reverify_interval`` a tenth of the run, 10 to 60 s) finds the losses, the bookie no longer registered,
and its return.

At three checkpoints through the run it compares the tables with the simulator's truth of that moment, for the
ledgers no change touched in the last minute (the rest may still be on their way; the loss touches every ledger of
its bookie, and so do a kill and a revival), and at the end (once the truth
stops changing and the tables caught up, or a settle time passed) for all of them. It prints findings missed (in
the truth, not open in ``open_violations``), false findings (open, never in the truth), stale open rows (open, in
the truth once but not now, or of a deleted ledger), duplicated rows (a batch's row written twice to
``violations``, ``ledger_checks`` or ``checker_runs``), rejected records recorded against those produced, and a
watcher's peak memory (the larger of the two) before, during and after the broker outage.
Target: the four counts 0, the memory flat. Nothing is asserted here (exit 0); the test asserts the short run.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from kazoo.client import KazooClient

from scrutiny.connectors.tables.delta import read_table
from scrutiny.services.servers import RunningServer, start_kafka, start_zookeeper
from scrutiny.settings.loader import Settings, load_settings
from scrutiny.simulator.model import Action, Scenario
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.simulator.truth import TruthState, truth_timeline
from tests.support.checker_harness import harness_settings, simulated_cluster
from tests.support.checker_process import SCRUTINY, Child, child_env, child_process, settings_replace, write_config

log = logging.getLogger("bench.soak")

#: (ledger, category, bookie)
FindingId = tuple[int, str, str | None]

#: Values the checker cannot use, each produced with a key of its own kind.
MALFORMED: tuple[tuple[bytes | None, bytes | None], ...] = (
    (b"7", b"\xff\xfe not a ledger event"),
    (b"-3", b""),
    (None, b"\x08\x63"),
    (b"cluster", b"\x00" * 40),
    (b"not-a-number", b"{}"),
)


#: The bookie that loses its data along the run, and when (a fraction of the run).
EMPTIED_BOOKIE = "bookie-5"
EMPTIED_AT = 0.45
#: The bookie killed along the run, and when it is killed and revived.
KILLED_BOOKIE = "bookie-4"
KILLED_AT = (0.60, 0.70)
#: The scheduled actions that change what a bookie's ledgers hold or answer, with no change to their metadata.
_BOOKIE_ACTIONS = frozenset({Action.LOSE, Action.KILL, Action.REVIVE})


@dataclass(frozen=True)
class Timeline:
    """How long the run is and what it holds; the disruptions happen at fixed fractions of ``seconds``."""

    seconds: float
    ledgers: int
    settle_seconds: float
    seed: int = 7

    def at(self, fraction: float) -> float:
        """The time (seconds from the cluster's start) of a fraction of the run."""
        return fraction * self.seconds

    @property
    def reverify_seconds(self) -> float:
        """The checker's re-verification interval: a tenth of the run, 10 s to 60 s (the emptied bookie's losses must
        be found before the checkpoints count its ledgers again)."""
        return min(60.0, max(10.0, self.at(0.1)))


@dataclass
class SoakReport:
    """What the run measured."""

    missed: set[FindingId] = field(default_factory=set)
    false: set[FindingId] = field(default_factory=set)
    stale: set[FindingId] = field(default_factory=set)
    duplicated: dict[str, int] = field(default_factory=dict)
    malformed_sent: int = 0
    rejected_recorded: int = 0
    watcher_peak_kb: dict[str, int] = field(default_factory=dict)
    truth_size: int = 0
    settled_after_s: float | None = None
    exits: dict[str, int] = field(default_factory=dict)
    checkpoints: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    #: Findings of the final truth that name the emptied bookie on a ledger closed before its loss: only the
    #: re-verification can find them.
    after_close: int = 0

    def counts(self) -> dict[str, int]:
        """The four counts the target is about."""
        return {
            "missed": len(self.missed),
            "false": len(self.false),
            "stale": len(self.stale),
            "duplicated": sum(self.duplicated.values()),
        }


def scenario_text(timeline: Timeline) -> str:
    """Open ledgers closed along the run; some lost a copy (some of those re-replicated), some deleted later."""
    rng = random.Random(timeline.seed)
    lines = [
        "[scenario]",
        'name = "soak"',
        f"seed = {timeline.seed}",
        "",
        "[cluster]",
        "bookies = 6",
        "",
        "[defaults]",
        "ensemble_size = 3",
        "write_quorum = 2",
        "ack_quorum = 2",
        "last_entry = 29",
        "",
    ]
    schedule: list[tuple[float, str]] = []
    for ledger in range(1, timeline.ledgers + 1):
        ensemble = rng.sample([f"bookie-{i}" for i in range(1, 6)], 3)
        closes = timeline.at(0.03 + 0.8 * ledger / timeline.ledgers)
        lines += ["[[ledgers]]", f"id = {ledger}", f"ensemble = {_toml_list(ensemble)}", 'state = "OPEN"']
        lost = rng.random() < 0.15
        if lost:
            lines.append(f'holdings = [{{ bookie = "{ensemble[0]}", nothing = true }}]')
        lines.append("")
        schedule.append((closes, f'action = "close"\nledger = {ledger}'))
        if lost and rng.random() < 0.4:
            repaired = ["bookie-6", *ensemble[1:]]
            schedule.append(
                (
                    closes + timeline.at(0.05),
                    f'action = "change_ensemble"\nledger = {ledger}\nfirst = 0\nensemble = {_toml_list(repaired)}',
                )
            )
        elif rng.random() < 0.15:
            schedule.append((closes + timeline.at(rng.uniform(0.02, 0.2)), f'action = "delete"\nledger = {ledger}'))
    # A bookie emptied after many of its ledgers closed, another killed and revived later: nothing changes in their
    # ledgers' metadata, so only the re-verification sees the losses, the unregistered bookie and its return.
    schedule.append((timeline.at(EMPTIED_AT), f'action = "lose"\nbookie = "{EMPTIED_BOOKIE}"'))
    schedule.append((timeline.at(KILLED_AT[0]), f'action = "kill"\nbookie = "{KILLED_BOOKIE}"'))
    schedule.append((timeline.at(KILLED_AT[1]), f'action = "revive"\nbookie = "{KILLED_BOOKIE}"'))
    for at, body in sorted(schedule):
        lines += ["[[schedule]]", f"at = {at:.2f}", body, ""]
    return "\n".join(lines)


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def soak_settings(
    base: Settings, text: str, zookeeper: str, kafka: str, workdir: Path, *, reverify_seconds: float
) -> Settings:
    """The end-to-end tests' settings on the run's servers and directory, with slower batches and retries (three
    processes and the servers share the machine for many minutes) and a short re-verification interval."""
    on_servers = replace(
        base,
        zookeeper=replace(base.zookeeper, connect=zookeeper),
        kafka=replace(base.kafka, bootstrap_servers=kafka),
    )
    settings = harness_settings(on_servers, parse_scenario(text), "", "soak.ledger-events", workdir)
    return settings_replace(
        settings,
        trigger_seconds=1.0,
        retry_initial_seconds=1.0,
        retry_max_seconds=4.0,
        retry_attempts=3,
        reverify_interval=reverify_seconds,
    )


class Processes:
    """The watchers and the checker as processes of their own, started, killed and started again."""

    def __init__(self, stack: ExitStack, config: Path, settings: Settings, workdir: Path) -> None:
        self.stack, self.config, self.workdir = stack, config, workdir
        self.env = child_env(settings, workdir / "spark-local")
        self.children: dict[str, Child] = {}
        self.starts: Counter[str] = Counter()
        self.exits: Counter[str] = Counter()

    def start(self, name: str) -> None:
        """Start ``watcher-a``, ``watcher-b`` or ``checker`` (again)."""
        self.starts[name] += 1
        if name == "checker":
            command = [str(SCRUTINY), "run", "--config", str(self.config)]
        else:
            command = [str(SCRUTINY), "watch", "--config", str(self.config), "--watcher-id", name]
        log_file = self.workdir / "logs" / f"{name}-{self.starts[name]}.log"
        self.children[name] = self.stack.enter_context(child_process(name, command, self.env, log_file))

    def supervise(self) -> None:
        """Start again a process that exited by itself (as systemd would), counting it."""
        for name, child in list(self.children.items()):
            if not child.alive():
                log.warning("%s exited (%s); started again:\n%s", name, child.popen.returncode, child.tail(20))
                self.exits[name] += 1
                self.children.pop(name).stop()
                self.start(name)

    def crash_checker(self) -> None:
        """SIGKILL the checker and start it again."""
        self.kill("checker")
        self.start("checker")

    def kill(self, name: str) -> None:
        """SIGKILL a process tree (a crash)."""
        self.children.pop(name).kill()

    def rss_kb(self, name: str) -> int | None:
        """A running watcher's resident memory."""
        child = self.children.get(name)
        if child is None or not child.alive():
            return None
        try:
            status = Path(f"/proc/{child.pid}/status").read_text(encoding="ascii")
        except OSError:
            return None
        return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), None)


@contextmanager
def servers(workdir: Path) -> Iterator[tuple[RunningServer, list[RunningServer]]]:
    """ZooKeeper and a broker (in a list, so that a restart replaces it); stopped at the end."""
    zookeeper = start_zookeeper(workdir / "zookeeper", die_with_parent=True)
    brokers = [start_kafka(workdir / "kafka", die_with_parent=True)]
    try:
        yield zookeeper, brokers
    finally:
        brokers[-1].stop()
        zookeeper.stop()


def run_soak(timeline: Timeline, workdir: Path, *, base: Settings | None = None) -> SoakReport:
    """Run the timeline; the report of the end."""
    text = scenario_text(timeline)
    scenario = parse_scenario(text)
    truth = truth_timeline(scenario)
    report = SoakReport()
    with servers(workdir) as (zookeeper, brokers), ExitStack() as stack:
        settings = soak_settings(
            base or load_settings(env={}),
            text,
            zookeeper.address,
            brokers[0].address,
            workdir,
            reverify_seconds=timeline.reverify_seconds,
        )
        config = write_config(settings, workdir / "scrutiny.toml")
        client = KazooClient(hosts=zookeeper.address)
        client.start(timeout=30)
        stack.callback(client.stop)
        simulated = stack.enter_context(simulated_cluster(client, settings, scenario, schedule=True, watch=False))
        processes = Processes(stack, config, settings, workdir)
        for name in ("watcher-a", "watcher-b", "checker"):
            processes.start(name)
        memory: list[tuple[float, int]] = []
        sampling = threading.Event()
        threading.Thread(target=_sample, args=(processes, simulated.cluster.elapsed_s, memory, sampling)).start()
        stack.callback(sampling.set)
        outage: list[float] = []

        def restart_broker() -> None:
            brokers[-1].stop()
            outage.append(simulated.cluster.elapsed_s())
            _wait_until(simulated.cluster.elapsed_s, timeline.at(0.66))
            brokers.append(start_kafka(workdir / "kafka", port=int(brokers[0].address.rsplit(":", 1)[1])))
            outage.append(simulated.cluster.elapsed_s())

        def checkpoint() -> None:
            lag = min(60.0, timeline.at(0.3))
            now_s = simulated.cluster.elapsed_s()
            _checkpoint(report, scenario, truth, settings.checker.data_dir, now_s=now_s, lag_s=lag)

        steps: list[tuple[float, str, Callable[[], None]]] = [
            (0.12, "malformed records", lambda: _produce_malformed(settings, report)),
            (0.20, "SIGKILL the leading watcher", lambda: processes.kill("watcher-a")),
            (0.27, "SIGKILL the checker", processes.crash_checker),
            (0.36, "checkpoint", checkpoint),
            (0.40, "SIGKILL the other watcher: no watcher runs", lambda: processes.kill("watcher-b")),
            (0.48, "start a watcher again", lambda: processes.start("watcher-a")),
            (0.52, "SIGKILL the checker", processes.crash_checker),
            (0.56, "checkpoint", checkpoint),
            (0.58, "stop the broker until 0.66", restart_broker),
            (0.72, "malformed records", lambda: _produce_malformed(settings, report)),
            (0.78, "SIGKILL the checker", processes.crash_checker),
            (0.90, "checkpoint", checkpoint),
        ]
        for fraction, what, action in steps:
            _wait_until(simulated.cluster.elapsed_s, timeline.at(fraction), processes)
            log.info("t=%.0f s: %s", simulated.cluster.elapsed_s(), what)
            action()
        final = truth[-1]
        _wait_until(simulated.cluster.elapsed_s, max(final.at_s, timeline.seconds), processes)
        settled_from = time.monotonic()
        deadline = settled_from + timeline.settle_seconds
        while True:
            _compare(report, scenario, truth, settings.checker.data_dir)
            if not any(report.counts().values()) or time.monotonic() >= deadline:
                break
            processes.supervise()
            time.sleep(2)
        if not any(report.counts().values()):
            report.settled_after_s = time.monotonic() - settled_from
        report.rejected_recorded = len(_rows(settings.checker.data_dir, "rejected_events"))
        report.exits = dict(processes.exits)
        report.watcher_peak_kb = _peaks(memory, outage)
        report.truth_size = len(final.violations)
        report.after_close = _after_close(scenario, final)
    return report


def _wait_until(clock: Callable[[], float], at_s: float, processes: Processes | None = None) -> None:
    while clock() < at_s:
        if processes is not None:
            processes.supervise()
        time.sleep(0.2)


def _sample(
    processes: Processes, clock: Callable[[], float], out: list[tuple[float, int]], stop: threading.Event
) -> None:
    while not stop.wait(0.5):
        largest = max((rss or 0 for rss in map(processes.rss_kb, ("watcher-a", "watcher-b"))), default=0)
        if largest:
            out.append((clock(), largest))


def _peaks(memory: list[tuple[float, int]], outage: list[float]) -> dict[str, int]:
    start, end = [*outage, float("inf"), float("inf")][:2]
    phases = {"before the outage": (0.0, start), "during": (start, end), "after": (end, float("inf"))}
    return {name: max((kb for at, kb in memory if lo <= at < hi), default=0) for name, (lo, hi) in phases.items()}


def _produce_malformed(settings: Settings, report: SoakReport) -> None:
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers)
    try:
        for key, value in MALFORMED:
            producer.send(settings.kafka.topic, key=key, value=value)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    report.malformed_sent += len(MALFORMED)


def _after_close(scenario: Scenario, final: TruthState) -> int:
    """The findings of ``final`` naming the emptied bookie, on ledgers closed before it lost its data."""
    (loss,) = [e for e in scenario.schedule if e.action is Action.LOSE]
    closed = {e.ledger for e in scenario.schedule if e.action is Action.CLOSE and e.at_s < loss.at_s}
    return sum(1 for v in final.violations if v.ledger_id in closed and v.bookie == loss.bookie)


def _rows(data_dir: str, name: str) -> list[dict[str, Any]]:
    try:
        return list(read_table(data_dir, name).to_pylist())
    except Exception:  # not written yet
        return []


def _compare(report: SoakReport, scenario: Scenario, truth: list[TruthState], data_dir: str) -> None:
    """The four counts from the tables now against the final truth (and every earlier one, for staleness)."""
    ledgers = {s.ledger_id for s in scenario.ledgers}
    found = _findings(truth, truth[-1], _open_rows(data_dir), ledgers, _deleted(scenario, float("inf")))
    report.missed, report.false, report.stale = found
    keys = {
        "violations": ("batch_id", "source", "ledger_id", "category", "bookie", "segment_first_entry", "detected_at"),
        "ledger_checks": ("batch_id", "source", "ledger_id", "metadata_version", "checked_at"),
        "checker_runs": ("run_id", "batch_id"),
    }
    report.duplicated = {
        name: sum(n - 1 for n in Counter(tuple(r[k] for k in key) for r in _rows(data_dir, name)).values())
        for name, key in keys.items()
    }


def _open_rows(data_dir: str) -> set[FindingId]:
    return {
        (r["ledger_id"], r["category"], r["bookie"])
        for r in _rows(data_dir, "open_violations")
        if r["resolved_at"] is None
    }


def _deleted(scenario: Scenario, until_s: float) -> set[int]:
    return {e.ledger for e in scenario.schedule if e.action is Action.DELETE and e.ledger and e.at_s <= until_s}


def _findings(
    truth: list[TruthState], now: TruthState, open_rows: set[FindingId], ledgers: set[int], deleted: set[int]
) -> tuple[set[FindingId], set[FindingId], set[FindingId]]:
    """(missed, false, stale) of ``open_rows`` against the truth ``now``, counting only ``ledgers``; an open row of
    a deleted ledger, or one the truth held earlier, is stale."""
    expected = {(v.ledger_id, v.category.value, v.bookie) for v in now.violations if v.ledger_id in ledgers}
    ever = {(v.ledger_id, v.category.value, v.bookie) for state in truth for v in state.violations}
    extra = {f for f in open_rows if f[0] in ledgers} - expected
    stale = {f for f in extra if f in ever or f[0] in deleted}
    return expected - open_rows, extra - stale, stale


def _checkpoint(
    report: SoakReport, scenario: Scenario, truth: list[TruthState], data_dir: str, *, now_s: float, lag_s: float
) -> None:
    """Missed, false and stale findings now, among the ledgers no change touched in the last ``lag_s`` seconds."""
    recent = [e for e in scenario.schedule if e.at_s > now_s - lag_s]
    changed = {e.ledger for e in recent if e.ledger is not None}
    bookies = {e.bookie for e in recent if e.action in _BOOKIE_ACTIONS}
    changed |= {s.ledger_id for s in scenario.ledgers if bookies & {b for seg in s.segments for b in seg.ensemble}}
    settled = {s.ledger_id for s in scenario.ledgers} - changed
    state = [t for t in truth if t.at_s <= now_s][-1]
    missed, false, stale = _findings(truth, state, _open_rows(data_dir), settled, _deleted(scenario, now_s))
    counts = {"missed": len(missed), "false": len(false), "stale": len(stale)}
    report.checkpoints.append((now_s, counts))
    log.info("t=%.0f s: checkpoint (ledgers unchanged for %.0f s): %s", now_s, lag_s, counts)


def print_report(timeline: Timeline, report: SoakReport) -> None:
    """The figures, one per line."""
    counts = report.counts()
    print(
        f"soak: {timeline.seconds:.0f} s, {timeline.ledgers} ledgers, {report.truth_size} findings in the final truth, "
        f"{report.after_close} of them of {EMPTIED_BOOKIE} emptied after the ledgers closed (re-verification every "
        f"{timeline.reverify_seconds:.0f} s)"
    )
    for name, value in counts.items():
        print(f"  {name:<11} {value}")
    for at_s, checkpoint in report.checkpoints:
        print(f"  checkpoint at {at_s:.0f} s (ledgers unchanged for a while): {checkpoint}")
    for name, found in (("missed", report.missed), ("false", report.false), ("stale", report.stale)):
        if found:
            print(f"  {name} (first 10): {sorted(found, key=str)[:10]}")
    print(f"  duplicated by table: {report.duplicated}")
    print(f"  rejected records recorded: {report.rejected_recorded} of {report.malformed_sent} produced")
    print(f"  a watcher's peak resident memory (kB): {report.watcher_peak_kb}")
    print(f"  processes that exited by themselves (started again): {report.exits or 'none'}")
    settled = f"{report.settled_after_s:.0f} s" if report.settled_after_s is not None else "not within the settle time"
    print(f"  tables matched the truth after the run's end: {settled}")
    verdict = "MET" if not any(counts.values()) else "MISSED"
    print(f"target (all four counts 0): {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=25.0, help="length of the timeline")
    parser.add_argument("--ledgers", type=int, help="ledgers closed along it (default: 24 per minute)")
    parser.add_argument("--settle", type=float, default=180.0, help="seconds allowed after the end to catch up")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    timeline = Timeline(args.minutes * 60, args.ledgers or max(20, round(24 * args.minutes)), args.settle)
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        report = run_soak(timeline, Path(tmp))
    print_report(timeline, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
