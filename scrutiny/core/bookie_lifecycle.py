"""A bookie's life as the watcher sees it in ZooKeeper: registered, gone, lost, back, reformatted. Pure, no I/O.

The watcher observes, again and again, which bookies are registered (writable or read-only) and each bookie's cookie
(``<root>/cookies/<id>``, identified by the znode's last modification, ``mzxid``: a reformatted or replaced bookie
deletes it and makes a new one, and a cookie rewritten in place, e.g. with another instance id, changes it too).
:func:`observe` compares an observation with the statuses it returned last time and says what calls for the bookie's
ledgers to be checked again:

* **lost**: a bookie unregistered for ``lost_after_ms`` (BookKeeper's ``lostBookieRecoveryDelay`` plus a grace) is
  lost, once; its closed ledgers must then be marked under-replicated or re-replicated;
* **returned**: a lost bookie registered again (what it holds may be anything: an empty disk, an old copy);
* **cookie changed**: a bookie registered with a cookie other than the one it had (it was formatted again, or its
  disks replaced, and rejoined empty), whether or not it was lost meanwhile;
* **restarted**: a bookie registered again, with its cookie, after an absence shorter than a loss (a restart, a
  network partition): its ledgers that were waiting for its answers can have them now.

The first observation has nothing to compare with: it only sets the statuses (a bookie unregistered then is taken as
unregistered since that moment). A bookie is known from the first observation that shows its registration or its
cookie. A cookie is compared when the bookie is registered: a bookie being reformatted makes its new cookie before it
registers, and is asked once it can answer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class BookieStatus:
    """What the watcher remembers of one bookie between observations."""

    registered: bool
    #: The cookie's ``mzxid`` when the bookie was last seen registered (None: none seen).
    cookie: int | None
    #: Since when the bookie has been without a registration (None while registered).
    unregistered_ms: int | None = None
    #: Whether the bookie was declared lost (and has not registered since).
    lost: bool = False


class LifecycleKind(StrEnum):
    """What happened to a bookie that concerns its ledgers."""

    LOST = "lost"
    RETURNED = "returned"
    COOKIE_CHANGED = "cookie_changed"
    RESTARTED = "restarted"


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    """One bookie's change: ``unregistered_ms`` is when it was first seen unregistered (LOST only)."""

    kind: LifecycleKind
    bookie: str
    unregistered_ms: int | None = None


Statuses = dict[str, BookieStatus]


def observe(
    known: Mapping[str, BookieStatus] | None,
    registered: Collection[str],
    cookies: Mapping[str, int],
    *,
    now_ms: int,
    lost_after_ms: int,
) -> tuple[Statuses, list[LifecycleEvent]]:
    """The statuses after observing ``registered`` and ``cookies`` (bookie -> cookie mzxid) at ``now_ms``, and what
    happened since ``known`` (None: the first observation), by bookie id."""
    first = known is None
    before: Mapping[str, BookieStatus] = known or {}
    statuses: Statuses = {}
    events: list[LifecycleEvent] = []
    for bookie in sorted({*before, *registered, *cookies}):
        status, event = _step(before.get(bookie), bookie in registered, cookies.get(bookie), now_ms=now_ms, first=first)
        statuses[bookie] = _lost_if_due(status, bookie, now_ms, lost_after_ms, events)
        if event is not None:
            events.append(LifecycleEvent(event, bookie))
    events.sort(key=lambda e: (e.bookie, e.kind))
    return statuses, events


def next_due_ms(statuses: Mapping[str, BookieStatus], *, lost_after_ms: int) -> int | None:
    """When the next unregistered bookie becomes lost if it stays away (None: none is waiting)."""
    due = [s.unregistered_ms + lost_after_ms for s in statuses.values() if s.unregistered_ms is not None and not s.lost]
    return min(due, default=None)


def _step(
    before: BookieStatus | None, registered: bool, cookie: int | None, *, now_ms: int, first: bool
) -> tuple[BookieStatus, LifecycleKind | None]:
    if before is None:
        # Not seen before: nothing to compare. The first observation takes every cookie as the bookie's own; a bookie
        # that appears later holds nothing yet, and its cookie counts once it registered with one.
        baseline = cookie if registered or first else None
        return BookieStatus(registered, baseline, None if registered else now_ms), None
    if not registered:
        since = before.unregistered_ms if before.unregistered_ms is not None else now_ms
        return BookieStatus(False, before.cookie, since, before.lost), None
    kept = cookie if cookie is not None else before.cookie
    event: LifecycleKind | None = None
    if cookie is not None and before.cookie is not None and cookie != before.cookie:
        event = LifecycleKind.COOKIE_CHANGED
    elif before.lost:
        event = LifecycleKind.RETURNED
    elif before.unregistered_ms is not None:
        event = LifecycleKind.RESTARTED
    return BookieStatus(True, kept), event


def _lost_if_due(
    status: BookieStatus, bookie: str, now_ms: int, lost_after_ms: int, events: list[LifecycleEvent]
) -> BookieStatus:
    since = status.unregistered_ms
    if since is None or status.lost or now_ms - since < lost_after_ms:
        return status
    events.append(LifecycleEvent(LifecycleKind.LOST, bookie, since))
    return BookieStatus(False, status.cookie, since, lost=True)
