"""One simulated bookie: the v3 protocol and the bookie agent's gRPC API over the same entry sets.

A :class:`SimBookie` serves GetListOfEntriesOfLedger and a plain READ_ENTRY (the entry's bytes, its
header first: :meth:`EntryStore.entry`) with a
:class:`~scrutiny.simulator.v3_server.BookieV3Server` and ``BookieAgent.GetListings``
with an :class:`~scrutiny.agent.server.AgentServer` over a :class:`MemoryListingBackend`
(its ``ReadEntryHeaders`` forwarded to the bookie's own v3 server, as a real agent's are), both on
``127.0.0.1`` (free ports unless told otherwise), both answering from one :class:`EntryStore`: per ledger the
entries as sequence groups (never per-entry lists), filled explicitly or lazily by a loader (the simulated cluster
derives them from its scenario).

Faults (:class:`~scrutiny.simulator.model.FaultSpec`, switchable at runtime) behave the
same way on both APIs as far as each protocol allows:

========================  ==========================================  ============================================
fault                     v3 protocol                                 agent API
========================  ==========================================  ============================================
``unresponsive``          reads requests, never answers               the call hangs (until the bookie stops, 60 s)
``slow`` (``delay_s``)    answers after the delay                     answers after the delay
``status`` (e.g. EIO)     answers that status                         ``UNKNOWN``, reason ``bookie status EIO``
``garbage``               a broken frame                              ``POSITIVE`` with listing bytes that do not
                                                                      decode
ledger in limbo           ``EUNKNOWNLEDGERSTATE``                     ``UNKNOWN``, reason ``ledger in limbo``
========================  ==========================================  ============================================

A v3 READ_ENTRY meets the v3 column's faults exactly as a listing request of its ledger does.
A ledger the bookie holds nothing of is ENOLEDGER / ``NO_LEDGER``. A stopped bookie listens on
nothing: :meth:`SimBookie.stop`, then :meth:`SimBookie.start` again (same ports when still free).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final

from scrutiny.agent.server import (
    AgentServer,
    AgentServerConfig,
    AgentServerError,
    Cancelled,
    LedgerAnswer,
    ListingStatus,
    SourceHealth,
    never,
)
from scrutiny.agent.v3_forward import V3HeaderReader, V3Link
from scrutiny.connectors.bookies.agent_protocol import AGENT_ENDPOINT_PROTOCOL
from scrutiny.core.entry_header import EntryHeader, encode_entry_header
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.held_ledgers import LISTING_START, NO_ENTRY, HeldLedger, LedgerPage
from scrutiny.core.listing_codec import encode_listing
from scrutiny.core.sequence_groups import SequenceGroup
from scrutiny.core.zk_records import BOOKIE_RPC_PROTOCOL, BookieServiceInfo, Endpoint
from scrutiny.proto import bookkeeper_protocol_pb2 as bk_pb
from scrutiny.simulator.model import FaultKind, FaultSpec, entry_header
from scrutiny.simulator.v3_server import (
    BookieV3Server,
    Fault,
    Garbage,
    ListingEncoding,
    ReplyStatus,
    Slow,
    Unresponsive,
)

log = logging.getLogger(__name__)

#: Protocol name of the agent endpoint a simulated bookie advertises in its BookieServiceInfo.
#: How long an agent call of an unresponsive bookie hangs at most.
HANG_S: Final = 60.0
LOOPBACK: Final = "127.0.0.1"
_LIMBO_REASON: Final = "ledger in limbo"
#: Listing bytes that never decode: a header announcing one group, with none following.
_BROKEN_LISTING: Final = b"\x00\x00\x00\x00\x00\x00\x00\x01" + b"\x00" * 56

Groups = tuple[SequenceGroup, ...]
Loader = Callable[[int], Groups | None]
#: Whether a ledger's last write had reached the bookie's index at a time (ms): the write cache's flushes.
Indexed = Callable[[int, int], bool]
#: The header the writer put on an entry (ledger id, entry id).
Headers = Callable[[int, int], EntryHeader]
#: A simulated entry's digest and payload after its header (their bytes mean nothing; the checker reads the header).
_DIGEST: Final = b"\x00\x00\x00\x00"
_PAYLOAD: Final = b"simulated entry"


class SimBookieError(ScrutinyError):
    """A simulated bookie that cannot start (no free port, bad state)."""


class EntryStore:
    """What a bookie holds, per ledger: sorted disjoint groups, or nothing (None). Thread-safe.

    With a ``loader`` a ledger not stored yet is asked of the loader once and cached;
    :meth:`invalidate` drops cached ledgers after the loader's source changed. :meth:`put`
    stores explicitly (a loader is then not asked for that ledger). ``headers`` gives the header
    the writer put on an entry (:meth:`entry`); by default its last-add-confirmed is the entry
    before it (a writer acknowledged in order) and its length ``DEFAULT_ENTRY_SIZE`` per entry. ``ids`` names the
    ledgers the loader may hold entries of, for :meth:`ledger_ids` (without it, a loader's ledgers are known only once
    asked for).
    """

    def __init__(
        self,
        loader: Loader | None = None,
        headers: Headers | None = None,
        *,
        ids: Callable[[], Iterable[int]] | None = None,
    ) -> None:
        self._loader = loader
        self._headers = headers or entry_header
        self._ids = ids
        self._held: dict[int, Groups | None] = {}
        self._lock = threading.Lock()

    def entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry's bytes as its writer sent it (header, 4 digest bytes, payload), or None when not held."""
        groups = self.get(ledger_id)
        if not groups or not any(g.contains(entry_id) for g in groups):
            return None
        return encode_entry_header(self._headers(ledger_id, entry_id)) + _DIGEST + _PAYLOAD

    def get(self, ledger_id: int) -> Groups | None:
        """The bookie's entries of the ledger (None: none)."""
        with self._lock:
            if ledger_id in self._held:
                return self._held[ledger_id]
            if self._loader is None:
                return None
            groups = self._loader(ledger_id)
            self._held[ledger_id] = groups
            return groups

    def put(self, ledger_id: int, groups: Iterable[SequenceGroup] | None) -> None:
        """Store the ledger's entries (sorted disjoint groups; None or empty: nothing)."""
        held = None if groups is None else tuple(sorted(groups))
        with self._lock:
            self._held[ledger_id] = held or None

    def ledger_ids(self, *, after: int = -1) -> Iterator[int]:
        """The ids above ``after`` of the ledgers the store holds entries of, ascending: those stored, those loaded so
        far, and those of ``ids`` (see the class doc) its loader gives entries for. Lazy: a ledger is loaded only when
        the iteration reaches it."""
        with self._lock:
            candidates = {i for i in self._held if i > after}
        if self._ids is not None:
            candidates.update(i for i in self._ids() if i > after)
        return (ledger_id for ledger_id in sorted(candidates) if self.get(ledger_id))

    def invalidate(self, ledger_ids: Iterable[int]) -> None:
        """Forget these ledgers (the loader is asked again next time)."""
        with self._lock:
            for ledger_id in ledger_ids:
                self._held.pop(ledger_id, None)

    def clear(self) -> None:
        """Forget everything stored or cached."""
        with self._lock:
            self._held.clear()

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for groups in self._held.values() if groups)


