"""Listings per second through the bookie agent's gRPC API: one ledger per call vs batches; and the ledger listing.

Run from the repository root::

    .venv/bin/python -m bench.agent_bench            # full run (~90 s)
    .venv/bin/python -m bench.agent_bench --quick    # short run (~10 s)

The agent (:class:`scrutiny.agent.server.AgentServer`) runs in its own process with
the simulated bookie's in-memory backend (:class:`scrutiny.simulator.bookie.MemoryListingBackend`),
holding healthy closed E=5/WQ=2 ledgers of 1,000 entries as bookie 0 (3 compact groups each);
the checker's client (:class:`scrutiny.connectors.bookies.agent_client.AgentClient`) asks it over
loopback. For each batch size, in the same run: ``requests / wall time`` over repeated calls,
median of the repetitions; every answer is checked to be a listing. Figures are printed, never
asserted; the ratios compare figures of the same run.

Ledger listing (``ListLedgers``): a DbLedgerStorage index (RocksDB, 2 ledger directories) of N ledgers with a record
and 3 entries each is written by a process of its own, then served by the agent in another
(:class:`scrutiny.agent.dbstorage.DbLedgerStorageBackend` behind :class:`~scrutiny.agent.server.AgentServer`), and a
third lists it with the client's pager (:meth:`AgentClient.held_ledgers`), checking every id comes once, in order.
Reported: ledgers/s (N / wall time of the whole listing), the peak RSS of the agent and of the client after one page
and after the whole listing (a bounded listing keeps them flat whatever N), and GetListings of the same N ledgers,
10,000 per call, for comparison.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import platform
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rocksdict import Options, Rdict, WriteBatch

from scrutiny.agent.dbstorage import DbLedgerStorageBackend, entry_key, ledger_key
from scrutiny.agent.server import AgentServer, AgentServerConfig
from scrutiny.connectors.bookies.agent_client import AgentClient
from scrutiny.connectors.bookies.agent_protocol import DEFAULT_LEDGERS_PER_PAGE
from scrutiny.core.striping import expected_groups
from scrutiny.core.verdict import AnswerKind
from scrutiny.proto import bookie_agent_pb2 as pb
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
#: Sizes of the DbLedgerStorage index listed (the first is also read with GetListings), full and quick.
INDEX_FULL = (200_000, 1_000_000)
INDEX_QUICK = (20_000,)
INDEX_DIRECTORIES = 2
INDEX_ENTRIES = 3


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


def build_index(root: str, ledgers: int) -> list[str]:
    """Write a DbLedgerStorage index of ``ledgers`` ledgers (a record and entries 0..2 each) under ``root``, as the
    bookie would (primary RocksDB instances, flushed and closed); its ledger directories."""
    dirs = [Path(root) / f"ledgers{i}" for i in range(INDEX_DIRECTORIES)]
    databases: dict[tuple[int, str], Rdict] = {}
    for index, directory in enumerate(dirs):
        for name in ("ledgers", "locations"):
            path = directory / "current" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            options = Options(raw_mode=True)
            options.create_if_missing(True)
            databases[index, name] = Rdict(str(path), options)
            (path / "rocksdict-config.json").unlink()
    record = pb.LedgerData(exists=True, master_key=b"pw").SerializeToString()
    location = bytes(8)
    for start in range(0, ledgers, 10_000):
        batches = {key: WriteBatch(raw_mode=True) for key in databases}
        for ledger_id in range(start, min(start + 10_000, ledgers)):
            home = ledger_id % INDEX_DIRECTORIES
            batches[home, "ledgers"].put(ledger_key(ledger_id), record)
            for entry in range(INDEX_ENTRIES):
                batches[home, "locations"].put(entry_key(ledger_id, entry), location)
        for key, batch in batches.items():
            databases[key].write(batch)
    for database in databases.values():
        database.flush()
        database.close()
    return [str(d) for d in dirs]


def peak_rss_mib() -> float:
    """This process's peak resident set size so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def serve_index(conn: Connection, dirs: list[str], state: str) -> None:
    """The agent process over a DbLedgerStorage index: serve; answer ``"rss"`` with its peak RSS until ``"stop"``."""
    server = AgentServer(DbLedgerStorageBackend(dirs, state_dir=state), AgentServerConfig(listen="127.0.0.1:0"))
    conn.send(server.start())
    while conn.recv() == "rss":
        conn.send(peak_rss_mib())
    server.stop(grace_s=1.0)


