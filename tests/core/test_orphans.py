"""The orphan rule: held without metadata since a first sighting, past the grace; judged page by page.

Unit and property tests against a reference that sees the whole listing at once.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.held_ledgers import LISTING_START, HeldLedger, LedgerPage
from scrutiny.core.orphans import Orphan, held_without_metadata, judge_page

pytestmark = pytest.mark.unit

GRACE = 1_000
NOW = 50_000


def page(*ids: int, end: bool = False) -> LedgerPage:
    return LedgerPage(tuple(HeldLedger(i, first_entry_id=0, last_entry_id=9) for i in ids), end=end)


def test_a_first_sighting_starts_the_grace_and_a_later_one_past_it_is_an_orphan() -> None:
    first = judge_page(page(3, 5, end=True), LISTING_START, {5}.__contains__, {}, now_ms=NOW, grace_ms=GRACE)
    assert first.orphans == () and first.sightings == {3: NOW} and first.cleared == ()
    early = judge_page(
        page(3, 5, end=True), -1, {5}.__contains__, first.sightings, now_ms=NOW + GRACE - 1, grace_ms=GRACE
    )
    assert early.orphans == () and early.sightings == {3: NOW}
    late = judge_page(page(3, 5, end=True), -1, {5}.__contains__, first.sightings, now_ms=NOW + GRACE, grace_ms=GRACE)
    assert late.orphans == (Orphan(HeldLedger(3, first_entry_id=0, last_entry_id=9), NOW),)


def test_sightings_clear_when_collected_or_given_metadata_and_other_pages_are_left_alone() -> None:
    sightings = {2: 1, 4: 1, 6: 1, 20: 1}
    # The page speaks for ids 1..6: 2 is gone (collected), 4 has metadata (a lagging snapshot), 6 is still held.
    judged = judge_page(page(4, 6), 0, {4}.__contains__, sightings, now_ms=NOW, grace_ms=GRACE)
    assert judged.cleared == (2, 4)
    assert judged.sightings == {6: 1}  # 20 belongs to a later page: neither kept nor cleared here
    assert [o.ledger.ledger_id for o in judged.orphans] == [6]
    last = judge_page(page(end=True), 6, lambda _i: False, sightings, now_ms=NOW, grace_ms=GRACE)
    assert last.cleared == (20,) and last.sightings == {}


def test_the_merge_with_sorted_metadata_finds_exactly_the_ledgers_without_it() -> None:
    held = [HeldLedger(i) for i in (1, 2, 5, 9, 10)]
    assert [h.ledger_id for h in held_without_metadata(held, [0, 2, 3, 9, 11])] == [1, 5, 10]
    assert [h.ledger_id for h in held_without_metadata(held, [])] == [1, 2, 5, 9, 10]


@given(
    held=st.sets(st.integers(0, 60)),
    metadata=st.sets(st.integers(0, 60)),
    seen=st.dictionaries(st.integers(0, 60), st.integers(0, 2 * GRACE)),
    size=st.integers(1, 8),
)
def test_paging_agrees_with_judging_the_whole_listing_at_once(
    held: set[int], metadata: set[int], seen: dict[int, int], size: int
) -> None:
    now = 2 * GRACE
    ids = sorted(held)
    after, sightings = LISTING_START, dict(seen)
    orphans: list[tuple[int, int]] = []
    cleared: list[int] = []
    while True:
        chunk = [i for i in ids if i > after][:size]
        end = not [i for i in ids if i > after][size:]
        judged = judge_page(page(*chunk, end=end), after, metadata.__contains__, seen, now_ms=now, grace_ms=GRACE)
        orphans += [(o.ledger.ledger_id, o.since_ms) for o in judged.orphans]
        cleared += judged.cleared
        for lid in judged.cleared:
            sightings.pop(lid)
        sightings.update(judged.sightings)
        if end:
            break
        after = chunk[-1]
    candidates = held - metadata
    assert sightings == {i: seen.get(i, now) for i in candidates}
    assert sorted(cleared) == sorted(set(seen) - candidates)
    assert orphans == [(i, seen[i]) for i in sorted(candidates) if i in seen and now - seen[i] >= GRACE]
    assert [h.ledger_id for h in held_without_metadata([HeldLedger(i) for i in ids], sorted(metadata))] == sorted(
        candidates
    )
