"""Ledgers grouped into buckets of consecutive ids: the stateful step's key and the unit of its state.

transformWithState pays a fixed cost per key and micro-batch (setting the key on the JVM's state server, reading and
writing the value, converting the key's output), which dominated the checker's time when every ledger was a key.
With :data:`BUCKET_SIZE` ledgers of consecutive ids per key (BookKeeper allocates ids in sequence, so a backlog or a
burst of closes fills few buckets), a bucket's state is one value holding each of its ledgers'
:class:`~scrutiny.core.ledger_tracker.TrackedLedger` (compact JSON, ≈ 80 B per healthy ledger) and its timers are the
union of its ledgers' timers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from scrutiny.core.compact_json import compact_json
from scrutiny.core.ledger_tracker import TrackedLedger

#: Ledgers per bucket (a power of two, so a bucket is a run of ids).
BUCKET_SIZE: Final = 64
#: The bucket of the ``ledger_id`` column as a Spark SQL expression. The fetch stage's own rows (figures, rejected
#: records: :mod:`scrutiny.streaming.checker.records`) have negative keys, which are their own buckets.
BUCKET_EXPRESSION: Final = f"CASE WHEN ledger_id < 0 THEN ledger_id ELSE ledger_id DIV {BUCKET_SIZE} END"


def bucket_of(ledger_id: int) -> int:
    """The bucket of a ledger id (as :data:`BUCKET_EXPRESSION`: a negative key is its own bucket)."""
    return ledger_id if ledger_id < 0 else ledger_id // BUCKET_SIZE


def encode_bucket(states: Mapping[int, TrackedLedger]) -> bytes:
    """A bucket's ledgers as one compact JSON object: ledger id -> state document."""
    doc = {str(ledger_id): states[ledger_id].to_doc() for ledger_id in sorted(states)}
    return compact_json(doc).encode()


def decode_bucket(data: bytes) -> dict[int, TrackedLedger]:
    """The inverse of :func:`encode_bucket`."""
    return {int(ledger_id): TrackedLedger.from_doc(doc) for ledger_id, doc in json.loads(data).items()}
