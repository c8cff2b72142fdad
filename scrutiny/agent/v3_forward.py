"""An agent backend that asks the local bookie over BookKeeper's v3 protocol.

For bookies on SortedLedgerStorage or InterleavedLedgerStorage, which answer
GetListOfEntriesOfLedger themselves: the agent forwards each batch as pipelined v3 requests to
the bookie (normally on the same host), so the checker can talk gRPC to every bookie if the
operator prefers one protocol. Answers keep the v3 client's classification: a listing, an
explicit ENOLEDGER, or unknown with the reason (timeouts, other statuses, garbage), never
"missing" for anything but ENOLEDGER.

It cannot list the ledgers the bookie holds (``ListLedgers`` is answered UNIMPLEMENTED): BookKeeper's v3
protocol has no request for that.

The v3 client is asyncio-based: a :class:`V3Link` runs its own event loop on a thread, with one
:class:`BookieV3Client` on it, and the gRPC server's threads submit batches to it. The same link
answers ``ReadEntryHeaders`` (:class:`V3HeaderReader`: plain READ_ENTRY requests, never fencing), for
this backend (it is its own header reader) and for an agent over DbLedgerStorage given the bookie's
v3 address.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from scrutiny.agent.server import (
    Cancelled,
    EntryRef,
    LedgerAnswer,
    ListingNotSupportedError,
    ListingStatus,
    SourceHealth,
    never,
)
from scrutiny.connectors.bookies.v3_client import BookieClientConfig, BookieV3Client
from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.held_ledgers import LedgerPage
from scrutiny.core.listing_codec import encode_listing
from scrutiny.core.verdict import AnswerKind, BookieAnswer

T = TypeVar("T")

#: Probe ledger for health checks: any id works, the question is whether the bookie answers at all.
_HEALTH_PROBE_LEDGER = 0
#: Seconds a call through the link may take beyond the v3 client's own timeout (scheduling, closing).
_LINK_SLACK_S = 5.0


class V3LinkClosedError(ScrutinyError):
    """A call through a :class:`V3Link` after it was closed."""


class V3Link:
    """One :class:`BookieV3Client` to ``host:port`` on an event loop of its own (a daemon thread), for threads to
    call into. The loop's thread starts with the first call (an unused link costs nothing); the connection is made by
    the first request, and a lost one again by the next."""

    def __init__(self, host: str, port: int, config: BookieClientConfig | None = None) -> None:
        self.address = f"{host}:{port}"
        self._host, self._port, self._config = host, port, config
        self._lock = threading.Lock()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: BookieV3Client | None = None

    @property
    def client(self) -> BookieV3Client:
        """The link's client (started with its loop on first use); its coroutines are for :meth:`call` only."""
        return self._started()[1]

    def _started(self) -> tuple[asyncio.AbstractEventLoop, BookieV3Client]:
        with self._lock:
            if self._closed:
                raise V3LinkClosedError(f"the link to the bookie {self.address} is closed")
            if self._loop is None or self._client is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="agent-v3-link", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
                self._client = asyncio.run_coroutine_threadsafe(self._make_client(), loop).result(10.0)
            return self._loop, self._client

    async def _make_client(self) -> BookieV3Client:
        return BookieV3Client(self._host, self._port, config=self._config)

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coroutine`` (a call of :attr:`client`) on the link's loop and wait for its result at most ``timeout``
        seconds (``TimeoutError`` then). :class:`V3LinkClosedError` once closed."""
        try:
            loop, _client = self._started()
        except BaseException:
            coroutine.close()
            raise
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout)

    def close(self) -> None:
        """Close the connection and stop the loop. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread, client = self._loop, self._thread, self._client
        if loop is None or thread is None:
            return
        try:
            if client is not None:
                asyncio.run_coroutine_threadsafe(client.close(), loop).result(5.0)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)


