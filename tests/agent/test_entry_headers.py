"""``ReadEntryHeaders`` end to end: the agent's gRPC server, its forward to a bookie's v3 protocol (the simulator's v3
server over an :class:`EntryStore`), and the checker's client."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import grpc
import pytest

from scrutiny.agent.server import (
    NO_HEADER_READER,
    AgentServer,
    AgentServerConfig,
    EntryRef,
    HeaderReader,
    ListingBackend,
)
from scrutiny.agent.v3_forward import V3ForwardBackend, V3HeaderReader, V3Link
from scrutiny.cli.main import main
from scrutiny.connectors.bookies.agent_client import (
    AgentCallError,
    AgentClient,
    AgentClientError,
    AgentListingError,
)
from scrutiny.connectors.bookies.agent_protocol import SERVICE_NAME
from scrutiny.connectors.bookies.v3_client import BookieClientConfig
from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.sequence_groups import SequenceGroup
from scrutiny.proto import bookie_agent_pb2 as pb
from scrutiny.simulator.bookie import EntryStore, FaultSwitch, MemoryListingBackend, SimBookie
from scrutiny.simulator.model import FaultKind, FaultSpec

pytestmark = pytest.mark.integration

BOOKIE_ID = "127.0.0.1:3181"
TOKEN = "entry-headers-token"
LEDGER = 7


def written_header(ledger_id: int, entry_id: int) -> EntryHeader:
    """What the simulated writer put on each entry: a last-add-confirmed three behind, 100 bytes an entry."""
    return EntryHeader(ledger_id, entry_id, max(-1, entry_id - 3), 100 * (entry_id + 1))


def new_store() -> EntryStore:
    store = EntryStore(headers=written_header)
    store.put(LEDGER, [SequenceGroup.run(0, 9), SequenceGroup.run(20, 29)])
    return store


@contextmanager
def event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop on a thread of its own (the simulated bookie's), so the test's blocking client calls don't stall
    the v3 server the agent forwards to."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


@contextmanager
def sim_bookie(store: EntryStore) -> Iterator[SimBookie]:
    """A simulated bookie: its v3 server and its agent, whose entry reads go to that v3 server."""
    with event_loop() as loop:
        bookie = SimBookie(BOOKIE_ID, store)
        asyncio.run_coroutine_threadsafe(bookie.start(), loop).result(10)
        try:
            yield bookie
        finally:
            asyncio.run_coroutine_threadsafe(bookie.stop(), loop).result(10)


def memory_backend(store: EntryStore) -> ListingBackend:
    return MemoryListingBackend(store, FaultSwitch())


@contextmanager
def serving(backend: ListingBackend, header_reader: HeaderReader | None, **config: object) -> Iterator[AgentServer]:
    settings = AgentServerConfig(listen="127.0.0.1:0", bookie_id=BOOKIE_ID, **config)  # type: ignore[arg-type]
    server = AgentServer(backend, settings, header_reader=header_reader)
    server.start()
    try:
        yield server
    finally:
        server.stop(grace_s=1.0)


def client_of(target: str, **options: object) -> AgentClient:
    return AgentClient(target, expected_bookie_id=BOOKIE_ID, timeout_s=5.0, **options)  # type: ignore[arg-type]


def test_the_agent_returns_the_header_the_bookie_stored() -> None:
    store = new_store()
    asked = [(LEDGER, 9), (LEDGER, 25), (LEDGER, 0), (LEDGER, 9)]
    with sim_bookie(store) as bookie, client_of(bookie.agent_address) as client:
        headers = client.read_entry_headers(asked)
    assert list(headers) == [(LEDGER, 9), (LEDGER, 25), (LEDGER, 0)]  # duplicates once, in the order asked
    for (ledger_id, entry_id), header in headers.items():
        assert header == written_header(ledger_id, entry_id)
    assert headers[LEDGER, 25] == EntryHeader(LEDGER, 25, 22, 2600)


def test_an_entry_the_bookie_does_not_hold_is_not_found_with_the_reason() -> None:
    with sim_bookie(new_store()) as bookie, client_of(bookie.agent_address) as client:
        headers = client.read_entry_headers([(LEDGER, 15), (LEDGER, 5), (8, 0)])
        address = "{}:{}".format(*bookie.v3_address)
    assert headers[LEDGER, 5] == written_header(LEDGER, 5)
    missing, no_ledger = headers[LEDGER, 15], headers[8, 0]
    assert isinstance(missing, str) and "ENOENTRY" in missing and address in missing, missing
    assert isinstance(no_ledger, str) and no_ledger, no_ledger


def test_a_bookie_that_does_not_answer_is_a_timeout_per_entry() -> None:
    store = new_store()
    with sim_bookie(store) as bookie:
        bookie.set_fault(FaultSpec(FaultKind.UNRESPONSIVE))
        reader = V3HeaderReader(V3Link(*bookie.v3_address))
        with (
            serving(memory_backend(store), reader, entry_read_timeout_s=0.5) as server,
            client_of(f"127.0.0.1:{server.port}") as client,
        ):
            headers = client.read_entry_headers([(LEDGER, 3)])
        bookie.set_fault(None)
    assert isinstance(headers[LEDGER, 3], str) and "timeout" in str(headers[LEDGER, 3])


def test_an_agent_without_a_bookie_address_is_unimplemented() -> None:
    with serving(memory_backend(new_store()), None) as server, client_of(f"127.0.0.1:{server.port}") as client:
        with pytest.raises(AgentCallError) as error:
            client.read_entry_headers([(LEDGER, 3)])
        assert client.get_listings([LEDGER])[LEDGER].groups  # its listings still work
    assert error.value.code == "UNIMPLEMENTED"
    assert NO_HEADER_READER in str(error.value)
    assert not isinstance(error.value, AgentListingError)
    assert issubclass(AgentListingError, AgentCallError)


def test_entry_reads_need_the_token() -> None:
    store = new_store()
    with sim_bookie(store) as bookie:
        reader = V3HeaderReader(V3Link(*bookie.v3_address))
        with serving(memory_backend(store), reader, token=TOKEN) as server:
            target = f"127.0.0.1:{server.port}"
            with client_of(target) as anonymous, pytest.raises(AgentCallError) as error:
                anonymous.read_entry_headers([(LEDGER, 3)])
            with client_of(target, token="wrong") as wrong, pytest.raises(AgentCallError) as wrong_error:
                wrong.read_entry_headers([(LEDGER, 3)])
            with client_of(target, token=TOKEN) as client:
                assert client.read_entry_headers([(LEDGER, 3)]) == {(LEDGER, 3): written_header(LEDGER, 3)}
            requests = server.metrics.requests
            assert requests.labels(method="ReadEntryHeaders", code="UNAUTHENTICATED")._value.get() == 2
            assert requests.labels(method="ReadEntryHeaders", code="OK")._value.get() == 1
    assert error.value.code == wrong_error.value.code == "UNAUTHENTICATED"


class RecordingReader:
    """A header reader that records what it is asked (and can fail as a whole)."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.asked: list[list[EntryRef]] = []
        self.failure = failure
        self.closed = False

    def read_entry_headers(self, pairs: Sequence[EntryRef], *, timeout_s: float) -> dict[EntryRef, EntryHeader | str]:
        self.asked.append(list(pairs))
        if self.failure is not None:
            raise self.failure
        return {pair: written_header(*pair) for pair in pairs}

    def close(self) -> None:
        self.closed = True


