"""What Spark gives the checker's stateful processor, held in memory: a bucket's value state, its handle, the clock.

For running :class:`~scrutiny.streaming.checker.processor.LedgerProcessor` without Spark (its tests, and
``bench/processor_bench.py``). Timers are not kept: the callers say when one is due. Also the rows the fetch stage
hands the processor (:func:`snapshot_row`) and a healthy stripe's listing (:func:`held_stripe`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Row

from scrutiny.connectors.kafka.events import Publisher, event_for_change
from scrutiny.core.ledger_metadata import decode_ledger_metadata
from scrutiny.core.metadata_view import ChangeKind, MetadataChange, Node, NodeStat
from scrutiny.core.striping import expected_groups
from scrutiny.core.verdict import BookieAnswer
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.streaming.checker.answer_codec import encode_answers


class State:
    """The bucket's value state."""

    def __init__(self) -> None:
        self.value: tuple[bytes] | None = None

    def get(self) -> tuple[bytes] | None:
        return self.value

    def update(self, value: tuple[bytes]) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class Handle:
    """The processor's handle: one value state; timers registered and deleted are not kept."""

    def __init__(self) -> None:
        self.state = State()

    def getValueState(self, name: str, schema: str) -> State:  # noqa: N802 - PySpark's names
        return self.state

    def registerTimer(self, at: int) -> None:  # noqa: N802
        pass

    def deleteTimer(self, at: int) -> None:  # noqa: N802
        pass


class Timers:
    """The processing time a call runs at."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802
        return self.now_ms


def snapshot_row(
    ledger_id: int,
    offset: int,
    data: bytes,
    answers: Mapping[str, BookieAnswer] | None,
    *,
    mtime_ms: int,
    publisher: Publisher | None = None,
    hand_on: bool = True,
) -> Row:
    """The fetch stage's row for the watcher's snapshot event of a znode holding ``data`` (version 1): the event and,
    when ``answers`` are given, the answers with the event's metadata decoded, as the fetch stage hands them on
    (``hand_on`` False: without the metadata)."""
    node = Node(data, NodeStat(1, 10 + offset, 10 + offset, mtime_ms, mtime_ms))
    change = MetadataChange(ChangeKind.LEDGER_CREATED, ledger_id, node)
    event = event_for_change(
        change, pb.Origin.SNAPSHOT, publisher or Publisher("w1", 1, "/ledgers"), observed_ms=mtime_ms
    )
    fetched = None
    if answers is not None:
        fetched = encode_answers(answers, decode_ledger_metadata(event.metadata) if hand_on else None)
    return Row(ledger_id=ledger_id, offset=offset, event=event.SerializeToString(), answers=fetched)


def held_stripe(index: int, entries: int = 10) -> BookieAnswer:
    """The listing of the bookie at ``index`` of an E=3/WQ=2 ensemble that holds its whole stripe of entries 0 to
    ``entries - 1``."""
    return BookieAnswer.listing(expected_groups(index, 3, 2, 0, entries - 1))
