"""An asyncio TCP server speaking BookKeeper's v3 protocol for GetListOfEntriesOfLedger and READ_ENTRY, with faults.

It stands in for a bookie (tests now, the simulated cluster later): each request for ledger
``L`` is answered from a :data:`ListingSource` — the groups the bookie holds, or None for
ENOLEDGER; a source that raises gives EIO. Answers use BookKeeper's Java encoding (one group
per run) unless compact encoding is chosen, globally or per ledger.

With an :data:`EntrySource` it also answers a plain READ_ENTRY: EOK with the entry's bytes when the source
has them, ENOENTRY when it lacks the entry but holds some of the ledger, ENOLEDGER when it holds none; the
ReadResponse echoes the ledger and entry ids. The faults of the ledger apply to it exactly as to a listing
request, on the same path (:class:`WrongLedgerId` echoes another ledger id; :class:`MalformedListing` cuts the
body shorter than an entry header). Without one, READ_ENTRY is EBADREQ like any other operation.

Faults are switchable at runtime, per ledger or globally (a ledger's own fault wins):
:class:`Unresponsive`, :class:`Slow`, :class:`ReplyStatus`, :class:`Garbage`,
:class:`Disconnect`, :class:`WrongLedgerId`, :class:`MalformedListing`. With ``shuffle`` on,
answers are held for a short window and written in random order (to exercise out-of-order
matching).

Choices: a request for any other operation (or without its body) is answered EBADREQ with
its header echoed, as a bookie does for requests it cannot serve; a frame above
``max_frame_bytes`` or bytes that are not a ``Request`` close the connection. The server binds
127.0.0.1 on an ephemeral port by default (:attr:`port` after start) and is an async context
manager; :meth:`stop` closes every connection and returns when their handlers have ended.

TLS (an ``ssl`` server context given), as ``tls_mode`` says:

* ``"starttls"`` (default; what a bookie with TLS enabled does): connections start in plain
  text. A START_TLS request (with its empty StartTLSRequest) is answered EOK with the header's
  operation and txnId (and an empty StartTLSResponse), in plain text, and then the server runs
  the TLS handshake on the same connection (server side; the context decides whether a client
  certificate is required) and reads the following frames inside TLS. A handshake that fails
  closes the connection. Until the upgrade every other request is answered EUA with its header
  echoed, the connection kept open: that is what a bookie whose authentication needs TLS does
  (``AuthHandler.ServerSideHandler`` answers EUA to any v3 request but AUTH / START_TLS while
  not authenticated). A bookie with TLS enabled but authentication disabled would also serve
  plain requests; this fake models the stricter setup. START_TLS after the upgrade, on a server
  without TLS or in ``"direct"`` mode is answered EBADREQ (``BookieRequestProcessor`` answers
  EBADREQ when TLS is not configured).
* ``"direct"``: TLS from the first byte (a TLS-terminating proxy in front of a bookie).

Sources: bookkeeper-server/src/main/java/org/apache/bookkeeper/proto/BookieRequestProcessor.java
(``processStartTLSRequestV3``) and AuthHandler.java in BookKeeper.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import ssl as ssl_module
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import cast

from google.protobuf.message import DecodeError

from scrutiny.connectors.bookies.v3_protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    TLS_MODES,
    FrameSizeError,
    TlsMode,
    encode_frame,
    read_frame,
)
from scrutiny.core.entry_header import HEADER_SIZE
from scrutiny.core.listing_codec import encode_listing, encode_listing_per_run
from scrutiny.core.sequence_groups import SequenceGroup
from scrutiny.proto import bookkeeper_protocol_pb2 as pb
from scrutiny.simulator.model import GarbageKind

logger = logging.getLogger(__name__)

#: What a bookie holds of a ledger: its groups, or None when it holds nothing (ENOLEDGER).
ListingSource = Callable[[int], Sequence[SequenceGroup] | None]
#: The bytes of one entry (ledger id, entry id) as its writer sent it, or None when the bookie lacks it.
EntrySource = Callable[[int, int], bytes | None]


class ListingEncoding(StrEnum):
    """How listing bytes are written."""

    PER_RUN = "per_run"  # BookKeeper's Java bookie: one period-0 group per run
    COMPACT = "compact"  # BP-34's periodic groups


@dataclass(frozen=True, slots=True)
class Unresponsive:
    """Read requests, never answer (what a DbLedgerStorage bookie does)."""


@dataclass(frozen=True, slots=True)
class Slow:
    """Answer normally after ``delay_s`` seconds (other requests are not held up)."""

    delay_s: float


@dataclass(frozen=True, slots=True)
class ReplyStatus:
    """Answer with this status (outer and inner), the ledger id echoed, no listing.

    ``status`` must be a value of BookKeeper's StatusCode (``ValueError`` otherwise).
    """

    status: int

    def __post_init__(self) -> None:
        pb.StatusCode.Name(self.status)


@dataclass(frozen=True, slots=True)
class Garbage:
    """Write a broken frame instead of the answer."""

    kind: GarbageKind = GarbageKind.RANDOM_PAYLOAD


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Close the connection on this request; with ``partial_frame``, after half of the answer's bytes."""

    partial_frame: bool = False


