"""Entries after a closed ledger's end: what the simulated bookies return to a plain READ_ENTRY, the ``too_low``
ledger key, and the ground truth of ``ENTRIES_BEYOND_LAST_ENTRY`` (copies in the write set, or a header's proof)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scrutiny.connectors.bookies.v3_protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameSizeError,
    encode_frame,
    listing_request,
    read_entry_request,
    read_frame,
)
from scrutiny.core.entry_header import EntryHeader, EntryHeaderError, parse_entry_header
from scrutiny.core.ledger_metadata import LedgerState
from scrutiny.core.sequence_groups import expand
from scrutiny.core.vocabulary import Category, Severity
from scrutiny.proto import bookkeeper_protocol_pb2 as pb
from scrutiny.simulator.bookie import EntryStore, SimBookie
from scrutiny.simulator.generator import generate, parse_fault_mix
from scrutiny.simulator.model import (
    MAX_ENTRY,
    BookieSpec,
    CheckerSpec,
    ClusterSpec,
    FaultKind,
    FaultSpec,
    GarbageKind,
    Holding,
    LedgerSpec,
    Scenario,
    ScenarioError,
    SegmentSpec,
    Where,
    check_ledger,
)
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.simulator.state import ClusterState
from scrutiny.simulator.truth import TruthViolation, ledger_truth
from scrutiny.simulator.v3_server import (
    BookieV3Server,
    Disconnect,
    Fault,
    MalformedListing,
    WrongLedgerId,
)
from tests.simulator.test_truth import assert_agree

T = TypeVar("T")

HEAD = """
[scenario]
seed = 3
[cluster]
bookies = 6
[defaults]
ensemble_size = 3
write_quorum = 3
ack_quorum = 2
last_entry = 59
"""
E123 = 'ensemble = ["bookie-1", "bookie-2", "bookie-3"]'
E5 = 'ensemble_size = 5\nwrite_quorum = 2\nensemble = ["bookie-1", "bookie-2", "bookie-3", "bookie-4", "bookie-5"]'

#: Ledger 1 closed at 9, 4 entries too low (bookie-1 kept 10..13); ledger 2 with two stray copies on bookie-2.
READS = """
[scenario]
seed = 1
[cluster]
bookies = 4
[defaults]
ensemble_size = 3
write_quorum = 3
ack_quorum = 2
last_entry = 9
entry_size = 100
[[ledgers]]
id = 1
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
too_low = 4
[[ledgers]]
id = 2
ensemble = ["bookie-2", "bookie-3", "bookie-4"]
holdings = [{ bookie = "bookie-2", add = [[10, 11]] }]
"""


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 30)

    return asyncio.run(bounded())


def state_of(body: str, head: str = HEAD) -> ClusterState:
    return ClusterState.from_scenario(parse_scenario(head + body))


def beyond_rows(state: ClusterState, ledger_id: int) -> dict[str | None, TruthViolation]:
    rows = ledger_truth(state, ledger_id, 0.0)
    return {v.bookie: v for v in rows if v.category is Category.ENTRIES_BEYOND_LAST_ENTRY}


def entries(violation: TruthViolation) -> list[int]:
    assert violation.entries is not None
    return sorted(expand(violation.entries))


def store_of(state: ClusterState, bookie_id: str) -> EntryStore:
    """A bookie's entries as the simulated cluster wires them: its holdings, the writer's headers."""
    return EntryStore(lambda ledger_id: state.held_groups(bookie_id, ledger_id), state.entry_header)


# --------------------------------------------------------------------------- READ_ENTRY over a socket

Outcome = pb.Response | str


async def ask(address: tuple[str, int], request: pb.Request, wait_s: float = 2.0) -> Outcome:
    """One request on a fresh connection: the response, or what came instead."""
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(encode_frame(request.SerializeToString()))
        await writer.drain()
        try:
            frame = await asyncio.wait_for(read_frame(reader, DEFAULT_MAX_FRAME_BYTES), wait_s)
        except TimeoutError:
            return "no answer"
        except FrameSizeError:
            return "bad frame length"
        except (asyncio.IncompleteReadError, ConnectionError):
            return "closed"
        response = pb.Response()
        try:
            response.ParseFromString(frame)
        except DecodeError:
            return "not a response"
        return response
    finally:
        writer.close()


def read_entry(ledger_id: int, entry_id: int, txn_id: int = 7) -> pb.Request:
    return read_entry_request(txn_id, ledger_id, entry_id)


def statuses(outcome: Outcome) -> tuple[str, str, int] | str:
    """The outer and inner status names and the ledger id echoed (the inner answer of either operation)."""
    if isinstance(outcome, str):
        return outcome
    inner = outcome.readResponse if outcome.HasField("readResponse") else outcome.getListOfEntriesOfLedgerResponse
    return pb.StatusCode.Name(outcome.status), pb.StatusCode.Name(inner.status), inner.ledgerId


@pytest.mark.integration
def test_read_entry_returns_the_entry_as_its_writer_sent_it() -> None:
    state = state_of("", READS)
    assert state.ledgers[1].kept_by == "bookie-1"

    async def body() -> None:
        async with (
            SimBookie("bookie-1", store_of(state, "bookie-1")) as one,
            SimBookie("bookie-2", store_of(state, "bookie-2")) as two,
        ):
            kept = await ask(one.v3_address, read_entry(1, 13, txn_id=41))
            assert isinstance(kept, pb.Response)
            assert (kept.header.txnId, kept.header.operation, kept.header.version) == (41, pb.READ_ENTRY, 3)
            assert kept.status == kept.readResponse.status == pb.EOK
            assert (kept.readResponse.ledgerId, kept.readResponse.entryId) == (1, 13)
            header = parse_entry_header(kept.readResponse.body, ledger_id=1, entry_id=13)
            assert header == EntryHeader(1, 13, 12, 14 * 100)  # acknowledged in order: 12 before it
            assert header.acknowledged_beyond(9) == range(10, 13)  # what the checker concludes from it
            assert len(kept.readResponse.body) > 32 + 4  # header, digest, payload
            first = await ask(one.v3_address, read_entry(1, 0))
            assert isinstance(first, pb.Response)
            assert parse_entry_header(first.readResponse.body, ledger_id=1, entry_id=0).last_add_confirmed == -1
            # bookie-2 lost 10..13 in the recovery: it holds the ledger, not the entry.
            lost = await ask(two.v3_address, read_entry(1, 13, txn_id=42))
            assert statuses(lost) == ("ENOENTRY", "ENOENTRY", 1)
            assert isinstance(lost, pb.Response) and lost.header.txnId == 42 and lost.readResponse.entryId == 13
            assert not lost.readResponse.HasField("body")
            assert statuses(await ask(one.v3_address, read_entry(1, 14))) == ("ENOENTRY", "ENOENTRY", 1)
            assert statuses(await ask(one.v3_address, read_entry(2, 0))) == ("ENOLEDGER", "ENOLEDGER", 2)
            assert statuses(await ask(one.v3_address, read_entry(77, 3))) == ("ENOLEDGER", "ENOLEDGER", 77)
            # A stray copy beyond the end was never acknowledged: it carries lastEntryId.
            stray = await ask(two.v3_address, read_entry(2, 11))
            assert isinstance(stray, pb.Response) and stray.readResponse.status == pb.EOK
            assert parse_entry_header(stray.readResponse.body, ledger_id=2, entry_id=11).last_add_confirmed == 9
            # Any other operation, or a READ_ENTRY without its body, is refused as before.
            other = read_entry(1, 13)
            other.header.operation = pb.READ_LAC
            refused = await ask(one.v3_address, other)
            assert isinstance(refused, pb.Response) and refused.status == pb.EBADREQ
            assert refused.header.operation == pb.READ_LAC and not refused.HasField("readResponse")
            bare = read_entry(1, 13)
            bare.ClearField("readRequest")
            assert isinstance(answer := await ask(one.v3_address, bare), pb.Response) and answer.status == pb.EBADREQ

    run(body())


#: Each scenario fault of a bookie, with a ledger it applies to (1) and one it does not (2).
SCENARIO_FAULTS = {
    "status": FaultSpec(FaultKind.STATUS, status="EIO", ledgers=frozenset({1})),
    "unresponsive": FaultSpec(FaultKind.UNRESPONSIVE, ledgers=frozenset({1})),
    "slow": FaultSpec(FaultKind.SLOW, delay_s=0.3, ledgers=frozenset({1})),
    "random garbage": FaultSpec(FaultKind.GARBAGE, ledgers=frozenset({1})),
    "negative length": FaultSpec(FaultKind.GARBAGE, garbage=GarbageKind.NEGATIVE_LENGTH, ledgers=frozenset({1})),
    "huge length": FaultSpec(FaultKind.GARBAGE, garbage=GarbageKind.HUGE_LENGTH, ledgers=frozenset({1})),
}


@pytest.mark.integration
@pytest.mark.parametrize("name", [*SCENARIO_FAULTS, "limbo"])
def test_a_bookies_faults_meet_its_entry_reads_as_its_listings(name: str) -> None:
    state = state_of("", READS.replace('"bookie-4"]', '"bookie-1"]'))  # bookie-1 holds ledger 2 too

    async def body() -> None:
        fault = SCENARIO_FAULTS.get(name)
        limbo = (1,) if name == "limbo" else ()
        async with SimBookie("bookie-1", store_of(state, "bookie-1"), fault=fault, limbo=limbo, seed=5) as bookie:
            address = bookie.v3_address
            started = time.monotonic()
            listing, read = await asyncio.gather(
                ask(address, listing_request(1, 1), wait_s=0.8), ask(address, read_entry(1, 13), wait_s=0.8)
            )
            elapsed = time.monotonic() - started
            expected = {
                "status": ("EIO", "EIO", 1),
                "unresponsive": "no answer",
                "slow": ("EOK", "EOK", 1),
                "random garbage": "not a response",
                "negative length": "bad frame length",
                "huge length": "bad frame length",
                "limbo": ("EUNKNOWNLEDGERSTATE", "EUNKNOWNLEDGERSTATE", 1),
            }[name]
            assert statuses(listing) == statuses(read) == expected
            if name == "slow":
                assert elapsed >= 0.3
            # The fault is the ledger's: another ledger's entries read as usual, at once.
            other = await ask(address, read_entry(2, 9), wait_s=0.25)
            assert isinstance(other, pb.Response) and other.readResponse.status == pb.EOK
            assert parse_entry_header(other.readResponse.body, ledger_id=2, entry_id=9).last_add_confirmed == 8

    run(body())


@pytest.mark.integration
@pytest.mark.parametrize(
    "fault", [WrongLedgerId(), MalformedListing(), Disconnect(), Disconnect(partial_frame=True)], ids=repr
)
def test_the_v3_servers_own_faults_meet_entry_reads(fault: Fault) -> None:
    state = state_of("", READS)
    store = store_of(state, "bookie-1")

    async def body() -> None:
        async with BookieV3Server(store.get, entries=store.entry) as server:
            server.set_fault(fault, ledger_id=1)
            read = await ask(server.address, read_entry(1, 12), wait_s=1.0)
            if isinstance(fault, Disconnect):
                assert read == "closed"
                return
            assert isinstance(read, pb.Response) and read.readResponse.status == pb.EOK
            if isinstance(fault, WrongLedgerId):
                assert read.readResponse.ledgerId == 2
                parse_entry_header(read.readResponse.body, ledger_id=1, entry_id=12)  # the entry itself is right
            else:
                with pytest.raises(EntryHeaderError, match="shorter than its header"):
                    parse_entry_header(read.readResponse.body, ledger_id=1, entry_id=12)
            server.set_fault(None, ledger_id=1)
            again = await ask(server.address, read_entry(1, 12))
            assert isinstance(again, pb.Response)
            assert parse_entry_header(again.readResponse.body, ledger_id=1, entry_id=12) == EntryHeader(1, 12, 11, 1300)

    run(body())


def test_a_store_without_a_header_source_assumes_a_writer_acknowledged_in_order() -> None:
    store = EntryStore()
    store.put(5, state_of("", READS).held_groups("bookie-1", 1))
    body = store.entry(5, 13)
    assert body is not None and parse_entry_header(body, ledger_id=5, entry_id=13).last_add_confirmed == 12
    assert store.entry(5, 14) is None and store.entry(6, 0) is None


# --------------------------------------------------------------------------- the too_low key


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (f"[[ledgers]]\nid = 1\n{E123}\nstate = 'OPEN'\ntoo_low = 2\n", "ledgers[0].too_low: only a closed ledger"),
        (
            f"[[ledgers]]\nid = 1\n{E123}\nstate = 'IN_RECOVERY'\ntoo_low = 2\n",
            "ledgers[0].too_low: only a closed ledger",
        ),
        (f"[[ledgers]]\nid = 1\n{E123}\ntoo_low = 0\n", "ledgers[0].too_low: 0 is out of range [1, "),
        (f"[[ledgers]]\nid = 1\n{E123}\ntoo_low = -3\n", "ledgers[0].too_low: -3 is out of range"),
        (f"[[ledgers]]\nid = 1\n{E123}\ntoo_low = 'many'\n", "ledgers[0].too_low: expected an integer"),
        (f"[[ledgers]]\nid = 1\n{E123}\ntoo_low = true\n", "ledgers[0].too_low: expected an integer"),
        (  # lastEntryId + too_low must stay an entry id
            f"[[ledgers]]\nid = 1\n{E123}\ntoo_low = {MAX_ENTRY - 59}\n",
            f"ledgers[0].too_low: {MAX_ENTRY - 59} is out of range [1, {MAX_ENTRY - 60}]",
        ),
        (
            f"[[ledgers]]\nid = 1\n{E123}\ntruncated = 2\ntoo_low = 2\n",
            "ledgers[0].too_low: give at most one of truncated and too_low",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'create'\n"
            "ledger = { id = 9, ensemble = 'auto', state = 'OPEN', too_low = 1 }\n",
            "schedule[0].ledger.too_low: only a closed ledger",
        ),
    ],
)
def test_too_low_is_refused_where_it_cannot_be(extra: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_scenario(HEAD + extra)
    assert parse_scenario(HEAD + f"[[ledgers]]\nid = 1\n{E123}\ntoo_low = {MAX_ENTRY - 60}\n").ledgers[0].written == (
        MAX_ENTRY - 1
    )


def test_too_low_is_refused_by_the_ledger_rule_too() -> None:
    ensemble = ("bookie-1", "bookie-2", "bookie-3")
    closed = LedgerSpec(
        ledger_id=1,
        ensemble_size=3,
        write_quorum=3,
        ack_quorum=2,
        state=LedgerState.CLOSED,
        last_entry=9,
        segments=(SegmentSpec(0, ensemble),),
        too_low=3,
    )
    check_ledger(closed, ensemble, Where("ledger"))
    for bad, message in (
        (replace(closed, state=LedgerState.OPEN), "only a closed ledger"),
        (replace(closed, truncated=1), "at most one of truncated and too_low"),
        (replace(closed, too_low=-1), "entries after the end"),
        (replace(closed, too_low=MAX_ENTRY - 9), "entries after the end"),
    ):
        with pytest.raises(ScenarioError, match=re.escape(message)):
            check_ledger(bad, ensemble, Where("ledger"))


def test_too_low_leaves_the_entries_after_the_end_on_one_bookie() -> None:
    state = state_of(
        f"""
