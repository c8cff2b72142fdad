"""The v3 client against the fake bookie server on loopback: answers, faults, pipelining, reconnects.

Every test runs its own event loop (``asyncio.run``) and starts its servers with ``async with``,
so they are stopped even when an assertion fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from scrutiny.connectors.bookies.addresses import BookieAddressBook
from scrutiny.connectors.bookies.fetch import FetchConfig, ListingFetcher
from scrutiny.connectors.bookies.v3_client import BookieClientConfig, BookieV3Client, BookieV3Pool, client_tls_context
from scrutiny.connectors.bookies.v3_protocol import encode_frame, listing_request, read_frame
from scrutiny.core.backoff import Backoff
from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.listing_codec import encode_listing
from scrutiny.core.sequence_groups import SequenceGroup, expand
from scrutiny.core.striping import expected_groups
from scrutiny.core.verdict import AnswerKind, BookieAnswer
from scrutiny.core.zk_records import BookieServiceInfo, Endpoint, format_bookie_service_info
from scrutiny.proto import bookkeeper_protocol_pb2 as pb
from scrutiny.simulator.model import GarbageKind
from scrutiny.simulator.v3_server import (
    BookieV3Server,
    Disconnect,
    Garbage,
    ListingEncoding,
    MalformedListing,
    ReplyStatus,
    Slow,
    Unresponsive,
    WrongLedgerId,
)

pytestmark = pytest.mark.integration

T = TypeVar("T")
#: Ledger ids from this one to ABSENT_FROM + 99 are unknown to the fake bookie (ENOLEDGER).
ABSENT_FROM = 1_000_000
FAST_RETRY = Backoff(initial_s=0.01, maximum_s=0.05)
CONFIG = BookieClientConfig(request_timeout_s=2.0, connect_timeout_s=1.0, retry=FAST_RETRY)


def holdings(ledger_id: int) -> list[SequenceGroup] | None:
    """Bookie ``ledger_id mod 5`` of an E=5/WQ=2 ledger with ``100 + ledger_id mod 97`` entries: distinct per ledger."""
    if ABSENT_FROM <= ledger_id < ABSENT_FROM + 100:
        return None
    return expected_groups(ledger_id % 5, 5, 2, 0, 99 + ledger_id % 97)


def entries(groups: Sequence[SequenceGroup]) -> list[int]:
    return list(expand(groups))


def assert_listing(answer: BookieAnswer, ledger_id: int) -> None:
    expected = holdings(ledger_id)
    assert expected is not None
    assert answer.kind is AnswerKind.LISTING, answer.reason
    assert entries(answer.groups) == entries(expected)


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(30):
            return await coro

    return asyncio.run(bounded())


@contextlib.asynccontextmanager
async def bookie(**options: Any) -> AsyncIterator[tuple[BookieV3Server, BookieV3Client]]:
    """A fake bookie and a client connected to it, both closed on exit."""
    async with BookieV3Server(holdings, **options) as server:
        client = BookieV3Client(*server.address, config=CONFIG)
        try:
            yield server, client
        finally:
            await client.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --------------------------------------------------------------------------- answers


@pytest.mark.parametrize("encoding", list(ListingEncoding))
def test_positive_answers_carry_the_bookies_entries(encoding: ListingEncoding) -> None:
    async def scenario() -> None:
        async with bookie(encoding=encoding) as (_, client):
            for ledger_id in (0, 1, 7, 96, 2**40):
                assert_listing(await client.get_listing(ledger_id), ledger_id)

    run(scenario())


def test_the_client_decodes_java_listings_into_compact_groups() -> None:
    async def scenario() -> None:
        async with bookie(encoding=ListingEncoding.PER_RUN) as (_, client):
            answer = await client.get_listing(96)  # 196 entries, bookie 1: ~40 runs on the wire
            assert_listing(answer, 96)
            assert len(answer.groups) <= 3

    run(scenario())


def test_enoledger_is_the_only_negative() -> None:
    async def scenario() -> None:
        async with bookie() as (_, client):
            assert await client.get_listing(ABSENT_FROM) == BookieAnswer.no_ledger()
            answers = await client.get_listings([ABSENT_FROM + 1, 3])
            assert answers[ABSENT_FROM + 1].kind is AnswerKind.NO_LEDGER
            assert_listing(answers[3], 3)

    run(scenario())


def test_every_other_status_is_unknown_with_its_name() -> None:
    statuses = ["ENOENTRY", "EBADREQ", "EIO", "EUA", "EBADVERSION", "EFENCED", "EREADONLY"]
    statuses += ["ETOOMANYREQUESTS", "EUNKNOWNLEDGERSTATE"]

    async def scenario() -> None:
        async with bookie() as (server, client):
            for ledger_id, name in enumerate(statuses, start=10):
                server.set_fault(ReplyStatus(pb.StatusCode.Value(name)), ledger_id=ledger_id)
            answers = await client.get_listings(range(10, 10 + len(statuses)))
            for ledger_id, name in enumerate(statuses, start=10):
                assert answers[ledger_id].kind is AnswerKind.UNKNOWN
                assert answers[ledger_id].reason.startswith(f"status {name}")
            assert "authentication" in answers[10 + statuses.index("EUA")].reason
            limbo = answers[10 + statuses.index("EUNKNOWNLEDGERSTATE")]
            assert limbo.limbo and not any(a.limbo for a in answers.values() if a is not limbo)  # it answers: limbo

    run(scenario())


def test_a_failing_source_is_eio_and_so_unknown() -> None:
    def broken(ledger_id: int) -> list[SequenceGroup]:
        raise OSError("disk gone")

    async def scenario() -> None:
        async with BookieV3Server(broken) as server, BookieV3Client(*server.address, config=CONFIG) as client:
            answer = await client.get_listing(1)
            assert answer.kind is AnswerKind.UNKNOWN and answer.reason == "status EIO"

    run(scenario())


def test_wrong_ledger_echo_and_malformed_listings_are_unknown() -> None:
    async def scenario() -> None:
        async with bookie() as (server, client):
            server.set_fault(WrongLedgerId(), ledger_id=1)
            server.set_fault(MalformedListing(), ledger_id=2)
            answers = await client.get_listings([1, 2, 3])
            assert answers[1].kind is AnswerKind.UNKNOWN and "for ledger 2, asked for 1" in answers[1].reason
            assert answers[2].kind is AnswerKind.UNKNOWN and answers[2].reason.startswith("malformed listing: ")
            assert_listing(answers[3], 3)

    run(scenario())


# --------------------------------------------------------------------------- crafted responses


def scripted(
    reply: Callable[[pb.Request], bytes | None],
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
    """A raw server handler answering each request with ``reply(request)`` (None = no answer)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                request = pb.Request.FromString(await read_frame(reader, 1 << 20))
                data = reply(request)
                if data is not None:
                    writer.write(data)
        writer.close()

    return handle