@dataclass(frozen=True, slots=True)
class WrongLedgerId:
    """Answer EOK with the right listing but another ledger id echoed (ledger id + 1)."""


@dataclass(frozen=True, slots=True)
class MalformedListing:
    """Answer EOK with listing bytes that do not decode (the last byte cut off)."""


Fault = Unresponsive | Slow | ReplyStatus | Garbage | Disconnect | WrongLedgerId | MalformedListing


@dataclass
class ServerStats:
    """Counters since the server was created (kept across restarts of the same object)."""

    connections: int = 0
    requests: int = 0
    answers: int = 0
    bad_requests: int = 0
    refused_frames: int = 0
    #: Connections upgraded by START_TLS; handshakes that failed after an EOK to START_TLS.
    tls_upgrades: int = 0
    tls_failures: int = 0
    #: Requests answered EUA because they came before START_TLS on a server that requires it.
    before_tls: int = 0


class _Session:
    """One client connection's writer, its delayed answers and its shuffle buffer."""

    def __init__(self, writer: asyncio.StreamWriter, server: BookieV3Server, *, awaiting_tls: bool) -> None:
        self.writer = writer
        #: START_TLS is still required before any other request is served.
        self.awaiting_tls = awaiting_tls
        self._server = server
        self._timers: set[asyncio.TimerHandle] = set()
        self._held: list[tuple[int | None, bytes]] = []
        self._flush_timer: asyncio.TimerHandle | None = None
        self._out: list[bytes] = []
        self.closed = False

    def send(self, ledger_id: int | None, frame: bytes) -> None:
        """Write an answer now, or hold it for shuffling."""
        if self.closed:
            return
        if not self._server.shuffle:
            self._write([(ledger_id, frame)])
            return
        self._held.append((ledger_id, frame))
        if len(self._held) >= self._server.shuffle_batch:
            self.flush()
        elif self._flush_timer is None:
            self._flush_timer = asyncio.get_running_loop().call_later(self._server.shuffle_window_s, self.flush)

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (garbage, partial frames), after any queued answers."""
        if not self.closed:
            self._flush_out()
            self.writer.write(data)

    def later(self, delay_s: float, action: Callable[[], None]) -> None:
        """Run ``action`` after ``delay_s`` unless the session closes first."""

        def run() -> None:
            self._timers.discard(handle)
            if not self.closed:
                action()

        handle = asyncio.get_running_loop().call_later(delay_s, run)
        self._timers.add(handle)

    def flush(self) -> None:
        """Write every held answer, in random order."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        held, self._held = self._held, []
        self._server.rng.shuffle(held)
        self._write(held)

    def close(self) -> None:
        """Drop delayed and held answers and close the stream."""
        self.closed = True
        for handle in self._timers:
            handle.cancel()
        if self._flush_timer is not None:
            self._flush_timer.cancel()
        self._timers.clear()
        self._held.clear()
        self._out.clear()
        self.writer.close()

    def _write(self, answers: list[tuple[int | None, bytes]]) -> None:
        """Queue answers; everything queued in one turn of the event loop goes out in one write."""
        if self.closed or not answers:
            return
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush_out)
        self._out.extend(frame for _, frame in answers)
        self._server.stats.answers += len(answers)
        self._server.answer_log.extend(lid for lid, _ in answers if lid is not None)

    def _flush_out(self) -> None:
        out, self._out = self._out, []
        if not self.closed and out:
            self.writer.write(b"".join(out))


