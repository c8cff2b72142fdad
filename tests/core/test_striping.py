from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.striping import expected_groups, expected_residues, segment_spans, span_of_entry, write_set
from tests.support.strategies import expand_set


def test_write_set_is_round_robin_on_the_ledger_entry_id() -> None:
    assert write_set(0, 5, 2) == [0, 1]
    assert write_set(4, 5, 3) == [4, 0, 1]
    assert write_set(12, 5, 2) == [2, 3]


def test_segment_spans_closed_and_open() -> None:
    ensembles = [("a",), ("b",), ("c",)]
    spans = segment_spans([0, 10, 10], ensembles, 25)
    assert [(s.first, s.last, s.empty) for s in spans] == [(0, 9, False), (10, 9, True), (10, 25, False)]
    assert [(s.first, s.last) for s in segment_spans([0, 10], ensembles[:2], None)] == [(0, 9)]
    assert segment_spans([0, 30], ensembles[:2], 20)[1].empty  # last segment beyond lastEntryId


def test_segment_spans_of_a_closed_ledger_end_at_its_last_entry() -> None:
    ensembles = [("a",), ("b",), ("c",)]
    spans = segment_spans([0, 10, 20], ensembles, 5)
    assert [(s.first, s.last) for s in spans] == [(0, 5), (10, 5), (20, 5)]
    assert [s.empty for s in spans] == [False, True, True]


def test_span_of_entry_is_the_last_segment_starting_at_or_before_it() -> None:
    spans = segment_spans([0, 10, 10, 20], [("a",), ("b",), ("c",), ("d",)], 5)
    assert span_of_entry(spans, 6) == spans[0]
    assert span_of_entry(spans, 10) == spans[2]
    assert span_of_entry(spans, 25) == spans[3]
    assert span_of_entry(segment_spans([3], [("a",)], 9), 1) is None


def test_a_billion_entry_stripe_is_a_few_groups() -> None:
    groups = expected_groups(3, 5, 2, 0, 10**9 - 1)
    assert len(groups) <= 3
    assert sum(g.count for g in groups) == 2 * 10**9 // 5


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.data())
def test_expected_groups_match_the_write_sets(e: int, data: st.DataObject) -> None:
    wq = data.draw(st.integers(1, e))
    first = data.draw(st.integers(0, 50))
    last = data.draw(st.integers(first - 1, first + 60))
    for index in range(e):
        naive = {entry for entry in range(first, last + 1) if index in write_set(entry, e, wq)}
        assert expand_set(expected_groups(index, e, wq, first, last)) == naive
        mask = expected_residues(index, e, wq, 2 * e)
        assert {r for r in range(2 * e) if mask >> r & 1} == {r for r in range(2 * e) if index in write_set(r, e, wq)}
