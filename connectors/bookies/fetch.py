"""Entry listings of many (ledger, bookie) pairs at once: batched per bookie, all bookies concurrently, one deadline.

Used by the streaming checker inside Spark's Python workers, from synchronous code, once per
micro-batch and task. :class:`ListingFetcher` keeps its connections between calls:

* one asyncio event loop on a daemon thread runs a :class:`~scrutiny.connectors.bookies.v3_client.BookieV3Pool`
  (BookKeeper's v3 protocol, requests pipelined on one connection per bookie);
* a cache of :class:`~scrutiny.connectors.bookies.agent_client.AgentClient` (the bookie agent's gRPC API,
  many ledgers per call), whose blocking calls run on a bounded thread pool.

Each bookie is reached over the protocol :func:`plan_route` chooses from the configuration and the
bookie's registration. A bookie whose resolved address changed (a restart on another port) gets a
fresh client; the old one is closed. Clients of bookies not asked for :data:`IDLE_CLOSE_S` are closed.

What :meth:`ListingFetcher.fetch` guarantees: one answer per asked (ledger, bookie) pair; anything
that goes wrong (no address, refused connection, deadline, garbage, an internal error) makes exactly
the affected pairs :meth:`~scrutiny.core.verdict.BookieAnswer.unknown` with a reason, never a
NO_LEDGER and never an exception; it returns within the deadline (plus a small grace for the loop).

:func:`shared_fetcher` gives one fetcher per configuration per process (Spark reuses its Python
workers across batches) and closes them at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import math
import os
import ssl
import threading
import time
import typing
from collections.abc import Collection, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, TypeVar

from scrutiny.connectors.bookies.addresses import (
    Address,
    BookieAddressError,
    _registration_info,
    parse_address,
    resolve_bookie_address,
)
from scrutiny.connectors.bookies.agent_client import AgentCallError, AgentClient
from scrutiny.connectors.bookies.agent_protocol import AGENT_ENDPOINT_PROTOCOL
from scrutiny.connectors.bookies.settings import BookiesSection
from scrutiny.connectors.bookies.v3_client import BookieClientConfig, BookieV3Client, BookieV3Pool, client_tls_context
from scrutiny.connectors.bookies.v3_protocol import TLS_MODES, TlsMode
from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.loopback import is_loopback
from scrutiny.core.secret import Secret
from scrutiny.core.verdict import AnswerKind, BookieAnswer
from scrutiny.core.zk_paths import MAX_LEDGER_ID
from scrutiny.core.zk_records import BookieServiceInfo

logger = logging.getLogger(__name__)

T = TypeVar("T")
BookieProtocol = Literal["v3", "agent"]
PROTOCOL_CHOICES: Final = ("auto", "v3", "agent")
#: Clients of a bookie not asked for this long are closed (a bookie that left the cluster).
IDLE_CLOSE_S: Final = 600.0
#: Threads for blocking agent calls (one per bookie being asked; more bookies wait for a thread).
AGENT_THREADS: Final = 64
#: How long past the deadline the caller waits for the loop before giving up on it.
_LOOP_GRACE_S: Final = 2.0
_CLOSE_WAIT_S: Final = 5.0


class FetchConfigError(ScrutinyError, ValueError):
    """A :class:`FetchConfig` that cannot work; the message names the field."""


# --------------------------------------------------------------------------- configuration


class FrozenMap(Mapping[str, str]):
    """An immutable, hashable, picklable ``str -> str`` mapping (for frozen configuration)."""

    __slots__ = ("_data",)

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._data: dict[str, str] = dict(sorted(dict(items).items()))

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(self._data.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._data) == dict(other)

    def __repr__(self) -> str:
        return repr(self._data)

    def __getstate__(self) -> dict[str, str]:
        return self._data

    def __setstate__(self, state: dict[str, str]) -> None:
        self._data = dict(state)


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """How the checker reaches bookies. Frozen, hashable and picklable (it is shipped to Spark executors).

    ``protocol``: ``"auto"`` (the agent for a bookie whose registration advertises a
    ``scrutiny-agent`` endpoint or that has an ``agent_overrides`` entry, else v3), ``"v3"`` or
    ``"agent"``; ``protocols`` overrides it per bookie id (``"v3"`` / ``"agent"``).
    ``request_timeout_s`` bounds one request or call (connecting included) and is the default
    deadline of a whole :meth:`ListingFetcher.fetch`; ``connect_timeout_s`` bounds a v3 connect.
    ``v3_overrides`` / ``agent_overrides`` map bookie ids to ``"host:port"`` (used before the
    registration). ``token`` is sent to agents as a bearer token (never printed), and in clear text only to an
    address of ``agent_overrides`` or on loopback: an agent address from a registration gets it only with TLS
    (else the bookie's answers are unknown, the reason saying so); ``agent_tls``
    makes agent channels TLS, verified against ``agent_ca_file`` (PEM; default: system roots).
    ``v3_tls`` secures v3 connections with TLS, verified against ``v3_ca_file`` (PEM; default:
    system roots) and the bookie's host name; ``v3_tls_mode`` is ``"starttls"`` (BookKeeper's
    in-protocol upgrade, what bookies with TLS enabled speak) or ``"direct"`` (TLS from the first
    byte, for a TLS-terminating proxy); ``v3_cert_file`` / ``v3_key_file`` (PEM) are the client
    certificate and key presented to bookies that require client authentication.
    ``max_ledgers_per_call``: ledgers per agent call. ``max_in_flight_per_bookie``: ledgers in
    flight to one bookie at once (v3: that many requests; agent: that many ledgers' worth of calls,
    at least one call).
    """

    protocol: str = "auto"
    request_timeout_s: float = 5.0
    connect_timeout_s: float = 2.0
    v3_overrides: Mapping[str, str] = field(default_factory=FrozenMap)
    agent_overrides: Mapping[str, str] = field(default_factory=FrozenMap)
    protocols: Mapping[str, str] = field(default_factory=FrozenMap)
    token: Secret = Secret()
    agent_tls: bool = False
    agent_ca_file: str = ""
    v3_tls: bool = False
    v3_ca_file: str = ""
    v3_tls_mode: TlsMode = "starttls"
    v3_cert_file: str = ""
    v3_key_file: str = ""
    max_ledgers_per_call: int = 500
    max_in_flight_per_bookie: int = 1000

    def __post_init__(self) -> None:
        for name in ("v3_overrides", "agent_overrides", "protocols"):
            object.__setattr__(self, name, FrozenMap(getattr(self, name)))
        if self.protocol not in PROTOCOL_CHOICES:
            raise FetchConfigError(f"protocol must be one of {', '.join(PROTOCOL_CHOICES)}, not {self.protocol!r}")
        for bookie_id, protocol in self.protocols.items():
            if protocol not in ("v3", "agent"):
                raise FetchConfigError(f"protocols[{bookie_id!r}] must be v3 or agent, not {protocol!r}")
        for name in ("v3_overrides", "agent_overrides"):
            for bookie_id, address in getattr(self, name).items():
                try:
                    parse_address(address, bookie_id=bookie_id)
                except BookieAddressError as error:
                    raise FetchConfigError(f"{name}[{bookie_id!r}]: {error}") from None
        self._check_numbers()
        if not isinstance(self.token, Secret):
            raise FetchConfigError("token must be a Secret")
        if self.agent_ca_file and not self.agent_tls:
            raise FetchConfigError("agent_ca_file is set but agent_tls is off")
        self._check_v3_tls()

    def _check_v3_tls(self) -> None:
        if self.v3_tls_mode not in TLS_MODES:
            raise FetchConfigError(f"v3_tls_mode must be one of {', '.join(TLS_MODES)}, not {self.v3_tls_mode!r}")
        for name in ("v3_ca_file", "v3_cert_file", "v3_key_file"):
            if getattr(self, name) and not self.v3_tls:
                raise FetchConfigError(f"{name} is set but v3_tls is off")
        if self.v3_key_file and not self.v3_cert_file:
            raise FetchConfigError("v3_key_file is set without v3_cert_file")

    def _check_numbers(self) -> None:
        for name in ("request_timeout_s", "connect_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise FetchConfigError(f"{name} must be a positive number of seconds, not {value!r}")
        for name in ("max_ledgers_per_call", "max_in_flight_per_bookie"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise FetchConfigError(f"{name} must be an integer of at least 1, not {value!r}")

    @property
    def agent_calls_in_flight(self) -> int:
        """Agent calls in flight to one bookie: ``max_in_flight_per_bookie`` ledgers' worth, at least one."""
        return max(1, self.max_in_flight_per_bookie // self.max_ledgers_per_call)


def parse_bookie_map(text: str, *, what: str) -> dict[str, str]:
    """``"bk1=host:port, bk2=v3"`` (comma-separated ``id=value``) as a dict, for flat settings keys.

    Blank text is an empty map. Raises :class:`FetchConfigError` naming ``what`` for an entry
    without ``=``, an empty id or value, or an id given twice. Values are checked by FetchConfig.
    """
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        bookie_id, sep, value = (piece.strip() for piece in item.partition("="))
        if not sep or not bookie_id or not value:
            raise FetchConfigError(f"{what}: {item!r} is not bookie-id=value")
        if bookie_id in out:
            raise FetchConfigError(f"{what}: bookie {bookie_id!r} is given twice")
        out[bookie_id] = value
    return out


def fetch_config_from_settings(section: BookiesSection) -> FetchConfig:
    """The :class:`FetchConfig` of a ``[bookies]`` section; :class:`FetchConfigError` names the ``bookies.`` key."""
    try:
        return FetchConfig(
            protocol=section.protocol,
            request_timeout_s=float(section.request_timeout_seconds),
            connect_timeout_s=float(section.connect_timeout_seconds),
            protocols=parse_bookie_map(section.protocols, what="protocols"),
            v3_overrides=parse_bookie_map(section.v3_overrides, what="v3_overrides"),
            agent_overrides=parse_bookie_map(section.agent_overrides, what="agent_overrides"),
            token=section.agent_token,
            agent_tls=section.agent_tls,
            agent_ca_file=section.agent_ca_file,
            v3_tls=section.v3_tls,
            v3_ca_file=section.v3_ca_file,
            v3_tls_mode=typing.cast(TlsMode, section.v3_tls_mode),  # checked by FetchConfig
            v3_cert_file=section.v3_cert_file,
            v3_key_file=section.v3_key_file,
            max_ledgers_per_call=section.max_ledgers_per_call,
            max_in_flight_per_bookie=section.max_in_flight_per_bookie,
        )
    except FetchConfigError as error:
        raise FetchConfigError(f"bookies.{error}") from None


# --------------------------------------------------------------------------- protocol choice (pure)


@dataclass(frozen=True, slots=True)
class BookieRoute:
    """How to reach one bookie: the protocol, and its address or why there is none."""

    bookie_id: str
    protocol: BookieProtocol
    address: Address | None
    problem: str = ""
    #: The bookie's own v3 address (the agent route's too), where single entries are read; None when unknown.
    bookie_address: Address | None = None

    @property
    def target(self) -> str | None:
        """``host:port`` (``[v6]:port`` for an IPv6 literal), None without an address."""
        if self.address is None:
            return None
        host, port = self.address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _registration(data: bytes | None) -> tuple[BookieServiceInfo | None, str]:
    """The parsed registration (None for none, legacy or undecodable) and what was wrong with it."""
    if data is None:
        return None, "the bookie is not registered"
    return _registration_info(data)


def agent_endpoint(info: BookieServiceInfo | None) -> Address | None:
    """(host, port) of the first ``scrutiny-agent`` endpoint with a host and a valid port, else None."""
    if info is None:
        return None
    for endpoint in info.endpoints:
        if endpoint.protocol == AGENT_ENDPOINT_PROTOCOL and endpoint.host and 0 < endpoint.port <= 65535:
            return endpoint.host, endpoint.port
    return None


def choose_protocol(bookie_id: str, info: BookieServiceInfo | None, config: FetchConfig) -> BookieProtocol:
    """The protocol for ``bookie_id``: its ``protocols`` entry, else the configured one, where ``auto``
    means the agent when the bookie has an agent override or advertises an agent endpoint, else v3."""
    chosen = config.protocols.get(bookie_id, config.protocol)
    if chosen == "v3":
        return "v3"
    if chosen == "agent":
        return "agent"
    has_agent = bookie_id in config.agent_overrides or agent_endpoint(info) is not None
    return "agent" if has_agent else "v3"


def plan_route(bookie_id: str, registration: bytes | None, config: FetchConfig) -> BookieRoute:
    """Protocol and address of ``bookie_id`` given its registration node's bytes (None: not registered).

    v3: :func:`~scrutiny.connectors.bookies.addresses.resolve_bookie_address` (override, then the
    ``bookie-rpc`` endpoint, then the id as host:port). Agent: the override, then the
    ``scrutiny-agent`` endpoint. Never raises; a bookie without an address gets ``problem``.
    """
    info, registration_problem = _registration(registration)
    protocol = choose_protocol(bookie_id, info, config)
    if protocol == "agent":
        override = config.agent_overrides.get(bookie_id)
        address = parse_address(override, bookie_id=bookie_id) if override is not None else agent_endpoint(info)
        if address is not None and override is None and _token_in_clear_text(address, config):
            problem = (
                f"not sending the agent token in clear text to {address[0]}:{address[1]}, an address taken from bookie "
                f"{bookie_id!r}'s registration (anyone who can write ZooKeeper could collect it): turn on "
                "bookies.agent_tls or list the bookie in bookies.agent_overrides"
            )
            return BookieRoute(bookie_id, "agent", None, problem)
        bookie_address = _v3_address(bookie_id, info if info is not None else registration, config)
        if address is not None:
            return BookieRoute(bookie_id, "agent", address, bookie_address=bookie_address)
        why = registration_problem or f"its registration has no {AGENT_ENDPOINT_PROTOCOL} endpoint"
        return BookieRoute(bookie_id, "agent", None, f"no agent address for bookie {bookie_id!r}: {why}")
    try:
        parsed = info if info is not None else registration  # decoded once, above
        address = resolve_bookie_address(bookie_id, overrides=config.v3_overrides, registration=parsed)
    except BookieAddressError as error:
        return BookieRoute(bookie_id, "v3", None, str(error))
    return BookieRoute(bookie_id, "v3", address, bookie_address=address)


def agent_roots(config: FetchConfig) -> bytes | None:
    """The CA certificates agent channels are verified against (None: the system's, or no TLS)."""
    return _read_ca(config.agent_ca_file, "agent_ca_file") if config.agent_tls else None


def open_agent_client(config: FetchConfig, bookie_id: str, target: str, roots: bytes | None) -> AgentClient:
    """A client of ``bookie_id``'s agent at ``target`` with the configuration's token, TLS (``roots``:
    :func:`agent_roots`), limits and timeout; the caller closes it."""
    return AgentClient(
        target,
        token=config.token.reveal() or None,
        tls=config.agent_tls,
        root_certificates=roots,
        chunk_size=config.max_ledgers_per_call,
        timeout_s=config.request_timeout_s,
        max_in_flight=config.agent_calls_in_flight,
        expected_bookie_id=bookie_id,
    )


def _v3_address(bookie_id: str, registration: BookieServiceInfo | bytes | None, config: FetchConfig) -> Address | None:
    try:
        return resolve_bookie_address(bookie_id, overrides=config.v3_overrides, registration=registration)
    except BookieAddressError:
        return None


def _token_in_clear_text(address: Address, config: FetchConfig) -> bool:
    """Whether calling ``address`` would send the token unencrypted off this machine."""
    return bool(config.token.reveal()) and not config.agent_tls and not is_loopback(address[0])


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class BookieFetchStats:
    """One bookie's part of a fetch: protocol used, address, ledgers asked, unknown answers, RPCs, seconds."""

    protocol: BookieProtocol
    address: str | None
    ledgers: int
    unknown: int
    rpcs: int
    seconds: float


@dataclass(frozen=True, slots=True)
class FetchResult:
    """``answers[ledger][bookie]`` for every asked pair; ``rpcs`` = v3 requests + agent calls sent."""

    answers: dict[int, dict[str, BookieAnswer]]
    rpcs: int
    per_bookie: dict[str, BookieFetchStats]
    seconds: float


@dataclass(frozen=True, slots=True)
class _Outcome:
    answers: dict[int, BookieAnswer]
    rpcs: int
    seconds: float


def _valid_ledger_id(ledger_id: object) -> bool:
    return isinstance(ledger_id, int) and not isinstance(ledger_id, bool) and 0 <= ledger_id <= MAX_LEDGER_ID


def group_by_bookie(wanted: Mapping[int, Collection[str]]) -> dict[str, list[int]]:
    """Bookie id -> the distinct valid ledger ids to ask it, in first-seen order."""
    by_bookie: dict[str, dict[int, None]] = {}
    for ledger_id, bookies in wanted.items():
        if _valid_ledger_id(ledger_id):
            for bookie_id in bookies:
                by_bookie.setdefault(bookie_id, {})[ledger_id] = None
    return {bookie_id: list(ledgers) for bookie_id, ledgers in by_bookie.items()}


def _assemble(
    wanted: Mapping[int, Collection[str]],
    routes: Mapping[str, BookieRoute],
    outcomes: Mapping[str, _Outcome],
    seconds: float,
) -> FetchResult:
    answers: dict[int, dict[str, BookieAnswer]] = {}
    for ledger_id, bookies in wanted.items():
        row = answers.setdefault(ledger_id, {})
        if not _valid_ledger_id(ledger_id):
            row.update(dict.fromkeys(bookies, BookieAnswer.unknown(f"ledger id {ledger_id!r} is outside 0..2^63-1")))
            continue
        for bookie_id in bookies:
            found = outcomes[bookie_id].answers.get(ledger_id)
            row[bookie_id] = found if found is not None else BookieAnswer.unknown("no answer was collected")
    per_bookie: dict[str, BookieFetchStats] = {}
    for bookie_id, outcome in outcomes.items():
        route = routes[bookie_id]
        unknown = sum(1 for a in outcome.answers.values() if a.kind is AnswerKind.UNKNOWN)
        per_bookie[bookie_id] = BookieFetchStats(
            route.protocol, route.target, len(outcome.answers), unknown, outcome.rpcs, outcome.seconds
        )
    rpcs = sum(o.rpcs for o in outcomes.values())
    return FetchResult(answers, rpcs, per_bookie, seconds)


def _all_unknown(ledgers: Iterable[int], reason: str) -> dict[int, BookieAnswer]:
    return dict.fromkeys(ledgers, BookieAnswer.unknown(reason))


# --------------------------------------------------------------------------- the fetcher


class ListingFetcher:
    """Fetches entry listings over v3 and the agent API; keeps connections between calls (see the module doc).

    Construction starts the loop thread and raises :class:`FetchConfigError` when a CA file cannot
    be read. Thread-safe. Do not call :meth:`fetch` from an event loop that also serves the bookies
    (it blocks the calling thread); from async code use ``asyncio.to_thread(fetcher.fetch, ...)``.
    """

    def __init__(self, config: FetchConfig) -> None:
        self.config = config
        self._v3_ssl = _v3_ssl_context(config)
        self._agent_roots = agent_roots(config)
        self._v3_addresses: dict[str, Address] = {}
        self._pool = BookieV3Pool(
            lambda bookie_id: self._v3_addresses[bookie_id],
            config=BookieClientConfig(
                request_timeout_s=config.request_timeout_s,
                connect_timeout_s=config.connect_timeout_s,
                tls_mode=config.v3_tls_mode,
            ),
            ssl=self._v3_ssl,
        )
        self._agents: dict[str, AgentClient] = {}
        self._last_used: dict[tuple[BookieProtocol, str], float] = {}
        self._agent_pool = concurrent.futures.ThreadPoolExecutor(AGENT_THREADS, thread_name_prefix="scrutiny-agent")
        self._lock = threading.Lock()
        self._closed = False
        self.pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="scrutiny-listing-fetch", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"ListingFetcher({self.config!r}, closed={self._closed})"

    def __enter__(self) -> ListingFetcher:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def fetch(
        self,
        wanted: Mapping[int, Collection[str]],
        registrations: Mapping[str, bytes | None],
        *,
        timeout_s: float | None = None,
        ends: Mapping[int, int] | None = None,
    ) -> FetchResult:
        """Every bookie's answer for every ledger asked of it, within ``timeout_s`` (default: the request timeout).

        ``wanted``: ledger id -> bookie ids to ask. ``registrations``: bookie id -> its registration
        node's bytes (missing or None: not registered). ``ends``: closed ledgers' lastEntryId; a bookie
        whose listing goes past it is asked (READ_ENTRY: on its v3 connection, or through its agent, which
        forwards it to its bookie) for the highest entry it holds after it, whose header becomes the answer's
        ``beyond`` (left None when the read fails).
        Never raises for anything a bookie, the network or the inputs do; every pair gets an answer
        (see the module doc).
        """
        started = time.monotonic()
        seconds = self.config.request_timeout_s
        if timeout_s is not None and math.isfinite(timeout_s):
            seconds = max(float(timeout_s), 0.0)
        by_bookie = group_by_bookie(wanted)
        routes = {b: self._route(b, registrations.get(b)) for b in by_bookie}
        outcomes = self._run_jobs(by_bookie, routes, seconds, ends or {})
        result = _assemble(wanted, routes, outcomes, time.monotonic() - started)
        logger.debug(
            "fetched %d ledgers from %d bookies: %d RPCs in %.3f s",
            len(wanted),
            len(by_bookie),
            result.rpcs,
            result.seconds,
        )
        return result

    def _route(self, bookie_id: str, registration: bytes | None) -> BookieRoute:
        try:
            return plan_route(bookie_id, registration, self.config)
        except Exception as error:  # inputs of a wrong type: that bookie's answers are unknown, nothing raises
            logger.warning("cannot plan a route to bookie %r: %s", bookie_id, error)
            return BookieRoute(bookie_id, "v3", None, f"cannot plan a route to bookie {bookie_id!r}: {error}")

    def _run_jobs(
        self, by_bookie: dict[str, list[int]], routes: dict[str, BookieRoute], seconds: float, ends: Mapping[int, int]
    ) -> dict[str, _Outcome]:
        """Runs the bookies' jobs on the loop; on any failure of the loop itself, everything is unknown."""
        if not by_bookie:
            return {}
        problem = self._unusable()
        if problem is None:
            try:
                future = asyncio.run_coroutine_threadsafe(self._fetch_all(by_bookie, routes, seconds, ends), self._loop)
            except RuntimeError as error:  # the loop was closed in the meantime
                problem = f"the fetcher's event loop is gone ({error})"
            else:
                try:
                    return future.result(seconds + _LOOP_GRACE_S)
                except Exception as error:
                    future.cancel()
                    logger.warning("listing fetch did not complete: %s", error or type(error).__name__)
                    problem = f"the fetch did not complete ({error or type(error).__name__})"
        return {b: _Outcome(_all_unknown(ledgers, problem), 0, 0.0) for b, ledgers in by_bookie.items()}

    def _unusable(self) -> str | None:
        if self._closed:
            return "the listing fetcher is closed"
        if os.getpid() != self.pid or not self._thread.is_alive():
            return "the listing fetcher's loop thread is not running (forked process?)"
        if threading.current_thread() is self._thread:
            return "fetch was called from the fetcher's own event loop"
        return None

    # ----------------------------------------------------------------------- on the loop

    async def _fetch_all(
        self, by_bookie: dict[str, list[int]], routes: dict[str, BookieRoute], seconds: float, ends: Mapping[int, int]
    ) -> dict[str, _Outcome]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        await self._close_idle()
        tasks = {
            bookie_id: loop.create_task(self._fetch_bookie(routes[bookie_id], ledgers, deadline, ends))
            for bookie_id, ledgers in by_bookie.items()
        }
        await asyncio.wait(tasks.values(), timeout=seconds + _LOOP_GRACE_S / 2)
        outcomes: dict[str, _Outcome] = {}
        for bookie_id, task in tasks.items():
            if task.done() and not task.cancelled() and task.exception() is None:
                outcomes[bookie_id] = task.result()
            else:
                task.cancel()
                outcomes[bookie_id] = _Outcome(_all_unknown(by_bookie[bookie_id], "no answer by the deadline"), 0, 0.0)
        return outcomes

    async def _fetch_bookie(
        self, route: BookieRoute, ledgers: list[int], deadline: float, ends: Mapping[int, int]
    ) -> _Outcome:
        """One bookie's answers; never raises (an unexpected error makes them unknown and is logged)."""
        started = time.monotonic()
        if route.address is None:
            return _Outcome(_all_unknown(ledgers, route.problem), 0, 0.0)
        self._last_used[(route.protocol, route.bookie_id)] = time.monotonic()
        try:
            if route.protocol == "agent":
                answers, rpcs = await self._ask_agent(route, ledgers, deadline)
            else:
                answers, rpcs = await self._ask_v3(route, route.address, ledgers, deadline)
        except Exception as error:
            logger.exception("fetching listings from bookie %s failed", route.bookie_id)
            answers, rpcs = _all_unknown(ledgers, f"internal error: {type(error).__name__}: {error}"), 0
        try:
            rpcs += await self._read_beyond(route, answers, ends, deadline)
        except Exception:  # the listings stand without the headers
            logger.exception("reading entries beyond the end from bookie %s failed", route.bookie_id)
        return _Outcome(answers, rpcs, time.monotonic() - started)

    async def _read_beyond(
        self, route: BookieRoute, answers: dict[int, BookieAnswer], ends: Mapping[int, int], deadline: float
    ) -> int:
        """Give each listing that goes past its closed ledger's end the header of the highest entry after it; the
        requests sent. A v3 route reads it on its connection; an agent route asks the agent to read it from its bookie
        (so a checker that reaches only the agent keeps the proof), and from the bookie itself only when the agent
        cannot (an agent without the bookie's address, or an older one)."""
        highest = {
            ledger: top
            for ledger, answer in answers.items()
            if ledger in ends
            and answer.kind is AnswerKind.LISTING
            and (top := max((g.last for g in answer.groups), default=-1)) > ends[ledger]
        }
        if not highest or self._time_left(deadline) <= 0:
            return 0
        headers = None
        if route.protocol == "v3":
            client = await self._pool.client(route.bookie_id)
            headers = await client.read_entry_headers(highest.items(), timeout=self._time_left(deadline))
        else:
            headers = await self._headers_from_agent(route, highest, deadline)
            if headers is None and route.bookie_address is not None and self._time_left(deadline) > 0:
                async with BookieV3Client(*route.bookie_address, config=self._pool.config, ssl=self._v3_ssl) as v3:
                    headers = await v3.read_entry_headers(highest.items(), timeout=self._time_left(deadline))
        if headers is None:
            return 0
        for ledger, entry in highest.items():
            header = headers[ledger, entry]
            if isinstance(header, EntryHeader):
                answers[ledger] = replace(answers[ledger], beyond=header)
            else:
                logger.info("bookie %s: no header for entry %d:%d (%s)", route.bookie_id, ledger, entry, header)
        return len(highest)

    async def _headers_from_agent(
        self, route: BookieRoute, highest: Mapping[int, int], deadline: float
    ) -> dict[tuple[int, int], EntryHeader | str] | None:
        """The headers as the bookie's agent reads them from its bookie; None when the agent cannot read entries."""
        target = route.target
        if target is None:
            return None
        client = self._agent_client(route.bookie_id, target)
        pairs, size = list(highest.items()), self.config.max_ledgers_per_call

        def read_all() -> dict[tuple[int, int], EntryHeader | str]:
            headers: dict[tuple[int, int], EntryHeader | str] = {}
            for start in range(0, len(pairs), size):
                headers.update(client.read_entry_headers(pairs[start : start + size]))
            return headers

        pending = self._loop.run_in_executor(self._agent_pool, read_all)
        try:
            async with asyncio.timeout(max(0.0, self._time_left(deadline))):
                return await pending
        except TimeoutError:
            logger.info("agent %s: no entry headers within the fetch deadline", target)
            return None
        except AgentCallError as error:
            logger.info("agent %s cannot read entries from its bookie (%s): %s", target, error.code, error)
            return None

    def _time_left(self, deadline: float) -> float:
        return min(self.config.request_timeout_s, deadline - self._loop.time())

    async def _ask_v3(
        self, route: BookieRoute, address: Address, ledgers: list[int], deadline: float
    ) -> tuple[dict[int, BookieAnswer], int]:
        """Pipelined requests on the bookie's one connection, at most ``max_in_flight_per_bookie`` at once."""
        await self._forget_agent(route.bookie_id)
        self._v3_addresses[route.bookie_id] = address
        client = await self._pool.client(route.bookie_id)
        window = self.config.max_in_flight_per_bookie
        if len(ledgers) <= window:
            seconds = self._time_left(deadline)
            if seconds <= 0:
                return _all_unknown(ledgers, "no time left before the fetch deadline"), 0
            return await client.get_listings(ledgers, timeout=seconds), len(ledgers)
        answers: dict[int, BookieAnswer] = {}
        sent = [0]
        queue = iter(ledgers)
        await asyncio.gather(*(self._v3_worker(client, queue, deadline, answers, sent) for _ in range(window)))
        return answers, sent[0]

    async def _v3_worker(
        self,
        client: BookieV3Client,
        queue: Iterator[int],
        deadline: float,
        answers: dict[int, BookieAnswer],
        sent: list[int],
    ) -> None:
        for ledger_id in queue:
            seconds = self._time_left(deadline)
            if seconds <= 0:
                answers[ledger_id] = BookieAnswer.unknown("no time left before the fetch deadline")
                continue
            sent[0] += 1
            answers[ledger_id] = await client.get_listing(ledger_id, timeout=seconds)

    async def _ask_agent(
        self, route: BookieRoute, ledgers: list[int], deadline: float
    ) -> tuple[dict[int, BookieAnswer], int]:
        """One blocking AgentClient fetch on the thread pool, abandoned (answers unknown) at the deadline."""
        await self._pool.forget(route.bookie_id)
        target = route.target
        assert target is not None
        client = self._agent_client(route.bookie_id, target)
        seconds = deadline - self._loop.time()
        if seconds <= 0:
            return _all_unknown(ledgers, "no time left before the fetch deadline"), 0
        calls = math.ceil(len(ledgers) / self.config.max_ledgers_per_call)
        pending = self._loop.run_in_executor(self._agent_pool, client.get_listings, ledgers)
        try:
            async with asyncio.timeout(seconds):
                answers = await pending
        except TimeoutError:
            reason = f"agent {target}: no answer within the fetch deadline ({seconds:.3g} s)"
            return _all_unknown(ledgers, reason), calls
        return answers, calls

    def _agent_client(self, bookie_id: str, target: str) -> AgentClient:
        """The cached client of the bookie's agent; a new one (the old closed) when its address changed."""
        client = self._agents.get(bookie_id)
        if client is not None and client.target == target:
            return client
        if client is not None:
            client.close()
        fresh = open_agent_client(self.config, bookie_id, target, self._agent_roots)
        self._agents[bookie_id] = fresh
        return fresh

    async def _forget_agent(self, bookie_id: str) -> None:
        client = self._agents.pop(bookie_id, None)
        if client is not None:
            client.close()

    async def _close_idle(self) -> None:
        """Close the clients of bookies not asked for :data:`IDLE_CLOSE_S`."""
        cutoff = time.monotonic() - IDLE_CLOSE_S
        for key in [k for k, used in self._last_used.items() if used < cutoff]:
            del self._last_used[key]
            protocol, bookie_id = key
            if protocol == "agent":
                await self._forget_agent(bookie_id)
            else:
                await self._pool.forget(bookie_id)

    async def _close_clients(self) -> None:
        await self._pool.close()
        agents, self._agents = self._agents, {}
        for client in agents.values():
            client.close()

    # ----------------------------------------------------------------------- shutdown

    def close(self) -> None:
        """Close every connection, stop the loop thread and the agent threads. Idempotent, bounded, never raises."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if os.getpid() != self.pid:
            return  # a forked copy: the loop thread and the sockets belong to the parent
        if self._thread.is_alive():
            self._call_quietly(self._close_clients())
            self._call_quietly(self._loop.shutdown_default_executor())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_CLOSE_WAIT_S)
        self._agent_pool.shutdown(wait=False, cancel_futures=True)
        if not self._thread.is_alive():
            self._loop.close()

    def _call_quietly(self, coroutine: Coroutine[Any, Any, T]) -> None:
        try:
            asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(_CLOSE_WAIT_S)
        except Exception as error:
            logger.warning("closing the listing fetcher: %s", error or type(error).__name__)


def _read_ca(path: str, what: str) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise FetchConfigError(f"{what}: cannot read {path}: {error.strerror or error}") from None


def _v3_ssl_context(config: FetchConfig) -> ssl.SSLContext | None:
    if not config.v3_tls:
        return None
    try:
        ssl.create_default_context(cafile=config.v3_ca_file or None)
    except (OSError, ssl.SSLError) as error:
        raise FetchConfigError(f"v3_ca_file: cannot load {config.v3_ca_file}: {error}") from None
    try:
        return client_tls_context(config.v3_ca_file, config.v3_cert_file, config.v3_key_file)
    except (OSError, ssl.SSLError) as error:
        key = config.v3_key_file or "the key in the cert file"
        raise FetchConfigError(f"v3_cert_file: cannot load {config.v3_cert_file} with {key}: {error}") from None


# --------------------------------------------------------------------------- one fetcher per process

_shared: dict[FetchConfig, ListingFetcher] = {}
_shared_lock = threading.Lock()


def shared_fetcher(config: FetchConfig) -> ListingFetcher:
    """This process's fetcher for ``config``, made on first use (again after a fork or a close); closed at exit."""
    with _shared_lock:
        fetcher = _shared.get(config)
        if fetcher is None or fetcher.closed or fetcher.pid != os.getpid():
            fetcher = ListingFetcher(config)
            _shared[config] = fetcher
        return fetcher


def close_shared_fetchers() -> None:
    """Close every shared fetcher of this process (registered with :mod:`atexit`)."""
    with _shared_lock:
        fetchers = list(_shared.values())
        _shared.clear()
    for fetcher in fetchers:
        if fetcher.pid == os.getpid():
            fetcher.close()


atexit.register(close_shared_fetchers)