def crafted(
    request: pb.Request, outer: pb.StatusCode | None, inner: pb.StatusCode | None, *, listing: bool = True
) -> bytes:
    """A response with these statuses (None = absent; no inner status = no inner message)."""
    response = pb.Response()
    response.header.CopyFrom(request.header)
    if outer is not None:
        response.status = outer
    if inner is not None:
        body = response.getListOfEntriesOfLedgerResponse
        body.status = inner
        body.ledgerId = request.getListOfEntriesOfLedgerRequest.ledgerId
        groups = holdings(body.ledgerId)
        if listing and groups is not None:
            body.availabilityOfEntriesOfLedger = encode_listing(groups)
    return encode_frame(response.SerializePartialToString())


def with_unknown_status(request: pb.Request) -> bytes:
    """An EOK response whose outer status is 508, a value BookKeeper does not define."""
    response = pb.Response()
    response.header.CopyFrom(request.header)
    return encode_frame(response.SerializePartialToString() + bytes([0x10, 0xFC, 0x03]))


@pytest.mark.parametrize(
    ("build", "kind", "reason"),
    [
        (lambda r: crafted(r, pb.EOK, pb.EOK), AnswerKind.LISTING, ""),
        (lambda r: crafted(r, pb.EOK, pb.ENOLEDGER, listing=False), AnswerKind.NO_LEDGER, ""),
        (lambda r: crafted(r, pb.ENOLEDGER, pb.EOK), AnswerKind.NO_LEDGER, ""),
        (lambda r: crafted(r, pb.EOK, pb.EIO), AnswerKind.UNKNOWN, "status EIO"),
        (lambda r: crafted(r, pb.EIO, pb.EOK), AnswerKind.UNKNOWN, "status EIO"),
        (lambda r: crafted(r, pb.ENOLEDGER, None), AnswerKind.UNKNOWN, "ENOLEDGER without the ledger id echoed"),
        (lambda r: crafted(r, pb.EOK, None), AnswerKind.UNKNOWN, "EOK without a GetListOfEntriesOfLedger response"),
        (lambda r: crafted(r, pb.EOK, pb.EOK, listing=False), AnswerKind.UNKNOWN, "EOK without listing bytes"),
        (lambda r: crafted(r, None, pb.EOK), AnswerKind.UNKNOWN, "response without a status code"),
        (with_unknown_status, AnswerKind.UNKNOWN, "response without a status code"),
    ],
)
def test_the_effective_status_decides(build: Callable[[pb.Request], bytes], kind: AnswerKind, reason: str) -> None:
    async def scenario() -> None:
        server = await asyncio.start_server(scripted(build), "127.0.0.1", 0)
        try:
            async with BookieV3Client("127.0.0.1", server.sockets[0].getsockname()[1], config=CONFIG) as client:
                answer = await client.get_listing(4)
        finally:
            server.close()
        assert answer.kind is kind
        assert answer.reason.startswith(reason)
        if kind is AnswerKind.LISTING:
            assert_listing(answer, 4)

    run(scenario())


