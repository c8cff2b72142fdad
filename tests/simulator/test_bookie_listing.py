"""A simulated bookie's ledger listing (``ListLedgers`` over :class:`MemoryListingBackend`): exactly the ledgers its
entry store holds, with their limbo flag, first and last entry, and the write cache's and faults' effects."""

from __future__ import annotations

import asyncio
import time

import pytest

from scrutiny.agent.server import AgentServer, AgentServerConfig, ListingStatus
from scrutiny.connectors.bookies.agent_client import AgentClient, AgentListingError
from scrutiny.core.held_ledgers import LISTING_START, NO_ENTRY, HeldLedger
from scrutiny.core.listing_codec import encode_listing
from scrutiny.core.sequence_groups import SequenceGroup, expand
from scrutiny.core.striping import expected_groups
from scrutiny.simulator.bookie import EntryStore, FaultSwitch, MemoryListingBackend, SimBookie
from scrutiny.simulator.model import FaultKind, FaultSpec

STRIPED = tuple(expected_groups(1, 5, 2, 0, 999))  # bookie 1 of E=5 WQ=2: entries 0, 1, 5, 6, ..., 995, 996
HOLDINGS: dict[int, tuple[SequenceGroup, ...] | None] = {
    1: STRIPED,
    2: None,  # stored as nothing: not held
    4: (SequenceGroup.run(10, 19), SequenceGroup.run(2**40, 2**40 + 2)),
    6: (SequenceGroup(3, 9, 1, 3), SequenceGroup(4, 10, 1, 3)),  # interleaved groups: 3..10
    2**50: (SequenceGroup.run(0, 0),),
}


def store() -> EntryStore:
    entries = EntryStore()
    for ledger_id, groups in HOLDINGS.items():
        entries.put(ledger_id, groups)
    return entries


def listed(backend: MemoryListingBackend, size: int) -> list[HeldLedger]:
    out: list[HeldLedger] = []
    after = LISTING_START
    while True:
        page = backend.list_ledgers(after, size)
        assert len(page.ledgers) <= size
        out.extend(page.ledgers)
        if page.end:
            return out
        after = page.ledgers[-1].ledger_id


def test_the_listing_is_exactly_the_stores_ledgers_and_those_in_limbo() -> None:
    backend = MemoryListingBackend(store(), FaultSwitch(limbo={4, 7}))
    expected = [
        HeldLedger(1, True, False, 0, 996),
        HeldLedger(4, True, True, 10, 2**40 + 2),
        HeldLedger(6, True, False, 3, 10),
        HeldLedger(7, True, True, NO_ENTRY, NO_ENTRY),  # in limbo: the bookie has its record, no entry
        HeldLedger(2**50, True, False, 0, 0),
    ]
    assert (min(expand(STRIPED)), max(expand(STRIPED))) == (0, 996)
    for size in range(1, 7):
        assert listed(backend, size) == expected, size
    page = backend.list_ledgers(1, 2)
    assert [h.ledger_id for h in page.ledgers] == [4, 6] and not page.end and page.next_after == 6
    assert backend.list_ledgers(2**50, 5).end and not backend.list_ledgers(2**50, 5).ledgers
    with pytest.raises(ValueError):
        backend.list_ledgers(-2, 5)


def test_ledgers_still_in_the_write_cache_are_not_listed() -> None:
    backend = MemoryListingBackend(store(), FaultSwitch(), indexed=lambda ledger_id, _now_ms: ledger_id != 4)
    assert [h.ledger_id for h in listed(backend, 2)] == [1, 6, 2**50]


def test_a_loaded_store_lists_the_ledgers_its_source_names() -> None:
    source = {3: (SequenceGroup.run(0, 4),), 8: None, 9: (SequenceGroup.run(5, 5),)}
    lazy = EntryStore(source.get, ids=lambda: source)
    assert list(lazy.ledger_ids()) == [3, 9] and list(lazy.ledger_ids(after=3)) == [9]
    unnamed = EntryStore(source.get)  # without ``ids``: only what was asked for so far
    assert list(unnamed.ledger_ids()) == []
    unnamed.get(9)
    assert list(unnamed.ledger_ids()) == [9]
    backend = MemoryListingBackend(lazy, FaultSwitch())
    assert listed(backend, 10) == [HeldLedger(3, True, False, 0, 4), HeldLedger(9, True, False, 5, 5)]


def test_a_simulated_bookies_agent_lists_its_ledgers() -> None:
    async def body() -> list[HeldLedger]:
        async with SimBookie("bookie-1", store(), limbo={7}) as bookie:
            with AgentClient(bookie.agent_address, expected_bookie_id="bookie-1") as client:
                return await asyncio.to_thread(lambda: list(client.held_ledgers(page_size=2)))

    assert [(h.ledger_id, h.limbo, h.first_entry_id, h.last_entry_id) for h in asyncio.run(body())] == [
        (1, False, 0, 996),
        (4, False, 10, 2**40 + 2),
        (6, False, 3, 10),
        (7, True, NO_ENTRY, NO_ENTRY),
        (2**50, False, 0, 0),
    ]


def test_an_unresponsive_ledger_makes_its_page_unavailable() -> None:
    fault = FaultSpec(FaultKind.UNRESPONSIVE, ledgers=frozenset({4}))
    backend = MemoryListingBackend(store(), FaultSwitch(fault), hang_s=0.3)
    server = AgentServer(backend, AgentServerConfig(listen="127.0.0.1:0"))
    server.start()
    try:
        with AgentClient(f"127.0.0.1:{server.port}", timeout_s=5.0) as client:
            started = time.monotonic()
            with pytest.raises(AgentListingError, match="the bookie did not answer") as error:
                client.ledgers_page(LISTING_START, 2)  # ledgers 1 and 4
            waited = time.monotonic() - started
            after = client.ledgers_page(4, 10)  # a page without ledger 4 is answered
    finally:
        server.stop(grace_s=1.0)
    assert error.value.code == "UNAVAILABLE" and 0.3 <= waited < 4.0
    assert [h.ledger_id for h in after.ledgers] == [6, 2**50] and after.end


def test_a_listing_is_encoded_once_and_again_whenever_the_ledger_s_entries_change() -> None:
    entries = store()
    backend = MemoryListingBackend(entries, FaultSwitch())
    first, again = (backend.get_listings([1, 4])[0] for _ in range(2))
    assert first.listing == encode_listing(STRIPED) and again.listing is first.listing  # the same bytes, kept
    entries.put(1, (SequenceGroup.run(0, 5),))  # the bookie's entries of ledger 1 change
    assert backend.get_listings([1])[0].listing == encode_listing((SequenceGroup.run(0, 5),))
    entries.invalidate([1])  # forgotten: the store holds nothing of it now
    assert backend.get_listings([1])[0].status is ListingStatus.NO_LEDGER
    entries.put(1, STRIPED)  # equal groups, another object: encoded again, the same bytes
    assert backend.get_listings([1])[0].listing == first.listing
