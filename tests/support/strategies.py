"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from scrutiny.core.sequence_groups import SequenceGroup


@st.composite
def sequence_groups(draw: st.DrawFn, max_entry: int = 200) -> SequenceGroup:
    """Any consistent group within [0, max_entry + a run]."""
    first = draw(st.integers(0, max_entry))
    size = draw(st.integers(1, 8))
    if draw(st.booleans()):
        return SequenceGroup(first, first, size, 0)
    period = draw(st.integers(size, 16))
    runs = draw(st.integers(1, 12))
    return SequenceGroup(first, first + (runs - 1) * period, size, period)


def expand_set(groups: list[SequenceGroup] | tuple[SequenceGroup, ...]) -> set[int]:
    """The entries of groups as a Python set (the naive reference)."""
    out: set[int] = set()
    for group in groups:
        for first, last in group.run_bounds():
            out.update(range(first, last + 1))
    return out
