"""Who works on a stuck under-replication mark: the replication worker's lock, named in ``UNDER_REPLICATION_STUCK``.
Pure, no I/O.

A ReplicationWorker takes a marked ledger by creating the ephemeral ``<root>/underreplication/locks/urL%010d``
(``LockDataFormat``: its bookie id) and deletes it when it is done or gives up. A mark that stays past its grace is
``UNDER_REPLICATION_STUCK``; its details then say whether a worker holds the ledger, which one and since when, and,
when the lock is itself older than the grace, that the worker has held it that long without finishing (a worker
stuck on it rather than no worker at all).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scrutiny.core.errors import FormatError
from scrutiny.core.utc_text import format_utc_ms
from scrutiny.core.verdict import Violation
from scrutiny.core.vocabulary import Category
from scrutiny.core.zk_records import parse_lock_data


@dataclass(frozen=True, slots=True)
class ReplicationLock:
    """A replication worker's lock on a marked ledger."""

    #: The worker's bookie id (None: the lock names none, or its text does not parse).
    bookie: str | None
    #: The lock node's creation.
    since_ms: int


def replication_lock(data: bytes, since_ms: int) -> ReplicationLock:
    """The lock a node of ``data`` created at ``since_ms`` holds (a text that does not parse names no worker: the
    ledger is locked all the same)."""
    try:
        return ReplicationLock(parse_lock_data(data), since_ms)
    except FormatError:
        return ReplicationLock(None, since_ms)


def stuck_details(details: str, lock: ReplicationLock | None, *, now_ms: int, grace_ms: int) -> str:
    """An ``UNDER_REPLICATION_STUCK``'s ``details`` with the lock (or its absence) named after them."""
    return f"{details}; {lock_details(lock, now_ms=now_ms, grace_ms=grace_ms)}"


def lock_details(lock: ReplicationLock | None, *, now_ms: int, grace_ms: int) -> str:
    """What the lock (or its absence) says about a stuck mark, in the finding's words."""
    if lock is None:
        return "not locked: no replication worker is working on it"
    worker = "a replication worker" if lock.bookie is None else f"the replication worker on {lock.bookie}"
    held = f"locked by {worker} since {format_utc_ms(lock.since_ms)}"
    if now_ms - lock.since_ms > grace_ms:
        held += ", held longer than the grace period without the mark clearing"
    return held


def with_lock(violation: Violation, lock: ReplicationLock | None, *, now_ms: int, grace_ms: int) -> Violation:
    """``violation`` with the lock named in its details when it is an ``UNDER_REPLICATION_STUCK``; others as given."""
    if violation.category is not Category.UNDER_REPLICATION_STUCK:
        return violation
    return replace(violation, details=stuck_details(violation.details, lock, now_ms=now_ms, grace_ms=grace_ms))
