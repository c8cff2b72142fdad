"""The orphan rule: held without metadata since a first sighting, past the grace; judged one id range at a time.

Unit tests, and a property test against a reference that sees the whole listing at once.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.held_ledgers import LISTING_START, HeldLedger
from scrutiny.core.orphans import IdRange, Orphan, judge_range, orphan_violation, resolved_orphans
from scrutiny.core.vocabulary import Category, Severity

pytestmark = pytest.mark.unit

GRACE = 1_000
NOW = 50_000
EVERY_ID = IdRange(LISTING_START, None)


def held(*ids: int) -> list[HeldLedger]:
    return [HeldLedger(i, first_entry_id=0, last_entry_id=9) for i in ids]


def test_a_first_sighting_starts_the_grace_and_a_later_one_past_it_is_an_orphan() -> None:
    first = judge_range(held(3), EVERY_ID, {}, now_ms=NOW, grace_ms=GRACE)
    assert first.orphans == () and first.sightings == {3: NOW} and first.cleared == ()
    early = judge_range(held(3), EVERY_ID, first.sightings, now_ms=NOW + GRACE - 1, grace_ms=GRACE)
    assert early.orphans == () and early.sightings == {3: NOW}
    late = judge_range(held(3), EVERY_ID, first.sightings, now_ms=NOW + GRACE, grace_ms=GRACE)
    assert late.orphans == (Orphan(HeldLedger(3, first_entry_id=0, last_entry_id=9), NOW),)
    assert late.sightings == {3: NOW}  # the first sighting stays the first


def test_sightings_clear_when_no_longer_held_without_metadata_and_other_ranges_are_left_alone() -> None:
    sightings = {2: 1, 4: 1, 6: 1, 20: 1}
    # The range 1..6: 2 and 4 are gone (collected, or given metadata by a lagging snapshot), 6 is still held.
    judged = judge_range(held(6), IdRange(0, 6), sightings, now_ms=NOW, grace_ms=GRACE)
    assert judged.cleared == (2, 4)
    assert judged.sightings == {6: 1}  # 20 belongs to a later range: neither kept nor cleared here
    assert [o.ledger.ledger_id for o in judged.orphans] == [6]
    assert resolved_orphans([2, 6, 20], IdRange(0, 6), judged) == [2]
    last = judge_range([], IdRange(6, None), sightings, now_ms=NOW, grace_ms=GRACE)
    assert last.cleared == (20,) and last.sightings == {}
    assert resolved_orphans([2, 6, 20], IdRange(6, None), last) == [20]


def test_an_open_finding_stays_while_the_ledger_is_held_even_when_its_sighting_was_lost() -> None:
    judged = judge_range(held(6), EVERY_ID, {}, now_ms=NOW, grace_ms=GRACE)
    assert judged.orphans == ()
    assert resolved_orphans([6], EVERY_ID, judged) == []


def test_the_finding_names_the_bookie_the_entries_and_how_long() -> None:
    orphan = Orphan(HeldLedger(7, has_ledger_record=False, limbo=True, first_entry_id=3, last_entry_id=41), 1_000)
    found = orphan_violation("bk-1:3181", orphan, now_ms=3_601_000)
    assert (found.category, found.severity, found.bookie) == (Category.ORPHAN_LEDGER, Severity.WARNING, "bk-1:3181")
    assert json.loads(found.details) == {
        "first_seen_without_metadata": "1970-01-01T00:00:01Z",
        "seconds_without_metadata": 3600.0,
        "first_entry_id": 3,
        "last_entry_id": 41,
        "has_ledger_record": False,
        "limbo": True,
    }


@given(
    listed=st.sets(st.integers(0, 60)),
    metadata=st.sets(st.integers(0, 60)),
    seen=st.dictionaries(st.integers(0, 60), st.integers(0, 2 * GRACE)),
    size=st.integers(1, 8),
)
def test_judging_range_by_range_agrees_with_judging_the_whole_listing_at_once(
    listed: set[int], metadata: set[int], seen: dict[int, int], size: int
) -> None:
    now = 2 * GRACE
    ids = sorted(listed)
    after, sightings = LISTING_START, dict(seen)
    orphans: list[tuple[int, int]] = []
    cleared: list[int] = []
    while True:
        chunk = [i for i in ids if i > after][:size]
        end = not [i for i in ids if i > after][size:]
        span = IdRange(after, None if end else chunk[-1])
        judged = judge_range(held(*(i for i in chunk if i not in metadata)), span, seen, now_ms=now, grace_ms=GRACE)
        orphans += [(o.ledger.ledger_id, o.since_ms) for o in judged.orphans]
        cleared += judged.cleared
        for lid in judged.cleared:
            sightings.pop(lid)
        sightings.update(judged.sightings)
        if end:
            break
        after = chunk[-1]
    candidates = listed - metadata
    assert sightings == {i: seen.get(i, now) for i in candidates}
    assert sorted(cleared) == sorted(set(seen) - candidates)
    assert orphans == [(i, seen[i]) for i in sorted(candidates) if i in seen and now - seen[i] >= GRACE]
