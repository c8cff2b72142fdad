"""An asyncio client of BookKeeper's v3 wire protocol for GetListOfEntriesOfLedger (and plain entry reads).

The framing, the requests and the classification of responses are in
:mod:`scrutiny.connectors.bookies.v3_protocol` (shared with the agent's forwarder and the simulated bookies); no
authentication handshake (BookKeeper's authentication disabled).

TLS (an ``ssl`` context given) comes in two modes, :attr:`BookieClientConfig.tls_mode`:

* ``"starttls"`` (default; what a bookie with TLS enabled speaks): connect in plain text, send a
  v3 Request with header operation START_TLS and an empty StartTLSRequest, wait for a Response
  with the same operation and txnId and status EOK, then run the TLS handshake on the same TCP
  connection (server certificate verified against the context's CAs and host name; the client
  certificate of the context presented if the bookie asks for one). Frames then continue inside
  TLS. This is the sequence of BookKeeper's ``PerChannelBookieClient.initiateTLS`` /
  ``StartTLSCompletion`` (bookkeeper-server/src/main/java/org/apache/bookkeeper/proto/).
* ``"direct"``: TLS from the first byte (a TLS-terminating proxy in front of the bookie).

The whole sequence (TCP connect, START_TLS answer, handshake) is bounded by
``connect_timeout_s``; any failure of it is a failed connection attempt with a reason, like a
refused connect.

:class:`BookieV3Client` keeps one connection to one bookie and pipelines any number of
requests on it, matching responses to requests by ``txnId`` in whatever order they come.
Every request has a deadline. The rule that matters most, and which every path keeps:

* EOK with valid listing bytes is a positive answer (:meth:`BookieAnswer.listing`);
* ENOLEDGER is the only negative (:meth:`BookieAnswer.no_ledger`);
* everything else is unknown with a short reason: other statuses, a timeout, a refused,
  closed or broken connection, an oversized or undecodable frame, a wrong ledger id echoed,
  malformed listing bytes.

:meth:`BookieV3Client.read_entry_headers` reads single entries with a plain READ_ENTRY (never fencing) for the
header each carries; anything but a valid header for the entry asked is a reason, never an error.

Nothing a bookie sends (or fails to send) raises out of the client. A broken connection
(EOF, reset, a frame above ``max_frame_bytes``, bytes that are not a ``Response``) makes every
request pending on it unknown; the next request reconnects, after a delay that grows with
consecutive failures (the config's :class:`~scrutiny.core.backoff.Backoff`). :class:`BookieV3Pool`
keeps one client per bookie id, resolving ids to addresses with a resolver (see
:mod:`scrutiny.connectors.bookies.addresses`).

A client belongs to the event loop it is first used on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import ssl as ssl_module
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from google.protobuf.message import DecodeError

from scrutiny.connectors.bookies.addresses import Address
from scrutiny.connectors.bookies.v3_protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    TLS_MODES,
    TXN_ID_MODULUS,
    FrameSizeError,
    TlsMode,
    check_response,
    decode_listing_answer,
    encode_frame,
    listing_request,
    read_entry_header,
    read_entry_request,
    read_frame,
    start_tls_refusal,
    start_tls_request,
)
from scrutiny.core.backoff import Backoff
from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.sequence_groups import MAX_ENTRY_ID
from scrutiny.core.verdict import BookieAnswer
from scrutiny.core.zk_paths import MAX_LEDGER_ID
from scrutiny.proto import bookkeeper_protocol_pb2 as pb

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BookieClientConfig:
    """Timeouts, limits and TLS mode of a :class:`BookieV3Client` (all durations in seconds).

    ``connect_timeout_s`` bounds one connection attempt: TCP connect and, with TLS, the
    START_TLS exchange and the handshake. ``tls_mode`` applies when the client has an ``ssl``
    context: ``"starttls"`` (BookKeeper's in-protocol upgrade) or ``"direct"`` (TLS from the
    first byte).

    ``decode_in_thread_bytes``: listings at least this big (a Java bookie's one-group-per-run
    listing of a large ledger is megabytes) are decoded in a worker thread so the event loop
    keeps serving other requests meanwhile.
    """

    request_timeout_s: float = 5.0
    connect_timeout_s: float = 2.0
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    retry: Backoff = Backoff(initial_s=0.1, maximum_s=10.0, multiplier=2.0, jitter=0.2)
    decode_in_thread_bytes: int = 1024 * 1024
    tls_mode: TlsMode = "starttls"

    def __post_init__(self) -> None:
        if self.request_timeout_s <= 0 or self.connect_timeout_s <= 0 or self.max_frame_bytes <= 0:
            raise ValueError(f"timeouts and the frame limit must be positive: {self}")
        if self.tls_mode not in TLS_MODES:
            raise ValueError(f"tls_mode must be one of {', '.join(TLS_MODES)}, not {self.tls_mode!r}")


def client_tls_context(ca_file: str = "", cert_file: str = "", key_file: str = "") -> ssl_module.SSLContext:
    """A client TLS context verifying bookies (certificate chain against ``ca_file`` — PEM,
    default: the system's roots — and host name), presenting ``cert_file``/``key_file`` (PEM;
    the key may sit in the cert file) when given, for bookies that require client certificates.

    Runs at configuration time; raises ``OSError`` / ``ssl.SSLError`` for unreadable files and
    ``ssl.SSLError`` for a passphrase-protected key (never prompts for a passphrase).
    """
    context = ssl_module.create_default_context(cafile=ca_file or None)
    if cert_file:
        context.load_cert_chain(cert_file, key_file or None, password=_no_passphrase)
    return context


def _no_passphrase() -> bytes:
    raise ssl_module.SSLError("the key is passphrase-protected, which is not supported")


def _describe(err: BaseException) -> str:
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    return str(err) or type(err).__name__


def _seconds(value: float) -> str:
    text = f"{value:.3g}"
    return text if ("." in text or "e" in text) else f"{text}.0"


# --------------------------------------------------------------------------- one connection

#: What a pending request's future resolves to: the matched response, or why the connection was lost.
_Outcome = pb.Response | str


class _Connection:
    """One stream and its requests in flight; a reader task resolves them by ``txnId``.

    Runs until EOF, an error, a frame it cannot trust, or :meth:`close`; then every pending
    future resolves to the reason, and ``on_lost`` is told (unless the client closed it).
    ``first_loss_hint`` is added to the reason when the stream ends before any frame came.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_frame_bytes: int,
        on_response: Callable[[], None],
        on_lost: Callable[[_Connection, str], None],
        first_loss_hint: str = "",
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._max_frame_bytes = max_frame_bytes
        self._on_response = on_response
        self._on_lost = on_lost
        self._first_loss_hint = first_loss_hint
        self._frames = 0
        self.pending: dict[int, asyncio.Future[_Outcome]] = {}
        self.lost: str | None = None
        self._out: list[bytes] = []
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    def send(self, requests: list[tuple[int, bytes]]) -> list[asyncio.Future[_Outcome]]:
        """Register ``(txn_id, frame)`` pairs and queue their frames; one future per request.

        Frames queued by any caller during one turn of the event loop go out in one write.
        """
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[_Outcome]] = []
        for txn_id, _ in requests:
            future: asyncio.Future[_Outcome] = loop.create_future()
            if self.lost is not None:
                future.set_result(self.lost)
            else:
                self.pending[txn_id] = future
            futures.append(future)
        if self.lost is None:
            if not self._out:
                loop.call_soon(self._flush)
            self._out.extend(frame for _, frame in requests)
        return futures

    def _flush(self) -> None:
        """Write every frame queued during this turn of the event loop in one write."""
        out, self._out = self._out, []
        if self.lost is None and out:
            self._writer.write(b"".join(out))

    async def drain(self) -> None:
        """Wait while the transport's write buffer is full; a failed write breaks the connection."""
        try:
            await self._writer.drain()
        except (OSError, RuntimeError) as err:
            self._fail(f"write failed: {_describe(err)}")

    def forget(self, txn_ids: Iterable[int]) -> None:
        """Stop waiting for these requests (deadline passed): late answers are dropped."""
        for txn_id in txn_ids:
            self.pending.pop(txn_id, None)

    async def close(self, reason: str) -> None:
        """Close the stream; pending requests resolve to ``reason``. Bounded (≤ 1 s)."""
        self._fail(reason, notify=False)
        self._task.cancel()
        await asyncio.wait([self._task])
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await self._writer.wait_closed()

    async def _read_loop(self) -> None:
        reason = "connection closed by the bookie"
        try:
            reason = await self._dispatch_frames()
        except asyncio.IncompleteReadError as err:
            reason = "connection closed by the bookie" + (" in the middle of a frame" if err.partial else "")
        except FrameSizeError as err:
            reason = str(err)
        except (OSError, ssl_module.SSLError) as err:
            reason = f"connection error: {_describe(err)}"
        finally:
            self._fail(reason)

    async def _dispatch_frames(self) -> str:
        """Resolve pending requests until a frame cannot be trusted; returns why it stopped."""
        while True:
            frame = await read_frame(self._reader, self._max_frame_bytes)
            response = pb.Response()
            try:
                response.ParseFromString(frame)
            except DecodeError:
                return f"undecodable response frame ({len(frame)} bytes)"
            if not response.header.HasField("txnId"):
                return "response without a transaction id"
            future = self.pending.pop(response.header.txnId, None)
            if future is not None and not future.done():
                future.set_result(response)
            self._frames += 1
            self._on_response()

    def _fail(self, reason: str, *, notify: bool = True) -> None:
        if self.lost is not None:
            return
        if notify and self._frames == 0 and self._first_loss_hint:
            reason = f"{reason} ({self._first_loss_hint})"
        self.lost = reason
        pending, self.pending = self.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_result(reason)
        self._writer.close()
        if notify:
            self._on_lost(self, reason)