def entry_reply(
    request: pb.Request,
    outer: pb.StatusCode | None = pb.EOK,
    inner: pb.StatusCode | None = pb.EOK,
    *,
    body: bytes | None = None,
    entry_shift: int = 0,
) -> bytes:
    """An answer to a READ_ENTRY: by default EOK with the entry laid out as a writer sends it (LAC = entry - 1)."""
    asked = request.readRequest
    response = pb.Response()
    response.header.CopyFrom(request.header)
    if outer is not None:
        response.status = outer
    if inner is not None:
        read = response.readResponse
        read.status = inner
        read.ledgerId, read.entryId = asked.ledgerId, asked.entryId + entry_shift
        if inner == pb.EOK:
            header = struct.pack(">qqqq", asked.ledgerId, asked.entryId, asked.entryId - 1, 64 * (asked.entryId + 1))
            read.body = header + b"\x01\x02\x03\x04payload" if body is None else body
    return encode_frame(response.SerializePartialToString())


def answered_as_a_listing(request: pb.Request) -> bytes:
    """A listing answer under the READ_ENTRY's txnId."""
    other = pb.Request()
    other.CopyFrom(request)
    other.header.operation = pb.GET_LIST_OF_ENTRIES_OF_LEDGER
    return crafted(other, pb.EOK, pb.EOK)


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (entry_reply, EntryHeader(9, 30, 29, 64 * 31)),
        (lambda r: entry_reply(r, pb.EOK, pb.ENOENTRY), "status ENOENTRY"),
        (lambda r: entry_reply(r, pb.ENOLEDGER, None), "status ENOLEDGER"),
        (lambda r: entry_reply(r, pb.EOK, None), "EOK without a read response"),
        (lambda r: entry_reply(r, pb.EOK, pb.EOK, entry_shift=1), "EOK for another entry than 9:30"),
        (
            lambda r: entry_reply(r, pb.EOK, pb.EOK, body=b"\x00" * 31),
            "entry 9:30 is 31 bytes, shorter than its header",
        ),
        (lambda r: entry_reply(r, pb.EOK, pb.EOK, body=struct.pack(">qqqq", 9, 31, 1, 2)), "entry 9:30 came back with"),
        (answered_as_a_listing, "response to another operation"),
        (lambda r: None, "timeout after"),
    ],
)
def test_a_read_entry_gives_the_entrys_header_or_why_not(
    build: Callable[[pb.Request], bytes | None], expected: EntryHeader | str
) -> None:
    seen: list[pb.Request] = []

    def reply(request: pb.Request) -> bytes | None:
        seen.append(request)
        if request.header.operation != pb.READ_ENTRY:
            return None
        return build(request)

    async def scenario() -> dict[tuple[int, int], EntryHeader | str]:
        server = await asyncio.start_server(scripted(reply), "127.0.0.1", 0)
        try:
            async with BookieV3Client("127.0.0.1", server.sockets[0].getsockname()[1], config=CONFIG) as client:
                return await client.read_entry_headers([(9, 30), (9, 30)], timeout=0.5)
        finally:
            server.close()

    got = run(scenario())
    assert list(got) == [(9, 30)]  # asked once
    if isinstance(expected, str):
        assert isinstance(got[9, 30], str) and got[9, 30].startswith(expected), got
    else:
        assert got[9, 30] == expected
    (request,) = seen  # a plain read: no fencing flag, no master key (it must never stop the writer)
    assert request.header.operation == pb.READ_ENTRY and request.header.version == pb.VERSION_THREE
    assert (request.readRequest.ledgerId, request.readRequest.entryId) == (9, 30)
    assert request.readRequest.ListFields() == [
        (pb.ReadRequest.DESCRIPTOR.fields_by_name["ledgerId"], 9),
        (pb.ReadRequest.DESCRIPTOR.fields_by_name["entryId"], 30),
    ]


