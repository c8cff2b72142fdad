"""Listings per second through the bookie agent's gRPC API: one ledger per call vs batches.

Run from the repository root::

    .venv/bin/python -m bench.agent_bench            # full run (~20 s)
    .venv/bin/python -m bench.agent_bench --quick    # short run (~5 s)

The agent (:class:`scrutiny.agent.server.AgentServer`) runs in its own process with
the simulated bookie's in-memory backend (:class:`scrutiny.simulator.bookie.MemoryListingBackend`),
holding healthy closed E=5/WQ=2 ledgers of 1,000 entries as bookie 0 (3 compact groups each);
the checker's client (:class:`scrutiny.connectors.bookies.agent_client.AgentClient`) asks it over
loopback. For each batch size, in the same run: ``requests / wall time`` over repeated calls,
median of the repetitions; every answer is checked to be a listing. Figures are printed, never
asserted; the ratios compare figures of the same run.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import platform
import statistics
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from scrutiny.agent.server import AgentServer, AgentServerConfig
from scrutiny.connectors.bookies.agent_client import AgentClient
from scrutiny.core.striping import expected_groups
from scrutiny.core.verdict import AnswerKind
from scrutiny.simulator.bookie import EntryStore, FaultSwitch, MemoryListingBackend

LEDGERS = 20_000
HELD = tuple(expected_groups(0, 5, 2, 0, 999))


@dataclass(frozen=True)
class Plan:
    """How many ledgers each batch size asks for in one repetition, and how often it is repeated."""

    ledgers: dict[int, int]
    repetitions: int


FULL = Plan({1: 2_000, 100: 20_000, 1000: 20_000, 10_000: 20_000}, repetitions=3)
QUICK = Plan({1: 500, 100: 5_000, 1000: 10_000}, repetitions=1)


def serve(conn: Connection) -> None:
    """The agent process: serve until told to stop."""
    store = EntryStore()
    for ledger_id in range(LEDGERS):
        store.put(ledger_id, HELD)
    server = AgentServer(MemoryListingBackend(store, FaultSwitch()), AgentServerConfig(listen="127.0.0.1:0"))
    conn.send(server.start())
    conn.recv()
    server.stop(grace_s=1.0)


def measure(client: AgentClient, batch: int, ledgers: int) -> float:
    """Listings per second asking ``ledgers`` ledgers in calls of ``batch``."""
    ids = list(range(ledgers))
    started = time.perf_counter()
    for start in range(0, ledgers, batch):
        answers = client.get_listings(ids[start : start + batch])
        if any(a.kind is not AnswerKind.LISTING for a in answers.values()):
            raise SystemExit(f"wrong answer in batch of {batch}: {next(iter(answers.values()))}")
    return ledgers / (time.perf_counter() - started)


def main() -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short run")
    plan = QUICK if parser.parse_args().quick else FULL
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=serve, args=(theirs,), daemon=True)
    process.start()
    started = time.monotonic()
    try:
        port = ours.recv()
        rates: dict[int, float] = {}
        with AgentClient(f"127.0.0.1:{port}", chunk_size=max(plan.ledgers), timeout_s=60) as client:
            measure(client, 100, 1_000)  # warm up
            for batch, ledgers in plan.ledgers.items():
                rates[batch] = statistics.median(measure(client, batch, ledgers) for _ in range(plan.repetitions))
    finally:
        ours.send("stop")
        process.join(10)
    print("Scrutiny agent benchmark")
    print(f"  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; Python {platform.python_version()}")
    print("  agent in its own process, in-memory listings, E=5/WQ=2 ledgers of 1,000 entries")
    print(f"  {'ledgers per call':>16}  {'listings/s':>12}  {'vs 1 per call':>13}")
    for batch, rate in rates.items():
        print(f"  {batch:>16,}  {rate:>12,.0f}  {rate / rates[1]:>12.1f}×")
    print(f"  (run took {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
