"""The agent client's ledger listing (``ListLedgers``) against a scripted gRPC agent: paging, and every page it must
refuse rather than turn into a wrong or endless listing."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import grpc
import pytest

from scrutiny.connectors.bookies.agent_client import AgentClient, AgentClientError, AgentListingError
from scrutiny.connectors.bookies.agent_protocol import SERVICE_NAME
from scrutiny.core.held_ledgers import LISTING_START, NO_ENTRY, HeldLedger
from scrutiny.proto import bookie_agent_pb2 as pb

pytestmark = pytest.mark.integration

Answer = Callable[[pb.LedgersRequest, Any], pb.LedgersPage]


@contextmanager
def scripted_agent(answer: Answer) -> Iterator[tuple[str, list[pb.LedgersRequest]]]:
    """A gRPC server that answers ListLedgers with ``answer`` (whatever it is): its address and the requests."""
    requests: list[pb.LedgersRequest] = []

    def handle(request: pb.LedgersRequest, context: Any) -> pb.LedgersPage:
        requests.append(request)
        return answer(request, context)

    handler = grpc.unary_unary_rpc_method_handler(
        handle, request_deserializer=pb.LedgersRequest.FromString, response_serializer=pb.LedgersPage.SerializeToString
    )
    server = grpc.server(
        ThreadPoolExecutor(max_workers=2),
        handlers=[grpc.method_handlers_generic_handler(SERVICE_NAME, {"ListLedgers": handler})],
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", requests
    finally:
        server.stop(0)


def held(ledger_id: int, first: int = 0, last: int = 3, *, record: bool = True, limbo: bool = False) -> pb.HeldLedger:
    return pb.HeldLedger(
        ledger_id=ledger_id, has_ledger_record=record, limbo=limbo, first_entry_id=first, last_entry_id=last
    )


BOOKIE = [held(i, i, i * 10, record=i % 3 != 0, limbo=i % 5 == 0) for i in range(1, 24)] + [held(2**62, NO_ENTRY, -1)]


def pager(bookie: list[pb.HeldLedger], most: int = 1_000, bookie_id: str = "") -> Answer:
    """An honest agent over ``bookie`` that gives at most ``most`` ledgers a page."""

    def answer(request: pb.LedgersRequest, _context: Any) -> pb.LedgersPage:
        above = [h for h in bookie if h.ledger_id > request.after_ledger_id]
        size = min(request.max_ledgers or 10, most)
        return pb.LedgersPage(ledgers=above[:size], end=len(above) <= size, bookie_id=bookie_id, as_of_ms=1234)

    return answer


def as_held(message: pb.HeldLedger) -> HeldLedger:
    return HeldLedger(
        message.ledger_id, message.has_ledger_record, message.limbo, message.first_entry_id, message.last_entry_id
    )


def test_held_ledgers_pages_until_the_agent_says_the_listing_ended() -> None:
    expected = [as_held(h) for h in BOOKIE]
    with (
        scripted_agent(pager(BOOKIE, bookie_id="bk-1")) as (address, requests),
        AgentClient(address, expected_bookie_id="bk-1") as client,
    ):
        assert list(client.held_ledgers(page_size=7)) == expected
        asked = [(r.after_ledger_id, r.max_ledgers) for r in requests]
        requests.clear()
        pages = list(client.ledger_pages(page_size=24))
        first = client.ledgers_page()
        rest = list(client.held_ledgers(after_ledger_id=20))
    assert asked == [(LISTING_START, 7), (7, 7), (14, 7), (21, 7)]
    assert [(len(p.ledgers), p.end, p.as_of_ms) for p in pages] == [(24, True, 1234)]
    assert requests[0].after_ledger_id == LISTING_START and requests[1].max_ledgers == 0  # 0: the agent's default
    assert list(first.ledgers) == expected[:10] and not first.end and first.next_after == 10
    assert rest == expected[20:]


def test_an_agent_that_gives_fewer_than_asked_is_paged_all_the_same() -> None:
    with scripted_agent(pager(BOOKIE, most=4)) as (address, requests), AgentClient(address) as client:
        listed = list(client.held_ledgers(page_size=100))
    assert listed == [as_held(h) for h in BOOKIE]
    assert [r.after_ledger_id for r in requests] == [LISTING_START, 4, 8, 12, 16, 20]


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        (pb.LedgersPage(ledgers=[held(7), held(6)], end=True), "ledger 6 after 7: ids not strictly ascending"),
        (pb.LedgersPage(ledgers=[held(7), held(7)], end=True), "ledger 7 after 7: ids not strictly ascending"),
        (pb.LedgersPage(ledgers=[held(5)], end=True), "ledger 5 after 5: ids not strictly ascending above 5"),
        (pb.LedgersPage(ledgers=[held(-1)], end=True), "ledger -1 after 5"),
        (pb.LedgersPage(ledgers=[held(i) for i in range(6, 10)], end=False), "4 ledgers in a page of at most 3"),
        (pb.LedgersPage(end=False), "an empty page that does not end the listing"),
        (pb.LedgersPage(ledgers=[held(6, 9, 4)], end=True), "ledger 6: entries 9 to 4"),
        (pb.LedgersPage(ledgers=[held(6, NO_ENTRY, 4)], end=True), "ledger 6: entries -1 to 4"),
        (pb.LedgersPage(ledgers=[held(6, NO_ENTRY, NO_ENTRY, record=False)], end=True), "neither a record nor an"),
    ],
)
def test_a_page_that_breaks_the_protocol_is_refused(page: pb.LedgersPage, problem: str) -> None:
    with (
        scripted_agent(lambda _request, _context: page) as (address, _),
        AgentClient(address) as client,
        pytest.raises(AgentListingError, match="refused a page of ledgers after 5: ") as error,
    ):
        client.ledgers_page(5, 3)
    assert problem in str(error.value) and error.value.code is None


def test_an_agent_that_keeps_answering_the_same_page_cannot_loop_the_pager() -> None:
    same = pb.LedgersPage(ledgers=[held(1), held(2)], end=False)
    with scripted_agent(lambda _request, _context: same) as (address, requests), AgentClient(address) as client:
        listed: list[HeldLedger] = []
        with pytest.raises(AgentListingError, match="ledger 1 after 2"):
            listed.extend(client.held_ledgers(page_size=2))
    assert [h.ledger_id for h in listed] == [1, 2] and len(requests) == 2


def test_pages_from_an_agent_of_another_bookie_are_refused() -> None:
    with scripted_agent(pager(BOOKIE, bookie_id="bk-2")) as (address, _):
        with AgentClient(address, expected_bookie_id="bk-1") as client, pytest.raises(AgentListingError) as other:
            client.ledgers_page()
        with AgentClient(address) as client:
            assert len(client.ledgers_page().ledgers) == 10  # no bookie expected: taken
    with (
        scripted_agent(pager(BOOKIE)) as (address, _),
        AgentClient(address, expected_bookie_id="bk-1") as client,
        pytest.raises(AgentListingError) as anonymous,
    ):
        client.ledgers_page()
    assert "the agent serves bookie 'bk-2', not 'bk-1'" in str(other.value)
    assert "does not say which bookie it serves (expected 'bk-1')" in str(anonymous.value)


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNAUTHENTICATED]
)
def test_failed_calls_raise_with_their_grpc_code(code: grpc.StatusCode) -> None:
    def fail(_request: pb.LedgersRequest, context: Any) -> pb.LedgersPage:
        context.abort(code, "the reason")
        raise AssertionError("unreachable")

    with (
        scripted_agent(fail) as (address, _),
        AgentClient(address) as client,
        pytest.raises(AgentListingError, match=f"ListLedgers after 9 failed: {code.name}: the reason") as error,
    ):
        client.ledgers_page(9)
    assert error.value.code == code.name


def test_a_slow_or_absent_agent_raises() -> None:
    def slow(request: pb.LedgersRequest, context: Any) -> pb.LedgersPage:
        time.sleep(1.0)
        return pb.LedgersPage(end=True)

    with (
        scripted_agent(slow) as (address, _),
        AgentClient(address, timeout_s=0.2) as client,
        pytest.raises(AgentListingError) as late,
    ):
        client.ledgers_page()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with AgentClient(f"127.0.0.1:{port}", timeout_s=2.0) as client, pytest.raises(AgentListingError) as absent:
        list(client.held_ledgers())
    assert late.value.code == "DEADLINE_EXCEEDED"
    assert absent.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def test_arguments_out_of_range_are_refused_before_any_call() -> None:
    with scripted_agent(pager(BOOKIE)) as (address, requests), AgentClient(address) as client:
        for after, size in ((-2, 0), (0, -1), (2**63, 0), (0, 2**31)):
            with pytest.raises(AgentClientError):
                client.ledgers_page(after, size)
        with pytest.raises(AgentClientError):
            list(client.held_ledgers(page_size=0))
    assert requests == []
