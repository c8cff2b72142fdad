"""The bookie agent's gRPC server: answers ``BookieAgent.GetListings``, ``ListLedgers`` and ``Health`` from a
:class:`ListingBackend`, and ``ReadEntryHeaders`` from an optional :class:`HeaderReader`.

The agent runs on a bookie host. The server does what is the same for every backend: token
authentication (``authorization: Bearer <token>`` metadata, compared in constant time; rejected
calls are answered UNAUTHENTICATED, logged without the token and never reach the backend),
optional TLS, bounded requests (ledgers per call, message sizes), bounded concurrency,
graceful shutdown and Prometheus metrics. What a ledger's listing *is* comes from the backend:
today :class:`scrutiny.agent.dbstorage.DbLedgerStorageBackend` (reads DbLedgerStorage's
RocksDB index); a backend that forwards to the local bookie's v3 protocol can implement the same
:class:`ListingBackend` protocol without touching this module. Entry headers come from a :class:`HeaderReader`
(:class:`scrutiny.agent.v3_forward.V3HeaderReader`: plain READ_ENTRY requests to the local bookie); an agent without
one answers ``ReadEntryHeaders`` UNIMPLEMENTED.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from scrutiny.component_metrics import register_component_metrics
from scrutiny.connectors.bookies.agent_protocol import (
    DEFAULT_LEDGERS_PER_PAGE,
    DEFAULT_MAX_LEDGERS_PER_CALL,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    SERVICE_NAME,
    ledgers_per_page_cap,
)
from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.held_ledgers import LISTING_START, HeldLedger, LedgerPage, page_problem
from scrutiny.proto import bookie_agent_pb2 as pb

log = logging.getLogger(__name__)

_RESPONSE_SLACK_BYTES = 4096
_TOO_LARGE = "answer too large for one response; ask for fewer ledgers per call"
#: Why an agent without a header reader cannot answer ReadEntryHeaders.
NO_HEADER_READER = "this agent has no bookie address to read entries from; start it with --bookie-address"
#: Seconds kept from the caller's deadline for answering after the bookie's reads end.
_ANSWER_MARGIN_S = 0.2


class AgentServerError(ScrutinyError):
    """The agent server cannot start (address in use, bad TLS material, bad limits)."""


class ListingNotSupportedError(ScrutinyError):
    """The backend cannot list the ledgers its bookie holds (the message says why); answered UNIMPLEMENTED."""


class ListingCancelledError(ScrutinyError):
    """The caller of a ledger listing gave up before the page was read; answered CANCELLED."""


class ListingStatus(IntEnum):
    """What the agent says about one ledger (values of ``LedgerListing.Status``)."""

    POSITIVE = pb.LedgerListing.Status.POSITIVE
    NO_LEDGER = pb.LedgerListing.Status.NO_LEDGER
    UNKNOWN = pb.LedgerListing.Status.UNKNOWN


_PROTO_STATUS = {
    ListingStatus.POSITIVE: pb.LedgerListing.POSITIVE,
    ListingStatus.NO_LEDGER: pb.LedgerListing.NO_LEDGER,
    ListingStatus.UNKNOWN: pb.LedgerListing.UNKNOWN,
}


@dataclass(frozen=True, slots=True)
class LedgerAnswer:
    """A backend's answer for one ledger; the fields of ``LedgerListing``."""

    ledger_id: int
    status: ListingStatus
    listing: bytes = b""
    reason: str = ""
    as_of_ms: int = 0
    fenced: bool = False
    has_ledger_record: bool = False
    limbo: bool = False

    @classmethod
    def unknown(cls, ledger_id: int, reason: str) -> LedgerAnswer:
        """No usable answer, with the reason."""
        return cls(ledger_id, ListingStatus.UNKNOWN, reason=reason)

    @classmethod
    def in_limbo(cls, ledger_id: int, reason: str) -> LedgerAnswer:
        """No usable answer: the ledger is in limbo on the bookie (BP-46)."""
        return cls(ledger_id, ListingStatus.UNKNOWN, reason=reason, limbo=True)

    def add_to(self, listings: Any) -> pb.LedgerListing:
        """The wire message, added to ``listings`` (a response's repeated ``LedgerListing`` field) and built there: an
        appended message would be copied into it."""
        message: pb.LedgerListing = listings.add(
            ledger_id=self.ledger_id,
            status=_PROTO_STATUS[self.status],
            reason=self.reason,
            listing=self.listing,
            as_of_ms=self.as_of_ms,
            fenced=self.fenced,
            has_ledger_record=self.has_ledger_record,
            limbo=self.limbo,
        )
        return message


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """Whether one source of answers (a ledger directory for DbLedgerStorage) is readable now."""

    index: int
    path: str
    ok: bool
    reason: str = ""
    caught_up_ms: int = 0