class V3HeaderReader:
    """The agent's :class:`~scrutiny.agent.server.HeaderReader` over a link to the bookie: plain v3 READ_ENTRY
    requests, pipelined on the link's one connection. Closing the reader closes the link."""

    def __init__(self, link: V3Link) -> None:
        self.link = link

    def read_entry_headers(self, pairs: Sequence[EntryRef], *, timeout_s: float) -> dict[EntryRef, EntryHeader | str]:
        """Each entry's header as the bookie returns it, or why there is none (status, timeout, no header for it)."""
        prefix = f"bookie {self.link.address}: "
        headers = self.link.call(
            self.link.client.read_entry_headers(pairs, timeout=timeout_s), timeout_s + _LINK_SLACK_S
        )
        return {pair: h if isinstance(h, EntryHeader) else prefix + h for pair, h in headers.items()}

    def close(self) -> None:
        """Close the link."""
        self.link.close()


class V3ForwardBackend:
    """ListingBackend over the bookie's v3 protocol at ``host:port``; also the agent's header reader for that bookie
    (:meth:`read_entry_headers`, on the same connection)."""

    def __init__(
        self, host: str, port: int, *, config: BookieClientConfig | None = None, timeout_s: float = 10.0
    ) -> None:
        self.address = f"{host}:{port}"
        self._timeout_s = timeout_s
        self._link = V3Link(host, port, config)
        self._headers = V3HeaderReader(self._link)

    def get_listings(self, ledger_ids: Sequence[int], *, cancelled: Cancelled = never) -> list[LedgerAnswer]:
        """One answer per id, from pipelined v3 requests; never raises (they end at their timeout, ``cancelled`` or
        not: the requests are in flight at once)."""
        asked_ms = int(time.time() * 1000)
        try:
            answers = self._link.call(
                self._link.client.get_listings(ledger_ids, timeout=self._timeout_s), self._timeout_s + _LINK_SLACK_S
            )
        except Exception as error:  # the loop or the client failed as a whole: every ledger is unknown
            return [
                LedgerAnswer.unknown(i, f"bookie {self.address}: {error or type(error).__name__}") for i in ledger_ids
            ]
        return [_as_ledger_answer(i, answers.get(i), asked_ms) for i in ledger_ids]

    def read_entry_headers(self, pairs: Sequence[EntryRef], *, timeout_s: float) -> dict[EntryRef, EntryHeader | str]:
        """The header of each entry as the bookie returns it to a plain READ_ENTRY, or why there is none."""
        return self._headers.read_entry_headers(pairs, timeout_s=timeout_s)

    def list_ledgers(self, after_ledger_id: int, max_ledgers: int, *, cancelled: Cancelled = never) -> LedgerPage:
        """Always raises :class:`ListingNotSupportedError`: BookKeeper's v3 protocol has no request listing a bookie's
        ledgers."""
        raise ListingNotSupportedError(
            f"it forwards to the bookie {self.address} over BookKeeper's v3 protocol, which has no request "
            "listing a bookie's ledgers"
        )

    def health(self) -> list[SourceHealth]:
        """Whether the bookie answers a v3 request now (any definite answer counts)."""
        answer = self.get_listings([_HEALTH_PROBE_LEDGER])[0]
        ok = answer.status is not ListingStatus.UNKNOWN
        return [SourceHealth(0, self.address, ok, "" if ok else answer.reason)]

    def close(self) -> None:
        """Close the connection and stop the loop. Idempotent."""
        self._link.close()


def _as_ledger_answer(ledger_id: int, answer: BookieAnswer | None, asked_ms: int) -> LedgerAnswer:
    if answer is None:
        return LedgerAnswer.unknown(ledger_id, "no answer from the bookie")
    if answer.kind is AnswerKind.LISTING:
        return LedgerAnswer(ledger_id, ListingStatus.POSITIVE, encode_listing(answer.groups), as_of_ms=asked_ms)
    if answer.kind is AnswerKind.NO_LEDGER:
        return LedgerAnswer(ledger_id, ListingStatus.NO_LEDGER, as_of_ms=asked_ms)
    return LedgerAnswer.unknown(ledger_id, answer.reason)