def _start_tls_ok(header: pb.BKPacketHeader) -> bytes:
    """EOK to START_TLS, the header built as BookieRequestProcessor builds it (version 3, operation, txnId)."""
    response = pb.Response()
    response.header.version = pb.VERSION_THREE
    response.header.operation = header.operation
    response.header.txnId = header.txnId
    response.status = pb.EOK
    response.startTLSResponse.SetInParent()
    return encode_frame(response.SerializeToString())


def _read_response(
    header: pb.BKPacketHeader, code: int, ledger_id: int, entry_id: int, body: bytes | None = None
) -> bytes:
    status = cast(pb.StatusCode, code)
    response = pb.Response()
    response.header.CopyFrom(header)
    response.status = status
    inner = response.readResponse
    inner.status, inner.ledgerId, inner.entryId = status, ledger_id, entry_id
    if body is not None:
        inner.body = body
    return encode_frame(response.SerializeToString())


def _response(header: pb.BKPacketHeader, code: int, ledger_id: int | None, listing: bytes | None = None) -> bytes:
    status = cast(pb.StatusCode, code)
    response = pb.Response()
    response.header.CopyFrom(header)
    response.status = status
    if ledger_id is not None:
        inner = response.getListOfEntriesOfLedgerResponse
        inner.status = status
        inner.ledgerId = ledger_id
        if listing is not None:
            inner.availabilityOfEntriesOfLedger = listing
    return encode_frame(response.SerializeToString())