def list_index(conn: Connection, port: int, ledgers: int, mode: str) -> None:
    """A client process: ``"page"`` reads one page, ``"all"`` the whole listing with the pager (checked: every id once,
    in order), ``"get"`` the listings of every ledger by GetListings; sends (seconds, peak RSS MiB)."""
    with AgentClient(f"127.0.0.1:{port}", chunk_size=10_000, timeout_s=120) as client:
        started = time.perf_counter()
        if mode == "page":
            client.ledgers_page(max_ledgers=DEFAULT_LEDGERS_PER_PAGE)
        elif mode == "all":
            expected = 0
            for held in client.held_ledgers(page_size=DEFAULT_LEDGERS_PER_PAGE):
                if held.ledger_id != expected or held.last_entry_id != INDEX_ENTRIES - 1:
                    raise SystemExit(f"listed {held}, expected ledger {expected}")
                expected += 1
            if expected != ledgers:
                raise SystemExit(f"listed {expected} ledgers of {ledgers}")
        else:
            for start in range(0, ledgers, 10_000):
                answers = client.get_listings(range(start, min(start + 10_000, ledgers)))
                if any(a.kind is not AnswerKind.LISTING for a in answers.values()):
                    raise SystemExit("GetListings gave something else than listings")
        conn.send((time.perf_counter() - started, peak_rss_mib()))


def in_process(context: Any, target: Any, *args: Any) -> Any:
    """Run ``target(conn, *args)`` in a fresh process; what it sends back once."""
    ours, theirs = context.Pipe()
    process = context.Process(target=target, args=(theirs, *args), daemon=True)
    process.start()
    try:
        return ours.recv()
    finally:
        process.join(30)


@dataclass(frozen=True)
class ListingFigures:
    """One index size's figures."""

    ledgers: int
    build_s: float
    list_s: float
    agent_rss_page: float
    agent_rss_all: float
    client_rss_page: float
    client_rss_all: float
    get_s: float | None


def measure_listing(context: Any, ledgers: int, with_get: bool) -> ListingFigures:
    """Build an index of ``ledgers`` ledgers, serve it, list it (and GetListings of it when ``with_get``)."""
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as root:
        started = time.perf_counter()
        dirs = in_process(context, _build, root, ledgers)
        build_s = time.perf_counter() - started
        ours, theirs = context.Pipe()
        agent = context.Process(target=serve_index, args=(theirs, dirs, str(Path(root) / "state")), daemon=True)
        agent.start()
        try:
            port = ours.recv()
            _, client_rss_page = in_process(context, list_index, port, ledgers, "page")
            ours.send("rss")
            agent_rss_page = ours.recv()
            list_s, client_rss_all = in_process(context, list_index, port, ledgers, "all")
            ours.send("rss")
            agent_rss_all = ours.recv()
            get_s = in_process(context, list_index, port, ledgers, "get")[0] if with_get else None
        finally:
            ours.send("stop")
            agent.join(30)
    return ListingFigures(
        ledgers, build_s, list_s, agent_rss_page, agent_rss_all, client_rss_page, client_rss_all, get_s
    )


def _build(conn: Connection, root: str, ledgers: int) -> None:
    conn.send(build_index(root, ledgers))


def print_listing(figures: list[ListingFigures]) -> None:
    """The ledger listing's table."""
    print()
    print(f"  ledger listing (ListLedgers, {DEFAULT_LEDGERS_PER_PAGE:,} per page): DbLedgerStorage index in")
    print(f"  {INDEX_DIRECTORIES} directories, a record and {INDEX_ENTRIES} entries per ledger; peak RSS in MiB")
    print(f"  {'ledgers':>9}  {'ledgers/s':>9}  {'agent RSS 1 page / all':>22}  {'client RSS 1 page / all':>23}")
    for f in figures:
        agent = f"{f.agent_rss_page:.0f} / {f.agent_rss_all:.0f}"
        client = f"{f.client_rss_page:.0f} / {f.client_rss_all:.0f}"
        print(f"  {f.ledgers:>9,}  {f.ledgers / f.list_s:>9,.0f}  {agent:>22}  {client:>23}")
    for f in figures:
        if f.get_s is not None:
            get_rate, list_rate = f.ledgers / f.get_s, f.ledgers / f.list_s
            print(
                f"  GetListings of the same {f.ledgers:,} ledgers, 10,000 per call: {get_rate:,.0f} listings/s "
                f"(ListLedgers {list_rate / get_rate:.1f}× as many ledgers/s)"
            )
    print(f"  (index writing took {', '.join(f'{f.build_s:.1f} s' for f in figures)}; not timed above)")


def main() -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short run")
    quick = parser.parse_args().quick
    plan = QUICK if quick else FULL
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
    sizes = INDEX_QUICK if quick else INDEX_FULL
    listing = [measure_listing(context, n, with_get=i == 0) for i, n in enumerate(sizes)]
    print("Scrutiny agent benchmark")
    print(f"  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; Python {platform.python_version()}")
    print("  agent in its own process, in-memory listings, E=5/WQ=2 ledgers of 1,000 entries")
    print(f"  {'ledgers per call':>16}  {'listings/s':>12}  {'vs 1 per call':>13}")
    for batch, rate in rates.items():
        print(f"  {batch:>16,}  {rate:>12,.0f}  {rate / rates[1]:>12.1f}×")
    print_listing(listing)
    print(f"  (run took {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