def raw_call(target: str, entries: list[tuple[int, int]]) -> grpc.RpcError:
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(
            f"/{SERVICE_NAME}/ReadEntryHeaders",
            request_serializer=pb.EntryHeadersRequest.SerializeToString,
            response_deserializer=pb.EntryHeadersResponse.FromString,
        )
        request = pb.EntryHeadersRequest(entries=[pb.EntryRef(ledger_id=lid, entry_id=eid) for lid, eid in entries])
        with pytest.raises(grpc.RpcError) as error:
            call(request, timeout=5)
    return error.value


def test_requests_over_the_limit_or_out_of_range_are_invalid() -> None:
    reader = RecordingReader()
    with serving(memory_backend(new_store()), reader, max_ledgers_per_call=2) as server:
        target = f"127.0.0.1:{server.port}"
        with client_of(target) as client:
            with pytest.raises(AgentCallError) as error:
                client.read_entry_headers([(LEDGER, 1), (LEDGER, 2), (LEDGER, 3)])
            assert error.value.code == "INVALID_ARGUMENT"
            assert "3 entries in one call; at most 2" in str(error.value)
            # duplicates count once: two distinct entries are within the limit
            answered = client.read_entry_headers([(LEDGER, 1), (LEDGER, 2), (LEDGER, 1)])
            assert answered == {(LEDGER, 1): written_header(LEDGER, 1), (LEDGER, 2): written_header(LEDGER, 2)}
            with pytest.raises(AgentClientError):
                client.read_entry_headers([(LEDGER, -1)])
        negative = raw_call(target, [(LEDGER, 1), (-4, 2)])
    assert negative.code() is grpc.StatusCode.INVALID_ARGUMENT and "-4:2" in (negative.details() or "")
    assert reader.asked == [[(LEDGER, 1), (LEDGER, 2)]]  # refused calls never reach the reader
    assert reader.closed  # stopping the server closed its reader