# --------------------------------------------------------------------------- the client


class BookieV3Client:
    """Pipelined GetListOfEntriesOfLedger requests to one bookie over one connection.

    Connects lazily on the first request. ``ssl``: a client context (see
    :func:`client_tls_context`) to secure the connection with, by START_TLS or from the first
    byte as ``config.tls_mode`` says; ``server_hostname`` (the name the certificate must carry)
    defaults to ``host``. Never raises for anything the bookie does; raises ``ValueError`` for a
    ledger id outside 0..2^63-1.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        config: BookieClientConfig | None = None,
        ssl: ssl_module.SSLContext | None = None,
        server_hostname: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.address: Address = (host, port)
        self._config = config or BookieClientConfig()
        self._ssl = ssl
        self._server_hostname = server_hostname
        self._rng = rng or random.Random()
        self._txn_ids = itertools.count(1)
        self._conn: _Connection | None = None
        self._connecting: asyncio.Task[_Connection | str] | None = None
        self._failures = 0
        self._next_attempt = 0.0
        self._last_error = ""
        self._closed = False

    @property
    def config(self) -> BookieClientConfig:
        """The client's timeouts and limits."""
        return self._config

    @property
    def in_flight(self) -> int:
        """Requests currently waiting for an answer on the connection."""
        return len(self._conn.pending) if self._conn is not None else 0

    async def get_listing(self, ledger_id: int, *, timeout: float | None = None) -> BookieAnswer:
        """The bookie's answer for one ledger within ``timeout`` seconds (default: the config's)."""
        return (await self.get_listings((ledger_id,), timeout=timeout))[ledger_id]

    async def get_listings(self, ledger_ids: Iterable[int], *, timeout: float | None = None) -> dict[int, BookieAnswer]:
        """Answers for many ledgers, all requests pipelined on the one connection.

        ``timeout`` bounds the whole call (connecting included); requests not answered by then
        are unknown. Duplicate ids are asked once. Returns one answer per distinct id.
        """
        seconds = self._config.request_timeout_s if timeout is None else timeout
        ids = list(dict.fromkeys(ledger_ids))
        for ledger_id in ids:
            if not 0 <= ledger_id <= MAX_LEDGER_ID:
                raise ValueError(f"ledger id {ledger_id} is outside 0..2^63-1")
        if not ids:
            return {}
        futures = await self._exchange([partial(listing_request, ledger_id=lid) for lid in ids], seconds)
        if isinstance(futures, str):
            return dict.fromkeys(ids, BookieAnswer.unknown(futures))
        return {lid: await self._answer(lid, f, seconds) for lid, f in zip(ids, futures, strict=True)}

    async def read_entry_headers(
        self, entries: Iterable[tuple[int, int]], *, timeout: float | None = None
    ) -> dict[tuple[int, int], EntryHeader | str]:
        """The header of each ``(ledger id, entry id)`` as the bookie returns the entry, or why there is none.

        Plain READ_ENTRY requests (they never fence), pipelined on the one connection; ``timeout`` bounds the whole
        call. Duplicates are asked once. Raises ``ValueError`` for an id outside its range.
        """
        seconds = self._config.request_timeout_s if timeout is None else timeout
        wanted = list(dict.fromkeys(entries))
        for ledger_id, entry_id in wanted:
            if not 0 <= ledger_id <= MAX_LEDGER_ID or not 0 <= entry_id <= MAX_ENTRY_ID:
                raise ValueError(f"entry {ledger_id}:{entry_id} is outside the ids a bookie can hold")
        if not wanted:
            return {}
        requests = [partial(read_entry_request, ledger_id=lid, entry_id=eid) for lid, eid in wanted]
        futures = await self._exchange(requests, seconds)
        if isinstance(futures, str):
            return dict.fromkeys(wanted, futures)
        return {pair: _entry_header(pair, f, seconds) for pair, f in zip(wanted, futures, strict=True)}

    async def close(self) -> None:
        """Close the connection; requests in flight and later calls are answered unknown."""
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.wait([self._connecting])
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close("client closed")

    async def __aenter__(self) -> BookieV3Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _exchange(
        self, requests: Sequence[Callable[[int], pb.Request]], seconds: float
    ) -> list[asyncio.Future[_Outcome]] | str:
        """Send one request per builder (given its txnId), pipelined; their futures once all are answered or
        ``seconds`` have passed (connecting included), or why there is no connection."""
        deadline = asyncio.get_running_loop().time() + seconds
        conn = await self._connection(deadline, seconds)
        if isinstance(conn, str):
            return conn
        txn_ids = [next(self._txn_ids) % TXN_ID_MODULUS for _ in requests]
        frames = [encode_frame(build(t).SerializeToString()) for t, build in zip(txn_ids, requests, strict=True)]
        futures = conn.send(list(zip(txn_ids, frames, strict=True)))
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await conn.drain()
                    await asyncio.wait(futures)
        finally:
            conn.forget(t for t, f in zip(txn_ids, futures, strict=True) if not f.done())
        return futures

    async def _answer(self, ledger_id: int, future: asyncio.Future[_Outcome], seconds: float) -> BookieAnswer:
        if not future.done():
            return BookieAnswer.unknown(f"timeout after {_seconds(seconds)} s")
        outcome = future.result()
        if isinstance(outcome, str):
            return BookieAnswer.unknown(f"connection lost: {outcome}")
        checked = check_response(ledger_id, outcome)
        if isinstance(checked, BookieAnswer):
            return checked
        if len(checked) >= self._config.decode_in_thread_bytes:
            return await asyncio.to_thread(decode_listing_answer, checked)
        return decode_listing_answer(checked)

    # ----------------------------------------------------------------------- connecting

    async def _connection(self, deadline: float, seconds: float) -> _Connection | str:
        """A live connection, or why there is none by ``deadline`` (never waits past it)."""
        if self._closed:
            return "client closed"
        if self._conn is not None and self._conn.lost is None:
            return self._conn
        loop = asyncio.get_running_loop()
        if self._connecting is None:
            wait = self._next_attempt - loop.time()
            if wait > deadline - loop.time():
                return f"not connected ({self._last_error}); next attempt in {_seconds(wait)} s"
            self._connecting = loop.create_task(self._connect(max(wait, 0.0)))
        task = self._connecting
        try:
            async with asyncio.timeout_at(deadline):
                return await asyncio.shield(task)
        except TimeoutError:
            last = f" (last error: {self._last_error})" if self._last_error else ""
            return f"timeout after {_seconds(seconds)} s while connecting{last}"
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and current is not None and current.cancelling() == 0:
                return "client closed"
            raise

    async def _connect(self, wait: float) -> _Connection | str:
        """One connection attempt after ``wait`` seconds; records the failure for backoff."""
        try:
            if wait > 0:
                await asyncio.sleep(wait)
            opened = await self._open()
            if isinstance(opened, str):
                return self._failed(opened)
            reader, writer = opened
            self._conn = _Connection(
                reader,
                writer,
                max_frame_bytes=self._config.max_frame_bytes,
                on_response=self._responded,
                on_lost=self._lost,
                first_loss_hint=self._first_loss_hint(),
            )
            return self._conn
        finally:
            self._connecting = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | str:
        """A stream ready for requests (TLS set up as configured) within ``connect_timeout_s``,
        or why not. The stream is closed on every failure, cancellation included."""
        host, port = self.address
        hostname = self._server_hostname or host
        direct = self._ssl is not None and self._config.tls_mode == "direct"
        step = "connect"
        writer: asyncio.StreamWriter | None = None
        opened = False
        try:
            async with asyncio.timeout(self._config.connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=self._ssl if direct else None, server_hostname=hostname if direct else None
                )
                if self._ssl is not None and not direct:
                    step = "START_TLS"
                    refusal = await self._ask_start_tls(reader, writer)
                    if refusal is not None:
                        return f"{host}:{port}: {refusal}"
                    step = "handshake"
                    await writer.start_tls(self._ssl, server_hostname=hostname)
            opened = True
            return reader, writer
        except TimeoutError:
            return self._timeout_reason(step)
        except ssl_module.SSLError as err:
            return f"TLS handshake with {host}:{port} failed: {_describe(err)}"
        except (OSError, asyncio.IncompleteReadError, FrameSizeError) as err:
            if step == "connect":
                return f"cannot connect to {host}:{port}: {_describe(err)}"
            during = "START_TLS" if step == "START_TLS" else "the TLS handshake"
            if isinstance(err, asyncio.IncompleteReadError):
                return f"connection closed by {host}:{port} during {during}"
            return f"connection to {host}:{port} failed during {during}: {_describe(err)}"
        finally:
            if not opened and writer is not None:
                writer.close()

    def _first_loss_hint(self) -> str:
        # With TLS 1.3 a bookie checks the client certificate after the client's handshake has
        # ended, so a refused (or missing) one shows only as the connection closing.
        if self._ssl is None:
            return ""
        return "no frame came since the TLS handshake: the bookie may require a client certificate it trusts"

    async def _ask_start_tls(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str | None:
        """Send START_TLS and read its answer: None for EOK, else why the upgrade is refused."""
        txn_id = next(self._txn_ids) % TXN_ID_MODULUS
        writer.write(encode_frame(start_tls_request(txn_id).SerializeToString()))
        await writer.drain()
        return start_tls_refusal(txn_id, await read_frame(reader, self._config.max_frame_bytes))

    def _timeout_reason(self, step: str) -> str:
        host, port = self.address
        seconds = _seconds(self._config.connect_timeout_s)
        if step == "START_TLS":
            return f"no answer to START_TLS from {host}:{port} within {seconds} s"
        if step == "handshake":
            return f"TLS handshake with {host}:{port} timed out after {seconds} s"
        return f"connect to {host}:{port} timed out after {seconds} s"

    def _failed(self, reason: str) -> str:
        self._failures += 1
        delay = self._config.retry.delay(self._failures - 1, self._rng.random())
        self._next_attempt = asyncio.get_running_loop().time() + delay
        self._last_error = reason
        logger.debug("bookie %s:%s: %s; next attempt in %.3f s", *self.address, reason, delay)
        return reason

    def _responded(self) -> None:
        self._failures = 0

    def _lost(self, conn: _Connection, reason: str) -> None:
        if self._conn is conn:
            self._conn = None
        self._failed(f"connection lost: {reason}")


def _entry_header(pair: tuple[int, int], future: asyncio.Future[_Outcome], seconds: float) -> EntryHeader | str:
    if not future.done():
        return f"timeout after {_seconds(seconds)} s"
    outcome = future.result()
    if isinstance(outcome, str):
        return f"connection lost: {outcome}"
    return read_entry_header(*pair, outcome)


# --------------------------------------------------------------------------- many bookies

Resolver = Callable[[str], Address]


class BookieV3Pool:
    """One :class:`BookieV3Client` per bookie id, addresses from ``resolver``; ``config`` (its
    ``tls_mode`` too) and ``ssl`` are those of every client.

    The resolver (e.g. ``BookieAddressBook.resolve``) is asked on every call; when a bookie's
    address changes its old client is closed and a new one made. A resolver error
    (:class:`ScrutinyError`) makes that bookie's answers unknown; nothing raises.
    """

    def __init__(
        self,
        resolver: Resolver,
        *,
        config: BookieClientConfig | None = None,
        ssl: ssl_module.SSLContext | None = None,
    ) -> None:
        self._resolver = resolver
        self._config = config or BookieClientConfig()
        self._ssl = ssl
        self._clients: dict[str, BookieV3Client] = {}

    @property
    def config(self) -> BookieClientConfig:
        """Every client's timeouts and limits."""
        return self._config

    async def client(self, bookie_id: str) -> BookieV3Client:
        """The client for ``bookie_id`` at its current address; raises the resolver's error."""
        address = self._resolver(bookie_id)
        client = self._clients.get(bookie_id)
        if client is not None and client.address == address:
            return client
        fresh = BookieV3Client(*address, config=self._config, ssl=self._ssl)
        self._clients[bookie_id] = fresh
        if client is not None:
            await client.close()
        return fresh

    async def get_listing(self, bookie_id: str, ledger_id: int, *, timeout: float | None = None) -> BookieAnswer:
        """One bookie's answer for one ledger (see :meth:`BookieV3Client.get_listing`)."""
        return (await self.get_listings(bookie_id, (ledger_id,), timeout=timeout))[ledger_id]

    async def get_listings(
        self, bookie_id: str, ledger_ids: Iterable[int], *, timeout: float | None = None
    ) -> dict[int, BookieAnswer]:
        """One bookie's answers for many ledgers, pipelined (see :meth:`BookieV3Client.get_listings`)."""
        ids = list(ledger_ids)
        try:
            client = await self.client(bookie_id)
        except ScrutinyError as err:
            return dict.fromkeys(ids, BookieAnswer.unknown(f"cannot resolve bookie {bookie_id}: {err}"))
        return await client.get_listings(ids, timeout=timeout)

    async def forget(self, bookie_id: str) -> None:
        """Close and drop the client of a bookie (e.g. it left the cluster)."""
        client = self._clients.pop(bookie_id, None)
        if client is not None:
            await client.close()

    async def close(self) -> None:
        """Close every client."""
        clients, self._clients = self._clients, {}
        await asyncio.gather(*(client.close() for client in clients.values()))
