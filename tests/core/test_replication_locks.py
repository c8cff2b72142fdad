"""A stuck mark's replication lock in the finding's words: none, held, held past the grace; only stuck marks."""

from __future__ import annotations

import pytest

from scrutiny.core.replication_locks import ReplicationLock, lock_details, with_lock
from scrutiny.core.verdict import Violation
from scrutiny.core.vocabulary import Category, Severity

pytestmark = pytest.mark.unit

GRACE = 60_000


def test_no_lock_says_no_worker_is_at_it() -> None:
    assert lock_details(None, now_ms=0, grace_ms=GRACE) == "not locked: no replication worker is working on it"


def test_a_lock_names_its_worker_and_since_when_and_a_lock_past_the_grace_says_so() -> None:
    young = lock_details(ReplicationLock("bk2:3181", 1_000), now_ms=1_000 + GRACE, grace_ms=GRACE)
    assert young == "locked by the replication worker on bk2:3181 since 1970-01-01T00:00:01Z"
    old = lock_details(ReplicationLock("bk2:3181", 1_000), now_ms=1_001 + GRACE, grace_ms=GRACE)
    assert old == f"{young}, held longer than the grace period without the mark clearing"
    unnamed = lock_details(ReplicationLock(None, 1_000), now_ms=1_000, grace_ms=GRACE)
    assert unnamed.startswith("locked by a replication worker since ")


def test_only_a_stuck_finding_gets_the_lock() -> None:
    stuck = Violation(Category.UNDER_REPLICATION_STUCK, Severity.CRITICAL, details="marked")
    lock = ReplicationLock("bk2:3181", 0)
    assert with_lock(stuck, lock, now_ms=0, grace_ms=GRACE).details.startswith("marked; locked by the replication")
    other = Violation(Category.NO_REPLICA, Severity.CRITICAL, details="lost")
    assert with_lock(other, lock, now_ms=0, grace_ms=GRACE) == other