#: Whether the caller of a listing call gave up (checked by the backend as it goes).
Cancelled = Callable[[], bool]


def never() -> bool:
    """A call that is never cancelled (direct calls, tests)."""
    return False


#: The answer's reason for the ledgers not read because the caller gave up.
CANCELLED_REASON = "the caller cancelled the call"


class ListingBackend(Protocol):
    """Where listings come from. Implementations must be safe to call from several threads."""

    def get_listings(self, ledger_ids: Sequence[int], *, cancelled: Cancelled = never) -> list[LedgerAnswer]:
        """One answer per id of ``ledger_ids`` (distinct), in order.

        Storage trouble is answered as ``UNKNOWN`` with a reason, never as ``NO_LEDGER`` and never
        raised; the server turns an unexpected exception into ``UNKNOWN`` answers too. ``cancelled`` becomes true
        when the caller gave up (its deadline passed, it went away): a backend that works ledger by ledger stops
        then and answers the rest ``UNKNOWN``, so an abandoned call does not hold its slot.
        """
        ...

    def list_ledgers(self, after_ledger_id: int, max_ledgers: int, *, cancelled: Cancelled = never) -> LedgerPage:
        """One page of the ledgers the bookie holds: those with an id above ``after_ledger_id`` (:data:`LISTING_START`
        for the first page), ascending, at most ``max_ledgers`` (at least 1) of them; ``end`` only when no held
        ledger is above the page's last one.

        Raises :class:`ListingNotSupportedError` when the backend has no way to list, :class:`ListingCancelledError`
        once ``cancelled`` (checked as it goes), and anything else (e.g. an index that cannot be read) when the page
        cannot be complete: a backend never returns a partial page as if it were whole.
        """
        ...

    def health(self) -> list[SourceHealth]:
        """The state of each source, checked now."""
        ...

    def close(self) -> None:
        """Release everything; called once, after the last call has finished."""
        ...


#: One entry: (ledger id, entry id).
EntryRef = tuple[int, int]


class HeaderReader(Protocol):
    """Where entry headers come from (the local bookie's v3 READ_ENTRY). Safe to call from several threads."""

    def read_entry_headers(self, pairs: Sequence[EntryRef], *, timeout_s: float) -> dict[EntryRef, EntryHeader | str]:
        """The header of each entry of ``pairs`` (distinct, ids non-negative) as the bookie returns it, or why there
        is none (the bookie's status, a timeout, bytes that are no header for it), within about ``timeout_s``.

        Raises only when no entry could be asked at all (e.g. the reader is closed); the server answers UNAVAILABLE.
        """
        ...

    def close(self) -> None:
        """Release everything; called once, after the last call has finished (not when it is the backend itself)."""
        ...