def test_entry_ids_outside_their_ranges_are_refused() -> None:
    async def scenario() -> None:
        async with BookieV3Client("127.0.0.1", 1, config=CONFIG) as client:
            for pair in ((-1, 0), (0, -1), (2**63, 0)):
                with pytest.raises(ValueError, match="outside the ids"):
                    await client.read_entry_headers([pair])
            assert await client.read_entry_headers([]) == {}

    run(scenario())


def test_answers_to_another_operation_or_txn_are_not_taken() -> None:
    def reply(request: pb.Request) -> bytes:
        stray = pb.Request()
        stray.CopyFrom(request)
        stray.header.txnId = request.header.txnId + 1000  # never issued: dropped
        wrong_op = pb.Request()
        wrong_op.CopyFrom(request)
        wrong_op.header.operation = pb.READ_ENTRY
        return crafted(stray, pb.EOK, pb.EOK) + crafted(wrong_op, pb.ENOLEDGER, pb.ENOLEDGER)

    async def scenario() -> None:
        server = await asyncio.start_server(scripted(reply), "127.0.0.1", 0)
        try:
            async with BookieV3Client("127.0.0.1", server.sockets[0].getsockname()[1], config=CONFIG) as client:
                answer = await client.get_listing(4, timeout=0.5)
        finally:
            server.close()
        assert answer == BookieAnswer.unknown("response to another operation")

    run(scenario())


# --------------------------------------------------------------------------- timeouts and broken connections


def test_an_unresponsive_bookie_times_out_and_the_connection_stays_usable() -> None:
    async def scenario() -> None:
        async with bookie() as (server, client):
            server.set_fault(Unresponsive(), ledger_id=1)
            server.set_fault(Slow(30.0), ledger_id=2)  # waiting for it would take 30 s: a failure, not slowness
            started = time.monotonic()
            answers = await client.get_listings([1, 2, 3], timeout=0.2)
            elapsed = time.monotonic() - started
            assert answers[1] == answers[2] == BookieAnswer.unknown("timeout after 0.2 s")
            assert_listing(answers[3], 3)
            assert 0.19 <= elapsed < 10.0
            assert client.in_flight == 0  # late answers will be dropped
            assert_listing(await client.get_listing(4), 4)
            assert server.stats.connections == 1

    run(scenario())


def test_the_default_deadline_comes_from_the_config() -> None:
    async def scenario() -> None:
        async with BookieV3Server(holdings) as server:
            server.set_fault(Unresponsive())
            config = BookieClientConfig(request_timeout_s=0.15, retry=FAST_RETRY)
            async with BookieV3Client(*server.address, config=config) as client:
                assert await client.get_listing(1) == BookieAnswer.unknown("timeout after 0.15 s")

    run(scenario())


def test_slow_answers_come_back_out_of_order_and_match() -> None:
    async def scenario() -> None:
        async with bookie() as (server, client):
            server.set_fault(Slow(0.1), ledger_id=1)
            answers = await client.get_listings([1, 2])
            assert_listing(answers[1], 1)
            assert_listing(answers[2], 2)
            assert list(server.answer_log) == [2, 1]

    run(scenario())


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        (GarbageKind.RANDOM_PAYLOAD, "connection lost: undecodable response frame (32 bytes)"),
        (GarbageKind.NEGATIVE_LENGTH, "connection lost: frame of -1 bytes is outside the 5 MiB limit"),
        (GarbageKind.HUGE_LENGTH, "connection lost: frame of 2147483647 bytes is outside the 5 MiB limit"),
    ],
)
def test_garbage_breaks_the_connection_then_the_client_reconnects(kind: GarbageKind, reason: str) -> None:
    async def scenario() -> None:
        async with bookie(seed=7) as (server, client):
            server.set_fault(Unresponsive(), ledger_id=2)  # pending on the same connection
            server.set_fault(Garbage(kind), ledger_id=1)
            answers = await client.get_listings([2, 1])
            assert answers[1] == answers[2] == BookieAnswer.unknown(reason)
            server.clear_faults()
            assert_listing(await client.get_listing(1), 1)
            assert server.stats.connections == 2

    run(scenario())


