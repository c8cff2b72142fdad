"""How long ago each ledger was last verified, counted for the whole cluster: the re-verification's own health.

Ceph warns when a placement group was not deep-scrubbed in time; the checker does the same per ledger
(``CHECK_OVERDUE``), and this module keeps the distribution that shows it coming: the number of ledgers by the age
of their last verified check (every bookie answered). The counts are kept per **slot** of verification time (a
fixed width, so an age is known within one slot) and moved as ledgers are verified again or forgotten; ages are
computed at the moment asked, in classes relative to the re-verification interval: four quarters of it, then late
(past the interval, within the grace) and overdue (past both).

Pure: the counts and the arithmetic, no clock and no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

#: Slots per re-verification interval (an age is known within interval / SLOTS_PER_INTERVAL).
SLOTS_PER_INTERVAL: Final = 256


@dataclass(frozen=True, slots=True)
class AgeClass:
    """Ledgers whose last verification is ``from_s`` to ``to_s`` seconds old (``to_s`` None: no upper bound)."""

    name: str
    from_s: float
    to_s: float | None
    ledgers: int
    overdue: bool


def slot_width_ms(interval_ms: int) -> int:
    """The width of a slot for a re-verification interval: a 256th of it, at least one second."""
    return max(1000, interval_ms // SLOTS_PER_INTERVAL)


class VerifiedSlots:
    """Counts of ledgers by the slot of their last verification (slot start in ms → ledgers)."""

    def __init__(self, slot_ms: int, counts: Mapping[int, int] | None = None) -> None:
        if slot_ms <= 0:
            raise ValueError(f"the slot width must be positive, not {slot_ms}")
        self.slot_ms = slot_ms
        self.counts: dict[int, int] = {}
        for start, count in (counts or {}).items():
            self._add(start, count)

    def copy(self) -> VerifiedSlots:
        """An independent copy."""
        return VerifiedSlots(self.slot_ms, self.counts)

    def move(self, was_ms: int | None, now_ms: int | None) -> None:
        """One ledger's last verification went from ``was_ms`` to ``now_ms`` (None: none, i.e. new or forgotten).

        A ledger counted nowhere (verified before the counts were kept) is not taken from an empty slot."""
        if was_ms is not None and self._start(was_ms) in self.counts:
            self._add(was_ms, -1)
        if now_ms is not None:
            self._add(now_ms, 1)

    def total(self) -> int:
        """Ledgers counted."""
        return sum(self.counts.values())

    def oldest_ms(self) -> int | None:
        """The start of the oldest slot holding a ledger (None when none)."""
        return min(self.counts, default=None)

    def classes(self, now_ms: int, *, interval_ms: int, grace_ms: int) -> tuple[AgeClass, ...]:
        """The ledgers by age class at ``now_ms``: the four quarters of the interval, late, overdue. A slot's age is
        that of its middle (within half a slot of every ledger in it)."""
        bounds = [interval_ms * q // 4 for q in range(5)] + [interval_ms + grace_ms]
        names = ("0-25%", "25-50%", "50-75%", "75-100%", "late", "overdue")
        counts = [0] * len(names)
        for start, count in self.counts.items():
            age = now_ms - (start + self.slot_ms // 2)
            index = sum(1 for bound in bounds[1:] if age >= bound)
            counts[index] += count
        return tuple(
            AgeClass(
                name,
                bounds[i] / 1000,
                bounds[i + 1] / 1000 if i + 1 < len(bounds) else None,
                counts[i],
                overdue=name == "overdue",
            )
            for i, name in enumerate(names)
        )

    def to_doc(self) -> dict[str, object]:
        """As JSON: the width and the counts (slot starts as text keys)."""
        return {"slot_ms": self.slot_ms, "counts": {str(k): v for k, v in sorted(self.counts.items())}}

    @classmethod
    def from_doc(cls, doc: Mapping[str, object], *, slot_ms: int | None = None) -> VerifiedSlots:
        """The inverse of :meth:`to_doc`; with ``slot_ms`` (another width) the counts are put in the new slots."""
        counts = doc["counts"]
        width = doc["slot_ms"]
        assert isinstance(counts, Mapping) and isinstance(width, int)
        return cls(slot_ms or width, {int(k): int(v) for k, v in counts.items()})

    def _start(self, at_ms: int) -> int:
        return at_ms - at_ms % self.slot_ms

    def _add(self, at_ms: int, count: int) -> None:
        start = self._start(at_ms)
        total = self.counts.get(start, 0) + count
        if total:
            self.counts[start] = total
        else:
            del self.counts[start]
