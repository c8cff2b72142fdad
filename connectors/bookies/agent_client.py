"""The checker's client of a bookie agent: many ledgers per call, answers as :class:`BookieAnswer`.

:meth:`AgentClient.get_listings` never raises for trouble on the agent's side or on the way:
a failed call (unreachable agent, deadline, UNAUTHENTICATED, INVALID_ARGUMENT...) makes every
ledger of its batch unknown with the reason, and so do an agent that answers for another bookie
than expected, a missing answer, a malformed listing or an unrecognised status. Only programming
errors (bad arguments to the constructor) raise.

:meth:`AgentClient.ledgers_page` and :meth:`AgentClient.held_ledgers` list the ledgers the bookie's index holds, one
page at a time (``ListLedgers``). A listing is all or nothing: any trouble (a failed call, another bookie's agent, a
page that breaks the protocol's order) raises :class:`AgentListingError`, never a shorter listing.

:meth:`AgentClient.read_entry_headers` reads entry headers through the agent (``ReadEntryHeaders``: the agent forwards
plain READ_ENTRY requests to its bookie). Trouble with one entry is that entry's reason; a failed call (UNIMPLEMENTED
from an agent without the bookie's address included) or an answer that cannot be trusted raises
:class:`AgentCallError`, so the caller can read from the bookie itself instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import grpc

from scrutiny.connectors.bookies.agent_protocol import (
    DEFAULT_LEDGERS_PER_PAGE,
    DEFAULT_MAX_RESPONSE_BYTES,
    SERVICE_NAME,
)
from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.held_ledgers import LISTING_START, NO_ENTRY, HeldLedger, LedgerPage, page_problem
from scrutiny.core.listing_codec import decode_listing_compact
from scrutiny.core.verdict import BookieAnswer
from scrutiny.proto import bookie_agent_pb2 as pb

DEFAULT_CHUNK_SIZE = 1000
DEFAULT_TIMEOUT_S = 10.0
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT32_MAX = 2**31 - 1
#: A listing's status values (plain ints: read once, not through the enum wrapper for every listing).
_POSITIVE, _NO_LEDGER, _UNKNOWN = pb.LedgerListing.POSITIVE, pb.LedgerListing.NO_LEDGER, pb.LedgerListing.UNKNOWN


class AgentClientError(ScrutinyError, ValueError):
    """A client configuration that cannot work (chunk size, timeout...)."""


class AgentCallError(ScrutinyError):
    """A call to the agent failed, or its answer cannot be trusted (the message says why).

    ``code`` is the gRPC status code's name when the call failed (``UNAVAILABLE``, ``UNIMPLEMENTED`` for an agent that
    cannot serve the call, ``UNAUTHENTICATED``, ``INVALID_ARGUMENT``, ``DEADLINE_EXCEEDED``...), None when the answer
    itself was refused or the call could not be made.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        self.code = code
        super().__init__(message)


class AgentListingError(AgentCallError):
    """A page of the bookie's ledgers could not be had, or cannot be trusted (the message says why); ``code`` as for
    :class:`AgentCallError` (``UNIMPLEMENTED`` for an agent that cannot list)."""


@dataclass(frozen=True, slots=True)
class AgentAnswer:
    """One ledger's answer and the time it is valid as of (ms since the epoch; None when unknown)."""

    answer: BookieAnswer
    as_of_ms: int | None = None

    def with_as_of(self) -> BookieAnswer:
        """The answer carrying its as-of time (what the verdict's write-cache rule reads)."""
        if self.as_of_ms is None or self.answer.as_of_ms == self.as_of_ms:
            return self.answer
        return replace(self.answer, as_of_ms=self.as_of_ms)


