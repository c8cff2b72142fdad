"""Listings per second from one simulated bookie over the v3 protocol: pipelined vs one request at a time.

Run from the repository root::

    .venv/bin/python -m bench.bookie_v3_bench            # full run (~25 s)
    .venv/bin/python -m bench.bookie_v3_bench --quick    # short run (~5 s)

The simulated bookie (:class:`scrutiny.simulator.v3_server.BookieV3Server`) runs in
its own process, so client and server do not share an event loop or the GIL; they talk over
loopback. Every ledger is a healthy, closed E=5/WQ=2 ledger of 1,000 entries and the bookie
answers as bookie 0 (400 entries in 200 runs), in the compact encoding (3 groups, 136 bytes)
or BookKeeper's Java encoding (one group per run, 4,888 bytes). The server encodes each answer
when it is asked, as a bookie does.

For each encoding, in the same run, one :class:`BookieV3Client` (one connection):

* **one at a time**: ``await client.get_listing(id)`` for each ledger in turn;
* **pipelined**: ``await client.get_listings(ids)``, every request in flight at once.

Each figure is the median of the repetitions of ``requests / wall time``; every answer is
checked to be the expected listing (a run with a wrong answer says so and exits 1). The ratio
compares figures of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import multiprocessing
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from scrutiny.connectors.bookies.v3_client import BookieClientConfig, BookieV3Client
from scrutiny.connectors.bookies.v3_protocol import encode_frame, listing_request
from scrutiny.core.listing_codec import encode_listing, encode_listing_per_run
from scrutiny.core.sequence_groups import SequenceGroup, expand
from scrutiny.core.striping import expected_groups
from scrutiny.core.verdict import AnswerKind
from scrutiny.proto import bookkeeper_protocol_pb2 as pb
from scrutiny.simulator.v3_server import BookieV3Server, ListingEncoding

ENTRIES = 1_000
HELD: tuple[SequenceGroup, ...] = tuple(expected_groups(0, 5, 2, 0, ENTRIES - 1))
HELD_ENTRIES = list(expand(HELD))
MODES = ("one at a time", "pipelined")


@dataclass(frozen=True)
class Plan:
    """How many requests each mode sends, and how often it is repeated."""

    sequential: int
    pipelined: int
    repetitions: int


FULL = Plan(sequential=3_000, pipelined=10_000, repetitions=3)
QUICK = Plan(sequential=1_000, pipelined=4_000, repetitions=1)


@dataclass(frozen=True)
class Row:
    """One measured (encoding, mode) pair."""

    encoding: ListingEncoding
    mode: str
    requests: int
    seconds: float
    rate: float


# --------------------------------------------------------------------------- the simulated bookie (child process)


def _holdings(ledger_id: int) -> tuple[SequenceGroup, ...]:
    return HELD


def _serve(pipe: Connection) -> None:
    """Child process: run the bookie until the parent says stop (or goes away)."""

    async def main() -> None:
        async with BookieV3Server(_holdings) as server:
            pipe.send(server.port)
            while True:
                command = await asyncio.to_thread(_receive, pipe)
                if command == "stop":
                    return
                server.set_encoding(ListingEncoding(command))
                pipe.send("ok")

    asyncio.run(main())


def _receive(pipe: Connection) -> str:
    try:
        message: str = pipe.recv()
    except EOFError:
        return "stop"
    return message


# --------------------------------------------------------------------------- measuring


async def _one_at_a_time(client: BookieV3Client, count: int) -> int:
    wrong = 0
    for ledger_id in range(count):
        answer = await client.get_listing(ledger_id, timeout=10.0)
        wrong += not _is_expected(answer.kind, answer.groups)
    return wrong


async def _pipelined(client: BookieV3Client, count: int) -> int:
    answers = await client.get_listings(range(count), timeout=60.0)
    return sum(not _is_expected(a.kind, a.groups) for a in answers.values())


def _is_expected(kind: AnswerKind, groups: tuple[SequenceGroup, ...]) -> bool:
    return kind is AnswerKind.LISTING and (groups == HELD or list(expand(groups)) == HELD_ENTRIES)


async def _measure(port: int, encoding: ListingEncoding, plan: Plan) -> list[Row]:
    config = BookieClientConfig(request_timeout_s=60.0)
    rows: list[Row] = []
    async with BookieV3Client("127.0.0.1", port, config=config) as client:
        await _pipelined(client, 200)  # connect and warm up
        for mode, count in zip(MODES, (plan.sequential, plan.pipelined), strict=True):
            rates: list[float] = []
            seconds: list[float] = []
            for _ in range(plan.repetitions):
                started = time.perf_counter()
                wrong = await (_one_at_a_time if mode == MODES[0] else _pipelined)(client, count)
                elapsed = time.perf_counter() - started
                if wrong:
                    raise SystemExit(f"{wrong} of {count} answers were not the expected listing ({encoding}, {mode})")
                seconds.append(elapsed)
                rates.append(count / elapsed)
            rows.append(Row(encoding, mode, count, statistics.median(seconds), statistics.median(rates)))
            print(f"  {encoding.value:8} {mode:14} {rows[-1].rate:>10,.0f} listings/s", file=sys.stderr)
    return rows


def _frame_bytes(encoding: ListingEncoding) -> int:
    listing = encode_listing(HELD) if encoding is ListingEncoding.COMPACT else encode_listing_per_run(HELD)
    response = pb.Response(header=listing_request(1, 1).header, status=pb.EOK)
    response.getListOfEntriesOfLedgerResponse.status = pb.EOK
    response.getListOfEntriesOfLedgerResponse.ledgerId = 1_000
    response.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger = listing
    return len(encode_frame(response.SerializeToString()))


# --------------------------------------------------------------------------- report


def _table(rows: list[Row]) -> str:
    lines = [
        "| listing encoding | response frame | mode | requests | wall time | listings/s |",
        "|------------------|---------------:|------|---------:|----------:|-----------:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.encoding.value} | {_frame_bytes(row.encoding):,} B | {row.mode} | {row.requests:,} "
            f"| {row.seconds:.3f} s | {row.rate:,.0f} |"
        )
    lines.append("")
    for encoding in ListingEncoding:
        by_mode = {row.mode: row.rate for row in rows if row.encoding is encoding}
        ratio = by_mode[MODES[1]] / by_mode[MODES[0]]
        lines.append(f"pipelined / one at a time, {encoding.value}: {ratio:.1f}×")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Start the bookie process, measure both encodings and both modes, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer requests, one repetition")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    bookie = context.Process(target=_serve, args=(child,), daemon=True)
    started = time.perf_counter()
    bookie.start()
    try:
        if not parent.poll(30):
            raise SystemExit("the simulated bookie did not start within 30 s")
        port: int = parent.recv()
        rows: list[Row] = []
        for encoding in ListingEncoding:
            parent.send(encoding.value)
            parent.recv()
            rows += asyncio.run(_measure(port, encoding, plan))
    finally:
        parent.send("stop")
        bookie.join(10)
        if bookie.is_alive():
            bookie.terminate()
            bookie.join(5)
    today = datetime.date.today().isoformat()
    print(
        f"Bookie v3 listings ({'quick' if args.quick else 'full'} run, {today}, {platform.python_version()}, "
        f"{platform.machine()}): one simulated bookie in its own process, loopback, one connection; "
        f"E=5/WQ=2 ledgers of {ENTRIES:,} entries, bookie 0 ({len(HELD_ENTRIES)} entries). "
        f"Median of {plan.repetitions} repetition(s); run took {time.perf_counter() - started:.1f} s."
    )
    print()
    print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