[[ledgers]]
id = 1
{E123}
too_low = 5
[[ledgers]]
id = 2
{E5}
too_low = 3
[[ledgers]]
id = 3
{E5}
last_entry = 57
too_low = 2
"""
    )
    one, two, three = (state.ledgers[i] for i in (1, 2, 3))
    assert (one.written, one.truncated, one.kept_by) == (64, 0, "bookie-1")
    assert [e for e in expand(state.held_groups("bookie-1", 1) or ()) if e > 59] == [60, 61, 62, 63, 64]
    for bookie in ("bookie-2", "bookie-3"):
        assert max(expand(state.held_groups(bookie, 1) or ())) == 59
    assert one.dropped("bookie-1") == () and one.dropped("bookie-2") == ((60, 64),)
    # E = 5, WQ = 2: entry 62 goes to positions 2 and 3; position 2 keeps its stripe of 60..62 (61 and 62).
    assert two.kept_by == "bookie-3"
    assert [e for e in expand(state.held_groups("bookie-3", 2) or ()) if e > 59] == [61, 62]
    # Entry 59 goes to positions 4 and 0 (wrapping): the first in ensemble order is position 0.
    assert three.kept_by == "bookie-1"
    assert [e for e in expand(state.held_groups("bookie-1", 3) or ()) if e > 57] == [59]
    for lid, spec in ((2, two), (3, three)):
        for bookie in spec.segments[0].ensemble:
            if bookie != spec.kept_by:
                assert max(expand(state.held_groups(bookie, lid) or ()), default=-1) <= spec.last_entry
    # Every entry the writer sent carries the entry before it, these ones included.
    assert state.entry_header(1, 64) == EntryHeader(1, 64, 63, 65 * 1024)
    assert state.entry_header(3, 59).last_add_confirmed == 58


# --------------------------------------------------------------------------- the ground truth


def test_the_truth_of_entries_after_the_end() -> None:
    state = state_of(
        f"""
