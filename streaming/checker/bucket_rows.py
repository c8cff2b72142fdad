"""The fetch stage's output: one row a bucket of ledgers, its events packed in one value.

The stateful step is keyed by bucket (:mod:`scrutiny.streaming.checker.buckets`), so the fetch stage groups its
partition range's events by bucket itself and hands on one row a bucket (``bucket``, ``events``), where it handed on
one row an event. Everything Spark and PySpark do between the two stages costs per row (the Arrow batches out of the
fetch stage's worker, the shuffle, the sort by key, the Arrow batches into the stateful step's worker and PySpark's
building of a ``Row`` of Python values from each of their rows), so that cost is paid once a bucket of up to
:data:`~scrutiny.streaming.checker.buckets.BUCKET_SIZE` ledgers instead of once a ledger. The fetch stage's own rows
(its figures, the records it rejected, the cluster events) are buckets of their own, under their negative keys.

``events`` is a list of ``(ledger_id, offset, event, answers)`` in :mod:`marshal`'s format: ``event`` the record's
value as read (or, for the fetch stage's own rows, what the processor makes their records of), ``answers`` the
fetched answers (:mod:`~scrutiny.streaming.checker.answer_codec`) or None. Like the answers, the value never leaves
the micro-batch and both ends run the same Python version (Spark requires it of its workers).
"""

from __future__ import annotations

import marshal
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import pyarrow as pa

from scrutiny.streaming.checker.buckets import bucket_of

BUCKET_ROWS_SCHEMA = pa.schema(
    [pa.field("bucket", pa.int64(), nullable=False), pa.field("events", pa.binary(), nullable=False)]
)
BUCKET_ROWS_DDL = "bucket long, events binary"


class BucketEvent(NamedTuple):
    """One event of a bucket: its ledger (or the fetch stage's key), offset, bytes and fetched answers."""

    ledger_id: int
    offset: int
    event: bytes
    answers: bytes | None


def bucket_rows(events: Iterable[BucketEvent]) -> pa.RecordBatch:
    """``events`` as one row a bucket, each bucket's events in the order given."""
    buckets: dict[int, list[tuple[object, ...]]] = {}
    for event in events:
        buckets.setdefault(bucket_of(event.ledger_id), []).append(tuple(event))  # plain tuples: marshal's kind
    packed = [marshal.dumps(items) for items in buckets.values()]
    return pa.RecordBatch.from_arrays(
        [pa.array(list(buckets), pa.int64()), pa.array(packed, pa.binary())], schema=BUCKET_ROWS_SCHEMA
    )


def bucket_events(values: Iterable[bytes]) -> Iterator[BucketEvent]:
    """The events of a bucket's rows (the ``events`` values), row by row, each row's in its order."""
    for value in values:
        for item in marshal.loads(value):
            yield BucketEvent(*item)
