from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.errors import FormatError, ScrutinyError
from scrutiny.core.periodic_sets import EntrySetTooComplexError, union_groups
from scrutiny.core.sequence_groups import (
    EntrySet,
    SequenceGroup,
    clip,
    expand,
    from_entries,
    group_problem,
    merge_consecutive,
    per_run,
    runs_in_window,
)
from tests.support.strategies import expand_set, sequence_groups


def test_group_arithmetic() -> None:
    group = SequenceGroup(3, 23, 2, 5)  # runs 3-4, 8-9, ..., 23-24
    assert group.runs == 5
    assert group.count == 10
    assert (group.first, group.last) == (3, 24)
    assert [group.contains(e) for e in (2, 3, 4, 5, 8, 24, 25)] == [False, True, True, False, True, True, False]
    assert list(expand([group])) == [3, 4, 8, 9, 13, 14, 18, 19, 23, 24]


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ((-1, -1, 1, 0), "negative first"),
        ((0, 0, 0, 0), "size 0 is not positive"),
        ((5, 4, 1, 1), "before first"),
        ((0, 3, 1, 0), "period 0 but last"),
        ((0, 7, 1, 5), "not first 0 plus a multiple of period 5"),
        ((0, 10, 6, 5), "exceeds period"),
        ((2**63 - 2, 2**63 - 2, 3, 0), "beyond the largest entry id"),
    ],
)
def test_inconsistent_groups_are_named(values: tuple[int, int, int, int], fragment: str) -> None:
    problem = group_problem(*values)
    assert problem is not None and fragment in problem
    with pytest.raises(FormatError, match=fragment) as info:
        SequenceGroup.of(*values)
    assert info.value.what == "sequence group"
    assert info.value.reason == problem
    # callers of external JSON catch ValueError or the root of the hierarchy: both work
    assert isinstance(info.value, ValueError) and isinstance(info.value, ScrutinyError)


def test_java_per_run_listing_of_a_healthy_stripe_merges_into_one_group() -> None:
    # E=5, WQ=2, bookie 0 holds entries e with (0 - e) mod 5 < 2: 0, 4-5, 9-10, ...
    entries = [e for e in range(1_000) if (0 - e) % 5 < 2]
    runs = per_run(from_entries(entries))
    assert len(runs) == 201
    merged = merge_consecutive(runs)
    assert merged == [SequenceGroup(0, 0, 1, 0), SequenceGroup(4, 994, 2, 5), SequenceGroup(999, 999, 1, 0)]
    assert list(expand(merged)) == entries


def test_touching_runs_fuse() -> None:
    assert merge_consecutive([SequenceGroup.run(0, 4), SequenceGroup.run(5, 9)]) == [SequenceGroup.run(0, 9)]
    assert merge_consecutive([SequenceGroup(0, 10, 5, 5)]) == [SequenceGroup.run(0, 14)]


def test_per_run_fuses_touching_runs_like_a_java_bookie() -> None:
    assert per_run([SequenceGroup.run(0, 4), SequenceGroup.run(5, 9)]) == [SequenceGroup.run(0, 9)]
    assert per_run([SequenceGroup(0, 10, 5, 5)]) == [SequenceGroup.run(0, 14)]  # runs 0-4, 5-9, 10-14
    # the last run of a periodic group touches the next group's run; a gap of one entry does not fuse
    assert per_run([SequenceGroup(0, 10, 2, 5), SequenceGroup.run(12, 13), SequenceGroup.run(15, 15)]) == [
        SequenceGroup.run(0, 1),
        SequenceGroup.run(5, 6),
        SequenceGroup.run(10, 13),
        SequenceGroup.run(15, 15),
    ]
    # single entries one after the other are one run
    assert per_run([SequenceGroup.run(e, e) for e in range(3, 9)]) == [SequenceGroup.run(3, 8)]
    assert per_run([]) == []


@st.composite
def sequential_groups(draw: st.DrawFn) -> list[SequenceGroup]:
    """Consistent groups, each starting after the previous one's last entry (often right after it)."""
    out: list[SequenceGroup] = []
    after = 0
    for group in draw(st.lists(sequence_groups(max_entry=0), max_size=8)):
        first = after + draw(st.sampled_from([0, 0, 1, 2, 5]))
        shift = first - group.first_start
        out.append(SequenceGroup(first, group.last_start + shift, group.size, group.period))
        after = out[-1].last + 1
    return out


@settings(max_examples=300, deadline=None)
@given(sequential_groups())
def test_per_run_is_one_group_per_maximal_run(groups: list[SequenceGroup]) -> None:
    runs = per_run(groups)
    assert list(expand(runs)) == list(expand(groups))
    assert all(run.period == 0 and run.first_start == run.last_start for run in runs)
    for before, after in itertools.pairwise(runs):
        assert after.first > before.last + 1  # never touching: each run is maximal


def test_runs_in_window_cuts_partial_runs() -> None:
    # runs of 3 every 10 starting at residue 8: ..., 8-10, 18-20, 28-30, ...
    got = runs_in_window(8, 3, 10, 9, 29)
    assert got == [SequenceGroup.run(9, 10), SequenceGroup(18, 18, 3, 0), SequenceGroup.run(28, 29)]


def test_entry_set_json_shape() -> None:
    entry_set = EntrySet.of([SequenceGroup(10, 10, 3, 0), SequenceGroup(0, 5, 1, 5)])
    assert entry_set.as_json_dict() == {"groups": [[0, 5, 1, 5], [10, 10, 3, 0]], "count": 5}
    assert entry_set.first == 0 and entry_set.last == 12
    assert entry_set.contains(11) and not entry_set.contains(6)


def test_billion_entry_stripe_stays_small() -> None:
    group = SequenceGroup(0, 999_999_995, 2, 5)
    assert group.count == 400_000_000
    assert union_groups([group, SequenceGroup(6, 6, 1, 0)]) == [SequenceGroup(0, 999_999_995, 2, 5)]


def test_irregular_listing_beyond_budget_is_refused() -> None:
    # period 4099 is co-prime with everything small: the modulus cannot absorb it, runs are expanded
    huge = SequenceGroup(0, 4099 * 2_000_000, 1, 4099)
    with pytest.raises(EntrySetTooComplexError):
        union_groups([huge, SequenceGroup(0, 4096 * 10, 1, 4096)])


@settings(max_examples=300, deadline=None)
@given(st.lists(sequence_groups(), max_size=6))
def test_union_matches_naive_sets(groups: list[SequenceGroup]) -> None:
    union = union_groups(groups)
    assert expand_set(union) == expand_set(groups)
    assert sum(g.count for g in union) == len(expand_set(groups))  # disjoint
    starts = [g.first_start for g in union]
    assert starts == sorted(starts)


@settings(max_examples=300, deadline=None)
@given(st.lists(sequence_groups(), max_size=6), st.integers(0, 150), st.integers(0, 150))
def test_clip_matches_naive(groups: list[SequenceGroup], lo: int, width: int) -> None:
    hi = lo + width
    clipped = [part for g in groups for part in clip(g, lo, hi)]
    assert expand_set(clipped) == {e for e in expand_set(groups) if lo <= e <= hi}


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 300), max_size=80))
def test_from_entries_round_trips(entries: set[int]) -> None:
    groups = from_entries(sorted(entries))
    assert list(expand(groups)) == sorted(entries)
    assert expand_set(per_run(groups)) == entries