[[ledgers]]
id = 1
{E123}
too_low = 5
[[ledgers]]
id = 2
{E123}
truncated = 3
[[ledgers]]
id = 3
{E123}
holdings = [{{ bookie = "bookie-2", add = [[60, 61]] }}]
[[ledgers]]
id = 4
{E123}
too_low = 1
[[ledgers]]
id = 5
{E5}
last_entry = 57
too_low = 2
[[ledgers]]
id = 6
{E123}
last_entry = -1
too_low = 4
"""
    )
    one = beyond_rows(state, 1)  # one copy, below AQ, but entry 64 carries 63 > 59: proven
    assert set(one) == {"bookie-1"} and one["bookie-1"].severity is Severity.CRITICAL
    assert entries(one["bookie-1"]) == [60, 61, 62, 63, 64] and one["bookie-1"].segment_first_entry == 0
    assert {v.category for v in ledger_truth(state, 1, 0.0)} == {Category.ENTRIES_BEYOND_LAST_ENTRY}
    two = beyond_rows(state, 2)  # every bookie kept its copies: AQ copies
    assert set(two) == {"bookie-1", "bookie-2", "bookie-3"}
    assert {v.severity for v in two.values()} == {Severity.CRITICAL}
    three = beyond_rows(state, 3)  # stray copies: never acknowledged, they carry 59
    assert set(three) == {"bookie-2"} and three["bookie-2"].severity is Severity.WARNING
    four = beyond_rows(state, 4)  # one entry dropped: it carries 59 itself, nothing proves it
    assert set(four) == {"bookie-1"} and four["bookie-1"].severity is Severity.WARNING
    five = beyond_rows(state, 5)  # entry 59 alone, on position 0, carrying 58 > 57
    assert set(five) == {"bookie-1"} and five["bookie-1"].severity is Severity.CRITICAL
    assert entries(five["bookie-1"]) == [59]
    six = beyond_rows(state, 6)  # closed empty over four acknowledged entries, as a real recovery did
    assert set(six) == {"bookie-1"} and six["bookie-1"].severity is Severity.CRITICAL
    assert entries(six["bookie-1"]) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("fault", "severity"),
    [
        ('fault = { kind = "slow", delay_s = 2 }', Severity.CRITICAL),  # listing and read by 4 s of 5
        ('fault = { kind = "slow", delay_s = 3 }', Severity.WARNING),  # the listing in time, not the read
        ('fault = "unresponsive"', None),  # nothing known of bookie-1
        ("limbo = [1]", None),
    ],
)
def test_the_proof_needs_the_keepers_read_in_time(fault: str, severity: Severity | None) -> None:
    state = state_of(f"[bookies.bookie-1]\n{fault}\n[[ledgers]]\nid = 1\n{E123}\ntoo_low = 5\n")
    rows = beyond_rows(state, 1)
    if severity is None:
        assert not rows
    else:
        assert set(rows) == {"bookie-1"} and rows["bookie-1"].severity is severity
    assert_agree(state, 0.0)


def test_the_generator_closes_too_low_ledgers_with_the_key() -> None:
    text, plan = generate(3000, parse_fault_mix("too_low=0.01,beyond=0.01"), 4)
    state = ClusterState.from_scenario(parse_scenario(text))
    assert len(plan.ledgers["too_low"]) == 30
    for lid in plan.ledgers["too_low"]:
        assert state.ledgers[lid].too_low == 3
        rows = beyond_rows(state, lid)
        assert list(rows) == [state.ledgers[lid].kept_by]
        assert rows[state.ledgers[lid].kept_by].severity is Severity.CRITICAL
    assert all(
        v.severity is Severity.WARNING for lid in plan.ledgers["beyond"] for v in beyond_rows(state, lid).values()
    )


# --------------------------------------------------------------------------- against a reference

_BOOKIES = tuple(f"bookie-{i}" for i in range(1, 7))
_FAULTS: dict[str, FaultSpec | None] = {
    "none": None,
    "unresponsive": FaultSpec(FaultKind.UNRESPONSIVE),
    "slow": FaultSpec(FaultKind.SLOW, delay_s=1.0),
    "slow read": FaultSpec(FaultKind.SLOW, delay_s=3.0),  # the listing in time (5 s), the read after it not
}


@st.composite
def closed_ledgers(draw: st.DrawFn) -> ClusterState:
    """A closed ledger ended early one way or another, some bookies faulty, some holding more or less."""
    size = draw(st.integers(1, 5))
    write = draw(st.integers(1, size))
    ack = draw(st.integers(1, write))
    last = draw(st.integers(-1, 12))
    kind = draw(st.sampled_from(["too_low", "truncated", "none"]))
    count = draw(st.integers(1, 6)) if kind != "none" else 0
    ensemble = tuple(draw(st.permutations(_BOOKIES))[:size])
    holdings: dict[str, Holding] = {}
    for bookie in draw(st.lists(st.sampled_from(ensemble), max_size=3, unique=True)):
        lo = draw(st.integers(0, last + count + 3))
        add = ((lo, lo + draw(st.integers(0, 4))),) if draw(st.booleans()) else ()
        gone = draw(st.integers(0, last + count + 3))
        missing = ((gone, gone + draw(st.integers(0, 4))),) if draw(st.booleans()) else ()
        holdings[bookie] = Holding(missing, add)
    spec = LedgerSpec(
        ledger_id=1,
        ensemble_size=size,
        write_quorum=write,
        ack_quorum=ack,
        state=LedgerState.CLOSED,
        last_entry=last,
        segments=(SegmentSpec(0, ensemble),),
        truncated=count if kind == "truncated" else 0,
        too_low=count if kind == "too_low" else 0,
        holdings={b: h for b, h in holdings.items() if not h.default},
    )
    check_ledger(spec, _BOOKIES, Where("ledger"))
    faults = {b: _FAULTS[draw(st.sampled_from(sorted(_FAULTS)))] for b in ensemble}
    scenario = Scenario(
        name="property",
        description="",
        seed=0,
        cluster=ClusterSpec(),
        checker=CheckerSpec(request_timeout_s=5.0),
        bookies=tuple(BookieSpec(b, fault=faults.get(b)) for b in _BOOKIES),
        ledgers=(spec,),
    )
    return ClusterState.from_scenario(scenario)


def reference(state: ClusterState) -> tuple[Severity, dict[str, list[int]]] | None:
    """``ENTRIES_BEYOND_LAST_ENTRY`` entry by entry, from the bookies' expanded holdings and the writer's rule."""
    spec = state.ledgers[1]
    last, written = spec.last_entry, spec.last_entry + spec.truncated + spec.too_low
    ensemble = spec.segments[-1].ensemble
    held: dict[str, list[int]] = {}
    for bookie in ensemble:
        fault = state.bookies[bookie].fault
        if fault is not None and fault.kind is FaultKind.UNRESPONSIVE:
            continue
        after = [e for e in expand(state.held_groups(bookie, 1) or ()) if e > last]
        if after:
            held[bookie] = after
    if not held:
        return None
    copies = any(
        sum(1 for w in range(spec.write_quorum) if entry in held.get(ensemble[(entry + w) % len(ensemble)], ()))
        >= spec.ack_quorum
        for after in held.values()
        for entry in after
    )
    proven = False
    for bookie, after in held.items():
        fault = state.bookies[bookie].fault
        if fault is not None and 2 * fault.delay_s >= state.checker.request_timeout_s:
            continue  # its read comes too late
        top = max(after)
        lac = top - 1 if top <= written else written  # acknowledged in order; nothing past what it sent
        proven = proven or lac > last
    return (Severity.CRITICAL if copies or proven else Severity.WARNING), held


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(closed_ledgers())
def test_the_truth_after_the_end_matches_an_entry_by_entry_reference(state: ClusterState) -> None:
    expected = reference(state)
    rows = beyond_rows(state, 1)
    if expected is None:
        assert not rows
    else:
        severity, held = expected
        assert {b: entries(v) for b, v in rows.items()} == held
        assert {v.severity for v in rows.values()} == {severity}


#: E = 3, WQ = 2, closed at 0, 2 entries too low: bookie-1 keeps entry 2 (and 0): a listing of two groups.
TWO_GROUPS = f"[[ledgers]]\nid = 1\n{E123}\nwrite_quorum = 2\nlast_entry = 0\ntoo_low = 2\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(closed_ledgers())
@example(state_of(TWO_GROUPS))
def test_the_truth_after_the_end_agrees_with_the_verdict(state: ClusterState) -> None:
    assert_agree(state, 0.0)


def test_a_ledger_closed_too_low_while_its_keeper_is_away_waits_for_it() -> None:
    """What real BookKeeper does: the recovery closes the ledger too low because the bookie that kept the entries is
    away. While it stays away the ledger needs it (nothing else can tell); once back, its copies' headers prove the
    close too low."""
    body = f"[[ledgers]]\nid = 1\n{E123}\nlast_entry = -1\ntoo_low = 30\n"
    away = state_of('[bookies.bookie-1]\nmode = "stopped"\n' + body)
    assert away.ledgers[1].kept_by == "bookie-1"
    truth = {(v.category, v.bookie) for v in ledger_truth(away, 1, 0.0)}
    assert truth == {(Category.BOOKIE_NOT_REGISTERED, "bookie-1")}
    assert_agree(away, 0.0)
    back = state_of(body)
    (beyond,) = ledger_truth(back, 1, 0.0)
    assert (beyond.category, beyond.severity, beyond.bookie) == (
        Category.ENTRIES_BEYOND_LAST_ENTRY,
        Severity.CRITICAL,
        "bookie-1",
    )
    assert assert_agree(back, 0.0) == 1
