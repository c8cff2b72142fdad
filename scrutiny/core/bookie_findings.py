"""The cluster-level finding ``BOOKIE_LOST``: opened by the watcher's word that a bookie is lost, resolved when the
bookie registers again. Pure, no I/O.

Its open findings are kept like a ledger's, in a :class:`~scrutiny.core.ledger_tracker.TrackedLedger` whose open keys
are ``("BOOKIE_LOST", bookie, -1)`` (the streaming job stores it under the pseudo ledger id of cluster-level findings).
The watcher may say a bookie is lost more than once (a restarted watcher starts its clock again): a bookie already
reported is not reported again.
"""

from __future__ import annotations

from dataclasses import replace

from scrutiny.core.ledger_tracker import Outcome, Step, TrackedLedger, ViolationKey
from scrutiny.core.utc_text import format_utc_ms
from scrutiny.core.verdict import Violation
from scrutiny.core.vocabulary import FIXED_SEVERITY, Category

_LOST = Category.BOOKIE_LOST


def lost_key(bookie: str) -> ViolationKey:
    """The open key of ``bookie``'s ``BOOKIE_LOST``."""
    return (_LOST.value, bookie, -1)


def on_bookie_lost(
    state: TrackedLedger | None, bookie: str, *, unregistered_ms: int, ledgers: int, entries: int
) -> Step:
    """The watcher says ``bookie`` is lost."""
    state = state or TrackedLedger()
    if lost_key(bookie) in state.open:
        return Step(state)
    details = (
        f"unregistered since {format_utc_ms(unregistered_ms)}; it held {ledgers} closed ledger(s), "
        f"{entries} entries by its write sets, each to be marked under-replicated or re-replicated"
    )
    found = Violation(_LOST, FIXED_SEVERITY[_LOST], bookie=bookie, details=details)
    return Step(replace(state, open=(*state.open, lost_key(bookie))), Outcome(found=(found,)))


def on_bookie_registered(state: TrackedLedger | None, bookie: str) -> Step:
    """``bookie`` registered (writable or read-only): its ``BOOKIE_LOST``, if open, resolves."""
    if state is None or lost_key(bookie) not in state.open:
        return Step(state)
    remaining = tuple(k for k in state.open if k != lost_key(bookie))
    after = replace(state, open=remaining) if remaining else None
    return Step(after, Outcome(resolved=(lost_key(bookie),)))
