"""An agent backend that asks the local bookie over BookKeeper's v3 protocol.

For bookies on SortedLedgerStorage or InterleavedLedgerStorage, which answer
GetListOfEntriesOfLedger themselves: the agent forwards each batch as pipelined v3 requests to
the bookie (normally on the same host), so the checker can talk gRPC to every bookie if the
operator prefers one protocol. Answers keep the v3 client's classification: a listing, an
explicit ENOLEDGER, or unknown with the reason (timeouts, other statuses, garbage), never
"missing" for anything but ENOLEDGER.

It cannot list the ledgers the bookie holds (``ListLedgers`` is answered UNIMPLEMENTED): BookKeeper's v3
protocol has no request for that.

The v3 client is asyncio-based; the backend runs its own event loop on a thread and the gRPC
server's threads submit batches to it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from scrutiny.agent.server import Cancelled, LedgerAnswer, ListingNotSupportedError, ListingStatus, SourceHealth, never
from scrutiny.connectors.bookies.v3_client import BookieClientConfig, BookieV3Client
from scrutiny.core.held_ledgers import LedgerPage
from scrutiny.core.listing_codec import encode_listing
from scrutiny.core.verdict import AnswerKind, BookieAnswer

T = TypeVar("T")

#: Probe ledger for health checks: any id works, the question is whether the bookie answers at all.
_HEALTH_PROBE_LEDGER = 0


class V3ForwardBackend:
    """ListingBackend over the bookie's v3 protocol at ``host:port``."""

    def __init__(
        self, host: str, port: int, *, config: BookieClientConfig | None = None, timeout_s: float = 10.0
    ) -> None:
        self.address = f"{host}:{port}"
        self._timeout_s = timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agent-v3-forward", daemon=True)
        self._thread.start()
        self._client = self._call(self._make_client(host, port, config))

    async def _make_client(self, host: str, port: int, config: BookieClientConfig | None) -> BookieV3Client:
        return BookieV3Client(host, port, config=config)

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def get_listings(self, ledger_ids: Sequence[int], *, cancelled: Cancelled = never) -> list[LedgerAnswer]:
        """One answer per id, from pipelined v3 requests; never raises (they end at their timeout, ``cancelled`` or
        not: the requests are in flight at once)."""
        asked_ms = int(time.time() * 1000)
        try:
            answers = self._call(
                self._client.get_listings(ledger_ids, timeout=self._timeout_s), timeout=self._timeout_s + 5
            )
        except Exception as error:  # the loop or the client failed as a whole: every ledger is unknown
            return [
                LedgerAnswer.unknown(i, f"bookie {self.address}: {error or type(error).__name__}") for i in ledger_ids
            ]
        return [_as_ledger_answer(i, answers.get(i), asked_ms) for i in ledger_ids]

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
        """Close the connection and stop the loop."""
        try:
            self._call(self._client.close(), timeout=5)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)


def _as_ledger_answer(ledger_id: int, answer: BookieAnswer | None, asked_ms: int) -> LedgerAnswer:
    if answer is None:
        return LedgerAnswer.unknown(ledger_id, "no answer from the bookie")
    if answer.kind is AnswerKind.LISTING:
        return LedgerAnswer(ledger_id, ListingStatus.POSITIVE, encode_listing(answer.groups), as_of_ms=asked_ms)
    if answer.kind is AnswerKind.NO_LEDGER:
        return LedgerAnswer(ledger_id, ListingStatus.NO_LEDGER, as_of_ms=asked_ms)
    return LedgerAnswer.unknown(ledger_id, answer.reason)
