"""When a ledger is verified again: the rolling re-verification's schedule (pure arithmetic, no clock).

Every ledger checked once is checked again at least once per interval, whatever happens to it meanwhile: a disk
that dies, a bookie wiped or decommissioned after the ledger closed shows only to a check made after the fact. The
re-verifications are spread evenly over the interval, whatever the moment the ledgers were first checked (a
backlog checked in one minute is not re-checked in one minute a week later): each group of ledgers (the streaming
checker's bucket) has a fixed **phase** in the interval, and its ledgers are due at the next moment
``phase + k × interval`` after their last check. The phases of consecutive groups are spread by Fibonacci
hashing (the group times the golden ratio, modulo 1), a low-discrepancy sequence: any run of consecutive groups
covers the interval about evenly, which matters because BookKeeper allocates ledger ids in sequence.

Schedules are absolute times, so a restart changes nothing; what came due while the job was stopped is caught up at
the rate the job allows (the streaming processor's budget), not in one burst.
"""

from __future__ import annotations

from typing import Final

#: 2**64 / golden ratio, odd: multiplying by it modulo 2**64 spreads consecutive integers evenly (Knuth).
_GOLDEN: Final = 0x9E3779B97F4A7C15
_MASK: Final = (1 << 64) - 1


def phase_ms(group: int, interval_ms: int) -> int:
    """The offset in ``[0, interval_ms)`` at which ``group``'s re-verifications fall due."""
    if interval_ms <= 0:
        raise ValueError(f"the interval must be positive, not {interval_ms}")
    return (((group * _GOLDEN) & _MASK) * interval_ms) >> 64


def next_reverify_ms(group: int, after_ms: int, interval_ms: int) -> int:
    """The first moment strictly after ``after_ms`` at which ``group`` is due: within ``interval_ms`` of it."""
    phase = phase_ms(group, interval_ms)
    return phase + ((after_ms - phase) // interval_ms + 1) * interval_ms