@pytest.mark.parametrize(
    ("partial", "reason"),
    [
        (False, "connection lost: connection closed by the bookie"),
        (True, "connection lost: connection closed by the bookie in the middle of a frame"),
    ],
)
def test_a_disconnect_mid_request_is_unknown(partial: bool, reason: str) -> None:
    async def scenario() -> None:
        async with bookie() as (server, client):
            server.set_fault(Unresponsive(), ledger_id=2)
            server.set_fault(Disconnect(partial_frame=partial), ledger_id=1)
            answers = await client.get_listings([3, 2, 1])
            assert_listing(answers[3], 3)  # answered before the disconnect
            assert answers[1] == answers[2] == BookieAnswer.unknown(reason)
            server.clear_faults()
            assert_listing(await client.get_listing(2), 2)

    run(scenario())


def test_a_frame_above_the_clients_limit_breaks_the_connection() -> None:
    async def scenario() -> None:
        async with BookieV3Server(holdings, encoding=ListingEncoding.PER_RUN) as server:
            server.set_fault(Unresponsive(), ledger_id=3)
            config = BookieClientConfig(max_frame_bytes=1000, retry=FAST_RETRY)
            async with BookieV3Client(*server.address, config=config) as client:
                answers = await client.get_listings([3, 96], timeout=1.0)  # ledger 96: ~40 runs, ~1 kB frame
        assert answers[3] == answers[96]
        assert answers[96].kind is AnswerKind.UNKNOWN
        assert answers[96].reason.endswith("bytes is outside the 1000 B limit")

    run(scenario())


def test_a_refused_connection_is_unknown_and_backoff_answers_at_once() -> None:
    async def scenario() -> None:
        config = BookieClientConfig(retry=Backoff(initial_s=60.0, maximum_s=120.0))  # beyond the 30 s deadline
        async with BookieV3Client("127.0.0.1", free_port(), config=config) as client:
            first = await client.get_listing(1, timeout=30.0)
            started = time.monotonic()
            second = await client.get_listing(1, timeout=30.0)
            assert time.monotonic() - started < 10.0  # not the 30 s deadline: no attempt is due, it answers at once
        assert first.kind is AnswerKind.UNKNOWN and first.reason.endswith("connection refused")
        assert second.kind is AnswerKind.UNKNOWN
        assert second.reason.startswith("not connected (cannot connect to") and "next attempt in" in second.reason

    run(scenario())


def test_reconnect_after_the_bookie_restarts_on_the_same_port() -> None:
    async def scenario() -> None:
        async with BookieV3Server(holdings) as first:
            port = first.port
            client = BookieV3Client(*first.address, config=CONFIG)
            try:
                assert_listing(await client.get_listing(5), 5)
                first.set_fault(Unresponsive(), ledger_id=6)
                pending = asyncio.create_task(client.get_listing(6))
                await until(lambda: first.stats.requests == 2)  # the bookie holds the request
                await first.stop()
                assert (await pending).reason == "connection lost: connection closed by the bookie"
                down = await client.get_listing(5, timeout=0.3)
                assert down.kind is AnswerKind.UNKNOWN
                async with BookieV3Server(holdings, port=port) as second:
                    answer = await poll_until_listing(client, 5, deadline_s=5.0)
                    assert_listing(answer, 5)
                    assert second.stats.connections == 1
            finally:
                await client.close()

    run(scenario())


async def poll_until_listing(client: BookieV3Client, ledger_id: int, *, deadline_s: float) -> BookieAnswer:
    deadline = time.monotonic() + deadline_s
    answer = await client.get_listing(ledger_id, timeout=0.5)
    while answer.kind is not AnswerKind.LISTING and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        answer = await client.get_listing(ledger_id, timeout=0.5)
    return answer


def test_close_answers_pending_and_later_requests_unknown() -> None:
    async def scenario() -> None:
        async with bookie() as (server, client):
            server.set_fault(Unresponsive())
            pending = asyncio.create_task(client.get_listing(1))
            await until(lambda: server.stats.requests == 1)  # the bookie holds the request
            await client.close()
            assert await pending == BookieAnswer.unknown("connection lost: client closed")
            assert await client.get_listing(2) == BookieAnswer.unknown("client closed")

    run(scenario())


def test_a_cancelled_caller_leaves_nothing_pending() -> None:
    async def scenario() -> None:
        async with bookie() as (server, client):
            server.set_fault(Unresponsive(), ledger_id=1)
            task = asyncio.create_task(client.get_listing(1))
            await until(lambda: server.stats.requests == 1)  # the bookie holds the request
            assert client.in_flight == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert client.in_flight == 0
            assert_listing(await client.get_listing(2), 2)

    run(scenario())