class AgentMetrics:
    """The agent's Prometheus metrics, on a registry of their own (several agents per process in tests)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = registry if registry is not None else CollectorRegistry()
        self.requests = Counter(
            "scrutiny_agent_requests",
            "Calls by method and gRPC status code",
            ["method", "code"],
            registry=registry,
        )
        self.ledgers = Counter(
            "scrutiny_agent_ledgers_answered", "Ledgers answered, by status", ["status"], registry=registry
        )
        self.listed = Counter(
            "scrutiny_agent_ledgers_listed", "Held ledgers sent in ListLedgers pages", registry=registry
        )
        self.latency = Histogram(
            "scrutiny_agent_request_duration_seconds",
            "Time to serve a call",
            ["method"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )
        self.entry_headers = Counter(
            "scrutiny_agent_entry_headers",
            "Entries answered by ReadEntryHeaders, by whether their header was found",
            ["found"],
            registry=registry,
        )
        self.in_flight = Gauge("scrutiny_agent_in_flight_requests", "Calls being served", registry=registry)
        self.catch_up = Histogram(
            "scrutiny_agent_catch_up_duration_seconds",
            "Time to catch a secondary instance up with the bookie's database",
            ["directory", "database"],
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=registry,
        )
        self.catch_up_failures = Counter(
            "scrutiny_agent_catch_up_failures",
            "Catch-ups (or opens) that failed",
            ["directory", "database"],
            registry=registry,
        )
        register_component_metrics(registry)
        self._http: WSGIServer | None = None

    def observe_catch_up(self, directory: int, database: str, seconds: float, ok: bool) -> None:
        """Record one catch-up (the DbLedgerStorage backend's ``on_catch_up`` callback)."""
        labels = {"directory": str(directory), "database": database}
        self.catch_up.labels(**labels).observe(seconds)
        if not ok:
            self.catch_up_failures.labels(**labels).inc()

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` over HTTP on ``host:port`` (0: any free port); returns the bound port."""
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as error:
            raise AgentServerError(f"cannot serve metrics on {host}:{port}: {error.strerror or error}") from error
        self._http = server
        return int(server.server_port)

    def stop(self) -> None:
        """Stop the metrics HTTP server, if started."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


@dataclass(frozen=True)
class AgentServerConfig:
    """How the server listens and what it accepts. ``token`` None means no authentication."""

    listen: str = "127.0.0.1:0"
    bookie_id: str = ""
    token: str | None = field(default=None, repr=False)
    tls_cert_chain: bytes | None = field(default=None, repr=False)
    tls_private_key: bytes | None = field(default=None, repr=False)
    max_ledgers_per_call: int = DEFAULT_MAX_LEDGERS_PER_CALL
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_concurrent_calls: int = 4
    grace_s: float = 5.0
    #: The longest a ReadEntryHeaders call waits for the bookie (less when the caller's deadline is nearer).
    entry_read_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if (self.tls_cert_chain is None) != (self.tls_private_key is None):
            raise AgentServerError("TLS needs both a certificate chain and a private key")
        if self.token is not None and not self.token:
            raise AgentServerError("the token is empty")
        for name in ("max_ledgers_per_call", "max_request_bytes", "max_response_bytes", "max_concurrent_calls"):
            if getattr(self, name) < 1:
                raise AgentServerError(f"{name} must be at least 1")
        if not self.entry_read_timeout_s > 0:
            raise AgentServerError("entry_read_timeout_s must be positive")


class AgentServer:
    """The gRPC server around a backend. ``start`` binds and serves; ``stop`` drains and closes the backend.

    ``header_reader`` answers ``ReadEntryHeaders`` (None: that call is UNIMPLEMENTED); ``stop`` closes it too, unless
    it is the backend itself.
    """

    def __init__(
        self,
        backend: ListingBackend,
        config: AgentServerConfig,
        metrics: AgentMetrics | None = None,
        *,
        header_reader: HeaderReader | None = None,
    ) -> None:
        self.backend = backend
        self.header_reader = header_reader
        self.config = config
        self.metrics = metrics if metrics is not None else AgentMetrics()
        self._server: Any = None
        self._executor: ThreadPoolExecutor | None = None
        self._port = 0
        self._stopped = threading.Event()

    @property
    def port(self) -> int:
        """The bound port (after ``start``)."""
        return self._port

    def start(self) -> int:
        """Bind ``config.listen`` and start serving; returns the bound port. Raises :class:`AgentServerError`."""
        cfg = self.config
        self._executor = ThreadPoolExecutor(max_workers=cfg.max_concurrent_calls, thread_name_prefix="agent-rpc")
        server = grpc.server(
            self._executor,
            handlers=[self._handlers()],
            interceptors=[_TokenInterceptor(cfg.token, self.metrics)] if cfg.token is not None else [],
            options=[
                ("grpc.max_receive_message_length", cfg.max_request_bytes),
                ("grpc.max_send_message_length", cfg.max_response_bytes),
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=cfg.max_concurrent_calls,
        )
        try:
            if cfg.tls_cert_chain is not None and cfg.tls_private_key is not None:
                credentials = grpc.ssl_server_credentials([(cfg.tls_private_key, cfg.tls_cert_chain)])
                port = server.add_secure_port(cfg.listen, credentials)
            else:
                port = server.add_insecure_port(cfg.listen)
        except (RuntimeError, ValueError) as error:
            self._executor.shutdown(wait=False)
            raise AgentServerError(f"cannot listen on {cfg.listen}: {error}") from error
        if not port:
            self._executor.shutdown(wait=False)
            raise AgentServerError(f"cannot listen on {cfg.listen}")
        server.start()
        self._server, self._port = server, int(port)
        return self._port

    def stop(self, grace_s: float | None = None) -> None:
        """Stop accepting calls, let in-flight calls finish within the grace period, then close the backend.

        Idempotent. Calls still running after the grace period are cancelled; the backend is
        closed only once their threads have returned.
        """
        if self._stopped.is_set():
            return
        self._stopped.set()
        grace = self.config.grace_s if grace_s is None else grace_s
        if self._server is not None:
            self._server.stop(grace).wait(grace + 5.0)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        try:
            self.backend.close()
        finally:
            reader: object = self.header_reader
            if self.header_reader is not None and reader is not self.backend:
                self.header_reader.close()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until ``stop`` was called (or the timeout passes); True when stopped."""
        return self._stopped.wait(timeout_s)

    def _handlers(self) -> Any:
        methods = {
            "GetListings": grpc.unary_unary_rpc_method_handler(
                self._timed("GetListings", self._get_listings),
                request_deserializer=pb.ListingsRequest.FromString,
                response_serializer=pb.ListingsResponse.SerializeToString,
            ),
            "Health": grpc.unary_unary_rpc_method_handler(
                self._timed("Health", self._health),
                request_deserializer=pb.HealthRequest.FromString,
                response_serializer=pb.HealthResponse.SerializeToString,
            ),
            "ListLedgers": grpc.unary_unary_rpc_method_handler(
                self._timed("ListLedgers", self._list_ledgers),
                request_deserializer=pb.LedgersRequest.FromString,
                response_serializer=pb.LedgersPage.SerializeToString,
            ),
            "ReadEntryHeaders": grpc.unary_unary_rpc_method_handler(
                self._timed("ReadEntryHeaders", self._read_entry_headers),
                request_deserializer=pb.EntryHeadersRequest.FromString,
                response_serializer=pb.EntryHeadersResponse.SerializeToString,
            ),
        }
        return grpc.method_handlers_generic_handler(SERVICE_NAME, methods)

    def _timed(self, method: str, serve: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        metrics = self.metrics

        def handler(request: Any, context: Any) -> Any:
            started = time.perf_counter()
            metrics.in_flight.inc()
            code = "OK"
            try:
                return serve(request, context)
            except Exception:
                code = _code_name(context)
                raise
            finally:
                metrics.in_flight.dec()
                metrics.latency.labels(method=method).observe(time.perf_counter() - started)
                metrics.requests.labels(method=method, code=code).inc()

        return handler

    def _get_listings(self, request: pb.ListingsRequest, context: Any) -> pb.ListingsResponse:
        ids = list(dict.fromkeys(request.ledger_ids))
        limit = self.config.max_ledgers_per_call
        if len(ids) > limit:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{len(ids)} ledgers in one call; at most {limit}")
        answers = self._answers(ids, lambda: not context.is_active())
        response = pb.ListingsResponse(bookie_id=self.config.bookie_id)
        listings = response.listings
        budget = self.config.max_response_bytes - _RESPONSE_SLACK_BYTES
        answered = dict.fromkeys(ListingStatus, 0)
        for answer in answers:
            sent = answer
            size = sent.add_to(listings).ByteSize() + 8
            if size > budget:
                del listings[-1]
                sent = LedgerAnswer.unknown(answer.ledger_id, _TOO_LARGE)
                size = sent.add_to(listings).ByteSize() + 8
            budget -= size
            answered[sent.status] += 1
        for status, count in answered.items():  # the counters counted once a call, not once a ledger
            if count:
                self.metrics.ledgers.labels(status=status.name).inc(count)
        return response

    def _answers(self, ids: list[int], cancelled: Cancelled) -> list[LedgerAnswer]:
        if not ids:
            return []
        try:
            answers = self.backend.get_listings(ids, cancelled=cancelled)
        except Exception as error:
            log.exception("the listing backend failed on a batch of %d ledgers", len(ids))
            return [LedgerAnswer.unknown(i, f"agent backend error: {type(error).__name__}: {error}") for i in ids]
        by_id = {answer.ledger_id: answer for answer in answers}
        return [by_id.get(i) or LedgerAnswer.unknown(i, "the agent's backend gave no answer") for i in ids]

    @property
    def ledgers_per_page(self) -> int:
        """The most ledgers one ListLedgers page holds: the per-call limit, lower when the response size needs it."""
        return ledgers_per_page_cap(self.config.max_ledgers_per_call, self.config.max_response_bytes)

    def _list_ledgers(self, request: pb.LedgersRequest, context: Any) -> pb.LedgersPage:
        after, asked = request.after_ledger_id, request.max_ledgers
        if after < LISTING_START:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"after_ledger_id {after} is below {LISTING_START}")
        if asked < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"max_ledgers {asked} is negative")
        cap = self.ledgers_per_page
        limit = min(asked or DEFAULT_LEDGERS_PER_PAGE, cap)
        try:
            page = self.backend.list_ledgers(after, limit, cancelled=lambda: not context.is_active())
        except ListingNotSupportedError as error:
            code, problem = grpc.StatusCode.UNIMPLEMENTED, f"this agent cannot list its bookie's ledgers: {error}"
        except ListingCancelledError:
            code, problem = grpc.StatusCode.CANCELLED, CANCELLED_REASON
        except Exception as error:
            log.exception("the listing backend failed to list the ledgers after %d", after)
            code = grpc.StatusCode.UNAVAILABLE
            problem = f"cannot list the bookie's ledgers: {type(error).__name__}: {error}"
        else:
            ids = [ledger.ledger_id for ledger in page.ledgers]
            problem = page_problem(ids, end=page.end, after_ledger_id=after, limit=limit)
            if not problem:
                response = pb.LedgersPage(end=page.end, bookie_id=self.config.bookie_id, as_of_ms=page.as_of_ms)
                response.ledgers.extend(_held_ledger_proto(ledger) for ledger in page.ledgers)
                self.metrics.listed.inc(len(page.ledgers))
                return response
            log.error("the listing backend returned a bad page after ledger %d: %s", after, problem)
            code, problem = grpc.StatusCode.UNAVAILABLE, f"the agent's backend returned a bad page: {problem}"
        context.abort(code, problem)
        raise AssertionError("unreachable: abort raises")

    def _read_entry_headers(self, request: pb.EntryHeadersRequest, context: Any) -> pb.EntryHeadersResponse:
        pairs = list(dict.fromkeys((entry.ledger_id, entry.entry_id) for entry in request.entries))
        limit = self.config.max_ledgers_per_call
        if len(pairs) > limit:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{len(pairs)} entries in one call; at most {limit}")
        bad = next((pair for pair in pairs if pair[0] < 0 or pair[1] < 0), None)
        if bad is not None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"entry {bad[0]}:{bad[1]}: ids are never negative")
        reader = self.header_reader
        if reader is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, NO_HEADER_READER)
            raise AssertionError("unreachable: abort raises")
        headers: dict[EntryRef, EntryHeader | str] = {}
        problem = ""
        if pairs:
            try:
                headers = reader.read_entry_headers(pairs, timeout_s=self._entry_read_timeout(context))
            except Exception as error:
                log.exception("the entry reader failed on a batch of %d entries", len(pairs))
                problem = f"cannot read entries from the bookie: {type(error).__name__}: {error}"
        if problem:
            context.abort(grpc.StatusCode.UNAVAILABLE, problem)
        response = pb.EntryHeadersResponse(bookie_id=self.config.bookie_id)
        budget = self.config.max_response_bytes - _RESPONSE_SLACK_BYTES
        for pair in pairs:
            result = _header_result(pair, headers.get(pair, "the agent's entry reader gave no answer"))
            size = result.ByteSize() + 8
            if size > budget:
                result = pb.EntryHeaderResult(ledger_id=pair[0], entry_id=pair[1], reason=_TOO_LARGE)
                size = result.ByteSize() + 8
            budget -= size
            response.results.append(result)
            self.metrics.entry_headers.labels(found=str(result.found).lower()).inc()
        return response

    def _entry_read_timeout(self, context: Any) -> float:
        """The configured read timeout, shortened to end before the caller's deadline (at least a little time)."""
        seconds = self.config.entry_read_timeout_s
        remaining = context.time_remaining() if hasattr(context, "time_remaining") else None
        if remaining is not None:
            seconds = min(seconds, max(remaining - _ANSWER_MARGIN_S, 0.05))
        return seconds

    def _health(self, _request: pb.HealthRequest, _context: Any) -> pb.HealthResponse:
        response = pb.HealthResponse(bookie_id=self.config.bookie_id)
        for source in self.backend.health():
            response.directories.append(
                pb.DirectoryHealth(
                    index=source.index,
                    path=source.path,
                    ok=source.ok,
                    reason=source.reason,
                    caught_up_ms=source.caught_up_ms,
                )
            )
        return response


def _header_result(pair: EntryRef, header: EntryHeader | str) -> pb.EntryHeaderResult:
    """One entry's wire answer: its header, or why there is none (a header for another entry is none)."""
    ledger_id, entry_id = pair
    if isinstance(header, EntryHeader):
        if (header.ledger_id, header.entry_id) == pair:
            return pb.EntryHeaderResult(
                ledger_id=ledger_id,
                entry_id=entry_id,
                found=True,
                last_add_confirmed=header.last_add_confirmed,
                length=header.length,
            )
        header = f"the bookie returned the header of entry {header.ledger_id}:{header.entry_id}"
    return pb.EntryHeaderResult(ledger_id=ledger_id, entry_id=entry_id, reason=header or "no reason given")


def _held_ledger_proto(ledger: HeldLedger) -> pb.HeldLedger:
    return pb.HeldLedger(
        ledger_id=ledger.ledger_id,
        has_ledger_record=ledger.has_ledger_record,
        limbo=ledger.limbo,
        first_entry_id=ledger.first_entry_id,
        last_entry_id=ledger.last_entry_id,
    )


def _code_name(context: Any) -> str:
    code = context.code() if hasattr(context, "code") else None
    return str(code.name) if code is not None and hasattr(code, "name") else "UNKNOWN"


class _TokenInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """Lets a call through only with ``authorization: Bearer <token>``; otherwise answers UNAUTHENTICATED."""

    def __init__(self, token: str, metrics: AgentMetrics) -> None:
        self._expected = f"Bearer {token}".encode()
        self._metrics = metrics

    def intercept_service(self, continuation: Callable[[Any], Any], handler_call_details: Any) -> Any:
        problem = self._problem(handler_call_details.invocation_metadata or ())
        if problem is None:
            return continuation(handler_call_details)
        method = str(handler_call_details.method).rsplit("/", 1)[-1]
        return grpc.unary_unary_rpc_method_handler(self._rejecter(method, problem))

    def _problem(self, metadata: Sequence[Any]) -> str | None:
        values = [m.value for m in metadata if m.key == "authorization"]
        if not values:
            return "no authorization metadata"
        value = values[0]
        provided = value.encode() if isinstance(value, str) else bytes(value)
        return None if hmac.compare_digest(provided, self._expected) else "wrong token"

    def _rejecter(self, method: str, problem: str) -> Callable[[Any, Any], Any]:
        def reject(_request: Any, context: Any) -> Any:
            log.warning("rejected %s call from %s: %s", method, context.peer(), problem)
            self._metrics.requests.labels(method=method, code="UNAUTHENTICATED").inc()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, problem)

        return reject
