"""The agent forwarding to a bookie's v3 protocol: the same answers over gRPC as the bookie gives over v3."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest

from scrutiny.agent.server import AgentServer, AgentServerConfig
from scrutiny.agent.v3_forward import V3ForwardBackend
from scrutiny.connectors.bookies.agent_client import AgentClient, AgentListingError
from scrutiny.connectors.bookies.v3_client import BookieClientConfig
from scrutiny.core.sequence_groups import SequenceGroup
from scrutiny.core.striping import expected_groups
from scrutiny.core.verdict import AnswerKind, BookieAnswer
from scrutiny.simulator.v3_server import BookieV3Server, ReplyStatus, Unresponsive

pytestmark = pytest.mark.integration

HOLDINGS: dict[int, Sequence[SequenceGroup]] = {
    7: expected_groups(1, 5, 2, 0, 999),
    8: [SequenceGroup.run(0, 9), SequenceGroup.run(20, 29)],
}


@contextmanager
def bookie() -> Iterator[tuple[BookieV3Server, asyncio.AbstractEventLoop]]:
    """A fake v3 bookie on its own event loop thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = BookieV3Server(HOLDINGS.get)
    asyncio.run_coroutine_threadsafe(server.__aenter__(), loop).result(10)
    try:
        yield server, loop
    finally:
        asyncio.run_coroutine_threadsafe(server.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


@contextmanager
def agent(port: int) -> Iterator[AgentClient]:
    backend = V3ForwardBackend("127.0.0.1", port, config=BookieClientConfig(request_timeout_s=0.5), timeout_s=0.5)
    server = AgentServer(backend, AgentServerConfig(listen="127.0.0.1:0"))
    server.start()
    try:
        with AgentClient(f"127.0.0.1:{server.port}") as client:
            yield client
    finally:
        server.stop(grace_s=1.0)


def entries(answer: BookieAnswer) -> set[int]:
    return {e for g in answer.groups for first, last in g.run_bounds() for e in range(first, last + 1)}


def test_forwarded_answers_match_the_bookie() -> None:
    with bookie() as (server, _), agent(server.port) as client:
        answers = client.get_listings([7, 8, 9])
    assert answers[7].kind is AnswerKind.LISTING
    assert entries(answers[7]) == {e for g in HOLDINGS[7] for a, b in g.run_bounds() for e in range(a, b + 1)}
    assert entries(answers[8]) == set(range(10)) | set(range(20, 30))
    assert answers[9].kind is AnswerKind.NO_LEDGER


def test_bookie_trouble_is_unknown_never_missing() -> None:
    with bookie() as (server, loop), agent(server.port) as client:
        loop.call_soon_threadsafe(lambda: server.set_fault(ReplyStatus(501), ledger_id=7))  # EIO
        loop.call_soon_threadsafe(lambda: server.set_fault(Unresponsive(), ledger_id=8))
        answers = client.get_listings([7, 8])
    assert answers[7].kind is AnswerKind.UNKNOWN and "EIO" in answers[7].reason
    assert answers[8].kind is AnswerKind.UNKNOWN and "timeout" in answers[8].reason


def test_a_forwarding_agent_cannot_list_the_bookies_ledgers() -> None:
    with bookie() as (server, _), agent(server.port) as client:
        with pytest.raises(AgentListingError, match="v3 protocol, which has no request listing") as error:
            client.ledgers_page()
        assert client.get_listings([7])[7].kind is AnswerKind.LISTING  # it still answers listings
    assert error.value.code == "UNIMPLEMENTED"


def test_unreachable_bookie_is_unknown() -> None:
    with bookie() as (server, _):
        port = server.port
    with agent(port) as client:
        answers = client.get_listings([7])
    assert answers[7].kind is AnswerKind.UNKNOWN