class BookieV3Server:
    """A fake bookie answering GetListOfEntriesOfLedger from ``source`` and READ_ENTRY from ``entries`` (see the
    module doc).

    ``encoding`` is the default listing encoding; ``shuffle`` holds answers for up to
    ``shuffle_window_s`` (or ``shuffle_batch`` answers) and writes them in random order.
    ``seed`` makes garbage and shuffling reproducible. Attributes ``encoding``, ``shuffle``
    and the fault settings can be changed while it runs. ``ssl`` and ``tls_mode``: see the
    module doc; ``tls_handshake_timeout_s`` bounds a START_TLS handshake.
    """

    def __init__(
        self,
        source: ListingSource,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl: ssl_module.SSLContext | None = None,
        tls_mode: TlsMode = "starttls",
        tls_handshake_timeout_s: float = 5.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        encoding: ListingEncoding = ListingEncoding.PER_RUN,
        shuffle: bool = False,
        shuffle_window_s: float = 0.005,
        shuffle_batch: int = 4096,
        seed: int | None = None,
        answer_log_size: int = 100_000,
        entries: EntrySource | None = None,
    ) -> None:
        self.source = source
        self.entries = entries
        self.host = host
        self._requested_port = port
        if tls_mode not in TLS_MODES:
            raise ValueError(f"tls_mode must be one of {', '.join(TLS_MODES)}, not {tls_mode!r}")
        self._ssl = ssl
        self.tls_mode = tls_mode
        self.tls_handshake_timeout_s = tls_handshake_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.encoding = encoding
        self.shuffle = shuffle
        self.shuffle_window_s = shuffle_window_s
        self.shuffle_batch = shuffle_batch
        self.rng = random.Random(seed)
        self.stats = ServerStats()
        #: Ledger ids of answers in the order they were written (most recent ``answer_log_size``).
        self.answer_log: collections.deque[int] = collections.deque(maxlen=answer_log_size)
        self._global_fault: Fault | None = None
        self._faults: dict[int, Fault] = {}
        self._encodings: dict[int, ListingEncoding] = {}
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._sessions: set[_Session] = set()

    # ----------------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._port is None:
            raise RuntimeError("the server is not started")
        return self._port

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) to connect to."""
        return self.host, self.port

    async def start(self) -> None:
        """Bind and start accepting (the port given at construction, or a free one)."""
        if self._server is not None:
            return
        direct = self._ssl if self.tls_mode == "direct" else None
        self._server = await asyncio.start_server(self._handle, self.host, self._requested_port, ssl=direct)
        self._port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop accepting, close every connection, wait for their handlers to end."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for session in list(self._sessions):
            session.close()  # handlers see EOF and end by themselves
        handlers = list(self._handlers)
        if handlers:
            _, stuck = await asyncio.wait(handlers, timeout=1.0)
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
        await server.wait_closed()

    async def __aenter__(self) -> BookieV3Server:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # ----------------------------------------------------------------------- runtime switches

    def set_fault(self, fault: Fault | None, *, ledger_id: int | None = None) -> None:
        """Inject ``fault`` for one ledger, or for all (``ledger_id`` None); None removes it."""
        if ledger_id is None:
            self._global_fault = fault
        elif fault is None:
            self._faults.pop(ledger_id, None)
        else:
            self._faults[ledger_id] = fault

    def clear_faults(self) -> None:
        """Remove every fault."""
        self._global_fault = None
        self._faults.clear()

    def set_encoding(self, encoding: ListingEncoding | None, *, ledger_id: int | None = None) -> None:
        """Listing encoding for one ledger, or the default (``ledger_id`` None); None removes a ledger's own."""
        if ledger_id is None:
            if encoding is not None:
                self.encoding = encoding
        elif encoding is None:
            self._encodings.pop(ledger_id, None)
        else:
            self._encodings[ledger_id] = encoding

    def fault_for(self, ledger_id: int) -> Fault | None:
        """The fault that applies to a request for ``ledger_id`` now."""
        return self._faults.get(ledger_id, self._global_fault)

    # ----------------------------------------------------------------------- serving

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        session = _Session(writer, self, awaiting_tls=self._ssl is not None and self.tls_mode == "starttls")
        self._sessions.add(session)
        self.stats.connections += 1
        try:
            await self._serve(reader, session)
        except asyncio.CancelledError:
            # Only stop() cancels a handler. Ending normally keeps Python 3.11's stream
            # callback from logging the cancellation as an error.
            pass
        finally:
            session.close()
            self._sessions.discard(session)
            self._handlers.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, session: _Session) -> None:
        while not session.closed:
            try:
                frame = await read_frame(reader, self.max_frame_bytes)
            except FrameSizeError:
                self.stats.refused_frames += 1
                return
            except (asyncio.IncompleteReadError, OSError):
                return
            request = pb.Request()
            try:
                request.ParseFromString(frame)
            except DecodeError:
                self.stats.bad_requests += 1
                return
            self.stats.requests += 1
            if request.header.operation == pb.START_TLS:
                if not await self._start_tls(session, request):
                    return
                continue
            if session.awaiting_tls:
                self.stats.before_tls += 1
                session.send(None, _response(request.header, pb.EUA, None))
            elif not self._dispatch(session, request):
                return
            with contextlib.suppress(OSError):
                await session.writer.drain()

    async def _start_tls(self, session: _Session, request: pb.Request) -> bool:
        """Answer START_TLS and upgrade the connection (see the module doc); False closes it."""
        if self._ssl is None or not session.awaiting_tls or not request.HasField("startTLSRequest"):
            self.stats.bad_requests += 1
            session.send(None, _response(request.header, pb.EBADREQ, None))
            return True
        session.awaiting_tls = False
        session.flush()
        session.send_raw(_start_tls_ok(request.header))  # in plain text, after anything queued
        try:
            await session.writer.start_tls(self._ssl, ssl_handshake_timeout=self.tls_handshake_timeout_s)
        except (OSError, ssl_module.SSLError, ConnectionError) as err:
            self.stats.tls_failures += 1
            logger.debug("TLS handshake after START_TLS failed: %s", err)
            return False
        self.stats.tls_upgrades += 1
        return True

    def _dispatch(self, session: _Session, request: pb.Request) -> bool:
        """Answer (or not) one request; False closes the connection."""
        header = request.header
        answer: Callable[..., bytes]
        if header.operation == pb.GET_LIST_OF_ENTRIES_OF_LEDGER and request.HasField("getListOfEntriesOfLedgerRequest"):
            ledger_id = request.getListOfEntriesOfLedgerRequest.ledgerId
            answer = partial(self._answer, header, ledger_id)
            refuse = partial(_response, header, ledger_id=ledger_id)
        elif header.operation == pb.READ_ENTRY and request.HasField("readRequest") and self.entries is not None:
            ledger_id, entry_id = request.readRequest.ledgerId, request.readRequest.entryId
            answer = partial(self._read_answer, header, ledger_id, entry_id)
            refuse = partial(_read_response, header, ledger_id=ledger_id, entry_id=entry_id)
        else:
            self.stats.bad_requests += 1
            session.send(None, _response(header, pb.EBADREQ, None))
            return True
        match self.fault_for(ledger_id):
            case None:
                session.send(ledger_id, answer())
            case Unresponsive():
                pass
            case Slow(delay_s=delay):
                session.later(delay, lambda: session.send(ledger_id, answer()))
            case ReplyStatus(status=status):
                session.send(ledger_id, refuse(code=status))
            case Garbage(kind=kind):
                session.send_raw(self._garbage(kind))
            case Disconnect(partial_frame=partial_frame):
                session.send_raw(b"")  # answers already given still go out first
                if partial_frame:
                    whole = answer()
                    session.send_raw(whole[: max(len(whole) // 2, 1)])
                return False
            case WrongLedgerId():
                session.send(ledger_id, answer(echo=ledger_id + 1))
            case MalformedListing():
                session.send(ledger_id, answer(cut=1))
        return True

    def _read_answer(
        self, header: pb.BKPacketHeader, ledger_id: int, entry_id: int, *, echo: int | None = None, cut: int = 0
    ) -> bytes:
        """The normal answer to a READ_ENTRY: EOK and the entry, ENOENTRY, ENOLEDGER, or EIO if a source fails.
        ``cut`` leaves the body shorter than an entry header."""
        assert self.entries is not None
        echoed = ledger_id if echo is None else echo
        try:
            body = self.entries(ledger_id, entry_id)
            if body is None:
                code = pb.ENOLEDGER if self.source(ledger_id) is None else pb.ENOENTRY
                return _read_response(header, code, echoed, entry_id)
        except Exception:
            logger.exception("entry source failed for entry %d:%d: answering EIO", ledger_id, entry_id)
            return _read_response(header, pb.EIO, echoed, entry_id)
        return _read_response(header, pb.EOK, echoed, entry_id, body[: HEADER_SIZE - 1] if cut else body)

    def _answer(self, header: pb.BKPacketHeader, ledger_id: int, *, echo: int | None = None, cut: int = 0) -> bytes:
        """The normal answer from the source: EOK and the listing, ENOLEDGER, or EIO if the source fails."""
        echoed = ledger_id if echo is None else echo
        try:
            groups = self.source(ledger_id)
            if groups is None:
                return _response(header, pb.ENOLEDGER, echoed)
            encoding = self._encodings.get(ledger_id, self.encoding)
            listing = encode_listing(groups) if encoding is ListingEncoding.COMPACT else encode_listing_per_run(groups)
        except Exception:
            logger.exception("listing source failed for ledger %d: answering EIO", ledger_id)
            return _response(header, pb.EIO, echoed)
        return _response(header, pb.EOK, echoed, listing[: len(listing) - cut])

    def _garbage(self, kind: GarbageKind) -> bytes:
        if kind is GarbageKind.NEGATIVE_LENGTH:
            return struct.pack(">i", -1) + b"\x00" * 8
        if kind is GarbageKind.HUGE_LENGTH:
            return struct.pack(">i", 2**31 - 1) + b"\x00" * 8
        # 0xff is a tag with wire type 7, which no protobuf message can start with.
        payload = b"\xff" + self.rng.randbytes(31)
        return encode_frame(payload)
