"""The ledgers of a bookie, found in the metadata the watcher holds."""

from __future__ import annotations

import pytest

from scrutiny.core.ledger_metadata import LedgerState, Segment, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.metadata_view import Node, NodeStat
from scrutiny.watcher.bookie_ledgers import LedgerSearch, ledgers_of

pytestmark = pytest.mark.unit

STAT = NodeStat(1, 1, 1, 0, 0)


def node(segments: list[Segment], *, state: LedgerState = LedgerState.CLOSED, last: int = 9) -> Node:
    metadata = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=segments, state=state, last_entry_id=last
    )
    return Node(encode_ledger_metadata_v3(metadata), STAT)


def test_closed_ledgers_and_sealed_segments_with_the_bookie_and_its_entries() -> None:
    abc = ("a:1", "b:1", "c:1")
    ledgers = {
        5: node([Segment(0, abc)]),  # b holds entries e with (1 - e) mod 3 < 2: 0,1,3,4,6,7,9 -> 7 of 0..9
        3: node([Segment(0, ("a:1", "c:1", "d:1")), Segment(5, abc)]),  # b only in the second segment: 5..9 -> 3
        7: node([Segment(0, abc)], state=LedgerState.OPEN, last=-1),  # open, nothing sealed: not checked
        8: node([Segment(0, abc), Segment(4, ("a:1", "c:1", "d:1"))], state=LedgerState.OPEN, last=-1),  # 0..3 -> 3
        9: node([Segment(0, ("a:1", "c:1", "b:10"))]),  # "b:10" contains "b:1" but is another bookie
        11: Node(b"b:1 but not metadata", STAT),
    }
    found = ledgers_of(ledgers, "b:1")
    assert [lid for lid, _ in found.ledgers] == [3, 5, 8]
    assert found.ledgers[0][1] is ledgers[3]
    assert found.entries == 7 + 3 + 3
    assert [lid for lid, _ in found.writing] == [7]  # open, being written to b:1 (8's current ensemble lacks it)


def test_no_ledger_of_an_unknown_bookie() -> None:
    found = ledgers_of({1: node([Segment(0, ("a:1", "b:1", "c:1"))])}, "z:9")
    assert (found.ledgers, found.entries) == ([], 0)


def test_a_search_in_slices_finds_what_one_pass_finds_reading_each_ledger_when_its_turn_comes() -> None:
    abc = ("a:1", "b:1", "c:1")
    ledgers = {lid: node([Segment(0, abc if lid % 3 else ("a:1", "c:1", "d:1"))]) for lid in range(1, 30)}
    whole = ledgers_of(ledgers, "b:1")
    search = LedgerSearch(sorted(ledgers), "b:1")
    slices = []
    while search.remaining():
        slices.append([lid for lid, _ in search.step(ledgers, 4).ledgers])
    assert len(slices) == 8 and all(len(s) <= 4 for s in slices)
    assert [lid for s in slices for lid in s] == [lid for lid, _ in whole.ledgers]
    assert search.found.entries == whole.entries

    search.restart()  # from the first ledger again; meanwhile 1 deleted, 2 moved off b:1, 40 created
    assert search.remaining() == 29 and search.found.ledgers == []
    current = {**ledgers, 2: node([Segment(0, ("a:1", "c:1", "d:1"))]), 40: node([Segment(0, abc)])}
    del current[1]
    search.step(current, 100)
    assert search.remaining() == 0
    assert [lid for lid, _ in search.found.ledgers] == [lid for lid, _ in whole.ledgers if lid not in (1, 2)]
