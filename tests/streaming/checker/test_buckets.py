"""Buckets of ledgers: the stateful step's key and value."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.ledger_tracker import TrackedLedger
from scrutiny.core.zk_records import UnderReplicationMark
from scrutiny.streaming.checker.buckets import decode_bucket, encode_bucket

pytestmark = pytest.mark.unit

states = st.builds(
    TrackedLedger,
    version=st.integers(-1, 2**31),
    checked=st.booleans(),
    metadata=st.none() | st.binary(max_size=40),
    changed_ms=st.none() | st.integers(0, 2**45),
    attempts=st.integers(0, 5),
    retry_at_ms=st.none() | st.integers(0, 2**45),
    mark=st.none() | st.builds(UnderReplicationMark, st.tuples(st.text(max_size=8)), st.none() | st.integers(0, 2**45)),
    stuck_at_ms=st.none() | st.integers(0, 2**45),
    written_ms=st.none() | st.integers(0, 2**45),
    confirm_at_ms=st.none() | st.integers(0, 2**45),
    open=st.lists(
        st.tuples(st.sampled_from(["NO_REPLICA", "MISSING_REPLICA"]), st.text(max_size=8), st.integers(-1, 99)),
        max_size=3,
    ).map(tuple),
)


@given(st.dictionaries(st.integers(0, 2**63 - 1), states, max_size=8))
def test_a_bucket_round_trips(bucket: dict[int, TrackedLedger]) -> None:
    assert decode_bucket(encode_bucket(bucket)) == bucket


def test_a_healthy_ledger_costs_few_bytes_in_its_bucket() -> None:
    healthy = {ledger: TrackedLedger(version=3, checked=True, changed_ms=1_772_366_400_000) for ledger in range(64)}
    assert len(encode_bucket(healthy)) / len(healthy) < 50