class AgentClient:
    """A connection to one bookie agent at ``target`` (``host:port``).

    Ledgers are sent ``chunk_size`` per call, at most ``max_in_flight`` calls at once, each with a
    deadline of ``timeout_s``. ``token`` is sent as ``authorization: Bearer <token>``. With
    ``tls`` the channel is TLS, verified against ``root_certificates`` (PEM; default: the
    system's roots) and ``server_name`` (default: the target's host). ``expected_bookie_id``,
    when given, makes answers from an agent that serves another bookie, or does not say which, unknown.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        tls: bool = False,
        root_certificates: bytes | None = None,
        server_name: str | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_in_flight: int = 2,
        expected_bookie_id: str | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        if chunk_size < 1 or max_in_flight < 1 or timeout_s <= 0:
            raise AgentClientError("chunk_size and max_in_flight must be at least 1, timeout_s positive")
        self.target = target
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._chunk_size = chunk_size
        self._timeout_s = timeout_s
        self._max_in_flight = max_in_flight
        self._expected_bookie_id = expected_bookie_id
        options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", max_response_bytes)]
        if tls:
            if server_name is not None:
                options.append(("grpc.ssl_target_name_override", server_name))
            credentials = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            self._channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._get_listings = self._channel.unary_unary(
            f"/{SERVICE_NAME}/GetListings",
            request_serializer=pb.ListingsRequest.SerializeToString,
            response_deserializer=pb.ListingsResponse.FromString,
        )
        self._health = self._channel.unary_unary(
            f"/{SERVICE_NAME}/Health",
            request_serializer=pb.HealthRequest.SerializeToString,
            response_deserializer=pb.HealthResponse.FromString,
        )
        self._list_ledgers = self._channel.unary_unary(
            f"/{SERVICE_NAME}/ListLedgers",
            request_serializer=pb.LedgersRequest.SerializeToString,
            response_deserializer=pb.LedgersPage.FromString,
        )
        self._read_entry_headers = self._channel.unary_unary(
            f"/{SERVICE_NAME}/ReadEntryHeaders",
            request_serializer=pb.EntryHeadersRequest.SerializeToString,
            response_deserializer=pb.EntryHeadersResponse.FromString,
        )

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def get_listings(self, ledger_ids: Iterable[int]) -> dict[int, BookieAnswer]:
        """The agent's answer for each distinct id: a listing, no-ledger or unknown (never raises), each carrying
        the time its index read began (``as_of_ms``: the bookie's write cache may hold entries not in it yet)."""
        return {ledger_id: found.with_as_of() for ledger_id, found in self.fetch(ledger_ids).items()}

    def fetch(self, ledger_ids: Iterable[int]) -> dict[int, AgentAnswer]:
        """Like :meth:`get_listings`, with each answer's as-of time."""
        ids = list(dict.fromkeys(ledger_ids))
        out: dict[int, AgentAnswer] = {}
        valid = []
        for ledger_id in ids:
            if _INT64_MIN <= ledger_id <= _INT64_MAX:
                valid.append(ledger_id)
            else:
                out[ledger_id] = AgentAnswer(BookieAnswer.unknown(f"ledger id {ledger_id} is not a 64-bit integer"))
        chunks = [valid[i : i + self._chunk_size] for i in range(0, len(valid), self._chunk_size)]
        for start in range(0, len(chunks), self._max_in_flight):
            window = chunks[start : start + self._max_in_flight]
            calls = [self._call(chunk) for chunk in window]
            for chunk, call in zip(window, calls, strict=True):
                out.update(self._collect(chunk, call))
        return {ledger_id: out[ledger_id] for ledger_id in ids}

    def health(self) -> pb.HealthResponse:
        """The agent's Health answer. Raises ``grpc.RpcError`` on failure (a tool's call, not the checker's)."""
        response: pb.HealthResponse = self._health(pb.HealthRequest(), timeout=self._timeout_s, metadata=self._metadata)
        return response

    def ledgers_page(self, after_ledger_id: int = LISTING_START, max_ledgers: int = 0) -> LedgerPage:
        """One page of the ledgers the bookie's index holds: those above ``after_ledger_id``, ascending, at most
        ``max_ledgers`` (0: the agent's default; the agent may give fewer, never more).

        Raises :class:`AgentListingError` when the call fails (with its gRPC code), when the agent serves another
        bookie than ``expected_bookie_id`` or does not say which, and for a page that breaks the protocol (ids not
        strictly ascending above ``after_ledger_id``, more ledgers than asked, an empty page that does not end the
        listing, impossible entry ids). :class:`AgentClientError` for arguments out of range.
        """
        if not LISTING_START <= after_ledger_id <= _INT64_MAX or not 0 <= max_ledgers <= _INT32_MAX:
            raise AgentClientError(f"cannot ask for {max_ledgers} ledgers after {after_ledger_id}")
        request = pb.LedgersRequest(after_ledger_id=after_ledger_id, max_ledgers=max_ledgers)
        try:
            response: pb.LedgersPage = self._list_ledgers(request, timeout=self._timeout_s, metadata=self._metadata)
        except grpc.RpcError as error:
            status = error.code() if hasattr(error, "code") else None
            code = str(status.name) if status is not None else None
            raise AgentListingError(
                f"agent {self.target}: ListLedgers after {after_ledger_id} failed: {code or 'RPC error'}: "
                f"{_details(error)}",
                code=code,
            ) from error
        except Exception as error:  # e.g. a closed channel
            raise AgentListingError(
                f"agent {self.target}: ListLedgers after {after_ledger_id} failed: {type(error).__name__}: {error}"
            ) from error
        problem = self._bookie_problem(response.bookie_id) or _page_problem(response, after_ledger_id, max_ledgers)
        if problem:
            raise AgentListingError(
                f"agent {self.target}: refused a page of ledgers after {after_ledger_id}: {problem}"
            )
        ledgers = tuple(
            HeldLedger(h.ledger_id, h.has_ledger_record, h.limbo, h.first_entry_id, h.last_entry_id)
            for h in response.ledgers
        )
        return LedgerPage(ledgers, end=response.end, as_of_ms=response.as_of_ms)

    def ledger_pages(
        self, page_size: int = DEFAULT_LEDGERS_PER_PAGE, *, after_ledger_id: int = LISTING_START
    ) -> Iterator[LedgerPage]:
        """Every page of the bookie's held ledgers above ``after_ledger_id``, in order, until the one that ends the
        listing; one page in memory at a time. Raises :class:`AgentListingError` as :meth:`ledgers_page` does (every
        page holds progress: the listing always ends)."""
        if page_size < 1:
            raise AgentClientError(f"page_size must be at least 1, not {page_size}")
        after = after_ledger_id
        while True:
            page = self.ledgers_page(after, page_size)
            yield page
            if page.end:
                return
            after = page.ledgers[-1].ledger_id  # not empty: ledgers_page refuses an empty page that does not end

    def held_ledgers(
        self, page_size: int = DEFAULT_LEDGERS_PER_PAGE, *, after_ledger_id: int = LISTING_START
    ) -> Iterator[HeldLedger]:
        """Every ledger the bookie's index holds (above ``after_ledger_id``), ascending, read ``page_size`` per call;
        raises :class:`AgentListingError` as :meth:`ledgers_page` does, after the ledgers of the pages before."""
        for page in self.ledger_pages(page_size, after_ledger_id=after_ledger_id):
            yield from page.ledgers

    def read_entry_headers(self, pairs: Iterable[tuple[int, int]]) -> dict[tuple[int, int], EntryHeader | str]:
        """The header of each distinct ``(ledger id, entry id)`` as the agent's bookie returns the entry to a plain
        READ_ENTRY, or why there is none (the bookie's status, a timeout, bytes that are no header for the entry).

        One call for all of them (at most the agent's per-call limit; no splitting), with the client's deadline.
        Raises :class:`AgentCallError` when the call fails (``code``: ``UNIMPLEMENTED`` for an agent that has no
        bookie address to read from, ``INVALID_ARGUMENT`` for too many entries, ``UNAVAILABLE``, ...), when the agent
        serves another bookie than ``expected_bookie_id`` or does not say which, and when its answer is not one result
        per entry asked, in order, each for that entry, with a possible header. :class:`AgentClientError` for ids
        outside 0..2**63-1.
        """
        wanted = list(dict.fromkeys(pairs))
        for ledger_id, entry_id in wanted:
            if not 0 <= ledger_id <= _INT64_MAX or not 0 <= entry_id <= _INT64_MAX:
                raise AgentClientError(f"entry {ledger_id}:{entry_id} is outside the ids a bookie can hold")
        if not wanted:
            return {}
        request = pb.EntryHeadersRequest(entries=[pb.EntryRef(ledger_id=lid, entry_id=eid) for lid, eid in wanted])
        what = f"agent {self.target}: ReadEntryHeaders of {len(wanted)} entries"
        try:
            response: pb.EntryHeadersResponse = self._read_entry_headers(
                request, timeout=self._timeout_s, metadata=self._metadata
            )
        except grpc.RpcError as error:
            status = error.code() if hasattr(error, "code") else None
            code = str(status.name) if status is not None else None
            raise AgentCallError(f"{what} failed: {code or 'RPC error'}: {_details(error)}", code=code) from error
        except Exception as error:  # e.g. a closed channel
            raise AgentCallError(f"{what} failed: {type(error).__name__}: {error}") from error
        problem = self._bookie_problem(response.bookie_id)
        if problem:
            raise AgentCallError(f"{what}: refused the answer: {problem}")
        if len(response.results) != len(wanted):
            raise AgentCallError(f"{what}: refused the answer: {len(response.results)} results")
        out: dict[tuple[int, int], EntryHeader | str] = {}
        for pair, result in zip(wanted, response.results, strict=True):
            header = _header_of(pair, result)
            if header is None:
                raise AgentCallError(
                    f"{what}: refused the answer: a result for entry {result.ledger_id}:{result.entry_id}"
                    f" (found={result.found}, last-add-confirmed {result.last_add_confirmed}, length {result.length})"
                    f" where entry {pair[0]}:{pair[1]} was asked"
                )
            out[pair] = header
        return out

    def _bookie_problem(self, bookie_id: str) -> str:
        expected = self._expected_bookie_id
        if expected is None or bookie_id == expected:
            return ""
        if not bookie_id:
            return f"the agent does not say which bookie it serves (expected {expected!r})"
        return f"the agent serves bookie {bookie_id!r}, not {expected!r}"

    def _call(self, chunk: Sequence[int]) -> Any:
        """The call's future, or a :class:`_NotSent` when it could not even start (e.g. a closed channel)."""
        try:
            return self._get_listings.future(
                pb.ListingsRequest(ledger_ids=chunk), timeout=self._timeout_s, metadata=self._metadata
            )
        except Exception as error:
            return _NotSent(error)

    def _collect(self, chunk: Sequence[int], call: Any) -> dict[int, AgentAnswer]:
        try:
            if isinstance(call, _NotSent):  # (a gRPC future is itself an Exception: test for this type)
                raise call.error
            response: pb.ListingsResponse = call.result()
        except grpc.RpcError as error:
            return self._all_unknown(chunk, f"{_code(error)}: {_details(error)}")
        except Exception as error:
            return self._all_unknown(chunk, f"{type(error).__name__}: {error}")
        expected = self._expected_bookie_id
        if expected is not None and response.bookie_id != expected:
            if not response.bookie_id:  # it cannot show it serves this bookie: its answers could be another's
                return self._all_unknown(
                    chunk, f"the agent does not say which bookie it serves (expected {expected!r})"
                )
            return self._all_unknown(chunk, f"the agent serves bookie {response.bookie_id!r}, not {expected!r}")
        by_id = {listing.ledger_id: listing for listing in response.listings}
        out: dict[int, AgentAnswer] = {}
        for ledger_id in chunk:
            listing = by_id.get(ledger_id)
            if listing is None:
                out[ledger_id] = AgentAnswer(BookieAnswer.unknown(f"agent {self.target} did not answer this ledger"))
            else:
                out[ledger_id] = _answer_of(listing)
        return out

    def _all_unknown(self, chunk: Sequence[int], reason: str) -> dict[int, AgentAnswer]:
        answer = AgentAnswer(BookieAnswer.unknown(f"agent {self.target}: {reason}"))
        return dict.fromkeys(chunk, answer)


@dataclass(frozen=True, slots=True)
class _NotSent:
    error: Exception


def _page_problem(page: pb.LedgersPage, after: int, asked: int) -> str:
    """Why a ``LedgersPage`` cannot be trusted (empty when it can)."""
    ids = [held.ledger_id for held in page.ledgers]
    problem = page_problem(ids, end=page.end, after_ledger_id=after, limit=asked)
    if problem:
        return problem
    for held in page.ledgers:
        first, last = held.first_entry_id, held.last_entry_id
        if (first, last) != (NO_ENTRY, NO_ENTRY) and not 0 <= first <= last:
            return f"ledger {held.ledger_id}: entries {first} to {last}"
        if not held.has_ledger_record and first == NO_ENTRY:
            return f"ledger {held.ledger_id}: neither a record nor an entry"
    return ""


def _answer_of(listing: pb.LedgerListing) -> AgentAnswer:
    """One ``LedgerListing`` as a checker's answer."""
    status = listing.status
    if status == _POSITIVE:
        try:
            groups = decode_listing_compact(listing.listing)
        except ValueError as error:  # ListingFormatError, or anything else a bad listing provokes
            return AgentAnswer(BookieAnswer.unknown(f"agent sent a malformed listing: {error}"))
        as_of = listing.as_of_ms
        return AgentAnswer(BookieAnswer.listing(groups, as_of), as_of)
    if status == _NO_LEDGER:
        as_of = listing.as_of_ms
        return AgentAnswer(BookieAnswer.no_ledger(as_of), as_of)
    if status == _UNKNOWN:
        if listing.limbo:
            return AgentAnswer(BookieAnswer.in_limbo(listing.reason or "ledger in limbo"))
        return AgentAnswer(BookieAnswer.unknown(listing.reason or "agent gave no reason"))
    return AgentAnswer(BookieAnswer.unknown(f"agent sent status {status}, which this client does not know"))


def _header_of(pair: tuple[int, int], result: pb.EntryHeaderResult) -> EntryHeader | str | None:
    """One result as a header or the reason there is none; None when it is not for ``pair`` or its header is one no
    writer sends (a last-add-confirmed below -1 or not below the entry, a negative length)."""
    if (result.ledger_id, result.entry_id) != pair:
        return None
    if not result.found:
        return result.reason or "the agent gave no reason"
    if not -1 <= result.last_add_confirmed < result.entry_id or result.length < 0:
        return None
    return EntryHeader(result.ledger_id, result.entry_id, result.last_add_confirmed, result.length)


def _code(error: Any) -> str:
    code = error.code() if hasattr(error, "code") else None
    return str(code.name) if code is not None else "RPC error"


def _details(error: Any) -> str:
    details = error.details() if hasattr(error, "details") else None
    return str(details) if details else str(error)
