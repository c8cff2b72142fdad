"""The fetch stage's choice of what to fetch: the newest metadata of each ledger that needs a check."""

from __future__ import annotations

import pyarrow as pa
import pytest

from scrutiny.core.ledger_metadata import LedgerState, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.streaming.checker.prepare import ledger_rows, ledgers_to_check

pytestmark = pytest.mark.unit

E1 = ("b1:3181", "b2:3181", "b3:3181")
E2 = ("b1:3181", "b2:3181", "b4:3181")


def metadata(state: LedgerState, segments: list[tuple[int, tuple[str, ...]]], last: int = 9) -> bytes:
    built = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=segments, state=state, last_entry_id=last
    )
    return encode_ledger_metadata_v3(built)


def event(kind: pb.EventKind, ledger: int = 0, data: bytes = b"") -> bytes:
    return pb.LedgerEvent(kind=kind, ledger_id=ledger, metadata=data).SerializeToString()


def batch(values: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"offset": pa.array(range(len(values)), pa.int64()), "value": pa.array(values, pa.binary())}
    )


def test_only_the_newest_metadata_of_a_ledger_that_needs_a_check_is_fetched() -> None:
    closed = metadata(LedgerState.CLOSED, [(0, E1)])
    values = [
        event(pb.EventKind.LEDGER_CREATED, 1, metadata(LedgerState.OPEN, [(0, E1)], last=-1)),
        event(pb.EventKind.LEDGER_CHANGED, 1, closed),  # newest of ledger 1: checked
        event(pb.EventKind.LEDGER_CHANGED, 2, closed),
        event(pb.EventKind.LEDGER_DELETED, 2),  # deleted after: nothing to fetch
        event(pb.EventKind.LEDGER_CREATED, 3, metadata(LedgerState.OPEN, [(0, E1)], last=-1)),  # open, one segment
        event(pb.EventKind.LEDGER_CHANGED, 4, metadata(LedgerState.OPEN, [(0, E1), (5, E2)], last=-1)),  # sealed
        event(pb.EventKind.LEDGER_CHANGED, 5, b"garbage"),  # undecodable: the processor reports it
        event(pb.EventKind.TICK),
        event(pb.EventKind.BOOKIE_REGISTERED),
        b"\xff\xff not an event",
    ]
    rows, events, cluster_events = ledger_rows(iter([batch(values)]))
    assert events == len(values) and cluster_events == 1
    assert [r.ledger_id for r in rows] == [1, 1, 2, 2, 3, 4, 5]
    wanted = ledgers_to_check(rows)
    assert wanted == {1: (1, E1), 4: (5, ("b1:3181", "b2:3181", "b3:3181", "b4:3181"))}