class FaultSwitch:
    """The bookie's current fault and ledgers in limbo, read by both servers."""

    def __init__(self, fault: FaultSpec | None = None, limbo: Iterable[int] = ()) -> None:
        self.fault = fault
        self.limbo = frozenset(limbo)

    def fault_for(self, ledger_id: int) -> FaultSpec | None:
        """The fault that applies to a request for the ledger (limbo aside)."""
        fault = self.fault
        return fault if fault is not None and fault.applies_to(ledger_id) else None

    def in_limbo(self, ledger_id: int) -> bool:
        """Whether the bookie answers "in limbo" for the ledger: it is in limbo and no fault but a delay applies (a
        fault that applies decides the answer)."""
        fault = self.fault_for(ledger_id)
        return ledger_id in self.limbo and (fault is None or fault.kind is FaultKind.SLOW)


class MemoryListingBackend:
    """The agent's :class:`~scrutiny.agent.server.ListingBackend` over an :class:`EntryStore`."""

    def __init__(
        self, store: EntryStore, faults: FaultSwitch, *, hang_s: float = HANG_S, indexed: Indexed | None = None
    ) -> None:
        self._store = store
        self._faults = faults
        self._hang_s = hang_s
        self._indexed = indexed
        self._released = threading.Event()
        #: Each ledger's listing bytes with the groups they encode: the store hands out the same groups object until
        #: the ledger changes, so a listing is encoded once per change, not once per question.
        self._encoded: dict[int, tuple[Groups, bytes]] = {}

    def release(self) -> None:
        """End every hanging or delayed call now (before the server stops)."""
        self._released.set()

    def get_listings(self, ledger_ids: Sequence[int], *, cancelled: Cancelled = never) -> list[LedgerAnswer]:
        """One answer per ledger, after the longest delay any of them has (a simulated hang ignores ``cancelled``)."""
        faults = [self._faults.fault_for(lid) for lid in ledger_ids]
        if any(f is not None and f.kind is FaultKind.UNRESPONSIVE for f in faults):
            self._released.wait(self._hang_s)
            return [LedgerAnswer.unknown(lid, "the bookie did not answer") for lid in ledger_ids]
        delay = max((f.delay_s for f in faults if f is not None and f.kind is FaultKind.SLOW), default=0.0)
        if delay:
            self._released.wait(delay)
        now_ms = int(time.time() * 1000)
        return [self._answer(lid, fault, now_ms) for lid, fault in zip(ledger_ids, faults, strict=True)]

    def _answer(self, ledger_id: int, fault: FaultSpec | None, now_ms: int) -> LedgerAnswer:
        if self._faults.in_limbo(ledger_id):
            return LedgerAnswer.in_limbo(ledger_id, _LIMBO_REASON)
        if fault is not None and fault.kind is FaultKind.STATUS:
            return LedgerAnswer.unknown(ledger_id, f"bookie status {fault.status}")
        if fault is not None and fault.kind is FaultKind.GARBAGE:
            return LedgerAnswer(ledger_id, ListingStatus.POSITIVE, listing=_BROKEN_LISTING, as_of_ms=now_ms)
        if self._indexed is not None and not self._indexed(ledger_id, now_ms):
            return LedgerAnswer(ledger_id, ListingStatus.NO_LEDGER, as_of_ms=now_ms)  # still in the write cache
        groups = self._store.get(ledger_id)
        if groups is None:
            return LedgerAnswer(ledger_id, ListingStatus.NO_LEDGER, as_of_ms=now_ms)
        return LedgerAnswer(
            ledger_id,
            ListingStatus.POSITIVE,
            listing=self._listing(ledger_id, groups),
            as_of_ms=now_ms,
            has_ledger_record=True,
        )

    def _listing(self, ledger_id: int, groups: Groups) -> bytes:
        cached = self._encoded.get(ledger_id)
        if cached is not None and cached[0] is groups:
            return cached[1]
        listing = encode_listing(groups)
        self._encoded[ledger_id] = (groups, listing)
        return listing

    def list_ledgers(self, after_ledger_id: int, max_ledgers: int, *, cancelled: Cancelled = never) -> LedgerPage:
        """The store's ledgers above ``after_ledger_id`` (:meth:`EntryStore.ledger_ids`) and the ledgers in limbo (the
        bookie's record of them says so, whether it holds entries or not), ascending, at most ``max_ledgers``; each
        with its first and last entry held. A ledger whose last write is not ``indexed`` yet is not listed.

        Faults, kept simple: an ``unresponsive`` fault of every ledger or of a ledger of the page hangs the call as
        :meth:`get_listings` does, then raises :class:`TimeoutError` (the server answers UNAVAILABLE); a ``slow`` one
        delays it likewise; a status or garbage fault concerns the bookie's answers, not its index, and changes
        nothing here. A simulated hang ignores ``cancelled``.
        """
        if after_ledger_id < LISTING_START or max_ledgers < 1:
            raise ValueError(f"cannot list {max_ledgers} ledgers after {after_ledger_id}")
        now_ms = int(time.time() * 1000)
        limbo = self._faults.limbo
        in_limbo = sorted(i for i in limbo if i > after_ledger_id)
        held = heapq.merge(self._store.ledger_ids(after=after_ledger_id), in_limbo)
        listed = (
            ledger_id
            for ledger_id, _ in itertools.groupby(held)
            if self._indexed is None or self._indexed(ledger_id, now_ms)
        )
        candidates = list(itertools.islice(listed, max_ledgers + 1))  # one more: whether the listing ends here
        page = candidates[:max_ledgers]
        fault = self._faults.fault
        if fault is not None and (fault.ledgers is None or not fault.ledgers.isdisjoint(page)):
            if fault.kind is FaultKind.UNRESPONSIVE:
                self._released.wait(self._hang_s)
                raise TimeoutError("the bookie did not answer")
            if fault.kind is FaultKind.SLOW:
                self._released.wait(fault.delay_s)
        ledgers = []
        for ledger_id in page:
            groups = self._store.get(ledger_id)
            first = min(g.first for g in groups) if groups else NO_ENTRY
            last = max(g.last for g in groups) if groups else NO_ENTRY
            ledgers.append(HeldLedger(ledger_id, True, ledger_id in limbo, first, last))
        return LedgerPage(tuple(ledgers), end=len(candidates) <= max_ledgers, as_of_ms=now_ms)

    def health(self) -> list[SourceHealth]:
        """One in-memory source, always readable."""
        return [SourceHealth(0, "memory", True, caught_up_ms=int(time.time() * 1000))]

    def close(self) -> None:
        """Nothing to release but hanging calls."""
        self.release()


