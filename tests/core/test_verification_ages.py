"""The count of ledgers by the age of their last verification, against a plain list of every ledger's time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.verification_ages import VerifiedSlots, slot_width_ms

pytestmark = pytest.mark.unit

INTERVAL = 256_000
GRACE = 32_000
NAMES = ("0-25%", "25-50%", "50-75%", "75-100%", "late", "overdue")


def reference_class(age_ms: int) -> str:
    """The class of an age, straight from the rule: quarters of the interval, late within the grace, overdue."""
    if age_ms >= INTERVAL + GRACE:
        return "overdue"
    if age_ms >= INTERVAL:
        return "late"
    return NAMES[age_ms * 4 // INTERVAL]


moves = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 600_000)), max_size=60)


@given(moves, st.integers(600_000, 1_000_000))
def test_the_counts_follow_every_ledger_s_last_verification(changes: list[tuple[int, int]], now: int) -> None:
    slots = VerifiedSlots(slot_width_ms(INTERVAL))
    last: dict[int, int] = {}
    for ledger, at in changes:
        slots.move(last.get(ledger), at)
        last[ledger] = at
    for ledger in list(last)[::3]:  # some forgotten (deleted)
        slots.move(last.pop(ledger), None)
    assert slots.total() == len(last)
    restored = VerifiedSlots.from_doc(slots.to_doc())
    classes = {c.name: c.ledgers for c in restored.classes(now, interval_ms=INTERVAL, grace_ms=GRACE)}
    # A slot is 1 s wide: every age is known within half a slot, so compare with the ages of the slots' middles
    # (a verification in the current slot is younger than its middle: no age is negative).
    width = slot_width_ms(INTERVAL)
    expected = dict.fromkeys(NAMES, 0)
    for at in last.values():
        expected[reference_class(max(0, now - (at - at % width + width // 2)))] += 1
    assert classes == expected
    if last:
        assert restored.oldest_ms() == min(at - at % width for at in last.values())


def test_classes_name_their_bounds_and_a_ledger_counted_nowhere_is_not_taken_away() -> None:
    slots = VerifiedSlots(1000)
    slots.move(5_000, None)  # verified before the counts were kept
    assert slots.total() == 0 and slots.counts == {}
    slots.move(None, 5_000)
    classes = slots.classes(5_000 + INTERVAL + GRACE + 1_000, interval_ms=INTERVAL, grace_ms=GRACE)
    assert [(c.name, c.from_s, c.to_s, c.ledgers, c.overdue) for c in classes][-2:] == [
        ("late", 256.0, 288.0, 0, False),
        ("overdue", 288.0, None, 1, True),
    ]
    assert slot_width_ms(7 * 86_400_000) == 7 * 86_400_000 // 256 and slot_width_ms(10) == 1000