def test_a_reader_failing_as_a_whole_is_unavailable() -> None:
    reader = RecordingReader(ConnectionError("the bookie's event loop is gone"))
    with (
        serving(memory_backend(new_store()), reader) as server,
        client_of(f"127.0.0.1:{server.port}") as client,
        pytest.raises(AgentCallError) as error,
    ):
        client.read_entry_headers([(LEDGER, 1)])
    assert error.value.code == "UNAVAILABLE"
    assert "the bookie's event loop is gone" in str(error.value)


def test_the_client_refuses_another_bookies_agent_and_answers_for_other_entries() -> None:
    class WrongEntries(RecordingReader):
        def read_entry_headers(
            self, pairs: Sequence[EntryRef], *, timeout_s: float
        ) -> dict[EntryRef, EntryHeader | str]:
            return {pair: written_header(pair[0], pair[1] + 1) for pair in pairs}

    with (
        serving(memory_backend(new_store()), RecordingReader()) as server,
        AgentClient(f"127.0.0.1:{server.port}", expected_bookie_id="127.0.0.1:9999") as other,
        pytest.raises(AgentCallError, match="serves bookie") as error,
    ):
        other.read_entry_headers([(LEDGER, 1)])
    assert error.value.code is None
    with serving(memory_backend(new_store()), WrongEntries()) as server, client_of(f"127.0.0.1:{server.port}") as c:
        answered = c.read_entry_headers([(LEDGER, 1)])
    # the server never passes a header for another entry off as this one's
    assert answered == {(LEDGER, 1): f"the bookie returned the header of entry {LEDGER}:2"}


def test_a_forwarding_agent_reads_entries_from_the_bookie_it_forwards_to() -> None:
    store = new_store()
    with sim_bookie(store) as bookie:
        backend = V3ForwardBackend(*bookie.v3_address, config=BookieClientConfig(request_timeout_s=2.0))
        with serving(backend, backend) as server, client_of(f"127.0.0.1:{server.port}") as client:
            headers = client.read_entry_headers([(LEDGER, 28), (LEDGER, 12)])
            assert client.get_listings([LEDGER])[LEDGER].groups  # listings on the same link
    assert headers[LEDGER, 28] == written_header(LEDGER, 28)
    assert isinstance(headers[LEDGER, 12], str)


def test_the_agent_command_refuses_a_bookie_address_other_than_its_forward(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["agent", "--forward-v3", "127.0.0.1:3181", "--bookie-id", BOOKIE_ID, "--listen", "127.0.0.1:0"]
    assert main([*args, "--bookie-address", "127.0.0.1:3182"]) == 2
    assert "--bookie-address 127.0.0.1:3182 differs from --forward-v3 127.0.0.1:3181" in capsys.readouterr().err
    assert main([*args, "--bookie-address", "127.0.0.1:x"]) == 2
    assert "--bookie-address expects HOST:PORT" in capsys.readouterr().err