# --------------------------------------------------------------------------- pipelining


def test_thousands_of_requests_on_one_connection_answered_out_of_order() -> None:
    ledger_ids = list(range(2500))

    async def scenario() -> None:
        async with bookie(shuffle=True, shuffle_window_s=0.02, seed=1) as (server, client):
            # Generous deadlines: matching is under test here, not speed (the machine may be busy).
            batch = await client.get_listings(ledger_ids, timeout=12)
            singles = await asyncio.gather(*(client.get_listing(lid, timeout=12) for lid in ledger_ids))
            order = list(server.answer_log)
            assert server.stats.connections == 1
        for lid in ledger_ids:
            assert_listing(batch[lid], lid)
            assert_listing(singles[lid], lid)
        descents = sum(1 for a, b in itertools.pairwise(order) if b < a)
        assert len(order) == 2 * len(ledger_ids)
        assert descents > len(ledger_ids) // 2  # really out of order, both times

    run(scenario())


# --------------------------------------------------------------------------- the server's own rules


async def raw_exchange(address: tuple[str, int], data: bytes) -> bytes:
    """Send raw bytes, return everything the server sends until it closes or 0.5 s pass."""
    reader, writer = await asyncio.open_connection(*address)
    writer.write(data)
    received = b""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(0.5):
            while chunk := await reader.read(65536):
                received += chunk
    writer.close()
    return received


def test_other_operations_are_answered_ebadreq() -> None:
    async def scenario() -> None:
        async with BookieV3Server(holdings) as server:
            request = listing_request(42, 1)
            request.header.operation = pb.READ_ENTRY
            request.ClearField("getListOfEntriesOfLedgerRequest")
            data = await raw_exchange(server.address, encode_frame(request.SerializeToString()))
        (length,) = struct.unpack(">i", data[:4])
        response = pb.Response.FromString(data[4 : 4 + length])
        assert response.status == pb.EBADREQ
        assert response.header.txnId == 42 and response.header.operation == pb.READ_ENTRY

    run(scenario())


def test_the_server_refuses_frames_above_its_limit() -> None:
    async def scenario() -> None:
        async with BookieV3Server(holdings, max_frame_bytes=1024) as server:
            frame = encode_frame(listing_request(1, 1).SerializeToString())
            oversized = struct.pack(">i", 1025) + b"\x00" * 1025
            data = await raw_exchange(server.address, oversized + frame)
            assert data == b""  # closed without answering what followed
            assert server.stats.refused_frames == 1

    run(scenario())


# --------------------------------------------------------------------------- TLS and the pool