def v3_fault(fault: FaultSpec) -> Fault:
    """The v3 server's fault for a scenario fault."""
    if fault.kind is FaultKind.UNRESPONSIVE:
        return Unresponsive()
    if fault.kind is FaultKind.SLOW:
        return Slow(fault.delay_s)
    if fault.kind is FaultKind.STATUS:
        return ReplyStatus(fault.status_code)
    return Garbage(fault.garbage)


class SimBookie:
    """One simulated bookie (see the module doc). Start and stop it from one event loop."""

    def __init__(
        self,
        bookie_id: str,
        store: EntryStore,
        *,
        fault: FaultSpec | None = None,
        limbo: Iterable[int] = (),
        encoding: ListingEncoding = ListingEncoding.PER_RUN,
        host: str = LOOPBACK,
        v3_port: int = 0,
        agent_port: int = 0,
        seed: int | None = None,
        indexed: Indexed | None = None,
    ) -> None:
        self.bookie_id = bookie_id
        self.indexed = indexed
        self.store = store
        self.faults = FaultSwitch(fault, limbo)
        self.encoding = encoding
        self.host = host
        self._v3_port = v3_port
        self._agent_port = agent_port
        self._seed = seed
        self._v3: BookieV3Server | None = None
        self._agent: AgentServer | None = None
        self._backend: MemoryListingBackend | None = None

    @property
    def running(self) -> bool:
        """Whether the bookie listens."""
        return self._v3 is not None

    @property
    def v3_address(self) -> tuple[str, int]:
        """(host, port) of the v3 protocol (the last bound one when stopped)."""
        return self.host, self._v3_port

    @property
    def agent_address(self) -> str:
        """``host:port`` of the agent API (the last bound one when stopped)."""
        return f"{self.host}:{self._agent_port}"

    def service_info(self) -> BookieServiceInfo:
        """The registration data: ``bookie-rpc`` is the v3 address, ``scrutiny-agent`` the agent's."""
        return BookieServiceInfo(
            endpoints=(
                Endpoint(id="bookie", host=self.host, port=self._v3_port, protocol=BOOKIE_RPC_PROTOCOL),
                Endpoint(
                    id=AGENT_ENDPOINT_PROTOCOL, host=self.host, port=self._agent_port, protocol=AGENT_ENDPOINT_PROTOCOL
                ),
            ),
            properties=(("scrutiny.simulated", "true"),),
        )

    async def start(self) -> None:
        """Listen on both APIs (the previous ports when free, else new ones). SimBookieError if impossible."""
        if self._v3 is not None:
            return
        self._v3 = await self._start_v3()
        self._v3_port = self._v3.port
        self._apply_v3_faults()
        try:
            self._agent_port = self._start_agent()
        except SimBookieError:
            await self._v3.stop()
            self._v3 = None
            raise

    async def _start_v3(self) -> BookieV3Server:
        for port in dict.fromkeys((self._v3_port, 0)):
            server = BookieV3Server(
                self.store.get,
                host=self.host,
                port=port,
                encoding=self.encoding,
                seed=self._seed,
                entries=self.store.entry,
            )
            try:
                await server.start()
            except OSError as error:
                log.info("bookie %s: v3 port %d unavailable (%s)", self.bookie_id, port, error)
                continue
            return server
        raise SimBookieError(f"bookie {self.bookie_id}: no port for the v3 protocol")

    def _start_agent(self) -> int:
        for port in dict.fromkeys((self._agent_port, 0)):
            backend = MemoryListingBackend(self.store, self.faults, indexed=self.indexed)
            config = AgentServerConfig(
                listen=f"{self.host}:{port}", bookie_id=self.bookie_id, max_concurrent_calls=8, grace_s=0.5
            )
            # the v3 server is up (started first): the agent forwards entry reads to it, as a real bookie's agent does
            headers = V3HeaderReader(V3Link(self.host, self._v3_port))
            agent = AgentServer(backend, config, header_reader=headers)
            try:
                bound = agent.start()
            except AgentServerError as error:
                log.info("bookie %s: agent port %d unavailable (%s)", self.bookie_id, port, error)
                headers.close()
                continue
            self._agent, self._backend = agent, backend
            return bound
        raise SimBookieError(f"bookie {self.bookie_id}: no port for the agent API")

    async def stop(self) -> None:
        """Stop listening on both APIs; hanging agent calls end at once. Idempotent."""
        v3, self._v3 = self._v3, None
        agent, self._agent = self._agent, None
        if self._backend is not None:
            self._backend.release()
            self._backend = None
        if agent is not None:
            await asyncio.to_thread(agent.stop, 0.2)
        if v3 is not None:
            await v3.stop()

    def set_fault(self, fault: FaultSpec | None) -> None:
        """Replace the bookie's fault (None: none) on both APIs."""
        self.faults.fault = fault
        self._apply_v3_faults()

    def set_limbo(self, ledger_ids: Iterable[int]) -> None:
        """Replace the set of ledgers in limbo."""
        self.faults.limbo = frozenset(ledger_ids)
        self._apply_v3_faults()

    def _apply_v3_faults(self) -> None:
        server = self._v3
        if server is None:
            return
        server.clear_faults()
        fault = self.faults.fault
        if fault is not None:
            if fault.ledgers is None:
                server.set_fault(v3_fault(fault))
            else:
                for ledger_id in fault.ledgers:
                    server.set_fault(v3_fault(fault), ledger_id=ledger_id)
        for ledger_id in self.faults.limbo:
            if self.faults.in_limbo(ledger_id):
                server.set_fault(ReplyStatus(bk_pb.EUNKNOWNLEDGERSTATE), ledger_id=ledger_id)

    async def __aenter__(self) -> SimBookie:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
