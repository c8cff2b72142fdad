"""The slots' copier makes what dataclasses.replace makes, and leaves the classes it cannot copy to it."""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core import slot_replace
from scrutiny.core.ledger_tracker import Outcome, TrackedLedger
from scrutiny.core.slot_replace import replace

pytestmark = pytest.mark.unit

VALUES = st.none() | st.integers() | st.booleans() | st.binary(max_size=8) | st.tuples(st.text(max_size=3))
NAMES = [f.name for f in dataclasses.fields(TrackedLedger)]


@given(st.dictionaries(st.sampled_from(NAMES), VALUES), st.dictionaries(st.sampled_from(NAMES), VALUES))
def test_a_copy_is_what_dataclasses_replace_makes(start: dict[str, Any], changes: dict[str, Any]) -> None:
    original = TrackedLedger(**start)
    copy = replace(original, **changes)
    expected = dataclasses.replace(original, **changes)
    assert type(copy) is TrackedLedger and copy == expected
    assert all(getattr(copy, name) is getattr(expected, name) for name in NAMES)  # the values themselves
    assert original == TrackedLedger(**start)  # left as it was
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.version = 1  # type: ignore[misc]


def test_an_unknown_field_is_refused_as_dataclasses_replace_refuses_it() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'versions'"):
        replace(TrackedLedger(), versions=2)
    assert replace(Outcome(version=3)) == Outcome(version=3)  # the same on another slotted class


@dataclass(frozen=True, slots=True)
class Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


@dataclass(frozen=True, slots=True)
class Derived:
    value: int
    twice: int = field(init=False)
    scale: InitVar[int] = 2

    def __post_init__(self, scale: int) -> None:
        object.__setattr__(self, "twice", self.value * scale)


@dataclass(frozen=True)
class NoSlots:
    value: int


def test_classes_whose_init_does_more_are_copied_by_dataclasses_replace() -> None:
    with pytest.raises(ValueError, match="negative"):
        replace(Checked(1), value=-1)  # __post_init__ ran
    assert replace(Derived(2), value=5).twice == 10
    assert replace(NoSlots(1), value=2) == NoSlots(2)
    assert slot_replace._COPIERS[Checked] is None and slot_replace._COPIERS[NoSlots] is None
    assert slot_replace._COPIERS[TrackedLedger] is not None