def self_signed(tmp: Path, name: str = "") -> tuple[Path, Path]:
    cert, key = tmp / f"{name}cert.pem", tmp / f"{name}key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
            *("-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key


def server_tls(cert: Path, key: Path, *, client_ca: Path | None = None) -> ssl.SSLContext:
    """A bookie's TLS context; with ``client_ca``, clients must present a certificate it signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


async def until(condition: Callable[[], bool], *, deadline_s: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fail after ``deadline_s`` (a hang, never mere slowness)."""
    async with asyncio.timeout(deadline_s):
        while not condition():
            await asyncio.sleep(0.005)


DIRECT = BookieClientConfig(request_timeout_s=2.0, connect_timeout_s=1.0, retry=FAST_RETRY, tls_mode="direct")


def test_direct_tls_connection(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    client_context = client_tls_context(str(cert))
    untrusting = ssl.create_default_context()

    async def scenario() -> None:
        async with BookieV3Server(holdings, ssl=server_tls(cert, key), tls_mode="direct") as server:
            async with BookieV3Client(*server.address, config=DIRECT, ssl=client_context) as client:
                assert_listing(await client.get_listing(8), 8)
            async with BookieV3Client(*server.address, config=DIRECT, ssl=untrusting) as client:
                refused = await client.get_listing(8)
            assert refused.kind is AnswerKind.UNKNOWN and "CERTIFICATE_VERIFY_FAILED" in refused.reason
            assert server.stats.tls_upgrades == 0 and server.stats.before_tls == 0

    run(scenario())


# --------------------------------------------------------------------------- START_TLS (what real bookies speak)


def test_listings_over_start_tls(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)

    async def scenario() -> None:
        async with BookieV3Server(holdings, ssl=server_tls(cert, key), shuffle=True) as server:
            async with BookieV3Client(*server.address, config=CONFIG, ssl=client_tls_context(str(cert))) as client:
                answers = await client.get_listings([3, 4, ABSENT_FROM])
                again = await client.get_listing(5)  # same connection, still inside TLS
            assert_listing(answers[3], 3)
            assert_listing(answers[4], 4)
            assert answers[ABSENT_FROM] == BookieAnswer.no_ledger()
            assert_listing(again, 5)
            assert (server.stats.connections, server.stats.tls_upgrades, server.stats.before_tls) == (1, 1, 0)
            # A client without TLS is refused the way a bookie that needs TLS refuses it: EUA.
            async with BookieV3Client(*server.address, config=CONFIG) as plain:
                refused = await plain.get_listing(3)
            assert refused.kind is AnswerKind.UNKNOWN and "EUA" in refused.reason
            assert server.stats.before_tls == 1

    run(scenario())


def test_start_tls_with_the_wrong_ca_or_host_name_is_unknown_naming_tls(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    other_ca, _ = self_signed(tmp_path, "other-")

    async def scenario() -> None:
        async with BookieV3Server(holdings, ssl=server_tls(cert, key)) as server:
            async with BookieV3Client(*server.address, config=CONFIG, ssl=client_tls_context(str(other_ca))) as client:
                wrong_ca = await client.get_listing(3)
            trusting = client_tls_context(str(cert))
            async with BookieV3Client(
                *server.address, config=CONFIG, ssl=trusting, server_hostname="bookie.example"
            ) as client:
                wrong_name = await client.get_listing(3)
            await until(lambda: server.stats.tls_failures == 2)
            assert server.stats.tls_upgrades == 0
        for answer in (wrong_ca, wrong_name):
            assert answer.kind is AnswerKind.UNKNOWN
            assert answer.reason.startswith("TLS handshake with 127.0.0.1:")
            assert "CERTIFICATE_VERIFY_FAILED" in answer.reason
        assert "bookie.example" in wrong_name.reason

    run(scenario())


def test_start_tls_to_a_bookie_without_tls_is_refused(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)

    async def scenario() -> None:
        async with (
            BookieV3Server(holdings) as server,
            BookieV3Client(*server.address, config=CONFIG, ssl=client_tls_context(str(cert))) as client,
        ):
            answer = await client.get_listing(3)
        assert answer.kind is AnswerKind.UNKNOWN
        assert answer.reason.endswith("START_TLS refused with status EBADREQ: TLS is not enabled on the bookie")

    run(scenario())


def test_a_bookie_not_answering_start_tls_is_unknown_within_the_connect_deadline(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    requests: list[pb.Request] = []
    # The request timeout is far beyond the connect timeout: waiting for it instead would take 30 s, a failure.
    config = BookieClientConfig(request_timeout_s=30.0, connect_timeout_s=0.3, retry=FAST_RETRY)

    def silent(request: pb.Request) -> None:
        requests.append(request)

    async def scenario() -> None:
        server = await asyncio.start_server(scripted(silent), "127.0.0.1", 0)
        try:
            address = server.sockets[0].getsockname()[:2]
            async with BookieV3Client(*address, config=config, ssl=client_tls_context(str(cert))) as client:
                started = time.monotonic()
                answer = await client.get_listing(3)
                elapsed = time.monotonic() - started
        finally:
            server.close()
        assert answer.kind is AnswerKind.UNKNOWN
        assert answer.reason == f"no answer to START_TLS from 127.0.0.1:{address[1]} within 0.3 s"
        assert 0.3 <= elapsed < 10.0  # the connect timeout ended it, not the request's
        assert [r.header.operation for r in requests] == [pb.START_TLS]
        assert requests[0].HasField("startTLSRequest")

    run(scenario())


def test_start_tls_with_a_required_client_certificate(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    client_cert, client_key = self_signed(tmp_path, "client-")
    context = server_tls(cert, key, client_ca=client_cert)

    async def scenario() -> None:
        async with BookieV3Server(holdings, ssl=context) as server:
            with_cert = client_tls_context(str(cert), str(client_cert), str(client_key))
            async with BookieV3Client(*server.address, config=CONFIG, ssl=with_cert) as client:
                assert_listing(await client.get_listing(6), 6)
            async with BookieV3Client(*server.address, config=CONFIG, ssl=client_tls_context(str(cert))) as client:
                without = await client.get_listing(6)
            await until(lambda: server.stats.tls_failures == 1)
            assert server.stats.tls_upgrades == 1
        assert without.kind is AnswerKind.UNKNOWN
        assert without.reason.endswith("the bookie may require a client certificate it trusts)"), without.reason

    run(scenario())

    run(scenario())


def test_the_pool_resolves_bookie_ids_and_never_raises() -> None:
    async def scenario() -> None:
        async with BookieV3Server(holdings) as by_override, BookieV3Server(lambda _: None) as by_registration:
            endpoint = Endpoint(id="rpc", host="127.0.0.1", port=by_registration.port, protocol="bookie-rpc")
            book = BookieAddressBook(
                overrides={"bk-a": f"127.0.0.1:{by_override.port}"},
                registrations={"bk-b": format_bookie_service_info(BookieServiceInfo(endpoints=(endpoint,)))},
            )
            pool = BookieV3Pool(book.resolve, config=CONFIG)
            try:
                assert_listing(await pool.get_listing("bk-a", 9), 9)
                assert await pool.get_listing("bk-b", 9) == BookieAnswer.no_ledger()
                lost = await pool.get_listings("bk-c", [1, 2])
                assert (await pool.client("bk-a")) is (await pool.client("bk-a"))
            finally:
                await pool.close()
        assert set(lost) == {1, 2}
        assert lost[1].kind is AnswerKind.UNKNOWN and lost[1].reason.startswith("cannot resolve bookie bk-c: ")

    run(scenario())


def test_a_passphrase_protected_client_key_is_refused_without_prompting(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-passout", "pass:secret", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=c"),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    with pytest.raises(ssl.SSLError, match="passphrase-protected"):
        client_tls_context(cert_file=str(cert), key_file=str(key))


def test_the_fetcher_speaks_start_tls_with_a_client_certificate(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    client_cert, client_key = self_signed(tmp_path, "client-")

    async def scenario() -> None:
        async with BookieV3Server(holdings, ssl=server_tls(cert, key, client_ca=client_cert)) as server:
            config = FetchConfig(
                protocol="v3",
                request_timeout_s=2.0,
                v3_overrides={"bk1:3181": f"127.0.0.1:{server.port}"},
                v3_tls=True,
                v3_ca_file=str(cert),
                v3_cert_file=str(client_cert),
                v3_key_file=str(client_key),
            )
            fetcher = ListingFetcher(config)
            try:
                result = await asyncio.to_thread(fetcher.fetch, {11: ["bk1:3181"]}, {})
            finally:
                fetcher.close()
            assert server.stats.tls_upgrades == 1
        assert_listing(result.answers[11]["bk1:3181"], 11)

    run(scenario())


def test_the_fetcher_reads_the_highest_entry_past_a_closed_ledgers_end_only() -> None:
    """Ledger 9 (closed at 19) is listed 0..30: entry 30 is read and its header rides on the answer. Ledger 8 (closed
    at 40) and ledger 7 (not closed: no end given) are listed alike and read nothing."""
    reads: list[tuple[int, int]] = []

    def reply(request: pb.Request) -> bytes:
        if request.header.operation == pb.READ_ENTRY:
            reads.append((request.readRequest.ledgerId, request.readRequest.entryId))
            return entry_reply(request)
        response = pb.Response()
        response.header.CopyFrom(request.header)
        response.status = pb.EOK
        inner = response.getListOfEntriesOfLedgerResponse
        inner.status, inner.ledgerId = pb.EOK, request.getListOfEntriesOfLedgerRequest.ledgerId
        inner.availabilityOfEntriesOfLedger = encode_listing([SequenceGroup.run(0, 30)])
        return encode_frame(response.SerializeToString())

    async def scenario() -> dict[int, dict[str, BookieAnswer]]:
        server = await asyncio.start_server(scripted(reply), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fetcher = ListingFetcher(FetchConfig(protocol="v3", v3_overrides={"bk1:3181": f"127.0.0.1:{port}"}))
        try:
            wanted = {7: ["bk1:3181"], 8: ["bk1:3181"], 9: ["bk1:3181"]}
            result = await asyncio.to_thread(fetcher.fetch, wanted, {}, ends={8: 40, 9: 19})
        finally:
            fetcher.close()
            server.close()
        assert result.rpcs == 4  # three listings and one read
        return result.answers

    answers = run(scenario())
    assert reads == [(9, 30)]
    assert answers[9]["bk1:3181"].beyond == EntryHeader(9, 30, 29, 64 * 31)
    assert answers[8]["bk1:3181"].beyond is None and answers[7]["bk1:3181"].beyond is None
    assert all(a["bk1:3181"].kind is AnswerKind.LISTING for a in answers.values())
