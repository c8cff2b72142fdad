"""The fetch stage's choice of what to fetch: the newest metadata of each ledger that needs a check."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.connectors.kafka.events import CLUSTER_KEY, LEDGER_KINDS, RejectReason
from scrutiny.core.ledger_metadata import (
    LedgerState,
    build_ledger_metadata,
    decode_ledger_metadata,
    encode_ledger_metadata_v3,
)
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.streaming.checker.prepare import VALUE_HEAD_BYTES, ledger_rows, ledgers_to_check
from scrutiny.streaming.checker.records import CLUSTER_LEDGER

pytestmark = pytest.mark.unit

E1 = ("b1:3181", "b2:3181", "b3:3181")
E2 = ("b1:3181", "b2:3181", "b4:3181")


def metadata(state: LedgerState, segments: list[tuple[int, tuple[str, ...]]], last: int = 9) -> bytes:
    built = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=segments, state=state, last_entry_id=last
    )
    return encode_ledger_metadata_v3(built)


ROOT = "/ledgers"


def event(kind: pb.EventKind, ledger: int = 0, data: bytes = b"") -> bytes:
    return pb.LedgerEvent(kind=kind, ledger_id=ledger, metadata=data, ledgers_root=ROOT).SerializeToString()


def restart_recheck(ledger: int, data: bytes) -> bytes:
    event = pb.LedgerEvent(kind=pb.EventKind.LEDGER_RECHECK, ledger_id=ledger, metadata=data, ledgers_root=ROOT)
    event.recheck = pb.RecheckReason.BOOKIE_RESTARTED
    return event.SerializeToString()


def key_of(value: bytes) -> bytes | None:
    """The key the watcher gives an event (None for bytes that are not one)."""
    try:
        parsed = pb.LedgerEvent.FromString(value)
    except Exception:
        return None
    return str(parsed.ledger_id).encode() if parsed.kind in LEDGER_KINDS else CLUSTER_KEY


def batch(values: list[bytes], keys: list[bytes | None] | None = None, partition: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "partition": pa.array([partition] * len(values), pa.int32()),
            "offset": pa.array(range(len(values)), pa.int64()),
            "key": pa.array(keys if keys is not None else [key_of(v) for v in values], pa.binary()),
            "value": pa.array(values, pa.binary()),
        }
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
        event(pb.EventKind.BOOKIE_REGISTERED),  # passed on for the cluster-level findings, never fetched
        b"\xff\xff not an event",
        event(pb.EventKind.LEDGER_RECHECK, 6, closed),  # checked again: fetched like a change
        event(pb.EventKind.RACKS_CHANGED),  # refreshes the cluster view only
        restart_recheck(7, closed),  # only if it waits for the bookie: the processor decides, and asks
    ]
    read = ledger_rows(iter([batch(values)]), ROOT)
    assert read.events == len(values) and read.cluster_events == 2
    assert [r.ledger_id for r in read.rows] == [1, 1, 2, 2, 3, 4, 5, CLUSTER_LEDGER, 6, 7]
    assert [(r.offset, r.rejected.reason) for r in read.rejected] == [(9, RejectReason.UNDECODABLE)]
    wanted = ledgers_to_check(read.rows)
    assert {ledger: (c.offset, c.bookies) for ledger, c in wanted.items()} == {
        1: (1, E1),
        4: (5, ("b1:3181", "b2:3181", "b3:3181", "b4:3181")),
        6: (10, E1),
    }
    assert {ledger: c.end for ledger, c in wanted.items()} == {1: 9, 4: None, 6: 9}  # the closed ones' ends
    # each one's newest metadata, decoded once here and handed on with the answers
    assert {ledger: c.metadata for ledger, c in wanted.items()} == {
        1: decode_ledger_metadata(closed),
        4: decode_ledger_metadata(metadata(LedgerState.OPEN, [(0, E1), (5, E2)], last=-1)),
        6: decode_ledger_metadata(closed),
    }


def test_every_record_the_checker_cannot_use_is_rejected_with_where_it_is_and_why() -> None:
    closed = metadata(LedgerState.CLOSED, [(0, E1)])
    good = event(pb.EventKind.LEDGER_CHANGED, 7, closed)
    shapes: list[tuple[bytes | None, bytes | None, RejectReason | None]] = [
        (b"7", good, None),
        (b"7", None, RejectReason.UNDECODABLE),  # a tombstone
        (b"7", b"", RejectReason.UNDECODABLE),
        (b"7", b"\xff\xff\xff\xff" * 40, RejectReason.UNDECODABLE),
        (b"7", b'{"ledger_id": 7, "kind": "LEDGER_DELETED"}', RejectReason.UNDECODABLE),  # another producer's JSON
        (b"7", pb.LedgerEvent(ledger_id=7, ledgers_root=ROOT).SerializeToString(), RejectReason.UNKNOWN_KIND),
        (b"7", pb.LedgerEvent(kind=99, ledger_id=7).SerializeToString(), RejectReason.UNKNOWN_KIND),  # type: ignore[arg-type]
        (
            b"7",
            pb.LedgerEvent(kind=pb.EventKind.LEDGER_DELETED, ledger_id=7, ledgers_root="/other").SerializeToString(),
            RejectReason.FOREIGN_CLUSTER,
        ),
        (b"-3", event(pb.EventKind.LEDGER_DELETED, -3), RejectReason.BAD_LEDGER_ID),
        (b"-1", event(pb.EventKind.LEDGER_CHANGED, -1, closed), RejectReason.BAD_LEDGER_ID),  # the figures' key
        (b"8", event(pb.EventKind.LEDGER_DELETED, 7), RejectReason.BAD_KEY),  # would delete ledger 7
        (None, event(pb.EventKind.LEDGER_DELETED, 7), RejectReason.BAD_KEY),
        (b"7", event(pb.EventKind.TICK), RejectReason.BAD_KEY),  # a cluster-wide event keyed as a ledger
        (b"cluster", event(pb.EventKind.TICK), None),
        (b"cluster", pb.LedgerEvent(kind=pb.EventKind.TICK).SerializeToString(), None),  # no root: taken
    ]
    keys = [k for k, _, _ in shapes]
    values = [v for _, v, _ in shapes]
    read = ledger_rows(
        iter(
            [
                pa.RecordBatch.from_pydict(
                    {
                        "partition": pa.array([3] * len(values), pa.int32()),
                        "offset": pa.array(range(100, 100 + len(values)), pa.int64()),
                        "key": pa.array(keys, pa.binary()),
                        "value": pa.array(values, pa.binary()),
                    }
                )
            ]
        ),
        ROOT,
    )
    expected = [(100 + i, reason) for i, (_, _, reason) in enumerate(shapes) if reason is not None]
    assert [(r.offset, r.rejected.reason) for r in read.rejected] == expected
    assert [r.ledger_id for r in read.rows] == [7]
    assert read.events == len(shapes)
    documents = [json.loads(r.to_json()) for r in read.rejected]
    assert all(d["kafka_partition"] == 3 and d["details"] for d in documents)
    garbage = documents[2]
    assert garbage["value_bytes"] == 160 and garbage["value_head"] == "ff" * VALUE_HEAD_BYTES
    assert documents[0]["value_bytes"] == 0 and documents[0]["kafka_key"] == "7"
    assert "'8'" in documents[9]["details"] and "expected '7'" in documents[9]["details"]


@given(st.binary(max_size=200), st.one_of(st.none(), st.binary(max_size=20)))
def test_no_bytes_make_the_fetch_stage_raise(value: bytes, key: bytes | None) -> None:
    read = ledger_rows(iter([batch([value], [key])]), ROOT)
    assert read.events == 1 and len(read.rows) + len(read.rejected) <= 1
    for row in read.rows:
        assert row.ledger_id >= 0 and key == str(row.ledger_id).encode()
