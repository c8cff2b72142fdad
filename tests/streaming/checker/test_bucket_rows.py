"""The fetch stage's rows: one a bucket, holding exactly that bucket's events in their order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.streaming.checker.bucket_rows import BUCKET_ROWS_SCHEMA, BucketEvent, bucket_events, bucket_rows
from scrutiny.streaming.checker.buckets import BUCKET_SIZE
from scrutiny.streaming.checker.records import CLUSTER_LEDGER, REJECTED_KEY, STATS_KEY

pytestmark = pytest.mark.unit

LEDGER_IDS = st.one_of(
    st.sampled_from([STATS_KEY, REJECTED_KEY, CLUSTER_LEDGER, 0, BUCKET_SIZE - 1, BUCKET_SIZE, 2**63 - 1]),
    st.integers(min_value=0, max_value=4 * BUCKET_SIZE),
)
EVENTS = st.lists(
    st.builds(
        BucketEvent,
        LEDGER_IDS,
        st.integers(min_value=0, max_value=2**63 - 1),
        st.binary(max_size=40),
        st.one_of(st.none(), st.binary(max_size=40)),
    ),
    max_size=60,
)


def reference(events: list[BucketEvent]) -> dict[int, list[BucketEvent]]:
    """Bucket -> its events in order, by the definition: runs of BUCKET_SIZE ids, a negative key its own bucket."""
    grouped: dict[int, list[BucketEvent]] = {}
    for event in events:
        key = event.ledger_id if event.ledger_id < 0 else event.ledger_id // BUCKET_SIZE
        grouped.setdefault(key, []).append(event)
    return grouped


@given(EVENTS)
def test_each_bucket_is_one_row_holding_its_events_in_order(events: list[BucketEvent]) -> None:
    batch = bucket_rows(events)
    assert batch.schema == BUCKET_ROWS_SCHEMA
    buckets = batch.column("bucket").to_pylist()
    assert len(buckets) == len(set(buckets))  # one row a bucket
    values = batch.column("events").to_pylist()
    got = {bucket: list(bucket_events([value])) for bucket, value in zip(buckets, values, strict=True)}
    assert got == reference(events)


def test_a_bucket_of_several_rows_reads_back_row_by_row() -> None:
    """The stateful step gets a bucket's row from each fetch task that had some of its events."""
    first = [BucketEvent(3, 10, b"a", None), BucketEvent(5, 12, b"b", b"answers")]
    second = [BucketEvent(4, 11, b"c", None)]
    values = [bucket_rows(part).column("events")[0].as_py() for part in (first, second)]
    assert list(bucket_events(values)) == first + second
    assert [e.ledger_id for e in bucket_events(values)] == [3, 5, 4]
