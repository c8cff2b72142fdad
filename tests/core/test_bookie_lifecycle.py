"""A bookie's life as the watcher observes it: lost once, back, reformatted; against a simple reference."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.bookie_lifecycle import (
    BookieStatus,
    LifecycleEvent,
    LifecycleKind,
    Statuses,
    next_due_ms,
    observe,
)

pytestmark = pytest.mark.unit

AFTER = 300_000
B = "bookie-1:3181"


def run(steps: Sequence[tuple[int, bool, int | None]]) -> list[tuple[int, LifecycleKind]]:
    """Observe one bookie over (time, registered, cookie) steps; the events with the step time."""
    known: Statuses | None = None
    out: list[tuple[int, LifecycleKind]] = []
    for now, registered, cookie in steps:
        known, events = observe(
            known, {B} if registered else set(), {} if cookie is None else {B: cookie}, now_ms=now, lost_after_ms=AFTER
        )
        out += [(now, e.kind) for e in events]
    return out


def test_the_first_observation_only_sets_the_scene() -> None:
    statuses, events = observe(None, {"a"}, {"a": 5, "b": 7}, now_ms=1_000, lost_after_ms=AFTER)
    assert events == []
    assert statuses == {"a": BookieStatus(True, 5), "b": BookieStatus(False, 7, unregistered_ms=1_000)}
    assert next_due_ms(statuses, lost_after_ms=AFTER) == 1_000 + AFTER


def test_a_bookie_away_past_the_delay_is_lost_once_and_returns() -> None:
    steps = [(0, True, 1), (10_000, False, 1), (10_000 + AFTER - 1, False, 1), (10_000 + AFTER, False, 1)]
    steps += [(20_000 + AFTER, False, 1), (30_000 + AFTER, True, 1), (40_000 + AFTER, True, 1)]
    assert run(steps) == [(10_000 + AFTER, LifecycleKind.LOST), (30_000 + AFTER, LifecycleKind.RETURNED)]


def test_the_lost_event_says_since_when() -> None:
    known, _ = observe(None, {B}, {B: 1}, now_ms=0, lost_after_ms=AFTER)
    known, _ = observe(known, set(), {B: 1}, now_ms=5_000, lost_after_ms=AFTER)
    _, events = observe(known, set(), {B: 1}, now_ms=5_000 + AFTER, lost_after_ms=AFTER)
    assert events == [LifecycleEvent(LifecycleKind.LOST, B, 5_000)]


def test_a_short_outage_is_a_restart() -> None:
    steps = [(0, True, 1), (1_000, False, 1), (2_000, True, 1), (2_000 + AFTER, True, 1)]
    assert run(steps) == [(2_000, LifecycleKind.RESTARTED)]


def test_a_new_cookie_counts_when_the_bookie_registers_with_it() -> None:
    # Formatted again: unregistered, cookie deleted, a new cookie made, then registered.
    steps = [(0, True, 1), (1_000, False, 1), (2_000, False, None), (3_000, False, 9), (4_000, True, 9)]
    assert run(steps) == [(4_000, LifecycleKind.COOKIE_CHANGED)]


def test_a_lost_bookie_back_with_a_new_cookie_is_one_event() -> None:
    steps = [(0, True, 1), (1_000, False, None), (1_000 + AFTER, False, 2), (2_000 + AFTER, True, 2)]
    assert run(steps) == [(1_000 + AFTER, LifecycleKind.LOST), (2_000 + AFTER, LifecycleKind.COOKIE_CHANGED)]


def test_a_new_bookie_is_not_an_event() -> None:
    known, _ = observe(None, {"a"}, {"a": 1}, now_ms=0, lost_after_ms=AFTER)
    _, events = observe(known, {"a", "new"}, {"a": 1, "new": 2}, now_ms=1_000, lost_after_ms=AFTER)
    assert events == []


def _reference(steps: list[tuple[int, bool, int | None]]) -> list[tuple[int, LifecycleKind]]:
    """The rules spelled out for one bookie, step by step: known from its first registration or cookie; its cookie
    the one of the first observation (or of its first registration), compared at each registration."""
    out: list[tuple[int, LifecycleKind]] = []
    known = False
    cookie: int | None = None
    away_since: int | None = None
    lost = False
    for index, (now, registered, seen) in enumerate(steps):
        if not known:
            if not registered and seen is None:
                continue
            known = True
            cookie = seen if registered or index == 0 else None
            away_since = None if registered else now
        elif registered:
            if seen is not None and cookie is not None and seen != cookie:
                out.append((now, LifecycleKind.COOKIE_CHANGED))
            elif lost:
                out.append((now, LifecycleKind.RETURNED))
            elif away_since is not None:
                out.append((now, LifecycleKind.RESTARTED))
            cookie = seen if seen is not None else cookie
            away_since, lost = None, False
        elif away_since is None:
            away_since = now
        if away_since is not None and not lost and now - away_since >= AFTER:
            out.append((now, LifecycleKind.LOST))
            lost = True
    return out


@given(
    st.lists(
        st.tuples(st.integers(0, 2 * AFTER), st.booleans(), st.one_of(st.none(), st.integers(1, 3))),
        min_size=1,
        max_size=30,
    )
)
def test_observe_follows_the_reference(raw: list[tuple[int, bool, int | None]]) -> None:
    now = 0
    steps = []
    for gap, registered, cookie in raw:
        now += gap
        steps.append((now, registered, cookie))
    assert run(steps) == _reference(steps)
